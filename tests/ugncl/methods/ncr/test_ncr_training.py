"""NCR through the one trainer on the tiny world: the co-divide per epoch with its F1, both
networks trained, the best epoch's pair tested, and the same pair evaluated by tools/eval.py;
a released NCR pair converted and evaluated as NCR averages it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.sgraf.test_checkpoint import LAYOUTS, perturbed, released_parts, scores_of
from tests.tools.test_train import tiny_overrides
from ugncl.core.engine.checkpoint import load_checkpoint
from ugncl.core.engine.recorder import read_metrics
from ugncl.run.build import build_method, model_from_file
from ugncl.run.config import build_config

pytestmark = pytest.mark.usefixtures("keep_threads")


@pytest.mark.slow
def test_ncr_trains_on_sgraf_and_evaluates_both_networks(
    tool, tiny_world: Path, tmp_path: Path, tiny_model: list[str]
) -> None:
    args = tiny_overrides(tiny_world, tmp_path, "ncr", tiny_model, "method.name=ncr",
                          "model.sgraf.num_views=1", "train.warmup_epochs=1", "train.epochs=2",
                          "train.threads=1", "eval.eval_score=sigmoid")  # fmt: skip
    assert tool("train").main(["--cfg", "ncr_synthetic", "--set", *args]) == 0
    run = tmp_path / "ncr"
    records = read_metrics(run)
    steps = [r for r in records if r["event"] == "train"]
    assert steps and all(np.isfinite(r["loss"]) for r in steps)
    # Warm-up steps train both networks on all pairs; co-training steps log both divisions.
    assert {"loss_a", "loss_b"} <= set(steps[0])
    assert {"loss_a_clean", "loss_b_noisy", "clean_share_a"} <= set(steps[-1])
    division = [r for r in records if r["event"] == "noise_detection"]
    assert [r["epoch"] for r in division] == [1, 2]  # every co-training epoch, none in warm-up
    for r in division:
        assert r["n_clean"] + r["n_noisy"] == r["b_n_clean"] + r["b_n_noisy"] > 0
        assert 0 <= r["noisy_f1"] <= 1 and 0 <= r["b_noisy_f1"] <= 1
        assert r["gmm_means"] and r["b_gmm_means"]

    # Both networks trained: network B (the method's) moved from its initial weights, which
    # differ from A's (independent initialisation).
    best = load_checkpoint(run / "checkpoints" / "best.pt")
    a = {k: v for k, v in best["model"].items()}
    b = {k[len("peer.") :]: v for k, v in best["method_state"].items()}
    assert a.keys() == b.keys()
    assert not torch.equal(a["sim_enc.sim_eval_w.weight"], b["sim_enc.sim_eval_w.weight"])

    # tools/eval.py on the best checkpoint ranks by both networks, as the run's test did.
    test = next(r for r in records if r["event"] == "test")
    out = tmp_path / "eval.json"
    assert tool("eval").main([str(run / "checkpoints" / "best.pt"), "--json", str(out)]) == 0
    got = json.loads(out.read_text())["results"]
    assert got[next(iter(got))]["rsum"] == pytest.approx(test["rsum"], abs=1e-9)

    # The pair, not network A alone: the averaged scores differ from A's.
    model, state = model_from_file(str(run / "checkpoints" / "best.pt"))
    config = build_config(state["config"])
    models = tool("eval").evaluated_models(build_method(config), model, state, torch.device("cpu"))
    assert len(models) == 2 and models[0] is model
    torch.testing.assert_close(models[1].state_dict(), b, rtol=0, atol=0)


def test_released_ncr_pair_converts_and_evaluates_as_a_pair(tmp_path: Path, tool) -> None:
    a, b = perturbed("sgr", 1, seed=1), perturbed("sgr", 1, seed=2)
    src = tmp_path / "model_best.pth.tar"
    torch.save(LAYOUTS["ncr"][1](released_parts(a), released_parts(b)), src)
    dst = tmp_path / "pair.pt"
    assert tool("convert_checkpoint").main([str(src), str(dst), "--which", "both"]) == 0
    model, state = model_from_file(str(dst))
    config = build_config(state["method_config"])
    assert config.method.name == "ncr" and config.eval.eval_score == "sigmoid"
    models = tool("eval").evaluated_models(build_method(config), model, state, torch.device("cpu"))
    assert len(models) == 2
    # Each network scores exactly as the released weights do.
    torch.testing.assert_close(scores_of(models[0]), scores_of(a), rtol=0, atol=0)
    torch.testing.assert_close(scores_of(models[1]), scores_of(b), rtol=0, atol=0)


def test_converting_a_pair_needs_an_ncr_container(tmp_path: Path, tool, capsys) -> None:
    parts = released_parts(perturbed("sgr", 1, seed=1))
    src = tmp_path / "sgraf.pth.tar"
    torch.save(LAYOUTS["sgraf"][1](parts, None), src)
    args = [str(src), str(tmp_path / "x.pt"), "--which", "both"]
    assert tool("convert_checkpoint").main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "NCR" in err[0]
    assert not (tmp_path / "x.pt").exists()
