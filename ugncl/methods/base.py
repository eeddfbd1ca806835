"""What a training method supplies to the one trainer."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import numpy as np
from torch import Tensor, nn

from ugncl.framework.data import PairBatch
from ugncl.framework.engine.context import MethodContext, StepContext
from ugncl.framework.evaluation import view_reducer

__all__ = ["Method", "MethodContext", "StepContext"]


class Method(nn.Module):
    """A training method: loss terms per batch around a small lifecycle.

    The builder calls ``prepare`` once, before the optimiser is built. The trainer calls, in
    order: ``setup`` once before the first epoch of a fresh run (a resumed run loads what
    ``setup`` made from the checkpoint instead);
    per epoch ``on_epoch_start`` then ``epoch_samples``; per batch ``training_step``, whose
    entries with keys starting ``loss`` are summed and back-propagated (every scalar entry is
    logged); ``stats`` at each log line. Evaluation ranks by ``retrieval_score``.

    A method is an ``nn.Module``: submodules (a frozen estimator, a siamese copy) and buffers
    move to the device with it and go into checkpoints (``method_state``); per-run state that
    is not a tensor goes through ``get_extra_state``. The optimiser trains only
    ``trainable_parameters(model)``.

    Class attributes:
        name: the registry key.
        epoch_record: the ``metrics.jsonl`` event of ``on_epoch_start``'s fields.
        nonfinite_hint: advice appended to the error when a loss term turns NaN/inf.
    """

    name: ClassVar[str] = "method"
    epoch_record: ClassVar[str] = "epoch_start"
    nonfinite_hint: ClassVar[str] = "Lower train.lr or check the input features for NaN."

    def __init__(
        self, *, eval_score: str = "raw", score_tau: float = 0.1, score_function: str = "softplus"
    ) -> None:
        super().__init__()
        self.eval_score = eval_score
        self.score_tau = score_tau
        self.score_function = score_function
        view_reducer(eval_score, score_tau, score_function)  # fail at construction on a bad name

    def prepare(self, model: nn.Module, num_samples: int) -> None:
        """Create submodules and buffers in their final shapes (a frozen copy of ``model``,
        per-sample arrays of length ``num_samples``), so the optimiser can include them and a
        checkpoint's method state loads into them; ``setup`` fills them."""

    def setup(self, ctx: MethodContext) -> dict[str, Any] | None:
        """Once before training (not again on resume); may pass over the data. The fields
        returned go into a ``method_setup`` record."""
        return None

    def on_epoch_start(self, ctx: MethodContext, epoch: int) -> dict[str, Any] | None:
        """Optional pass before epoch ``epoch``; fields returned go into an ``epoch_record``."""
        return None

    def prefetch_samples(self) -> Callable[[np.ndarray], np.ndarray] | None:
        """A picklable ``batch sample indices (K,) -> sample indices (M,)`` naming the
        training samples a step will need beside its batch (e.g. memory-bank pairs), or None.
        The training loader decodes them with the batch, in its workers, and hands them to the
        step as ``StepContext.extra``; asked once per epoch, after ``on_epoch_start``."""
        return None

    def on_epoch_end(self, ctx: MethodContext, epoch: int) -> dict[str, Any] | None:
        """After epoch ``epoch``'s last step (before validation); fields returned go into an
        ``epoch_record`` (e.g. the weights the epoch's steps applied)."""
        return None

    def epoch_samples(self, ctx: MethodContext, epoch: int) -> np.ndarray | None:
        """Sample indices epoch ``epoch`` visits (in the epoch's seeded order); None = all."""
        return None

    def trainable_parameters(self, model: nn.Module) -> Iterable[nn.Parameter]:
        """What the optimiser trains; the method's own modules stay frozen unless listed."""
        return model.parameters()

    def training_step(
        self, model: nn.Module, batch: PairBatch, step: StepContext
    ) -> dict[str, Tensor]:
        raise NotImplementedError

    def retrieval_score(self, raw: Tensor) -> Tensor:
        """Raw (W, n_img, n_cap) -> the (n_img, n_cap) score evaluation ranks by
        (``eval.eval_score``, see :func:`ugncl.framework.evaluation.view_reducer`)."""
        return view_reducer(self.eval_score, self.score_tau, self.score_function)(raw)

    def stats(self) -> dict[str, Any]:
        """Scalars added to every ``train`` record."""
        return {}
