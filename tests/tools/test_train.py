"""tools/train.py end to end on a tiny synthetic split (CPU): records, resume, clear errors;
Hardening: consistent checkpoints after a kill, safe resume, no dead-end run
directories, one run's records, vocabulary checks, one error contract."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from ugncl.core.engine.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from ugncl.core.engine.recorder import read_metrics
from ugncl.core.engine.trainer import checkpoint_for_test


@pytest.fixture
def train_main(tool):
    """``tools/train.py``'s ``main(argv)``."""
    return tool("train").main


@pytest.fixture
def run_train(train_main, tiny_world: Path, tmp_path: Path, tiny_model: list[str]):
    """Train on the tiny world into ``tmp_path/<name>``; returns the exit code."""

    def _run(name: str, *extra: str, cfg: str = "ugncl_synthetic") -> int:
        overrides = tiny_overrides(tiny_world, tmp_path, name, tiny_model, *extra)
        return train_main(["--cfg", cfg, "--set", *overrides])

    return _run


def tiny_overrides(world: Path, out: Path, name: str, model: list[str], *extra: str) -> list[str]:
    return [
        f"data.root={world}",
        "data.noise_ratio=0.5",
        "data.dev_images=12",
        f"run.out_dir={out}",
        f"run.name={name}",
        "train.batch_size=16",
        "train.eval_batch_size=12",
        "train.log_every=2",
        "train.seed=7",
        "method.ugncl.lambda_min=3",
        *model,
        *extra,
    ]


def test_one_epoch_with_warmup_writes_every_record(run_train, tmp_path: Path) -> None:
    rc = run_train("run", "train.epochs=1", "train.warmup_epochs=1")
    assert rc == 0
    run = tmp_path / "run"
    for rel in ["config.yaml", "noise_index.npy", "train.log", "metrics.jsonl", "tb"]:
        assert (run / rel).exists(), rel
    records = read_metrics(run)
    events = {r["event"] for r in records}
    assert {"setup", "division", "train", "val", "test"} <= events
    division = next(r for r in records if r["event"] == "division")
    for key in ["n_clean", "n_noisy", "n_hard_clean", "n_hard_noisy", "noisy_precision",
                "noisy_recall", "noisy_f1"]:  # fmt: skip
        assert key in division
    assert division["epoch"] == 1  # warm-up epoch 0 has no division
    total = sum(division[k] for k in ["n_clean", "n_noisy", "n_hard_clean", "n_hard_noisy"])
    assert total == 48 * 5
    train = [r for r in records if r["event"] == "train"]
    assert {"epoch", "step", "lr", "loss"} <= set(train[0])
    assert any(k.startswith("loss_") for k in train[-1])
    val = [r for r in records if r["event"] == "val"]
    assert [r["epoch"] for r in val] == [0, 1]
    for key in ["i2t/R@1", "i2t/R@5", "i2t/R@10", "t2i/R@1", "t2i/R@5", "t2i/R@10", "rsum",
                "i2t/medr", "t2i/medr"]:  # fmt: skip
        assert key in val[0]
    assert next(r for r in records if r["event"] == "test")["split"] == "test"
    best = torch.load(run / "checkpoints" / "best.pt", weights_only=True)
    assert best["config"]["train"]["seed"] == 7 and "model_config" in best


@pytest.mark.parametrize("division_pass", ["separate", "training"])
def test_resume_equals_uninterrupted(
    run_train, train_main, tmp_path: Path, division_pass: str
) -> None:
    """A run stopped after warm-up and resumed ends where an uninterrupted one does; with
    ``division_pass: training`` the opinions recorded in warm-up travel in the checkpoint."""
    common = (
        "train.epochs=1",
        "train.warmup_epochs=1",
        f"method.ugncl.division_pass={division_pass}",
    )
    assert run_train("straight", *common) == 0
    assert run_train("split", *common, "train.stop_after_epochs=1") == 0
    first = read_metrics(tmp_path / "split")
    assert [r["epoch"] for r in first if r["event"] == "val"] == [0]
    assert not any(r["event"] == "test" for r in first)
    resume = ["--resume", str(tmp_path / "split"), "--set", "train.stop_after_epochs=null"]
    assert train_main(resume) == 0

    def final(name: str) -> tuple[dict, dict]:
        records = read_metrics(tmp_path / name)
        val = [r for r in records if r["event"] == "val"][-1]
        state = torch.load(tmp_path / name / "checkpoints" / "last.pt", weights_only=True)
        return val, state

    (val_a, state_a), (val_b, state_b) = final("straight"), final("split")
    for key in ["rsum", "i2t/R@1", "t2i/R@1", "i2t/meanr"]:
        assert val_a[key] == pytest.approx(val_b[key], abs=1e-6)
    assert state_a["global_step"] == state_b["global_step"]
    for name, tensor in state_a["model"].items():
        torch.testing.assert_close(tensor, state_b["model"][name], rtol=1e-5, atol=1e-6)
    div_a = [r for r in read_metrics(tmp_path / "straight") if r["event"] == "division"]
    div_b = [r for r in read_metrics(tmp_path / "split") if r["event"] == "division"]
    division_a, division_b = (
        {k: v for k, v in d[-1].items() if k not in ("time", "cpu")} for d in (div_a, div_b)
    )
    assert json.dumps(division_a) == json.dumps(division_b)


def test_triplet_baseline_runs(run_train, tmp_path: Path) -> None:
    rc = run_train("triplet", "train.epochs=1", cfg="triplet_synthetic")
    assert rc == 0
    events = {r["event"] for r in read_metrics(tmp_path / "triplet")}
    assert "division" not in events and {"train", "val", "test"} <= events


def test_missing_data_explains_what_is_missing(train_main, tmp_path: Path, capsys) -> None:
    overrides = [f"data.root={tmp_path / 'nowhere'}", f"run.out_dir={tmp_path}"]
    rc = train_main(["--cfg", "ugncl_flickr", "--set", *overrides])
    assert rc == 2
    err = capsys.readouterr().err
    assert "nowhere" in err and "make demo" in err


def test_config_typo_suggests_key(train_main, capsys) -> None:
    assert train_main(["--cfg", "ugncl_flickr", "--set", "train.bach_size=4"]) == 2
    assert "did you mean 'train.batch_size'" in capsys.readouterr().err


def test_existing_run_dir_is_not_overwritten(run_train, tmp_path: Path, capsys) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "metrics.jsonl").write_text("")
    assert run_train("taken", "train.epochs=1") == 2
    assert "--resume" in capsys.readouterr().err


def test_truncated_checkpoint_gives_clear_error(
    run_train, train_main, tmp_path: Path, capsys
) -> None:
    assert (
        run_train("r", "train.warmup_epochs=0", "train.epochs=2", "train.stop_after_epochs=1") == 0
    )
    last = tmp_path / "r" / "checkpoints" / "last.pt"
    data = last.read_bytes()
    last.write_bytes(data[: len(data) // 2])
    assert train_main(["--resume", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "truncated or corrupt" in err and "last.pt" in err


def test_eval_tool_single_and_ensemble(run_train, tool, tmp_path: Path, capsys) -> None:
    assert run_train("ev", "train.epochs=1", "train.warmup_epochs=0") == 0
    eval_main = tool("eval").main
    best = tmp_path / "ev" / "checkpoints" / "best.pt"
    last = tmp_path / "ev" / "checkpoints" / "last.pt"
    single, pair = tmp_path / "single.json", tmp_path / "pair.json"
    assert eval_main([str(best), "--json", str(single)]) == 0
    assert "rsum" in capsys.readouterr().out
    results = json.loads(single.read_text())["results"]
    test_record = next(r for r in read_metrics(tmp_path / "ev") if r["event"] == "test")
    assert results["full"]["rsum"] == pytest.approx(test_record["rsum"])
    assert eval_main([str(best), str(last), "--json", str(pair)]) == 0
    # best.pt and last.pt hold the same weights after one epoch: averaging changes nothing.
    ensembled = json.loads(pair.read_text())["results"]["full"]
    assert ensembled["rsum"] == pytest.approx(results["full"]["rsum"])
    truncated = tmp_path / "bad.pt"
    truncated.write_bytes(best.read_bytes()[:100])
    assert eval_main([str(truncated)]) == 2
    assert "truncated or corrupt" in capsys.readouterr().err


# ---------------------------------------------------------------- hardening


def _ckpt(path: Path, epoch: int, best_epoch: int | None, tag: float) -> None:
    save_checkpoint({"model": {}, "epoch": epoch, "best_epoch": best_epoch, "tag": tag}, path)


def test_kill_between_last_and_best_is_repaired(tmp_path: Path) -> None:
    # last.pt (epoch index 2) is the best, but the kill hit before best.pt was replaced.
    _ckpt(tmp_path / "best.pt", 2, 1, tag=1.0)
    _ckpt(tmp_path / "last.pt", 3, 2, tag=2.0)
    path = checkpoint_for_test(tmp_path)
    assert path == tmp_path / "best.pt" and load_checkpoint(path)["tag"] == 2.0
    # best.pt lost although validation chose an earlier epoch: an error, never last.pt.
    (tmp_path / "best.pt").unlink()
    _ckpt(tmp_path / "last.pt", 3, 1, tag=3.0)
    with pytest.raises(CheckpointError, match="best epoch 1"):
        checkpoint_for_test(tmp_path)
    # No validation ran: last.pt is what there is.
    _ckpt(tmp_path / "last.pt", 3, None, tag=4.0)
    assert checkpoint_for_test(tmp_path) == tmp_path / "last.pt"


@pytest.fixture
def args(tiny_world: Path, tmp_path: Path, tiny_model: list[str]):
    def _args(name: str, *extra: str) -> list[str]:
        return ["--set", *tiny_overrides(tiny_world, tmp_path, name, tiny_model, *extra)]

    return _args


def test_resume_is_safe_and_reads_as_one_run(tool, args, tmp_path: Path, capsys) -> None:
    train = tool("train").main
    common = ("train.warmup_epochs=0", "train.epochs=2", "train.amp=fp16")
    assert train(["--cfg", "ugncl_synthetic", *args("r", *common, "data.max_caption_tokens=6",
                                                    "train.stop_after_epochs=1")]) == 0  # fmt: skip
    run = tmp_path / "r"
    setup = next(r for r in read_metrics(run) if r["event"] == "setup")
    assert setup["amp"] == "fp32" and setup["amp_requested"] == "fp16"  # CPU says fp32
    # a CPU run's numbers depend on its thread count (tools/compare.py shows it)
    assert setup["threads"] == torch.get_num_threads()
    assert setup["n_truncated_captions"]["train"] > 0 and "test" in setup["n_truncated_captions"]
    capsys.readouterr()

    # Overrides that change the experiment are refused by name; nothing is written.
    before = (run / "metrics.jsonl").read_text()
    for bad in ["data.noise_ratio=0.2", "model.sgraf.embed_dim=8", "method.ugncl.tau=0.5"]:
        assert train(["--resume", str(run), "--set", bad]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: --resume cannot change " + bad.split("=")[0])
    assert (run / "metrics.jsonl").read_text() == before

    # A killed attempt of epoch 1: its records, a torn line and a 0-byte temp file.
    with (run / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({"event": "train", "epoch": 1, "step": 99, "killed": True}) + "\n")
        f.write('{"event": "val", "epo')
    (run / "checkpoints" / ".last.pt.x1y2.tmp").write_bytes(b"")
    assert train(["--resume", str(run), "--set", "train.epochs=3",
                  "train.stop_after_epochs=null"]) == 0  # fmt: skip
    records = read_metrics(run)
    assert not any(r.get("killed") for r in records)
    assert not list((run / "checkpoints").glob("*.tmp")) and not list(run.glob("**/.*.tmp"))
    assert [r["event"] for r in records].count("setup") == 1
    assert [r["epoch"] for r in records if r["event"] == "val"] == [0, 1, 2]
    resume = [r for r in records if r["event"] == "resume"]
    assert len(resume) == 1 and resume[0]["epoch"] == 1
    assert resume[0]["changes"]["train.epochs"] == [2, 3]
    assert yaml.safe_load((run / "config.yaml").read_text())["train"]["epochs"] == 3
    test = [r for r in records if r["event"] == "test"]
    assert len(test) == 1 and test[0]["checkpoint"].endswith("best.pt")
    best = load_checkpoint(run / "checkpoints" / "best.pt")
    assert test[0]["epoch"] == best["epoch"] - 1 == best["best_epoch"]
    steps = [r["step"] for r in records if r["event"] == "train"]
    assert steps == sorted(set(steps))

    # Resuming the finished run changes nothing and says so.
    capsys.readouterr()
    assert train(["--resume", str(run)]) == 0
    assert "already finished" in capsys.readouterr().out
    assert read_metrics(run) == records

    # Evaluation refuses another vocabulary by name: one word more, or the same words reordered.
    eval_main = tool("eval").main
    vocab = json.loads((Path(setup["vocab"])).read_text())
    words = vocab["idx2word"]
    words = [words[str(i)] for i in range(len(words))] if isinstance(words, dict) else words
    for name, new in [
        ("bigger", [*words, "zzzextra"]),
        ("reordered", [*words[:4], words[5], words[4], *words[6:]]),
    ]:
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"word2idx": {w: i for i, w in enumerate(new)},
                                    "idx2word": {str(i): w for i, w in enumerate(new)},
                                    "idx": len(new)}))  # fmt: skip
        assert eval_main([str(run / "checkpoints" / "best.pt"), "--vocab", str(path)]) == 2
        err = capsys.readouterr().err
        assert str(path) in err and ("words but" in err if name == "bigger" else "order" in err)


def test_failed_setup_leaves_no_run_dir_and_killed_dir_resumes(
    tool, args, tiny_world: Path, tmp_path: Path, capsys
) -> None:
    train = tool("train").main
    world = tmp_path / "world"
    shutil.copytree(tiny_world, world)
    (world / "synthetic_precomp" / "test_caps.txt").unlink()
    rc = train(["--cfg", "ugncl_synthetic", *args("nt", "train.epochs=1"), f"data.root={world}"])
    assert rc == 2 and "test_caps" in capsys.readouterr().err
    assert not (tmp_path / "nt").exists() and not list(tmp_path.glob(".nt*"))

    # A directory killed before its first checkpoint resumes from epoch 0 with its config.
    assert train(["--cfg", "ugncl_synthetic", *args("k", "train.epochs=1",
                                                    "train.warmup_epochs=0")]) == 0  # fmt: skip
    straight = [r for r in read_metrics(tmp_path / "k") if r["event"] == "val"]
    shutil.rmtree(tmp_path / "k" / "checkpoints")
    (tmp_path / "k" / "checkpoints").mkdir()
    metrics = tmp_path / "k" / "metrics.jsonl"  # killed before its test: no test record
    kept = [line for line in metrics.read_text().splitlines() if '"event": "test"' not in line]
    metrics.write_text("".join(f"{line}\n" for line in kept))
    assert train(["--cfg", "ugncl_synthetic", *args("k", "train.epochs=1")]) == 2
    assert "--resume" in capsys.readouterr().err
    assert train(["--resume", str(tmp_path / "k")]) == 0
    records = read_metrics(tmp_path / "k")
    assert [r["event"] for r in records].count("setup") == 1
    val = [r for r in records if r["event"] == "val"]
    assert [r["rsum"] for r in val] == [r["rsum"] for r in straight]


BAD_SETTINGS = [
    ("data.train_images=0", "data.train_images"),
    ("train.batch_size=1000", "train.batch_size=1000 is larger than the training split"),
    ("model.sgraf.num_views=0", "model.sgraf.num_views"),
    ("model.sgraf.img_dim=32", "model.sgraf.img_dim=32"),
    ("train.lr=nan", "train.lr' must be a finite number"),
    ("train.threads=0", "train.threads"),
]


@pytest.mark.parametrize(("setting", "message"), BAD_SETTINGS)
def test_bad_settings_are_one_error_line(tool, args, tmp_path, capsys, setting, message) -> None:
    rc = tool("train").main(["--cfg", "ugncl_synthetic", *args("bad", setting)])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: ")
    assert not (tmp_path / "bad").exists()


def test_tool_path_errors(tool, tmp_path: Path, capsys) -> None:
    train, eval_main = tool("train").main, tool("eval").main
    assert train(["--resume", str(tmp_path / "gone")]) == 2
    err = capsys.readouterr().err
    assert "no such run directory" in err and "configs" not in err
    assert eval_main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "is a directory" in err and "does not exist" not in err


def test_eval_split_and_protocol_errors(tool, args, tmp_path: Path, capsys) -> None:
    assert tool("train").main(["--cfg", "ugncl_synthetic",
                               *args("e", "train.epochs=1", "train.warmup_epochs=0",
                                     "eval.test_after_training=false")]) == 0  # fmt: skip
    eval_main, best = tool("eval").main, str(tmp_path / "e" / "checkpoints" / "best.pt")
    capsys.readouterr()
    assert eval_main([best, "--split", "nope"]) == 2
    assert "unknown split 'nope'" in capsys.readouterr().err
    assert eval_main([best, "--protocol", "coco5fold"]) == 2
    assert "5000 images" in capsys.readouterr().err
    assert eval_main([best, "--eval-score", "evidence_mean_exp"]) == 0
