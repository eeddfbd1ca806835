"""Trainer behaviour that the end-to-end tool tests do not reach."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from precomputed.vocab import load_vocab
from sgraf.model import SGRAF
from tests.conftest import TINY_MODEL
from ugncl.backbones.sgraf.data import PrecomputedTrainingData
from ugncl.backbones.sgraf.experiment import open_data_split
from ugncl.core.config import DataConfig
from ugncl.core.engine.device import Precision
from ugncl.core.engine.recorder import MetricsRecorder, read_metrics
from ugncl.core.engine.trainer import NonFiniteLossError, Trainer
from ugncl.core.method import Method
from ugncl.core.optim import build_optimizer, build_schedule, step_schedule
from ugncl.run.config import load_config
from ugncl.run.training import train


class NaNAfterFirstStep(Method):
    """Returns a finite loss once, then a NaN ``loss_edl`` term."""

    name = "nan"

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def training_step(self, model, batch, ctx):
        self.calls += 1
        raw = model(batch.images, batch.captions, batch.lengths)
        value = raw.mean() if self.calls == 1 else raw.mean() * float("nan")
        return {"loss_edl": value, "loss_trl": raw.mean().abs()}


def make_trainer(world: Path, run_dir: Path, method: Method) -> Trainer:
    data = DataConfig(root=str(world), name="synthetic_precomp")
    vocab = load_vocab(world / "synthetic_precomp_vocab.json")
    split = open_data_split(data, "train", vocab, max_images=8)
    model = SGRAF(len(vocab), word_dim=8, img_dim=64, embed_dim=16, sim_dim=8)
    run_dir.mkdir()
    optimizer = build_optimizer("adam", model.parameters(), lr=2e-4)
    return Trainer(
        model=model, method=method, data=PrecomputedTrainingData(split), optimizer=optimizer,
        schedule=build_schedule("step", optimizer), evaluator=None, run_dir=run_dir,
        recorder=MetricsRecorder(run_dir, tensorboard=False), device=torch.device("cpu"),
        precision=Precision(None, False), seed=0, epochs=1, batch_size=8,
    )  # fmt: skip


def test_non_finite_loss_stops_with_the_term_named(tiny_world: Path, tmp_path: Path) -> None:
    trainer = make_trainer(tiny_world, tmp_path / "run", NaNAfterFirstStep())
    with pytest.raises(NonFiniteLossError, match=r"loss term 'loss_edl' is non-finite .* step 1"):
        trainer.fit()
    assert trainer.global_step == 1  # the bad step did not update the weights


def test_step_schedule_counts_main_epochs_only() -> None:
    factor = step_schedule(warmup_epochs=2, lr_update=3, lr_decay=0.1)
    assert [factor(e) for e in range(8)] == pytest.approx([1, 1, 1, 1, 1, 0.1, 0.1, 0.1])


def test_ordered_batches_cover_every_sample_once(tiny_world: Path, tmp_path: Path) -> None:
    trainer = make_trainer(tiny_world, tmp_path / "run", NaNAfterFirstStep())
    n = len(trainer.data.dataset)  # 40 captions
    for batch_size in (8, 12, 17):
        seen = torch.cat([b.index for b in trainer.ordered_batches(3, batch_size, stream=1)])
        assert sorted(seen.tolist()) == list(range(n))
    dropped = list(trainer.ordered_batches(3, 17, stream=0, drop_last=True))
    assert all(len(b.index) == 17 for b in dropped)
    first = [b.index for b in trainer.ordered_batches(3, 8, stream=1)]
    again = [b.index for b in trainer.ordered_batches(3, 8, stream=1)]
    other = [b.index for b in trainer.ordered_batches(4, 8, stream=1)]
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not all(torch.equal(a, b) for a, b in zip(first, other))


class RecordsSeams(Method):
    """Records what the trainer offers: the step's lr, the context's fetch and image index."""

    name = "seams"

    def __init__(self) -> None:
        super().__init__()
        self.lrs: list[float] = []
        self.fetched = None

    def setup(self, ctx):
        self.image_index = ctx.image_index
        self.fetched = ctx.fetch(torch.tensor([5, 0, 3]))
        return None

    def training_step(self, model, batch, step):
        self.lrs.append(step.lr)
        return {"loss": model(batch.images, batch.captions, batch.lengths).mean()}


def test_context_offers_fetch_image_index_and_the_current_lr(tiny_world, tmp_path) -> None:
    method = RecordsSeams()
    trainer = make_trainer(tiny_world, tmp_path / "run", method)
    for group in trainer.optimizer.param_groups:
        group["lr"] = 1.5e-4
    trainer.fit()
    assert method.lrs == [1.5e-4] * 5  # 40 samples, batches of 8
    assert method.image_index.tolist() == trainer.data.image_index.tolist()
    assert method.fetched.index.tolist() == [5, 0, 3]  # in the order asked
    expected = trainer.data.collate([trainer.data.dataset[i] for i in (5, 0, 3)])
    assert torch.equal(method.fetched.images, expected.images)
    assert method.fetched.image_index.tolist() == trainer.data.image_index[[5, 0, 3]].tolist()


@pytest.mark.parametrize("length", ["samples", "full"])
def test_epoch_length_sets_the_steps_of_a_shrinking_epoch(tiny_world, tmp_path, length) -> None:
    # The clean-pairs oracle's epoch visits the 69 clean pairs of 120: one pass over them
    # (``samples``, 4 batches of 16) or as many batches as a pass over all 120 (``full``, 7).
    sets = [
        f"data.root={tiny_world}", "data.train_images=24", "data.dev_images=12",
        "data.noise_ratio=0.5", f"run.out_dir={tmp_path}", "run.name=run", "train.seed=0",
        "train.batch_size=16", "train.eval_batch_size=12", "train.warmup_epochs=0",
        "train.epochs=1", "train.log_every=1", "train.threads=1",
        "eval.test_after_training=false", "method.triplet.train_pairs=clean",
        f"train.epoch_length={length}", *TINY_MODEL,
    ]  # fmt: skip
    config, _ = load_config("triplet_synthetic", sets)
    train(config, config_name="triplet_synthetic")
    records = read_metrics(tmp_path / "run")
    setup = next(r for r in records if r["event"] == "setup")
    pairs, clean = setup["n_train_captions"], setup["n_train_captions"] - setup["n_noisy"]
    assert (pairs, clean) == (120, 69)
    steps = [r["step"] for r in records if r["event"] == "train"]
    assert steps == list(range(1, 1 + {"samples": 69 // 16, "full": 120 // 16}[length]))
