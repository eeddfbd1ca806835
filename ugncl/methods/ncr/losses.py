"""NCR's batch maths: soft margins, the hinge, per-sample losses, the prediction P and the
co-rectified labels (docs/methods/ncr.md, equations table).

Score matrices are ``(K, K)`` sigmoid similarities with rows = images and columns = captions
of one batch; pair ``i`` = (image i, caption i). Margins are broadcast against the score
matrix in two roles: ``margin_s`` for the image anchors (row i of ``cost_s``) and
``margin_im`` for the caption anchors (column j of ``cost_im``). The released code passes one
tensor for both; its shape decides which index the margin follows (see :func:`hinge_costs`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ugncl.methods.ugncl.losses import soft_margin as exponential_soft_margin

__all__ = [
    "MARGIN_SHAPES",
    "SOFT_MARGINS",
    "all_negatives_loss",
    "anchor_margins",
    "correspondence_prediction",
    "hinge_costs",
    "per_sample_loss",
    "rectified_clean_labels",
    "rectified_noisy_labels",
    "soft_margin",
    "soft_margin_hinge",
]

SOFT_MARGINS: tuple[str, ...] = ("exponential", "linear", "sin")
# How a vector of soft labels becomes the hinge's margins: ``anchor`` (each anchor its own
# label's margin, in both directions) or ``release`` (the released (K, 1) / (K, K) broadcast).
MARGIN_SHAPES: tuple[str, ...] = ("anchor", "release")


def soft_margin(labels: Tensor, margin: float = 0.2, kind: str = "exponential") -> Tensor:
    """Soft margin of a rectified label (paper: ``alpha_hat = alpha (m^y - 1) / (m - 1)``).

    Args:
        labels: soft labels in ``[0, 1]``, any shape.
        margin: the base margin alpha (0.2).
        kind: ``exponential`` (m = 10, the default), ``linear`` (``alpha y``) or ``sin``
            (``alpha (sin(pi y - pi / 2) / 2 + 1 / 2)``), the release's three options.

    Returns:
        Margins of ``labels``'s shape, in ``[0, margin]`` for labels in ``[0, 1]``.
    """
    if kind == "exponential":
        return exponential_soft_margin(labels, gamma=margin, m=10.0)
    if kind == "linear":
        return margin * labels
    if kind == "sin":
        return margin * (torch.sin(math.pi * labels - math.pi / 2) / 2 + 0.5)
    raise ValueError(f"soft margin {kind!r} is not one of {SOFT_MARGINS}")


def _check_square(scores: Tensor) -> int:
    if scores.dim() != 2 or scores.shape[0] != scores.shape[1]:
        raise ValueError(f"scores must be a (K, K) matrix, got shape {tuple(scores.shape)}")
    return scores.shape[0]


def anchor_margins(alpha: Tensor) -> tuple[Tensor, Tensor]:
    """Per-anchor margins ``(K,)`` -> ``(margin_s (K, 1), margin_im (1, K))``: image anchor i
    and caption anchor j each use their own pair's margin (the paper's L_soft per pair)."""
    return alpha.reshape(-1, 1), alpha.reshape(1, -1)


def hinge_costs(
    scores: Tensor, margin_s: Tensor | float, margin_im: Tensor | float
) -> tuple[Tensor, Tensor]:
    """The hinge's costs in the release's layout, diagonal zero.

    ``cost_s[i, j] = [m_s + S[i, j] - S[i, i]]_+`` (image anchor i, negative caption j) and
    ``cost_im[i, j] = [m_im + S[i, j] - S[j, j]]_+`` (caption anchor j, negative image i), the
    margins broadcast against ``(K, K)``: a ``(K, 1)`` margin follows the row i in both
    (the release's noisy labels: the caption anchor takes its negative image's margin), a
    ``(K,)`` one the column j, a ``(K, K)`` one both indices.

    Args:
        scores: ``(K, K)`` similarities.
        margin_s, margin_im: scalars or tensors broadcastable to ``(K, K)``.

    Returns:
        ``(cost_s, cost_im)``, each ``(K, K)``.
    """
    k = _check_square(scores)
    diag = scores.diagonal().reshape(k, 1)
    cost_s = (margin_s + scores - diag).clamp(min=0)
    cost_im = (margin_im + scores - diag.t()).clamp(min=0)
    eye = torch.eye(k, dtype=torch.bool, device=scores.device)
    return cost_s.masked_fill(eye, 0.0), cost_im.masked_fill(eye, 0.0)


def soft_margin_hinge(
    scores: Tensor,
    margin_s: Tensor | float,
    margin_im: Tensor | float,
    *,
    hardest: bool = True,
) -> Tensor:
    """NCR's training loss L_soft, summed over the batch (the release sums, it does not
    average): hardest negative per anchor (``hardest``) or the mean over the K columns.

    Args:
        scores: ``(K, K)`` similarities.
        margin_s, margin_im: see :func:`hinge_costs`.

    Returns:
        Scalar.
    """
    cost_s, cost_im = hinge_costs(scores, margin_s, margin_im)
    if hardest:
        return cost_s.max(1).values.sum() + cost_im.max(0).values.sum()
    return cost_s.mean(1).sum() + cost_im.mean(0).sum()


def per_sample_loss(scores: Tensor, margin: float = 0.2) -> Tensor:
    """The all-negatives hinge of each pair, the loss the GMM divides (release ``eval_loss``).

    ``l_i = mean_j cost_s[i, j] + mean_j cost_im[j, i]``; the means divide by K, the
    masked diagonal included (a 1/K scale of the paper's sum, which min-max normalisation
    removes).

    Args:
        scores: ``(K, K)`` similarities.

    Returns:
        ``(K,)``.
    """
    cost_s, cost_im = hinge_costs(scores, margin, margin)
    return cost_s.mean(1) + cost_im.mean(0)


def all_negatives_loss(scores: Tensor, margin: float = 0.2) -> Tensor:
    """NCR's warm-up loss: :func:`per_sample_loss` summed over the batch (scalar)."""
    return per_sample_loss(scores, margin).sum()


def correspondence_prediction(scores: Tensor, margin: float = 0.2) -> Tensor:
    """The prediction P of each pair's correspondence from its margin violation.

    ``p_i = clamp(alpha - l_i / 2, 0, alpha)`` with ``l_i`` of :func:`per_sample_loss`, divided
    by the mean of the top ``K // 10 + 1`` values of p, then clamped to ``[0, 1]``
    (release ``mode="predict"`` and ``SGRAF.predict``). Deviation: the release divides 0 by 0
    (NaN labels) when every p is 0; here such a batch predicts P = 0.

    Args:
        scores: ``(K, K)`` similarities.

    Returns:
        ``(K,)`` in ``[0, 1]``.
    """
    k = _check_square(scores)
    p = (margin - per_sample_loss(scores, margin) / 2).clamp(min=0, max=margin)
    top = p.sort().values[-(k // 10 + 1) :]
    scale = top.mean()
    if not scale > 0:
        return torch.zeros_like(p)
    return (p / scale).clamp(0, 1)


def rectified_clean_labels(prob: Tensor, prediction: Tensor, *, shape: str = "anchor") -> Tensor:
    """Co-rectified labels of the pairs divided clean: ``y_i = w_i * 1 + (1 - w_i) P_i``.

    Args:
        prob: ``(K,)`` clean probability w from the other network's GMM.
        prediction: ``(K,)`` P of the network being trained.
        shape: ``anchor`` -> ``(K,)`` per pair (paper); ``release`` -> the ``(K, K)`` matrix
            ``w_i + (1 - w_i) P_j`` the release's (K, 1) * (K,) broadcast makes.

    Returns:
        ``(K,)`` or ``(K, K)``.
    """
    if shape == "release":
        w = prob.reshape(-1, 1)
        return w + (1 - w) * prediction.reshape(1, -1)
    if shape != "anchor":
        raise ValueError(f"label shape {shape!r} is not one of {MARGIN_SHAPES}")
    return prob + (1 - prob) * prediction


def rectified_noisy_labels(prediction_a: Tensor, prediction_b: Tensor) -> Tensor:
    """Co-rectified labels of the pairs divided noisy: ``(P_A + P_B) / 2`` (``(K,)``)."""
    return (prediction_a + prediction_b) / 2
