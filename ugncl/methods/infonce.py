"""Per-sample symmetric InfoNCE on logit-scaled CLIP scores, and its weighted means.

The CLIP references (NPC ``TotalLoss('mbank')``, SDD ``InfoNCELoss``, OSA ``CrossEn``) all use
``CE_i2t(i) = -log softmax_row(S)[i, i]`` and ``CE_t2i(i) = -log softmax_col(S)[i, i]`` on the
matrix ``S = logit_scale.exp() * cos`` (rows images, columns captions) and combine them per pair
as ``(CE_i2t + CE_t2i) / 2`` (docs/methods/weighted.md).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = [
    "as_logit_matrix",
    "clip_loss",
    "info_nce_directions",
    "info_nce_per_sample",
    "weighted_mean",
]


def as_logit_matrix(raw: Tensor) -> Tensor:
    """``(1, K, K)`` raw CLIP scores (SimilarityModel output, W = 1) or ``(K, K)`` -> ``(K, K)``."""
    if raw.dim() == 3 and raw.shape[0] == 1:
        raw = raw[0]
    if raw.dim() != 2 or raw.shape[0] != raw.shape[1]:
        raise ValueError(
            f"expected logit-scaled scores (K, K) or (1, K, K) of one batch (image i with "
            f"caption i), got {tuple(raw.shape)}; multi-view scores need a view reduction first"
        )
    return raw


def info_nce_directions(logits: Tensor) -> tuple[Tensor, Tensor]:
    """``(CE_i2t, CE_t2i)`` of every pair of a batch, each ``(K,)`` (float32, log-sum-exp).

    ``CE_i2t(i) = lse_j S_ij - S_ii`` (image ``i`` retrieving its caption among the batch's),
    ``CE_t2i(i) = lse_j S_ji - S_ii``; :func:`info_nce_per_sample` is their mean.
    """
    s = as_logit_matrix(logits).float()
    diag = torch.diagonal(s)
    return torch.logsumexp(s, dim=1) - diag, torch.logsumexp(s, dim=0) - diag


def info_nce_per_sample(logits: Tensor) -> Tensor:
    """Symmetric InfoNCE of every pair of a batch.

    ``loss_i = (lse_j S_ij - S_ii + lse_j S_ji - S_ii) / 2``, computed with ``logsumexp`` in
    float32 (SDD's plain ``exp`` overflows once a logit passes ~88.7).

    Args:
        logits: ``(K, K)`` (or ``(1, K, K)``) on the logit-scaled scale, rows images, columns
            captions, pair ``i`` = (image i, caption i).

    Returns:
        ``(K,)`` per-pair losses; their mean is the standard CLIP loss.
    """
    s = as_logit_matrix(logits).float()
    diag = torch.diagonal(s)
    i2t = torch.logsumexp(s, dim=1) - diag
    t2i = torch.logsumexp(s, dim=0) - diag
    return 0.5 * (i2t + t2i)


def weighted_mean(
    values: Tensor, weights: Tensor | None = None, *, normalise: bool = False
) -> Tensor:
    """``mean_i(w_i * v_i)`` (the references' form: divided by K, not by sum(w)).

    Args:
        values: ``(K,)`` per-sample losses.
        weights: ``(K,)`` per-sample weights (no gradient is taken through them), or None for 1.
        normalise: divide by ``sum(w)`` instead of K (0 when every weight is 0).

    Returns:
        0-dim tensor.
    """
    if weights is None:
        return values.mean()
    if weights.shape != values.shape:
        raise ValueError(
            f"weights {tuple(weights.shape)} and values {tuple(values.shape)} must match"
        )
    w = weights.detach().to(values.dtype)
    total = (w * values).sum()
    if normalise:
        # Every weight 0 gives 0 with a zero gradient. Dividing by a clamped tiny sum gave 0
        # too, but its backward scaled the incoming gradient by 1 / tiny, which overflows to
        # inf for a loss weight above ~4 and then 0 x inf = NaN reached every parameter.
        denom = w.sum()
        return torch.where(denom > 0, total / torch.where(denom > 0, denom, 1.0), 0.0 * total)
    return total / max(values.numel(), 1)


def clip_loss(logits: Tensor) -> Tensor:
    """The plain ``infonce`` fine-tune loss: mean symmetric InfoNCE over the batch."""
    return info_nce_per_sample(logits).mean()
