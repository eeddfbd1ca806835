"""Plain fine-tuning with symmetric InfoNCE (``method.infonce``): the non-robust baseline of the
CLIP track.

The references' vanilla CLIP (NPC ``main_CLIP.py``): every pair of a batch counts, the loss is
the mean over the batch of ``(CE_i2t + CE_t2i) / 2`` on ``logit_scale.exp() * cos``
(:func:`ugncl.methods.infonce.info_nce_per_sample`). Weight-based methods (NPC, SDD, OSA)
subclass :class:`InfoNCEMethod` and re-weight :meth:`InfoNCEMethod.per_sample_loss`. Retrieval
ranks by the raw logit-scaled cosine (``eval.eval_score: raw``; with one view every score ranks
the same).
Optimiser and schedule (AdamW 0.9/0.98/1e-6, wd 0.2, cosine with warm-up in optimiser steps)
are ``train.*`` keys of the configs, not of the method.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from torch import Tensor, nn

from ugncl.core.data import PairBatch
from ugncl.core.engine.context import MethodContext, StepContext
from ugncl.core.method import (
    TRAIN_PAIRS,
    Method,
    one_view_error,
    section_defaults,
    train_pair_samples,
)
from ugncl.methods.infonce import info_nce_per_sample

__all__ = ["InfoNCEConfig", "InfoNCEMethod"]


@dataclass
class InfoNCEConfig:
    """``method.infonce``: plain InfoNCE; its one option picks the pairs it trains on."""

    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {"train_pairs": TRAIN_PAIRS}

    # all: every training pair (the baseline). clean: only the pairs the noise file keeps
    # correct, an oracle that reads the truth (as method.triplet.train_pairs).
    train_pairs: str = "all"


class InfoNCEMethod(Method):
    """Symmetric InfoNCE over the in-batch pairs, every pair with weight 1."""

    name = "infonce"
    nonfinite_hint = "Lower train.lr or use train.amp=bf16/off (fp16 logits overflow)."

    @section_defaults(InfoNCEConfig)
    def __init__(self, *, train_pairs: str, eval_score: str = "raw") -> None:
        super().__init__(eval_score=eval_score)
        self.train_pairs = train_pairs

    def epoch_samples(self, ctx: MethodContext, epoch: int) -> np.ndarray | None:
        return train_pair_samples(self.train_pairs, ctx)

    def backbone_error(self, model: nn.Module) -> str | None:
        # InfoNCE needs one score per pair. On SGRAF (W = 1) it reads the similarity head's
        # logit at temperature 1 (the head's last layer sets the scale): not CLIP's tuned
        # recipe, but exactly the unweighted loss NPC and SDD re-weight there, so it is their
        # control on that backbone (the plain SGRAF baseline stays the hinge, ``triplet``).
        return one_view_error(f"method {self.name} trains InfoNCE on one score per pair", model)

    def per_sample_loss(self, model: nn.Module, batch: PairBatch) -> Tensor:
        """(K,) symmetric InfoNCE of each pair of ``batch`` against its batch mates (float32);
        gradients flow into ``model``."""
        return info_nce_per_sample(model(batch.images, batch.captions, batch.lengths))

    def training_step(
        self, model: nn.Module, batch: PairBatch, step: StepContext
    ) -> dict[str, Tensor]:
        per = self.per_sample_loss(model, batch)
        out = {"loss": per.mean()}
        if getattr(model, "logit_scale", None) is not None:  # CLIP; SGRAF has no temperature
            out["logit_scale"] = model.logit_scale.detach().exp()
        return out
