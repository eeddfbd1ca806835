"""Benchmark of the NPC/SDD memory-bank construction (blocked nearest clean pair).

``python tools/bench_memory_bank.py [--images 6000] [--captions-per-image 5] [--dim 512]
[--clean 0.5] [--device cpu] [--query-block 4096] [--key-block 16384] [--json]``

Random unit embeddings stand in for a model's; the search cost does not depend on their values.
Prints seconds for :func:`ugncl.methods.weighted.memory_bank.build_memory_bank`, the number of
query x
key scores computed, and the peak score-block memory the block sizes allow (the full
query x key matrix is never built).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from ugncl.methods.weighted.memory_bank import build_memory_bank


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=6000)
    p.add_argument("--captions-per-image", type=int, default=5)
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--clean", type=float, default=0.5, help="fraction of clean keys")
    p.add_argument("--device", default="cpu")
    p.add_argument("--query-block", type=int, default=4096)
    p.add_argument("--key-block", type=int, default=16384)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    g = np.random.default_rng(0)
    n = args.images * args.captions_per_image
    image_index = np.repeat(np.arange(args.images), args.captions_per_image)
    img = g.standard_normal((args.images, args.dim), dtype=np.float32)[image_index]
    cap = g.standard_normal((n, args.dim), dtype=np.float32)
    clean = g.random(n) < args.clean
    t0 = time.perf_counter()
    bank = build_memory_bank(
        clean, img, cap, image_index, np.zeros(n), device=args.device,
        query_block=args.query_block, key_block=args.key_block,
    )  # fmt: skip
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    keys = int(clean.sum())
    out = {
        "samples": n,
        "images": args.images,
        "clean_keys": keys,
        "scores": (n + args.images) * keys,
        "seconds": round(seconds, 3),
        "block_bytes": args.query_block * args.key_block * 4,
        "full_matrix_bytes": n * keys * 4,
        "bank_ok": bool(clean[bank.text_bank].all()),
    }
    print(json.dumps(out) if args.json else "\n".join(f"{k}: {v}" for k, v in out.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
