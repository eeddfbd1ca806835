"""The VSE++ / SGRAF hinge shared by the SGRAF-track methods (the plain baseline, UGNCL's
trusted robust loss, OSA's weighted hinge): pure functions on one batch's scores.

Rows are images, columns captions; pair ``i`` is (image i, caption i).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

__all__ = [
    "check_square",
    "hinge_costs",
    "mean_over_views",
    "triplet_objective",
    "vse_hinge",
    "weighted_triplet",
]


def check_square(scores: Tensor, name: str = "scores") -> int:
    """``K`` of a ``(K, K)`` score matrix; any other shape is refused."""
    if scores.dim() != 2 or scores.shape[0] != scores.shape[1]:
        raise ValueError(
            f"{name} must be a square (K, K) matrix (images x captions of one batch), got "
            f"{tuple(scores.shape)}"
        )
    return scores.shape[0]


def check_view_scores(raw: Tensor) -> tuple[int, int]:
    """``(W, K)`` of one batch's raw scores ``(W, K, K)``; any other shape is refused."""
    if raw.dim() != 3 or raw.shape[1] != raw.shape[2]:
        raise ValueError(
            f"raw scores must have shape (W, K, K) (views, images, captions of one batch), got "
            f"{tuple(raw.shape)}; add a view axis with raw.unsqueeze(0) for a single view"
        )
    return raw.shape[0], raw.shape[1]


def hinge_costs(scores: Tensor, margins: Tensor) -> tuple[Tensor, Tensor]:
    """Hinge costs per (anchor, negative), both directions, margin indexed by the anchor.

    Returns ``(cost_i2t, cost_t2i)``, each ``(K, K)`` with row = anchor, column = negative,
    diagonal zero: ``cost_i2t[i, j] = [m_i + s[i, j] - s[i, i]]_+`` (image i, caption j) and
    ``cost_t2i[j, i] = [m_j + s[i, j] - s[j, j]]_+`` (caption j, image i). The released code
    indexes text-to-image margins by image rows (UGNCL's model code); here the
    caption anchor's margin is used.
    """
    diag = scores.diagonal()
    cost_i2t = (margins[:, None] + scores - diag[:, None]).clamp_min(0)
    cost_t2i = (margins[:, None] + scores.t() - diag[:, None]).clamp_min(0)
    eye = torch.eye(scores.shape[0], dtype=torch.bool, device=scores.device)
    return cost_i2t.masked_fill(eye, 0.0), cost_t2i.masked_fill(eye, 0.0)


def vse_hinge(scores: Tensor, margin: float = 0.2, max_violation: bool = True) -> Tensor:
    """VSE++ / SGRAF contrastive hinge loss (UGNCL paper Eq. 1), summed over the batch.

    Args:
        scores: similarity ``(K, K)``, rows images, columns captions.
        margin: hinge margin.
        max_violation: hardest negative per anchor (VSE++); ``False`` sums over all negatives.

    Returns:
        Scalar: sum over anchors of the image-to-text and text-to-image hinges.
    """
    K = check_square(scores)
    margins = torch.full((K,), margin, dtype=scores.dtype, device=scores.device)
    cost_i2t, cost_t2i = hinge_costs(scores, margins)
    if max_violation:
        return cost_i2t.max(dim=1).values.sum() + cost_t2i.max(dim=1).values.sum()
    return cost_i2t.sum() + cost_t2i.sum()


def mean_over_views(raw: Tensor, fn: Callable[[Tensor], Tensor]) -> Tensor:
    """``mean_w fn(raw[w])`` over the views of ``(W, K, K)`` scores."""
    return torch.stack([fn(raw[w]) for w in range(raw.shape[0])]).mean()


def triplet_objective(
    raw: Tensor, margin: float = 0.2, max_violation: bool = True
) -> dict[str, Tensor]:
    """Plain SGRAF baseline: VSE++ hinge on ``sigmoid(raw)`` (SGRAF's score), view-averaged.

    Args:
        raw: raw scores ``(W, K, K)``.
        margin: hinge margin (0.2).
        max_violation: hardest negatives (True) or all negatives.

    Returns:
        ``{"loss_triplet": scalar}``.
    """
    check_view_scores(raw)
    loss = mean_over_views(raw, lambda s: vse_hinge(torch.sigmoid(s), margin, max_violation))
    return {"loss_triplet": loss}


def weighted_triplet(
    raw: Tensor, weights: Tensor, margin: float = 0.2, max_violation: bool = True
) -> Tensor:
    """Per-pair VSE++ hinge on ``sigmoid(raw)``, weighted (OSA's weights on the SGRAF track).

    Pair ``i``'s cost is its image-anchor plus its caption-anchor hinge; ``sum_i w_i cost_i``
    (view-averaged) equals :func:`triplet_objective` when every weight is 1.

    Args:
        raw: raw scores ``(W, K, K)``.
        weights: ``(K,)`` per-pair weights (no gradient).
        margin, max_violation: as :func:`vse_hinge`.

    Returns:
        0-dim tensor.
    """
    if raw.dim() != 3 or raw.shape[1] != raw.shape[2] or weights.shape != (raw.shape[1],):
        raise ValueError(
            f"raw must be (W, K, K) and weights (K,), got {raw.shape}, {weights.shape}"
        )
    w = weights.detach().to(raw.dtype)
    total = raw.new_zeros(())
    for view in raw:
        s = torch.sigmoid(view)
        margins = torch.full((s.shape[0],), margin, dtype=s.dtype, device=s.device)
        cost_i2t, cost_t2i = hinge_costs(s, margins)
        if max_violation:
            per = cost_i2t.max(dim=1).values + cost_t2i.max(dim=1).values
        else:
            per = cost_i2t.sum(dim=1) + cost_t2i.sum(dim=1)
        total = total + (w * per).sum()
    return total / raw.shape[0]
