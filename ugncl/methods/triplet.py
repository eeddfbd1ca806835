"""Plain SGRAF training with the VSE++ hinge: the non-robust baseline."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from torch import Tensor, nn

from ugncl.core.data import PairBatch
from ugncl.core.engine.context import MethodContext, StepContext
from ugncl.core.method import TRAIN_PAIRS, Method, section_defaults, train_pair_samples
from ugncl.methods.hinge import triplet_objective


@dataclass
class TripletConfig:
    """Plain SGRAF training with the VSE++ hinge (``method.triplet``)."""

    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {"train_pairs": TRAIN_PAIRS}

    margin: float = 0.2
    max_violation: bool = True
    # all: every training pair, as the noise file pairs them (the baseline). clean: only the
    # pairs the noise file keeps correct, an oracle that reads the truth: the ceiling of a
    # perfect sample selection with this model and schedule, not a method
    # (docs/research/ugncl-generalisation.md, "The clean-pairs oracle").
    train_pairs: str = "all"


def sigmoid_hinge_error(what: str, model: nn.Module) -> str | None:
    """Refuse SGRAF's sigmoid hinge on a logit-scaled cosine (CLIP): the sigmoid saturates.

    The hinge reads ``sigmoid(raw)`` with margin 0.2 on that [0, 1] scale. CLIP's raw score is
    ``logit_scale x cosine`` (x 100 for the released weights, x 14 at init): at x 100 every
    cosine above 0.05 scores sigmoid > 0.99, so positives and hard negatives both sit at ~1
    and the hinge has almost no gradient: a broken run, not a baseline.
    """
    if getattr(model, "logit_scale", None) is None:
        return None
    return (
        f"{what} is SGRAF's hinge on sigmoid(raw); the {model.backbone} backbone's raw score "
        "is logit_scale x cosine, where the sigmoid saturates (x 100: every cosine above 0.05 "
        "scores > 0.99): on it use "
        "method.name=infonce (its plain baseline)"
    )


class TripletMethod(Method):
    """Hinge loss on sigmoid scores with the hardest in-batch negative (SGRAF's ContrastiveLoss).

    During the trainer's warm-up epochs the hinge is summed over all negatives (NCR's warm-up,
    VSE-infinity's mean warm-up): from a random start the hardest-negative hinge sits at
    ``2 K margin`` with near-equal scores and barely moves for hundreds of steps.
    """

    name = "triplet"

    @section_defaults(TripletConfig)
    def __init__(
        self, *, margin: float, max_violation: bool, train_pairs: str, eval_score: str = "sigmoid"
    ) -> None:
        super().__init__(eval_score=eval_score)
        self.margin = margin
        self.max_violation = max_violation
        self.train_pairs = train_pairs

    def epoch_samples(self, ctx: MethodContext, epoch: int) -> np.ndarray | None:
        return train_pair_samples(self.train_pairs, ctx)

    def backbone_error(self, model: nn.Module) -> str | None:
        return sigmoid_hinge_error("method triplet", model)

    def training_step(
        self, model: nn.Module, batch: PairBatch, ctx: StepContext
    ) -> dict[str, Tensor]:
        raw = model(batch.images, batch.captions, batch.lengths).float()
        max_violation = self.max_violation and not ctx.warmup
        return triplet_objective(raw, margin=self.margin, max_violation=max_violation)
