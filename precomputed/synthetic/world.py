"""Scenes of the synthetic world: plain dataclasses, serialisable as JSON lines.

The same scene drives both views: region features (:mod:`.features`) and captions
(:mod:`.captions`); a later step can render it as an RGB image. Every word the generator can
emit is in the Flickr30K SCAN vocabulary (tested).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ..errors import DataFormatError, DataNotFoundError

__all__ = [
    "CATEGORIES",
    "COLOURS",
    "POSITIONS",
    "SCENE_TYPES",
    "SIZES",
    "Relation",
    "Scene",
    "SceneObject",
    "popularity",
    "read_scenes",
    "read_world_settings",
    "relation_between",
    "sample_scenes",
]

CATEGORIES = (
    "dog", "cat", "man", "woman", "boy", "girl", "horse", "bird", "car", "bicycle", "ball",
    "umbrella", "chair", "table", "boat", "bench", "kite", "tree", "cow", "bus", "guitar", "hat",
    "bag", "lamp", "cup", "bottle", "book", "clock", "sign", "plant", "tent", "skateboard",
)  # fmt: skip
COLOURS = (
    "red", "blue", "green", "yellow", "black", "white", "brown", "orange", "pink", "purple",
    "gray", "silver",
)  # fmt: skip
SIZES = ("small", "large")
POSITIONS = ("left", "right", "center", "top", "bottom")
SCENE_TYPES = (
    "beach", "street", "park", "field", "kitchen", "room", "city", "forest", "garden", "stage",
    "market", "desert", "lake", "snow",
)  # fmt: skip


@dataclass
class SceneObject:
    """One object: what a detector region and a caption noun phrase both describe."""

    category: str
    colour: str
    size: str
    position: str


@dataclass
class Relation:
    """``objects[subject]`` <relation> ``objects[object]`` (derived from their positions)."""

    subject: int
    relation: str
    object: int


@dataclass
class Scene:
    """One image of the world.

    Attributes:
        image_id: index within its split.
        scene_type: background type (drives background regions and scene phrases).
        objects: 2-4 objects with distinct positions.
        relations: spatial relations between object pairs.
        region_object: for each feature region, the object it shows (-1: background).
    """

    image_id: int
    scene_type: str
    objects: list[SceneObject]
    relations: list[Relation]
    region_object: list[int] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Scene:
        """Inverse of :meth:`to_dict` (one line of ``{split}_scenes.jsonl``)."""
        return cls(
            int(d["image_id"]),
            d["scene_type"],
            [SceneObject(**o) for o in d["objects"]],
            [Relation(**r) for r in d["relations"]],
            list(d.get("region_object", [])),
        )


def read_scenes(path: str | Path) -> list[Scene]:
    """The scenes of ``{split}_scenes.jsonl``, in image order."""
    with open(path, encoding="utf-8") as f:
        return [Scene.from_dict(json.loads(line)) for line in f if line.strip()]


def read_world_settings(root: str | Path, source: str) -> dict:
    """The generator settings (``<root>/<source>/world.json``) of a world on disk.

    Raises:
        DataNotFoundError: the file is missing (the message says how to make the world).
    """
    path = Path(root) / source / "world.json"
    if not path.is_file():
        raise DataNotFoundError(
            f"{path} does not exist; pass the data root of a world tools/make_synthetic.py "
            f"wrote, or generate one with `python tools/make_synthetic.py --out {root}`"
        )
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DataFormatError(
            f"{path} is not the JSON settings file tools/make_synthetic.py writes ({err}); "
            f"generate the world again with `python tools/make_synthetic.py --out {root}`"
        ) from err
    if not isinstance(settings, dict):
        raise DataFormatError(f"{path} does not hold a JSON object of generator settings")
    return settings


def popularity(n: int, sharing: float) -> np.ndarray:
    """Zipf-like draw probabilities ``(rank+1)^(-2*sharing)``: 0 uniform, 1 a few dominate.

    Higher sharing makes images share categories/colours, so a partial caption fits more
    images (ambiguity).
    """
    w = (np.arange(n) + 1.0) ** (-2.0 * sharing)
    return w / w.sum()


_OPPOSITE = {("left", "right"): "left of", ("right", "left"): "right of"}
_OPPOSITE.update({("top", "bottom"): "above", ("bottom", "top"): "below"})


def relation_between(a: SceneObject, b: SceneObject) -> str:
    """Spatial relation of ``a`` to ``b``: left of / right of / above / below / next to."""
    return _OPPOSITE.get((a.position, b.position), "next to")


def sample_scenes(rng: np.random.Generator, num: int, *, sharing: float) -> list[Scene]:
    """Draw ``num`` scenes with 2-4 objects each.

    Args:
        rng: the split's scene generator.
        num: number of scenes.
        sharing: attribute-sharing knob in [0, 1] (see :func:`popularity`).
    """
    p_cat = popularity(len(CATEGORIES), sharing)
    p_col = popularity(len(COLOURS), sharing)
    p_scene = popularity(len(SCENE_TYPES), sharing)
    scenes = []
    for i in range(num):
        n = int(rng.integers(2, 5))
        cats = rng.choice(len(CATEGORIES), size=n, replace=False, p=p_cat)
        cols = rng.choice(len(COLOURS), size=n, p=p_col)
        sizes = rng.integers(0, len(SIZES), size=n)
        pos = rng.permutation(len(POSITIONS))[:n]
        objects = [
            SceneObject(CATEGORIES[c], COLOURS[k], SIZES[s], POSITIONS[q])
            for c, k, s, q in zip(cats, cols, sizes, pos)
        ]
        pairs = [(a, b) for a in range(n) for b in range(n) if a != b]
        chosen = rng.permutation(len(pairs))[: int(rng.integers(1, 3))]
        relations = [
            Relation(pairs[j][0], relation_between(objects[pairs[j][0]], objects[pairs[j][1]]),
                     pairs[j][1])
            for j in sorted(chosen)
        ]  # fmt: skip
        scene_type = SCENE_TYPES[int(rng.choice(len(SCENE_TYPES), p=p_scene))]
        scenes.append(Scene(i, scene_type, objects, relations))
    return scenes
