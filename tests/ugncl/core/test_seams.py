"""The seams: a backbone and a method defined only here train through the unchanged trainer,
evaluator, config loader and eval tool once they are registered."""

from __future__ import annotations

import ast
import copy
import itertools
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import Tensor

from ugncl.core.engine.recorder import read_metrics
from ugncl.core.similarity import SimilarityModel
from ugncl.methods import METHODS, Method, MethodSpec
from ugncl.run.config import load_config
from ugncl.run.training import train

REPO = Path(__file__).resolve().parents[3]


# ---------------------------------------------------------------- a test-only method
@dataclass
class FrozenWeightsConfig:
    margin: float = 0.2
    keep: float = 0.75  # share of samples each epoch visits (the highest weights)


class FrozenWeightsMethod(Method):
    """Per-sample weights from a frozen copy of the starting model (made in ``prepare``):
    ``sigmoid`` of its diagonal score, computed once in ``setup``; a weighted all-negatives
    hinge; each epoch visits the ``keep`` share of samples with the highest weights."""

    name = "frozen_weights"
    epoch_record = "selection"

    def __init__(self, *, margin: float, keep: float, eval_score: str = "raw") -> None:
        super().__init__(eval_score=eval_score)
        self.margin, self.keep = margin, keep

    def prepare(self, model, num_samples):
        self.estimator = copy.deepcopy(model).eval().requires_grad_(False)
        self.register_buffer("weights", torch.zeros(num_samples))

    def setup(self, ctx):
        weights = torch.zeros(ctx.num_samples, device=ctx.device)
        for batch in ctx.batches(0, ctx.batch_size, stream=5):
            batch = batch.to(ctx.device)
            with torch.no_grad():
                raw = self.estimator(batch.images, batch.captions, batch.lengths)[0]
            weights[batch.index] = torch.sigmoid(raw.diagonal())
        self.weights = weights
        return {"mean_weight": float(weights.mean())}

    def on_epoch_start(self, ctx, epoch):
        return {"n_visited": len(self.epoch_samples(ctx, epoch))}

    def epoch_samples(self, ctx, epoch) -> np.ndarray:
        n_keep = int(self.keep * ctx.num_samples)
        return torch.argsort(self.weights.cpu(), descending=True)[:n_keep].numpy()

    def training_step(self, model, batch, step):
        raw = model(batch.images, batch.captions, batch.lengths)[0]
        diag = raw.diagonal()
        hinge = (self.margin + raw - diag[None, :]).clamp(min=0)
        hinge = hinge * (1 - torch.eye(len(diag), device=raw.device))
        per_sample = hinge.sum(0)  # (K,) caption anchors
        w = self.weights[batch.index]
        return {"loss_weighted": (w * per_sample).mean(), "mean_w": w.mean()}

    def retrieval_score(self, raw: Tensor) -> Tensor:
        return raw.mean(0)


@pytest.fixture
def registered(meanpool, monkeypatch):
    monkeypatch.setitem(METHODS, "frozen_weights", MethodSpec(FrozenWeightsConfig,
                                                              FrozenWeightsMethod))  # fmt: skip


def test_test_only_backbone_and_method_train_through_the_trainer(
    registered, tiny_world: Path, tmp_path: Path, tool
) -> None:
    overrides = [
        f"data.root={tiny_world}", "data.noise_ratio=0.5", "data.dev_images=12",
        f"run.out_dir={tmp_path}", "run.name=plug", "train.batch_size=16",
        "train.eval_batch_size=12", "train.seed=3", "train.warmup_epochs=0", "train.epochs=2",
        "model.backbone=meanpool", "model.meanpool.embed_dim=8", "method.name=frozen_weights",
        "method.frozen_weights.keep=0.5", "train.optimizer=adamw", "train.weight_decay=0.1",
        "train.schedule=cosine", "train.warmup_steps=3", "train.log_every=1", "train.lr=5e-4",
    ]  # fmt: skip
    config, _ = load_config("ugncl_synthetic", overrides)
    result = train(config, config_name="plug")

    records = read_metrics(result.run_dir)
    events = [r["event"] for r in records]
    assert events.count("method_setup") == 1 and events.count("selection") == 2
    assert {"train", "val", "test"} <= set(events)
    n = 48 * 5
    assert [r["n_visited"] for r in records if r["event"] == "selection"] == [n // 2, n // 2]
    # 120 samples a epoch in batches of 16 (tail dropped): 7 steps per epoch.
    steps = [r["step"] for r in records if r["event"] == "train"]
    assert steps[-1] == 14
    # Linear warm-up over 3 optimiser steps, then cosine decay (the lr logged after step s is
    # the factor of step s: 2/3, 1, then cos from 1, as open_clip's cosine_lr).
    lrs = [r["lr"] for r in records if r["event"] == "train"]
    assert lrs[:3] == pytest.approx([5e-4 * 2 / 3, 5e-4, 5e-4])
    assert all(a > b for a, b in itertools.pairwise(lrs[2:]))

    state = torch.load(result.run_dir / "checkpoints" / "last.pt", weights_only=True)
    assert state["backbone"] == "meanpool" and state["method"] == "frozen_weights"
    method_state = state["method_state"]
    assert method_state["weights"].shape == (n,)
    # The frozen estimator is checkpointed with the method, kept at the starting weights
    # and not trained: the optimiser holds only the model's parameters.
    model_params = sum(1 for _ in state["model"])
    assert len(state["optimizer"]["state"]) == model_params
    assert not torch.equal(method_state["estimator.img.weight"], state["model"]["img.weight"])
    groups = state["optimizer"]["param_groups"]
    assert [g["weight_decay"] for g in groups] == [0.1, 0.0]  # biases and embeddings exempt

    # The eval tool rebuilds the test-only backbone from the checkpoint through the registry.
    best = result.run_dir / "checkpoints" / "best.pt"
    assert tool("eval").main([str(best), "--json", str(tmp_path / "e.json")]) == 0


def test_setup_runs_once_and_its_products_resume(
    registered, tiny_world: Path, tmp_path: Path, tool
) -> None:
    overrides = [
        f"data.root={tiny_world}", f"run.out_dir={tmp_path}", "run.name=r", "data.dev_images=12",
        "train.batch_size=16", "train.eval_batch_size=12", "train.seed=4",
        "train.warmup_epochs=0", "train.epochs=2", "train.stop_after_epochs=1",
        "model.backbone=meanpool", "method.name=frozen_weights",
    ]  # fmt: skip
    train_main = tool("train").main
    assert train_main(["--cfg", "ugncl_synthetic", "--set", *overrides]) == 0
    first = torch.load(tmp_path / "r" / "checkpoints" / "last.pt", weights_only=True)
    resume = ["--resume", str(tmp_path / "r"), "--set", "train.stop_after_epochs=null"]
    assert train_main(resume) == 0
    events = [r["event"] for r in read_metrics(tmp_path / "r")]
    assert events.count("method_setup") == 1 and events.count("selection") == 2
    last = torch.load(tmp_path / "r" / "checkpoints" / "last.pt", weights_only=True)
    assert last["epoch"] == 2
    for key in ("weights", "estimator.img.weight", "estimator.words.weight"):
        assert torch.equal(first["method_state"][key], last["method_state"][key]), key


def test_trainer_imports_no_backbone_data_source_or_method_maths() -> None:
    tree = ast.parse((REPO / "ugncl" / "core" / "engine" / "trainer.py").read_text())
    modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    modules |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    forbidden = ("sgraf", "precomputed", "ugncl.methods.ugncl", "ugncl.methods.triplet",
                 "ugncl.backbones")  # fmt: skip
    assert not [m for m in modules if m and m.startswith(forbidden)]


def test_sgraf_is_a_similarity_model() -> None:
    from sgraf.model import SGRAF

    assert isinstance(SGRAF(10, word_dim=4, img_dim=8, embed_dim=8, sim_dim=4), SimilarityModel)
