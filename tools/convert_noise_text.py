"""Convert NPC/SDD/OSA noisy-caption text files to this package's NCR noise index, or back.

Examples::

    python tools/convert_noise_text.py \\
        --clean-caps data/f30k/annotations/scan_split/train_caps.txt \\
        --noisy-caps data/f30k/annotations/scan_split/0.4_noise_train_caps.txt \\
        --captions-per-image 5 --out noise/f30k_npc_0.4.npy
    python tools/convert_noise_text.py --clean-caps .../train_caps.txt --captions-per-image 5 \\
        --noise-index noise/f30k_0.4_seed0.npy --to-text .../0.4_noise_train_caps.txt

The index (1-D int64: clean caption k -> image) drives both the precomputed and the CLIP track;
its sha256 is printed. Identical caption strings are resolved as documented in
``precomputed/noise_text.py`` (the reading with the most clean pairs).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from precomputed._io import atomic_open
from precomputed.captions import read_captions_txt
from precomputed.errors import DataFormatError, DataNotFoundError
from precomputed.image_layout import read_image_ids
from precomputed.noise import clean_image_index, load_noise_index, noise_sha256, save_noise_index
from precomputed.noise_text import caption_index_to_noisy_text, read_noisy_caption_index
from ugncl.run.cli import check_writable, cli_main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--clean-caps", required=True, help="clean train_caps.txt (SCAN order)")
    p.add_argument("--captions-per-image", type=int, required=True, help="5 F30K/COCO, 1 CC")
    p.add_argument("--noisy-caps", help="{r}_noise_train_caps.txt to convert")
    p.add_argument("--out", help="output NCR noise index (.npy)")
    p.add_argument("--noise-index", help="noise index (.npy: NCR, L2RM, DECL/RCL) to write as text")
    p.add_argument("--to-text", help="output noisy-caption text file")
    args = p.parse_args(argv)
    forward = args.noisy_caps is not None or args.out is not None
    backward = args.noise_index is not None or args.to_text is not None
    if (
        forward == backward
        or (forward and None in (args.noisy_caps, args.out))
        or (backward and None in (args.noise_index, args.to_text))
    ):
        p.error("give either --noisy-caps and --out, or --noise-index and --to-text")
    if args.captions_per_image < 1:
        p.error(f"--captions-per-image must be >= 1, got {args.captions_per_image}")
    return args


def check_captions_per_image(clean_caps: str, num_captions: int, cpi: int) -> None:
    """``--captions-per-image`` against the split's own files beside ``clean_caps``, where
    there are any: ``{split}_ids.txt`` (one id per image, or per caption in blocks of the
    image's captions) or ``{split}_ims.npy`` (one feature row per image). A wrong value would
    convert to another, silently wrong, caption -> image index."""
    path = Path(clean_caps)
    split = path.name.removesuffix(".txt").removesuffix("_caps")
    ids, ims = path.with_name(f"{split}_ids.txt"), path.with_name(f"{split}_ims.npy")
    if ids.is_file():
        read_image_ids(ids, num_captions, cpi, where=str(path))
    elif ims.is_file():
        n_img = int(np.load(ims, mmap_mode="r").shape[0])
        if n_img * cpi != num_captions:
            raise DataFormatError(
                f"{path} has {num_captions} captions but {ims} has {n_img} images: "
                f"--captions-per-image {cpi} does not fit (the files say "
                f"{num_captions / max(n_img, 1):g})"
            )


@cli_main
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cpi = args.captions_per_image
    check_writable(args.out if args.noisy_caps is not None else args.to_text, "output")
    try:
        clean = read_captions_txt(args.clean_caps)
        check_captions_per_image(args.clean_caps, len(clean), cpi)
        if args.noisy_caps is not None:
            index = read_noisy_caption_index(args.clean_caps, args.noisy_caps, cpi)
            save_noise_index(args.out, index)
            target = args.out
        else:
            if len(clean) % cpi:
                raise DataFormatError(
                    f"{args.clean_caps}: {len(clean)} captions are not a multiple of "
                    f"--captions-per-image {cpi}"
                )
            index = load_noise_index(
                args.noise_index, num_images=len(clean) // cpi, captions_per_image=cpi, fmt="auto"
            )
            lines = caption_index_to_noisy_text(clean, index, cpi)
            with atomic_open(args.to_text, "w", encoding="utf-8", newline="\n") as f:
                f.writelines(f"{line}\n" for line in lines)
            target = args.to_text
    except (DataNotFoundError, DataFormatError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    noisy = int(np.count_nonzero(index != clean_image_index(len(index) // cpi, cpi)))
    print(f"wrote {target}: {len(index)} captions, {noisy} paired with another image")
    print(f"sha256 {noise_sha256(index)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
