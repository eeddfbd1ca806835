"""The comparison's sentences, computed: paired differences over seeds with a bootstrap over
test queries, and each method's lift over its plain baseline split into the pre-filter's share
and the method's.

Every pairwise claim compares two report lines (variants) of one backbone and noise ratio on
the seeds both have. Its per-seed differences are the test records' rSum differences; its
interval is a paired bootstrap over test queries: each draw resamples the test images
(image-to-text queries) and the test captions (text-to-image queries) with replacement, the
same draw for both variants and every seed, and takes the mean over seeds of the rSum
difference, from the per-query hit probabilities each run saves at test time
(``test_queries.npz``, :func:`ugncl.core.metrics.query_hits`). The label:

- ``every seed``: the 95% interval excludes 0 and every seed's difference has the mean's sign;
- ``on the mean``: the interval excludes 0, but some seed goes the other way;
- ``within the spread``: the interval holds 0.

A pair with a run that saved no per-query file gets no interval; it is labelled from its seeds
alone (``every seed`` when all agree in sign, else ``within the spread``) and says so.

Pre-filter rows are labelled ``<variant>+pf`` (:mod:`ugncl.run.compare_grid`): the lift of
``M+pf`` over the plain baseline ``B`` is ``(B+pf - B)``, the pre-filter's share, plus
``(M+pf - B+pf)``, the method's share.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "QUERY_FILE",
    "Claim",
    "best_method",
    "claim_pairs",
    "claim_sentence",
    "gain_lines",
    "load_query_hits",
    "paired_claim",
    "rsum_of_hits",
]

QUERY_FILE = "test_queries.npz"  # ugncl.core.engine.trainer.QUERY_HITS_FILE
DRAWS = 1000
PF = "+pf"

#: ``{seed: (i2t (n_img, K), t2i (n_cap, K))}`` of one variant.
Hits = Mapping[Any, tuple[np.ndarray, np.ndarray]]


def load_query_hits(run_dir: str | Path) -> tuple[np.ndarray, np.ndarray] | None:
    """A run's per-query hit probabilities, or None where the run saved none."""
    path = Path(run_dir) / QUERY_FILE
    if not path.is_file():
        return None
    with np.load(path, allow_pickle=False) as data:
        return np.asarray(data["i2t"], dtype=np.float64), np.asarray(data["t2i"], np.float64)


def rsum_of_hits(i2t: np.ndarray, t2i: np.ndarray) -> float:
    """rSum of per-query hit probabilities ``(n_img, K)`` and ``(n_cap, K)``."""
    return float(100.0 * (i2t.mean(axis=0).sum() + t2i.mean(axis=0).sum()))


@dataclass(frozen=True)
class Claim:
    """``a`` against ``b`` on one backbone and noise ratio: per-seed differences (a - b),
    their mean, the bootstrap interval (None without per-query files) and the label."""

    backbone: str
    ratio: float
    a: str
    b: str
    diffs: tuple[float, ...]
    mean: float
    low: float | None
    high: float | None
    label: str


def _interval(
    hits_a: Hits, hits_b: Hits, seeds: Sequence[Any], draws: int, rng: np.random.Generator
) -> tuple[float, float] | None:
    """The 95% paired bootstrap interval over test queries of the mean-over-seeds rSum
    difference (None where a run has no per-query file or the test sets differ)."""
    if any(s not in hits_a or s not in hits_b for s in seeds):
        return None
    shapes = {(hits_a[s][0].shape, hits_a[s][1].shape) for s in seeds}
    shapes |= {(hits_b[s][0].shape, hits_b[s][1].shape) for s in seeds}
    if len(shapes) != 1:
        return None
    # Per query, the difference summed over K and averaged over seeds: a draw's rSum
    # difference is 100 x (mean over drawn images + mean over drawn captions).
    d_i2t = np.mean([(hits_a[s][0] - hits_b[s][0]).sum(axis=1) for s in seeds], axis=0)
    d_t2i = np.mean([(hits_a[s][1] - hits_b[s][1]).sum(axis=1) for s in seeds], axis=0)
    img = rng.integers(0, d_i2t.size, size=(draws, d_i2t.size))
    cap = rng.integers(0, d_t2i.size, size=(draws, d_t2i.size))
    boot = 100.0 * (d_i2t[img].mean(axis=1) + d_t2i[cap].mean(axis=1))
    low, high = np.percentile(boot, [2.5, 97.5])
    return float(low), float(high)


def paired_claim(
    backbone: str,
    ratio: float,
    a: str,
    b: str,
    rsum_a: Mapping[Any, float],
    rsum_b: Mapping[Any, float],
    hits_a: Hits | None = None,
    hits_b: Hits | None = None,
    *,
    draws: int = DRAWS,
    seed: int = 0,
) -> Claim | None:
    """The claim of ``a`` against ``b`` over the seeds both have (None: no common seed)."""
    seeds = sorted(set(rsum_a) & set(rsum_b), key=str)
    if not seeds:
        return None
    diffs = tuple(float(rsum_a[s]) - float(rsum_b[s]) for s in seeds)
    mean = sum(diffs) / len(diffs)
    rng = np.random.default_rng(seed)
    interval = _interval(hits_a or {}, hits_b or {}, seeds, draws, rng)
    same_sign = all(d > 0 for d in diffs) or all(d < 0 for d in diffs)
    if interval is None:
        label = "every seed" if same_sign else "within the spread"
        return Claim(backbone, ratio, a, b, diffs, mean, None, None, label)
    low, high = interval
    if low <= 0.0 <= high:
        label = "within the spread"
    elif same_sign:
        label = "every seed"
    else:
        label = "on the mean"
    return Claim(backbone, ratio, a, b, diffs, mean, low, high, label)


def claim_sentence(claim: Claim) -> str:
    """One sentence of the report, every number from ``claim``."""
    seeds = ", ".join(f"{d:+.1f}" for d in claim.diffs)
    n = len(claim.diffs)
    where = f"{claim.backbone}, noise {claim.ratio:.2f}"
    if claim.low is None:
        interval = "no per-query file: seeds only"
    else:
        interval = f"95% bootstrap over test queries {claim.low:+.1f} to {claim.high:+.1f}"
    detail = f"per seed {seeds}; {interval}; {n} seed{'s' if n > 1 else ''}"
    if claim.label == "within the spread":
        return (f"{where}: `{claim.a}` and `{claim.b}` differ by {claim.mean:+.1f} rSum, "
                f"within the spread ({detail}).")  # fmt: skip
    word = "above" if claim.mean > 0 else "below"
    return (f"{where}: `{claim.a}` is {abs(claim.mean):.1f} rSum {word} `{claim.b}`, "
            f"{claim.label} ({detail}).")  # fmt: skip


def claim_pairs(
    variants: Sequence[str], plain: str, best: str | None = None, controls: Sequence[str] = ()
) -> list[tuple[str, str]]:
    """The pairs a report states for one backbone and ratio: every variant against the plain
    baseline, every ``X+pf`` against ``X``, a method's ``paper`` reading against its
    package row (``m-paper`` against ``m``), and the ``best`` method line (the highest mean;
    None: no such pairs) against every other method line, ``controls`` and the plain
    baseline aside: which lead over the top holds on every seed; and the ``best`` line
    against each control (the clean-pairs oracle: whether the best method ends above what a
    perfect division would train)."""
    have = set(variants)
    pairs = [(v, plain) for v in variants if v != plain and plain in have]
    if best is not None and best in have:
        pairs += [(best, v) for v in variants if v not in (best, plain, *controls)]
        pairs += [(best, v) for v in variants if v in controls]
    pairs += [(v, v[: -len(PF)]) for v in variants if v.endswith(PF) and v[: -len(PF)] in have]
    pairs += [
        (v, v.removesuffix("-paper"))
        for v in variants
        if v.endswith("-paper") and v.removesuffix("-paper") in have
    ]
    return list(dict.fromkeys(pairs))


def best_method(
    rsums: Mapping[str, Mapping[Any, float]], plain: str, controls: Sequence[str] = ()
) -> str | None:
    """The method line with the highest mean test rSum over its seeds (``rsums[line][seed]``),
    the plain baseline and ``controls`` aside; None where there is none."""
    means = {
        v: sum(seeds.values()) / len(seeds)
        for v, seeds in rsums.items()
        if v not in (plain, *controls) and seeds
    }
    return max(sorted(means), key=means.__getitem__) if means else None


def _mean(values: Mapping[Any, float], seeds: Sequence[Any]) -> float:
    return sum(float(values[s]) for s in seeds) / len(seeds)


def gain_lines(
    rsums: Mapping[str, Mapping[Any, float]], plain: str, controls: Sequence[str] = ()
) -> list[str]:
    """ "What drives the gain" for one backbone and ratio: each method's lift over ``plain``
    (mean over the seeds its rows share), split into the pre-filter's share (``plain+pf`` -
    ``plain``) and the method's; ``controls`` (the oracle, ...) are not methods."""
    lines = []
    base_pf = plain + PF
    for variant in sorted(rsums):
        if variant in (plain, base_pf, *controls):
            continue
        uses_pf = variant.endswith(PF)
        needed = [variant, plain, *([base_pf] if uses_pf else [])]
        if uses_pf and base_pf not in rsums:
            lines.append(f"- `{variant}`: the pre-filter's share is not measured (no `{base_pf}` "
                         "row).")  # fmt: skip
            continue
        seeds = sorted(set.intersection(*(set(rsums[v]) for v in needed)), key=str)
        if not seeds:
            continue
        lift = _mean(rsums[variant], seeds) - _mean(rsums[plain], seeds)
        pf = _mean(rsums[base_pf], seeds) - _mean(rsums[plain], seeds) if uses_pf else 0.0
        method = lift - pf
        share = (
            f" ({100 * pf / lift + 0.0:.0f}% / {100 * method / lift:.0f}%)"
            if abs(lift) > 1e-9
            else ""
        )
        pf_text = (
            f"the pre-filter {pf:+.1f} (`{base_pf}` - `{plain}`)"
            if uses_pf
            else "the pre-filter 0 (trained without it)"
        )
        lines.append(
            f"- `{variant}`: {lift:+.1f} rSum over `{plain}` = {pf_text} + the method "
            f"{method:+.1f}{share}, mean of {len(seeds)} seed{'s' if len(seeds) > 1 else ''}."
        )
    return lines
