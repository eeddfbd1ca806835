"""The CUDA path in one run: ``python tools/gpu_check.py`` (``make gpu-check``).

On a CUDA machine it checks, and prints as one table:

* ``step``: every method on every backbone for a few training steps with ``train.amp: auto``
  (bf16 where supported, else fp16 with a GradScaler) on a tiny synthetic world written to a
  temporary folder (the CLIP backbone with random ugncl-tiny weights): the method's setup pass
  and epoch start, then the trainer's own step (autocast, scaler, fused optimiser). A cell is
  ``ok`` with ms per step, ``FAIL`` with the error, or ``refused`` where the trainer refuses the
  pair (the reason; e.g. the sigmoid hinge on CLIP's logit-scaled scores).
* ``eval``: the evaluation scorers (``evaluate_models``: encoding, all-pairs scoring, ranks) on
  the tiny dev split, per backbone.
* ``loop``: the real loops, each against its GPU goal (one H100/H200), with the peak device
  memory of the row (``torch.cuda.max_memory_allocated``; ``n/a`` on the CPU):

  - ``clip``, ``npc``, ``sdd`` on CLIP ViT-B/32 (random weights) at batch 256, amp auto:
    the trainer's epoch loop (the method's epoch-start pass, then the real DataLoader in
    ``--workers`` workers over a synthetic world whose images are Flickr30K-sized JPEGs,
    500 x 375 at quality 90, read through the uint8 pixel cache; NPC's and SDD's bank samples
    prefetched by the loader; the copy to the device; the step) for ``--loop-steps`` steps
    after ``--loop-warm``. Goals: clip >= 3,000 pairs/s; NPC's step <= 3x clip's.
  - ``ugncl x sgraf``: UGNCL's trainer step at the paper's sizes (W = 2 SGR, embed 1024, sim
    256, word 300, 36 x 2048 regions, batch 128) on batches with Flickr30K caption lengths
    (log-normal, mean 12.3 words), after its warm-up (a division in place). Goal <= 60 ms.
  - ``COCO-5K eval`` in fp32, tf32 and bf16: a paper-size W = 2 SGRAF encodes 5,000 images and
    25,000 captions of COCO lengths, then scores ``--eval-fraction`` of the image rows against
    every caption; the scoring time is extrapolated to the whole matrix and the note says so.
    Goal <= 60 s.
  - ``tf32 vs fp32``, ``bf16 vs fp32``: the evaluation's recalls in ``eval.precision`` tf32
    and bf16 against fp32 on the synthetic dev split; goal: every recall within 0.2 points.

  The verdict column (meets / misses) is filled on CUDA at paper sizes only.
* ``bench`` (with ``--bench``): the earlier throughput rows on random inputs already on the
  device (not the real loops: no data loading, W = 1, every caption 12 words): an SGRAF
  training step at the paper's sizes (SGR, W = 1, embed 1024, sim 256, word 300, 36 x 2048
  regions, batch 128, triplet, amp auto); COCO-5K all-pairs scoring (5,000 images x 25,000
  captions, random embeddings, paper-size SAF; pairs/s and the seconds of the whole matrix);
  CLIP ViT-B/32 training pairs/s at batch 256 with random weights (symmetric InfoNCE, fused
  AdamW, amp auto).

Without CUDA it says so and exits 0. ``--device cpu --quick`` runs every check on the CPU at
toy sizes (what the tests run, so the table code is exercised everywhere). ``--json PATH``
writes the machine and the rows as JSON (no PATH: printed).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ugncl.run.cli import cli_main

# The rows are every registered method on every registered backbone (ugncl.methods.METHODS,
# ugncl.backbones.registry.BACKBONES, read when the arguments are parsed): a method or backbone
# registered there shows up here with no edit. The settings below only shrink known methods
# to the tiny world; a method without an entry runs with its section's defaults.
# Small GMM/threshold settings for the tiny world (240 pairs), as the method tests use.
METHOD_SETTINGS: dict[str, list[str]] = {
    "npc": ["method.npc.clean_threshold=0.5"],
    "sdd": ["method.sdd.thresholds=auto", "method.sdd.pass_batch_size=32"],
    "osa": ["method.osa.pass_batch_size=32"],
    "ugncl": ["method.ugncl.lambda_min=3"],
}
TINY_SGRAF = [
    "model.sgraf.word_dim=16", "model.sgraf.embed_dim=32", "model.sgraf.sim_dim=16",
    "model.sgraf.img_dim=64", "model.sgraf.num_regions=36",
]  # fmt: skip
# The SGRAF cells of the methods whose paper backbone is CLIP (docs/comparison.md): one score
# per pair (W = 1); NPC and SDD start from an SGRAF checkpoint (model.sgraf.init, written by
# sgraf_init: the starting model's weights stand in for a warm-up run, enough to run the code
# path); SDD's bank threshold at the mean non-matching score, as the comparison's SGRAF cell.
SGRAF_SETTINGS: dict[str, list[str]] = {
    "infonce": ["model.sgraf.num_views=1"],
    "npc": ["model.sgraf.num_views=1"],
    "sdd": ["model.sgraf.num_views=1", "method.sdd.auto_beta_std=0.0"],
}
WARM_STARTED = ("npc", "sdd")
# The experiment file a backbone's cells start from; a backbone not named here reads the
# precomputed features of the SGRAF track's file with ``model.backbone`` set to it.
BACKBONE_CONFIG = {"sgraf": "ugncl_synthetic", "clip": "clip_synthetic"}
IMAGE_SIZE, CONTEXT = 32, 24
#: The CLIP-track methods of the real-loop rows; the first is the reference of the cost ratio.
LOOP_METHODS = ("infonce", "npc", "sdd")
#: The evaluation precisions timed on COCO-5K and compared with fp32 on the dev split.
EVAL_ROWS = ("fp32", "tf32", "bf16")


class Row:
    """One line of the table (a plain class: the tests load this file as a module by path,
    where a dataclass cannot find its module)."""

    def __init__(
        self,
        section: str,
        case: str,
        status: str,  # ok | FAIL | refused
        value: float | None = None,
        unit: str = "",
        note: str = "",
        goal: str = "",
        verdict: str = "",  # meets | misses | "" (no goal, or not a CUDA paper-size run)
        peak: str = "",  # peak device memory (MiB) of the row, "n/a" on the CPU
    ) -> None:
        self.section, self.case, self.status = section, case, status
        self.value, self.unit, self.note = value, unit, note
        self.goal, self.verdict, self.peak = goal, verdict, peak


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _guard(section: str, case: str, fn: Callable[..., Row], *args: Any) -> Row:
    """Run one check; an exception becomes a FAIL row with its last line (the table goes on).
    Each row is also printed to stderr as it finishes, so a run stopped by a time limit still
    leaves the rows it measured."""
    t0 = time.perf_counter()
    try:
        row = fn(*args)
    except Exception as err:  # a failing cell is a result of the check, not a crash of it
        last = traceback.format_exception_only(type(err), err)[-1].strip()
        row = Row(section, case, "FAIL", note=last[:160])
    value = "" if row.value is None else f"{row.value:,.1f} {row.unit}"
    took = time.perf_counter() - t0
    print(f"gpu_check: {row.section} | {row.case} | {row.status} | {value} | {row.peak} | "
          f"{row.note} ({took:.1f} s)", file=sys.stderr, flush=True)  # fmt: skip
    return row


# ----------------------------------------------------------------------------- world
def make_world(root: Path) -> tuple[Path, Path]:
    """A tiny synthetic world as features and as 32 px images, and random ugncl-tiny weights."""
    from precomputed.synthetic import make_synthetic
    from precomputed.synthetic.render import write_clip_images
    from ugncl.backbones.clip.adapter import build_clip, save_clip_weights
    from ugncl.backbones.clip.models import TINY_MODEL

    make_synthetic(root, num_train=48, num_dev=12, num_test=12, seed=0, feature_dim=64,
                   noise_ratios=(0.5,))  # fmt: skip
    write_clip_images(root, size=IMAGE_SIZE)
    torch.manual_seed(0)
    model = build_clip(TINY_MODEL, image_size=IMAGE_SIZE, context_length=CONTEXT)
    return root, save_clip_weights(model, root / "tiny-random.pt")


def run_config(method: str, backbone: str, world: Path, weights: Path, device: str) -> Any:
    from ugncl.run.config import load_config

    common = [
        f"data.root={world}", "data.noise_ratio=0.5", "data.dev_images=12",
        "train.batch_size=16", "train.eval_batch_size=12", "train.seed=0",
        "train.warmup_epochs=0", "train.epochs=1", "train.amp=auto", f"train.device={device}",
        f"method.name={method}", "train.threads=null",
    ]  # fmt: skip
    if backbone == "sgraf" and method == "osa":  # a CLIP estimator on the raw-image view
        return load_config("osa_sgraf_synthetic", [*common, *TINY_SGRAF,
                                                   f"method.osa.estimator={weights}",
                                                   *METHOD_SETTINGS["osa"]])[0]  # fmt: skip
    if backbone == "sgraf":
        sets = [*common, *TINY_SGRAF, *SGRAF_SETTINGS.get(method, []),
                *METHOD_SETTINGS.get(method, [])]  # fmt: skip
        if method in WARM_STARTED:
            sets.append(f"model.sgraf.init={sgraf_init(world, sets)}")
        return load_config("ugncl_synthetic", sets)[0]
    if backbone not in BACKBONE_CONFIG:
        sets = [*common, f"model.backbone={backbone}", *METHOD_SETTINGS.get(method, [])]
        return load_config("ugncl_synthetic", sets)[0]
    clip = [
        "data.train_images=48", f"model.clip.pretrained={weights}",
        f"model.clip.image_size={IMAGE_SIZE}", f"model.clip.context_length={CONTEXT}",
    ]  # fmt: skip
    return load_config("clip_synthetic", [*common, *clip, *METHOD_SETTINGS.get(method, [])])[0]


def sgraf_init(world: Path, sets: list[str]) -> Path:
    """An SGRAF training checkpoint of the sizes ``sets`` configure (the starting weights),
    written once per world: the ``model.sgraf.init`` of the warm-started cells."""
    from ugncl.core.engine.checkpoint import save_checkpoint
    from ugncl.run.build import build_model, open_run_data
    from ugncl.run.config import load_config

    path = world / "sgraf-init.pt"
    if not path.is_file():
        config = load_config("ugncl_synthetic", [*sets, "method.name=triplet"])[0]
        torch.manual_seed(0)
        model = build_model(config, open_run_data(config))
        state = {"model": model.state_dict(), "backbone": "sgraf",
                 "model_config": dict(model.config)}  # fmt: skip
        save_checkpoint(state, path)
    return path


def check_steps(method: str, backbone: str, world: Path, weights: Path, args) -> Row:
    """Setup, epoch start and ``args.steps`` trainer steps of ``method`` on ``backbone``."""
    from ugncl.backbones.registry import REGISTRY_SERVICES
    from ugncl.core.engine.device import select_device, select_precision
    from ugncl.core.engine.trainer import Trainer
    from ugncl.run.build import (
        build_method,
        build_model,
        build_optimizer_and_schedule,
        method_backbone_error,
        open_run_data,
    )
    from ugncl.run.training import NullRecorder

    config = run_config(method, backbone, world, weights, args.device)
    torch.manual_seed(0)
    data = open_run_data(config)
    model = build_model(config, data)
    train_data = data.training_data()
    device = select_device(args.device)
    precision = select_precision("auto", device)
    refused = method_backbone_error(config, model)
    if refused:  # the cell the trainer refuses (docs/comparison.md): said, not trained
        return Row("step", f"{method} x {backbone}", "refused", note=refused[:160])
    method_obj = build_method(config, model, train_data.num_samples)
    method_obj.bind_data(
        config, data, REGISTRY_SERVICES
    )  # OSA opens its estimator's view of the pairs here
    steps_per_epoch = train_data.num_samples // config.train.batch_size
    optimizer, schedule = build_optimizer_and_schedule(
        config, model, method_obj, steps_per_epoch, data=data
    )
    with tempfile.TemporaryDirectory() as out:
        trainer = Trainer(
            model=model, method=method_obj, data=train_data, optimizer=optimizer,
            schedule=schedule, evaluator=None, run_dir=Path(out), recorder=NullRecorder(),
            device=device, precision=precision, seed=0, epochs=1,
            batch_size=config.train.batch_size, grad_clip=config.train.grad_clip,
            num_workers=config.data.num_workers,
        )  # fmt: skip
        method_obj.setup(trainer.context())
        timed = timed_loop(trainer, args.steps, warm=1)
    amp = "fp32" if precision.autocast_dtype is None else str(precision.autocast_dtype)[6:]
    return Row("step", f"{method} x {backbone}", "ok", timed["ms_per_step"], "ms/step",
               f"amp {amp}, loss {timed['loss']:.4g}")  # fmt: skip


def timed_loop(trainer: Any, steps: int, *, warm: int) -> dict[str, float]:
    """``warm`` + ``steps`` steps of the trainer's epoch loop (``Trainer._run_epoch`` without
    its logging, validation and checkpoint): each epoch's method pass, the real DataLoader
    (with a method's prefetched bank samples), the batch's copy to the device, the step.

    Returns ``ms_per_step`` over the ``steps`` timed steps (loader waits included, the
    epoch-start passes excluded), ``pass_s`` (the epoch-start passes' seconds), ``epochs`` and
    the last ``loss``.
    """
    from ugncl.core.engine.context import StepContext

    device, method = trainer.device, trainer.method
    done, epoch, pass_s, loss = 0, 0, 0.0, float("nan")
    started = None
    while done < warm + steps:
        ctx = trainer.context()
        _sync(device)
        t0 = time.perf_counter()
        method.on_epoch_start(ctx, epoch)
        subset = method.epoch_samples(ctx, epoch)
        _sync(device)
        pass_s += time.perf_counter() - t0
        if started is not None:  # the pass is not a step: move the step clock past it
            started += time.perf_counter() - t0
        trainer.model.train()
        extra = method.prefetch_samples()
        loader, global_batches = trainer._training_batches(epoch, subset, extra)
        if len(loader) == 0:
            raise ValueError(f"epoch {epoch} has no complete batch of {trainer.batch_size}")
        for i, item in enumerate(loader):
            batch, more = item if extra is not None else (item, None)
            lr = float(trainer.optimizer.param_groups[0]["lr"])
            step = StepContext(epoch, trainer.global_step, False, device, lr, more)
            batch = trainer._method_batch(batch, global_batches[i])
            terms = trainer._train_step(batch.to(device, non_blocking=True), step)
            loss, done = terms["loss"], done + 1
            if done == warm:
                _sync(device)
                started = time.perf_counter()
            if done == warm + steps:
                break
        method.on_epoch_end(ctx, epoch)
        epoch += 1
    _sync(device)
    seconds = time.perf_counter() - started
    return {"ms_per_step": 1000 * seconds / max(steps, 1), "pass_s": pass_s,
            "epochs": epoch, "loss": loss}  # fmt: skip


def check_eval(backbone: str, world: Path, weights: Path, args) -> Row:
    """``evaluate_models`` on the tiny dev split: encode, score all pairs, rank."""
    from ugncl.core.engine.device import select_device
    from ugncl.core.evaluation import evaluate_models
    from ugncl.run.build import build_model, open_run_data

    method = "infonce" if backbone == "clip" else "ugncl"
    config = run_config(method, backbone, world, weights, args.device)
    data = open_run_data(config)
    device = select_device(args.device)
    model = build_model(config, data).to(device)
    _sync(device)
    t0 = time.perf_counter()
    results, scores = evaluate_models([model], data.dev, protocol="full", eval_score="raw")
    _sync(device)
    seconds = time.perf_counter() - t0
    rsum = next(iter(results.values()))["rsum"]
    return Row("eval", f"evaluate_models x {backbone}", "ok", seconds, "s",
               f"{scores.shape[0]}x{scores.shape[1]} pairs, rsum {rsum:.1f}")  # fmt: skip


# ----------------------------------------------------------------------------- real loops
#: The GPU goals (one H100/H200) the ``goal`` rows are read against.
GOAL_CLIP_PAIRS_S = 3000.0  # CLIP ViT-B/32 fine-tune, batch 256, bf16
GOAL_NPC_COST = 3.0  # NPC's step cost relative to the CLIP fine-tune's
GOAL_UGNCL_MS = 60.0  # SGRAF UGNCL step, batch 128, W = 2
GOAL_COCO_S = 60.0  # SGRAF COCO-5K evaluation
GOAL_RECALL_GAP = 0.2  # bf16 evaluation's recalls against fp32's (points)


def _bench_tool() -> Any:
    """tools/bench.py as a module (its Flickr30K/COCO caption lengths, paper SGRAF sizes,
    UGNCL division and JPEG writer)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "tools_bench", Path(__file__).resolve().parent / "bench.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _peak_reset(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def _peak(device: torch.device) -> str:
    """Peak device memory since :func:`_peak_reset` (``max_memory_allocated``), MiB."""
    if device.type != "cuda":
        return "n/a"
    return f"{torch.cuda.max_memory_allocated(device) / 2**20:,.0f} MiB"


def _verdict(args, ok: bool) -> str:
    """meets / misses where the goal applies (CUDA at paper sizes), else empty."""
    if args.device != "cuda" or args.quick:
        return ""
    return "meets" if ok else "misses"


def make_photo_world(root: Path, images: int) -> Path:
    """A synthetic world whose CLIP-layout images are Flickr30K-sized JPEGs (500 x 375,
    quality 90, about 100 kB: tools/bench.py's writer) under the world's image names."""
    from precomputed.synthetic import make_synthetic
    from precomputed.synthetic.render import write_clip_images

    make_synthetic(root, num_train=images, num_dev=12, num_test=12, seed=0, feature_dim=64,
                   noise_ratios=(0.5,))  # fmt: skip
    folder = write_clip_images(root, size=16, fmt="jpg") / "images"
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    _bench_tool().write_flickr_like_jpegs(files)
    return root


def loop_config(method: str, world: Path, args) -> Any:
    """A CLIP-track run of ``method`` on the photo world: ViT-B/32 (random weights) at batch
    256 with amp auto on CUDA; the tiny model at batch 8 with ``--quick``."""
    from ugncl.run.config import load_config

    batch = 8 if args.quick else 256
    model = (
        ["model.clip.name=ugncl-tiny", f"model.clip.image_size={IMAGE_SIZE}",
         f"model.clip.context_length={CONTEXT}"]
        if args.quick else ["model.clip.name=ViT-B-32"]
    )  # fmt: skip
    passes = {"sdd": "method.sdd.pass_batch_size", "osa": "method.osa.pass_batch_size"}
    sets = [
        f"data.root={world}", "data.noise_ratio=0.5", "data.dev_images=12",
        f"data.num_workers={args.workers}", f"data.clip.cache_dir={world / 'pixel-cache'}",
        f"train.batch_size={batch}", "train.seed=0", "train.warmup_epochs=0", "train.epochs=1",
        "train.amp=auto", f"train.device={args.device}", f"method.name={method}",
        "train.threads=null", "model.clip.pretrained=random", *model,
        *METHOD_SETTINGS.get(method, []),
    ]  # fmt: skip
    if method in passes:
        sets.append(f"{passes[method]}={batch}")
    return load_config("clip_synthetic", sets)[0]


def build_trainer(config: Any, out: Path, device: torch.device, compile: bool = False) -> Any:
    """The run's data, model, method (set up) and trainer, as ``tools/train.py`` builds them
    (``compile``: the trainer's ``train.compile`` switch)."""
    from ugncl.backbones.registry import REGISTRY_SERVICES
    from ugncl.core.engine.device import select_precision
    from ugncl.core.engine.trainer import Trainer
    from ugncl.run.build import (
        build_method,
        build_model,
        build_optimizer_and_schedule,
        open_run_data,
    )
    from ugncl.run.training import NullRecorder

    torch.manual_seed(0)
    data = open_run_data(config)
    model = build_model(config, data)
    train_data = data.training_data()
    method = build_method(config, model, train_data.num_samples)
    method.bind_data(config, data, REGISTRY_SERVICES)
    steps_per_epoch = train_data.num_samples // config.train.batch_size
    optimizer, schedule = build_optimizer_and_schedule(
        config, model, method, steps_per_epoch, data=data
    )
    trainer = Trainer(
        model=model, method=method, data=train_data, optimizer=optimizer, schedule=schedule,
        evaluator=None, run_dir=out, recorder=NullRecorder(), device=device,
        precision=select_precision("auto", device), seed=0, epochs=1,
        batch_size=config.train.batch_size, grad_clip=config.train.grad_clip,
        num_workers=config.data.num_workers, compile=compile,
    )  # fmt: skip
    method.setup(trainer.context())
    return trainer


def loop_clip(method: str, world: Path, args, reference_ms: dict[str, float]) -> Row:
    """The real training loop of ``method`` on CLIP: the pixel cache, the DataLoader in
    ``--workers`` workers, NPC's/SDD's bank samples, amp auto; pairs/s over ``--loop-steps``."""
    device = torch.device(args.device)
    config = loop_config(method, world, args)
    _peak_reset(device)
    with tempfile.TemporaryDirectory() as out:
        trainer = build_trainer(config, Path(out), device, compile=args.compile)
        timed = timed_loop(trainer, args.loop_steps, warm=args.loop_warm)
    batch = config.train.batch_size
    pairs_s = 1000 * batch / timed["ms_per_step"]
    reference_ms[method] = timed["ms_per_step"]
    note = (f"{timed['ms_per_step']:.0f} ms/step, {args.loop_steps} steps, "
            f"{timed['epochs']} epoch(s), epoch-start passes {timed['pass_s']:.1f} s")  # fmt: skip
    name = config.model.clip.name
    if method == "infonce":
        goal = f">= {GOAL_CLIP_PAIRS_S:,.0f} pairs/s"
        verdict = _verdict(args, pairs_s >= GOAL_CLIP_PAIRS_S)
    elif "infonce" in reference_ms:
        cost = timed["ms_per_step"] / reference_ms["infonce"]
        note = f"{cost:.2f}x the plain fine-tune's step; " + note
        goal = f"<= {GOAL_NPC_COST:g}x clip" if method == "npc" else ""
        verdict = _verdict(args, cost <= GOAL_NPC_COST) if method == "npc" else ""
    else:
        goal, verdict = "", ""
    case = f"{method} x clip {name} (batch {batch}){_compiled(args)}"
    return Row("loop", case, "ok", pairs_s, "pairs/s", note, goal, verdict, _peak(device))


def loop_ugncl_sgraf(root: Path, args) -> Row:
    """UGNCL's trainer step on SGRAF at the paper's sizes (W = 2 SGR, embed 1024, sim 256,
    word 300, 36 x 2048 regions, batch 128) on batches with Flickr30K caption lengths, after
    its warm-up (a division of every sample in place); the batches are built once on the
    device (feature loading is a copy, not the cost measured here)."""
    from ugncl.core.data import PairBatch

    bench = _bench_tool()
    device = torch.device(args.device)
    batch = 16 if args.quick else 128
    dims = TINY_SGRAF if args.quick else [f"model.sgraf.{k}={v}"
                                          for k, v in bench.PAPER_SGRAF.items()]  # fmt: skip
    from precomputed.synthetic import make_synthetic
    from ugncl.core.engine.context import StepContext
    from ugncl.run.config import load_config

    img_dim = 64 if args.quick else bench.PAPER_SGRAF["img_dim"]
    world = root / "sgraf-world"
    make_synthetic(world, num_train=48, num_dev=12, num_test=12, seed=0, feature_dim=img_dim,
                   noise_ratios=(0.5,))  # fmt: skip
    config = load_config("ugncl_synthetic", [
        f"data.root={world}", "data.noise_ratio=0.5", f"train.device={args.device}",
        "train.amp=auto", f"train.batch_size={batch}", "train.threads=null",
        "model.sgraf.num_views=2", "model.sgraf.num_regions=36", *dims,
        *METHOD_SETTINGS["ugncl"],
    ])[0]  # fmt: skip
    _peak_reset(device)
    gen = torch.Generator().manual_seed(0)
    with tempfile.TemporaryDirectory() as out:
        trainer = build_trainer(config, Path(out), device, compile=args.compile)
        n = trainer.data.num_samples
        bench._divided(trainer.method, n, 0)
        batches = []
        for seed in range(4):  # four batches of other caption lengths, cycled
            lengths = bench.caption_lengths(batch, bench.FLICKR_WORDS, seed)
            width = int(lengths.max())
            vocab = int(trainer.model.config["vocab_size"])
            tokens = torch.randint(4, vocab, (batch, width), generator=gen)
            tokens = tokens * (torch.arange(width) < lengths[:, None])
            index = torch.arange(seed * batch, (seed + 1) * batch) % n
            batches.append(PairBatch(
                images=torch.randn(batch, 36, img_dim, generator=gen), captions=tokens,
                lengths=lengths, index=index,
                image_index=torch.as_tensor(trainer.data.image_index)[index],
                clean=torch.ones(batch, dtype=torch.bool),
            ).to(device))  # fmt: skip
        trainer.model.train()

        def step(i: int) -> float:
            ctx = StepContext(5, trainer.global_step, False, device, 2e-4)
            return trainer._train_step(batches[i % len(batches)], ctx)["loss"]

        for i in range(args.loop_warm):
            step(i)
        _sync(device)
        t0 = time.perf_counter()
        for i in range(args.loop_steps):
            loss = step(i)
        _sync(device)
    ms = 1000 * (time.perf_counter() - t0) / args.loop_steps
    mean_len = float(torch.cat([b.lengths.float() for b in batches]).mean())
    return Row("loop", f"ugncl x sgraf W=2 (batch {batch}){_compiled(args)}", "ok", ms, "ms/step",
               f"{args.loop_steps} steps, tokens/caption {mean_len:.1f}, loss {loss:.4g}",
               f"<= {GOAL_UGNCL_MS:g} ms/step", _verdict(args, ms <= GOAL_UGNCL_MS),
               _peak(device))  # fmt: skip


def coco_eval(args, precision: str) -> Row:
    """COCO-5K evaluation of UGNCL's SGRAF (W = 2 SGR, paper sizes, random weights) on random
    features with COCO caption lengths: every image and caption encoded, then the all-pairs
    scoring of a ``--eval-fraction`` of the image rows against all 25,000 captions, timed and
    extrapolated to the whole matrix (labelled in the note)."""
    from sgraf.model import SGRAF
    from ugncl.core.evaluation import eval_precision

    bench = _bench_tool()
    device = torch.device(args.device)
    n_img, n_cap = (20, 100) if args.quick else (5000, 25000)
    sizes = dict(word_dim=16, img_dim=64, embed_dim=32, sim_dim=16) if args.quick else {}
    fraction = 1.0 if args.quick else args.eval_fraction
    rows = max(1, round(n_img * fraction))
    torch.manual_seed(0)
    model = SGRAF(1000, head="sgr", num_views=2, **sizes).to(device).eval()
    img_dim = model.config["img_dim"]
    lengths = bench.caption_lengths(n_cap, bench.COCO_WORDS, 0)
    width = int(lengths.max())
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(4, 1000, (n_cap, width), generator=gen)
    tokens = tokens * (torch.arange(width) < lengths[:, None])
    _peak_reset(device)
    _sync(device)
    t0 = time.perf_counter()
    with torch.no_grad(), eval_precision(precision, device):
        img = torch.cat([
            model.encode_images(torch.randn(b, 36, img_dim, generator=gen).to(device))
            for b in [min(500, n_img - a) for a in range(0, n_img, 500)]
        ], dim=1)  # fmt: skip
        cap = torch.cat([
            model.encode_captions(tokens[a : a + 1000].to(device), lengths[a : a + 1000])
            for a in range(0, n_cap, 1000)
        ])  # fmt: skip
        _sync(device)
        encode_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        scores = model.score_all_pairs(img[:, :rows], cap, lengths.to(device),
                                       view_reduce=lambda s: s.float().mean(0),
                                       out_device=device)  # fmt: skip
        _sync(device)
    score_s = time.perf_counter() - t1
    total = encode_s + score_s * n_img / rows
    label = "measured"
    if rows < n_img:
        label = f"scoring timed on {rows} of {n_img} images, x{n_img / rows:g}"
    return Row("loop", f"COCO-5K eval {precision} ({n_img}x{n_cap}, W=2)", "ok", total, "s",
               f"{label}; encode {encode_s:.1f} s, score {score_s:.1f} s; "
               f"{tuple(scores.shape)} scored", f"<= {GOAL_COCO_S:g} s",
               _verdict(args, total <= GOAL_COCO_S), _peak(device))  # fmt: skip


def precision_agreement(world: Path, weights: Path, args, precision: str = "bf16") -> Row:
    """The evaluation in ``precision`` against fp32 (``eval.precision``) on the synthetic dev
    split with UGNCL's SGRAF: the largest recall gap over R@1/5/10 in both directions
    (points)."""
    from ugncl.core.evaluation import evaluate_models
    from ugncl.run.build import build_model, open_run_data

    device = torch.device(args.device)
    config = run_config("ugncl", "sgraf", world, weights, args.device)
    data = open_run_data(config)
    torch.manual_seed(0)
    model = build_model(config, data).to(device)
    _peak_reset(device)
    results = {
        p: evaluate_models([model], data.dev, protocol="full", device=device, precision=p)[0]
        for p in ("fp32", precision)
    }
    gaps = [
        abs(results[precision][section][key] - value)
        for section, metrics in results["fp32"].items()
        for key, value in metrics.items()
        if "/R@" in key
    ]
    gap = max(gaps) if gaps else float("nan")
    return Row("loop", f"{precision} vs fp32 evaluation (dev split)", "ok", gap, "recall pts",
               f"{len(gaps)} recalls compared", f"<= {GOAL_RECALL_GAP:g}",
               _verdict(args, gap <= GOAL_RECALL_GAP), _peak(device))  # fmt: skip


# ----------------------------------------------------------------------------- benchmarks
def bench_sgraf_step(args) -> Row:
    """One SGRAF triplet training step at the paper's sizes (toy sizes with --quick)."""
    from sgraf.model import SGRAF
    from ugncl.core.engine.device import select_precision
    from ugncl.methods.ugncl.losses import triplet_objective

    device = torch.device(args.device)
    if args.quick:
        sizes, batch, regions, length = dict(word_dim=16, img_dim=64, embed_dim=32,
                                             sim_dim=16), 16, 36, 12  # fmt: skip
    else:
        sizes, batch, regions, length = {}, 128, 36, 12
    torch.manual_seed(0)
    model = SGRAF(5000, num_regions=regions, head="sgr", **sizes).to(device)
    precision = select_precision("auto", device)
    opt = torch.optim.Adam(model.parameters(), lr=2e-4)
    scaler = torch.amp.GradScaler(device.type, enabled=precision.use_grad_scaler)
    img_dim = model.config["img_dim"]
    images = torch.randn(batch, regions, img_dim, device=device)
    captions = torch.randint(1, 5000, (batch, length), device=device)
    lengths = torch.full((batch,), length, dtype=torch.long, device=device)

    def step() -> None:
        with precision.autocast(device):
            raw = model(images, captions, lengths).float()
        loss = triplet_objective(raw, margin=0.2, max_violation=True)["loss_triplet"]
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    seconds = _time_steps(step, device, args.bench_steps)
    return Row("bench", f"SGRAF step (batch {batch})", "ok", 1000 * seconds, "ms/step",
               f"{batch / seconds:.0f} pairs/s")  # fmt: skip


def bench_coco_scoring(args) -> Row:
    """All-pairs SGRAF (SAF) scoring of a COCO-5K-sized split from random embeddings."""
    from sgraf.functional import l2norm
    from sgraf.model import SGRAF

    device = torch.device(args.device)
    n_img, n_cap = (20, 100) if args.quick else (5000, 25000)
    sizes = dict(word_dim=16, img_dim=64, embed_dim=32, sim_dim=16) if args.quick else {}
    torch.manual_seed(0)
    model = SGRAF(100, head="saf", **sizes).to(device).eval()
    dim, max_len = model.config["embed_dim"], 20
    gen = torch.Generator().manual_seed(0)
    img = l2norm(torch.randn(1, n_img, 36, dim, generator=gen), dim=-1).to(device)
    lengths = torch.randint(6, max_len + 1, (n_cap,), generator=gen)
    cap = l2norm(torch.randn(n_cap, max_len, dim, generator=gen), dim=-1)
    cap = (cap * (torch.arange(max_len) < lengths[:, None]).unsqueeze(-1)).to(device)
    _sync(device)
    t0 = time.perf_counter()
    with torch.no_grad():
        model.score_all_pairs(img, cap, lengths.to(device), view_reduce=lambda s: s.mean(0))
    _sync(device)
    seconds = time.perf_counter() - t0
    pairs = n_img * n_cap
    return Row("bench", f"scoring {n_img}x{n_cap}", "ok", pairs / seconds, "pairs/s",
               f"{seconds:.1f} s for the matrix")  # fmt: skip


def bench_clip(args) -> Row:
    """CLIP training pairs/s (symmetric InfoNCE, fused AdamW, amp auto), random weights."""
    from ugncl.backbones.clip.adapter import build_clip
    from ugncl.backbones.clip.models import TINY_MODEL
    from ugncl.core.engine.device import select_precision
    from ugncl.methods.infonce import clip_loss

    device = torch.device(args.device)
    name, batch = (TINY_MODEL, 8) if args.quick else ("ViT-B-32", 256)
    torch.manual_seed(0)
    kwargs = dict(image_size=IMAGE_SIZE, context_length=CONTEXT) if args.quick else {}
    model = build_clip(name, **kwargs).to(device)
    precision = select_precision("auto", device)
    fused = device.type == "cuda"
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=fused)
    scaler = torch.amp.GradScaler(device.type, enabled=precision.use_grad_scaler)
    size = model.image_size
    images = torch.randn(batch, 3, size, size, device=device)
    context = model.tokenizer()(["a photo"]).shape[-1]
    tokens = torch.randint(1, 400, (batch, context), device=device)

    def step() -> None:
        with precision.autocast(device):
            raw = model(images, tokens)
        loss = clip_loss(raw.float())
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    seconds = _time_steps(step, device, args.bench_steps)
    return Row("bench", f"CLIP {name} (batch {batch})", "ok", batch / seconds, "pairs/s",
               f"{1000 * seconds:.0f} ms/step")  # fmt: skip


def _compiled(args) -> str:
    """The case-name suffix of a loop row trained through torch.compile (``--compile``)."""
    return ", compiled" if args.compile else ""


def _time_steps(step: Callable[[], None], device: torch.device, steps: int) -> float:
    """Mean seconds per call after one warm-up call."""
    step()
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    _sync(device)
    return (time.perf_counter() - t0) / steps


# ----------------------------------------------------------------------------- table
def format_table(rows: list[Row], header: str) -> str:
    """One plain-text table: section, case, status, value, unit, note."""
    cells = [["section", "case", "status", "value", "unit", "goal", "verdict", "peak", "note"]]
    for r in rows:
        value = "" if r.value is None else f"{r.value:,.1f}"
        cells.append([r.section, r.case, r.status, value, r.unit, r.goal, r.verdict, r.peak,
                      r.note])  # fmt: skip
    widths = [max(len(c[i]) for c in cells) for i in range(len(cells[0]))]
    lines = [header]
    for k, c in enumerate(cells):
        lines.append("  ".join(x.rjust(w) if i == 3 else x.ljust(w)
                               for i, (x, w) in enumerate(zip(c, widths))).rstrip())  # fmt: skip
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def machine(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}"
    return f"CPU ({torch.get_num_threads()} threads), torch {torch.__version__}"


def run_checks(args) -> list[Row]:
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        world, weights = make_world(Path(tmp))
        for backbone in args.backbones:
            for method in args.methods:
                case = f"{method} x {backbone}"
                rows.append(
                    _guard("step", case, check_steps, method, backbone, world, weights, args)
                )
        for backbone in args.backbones:
            case = f"evaluate_models x {backbone}"
            rows.append(_guard("eval", case, check_eval, backbone, world, weights, args))
        if not args.no_loop:
            for precision in EVAL_ROWS[1:]:
                case = f"{precision} vs fp32"
                rows.append(
                    _guard("loop", case, precision_agreement, world, weights, args, precision)
                )
    if not args.no_loop:
        rows.extend(loop_rows(args))
    if args.bench and not args.no_bench:
        rows.append(_guard("bench", "SGRAF step", bench_sgraf_step, args))
        rows.append(_guard("bench", "scoring", bench_coco_scoring, args))
        rows.append(_guard("bench", "CLIP", bench_clip, args))
    return rows


def loop_rows(args) -> list[Row]:
    """The real loops against the GPU goals: CLIP-track methods on Flickr30K-sized JPEGs, UGNCL
    on SGRAF at W = 2, the COCO-5K evaluation in fp32, tf32 and bf16."""
    rows: list[Row] = []
    reference_ms: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        world = make_photo_world(Path(tmp) / "photos", args.loop_images)
        for method in args.loop_methods:
            case = f"{method} x clip"
            rows.append(_guard("loop", case, loop_clip, method, world, args, reference_ms))
        rows.append(_guard("loop", "ugncl x sgraf W=2", loop_ugncl_sgraf, Path(tmp), args))
    for precision in EVAL_ROWS:
        rows.append(_guard("loop", f"COCO-5K eval {precision}", coco_eval, args, precision))
    return rows


def registered() -> tuple[list[str], list[str]]:
    """The registered methods and backbones, in registry order (the table's rows)."""
    from ugncl.backbones.registry import BACKBONES
    from ugncl.methods import METHODS

    return list(METHODS), list(BACKBONES)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    methods, backbones = registered()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument("--quick", action="store_true", help="toy benchmark sizes")
    parser.add_argument("--steps", type=int, default=3, help="training steps per method")
    parser.add_argument("--bench-steps", type=int, default=None, help="timed benchmark steps")
    parser.add_argument("--methods", nargs="+", default=methods, choices=methods)
    parser.add_argument("--backbones", nargs="+", default=backbones, choices=backbones)
    parser.add_argument(
        "--bench",
        action="store_true",
        help="add the random-input throughput rows (not the real loops)",
    )
    parser.add_argument(
        "--no-bench",
        action="store_true",
        help="without the random-input rows (the default; kept for scripts)",
    )
    parser.add_argument("--no-loop", action="store_true", help="skip the real-loop rows")
    loop_methods = [m for m in LOOP_METHODS if m in methods]
    parser.add_argument("--loop-methods", nargs="+", default=loop_methods, choices=methods,
                        help="methods of the CLIP loop rows (clip: the reference)")  # fmt: skip
    parser.add_argument("--compile", action="store_true",
                        help="the training loop rows through torch.compile (train.compile); "
                             "compilation falls in the untimed --loop-warm steps")  # fmt: skip
    parser.add_argument("--loop-steps", type=int, default=None, help="timed real-loop steps")
    parser.add_argument("--loop-warm", type=int, default=None, help="untimed steps first")
    parser.add_argument("--loop-images", type=int, default=None, help="JPEGs of the loop world")
    parser.add_argument("--workers", type=int, default=None, help="DataLoader workers")
    parser.add_argument("--eval-fraction", type=float, default=0.05,
                        help="share of COCO-5K image rows scored (then extrapolated)")  # fmt: skip
    parser.add_argument("--json", nargs="?", const="-", default=None, metavar="PATH",
                        help="also write the rows as JSON to PATH (no PATH: stdout)")  # fmt: skip
    args = parser.parse_args(argv)
    quick = args.quick
    defaults = {"bench_steps": (2, 10), "loop_steps": (2, 150), "loop_warm": (1, 10),
                "loop_images": (48, 2048), "workers": (0, min(8, os.cpu_count() or 1))}  # fmt: skip
    for key, (small, full) in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, small if quick else full)
    for key in ("bench_steps", "loop_steps", "loop_warm", "loop_images"):
        if getattr(args, key) < 1:
            parser.error(f"--{key.replace('_', '-')} must be at least 1")
    if not 0 < args.eval_fraction <= 1:
        parser.error("--eval-fraction must be in (0, 1]")
    return args


def check_json_path(path: str | None) -> None:
    """Refuse a ``--json`` file that cannot be written, before any check runs."""
    from precomputed.errors import UserError

    if path is None or path == "-":
        return
    folder = Path(path).expanduser().resolve().parent
    try:
        with tempfile.NamedTemporaryFile(dir=folder):
            pass
    except OSError as err:
        raise UserError(
            f"--json {path}: cannot write in {folder} ({err.strerror}); pick a writable folder"
        ) from None


@cli_main
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    check_json_path(args.json)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(
            f"gpu_check: CUDA is not available on this machine (torch {torch.__version__}, "
            f"CUDA build {torch.version.cuda or 'none'}); nothing to check. "
            "Run it on a GPU machine, or exercise the checks here with --device cpu --quick."
        )
        return 0
    rows = run_checks(args)
    header = f"gpu_check on {machine(device)}"
    print(format_table(rows, header))
    if args.json is not None:
        report = json.dumps({"machine": header[len("gpu_check on ") :],
                             "rows": [r.__dict__ for r in rows]}, indent=1)  # fmt: skip
        if args.json == "-":
            print(report)
        else:
            Path(args.json).write_text(report + "\n")
    failed = [r for r in rows if r.status == "FAIL"]
    if failed:
        print(f"{len(failed)} check(s) failed", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
