"""Batch collation for caption-indexed pairs: pad with ``<pad>`` = 0, no sorting."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

__all__ = ["PairBatch", "collate_pairs", "pad_captions"]


@dataclass
class PairBatch:
    """A batch of B pairs.

    Attributes:
        images: (B, R, D) float32 region features.
        captions: (B, L) int64 token ids, 0-padded to the longest caption.
        lengths: (B,) int64 caption lengths (with ``<start>``/``<end>``).
        index: (B,) int64 caption indices.
        image_index: (B,) int64 image paired with each caption (noisy for training).
        clean: (B,) bool ground-truth correspondence flag (for logging/analysis only).
    """

    images: Tensor
    captions: Tensor
    lengths: Tensor
    index: Tensor
    image_index: Tensor
    clean: Tensor

    def to(self, device: torch.device | str, non_blocking: bool = False) -> PairBatch:
        """Move every tensor to ``device``."""
        return PairBatch(
            **{k: v.to(device, non_blocking=non_blocking) for k, v in self.__dict__.items()}
        )

    def __len__(self) -> int:
        return int(self.index.shape[0])


def pad_captions(seqs: Sequence[np.ndarray]) -> tuple[Tensor, Tensor]:
    """Pad id sequences with 0 (``<pad>``) into (B, L) int64 plus (B,) int64 lengths."""
    lengths = torch.tensor([len(s) for s in seqs], dtype=torch.int64)
    width = int(lengths.max()) if len(seqs) else 0
    out = torch.zeros((len(seqs), width), dtype=torch.int64)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.as_tensor(np.asarray(s, dtype=np.int64))
    return out, lengths


def collate_pairs(items: Sequence[tuple]) -> PairBatch:
    """Collate :class:`~precomputed.dataset.PairDataset` items; keeps the item order."""
    feats, ids, index, image_index, clean = zip(*items)
    captions, lengths = pad_captions(ids)
    return PairBatch(
        images=torch.from_numpy(np.stack(feats).astype(np.float32, copy=False)),
        captions=captions,
        lengths=lengths,
        index=torch.tensor(index, dtype=torch.int64),
        image_index=torch.tensor(image_index, dtype=torch.int64),
        clean=torch.tensor(clean, dtype=torch.bool),
    )
