"""tools/compare.py: the side-by-side table from hand-written run directories (both record
kinds, every format, the error contract) and one tiny end-to-end grid on the tiny world."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
import yaml

from ugncl.run.compare import (
    add_cost_ratio,
    cpu_seconds,
    mean_row,
    summarize_run,
    wall_seconds,
)


def _test_records(
    step: int, epoch: int, rsum: float, r1: tuple[float, float], time: float = 160.0
) -> list[dict]:
    metrics = {"i2t/R@1": r1[0], "t2i/R@1": r1[1], "rsum": rsum}
    return [
        {"event": "test", "epoch": epoch, "step": step, "split": "test", **metrics, "time": time}
    ]


def write_run(root: Path, name: str, config: dict, records: list[dict]) -> Path:
    """A run directory as tools/train.py leaves it (only what compare reads)."""
    run = root / name
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    lines = "".join(json.dumps(r) + "\n" for r in records)
    (run / "metrics.jsonl").write_text(lines, encoding="utf-8")
    return run


def _config(method: str, backbone: str, name: str, ratio: float, seed: int) -> dict:
    return {
        "data": {"name": name, "noise_ratio": ratio, "noise_file": None},
        "model": {"backbone": backbone},
        "method": {"name": method},
        "train": {"seed": seed},
    }


@pytest.fixture
def runs(tmp_path: Path) -> dict[str, Path]:
    """An evidential run (UGNCL ``division`` records), a weight-based run (OSA
    ``noise_detection``), a plain CLIP run (no detection) and an unfinished one."""
    setup = {
        "event": "setup", "seed": 3, "threads": 2, "n_train_captions": 100, "n_noisy": 48,
        "time": 100.0,
    }  # fmt: skip
    hard_sets = {
        "n_hard_clean": 40, "clean_share_hard_clean": 0.9, "n_hard_noisy": 60,
        "clean_share_hard_noisy": 0.2,
    }  # fmt: skip
    ugncl = [
        setup,
        {"event": "division", "epoch": 1, "noisy_f1": 0.61, "n_clean": 10, "time": 110.0},
        {"event": "val", "epoch": 1, "rsum": 50.0, "time": 120.0},
        {"event": "division", "epoch": 2, "noisy_f1": 0.72, **hard_sets, "time": 130.0},
        {"event": "val", "epoch": 2, "rsum": 55.0, "time": 150.0},
        *_test_records(step=40, epoch=2, rsum=123.4, r1=(10.0, 8.0)),
    ]
    osa = [
        {**setup, "seed": 0},
        {"event": "method_setup", "method": "osa", "time": 101.0},
        {"event": "noise_detection", "epoch": 0, "weight_auc": 0.8, "time": 102.0},
        {"event": "val", "epoch": 0, "rsum": 60.0, "time": 120.0},
        # killed after epoch 0 and resumed 1000 s later: the gap is not training time
        {"event": "resume", "epoch": 1, "step": 10, "time": 1120.0},
        {"event": "noise_detection", "epoch": 1, "weight_auc": 0.9, "time": 1121.0},
        {"event": "val", "epoch": 1, "rsum": 58.0, "time": 1140.0},
        # COCO-like: two sections of one test; the first is the main protocol
        *_test_records(step=20, epoch=0, rsum=200.0, r1=(30.0, 20.0), time=1160.0),
        {"event": "test", "epoch": 0, "step": 20, "split": "testall/5k", "rsum": 1.0},
    ]
    clip = [
        {**setup, "seed": 0},
        {"event": "val", "epoch": 0, "rsum": 60.0, "time": 130.0},
        *_test_records(step=20, epoch=0, rsum=180.0, r1=(25.0, 15.0)),
    ]
    unfinished = [setup, {"event": "val", "epoch": 0, "rsum": 1.0, "time": 120.0}]
    return {
        "ugncl": write_run(tmp_path, "ugncl-run", _config("ugncl", "sgraf", "f30k", 0.5, 3), ugncl),
        "osa": write_run(tmp_path, "osa-run", _config("osa", "clip", "synth", 0.5, 0), osa),
        "clip": write_run(tmp_path, "clip-run", _config("infonce", "clip", "synth", 0.5, 0), clip),
        "unfinished": write_run(
            tmp_path, "half-run", _config("infonce", "clip", "synth", 0.5, 0), unfinished
        ),
    }


@pytest.fixture
def compare(tool):
    return tool("compare").main


def _csv_rows(text: str) -> dict[str, dict[str, str]]:
    return {row["run"]: row for row in csv.DictReader(io.StringIO(text))}


def test_csv_table_of_evidential_and_weight_based_runs(compare, runs, capsys) -> None:
    rc = compare([str(runs["ugncl"]), str(runs["osa"]), str(runs["clip"]), "--format", "csv"])
    assert rc == 0
    rows = _csv_rows(capsys.readouterr().out)
    assert list(rows) == ["ugncl-run", "osa-run", "clip-run"]
    u, o, c = rows["ugncl-run"], rows["osa-run"], rows["clip-run"]
    assert (u["method"], u["backbone"], u["dataset"], u["seed"]) == ("ugncl", "sgraf", "f30k", "3")
    # last epoch's division F1, no weights
    assert (u["rsum"], u["best_epoch"], u["noisy_f1"], u["weight_auc"]) == (
        "123.4",
        "2",
        "0.72",
        "",
    )
    assert (u["i2t_r1"], u["t2i_r1"], u["wall_s"], u["threads"]) == ("10.0", "8.0", "60.0", "2")
    # the last division's hard sets: size and true-clean share
    assert (u["hard_clean"], u["hard_clean_share"], u["hard_noisy"], u["hard_noisy_share"]) == (
        "40",
        "0.9",
        "60",
        "0.2",
    )
    # last epoch's weight AUC, no selection F1; first test section; resume gap not counted
    assert (o["weight_auc"], o["noisy_f1"], o["rsum"], o["best_epoch"]) == ("0.9", "", "200.0", "0")
    assert float(o["wall_s"]) == pytest.approx(20.0 + 40.0)
    assert (c["noisy_f1"], c["weight_auc"], c["noise_ratio"]) == ("", "", "0.5")
    assert o["hard_clean"] == o["hard_noisy_share"] == c["hard_clean"] == ""


def test_markdown_and_json(compare, runs, capsys) -> None:
    assert compare([str(runs["ugncl"]), str(runs["clip"])]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("| run") and "test rSum" in lines[0] and "weight AUC" in lines[0]
    assert set(lines[1]) <= set("|-: ")
    cells = [c.strip() for c in lines[2].strip("|").split("|")]
    assert cells[3] == "sgr"  # SGRAF's head: SGR unless the config names SAF
    assert cells[7] == "2" and cells[8] == "123.4" and cells[14] == "0.720"
    assert cells[15:19] == ["40", "0.90", "60", "0.20"] and cells[19] == "" and cells[20] == "60"
    assert cells[12] == "0"  # epochs with a train record (the fixture writes none)
    assert cells[13] == "40"  # the optimiser steps: the test record's step
    assert compare([str(runs["osa"]), "--format", "json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["run"] == "osa-run" and row["weight_auc"] == 0.9 and row["noisy_f1"] is None


def test_mean_row_and_measured_noise_ratio(runs) -> None:
    records = [
        {"event": "setup", "seed": 1, "n_train_captions": 200, "n_noisy": 50},
        {"event": "test", "epoch": 1, "step": 5, "rsum": 10.0, "i2t/R@1": 1.0, "t2i/R@1": 2.0},
    ]
    config = {**_config("npc", "clip", "synth", 0.5, 1), "data": {"noise_file": "n.npy"}}
    row = summarize_run("a", config, records)
    assert row["noise_ratio"] == 0.25 and row["wall_s"] is None  # from the file, no stamps
    other = {**row, "rsum": 20.0, "weight_auc": 0.7, "seed": 2}
    mean = mean_row([row, other], "npc")
    assert mean["rsum"] == 15.0 and mean["weight_auc"] == 0.7 and mean["noisy_f1"] is None
    assert mean["method"] == "npc" and mean["seed"] == "mean of 2" and mean["best_epoch"] is None
    assert wall_seconds([{"event": "resume", "time": 5.0}, {"event": "val", "time": 7.0}]) == 2.0


def test_the_cost_ratio_divides_cpu_seconds_where_every_row_has_them() -> None:
    """CPU seconds are summed over attempts like the wall time; a backbone whose every run
    recorded them is costed on them (a loaded machine's wall time would count the load), a
    backbone with one run without them on the wall time."""
    stamps = [(0.0, 10.0), (30.0, 19.0), ("resume", 40.0, 1.0), (60.0, 6.0)]
    records = []
    for stamp in stamps:
        event = "resume" if stamp[0] == "resume" else "val"
        wall, cpu = stamp[-2:]
        records.append({"event": event, "time": wall, "cpu": cpu})
    assert cpu_seconds(records) == 9.0 + 5.0 and wall_seconds(records) == 30.0 + 20.0
    assert cpu_seconds([{"event": "val", "time": 1.0}]) is None  # recorded before the stamp
    assert cpu_seconds([{"event": "setup"}]) is None
    # rank 0 writes a multi-process run's records: its CPU stamps are not the run's compute
    ranks = [{"event": "distributed", "world": 2, "time": 1.0, "cpu": 1.0}, *records]
    assert cpu_seconds(ranks) is None and wall_seconds(ranks) is not None
    test = {"event": "test", "epoch": 0, "step": 5, "rsum": 10.0, "time": 70.0, "cpu": 7.0}
    config = _config("triplet", "sgraf", "synth", 0.5, 0)
    for device, expected in (("cpu", 7.0), ("cuda:0", None)):  # a GPU's work is not CPU time
        setup = {"event": "setup", "device": device, "time": 0.0, "cpu": 0.0}
        assert summarize_run("a", config, [setup, test])["cpu_s"] == expected

    def row(method: str, seed: int, wall: float, cpu: float | None) -> dict:
        return {"backbone": "sgraf", "method": method, "seed": seed, "s_per_epoch": wall,
                "cpu_per_epoch": cpu}  # fmt: skip

    # the plain run shared the machine with three others: 4x its CPU time in wall time
    rows = [row("triplet", 0, 40.0, 10.0), row("ugncl", 0, 20.0, 20.0)]
    add_cost_ratio(rows)
    assert [r["cost_ratio"] for r in rows] == [1.0, 2.0]
    rows = [row("triplet", 0, 40.0, 10.0), row("ugncl", 0, 20.0, None)]
    add_cost_ratio(rows)
    assert [r["cost_ratio"] for r in rows] == [1.0, 0.5]


def test_the_clean_pairs_oracle_is_not_labelled_the_plain_baseline() -> None:
    records = [{"event": "test", "epoch": 1, "step": 5, "rsum": 10.0}]
    config = _config("triplet", "sgraf", "synth", 0.5, 0)
    assert summarize_run("a", config, records)["method"] == "triplet"
    config["method"]["triplet"] = {"train_pairs": "clean"}
    row = summarize_run("a", config, records)
    assert row["method"] == row["variant"] == "triplet_clean_pairs"
    clip = _config("infonce", "clip", "synth", 0.5, 0)
    clip["method"]["infonce"] = {"train_pairs": "clean"}
    assert summarize_run("a", clip, records)["method"] == "infonce_clean_pairs"


@pytest.mark.parametrize(
    "which, expected",
    [
        ("unfinished", "no test record"),
        ("missing", "not a run directory (no such folder)"),
        ("empty", "not a run directory (no config.yaml or metrics.jsonl)"),
    ],
)
def test_bad_run_dirs_are_one_error_line(compare, runs, tmp_path, capsys, which, expected) -> None:
    (tmp_path / "empty").mkdir()
    path = runs.get(which, tmp_path / which)
    assert compare([str(runs["clip"]), str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.strip().splitlines()
    assert line.startswith("error: ") and expected in line


def test_grid_errors_before_training(compare, tmp_path, capsys) -> None:
    out = tmp_path / "grid"
    assert compare(["--cfg", "clip_synthetic", "no_such_config", "--out", str(out)]) == 2
    assert "config 'no_such_config' not found" in capsys.readouterr().err
    assert compare(["--cfg", "clip_synthetic", "--out", str(out), "--set", "train.epoch=1"]) == 2
    assert "train.epoch" in capsys.readouterr().err
    assert not out.exists()  # nothing trained, no folder left behind
    blocked = tmp_path / "a_file"  # --out under a file: the table cannot be written
    blocked.write_text("")
    assert compare(["--cfg", "clip_synthetic", "--out", str(blocked / "grid")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: ") and "--out table" in line
    with pytest.raises(SystemExit):  # neither runs nor --cfg: argparse's usage error
        compare([])
    with pytest.raises(SystemExit):  # a block name with nothing to write it
        compare(["--plan", "default", "--block", "compare-clip-counting"])
    assert "add --write-results" in capsys.readouterr().err


def test_grid_trains_reuses_and_resumes(compare, tiny_world, tiny_model, tmp_path, capsys) -> None:
    """UGNCL (division records) x two seeds, one epoch each, on the tiny world; a second call
    reuses the finished run and resumes the one whose test was cut off."""
    out = tmp_path / "grid"
    overrides = [
        f"data.root={tiny_world}", "data.dev_images=12", "data.train_images=16",
        "train.batch_size=16", "train.eval_batch_size=12", "train.warmup_epochs=0",
        "train.epochs=1", "train.log_every=5", "method.ugncl.lambda_min=3", *tiny_model,
    ]  # fmt: skip
    argv = ["--cfg", "ugncl_synthetic", "--seeds", "0", "1", "--out", str(out)]
    argv += ["--format", "csv", "--set", *overrides]
    assert compare(argv) == 0
    captured = capsys.readouterr()
    assert captured.err.count("trained: ") == 2
    table = captured.out[captured.out.index("run,method") :]  # training logs come first
    rows = _csv_rows(table)
    assert list(rows) == ["ugncl_synthetic-s0", "ugncl_synthetic-s1", "ugncl_synthetic"]
    assert (out / "compare.csv").read_text(encoding="utf-8").strip() == table.strip()
    s0, s1, mean = rows["ugncl_synthetic-s0"], rows["ugncl_synthetic-s1"], rows["ugncl_synthetic"]
    assert (s0["seed"], s1["seed"], mean["seed"]) == ("0", "1", "mean of 2")
    assert (s0["method"], s0["backbone"], s0["best_epoch"], s0["weight_auc"]) == (
        "ugncl", "sgraf", "0", ""
    )  # fmt: skip
    assert 0.0 <= float(s0["noisy_f1"]) <= 1.0 and float(s0["wall_s"]) > 0
    assert float(mean["rsum"]) == pytest.approx((float(s0["rsum"]) + float(s1["rsum"])) / 2)
    # the test saved its per-query hits beside the records: they add up to its rSum
    from ugncl.run.compare_claims import load_query_hits, rsum_of_hits

    hits = load_query_hits(out / "ugncl_synthetic-s0")
    assert hits is not None and rsum_of_hits(*hits) == pytest.approx(float(s0["rsum"]), abs=0.05)

    # Seed 1 "killed" before its test: the next call tests it (resume) and reuses seed 0.
    metrics = out / "ugncl_synthetic-s1" / "metrics.jsonl"
    records = [json.loads(line) for line in metrics.read_text(encoding="utf-8").splitlines()]
    kept = "".join(json.dumps(r) + "\n" for r in records if r["event"] != "test")
    metrics.write_text(kept, encoding="utf-8")
    assert compare(argv) == 0
    captured = capsys.readouterr()
    assert captured.err.count("reused: ") == 1 and captured.err.count("resumed: ") == 1
    again = _csv_rows(captured.out[captured.out.index("run,method") :])
    assert again["ugncl_synthetic-s1"]["rsum"] == s1["rsum"]  # the same best checkpoint
    assert again["ugncl_synthetic-s0"] == s0

    # Other settings for an existing grid folder are refused, not silently reused.
    assert compare([*argv, "train.lr=0.5"]) == 2
    assert "already holds a run with other settings" in capsys.readouterr().err


def test_repeated_run_names_keep_their_parent(compare, runs, tmp_path, capsys) -> None:
    # tools/demo.py names runs by config: a seed grid repeats ugncl_synthetic in each folder
    config = _config("ugncl", "sgraf", "synth", 0.5, 0)
    records = _test_records(step=1, epoch=0, rsum=5.0, r1=(1.0, 1.0))
    grid = [write_run(tmp_path / f"s{s}t1", "ugncl_synthetic", config, records) for s in (0, 1)]
    assert compare([*map(str, grid), str(runs["clip"]), "--format", "csv"]) == 0
    rows = _csv_rows(capsys.readouterr().out)
    assert list(rows) == ["s0t1/ugncl_synthetic", "s1t1/ugncl_synthetic", "clip-run"]


@pytest.mark.parametrize("rsum", [float("nan"), "412.5", None, True])
def test_a_test_rsum_that_is_not_a_finite_number_is_refused(compare, runs, tmp_path, capsys, rsum):
    records = [{"event": "setup", "seed": 0}, {"event": "test", "rsum": rsum, "epoch": 0}]
    bad = write_run(tmp_path, "bad", _config("infonce", "clip", "synth", 0.5, 0), records)
    assert compare([str(runs["clip"]), str(bad)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: run ") and "not a finite number" in line


def _noise_run(root: Path, name: str, seed: int, sha: str, noisy: int, ratio=None, **model):
    """A finished run whose noise came from ``data.noise_ratio`` (``ratio``) or, with
    ``ratio`` None, from a noise file (its measured share ``noisy``/1000)."""
    data = {"name": "synth", "noise_ratio": ratio, "noise_file": None if ratio else "n.npy"}
    config = {"data": data, "model": {"backbone": "sgraf", "sgraf": model},
              "method": {"name": "triplet"}, "train": {"seed": seed}}  # fmt: skip
    records = [
        {"event": "setup", "seed": seed, "n_train_captions": 1000, "n_noisy": noisy,
         "noise_sha256": sha, "time": 0.0},
        *_test_records(step=10, epoch=0, rsum=100.0 + seed, r1=(1.0, 1.0), time=5.0),
    ]  # fmt: skip
    return write_run(root, name, config, records)


@pytest.mark.parametrize(
    "first, second",
    [
        ({"ratio": 0.2, "noisy": 197}, {"noisy": 197}),  # configured 0.2 vs measured 0.197
        ({"noisy": 197}, {"noisy": 201}),  # two files of different noisy counts
    ],
)
def test_rows_of_one_ratio_on_different_noise_files_are_refused(
    compare, tmp_path, capsys, first, second
) -> None:
    """However each row got its noise, two rows of one ratio and seed on different files
    meet in one group and are refused, naming both."""
    a = _noise_run(tmp_path, "a", 0, "a" * 64, **first)
    b = _noise_run(tmp_path, "b", 0, "b" * 64, **second)
    assert compare([str(a), str(b)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: runs of noise 0.2 and seed 0")
    assert "aaaaaaaaaaaa: a" in line and "bbbbbbbbbbbb: b" in line
    c = _noise_run(tmp_path, "c", 0, "a" * 64, **second)  # the same file: one group, fine
    assert compare([str(a), str(c), "--format", "csv"]) == 0
    rows = _csv_rows(capsys.readouterr().out)
    assert rows["a"]["noise_ratio"] == rows["c"]["noise_ratio"] == "0.2"


def test_a_failed_folder_is_named_or_skipped(compare, runs, capsys) -> None:
    argv = [str(runs["clip"]), str(runs["unfinished"])]
    assert compare(argv) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert str(runs["unfinished"]) in line and "--skip-failed" in line
    assert compare([*argv, "--skip-failed", "--format", "csv"]) == 0
    out, err = capsys.readouterr()
    assert list(_csv_rows(out)) == ["clip-run"]
    assert err.startswith(f"warning: skipping {runs['unfinished']}")
    assert compare([str(runs["unfinished"]), "--skip-failed"]) == 2
    assert "no finished run" in capsys.readouterr().err


def test_run_folders_with_out_write_the_report(compare, tmp_path, capsys) -> None:
    """--out over run folders: tables, plots, the SGR and SAF rows apart, and one seed
    printed as one value, not as a spread of 0."""
    runs = [
        _noise_run(tmp_path / "r", "sgr", 0, "a" * 64, 500, ratio=0.5, head="sgr"),
        _noise_run(tmp_path / "r", "saf", 0, "a" * 64, 500, ratio=0.5, head="saf"),
    ]
    out = tmp_path / "report"
    assert compare([*map(str, runs), "--out", str(out)]) == 0
    names = {p.name for p in out.iterdir()}
    assert {"compare.md", "compare.csv", "compare.json", "rsum_vs_noise.png"} <= names
    md = (out / "compare.md").read_text(encoding="utf-8")
    assert "| sgraf (SGR) | triplet |" in md and "| sgraf (SAF) | triplet |" in md
    assert "100.0 (1 seed)" in md and "± 0.0" not in md
    groups = json.loads((out / "compare.json").read_text())["groups"]
    assert sorted(g["head"] for g in groups) == ["saf", "sgr"]


def test_report_only_before_any_cell_finished_is_one_line(compare, tmp_path, capsys) -> None:
    assert compare(["--plan", "quick", "--report-only", "--out", str(tmp_path / "p")]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert line.startswith("error: no cell of the quick plan has finished")
    assert not (tmp_path / "p").exists()


def test_backbone_reports_one_track(compare, tmp_path, capsys) -> None:
    """``--backbone clip`` keeps the plan's CLIP cells only: the report-only error names none
    of SGRAF's."""
    assert compare(["--plan", "quick", "--backbone", "clip", "--report-only", "--out",
                    str(tmp_path / "p")]) == 2  # fmt: skip
    assert "no cell of the quick plan has finished" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        compare(["--plan", "quick", "--backbone", "resnet"])


def test_plan_estimate(compare, capsys) -> None:
    assert compare(["--plan", "quick", "--estimate", "0.16"]) == 0
    both = capsys.readouterr().out
    assert both.startswith("plan quick: ")
    # --backbone estimates that track's cells only.
    assert compare(["--plan", "quick", "--estimate", "0.16", "--backbone", "clip"]) == 0
    clip = capsys.readouterr().out

    def cells(out: str) -> int:
        return int(out.split(" cells,")[0].rsplit(" ", 1)[1])

    assert 0 < cells(clip) < cells(both)
    with pytest.raises(SystemExit):
        compare(["--plan", "quick", "--estimate", "-1"])


def test_plan_ratios_replace_the_plans_and_keep_its_report(compare, tool, capsys) -> None:
    """``--ratios`` trains the plan at other noise ratios (its clean rows once, at 0%), in a
    folder of its own, so the plan's report (what the README's results are written from)
    keeps its own ratios."""
    from ugncl.run.compare_grid import default_plan

    module = tool("compare")
    args = module.parse_args(["--plan", "default", "--ratios", "0.2", "--seeds", "1"])
    size = module.plan_size(args)
    assert size.ratios == (0.2,) and size.seeds == (1,) and size.train_images == 400
    ratios = {c.noise_ratio for c in default_plan(Path("world"), Path("clip.pt"), size)}
    assert ratios == {0.0, 0.2}
    for bad in (["--ratios", "0.2"], ["--plan", "quick", "--ratios", "0.0"]):
        with pytest.raises(SystemExit):
            compare(bad)
        assert "--ratios" in capsys.readouterr().err


def test_the_report_says_which_cpu_kernels_the_runs_computed_with() -> None:
    from ugncl.run.compare import cpu_kernels_note

    pinned = {"cpu_kernels": "AVX2, MKL_CBWR=AVX2"}
    assert cpu_kernels_note([pinned, pinned]) == "CPU kernels: AVX2, MKL_CBWR=AVX2, every run."
    mixed = [pinned, {"cpu_kernels": "AVX512"}, {"cpu_kernels": None}]
    assert cpu_kernels_note(mixed) == (
        "CPU kernels: AVX2, MKL_CBWR=AVX2 (1 run), AVX512 (1 run), not recorded (1 run)."
    )


def test_a_run_records_its_cpu_kernels(monkeypatch) -> None:
    from ugncl.core.engine.device import cpu_kernels

    monkeypatch.setenv("MKL_CBWR", "AVX2")
    assert cpu_kernels().endswith(", MKL_CBWR=AVX2") and cpu_kernels().split(",")[0].isupper()
    monkeypatch.delenv("MKL_CBWR")
    assert "MKL_CBWR" not in cpu_kernels()
