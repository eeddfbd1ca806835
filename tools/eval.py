"""Evaluate one or more checkpoints: ``python tools/eval.py CKPT [CKPT ...]``.

Each split is encoded once per model and scored in shards; several checkpoints average their
score matrices (an SGR and an SAF model = "SGRAF"; two UGNCL models = UGNCL*). Data settings
come from the first checkpoint's saved config; ``--data-root``/``--name``/``--vocab`` override
them (needed for checkpoints converted from the released SGRAF/NCR/UGNCL files).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import torch

from precomputed.errors import UserError
from ugncl.build import BACKBONES, build_method, model_from_checkpoint
from ugncl.config import Config, ConfigError, DataConfig, build_config
from ugncl.engine.checkpoint import CheckpointError, load_checkpoint
from ugncl.engine.device import select_device
from ugncl.evaluation import evaluate_models, metric_table
from ugncl.experiment import MissingDataError
from ugncl.precomputed_data import as_eval_data


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "checkpoints", nargs="+", help="checkpoint files (best.pt, converted files)"
    )
    parser.add_argument("--split", default=None, help="split to rank (default: data.test_split)")
    parser.add_argument("--data-root", default=None, help="folder holding <name>/")
    parser.add_argument("--name", default=None, help="dataset folder name, e.g. f30k_precomp")
    parser.add_argument("--vocab", default=None, help="SCAN vocab JSON")
    parser.add_argument("--captions-per-image", type=int, default=None)
    parser.add_argument(
        "--protocol", choices=["1k", "coco5fold", "full"], default=None,
        help="default: COCO testall -> coco5fold, F30K/CC152K test -> 1k, else full",
    )  # fmt: skip
    parser.add_argument(
        "--eval-score", choices=["evidence", "evidence_mean_exp", "sigmoid", "raw"], default=None,
        help="per-view score before averaging views (default: the checkpoint's eval.eval_score)",
    )  # fmt: skip
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--json", dest="json_out", default=None, help="write results as JSON")
    return parser.parse_args(argv)


def data_config(state: dict, args: argparse.Namespace) -> tuple[DataConfig, Config]:
    """Data settings of the checkpoint's config with the command-line overrides applied, and
    the config whose method supplies the retrieval score (``--eval-score`` applied)."""
    saved = state.get("config")
    config = build_config(saved) if saved else build_config({})
    data = config.data
    overrides = {
        "root": args.data_root,
        "name": args.name,
        "vocab": args.vocab,
        "captions_per_image": args.captions_per_image,
    }
    data = dataclasses.replace(data, **{k: v for k, v in overrides.items() if v is not None})
    if not saved and (args.data_root is None or args.name is None):
        raise ConfigError(
            f"{args.checkpoints[0]} carries no training config; pass --data-root, --name and "
            "--vocab (and --captions-per-image 1 for CC152K)"
        )
    if args.eval_score:
        eval_config = dataclasses.replace(config.eval, eval_score=args.eval_score)
        config = dataclasses.replace(config, eval=eval_config)
    return data, config


def load_model(path: str, device: torch.device) -> tuple[torch.nn.Module, dict]:
    state = load_checkpoint(path, map_location="cpu")
    return model_from_checkpoint(state).to(device), state


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    device = select_device(args.device)
    try:
        loaded = [load_model(path, device) for path in args.checkpoints]
        data, config = data_config(loaded[0][1], args)
        model, state = loaded[0]
        spec = BACKBONES[state.get("backbone") or "sgraf"]
        split = as_eval_data(spec.open_eval_split(data, args.split or data.test_split, model))
    except (CheckpointError, ConfigError, MissingDataError, UserError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    eval_score = config.eval.eval_score
    results, _ = evaluate_models(
        [model for model, _ in loaded],
        split,
        protocol=args.protocol,
        score=build_method(config).retrieval_score,
        batch_size=args.batch_size,
        device=device,
    )
    print(f"{data.name}/{split.split}, {len(loaded)} model(s), eval_score={eval_score}")
    print(metric_table(results))
    if args.json_out:
        payload = {
            "checkpoints": args.checkpoints,
            "dataset": data.name,
            "split": split.split,
            "eval_score": eval_score,
            "results": results,
        }
        Path(args.json_out).write_text(json.dumps(payload, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
