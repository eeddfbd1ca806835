"""Audit a UGNCL run's division for memorisation: ``python tools/audit_division.py RUN_DIR``.

Divides the run's training pairs with its checkpoint (eval mode, the run's division rule and
batch size, Eq. 16's lambda at the checkpoint's step) twice, in the same batches: as trained
(the run's ``noise_index.npy``), and with every noisy caption re-paired with an image it was
never trained with (``ugncl.run.division_audit``). Prints the noise-detection F1 of both
and the
share of noisy pairs kept as clean: what rises from the fresh row to the trained one is what
the model memorised. Works on any UGNCL run of the precomputed track (synthetic world,
Flickr30K, MS-COCO, CC152K).

``--data-root DIR`` divides the same pairs on the features of another data root with the same
training captions, e.g. the run's synthetic world with every image's nuisance vector drawn
anew (``tools/make_synthetic.py --redraw-nuisance SRC --out DIR``): the noisy pairs kept
there no more are those learnt through their image's identity.

``--places`` (a synthetic world only) breaks the trained pairs' division down by the place
their caption names: the paired image's, another, or none
(:mod:`precomputed.synthetic.places`). A model that keeps nearly every noisy pair whose caption
names its image's place, and few others, divides by the place word alone.

``--draws R`` also gives the soft labels of the trained pairs over R batch orders: their
ROC-AUC (clean vs noisy) in one order and averaged over the R, and the clean share of the
top-ranked pairs (as many as are clean). An average that separates no better than one order
says the division's errors are the pairs' (the model's scores), not their batches'.

``--spread`` asks whether the model's scores still depend on the pair (a run that learns
nothing): the scores' spread and the diagonal's margin within a batch, and on SGRAF the
spread over the batch's pairs of the similarity vector the score is read from
(:func:`ugncl.run.division_audit.score_spread`). Scores of one value with a vector that
still varies are saturated; a vector of one value is a head that no longer reads its input.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from precomputed.dataset import PrecomputedSplit
from precomputed.errors import UserError
from precomputed.noise import load_noise_index
from precomputed.synthetic.places import PLACE_CLAIM_NAMES, read_place_claims
from ugncl.core.engine.checkpoint import load_checkpoint
from ugncl.core.engine.device import select_device
from ugncl.methods.ugncl.division import BatchDivision
from ugncl.run.build import build_method, model_from_checkpoint, open_run_data
from ugncl.run.cli import cli_main
from ugncl.run.config import ConfigError
from ugncl.run.division_audit import (
    audit_division,
    divide_split,
    label_separation,
    score_spread,
    soft_labels_split,
)
from ugncl.run.training import load_resume_config

__all__ = ["main"]


class AuditInputError(UserError, FileNotFoundError):
    """The run directory lacks what the audit reads."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("run", metavar="RUN_DIR", help="a UGNCL run directory (runs/NAME)")
    parser.add_argument(
        "--checkpoint", default=None,
        help="checkpoint to audit (default: RUN_DIR/checkpoints/last.pt)",
    )  # fmt: skip
    parser.add_argument(
        "--batch-size", type=int, default=None,
        help="rivals per division batch (default: the run's train.batch_size)",
    )  # fmt: skip
    parser.add_argument(
        "--data-root", default=None, metavar="DIR",
        help="read the features from this data root instead of the run's data.root (same "
        "dataset name and training captions)",
    )  # fmt: skip
    parser.add_argument(
        "--null-level", type=float, default=None, metavar="LEVEL",
        help="divide with method.ugncl.null_level=LEVEL instead of the run's (the hard-clean "
        "threshold from the batch's mismatched pairs, docs/methods/ugncl.md)",
    )  # fmt: skip
    parser.add_argument(
        "--draws", type=int, default=None, metavar="R",
        help="also rank the trained pairs by their soft labels in R batch orders (seeds SEED "
        "to SEED + R - 1): ROC-AUC of one order and of the mean",
    )  # fmt: skip
    parser.add_argument(
        "--spread", action="store_true",
        help="also report whether the scores depend on the pair: their spread within a "
        "batch, and on SGRAF the spread of the similarity vector they are read from",
    )  # fmt: skip
    parser.add_argument(
        "--places", action="store_true",
        help="break the division down by the place the caption names (synthetic worlds)",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="batch order and fresh pairing")
    parser.add_argument("--device", default="cpu", help="auto | cpu | cuda | cuda:N")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    return parser.parse_args(argv)


def _run_files(run: Path, checkpoint: str | None) -> tuple[Path, Path]:
    if not (run / "config.yaml").is_file():
        raise AuditInputError(
            f"{run} is not a run directory (no config.yaml); pass the folder tools/train.py "
            "wrote, e.g. runs/demo-s1t1/ugncl_synthetic"
        )
    ckpt = Path(checkpoint) if checkpoint else run / "checkpoints" / "last.pt"
    if not ckpt.is_file():
        raise AuditInputError(
            f"checkpoint {ckpt} does not exist; train the run first or pass --checkpoint"
        )
    noise = run / "noise_index.npy"
    if not noise.is_file():
        raise AuditInputError(
            f"{noise} does not exist, so the pairs the run trained on are unknown; audit a "
            "run directory written by tools/train.py"
        )
    return ckpt, noise


def _other_root(config: Any, data: Any, root: str) -> Any:
    """The run's data opened from ``root``; its training captions must be the run's."""
    if not Path(root).is_dir():
        raise AuditInputError(f"--data-root {root} is not a folder")
    other = open_run_data(
        dataclasses.replace(config, data=dataclasses.replace(config.data, root=root))
    )
    if other.train_captions() != data.train_captions():
        raise ConfigError(
            f"the training captions under --data-root {root} differ from the run's "
            f"({config.data.root}); pass a copy of the run's world, e.g. one written by "
            "tools/make_synthetic.py --redraw-nuisance"
        )
    return other


def _training_split(data: Any, noise: Path) -> PrecomputedSplit:
    train = getattr(data, "train", None)
    if not isinstance(train, PrecomputedSplit):
        raise ConfigError(
            "the division audit reads precomputed region features (model.backbone: sgraf); "
            "this run's data is another track"
        )
    index = load_noise_index(
        noise, num_images=train.num_images, captions_per_image=train.captions_per_image
    )
    return train.with_noise(index)


def _place_groups(root: str, source: str, split: PrecomputedSplit) -> dict[str, np.ndarray]:
    """The trained pairs grouped by the place their caption names (a synthetic world's files)."""
    if not (Path(root) / source / "world.json").is_file():
        raise AuditInputError(
            f"--places reads the scenes behind a synthetic world's images, and {root}/{source} "
            "has no world.json; use it on a world tools/make_synthetic.py wrote"
        )
    claims = read_place_claims(root, source, split.image_index)
    return {name: claims == code for code, name in PLACE_CLAIM_NAMES.items()}


@cli_main
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.batch_size is not None and args.batch_size < 2:
        raise ConfigError(f"--batch-size must be >= 2 (a pair and a rival), got {args.batch_size}")
    if args.draws is not None and args.draws < 1:
        raise ConfigError(f"--draws must be >= 1 (batch orders to average), got {args.draws}")
    if args.threads is not None:
        if args.threads < 1:
            raise ConfigError(f"--threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    run = Path(args.run)
    ckpt, noise = _run_files(run, args.checkpoint)
    config = load_resume_config(run)
    if config.method.name != "ugncl":
        raise ConfigError(
            f"{run} trained method {config.method.name!r}; the division audit needs a UGNCL "
            "run (method.name: ugncl)"
        )
    if args.null_level is not None:
        ugncl = dataclasses.replace(config.method.ugncl, null_level=args.null_level)
        config = dataclasses.replace(config, method=dataclasses.replace(config.method, ugncl=ugncl))
    data = open_run_data(config)
    if args.data_root is not None:
        data = _other_root(config, data, args.data_root)
    split = _training_split(data, noise)
    state = load_checkpoint(ckpt, map_location="cpu")
    data.check_checkpoint(state, str(ckpt))
    device = select_device(args.device)
    model = model_from_checkpoint(state).to(device)
    method = build_method(config)
    method.load_state_dict(state["method_state"])  # lambda_clock: division reads its start
    K = args.batch_size or config.train.batch_size
    # The hardness at the checkpoint: its step, and (lambda_clock: epoch) the next epoch's index.
    lam = method.hardness(K, int(state.get("global_step", 0)), int(state.get("epoch", 0)))

    def divide(raw: torch.Tensor) -> BatchDivision:
        return method.divide(model.unit_scores(raw), lam)

    divide_pairs = functools.partial(
        divide_split, model, lambda raw: divide(raw).sets, batch_size=K, seed=args.seed,
        device=device,
    )  # fmt: skip
    groups = (
        _place_groups(args.data_root or config.data.root, config.data.name, split)
        if args.places
        else None
    )
    result = audit_division(split, divide_pairs, seed=args.seed, groups=groups)
    if args.draws is not None:

        def labels(seed: int) -> np.ndarray:
            return soft_labels_split(
                model,
                lambda raw: divide(raw).soft_label,
                split,
                batch_size=K,
                seed=seed,
                device=device,
            )

        result["soft_labels"] = label_separation(
            labels, split.clean, draws=args.draws, seed=args.seed
        )
    if args.spread:
        head = getattr(getattr(model, "sim_enc", None), "sim_eval_w", None)  # SGRAF's last layer
        result["spread"] = score_spread(
            model, split, batch_size=K, seed=args.seed, device=device, head_input=head
        )
    header = {"run": str(run), "checkpoint": str(ckpt), "batch_size": K, "lambda": lam,
              "pairs": split.num_captions, "noisy": int((~split.clean).sum()),
              "data_root": args.data_root or config.data.root,
              "null_level": config.method.ugncl.null_level}  # fmt: skip
    if args.json:
        print(json.dumps({**header, **result}))
    else:
        print(_table(header, result))
    return 0


def _fmt(value: float | None) -> str:
    return "    -" if value is None else f"{value:5.3f}"


def _table(header: dict[str, Any], result: dict[str, Any]) -> str:
    lines = [
        f"division audit of {header['run']} ({Path(header['checkpoint']).name}, K "
        f"{header['batch_size']}, lambda {header['lambda']}, null level {header['null_level']}; "
        f"{header['pairs']} pairs, "
        f"{header['noisy']} noisy; features of {header['data_root']})",
        "                  noisy F1  precision  recall  noisy kept as clean",
    ]
    for name, label in (("trained", "trained pairs"), ("fresh", "fresh noise")):
        r = result[name]
        lines.append(
            f"  {label:<15} {_fmt(r['noisy_f1'])}     {_fmt(r['noisy_precision'])}    "
            f"{_fmt(r['noisy_recall'])}   {_fmt(r['noisy_kept'])}"
        )
    lines.append(f"  memorised: {_fmt(result['memorised']).strip()} of the noisy pairs kept as "
                 "clean as trained, not when fresh")  # fmt: skip
    for name, r in result["trained"].get("groups", {}).items():
        lines.append(
            f"  caption {name:<24} kept as clean: clean pairs {_fmt(r['clean_kept'])} of "
            f"{r['clean']:5d}, noisy pairs {_fmt(r['noisy_kept'])} of {r['noisy']:5d}"
        )
    labels = result.get("soft_labels")
    if labels is not None:
        lines.append(
            f"  soft labels of the trained pairs, ROC-AUC clean vs noisy: one batch order "
            f"{_fmt(labels['auc_one_order']).strip()}, mean of {labels['draws']} "
            f"{_fmt(labels['auc_mean']).strip()}; clean share of the top-ranked "
            f"{_fmt(labels['top_clean_share']).strip()}"
        )
    spread = result.get("spread")
    if spread is not None:
        lines.append(
            f"  scores within a batch: mean {spread['score_mean']:.3f}, sd "
            f"{spread['score_std']:.4f}, diagonal minus mean {spread['margin']:.4f}"
        )
        if spread["input_spread"] is not None:
            lines.append(
                f"  similarity vector: spread over the pairs {spread['input_spread']:.4f} of "
                f"its magnitude, norm {spread['input_norm']:.3f}"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
