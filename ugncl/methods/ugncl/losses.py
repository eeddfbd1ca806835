"""Batch losses: trusted robust loss and the UGNCL objectives (Eqs. 12-18); the VSE++ hinge
(Eq. 1) and the plain triplet objective live in :mod:`ugncl.methods.hinge` (re-exported).

Score matrices are ``(K, K)`` with rows = images and columns = captions of one batch, pair
``i`` = (image i, caption i); raw model output is ``(W, K, K)`` for W image views. Objectives
return dicts of named terms: the trainer back-propagates the sum of the entries whose key
starts with ``"loss"`` and logs the rest as diagnostics (detached scalars).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor

from ugncl.methods.hinge import (
    check_square,
    hinge_costs,
    mean_over_views,
    triplet_objective,
    vse_hinge,
)
from ugncl.methods.ugncl.division import (
    CLEAN,
    HARD_CLEAN,
    HARD_NOISY,
    NOISY,
    called_clean,
    check_batch_scores,
)
from ugncl.methods.ugncl.evidential import (
    EvidenceFloor,
    EvidenceFunction,
    ScoreCentring,
    _wide_dtype,
    centre_scores,
    ds_combine_many,
    edl_terms,
    evidence,
    trusted_margin_factor,
)

__all__ = [
    "edl_targets",
    "evidential_loss",
    "lambda_schedule",
    "soft_margin",
    "triplet_objective",
    "trusted_margins",
    "trusted_robust_loss",
    "ugncl_objective",
    "vse_hinge",
    "warmup_objective",
]

EvidentialMode = Literal["fused", "per_view"]
HardTarget = Literal["soft", "set"]
HARD_TARGETS: tuple[str, ...] = ("soft", "set")


def _check_per_pair(t: Tensor, K: int, name: str) -> None:
    if t.shape != (K,):
        raise ValueError(
            f"{name} must have shape ({K},) (one entry per pair), got {tuple(t.shape)}"
        )


# --------------------------------------------------------------------------- TRL (Eqs. 16-17)


def soft_margin(y: Tensor, gamma: float = 0.2, m: float = 10.0) -> Tensor:
    """Soft margin ``gamma * (m**y - 1) / (m - 1)`` of a soft label (paper Eq. 17; as NCR).

    Args:
        y: soft labels, any shape, in ``[0, 1]``.
        gamma: base margin (0.2).
        m: curvature (10), ``> 0`` and ``!= 1``.

    Returns:
        Margins in ``[0, gamma]``, same shape as ``y``.
    """
    if m <= 0 or m == 1:
        raise ValueError(f"soft-margin base m must be > 0 and != 1, got {m}; the paper uses 10")
    return gamma * torch.expm1(y * math.log(m)) / (m - 1.0)


def lambda_schedule(K: int, step: int, delta: float = 0.025, theta: int = 5) -> int:
    """Number of hard negatives ``lambda = max(floor(K - delta * step), theta)`` (Eq. 16).

    ``step`` is the global optimiser step (the released schedule; see METHOD 8). The result
    is clipped to the available negatives ``K - 1`` (a short last batch included) and to at
    least 1.

    Args:
        K: size of the current batch.
        step: global optimiser step, ``>= 0``.
        delta: decay per step (0.025).
        theta: lower bound (5).

    Returns:
        ``lambda`` in ``[1, max(K - 1, 1)]``.
    """
    if K < 1 or step < 0:
        raise ValueError(f"lambda_schedule needs K >= 1 and step >= 0, got K={K}, step={step}")
    lam = max(math.floor(K - delta * step), theta)
    return max(1, min(lam, K - 1))


def trusted_margins(
    sets: Tensor,
    soft_label: Tensor,
    u_bar: Tensor,
    *,
    gamma: float = 0.2,
    m: float = 10.0,
    delta: float = 10.0,
) -> Tensor:
    """Per-pair margins of the trusted robust loss (paper Eq. 17, METHOD 8).

    CLEAN: ``gamma``; HARD_CLEAN: ``f_C(u_bar) * soft_margin(y)``; HARD_NOISY:
    ``f_N(u_bar) * soft_margin(y)``; NOISY: 0 (the pair gets no triplet term anyway).

    Args:
        sets: set codes ``(K,)``.
        soft_label: soft labels ``y`` ``(K,)``.
        u_bar: normalised uncertainty ``(K,)``.
        gamma, m: soft-margin parameters.
        delta: trusted-margin steepness ``Delta`` (10).

    Returns:
        Margins ``(K,)`` in ``[0, gamma]``, dtype/device of ``soft_label``.
    """
    y = soft_label
    hat = soft_margin(y.clamp(0.0, 1.0), gamma, m)
    f_c = trusted_margin_factor(u_bar, delta, clean=True).to(y.dtype)
    f_n = trusted_margin_factor(u_bar, delta, clean=False).to(y.dtype)
    zero = torch.zeros_like(y)
    margins = torch.where(sets == CLEAN, torch.full_like(y, gamma), zero)
    margins = torch.where(sets == HARD_CLEAN, f_c * hat, margins)
    return torch.where(sets == HARD_NOISY, f_n * hat, margins)


def trusted_robust_loss(
    scores: Tensor, margins: Tensor, sets: Tensor, lam: int, *, hard_noisy: bool = True
) -> Tensor:
    """Trusted robust loss of one view (paper Eq. 16), summed over anchors.

    Per pair k and each direction (image k against captions, caption k against images):
    CLEAN -> hinge with the hardest negative; HARD_CLEAN / HARD_NOISY -> mean hinge over the
    ``lam`` hardest negatives; NOISY (or any other code) -> nothing. The margin is the
    anchor's ``margins[k]`` in both directions. Summed over the batch like the released
    ``TRL_loss`` (not averaged), so ``xi2`` keeps its released scale.

    Args:
        scores: similarity ``(K, K)`` (UGNCL feeds ``tanh(raw)``).
        margins: per-pair margins ``(K,)`` (:func:`trusted_margins`).
        sets: set codes ``(K,)``.
        lam: number of hard negatives; clipped to ``[1, K - 1]``.

    Returns:
        Scalar.
    """
    K = check_square(scores)
    _check_per_pair(margins, K, "margins")
    _check_per_pair(sets, K, "sets")
    lam = max(1, min(int(lam), K - 1))
    margins = margins.to(device=scores.device, dtype=scores.dtype)
    sets = sets.to(scores.device)
    per_anchor = scores.new_zeros(K)
    clean = sets == CLEAN
    hard = (sets == HARD_CLEAN) | ((sets == HARD_NOISY) & hard_noisy)
    for cost in hinge_costs(scores, margins):
        hardest = cost.max(dim=1).values
        # Costs are >= 0 and the diagonal is 0, so the top-lam over all K columns equals the
        # top-lam over the K - 1 negatives (lam <= K - 1).
        top_mean = cost.topk(lam, dim=1).values.mean(dim=1)
        per_anchor = per_anchor + torch.where(clean, hardest, torch.where(hard, top_mean, 0.0))
    return per_anchor.sum()


# ---------------------------------------------------------------- evidential loss (Eqs. 12-15)


def evidential_loss(
    raw: Tensor,
    labels: Tensor,
    *,
    tau: float = 0.1,
    ceiling: float | None = 50.0,
    floor: EvidenceFloor = "keep",
    function: EvidenceFunction = "softplus",
    kl_weight: float = 0.1,
    evidential: EvidentialMode = "fused",
    query_weight: Tensor | None = None,
) -> dict[str, Tensor]:
    """``L_e = L_e^i2t + L_e^t2i`` averaged over the batch (paper Eqs. 12-15, METHOD 7).

    Target of query i: ``one_hot(i) * labels[i]``. Image-to-text queries are rows
    (``alpha = e[i, :] + 1``), text-to-image queries are columns (``alpha = e[:, j] + 1``).
    ``"fused"``: each direction's opinions are fused over views by DST (Eq. 14) and the loss
    is taken on the fused Dirichlet; ``"per_view"`` (released code): loss per view,
    averaged over views.

    The fused opinion is built and the loss evaluated in float64 (float32 on MPS) with no
    cap on the fused strength. Decision: the former cap ``S <= 2K exp(ceiling)``
    scaled ``alpha - 1`` to a fixed strength, so the loss stopped depending on the evidence
    and a confidently scored noisy pair (softplus, raw 4, K 32, W 2) got ``d L / d raw``
    ~1e-5 instead of ~1 (``per_view``). Per-view log evidence is at most ``ceiling`` (50) or
    ``1 / tau`` (tanh), so the fused strength (about ``S1 S2 / K``) fits float64.

    Args:
        raw: raw scores ``(W, K, K)``.
        labels: soft labels ``(K,)`` (1 clean, 0 noisy, soft for hard; ones in warm-up).
        tau, ceiling, floor, function: evidence settings.
        kl_weight: ``xi1``.
        evidential: ``"fused"`` or ``"per_view"``.
        query_weight: ``(K,)`` weight of pair ``i``'s two queries (image row ``i``, caption
            column ``i``); the terms are ``sum_i w_i l_i / K``. None: every weight 1 (the
            plain mean). 0 leaves a pair's queries out (``noisy_edl: false``); its scores
            still enter the other queries as rivals.

    Returns:
        ``{"loss": L_e, "i2t", "t2i", "ls", "kl"}``; ``ls + kl_weight * kl == loss``.
    """
    W, K = check_batch_scores(raw)
    _check_per_pair(labels, K, "labels")
    if evidential not in ("fused", "per_view"):
        raise ValueError(f"evidential must be 'fused' or 'per_view', got {evidential!r}")
    e = evidence(raw, tau=tau, ceiling=ceiling, floor=floor, function=function)
    target = torch.diag_embed(labels.to(device=e.device, dtype=e.dtype))
    if query_weight is not None:
        _check_per_pair(query_weight, K, "query_weight")
        query_weight = query_weight.to(device=e.device)

    def batch_mean(per_query: Tensor) -> Tensor:  # (K,) -> () in e's dtype
        if query_weight is None:
            return per_query.mean().to(e.dtype)
        return ((per_query * query_weight.to(per_query.dtype)).sum() / K).to(e.dtype)

    out: dict[str, Tensor] = {}
    ls_total = kl_total = e.new_zeros(())
    for name, alpha in (("i2t", e + 1.0), ("t2i", e.transpose(1, 2) + 1.0)):
        if evidential == "fused":
            fused, _, _ = ds_combine_many(alpha.to(_wide_dtype(alpha)))
            ls, kl = (batch_mean(t) for t in edl_terms(fused, target))
        else:
            terms = [edl_terms(alpha[w], target) for w in range(W)]
            ls = torch.stack([batch_mean(t[0]) for t in terms]).mean()
            kl = torch.stack([batch_mean(t[1]) for t in terms]).mean()
        out[name] = ls + kl_weight * kl
        ls_total = ls_total + ls
        kl_total = kl_total + kl
    out["loss"] = out["i2t"] + out["t2i"]
    out["ls"], out["kl"] = ls_total, kl_total
    return out


# ------------------------------------------------------------------------ objectives (Eq. 18)


def edl_targets(sets: Tensor, soft_label: Tensor, hard_target: HardTarget = "soft") -> Tensor:
    """Per-pair target of the evidential loss (Eq. 15; ``"set"`` is measured, not the default).

    ``"soft"`` (paper): the division's label, 1 / 0 for determined pairs and ``y`` for hard
    ones. ``"set"``: 1 for CLEAN and HARD_CLEAN, 0 for NOISY and HARD_NOISY. Why: with every
    pair hard (``u ~ 1``, docs/methods/ugncl.md) a target ``y`` leaves ``1 - y`` of the KL
    term on the pair's own diagonal evidence (``alpha_tilde = y + (1 - y) alpha``) and still
    rewards the diagonal in the least-squares term for any ``y > p_ii ~ 1/K``, so a hard-noisy
    pair at ``y = 0.45`` is trained almost like a hard-clean one at 0.55: the division barely
    reaches ``L_e``. Over the 14-run grid ``"set"`` moved which run stalls without raising the
    mean (docs/methods/ugncl.md, "The evidential target of hard pairs").

    Args:
        sets: set codes ``(K,)``.
        soft_label: the division's labels ``(K,)``.
        hard_target: ``"soft"`` or ``"set"``.

    Returns:
        ``(K,)`` targets, dtype and device of ``soft_label``.
    """
    if hard_target not in HARD_TARGETS:
        raise ValueError(f"hard_target must be one of {HARD_TARGETS}, got {hard_target!r}")
    if hard_target == "soft":
        return soft_label
    return called_clean(sets.to(soft_label.device)).to(soft_label.dtype)


def ugncl_objective(
    raw: Tensor,
    *,
    sets: Tensor,
    soft_label: Tensor,
    u_bar: Tensor,
    lam: int,
    tau: float = 0.1,
    ceiling: float | None = 50.0,
    floor: EvidenceFloor = "keep",
    function: EvidenceFunction = "softplus",
    kl_weight: float = 0.1,
    trl_weight: float = 0.8,
    gamma: float = 0.2,
    margin_base: float = 10.0,
    trust_delta: float = 10.0,
    evidential: EvidentialMode = "fused",
    hard_noisy_trl: bool = True,
    noisy_edl: bool = True,
    hard_target: HardTarget = "soft",
    centring: ScoreCentring = "none",
) -> dict[str, Tensor]:
    """UGNCL batch objective ``L = L_e + xi2 * L_t`` (paper Eq. 18, METHOD 7-9).

    Args:
        raw: raw scores ``(W, K, K)`` (with gradients).
        sets: set codes ``(K,)`` of the batch's pairs (from the division).
        soft_label: labels ``(K,)``: 1 clean, 0 noisy, soft for hard pairs.
        u_bar: normalised uncertainty ``(K,)``.
        lam: hard negatives (:func:`lambda_schedule`).
        tau, ceiling, floor, function: evidence settings.
        kl_weight: ``xi1`` (0.1).
        trl_weight: ``xi2`` (paper 0.8, released 0.2).
        gamma: base margin (0.2).
        margin_base: soft-margin base ``m`` (10).
        trust_delta: ``Delta`` (10).
        evidential: ``"fused"`` (Eq. 14) or ``"per_view"`` (released).
        hard_noisy_trl: hard-noisy pairs get the trusted-margin hinge (paper Eq. 16); False
            leaves them out of ``L_t`` like determined-noisy pairs.
        noisy_edl: pairs divided noisy (NOISY, HARD_NOISY) enter ``L_e`` with their label as
            target (paper Eq. 15: 0, or the soft label); False leaves their two queries out
            of ``L_e`` (weight 0 in :func:`evidential_loss`), so a clean pair the division
            got wrong is not pushed down.
        hard_target: target of hard pairs in ``L_e``: ``"soft"`` (paper Eq. 15: the soft label
            ``y``) or ``"set"`` (their set's: 1 for HARD_CLEAN, 0 for HARD_NOISY). The margins
            of ``L_t`` keep ``y`` either way (Eq. 17).
        centring: ``"batch"`` centres each view's scores before both terms
            (:func:`ugncl.methods.ugncl.evidential.centre_scores`); ``"none"`` (paper).

    Returns:
        ``loss_edl`` (``L_e``), ``loss_trl`` (``xi2 * L_t``, ``L_t`` = TRL on ``tanh(raw)``
        averaged over views) and detached diagnostics ``edl_i2t, edl_t2i, edl_ls, edl_kl, trl``
        (unweighted ``L_t``), ``margin_mean`` (mean margin over non-noisy pairs).
    """
    _, K = check_batch_scores(raw)
    for t, name in ((sets, "sets"), (soft_label, "soft_label"), (u_bar, "u_bar")):
        _check_per_pair(t, K, name)
    raw = centre_scores(raw, centring)
    sets = sets.to(raw.device)
    weight = None if noisy_edl else called_clean(sets).to(raw.dtype)
    edl = evidential_loss(
        raw, edl_targets(sets, soft_label, hard_target), tau=tau, ceiling=ceiling, floor=floor,
        function=function, kl_weight=kl_weight, evidential=evidential, query_weight=weight,
    )  # fmt: skip
    margins = trusted_margins(
        sets, soft_label.to(device=raw.device, dtype=raw.dtype),
        u_bar.to(raw.device), gamma=gamma, m=margin_base, delta=trust_delta,
    )  # fmt: skip
    # Triplet scores are tanh(raw), as released (METHOD 8); one TRL per view, averaged.
    trl = mean_over_views(
        raw,
        lambda s: trusted_robust_loss(torch.tanh(s), margins, sets, lam, hard_noisy=hard_noisy_trl),
    )
    used = (sets != NOISY).to(margins.dtype)
    margin_mean = (margins * used).sum() / used.sum().clamp_min(1.0)  # no host sync
    return {
        "loss_edl": edl["loss"],
        "loss_trl": trl_weight * trl,
        "edl_i2t": edl["i2t"].detach(),
        "edl_t2i": edl["t2i"].detach(),
        "edl_ls": edl["ls"].detach(),
        "edl_kl": edl["kl"].detach(),
        "trl": trl.detach(),
        "margin_mean": margin_mean.detach(),
    }


def warmup_objective(
    raw: Tensor,
    *,
    lam: int,
    tau: float = 0.1,
    ceiling: float | None = 50.0,
    floor: EvidenceFloor = "keep",
    function: EvidenceFunction = "softplus",
    kl_weight: float = 0.1,
    trl_weight: float = 0.8,
    gamma: float = 0.2,
    evidential: EvidentialMode = "fused",
    centring: ScoreCentring = "none",
) -> dict[str, Tensor]:
    """Warm-up objective (METHOD 9): identity-target ``L_e`` + ``xi2`` x top-lam hinge.

    The hinge treats every pair as an anchor with margin ``gamma`` and averages the ``lam``
    hardest negatives in each direction (the released warm-up ``TRL_loss``), on
    ``tanh(raw)``, averaged over views.

    Args:
        raw: raw scores ``(W, K, K)``.
        lam: hard negatives (:func:`lambda_schedule`).
        tau, ceiling, floor, function, kl_weight, trl_weight, gamma, evidential, centring:
            as in :func:`ugncl_objective`.

    Returns:
        ``loss_edl``, ``loss_trl`` and detached ``edl_i2t, edl_t2i, edl_ls, edl_kl, trl``.
    """
    _, K = check_batch_scores(raw)
    raw = centre_scores(raw, centring)
    ones = torch.ones(K, dtype=raw.dtype, device=raw.device)
    edl = evidential_loss(
        raw, ones, tau=tau, ceiling=ceiling, floor=floor, function=function,
        kl_weight=kl_weight, evidential=evidential,
    )  # fmt: skip
    margins = torch.full((K,), gamma, dtype=raw.dtype, device=raw.device)
    sets = torch.full((K,), HARD_CLEAN, dtype=torch.long, device=raw.device)
    trl = mean_over_views(raw, lambda s: trusted_robust_loss(torch.tanh(s), margins, sets, lam))
    return {
        "loss_edl": edl["loss"],
        "loss_trl": trl_weight * trl,
        "edl_i2t": edl["i2t"].detach(),
        "edl_t2i": edl["t2i"].detach(),
        "edl_ls": edl["ls"].detach(),
        "edl_kl": edl["kl"].detach(),
        "trl": trl.detach(),
    }
