"""The GPU path's rules, checked on the CPU: the device's block plan, no host read of a device
tensor in SGRAF's step, evaluation precision, ``train.compile`` and the trainer's one loader."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
import torch

import sgraf.scoring as scoring
from precomputed.vocab import load_vocab
from sgraf.model import SGRAF
from ugncl.backbones.sgraf.data import PrecomputedTrainingData
from ugncl.backbones.sgraf.experiment import open_data_split
from ugncl.core.config import DataConfig
from ugncl.core.data import PairBatch
from ugncl.core.engine.context import StepContext
from ugncl.core.engine.device import Precision
from ugncl.core.engine.launches import count
from ugncl.core.engine.recorder import MetricsRecorder
from ugncl.core.engine.trainer import Trainer
from ugncl.core.evaluation import eval_precision, evaluate_models
from ugncl.core.optim import build_optimizer, build_schedule
from ugncl.methods.triplet import TripletMethod

pytestmark = pytest.mark.usefixtures("keep_threads")


def test_the_block_budget_is_the_cpus_fixed_plan_or_half_the_cuda_memory(monkeypatch) -> None:
    assert scoring.device_memory_budget("cpu") == scoring.DEFAULT_MEMORY_BUDGET
    assert scoring.resolve_budget(1234, "cpu") == 1234
    gib = 2**30
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (60 * gib, 80 * gib))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 10 * gib)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 6 * gib)
    # free 60 + 4 GiB the allocator caches unused, half of it
    assert scoring.resolve_budget(None, "cuda") == 32 * gib
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (0, 80 * gib))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 0)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 0)
    assert scoring.device_memory_budget("cuda") == scoring.DEFAULT_MEMORY_BUDGET


def _batch(n: int = 12, width: int = 9, seed: int = 0) -> PairBatch:
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, width + 1, (n,), generator=gen)
    tokens = torch.randint(4, 40, (n, width), generator=gen) * (
        torch.arange(width) < lengths[:, None]
    )
    index = torch.arange(n)
    return PairBatch(torch.randn(n, 6, 10, generator=gen), tokens, lengths, index, index,
                     torch.ones(n, dtype=torch.bool))  # fmt: skip


@pytest.mark.parametrize("head", ["sgr", "saf"])
def test_sgraf_step_reads_only_host_lengths_and_masks_nothing_on_the_device(head) -> None:
    """A training forward and backward in several blocks: the only host reads are of the
    caption lengths (kept on the CPU), at the sites that plan from them; no ``nonzero`` and
    no boolean-mask indexing, each of which waits for the device on CUDA."""
    torch.manual_seed(0)
    model = SGRAF(40, word_dim=6, img_dim=10, embed_dim=12, sim_dim=8, num_regions=6,
                  num_views=2, head=head, block_captions=4)  # fmt: skip
    batch = _batch().to("cpu")
    assert batch.lengths.device.type == "cpu"

    def step() -> None:
        raw = model(batch.images, batch.captions, batch.lengths)
        raw.sum().backward()

    _, counter = count(step)
    sites = {site.split(" at ")[1].split(":")[0] + " " + site.rsplit(" ", 1)[1]
             for site in counter.host_reads}  # fmt: skip
    planned_on_the_host = {
        "sgraf/encoders.py forward", "sgraf/scoring.py check_pair_inputs",
        "sgraf/scoring.py plan_grid", "sgraf/scoring.py caption_chunks",
    }  # fmt: skip
    assert sites <= planned_on_the_host, counter.host_reads
    assert all(site.startswith("_local_scalar_dense") for site in counter.host_reads)


def test_one_block_per_step_takes_fewer_launches_and_gives_the_same_scores() -> None:
    torch.manual_seed(0)
    model = SGRAF(40, word_dim=6, img_dim=10, embed_dim=12, sim_dim=8, num_regions=6,
                  num_views=2).eval()  # fmt: skip
    batch = _batch()
    img = model.encode_images(batch.images)
    cap = model.encode_captions(batch.captions, batch.lengths)
    small, many = count(model.score, img, cap, batch.lengths, memory_budget_bytes=250_000)
    whole, one = count(model.score, img, cap, batch.lengths)  # CPU: 512 MiB, one block
    assert torch.allclose(small, whole, atol=1e-6)
    assert one.launches * 3 < many.launches


def _trainer(world: Path, run_dir: Path, *, compile: bool = False, dropout: float = 0.4) -> Trainer:
    data = DataConfig(root=str(world), name="synthetic_precomp")
    vocab = load_vocab(world / "synthetic_precomp_vocab.json")
    split = open_data_split(data, "train", vocab, max_images=8)
    torch.manual_seed(0)
    model = SGRAF(len(vocab), word_dim=8, img_dim=64, embed_dim=16, sim_dim=8, num_views=2,
                  word_dropout=dropout, sa_dropout=dropout)  # fmt: skip
    run_dir.mkdir()
    optimizer = build_optimizer("adam", model.parameters(), lr=2e-4)
    return Trainer(
        model=model, method=TripletMethod(margin=0.2), data=PrecomputedTrainingData(split),
        optimizer=optimizer, schedule=build_schedule("step", optimizer), evaluator=None,
        run_dir=run_dir, recorder=MetricsRecorder(run_dir, tensorboard=False),
        device=torch.device("cpu"), precision=Precision(None, False), seed=0, epochs=1,
        batch_size=8, compile=compile,
    )  # fmt: skip


def test_the_trainer_builds_one_loader_and_feeds_it_each_epochs_batches(tiny_world, tmp_path):
    trainer = _trainer(tiny_world, tmp_path / "run")
    first, batches0 = trainer._training_batches(0, None)
    second, batches1 = trainer._training_batches(1, None)
    assert first is second and batches0 != batches1
    seen = [b.index.tolist() for b in second]
    assert seen == batches1


class _Partner:
    """An extra-samples function (Method.prefetch_samples): each index's neighbour."""

    def __call__(self, index):
        return (np.asarray(index) + 1) % 8


def test_the_loader_with_extra_samples_is_kept_while_its_function_is(tiny_world, tmp_path):
    """NPC's and SDD's loader (batches plus bank samples) keeps its workers across epochs
    while the method hands out the same function; a new function gets a new loader."""
    trainer = _trainer(tiny_world, tmp_path / "run")
    trainer.num_workers = 1
    extra = _Partner()
    first, batches0 = trainer._training_batches(0, None, extra)
    seen0 = [(b.index.tolist(), more.index.tolist()) for b, more in first]
    second, batches1 = trainer._training_batches(1, None, extra)
    seen1 = [(b.index.tolist(), more.index.tolist()) for b, more in second]
    assert first is second and first.persistent_workers and batches0 != batches1
    for seen, batches in ((seen0, batches0), (seen1, batches1)):
        assert seen == [(b, [(i + 1) % 8 for i in b]) for b in batches]
    third, _ = trainer._training_batches(2, None, _Partner())
    assert third is not second


def test_the_loaders_pin_memory_pins_a_pair_batch_and_its_extras(monkeypatch) -> None:
    """The loader pins what its workers hand out (``pin_memory=True`` on CUDA): a
    ``PairBatch``, alone or with a method's extra samples, has every tensor but the host-side
    lengths pinned. (Pinning needs CUDA: here ``Tensor.pin_memory`` is replaced by a marker.)"""
    from torch.utils.data._utils.pin_memory import pin_memory

    pinned = []

    def mark(self, *args, **kwargs):
        out = self.clone()
        pinned.append(out)
        return out

    monkeypatch.setattr(torch.Tensor, "pin_memory", mark)
    batch = PairBatch(
        images=torch.zeros(2, 3), captions=torch.ones(2, 4, dtype=torch.long),
        lengths=torch.tensor([4, 3]), index=torch.arange(2), image_index=torch.arange(2),
        clean=torch.ones(2, dtype=torch.bool),
    )  # fmt: skip
    out = pin_memory(batch)
    assert isinstance(out, PairBatch) and out.lengths is batch.lengths
    assert all(any(getattr(out, n) is t for t in pinned) for n in
               ("images", "captions", "index", "image_index", "clean"))  # fmt: skip
    with_extra = pin_memory((batch, None))
    assert isinstance(with_extra[0], PairBatch) and with_extra[1] is None
    assert len(pinned) == 10


def test_eval_precision_bf16_ranks_near_fp32_and_tf32_is_fp32_off_cuda(tiny_world) -> None:
    from ugncl.backbones.sgraf.experiment import open_eval_split

    data = DataConfig(root=str(tiny_world), name="synthetic_precomp")
    vocab = load_vocab(tiny_world / "synthetic_precomp_vocab.json")
    split = open_eval_split(data, "test", SGRAF(len(vocab), img_dim=64, num_views=2))
    torch.manual_seed(0)
    model = SGRAF(len(vocab), word_dim=8, img_dim=64, embed_dim=16, sim_dim=8, num_views=2)
    kw = dict(protocol="full", eval_score="raw", ties="pessimistic")
    fp32, s32 = evaluate_models([model], split, precision="fp32", **kw)
    _, s_tf = evaluate_models([model], split, precision="tf32", **kw)
    bf16, s16 = evaluate_models([model], split, precision="bf16", **kw)
    assert (s_tf == s32).all()
    assert abs(s16 - s32).max() < 0.05 * abs(s32).max()
    # At most one query ranked otherwise per direction: this untrained model's scores lie
    # within 0.03 of each other, so bf16's rounding can swap a near tie (the measured
    # agreement of a trained model at the synthetic world's size: docs/gpu.md).
    share = {"i2t": 100 / s32.shape[0], "t2i": 100 / s32.shape[1]}
    for key in [f"{d}/R@{k}" for d in ("i2t", "t2i") for k in (1, 5, 10)]:
        gap = abs(bf16["full"][key] - fp32["full"][key])
        assert gap <= share[key[:3]] + 1e-9, (key, bf16, fp32)
    with pytest.raises(ValueError, match="eval precision"), eval_precision("fp16", "cpu"):
        pass


def test_train_compile_gives_the_eager_loss(tiny_world, tmp_path, monkeypatch) -> None:
    """``train.compile``: the step through torch.compile's model gives the eager step's loss
    to float tolerance (dropout off: compiled dropout draws its masks otherwise). The
    ``aot_eager`` backend (dynamo's graph capture and AOT autograd, the graphs inductor would
    compile) keeps this to seconds: inductor's code generation of the same model took
    385 s on the shared 2-core test machine."""
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
    losses = {}
    for flag in (False, True):
        trainer = _trainer(tiny_world, tmp_path / f"run{flag}", compile=flag, dropout=0.0)
        batch = next(iter(trainer.ordered_batches(0, 8, 0)))
        ctx = StepContext(0, 0, False, torch.device("cpu"), 2e-4)
        losses[flag] = trainer._train_step(batch, ctx)["loss"]
        assert (trainer.train_model is not trainer.model) == flag
    assert losses[True] == pytest.approx(losses[False], rel=1e-5, abs=1e-6)
