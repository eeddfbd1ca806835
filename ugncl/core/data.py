"""What the trainer, the methods and the evaluator see of the data, whatever its source.

Two tracks feed the same code: precomputed region features (:mod:`ugncl.backbones.sgraf.data`)
and, next, raw images for a CLIP backbone. Both hand out :class:`PairBatch` objects through a
:class:`TrainingData` (training) and an :class:`EvalData` (ranking a split).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

__all__ = ["EvalData", "PairBatch", "RunData", "TrainingData"]


@dataclass
class PairBatch:
    """A batch of K training pairs, one per caption.

    Attributes:
        images: (K, ...) float images of the pairs: regions (K, R, D) or pixels (K, 3, H, W).
        captions: (K, L) int64 token ids, 0-padded to the longest caption.
        lengths: (K,) int64 caption lengths (tokens incl. ``<start>``/``<end>``); host
            bookkeeping: :meth:`to` leaves them on the CPU, where the model plans its work
            from them (packing, block widths) without waiting for the device.
        index: (K,) int64 sample index (the caption's position in the split).
        image_index: (K,) int64 image each caption is paired with for training (noisy).
        clean: (K,) bool ground-truth correspondence flag (reporting only, never for training;
            the one exception is the diagnostic ``method.ugncl.division_source=truth``).
    """

    images: Tensor
    captions: Tensor
    lengths: Tensor
    index: Tensor
    image_index: Tensor
    clean: Tensor

    def to(self, device: torch.device | str, non_blocking: bool = False) -> PairBatch:
        """Move every tensor but ``lengths`` to ``device`` (``non_blocking`` from pinned
        memory: the loader's ``pin_memory``); ``lengths`` stay on the CPU."""
        return PairBatch(
            **{
                f.name: getattr(self, f.name)
                if f.name == "lengths"
                else getattr(self, f.name).to(device, non_blocking=non_blocking)
                for f in fields(self)
            }
        )

    def pin_memory(self) -> PairBatch:
        """Page-locked copies of every tensor but ``lengths`` (host bookkeeping, never copied
        to the device). The loader's ``pin_memory`` calls this on CUDA; without it a
        ``PairBatch`` passed through unpinned, and :meth:`to` with ``non_blocking`` waited for
        each copy from pageable memory."""
        return PairBatch(
            **{
                f.name: getattr(self, f.name)
                if f.name == "lengths"
                else getattr(self, f.name).pin_memory()
                for f in fields(self)
            }
        )

    def __len__(self) -> int:
        return int(self.index.shape[0])


@runtime_checkable
class TrainingData(Protocol):
    """The training split as samples: item ``k`` of ``dataset`` is sample ``k`` (its caption,
    the image it is paired with for training, its index and its clean flag), and ``collate``
    turns a list of items into a :class:`PairBatch`.

    Per-sample arrays (``clean``, ``image_index`` and whatever a method computes over a whole
    pass) are indexed by sample index, so they can be gathered across ranks.
    """

    dataset: Dataset
    collate: Callable[[Sequence[Any]], PairBatch]

    @property
    def num_samples(self) -> int: ...

    @property
    def clean(self) -> np.ndarray:
        """(N,) bool ground truth: sample k is paired with its own image."""
        ...

    @property
    def image_index(self) -> np.ndarray:
        """(N,) int64 image each sample is paired with for training."""
        ...


class SplitTrainingData:
    """The per-sample side of :class:`TrainingData`, read from ``self.split``: any split that
    has ``num_captions``, ``clean`` and ``image_index`` (precomputed regions or raw images, the
    same split definition in both tracks)."""

    split: Any

    @property
    def num_samples(self) -> int:
        return self.split.num_captions

    @property
    def clean(self) -> np.ndarray:
        return self.split.clean

    @property
    def image_index(self) -> np.ndarray:
        return self.split.image_index


def training_split_summary(split: Any, noise_source: str) -> dict[str, Any]:
    """The ``setup`` record fields every track reports about its noisy training split."""
    return {
        "noise_source": noise_source,
        "n_train_captions": split.num_captions,
        "n_train_images": split.num_images,
        "n_noisy": int((~split.clean).sum()),
    }


@runtime_checkable
class EvalData(Protocol):
    """One split to rank: every image once, every caption once, and the clean map.

    ``images(a, b)`` returns the inputs of images ``[a, b)`` (what the backbone's
    ``encode_images`` takes); ``captions(a, b)`` the ``(ids (B, L) int64, lengths (B,) int64)``
    of captions ``[a, b)``.
    """

    name: str
    split: str

    @property
    def num_images(self) -> int: ...

    @property
    def num_captions(self) -> int: ...

    @property
    def caption_to_image(self) -> np.ndarray:
        """(n_cap,) int64 clean caption -> image map (the ranking ground truth)."""
        ...

    @property
    def lengths(self) -> np.ndarray:
        """(n_cap,) int64 caption lengths."""
        ...

    def images(self, start: int, stop: int) -> Tensor: ...

    def captions(self, start: int, stop: int) -> tuple[Tensor, Tensor]: ...


@runtime_checkable
class RunData(Protocol):
    """What a run opens of its data source (a backbone's ``open_data``): the training data,
    the validation split, the test split on demand, and what the run records about them."""

    @property
    def dev(self) -> EvalData | Any | None:
        """The validation split (an :class:`EvalData` or a split the evaluator wraps)."""
        ...

    @property
    def image_index(self) -> np.ndarray:
        """(N,) caption -> image index trained on (saved in the run directory, sha256)."""
        ...

    def training_data(self) -> TrainingData: ...

    def open_test(self) -> EvalData | Any:
        """The test split, opened when training ends."""
        ...

    def describe(self) -> dict[str, Any]:
        """Fields of the run's ``setup`` record (noise source, sizes, ...)."""
        ...

    def checkpoint_extra(self) -> dict[str, Any]:
        """Plain entries added to every checkpoint (e.g. the vocabulary path)."""
        ...

    def check_checkpoint(self, state: dict[str, Any], where: str) -> None:
        """Refuse a checkpoint (file ``where``) this data would feed other inputs than it was
        trained on (e.g. another vocabulary), before a resume loads it."""
        ...
