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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ugncl.run.compare import PLAIN_BASELINE, CompareError, format_table, prepare_rows
from ugncl.run.compare_claims import (
    best_method,
    claim_pairs,
    claim_sentence,
    gain_lines,
    paired_claim,
)
from ugncl.run.compare_regime import noise_cost_sentence, stand_in_sentence

__all__ = [
    "PLOTS",
    "budget_markdown",
    "claims_markdown",
    "group_means",
    "regime_markdown",
    "rsum_cell",
    "write_report",
]

PLOTS = ("rsum_vs_noise.png", "detection.png", "weights.png")
_SETS = ("clean", "hard_clean", "hard_noisy", "noisy")


def _stats(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (None for one value: no spread to show)."""
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, None
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return mean, math.sqrt(var)


def _line_key(row: dict[str, Any]) -> tuple:
    return (row.get("backbone"), row.get("head"), row.get("variant") or row.get("method"),
            row.get("noise_ratio"))  # fmt: skip


def group_means(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One line per (backbone, SGRAF head, variant, noise ratio): mean and standard deviation
    of test rSum over seeds (None for one seed), their count, the optimiser steps, the mean
    detection metric, wall time and cost."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(_line_key(row), []).append(row)
    out = []
    for (backbone, head, variant, ratio), members in sorted(
        groups.items(), key=lambda kv: str(kv[0])
    ):
        rsums = [float(r["rsum"]) for r in members if r.get("rsum") is not None]
        mean, std = _stats(rsums) if rsums else (None, None)

        def avg(key: str, members=members) -> float | None:
            vals = [float(r[key]) for r in members if r.get(key) is not None]
            return sum(vals) / len(vals) if vals else None

        def joined(key: str, members=members) -> str:
            return "/".join(sorted({str(r.get(key)) for r in members}))

        out.append({
            "backbone": backbone, "head": head, "variant": variant, "noise_ratio": ratio,
            "seeds": len(rsums), "rsum_mean": mean, "rsum_std": std,
            "epochs": joined("epochs"), "steps": joined("steps"),
            "noisy_f1": avg("noisy_f1"), "weight_auc": avg("weight_auc"),
            "wall_s": avg("wall_s"), "s_per_epoch": avg("s_per_epoch"),
            "cost_ratio": avg("cost_ratio"),
            "noise_sha256": ",".join(sorted({str(r.get("noise_sha256")) for r in members})),
        })  # fmt: skip
    return out


def _fmt(v: Any, spec: str) -> str:
    return "" if v is None else format(v, spec) if isinstance(v, float) else str(v)


def rsum_cell(mean: float | None, std: float | None, seeds: int) -> str:
    """``mean ± sd`` over seeds; one seed: the value and ``1 seed`` (no spread measured)."""
    if mean is None:
        return ""
    if seeds < 2 or std is None:
        return f"{mean:.1f} (1 seed)"
    return f"{mean:.1f} ± {std:.1f}"


def _model(group: dict[str, Any]) -> str:
    return _where(group["backbone"], group.get("head"))


def summary_markdown(groups: Sequence[dict[str, Any]]) -> str:
    header = (
        "| model | method | noise | seeds | epochs | steps | test rSum (mean ± sd) | "
        "noise F1 | weight AUC | wall s | s/epoch | cost x plain | noise sha256 |"
    )
    lines = [header, "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|"]
    for g in groups:
        rsum = rsum_cell(g["rsum_mean"], g["rsum_std"], g["seeds"])
        lines.append(
            f"| {_model(g)} | {g['variant']} | {_fmt(g['noise_ratio'], '.2f')} | "
            f"{g['seeds']} | {g['epochs']} | {g['steps']} | {rsum} | "
            f"{_fmt(g['noisy_f1'], '.3f')} | {_fmt(g['weight_auc'], '.3f')} | "
            f"{_fmt(g['wall_s'], '.0f')} | {_fmt(g['s_per_epoch'], '.1f')} | "
            f"{_fmt(g['cost_ratio'], '.2f')} | {g['noise_sha256']} |"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------- sentences
#: Report lines that are controls, not methods (no "what drives the gain" line).
CONTROLS = ("clean", "oracle", "triplet_clean_pairs", "clip_clean_pairs")


def _plain_variants(rows: Sequence[dict[str, Any]]) -> dict[str, str]:
    """Each backbone's plain baseline line: the variant of its rows flagged ``plain`` (a
    plan's), else :data:`ugncl.run.compare.PLAIN_BASELINE`'s method."""
    out: dict[str, str] = {}
    for row in rows:
        if row.get("plain") and (row.get("noise_ratio") or 0) > 0:
            out.setdefault(str(row["backbone"]), str(row.get("variant")))
    for row in rows:
        backbone = str(row.get("backbone"))
        if backbone not in out and row.get("method") in PLAIN_BASELINE.get(backbone, ()):
            out[backbone] = str(row.get("variant") or row.get("method"))
    return out


def _by_line(
    rows: Sequence[dict[str, Any]], *, noisy: bool = True
) -> dict[tuple, dict[str, dict[Any, dict]]]:
    """``{(backbone, head, ratio): {variant: {seed: row}}}`` of the noisy rows (``noisy``
    False: of the rows at 0% noise); a grid's mean rows are not seeds and are left out."""
    out: dict[tuple, dict[str, dict[Any, dict]]] = {}
    for row in rows:
        if bool(row.get("noise_ratio")) != noisy or str(row.get("seed", "")).startswith("mean"):
            continue
        key = (row.get("backbone"), row.get("head"), row.get("noise_ratio"))
        variant = str(row.get("variant") or row.get("method"))
        out.setdefault(key, {}).setdefault(variant, {})[row.get("seed")] = row
    return out


def _rsums(lines: Mapping[str, Mapping[Any, dict]]) -> dict[str, dict[Any, float]]:
    """``{variant: {seed: test rSum}}`` of one :func:`_by_line` group."""
    return {v: {s: float(r["rsum"]) for s, r in seeds.items()} for v, seeds in lines.items()}


def _where(backbone: Any, head: Any) -> str:
    """The model as the report names it: the backbone, and the SGRAF head where it has one."""
    return f"{backbone} ({head.upper()})" if head else str(backbone)


def claims_markdown(
    rows: Sequence[dict[str, Any]], hits: Mapping[str, tuple[np.ndarray, np.ndarray] | None]
) -> list[str]:
    """The report's pairwise sentences and "what drives the gain", computed from ``rows``
    and each run's per-query hits (``hits[run]``; None or absent: seeds only)."""
    plain = _plain_variants(rows)
    claims, gains = [], []
    for (backbone, head, ratio), lines in sorted(_by_line(rows).items(), key=str):
        base = plain.get(str(backbone))
        if base is None:
            continue
        rsums = _rsums(lines)
        found = {
            v: {s: hits.get(str(r["run"])) for s, r in seeds.items() if hits.get(str(r["run"]))}
            for v, seeds in lines.items()
        }
        where = _where(backbone, head)
        best = best_method(rsums, base, CONTROLS)
        for a, b in claim_pairs(sorted(lines), base, best, CONTROLS):
            claim = paired_claim(where, ratio, a, b, rsums[a], rsums[b], found[a], found[b])
            if claim is not None:
                claims.append(f"- {claim_sentence(claim)}")
        found_gains = gain_lines(rsums, base, CONTROLS)
        if found_gains:
            gains += [f"{where}, noise {ratio:.2f}, over `{base}`:", "", *found_gains, ""]
    out = ["## Claims", "", *(claims or ["No pair of lines shares a seed."]), ""]
    out += ["## What drives the gain", "", *(gains or ["No method line beside a plain one."])]
    return out


def _clean_references(rows: Sequence[dict[str, Any]]) -> dict[tuple, dict[Any, float]]:
    """``{(backbone, head): {seed: rsum}}`` of each model's clean reference: its one line at
    0% noise (where there are several, the one flagged ``plain``; none: left out)."""
    out = {}
    for (backbone, head, _), variants in _by_line(rows, noisy=False).items():
        flagged = [
            v for v, seeds in variants.items() if any(r.get("plain") for r in seeds.values())
        ]
        chosen = list(variants) if len(variants) == 1 else flagged
        if len(chosen) == 1:
            out[(backbone, head)] = _rsums(variants)[chosen[0]]
    return out


def regime_markdown(
    rows: Sequence[dict[str, Any]], stand_in: tuple[str, Mapping[str, Any]] | None = None
) -> list[str]:
    """The "Regime" section: the CLIP stand-in's zero-shot against the clean fine-tune
    (``stand_in``: its weights' path and pretraining record), and per backbone and noise
    ratio what noise costs the plain baseline and what the best method wins back."""
    plain = _plain_variants(rows)
    clean = _clean_references(rows)
    lines = []
    if stand_in is not None:
        clip_clean = next((v for (b, _), v in clean.items() if b == "clip"), None)
        sentence = stand_in_sentence(stand_in[0], stand_in[1], clip_clean)
        lines += [f"- {sentence}"] if sentence else []
    for (backbone, head, ratio), found in sorted(_by_line(rows).items(), key=str):
        base, reference = plain.get(str(backbone)), clean.get((backbone, head))
        if base is None or base not in found or reference is None:
            continue
        rsums = _rsums(found)
        best = best_method(rsums, base, CONTROLS)
        top = (best, rsums[best]) if best else None
        sentence = noise_cost_sentence(
            _where(backbone, head), float(ratio), base, reference, rsums[base], top
        )
        lines += [f"- {sentence}"] if sentence else []
    return ["## Regime", "", *(lines or ["No clean reference beside a plain line."]), ""]


def budget_markdown(rows: Sequence[dict[str, Any]]) -> list[str]:
    """One budget: each backbone's optimiser steps per row (a warm start's counted), the
    rows that differ named; and the shared hyper-parameters, the rows that depart from the
    plain baseline's named with their reading."""
    from ugncl.run.compare import SHARED_KEYS, cost_basis

    plain = _plain_variants(rows)
    out = ["## Budget and shared settings", ""]
    for backbone in sorted({str(r.get("backbone")) for r in rows}):
        mine = [r for r in rows if str(r.get("backbone")) == backbone]
        steps = {r.get("steps") for r in mine if r.get("steps") is not None}
        if len(steps) == 1:
            out.append(f"- {backbone}: every row trains {steps.pop()} optimiser steps.")
        if cost_basis(rows, backbone) == "cpu_per_epoch":
            out.append(f"- {backbone}: `cost x plain` divides the runs' CPU seconds per epoch.")
        else:
            out.append(f"- {backbone}: `cost x plain` divides wall seconds per epoch (not every "
                       "run has CPU seconds: recorded before the stamp, on an accelerator or in "
                       "several processes): it also counts what else the machine ran at the "
                       "time.")  # fmt: skip
        if len(steps) > 1:
            counts: dict[Any, list[str]] = {}
            for r in mine:
                counts.setdefault(r.get("steps"), []).append(str(r.get("variant")))
            parts = "; ".join(f"{k}: {', '.join(sorted(set(v)))}" for k, v in sorted(
                counts.items(), key=lambda kv: str(kv[0])))  # fmt: skip
            out.append(f"- {backbone}: the rows differ in optimiser steps ({parts}).")
        ref = next((r for r in mine if r.get("variant") == plain.get(backbone)), None)
        if ref is None:
            continue
        shared = ", ".join(f"{k} {ref.get(k)}" for k in SHARED_KEYS)
        out.append(f"- {backbone}: shared settings (`{ref.get('variant')}`): {shared}.")
        departs: dict[str, list[str]] = {}
        for r in mine:
            diff = [f"{k} {r.get(k)}" for k in SHARED_KEYS if r.get(k) != ref.get(k)]
            if diff:
                why = (f"its {r['reading']} reading" if r.get("reading") in ("paper", "release")
                       else "the config")  # fmt: skip
                departs.setdefault(f"`{r.get('variant')}` ({why}): {', '.join(diff)}", [])
        out += [f"  - departs: {line}" for line in sorted(departs)]
    return [*out, ""]


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
    "ugncl": "tab:red", "hinge_all": "tab:blue", "hinge": "tab:blue", "finetune": "tab:blue",
    "oracle": "tab:olive", "clean": "tab:cyan", "triplet": "tab:gray", "clip": "tab:blue",
    "npc": "tab:orange", "sdd": "tab:green", "osa": "tab:purple", "infonce": "tab:brown",
}  # fmt: skip


def _colour(variant: str) -> str:
    family = str(variant).split("+")[0].split("-")[0]
    return _COLOURS.get(variant, _COLOURS.get(family, "black"))


def _plot_rsum(groups: Sequence[dict[str, Any]], path: Path, plt: Any) -> None:
    backbones = sorted({g["backbone"] for g in groups})
    fig, axes = plt.subplots(1, len(backbones), figsize=(6 * len(backbones), 4.5), squeeze=False)
    for ax, backbone in zip(axes[0], backbones):
        mine = [g for g in groups if g["backbone"] == backbone and g["rsum_mean"] is not None]
        for head, variant in sorted({(g["head"] or "", g["variant"]) for g in mine}):
            line = sorted((g for g in mine if (g["head"] or "", g["variant"]) == (head, variant)),
                          key=lambda g: g["noise_ratio"])  # fmt: skip
            xs = [g["noise_ratio"] for g in line]
            label = f"{variant} ({head.upper()})" if head == "saf" else variant
            ax.errorbar(xs, [g["rsum_mean"] for g in line],
                        yerr=[g["rsum_std"] or 0.0 for g in line], marker="o", capsize=3,
                        label=label, color=_colour(variant))  # fmt: skip
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
    hits: Mapping[str, tuple[np.ndarray, np.ndarray] | None] | None = None,
    stand_in: tuple[str, Mapping[str, Any]] | None = None,
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
        hits: each run's per-query hit probabilities (``test_queries.npz``), by its ``run``,
            for the claims' bootstrap over test queries (absent: seeds only).
        stand_in: the CLIP stand-in's weights path and pretraining record, for the
            "Regime" section's zero-shot line (None: no such line).

    Raises:
        CompareError: no row (nothing finished), or rows of one noise ratio and seed trained
            on different noise files.
    """
    if not rows:
        raise CompareError(
            f"no finished run to report in {out}: train the plan first (the same command "
            "without --report-only), or pass finished run folders"
        )
    prepare_rows(rows)
    import matplotlib

    matplotlib.use("Agg")  # headless: no display on a server or in CI
    import matplotlib.pyplot as plt

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    groups = group_means(rows)
    md = [f"# {title}", "", *notes, "", "## Mean over seeds", "", summary_markdown(groups), "",
          *regime_markdown(rows, stand_in), *budget_markdown(rows),
          *claims_markdown(rows, hits or {}), "",
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
