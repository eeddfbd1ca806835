"""How well UGNCL's division can call the noisy pairs of a CLIP world, before any fine-tuning.

``python tools/clip_division.py --weights W [--data data/synthetic] [--train-images 400]
[--noise-ratio 0.5] [--noise-seed 0] [--batch-sizes 8 16 32 64] [--repeats 5]
[--reading package] [--threads 1] [--json FILE]``

Encodes the training split's first ``--train-images`` images and their captions once with the
CLIP stand-in ``W``, pairs them by the noise index a run of the same ``data.*`` settings
trains on (``precomputed.split.training_noise``), and divides the pairs as UGNCL does on CLIP
(``divide_batch`` on the cosine, one view, the reading's evidence and thresholds, the hardness
``K - 1`` of a division's first epoch) in random batches of each ``K``: each repeat is one
epoch's division of every pair. Beside it, rules that read each pair's own cosine over the
whole split: its ROC-AUC against the truth, a two-component GMM (called noisy below a clean
posterior of 0.5), and the best threshold, picked with the truth (a ceiling, not a rule).
Prints one table of noise F1 (mean and spread over the repeats).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

from precomputed.split import NoiseSpec, training_noise
from precomputed.synthetic import CAPTIONS_PER_IMAGE
from precomputed.synthetic.render import renderer_for
from ugncl.backbones.clip.adapter import build_clip
from ugncl.backbones.clip.loading import WeightsError
from ugncl.backbones.clip.models import TINY_MODEL
from ugncl.backbones.clip.pretrain import (
    encode_split,
    load_world_settings,
    read_split,
    render_images,
    tokenize_captions,
)
from ugncl.methods.noise_detection import weight_quality
from ugncl.methods.ugncl.division import divide_batch, division_quality
from ugncl.methods.weighted.weights import gmm_posterior
from ugncl.run.cli import check_writable, cli_main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--weights", required=True, help="CLIP stand-in weights (pretrain_clip.py)")
    p.add_argument("--data", default="data/synthetic", help="synthetic world root")
    p.add_argument("--model", default=TINY_MODEL, help="open_clip architecture")
    p.add_argument("--train-images", type=int, default=400, help="data.train_images")
    p.add_argument("--noise-ratio", type=float, default=0.5, help="data.noise_ratio")
    p.add_argument("--noise-seed", type=int, default=0, help="data.noise_seed")
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[8, 16, 32, 64])
    p.add_argument("--repeats", type=int, default=5, help="divisions (epochs) per batch size")
    p.add_argument("--reading", default="package", choices=["paper", "release", "package"])
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--json", default=None, metavar="FILE", help="also write the record here")
    return p.parse_args(argv)


def divide_in_batches(
    cos: np.ndarray, pair_image: np.ndarray, clean: np.ndarray, k: int, seed: int, ugncl
) -> float:
    """Noise F1 of one division of every pair in random batches of ``k``.

    Args:
        cos: ``(n_img, n_cap)`` cosines; pair ``j`` is (image ``pair_image[j]``, caption ``j``).
        clean: ``(n_cap,)`` truth. ``ugncl``: the reading's ``UGNCLConfig``.
    """
    order = np.random.default_rng(seed).permutation(len(pair_image))
    sets = np.full(len(pair_image), -1, dtype=np.int64)
    for start in range(0, len(order) - 1, k):
        batch = order[start : start + k]
        if len(batch) < 2:
            continue
        raw = torch.from_numpy(cos[np.ix_(pair_image[batch], batch)]).unsqueeze(0)
        div = divide_batch(
            raw, tau=ugncl.tau, floor=ugncl.evidence_floor, function=ugncl.evidence,
            p=ugncl.p, epsilon=ugncl.epsilon, soft_label=ugncl.soft_label,
            lam=len(batch) - 1, centring=ugncl.centring, null_level=ugncl.null_level,
        )  # fmt: skip
        sets[batch] = div.sets.numpy()
    return float(division_quality(sets, clean)["noisy_f1"])


def own_score_rules(own: np.ndarray, clean: np.ndarray) -> dict[str, float]:
    """AUC of each pair's own cosine, the noise F1 of the package's GMM on it (SDD's rule: the
    higher-mean component's posterior, called noisy below 0.5) and of the truth-picked
    threshold."""
    from sklearn.metrics import f1_score

    noisy = ~clean
    best = max(
        f1_score(noisy, own < t) for t in np.quantile(own, np.linspace(0.02, 0.98, 97))
    )  # fmt: skip
    return {
        "auc_own_cosine": float(weight_quality(own, clean)["weight_auc"]),
        "gmm_f1": float(f1_score(noisy, gmm_posterior(own, "high") < 0.5)),
        "best_threshold_f1": float(best),
    }


@cli_main
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    if min(args.batch_sizes) < 2 or args.repeats < 1 or args.train_images < 2:
        print("error: --batch-sizes need >= 2, --repeats >= 1, --train-images >= 2",
              file=sys.stderr)  # fmt: skip
        return 2
    from ugncl.run.config import load_config

    if args.json:
        check_writable(Path(args.json), "--json record")  # before the encoding, not after it
    try:
        settings = load_world_settings(args.data)
        render = renderer_for(settings.get("generator"))
        scenes, captions = read_split(args.data, "train")
        n_img = min(args.train_images, len(scenes))
        model = build_clip(args.model, pretrained=args.weights)
    except (FileNotFoundError, ValueError, WeightsError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    ugncl = load_config(
        "clip_synthetic", ["method.name=ugncl", f"method.ugncl.reading={args.reading}"]
    )[0].method.ugncl
    spec = NoiseSpec(noise_ratio=args.noise_ratio, noise_seed=args.noise_seed)
    pair_image, _ = training_noise(spec, n_img, CAPTIONS_PER_IMAGE)
    clean = pair_image == np.arange(len(pair_image)) // CAPTIONS_PER_IMAGE
    images = render_images(scenes[:n_img], render, model.image_size)
    tokens = tokenize_captions(model, captions[: len(pair_image)])
    img, cap = encode_split(model, images, tokens)
    cos = (img @ cap.T).numpy().astype(np.float64)
    record = {
        "weights": str(args.weights), "data": str(args.data), "pairs": len(pair_image),
        "noisy": int((~clean).sum()), "reading": args.reading, "repeats": args.repeats,
        "in_batch": {}, **own_score_rules(cos[pair_image, np.arange(len(pair_image))], clean),
    }  # fmt: skip
    for k in args.batch_sizes:
        f1 = [divide_in_batches(cos, pair_image, clean, k, r, ugncl) for r in range(args.repeats)]
        record["in_batch"][str(k)] = {"mean": float(np.mean(f1)), "sd": float(np.std(f1))}
    print(f"{record['pairs']} pairs ({record['noisy']} noisy), UGNCL {args.reading} on the cosine")
    print("| rule | noise F1 |\n|---|--:|")
    for k, f in record["in_batch"].items():
        print(f"| Eq. 9 in batches of {k} | {f['mean']:.3f} ± {f['sd']:.3f} |")
    print(f"| GMM on the own cosine | {record['gmm_f1']:.3f} |")
    print(f"| best threshold (picked with the truth) | {record['best_threshold_f1']:.3f} |")
    print(f"AUC of the own cosine: {record['auc_own_cosine']:.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
