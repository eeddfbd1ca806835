"""When the division starts: a measured criterion instead of a fixed warm-up length.

The warm-up trains on every pair as if it were clean. On clean pairs a model learns what the
captions share; a noisy pair's caption describes another image, so early on its diagonal
scores no better than a rival. The per-pair evidence of the diagonal against its rivals
(the division's soft label, Eqs. 10-11) then falls into two modes: clean pairs high, noisy
pairs low. The division can only be as good as that separation, and a fixed warm-up length
divides too early where the model learns slowly and too late (after the noisy pairs are
memorised, the modes merge again) where it learns fast.

:func:`two_mode_separation` fits a two-component 1-D Gaussian mixture to the soft labels'
logits and returns Ashman's D, ``|m1 - m2| sqrt(2) / sqrt(s1^2 + s2^2)``: D > 2 is the usual
mark of a clean bimodal separation (Ashman, Bird & Zepf 1994). The method starts dividing at
the first epoch start where D reaches its threshold, or where D fell since the previous epoch
start (the warm-up has begun to memorise: waiting longer only merges the modes).

:func:`division_agreement` is the criterion of ``division_start: agreed``: Cohen's kappa
between the noisy/clean calls of two consecutive epochs' divisions. A model that has not yet
learned what the clean pairs share calls pairs noisy by the luck of their batch's rivals, and
two epochs' calls agree at chance (kappa ~ 0); once it ranks clean pairs above their rivals,
the calls repeat (kappa -> 1). Kappa is corrected for chance and for the share called noisy,
so one threshold reads the same at any noise ratio and any evidence scale.
"""

from __future__ import annotations

import math

import numpy as np

from ugncl.methods.ugncl.division import called_noisy

__all__ = [
    "division_agreement",
    "label_logits",
    "should_start_division",
    "two_mode_separation",
]

_LOGIT_CLIP = 1e-4


def label_logits(soft_label: np.ndarray) -> np.ndarray:
    """``logit(y)`` of the division's soft labels, ``y`` clipped to ``[1e-4, 1 - 1e-4]``.

    A determined pair's label is exactly 0 or 1; the clip keeps it finite (+-9.2) and at the
    far end of the scale, where it belongs. NaN entries (pairs never scored) are dropped.
    """
    y = np.asarray(soft_label, dtype=np.float64)
    y = np.clip(y[np.isfinite(y)], _LOGIT_CLIP, 1.0 - _LOGIT_CLIP)
    return np.log(y) - np.log1p(-y)


def two_mode_separation(x: np.ndarray, iters: int = 100) -> dict[str, float]:
    """Fit two Gaussians to ``x`` (1-D) by EM; Ashman's D of the fit.

    Initialised at the lower and upper quartiles with the pooled variance, so the result is
    deterministic. Variances are floored at 1e-6 of the pooled variance (a mode of identical
    values does not give an infinite D).

    Args:
        x: ``(N,)`` values (the soft labels' logits).
        iters: EM iterations.

    Returns:
        ``separation`` (Ashman's D; 0 for fewer than 4 values or constant ones), ``low_mean``,
        ``high_mean``, ``high_weight`` (the share of the upper mode).
    """
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    var = float(x.var()) if len(x) else 0.0
    if len(x) < 4 or var <= 0.0:
        mean = float(x.mean()) if len(x) else 0.0
        return {"separation": 0.0, "low_mean": mean, "high_mean": mean, "high_weight": 0.5}
    mu = np.quantile(x, [0.25, 0.75])
    sd2 = np.array([var, var])
    w = np.array([0.5, 0.5])
    floor = 1e-6 * var
    for _ in range(iters):
        logp = -0.5 * (x[:, None] - mu) ** 2 / sd2 - 0.5 * np.log(sd2) + np.log(w)
        logp -= logp.max(axis=1, keepdims=True)
        r = np.exp(logp)
        r /= r.sum(axis=1, keepdims=True)
        n = r.sum(axis=0) + 1e-12
        w = n / n.sum()
        mu = (r * x[:, None]).sum(axis=0) / n
        sd2 = np.maximum((r * (x[:, None] - mu) ** 2).sum(axis=0) / n, floor)
    lo, hi = (0, 1) if mu[0] <= mu[1] else (1, 0)
    d = abs(mu[hi] - mu[lo]) * math.sqrt(2.0) / math.sqrt(sd2[0] + sd2[1])
    return {
        "separation": float(d),
        "low_mean": float(mu[lo]),
        "high_mean": float(mu[hi]),
        "high_weight": float(w[hi]),
    }


def should_start_division(history: list[float], threshold: float) -> bool:
    """Start dividing now? ``history``: the separation at each epoch start since the minimum
    warm-up, the current one last.

    True when the current separation reaches ``threshold`` or fell below the previous one
    (past its peak: the warm-up now memorises noisy pairs and the modes merge).
    """
    if not history:
        return False
    if history[-1] >= threshold:
        return True
    return len(history) >= 2 and history[-1] < history[-2]


def division_agreement(previous: np.ndarray, current: np.ndarray) -> float:
    """Cohen's kappa of two divisions' noisy calls (NOISY or HARD_NOISY) on the same pairs.

    Args:
        previous, current: set codes ``(N,)`` of the same samples; pairs unvisited in
            either (code ``-1``) are left out.

    Returns:
        ``(p_o - p_e) / (1 - p_e)``, ``p_o`` the share of pairs called alike and ``p_e`` the
        share two independent calls at the same rates would give; 1.0 when both call every
        pair the same way (``p_e = 1``), 0.0 when no pair is visited in both.
    """
    a, b = np.asarray(previous), np.asarray(current)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"divisions {a.shape} and {b.shape} must be 1-D of the same length")
    keep = (a >= 0) & (b >= 0)
    if not keep.any():
        return 0.0
    na, nb = called_noisy(a[keep]), called_noisy(b[keep])
    observed = float((na == nb).mean())
    pa, pb = float(na.mean()), float(nb.mean())
    expected = pa * pb + (1.0 - pa) * (1.0 - pb)
    if expected >= 1.0:
        return 1.0
    return (observed - expected) / (1.0 - expected)
