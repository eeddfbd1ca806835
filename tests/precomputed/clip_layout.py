"""Helpers writing tiny datasets in the exact CLIP-family layouts (NPC/SDD and OSA)."""

from __future__ import annotations

from pathlib import Path

from PIL import Image

ANNOTATIONS = {"scan_split": "annotations/scan_split", "osa": "annotations"}


def image_colour(i: int) -> tuple[int, int, int]:
    """A solid colour that identifies image i after a (JPEG) round trip."""
    return (20 * (i % 12) + 10, 20 * (i // 12 % 12) + 10, 128)


def image_number(pixel: tuple[int, ...]) -> int:
    return round((pixel[0] - 10) / 20) + 12 * round((pixel[1] - 10) / 20)


def write_clip_dataset(
    root: Path,
    *,
    naming: str = "f30k",
    layout: str = "scan_split",
    split: str = "train",
    num_images: int = 4,
    cpi: int = 2,
    ids_per_caption: bool = False,
    first_id: int = 0,
) -> tuple[Path, list[str]]:
    """Write ``split`` of a dataset under ``root``; returns (root, captions).

    Image k of the split gets id ``first_id + k`` (f30k/coco) or ``img<first_id+k>`` (cc) and
    the solid colour :func:`image_colour` (k).
    """
    ann = root / ANNOTATIONS[layout]
    images = root / "images"
    ann.mkdir(parents=True, exist_ok=True)
    images.mkdir(parents=True, exist_ok=True)
    ids = [first_id + k for k in range(num_images)]
    if naming == "cc":
        ids = [f"img{i}" for i in ids]
    if naming == "f30k":
        table = ann / "image_name.txt"
        names = table.read_text().splitlines() if table.is_file() else []
        names += [f"{1000 + i}.jpg" for i in range(len(names), first_id + num_images)]
        table.write_text("\n".join(names) + "\n")
        files = [names[i] for i in ids]
    elif naming == "coco":
        files = [f"COCO_2014_{i:012d}.jpg" for i in ids]
    else:
        files = [f"{i}.jpg" for i in ids]
    for k, name in enumerate(files):
        Image.new("RGB", (8, 8), image_colour(k)).save(images / name, quality=95)
    captions = [f"caption {c} of image {k}" for k in range(num_images) for c in range(cpi)]
    (ann / f"{split}_caps.txt").write_text("\n".join(captions) + "\n")
    lines = [str(i) for i in ids for _ in range(cpi if ids_per_caption else 1)]
    (ann / f"{split}_ids.txt").write_text("\n".join(lines) + "\n")
    return root, captions
