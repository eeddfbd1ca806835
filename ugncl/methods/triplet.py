"""Plain SGRAF training with the VSE++ hinge: the non-robust baseline."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn

from ugncl.framework.data import PairBatch
from ugncl.framework.engine.context import StepContext
from ugncl.methods.base import Method, section_defaults
from ugncl.methods.ugncl.losses import triplet_objective


@dataclass
class TripletConfig:
    """Plain SGRAF training with the VSE++ hinge (``method.triplet``)."""

    margin: float = 0.2
    max_violation: bool = True


class TripletMethod(Method):
    """Hinge loss on sigmoid scores with the hardest in-batch negative (SGRAF's ContrastiveLoss).

    During the trainer's warm-up epochs the hinge is summed over all negatives (NCR's warm-up,
    VSE-infinity's mean warm-up): from a random start the hardest-negative hinge sits at
    ``2 K margin`` with near-equal scores and barely moves for hundreds of steps.
    """

    name = "triplet"

    @section_defaults(TripletConfig)
    def __init__(self, *, margin: float, max_violation: bool, eval_score: str = "sigmoid") -> None:
        super().__init__(eval_score=eval_score)
        self.margin = margin
        self.max_violation = max_violation

    def training_step(
        self, model: nn.Module, batch: PairBatch, ctx: StepContext
    ) -> dict[str, Tensor]:
        raw = model(batch.images, batch.captions, batch.lengths).float()
        max_violation = self.max_violation and not ctx.warmup
        return triplet_objective(raw, margin=self.margin, max_violation=max_violation)
