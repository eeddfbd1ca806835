"""Evidential maths of UGNCL as pure tensor functions (paper Eqs. 3-7, 12-15, 17).

Every function takes and returns tensors, never modules or config objects, and creates new
tensors on the device and dtype of its inputs. Equation numbers refer to the UGNCL paper;
docs/methods/ugncl.md fixes the reading of each equation.

Numerical contract (the reason for most of the code below):

* Two evidence functions (``function``): ``"softplus"`` is the paper's and released
  ``exp(softplus(r) / tau)``, ``>= 1`` (the floor) and unbounded; ``"tanh"`` is DECL's
  ``exp(tanh(r) / tau)``, in ``[exp(-1/tau), exp(1/tau)]`` and 1 at ``r = 0`` (our default,
  docs/methods/ugncl.md).
* ``exp(softplus(r) / tau)`` overflows float32 for ``r > ~8.9`` at ``tau = 0.1``. The log
  evidence is therefore clamped at ``ceiling`` (default 50, so ``e <= 5.2e21`` and a strength
  ``S`` over 256 candidates stays below 1.4e24).
* Dempster-Shafer fusion multiplies strengths (the fused ``S`` is about ``S1 * S2 / K``). It
  is evaluated in its exact evidence form ``e = e1 + e2 + e1 * e2 / K`` (no ``1 - C``
  division, no inf/NaN gradients near total conflict) in float64, and the strength of the
  returned ``alpha`` can be capped (``max_log_strength``). The evidential loss fuses in
  float64 without a cap (a cap removes the loss's dependence on the strength, so a
  confidently memorised pair gets no gradient).
* ``lgamma(S) - sum lgamma(alpha)`` cancels catastrophically for large ``alpha``; the KL is
  rewritten so that the large terms cancel analytically (see ``_kl_to_uniform``) and the
  evidential loss is evaluated in float64 (where the device has it) and cast back.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "centre_scores",
    "ds_combine",
    "ds_combine_many",
    "edl_loss",
    "edl_terms",
    "evidence",
    "log_ds_combine_many",
    "log_evidence",
    "log_evidence_exact",
    "min_log_evidence",
    "opinion",
    "trusted_margin_factor",
]

EvidenceFloor = Literal["keep", "subtract"]
_FLOORS = ("keep", "subtract")
EvidenceFunction = Literal["tanh", "softplus"]
_FUNCTIONS = ("tanh", "softplus")
ScoreCentring = Literal["batch", "none"]
CENTRINGS = ("batch", "none")


def _check_function(function: str, floor: str = "keep") -> None:
    if function not in _FUNCTIONS:
        raise ValueError(
            f"evidence function must be one of {_FUNCTIONS}, got {function!r}; use 'tanh' "
            "(DECL's exp(tanh(r)/tau), our default) or 'softplus' (paper/released)"
        )
    if function == "tanh" and floor != "keep":
        raise ValueError(
            "evidence_floor 'subtract' applies to softplus evidence only (tanh evidence has no "
            "floor: it tends to 0 for r << 0); set evidence_floor: keep or evidence: softplus"
        )


def _check_floor(floor: str) -> None:
    if floor not in _FLOORS:
        raise ValueError(
            f"evidence floor must be one of {_FLOORS}, got {floor!r}; use 'keep' (released "
            "evidence, e >= 1) or 'subtract' (Subjective Logic, e - 1 >= 0)"
        )


def _at_least_float32(x: Tensor) -> Tensor:
    # Half precision cannot hold exp(50); evidence is always computed in float32 or wider.
    if not x.is_floating_point() or torch.finfo(x.dtype).bits < 32:
        return x.float()
    return x


def _wide_dtype(x: Tensor) -> torch.dtype:
    # float64 for the lgamma/digamma differences (see module docstring); MPS has no float64.
    return torch.float32 if x.device.type == "mps" else torch.float64


# ----------------------------------------------------------------------------- evidence (Eq. 3)


def log_evidence(
    raw: Tensor,
    tau: float = 0.1,
    ceiling: float | None = 50.0,
    function: EvidenceFunction = "softplus",
) -> Tensor:
    """Log evidence ``f(raw) / tau`` capped at ``ceiling`` (paper Eq. 3 in log space).

    ``f`` is ``softplus`` (paper, released) or ``tanh`` (DECL; bounded by ``1 / tau``, so the
    ceiling never binds for ``tau >= 1 / ceiling``).

    The cap is a hard clamp in the forward pass with a straight-through gradient above it:
    the backward pass uses ``d(softplus(raw)/tau)/d raw = sigmoid(raw)/tau`` (at most
    ``1/tau``) everywhere. Decision: a plain clamp would give zero gradient for every score
    above ``raw ~ 5`` (``tau = 0.1``), so a negative pair stuck above the ceiling could never be
    pushed down by the evidential loss (and tanh in the triplet term is saturated there too);
    a soft ceiling ``c - softplus(c - x)`` only delays the same vanishing gradient. With the
    straight-through rule the forward value stays bounded (no overflow anywhere downstream)
    and the gradient keeps the right sign and stays finite for every finite ``raw``.

    Args:
        raw: raw (pre-sigmoid) similarity scores, any shape.
        tau: temperature (paper: 0.1).
        ceiling: maximum log evidence; ``None`` or ``inf`` disables the cap (use that only
            for ranking in log space, never before ``exp``).
        function: ``"softplus"`` or ``"tanh"``.

    Returns:
        Log evidence, same shape as ``raw``, float32 or wider, at most ``ceiling``.
    """
    if tau <= 0:
        raise ValueError(f"tau must be > 0, got {tau}; the paper uses tau = 0.1")
    _check_function(function)
    raw = _at_least_float32(raw)
    x = (torch.tanh(raw) if function == "tanh" else F.softplus(raw)) / tau
    if ceiling is None or math.isinf(ceiling):
        return x
    capped = x.clamp(max=ceiling)
    # Straight-through above the ceiling: value of the clamp, gradient of the identity.
    return x + (capped - x).detach()


def evidence(
    raw: Tensor,
    tau: float = 0.1,
    ceiling: float | None = 50.0,
    floor: EvidenceFloor = "keep",
    function: EvidenceFunction = "softplus",
) -> Tensor:
    """Evidence ``exp(f(raw) / tau)`` (paper Eq. 3), finite for any finite ``raw``.

    Args:
        raw: raw similarity scores, any shape.
        tau: temperature.
        ceiling: cap on the log evidence (see :func:`log_evidence`).
        floor: ``"keep"`` returns the released evidence, always ``>= 1`` (the evidence
            floor, docs/methods/ugncl.md); ``"subtract"`` returns ``e - 1 >= 0`` so that a score
            at the floor carries no evidence (Subjective Logic). Softplus only.
        function: ``"softplus"`` (paper) or ``"tanh"`` (DECL).

    Returns:
        Evidence, same shape as ``raw``.
    """
    _check_floor(floor)
    _check_function(function, floor)
    log_e = log_evidence(raw, tau, ceiling, function)
    return torch.exp(log_e) if floor == "keep" else torch.expm1(log_e)


def centre_scores(raw: Tensor, centring: ScoreCentring = "batch") -> Tensor:
    """Subtract each view's batch mean from its raw scores (switch ``method.ugncl.centring``).

    Ranking, the division's argmax and every hinge difference are unchanged by a shift common
    to all scores of a batch; only the evidence ``exp(f(r) / tau)`` sees it. Uncentred, the KL
    term of Eq. 13 lowers every off-target evidence at once by lowering that shared offset (one
    scalar head scores all pairs), the diagonal follows, and every evidence ends near
    ``exp(-1/tau)`` where neither the evidential loss nor ``u`` carries information. Centred,
    the offset gets no gradient (the mean is subtracted with its gradient), so the loss can
    only change how the scores differ. The mean is over the ``K x K`` scores of each view.

    Args:
        raw: raw scores ``(W, K, K)``.
        centring: ``"batch"`` (subtract the per-view mean) or ``"none"`` (paper, released).

    Returns:
        Scores ``(W, K, K)``; ``raw`` itself for ``"none"``.
    """
    if centring not in CENTRINGS:
        raise ValueError(f"score centring must be one of {CENTRINGS}, got {centring!r}")
    if centring == "none":
        return raw
    return raw - raw.mean(dim=(-2, -1), keepdim=True)


def min_log_evidence(
    tau: float = 0.1,
    floor: EvidenceFloor = "keep",
    function: EvidenceFunction = "softplus",
    *,
    centred: bool = False,
) -> float:
    """Log evidence of the vacuous batch, the normaliser of ``u_bar``.

    Uncentred scores: the infimum of the log evidence (``-inf`` when the evidence can reach
    0): softplus ``keep`` 0 (the floor ``e >= 1``), softplus ``subtract`` ``-inf``, tanh
    ``-1 / tau``. Centred scores (:func:`centre_scores`): the log evidence at the batch mean,
    raw 0 (tanh 0, softplus ``log 2 / tau`` or its ``subtract`` form), because a batch whose
    scores are all equal is the state without information once the offset is removed.
    """
    _check_floor(floor)
    _check_function(function, floor)
    if centred:
        x = (0.0 if function == "tanh" else math.log(2.0)) / tau
        return x if floor == "keep" else x + math.log(-math.expm1(-x))
    if function == "tanh":
        return -1.0 / tau
    return 0.0 if floor == "keep" else -math.inf


def log_evidence_exact(
    raw: Tensor,
    tau: float = 0.1,
    floor: EvidenceFloor = "keep",
    function: EvidenceFunction = "softplus",
) -> Tensor:
    """``log evidence(raw)`` with no ceiling, in float64 (float32 on MPS); no gradient use.

    For ranking and the division: a cap would tie every score above it. ``subtract`` gives
    ``log(expm1(x)) = x + log(-expm1(-x))`` (``-inf`` at ``x = 0``).
    """
    _check_floor(floor)
    _check_function(function, floor)
    x = log_evidence(raw.to(_wide_dtype(raw)), tau, None, function)
    if floor == "subtract":
        x = x + torch.log(-torch.expm1(-x))
    return x


# ------------------------------------------------------------------ opinions and DST (Eqs. 5-7)


def opinion(alpha: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Subjective opinion of Dirichlet parameters (paper Eqs. 5-6).

    Args:
        alpha: Dirichlet parameters ``(N, K)`` (any leading shape), all ``>= 1``.

    Returns:
        ``(b, u, S)``: beliefs ``(N, K) = (alpha - 1) / S``, uncertainty ``(N,) = K / S`` and
        strength ``(N,) = sum_k alpha``; ``b.sum(-1) + u == 1``.
    """
    K = alpha.shape[-1]
    S = alpha.sum(dim=-1)
    b = (alpha - 1.0) / S.unsqueeze(-1)
    u = K / S
    return b, u, S


def _check_views_same_shape(views: list[Tensor]) -> None:
    if not views:
        raise ValueError("ds_combine_many needs at least one view, got an empty sequence")
    shapes = {tuple(a.shape) for a in views}
    if len(shapes) != 1:
        raise ValueError(
            f"all views must have the same shape (N, K) (the same N queries over K candidates), "
            f"got {sorted(shapes)}"
        )


def ds_combine(
    alpha1: Tensor, alpha2: Tensor, *, max_log_strength: float | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """Fuse two Dirichlet opinions with the reduced Dempster-Shafer rule (paper Eq. 7).

    The TMC rule ``b = (b1*b2 + b1*u2 + b2*u1) / (1 - C)``, ``u = u1*u2 / (1 - C)``,
    ``C = sum_{j != k} b1_j b2_k``, back to Dirichlet with ``S = K / u``, ``alpha = b*S + 1``,
    is evaluated in its equivalent evidence form (substitute ``b = e / S``, ``u = K / S``;
    ``1 - C`` cancels): ``e = e1 + e2 + e1 * e2 / K`` elementwise, ``e = alpha - 1``. That form
    has no division by ``1 - C``, so total conflict (``u1 = u2 = 0`` with disjoint beliefs,
    i.e. infinite strengths) cannot produce 0/0, and its gradient has no spurious
    ``1 / (1 - C)`` factors (the literal rule gives inf/NaN gradients when both views are
    nearly certain). Computed in float64 where the device has it (the fused strength is
    about ``S1 * S2 / K``) and cast back.

    Args:
        alpha1: Dirichlet parameters ``(N, K)`` of the first view, ``>= 1``.
        alpha2: Dirichlet parameters ``(N, K)`` of the second view.
        max_log_strength: optional cap on ``log S`` of the returned ``alpha``: above it
            ``alpha - 1`` is scaled down so that ``S = exp(max_log_strength)`` (beliefs kept,
            up to the ``+1``); ``b`` and ``u`` are the uncapped fused opinion. Without it the
            cap is the largest strength the dtype holds with room for a sum over ``K``.

    Returns:
        ``(alpha, b, u)`` of shapes ``(N, K)``, ``(N, K)``, ``(N,)``, dtype of ``alpha1``.
    """
    if alpha1.shape != alpha2.shape:
        raise ValueError(
            f"ds_combine needs opinions of the same shape, got {tuple(alpha1.shape)} and "
            f"{tuple(alpha2.shape)}; both views must score the same N queries over K candidates"
        )
    return ds_combine_many([alpha1, alpha2], max_log_strength=max_log_strength)


def ds_combine_many(
    alphas: Sequence[Tensor] | Tensor, *, max_log_strength: float | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """Fuse ``W >= 1`` views left to right with :func:`ds_combine` (paper Eq. 7).

    In evidence form the fold is ``e <- e + e_w + e * e_w / K``; a single view is returned
    as its own opinion (``alpha`` unchanged, no cap).

    Args:
        alphas: a sequence of ``W`` tensors ``(N, K)`` or one tensor ``(W, N, K)``.
        max_log_strength: cap on the fused ``log S`` used to rebuild ``alpha``
            (see :func:`ds_combine`).

    Returns:
        ``(alpha, b, u)`` of shapes ``(N, K)``, ``(N, K)``, ``(N,)``.
    """
    views = list(alphas.unbind(0)) if isinstance(alphas, Tensor) else list(alphas)
    _check_views_same_shape(views)
    if len(views) == 1:
        b, u, _ = opinion(views[0])
        return views[0], b, u
    out_dtype = views[0].dtype
    wide = _wide_dtype(views[0])
    K = views[0].shape[-1]
    e = views[0].to(wide) - 1.0
    for alpha in views[1:]:
        e_w = alpha.to(device=e.device, dtype=wide) - 1.0
        e = e + e_w + e * e_w / K  # Eq. 7, evidence form
    S = e.sum(dim=-1) + K
    b, u = e / S.unsqueeze(-1), K / S
    cap = math.log(torch.finfo(out_dtype).max) - math.log(4 * K)
    if max_log_strength is not None:
        cap = min(cap, max_log_strength)
    # Scale the evidence down where S exceeds the cap; the loss on alpha stays finite.
    scale = (math.exp(cap) / S).clamp(max=1.0)
    alpha = e * scale.unsqueeze(-1) + 1.0
    return alpha.to(out_dtype), b.to(out_dtype), u.to(out_dtype)


def log_ds_combine_many(log_e: Tensor) -> Tensor:
    """Fused log evidence of ``W`` views, exact and uncapped (paper Eq. 7 in log space).

    The evidence form ``e = e1 + e2 + e1 * e2 / K`` becomes
    ``log e = logsumexp(l1, l2, l1 + l2 - log K)``, folded left to right; ``-inf`` (no
    evidence) is handled exactly. Used by the division: the argmax and the soft label of a
    pair then depend on every score, however large (a capped ``e`` ties scores at the cap).

    Args:
        log_e: log evidence ``(W, N, K)`` (``alpha - 1`` of each view, in log space).

    Returns:
        ``(N, K)`` fused log evidence, dtype of ``log_e``.
    """
    if log_e.dim() != 3:
        raise ValueError(f"log_e must have shape (W, N, K), got {tuple(log_e.shape)}")
    log_k = math.log(log_e.shape[-1])
    out = log_e[0]
    for lw in log_e[1:]:
        out = torch.logsumexp(torch.stack([out, lw, out + lw - log_k]), dim=0)
    return out


# ---------------------------------------------------------------- evidential loss (Eqs. 12-15)


_ASYMPTOTIC_FROM = 100.0
_HALF_LOG_2PI_PLUS_HALF = 0.5 * math.log(2.0 * math.pi) + 0.5


def _h_tilde(x: Tensor) -> Tensor:
    """``lgamma(x) - (x - 1) * digamma(x) + x`` for ``x > 0``, without cancellation.

    Each of the three terms grows like ``x log x`` while their sum grows like ``0.5 log x``;
    for ``x >= 100`` the Stirling series is used instead:
    ``0.5 log x + 0.5 log(2 pi) + 0.5 - 1/(3x) - 1/(12x^2) - 1/(90x^3) + 1/(120x^4)``
    (truncation error below 1e-12 there). Both branches see clamped inputs so the one not
    taken stays finite (no 0 * inf in the backward pass).
    """
    small = x.clamp(max=_ASYMPTOTIC_FROM)
    direct = torch.lgamma(small) - (small - 1.0) * torch.digamma(small) + small
    large = x.clamp(min=_ASYMPTOTIC_FROM)
    r = 1.0 / large
    series = (
        0.5 * torch.log(large)
        + _HALF_LOG_2PI_PLUS_HALF
        + r * (-1.0 / 3.0 + r * (-1.0 / 12.0 + r * (-1.0 / 90.0 + r / 120.0)))
    )
    return torch.where(x < _ASYMPTOTIC_FROM, direct, series)


def _kl_to_uniform(alpha: Tensor) -> Tensor:
    """``KL(Dir(alpha) || Dir(1))`` per row, closed form (paper Eq. 13). ``(N, K) -> (N,)``.

    The textbook form ``lgamma(S) - lgamma(K) - sum lgamma(a) + sum (a - 1)(psi(a) - psi(S))``
    loses every digit once ``a`` is large (1e9 in float32, 1e15 in float64: the terms are
    ``~a log a``, the KL ``~K log a``) and even turns negative. With
    ``h(x) = lgamma(x) - (x - 1) psi(x) + x`` the same quantity is
    ``h(S) - sum_j h(a_j) + (K - 1) psi(S) - lgamma(K)`` (the ``+x`` parts cancel exactly
    because ``S = sum a``), and ``h`` is evaluated stably by :func:`_h_tilde`.
    """
    K = alpha.shape[-1]
    S = alpha.sum(dim=-1)
    return (
        _h_tilde(S)
        - _h_tilde(alpha).sum(dim=-1)
        + (K - 1) * torch.digamma(S)
        - math.lgamma(K)  # log Gamma(K) normalises Dir(1); log Gamma(1) = 0
    )


def edl_terms(alpha: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
    """The two parts of the evidential loss, per row (paper Eqs. 12-13).

    Args:
        alpha: Dirichlet parameters ``(N, K)``, all ``>= 1``.
        target: targets ``(N, K)`` in ``[0, 1]`` (one-hot times the soft label).

    Returns:
        ``(ls, kl)``, each ``(N,)`` in the dtype of ``alpha``:
        ``ls = sum_j (y_j - p_j)^2 + p_j (1 - p_j) / (S + 1)`` with ``p = alpha / S``
        (the least-squares Dirichlet risk ``E ||y - p||^2``, written with ``p`` so that
        ``S^2 (S + 1)`` is never formed) and ``kl = KL(Dir(alpha_tilde) || Dir(1))`` with
        ``alpha_tilde = y + (1 - y) * alpha``.
    """
    if alpha.shape != target.shape:
        raise ValueError(
            f"alpha {tuple(alpha.shape)} and target {tuple(target.shape)} must have the same "
            "shape (N, K)"
        )
    out_dtype = alpha.dtype
    wide = _wide_dtype(alpha)
    a = alpha.to(wide)
    y = target.to(device=a.device, dtype=wide)
    S = a.sum(dim=-1, keepdim=True)
    p = a / S
    ls = ((y - p) ** 2 + p * (1.0 - p) / (S + 1.0)).sum(dim=-1)
    alpha_tilde = y + (1.0 - y) * a
    kl = _kl_to_uniform(alpha_tilde)
    return ls.to(out_dtype), kl.to(out_dtype)


def edl_loss(alpha: Tensor, target: Tensor, kl_weight: float) -> Tensor:
    """Evidential loss per row: least-squares Dirichlet risk + ``kl_weight`` x KL (Eq. 12-13).

    ``xi1`` (``kl_weight``) is constant, not annealed (paper and released code).

    Args:
        alpha: Dirichlet parameters ``(N, K)``.
        target: targets ``(N, K)``.
        kl_weight: weight ``xi1`` of the KL term (paper: 0.1).

    Returns:
        Loss per row ``(N,)``.
    """
    ls, kl = edl_terms(alpha, target)
    return ls + kl_weight * kl


# ------------------------------------------------------------------ trusted margin (Eq. 17)


def trusted_margin_factor(u: Tensor, delta: float, clean: bool) -> Tensor:
    """Trusted-margin factor of hard pairs (paper Eq. 17, decoded; docs/methods/ugncl.md).

    ``f_C(u) = 1 / (1 + (u / (1 - u))^delta) = sigmoid(-delta * logit(u))`` for hard-clean and
    ``f_N(u) = 1 / (1 + ((1 - u) / u)^delta) = sigmoid(delta * logit(u))`` for hard-noisy
    pairs. ``u`` is clamped to ``[eps, 1 - eps]`` (``eps`` = machine epsilon of the dtype)
    inside the logit, so ``u = 0`` and ``u = 1`` give the limits 1 and 0 exactly in float32,
    without NaN; the printed and released forms raise a negative base to a real power.

    Args:
        u: (normalised) uncertainty, any shape.
        delta: steepness ``Delta`` (paper: 10), ``>= 0``.
        clean: ``True`` for ``f_C`` (decreasing in ``u``), ``False`` for ``f_N`` (increasing).

    Returns:
        Factor in ``[0, 1]``, same shape as ``u``; 0.5 at ``u = 0.5``.
    """
    if delta < 0:
        raise ValueError(f"trust delta must be >= 0, got {delta}; the paper uses 10")
    u = _at_least_float32(u)
    z = delta * torch.logit(u, eps=torch.finfo(u.dtype).eps)
    return torch.sigmoid(-z if clean else z)
