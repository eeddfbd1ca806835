"""NCR's co-divide: a two-component GMM over each network's per-sample losses gives every
training pair a clean probability w, which the *other* network trains on.

Pure numpy/scikit-learn on ``(N,)`` arrays; the per-sample losses come from
:func:`ugncl.methods.ncr.losses.per_sample_loss` over a whole pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.mixture import GaussianMixture

__all__ = ["GMM_SETTINGS", "GMMFit", "clean_probability", "min_max", "split_clean"]

# The release's GaussianMixture (co_train.py eval_train): two components, full covariance,
# k-means init, 10 EM iterations at most. The release passes no random_state (numpy's global
# RNG); this package passes a seed per (run, epoch, network) so a resumed run divides alike.
GMM_SETTINGS = {"n_components": 2, "max_iter": 10, "tol": 1e-2, "reg_covar": 5e-4}


def min_max(losses: np.ndarray) -> np.ndarray:
    """``(l - min) / (max - min)`` in float32 (the release normalises a float32 tensor).
    A constant vector (the release divides by zero) maps to zeros."""
    x = np.asarray(losses, dtype=np.float32).reshape(-1)
    lo, hi = x.min(), x.max()
    if not hi > lo:
        return np.zeros_like(x)
    return (x - lo) / (hi - lo)


@dataclass(frozen=True)
class GMMFit:
    """One network's division: normalised losses (N,), clean probability (N,) and the fit."""

    normalized: np.ndarray
    prob: np.ndarray
    means: tuple[float, float]
    n_iter: int
    converged: bool


def clean_probability(losses: np.ndarray, *, random_state: int | None) -> GMMFit:
    """Posterior of the low-loss component of a two-component GMM fitted to the min-max
    normalised losses (``predict_proba[:, means.argmin()]``).

    Args:
        losses: ``(N,)`` per-sample losses of one network.
        random_state: seed of the GMM's k-means init (None: numpy's global RNG, as released).

    Returns:
        :class:`GMMFit`; a constant loss vector (nothing to divide) is all clean (prob 1).
    """
    x = min_max(losses)
    if not x.max() > 0:
        return GMMFit(x, np.ones(x.shape, dtype=np.float64), (0.0, 0.0), 0, True)
    gmm = GaussianMixture(**GMM_SETTINGS, random_state=random_state)
    column = x.reshape(-1, 1)
    gmm.fit(column)
    prob = gmm.predict_proba(column)[:, int(gmm.means_.argmin())]
    means = tuple(float(m) for m in gmm.means_.reshape(-1))
    return GMMFit(x, prob, (means[0], means[1]), int(gmm.n_iter_), bool(gmm.converged_))


def split_clean(prob: np.ndarray, threshold: float = 0.5) -> np.ndarray:
    """Clean pairs: ``prob > threshold`` (``(N,)`` bool).

    The release's rule when no pair falls at or below the threshold: the threshold becomes
    the ``N // 100``-th smallest probability, so about 1% of the pairs (that one included,
    strict ``>``) is divided noisy.
    """
    p = np.asarray(prob, dtype=np.float64).reshape(-1)
    if p.min() > threshold:
        threshold = float(np.sort(p)[len(p) // 100])
    return p > threshold
