"""Every method on every backbone through the one trainer (a few steps on the tiny world), and
the cells that cannot be meaningful refused in one error line before the run folder appears.

The cells are the registries' product (:func:`smoke_cells`): a newly registered method joins
the sweep with no edit here; a new backbone adds its entry in :data:`BACKBONE_RUNS`."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.conftest import write_tiny_clip_world
from ugncl.backbones.registry import BACKBONES
from ugncl.core.engine.recorder import read_metrics
from ugncl.methods import METHODS

IMAGE_SIZE, CONTEXT = 32, 24
SGRAF = ["model.sgraf.img_dim=64", "model.sgraf.embed_dim=16", "model.sgraf.sim_dim=8",
         "model.sgraf.word_dim=16", "model.sgraf.num_views=1"]  # fmt: skip


# A run's train.threads sets torch's thread count for the process; give it back.
pytestmark = pytest.mark.usefixtures("keep_threads")


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> tuple[Path, Path]:
    """The tiny world as region features and as 32 px images, and random CLIP weights."""
    from ugncl.backbones.clip.adapter import build_clip, save_clip_weights
    from ugncl.backbones.clip.models import TINY_MODEL

    root = write_tiny_clip_world(tmp_path_factory.mktemp("mb_world"), 24, IMAGE_SIZE)
    torch.manual_seed(0)
    model = build_clip(TINY_MODEL, image_size=IMAGE_SIZE, context_length=CONTEXT)
    return root, save_clip_weights(model, root / "tiny-random.pt")


# How each backbone meets the tiny world: the config its cells start from and its overrides
# ({weights}: the random CLIP weights). A backbone registered without an entry here fails
# test_every_backbone_has_a_smoke_run, naming this dict.
BACKBONE_RUNS: dict[str, tuple[str, tuple[str, ...]]] = {
    "clip": ("clip_synthetic", ("model.clip.pretrained={weights}",
                                f"model.clip.image_size={IMAGE_SIZE}",
                                f"model.clip.context_length={CONTEXT}", "data.train_images=8")),
    "sgraf": ("triplet_synthetic", tuple(SGRAF)),
}  # fmt: skip
# A random-init model has too few confident pairs for SDD's bank: fixed thresholds below every
# score put every pair in it (the mechanics, not the method's quality, are under test here).
SDD_ALL_CLEAN = ("method.sdd.thresholds=fixed", "method.sdd.beta=-1e9", "method.sdd.alpha=-1e9")
# Extras of the methods that need them, keyed by method (every backbone) or (backbone, method);
# {warm}: a one-epoch SGRAF warm-up, NPC's and SDD's starting model on SGRAF.
EXTRAS: dict[str | tuple[str, str], tuple[str, ...]] = {
    "sdd": SDD_ALL_CLEAN,
    ("clip", "ugncl"): ("eval.eval_score=raw",),
    ("sgraf", "ugncl"): ("model.sgraf.num_views=1",),
    ("sgraf", "npc"): ("method.npc.clean_threshold=0.5", "model.sgraf.init={warm}"),
    ("sgraf", "sdd"): ("model.sgraf.init={warm}",),
    ("sgraf", "osa"): ("method.osa.estimator={weights}", "method.osa.pass_batch_size=8"),
}
# A cell that starts from another config than its backbone's.
CELL_CONFIGS = {("sgraf", "osa"): "osa_sgraf_synthetic"}
# Cells a method refuses on a backbone: the words of the one error line.
REFUSED = {("clip", "triplet"): "sigmoid saturates", ("clip", "ncr"): "sigmoid saturates"}


def smoke_cells(methods: Iterable[str], backbones: Iterable[str]) -> list[tuple[str, str, tuple]]:
    """Every (backbone, method, extras) the smoke sweep trains: the registries' product less the
    refused cells, each with its method's and its cell's extras."""
    return [
        (backbone, method, (*EXTRAS.get(method, ()), *EXTRAS.get((backbone, method), ())))
        for backbone in backbones
        for method in methods
        if (backbone, method) not in REFUSED
    ]


CELLS = smoke_cells(METHODS, BACKBONES)


def _args(world: tuple[Path, Path], out: Path, backbone: str, method: str, *extra: str,
          warm: Path | None = None) -> list:  # fmt: skip
    root, weights = world
    cfg, own = BACKBONE_RUNS[backbone]
    common = [
        f"data.root={root}", "data.dev_images=6", "data.noise_ratio=0.5", f"run.out_dir={out}",
        f"run.name={method}_{backbone}", "train.batch_size=8", "train.eval_batch_size=6",
        "train.epochs=1", "train.warmup_epochs=0", "train.log_every=1", "train.threads=1",
        f"method.name={method}", "eval.test_after_training=false", *own, *extra,
    ]  # fmt: skip
    common = [item.format(weights=weights, warm=warm) for item in common]
    return ["--cfg", CELL_CONFIGS.get((backbone, method), cfg), "--set", *common]


@pytest.fixture(scope="module")
def warm_sgraf(world, tmp_path_factory, tool) -> Path:
    """A one-epoch SGRAF warm-up (all-negatives hinge) on the same split: NPC's and SDD's
    starting model on SGRAF (``model.sgraf.init``)."""
    out = tmp_path_factory.mktemp("warm")
    args = _args(world, out, "sgraf", "triplet", "train.epochs=0", "train.warmup_epochs=1")
    assert tool("train").main(args) == 0
    return out / "triplet_sgraf" / "checkpoints" / "last.pt"


def test_every_backbone_has_a_smoke_run() -> None:
    missing = sorted(set(BACKBONES) - set(BACKBONE_RUNS))
    assert not missing, f"add BACKBONE_RUNS entries (config, overrides) for {missing}"
    assert {cell[:2] for cell in CELLS} | set(REFUSED) == {
        (b, m) for b in BACKBONES for m in METHODS
    }


def test_the_comparison_plan_leaves_out_exactly_the_refused_cells() -> None:
    """``compare_grid.REFUSED`` (the plan cannot build models to ask) is the set the methods'
    ``backbone_error`` refuses, checked by the test below."""
    from ugncl.run.compare_grid import REFUSED as PLAN_REFUSED

    assert {(b, m) for b, names in PLAN_REFUSED.items() for m in names} == set(REFUSED)


@pytest.mark.slow
@pytest.mark.parametrize(("backbone", "method", "extra"), CELLS, ids=lambda c: str(c))
def test_each_method_trains_on_each_backbone(
    world, warm_sgraf, tool, tmp_path, backbone, method, extra
) -> None:
    args = _args(world, tmp_path, backbone, method, *extra, warm=warm_sgraf)
    assert tool("train").main(args) == 0
    records = read_metrics(tmp_path / f"{method}_{backbone}")
    steps = [r for r in records if r["event"] == "train"]
    assert steps and all(np.isfinite(r["loss"]) for r in steps)
    assert [r["event"] for r in records].count("val") == 1


@pytest.mark.parametrize(("backbone", "method"), sorted(REFUSED))
def test_each_refused_cell_is_one_error_before_the_run_folder(
    world, tool, tmp_path, capsys, backbone, method
) -> None:
    assert tool("train").main(_args(world, tmp_path, backbone, method)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and REFUSED[backbone, method] in err[0]
    assert not (tmp_path / f"{method}_{backbone}").exists()


@pytest.mark.parametrize(
    ("backbone", "method", "extra", "words"),
    [
        ("clip", "osa", ("method.osa.objective=triplet",), "sigmoid saturates"),
        ("clip", "ncr", (), "sigmoid saturates"),
        ("sgraf", "npc", (), "model.sgraf.init"),
        ("sgraf", "sdd", (), "model.sgraf.init"),
        ("sgraf", "infonce", ("model.sgraf.num_views=2",), "num_views=1"),
        ("sgraf", "decl", ("model.sgraf.num_views=2",), "num_views=1"),
    ],
)
def test_meaningless_cells_are_one_error_before_the_run_folder(
    world, tool, tmp_path, capsys, backbone, method, extra, words
) -> None:
    assert tool("train").main(_args(world, tmp_path, backbone, method, *extra)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and words in err[0]
    assert not (tmp_path / f"{method}_{backbone}").exists()


def test_sdd_release_thresholds_on_sgraf_are_one_error(world, warm_sgraf, tool, tmp_path, capsys):
    """alpha 20 / beta 30 are CLIP x100 cosines: on SGRAF's scale they left the bank empty
    after the setup pass; now the run stops before it, naming thresholds=auto."""
    args = _args(world, tmp_path, "sgraf", "sdd", f"model.sgraf.init={warm_sgraf}")
    assert tool("train").main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "method.sdd.thresholds=auto" in err[0]
    assert not (tmp_path / "sdd_sgraf").exists()


def test_sgraf_init_refuses_a_checkpoint_of_other_sizes(world, warm_sgraf, tool, tmp_path, capsys):
    args = _args(world, tmp_path, "sgraf", "npc", f"model.sgraf.init={warm_sgraf}",
                 "model.sgraf.embed_dim=8")  # fmt: skip
    assert tool("train").main(args) == 2
    assert "embed_dim 16 vs 8" in capsys.readouterr().err
