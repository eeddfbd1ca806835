"""Render the synthetic world as images in the CLIP (NPC/SDD Flickr30K) layout.

Example: ``python tools/make_synthetic.py`` then ``python tools/render_synthetic.py`` writes
``data/synthetic/synthetic_clip/{images/, annotations/scan_split/, render.json}`` beside
``data/synthetic/synthetic_precomp/`` (same captions, splits and order). ``--time N`` renders
the first N train scenes in memory and prints renders/s without writing anything.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from precomputed.errors import DataFormatError, DataNotFoundError
from precomputed.synthetic.render import (
    CLIP_DATASET_NAME,
    IMAGE_FORMATS,
    read_scenes,
    renderer_for,
    write_clip_images,
)
from precomputed.synthetic.world import read_world_settings
from ugncl.run.cli import check_writable, cli_main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--root", default="data/synthetic", help="data root holding the world")
    p.add_argument("--source", default="synthetic_precomp", help="the world's folder")
    p.add_argument("--name", default=CLIP_DATASET_NAME, help="output folder under --root")
    p.add_argument("--size", type=int, default=64, help="image side in pixels")
    p.add_argument("--format", choices=sorted(IMAGE_FORMATS), default="png")
    p.add_argument(
        "--time", type=int, default=None, metavar="N",
        help="only time rendering of the first N train scenes (and PNG encoding), write nothing",
    )  # fmt: skip
    return p.parse_args(argv)


def _time(root: Path, source: str, n: int, size: int, fmt: str) -> None:
    import io

    scenes = read_scenes(root / source / "train_scenes.jsonl")[:n]
    render = renderer_for(read_world_settings(root, source).get("generator"))
    start = time.perf_counter()
    images = [render(s, size) for s in scenes]
    render_s = time.perf_counter() - start
    start = time.perf_counter()
    for img in images:
        img.save(io.BytesIO(), format=IMAGE_FORMATS[fmt], compress_level=1)
    encode_s = time.perf_counter() - start
    print(
        f"{len(scenes)} scenes at {size} px: render {len(scenes) / render_s:.0f}/s, "
        f"render+{fmt} encode {len(scenes) / (render_s + encode_s):.0f}/s"
    )


@cli_main
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    check_writable(Path(args.root) / args.name / ".probe", "output folder")
    if args.size < 16:
        print(f"error: --size {args.size} is too small; use at least 16 pixels", file=sys.stderr)
        return 2
    try:
        if args.time is not None:
            _time(Path(args.root), args.source, args.time, args.size, args.format)
            return 0
        start = time.perf_counter()
        out = write_clip_images(
            args.root, source=args.source, name=args.name, size=args.size, fmt=args.format
        )
    except (DataNotFoundError, DataFormatError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {out} in {time.perf_counter() - start:.1f} s ({args.size} px {args.format})")
    print(f"  images: {out / 'images'}; annotations: {out / 'annotations' / 'scan_split'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
