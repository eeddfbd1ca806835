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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ugncl.run.compare import epochs_trained, read_run, test_record

__all__ = [
    "PLANS",
    "Cell",
    "PlanSize",
    "RowSpec",
    "cell_state",
    "default_plan",
    "estimate_seconds",
    "plan_rows_spec",
    "run_plan",
]

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "tools" / "train.py"
START = "@start_from@"  # in a cell's overrides: the checkpoint of the cell it starts from
#: On every cell: an epoch that visits a subset of the pairs still takes a whole epoch's
#: optimiser steps (:class:`PlanSize`); the rows' own configs keep ``samples``.
EPOCH_LENGTH = "train.epoch_length=full"


@dataclass(frozen=True)
class Cell:
    """One run of a comparison.

    Attributes:
        name: its folder under the comparison's output folder.
        label: the line it belongs to in the report (``hinge``, ``ugncl-paper``,
            ``npc-paper+pf``, ...; a ``+pf`` label is its sibling without ``+pf`` trained
            with the pre-filter).
        backbone: ``sgraf`` or ``clip``.
        config: the config name in ``configs/``.
        overrides: ``--set`` values (noise, seed, sizes, budget, reading).
        start_from: the cell whose ``checkpoints/last.pt`` this one starts from
            (``model.sgraf.init``), trained first.
        report: a row of the report (False for warm-up cells).
        plain: the backbone's plain baseline (the denominator of ``cost x plain`` and the
            reference of every lift).
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
    plain: bool = False


@dataclass(frozen=True)
class PlanSize:
    """What the budget buys: seeds, noise ratios, the world's size and one epoch budget per
    backbone.

    Every row of a backbone trains ``sgraf_epochs`` (``clip_epochs``) epochs of
    ``batch_size`` pairs on the same ``train_images`` images, a warm start's epochs included,
    each epoch as many batches as a pass over every training pair (``train.epoch_length=full``
    on every cell: a row whose epoch visits a subset, the pre-filter's selection, SDD's kept
    pairs or the clean-pairs oracle's, passes over it again up to that count, where the
    papers pass once over their selection), so every row of a backbone takes the same number
    of optimiser steps (the report prints each row's steps and flags any row that differs).
    """

    seeds: tuple[int, ...] = (0, 1, 2)
    ratios: tuple[float, ...] = (0.5,)
    train_images: int = 400
    sgraf_epochs: int = 8
    clip_epochs: int = 2
    warm_epochs: int = 2  # the shared all-negatives hinge warm start of NPC/SDD on SGRAF
    batch_size: int = 32
    infonce_on_sgraf: bool = False  # the unweighted InfoNCE control of NPC/SDD on SGRAF


QUICK = PlanSize(seeds=(0,), train_images=300, sgraf_epochs=4, clip_epochs=1)
DEFAULT = PlanSize()
FULL = PlanSize(
    ratios=(0.2, 0.5, 0.8), train_images=1000, sgraf_epochs=20, clip_epochs=3,
    infonce_on_sgraf=True,
)  # fmt: skip
PLANS = {"quick": QUICK, "default": DEFAULT, "full": FULL}

#: Each backbone's plain baseline row: the reference of every lift and of ``cost x plain``.
PLAIN_LABEL = {"sgraf": "hinge", "clip": "finetune"}
#: The methods that are a backbone's plain baseline (no method row of their own there):
#: SGRAF's hinge is ``triplet``; CLIP's plain fine-tune is the InfoNCE method.
BASELINE_METHODS = {"sgraf": ("triplet",), "clip": ("clip", "infonce")}
#: Methods a backbone refuses (``Method.backbone_error``; docs/comparison.md).
REFUSED = {"clip": ("triplet", "ncr")}
#: Hyper-parameters every row of a backbone shares unless the row's reading sets its own:
#: on SGRAF the plain model's optimiser (Adam without decay, as the SGRAF and NCR releases
#: train it; base.yaml's AdamW and image decay are UGNCL's package decisions).
SHARED = {
    "sgraf": {"train.optimizer": "adam", "train.weight_decay": "0.0",
              "train.image_decay_per_rms": "null"},
    "clip": {},
}  # fmt: skip
#: The framework pre-filter's switch, and UGNCL's own older one where the framework's is not
#: in this build (rows that need it are then left out, with a note).
PREFILTER_KEY = ("prefilter.kind", "linear", "none")
UGNCL_PREFILTER_KEY = ("method.ugncl.seed", "linear", "none")

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
#: What a method needs on SGRAF beyond ``method.name``: a warm start (its bank or thresholds
#: are built from the starting model's scores) and its own settings there.
SGRAF_NEEDS: dict[str, tuple[bool, tuple[str, ...]]] = {
    "npc": (True, NPC_ON_SGRAF),
    "sdd": (True, SDD_ON_SGRAF),
    "clip": (True, ()),
    "infonce": (True, ()),
}

CONFIGS = REPO / "configs"


def ratio_tag(ratio: float) -> str:
    """A noise ratio in a cell or folder name: ``0.2`` -> ``n20``."""
    return f"n{round(ratio * 100):02d}"


def _has_config(name: str) -> bool:
    return (CONFIGS / f"{name}.yaml").is_file()


def method_reading(name: str) -> str | None:
    """The reading a method's row trains: ``paper`` where the method has readings and one is
    called so, else ``package`` where it has readings, else None (no reading switch)."""
    from ugncl.methods import METHODS

    readings = getattr(getattr(METHODS.get(name), "config", None), "READINGS", None)
    if not readings:
        return None
    return "paper" if "paper" in readings else "package"


def reading_keys(name: str, reading: str | None, backbone: str) -> set[str]:
    """The dotted keys the method's ``reading`` sets on ``backbone``
    (:func:`ugncl.run.config.reading_layer`)."""
    from ugncl.run.config import reading_layer

    return set(reading_layer(name, reading, backbone)) if reading is not None else set()


def known_keys() -> set[str]:
    """Every dotted config key of this build (methods and backbones registered now)."""
    from ugncl.run.config import all_keys

    return set(all_keys())


def _row_label(name: str, reading: str | None) -> str:
    return f"{name}-{reading}" if reading and reading != "package" else name


class _CellMaker:
    """Appends the cells of one (noise ratio, seed) with their shared overrides."""

    def __init__(self, cells: list[Cell], world: str, ratio: float, seed: int, size: PlanSize):
        self.cells, self.ratio, self.seed = cells, ratio, seed
        self.tag = f"{ratio_tag(ratio)}-s{seed}"
        self.common = (f"data.root={world}", f"data.train_images={size.train_images}",
                       f"data.noise_ratio={ratio}", "data.noise_seed=0", f"train.seed={seed}",
                       f"train.batch_size={size.batch_size}", "train.threads=1",
                       EPOCH_LENGTH)  # fmt: skip

    def __call__(self, backbone: str, label: str, config: str, *extra: str, **kw: Any) -> str:
        name = f"{backbone}-{label}-{self.tag}"
        cell = Cell(name, label, backbone, config, (*self.common, *extra), self.ratio,
                    self.seed, **kw)  # fmt: skip
        self.cells.append(cell)
        return name


@dataclass(frozen=True)
class RowSpec:
    """One row of the plan before its split and seed: its label, config and ``--set`` values,
    whether it starts from the shared warm start, and the keys it needs (a row whose key this
    build lacks is left out, with a note)."""

    backbone: str
    label: str
    config: str
    sets: tuple[str, ...] = ()
    warm: bool = False
    plain: bool = False
    needs: tuple[str, ...] = ()
    noisy: bool = True  # False: trained at 0% noise (the clean reference)
    hinge: bool = False  # the hinge family's schedule (:func:`budget_sets`)


def _shared(backbone: str, method: str, reading: str | None) -> tuple[str, ...]:
    """:data:`SHARED` less the keys the method's reading sets itself."""
    own = reading_keys(method, reading, backbone)
    return tuple(f"{k}={v}" for k, v in SHARED[backbone].items() if k not in own)


def _reading_sets(method: str, reading: str | None) -> tuple[str, ...]:
    return (f"method.{method}.reading={reading}",) if reading else ()


def _prefilter(method: str, on: bool, keys: set[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(sets, needs)`` of the pre-filter switched ``on`` or off for ``method``: the
    framework's ``prefilter.kind``, else (UGNCL only) ``method.ugncl.seed``."""
    key, yes, no = PREFILTER_KEY
    if key not in keys and method == "ugncl":
        key, yes, no = UGNCL_PREFILTER_KEY
    return (f"{key}={yes if on else no}",), (key,)


def sgraf_rows(size: PlanSize, clip_weights: str | Path | None) -> list[RowSpec]:
    """The SGRAF track: the controls, then one row per registered method at its paper
    reading (package where it has no readings), then the pre-filter rows."""
    from ugncl.methods import METHODS

    keys = known_keys()
    hinge = ("method.name=triplet", *_shared("sgraf", "triplet", None))
    pf_on, pf_need = _prefilter("triplet", True, keys)
    oracle = (*hinge, "method.triplet.train_pairs=clean")
    family = {"config": "clean_synthetic", "hinge": True}
    rows = [
        RowSpec("sgraf", "clean", sets=hinge, noisy=False, **family),
        RowSpec("sgraf", "oracle", sets=oracle, **family),
        RowSpec("sgraf", "hinge", sets=hinge, plain=True, **family),
        RowSpec("sgraf", "hinge+pf", sets=(*hinge, *pf_on), needs=pf_need, **family),
    ]
    for name in METHODS:
        if name in BASELINE_METHODS["sgraf"] or name in REFUSED.get("sgraf", ()):
            continue
        if name in ("clip", "infonce") and not size.infonce_on_sgraf:
            continue
        if name == "osa" and clip_weights is None:
            continue  # its estimator is the CLIP stand-in
        reading = method_reading(name)
        warm, own = SGRAF_NEEDS.get(name, (False, ()))
        if name == "osa":
            own = (*own, f"method.osa.estimator={clip_weights}")
        config = next((c for c in (f"{name}_sgraf_synthetic", f"{name}_synthetic")
                       if _has_config(c) and _sgraf_config(c)), "clean_synthetic")  # fmt: skip
        base = (f"method.name={name}", *own, *_shared("sgraf", name, reading))
        if reading is not None or name != "ugncl":  # UGNCL without readings: package only
            rows.append(RowSpec("sgraf", _row_label(name, reading), config,
                                (*base, *_reading_sets(name, reading)), warm=warm))  # fmt: skip
        if name == "ugncl":  # the package reading with and without the pre-filter
            package = "package" if reading else None
            sets = (f"method.name={name}", *own, *_shared("sgraf", name, package),
                    *_reading_sets(name, package))  # fmt: skip
            on, need = _prefilter(name, True, keys)
            off, _ = _prefilter(name, False, keys)
            rows.append(RowSpec("sgraf", "ugncl+pf", config, (*sets, *on), needs=need))
            rows.append(RowSpec("sgraf", "ugncl", config, (*sets, *off), needs=need))
        elif name in ("npc", "sdd"):
            on, need = _prefilter(name, True, keys)
            rows.append(RowSpec("sgraf", f"{_row_label(name, reading)}+pf", config,
                                (*base, *_reading_sets(name, reading), *on), warm=warm,
                                needs=need))  # fmt: skip
    return rows


def _sgraf_config(name: str) -> bool:
    """Whether ``configs/<name>.yaml`` trains the SGRAF backbone (its resolved config, bases
    included)."""
    return _config_backbone(name) == "sgraf"


def _config_backbone(name: str) -> str | None:
    """The backbone ``configs/<name>.yaml`` resolves to (None where it does not load)."""
    from ugncl.run.config import ConfigError, load_config

    try:
        return str(load_config(name)[0].model.backbone)
    except (ConfigError, ValueError):
        return None


#: A method's CLIP-track variant: ``configs/<method>_clip_synthetic.yaml``, the package's
#: settings of that method measured on the CLIP worlds (its first line says how it departs
#: from the papers); the plan gives it a row ``<method>-clip`` beside the paper reading's.
CLIP_VARIANT = "_clip_synthetic"


def clip_rows(clip_weights: str | Path) -> list[RowSpec]:
    """The CLIP track: the plain fine-tune (at 0% and at noise), every registered method
    that CLIP accepts at its paper reading (package where it has no readings), and each
    method's CLIP variant where the package ships one (:data:`CLIP_VARIANT`)."""
    from ugncl.methods import METHODS

    view = (f"model.clip.pretrained={clip_weights}",)
    rows = [
        RowSpec("clip", "finetune-clean", "clip_synthetic", view, noisy=False),
        # the plain fine-tune on the truly clean pairs only: what a perfect division buys
        # (as SGRAF's ``oracle``), the bound of a method that drops the pairs it calls noisy
        RowSpec("clip", "oracle", "clip_synthetic", (*view, "method.infonce.train_pairs=clean")),
        RowSpec("clip", "finetune", "clip_synthetic", view, plain=True),
    ]
    for name in METHODS:
        if name in BASELINE_METHODS["clip"] or name in REFUSED.get("clip", ()):
            continue
        reading = method_reading(name)
        own = f"{name}_synthetic"
        config = own if _has_config(own) and _config_backbone(own) == "clip" else "clip_synthetic"
        sets = (*view, f"method.name={name}", *_reading_sets(name, reading),
                *_shared("clip", name, reading))  # fmt: skip
        if name == "osa":
            sets = (*sets, f"method.osa.estimator={clip_weights}")
        rows.append(RowSpec("clip", _row_label(name, reading), config, sets))
    for name in METHODS:  # the package's own CLIP variant of a method, where it ships one
        variant = f"{name}{CLIP_VARIANT}"
        if _has_config(variant) and _config_backbone(variant) == "clip":
            sets = (*view, f"method.name={name}", *_shared("clip", name, None))
            rows.append(RowSpec("clip", f"{name}-clip", variant, sets))
    return rows


def budget_sets(row: RowSpec, size: PlanSize) -> tuple[str, ...]:
    """The schedule of ``row`` in the plan's epoch budget (a warm start's epochs counted).

    SGRAF: the hinge family (the clean reference, the oracle, the hinge with and without the
    pre-filter) trains over all negatives throughout, 2 warm-up epochs and the rest with
    ``max_violation`` off, so that the pre-filter, which acts on the epochs after the warm-up,
    has the same epochs on the hinge as on UGNCL (clean_synthetic's last hardest-negative epoch
    is left out: it would be the only epoch the pre-filter saw there); a warm-started row its
    epochs after the shared warm start; UGNCL 2 warm-up epochs, then the rest, lr x 0.1 for the
    last; any other method 2 warm-up epochs (its own) and the rest. CLIP: every row the same
    epochs, no warm-up.
    """
    if row.backbone == "clip":
        return (f"train.epochs={size.clip_epochs}", "train.warmup_epochs=0")
    total, warm = size.sgraf_epochs, size.warm_epochs
    if total <= warm:
        raise ValueError(f"sgraf_epochs must exceed warm_epochs ({warm}), got {total}")
    if row.warm:
        return ("train.warmup_epochs=0", f"train.epochs={total - warm}",
                f"model.sgraf.init={START}")  # fmt: skip
    if row.hinge:
        return (f"train.warmup_epochs={warm}", f"train.epochs={total - warm}",
                "method.triplet.max_violation=false")  # fmt: skip
    if row.config.startswith("ugncl"):
        return (f"train.warmup_epochs={warm}", f"train.epochs={total - warm}",
                f"train.lr_update={total - warm - 1}")  # fmt: skip
    return (f"train.warmup_epochs={warm}", f"train.epochs={total - warm}")


def plan_rows_spec(
    clip_weights: str | Path | None, size: PlanSize = DEFAULT
) -> tuple[list[RowSpec], list[str]]:
    """The plan's rows and a note per row left out (a key this build lacks)."""
    keys = known_keys()
    specs = sgraf_rows(size, clip_weights)
    if clip_weights is not None:
        specs += clip_rows(clip_weights)
    rows, notes = [], []
    for spec in specs:
        missing = [k for k in spec.needs if k not in keys]
        if missing:
            notes.append(f"{spec.backbone} {spec.label}: left out ({', '.join(missing)} is not "
                         "a key of this build)")  # fmt: skip
        else:
            rows.append(spec)
    return rows, notes


def default_plan(
    world: str | Path, clip_weights: str | Path | None, size: PlanSize = DEFAULT
) -> list[Cell]:
    """The cells of ``make compare``: :func:`plan_rows_spec`'s rows at each noise ratio and
    seed of ``size`` (the clean references at 0%), every row of a backbone in one epoch
    budget (:func:`budget_sets`), the warm-started rows after one shared warm-up cell of the
    same split and seed. ``clip_weights`` None (a world without a CLIP view): the SGRAF track
    only, and no OSA there (its estimator is the CLIP stand-in)."""
    specs, _ = plan_rows_spec(clip_weights, size)
    cells: list[Cell] = []
    for seed in size.seeds:
        for ratio in (0.0, *size.ratios):
            add = _CellMaker(cells, str(world), ratio, seed, size)
            mine = [s for s in specs if s.noisy == (ratio > 0)]
            warm = None
            if any(s.warm for s in mine):
                warm = add("sgraf", "warmup", "clean_synthetic", "method.name=triplet",
                           *_shared("sgraf", "triplet", None), "train.epochs=0",
                           f"train.warmup_epochs={size.warm_epochs}", report=False)  # fmt: skip
            for spec in mine:
                label = spec.label.removesuffix("-clean")
                add(spec.backbone, label, spec.config, *spec.sets, *budget_sets(spec, size),
                    start_from=warm if spec.warm else None,
                    plain=spec.plain or (ratio == 0 and label in PLAIN_LABEL.values()))  # fmt: skip
    return cells


#: Seconds per optimiser step of each row, in units of the reference step
#: (``tools/bench.py method-steps --methods ugncl --steps 30 --threads 1``), validation and
#: the per-epoch passes included: each label's s/epoch in the last measured 2-core comparison
#: (docs/comparison.md; 500 images, 79 steps an epoch, reference step 0.16 s) over 79 x 0.16.
STEP_COST = {
    ("sgraf", "hinge"): 1.0, ("sgraf", "ugncl"): 1.4, ("sgraf", "npc"): 3.5,
    ("sgraf", "sdd"): 3.4, ("sgraf", "osa"): 1.7, ("clip", "finetune"): 2.6,
    ("clip", "npc"): 6.8, ("clip", "sdd"): 4.0, ("clip", "osa"): 3.7, ("clip", "ugncl"): 2.4,
}  # fmt: skip
#: A method not measured yet: as dear as the dearest measured on its backbone.
UNMEASURED = {"sgraf": 3.5, "clip": 6.8}
#: Each cell's start (imports, data, model) and test pass, in reference steps: about 24 s at
#: the 0.178 s reference step, from the quick plan's SGRAF cells on the shared machine (25 s
#: before the first step, 75 s of testing, at 4.2 x the reference step's time there).
CELL_OVERHEAD_STEPS = 135
CAPTIONS_PER_IMAGE = 5


def _step_cost(cell: Cell) -> float:
    family = cell.label.split("+")[0].split("-")[0]
    if family in ("clean", "oracle", "warmup"):  # the plain model's step
        family = PLAIN_LABEL[cell.backbone]
    return STEP_COST.get((cell.backbone, family), UNMEASURED[cell.backbone])


def _cell_epochs(cell: Cell) -> int:
    values = dict(s.split("=", 1) for s in cell.overrides if "=" in s)
    return int(values.get("train.epochs", 0)) + int(values.get("train.warmup_epochs", 0))


def estimate_seconds(cells: Sequence[Cell], reference_step_s: float, jobs: int = 2) -> float:
    """The plan's wall time: each cell's epochs x steps per epoch x its step cost
    (:data:`STEP_COST`) x ``reference_step_s``, plus its start and test
    (:data:`CELL_OVERHEAD_STEPS`), over ``jobs`` cells at once (the world and the CLIP
    stand-in not included). Steps per epoch are a whole epoch's, pairs // batch (the tail
    dropped), for every cell: each trains ``train.epoch_length=full``."""
    total = 0.0
    for cell in cells:
        values = dict(s.split("=", 1) for s in cell.overrides if "=" in s)
        pairs = int(values["data.train_images"]) * CAPTIONS_PER_IMAGE
        steps = pairs // int(values["train.batch_size"])
        work = _cell_epochs(cell) * steps * _step_cost(cell) + CELL_OVERHEAD_STEPS
        total += work * reference_step_s
    return total / max(1, jobs)


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
    """``done`` (a test record), ``partial`` (a folder without one: resume), ``new``, or
    ``stale``: the folder trained another config than the plan's cell resolves to now (the
    plan or a reading changed since), so its numbers are not this plan's."""
    run_dir = out / cell.name
    if not (run_dir / "config.yaml").is_file():
        return "new"
    if cell_differences(out, cell):
        return "stale"
    return "done" if any(r.get("event") == "test" for r in _records(run_dir)) else "partial"


def _cell_sets(out: Path, cell: Cell) -> list[str]:
    start = str(out / cell.start_from / "checkpoints" / "last.pt") if cell.start_from else ""
    return [s.replace(START, start) for s in cell.overrides]


def cell_differences(out: Path, cell: Cell) -> list[str]:
    """The config keys (``run.*`` aside) whose values in the cell's folder differ from what the
    cell resolves to now; ``["config.yaml"]`` where the folder's config no longer loads.
    ``train.epoch_length`` alone is no difference for a finished run whose every epoch took a
    whole epoch's steps (:func:`took_whole_epochs`): it trained the batches either length
    gives, so a comparison run before the plan set ``full`` keeps its rows over every pair."""
    from ugncl.run.config import ConfigError, flat_tree, load_config

    try:
        saved = flat_tree(load_config(out / cell.name / "config.yaml", cwd=REPO)[0].to_dict())
    except ConfigError:
        return ["config.yaml"]
    wanted = flat_tree(load_config(cell.config, _cell_sets(out, cell), cwd=REPO)[0].to_dict())
    keys = {k for k in set(saved) | set(wanted) if not k.startswith("run.")}
    differ = sorted(k for k in keys if saved.get(k) != wanted.get(k))
    if differ == ["train.epoch_length"] and took_whole_epochs(_records(out / cell.name), saved):
        return []
    return differ


def took_whole_epochs(records: Sequence[dict[str, Any]], config: dict[str, Any]) -> bool:
    """Whether a finished run (its ``records``, its flat ``config``) took ``N // batch``
    optimiser steps in every epoch: its test record's step is the epochs x that. No epoch can
    take more, so none visited a subset short of a whole epoch, and at either
    ``train.epoch_length`` the run trains the same batches
    (:func:`ugncl.core.engine.sampling.training_batches`)."""
    test = test_record(records)
    setup = next((r for r in records if r.get("event") == "setup"), {})
    if test is None or test.get("step") is None or setup.get("n_train_captions") is None:
        return False
    epochs = int(config["train.epochs"]) + int(config["train.warmup_epochs"])
    whole = int(setup["n_train_captions"]) // int(config["train.batch_size"])
    return int(test["step"]) == epochs * whole


def set_aside(out: Path, cell: Cell) -> Path:
    """Move a stale cell's folder to ``<name>.stale-<n>`` (nothing is deleted) and return it."""
    n = 1
    while (out / f"{cell.name}.stale-{n}").exists():
        n += 1
    target = out / f"{cell.name}.stale-{n}"
    (out / cell.name).rename(target)
    return target


def _command(out: Path, cell: Cell, python: str, state: str | None = None) -> list[str]:
    """The cell's ``tools/train.py`` command (``state``: its :func:`cell_state`, if known)."""
    if (state or cell_state(out, cell)) == "partial":
        return [python, str(TRAIN), "--resume", str(out / cell.name)]
    return [python, str(TRAIN), "--cfg", cell.config, "--set", *_cell_sets(out, cell),
            f"run.out_dir={out}", f"run.name={cell.name}"]  # fmt: skip


def last_error_line(log: Path) -> str | None:
    """The last ``error:`` line of a cell's console log (a refusal's reason: the run names the
    problem and the fix there), None where it has none."""
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    return next((line.strip() for line in reversed(lines) if line.startswith("error:")), None)


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
    states = {c.name: cell_state(out, c) for c in cells}
    for cell in cells:
        if states[cell.name] == "stale":
            changed = cell_differences(out, cell)
            moved = set_aside(out, cell)
            states[cell.name] = "new"
            more = " ..." if len(changed) > 4 else ""
            log(f"stale {cell.name}: trained with other {', '.join(changed[:4])}{more}; "
                f"moved to {moved.name}, training again")  # fmt: skip
    status = {name: "done" for name, state in states.items() if state == "done"}
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
            cmd = _command(out, cell, python, states[cell.name])
            log(f"{'resume' if '--resume' in cmd else 'train'} {cell.name}")
            proc = subprocess.Popen(cmd, stdout=handle, stderr=subprocess.STDOUT, cwd=REPO)
            running[cell.name] = (proc, time.perf_counter(), handle)
        for name, (proc, started, handle) in list(running.items()):
            if proc.poll() is None:
                continue
            handle.close()
            del running[name]
            rc = proc.returncode
            why = last_error_line(out / f"{name}.log") if rc else None
            status[name] = "done" if rc == 0 else f"failed (rc {rc}, see {name}.log)"
            status[name] += f": {why}" if why else ""
            log(f"{status[name]}: {name} in {time.perf_counter() - started:.0f} s")
        if running:
            time.sleep(0.5)
    return status


def plan_rows(cells: Sequence[Cell], out: str | Path) -> list[dict[str, Any]]:
    """The report's rows: each finished reportable cell's :func:`read_run` row with its
    ``variant`` (the cell's label) and ``plain`` flag; ``epochs`` and ``steps`` count a warm
    start's too (NPC and SDD on SGRAF: the warm-up cell's + their own), the schedule the
    row's model saw."""
    out = Path(out)
    rows = []
    for cell in cells:
        if cell.report and cell_state(out, cell) == "done":
            row = read_run(out / cell.name)
            row["variant"], row["plain"] = cell.label, cell.plain
            if cell.start_from:
                warm = _records(out / cell.start_from)
                if row.get("epochs") is not None:
                    row["epochs"] += epochs_trained(warm)
                warm_test = test_record(warm)
                if row.get("steps") is not None and warm_test and warm_test.get("step"):
                    row["steps"] += int(warm_test["step"])
            rows.append(row)
    return rows
