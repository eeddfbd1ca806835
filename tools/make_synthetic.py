"""Generate the synthetic world (the embedded default dataset) in the SCAN/NCR layout.

Example: ``python tools/make_synthetic.py`` writes ``data/synthetic/synthetic_precomp/``,
``data/synthetic/synthetic_precomp_vocab.json`` and the same scenes as images in the CLIP layout,
``data/synthetic/synthetic_clip/`` (``--image-size 0`` skips them; ``tools/render_synthetic.py``
renders them later); see ``--help`` for every option. ``--redraw-nuisance SRC --out DIR``
copies the world in SRC with every image's nuisance vector drawn anew (the division audit's
memorisation probe, ``tools/audit_division.py --data-root``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from precomputed.errors import UserError
from precomputed.synthetic import DATASET_NAME, make_synthetic
from precomputed.synthetic.generators import GENERATORS
from precomputed.synthetic.render import CLIP_DATASET_NAME, RENDERERS, write_clip_images
from precomputed.synthetic.writer import redraw_nuisance
from ugncl.run.cli import check_writable, cli_main


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=(
            "Write the synthetic world: <out>/synthetic_precomp/{train,dev,test}_ims.npy "
            "(N, regions, feature-dim) float32, {split}_caps.txt (5 captions per image), "
            "{split}_scenes.jsonl (scene descriptions for later rendering), NCR noise files "
            "noise_{ratio}_seed{noise-seed}.npy for the train split, world.json (settings), and "
            "<out>/synthetic_precomp_vocab.json (SCAN vocabulary); then renders the same "
            "scenes as images for the CLIP track into <out>/synthetic_clip/ (images/ and "
            "annotations/; --image-size 0 skips it). Deterministic given --seed."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--out", default="data/synthetic", help="data root to write into")
    p.add_argument(
        "--redraw-nuisance", default=None, metavar="SRC",
        help="instead of generating: copy the world in data root SRC to --out with every "
        "image's nuisance vector drawn anew (same scenes, captions and noise files; the other "
        "settings are SRC's)",
    )  # fmt: skip
    p.add_argument(
        "--redraw", type=int, default=1, help="which redraw of --redraw-nuisance (>= 1)"
    )  # fmt: skip
    p.add_argument(
        "--generator", default="default", choices=["default", *GENERATORS],
        help="world structure: default (scenes of 2-4 objects, additive region features, "
        "short template captions; the knobs below) | counting (groups of 1-3 instances, "
        "colour bound to category, empty regions, counting captions) | activity (actors "
        "with actions, a random network of attribute conjunctions, 40%% place regions, long "
        "sentences); the region/caption knobs apply to default only, and activity renders "
        "no images",
    )  # fmt: skip
    p.add_argument("--num-train", type=int, default=1000, help="train images")
    p.add_argument("--num-dev", type=int, default=250, help="dev images")
    p.add_argument("--num-test", type=int, default=250, help="test images")
    p.add_argument("--seed", type=int, default=0, help="world seed (scenes, captions, features)")
    p.add_argument("--regions", type=int, default=36, help="regions per image (BUTD: 36)")
    p.add_argument("--feature-dim", type=int, default=2048, help="region feature size")
    p.add_argument(
        "--region-noise",
        type=float,
        default=0.5,
        help="std of Gaussian noise per region feature (attribute directions have unit variance)",
    )
    p.add_argument(
        "--attribute-sharing",
        type=float,
        default=0.8,
        help="0..1: how strongly a few categories/colours/scene types dominate; higher makes "
        "images share attributes, so partial captions become ambiguous",
    )
    p.add_argument(
        "--partialness",
        type=float,
        default=0.7,
        help="0..1: how many objects and attributes each caption leaves out",
    )
    p.add_argument(
        "--background",
        type=float,
        default=1 / 6,
        help="0..1 (exclusive): least share of regions per image that show background/clutter "
        "(scene type + a clutter direction) instead of objects; higher leaves fewer regions "
        "per object",
    )
    p.add_argument(
        "--nuisance",
        type=float,
        default=0.5,
        help="std of a per-image random vector added to every region of the image (a content-"
        "free appearance shift)",
    )
    p.add_argument(
        "--sparsity",
        type=float,
        default=0.0,
        help=">= 0: threshold subtracted before the ReLU; higher makes features sparser "
        "(0: about half the entries are zero)",
    )
    p.add_argument(
        "--feature-scale",
        type=float,
        default=0.5,
        help="> 0: multiplier of every feature (magnitude only, same information)",
    )
    p.add_argument(
        "--noise-ratios",
        type=float,
        nargs="*",
        default=[0.2, 0.5],
        help="NCR caption-noise ratios in [0, 1) to write for the train split",
    )
    p.add_argument("--noise-seed", type=int, default=0, help="seed of the noise files")
    p.add_argument(
        "--noise-subsets",
        type=int,
        nargs="*",
        default=[1000],
        help="also write noise files noise_{ratio}_seed{noise-seed}_train{N}.npy for the first N "
        "train images (use with data.train_images: N; the whole-split file does not fit a "
        "subset)",
    )
    p.add_argument(
        "--image-size",
        type=int,
        default=64,
        help=f"side in pixels of the rendered scenes written to <out>/{CLIP_DATASET_NAME}/ "
        "(the CLIP track's data, same captions and splits); 0 skips rendering",
    )
    return p


@cli_main
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.image_size != 0 and args.image_size < 16:
        raise UserError(f"--image-size {args.image_size} is too small; use >= 16 pixels or 0")
    check_writable(Path(args.out) / ".probe", "output folder")
    start = time.perf_counter()
    if args.redraw_nuisance is not None:
        return _redraw(args, start)
    try:
        root = make_synthetic(
            args.out,
            num_train=args.num_train,
            num_dev=args.num_dev,
            num_test=args.num_test,
            seed=args.seed,
            regions=args.regions,
            feature_dim=args.feature_dim,
            region_noise=args.region_noise,
            attribute_sharing=args.attribute_sharing,
            partialness=args.partialness,
            background=args.background,
            nuisance=args.nuisance,
            sparsity=args.sparsity,
            feature_scale=args.feature_scale,
            noise_ratios=tuple(args.noise_ratios),
            noise_seed=args.noise_seed,
            noise_subsets=tuple(args.noise_subsets),
            generator=args.generator,
        )
    except ValueError as err:
        print(f"error: {err} (see --help)", file=sys.stderr)
        return 2
    world = json.loads((root / DATASET_NAME / "world.json").read_text())
    print(f"wrote {root / DATASET_NAME} in {time.perf_counter() - start:.1f} s")
    print(
        f"  images train/dev/test: {args.num_train}/{args.num_dev}/{args.num_test}, "
        f"5 captions each, features ({args.regions}, {args.feature_dim}) float32"
    )
    print(f"  vocab: {root / f'{DATASET_NAME}_vocab.json'}")
    for name, digest in world["noise_sha256"].items():
        print(f"  noise {name}: sha256 {digest}")
    if args.image_size and args.generator not in RENDERERS:
        print(f"  no images rendered: the {args.generator} generator has no image renderer")
    elif args.image_size:
        start = time.perf_counter()
        clip_root = write_clip_images(root, source=DATASET_NAME, size=args.image_size)
        print(
            f"wrote {clip_root} in {time.perf_counter() - start:.1f} s "
            f"({args.image_size} px images, CLIP layout)"
        )
    return 0


def _redraw(args: argparse.Namespace, start: float) -> int:
    try:
        root = redraw_nuisance(args.redraw_nuisance, args.out, args.redraw)
    except (ValueError, FileNotFoundError, FileExistsError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(
        f"wrote {root / DATASET_NAME} in {time.perf_counter() - start:.1f} s: the world of "
        f"{args.redraw_nuisance} with every image's nuisance vector redrawn (redraw "
        f"{args.redraw})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
