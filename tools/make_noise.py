"""Write an NCR noise-index file for a dataset split, or convert a UGNCL image permutation.

Examples::

    python tools/make_noise.py --data-root data --name f30k_precomp --ratio 0.4 --seed 0 \\
        --out noise/f30k_0.4_seed0.npy
    python tools/make_noise.py --data-root data --name f30k_precomp --captions-per-image 5 \\
        --from-image-perm f30k_noise.npy --out noise/f30k_ugncl.npy
    python tools/make_noise.py --data-root data --name f30k_precomp \\
        --from-file noise_inx_0.2.npy --out noise/f30k_rcl_0.2.npy

``--from-file`` reads any convention of the field (NCR, L2RM, DECL/RCL/UGNCL, NPC/SDD/OSA's
``{r}_noise_train_caps.txt``; docs/data_formats.md), names the one it found, and refuses a file
whose convention it cannot tell.

The file holds one int64 image index per caption (NCR format); its sha256 is printed.
"""

from __future__ import annotations

import argparse

import numpy as np

from precomputed.captions import check_caption_count, read_captions
from precomputed.catalog import CATALOG, dataset_entry
from precomputed.features import open_features
from precomputed.layout import locate_split
from precomputed.noise import (
    NOISE_CONVENTIONS,
    clean_image_index,
    load_noise_index,
    make_caption_noise,
    noise_sha256,
    read_noise_file,
    save_noise_index,
)
from ugncl.run.cli import check_new_file, cli_main, seed_argument


@cli_main
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description="Write an NCR caption-level noise file (1-D int64, one image index per "
        "caption) for a split, or convert a UGNCL image-level permutation; prints its sha256.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--data-root", required=True, help="folder holding <name>/")
    p.add_argument("--name", required=True, help="dataset folder, e.g. f30k_precomp")
    p.add_argument("--split", default="train", help="split the noise is for")
    p.add_argument(
        "--captions-per-image",
        type=int,
        default=None,
        help="captions per image (default: the known dataset's value, else required)",
    )
    p.add_argument("--ratio", type=float, default=None, help="share of captions to shuffle")
    p.add_argument("--seed", type=seed_argument, default=0, help="noise seed, in [0, 2**32)")
    p.add_argument(
        "--from-image-perm",
        default=None,
        help="convert this UGNCL image-level permutation (.npy, length N_img) instead",
    )
    p.add_argument(
        "--from-file",
        default=None,
        help="convert a noise file of any convention (NCR, L2RM, DECL/RCL/UGNCL .npy; "
        "NPC/SDD/OSA {r}_noise_train_caps.txt), told apart from its content",
    )
    p.add_argument("--out", required=True, help="output .npy path")
    p.add_argument("--force", action="store_true", help="replace an existing --out file")
    args = p.parse_args(argv)
    check_new_file(args.out, args.force, "noise file")
    if sum(a is not None for a in (args.ratio, args.from_image_perm, args.from_file)) != 1:
        p.error("give exactly one of --ratio, --from-image-perm or --from-file")
    cpi = args.captions_per_image
    if cpi is None:
        entry = dataset_entry(args.name)
        if entry is None:
            p.error(
                f"--captions-per-image is required for unknown dataset {args.name!r} (known: "
                f"{', '.join(CATALOG)})"
            )
        cpi = entry.captions_per_image
    paths = locate_split(args.data_root, args.name, args.split)
    store = open_features(paths.features, allow_nonfinite=True)
    num_images = len(store)
    store.close()
    captions = read_captions(paths.captions)
    check_caption_count(len(captions), num_images, cpi, where=str(paths.captions))
    if args.from_file is not None:
        index, convention = read_noise_file(
            args.from_file, num_images=num_images, captions_per_image=cpi, clean_captions=captions
        )
        print(f"read {args.from_file}: {NOISE_CONVENTIONS[convention]}")
    elif args.from_image_perm is not None:
        index = load_noise_index(
            args.from_image_perm, num_images=num_images, captions_per_image=cpi, fmt="image"
        )
    else:
        index = make_caption_noise(clean_image_index(num_images, cpi), args.ratio, args.seed)
    save_noise_index(args.out, index)
    noisy = int(np.count_nonzero(index != clean_image_index(num_images, cpi)))
    print(f"wrote {args.out}: {len(index)} captions, {noisy} paired with another image")
    print(f"sha256 {noise_sha256(index)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
