"""What a training method supplies to the one trainer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

if TYPE_CHECKING:
    from precomputed.collate import PairBatch
    from ugncl.engine.trainer import Trainer


@dataclass(frozen=True)
class StepContext:
    """Where the trainer is when it asks a method for a step."""

    epoch: int  # 0-based, warm-up epochs included
    global_step: int  # optimiser steps taken so far
    warmup: bool
    device: torch.device


class Method:
    """A training method: loss terms per batch, optionally an epoch-start pass.

    ``training_step`` returns named terms; the trainer back-propagates the sum of the entries
    whose key starts with ``loss`` and logs every entry.
    """

    name = "method"

    def on_epoch_start(self, trainer: Trainer, epoch: int) -> dict[str, Any] | None:
        """Optional pass before epoch ``epoch``; may return a ``division`` record's fields."""
        return None

    def training_step(
        self, model: nn.Module, batch: PairBatch, ctx: StepContext
    ) -> dict[str, Tensor]:
        raise NotImplementedError

    def stats(self) -> dict[str, Any]:
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        del state
