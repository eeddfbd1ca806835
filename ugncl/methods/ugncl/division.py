"""Uncertainty-guided division of training pairs (paper Eqs. 4-11; docs/methods/ugncl.md).

Pure tensor functions turn one batch of raw scores ``(W, K, K)`` into per-pair opinions,
normalised uncertainty, soft labels and one of four sets; :class:`DivisionAccumulator`
collects batch results over a whole training set, keyed by dataset sample index, and
:func:`division_quality` scores a division against ground-truth clean flags.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ugncl.methods.ugncl.evidential import (
    EvidenceFloor,
    EvidenceFunction,
    ScoreCentring,
    centre_scores,
    ds_combine_many,
    log_ds_combine_many,
    log_evidence_exact,
    min_log_evidence,
)

__all__ = [
    "CLEAN",
    "DETERMINED_RULES",
    "HARD_CLEAN",
    "HARD_NOISY",
    "NOISY",
    "SET_NAMES",
    "UNVISITED",
    "BatchDivision",
    "DivisionAccumulator",
    "DivisionResult",
    "batch_opinions",
    "bidirectional_alpha",
    "called_clean",
    "called_noisy",
    "divide_batch",
    "division_quality",
    "floor_uncertainty",
    "fuse_views",
    "fused_log_evidence",
    "hard_division",
    "hard_soft_label",
    "matched_pairs",
    "normalised_uncertainty",
    "null_soft_labels",
    "null_threshold",
    "pair_log_evidence",
]

# Set codes (paper S_C, S_N, S_H^C, S_H^N); UNVISITED marks samples no batch has covered.
CLEAN, NOISY, HARD_CLEAN, HARD_NOISY = 0, 1, 2, 3
UNVISITED = -1
SET_NAMES: dict[int, str] = {
    CLEAN: "clean",
    NOISY: "noisy",
    HARD_CLEAN: "hard_clean",
    HARD_NOISY: "hard_noisy",
}


def check_batch_scores(raw: Tensor) -> tuple[int, int]:
    """``(W, K)`` of one batch's raw scores ``(W, K, K)``; any other shape is refused (shared by
    the division and the UGNCL losses)."""
    if raw.dim() != 3 or raw.shape[1] != raw.shape[2]:
        raise ValueError(
            f"raw scores must have shape (W, K, K) (views, images, captions of one batch), got "
            f"{tuple(raw.shape)}; add a view axis with raw.unsqueeze(0) for a single view"
        )
    return raw.shape[0], raw.shape[1]


# ------------------------------------------------------------------ opinions (Eqs. 4-7)


def bidirectional_alpha(e: Tensor) -> Tensor:
    """Per-view bidirectional Dirichlet parameters of each pair (paper Eq. 4, METHOD 3).

    Pair ``i`` sums the image-as-query row and the caption-as-query column:
    ``alpha[w, i, k] = e[w, i, k] + e[w, k, i] + 1``.

    Args:
        e: evidence ``(W, K, K)``, rows images, columns captions.

    Returns:
        Dirichlet parameters ``(W, K, K)``: ``[w, i]`` is pair ``i``'s opinion over the K
        candidates in view ``w``.
    """
    return e + e.transpose(1, 2) + 1.0


def fuse_views(alpha: Tensor) -> tuple[Tensor, Tensor]:
    """Fuse the per-view opinions with the reduced Dempster-Shafer rule (paper Eq. 7).

    Args:
        alpha: Dirichlet parameters ``(W, N, K)``.

    Returns:
        ``(b, u)``: fused beliefs ``(N, K)`` and uncertainty ``(N,)``.
    """
    _, b, u = ds_combine_many(alpha)
    return b, u


def fused_log_evidence(
    raw: Tensor,
    *,
    tau: float = 0.1,
    floor: EvidenceFloor = "keep",
    function: EvidenceFunction = "softplus",
) -> Tensor:
    """Fused bidirectional log evidence of every pair of a batch, exact (Eqs. 3, 4, 7).

    Per view ``log(e[i, k] + e[k, i])`` (Eq. 4 in log space), fused over views by
    :func:`ugncl.methods.ugncl.evidential.log_ds_combine_many`; no ceiling, float64 (float32 on
    MPS).
    Decision: with the capped evidence every score above ``raw ~ 5`` (softplus,
    tau 0.1) had the same evidence, so the argmax of Eq. 9 broke ties by index and marked
    clean pairs noisy; here a higher raw score always has more evidence.

    Args:
        raw: raw scores ``(W, K, K)``.
        tau, floor, function: evidence settings (:func:`ugncl.methods.ugncl.evidential.evidence`).

    Returns:
        ``(K, K)``: row ``i`` = pair ``i``'s log evidence over the K candidates.
    """
    check_batch_scores(raw)
    return _fuse_bidirectional(log_evidence_exact(raw, tau, floor, function))


def _fuse_bidirectional(log_e: Tensor) -> Tensor:
    # (W, K, K) per-view log evidence -> (K, K): log(e[i, k] + e[k, i]) per view (Eq. 4),
    # fused over views (Eq. 7).
    return log_ds_combine_many(torch.logaddexp(log_e, log_e.transpose(1, 2)))


def _opinion_from_log_evidence(log_e: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    # b = e / (K + sum e), u = K / (K + sum e), projected diagonal e_ii / sum e; all in log
    # space so that nothing overflows and no 1 - u cancels.
    K = log_e.shape[-1]
    lse = torch.logsumexp(log_e, dim=-1)
    log_s = torch.logaddexp(lse, lse.new_full((), math.log(K)))
    b = torch.exp(log_e - log_s.unsqueeze(-1))
    u = torch.exp(math.log(K) - log_s)
    diag = torch.diagonal(log_e) if log_e.dim() == 2 and log_e.shape[0] == K else None
    projected = torch.exp(diag - lse) if diag is not None else torch.zeros_like(u)
    # A row with no evidence at all (subtract floor, every score at 0): projected 0, not NaN.
    projected = torch.nan_to_num(projected, nan=0.0)
    return b, u, projected


def batch_opinions(
    raw: Tensor,
    *,
    tau: float = 0.1,
    floor: EvidenceFloor = "keep",
    function: EvidenceFunction = "softplus",
) -> tuple[Tensor, Tensor]:
    """Fused bidirectional opinion of every pair of a batch (paper Eqs. 3-7).

    Args:
        raw: raw scores ``(W, K, K)``.
        tau, floor, function: see :func:`ugncl.methods.ugncl.evidential.evidence`.

    Returns:
        ``(b, u)``: beliefs ``(K, K)`` (row ``i`` = pair ``i`` over the K candidates) and
        uncertainty ``(K,)``, computed uncapped in float64, returned in float32 or the wider
        dtype of ``raw``.
    """
    b, u, _ = _opinion_from_log_evidence(
        fused_log_evidence(raw, tau=tau, floor=floor, function=function)
    )
    dtype = torch.promote_types(raw.dtype, torch.float32)
    return b.to(dtype), u.to(dtype)


def floor_uncertainty(
    K: int,
    W: int,
    floor: EvidenceFloor = "keep",
    *,
    tau: float = 0.1,
    function: EvidenceFunction = "softplus",
    centred: bool = False,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Tensor:
    """Fused uncertainty when every evidence sits at its minimum (docs/methods/ugncl.md).

    Computed by running the same pipeline (:func:`fused_log_evidence`) on a ``(W, K, K)``
    batch at the minimum log evidence (:func:`ugncl.methods.ugncl.evidential.min_log_evidence`:
    softplus
    ``keep`` 1, ``subtract`` 0, tanh ``exp(-1/tau)``), so a batch of scores at the minimum
    gets ``u / u_floor == 1``. Closed forms for softplus ``keep``: W = 1 gives 1/3, W = 2
    gives ``1 / (5 + 4/K)``; ``subtract`` gives 1 for every W; tanh is within ``1e-4`` of 1
    at ``tau = 0.1`` (no normalisation in effect).

    Args:
        K: candidates per opinion (the batch size), ``>= 1``.
        W: number of views, ``>= 1``.
        floor: evidence floor mode.
        tau, function: evidence settings.
        centred: the scores were centred (:func:`ugncl.methods.ugncl.evidential.centre_scores`): the
            vacuous batch is every score at the batch mean, raw 0.
        dtype, device: of the returned scalar (use those of the ``u`` it will divide).

    Returns:
        0-dim tensor.
    """
    if K < 1 or W < 1:
        raise ValueError(f"floor_uncertainty needs K >= 1 and W >= 1, got K={K}, W={W}")
    fill = min_log_evidence(tau, floor, function, centred=centred)
    log_e = torch.full((W, K, K), fill, dtype=torch.float64, device=device)
    _, u, _ = _opinion_from_log_evidence(_fuse_bidirectional(log_e))
    return u[0].to(dtype)


def normalised_uncertainty(
    u: Tensor,
    W: int,
    floor: EvidenceFloor = "keep",
    *,
    tau: float = 0.1,
    function: EvidenceFunction = "softplus",
    centred: bool = False,
) -> Tensor:
    """``u_bar = u / u_floor`` (docs/methods/ugncl.md): 1 = no evidence beyond the vacuous batch.

    Args:
        u: fused uncertainty ``(K,)`` of a batch of K pairs.
        W: number of views that were fused.
        floor, tau, function, centred: evidence settings (:func:`floor_uncertainty`).

    Returns:
        ``(K,)`` in ``[0, 1]``.
    """
    # Uncentred, u_bar <= 1 holds exactly: in evidence terms the reduced DST rule is
    # e = e1 + e2 + e1 * e2 / K (elementwise), increasing in every input, and
    # 1 / u = 1 + sum(e) / K, so any evidence above the minimum lowers the fused u; the
    # clamp only removes rounding. Centred, a row scored below the batch mean has less
    # evidence than the vacuous batch; the clamp puts it at 1 (no information).
    u_floor = floor_uncertainty(
        u.shape[-1], W, floor, tau=tau, function=function, centred=centred, dtype=u.dtype,
        device=u.device,
    )  # fmt: skip
    return (u / u_floor).clamp(max=1.0)


# ------------------------------------------------------------------ division (Eqs. 8-11)

SOFT_LABELS = ("mean_rival", "top_rival", "max_rival", "projected", "belief")


def _rival_count(rule: str, lam: int | None, available: int) -> int:
    """How many of a pair's ``available`` rivals its rival rule averages: 1 (``max_rival``),
    all (``mean_rival``), or ``lam`` clipped to ``[1, available]`` (``top_rival``)."""
    if rule == "max_rival":
        return 1
    if rule == "mean_rival":
        return available
    if lam is None:
        raise ValueError("soft_label 'top_rival' needs lam (the number of rivals)")
    return max(1, min(int(lam), available))


def hard_soft_label(log_e: Tensor, rule: str = "projected", lam: int | None = None) -> Tensor:
    """Soft label ``y_i`` of each pair from its fused log evidence ``(K, K)`` (Eqs. 10-11).

    * ``"belief"`` (paper): ``b_ii = e_ii / (K + sum_k e_ik)``; at most ``1 - u``, so with
      ``p = epsilon = 0.5`` no hard pair can be hard-clean.
    * ``"projected"`` (released ``probabilities``): ``b_ii / (1 - u_i) = e_ii / sum_k e_ik``,
      the diagonal's share of all evidence; near 1 for any pair whose diagonal evidence is
      merely larger than the (tiny) rest, near ``1/K`` when all scores are alike.
    * ``"mean_rival"`` (the previous default): ``e_ii / (e_ii + mean_{k != i}
      e_ik)``, the diagonal's two-way projected probability against an average candidate:
      ``y > 0.5`` when the pair holds more evidence than a typical rival. Independent of the
      overall evidence scale (which the KL term drives to ~0 for every pair, so ``u ~ 1`` and
      every pair is hard; docs/methods/ugncl.md).
    * ``"top_rival"``: against the mean evidence of the ``lam`` strongest rivals, ``lam`` the
      hardness of Eq. 16 at the division (``lam = K - 1``: ``mean_rival``, ``lam = 1``:
      ``max_rival``): the division hardens with the triplet loss's schedule.
    * ``"max_rival"``: ``e_ii / (e_ii + max_{k != i} e_ik)``, against the strongest rival;
      ``y > 0.5`` exactly when the diagonal wins the argmax of Eq. 9.

    Args:
        log_e: fused log evidence ``(K, K)``, row ``i`` = pair ``i`` over its candidates.
        rule: one of ``SOFT_LABELS``.
        lam: number of rivals of ``"top_rival"`` (clipped to ``[1, K - 1]``); required there.

    Returns:
        ``(K,)`` in ``[0, 1]``.
    """
    if rule not in SOFT_LABELS:
        raise ValueError(f"soft_label must be one of {SOFT_LABELS}, got {rule!r}")
    K = log_e.shape[-1]
    diag = torch.diagonal(log_e)
    if rule in ("mean_rival", "top_rival", "max_rival"):
        n = _rival_count(rule, lam, K - 1)
        if K == 1:
            return torch.ones_like(diag)
        eye = torch.eye(K, dtype=torch.bool, device=log_e.device)
        rivals = log_e.masked_fill(eye, -math.inf)
        if rule == "max_rival":
            rival = rivals.max(dim=-1).values
        elif rule == "top_rival":
            rival = torch.logsumexp(rivals.topk(n, dim=-1).values, dim=-1) - math.log(n)
        else:
            rival = torch.logsumexp(rivals, dim=-1) - math.log(K - 1)
        return torch.nan_to_num(torch.sigmoid(diag - rival), nan=0.0)
    lse = torch.logsumexp(log_e, dim=-1)
    if rule == "belief":
        lse = torch.logaddexp(lse, lse.new_full((), math.log(K)))
    return torch.nan_to_num(torch.exp(diag - lse), nan=0.0)


def null_soft_labels(log_e: Tensor, rule: str = "projected", lam: int | None = None) -> Tensor:
    """Soft labels the batch's mismatched pairs would get as if each were a training pair.

    Entry ``(i, j)``, ``j != i``, treats candidate ``j`` of row ``i`` as the diagonal and the
    row's other candidates (without ``i`` and ``j``) as its rivals, under the same ``rule``
    and ``lam`` as :func:`hard_soft_label`. A noisy pair's caption describes another image,
    so before the model memorises it, its soft label is drawn from this distribution: the
    null of the division's test (docs/methods/ugncl.md, "The division's null").

    Args:
        log_e: fused log evidence ``(K, K)``, ``K >= 3``.
        rule, lam: as :func:`hard_soft_label` (``top_rival``'s ``lam`` clipped to
            ``[1, K - 2]``, the rivals a mismatched pair has).

    Returns:
        ``(K * (K - 1),)`` soft labels in ``[0, 1]``.
    """
    if rule not in SOFT_LABELS:
        raise ValueError(f"soft_label must be one of {SOFT_LABELS}, got {rule!r}")
    K = log_e.shape[-1]
    if K < 3:
        raise ValueError(f"the null soft labels need K >= 3 (a pair and two rivals), got K={K}")
    eye = torch.eye(K, dtype=torch.bool, device=log_e.device)
    # (K, K - 1): each row's candidates without its own diagonal, sorted descending.
    others = log_e.masked_select(~eye).view(K, K - 1)
    ordered, _ = others.sort(dim=-1, descending=True)
    if rule in ("mean_rival", "top_rival", "max_rival"):
        n = _rival_count(rule, lam, K - 2)
        # Rivals of the j-th ranked candidate: the top n of the others, or the top n + 1
        # without itself when it is one of them.
        top = ordered[:, :n]
        top_plus = ordered[:, : n + 1]
        lse_n = torch.logsumexp(top, dim=-1, keepdim=True)  # (K, 1)
        rank = torch.arange(K - 1, device=log_e.device)
        inside = rank < n
        # log(sum of the top n + 1 minus the candidate itself), exact in log space.
        lse_plus = torch.logsumexp(top_plus, dim=-1, keepdim=True)
        removed = lse_plus + torch.log1p(-torch.exp(ordered - lse_plus).clamp(max=1.0 - 1e-12))
        rival = torch.where(inside, removed, lse_n) - math.log(n)
        return torch.nan_to_num(torch.sigmoid(ordered - rival), nan=0.0).reshape(-1)
    lse = torch.logsumexp(ordered, dim=-1, keepdim=True)
    if rule == "belief":
        lse = torch.logaddexp(lse, lse.new_full((), math.log(K - 1)))
    return torch.nan_to_num(torch.exp(ordered - lse), nan=0.0).reshape(-1)


def null_threshold(
    log_e: Tensor, rule: str, lam: int | None, level: float, epsilon: float
) -> Tensor:
    """Hard-clean threshold of one batch: ``max(epsilon, q)``, ``q`` the ``1 - level``
    quantile of :func:`null_soft_labels`.

    A model that cannot yet rank gives every pair a soft label near 0.5, so ``y > epsilon``
    passes about half the noisy pairs; requiring ``y`` above what a mismatched pair reaches
    with probability ``level`` lets about that share of the unmemorised noisy pairs into
    hard-clean, at any evidence scale (10-12% at 0.1 on the default world,
    docs/methods/ugncl.md). Where the mismatched pairs' labels fall below
    ``epsilon`` (small ``lam``, a model that separates them), the paper's threshold holds;
    against the mean of many rivals the top tenth of a row's mismatched pairs stays above 0.5
    even for a model that ranks every diagonal first.
    """
    q = torch.quantile(null_soft_labels(log_e, rule, lam), 1.0 - level)
    return q.clamp(min=epsilon).to(log_e.dtype)


DETERMINED_RULES = ("argmax", "null_test")


def pair_log_evidence(log_e_views: Tensor) -> Tensor:
    """Fused log evidence of every image-caption combination of a batch, as a training pair.

    A training pair (image ``i``, caption ``k``) is scored by the same ``e[i, k]`` in both
    directions, so its bidirectional evidence is ``2 e[i, k]`` per view (Eq. 4), fused over
    views (Eq. 7). The diagonal is each pair's own fused evidence (that of
    :func:`fused_log_evidence`); entry ``(i, k)``, ``k != i``, is what a noisy pair made of
    image ``i`` and another image's caption ``k`` would hold: the null of the division's test.

    Args:
        log_e_views: per-view log evidence ``(W, K, K)``.

    Returns:
        ``(K, K)`` fused log evidence.
    """
    return log_ds_combine_many(log_e_views + math.log(2.0))


def matched_pairs(
    log_e: Tensor, log_e_views: Tensor, rule: str = "argmax", level: float = 0.05
) -> Tensor:
    """Which pairs of a batch a determined division calls clean (Eq. 9 and a null test).

    * ``"argmax"`` (paper Eq. 9): pair ``i``'s own caption holds the most bidirectional
      evidence of its row, ``argmax_k b_i[k] == i``. A clean pair is called noisy whenever
      one rival of its batch outranks it, so the share of clean pairs kept is the model's
      in-batch R@1: it falls with the batch size K and with captions that fit several images.
    * ``"null_test"``: pair ``i``'s fused evidence is above the ``1 - level`` quantile of the
      batch's mismatched combinations scored as training pairs (:func:`pair_log_evidence`). A
      noisy pair's caption describes another image, so until the model memorises it its
      evidence is a draw from that null: about ``level`` of the noisy pairs are called clean
      at any K, and a clean pair needs only to beat a typical mismatched pair, not every
      rival of its batch (docs/methods/ugncl.md, "The determined pairs' test").

    Args:
        log_e: fused bidirectional log evidence ``(K, K)`` (:func:`fused_log_evidence`).
        log_e_views: the per-view log evidence ``(W, K, K)`` it was fused from.
        rule: one of ``DETERMINED_RULES``.
        level: share of the null called clean (``"null_test"`` only), in ``(0, 1)``.

    Returns:
        ``(K,)`` bool. A batch of fewer than 3 pairs (an epoch's short tail) has too few
        mismatched combinations for a null and is tested by the argmax.
    """
    if rule not in DETERMINED_RULES:
        raise ValueError(f"determined rule must be one of {DETERMINED_RULES}, got {rule!r}")
    K = log_e.shape[-1]
    if rule == "argmax" or K < 3:
        return log_e.argmax(dim=-1) == torch.arange(K, device=log_e.device)
    pairs = pair_log_evidence(log_e_views)
    eye = torch.eye(K, dtype=torch.bool, device=log_e.device)
    threshold = torch.quantile(pairs.masked_select(~eye), 1.0 - level)
    return torch.diagonal(pairs) > threshold


@dataclass
class BatchDivision:
    """Division of one batch of K pairs (all tensors ``(K,)``, on the scores' device).

    Attributes:
        u: fused uncertainty ``K / S``.
        u_bar: normalised uncertainty ``u / u_floor``.
        soft_label: training label ``y_i``: 1 for clean, 0 for noisy, the soft label for hard.
        projected: projected probability of the diagonal ``b_ii / (1 - u_i)``.
        sets: set code per pair (CLEAN, NOISY, HARD_CLEAN, HARD_NOISY), int64.
        belief_argmax: ``argmax_k b_i[k]``, int64.
    """

    u: Tensor
    u_bar: Tensor
    soft_label: Tensor
    projected: Tensor
    sets: Tensor
    belief_argmax: Tensor


def divide_batch(
    raw: Tensor,
    *,
    tau: float = 0.1,
    floor: EvidenceFloor = "keep",
    function: EvidenceFunction = "softplus",
    p: float = 0.5,
    epsilon: float = 0.5,
    soft_label: str = "projected",
    lam: int | None = None,
    centring: ScoreCentring = "none",
    null_level: float | None = None,
    determined_rule: str = "argmax",
    determined_level: float = 0.05,
) -> BatchDivision:
    """Four-way uncertainty-guided division of one batch (paper Eqs. 8-11, METHOD 6).

    * ``u_bar_i < p``: determined; clean (label 1) if ``argmax_k b_i[k] == i`` (paper), or
      with ``determined_rule="null_test"`` if its evidence is above the batch's mismatched pairs'
      ``1 - determined_level`` quantile (:func:`matched_pairs`); else noisy (label 0).
    * ``u_bar_i >= p``: hard; soft label ``y_i`` by :func:`hard_soft_label`
      (``"projected"`` = released ``b_ii / (1 - u_i)``, ``"belief"`` = paper ``b_ii``,
      ``"mean_rival"`` / ``"max_rival"`` = against an average / the strongest rival);
      hard-clean if ``y_i > epsilon``, else hard-noisy.

    Opinions are computed exactly in log space (:func:`fused_log_evidence`, no ceiling).
    Gradients are not tracked (the input is detached).

    Args:
        raw: raw scores ``(W, K, K)`` of K pairs (image i with caption i).
        tau, floor, function: evidence settings (:func:`ugncl.methods.ugncl.evidential.evidence`).
        p: uncertainty threshold on ``u_bar`` (paper: 0.5).
        epsilon: soft-label threshold for hard pairs (paper: 0.5).
        soft_label: soft-label rule of hard pairs (:func:`hard_soft_label`).
        lam: rivals of the ``"top_rival"`` rule.
        null_level: hard-clean also needs ``y`` above the ``1 - null_level`` quantile of the
            batch's mismatched pairs' soft labels (:func:`null_threshold`); None: ``epsilon``
            alone (paper).
        centring: ``"batch"`` centres each view's scores first
            (:func:`ugncl.methods.ugncl.evidential.centre_scores`) and normalises ``u`` by the
            batch of
            equal scores; ``"none"`` (paper).
        determined_rule, determined_level: the determined pairs' test
            (:func:`matched_pairs`; ``"argmax"`` is the paper's Eq. 9).

    Returns:
        A :class:`BatchDivision` (float32 tensors).
    """
    check_batch_scores(raw)
    with torch.no_grad():
        raw = centre_scores(raw.detach(), centring)
        log_e_views = log_evidence_exact(raw, tau, floor, function)
        log_e = _fuse_bidirectional(log_e_views)
        _, u, projected = _opinion_from_log_evidence(log_e)
        u_bar = normalised_uncertainty(
            u, raw.shape[0], floor, tau=tau, function=function, centred=centring == "batch"
        )
        argmax = log_e.argmax(dim=-1)
        determined = u_bar < p
        matched = matched_pairs(log_e, log_e_views, determined_rule, determined_level)
        y = hard_soft_label(log_e, soft_label, lam)
        # A batch of fewer than 3 pairs (an epoch's short tail) has no null to draw from.
        threshold = (
            log_e.new_tensor(epsilon) if null_level is None or log_e.shape[0] < 3
            else null_threshold(log_e, soft_label, lam, null_level, epsilon)
        )  # fmt: skip
        sets = torch.where(
            determined,
            torch.where(matched, CLEAN, NOISY),
            torch.where(y > threshold, HARD_CLEAN, HARD_NOISY),
        ).long()
        label = torch.where(determined, matched.to(y.dtype), y)
    f32 = torch.float32
    return BatchDivision(
        u=u.to(f32), u_bar=u_bar.to(f32), soft_label=label.to(f32),
        projected=projected.to(f32), sets=sets, belief_argmax=argmax,
    )  # fmt: skip


# ------------------------------------------------------------- whole-dataset accumulation


@dataclass
class DivisionResult:
    """Per-sample division of a whole training set, keyed by dataset sample index.

    Arrays have length ``num_samples``; samples no batch covered have ``sets == UNVISITED``
    (-1) and NaN in the float arrays.

    Attributes:
        u: fused uncertainty, float32.
        u_bar: normalised uncertainty, float32.
        soft_label: training label (1 clean, 0 noisy, soft for hard), float32.
        sets: set code, int8.
    """

    u: np.ndarray
    u_bar: np.ndarray
    soft_label: np.ndarray
    sets: np.ndarray

    def __len__(self) -> int:
        return len(self.sets)

    def lookup(
        self, index: Tensor, device: torch.device | str | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Division entries of one training batch, ready for ``ugncl_objective``.

        Args:
            index: dataset sample indices ``(K,)``.
            device: where to put the result (default: ``index.device``).

        Returns:
            ``(sets (K,) int64, soft_label (K,) float32, u_bar (K,) float32)``.

        Raises:
            ValueError: if an index is out of range or was never visited.
        """
        idx = _check_index(index, len(self))
        if (self.sets[idx] < 0).any():
            missing = idx[self.sets[idx] < 0][:5].tolist()
            raise ValueError(
                f"samples {missing} were not covered by the division pass; run it over the "
                "whole training set (drop_last=False) before training on its result"
            )
        device = index.device if device is None else device
        return (
            torch.as_tensor(self.sets[idx].astype(np.int64), device=device),
            torch.as_tensor(self.soft_label[idx], device=device),
            torch.as_tensor(self.u_bar[idx], device=device),
        )

    def to_state(self) -> dict[str, Tensor]:
        """Plain dict of CPU tensors (loads with ``torch.load(weights_only=True)``)."""
        return {
            "u": torch.from_numpy(self.u.copy()),
            "u_bar": torch.from_numpy(self.u_bar.copy()),
            "soft_label": torch.from_numpy(self.soft_label.copy()),
            "sets": torch.from_numpy(self.sets.copy()),
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> DivisionResult:
        """Inverse of :meth:`to_state`; accepts tensors or numpy arrays."""
        missing = {"u", "u_bar", "soft_label", "sets"} - set(state)
        if missing:
            raise ValueError(
                f"division state lacks keys {sorted(missing)}; it must come from "
                "DivisionResult.to_state()"
            )

        def arr(key: str, dtype: type) -> np.ndarray:
            v = state[key]
            v = v.detach().cpu().numpy() if isinstance(v, Tensor) else np.asarray(v)
            return v.astype(dtype, copy=True)

        out = cls(
            u=arr("u", np.float32),
            u_bar=arr("u_bar", np.float32),
            soft_label=arr("soft_label", np.float32),
            sets=arr("sets", np.int8),
        )
        if len({len(out.u), len(out.u_bar), len(out.soft_label), len(out.sets)}) != 1:
            raise ValueError("division state arrays have different lengths; the state is corrupt")
        return out


def _check_index(index: Tensor | np.ndarray, n: int) -> np.ndarray:
    idx = index.detach().cpu().numpy() if isinstance(index, Tensor) else np.asarray(index)
    idx = idx.astype(np.int64).reshape(-1)
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise ValueError(
            f"sample index out of range [0, {n}): min {idx.min()}, max {idx.max()}; pass the "
            "dataset sample index (PairBatch.index), not the position in the batch"
        )
    return idx


class DivisionAccumulator:
    """Collects :class:`BatchDivision` results of a pass over the training set.

    Args:
        num_samples: size of the training set (number of pairs / captions).
    """

    def __init__(self, num_samples: int) -> None:
        if num_samples < 0:
            raise ValueError(f"num_samples must be >= 0, got {num_samples}")
        self._u = np.full(num_samples, np.nan, dtype=np.float32)
        self._u_bar = np.full(num_samples, np.nan, dtype=np.float32)
        self._soft = np.full(num_samples, np.nan, dtype=np.float32)
        self._sets = np.full(num_samples, UNVISITED, dtype=np.int8)

    def add(self, index: Tensor, div: BatchDivision) -> None:
        """Record one batch; a sample seen twice keeps its latest value.

        Args:
            index: dataset sample indices ``(K,)`` of the batch's pairs, in batch order.
            div: the batch's division.
        """
        idx = _check_index(index, len(self._sets))
        if idx.shape[0] != div.sets.shape[0]:
            raise ValueError(
                f"index has {idx.shape[0]} entries but the division covers "
                f"{div.sets.shape[0]} pairs"
            )
        self._u[idx] = div.u.detach().float().cpu().numpy()
        self._u_bar[idx] = div.u_bar.detach().float().cpu().numpy()
        self._soft[idx] = div.soft_label.detach().float().cpu().numpy()
        self._sets[idx] = div.sets.detach().cpu().numpy().astype(np.int8)

    @classmethod
    def from_result(cls, result: DivisionResult) -> DivisionAccumulator:
        """An accumulator that already holds ``result`` (recording continues on top of it)."""
        out = cls(len(result))
        out.copy_from(result, np.arange(len(result)))
        return out

    def copy_from(self, result: DivisionResult, index: np.ndarray) -> None:
        """Overwrite samples ``index`` with their entries in ``result`` (same length)."""
        if len(result) != len(self._sets):
            raise ValueError(
                f"division of {len(result)} samples cannot update an accumulator of "
                f"{len(self._sets)}"
            )
        idx = _check_index(index, len(self._sets))
        self._u[idx] = result.u[idx]
        self._u_bar[idx] = result.u_bar[idx]
        self._soft[idx] = result.soft_label[idx]
        self._sets[idx] = result.sets[idx]

    def result(self) -> DivisionResult:
        """Copies of the collected arrays."""
        return DivisionResult(
            u=self._u.copy(), u_bar=self._u_bar.copy(), soft_label=self._soft.copy(),
            sets=self._sets.copy(),
        )  # fmt: skip


# ------------------------------------------------------------------------- quality


def _ratio(num: int, den: int) -> float:
    return float(num) / den if den else 0.0


def hard_division(keep: np.ndarray) -> DivisionResult:
    """A division given from outside the model: ``keep`` pairs hard-clean with soft label 1,
    the others hard-noisy with soft label 0, every pair hard (``u_bar = 1``, the regime of a
    learned division at xi1 = 0.1).

    Args:
        keep: ``(N,)`` bool, the pairs to train as clean.

    Returns:
        A :class:`DivisionResult` over the N pairs.
    """
    keep = np.asarray(keep, dtype=bool)
    ones = np.ones(len(keep), dtype=np.float32)
    return DivisionResult(
        u=ones,
        u_bar=ones.copy(),
        soft_label=keep.astype(np.float32),
        sets=np.where(keep, HARD_CLEAN, HARD_NOISY).astype(np.int8),
    )


def called_clean(sets: np.ndarray | Tensor) -> np.ndarray | Tensor:
    """``(N,)`` bool: the pairs a division keeps as clean (CLEAN or HARD_CLEAN); unvisited
    pairs are neither clean nor noisy. Arrays and tensors alike."""
    return (sets == CLEAN) | (sets == HARD_CLEAN)


def called_noisy(sets: np.ndarray) -> np.ndarray:
    """``(N,)`` bool: the pairs a division calls noisy (NOISY or HARD_NOISY)."""
    return (sets == NOISY) | (sets == HARD_NOISY)


def division_quality(sets: np.ndarray | Tensor, clean: np.ndarray | Tensor) -> dict[str, Any]:
    """Division quality against ground-truth clean flags (METHOD 6, "record per epoch").

    "Noisy" predictions are NOISY or HARD_NOISY. Unvisited samples (``sets == -1``) are
    ignored. Undefined precision/recall/F1 (0/0) are 0.0 (scikit-learn's
    ``zero_division=0``); the clean share of an empty set is ``None`` (not NaN, not 0.0, which
    would read as "all noisy").

    Args:
        sets: set codes ``(N,)``.
        clean: ground-truth flags ``(N,)``, True for a correctly matched pair.

    Returns:
        ``n_clean, n_noisy, n_hard_clean, n_hard_noisy`` (int), ``noisy_precision,
        noisy_recall, noisy_f1`` (float), ``clean_share_clean, clean_share_noisy,
        clean_share_hard_clean, clean_share_hard_noisy`` (float or None).
    """
    s = sets.detach().cpu().numpy() if isinstance(sets, Tensor) else np.asarray(sets)
    c = clean.detach().cpu().numpy() if isinstance(clean, Tensor) else np.asarray(clean)
    if s.shape != c.shape or s.ndim != 1:
        raise ValueError(
            f"sets {s.shape} and clean {c.shape} must be 1-D arrays of the same length"
        )
    keep = s >= 0
    s, c = s[keep].astype(np.int64), c[keep].astype(bool)
    out: dict[str, Any] = {}
    for code, name in SET_NAMES.items():
        out[f"n_{name}"] = int((s == code).sum())
    pred_noisy = called_noisy(s)
    true_noisy = ~c
    tp = int((pred_noisy & true_noisy).sum())
    precision = _ratio(tp, int(pred_noisy.sum()))
    recall = _ratio(tp, int(true_noisy.sum()))
    out["noisy_precision"] = precision
    out["noisy_recall"] = recall
    out["noisy_f1"] = (
        2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    )
    for code, name in SET_NAMES.items():
        members = s == code
        n = int(members.sum())
        out[f"clean_share_{name}"] = float(c[members].sum()) / n if n else None
    return out
