"""Evidential and weight-based methods side by side: one table over finished run directories.

A run directory (``ugncl.run.training``) holds ``config.yaml`` and ``metrics.jsonl``. The
reading
and formatting here are pure functions of those two (``summarize_run(name, config, records)``)
so a table can be tested from hand-written records; :func:`read_run` does the file I/O and
:func:`train_or_resume` trains one config x seed into ``OUT/<config>-s<seed>`` (reusing a
finished run, resuming an unfinished one), the grid of ``tools/compare.py --cfg``.

Columns (:data:`COLUMNS`): run name, method, backbone, dataset, noise ratio, seed, test rSum
and R@1 both ways (the first protocol section of the last test, e.g. COCO's 5-fold 1K), the
epoch of the tested weights, the last epoch's noise detection (``noisy_f1`` of UGNCL's
``division`` or a method's ``noise_detection`` record, ``weight_auc`` of weight-based methods;
blank where the method records none), the sizes and true-clean shares of UGNCL's hard sets in
that division (the determined sets are empty in every synthetic run,
docs/methods/ugncl.md), the training wall time and the process's CPU seconds from the
records' stamps (the cost ratio divides CPU seconds where every row has them). ``threads``
is the CPU thread count the run used (its ``setup`` record; a CPU run's numbers depend on
it, docs/research/2026-ugncl-synthetic.md).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from precomputed.errors import UserError
from ugncl.run.config_upgrade import upgrade_tree
from ugncl.run.results_block import KERNELS

__all__ = [
    "COLUMNS",
    "FORMATS",
    "PLAIN_BASELINE",
    "Column",
    "CompareError",
    "add_cost_ratio",
    "align_noise_ratios",
    "check_same_noise",
    "cost_basis",
    "cpu_seconds",
    "detection_summary",
    "epochs_trained",
    "format_table",
    "grid_run_name",
    "mean_row",
    "method_label",
    "prepare_rows",
    "read_run",
    "run_labels",
    "summarize_run",
    "test_record",
    "train_or_resume",
    "unfinished_error",
    "wall_seconds",
]

#: ``metrics.jsonl`` events that carry a per-epoch noise-detection record.
DETECTION_EVENTS = ("division", "noise_detection")
FORMATS = ("markdown", "csv", "json")


class CompareError(UserError, ValueError):
    """A folder is not a finished run directory (the message says what is missing)."""


@dataclass(frozen=True)
class Column:
    """One table column: row key, markdown header and markdown number format."""

    key: str
    header: str
    fmt: str = ""


COLUMNS: tuple[Column, ...] = (
    Column("run", "run"),
    Column("method", "method"),
    Column("backbone", "backbone"),
    Column("head", "head"),
    Column("dataset", "dataset"),
    Column("noise_ratio", "noise", ".2f"),
    Column("seed", "seed"),
    Column("threads", "threads"),
    Column("rsum", "test rSum", ".1f"),
    Column("i2t_r1", "i2t R@1", ".1f"),
    Column("t2i_r1", "t2i R@1", ".1f"),
    Column("best_epoch", "best epoch"),
    Column("epochs", "epochs"),
    Column("steps", "steps"),
    Column("noisy_f1", "noise F1", ".3f"),
    Column("hard_clean", "hard-clean", ".0f"),
    Column("hard_clean_share", "clean share (hc)", ".2f"),
    Column("hard_noisy", "hard-noisy", ".0f"),
    Column("hard_noisy_share", "clean share (hn)", ".2f"),
    Column("weight_auc", "weight AUC", ".3f"),
    Column("wall_s", "wall s", ".0f"),
    Column("s_per_epoch", "s/epoch", ".1f"),
    Column("cpu_s", "CPU s", ".0f"),
    Column("cost_ratio", "cost x plain", ".2f"),
    Column("noise_sha256", "noise sha256"),
    Column("variant", "variant"),
)
#: Each backbone's plain baseline: the denominator of ``cost_ratio``.
#: (CLIP's InfoNCE method under both of its names, ``clip`` and ``infonce``.)
PLAIN_BASELINE: dict[str, tuple[str, ...]] = {"sgraf": ("triplet",), "clip": ("clip", "infonce")}
#: Characters of the noise file's sha256 shown in tables (the full one is in the run's setup).
SHA_CHARS = 12
# Keys of UGNCL's division record behind the hard-set columns.
_HARD_SET_KEYS = {
    "hard_clean": "n_hard_clean",
    "hard_clean_share": "clean_share_hard_clean",
    "hard_noisy": "n_hard_noisy",
    "hard_noisy_share": "clean_share_hard_noisy",
}
# Averaged by mean_row; the others are labels (kept where every run agrees).
_MEAN_KEYS = (
    "rsum", "i2t_r1", "t2i_r1", "noisy_f1", *_HARD_SET_KEYS, "weight_auc", "wall_s",
    "s_per_epoch", "cpu_s", "cpu_per_epoch", "cost_ratio",
)  # fmt: skip


# ---------------------------------------------------------------------------- reading
def test_record(records: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The first protocol section of the run's last test (None without a ``test`` record).

    A test writes one record per section (COCO: ``testall/5fold`` then ``testall/5k``), all at
    the same ``step``; the first is the dataset's main protocol.
    """
    tests = [r for r in records if r.get("event") == "test"]
    if not tests:
        return None
    step = tests[-1].get("step")
    return next(r for r in tests if r.get("step") == step)


def detection_summary(records: Sequence[dict[str, Any]]) -> dict[str, float | None]:
    """``noisy_f1``, the hard sets and ``weight_auc`` of the last noise-detection record.

    UGNCL records ``division`` (F1 of its noisy sets, and each set's size and true-clean
    share: ``hard_clean``, ``hard_clean_share``, ``hard_noisy``, ``hard_noisy_share``),
    NPC/SDD/OSA ``noise_detection`` (``weight_auc``; SDD also the F1 of its drop set; SDD's
    ``step_weight_auc`` is the previous epoch's step weights, used only when a record has no
    ``weight_auc``). None where absent.
    """
    found = [r for r in records if r.get("event") in DETECTION_EVENTS]
    if not found:
        return {"noisy_f1": None, **dict.fromkeys(_HARD_SET_KEYS), "weight_auc": None}
    last = max(found, key=lambda r: (r.get("epoch") is not None, r.get("epoch") or 0))
    auc = last.get("weight_auc")
    if auc is None:
        auc = last.get("step_weight_auc")
    hard = {key: last.get(field) for key, field in _HARD_SET_KEYS.items()}
    return {"noisy_f1": last.get("noisy_f1"), **hard, "weight_auc": auc}


def _summed_spans(records: Sequence[dict[str, Any]], key: str, strict: bool) -> float | None:
    """The span of the records' ``key`` stamps, summed over attempts (a ``resume`` record
    starts a new one). ``strict``: every timestamped record must carry a finite ``key``
    stamp, else None; otherwise records without one are skipped. None without stamps."""
    attempts: list[list[float]] = [[]]
    for record in records:
        if record.get("event") == "resume" and attempts[-1]:
            attempts.append([])
        if strict and "time" not in record:
            continue
        stamp = record.get(key)
        if isinstance(stamp, (int, float)) and math.isfinite(stamp):
            attempts[-1].append(float(stamp))
        elif strict:
            return None
    spans = [max(a) - min(a) for a in attempts if a]
    return sum(spans) if spans else None


def wall_seconds(records: Sequence[dict[str, Any]]) -> float | None:
    """Training wall time: the span of the records' ``time`` stamps, summed over attempts.

    A ``resume`` record starts a new attempt, so the time between a kill and its resume is not
    counted (the killed attempt's records after its last checkpoint were cut by the resume, so
    the work it redid is counted once). Data opening before the ``setup`` record is not
    included. None when the records carry no timestamps.
    """
    return _summed_spans(records, "time", strict=False)


def cpu_seconds(records: Sequence[dict[str, Any]]) -> float | None:
    """Training CPU seconds of the run's process: the span of the records' ``cpu`` stamps
    (``time.process_time``), summed over attempts as :func:`wall_seconds` sums the wall
    time. Unlike the wall time it does not grow with what else the machine runs. None where
    a timestamped record lacks the stamp (runs recorded before it was written), and for a
    run that trained in several processes (a ``distributed`` record of world > 1): rank 0
    writes the records, so its stamps leave the other ranks' compute out."""
    if any(r.get("event") == "distributed" and int(r.get("world", 1)) > 1 for r in records):
        return None
    return _summed_spans(records, "cpu", strict=True)


def _noise_ratio(config: dict[str, Any], setup: dict[str, Any]) -> tuple[float | None, str]:
    """``(ratio, source)``: the configured ratio (``"configured"``); with a noise file (the
    ratio not configured) the measured noisy share (``"measured"``)."""
    data = config.get("data", {})
    if not data.get("noise_file") and data.get("noise_ratio") is not None:
        return float(data["noise_ratio"]), "configured"
    n, noisy = setup.get("n_train_captions"), setup.get("n_noisy")
    return (round(noisy / n, 4) if n and noisy is not None else None), "measured"


def unfinished_error(run_dir: str | Path) -> CompareError:
    """The error for a run without a ``test`` record."""
    return CompareError(
        f"run {run_dir} has no test record in metrics.jsonl: it is unfinished (continue it with "
        f"python tools/train.py --resume {run_dir}) or was trained with "
        "eval.test_after_training=false"
    )


def summarize_run(
    name: str, config: dict[str, Any], records: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """One table row (keys of :data:`COLUMNS`) from a run's saved config and its records.

    Args:
        name: the run's name (its folder name).
        config: the plain tree of ``config.yaml``.
        records: the records of ``metrics.jsonl`` in order.

    Raises:
        CompareError: the records hold no ``test`` record (the run is not finished).
    """
    test = test_record(records)
    if test is None:
        raise unfinished_error(name)
    rsum = test.get("rsum")
    if isinstance(rsum, bool) or not isinstance(rsum, int | float) or not math.isfinite(rsum):
        # A NaN (a diverged run) or a hand-edited value must not be tabled as a result.
        raise CompareError(
            f"run {name}: its test record's rsum is {rsum!r}, not a finite number; the run "
            "diverged or metrics.jsonl was edited: retrain it or leave it out of the table"
        )
    setup = next((r for r in records if r.get("event") == "setup"), {})
    seed = setup.get("seed", config.get("train", {}).get("seed"))
    # CPU threads the run used (older runs without it in their setup record: the config's).
    threads = setup.get("threads", config.get("train", {}).get("threads"))
    wall, epochs = wall_seconds(records), epochs_trained(records)
    # CPU seconds are a run's compute only on the CPU: an accelerator's work is not in them.
    cpu = cpu_seconds(records) if str(setup.get("device", "cpu")).startswith("cpu") else None
    ratio, ratio_source = _noise_ratio(config, setup)
    backbone = config.get("model", {}).get("backbone")
    return {
        "run": name,
        "method": method_label(config),
        "variant": method_label(config),  # a grid names its variants
        "backbone": backbone,
        "head": head_label(config),
        "dataset": config.get("data", {}).get("name"),
        "noise_ratio": ratio,
        "noise_ratio_source": ratio_source,
        "seed": seed,
        "threads": threads,
        "rsum": rsum,
        "i2t_r1": test.get("i2t/R@1"),
        "t2i_r1": test.get("t2i/R@1"),
        "best_epoch": test.get("epoch"),
        "epochs": epochs,
        "steps": test.get("step"),  # the optimiser steps behind the tested weights' run
        **detection_summary(records),
        "wall_s": wall,
        "s_per_epoch": wall / epochs if wall is not None and epochs else None,
        "cpu_s": cpu,
        "cpu_per_epoch": cpu / epochs if cpu is not None and epochs else None,
        "cost_ratio": None,  # filled by add_cost_ratio over a whole table
        "noise_sha256": (setup.get("noise_sha256") or "")[:SHA_CHARS] or None,
        "cpu_kernels": setup.get("cpu_kernels"),  # None: a run older than the record
        **shared_settings(config),
    }


def cpu_kernels_note(rows: Sequence[dict[str, Any]]) -> str:
    """The report's line on the CPU kernels its runs computed with (their setup records'
    ``cpu_kernels``): one label when every run agrees, else each label with its count. Runs
    that agree print the same numbers for a seed and thread count; pinned kernels
    (``make compare``) agree on every x86 machine with AVX2 (docs/reproducibility.md)."""
    found = Counter(str(r.get("cpu_kernels") or "not recorded") for r in rows)
    if len(found) == 1:
        (label,) = found
        return f"{KERNELS} {label}, every run."
    counts = (f"{k} ({n} run{'s' if n != 1 else ''})" for k, n in sorted(found.items()))
    return f"{KERNELS} " + ", ".join(counts) + "."


#: The hyper-parameters a comparison's rows share unless a method's reading sets its own.
SHARED_KEYS = ("optimizer", "lr", "weight_decay", "image_decay_per_rms", "batch_size")


def shared_settings(config: dict[str, Any]) -> dict[str, Any]:
    """The run's :data:`SHARED_KEYS` (from ``train``) and its method's ``reading`` (None
    where the method has no reading switch)."""
    train = config.get("train", {})
    method = config.get("method", {})
    section = method.get(method.get("name")) or {}
    return {
        **{key: train.get(key) for key in SHARED_KEYS},
        "reading": section.get("reading") if isinstance(section, dict) else None,
    }


def method_label(config: dict[str, Any]) -> str | None:
    """The method column of a run's config tree: ``method.name``, or ``<name>_clean_pairs``
    for a clean-pairs oracle (``method.triplet.train_pairs: clean``, ``method.infonce...``),
    which reads the noise file's truth and must neither pass for the plain baseline nor be
    its cost reference."""
    method = config.get("method", {})
    name = method.get("name")
    if (method.get(name) or {}).get("train_pairs") == "clean":
        return f"{name}_clean_pairs"
    return name


def head_label(config: dict[str, Any]) -> str | None:
    """SGRAF's similarity head (``model.sgraf.head``: ``sgr`` or ``saf``; SGRAF's default
    ``sgr`` where the config names none); None on another backbone."""
    model = config.get("model", {})
    if model.get("backbone", "sgraf") != "sgraf":
        return None
    return str((model.get("sgraf") or {}).get("head") or "sgr")


def epochs_trained(records: Sequence[dict[str, Any]]) -> int:
    """Distinct epochs with a ``train`` record (warm-up epochs included)."""
    return len({r.get("epoch") for r in records if r.get("event") == "train"})


def run_labels(run_dirs: Sequence[str | Path]) -> list[str]:
    """Each run's ``run`` label: its folder name, or ``<parent>/<name>`` where several of
    ``run_dirs`` share a name (``tools/demo.py`` names its runs by config, so a seed grid's
    ``runs/grid/s0t1/ugncl_synthetic`` and ``runs/grid/s1t1/ugncl_synthetic`` stay apart)."""
    paths = [Path(p) for p in run_dirs]
    names = [p.name for p in paths]
    return [f"{p.parent.name}/{p.name}" if names.count(p.name) > 1 else p.name for p in paths]


def read_run(run_dir: str | Path, name: str | None = None) -> dict[str, Any]:
    """:func:`summarize_run` of the run directory ``run_dir`` (row label ``name``, default
    the folder name).

    Raises:
        CompareError: not a run directory (no ``config.yaml`` or ``metrics.jsonl``), an
            unreadable file, or an unfinished run.
    """
    import yaml  # a training dependency; the pure functions above need none

    run_dir = Path(run_dir)
    config_path, metrics_path = run_dir / "config.yaml", run_dir / "metrics.jsonl"
    missing = [p.name for p in (config_path, metrics_path) if not p.is_file()]
    if not run_dir.is_dir() or missing:
        what = "no such folder" if not run_dir.is_dir() else f"no {' or '.join(missing)}"
        raise CompareError(
            f"{run_dir} is not a run directory ({what}); pass folders written by "
            "tools/train.py (run.out_dir/run.name, e.g. runs/clip_synthetic-20261122-101500)"
        )
    try:
        config = yaml.safe_load(config_path.read_text(encoding="utf-8")) or {}
        lines = metrics_path.read_text(encoding="utf-8").splitlines()
        records = [json.loads(line) for line in lines if line.strip()]
    except (yaml.YAMLError, json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CompareError(f"{run_dir}: cannot read its config.yaml/metrics.jsonl ({err})") from err
    if not isinstance(config, dict):
        raise CompareError(f"{config_path} is not a config mapping")
    config = upgrade_tree(config, str(config_path))  # an earlier version's names
    if test_record(records) is None:
        raise unfinished_error(run_dir)
    return summarize_run(name or run_dir.name, config, records)


# ---------------------------------------------------------------------------- checking
#: A measured noisy share this close to a configured ratio of the same table is that ratio
#: (NCR-style noise at 0.2 moves 19.7% of the captions: a caption can land on its own image).
RATIO_TOLERANCE = 0.03


def align_noise_ratios(rows: Sequence[dict[str, Any]]) -> None:
    """Give every row the noise ratio it is grouped by, however it got its noise.

    A configured ratio stays; a measured share (a ``data.noise_file`` run) takes the nearest
    configured ratio among ``rows`` within :data:`RATIO_TOLERANCE`, else the share rounded
    to two decimals, so a file at 19.67% and one at 20.12% meet each other and a 0.2 row.
    """
    configured = {
        float(r["noise_ratio"])
        for r in rows
        if r.get("noise_ratio_source") != "measured" and r.get("noise_ratio") is not None
    }
    for row in rows:
        share = row.get("noise_ratio")
        if row.get("noise_ratio_source") != "measured" or share is None:
            continue
        near = min(configured, key=lambda c: abs(c - share), default=None)
        if near is not None and abs(near - share) <= RATIO_TOLERANCE:
            row["noise_ratio"] = near
        else:
            row["noise_ratio"] = round(float(share), 2)


def prepare_rows(rows: Sequence[dict[str, Any]]) -> None:
    """Everything a table needs before it is printed: ratios aligned
    (:func:`align_noise_ratios`), one noise file per ratio and seed
    (:func:`check_same_noise`), the cost ratios (:func:`add_cost_ratio`)."""
    align_noise_ratios(rows)
    check_same_noise(rows)
    add_cost_ratio(rows)


def check_same_noise(rows: Sequence[dict[str, Any]]) -> None:
    """Refuse rows of one noise ratio and seed trained on different noise files.

    A comparison is only fair on one split: every run of one (noise ratio, seed) must carry
    the same noise sha256 (its ``setup`` record). Rows without a hash (runs older than the
    record field) are not checked.

    Raises:
        CompareError: naming each file's short hash and the runs trained on it.
    """
    groups: dict[tuple[Any, Any], dict[str, list[str]]] = {}
    for row in rows:
        sha = row.get("noise_sha256")
        if sha and not str(row.get("seed", "")).startswith("mean"):
            key = (row.get("noise_ratio"), row.get("seed"))
            groups.setdefault(key, {}).setdefault(sha, []).append(str(row.get("run")))
    for (ratio, seed), files in groups.items():
        if len(files) > 1:
            which = "; ".join(f"{sha}: {', '.join(runs)}" for sha, runs in files.items())
            raise CompareError(
                f"runs of noise {ratio} and seed {seed} were trained on different noise files "
                f"({which}); a comparison needs one split: retrain the odd runs with the same "
                "data.noise_file (or data.noise_ratio, data.noise_seed and data.train_images), "
                "or leave them out"
            )


def cost_basis(rows: Sequence[dict[str, Any]], backbone: str) -> str:
    """What ``cost_ratio`` divides on ``backbone``: ``cpu_per_epoch`` where every run row of
    it has the process's CPU seconds (the run's own compute), else ``s_per_epoch`` (wall
    time, which also counts what else the machine ran at the time)."""
    mine = [
        r for r in rows
        if str(r.get("backbone")) == backbone and not str(r.get("seed", "")).startswith("mean")
    ]  # fmt: skip
    return "cpu_per_epoch" if mine and all(r.get("cpu_per_epoch") for r in mine) else "s_per_epoch"


def add_cost_ratio(rows: Sequence[dict[str, Any]]) -> None:
    """Fill ``cost_ratio``: each row's seconds per epoch (:func:`cost_basis`: CPU where every
    row of the backbone has it, else wall) over the mean of its backbone's plain baseline
    among ``rows`` (None where that baseline is absent). The baseline rows are those flagged
    ``plain`` (a plan's), else those whose method is :data:`PLAIN_BASELINE`'s."""
    flagged = any(r.get("plain") for r in rows)
    basis = {b: cost_basis(rows, b) for b in {str(r.get("backbone")) for r in rows}}
    base: dict[str, list[float]] = {}
    for row in rows:
        key = basis[str(row.get("backbone"))]
        if str(row.get("seed", "")).startswith("mean") or row.get(key) is None:
            continue
        plain = PLAIN_BASELINE.get(str(row.get("backbone")), ())
        if row.get("plain") if flagged else row.get("method") in plain:
            base.setdefault(str(row["backbone"]), []).append(float(row[key]))
    for row in rows:
        times = base.get(str(row.get("backbone")))
        key = basis[str(row.get("backbone"))]
        if times and row.get(key) is not None:
            row["cost_ratio"] = float(row[key]) / (sum(times) / len(times))


# ---------------------------------------------------------------------------- aggregating
def mean_row(rows: Sequence[dict[str, Any]], label: str) -> dict[str, Any]:
    """The mean of ``rows`` (e.g. one config over seeds) as a row named ``label``.

    Metrics are averaged over the rows that have them (None where none has); label columns
    keep a value all rows share and are None otherwise; ``seed`` reads ``mean of N``.
    """
    out: dict[str, Any] = {c.key: None for c in COLUMNS}
    out["run"] = label
    for key in ("method", "variant", "backbone", "head", "dataset", "noise_ratio", "threads",
                "noise_sha256", "steps", "epochs"):  # fmt: skip
        values = {r.get(key) for r in rows}
        out[key] = values.pop() if len(values) == 1 else None
    for key in _MEAN_KEYS:
        values = [float(r[key]) for r in rows if r.get(key) is not None]
        out[key] = sum(values) / len(values) if values else None
    out["seed"] = f"mean of {len(rows)}"
    return out


# ---------------------------------------------------------------------------- formatting
def _cell(value: Any, fmt: str) -> str:
    if value is None:
        return ""
    if fmt and isinstance(value, (int, float)) and not isinstance(value, bool):
        return format(value, fmt)
    return str(value)


def format_table(rows: Sequence[dict[str, Any]], fmt: str = "markdown") -> str:
    """``rows`` as a markdown table (rounded), CSV (full precision) or JSON (a list of rows).

    Blank cells (CSV: empty, JSON: null) mark values a run does not record.
    """
    keys = [c.key for c in COLUMNS]
    if fmt == "json":
        return json.dumps([{k: r.get(k) for k in keys} for r in rows], indent=2)
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(keys)
        writer.writerows([_cell(r.get(k), "") for k in keys] for r in rows)
        return buffer.getvalue().rstrip("\n")
    if fmt != "markdown":
        raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")
    cells = [[_cell(r.get(c.key), c.fmt) for c in COLUMNS] for r in rows]
    header = [c.header for c in COLUMNS]
    widths = [max(len(line[i]) for line in [header, *cells]) for i in range(len(COLUMNS))]
    numeric = [
        bool(c.fmt) or c.key in ("seed", "threads", "best_epoch", "epochs", "steps")
        for c in COLUMNS
    ]

    def line(values: list[str]) -> str:
        padded = [v.rjust(w) if n else v.ljust(w) for v, w, n in zip(values, widths, numeric)]
        return "| " + " | ".join(padded) + " |"

    rule = ["-" * (w - 1) + ":" if n else "-" * w for w, n in zip(widths, numeric)]
    return "\n".join([line(header), line(rule), *(line(c) for c in cells)])


# ---------------------------------------------------------------------------- training
def grid_run_name(config_name: str, seed: int) -> str:
    """The folder of one config x seed in a comparison grid: ``<config stem>-s<seed>``."""
    from ugncl.run.config import resolve_config_path

    return f"{resolve_config_path(config_name).stem}-s{seed}"


def train_or_resume(
    config_name: str, seed: int, out_dir: str | Path, overrides: Sequence[str] = ()
) -> tuple[Path, str]:
    """Train ``config_name`` with ``train.seed=seed`` into ``out_dir/<config>-s<seed>``.

    A folder that already holds the run is resumed through ``ugncl.run.training.train``
    (exactly
    as ``tools/train.py --resume``): a finished, tested run is reused untouched, an unfinished
    one continues from its last checkpoint. ``overrides`` must then agree with the run's saved
    config (only how long and how it runs may change, see ``SAFE_RESUME_KEYS``).

    Returns:
        The run directory and what happened: ``"trained"``, ``"resumed"`` or ``"reused"``.

    Raises:
        ConfigError: unknown config or key, or ``overrides`` that contradict an existing run.
    """
    import torch

    threads = torch.get_num_threads()
    try:
        return _train_or_resume(config_name, seed, out_dir, overrides)
    finally:
        # train.threads is process-wide: without this a grid's next run inherits it, so its
        # thread count (and its CPU numbers) would depend on the order of --cfg.
        torch.set_num_threads(threads)


def _train_or_resume(
    config_name: str, seed: int, out_dir: str | Path, overrides: Sequence[str]
) -> tuple[Path, str]:
    from ugncl.run.config import ConfigError, load_config
    from ugncl.run.training import load_resume_config, train

    name = grid_run_name(config_name, seed)
    run_dir = Path(out_dir) / name
    settings = [*overrides, f"train.seed={seed}"]
    if not run_dir.exists():
        config, _ = load_config(
            config_name, [*settings, f"run.out_dir={out_dir}", f"run.name={name}"]
        )
        train(config, config_name=name)
        return run_dir, "trained"
    try:
        config = load_resume_config(run_dir, settings)
        result = train(config, config_name=name, resume_dir=run_dir)
    except ConfigError as err:
        raise ConfigError(
            f"{run_dir} already holds a run with other settings ({err}); pass another --out "
            "or the settings it was trained with"
        ) from err
    return run_dir, "reused" if result.finished_before else "resumed"
