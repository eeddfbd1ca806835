"""What both synthetic renderers draw with: object colours, the category glyphs, their outline,
and a scene record's own random stream (sha256 of the record, so a picture is the same on every
machine). :mod:`.render` draws the default world, :mod:`.render_counting` the counting world."""

from __future__ import annotations

import hashlib
import json

import numpy as np
from PIL import ImageDraw

__all__ = ["COLOUR_RGB", "GLYPHS", "draw_glyph", "record_rng"]

COLOUR_RGB = {
    "red": (220, 30, 30), "blue": (30, 70, 220), "green": (30, 160, 50),
    "yellow": (245, 220, 30), "black": (15, 15, 15), "white": (250, 250, 250),
    "brown": (130, 80, 30), "orange": (250, 140, 20), "pink": (250, 150, 200),
    "purple": (140, 40, 180), "gray": (110, 110, 110), "silver": (195, 200, 210),
}  # fmt: skip

# Glyph per category: primitives in the unit box of the object (x right, y down).
# ("e", box) ellipse, ("r", box) rectangle, ("p", points) polygon; a trailing "d" draws the
# part in a darkened shade of the object colour (wheels, trunks, heads) so parts stay apart.
GLYPHS: dict[str, tuple[tuple, ...]] = {
    "dog": (("e", (0.1, 0.35, 0.75, 0.75)), ("e", (0.6, 0.15, 0.95, 0.5), "d"),
            ("r", (0.15, 0.7, 0.25, 1.0)), ("r", (0.6, 0.7, 0.7, 1.0))),
    "cat": (("e", (0.15, 0.4, 0.85, 0.95)), ("p", ((0.25, 0.45), (0.35, 0.05), (0.5, 0.4))),
            ("p", ((0.5, 0.4), (0.65, 0.05), (0.75, 0.45)))),
    "man": (("e", (0.35, 0.0, 0.65, 0.3), "d"), ("r", (0.3, 0.3, 0.7, 0.7)),
            ("r", (0.3, 0.7, 0.45, 1.0)), ("r", (0.55, 0.7, 0.7, 1.0))),
    "woman": (("e", (0.35, 0.0, 0.65, 0.3), "d"), ("p", ((0.5, 0.3), (0.15, 1.0), (0.85, 1.0)))),
    "boy": (("e", (0.3, 0.2, 0.7, 0.5), "d"), ("r", (0.3, 0.5, 0.7, 1.0))),
    "girl": (("e", (0.3, 0.2, 0.7, 0.5), "d"), ("p", ((0.5, 0.5), (0.2, 1.0), (0.8, 1.0)))),
    "horse": (("r", (0.1, 0.3, 0.8, 0.65)), ("p", ((0.7, 0.35), (0.95, 0.0), (1.0, 0.2))),
              ("r", (0.12, 0.65, 0.22, 1.0), "d"), ("r", (0.65, 0.65, 0.75, 1.0), "d")),
    "bird": (("e", (0.2, 0.35, 0.8, 0.75)), ("p", ((0.35, 0.5), (0.6, 0.0), (0.7, 0.5)), "d"),
             ("p", ((0.8, 0.5), (1.0, 0.55), (0.8, 0.62)))),
    "car": (("r", (0.0, 0.4, 1.0, 0.8)), ("r", (0.2, 0.15, 0.75, 0.4)),
            ("e", (0.1, 0.7, 0.35, 0.95), "d"), ("e", (0.65, 0.7, 0.9, 0.95), "d")),
    "bicycle": (("e", (0.0, 0.45, 0.4, 0.95), "d"), ("e", (0.6, 0.45, 1.0, 0.95), "d"),
                ("p", ((0.2, 0.7), (0.5, 0.3), (0.8, 0.7)))),
    "ball": (("e", (0.1, 0.1, 0.9, 0.9)),),
    "umbrella": (("p", ((0.0, 0.45), (0.5, 0.0), (1.0, 0.45))), ("r", (0.46, 0.45, 0.54, 1.0),
                                                                   "d")),
    "chair": (("r", (0.2, 0.0, 0.35, 1.0)), ("r", (0.2, 0.5, 0.8, 0.6)),
              ("r", (0.7, 0.6, 0.8, 1.0))),
    "table": (("r", (0.0, 0.3, 1.0, 0.45)), ("r", (0.1, 0.45, 0.2, 1.0), "d"),
              ("r", (0.8, 0.45, 0.9, 1.0), "d")),
    "boat": (("p", ((0.0, 0.6), (1.0, 0.6), (0.8, 0.9), (0.2, 0.9))),
             ("p", ((0.5, 0.0), (0.5, 0.55), (0.85, 0.55)), "d")),
    "bench": (("r", (0.0, 0.35, 1.0, 0.5)), ("r", (0.0, 0.55, 1.0, 0.65)),
              ("r", (0.1, 0.65, 0.2, 1.0), "d"), ("r", (0.8, 0.65, 0.9, 1.0), "d")),
    "kite": (("p", ((0.5, 0.0), (0.9, 0.4), (0.5, 1.0), (0.1, 0.4))),),
    "tree": (("p", ((0.5, 0.0), (0.95, 0.7), (0.05, 0.7))), ("r", (0.4, 0.7, 0.6, 1.0), "d")),
    "cow": (("r", (0.05, 0.3, 0.8, 0.7)), ("r", (0.75, 0.2, 1.0, 0.5), "d"),
            ("r", (0.1, 0.7, 0.2, 1.0)), ("r", (0.6, 0.7, 0.7, 1.0))),
    "bus": (("r", (0.0, 0.1, 1.0, 0.8)), ("r", (0.1, 0.2, 0.9, 0.4), "d"),
            ("e", (0.1, 0.7, 0.3, 0.95), "d"), ("e", (0.7, 0.7, 0.9, 0.95), "d")),
    "guitar": (("e", (0.25, 0.45, 0.75, 1.0)), ("r", (0.45, 0.0, 0.55, 0.5), "d")),
    "hat": (("r", (0.0, 0.7, 1.0, 0.85)), ("r", (0.25, 0.2, 0.75, 0.7))),
    "bag": (("r", (0.1, 0.35, 0.9, 1.0)), ("e", (0.3, 0.05, 0.7, 0.5), "d")),
    "lamp": (("p", ((0.3, 0.0), (0.7, 0.0), (0.9, 0.4), (0.1, 0.4))),
             ("r", (0.45, 0.4, 0.55, 0.9), "d"), ("r", (0.25, 0.9, 0.75, 1.0), "d")),
    "cup": (("p", ((0.1, 0.1), (0.7, 0.1), (0.6, 0.95), (0.2, 0.95))),
            ("e", (0.6, 0.3, 0.95, 0.65), "d")),
    "bottle": (("r", (0.3, 0.35, 0.7, 1.0)), ("r", (0.42, 0.0, 0.58, 0.35))),
    "book": (("r", (0.05, 0.15, 0.95, 0.85)), ("r", (0.47, 0.15, 0.53, 0.85), "d")),
    "clock": (("e", (0.05, 0.05, 0.95, 0.95)), ("r", (0.47, 0.2, 0.53, 0.5), "d"),
              ("r", (0.5, 0.47, 0.75, 0.53), "d")),
    "sign": (("p", ((0.3, 0.0), (0.7, 0.0), (1.0, 0.3), (1.0, 0.6), (0.7, 0.6), (0.3, 0.6),
                    (0.0, 0.6), (0.0, 0.3))), ("r", (0.45, 0.6, 0.55, 1.0), "d")),
    "plant": (("r", (0.3, 0.65, 0.7, 1.0), "d"), ("e", (0.0, 0.0, 0.55, 0.7)),
              ("e", (0.45, 0.0, 1.0, 0.7))),
    "tent": (("p", ((0.5, 0.0), (1.0, 1.0), (0.0, 1.0))), ("p", ((0.5, 0.4), (0.65, 1.0),
                                                                  (0.35, 1.0)), "d")),
    "skateboard": (("r", (0.0, 0.5, 1.0, 0.65)), ("e", (0.1, 0.65, 0.3, 0.85), "d"),
                   ("e", (0.7, 0.65, 0.9, 0.85), "d")),
}  # fmt: skip

_OUTLINE = (20, 20, 20)
_LIGHT_OUTLINE = (225, 225, 225)  # for black objects, which vanish on the dark stage otherwise


def _dark(rgb: tuple[int, int, int]) -> tuple[int, int, int]:
    # Black objects get lighter parts instead, so the parts stay visible.
    if sum(rgb) < 120:
        return (90, 90, 90)
    return tuple(int(c * 0.55) for c in rgb)


def record_rng(scene: dict) -> np.random.Generator:
    # sha256 of the canonical JSON: stable across processes (Python's hash() is salted).
    digest = hashlib.sha256(json.dumps(scene, sort_keys=True).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def draw_glyph(
    draw: ImageDraw.ImageDraw, category: str, colour: str, x0: float, y0: float, side: float
) -> None:
    """Draw ``category``'s glyph in ``colour`` in the square box at ``(x0, y0)`` of ``side``
    pixels, outlined (dark, or light for black objects)."""
    rgb = COLOUR_RGB[colour]
    outline = _LIGHT_OUTLINE if sum(rgb) < 120 else _OUTLINE
    for part in GLYPHS[category]:
        kind, geom = part[0], part[1]
        fill = _dark(rgb) if len(part) > 2 else rgb
        if kind == "p":
            pts = [(x0 + x * side, y0 + y * side) for x, y in geom]
            draw.polygon(pts, fill=fill, outline=outline)
            continue
        box = (x0 + geom[0] * side, y0 + geom[1] * side,
               x0 + geom[2] * side, y0 + geom[3] * side)  # fmt: skip
        if kind == "e":
            draw.ellipse(box, fill=fill, outline=outline)
        else:
            draw.rectangle(box, fill=fill, outline=outline)
