"""What a method may see of the trainer: the model, the device, passes over the data."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from ugncl.core.data import PairBatch
from ugncl.core.engine.device import Precision
from ugncl.core.engine.recorder import MetricsRecorder

if TYPE_CHECKING:
    from ugncl.core.prefilter import PrefilterSelection


@dataclass(frozen=True)
class StepContext:
    """Where the trainer is when it asks a method for a step."""

    epoch: int  # 0-based, warm-up epochs included
    global_step: int  # optimiser steps taken so far
    warmup: bool
    device: torch.device
    lr: float | None = None  # the optimiser's current lr (a siamese step follows the schedule)
    extra: PairBatch | None = None  # Method.prefetch_samples(batch), decoded by the loader


@dataclass(frozen=True)
class MethodContext:
    """The trainer's side of a method's ``setup`` / ``on_epoch_start`` / ``epoch_samples``.

    Attributes:
        model: the similarity model (on ``device``).
        device: where the model and the method's modules live.
        precision: autocast settings of forward passes (``autocast()``).
        run_dir: the run directory (for caches a method may write, e.g. a memory bank).
        seed: the run's seed.
        warmup_epochs: number of warm-up epochs (epochs ``0 .. warmup_epochs - 1``).
        batch_size: the training batch size.
        num_samples: N, training samples (captions).
        clean: (N,) bool ground truth, for noise-detection records and the diagnostic
            oracles only (``method.ugncl.division_source: truth``,
            ``train_pairs: clean`` of ``method.triplet`` and ``method.infonce``).
        recorder: the run's ``metrics.jsonl`` writer.
        batches: ``batches(epoch, batch_size, stream, indices=None)`` -> a full pass over the
            training samples (or ``indices``) in the seeded order of (epoch, stream), every
            sample exactly once (a short tail joins the previous batch). Streams other than
            0 (the training order) give independent orders. ``data=`` (a
            :class:`~ugncl.core.data.TrainingData` of the same samples in another input
            format, e.g. for a frozen estimator of another backbone) draws them from it.
        image_index: (N,) int64 the image each caption is paired with for training (the
            noisy index); caches built on it can check they match the run's pairs.
        every_batch: as ``batches``, but with several processes every batch of the pass on
            every rank (``batches`` gives each rank its share): for a computation each rank
            repeats alike, such as OSA's estimator adaptation. None: ``batches``.
        fetch: ``fetch(indices (K,)) -> PairBatch`` of those training samples in that order
            (e.g. memory-bank pairs looked up per batch).
        global_step: optimiser steps taken before this call (Eq. 16's hardness schedule runs
            on it; restored on resume).
        prefilter: at the start of one of the pre-filter's epochs (``prefilter.epochs`` after
            the warm-up), its selection of the training pairs; None elsewhere, and where it
            does not run (``prefilter.kind: none``, raw images, an empty selection).
    """

    model: nn.Module
    device: torch.device
    precision: Precision
    run_dir: Path
    seed: int
    warmup_epochs: int
    batch_size: int
    num_samples: int
    clean: np.ndarray
    recorder: MetricsRecorder | None
    batches: Callable[..., Iterable[PairBatch]]
    image_index: np.ndarray | None = None
    fetch: Callable[[torch.Tensor], PairBatch] | None = None
    global_step: int = 0
    prefilter: PrefilterSelection | None = None
    every_batch: Callable[..., Iterable[PairBatch]] | None = None

    def autocast(self) -> contextlib.AbstractContextManager:
        """The run's autocast context for forward passes."""
        return self.precision.autocast(self.device)
