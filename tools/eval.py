"""Evaluate one or more checkpoints: ``python tools/eval.py CKPT [CKPT ...]``.

A CLIP weights file of this package (``tools/pretrain_clip.py``'s stand-in) evaluates zero-shot:
``python tools/eval.py data/synthetic/clip/ugncl-tiny-pretrained.pt --data-root data/synthetic
--name synthetic_clip --eval-score raw``. Each split is encoded once per model and scored in
shards; several checkpoints average their score matrices (an SGR and an SAF model = "SGRAF";
two UGNCL models = UGNCL*; a DECL saf run and a DECL sgr run = DECL-SGRAF, their evidence
averaged; an NCR checkpoint, trained here or a released pair converted with ``--which
both``, averages its two networks' score matrices, as NCR evaluates). Data settings come from
the first checkpoint's saved config;
``--data-root``/``--name``/``--vocab`` override them (needed for checkpoints converted from the
released SGRAF/NCR/UGNCL files). Under ``torchrun --nproc_per_node N`` the scoring is split
over the N processes (docs/distributed.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import torch

from precomputed.errors import InvalidSettingError
from ugncl.core.config import Config, DataConfig
from ugncl.core.engine import distributed
from ugncl.core.engine.device import select_device
from ugncl.core.evaluation import (
    PROTOCOLS,
    as_eval_data,
    default_protocol,
    evaluate_models,
    metric_table,
)
from ugncl.core.method import Method
from ugncl.core.metrics import TIE_RULES
from ugncl.run.build import BACKBONES, build_method, check_checkpoint, model_from_file
from ugncl.run.cli import check_writable, cli_main
from ugncl.run.config import ConfigError, build_config, choices

COCO_TESTALL_IMAGES = 5000


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
        "--protocol", choices=PROTOCOLS, default=None,
        help="default: COCO testall -> coco5fold, F30K/CC152K test -> 1k, else full",
    )  # fmt: skip
    parser.add_argument(
        "--eval-score", choices=choices()["eval.eval_score"], default=None,
        help="per-view score before averaging views (default: the checkpoint's eval.eval_score)",
    )  # fmt: skip
    parser.add_argument(
        "--ties", choices=TIE_RULES, default=TIE_RULES[0],
        help="tie rule: random = expected ranks under random tie-breaking (a collapsed model "
        "scores chance), pessimistic, release = the released code's argsort order, optimistic",
    )  # fmt: skip
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument(
        "--precision", choices=("fp32", "bf16", "tf32"), default="fp32",
        help="scoring precision (eval.precision): fp32, or bf16 / tf32 to compare with it",
    )  # fmt: skip
    parser.add_argument("--json", dest="json_out", default=None, help="write results as JSON")
    return parser.parse_args(argv)


def data_config(state: dict, args: argparse.Namespace) -> tuple[DataConfig, Config]:
    """Data settings of the checkpoint's config with the command-line overrides applied, and
    the config whose method supplies the retrieval score (``--eval-score`` applied)."""
    saved = state.get("config")
    # A converted file carries no training config: an NCR pair names its method and score, a
    # released DECL file its evidence temperature.
    config = (
        build_config(saved)
        if saved
        else build_config(state.get("method_config") or released_method(state))
    )
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
            "--vocab (and --captions-per-image 1 for CC152K); for CLIP weights --data-root and "
            "--name (e.g. data/synthetic and synthetic_clip)"
        )
    if args.eval_score:
        eval_config = dataclasses.replace(config.eval, eval_score=args.eval_score)
        config = dataclasses.replace(config, eval=eval_config)
    return data, config


def released_method(state: dict) -> dict:
    """Config overrides for a converted released file without a training config: DECL's
    (``tools/convert_checkpoint.py`` keeps its ``opt``) ranks by its evidence at its own
    ``tau`` (an untyped option of the release: a string when given on its command line);
    others by the defaults."""
    source = state.get("source") or {}
    if source.get("format") != "decl":
        return {}
    tau = float((source.get("opt") or {}).get("tau", 0.1))
    return {"method": {"name": "decl", "decl": {"tau": tau}}}


def evaluated_models(
    method: Method, model: torch.nn.Module, state: dict, device: torch.device
) -> list[torch.nn.Module]:
    """The models a checkpoint's score matrices come from: the model, and where the
    checkpoint's method evaluates with more (``Method.evaluation_models``, e.g. NCR's second
    network) those too, loaded from its method state."""
    own = type(method).evaluation_models is not Method.evaluation_models
    if not own or state.get("method") != method.name or "method_state" not in state:
        return [model]
    method.prepare(model, 0)
    method.load_state_dict(state["method_state"])
    method.to(device)
    return method.evaluation_models(model)


def load_model(path: str, device: torch.device) -> tuple[torch.nn.Module, dict]:
    """A training checkpoint, or a CLIP weights file of this package (zero-shot; no saved
    config: pass --data-root and --name)."""
    model, state = model_from_file(path)
    return model.to(device), state


@cli_main
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.batch_size < 1:
        raise InvalidSettingError(f"--batch-size must be >= 1, got {args.batch_size}")
    if args.json_out:
        check_writable(args.json_out, "--json file")
    # torchrun --nproc_per_node N tools/eval.py ...: each process scores a block of image rows.
    env, device_name = distributed.init_from_env(args.device)
    device = select_device(device_name)
    loaded = [load_model(path, device) for path in args.checkpoints]
    data, config = data_config(loaded[0][1], args)
    model = loaded[0][0]
    backbone = getattr(model, "backbone", "") or "sgraf"
    for path, (other, _) in zip(args.checkpoints[1:], loaded[1:]):
        if (getattr(other, "backbone", "") or "sgraf") != backbone:
            raise InvalidSettingError(
                f"{path} is a {getattr(other, 'backbone', '') or 'sgraf'} model but "
                f"{args.checkpoints[0]} is a {backbone} model: an ensemble averages the score "
                "matrices of models reading the same inputs; evaluate them separately"
            )
    for path, (_, state) in zip(args.checkpoints, loaded):
        check_checkpoint(backbone, data, state, path)  # e.g. SGRAF: the same vocabulary
    split = as_eval_data(
        BACKBONES[backbone].open_eval_split(data, args.split or data.test_split, model)
    )
    num_images = len(split.caption_to_image) // max(1, data.captions_per_image)
    protocol = args.protocol or default_protocol(data.name, split.split, num_images)
    if protocol == "coco5fold" and num_images != COCO_TESTALL_IMAGES:
        raise InvalidSettingError(
            f"--protocol coco5fold needs the {COCO_TESTALL_IMAGES} images of COCO testall; "
            f"{data.name}/{split.split} has {num_images}. Use --protocol full (or 1k: the "
            "same whole-matrix ranking, under the name a training run records for a test split)"
        )
    # "1k" ranks the whole matrix, as "full" does; on another image count training runs it
    # with a warning (evaluate_scores), so the checkpoint's own test protocol is accepted here.
    eval_score = config.eval.eval_score
    models = [m for model, state in loaded for m in evaluated_models(
        build_method(config), model, state, device)]  # fmt: skip
    method = build_method(config)
    results, _ = evaluate_models(
        models,
        split,
        protocol=protocol,
        score=method.retrieval_score,
        unit_scores=method.reads_unit_scores,
        batch_size=args.batch_size,
        device=device,
        ties=args.ties,
        precision=args.precision,
    )
    if env.enabled:
        distributed.shutdown()
        if not env.is_main:  # rank 0 prints and writes for the job
            return 0
    print(
        f"{data.name}/{split.split}, {len(models)} model(s), eval_score={eval_score}, "
        f"ties={args.ties}"
    )
    print(metric_table(results))
    if args.json_out:
        payload = {
            "checkpoints": args.checkpoints,
            "dataset": data.name,
            "split": split.split,
            "eval_score": eval_score,
            "ties": args.ties,
            "precision": args.precision,
            "results": results,
        }
        Path(args.json_out).write_text(json.dumps(payload, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
