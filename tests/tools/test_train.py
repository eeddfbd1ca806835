"""tools/train.py end to end on a tiny synthetic split (CPU): records, resume, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ugncl.engine.recorder import read_metrics


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


def test_resume_equals_uninterrupted(run_train, train_main, tmp_path: Path) -> None:
    common = ("train.epochs=1", "train.warmup_epochs=1")
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
    assert json.dumps(div_a[-1]["n_clean"]) == json.dumps(div_b[-1]["n_clean"])


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
