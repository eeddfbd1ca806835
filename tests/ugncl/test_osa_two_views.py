"""OSA is model-agnostic: a CLIP estimator scores the raw-image view of the synthetic world and
its weights train SGRAF (weighted triplet) on the region view of the same pairs, end to end
through the unchanged trainer (tiny sizes, CPU)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from precomputed.image_layout import open_image_split
from precomputed.synthetic import DATASET_NAME
from precomputed.synthetic.render import write_clip_images
from ugncl.clip.adapter import build_clip
from ugncl.clip.data import ImageTrainingData
from ugncl.clip.losses import as_logit_matrix
from ugncl.clip.models import TINY_MODEL
from ugncl.config import load_config
from ugncl.engine import trainer as trainer_module
from ugncl.engine.checkpoint import save_checkpoint
from ugncl.engine.context import MethodContext
from ugncl.engine.recorder import read_metrics
from ugncl.engine.sampling import batch_indices
from ugncl.methods.memory_bank import index_digest
from ugncl.training import train


@dataclasses.dataclass(frozen=True)
class TwoViewContext(MethodContext):
    """The trainer's context plus the same training pairs in the estimator's input format."""

    estimator_batches: Callable | None = None


def clip_view_batches(clip_root: Path, model, image_index: np.ndarray) -> Callable:
    """``batches(epoch, batch_size, stream)`` over the raw-image view of the training pairs,
    paired by the run's (noisy) caption -> image index."""
    split = open_image_split(clip_root, "train", naming="f30k", captions_per_image=5,
                             noise_index=image_index)  # fmt: skip
    data = ImageTrainingData(split, model.image_transform(), model.tokenizer())

    def batches(epoch: int, batch_size: int, stream: int = 0, indices=None):
        order = list(range(data.num_samples))
        sampler = batch_indices(order, batch_size, drop_last=False)
        return DataLoader(data.dataset, batch_sampler=sampler, collate_fn=data.collate)

    return batches


def test_clip_estimator_weights_train_sgraf(tiny_world, tmp_path, monkeypatch):
    clip_root = write_clip_images(tiny_world, source=DATASET_NAME, size=64, fmt="png")
    torch.manual_seed(0)
    estimator = build_clip(TINY_MODEL).eval()
    path = tmp_path / "clip_estimator.pt"
    save_checkpoint({"backbone": "clip", "model_config": dict(estimator.config),
                     "model": estimator.state_dict()}, path)  # fmt: skip

    made: list[TwoViewContext] = []
    plain_context = trainer_module.Trainer.context

    def two_view_context(self) -> TwoViewContext:
        ctx = plain_context(self)
        fields = {f.name: getattr(ctx, f.name) for f in dataclasses.fields(MethodContext)}
        batches = clip_view_batches(clip_root, estimator, ctx.image_index)
        made.append(TwoViewContext(**fields, estimator_batches=batches))
        return made[-1]

    monkeypatch.setattr(trainer_module.Trainer, "context", two_view_context)
    overrides = [
        f"data.root={tiny_world}", "data.noise_ratio=0.5", "data.dev_images=12",
        f"run.out_dir={tmp_path}", "run.name=osa_sgraf", "train.batch_size=32",
        "train.eval_batch_size=12", "train.seed=0", "train.warmup_epochs=0", "train.epochs=1",
        "model.sgraf.img_dim=64", "model.sgraf.embed_dim=16", "model.sgraf.sim_dim=8",
        "model.sgraf.word_dim=16",
        "method.name=osa", "method.osa.objective=triplet", f"method.osa.estimator={path}",
        "method.osa.pass_batch_size=32", "eval.eval_score=sigmoid", "train.log_every=1",
    ]  # fmt: skip
    config, _ = load_config("triplet_synthetic", overrides)
    assert config.model.backbone == "sgraf"
    result = train(config, config_name="osa_sgraf")

    records = read_metrics(result.run_dir)
    setup = next(r for r in records if r["event"] == "method_setup")
    # The CLIP estimator's own logit scale and space shift, its weights on the SGRAF pairs.
    assert setup["logit_scale"] == pytest.approx(
        float(estimator.logit_scale.detach().exp()), rel=1e-5
    )
    assert setup["weight_auc"] is not None
    steps = [r for r in records if r["event"] == "train"]
    assert steps and all("loss_triplet" in r and np.isfinite(r["loss_triplet"]) for r in steps)

    # The cached scores are the CLIP estimator's diagonal scores of the same (noisy) pairs.
    with np.load(result.run_dir / "osa_weights.npz") as cache:
        sim, digest = cache["sim"], str(cache["index_sha256"])
    image_index = made[0].image_index
    assert digest == index_digest(image_index)
    some = [0, 7, 100]
    batch = made[0].fetch(torch.tensor(some))  # region view: only the sample indices agree
    clip_batch = next(iter(made[0].estimator_batches(0, 240)))
    with torch.no_grad():
        s = as_logit_matrix(estimator(clip_batch.images, clip_batch.captions,
                                      clip_batch.lengths))  # fmt: skip
    assert clip_batch.index.tolist() == list(range(240))
    assert np.allclose(sim[some], s.diagonal()[some].numpy(), atol=1e-4)
    assert torch.equal(batch.image_index, torch.as_tensor(image_index[some]))
