"""The comparison report from small fixture runs: one noise file per (ratio, seed) or a refusal
by name, the cost ratio to each backbone's plain baseline, the report folder and its plots, the
glob that catches the report's own files, the plan's cells and resumption, and no thread-count
leak between the in-process grid's runs."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest
import torch

from ugncl.run.compare import CompareError, check_same_noise
from ugncl.run.compare_grid import (
    PLANS,
    Cell,
    _command,
    cell_state,
    default_plan,
    estimate_seconds,
    known_keys,
)
from ugncl.run.compare_report import PLOTS, write_report

SHA_A, SHA_B = "a" * 64, "b" * 64


def write_run(root: Path, name: str, config: dict, records: list[dict]) -> Path:
    """A run directory as tools/train.py leaves it (only what compare reads)."""
    import yaml

    run = root / name
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    lines = "".join(json.dumps(r) + "\n" for r in records)
    (run / "metrics.jsonl").write_text(lines, encoding="utf-8")
    return run


def _config(method: str, backbone: str, ratio: float, seed: int) -> dict:
    data = {"name": "synthetic_precomp", "noise_ratio": ratio, "noise_file": None}
    return {"data": data, "model": {"backbone": backbone}, "method": {"name": method},
            "train": {"seed": seed}}  # fmt: skip


def _records(seed: int, sha: str, rsum: float, epochs: int, per_epoch: float, method: str):
    out = [{"event": "setup", "seed": seed, "threads": 1, "n_train_captions": 100,
            "n_noisy": 50, "noise_sha256": sha, "time": 0.0}]  # fmt: skip
    for e in range(epochs):
        out.append({"event": "train", "epoch": e, "loss": 1.0, "time": per_epoch * e + 1})
        if method == "ugncl":
            out.append({"event": "division", "epoch": e, "noisy_f1": 0.5 + 0.1 * e,
                        "n_clean": 40, "clean_share_clean": 0.9, "n_noisy": 60,
                        "clean_share_noisy": 0.2, "time": per_epoch * e + 2})  # fmt: skip
        elif method == "npc":
            out.append({"event": "noise_detection", "epoch": e, "weight_auc": 0.6 + 0.1 * e,
                        "weight_hist_edges": [0.0, 0.5, 1.0], "weight_hist_clean": [5, 45],
                        "weight_hist_noisy": [40, 10], "time": per_epoch * e + 2})  # fmt: skip
        out.append({"event": "val", "epoch": e, "rsum": rsum, "time": per_epoch * (e + 1)})
    out.append({"event": "test", "epoch": epochs - 1, "step": 9, "split": "test", "rsum": rsum,
                "i2t/R@1": 1.0, "t2i/R@1": 1.0, "time": per_epoch * epochs})  # fmt: skip
    return out


@pytest.fixture
def fixture_runs(tmp_path: Path) -> tuple[Path, dict[str, Path]]:
    """SGRAF triplet (plain), UGNCL and NPC runs at 50% noise over two seeds, and triplet at 0%
    on another file (other ratio: allowed)."""
    root = tmp_path / "compare"
    runs = {}
    for seed in (0, 1):
        for method, rsum, per_epoch in (("triplet", 100.0, 10.0), ("ugncl", 150.0, 20.0),
                                        ("npc", 130.0, 30.0)):  # fmt: skip
            name = f"sgraf-{method}-n50-s{seed}"
            records = _records(seed, SHA_A, rsum + seed, 2, per_epoch, method)
            runs[name] = write_run(root, name, _config(method, "sgraf", 0.5, seed), records)
    runs["sgraf-triplet-n00-s0"] = write_run(
        root, "sgraf-triplet-n00-s0", _config("triplet", "sgraf", 0.0, 0),
        _records(0, SHA_B, 300.0, 2, 10.0, "triplet"),
    )  # fmt: skip
    return root, runs


def test_report_from_fixture_runs(fixture_runs, tool, capsys) -> None:
    root, runs = fixture_runs
    from ugncl.run.compare import read_run

    rows = [read_run(p) for p in runs.values()]
    records = {r["run"]: [json.loads(x) for x in (root / r["run"] / "metrics.jsonl").read_text()
                          .splitlines()] for r in rows}  # fmt: skip
    paths = write_report(root, rows, records, title="t")
    assert {p.name for p in paths} == {"compare.md", "compare.csv", "compare.json", *PLOTS}
    for plot in PLOTS:
        assert (root / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads((root / "compare.json").read_text())
    ugncl = next(g for g in data["groups"] if g["variant"] == "ugncl")
    assert (ugncl["seeds"], ugncl["rsum_mean"]) == (2, 150.5)
    assert ugncl["rsum_std"] == pytest.approx(0.7071, abs=1e-3)
    assert ugncl["cost_ratio"] == pytest.approx(2.0)  # 20 s/epoch over triplet's 10
    md = (root / "compare.md").read_text()
    assert "150.5 ± 0.7" in md and SHA_A[:12] in md and "rsum_vs_noise.png" in md
    # computed sentences: UGNCL 50 above the plain triplet on both seeds (no per-query files)
    assert "`ugncl` is 50.0 rSum above `triplet`, every seed (per seed +50.0, +50.0" in md
    assert "## What drives the gain" in md and "- `ugncl`: +50.0 rSum over `triplet`" in md
    # the regime: what 50% costs the plain line against its 0% run, what the best wins back
    assert ("sgraf (SGR), noise 0.50: noise costs `triplet` 66.7% of the clean reference's "
            "test rSum (100.0 against 300.0; per seed 66.7%); the best method, `ugncl`, wins "
            "back 25% of that loss (per seed 25%).") in md  # fmt: skip
    assert "every row trains 9 optimiser steps" in md
    assert "`cost x plain` divides wall seconds per epoch" in md  # no CPU stamps recorded

    # the documented glob catches compare.md and the plots: files are skipped
    capsys.readouterr()
    assert tool("compare").main([*map(str, sorted(root.iterdir())), "--format", "csv"]) == 0
    out, err = capsys.readouterr()
    table = list(csv.DictReader(io.StringIO(out)))
    assert len(table) == 7 and "skipping" in err and "compare.md" in err
    assert {r["noise_sha256"] for r in table} == {SHA_A[:12], SHA_B[:12]}


def test_a_run_on_another_noise_file_is_refused_by_name(fixture_runs, tool, capsys) -> None:
    root, runs = fixture_runs
    odd = write_run(root, "clip-npc-n50-s1", _config("npc", "clip", 0.5, 1),
                    _records(1, SHA_B, 90.0, 2, 5.0, "npc"))  # fmt: skip
    assert tool("compare").main([*map(str, runs.values()), str(odd)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")
    assert "noise 0.5 and seed 1" in err[0] and "clip-npc-n50-s1" in err[0]
    assert SHA_B[:12] in err[0] and "sgraf-ugncl-n50-s1" in err[0]
    with pytest.raises(CompareError):
        check_same_noise([{"run": r, "noise_ratio": 0.2, "seed": 0, "noise_sha256": r}
                          for r in ("x", "y")])  # fmt: skip


def _sets(cell: Cell) -> dict[str, str]:
    return dict(s.split("=", 1) for s in cell.overrides)


def _epochs(cell: Cell, cells: list[Cell]) -> int:
    """Epochs the cell's model saw: its own and its warm start's."""
    values = _sets(cell)
    own = int(values["train.epochs"]) + int(values["train.warmup_epochs"])
    warm = next((c for c in cells if c.name == cell.start_from), None)
    return own + (_epochs(warm, cells) if warm else 0)


def test_default_plan_controls_one_split_and_one_budget() -> None:
    size = PLANS["default"]
    cells = default_plan("W", "w.pt", size)
    names = [c.name for c in cells]
    assert len(names) == len(set(names))
    assert {c.seed for c in cells} == {0, 1, 2}
    for cell in cells:  # one noise file per ratio: the same ratio and noise seed everywhere
        values = _sets(cell)
        assert values["data.noise_ratio"] == str(cell.noise_ratio)
        assert values["data.noise_seed"] == "0" and values["train.threads"] == "1"
        # both tracks on the same images and batch: one noise index, one step count an epoch
        assert values["data.train_images"] == "400" and values["train.batch_size"] == "32"
        # one budget per backbone, a warm start's epochs counted, each epoch a whole epoch's
        # steps (a row whose epoch visits a subset passes over it again)
        budget = size.sgraf_epochs if cell.backbone == "sgraf" else size.clip_epochs
        assert cell.label == "warmup" or _epochs(cell, cells) == budget, cell.name
        assert values["train.epoch_length"] == "full", cell.name
    zero = {(c.backbone, c.label) for c in cells if c.noise_ratio == 0.0}
    assert zero == {("sgraf", "clean"), ("clip", "finetune")}
    noisy = {(c.backbone, c.label) for c in cells if c.noise_ratio == 0.5 and c.report}
    with_pf = "prefilter.kind" in known_keys()
    sgraf = {"oracle", "hinge", "ugncl", "ugncl+pf", "npc", "sdd", "osa", "ncr", "decl"}
    sgraf |= {"hinge+pf", "npc+pf", "sdd+pf"} if with_pf else set()
    assert {(b, label.replace("-paper", "")) for b, label in noisy if b == "sgraf"} == {
        ("sgraf", m) for m in sgraf
    }  # fmt: skip
    assert {label.replace("-paper", "") for b, label in noisy if b == "clip"} == {
        "finetune", "oracle", "ugncl", "npc", "sdd", "osa", "decl", "ugncl-clip"
    }  # fmt: skip
    by_name = {c.name: c for c in cells}
    # UGNCL's CLIP variant: its own config, on the track's stand-in and budget
    variant = by_name["clip-ugncl-clip-n50-s0"]
    assert variant.config == "ugncl_clip_synthetic"
    assert _sets(variant)["model.clip.pretrained"] == "w.pt"
    assert _epochs(variant, cells) == size.clip_epochs
    npc = by_name.get("sgraf-npc-n50-s1")
    if npc is not None:  # NPC without readings: the package row, from the warm start
        assert npc.start_from == "sgraf-warmup-n50-s1"
        assert "method.npc.clean_threshold" in _sets(npc)
    # the pre-filter pair of UGNCL's package reading; the shared optimiser on SGRAF
    on, off = _sets(by_name["sgraf-ugncl+pf-n50-s0"]), _sets(by_name["sgraf-ugncl-n50-s0"])
    key = "prefilter.kind" if with_pf else "method.ugncl.seed"
    assert (on[key], off[key]) == ("linear", "none")
    assert on["train.optimizer"] == "adam" and on["train.weight_decay"] == "0.0"
    oracle = _sets(by_name["sgraf-oracle-n50-s0"])
    assert oracle["method.triplet.train_pairs"] == "clean"
    # the hinge family over all negatives, the pre-filter's epochs after the same warm-up
    hinge = _sets(by_name["sgraf-hinge-n50-s0"])
    assert hinge["method.triplet.max_violation"] == "false"
    assert hinge["train.warmup_epochs"] == off["train.warmup_epochs"] == "2"
    assert [c.name for c in cells if c.plain and c.noise_ratio > 0 and c.seed == 0] == [
        "sgraf-hinge-n50-s0", "clip-finetune-n50-s0"
    ]  # fmt: skip


@pytest.mark.parametrize("plan", ["quick", "full"])
def test_every_plan_trains_whole_epochs(plan: str) -> None:
    cells = default_plan("W", "w.pt", PLANS[plan])
    assert {_sets(c)["train.epoch_length"] for c in cells} == {"full"}


def test_a_world_without_a_clip_view_plans_the_sgraf_track_without_osa() -> None:
    cells = default_plan("W", None)
    assert {c.backbone for c in cells} == {"sgraf"}
    assert "osa" not in {c.label.split("-")[0] for c in cells}
    assert not any("None" in s for c in cells for s in c.overrides)


@dataclass
class ToyConfig:
    CHOICES: ClassVar[dict] = {"reading": ("paper", "package")}
    READINGS: ClassVar[dict] = {
        "package": {},
        "paper": {"method.toy.margin": 0.5, "train.optimizer": "sgd"},
    }
    reading: str = "package"
    margin: float = 0.2


@dataclass
class PlainToyConfig:
    margin: float = 0.2


@pytest.mark.parametrize("config, label", [(ToyConfig, "toy-paper"), (PlainToyConfig, "toy")])
def test_a_newly_registered_method_gets_its_row_with_no_plan_edit(monkeypatch, config, label):
    """A method joins the plan by its registry line alone: at its paper reading where it has
    one (the reading's own optimiser kept), else as the package's."""
    from ugncl.methods import METHODS, MethodSpec, TripletMethod

    monkeypatch.setitem(METHODS, "toy", MethodSpec(config, TripletMethod))
    cells = default_plan("W", "w.pt", PLANS["quick"])
    toy = {c.backbone: c for c in cells if c.label == label}
    assert set(toy) == {"sgraf", "clip"}
    sgraf = _sets(toy["sgraf"])
    assert sgraf["method.name"] == "toy" and toy["sgraf"].config == "clean_synthetic"
    if config is ToyConfig:
        assert sgraf["method.toy.reading"] == "paper"
        assert "train.optimizer" not in sgraf  # the paper sets its own
    else:
        assert "method.toy.reading" not in sgraf and sgraf["train.optimizer"] == "adam"
    assert _epochs(toy["sgraf"], cells) == PLANS["quick"].sgraf_epochs


def test_plan_estimates_fit_their_bounds() -> None:
    """The plans' wall time from the step costs at the reference step measured on the 2-core
    machine (0.16 s): quick <= 20 minutes, default <= 2 hours with room for the rows this
    build may still lack (the pre-filter rows, NCR and DECL at the dearest measured cost)."""
    from ugncl.methods import METHODS

    quick = estimate_seconds(default_plan("W", "w.pt", PLANS["quick"]), 0.16)
    default = default_plan("W", "w.pt", PLANS["default"])
    assert estimate_seconds(default, 0.16) < estimate_seconds(default, 0.32)
    labels = {c.label for c in default}
    by_label = {
        label: [c for c in default if c.label == label] for label in ("hinge", "npc", "sdd")
    }
    coming = [c for label in ("hinge", "npc", "sdd") if f"{label}+pf" not in labels
              for c in by_label[label]]  # fmt: skip
    coming += by_label["npc"] * sum(name not in METHODS for name in ("ncr", "decl"))
    assert estimate_seconds(default + coming, 0.16) < 2 * 3600 * 0.8
    assert quick < 20 * 60 * 0.75


def _cell_folder(root: Path, cell: Cell, records: list[dict], *sets: str) -> Path:
    """A folder as tools/train.py leaves it for ``cell`` (with ``sets`` on top): its resolved
    config and ``records``."""
    from ugncl.run.compare_grid import REPO, _cell_sets
    from ugncl.run.config import load_config

    config = load_config(cell.config, [*_cell_sets(root, cell), *sets], cwd=REPO)[0]
    return write_run(root, cell.name, config.to_dict(), records)


def test_a_failed_cell_is_reported_with_its_error_line(tmp_path) -> None:
    from ugncl.run.compare_grid import last_error_line

    log = tmp_path / "cell.log"
    log.write_text("epoch 0\nerror: an older attempt\nerror: no pair passes method.npc."
                   "clean_threshold=0.99; lower it\n", encoding="utf-8")  # fmt: skip
    assert last_error_line(log) == "error: no pair passes method.npc.clean_threshold=0.99; lower it"
    log.write_text("Traceback (most recent call last):\n", encoding="utf-8")
    assert last_error_line(log) is None and last_error_line(tmp_path / "none.log") is None


def test_plan_resumes_a_partial_cell_and_reuses_a_done_one(tmp_path) -> None:
    root = tmp_path / "compare"
    done = Cell("sgraf-ugncl-n50-s0", "ugncl", "sgraf", "ugncl_synthetic", ("train.seed=0",),
                0.5, 0)  # fmt: skip
    _cell_folder(root, done, [{"event": "setup"}, {"event": "test", "rsum": 1.0}])
    partial = Cell("sgraf-sdd-n50-s0", "sdd", "sgraf", "triplet_synthetic",
                   ("method.name=sdd", "model.sgraf.init=@start_from@"), 0.5, 0,
                   start_from="warm")  # fmt: skip
    partial_dir = _cell_folder(root, partial, [{"event": "setup", "time": 0.0}])
    new = Cell("new", "npc", "sgraf", "triplet_synthetic", ("model.sgraf.init=@start_from@",),
               0.5, 0, start_from="warm")  # fmt: skip
    assert [cell_state(root, c) for c in (done, partial, new)] == ["done", "partial", "new"]
    assert _command(root, partial, "py")[2:] == ["--resume", str(partial_dir)]
    cmd = _command(root, new, "py")
    assert f"model.sgraf.init={root / 'warm' / 'checkpoints' / 'last.pt'}" in cmd
    assert cmd[-2:] == [f"run.out_dir={root}", "run.name=new"]


def test_a_cell_trained_with_another_config_is_stale_set_aside_and_trained_again(tmp_path):
    """A done folder whose config is not what its cell resolves to now (the plan or a reading
    changed since) is never reported as the plan's: ``run_plan`` moves it aside (nothing is
    deleted), names the keys, and trains the cell again."""
    from ugncl.run.compare_grid import cell_differences, run_plan

    root = tmp_path / "compare"
    sets = ("method.name=npc", "method.npc.reading=paper", "train.seed=0")
    cell = Cell("sgraf-npc-paper-n50-s0", "npc-paper", "sgraf", "clean_synthetic", sets, 0.5, 0)
    _cell_folder(root, cell, [{"event": "test", "rsum": 30.8}], "train.lr=2e-7")
    assert cell_differences(root, cell) == ["train.lr"]
    assert cell_state(root, cell) == "stale"
    lines: list[str] = []
    status = run_plan([cell], root, python="/bin/false", log=lines.append)
    assert (root / f"{cell.name}.stale-1" / "config.yaml").is_file()
    assert "stale sgraf-npc-paper-n50-s0: trained with other train.lr" in lines[0]
    assert status[cell.name].startswith("failed")  # /bin/false: the cell was launched again


@pytest.mark.parametrize(("step", "state"), [(4 * 62, "done"), (4 * 62 - 1, "stale")])
def test_a_run_over_whole_epochs_at_samples_stands_for_full(tmp_path, step, state) -> None:
    """A folder trained before the plan set ``train.epoch_length=full`` is the plan's where
    every epoch took a whole epoch's steps (2000 pairs // 32 = 62, 4 epochs): the same
    batches at either length. One short epoch (SDD's kept pairs, the pre-filter) makes it
    stale."""
    from ugncl.run.compare_grid import cell_differences

    root = tmp_path / "compare"
    sets = ("method.name=triplet", "train.seed=0", "train.batch_size=32", "train.epochs=3",
            "train.warmup_epochs=1", "train.epoch_length=full")  # fmt: skip
    cell = Cell("sgraf-hinge-n50-s0", "hinge", "sgraf", "clean_synthetic", sets, 0.5, 0)
    records = [{"event": "setup", "n_train_captions": 2000}, {"event": "test", "step": step}]
    _cell_folder(root, cell, records, "train.epoch_length=samples")
    assert cell_state(root, cell) == state
    assert cell_differences(root, cell) == ([] if state == "done" else ["train.epoch_length"])


def test_grid_run_leaves_the_thread_count_as_it_found_it(tool, tiny_world, tiny_model, tmp_path):
    """train.threads is process-wide: the in-process grid restores it after each run, so a
    grid's thread count does not depend on the order of --cfg."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        args = ["--cfg", "triplet_synthetic", "--out", str(tmp_path), "--set",
                f"data.root={tiny_world}", *tiny_model, "data.dev_images=12",
                "data.train_images=null", "train.epochs=1", "train.warmup_epochs=0",
                "train.batch_size=24", "train.eval_batch_size=12", "train.threads=1",
                "model.sgraf.num_views=1"]  # fmt: skip
        assert tool("compare").main(args) == 0
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_ensure_world_without_a_clip_view_skips_the_stand_in(tool, tmp_path, monkeypatch) -> None:
    """An activity world renders no images: no CLIP pretraining is attempted."""
    import hashlib

    options = "--generator activity --num-train 50"
    expected = tool("compare").world_root(options)
    assert expected == Path("data/worlds") / hashlib.sha256(options.encode()).hexdigest()[:10]
    root = tmp_path / expected
    (root / "synthetic_precomp").mkdir(parents=True)
    (root / "synthetic_precomp" / "world.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    world, weights = tool("compare").ensure_world(options)
    assert weights is None and world == expected


def test_budget_section_names_step_and_setting_departures() -> None:
    from ugncl.run.compare_report import budget_markdown

    def row(variant, steps, optimizer="adam", reading=None, plain=False):
        return {"backbone": "sgraf", "variant": variant, "steps": steps, "plain": plain,
                "noise_ratio": 0.5, "optimizer": optimizer, "lr": 1e-3, "weight_decay": 0.0,
                "image_decay_per_rms": None, "batch_size": 32, "reading": reading}  # fmt: skip

    rows = [row("hinge", 100, plain=True), row("ugncl-paper", 100, "adamw", "paper"),
            row("npc", 80, "adamw")]  # fmt: skip
    text = "\n".join(budget_markdown(rows))
    assert "the rows differ in optimiser steps (100: hinge, ugncl-paper; 80: npc)" in text
    assert "shared settings (`hinge`): optimizer adam, lr 0.001" in text
    assert "departs: `ugncl-paper` (its paper reading): optimizer adamw" in text
    assert "departs: `npc` (the config): optimizer adamw" in text
    rows[2]["steps"] = 100
    assert "every row trains 100 optimiser steps" in "\n".join(budget_markdown(rows))


def test_the_stand_in_is_named_by_its_recipe(tool, tmp_path) -> None:
    """A changed pretraining recipe names another weights file, so the CLIP cells that name
    the old one are stale and train again."""
    from ugncl.backbones.clip.pretrain import POOL_SIZE, PretrainConfig
    from ugncl.run.compare_grid import clip_rows

    path = tool("compare").stand_in_path(tmp_path)
    assert path.parent == tmp_path / "clip"
    assert f"{PretrainConfig().steps}steps" in path.name and f"pool{POOL_SIZE}" in path.name
    finetune = next(r for r in clip_rows(path) if r.label == "finetune")
    assert f"model.clip.pretrained={path}" in finetune.sets


def test_a_shifted_stand_in_has_its_own_file_and_the_renamed_one_is_made_from_the_plain_one(
    tool, tmp_path, monkeypatch
) -> None:
    """--pool-shift names its own weights file (the unshifted name stays the default plan's);
    the renamed stand-in is made from the unshifted one, which is pretrained first when
    missing."""
    from ugncl.backbones.clip.pretrain import SHIFTS

    compare = tool("compare")
    assert compare.SHIFT_CHOICES == SHIFTS
    plain = compare.stand_in_path(tmp_path)
    assert compare.stand_in_path(tmp_path, "none") == plain
    renamed = compare.stand_in_path(tmp_path, "renamed")
    assert renamed.name == plain.name.replace(".pt", "-renamed.pt")
    options = "--num-train 30"
    root = tmp_path / compare.world_root(options)
    (root / "synthetic_precomp").mkdir(parents=True)
    (root / "synthetic_precomp" / "world.json").write_text("{}")
    (root / "synthetic_clip").mkdir()
    calls = []

    def run(cmd, check):
        calls.append(cmd[2:])
        out = Path(cmd[cmd.index("--out") + 1])
        out.parent.mkdir(exist_ok=True)
        out.touch()

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(compare.subprocess, "run", run)
    world, weights = compare.ensure_world(options, "renamed")
    base = str(compare.stand_in_path(world, "none"))
    assert weights == compare.stand_in_path(world, "renamed")
    assert [c[c.index("--out") + 1] for c in calls] == [base, str(weights)]
    assert "--shift" not in calls[0] and calls[1][calls[1].index("--from") + 1] == base
    calls.clear()
    assert compare.ensure_world(options, "renamed") == (world, weights) and not calls
