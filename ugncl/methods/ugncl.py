"""UGNCL: uncertainty-guided division at each epoch start, evidential + trusted robust loss.

UGNCL_METHOD.md sections 6-9. The division pass runs over the whole training set with the
model in eval mode, in a seeded shuffled order, in batches of K; each sample keeps its set,
soft label and normalised uncertainty until the next epoch.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from torch import Tensor, nn

from precomputed.collate import PairBatch
from ugncl.division import DivisionAccumulator, DivisionResult, divide_batch, division_quality
from ugncl.evaluation import eval_mode
from ugncl.losses import lambda_schedule, ugncl_objective, warmup_objective
from ugncl.methods.base import Method, StepContext

if TYPE_CHECKING:
    from ugncl.engine.trainer import Trainer

logger = logging.getLogger(__name__)

DIVISION_STREAM = 1  # RNG stream of the division order (the training order uses stream 0)


class UGNCLMethod(Method):
    """The UGNCL training method over a W-view SGRAF model."""

    name = "ugncl"

    def __init__(
        self,
        *,
        tau: float = 0.1,
        evidence: str = "tanh",
        evidence_ceiling: float = 50.0,
        evidence_floor: str = "keep",
        p: float = 0.5,
        epsilon: float = 0.5,
        soft_label: str = "mean_rival",
        kl_weight: float = 0.1,
        trl_weight: float = 0.8,
        margin: float = 0.2,
        margin_base: float = 10.0,
        trust_delta: float = 0.0,
        lambda_delta: float = 0.025,
        lambda_min: int = 5,
        evidential_loss: str = "fused",
        division_batch_size: int | None = None,
        kl_anneal_epochs: int = 0,
    ) -> None:
        self.tau = tau
        self.evidence = evidence
        self.ceiling = evidence_ceiling
        self.floor = evidence_floor
        self.p = p
        self.epsilon = epsilon
        self.soft_label = soft_label
        self.kl_weight = kl_weight
        self.trl_weight = trl_weight
        self.margin = margin
        self.margin_base = margin_base
        self.trust_delta = trust_delta
        self.lambda_delta = lambda_delta
        self.lambda_min = lambda_min
        self.evidential_loss = evidential_loss
        self.division_batch_size = division_batch_size
        self.kl_anneal_epochs = kl_anneal_epochs
        self.division: DivisionResult | None = None
        self._last_lambda: int | None = None

    # ------------------------------------------------------------------ epoch start
    def on_epoch_start(self, trainer: Trainer, epoch: int) -> dict[str, Any] | None:
        if epoch < trainer.warmup_epochs:
            return None
        batch_size = self.division_batch_size or trainer.batch_size
        model = trainer.model
        accumulator = DivisionAccumulator(trainer.train_split.num_captions)
        with eval_mode(model):
            for batch in trainer.ordered_batches(epoch, batch_size, stream=DIVISION_STREAM):
                batch = batch.to(trainer.device)
                with trainer.precision.autocast(trainer.device):
                    raw = model(batch.images, batch.captions, batch.lengths)
                division = divide_batch(
                    raw.float(),
                    tau=self.tau,
                    floor=self.floor,
                    function=self.evidence,
                    p=self.p,
                    epsilon=self.epsilon,
                    soft_label=self.soft_label,
                )
                accumulator.add(batch.index.cpu(), division)
        self.division = accumulator.result()
        return division_quality(self.division.sets, trainer.train_split.clean)

    # ------------------------------------------------------------------ step
    def training_step(
        self, model: nn.Module, batch: PairBatch, ctx: StepContext
    ) -> dict[str, Tensor]:
        raw = model(batch.images, batch.captions, batch.lengths).float()
        lam = lambda_schedule(
            raw.shape[-1], ctx.global_step, delta=self.lambda_delta, theta=self.lambda_min
        )
        self._last_lambda = lam
        common = dict(
            lam=lam,
            tau=self.tau,
            ceiling=self.ceiling,
            floor=self.floor,
            function=self.evidence,
            kl_weight=self.kl_weight_at(ctx.epoch),
            trl_weight=self.trl_weight,
            gamma=self.margin,
            evidential=self.evidential_loss,
        )
        if ctx.warmup:
            return warmup_objective(raw, **common)
        if self.division is None:
            raise RuntimeError(
                "UGNCL training step after warm-up without a division; "
                "on_epoch_start must run before the epoch"
            )
        sets, soft_label, u_bar = self.division.lookup(batch.index, device=raw.device)
        return ugncl_objective(
            raw,
            sets=sets,
            soft_label=soft_label,
            u_bar=u_bar,
            margin_base=self.margin_base,
            trust_delta=self.trust_delta,
            **common,
        )

    def kl_weight_at(self, epoch: int) -> float:
        """xi1, optionally annealed as in Sensoy et al. (2018): ``xi1 * min(1, epoch / n)``.

        ``kl_anneal_epochs = 0`` (default) keeps xi1 constant, as the released code does.
        """
        if self.kl_anneal_epochs <= 0:
            return self.kl_weight
        return self.kl_weight * min(1.0, epoch / self.kl_anneal_epochs)

    # ------------------------------------------------------------------ bookkeeping
    def stats(self) -> dict[str, Any]:
        """The hardness schedule's current lambda (the division has its own record)."""
        return {} if self._last_lambda is None else {"lambda": self._last_lambda}

    def state_dict(self) -> dict[str, Any]:
        return {"division": None if self.division is None else self.division.to_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        division = state.get("division")
        self.division = None if division is None else DivisionResult.from_state(division)
