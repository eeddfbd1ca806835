"""The synthetic world as RGB images, written in the CLIP (NPC/SDD) layout.

:func:`render_scene` draws one scene record (a line of ``{split}_scenes.jsonl``): a background
per scene type, then every object as a category glyph in its colour, size and position, with an
outline (dark, or light for black objects) so every colour stays visible on every background.
The picture depends only on the record and the size (small jitter comes from a sha256 of the
record, not from global state), so a world renders identically on every machine.

:func:`write_clip_images` renders every scene of a generated world next to its region
features, with the same captions, splits and order, in the Flickr30K NPC/SDD layout::

    <root>/synthetic_clip/images/{split}_{i:06d}.png
    <root>/synthetic_clip/annotations/scan_split/{split}_caps.txt   same bytes as the features'
    <root>/synthetic_clip/annotations/scan_split/{split}_ids.txt    global image ids
    <root>/synthetic_clip/annotations/scan_split/image_name.txt     line k: file of image id k
    <root>/synthetic_clip/render.json                               size, format, counts

``train_ids.txt`` has one line per image and ``{dev,test}_ids.txt`` one line per caption, as in
the NPC release, so the references' loaders read it too.
"""

from __future__ import annotations

import functools
import json
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

from PIL import Image, ImageDraw

from .._io import atomic_open
from ..errors import DataFormatError, DataNotFoundError
from .glyphs import GLYPHS, draw_glyph, record_rng
from .render_counting import render_counting_scene
from .world import CATEGORIES, COLOURS, POSITIONS, SCENE_TYPES, SIZES, read_world_settings

__all__ = [
    "CLIP_DATASET_NAME",
    "GLYPHS",
    "RENDERERS",
    "SPLITS",
    "image_file_name",
    "render_scene",
    "render_scenes",
    "renderer_for",
    "write_clip_images",
]

CLIP_DATASET_NAME = "synthetic_clip"
SPLITS = ("train", "dev", "test")
IMAGE_FORMATS = {"png": "PNG", "jpg": "JPEG"}

# Background per scene type: (upper colour, lower colour, horizon as a fraction of the height,
# stripe pattern of the lower part: None, "h" horizontal or "v" vertical).
BACKGROUNDS = {
    "beach": ((135, 200, 250), (235, 210, 150), 0.45, "h"),
    "street": ((170, 180, 190), (80, 80, 85), 0.55, "v"),
    "park": ((150, 210, 250), (90, 170, 70), 0.40, None),
    "field": ((190, 220, 250), (180, 190, 60), 0.35, "h"),
    "kitchen": ((235, 225, 200), (200, 170, 130), 0.60, "v"),
    "room": ((210, 190, 170), (150, 110, 80), 0.65, None),
    "city": ((120, 130, 160), (60, 60, 70), 0.30, "v"),
    "forest": ((60, 110, 60), (40, 80, 30), 0.50, "v"),
    "garden": ((160, 215, 240), (60, 140, 60), 0.50, "h"),
    "stage": ((40, 20, 50), (120, 60, 40), 0.70, None),
    "market": ((240, 200, 150), (160, 120, 90), 0.45, "v"),
    "desert": ((250, 220, 160), (220, 170, 100), 0.40, None),
    "lake": ((170, 210, 240), (40, 100, 170), 0.45, "h"),
    "snow": ((200, 215, 230), (245, 245, 250), 0.45, None),
}

# Object centres per position and box sides per size, as fractions of the image side.
CENTRES = {
    "left": (0.22, 0.58), "right": (0.78, 0.58), "center": (0.5, 0.52),
    "top": (0.5, 0.2), "bottom": (0.5, 0.84),
}  # fmt: skip
SIDES = {"small": 0.2, "large": 0.36}
_JITTER = 0.04  # max centre offset (fraction of the side), per object, from the record hash


def image_file_name(split: str, index: int, fmt: str = "png") -> str:
    """File name of image ``index`` of ``split``: ``{split}_{index:06d}.{fmt}``."""
    return f"{split}_{index:06d}.{fmt}"


@functools.lru_cache(maxsize=64)
def _background(scene_type: str, size: int) -> Image.Image:
    top, bottom, horizon, stripes = BACKGROUNDS[scene_type]
    img = Image.new("RGB", (size, size), top)
    draw = ImageDraw.Draw(img)
    y0 = round(horizon * size)
    draw.rectangle((0, y0, size, size), fill=bottom)
    if stripes is not None:
        shade = tuple(int(c * 0.85) for c in bottom)
        step = max(3, size // 8)
        for k in range(step // 2, size, step):
            if stripes == "h" and k > y0:
                draw.line((0, k, size, k), fill=shade)
            elif stripes == "v":
                draw.line((k, y0, k, size), fill=shade)
    return img


def _check_scene(scene: dict) -> None:
    if scene.get("scene_type") not in BACKGROUNDS:
        raise DataFormatError(
            f"scene {scene.get('image_id')!r} has scene_type {scene.get('scene_type')!r}; "
            f"expected one of {', '.join(SCENE_TYPES)} (regenerate with tools/make_synthetic.py)"
        )
    for obj in scene.get("objects", ()):
        for key, allowed in (
            ("category", CATEGORIES), ("colour", COLOURS), ("size", SIZES),
            ("position", POSITIONS),
        ):  # fmt: skip
            if obj.get(key) not in allowed:
                raise DataFormatError(
                    f"scene {scene.get('image_id')!r} has an object with {key} "
                    f"{obj.get(key)!r}; expected one of {', '.join(allowed)}"
                )


def render_scene(scene: dict, size: int) -> Image.Image:
    """Draw one scene record as a ``size`` x ``size`` RGB image.

    Args:
        scene: a scene as written to ``{split}_scenes.jsonl`` (``Scene.to_dict()``): keys
            ``scene_type`` and ``objects`` (each with ``category``, ``colour``, ``size``,
            ``position``); other keys only feed the jitter hash.
        size: image side in pixels (>= 16; 64-96 is the CLIP track's range).

    Returns:
        A new RGB ``PIL.Image``; identical for identical records and sizes.

    Raises:
        ValueError: size below 16.
        DataFormatError: an attribute value the world does not define.
    """
    if size < 16:
        raise ValueError(f"size must be >= 16 pixels, got {size}")
    _check_scene(scene)
    img = _background(scene["scene_type"], size).copy()
    draw = ImageDraw.Draw(img)
    rng = record_rng(scene)
    objects = scene["objects"]
    jitter = rng.uniform(-_JITTER, _JITTER, size=(len(objects), 2))
    # Large objects first, so small ones drawn later are not hidden behind them.
    order = sorted(range(len(objects)), key=lambda i: objects[i]["size"] != "large")
    for i in order:
        obj = objects[i]
        side = SIDES[obj["size"]] * size
        cx, cy = CENTRES[obj["position"]]
        x0 = (cx + jitter[i, 0]) * size - side / 2
        y0 = (cy + jitter[i, 1]) * size - side / 2
        draw_glyph(draw, obj["category"], obj["colour"], x0, y0, side)
    return img


#: ``render(scene_record, size) -> PIL.Image`` per generator name (``world.json``'s
#: ``generator``; the activity world has no renderer: its worlds have region features only).
RENDERERS: dict[str, Callable[[dict, int], Image.Image]] = {
    "default": render_scene,
    "counting": render_counting_scene,
}


def renderer_for(generator: str | None) -> Callable[[dict, int], Image.Image]:
    """The renderer of a world made by ``generator`` (None: the default world).

    Raises:
        ValueError: the generator's worlds have no image renderer (named, with the ones that do).
    """
    name = generator or "default"
    if name not in RENDERERS:
        raise ValueError(
            f"the {name} generator has no image renderer; CLIP worlds exist for "
            f"{', '.join(sorted(RENDERERS))} (make the world with --generator counting, or "
            "without --generator)"
        )
    return RENDERERS[name]


def render_scenes(scenes: Iterable[dict], size: int) -> Iterable[Image.Image]:
    """Lazily render many scene records (see :func:`render_scene`)."""
    return (render_scene(s, size) for s in scenes)


def read_scenes(path: str | Path) -> list[dict]:
    """Scene records of a ``{split}_scenes.jsonl`` file, in image order.

    Raises:
        DataNotFoundError: missing file.
        DataFormatError: a line that is not a JSON object (with its line number).
    """
    path = Path(path)
    if not path.is_file():
        raise DataNotFoundError(
            f"scene file {path} not found; generate the world with `python "
            "tools/make_synthetic.py` (it writes {split}_scenes.jsonl next to the features)"
        )
    scenes = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            try:
                scene = json.loads(line)
            except json.JSONDecodeError as err:
                raise DataFormatError(f"{path}:{lineno} is not JSON ({err})") from err
            if not isinstance(scene, dict):
                raise DataFormatError(f"{path}:{lineno} is not a JSON object (a scene record)")
            scenes.append(scene)
    return scenes


def _write_lines(path: Path, lines: Iterable[str]) -> None:
    with atomic_open(path, "w", encoding="utf-8", newline="\n") as f:
        for line in lines:
            f.write(f"{line}\n")


def write_clip_images(
    root: str | Path,
    *,
    source: str = "synthetic_precomp",
    name: str = CLIP_DATASET_NAME,
    size: int = 64,
    fmt: str = "png",
    splits: tuple[str, ...] = SPLITS,
) -> Path:
    """Render every scene of a generated world into the CLIP layout beside its features,
    with the renderer of the world's generator (:func:`renderer_for`).

    Args:
        root: data root holding ``<source>/`` (``data/synthetic`` by default of
            tools/make_synthetic.py).
        source: the world's folder with ``{split}_scenes.jsonl``, ``{split}_caps.txt`` and
            ``world.json``.
        name: output folder under ``root``.
        size: image side in pixels.
        fmt: ``png`` (lossless, the default) or ``jpg``.
        splits: splits to render (each must exist in ``source``).

    Returns:
        The dataset folder ``<root>/<name>`` (``dataset_root`` in NPC terms).

    Raises:
        DataNotFoundError: the world or one of its files is missing.
        DataFormatError: caption and scene counts of a split disagree.
        ValueError: the world's generator has no renderer.
    """
    if fmt not in IMAGE_FORMATS:
        raise ValueError(f"fmt must be one of {', '.join(IMAGE_FORMATS)}, got {fmt!r}")
    src = Path(root) / source
    settings = read_world_settings(root, source)
    cpi = int(settings["captions_per_image"])
    render = renderer_for(settings.get("generator"))
    out = Path(root) / name
    image_dir = out / "images"
    ann_dir = out / "annotations" / "scan_split"
    image_dir.mkdir(parents=True, exist_ok=True)
    ann_dir.mkdir(parents=True, exist_ok=True)
    names: list[str] = []
    counts = {}
    for split in splits:
        scenes = read_scenes(src / f"{split}_scenes.jsonl")
        caps = src / f"{split}_caps.txt"
        if not caps.is_file():
            raise DataNotFoundError(f"{caps} not found; regenerate the world (make_synthetic)")
        with open(caps, encoding="utf-8") as f:
            num_caps = sum(1 for _ in f)
        if num_caps != cpi * len(scenes):
            raise DataFormatError(
                f"{caps} has {num_caps} captions for {len(scenes)} scenes of "
                f"{src / f'{split}_scenes.jsonl'} (expected {cpi} per scene); regenerate the world"
            )
        first_id = len(names)
        for i, scene in enumerate(scenes):
            file_name = image_file_name(split, i, fmt)
            img = render(scene, size)
            with atomic_open(image_dir / file_name, "wb") as f:
                if fmt == "png":
                    img.save(f, format="PNG", compress_level=1)
                else:
                    img.save(f, format="JPEG", quality=95)
            names.append(file_name)
        ids = range(first_id, len(names))
        # NPC convention: train ids once per image, dev/test ids once per caption.
        per_line = 1 if split == "train" else cpi
        _write_lines(ann_dir / f"{split}_ids.txt", (i for i in ids for _ in range(per_line)))
        with atomic_open(ann_dir / f"{split}_caps.txt", "wb") as f, open(caps, "rb") as g:
            shutil.copyfileobj(g, f)  # same bytes as the region-feature track
        counts[split] = {"images": len(scenes), "captions": num_caps}
    _write_lines(ann_dir / "image_name.txt", names)
    info = {
        "source": source, "size": size, "format": fmt, "captions_per_image": cpi,
        "splits": counts, "image_naming": "f30k", "generator": settings.get("generator", "default"),
    }  # fmt: skip
    with atomic_open(out / "render.json", "w") as f:
        f.write(json.dumps(info, indent=2, sort_keys=True) + "\n")
    return out
