"""The comparison report: one folder with ``compare.md``, ``compare.csv``, ``compare.json``
and PNG plots (matplotlib, headless Agg backend).

Plots:
    ``rsum_vs_noise.png``: test rSum against the noise ratio, one line per method, one panel
    per backbone, the seeds' spread (standard deviation) as error bars.
    ``detection.png``: the noise detection of every epoch at the highest noise ratio (UGNCL's
    division F1 of its noisy sets; NPC's, SDD's and OSA's weight AUC; SDD's drop-set F1
    dashed), mean over seeds, one panel per backbone.
    ``weights.png``: per-sample weights of the truly clean and the truly noisy pairs in the
    last epoch (the records' ``weight_hist_*``), one panel per method; UGNCL's division as
    the pairs of each set, clean and noisy.

Reading is pure: :func:`report_data` takes rows and each run's records, so a test can build a
report from hand-written runs.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ugncl.run.compare import (
    add_cost_ratio,
    check_same_noise,
    format_table,
)

__all__ = ["PLOTS", "group_means", "write_report"]

PLOTS = ("rsum_vs_noise.png", "detection.png", "weights.png")
_SETS = ("clean", "hard_clean", "hard_noisy", "noisy")


def _stats(values: Sequence[float]) -> tuple[float, float]:
    mean = sum(values) / len(values)
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1) if len(values) > 1 else 0.0
    return mean, math.sqrt(var)


def group_means(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One line per (backbone, variant, noise ratio): mean and standard deviation of test
    rSum over seeds, their count, the mean detection metric and the cost."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        key = (row.get("backbone"), row.get("variant") or row.get("method"), row.get("noise_ratio"))
        groups.setdefault(key, []).append(row)
    out = []
    for (backbone, variant, ratio), members in sorted(groups.items(), key=lambda kv: str(kv[0])):
        rsums = [float(r["rsum"]) for r in members if r.get("rsum") is not None]
        mean, std = _stats(rsums) if rsums else (None, None)

        def avg(key: str, members=members) -> float | None:
            vals = [float(r[key]) for r in members if r.get(key) is not None]
            return sum(vals) / len(vals) if vals else None

        out.append({
            "backbone": backbone, "variant": variant, "noise_ratio": ratio,
            "seeds": len(rsums), "rsum_mean": mean, "rsum_std": std,
            "epochs": "/".join(sorted({str(r.get("epochs")) for r in members})),
            "noisy_f1": avg("noisy_f1"), "weight_auc": avg("weight_auc"),
            "s_per_epoch": avg("s_per_epoch"), "cost_ratio": avg("cost_ratio"),
            "noise_sha256": ",".join(sorted({str(r.get("noise_sha256")) for r in members})),
        })  # fmt: skip
    return out


def _fmt(v: Any, spec: str) -> str:
    return "" if v is None else format(v, spec) if isinstance(v, float) else str(v)


def summary_markdown(groups: Sequence[dict[str, Any]]) -> str:
    header = ("| backbone | method | noise | seeds | epochs | test rSum (mean ± sd) | noise F1 | "
              "weight AUC | s/epoch | cost x plain | noise sha256 |")  # fmt: skip
    lines = [header, "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|---|"]
    for g in groups:
        rsum = "" if g["rsum_mean"] is None else f"{g['rsum_mean']:.1f} ± {g['rsum_std']:.1f}"
        lines.append(
            f"| {g['backbone']} | {g['variant']} | {_fmt(g['noise_ratio'], '.2f')} | "
            f"{g['seeds']} | {g['epochs']} | {rsum} | {_fmt(g['noisy_f1'], '.3f')} | "
            f"{_fmt(g['weight_auc'], '.3f')} | {_fmt(g['s_per_epoch'], '.1f')} | "
            f"{_fmt(g['cost_ratio'], '.2f')} | {g['noise_sha256']} |"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------- plots
def _detection_series(records: Sequence[dict[str, Any]]) -> dict[str, dict[int, float]]:
    """``{metric: {epoch: value}}``: division F1, weight AUC and drop-set F1 per epoch."""
    out: dict[str, dict[int, float]] = {}
    for r in records:
        epoch = r.get("epoch")
        if epoch is None:
            continue
        if r.get("event") == "division" and r.get("noisy_f1") is not None:
            out.setdefault("division F1", {})[epoch] = float(r["noisy_f1"])
        elif r.get("event") == "noise_detection":
            if r.get("weight_auc") is not None:
                out.setdefault("weight AUC", {})[epoch] = float(r["weight_auc"])
            if r.get("noisy_f1") is not None:
                out.setdefault("drop-set F1", {})[epoch] = float(r["noisy_f1"])
    return out


def _last_weights(records: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The last histogram dump (``weight_hist_*``) or UGNCL's last division (set counts)."""
    for r in reversed(records):
        if r.get("event") == "noise_detection" and r.get("weight_hist_edges"):
            return {"kind": "hist", "edges": r["weight_hist_edges"],
                    "clean": r["weight_hist_clean"], "noisy": r["weight_hist_noisy"]}  # fmt: skip
        if r.get("event") == "division":
            clean, noisy = [], []
            for name in _SETS:
                n, share = r.get(f"n_{name}") or 0, r.get(f"clean_share_{name}")
                c = round(n * share) if share is not None else 0
                clean.append(c)
                noisy.append(n - c)
            return {"kind": "sets", "clean": clean, "noisy": noisy}
    return None


# One colour per method in every panel and plot (matplotlib's tab10 order), the others grey.
_COLOURS = {
    "ugncl": "tab:red", "hinge_all": "tab:blue", "triplet": "tab:gray",
    "npc": "tab:orange", "sdd": "tab:green", "osa": "tab:purple", "infonce": "tab:brown",
}  # fmt: skip


def _colour(variant: str) -> str:
    return _COLOURS.get(variant, "black")


def _plot_rsum(groups: Sequence[dict[str, Any]], path: Path, plt: Any) -> None:
    backbones = sorted({g["backbone"] for g in groups})
    fig, axes = plt.subplots(1, len(backbones), figsize=(6 * len(backbones), 4.5), squeeze=False)
    for ax, backbone in zip(axes[0], backbones):
        mine = [g for g in groups if g["backbone"] == backbone and g["rsum_mean"] is not None]
        for variant in sorted({g["variant"] for g in mine}):
            line = sorted((g for g in mine if g["variant"] == variant),
                          key=lambda g: g["noise_ratio"])  # fmt: skip
            xs = [g["noise_ratio"] for g in line]
            ax.errorbar(xs, [g["rsum_mean"] for g in line], yerr=[g["rsum_std"] for g in line],
                        marker="o", capsize=3, label=variant, color=_colour(variant))  # fmt: skip
        top = max((g["noise_ratio"] or 0.0 for g in mine), default=0.0)
        ax.set_xlim(-0.05, max(top, 0.5) + 0.05)
        ax.set_title(f"{backbone}: test rSum (mean ± sd over seeds)")
        ax.set_xlabel("noise ratio")
        ax.set_ylabel("test rSum")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_detection(rows, records, path: Path, plt: Any) -> None:
    top = max((r["noise_ratio"] for r in rows if r.get("noise_ratio")), default=None)
    backbones = sorted({r["backbone"] for r in rows})
    fig, axes = plt.subplots(1, len(backbones), figsize=(6 * len(backbones), 4.5), squeeze=False)
    for ax, backbone in zip(axes[0], backbones):
        curves: dict[tuple[str, str], dict[int, list[float]]] = {}
        for row in rows:
            if row["backbone"] != backbone or row.get("noise_ratio") != top:
                continue
            for metric, series in _detection_series(records[row["run"]]).items():
                curve = curves.setdefault((row.get("variant") or row["method"], metric), {})
                for epoch, value in series.items():
                    curve.setdefault(epoch, []).append(value)
        for (variant, metric), curve in sorted(curves.items()):
            epochs = sorted(curve)
            ax.plot(epochs, [sum(curve[e]) / len(curve[e]) for e in epochs], marker=".",
                    linestyle="--" if metric == "drop-set F1" else "-",
                    label=f"{variant}: {metric}", color=_colour(variant))  # fmt: skip
        ax.set_title(f"{backbone}: noise detection per epoch (noise {top})")
        ax.set_xlabel("epoch")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
        if curves:
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_weights(rows, records, path: Path, plt: Any) -> None:
    top = max((r["noise_ratio"] for r in rows if r.get("noise_ratio")), default=None)
    panels = []
    for row in sorted(rows, key=lambda r: (r["backbone"], str(r.get("variant")), str(r["seed"]))):
        key = (row["backbone"], row.get("variant") or row["method"])
        if row.get("noise_ratio") != top or key in [p[0] for p in panels]:
            continue
        dump = _last_weights(records[row["run"]])
        if dump is not None:
            panels.append((key, row["run"], dump))
    cols = max(1, min(4, len(panels)))
    nrows = max(1, math.ceil(len(panels) / cols))
    fig, axes = plt.subplots(nrows, cols, figsize=(4 * cols, 3.2 * nrows), squeeze=False)
    for ax in axes.flat[len(panels) :]:
        ax.axis("off")
    for ax, ((backbone, variant), run, dump) in zip(axes.flat, panels):
        if dump["kind"] == "hist":
            edges = dump["edges"]
            mids = [(a + b) / 2 for a, b in itertools.pairwise(edges)]
            width = (edges[-1] - edges[0]) / max(1, len(mids))
            ax.bar(mids, dump["clean"], width=width, alpha=0.6, label="truly clean")
            ax.bar(mids, dump["noisy"], width=width, alpha=0.6, label="truly noisy")
            ax.set_xlabel("per-sample weight")
        else:
            xs = range(len(_SETS))
            ax.bar([x - 0.2 for x in xs], dump["clean"], width=0.4, label="truly clean")
            ax.bar([x + 0.2 for x in xs], dump["noisy"], width=0.4, label="truly noisy")
            ax.set_xticks(list(xs), [s.replace("_", "-") for s in _SETS], fontsize=8)
            ax.set_xlabel("UGNCL division set")
        ax.set_title(f"{backbone} {variant} ({run})", fontsize=8)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(
    out: str | Path,
    rows: list[dict[str, Any]],
    records: dict[str, list[dict[str, Any]]],
    *,
    title: str = "Comparison",
    notes: Sequence[str] = (),
) -> list[Path]:
    """Check one noise file per (ratio, seed), fill the cost ratios, and write the report
    files into ``out``; returns their paths.

    Args:
        out: the comparison folder.
        rows: :func:`ugncl.run.compare.read_run` rows (``variant`` may name a grid's
            label).
        records: each row's ``metrics.jsonl`` records, by its ``run``.
        title: the markdown title.
        notes: lines printed under the title (the plan, the world, failed cells).

    Raises:
        CompareError: rows of one noise ratio and seed trained on different noise files.
    """
    import matplotlib

    matplotlib.use("Agg")  # headless: no display on a server or in CI
    import matplotlib.pyplot as plt

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    check_same_noise(rows)
    add_cost_ratio(rows)
    groups = group_means(rows)
    md = [f"# {title}", "", *notes, "", "## Mean over seeds", "", summary_markdown(groups), "",
          "## Runs", "", format_table(rows, "markdown"), "", "## Plots", "",
          *(f"![{p}]({p})" for p in PLOTS), ""]  # fmt: skip
    paths = [out / "compare.md", out / "compare.csv", out / "compare.json"]
    paths[0].write_text("\n".join(md), encoding="utf-8")
    paths[1].write_text(format_table(rows, "csv") + "\n", encoding="utf-8")
    paths[2].write_text(json.dumps({"groups": groups, "runs": rows}, indent=2), encoding="utf-8")
    _plot_rsum(groups, out / PLOTS[0], plt)
    _plot_detection(rows, records, out / PLOTS[1], plt)
    _plot_weights(rows, records, out / PLOTS[2], plt)
    return [*paths, *(out / p for p in PLOTS)]
