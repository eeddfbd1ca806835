"""Which place a synthetic caption names, against the image it is paired with.

Every generator of this package sets its scene in a place (the default world's scene type, the
``counting`` and ``activity`` worlds' ``place``) and some captions name it ("on a street").
A noisy pair whose caption names the place of the image it was paired with is partly true,
and a model that has learnt the place word before the objects cannot tell it from a clean
pair. :func:`place_claims` marks every training pair by that claim so that a division can be
broken down by it (``tools/audit_division.py --places``;
docs/research/ugncl-generalisation.md, "What the first division knows").

No place word of a generator is also one of its object, colour or link words (tested), so a
caption names a place exactly when one of the generator's place words is among its tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from precomputed.errors import DataFormatError

from .generators import GENERATOR_PLACES
from .render import read_scenes
from .world import SCENE_TYPES, read_world_settings

__all__ = [
    "NAMES_ANOTHER_PLACE",
    "NAMES_ITS_PLACE",
    "NAMES_NO_PLACE",
    "PLACE_CLAIM_NAMES",
    "generator_places",
    "place_claims",
    "read_place_claims",
    "scene_place",
]

NAMES_ITS_PLACE, NAMES_NO_PLACE, NAMES_ANOTHER_PLACE = 1, 0, -1
PLACE_CLAIM_NAMES: dict[int, str] = {
    NAMES_ITS_PLACE: "names its image's place",
    NAMES_ANOTHER_PLACE: "names another place",
    NAMES_NO_PLACE: "names no place",
}


def generator_places(generator: str) -> frozenset[str]:
    """The place words of a generator (``default`` = the scene world of :mod:`.world`)."""
    if generator == "default":
        return frozenset(SCENE_TYPES)
    if generator not in GENERATOR_PLACES:
        known = ", ".join(["default", *sorted(GENERATOR_PLACES)])
        raise DataFormatError(
            f"unknown synthetic generator {generator!r} in world.json (known: {known}); "
            "regenerate the world with tools/make_synthetic.py"
        )
    return frozenset(GENERATOR_PLACES[generator])


def scene_place(scene: dict) -> str:
    """The place of one scene record (``scene_type`` in the default world, else ``place``)."""
    return scene["scene_type"] if "scene_type" in scene else scene["place"]


def place_claims(
    scenes: Sequence[dict],
    captions: Sequence[str],
    image_index: np.ndarray,
    places: frozenset[str],
) -> np.ndarray:
    """Each pair's place claim against the image it is paired with.

    Args:
        scenes: scene records in image order.
        captions: ``(N,)`` captions (whitespace-separated tokens), in pair order.
        image_index: ``(N,)`` the image each caption is paired with (a noise index).
        places: the generator's place words (:func:`generator_places`).

    Returns:
        int8 ``(N,)``: :data:`NAMES_ITS_PLACE` where the caption names the paired image's
        place, :data:`NAMES_ANOTHER_PLACE` where it names only other places,
        :data:`NAMES_NO_PLACE` where it names none.
    """
    image_index = np.asarray(image_index)
    if len(image_index) != len(captions):
        raise ValueError(f"{len(captions)} captions but {len(image_index)} paired images")
    out = np.full(len(captions), NAMES_NO_PLACE, dtype=np.int8)
    for pair, (caption, image) in enumerate(zip(captions, image_index)):
        named = places.intersection(caption.lower().split())
        if named:
            own = scene_place(scenes[int(image)]) in named
            out[pair] = NAMES_ITS_PLACE if own else NAMES_ANOTHER_PLACE
    return out


def read_place_claims(
    root: str | Path, source: str, image_index: np.ndarray, *, split: str = "train"
) -> np.ndarray:
    """:func:`place_claims` of the first ``len(image_index)`` pairs of a world on disk.

    Reads ``<root>/<source>/{world.json, {split}_scenes.jsonl, {split}_caps.txt}``; a run that
    trained on ``data.train_images: n`` uses the first ``n`` images, so its pairs are the
    files' first ``len(image_index)`` captions.

    Raises:
        DataNotFoundError: a file is missing (not a world tools/make_synthetic.py wrote).
        DataFormatError: fewer captions or scenes than the pairs need.
    """
    folder = Path(root) / source
    generator = str(read_world_settings(root, source).get("generator", "default"))
    scenes = read_scenes(folder / f"{split}_scenes.jsonl")
    with open(folder / f"{split}_caps.txt", encoding="utf-8") as f:
        captions = [line.strip() for line in f]
    n = len(image_index)
    if len(captions) < n or (n and int(np.max(image_index)) >= len(scenes)):
        raise DataFormatError(
            f"{folder} holds {len(captions)} {split} captions and {len(scenes)} scenes, fewer "
            f"than the {n} pairs to mark need; pass the world the run trained on"
        )
    return place_claims(scenes, captions[:n], image_index, generator_places(generator))
