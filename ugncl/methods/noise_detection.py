"""How well a method's per-sample weights or selections separate clean from noisy pairs.

One record format for every method (NPC, SDD, OSA, UGNCL): the selection part reuses
:func:`ugncl.methods.ugncl.division.division_quality` (a selection is mapped onto the division's
set codes:
selected-as-clean -> CLEAN, selected-as-noisy -> NOISY), so its keys are the same as UGNCL's
division record (``n_clean``, ``n_noisy``, ``noisy_precision``, ``noisy_recall``,
``noisy_f1``, ``clean_share_*``); the weight part adds ``weight_auc``,
``weight_mean_clean`` and ``weight_mean_noisy``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.metrics import roc_auc_score
from torch import Tensor

from ugncl.methods.ugncl.division import CLEAN, NOISY, UNVISITED, division_quality

__all__ = ["detection_record", "selection_sets", "weight_quality"]


def _np(x: np.ndarray | Tensor) -> np.ndarray:
    return x.detach().cpu().numpy() if isinstance(x, Tensor) else np.asarray(x)


def weight_quality(weights: np.ndarray | Tensor, clean: np.ndarray | Tensor) -> dict[str, Any]:
    """ROC-AUC of per-sample weights against ground-truth clean flags, mean weight per class.

    A good weight is high on clean pairs: AUC 1 = every clean pair outweighs every noisy one,
    0.5 = chance. NaN weights (samples not visited) are ignored. Undefined values (one class
    absent) are None.

    Args:
        weights: ``(N,)`` per-sample weights.
        clean: ``(N,)`` bool ground truth.

    Returns:
        ``weight_auc``, ``weight_mean_clean``, ``weight_mean_noisy`` (float or None), and
        the per-epoch weight histograms of the truly clean and the truly noisy pairs
        (``weight_hist_edges``: :data:`HIST_BINS` + 1 edges over the weights' range;
        ``weight_hist_clean`` / ``weight_hist_noisy``: counts), the small dump the
        comparison report draws its clean-vs-noisy histograms from.
    """
    w = _np(weights).astype(np.float64).reshape(-1)
    c = _np(clean).astype(bool).reshape(-1)
    if w.shape != c.shape:
        raise ValueError(f"weights {w.shape} and clean {c.shape} must have the same length")
    keep = np.isfinite(w)
    w, c = w[keep], c[keep]
    both = c.any() and (~c).any()
    return {
        "weight_auc": float(roc_auc_score(c, w)) if both else None,
        "weight_mean_clean": float(w[c].mean()) if c.any() else None,
        "weight_mean_noisy": float(w[~c].mean()) if (~c).any() else None,
        **weight_histograms(w, c),
    }


HIST_BINS = 20


def weight_histograms(w: np.ndarray, clean: np.ndarray) -> dict[str, Any]:
    """Counts of ``w`` (N,) in :data:`HIST_BINS` equal bins over its range, clean and noisy
    pairs apart (empty lists when no weight is finite)."""
    if w.size == 0:
        return {"weight_hist_edges": [], "weight_hist_clean": [], "weight_hist_noisy": []}
    lo, hi = float(w.min()), float(w.max())
    edges = np.linspace(lo, hi if hi > lo else lo + 1.0, HIST_BINS + 1)
    return {
        "weight_hist_edges": [float(e) for e in edges],
        "weight_hist_clean": [int(n) for n in np.histogram(w[clean], edges)[0]],
        "weight_hist_noisy": [int(n) for n in np.histogram(w[~clean], edges)[0]],
    }


def selection_sets(
    selected: np.ndarray | Tensor, *, selects: str = "clean", visited: np.ndarray | None = None
) -> np.ndarray:
    """Map a boolean selection onto division set codes (CLEAN / NOISY / UNVISITED).

    Args:
        selected: ``(N,)`` bool.
        selects: what ``True`` means: ``"clean"`` (NPC/SDD bank keys, SDD kept pairs) or
            ``"noisy"`` (SDD drop set).
        visited: optional ``(N,)`` bool; False entries become UNVISITED (ignored).
    """
    if selects not in ("clean", "noisy"):
        raise ValueError(f"selects must be 'clean' or 'noisy', got {selects!r}")
    s = _np(selected).astype(bool).reshape(-1)
    noisy = ~s if selects == "clean" else s
    sets = np.where(noisy, NOISY, CLEAN).astype(np.int8)
    if visited is not None:
        sets[~np.asarray(visited, dtype=bool)] = UNVISITED
    return sets


def detection_record(
    clean: np.ndarray | Tensor,
    *,
    weights: np.ndarray | Tensor | None = None,
    selected: np.ndarray | Tensor | None = None,
    selects: str = "clean",
    prefix: str = "",
) -> dict[str, Any]:
    """One noise-detection record: weight quality and/or selection quality.

    Args:
        clean: ``(N,)`` ground-truth flags (reporting only).
        weights: ``(N,)`` per-sample weights (NaN = not visited), or None.
        selected: ``(N,)`` bool selection, or None.
        selects: see :func:`selection_sets`.
        prefix: prepended to every key (e.g. ``"bank_"`` when a method records two
            selections in one record).

    Returns:
        Plain dict of ints, floats and None.
    """
    out: dict[str, Any] = {}
    if weights is not None:
        out.update(weight_quality(weights, clean))
    if selected is not None:
        visited = None
        if weights is not None:
            visited = np.isfinite(_np(weights).astype(np.float64).reshape(-1))
        sets = selection_sets(selected, selects=selects, visited=visited)
        quality = division_quality(sets, _np(clean).astype(bool).reshape(-1))
        # Only CLEAN / NOISY occur in a selection; the hard sets would always read 0 / None.
        out.update({k: v for k, v in quality.items() if "hard" not in k})
    return {f"{prefix}{k}": v for k, v in out.items()}
