"""NPC, SDD and OSA registered and trained through the unchanged trainer on the tiny world
(the test-only ``meanpool`` backbone: CLIP-like, W = 1), with their noise-detection records
and resume from the run directory."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from ugncl.core.engine.recorder import read_metrics
from ugncl.run.config import load_config
from ugncl.run.training import train

N = 48 * 5  # training captions of the tiny world


def _overrides(tiny_world: Path, out: Path, method: str, *extra: str) -> list[str]:
    return [
        f"data.root={tiny_world}", "data.noise_ratio=0.5", "data.dev_images=12",
        f"run.out_dir={out}", f"run.name={method}", "train.batch_size=16",
        "train.eval_batch_size=12", "train.seed=0", "train.warmup_epochs=0", "train.epochs=2",
        "model.backbone=meanpool", "model.meanpool.embed_dim=8", f"method.name={method}",
        "train.optimizer=adamw", "train.schedule=cosine", "train.warmup_steps=2",
        "train.lr=1e-3", "train.log_every=1", "eval.eval_score=raw",
        "train.image_decay_per_rms=null", *extra,
    ]  # fmt: skip


METHOD_SETTINGS = {
    # Small GMM/posterior settings for 240 samples; meanpool has no logit_scale attribute.
    "npc": ["method.npc.clean_threshold=0.5"],
    "sdd": ["method.sdd.thresholds=auto", "method.sdd.pass_batch_size=32"],
    "osa": ["method.osa.logit_scale=10.0", "method.osa.pass_batch_size=32"],
}


@pytest.mark.parametrize("method", ["npc", "sdd", "osa"])
def test_method_trains_through_the_trainer_with_detection_records(
    meanpool, tiny_world: Path, tmp_path: Path, method: str
) -> None:
    config, _ = load_config("ugncl_synthetic", _overrides(tiny_world, tmp_path, method,
                                                          *METHOD_SETTINGS[method]))  # fmt: skip
    result = train(config, config_name=method)
    records = read_metrics(result.run_dir)
    events = [r["event"] for r in records]
    assert events.count("method_setup") == 1 and {"train", "val", "test"} <= set(events)
    setup = next(r for r in records if r["event"] == "method_setup")
    detection = [r for r in records if r["event"] == "noise_detection"]
    # Same keys as UGNCL's division record for the selections (bank / drop set).
    if method in ("npc", "sdd"):
        assert setup["bank_keys"] > 0
        assert {"bank_weight_auc", "bank_noisy_precision", "bank_noisy_f1"} <= set(setup)
    if method == "npc":  # the significance weights each epoch applied, at its end
        assert [(r["epoch"], r["at"]) for r in detection] == [(0, "end"), (1, "end")]
    else:
        assert [r["epoch"] for r in detection] == [0, 1]
    for r in detection:
        auc = r.get("weight_auc", r.get("step_weight_auc"))
        assert auc is not None and 0.0 <= auc <= 1.0
        assert r["weight_mean_clean"] is not None and r["weight_mean_noisy"] is not None
    if method == "sdd":
        assert "noisy_f1" in detection[0] and "step_weight_auc" in detection[1]
        assert all(0 <= r["n_dropped"] < N for r in detection)
    train_records = [r for r in records if r["event"] == "train"]
    assert all(np.isfinite(r["loss"]) for r in train_records)
    assert all(0.0 <= r["weight_mean"] <= 1.0 for r in train_records)
    if method != "osa":  # the siamese step followed the trainer's lr (StepContext.lr)
        assert all("siamese_loss" in r for r in train_records)
    state = torch.load(result.run_dir / "checkpoints" / "last.pt", weights_only=True)
    assert state["method"] == method
    # The siamese copy's weights and the estimator are not method state (the copy is re-synced
    # from the model); only the copy's optimiser moments and the epoch's weights are.
    method_keys = set(state["method_state"]) - {"core._extra_state"}
    assert not any(k.startswith(("core", "copy", "estimator")) for k in method_keys)
    if method != "osa":
        extra = state["method_state"]["core._extra_state"]
        assert set(extra) == {"siamese_optimizer", "epoch_weights"}
    assert result.test is not None and np.isfinite(result.test["rsum"])


@pytest.mark.parametrize("method", ["npc", "sdd", "osa"])
def test_resumed_run_reuses_setup_products(
    meanpool, tiny_world: Path, tmp_path: Path, tool, method: str
) -> None:
    overrides = _overrides(tiny_world, tmp_path, method, *METHOD_SETTINGS[method],
                           "train.stop_after_epochs=1")  # fmt: skip
    train_main = tool("train").main
    assert train_main(["--cfg", "ugncl_synthetic", "--set", *overrides]) == 0
    cache = {"npc": "npc_memory_bank.npz", "sdd": "sdd_memory_bank.npz", "osa": "osa_weights.npz"}
    path = tmp_path / method / cache[method]
    before = path.read_bytes()
    resume = ["--resume", str(tmp_path / method), "--set", "train.stop_after_epochs=null"]
    assert train_main(resume) == 0
    assert path.read_bytes() == before  # reloaded, not rebuilt from the trained model
    records = read_metrics(tmp_path / method)
    assert [r["event"] for r in records].count("method_setup") == 1
    assert max(r["epoch"] for r in records if r["event"] == "train") == 1
