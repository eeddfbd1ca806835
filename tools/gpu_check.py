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
* ``bench``: throughput rows on random inputs already on the device (not the real loops: no
  data loading, W = 1, every caption 12 words): an SGRAF training step at the paper's sizes
  (SGR, W = 1, embed 1024, sim 256, word 300, 36 x 2048 regions, batch 128, triplet, amp
  auto); COCO-5K
  all-pairs scoring (5,000 images x 25,000 captions, random embeddings, paper-size SAF; pairs/s
  and the seconds of the whole matrix); CLIP ViT-B/32 training pairs/s at batch 256 with random
  weights (symmetric InfoNCE, fused AdamW, amp auto).

Without CUDA it says so and exits 0. ``--device cpu --quick`` runs every check on the CPU at
toy sizes (what the tests run, so the table code is exercised everywhere).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

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
    ) -> None:
        self.section, self.case, self.status = section, case, status
        self.value, self.unit, self.note = value, unit, note


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _guard(section: str, case: str, fn: Callable[..., Row], *args: Any) -> Row:
    """Run one check; an exception becomes a FAIL row with its last line (the table goes on)."""
    try:
        return fn(*args)
    except Exception as err:  # a failing cell is a result of the check, not a crash of it
        last = traceback.format_exception_only(type(err), err)[-1].strip()
        return Row(section, case, "FAIL", note=last[:160])


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
    from ugncl.core.engine.context import StepContext
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
        )  # fmt: skip
        ctx = trainer.context()
        method_obj.setup(ctx)
        method_obj.on_epoch_start(ctx, 0)
        subset = method_obj.epoch_samples(ctx, 0)
        loader, _ = trainer._training_batches(0, subset)
        model.train()
        times, loss = [], float("nan")
        for i, batch in enumerate(loader):
            if i > args.steps:
                break
            lr = float(optimizer.param_groups[0]["lr"])
            _sync(device)
            t0 = time.perf_counter()
            terms = trainer._train_step(batch.to(device), StepContext(0, i, False, device, lr))
            _sync(device)
            times.append(time.perf_counter() - t0)
            loss = terms["loss"]
    amp = "fp32" if precision.autocast_dtype is None else str(precision.autocast_dtype)[6:]
    ms = 1000 * sum(times[1:]) / max(len(times) - 1, 1)  # the first step warms up
    return Row("step", f"{method} x {backbone}", "ok", ms, "ms/step",
               f"amp {amp}, loss {loss:.4g}")  # fmt: skip


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
    cells = [["section", "case", "status", "value", "unit", "note"]]
    for r in rows:
        value = "" if r.value is None else f"{r.value:,.1f}"
        cells.append([r.section, r.case, r.status, value, r.unit, r.note])
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
    if not args.no_bench:
        rows.append(_guard("bench", "SGRAF step", bench_sgraf_step, args))
        rows.append(_guard("bench", "scoring", bench_coco_scoring, args))
        rows.append(_guard("bench", "CLIP", bench_clip, args))
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
    parser.add_argument("--no-bench", action="store_true", help="skip the throughput rows")
    parser.add_argument("--json", action="store_true", help="also print the rows as JSON")
    args = parser.parse_args(argv)
    if args.bench_steps is None:
        args.bench_steps = 2 if args.quick else 10
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(
            f"gpu_check: CUDA is not available on this machine (torch {torch.__version__}, "
            f"CUDA build {torch.version.cuda or 'none'}); nothing to check. "
            "Run it on a GPU machine, or exercise the checks here with --device cpu --quick."
        )
        return 0
    rows = run_checks(args)
    print(format_table(rows, f"gpu_check on {machine(device)}"))
    if args.json:
        print(json.dumps([r.__dict__ for r in rows]))
    failed = [r for r in rows if r.status == "FAIL"]
    if failed:
        print(f"{len(failed)} check(s) failed", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
