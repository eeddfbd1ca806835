"""Caption padding for batches of token-id sequences: ``<pad>`` = 0, no sorting."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

__all__ = ["pad_captions"]


def pad_captions(seqs: Sequence[np.ndarray]) -> tuple[Tensor, Tensor]:
    """Pad id sequences with 0 (``<pad>``) into (B, L) int64 plus (B,) int64 lengths."""
    lengths = torch.tensor([len(s) for s in seqs], dtype=torch.int64)
    width = int(lengths.max()) if len(seqs) else 0
    out = torch.zeros((len(seqs), width), dtype=torch.int64)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.as_tensor(np.asarray(s, dtype=np.int64))
    return out, lengths
