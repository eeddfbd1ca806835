"""``make compare``: every method on both backbones on one noisy split, as separate processes.

A plan is a list of :class:`Cell` (one training run each: a config, its overrides, and
optionally the cell whose checkpoint it starts from). :func:`run_plan` trains the cells as
``tools/train.py`` subprocesses, ``jobs`` at a time: process-wide state (torch's thread count,
RNGs, open_clip's caches) cannot leak from one run into the next, and a killed comparison
resumes where it stopped -- a cell whose folder holds a test record is reused, one whose folder
exists without it continues with ``--resume``, the others start.

Same split, provably: every cell of one noise ratio trains on the world's noise file of that
ratio (``data.noise_ratio`` with ``data.noise_seed`` 0, the same file for both backbones: the
CLIP view of the synthetic world shares the captions and the noise index); the report refuses
rows of one ratio and seed whose ``setup`` sha256 differ
(:func:`ugncl.run.compare.check_same_noise`).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ugncl.run.compare import epochs_trained, read_run

__all__ = ["Cell", "PlanSize", "cell_state", "default_plan", "run_plan"]

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "tools" / "train.py"
START = "@start_from@"  # in a cell's overrides: the checkpoint of the cell it starts from


@dataclass(frozen=True)
class Cell:
    """One run of a comparison.

    Attributes:
        name: its folder under the comparison's output folder.
        label: the line it belongs to in the report (a method, or a variant such as the
            all-negatives hinge).
        backbone: ``sgraf`` or ``clip``.
        config: the config name in ``configs/``.
        overrides: ``--set`` values (noise, seed, sizes).
        start_from: the cell whose ``checkpoints/last.pt`` this one starts from
            (``model.sgraf.init``), trained first.
        report: a row of the report (False for warm-up cells).
    """

    name: str
    label: str
    backbone: str
    config: str
    overrides: tuple[str, ...]
    noise_ratio: float
    seed: int
    start_from: str | None = None
    report: bool = True


@dataclass(frozen=True)
class PlanSize:
    """What the budget buys: seeds, noise ratios and the CLIP track's size.

    Both tracks train on the same first ``train_images`` images of the world (so on one noise
    index per ratio: a noise index built for another subset is another file). On SGRAF, UGNCL
    and the all-negatives hinge (the clean reference's config) train ``sgraf_epochs`` epochs
    each (UGNCL 2 warm-up + the rest divided, lr x 0.1 for the last; the hinge all but the last
    over all negatives, the last on the hardest); None keeps the configs' 20. The
    hardest-negative triplet keeps its 1 + 3. The CLIP track trains ``clip_epochs`` epochs.
    """

    seeds: tuple[int, ...] = (0, 1)
    ratios: tuple[float, ...] = (0.2, 0.5)
    train_images: int = 500
    sgraf_epochs: int | None = 14
    clip_epochs: int = 2
    sgraf_warmup_epochs: int = 2  # the NPC/SDD warm start on SGRAF (all-negatives hinge)
    sgraf_method_epochs: int = 3  # NPC/SDD epochs after it
    infonce_on_sgraf: bool = False  # the unweighted InfoNCE control of NPC/SDD on SGRAF
    extra: dict[str, Any] = field(default_factory=dict)


DEFAULT = PlanSize()
FULL = PlanSize(
    seeds=(0, 1, 2), ratios=(0.2, 0.5, 0.8), train_images=1000, sgraf_epochs=None,
    clip_epochs=3, infonce_on_sgraf=True,
)  # fmt: skip


def _sgraf_schedules(epochs: int | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``--set`` values of the hinge (clean_synthetic) and UGNCL cells for ``epochs``."""
    if epochs is None:
        return (), ()
    if epochs < 4:
        raise ValueError(f"sgraf_epochs must be >= 4 (2 warm-up + 2 divided), got {epochs}")
    hinge = (f"train.warmup_epochs={epochs - 1}", "train.epochs=1")
    ugncl = ("train.warmup_epochs=2", f"train.epochs={epochs - 2}",
             f"train.lr_update={epochs - 3}")  # fmt: skip
    return hinge, ugncl


# SDD's release thresholds (alpha 20, beta 30) are CLIP ViT-B/32 cosines on its x100 logit
# scale; SGRAF's scores live on another scale, so its bank and drop thresholds come from the
# warm start's non-matching pair scores (``thresholds: auto``). The bank's beta at their mean
# + 1 sd: after the 2-epoch warm-up on 500 images it kept 1247 pairs (88% clean) at 20% noise
# and 805 (64% clean) at 50%; the CLIP default of + 2 sd kept none.
SDD_ON_SGRAF = ("method.sdd.thresholds=auto", "method.sdd.auto_beta_std=1.0")


# NPC's bank keeps pairs whose clean posterior under a 2-component GMM of the per-sample losses
# exceeds the threshold; after a 2-epoch SGRAF warm-up the components overlap, and the
# paper's 0.99 kept no pair at 20% noise, seed 1 (measured); the release's 0.9 kept 1276 pairs,
# 90% clean.
NPC_ON_SGRAF = ("method.npc.clean_threshold=0.9",)


def _pct(ratio: float) -> str:
    return f"n{round(ratio * 100):02d}"


class _CellMaker:
    """Appends the cells of one (noise ratio, seed) with their shared overrides."""

    def __init__(self, cells: list[Cell], world: str, ratio: float, seed: int, images: int) -> None:
        self.cells, self.ratio, self.seed = cells, ratio, seed
        self.tag = f"{_pct(ratio)}-s{seed}"
        self.common = (f"data.root={world}", f"data.train_images={images}",
                       f"data.noise_ratio={ratio}", "data.noise_seed=0", f"train.seed={seed}",
                       "train.threads=1")  # fmt: skip

    def __call__(self, backbone: str, label: str, config: str, *extra: str, **kw: Any) -> str:
        name = f"{backbone}-{label}-{self.tag}"
        cell = Cell(name, label, backbone, config, (*self.common, *extra), self.ratio,
                    self.seed, **kw)  # fmt: skip
        self.cells.append(cell)
        return name


def default_plan(
    world: str | Path, clip_weights: str | Path | None, size: PlanSize = DEFAULT
) -> list[Cell]:
    """The cells of ``make compare``: both backbones, every method at each noise ratio of
    ``size``, each backbone's plain baselines also at 0% (on SGRAF the hardest-negative
    triplet and the clean reference, ``clean_synthetic``), and the all-negatives hinge with
    the clean reference's schedule (``clean_synthetic`` at noise > 0) beside the
    hardest-negative hinge; NPC and SDD on SGRAF start from a warm-up cell of the same split
    and seed. ``clip_weights`` None (a world without a CLIP view): the SGRAF track only, and
    no OSA there (its estimator is the CLIP stand-in)."""
    clip_view = (f"model.clip.pretrained={clip_weights}", f"train.epochs={size.clip_epochs}")
    hinge_schedule, ugncl_schedule = _sgraf_schedules(size.sgraf_epochs)
    cells: list[Cell] = []
    for seed in size.seeds:
        for ratio in (0.0, *size.ratios):
            add = _CellMaker(cells, str(world), ratio, seed, size.train_images)
            add("sgraf", "triplet", "triplet_synthetic")
            # at 0% the clean reference: the plain model's ceiling on this world
            add("sgraf", "hinge_all", "clean_synthetic", *hinge_schedule)
            if clip_weights is not None:
                add("clip", "infonce", "clip_synthetic", *clip_view)
            if ratio == 0.0:
                continue
            # SGRAF track
            add("sgraf", "ugncl", "ugncl_synthetic", *ugncl_schedule)
            if clip_weights is not None:
                add("sgraf", "osa", "osa_sgraf_synthetic", f"method.osa.estimator={clip_weights}")
            warm = add("sgraf", "warmup", "triplet_synthetic", "train.epochs=0",
                       f"train.warmup_epochs={size.sgraf_warmup_epochs}", report=False)  # fmt: skip
            after = ("train.warmup_epochs=0", f"train.epochs={size.sgraf_method_epochs}",
                     f"model.sgraf.init={START}")  # fmt: skip
            for method in ("npc", "sdd") + (("infonce",) if size.infonce_on_sgraf else ()):
                own = {"sdd": SDD_ON_SGRAF, "npc": NPC_ON_SGRAF}.get(method, ())
                add("sgraf", method, "triplet_synthetic", f"method.name={method}", *after, *own,
                    start_from=warm)  # fmt: skip
            if clip_weights is None:
                continue
            # CLIP track
            for method in ("npc", "sdd", "osa"):
                add("clip", method, f"{method}_synthetic", *clip_view)
            add("clip", "ugncl", "clip_synthetic", "method.name=ugncl", *clip_view)
    return cells


# ---------------------------------------------------------------------------- running
def _records(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut by a kill: --resume truncates it
            break
    return out


def cell_state(out: Path, cell: Cell) -> str:
    """``done`` (a test record), ``partial`` (a folder without one: resume) or ``new``."""
    run_dir = out / cell.name
    if not (run_dir / "config.yaml").is_file():
        return "new"
    return "done" if any(r.get("event") == "test" for r in _records(run_dir)) else "partial"


def _command(out: Path, cell: Cell, python: str) -> list[str]:
    if cell_state(out, cell) == "partial":
        return [python, str(TRAIN), "--resume", str(out / cell.name)]
    start = str(out / cell.start_from / "checkpoints" / "last.pt") if cell.start_from else ""
    sets = [s.replace(START, start) for s in cell.overrides]
    return [python, str(TRAIN), "--cfg", cell.config, "--set", *sets,
            f"run.out_dir={out}", f"run.name={cell.name}"]  # fmt: skip


def run_plan(
    cells: Sequence[Cell],
    out: str | Path,
    *,
    jobs: int = 2,
    python: str | None = None,
    log=print,
) -> dict[str, str]:
    """Train every cell not done yet as a ``tools/train.py`` subprocess, ``jobs`` at a time,
    a cell after the cell it starts from. Returns ``{cell name: done | failed (rc N) |
    skipped (...)}``; each cell's console output goes to ``OUT/<name>.log``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    python = python or sys.executable
    status = {c.name: "done" for c in cells if cell_state(out, c) == "done"}
    pending = [c for c in cells if c.name not in status]
    running: dict[str, tuple[subprocess.Popen, float, Any]] = {}
    while pending or running:
        for cell in list(pending):
            if len(running) >= jobs:
                break
            dep = status.get(cell.start_from) if cell.start_from else "done"
            if dep is None:
                continue  # its warm start is still to train
            pending.remove(cell)
            if dep != "done":
                status[cell.name] = f"skipped ({cell.start_from} {dep})"
                log(f"skip {cell.name}: {status[cell.name]}")
                continue
            handle = open(out / f"{cell.name}.log", "a", encoding="utf-8")  # noqa: SIM115
            cmd = _command(out, cell, python)
            log(f"{'resume' if '--resume' in cmd else 'train'} {cell.name}")
            proc = subprocess.Popen(cmd, stdout=handle, stderr=subprocess.STDOUT, cwd=REPO)
            running[cell.name] = (proc, time.perf_counter(), handle)
        for name, (proc, started, handle) in list(running.items()):
            if proc.poll() is None:
                continue
            handle.close()
            del running[name]
            rc = proc.returncode
            status[name] = "done" if rc == 0 else f"failed (rc {rc}, see {name}.log)"
            log(f"{status[name]}: {name} in {time.perf_counter() - started:.0f} s")
        if running:
            time.sleep(0.5)
    return status


def plan_rows(cells: Sequence[Cell], out: str | Path) -> list[dict[str, Any]]:
    """The report's rows: each finished reportable cell's :func:`read_run` row with its
    ``variant`` (the cell's label); ``epochs`` counts a warm start's epochs too (NPC and SDD
    on SGRAF: the warm-up cell's 2 + their own), the schedule the row's model saw."""
    out = Path(out)
    rows = []
    for cell in cells:
        if cell.report and cell_state(out, cell) == "done":
            row = read_run(out / cell.name)
            row["variant"] = cell.label
            if cell.start_from and row.get("epochs") is not None:
                row["epochs"] += epochs_trained(_records(out / cell.start_from))
            rows.append(row)
    return rows
