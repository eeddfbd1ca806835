"""Pretrain the tiny CLIP on a clean pool of synthetic scenes (the stand-in for web data).

``python tools/pretrain_clip.py [--data data/synthetic] [--steps 5000] [--pool 20000]``

Draws a pool of scenes from the synthetic world's generators on a stream disjoint from the
train/dev/test splits (scenes equal to a split scene are redrawn), renders them with
the world's renderer (``precomputed.synthetic.render.renderer_for``), trains ``ugncl-tiny`` with
symmetric InfoNCE, writes the local pretrained checkpoint the synthetic CLIP configs point at
(``<data>/clip/ugncl-tiny-pretrained.pt``, weights_only-loadable) with a ``.json`` record
beside it, and prints the record: pool, steps, wall time, pairs/s and the zero-shot retrieval
metrics on the test split.

``--shift renamed --from <weights>`` makes the renamed pool's stand-in from a stand-in of the
world's unshifted pool in seconds, without pretraining again (exact:
``ugncl.backbones.clip.pretrain.exchange_token_rows``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from precomputed.synthetic.render import renderer_for
from ugncl.backbones.clip.adapter import build_clip, save_clip_weights
from ugncl.backbones.clip.loading import WeightsError
from ugncl.backbones.clip.models import TINY_MODEL
from ugncl.backbones.clip.pretrain import (
    POOL_SHIFT,
    POOL_SIZE,
    SHIFTS,
    PretrainConfig,
    load_world_settings,
    pretrain_on_world,
    rename_stand_in,
)
from ugncl.run.cli import check_writable, cli_main

DEFAULT_NAME = f"clip/{TINY_MODEL}-pretrained.pt"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    d = PretrainConfig()
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--data", default="data/synthetic", help="synthetic world root")
    p.add_argument("--out", default=None, help=f"checkpoint path (default <data>/{DEFAULT_NAME})")
    p.add_argument("--model", default=TINY_MODEL, help="open_clip architecture")
    p.add_argument("--pool", type=int, default=POOL_SIZE, help="pool images (5 captions each)")
    p.add_argument("--offset", type=int, default=0, help="pool stream offset (another pool)")
    p.add_argument(
        "--shift",
        default=POOL_SHIFT,
        choices=SHIFTS,
        help="how the pool's captions depart from the world's (see pretrain.py)",
    )
    p.add_argument(
        "--from",
        dest="base",
        default=None,
        help="with --shift renamed: the world's unshifted stand-in to rename, no pretraining",
    )
    p.add_argument("--steps", type=int, default=d.steps, help="optimiser steps")
    p.add_argument("--batch-size", type=int, default=d.batch_size)
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--weight-decay", type=float, default=d.weight_decay)
    p.add_argument("--warmup", type=int, default=d.warmup_steps, help="warm-up steps")
    p.add_argument("--seed", type=int, default=d.seed, help="init and batch-order seed")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--eval-split", default="test", choices=["train", "dev", "test", "none"])
    p.add_argument("--log-every", type=int, default=d.log_every)
    return p.parse_args(argv)


@cli_main
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(args.out) if args.out else Path(args.data) / DEFAULT_NAME
    check_writable(out, "output weights file")  # before the training, not after it
    check_writable(out.with_suffix(".json"), "output record")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    out = Path(args.out) if args.out else Path(args.data) / DEFAULT_NAME
    cfg = PretrainConfig(
        steps=args.steps, batch_size=args.batch_size, lr=args.lr,
        weight_decay=args.weight_decay, warmup_steps=args.warmup, seed=args.seed,
        log_every=args.log_every,
    )  # fmt: skip
    if args.base is not None and args.shift != "renamed":
        print(f"error: --from renames a stand-in; add --shift renamed (not {args.shift})",
              file=sys.stderr)  # fmt: skip
        return 2
    torch.manual_seed(args.seed)
    eval_split = None if args.eval_split == "none" else args.eval_split
    try:
        render = renderer_for(load_world_settings(args.data).get("generator"))
        if args.base is not None:
            model = build_clip(args.model, pretrained=args.base)
            base = torch.load(args.base, map_location="cpu", weights_only=True)
            record = rename_stand_in(
                model, base.get("pretraining") or {}, args.data, render, eval_split=eval_split
            )
            record["renamed_from"] = str(args.base)
        else:
            model = build_clip(args.model)
            record = pretrain_on_world(
                model, args.data, render, cfg, pool_size=args.pool, offset=args.offset,
                shift=args.shift, eval_split=eval_split,
                log=lambda rec: print(json.dumps(rec), flush=True),
            )  # fmt: skip
            record["threads"] = torch.get_num_threads()
    except (FileNotFoundError, ValueError, WeightsError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    save_clip_weights(model, out, pretraining=json.loads(json.dumps(record)))
    out.with_suffix(".json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({"wrote": str(out), **record}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
