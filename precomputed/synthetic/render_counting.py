"""The counting world (``--generator counting``) as RGB images: a second CLIP world.

The default world's pictures (:func:`precomputed.synthetic.render.render_scene`) are side
views: a sky and a ground split at a horizon, one object per named position (left, right,
centre, top, bottom) in one of two sizes, and captions that name those positions and sizes.
A counting scene is another kind of picture, so that a method tuned on one renderer meets
a structure it has not seen:

* a top-down view: the whole frame is the place's ground, with its own texture (dots, checks,
  waves, stripes or none) and no horizon;
* what the captions ask about is *how many*: each group's 1-3 instances are drawn at scattered
  cells of a 3 x 3 grid, so a count is read off the picture and no position is named;
* one size per group, three sizes in all, and a small rotation-free jitter per instance,
  all drawn from a sha256 of the record (the same picture on every machine);
* colour is bound to category as in the counting world's features: the captions say "two
  red dogs", never "red" alone.
"""

from __future__ import annotations

import functools

from PIL import Image, ImageDraw

from ..errors import DataFormatError
from .generators import _C_CATEGORIES, _C_COLOURS, _C_PLACES
from .glyphs import draw_glyph, record_rng

__all__ = ["GROUNDS", "render_counting_scene"]

# Ground per place: (colour, texture). Textures: "dots", "checks", "waves", "stripes", None.
GROUNDS = {
    "grass": ((80, 160, 60), "dots"),
    "water": ((50, 110, 190), "waves"),
    "sand": ((225, 200, 140), "dots"),
    "road": ((75, 75, 80), "stripes"),
    "snow": ((240, 242, 248), None),
    "street": ((130, 130, 135), "checks"),
    "beach": ((240, 215, 160), "waves"),
    "field": ((170, 180, 70), "stripes"),
    "stage": ((90, 45, 40), "checks"),
    "sidewalk": ((185, 180, 170), "checks"),
}
_GRID = 3  # cells per side; a scene has at most 3 groups x 3 instances = 9
_SIDES = (0.2, 0.25, 0.3)  # a group's glyph side as a fraction of the image side
_JITTER = 0.05  # max offset of an instance inside its cell (fraction of the image side)


@functools.lru_cache(maxsize=32)
def _ground(place: str, size: int) -> Image.Image:
    colour, texture = GROUNDS[place]
    img = Image.new("RGB", (size, size), colour)
    draw = ImageDraw.Draw(img)
    shade = tuple(int(c * 0.82) for c in colour)
    step = max(4, size // 8)
    for a in range(step // 2, size, step):
        if texture == "stripes":
            draw.line((0, a, size, a), fill=shade, width=max(1, size // 32))
        elif texture == "waves":
            pts = [(x, a + (step // 4) * ((x // max(1, step // 2)) % 2)) for x in range(0, size, 2)]
            draw.line(pts, fill=shade)
        for b in range(step // 2, size, step):
            if texture == "dots":
                draw.point((a, b), fill=shade)
            elif texture == "checks" and (a // step + b // step) % 2 == 0:
                draw.rectangle((a - step // 2, b - step // 2, a + step // 2, b + step // 2),
                               fill=shade)  # fmt: skip
    return img


def _check_scene(scene: dict) -> None:
    if scene.get("place") not in GROUNDS:
        raise DataFormatError(
            f"counting scene {scene.get('image_id')!r} has place {scene.get('place')!r}; "
            f"expected one of {', '.join(_C_PLACES)} (regenerate with tools/make_synthetic.py "
            "--generator counting)"
        )
    groups = scene.get("groups")
    if not isinstance(groups, list) or not groups:
        raise DataFormatError(f"counting scene {scene.get('image_id')!r} has no groups")
    for g in groups:
        if (g.get("category") not in _C_CATEGORIES or g.get("colour") not in _C_COLOURS
                or g.get("count") not in (1, 2, 3)):  # fmt: skip
            raise DataFormatError(
                f"counting scene {scene.get('image_id')!r} has a group {g!r}; expected a "
                f"category of the counting world, one of {', '.join(_C_COLOURS)} and a count 1-3"
            )
    if sum(g["count"] for g in groups) > _GRID * _GRID:
        raise DataFormatError(f"counting scene {scene.get('image_id')!r} has over 9 instances")


def render_counting_scene(scene: dict, size: int) -> Image.Image:
    """Draw one counting scene record as a ``size`` x ``size`` RGB image.

    Args:
        scene: a record of the counting world's ``{split}_scenes.jsonl``: ``place`` and
            ``groups`` (each ``category``, ``colour``, ``count``).
        size: image side in pixels (>= 16).

    Returns:
        A new RGB ``PIL.Image``; identical for identical records and sizes.

    Raises:
        ValueError: size below 16.
        DataFormatError: a value the counting world does not define.
    """
    if size < 16:
        raise ValueError(f"size must be >= 16 pixels, got {size}")
    _check_scene(scene)
    img = _ground(scene["place"], size).copy()
    draw = ImageDraw.Draw(img)
    rng = record_rng(scene)
    cells = rng.permutation(_GRID * _GRID)
    used = 0
    cell = size / _GRID
    for group in scene["groups"]:
        side = _SIDES[int(rng.integers(len(_SIDES)))] * size
        for _ in range(group["count"]):
            row, col = divmod(int(cells[used]), _GRID)
            used += 1
            dx, dy = rng.uniform(-_JITTER, _JITTER, size=2) * size
            x0 = (col + 0.5) * cell - side / 2 + dx
            y0 = (row + 0.5) * cell - side / 2 + dy
            draw_glyph(draw, group["category"], group["colour"], x0, y0, side)
    return img
