"""Benchmarks for the sgraf package, the feature store and the CLIP track.

``python tools/bench.py scoring [--json] [--device cpu|cuda] [--quick] [--mode fp32|tf32|bf16]``
``python tools/bench.py feature-open --path /tmp/big.npy [--images 18000]``
``python tools/bench.py clip [--model ugncl-tiny] [--batch-size 32] [--threads 1 2] [--steps 20]``
``python tools/bench.py methods [--methods infonce npc sdd osa] [--rounds 2] [--set KEY=VALUE ...]``
``python tools/bench.py method-steps [--methods infonce npc sdd osa] [--steps 5] [--set ...]``
``python tools/bench.py loader [--images 200] [--size 224] [--repeats 3]``

``loader`` writes ``--images`` JPEGs of Flickr30K's size (500 x 375, quality 90, photo-like
smooth content with grain) into a temporary folder and prints the CPU milliseconds of one
training sample's image as the DataLoader worker makes it, before (PIL decode + open_clip's
evaluation transform at ``--size`` px, float32 out) and after (a read from the uint8 pixel
cache of ``ugncl.backbones.clip.pixels``, page cache warm), the caption's tokenisation (the
same on both paths), samples/s per worker from their sum, and the one-off cache build per
image. Process CPU time at one thread, the paths interleaved ``--repeats`` times, median kept.

``methods`` trains each method's synthetic config (``<method>_synthetic``; ``clip_synthetic``
for the plain ``infonce`` fine-tune) for two epochs, the methods interleaved
round by round (a shared machine's load hits them alike), and prints the seconds of the second
epoch (the method's per-epoch pass + the training steps; validation excluded) of each, the
ratio to the first method (``infonce``), the one-off setup pass and the load average, and the
process CPU seconds of that epoch (validation and checkpoint excluded) with their ratio: on a
shared machine the CPU ratio is the stabler one (use ``train.threads=1``).

``method-steps`` prints the process CPU seconds of one training step of each method (the
trainer's step after the method's setup and first epoch start; per-epoch passes and data
loading of the batch excluded) and the ratio to the first method: a step-level cost that a
shared machine's load does not distort.

``clip`` times training steps of the CLIP backbone (fp32, symmetric InfoNCE, fused AdamW: the
pretraining loop of ``ugncl.backbones.clip.pretrain``) on random pixels and captions and prints
pairs/s
and ms per step for each thread count.

Measures pairs scored per second by the batched scorer (``sgraf.model.score_all_pairs``)
against ``reference_scores``, a straightforward per-caption loop kept with the tests
(tests/sgraf/reference.py) as the reference algorithm (the way the released SGRAF code
computes it: for each caption, repeat it over the images, SCAN attention, alignment
vectors, then SGR with separate query/key projections or SAF), using the same weights.
Prints pairs/s of both, the speed ratio, the maximum absolute score difference and the peak
memory of the batched run.

``eval-memory --make DIR`` writes a COCO-5K-sized split (5,000 images x 36 x 2048 float32
features = 1.5 GB, 25,000 captions of COCO-like length, mean 10.5 words, a few up to 50) into
``DIR/coco_bench_precomp/testall_*`` (check ``df -h`` first; delete DIR afterwards), and
``eval-memory --data DIR`` runs the evaluation's encoding stage on it with a paper-size SGRAF
(embed 1024, sim 256, word 300, W = 2) and scores one shard (``--shard-images`` x
``--shard-captions``); run it under ``/usr/bin/time -v`` for the peak resident set size.
The encoding stage is the one ``evaluate_models`` runs: captions held (packed), images
streamed (every 1024-image chunk encoded and its globals computed, one chunk at a time);
``--held`` encodes and holds all image embeddings instead (the path before streaming).
``shard_sum`` (float64 sum of the shard's scores) is the same on both paths.

``feature-open`` writes an (images, 36, 2048) float32 ``.npy`` (18000 images = 5.3 GB; check
``df -h`` first), drops its pages from the page cache (``posix_fadvise DONTNEED``) and times
``open_features`` twice: the first open scans the file for NaN/inf and writes the record
``<file>.finite.json``, the second reuses it. The file and its record are deleted afterwards.

Peak memory: on CUDA ``torch.cuda.max_memory_allocated`` (tensors only, allocator view);
on CPU the increase of the process's peak resident set size (``VmHWM`` in
``/proc/self/status``, reset through ``/proc/self/clear_refs`` before the run where the
kernel allows it, otherwise the ``ru_maxrss`` delta, which reads 0 when an earlier phase
already peaked higher).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

from sgraf.functional import l2norm
from sgraf.model import SGRAF, score_all_pairs
from ugncl.run.cli import cli_main


# ----------------------------------------------------------------------------------------
# Measurement helpers
# ----------------------------------------------------------------------------------------
def _reference():
    """``reference_scores`` of the tests' helpers (tests/sgraf/reference.py): the reference
    algorithm lives with the tests that check the batched scorer against it."""
    repo = str(Path(__file__).resolve().parents[1])
    if repo not in sys.path:
        sys.path.insert(0, repo)
    from tests.sgraf.reference import reference_scores

    return reference_scores


def _random_embeddings(n_img, n_cap, *, regions, dim, min_len, max_len, device, seed):
    gen = torch.Generator().manual_seed(seed)
    img = l2norm(torch.randn(1, n_img, regions, dim, generator=gen), dim=-1)
    lengths = torch.randint(min_len, max_len + 1, (n_cap,), generator=gen)
    cap = l2norm(torch.randn(n_cap, max_len, dim, generator=gen), dim=-1)
    cap = cap * (torch.arange(max_len) < lengths[:, None]).unsqueeze(-1)
    return img.to(device), cap.to(device), lengths


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(fn, device):
    _sync(device)
    start = time.perf_counter()
    out = fn()
    _sync(device)
    return out, time.perf_counter() - start


def _status_kib(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _measure_peak(fn, device):
    """Run fn; return (result, seconds, peak bytes, what was measured)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        out, secs = _timed(fn, device)
        peak = torch.cuda.max_memory_allocated(device) - base
        return out, secs, peak, "cuda max_memory_allocated minus allocated before the run"
    import resource

    try:
        Path("/proc/self/clear_refs").write_text("5")
        reset = True
    except OSError:
        reset = False
    rss0 = _status_kib("VmRSS") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out, secs = _timed(fn, device)
    hwm = _status_kib("VmHWM") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    what = (
        "CPU peak RSS increase (VmHWM after reset via clear_refs minus VmRSS before)"
        if reset
        else "CPU ru_maxrss delta (0 if an earlier phase peaked higher)"
    )
    return out, secs, max(0, (hwm or 0) - (rss0 or 0)) * 1024, what


def run_case(model, name, n_img, n_cap, *, ref_captions, device, mode, budget, repeats=1, seed=0):
    """Time batched and reference scoring of one (n_img x n_cap) case."""
    reference_scores = _reference()
    cfg = model.config
    img, cap, lengths = _random_embeddings(
        n_img,
        n_cap,
        regions=cfg["num_regions"],
        dim=cfg["embed_dim"],
        min_len=8,
        max_len=16,
        device=device,
        seed=seed,
    )

    def batched():
        if mode == "bf16":
            with torch.autocast(device.type, dtype=torch.bfloat16):
                return score_all_pairs(model, img, cap, lengths, memory_budget_bytes=budget)
        return score_all_pairs(model, img, cap, lengths, memory_budget_bytes=budget)

    k = min(n_cap, ref_captions)
    fast_s = ref_s = float("inf")
    peak = 0
    with torch.no_grad():
        # Interleaved repeats, best time of each: the host may be shared.
        for _ in range(repeats):
            fast, secs, used, peak_what = _measure_peak(batched, device)
            fast_s, peak = min(fast_s, secs), max(peak, used)
            ref, secs = _timed(lambda: reference_scores(model, img, cap[:k], lengths[:k]), device)
            ref_s = min(ref_s, secs)
    diff = (fast[..., :k] - ref.float().cpu()).abs().max().item()
    fast_pps = n_img * n_cap / fast_s
    ref_pps = n_img * k / ref_s
    return {
        "case": name,
        "head": cfg["head"],
        "n_img": n_img,
        "n_cap": n_cap,
        "reference_captions": k,
        "repeats": repeats,
        "batched_seconds": round(fast_s, 4),
        "reference_seconds": round(ref_s, 4),
        "batched_pairs_per_s": round(fast_pps, 1),
        "reference_pairs_per_s": round(ref_pps, 1),
        "speedup": round(fast_pps / ref_pps, 3),
        "max_abs_diff": diff,
        "peak_memory_bytes": int(peak),
        "peak_memory_measures": peak_what,
    }


def bench_scoring(args: argparse.Namespace) -> dict:
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda requested but torch.cuda.is_available() is False")
    if args.mode == "tf32" and device.type != "cuda":
        raise SystemExit("--mode tf32 only applies to CUDA devices; use fp32 or bf16 on CPU")
    if device.type == "cuda":
        tf32 = args.mode == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
    if args.quick:
        batch, shard, ref_caps = (64, 64), (100, 300), 50
    else:
        batch, shard, ref_caps = (128, 128), (1000, 5000), 200
    shard = (args.shard_images or shard[0], args.shard_captions or shard[1])
    ref_caps = args.reference_captions or ref_caps
    results = []
    for head in args.heads.split(","):
        torch.manual_seed(0)
        model = SGRAF(100, embed_dim=1024, sim_dim=256, num_regions=36, head=head).to(device)
        model.eval()
        budget = args.memory_budget_mb * 2**20
        # Warm-up (allocator, thread pools, kernels) on a small case.
        run_case(
            model, "warmup", 8, 8, ref_captions=8, device=device, mode=args.mode, budget=budget
        )
        results.append(
            run_case(
                model,
                f"batch_{batch[0]}x{batch[1]}",
                *batch,
                ref_captions=batch[1],
                device=device,
                mode=args.mode,
                budget=budget,
                repeats=args.repeats,
            )
        )
        results.append(
            run_case(
                model,
                f"shard_{shard[0]}x{shard[1]}",
                *shard,
                ref_captions=ref_caps,
                device=device,
                mode=args.mode,
                budget=budget,
                repeats=args.shard_repeats,
            )
        )
    return {
        "benchmark": "scoring",
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "mode": args.mode,
        "memory_budget_mb": args.memory_budget_mb,
        "sizes": "embed 1024, sim 256, 36 regions, captions 8-16 words (uniform)",
        "note": "reference pairs/s is timed on the first `reference_captions` captions of a "
        "case (the loop's cost per caption is constant); max_abs_diff is over those columns",
        "results": results,
    }


def _evict_page_cache(path: Path) -> None:
    """Drop ``path`` from the page cache so the next read comes from disk (Linux)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def bench_feature_open(path: Path, images: int) -> dict:
    """Cold open times of a feature file without and with its NaN/inf scan record."""
    import numpy as np

    from precomputed.features import open_features, scan_record_paths

    shape = (images, 36, 2048)
    try:
        array = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=shape)
        block = np.random.default_rng(0).random((500, *shape[1:]), dtype=np.float32)
        for start in range(0, images, len(block)):
            array[start : start + len(block)] = block[: images - start]
        array.flush()
        del array
        for record in scan_record_paths(path):
            record.unlink(missing_ok=True)
        times = {}
        for label in ("first_open_s", "second_open_s"):
            _evict_page_cache(path)
            start = time.perf_counter()
            open_features(path).close()
            times[label] = round(time.perf_counter() - start, 4)
        return {"file_bytes": path.stat().st_size, "shape": list(shape), **times}
    finally:
        for leftover in (path, *scan_record_paths(path)):
            leftover.unlink(missing_ok=True)


BENCH_SPLIT = ("coco_bench_precomp", "testall")


def make_eval_memory_data(root: Path, images: int, seed: int = 0) -> dict:
    """A COCO-5K-sized split (random features, COCO-like caption lengths) under ``root``."""
    import numpy as np

    from precomputed.features import open_features
    from precomputed.vocab import SPECIALS

    rng = np.random.default_rng(seed)
    folder = root / BENCH_SPLIT[0]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{BENCH_SPLIT[1]}_ims.npy"
    array = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(images, 36, 2048))
    for start in range(0, images, 250):
        stop = min(start + 250, images)
        array[start:stop] = rng.random((stop - start, 36, 2048), dtype=np.float32)
    array.flush()
    del array
    open_features(path).close()  # the NaN/inf scan record, so the measured run only reads once
    words = [f"w{i}" for i in range(10000)]
    n_cap = 5 * images
    n_words = np.clip(np.rint(rng.normal(10.5, 2.5, n_cap)), 6, 50).astype(int)
    long = rng.random(n_cap) < 0.002  # COCO has a few captions of 40-50 words
    n_words[long] = rng.integers(40, 51, int(long.sum()))
    with open(folder / f"{BENCH_SPLIT[1]}_caps.txt", "w", encoding="utf-8") as f:
        for n in n_words:
            f.write(" ".join(words[i] for i in rng.integers(0, len(words), n)) + "\n")
    vocab = [*SPECIALS, *words]
    scan = {
        "word2idx": {w: i for i, w in enumerate(vocab)},
        "idx2word": {str(i): w for i, w in enumerate(vocab)},
        "idx": len(vocab),
    }
    (root / "vocab.json").write_text(json.dumps(scan))
    return {"root": str(root), "images": images, "captions": n_cap,
            "mean_words": float(n_words.mean()), "max_words": int(n_words.max())}  # fmt: skip


def bench_eval_memory(args: argparse.Namespace) -> dict:
    """Encoding stage of an evaluation on ``--data`` plus the scoring of one shard."""
    from precomputed.dataset import open_split
    from precomputed.vocab import load_vocab
    from sgraf.scoring import IMAGE_CHUNK
    from ugncl.core.evaluation import encode_split

    torch.manual_seed(0)
    vocab = load_vocab(args.data / "vocab.json")
    split = open_split(args.data, BENCH_SPLIT[0], BENCH_SPLIT[1], vocab, captions_per_image=5)
    model = SGRAF(len(vocab), word_dim=300, img_dim=2048, embed_dim=1024, sim_dim=256,
                  num_regions=36, num_views=2, head="sgr").eval()  # fmt: skip
    started = time.perf_counter()
    enc = encode_split(model, split, batch_size=args.batch_size, stream_images=not args.held)
    if args.held:
        shard_images = enc.img_emb[:, : args.shard_images]
        img_bytes = enc.img_emb.numel() * 4
    else:
        # The image pass of an evaluation: each chunk encoded and its globals computed while
        # it is scored, one chunk held at a time.
        with torch.no_grad():
            for chunk in enc.img_emb.chunks(IMAGE_CHUNK):
                model.sim_enc.image_globals(chunk)
                del chunk  # as score_all_pairs: not held while the next chunk is built
        shard_images = enc.img_emb.first(args.shard_images)
        w, _, r, e = enc.img_emb.shape
        img_bytes = min(IMAGE_CHUNK, enc.num_images) * w * r * e * 4
    encode_s = time.perf_counter() - started
    cap = enc.cap_emb
    n_cap = args.shard_captions
    caps = cap.subset(0, n_cap) if hasattr(cap, "subset") else cap[:n_cap]
    started = time.perf_counter()
    with torch.no_grad():
        shard = model.score_all_pairs(
            shard_images, caps, enc.lengths[:n_cap], memory_budget_bytes=512 * 2**20
        )
    score_s = time.perf_counter() - started
    stored = cap.data if hasattr(cap, "data") else cap
    return {"images": enc.num_images, "captions": enc.num_captions, "held": args.held,
            "img_emb_bytes_held": img_bytes, "cap_emb_bytes": stored.numel() * 4,
            "encode_s": round(encode_s, 1), "shard": list(shard.shape),
            "score_s": round(score_s, 1), "shard_sum": float(shard.double().sum())}  # fmt: skip


def bench_clip(args: argparse.Namespace) -> dict:
    """Training pairs/s of a CLIP backbone on CPU, per thread count."""
    from ugncl.backbones.clip.adapter import build_clip
    from ugncl.backbones.clip.pretrain import PretrainConfig, pretrain

    results = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        torch.manual_seed(0)
        model = build_clip(args.model)
        n, size = 4 * args.batch_size, model.image_size
        images = torch.randint(0, 256, (n, 3, size, size), dtype=torch.uint8)
        words = ["red", "dog", "small", "left", "a", "car", "on", "the", "blue", "park"]
        texts = [" ".join(words[(k * j) % 10] for j in range(12)) for k in range(n)]
        tokens = model.tokenizer()(texts).view(n, 1, -1)
        for steps in (args.warmup, args.steps):  # warm-up run, then the timed run
            cfg = PretrainConfig(steps=steps, batch_size=args.batch_size, log_every=steps)
            summary = pretrain(model, images, tokens, cfg)
        results.append({"threads": threads, "pairs_per_s": summary["pairs_per_s"],
                        "ms_per_step": summary["ms_per_step"]})  # fmt: skip
    return {"model": args.model, "batch_size": args.batch_size, "precision": "fp32",
            "optimizer": "AdamW(fused)", "steps": args.steps, "results": results}  # fmt: skip


def _epoch_seconds(records: list[dict]) -> tuple[float, float | None]:
    """(seconds of epoch 1: end of epoch 0's validation -> its last train record, setup
    seconds: the ``method_setup`` record after the ``setup`` record, None without one)."""
    val0 = next(r["time"] for r in records if r["event"] == "val" and r["epoch"] == 0)
    last1 = [r["time"] for r in records if r["event"] == "train" and r["epoch"] == 1][-1]
    start = next(r["time"] for r in records if r["event"] == "setup")
    setup = [r["time"] - start for r in records if r["event"] == "method_setup"]
    return last1 - val0, (setup[0] if setup else None)


@contextlib.contextmanager
def epoch_cpu_seconds():
    """Yield a list that receives the process CPU seconds of every training epoch run inside
    (``Trainer._run_epoch`` minus its validation and checkpoint): on a shared machine the
    wall clock measures the neighbours' load as much as the method, CPU time does not (with
    ``train.threads=1`` and ``data.num_workers=0`` it is the one thread's work)."""
    from ugncl.core.engine.trainer import Trainer

    seconds: list[float] = []
    excluded = [0.0]
    run_epoch, evaluate, checkpoint = Trainer._run_epoch, Trainer.evaluate, Trainer._checkpoint

    def excluding(fn):
        def wrapped(self, *a, **kw):
            t0 = time.process_time()
            try:
                return fn(self, *a, **kw)
            finally:
                excluded[0] += time.process_time() - t0

        return wrapped

    def timed_epoch(self, epoch):
        excluded[0] = 0.0
        t0 = time.process_time()
        run_epoch(self, epoch)
        seconds.append(time.process_time() - t0 - excluded[0])

    Trainer._run_epoch, Trainer.evaluate = timed_epoch, excluding(evaluate)
    Trainer._checkpoint = excluding(checkpoint)
    try:
        yield seconds
    finally:
        Trainer._run_epoch, Trainer.evaluate, Trainer._checkpoint = run_epoch, evaluate, checkpoint


# Training time relative to the CLIP fine-tune in the OSA paper's cost table (ViT-B/32, one
# GPU): the anchor the measured ratios are read against (SDD is not in that table).
PAPER_COST_RATIO = {"infonce": 1.0, "npc": 3.33, "osa": 1.22}


def synthetic_config(method: str) -> str:
    """The synthetic CLIP-track config of ``method`` (the plain InfoNCE fine-tune's is
    ``clip_synthetic``: the track's own config)."""
    return "clip_synthetic" if method == "infonce" else f"{method}_synthetic"


def bench_methods(args: argparse.Namespace) -> dict:
    """Seconds per epoch of each method's synthetic config, interleaved over rounds.

    ``ratio_with_setup`` adds the one-off setup (NPC/SDD bank pass, OSA's adaptation and
    scoring pass) spread over the two epochs run; ``paper_ratio`` is the OSA paper's figure."""
    import statistics
    import tempfile

    from ugncl.core.engine.recorder import read_metrics
    from ugncl.run.config import load_config
    from ugncl.run.training import train

    runs: dict[str, list[dict]] = {m: [] for m in args.methods}
    with tempfile.TemporaryDirectory() as out:
        for r in range(args.rounds):
            for m in args.methods:
                overrides = [
                    *args.set, f"run.out_dir={out}", f"run.name={m}-{r}", "train.epochs=2",
                    "train.warmup_epochs=0", "eval.test_after_training=false",
                ]  # fmt: skip
                config, _ = load_config(synthetic_config(m), overrides)
                load = os.getloadavg()[0]
                with epoch_cpu_seconds() as cpu:
                    result = train(config, config_name=m)
                epoch, setup = _epoch_seconds(read_metrics(result.run_dir))
                runs[m].append({"epoch_s": epoch, "cpu_s": cpu[1], "setup_s": setup,
                                "load1": load})  # fmt: skip
    base = statistics.median(x["epoch_s"] for x in runs[args.methods[0]])
    base_cpu = statistics.median(x["cpu_s"] for x in runs[args.methods[0]])
    table = []
    for m, xs in runs.items():
        epoch = statistics.median(x["epoch_s"] for x in xs)
        cpu = statistics.median(x["cpu_s"] for x in xs)
        setups = [x["setup_s"] for x in xs if x["setup_s"] is not None]
        setup_s = statistics.median(setups) if setups else 0.0
        table.append({
            "method": m, "epoch_s": round(epoch, 2), "ratio": round(epoch / base, 3),
            "ratio_with_setup": round((2 * epoch + setup_s) / (2 * base), 3),
            "paper_ratio": PAPER_COST_RATIO.get(m),
            "cpu_s": round(cpu, 2), "cpu_ratio": round(cpu / base_cpu, 3),
            "setup_s": round(statistics.median(setups), 2) if setups else None,
            "epoch_s_all": [round(x["epoch_s"], 2) for x in xs],
            "cpu_s_all": [round(x["cpu_s"], 2) for x in xs],
            "load1": [round(x["load1"], 2) for x in xs],
        })  # fmt: skip
    return {"set": args.set, "rounds": args.rounds, "cpus": os.cpu_count(), "results": table}


def bench_method_steps(args: argparse.Namespace) -> dict:
    """Process CPU seconds of one training step of each method's synthetic config (the
    trainer's ``_train_step``: the method's step, backward, clipping, optimiser step), after
    its setup and first ``on_epoch_start``; the first step is a warm-up and not counted."""
    import tempfile

    from ugncl.core.engine.context import StepContext
    from ugncl.core.engine.device import select_precision
    from ugncl.core.engine.recorder import MetricsRecorder
    from ugncl.core.engine.trainer import Trainer
    from ugncl.run.build import (
        build_method,
        build_model,
        build_optimizer_and_schedule,
        open_run_data,
    )
    from ugncl.run.config import load_config

    torch.set_num_threads(args.threads)
    cpu = torch.device("cpu")
    results = []
    for m in args.methods:
        config, _ = load_config(synthetic_config(m), args.set)
        torch.manual_seed(0)
        data = open_run_data(config)
        model = build_model(config, data)
        train_data = data.training_data()
        batch_size = config.train.batch_size
        method = build_method(config, model, train_data.num_samples)
        optimizer, schedule = build_optimizer_and_schedule(
            config, model, method, train_data.num_samples // batch_size, data=data
        )
        with tempfile.TemporaryDirectory() as out:
            trainer = Trainer(
                model=model, method=method, data=train_data, optimizer=optimizer,
                schedule=schedule, evaluator=None, run_dir=Path(out),
                recorder=MetricsRecorder(Path(out)), device=cpu,
                precision=select_precision("off", cpu), seed=0, epochs=1,
                batch_size=batch_size, grad_clip=config.train.grad_clip,
            )  # fmt: skip
            ctx = trainer.context()
            method.setup(ctx)
            method.on_epoch_start(ctx, 0)
            subset = method.epoch_samples(ctx, 0)
            batches = iter(trainer.ordered_batches(0, batch_size, 0, subset, drop_last=True))
            model.train()
            seconds = []
            for i in range(args.steps + 1):
                batch = next(batches)
                lr = float(optimizer.param_groups[0]["lr"])
                t0 = time.process_time()
                trainer._train_step(batch, StepContext(0, i, False, cpu, lr))
                seconds.append(time.process_time() - t0)
            trainer.recorder.close()
        results.append({"method": m, "cpu_s_per_step": sum(seconds[1:]) / args.steps})
    base = results[0]["cpu_s_per_step"]
    for r in results:
        r["ratio"] = round(r["cpu_s_per_step"] / base, 3)
        r["cpu_s_per_step"] = round(r["cpu_s_per_step"], 3)
    return {"set": args.set, "steps": args.steps, "threads": args.threads, "results": results}


# ----------------------------------------------------------------------------------------
# Launches: operator counts of a UGNCL step and a COCO-5K evaluation (CPU, counted)
# ----------------------------------------------------------------------------------------
#: Words per caption (mean, sd, longest) of Flickr30K and COCO captions; lengths are drawn
#: from a log-normal with that mean and sd, clipped, plus <start>/<end>.
FLICKR_WORDS = (12.3, 5.2, 78)
COCO_WORDS = (10.5, 2.4, 50)
#: The paper's SGRAF sizes: word 300, image features 2048, embed 1024, sim 256, 36 regions.
PAPER_SGRAF = {"word_dim": 300, "img_dim": 2048, "embed_dim": 1024, "sim_dim": 256}
TINY_DIMS = {"word_dim": 8, "img_dim": 2048, "embed_dim": 16, "sim_dim": 8}


def caption_lengths(n: int, words: tuple[float, float, int], seed: int = 0) -> torch.Tensor:
    """(n,) token lengths (words + <start>/<end>) of captions whose word counts follow a
    log-normal with ``words`` = (mean, sd, longest)."""
    mean, sd, longest = words
    sigma2 = math.log(1 + (sd / mean) ** 2)
    gen = torch.Generator().manual_seed(seed)
    draw = torch.randn(n, generator=gen) * math.sqrt(sigma2) + math.log(mean) - sigma2 / 2
    return draw.exp().round().clamp(1, longest).long() + 2


def paper_plan(views: int, budget: int):
    """A ``plan_grid`` that plans as the paper-size SGR head would under ``budget``: the
    counted model is tiny (the launches of a block do not depend on its widths), the grid
    is the paper model's."""
    from sgraf.scoring import bytes_per_pair, plan_blocks

    def plan(head, img_shape, itemsize, lengths_cpu, _budget, *, split_images=True):
        pair = views * bytes_per_pair(
            int(lengths_cpu.max()), 36, PAPER_SGRAF["embed_dim"], PAPER_SGRAF["sim_dim"],
            head="sgr", sgr_steps=3, itemsize=4, autograd=torch.is_grad_enabled(),
        )  # fmt: skip
        return plan_blocks(img_shape[1], lengths_cpu.numel(), pair, budget,
                           split_images=split_images)  # fmt: skip

    return plan


def _ugncl_step_setup(batch: int, views: int, seed: int):
    """A UGNCL method, a tiny W-view SGRAF and its trainer on the synthetic world, and a
    batch of ``batch`` pairs with Flickr30K caption lengths."""
    import tempfile

    from ugncl.core.data import PairBatch
    from ugncl.core.engine.device import select_precision
    from ugncl.core.engine.recorder import MetricsRecorder
    from ugncl.core.engine.trainer import Trainer
    from ugncl.run.build import (
        build_method,
        build_model,
        build_optimizer_and_schedule,
        open_run_data,
    )
    from ugncl.run.config import load_config

    sets = [f"model.sgraf.{k}={v}" for k, v in TINY_DIMS.items()] + [
        f"model.sgraf.num_views={views}", "model.sgraf.num_regions=36",
        "model.sgraf.block_captions=null", f"train.batch_size={batch}",
    ]  # fmt: skip
    config, _ = load_config("ugncl_synthetic", sets)
    torch.manual_seed(seed)
    data = open_run_data(config)
    model = build_model(config, data)
    train_data = data.training_data()
    method = build_method(config, model, train_data.num_samples)
    optimizer, schedule = build_optimizer_and_schedule(config, model, method, 10, data=data)
    out = tempfile.mkdtemp()
    cpu = torch.device("cpu")
    trainer = Trainer(
        model=model, method=method, data=train_data, optimizer=optimizer, schedule=schedule,
        evaluator=None, run_dir=Path(out), recorder=MetricsRecorder(Path(out)), device=cpu,
        precision=select_precision("off", cpu), seed=0, epochs=1, batch_size=batch,
    )  # fmt: skip
    lengths = caption_lengths(batch, FLICKR_WORDS, seed)
    gen = torch.Generator().manual_seed(seed)
    width = int(lengths.max())
    tokens = torch.randint(4, 100, (batch, width), generator=gen)
    tokens = tokens * (torch.arange(width) < lengths[:, None])
    index = torch.arange(batch)
    pairs = PairBatch(
        images=torch.randn(batch, 36, TINY_DIMS["img_dim"], generator=gen), captions=tokens,
        lengths=lengths, index=index, image_index=index, clean=torch.ones(batch, dtype=bool),
    )  # fmt: skip
    return trainer, method, pairs


def _divided(method, num_samples: int, seed: int) -> None:
    """Give the UGNCL method a division of every sample (as after its epoch-start pass)."""
    from ugncl.methods.ugncl.division import DivisionResult

    rng = np.random.default_rng(seed)
    u = rng.random(num_samples).astype(np.float32)
    sets = rng.integers(0, 4, num_samples).astype(np.int8)
    method.division = DivisionResult(u=u, u_bar=u, soft_label=1 - u, sets=sets)
    method.deferred, method.started = False, True


#: ATen calls of a cuDNN GRU on CUDA: ``_cudnn_rnn`` forward and its backward (the CPU runs
#: the same packed GRU as a loop of small operators per time step and direction).
CUDNN_RNN_CALLS = 2


def count_ugncl_step(budget: int, *, warmup: bool, batch: int = 128, views: int = 2,
                     seed: int = 0) -> dict:  # fmt: skip
    """Launches and host reads of one trainer step of UGNCL (forward, losses, backward,
    clipping, optimiser) with the paper-size grid of ``budget``.

    The optimiser and the gradient clipping run their foreach kernels (what torch picks for
    CUDA parameters; on CPU parameters it loops per tensor). ``cuda_estimate`` replaces the
    CPU's unrolled GRU (counted alone, forward and backward, on the same captions) by the
    cuDNN call; ``launches`` is the CPU count as is."""
    import sgraf.scoring as scoring
    from ugncl.core.engine.context import StepContext
    from ugncl.core.engine.launches import count

    trainer, method, pairs = _ugncl_step_setup(batch, views, seed)
    if not warmup:
        _divided(method, trainer.data.num_samples, seed)
    for group in trainer.optimizer.param_groups:
        group["foreach"] = True
    original, clip = scoring.plan_grid, torch.nn.utils.clip_grad_norm_
    scoring.plan_grid = paper_plan(views, budget)
    torch.nn.utils.clip_grad_norm_ = functools.partial(clip, foreach=True)
    try:
        ctx = StepContext(0 if warmup else 5, 0, warmup, torch.device("cpu"), 2e-4)
        trainer._train_step(pairs, ctx)  # optimiser state created outside the count
        _, counter = count(trainer._train_step, pairs, ctx)
        rows, cols = scoring.plan_grid(None, (views, batch, 36, 0), 4, pairs.lengths, budget)
    finally:
        scoring.plan_grid, torch.nn.utils.clip_grad_norm_ = original, clip
    gru = count_gru(trainer.model, pairs)
    blocks = math.ceil(batch / rows) * math.ceil(batch / cols)
    return {"launches": counter.launches, "gru_cpu_launches": gru,
            "cuda_estimate": counter.launches - gru + CUDNN_RNN_CALLS,
            "blocks": blocks, "block": [rows, cols],
            "host_reads": dict(counter.host_reads)}  # fmt: skip


def count_gru(model, pairs) -> int:
    """Operators of the text encoder's packed GRU alone (forward and backward) on the
    batch's captions, as the CPU runs it."""
    from torch.nn.utils.rnn import pack_padded_sequence

    from ugncl.core.engine.launches import count

    rnn = model.txt_enc.cap_rnn
    x = model.txt_enc.embed(pairs.captions).detach().requires_grad_()
    packed = pack_padded_sequence(x, pairs.lengths, batch_first=True, enforce_sorted=False)
    _, base = count(lambda: x.sum().backward())  # the sum and its backward, not the GRU's
    _, counter = count(lambda: rnn(packed)[0].data.sum().backward())
    return counter.launches - base.launches


def count_eval(budget: int, *, n_img: int = 5000, n_cap: int = 25000, views: int = 2,
               out_device: str = "model") -> dict:  # fmt: skip
    """Launches per block of all-pairs scoring (tiny model, evidence reduction, counted on
    two small grids) and the COCO-5K estimate: the paper-size plan's block count x that."""
    import sgraf.scoring as scoring
    from sgraf.model import SGRAF
    from ugncl.core.engine.launches import count
    from ugncl.core.evaluation import view_reducer

    torch.manual_seed(0)
    model = SGRAF(100, num_views=views, num_regions=36, head="sgr", **TINY_DIMS).eval()
    lengths = caption_lengths(60, COCO_WORDS, 1)
    img = l2norm(torch.randn(views, 12, 36, TINY_DIMS["embed_dim"]), dim=-1)
    cap = l2norm(torch.randn(60, int(lengths.max()), TINY_DIMS["embed_dim"]), dim=-1)
    cap = cap * (torch.arange(cap.shape[1]) < lengths[:, None]).unsqueeze(-1)
    reduce = view_reducer("evidence", 0.1, "tanh")
    out = "cpu" if out_device == "cpu" else "model"
    counts = {}
    original = scoring.plan_grid
    try:
        for grid in ((6, 30), (3, 10)):  # 4 and 24 blocks
            scoring.plan_grid = lambda *a, grid=grid, **k: grid
            _, counter = count(score_all_pairs, model, img, cap, lengths, view_reduce=reduce,
                               out_device="cpu")  # fmt: skip
            counts[(12 // grid[0]) * (60 // grid[1])] = counter.launches
    finally:
        scoring.plan_grid = original
    (b1, c1), (b2, c2) = sorted(counts.items())
    per_block = (c2 - c1) / (b2 - b1)
    fixed = c1 - b1 * per_block
    coco = caption_lengths(n_cap, COCO_WORDS, 2)
    with torch.no_grad():
        rows, cols = paper_plan(views, budget)(None, (views, n_img, 36, 0), 4, coco, budget)
    blocks = math.ceil(n_img / rows) * math.ceil(n_cap / cols)
    # Per block to the host: one blocking copy when the matrix lives on the CPU (before),
    # none when it stays on the device and is copied once.
    copies = blocks if out == "cpu" else 1
    return {"launches_per_block": per_block, "block": [rows, cols], "blocks": blocks,
            "launches_estimate": round(fixed + blocks * per_block),
            "blocking_copies": copies}  # fmt: skip


def bench_launches(args: argparse.Namespace) -> dict:
    """Counted launches of a UGNCL step (batch 128, W = 2, Flickr30K caption lengths) and
    estimated launches of a COCO-5K evaluation, under the fixed 512 MiB plan and under the
    device plan (``DEVICE_MEMORY_SHARE`` of ``--free-gib`` GiB free)."""
    from sgraf.scoring import DEFAULT_MEMORY_BUDGET, DEVICE_MEMORY_SHARE

    torch.set_num_threads(1)
    device_budget = int(args.free_gib * 2**30 * DEVICE_MEMORY_SHARE)
    device_plan = f"device ({DEVICE_MEMORY_SHARE} x {args.free_gib} GiB free)"
    plans = {"fixed 512 MiB": DEFAULT_MEMORY_BUDGET, device_plan: device_budget}
    report: dict = {"free_gib": args.free_gib, "steps": {}, "coco5k_eval": {}}
    for name, budget in plans.items():
        report["steps"][name] = {
            "warm-up": count_ugncl_step(budget, warmup=True, batch=args.batch),
            "divided": count_ugncl_step(budget, warmup=False, batch=args.batch),
        }
        out = "cpu" if budget == DEFAULT_MEMORY_BUDGET else "model"
        report["coco5k_eval"][name] = count_eval(budget, out_device=out)
    return report


def bench_merge_bytes(args: argparse.Namespace) -> dict:
    """Bytes one rank sends per ``merge_rows`` of an ``(N, row)`` float32 table, each rank
    having filled its ``1/world`` share: before, an all-reduce of the visit counts (int32)
    and of a dense float64 copy of the table; now, the rank's owned rows (int64 index + the
    row's float32 bytes, measured with ``owned_rows``) padded to the largest share, plus its
    row count."""
    from ugncl.core.engine.distributed import owned_rows

    n, row, world = args.samples, args.row, args.world
    table = np.zeros((n, row), dtype=np.float32)
    visited = np.arange(n) % world == 0
    index, payload = owned_rows(table, visited)
    before = n * row * 8 + n * 4
    after = index.nbytes + payload.nbytes + 8
    return {"samples": n, "row": row, "world": world, "before_bytes": before,
            "after_bytes": after, "ratio": round(before / after, 2)}  # fmt: skip


def write_flickr_like_jpegs(paths: list[Path], seed: int = 0) -> list[Path]:
    """JPEGs of 500 x 375 (every fourth 375 x 500), quality 90, at ``paths``: a smooth colour
    field (bilinear from an 8 x 6 grid) plus grain, so that they compress like photographs
    (about 100 kB) rather than like noise."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    for i, path in enumerate(paths):
        path.parent.mkdir(parents=True, exist_ok=True)
        w, h = (375, 500) if i % 4 == 3 else (500, 375)
        coarse = Image.fromarray(rng.integers(0, 256, (6, 8, 3), dtype=np.uint8))
        field = np.asarray(coarse.resize((w, h), Image.BILINEAR), dtype=np.float32)
        grain = rng.normal(0.0, 20.0, (h, w, 3)).astype(np.float32)
        pixels = np.clip(field + grain, 0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(path, format="JPEG", quality=90)
    return paths


def _cpu_ms_per_item(fn, n: int) -> float:
    started = time.process_time()
    for i in range(n):
        fn(i)
    return (time.process_time() - started) * 1e3 / n


def bench_loader(args: argparse.Namespace) -> dict:
    """CPU ms per training sample of the CLIP loader, PIL + transform vs the pixel cache."""
    import tempfile

    import open_clip

    from ugncl.backbones.clip.data import load_rgb
    from ugncl.backbones.clip.models import clip_tokenizer
    from ugncl.backbones.clip.pixels import open_pixel_cache, split_transform

    torch.set_num_threads(1)
    transform = open_clip.image_transform(args.size, is_train=False)
    tokenizer = clip_tokenizer("ViT-B-32", 77)
    caption = "Two young guys with shaggy hair look at their hands while hanging out in the yard ."
    with tempfile.TemporaryDirectory(prefix="ugncl-loader-bench-") as tmp:
        folder = Path(tmp) / "images"
        paths = write_flickr_like_jpegs([folder / f"{i:05d}.jpg" for i in range(args.images)])
        kb = sum(p.stat().st_size for p in paths) / len(paths) / 1e3
        started = time.process_time()
        cache = open_pixel_cache(paths, split_transform(transform), Path(tmp) / "cache")
        build_ms = (time.process_time() - started) * 1e3 / len(paths)
        n = len(paths)
        before, after, tokens = [], [], []
        for _ in range(args.repeats):  # interleaved: the shared machine's load hits both
            before.append(_cpu_ms_per_item(lambda i: transform(load_rgb(paths[i])), n))
            after.append(_cpu_ms_per_item(cache, n))
            tokens.append(_cpu_ms_per_item(lambda i: tokenizer([caption]), n))
        shape = list(cache.shape[1:])
    b, a, t = (float(np.median(v)) for v in (before, after, tokens))
    return {
        "images": n, "jpeg_kb_mean": round(kb, 1), "size": args.size, "threads": 1,
        "image_ms_before": round(b, 3), "image_ms_after": round(a, 3),
        "tokenize_ms": round(t, 3),
        "sample_ms_before": round(b + t, 3), "sample_ms_after": round(a + t, 3),
        "samples_per_s_per_worker_before": round(1e3 / (b + t), 1),
        "samples_per_s_per_worker_after": round(1e3 / (a + t), 1),
        "cache_build_ms_per_image": round(build_ms, 3), "cached_shape": shape,
        "batch_bytes_256_before": 256 * 4 * int(np.prod(shape)),
        "batch_bytes_256_after": 256 * int(np.prod(shape)),
    }  # fmt: skip


@cli_main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    c = sub.add_parser("clip", help="CLIP backbone training throughput (CPU)")
    c.add_argument("--model", default="ugncl-tiny")
    c.add_argument("--batch-size", type=int, default=32)
    c.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    c.add_argument("--steps", type=int, default=20, help="timed steps per thread count")
    c.add_argument("--warmup", type=int, default=3)
    p = sub.add_parser("scoring", help="batched vs per-caption SGRAF scoring")
    p.add_argument("--json", action="store_true", help="print one JSON object only")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--quick", action="store_true", help="small sizes for a CPU smoke run")
    p.add_argument("--mode", default="fp32", choices=["fp32", "tf32", "bf16"])
    p.add_argument("--heads", default="sgr,saf")
    p.add_argument("--shard-images", type=int, default=None)
    p.add_argument("--shard-captions", type=int, default=None)
    p.add_argument(
        "--reference-captions",
        type=int,
        default=None,
        help="captions of the shard case timed with the reference loop",
    )
    p.add_argument("--memory-budget-mb", type=int, default=512)
    p.add_argument("--repeats", type=int, default=2, help="interleaved repeats, batch case")
    p.add_argument("--shard-repeats", type=int, default=1, help="repeats, shard case")
    f = sub.add_parser("feature-open", help="feature file open time, first vs recorded scan")
    f.add_argument("--path", type=Path, required=True, help="file to write (deleted after)")
    f.add_argument("--images", type=int, default=18000, help="images of 36 x 2048 float32")
    m = sub.add_parser("eval-memory", help="encoding memory of a COCO-5K-sized evaluation")
    m.add_argument("--make", type=Path, default=None, help="write the synthetic split here")
    m.add_argument("--data", type=Path, default=None, help="measure on this split")
    m.add_argument("--images", type=int, default=5000)
    m.add_argument("--batch-size", type=int, default=128)
    m.add_argument("--shard-images", type=int, default=1000)
    m.add_argument("--shard-captions", type=int, default=128)
    m.add_argument("--held", action="store_true", help="hold all image embeddings (old path)")
    mm = sub.add_parser("methods", help="seconds per epoch of NPC/SDD/OSA relative to infonce")
    mm.add_argument("--methods", nargs="+", default=["infonce", "npc", "sdd", "osa"])
    mm.add_argument("--rounds", type=int, default=2)
    mm.add_argument("--set", nargs="*", default=[], help="config overrides KEY=VALUE")
    la = sub.add_parser("launches", help="operator launches of a UGNCL step and COCO-5K eval")
    la.add_argument("--free-gib", type=float, default=78.0, help="device memory free (GiB)")
    la.add_argument("--batch", type=int, default=128)
    mb = sub.add_parser("merge-bytes", help="bytes per merge_rows of a per-sample table")
    mb.add_argument("--samples", type=int, default=145_000, help="rows (Flickr30K captions)")
    mb.add_argument("--row", type=int, default=1, help="float32 values per row")
    mb.add_argument("--world", type=int, default=2, help="ranks")
    ms = sub.add_parser("method-steps", help="CPU seconds per training step of each method")
    ms.add_argument("--methods", nargs="+", default=["infonce", "npc", "sdd", "osa"])
    ms.add_argument("--steps", type=int, default=5, help="timed steps (after one warm-up step)")
    ms.add_argument("--threads", type=int, default=1)
    ms.add_argument("--set", nargs="*", default=[], help="config overrides KEY=VALUE")
    lo = sub.add_parser("loader", help="CPU ms per CLIP training sample, PIL vs pixel cache")
    lo.add_argument("--images", type=int, default=200, help="JPEGs written and read")
    lo.add_argument("--size", type=int, default=224, help="the model's input size (px)")
    lo.add_argument("--repeats", type=int, default=3, help="interleaved repeats (median)")
    args = parser.parse_args(argv)
    if args.what == "loader":
        if min(args.images, args.size, args.repeats) < 1:
            parser.error("loader needs --images, --size and --repeats of at least 1")
        print(json.dumps(bench_loader(args), indent=2))
        return 0
    if args.what == "merge-bytes":
        print(json.dumps(bench_merge_bytes(args)))
        return 0
    if args.what == "launches":
        print(json.dumps(bench_launches(args), indent=2))
        return 0
    if args.what == "method-steps":
        print(json.dumps(bench_method_steps(args), indent=2))
        return 0
    if args.what == "methods":
        print(json.dumps(bench_methods(args), indent=2))
        return 0
    if args.what == "eval-memory":
        if (args.make is None) == (args.data is None):
            parser.error("eval-memory needs exactly one of --make DIR or --data DIR")
        if args.make is not None:
            print(json.dumps(make_eval_memory_data(args.make, args.images)))
        else:
            print(json.dumps(bench_eval_memory(args)))
        return 0
    if args.what == "feature-open":
        print(json.dumps(bench_feature_open(args.path, args.images)))
        return 0
    if args.what == "clip":
        print(json.dumps(bench_clip(args), indent=2))
        return 0
    report = bench_scoring(args)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for r in report["results"]:
            print(
                f"{r['head']:3s} {r['case']:16s} batched {r['batched_pairs_per_s']:>10.0f} pairs/s"
                f"  reference {r['reference_pairs_per_s']:>10.0f} pairs/s  x{r['speedup']:.2f}"
                f"  max|diff| {r['max_abs_diff']:.2e}"
                f"  peak {r['peak_memory_bytes'] / 2**20:.0f} MiB"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
