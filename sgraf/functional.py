"""Small tensor helpers shared by the SGRAF modules.

The normalisations keep the released code's epsilon placement (``x / (norm + eps)``), so
that scores of converted checkpoints match the original implementation.
"""

from __future__ import annotations

import torch
from torch import Tensor

EPS = 1e-8


def l2norm(x: Tensor, dim: int = -1, eps: float = EPS) -> Tensor:
    """``x / (||x||_2 + eps)`` along ``dim`` (released SGRAF convention; zero stays zero).

    ``vector_norm`` rather than ``sqrt(sum(x^2))``: its gradient at an all-zero vector is
    0 instead of NaN (the released code produces NaN gradients for all-zero regions).
    """
    return x / (torch.linalg.vector_norm(x, dim=dim, keepdim=True) + eps)


def l1norm(x: Tensor, dim: int = -1, eps: float = EPS) -> Tensor:
    """``x / (sum |x| + eps)`` along ``dim``."""
    return x / (x.abs().sum(dim=dim, keepdim=True) + eps)


def word_mask(lengths: Tensor, max_len: int) -> Tensor:
    """Boolean mask of real words.

    Args:
        lengths: (N,) integer lengths.
        max_len: padded length L.

    Returns:
        (N, L) bool, True where position < length.
    """
    positions = torch.arange(max_len, device=lengths.device)
    return positions.unsqueeze(0) < lengths.to(positions.device).unsqueeze(1)


def masked_softmax(logits: Tensor, mask: Tensor, dim: int = -1) -> Tensor:
    """Softmax over ``dim`` restricted to ``mask`` (masked entries get exactly 0).

    Every slice along ``dim`` must contain at least one True entry.
    """
    return torch.softmax(logits.masked_fill(~mask, float("-inf")), dim=dim)
