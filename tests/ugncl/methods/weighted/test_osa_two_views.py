"""OSA is model-agnostic: a CLIP estimator scores the raw-image view of the synthetic world and
its weights train SGRAF (weighted triplet) on the region view of the same pairs, end to end
from the shipped config ``osa_sgraf_synthetic`` (``data.estimator``), tiny sizes, CPU."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from precomputed.synthetic import DATASET_NAME
from precomputed.synthetic.render import write_clip_images
from ugncl.backbones.clip.adapter import build_clip, save_clip_weights
from ugncl.backbones.clip.models import TINY_MODEL
from ugncl.core.engine import trainer as trainer_module
from ugncl.core.engine.recorder import read_metrics
from ugncl.methods.infonce import as_logit_matrix
from ugncl.methods.weighted.memory_bank import index_digest
from ugncl.run.config import ConfigError, load_config
from ugncl.run.training import train

TINY = [
    "data.noise_ratio=0.5", "data.dev_images=12", "data.train_images=null",
    "train.batch_size=32", "train.eval_batch_size=12", "train.seed=0", "train.warmup_epochs=0",
    "train.epochs=1", "model.sgraf.img_dim=64", "model.sgraf.embed_dim=16",
    "model.sgraf.sim_dim=8", "model.sgraf.word_dim=16", "method.osa.pass_batch_size=32",
    "train.log_every=1", "eval.test_after_training=false",
]  # fmt: skip


@pytest.fixture(scope="module")
def clip_world(tiny_world, tmp_path_factory):
    """The tiny world with its raw-image view and a CLIP weights file as the estimator."""
    write_clip_images(tiny_world, source=DATASET_NAME, size=64, fmt="png")
    torch.manual_seed(0)
    estimator = build_clip(TINY_MODEL).eval()
    path = save_clip_weights(estimator, tmp_path_factory.mktemp("est") / "clip.pt")
    return tiny_world, estimator, path


def test_config_opens_the_raw_image_view_for_a_clip_estimator(clip_world, tmp_path, monkeypatch):
    root, estimator, path = clip_world
    contexts, methods = [], []
    plain_context = trainer_module.Trainer.context

    def recorded_context(self, *args, **kwargs):
        methods.append(self.method)
        contexts.append(plain_context(self, *args, **kwargs))
        return contexts[-1]

    monkeypatch.setattr(trainer_module.Trainer, "context", recorded_context)
    overrides = [*TINY, f"data.root={root}", f"run.out_dir={tmp_path}", "run.name=osa_sgraf",
                 f"method.osa.estimator={path}"]  # fmt: skip
    config, _ = load_config("osa_sgraf_synthetic", overrides)
    assert (config.model.backbone, config.method.osa.objective) == ("sgraf", "triplet")
    assert config.data.estimator.name == "synthetic_clip"
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

    # The cached scores are the CLIP estimator's diagonal scores of the same (noisy) pairs,
    # read through the method's view of them in the trainer's seeded order.
    ctx = contexts[0]
    with np.load(result.run_dir / "osa_weights.npz") as cache:
        sim, digest = cache["sim"], str(cache["index_sha256"])
    assert digest == index_digest(ctx.image_index)
    some = [0, 7, 100]
    clip_batch = next(iter(methods[0].estimator_batches(ctx, estimator)(0, 240, 4)))
    with torch.no_grad():
        s = as_logit_matrix(estimator(clip_batch.images, clip_batch.captions,
                                      clip_batch.lengths))  # fmt: skip
    rows = clip_batch.index.numpy()
    assert sorted(rows.tolist()) == list(range(240))  # the whole set, shuffled
    assert torch.equal(clip_batch.image_index, torch.as_tensor(ctx.image_index[rows]))
    pos = [int(np.flatnonzero(rows == k)[0]) for k in some]
    assert np.allclose(sim[some], s.diagonal()[pos].numpy(), atol=1e-4)
    region_batch = ctx.fetch(torch.tensor(some))  # the region view: the same pairs
    assert torch.equal(region_batch.image_index, clip_batch.image_index[pos])


def _other_view(root: Path, tmp_path: Path, edit) -> Path:
    other = tmp_path / "view"
    shutil.copytree(root / "synthetic_clip", other / "synthetic_clip")
    edit(other / "synthetic_clip" / "annotations" / "scan_split")
    return other


def test_a_view_of_other_pairs_is_refused_before_the_run(clip_world, tmp_path, capsys, tool):
    root, _, path = clip_world

    def swap_two_captions(ann: Path) -> None:
        lines = (ann / "train_caps.txt").read_text().splitlines()
        lines[3], lines[4] = lines[4], lines[3]
        (ann / "train_caps.txt").write_text("\n".join(lines) + "\n")

    other = _other_view(root, tmp_path, swap_two_captions)
    overrides = [*TINY, f"data.root={root}", f"run.out_dir={tmp_path}", "run.name=bad",
                 f"method.osa.estimator={path}", f"data.estimator.root={other}"]  # fmt: skip
    config, _ = load_config("osa_sgraf_synthetic", overrides)
    with pytest.raises(ConfigError, match="caption 3 of the train split"):
        train(config, config_name="bad")
    assert not (tmp_path / "bad").exists()  # refused before the run directory is made

    rc = tool("train").main(["--cfg", "osa_sgraf_synthetic", "--set", *overrides])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err[-1].startswith("error: data.estimator") and "same captions" in err[-1]


def test_an_estimator_of_another_backbone_needs_the_view(clip_world, tmp_path):
    root, _, path = clip_world
    overrides = [*TINY, f"data.root={root}", f"run.out_dir={tmp_path}", "run.name=noview",
                 f"method.osa.estimator={path}", "data.estimator.name=null"]  # fmt: skip
    config, _ = load_config("osa_sgraf_synthetic", overrides)
    with pytest.raises(ConfigError, match="set data.estimator.name"):
        train(config, config_name="noview")
