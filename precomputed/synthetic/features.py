"""Region features of synthetic scenes, in the spirit of bottom-up-attention (BUTD) boxes.

Each attribute value (category, colour, size, position, scene type) owns a fixed random
direction in R^D, drawn once per world seed. An object region is a random mix of its object's
attribute directions (several regions per object, like overlapping detector boxes); a
background region mixes the scene-type direction with a random clutter direction. Gaussian
region noise and a per-image nuisance vector are added, then ReLU, so features are
non-negative like BUTD's pooled ResNet features.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .world import CATEGORIES, COLOURS, POSITIONS, SCENE_TYPES, SIZES, Scene

__all__ = ["DirectionBank", "RegionRecipes", "plan_regions", "render_features"]

NUM_CLUTTER = 16
COMPONENTS = 5  # category, colour, size, position / scene, clutter per region


@dataclass
class DirectionBank:
    """All attribute directions stacked in one (V, D) table; the last row is zero ("none")."""

    table: np.ndarray
    offsets: dict[str, int]

    @classmethod
    def draw(cls, seed: int, dim: int) -> DirectionBank:
        groups = {
            "category": len(CATEGORIES),
            "colour": len(COLOURS),
            "size": len(SIZES),
            "position": len(POSITIONS),
            "scene": len(SCENE_TYPES),
            "clutter": NUM_CLUTTER,
        }
        rng = np.random.default_rng([seed, 7919])
        offsets, start = {}, 0
        for name, n in groups.items():
            offsets[name] = start
            start += n
        table = np.zeros((start + 1, dim), dtype=np.float32)
        table[:start] = rng.standard_normal((start, dim), dtype=np.float32)
        return cls(table, offsets)

    @property
    def none(self) -> int:
        return len(self.table) - 1


@dataclass
class RegionRecipes:
    """Per image and region: which bank rows to mix and with which weights.

    Attributes:
        rows: (N, R, COMPONENTS) int64 rows of :class:`DirectionBank`.
        weights: (N, R, COMPONENTS) float32 mixing weights.
    """

    rows: np.ndarray
    weights: np.ndarray


def plan_regions(
    rng: np.random.Generator,
    scenes: list[Scene],
    bank: DirectionBank,
    regions: int,
    background: float = 1 / 6,
) -> RegionRecipes:
    """Assign regions to objects/background and draw mixing weights; fills ``region_object``.

    Args:
        rng: the split's region generator.
        scenes: the split's scenes.
        bank: the world's directions.
        regions: regions per image.
        background: least share of regions showing background/clutter instead of objects
            (at least one region; objects get fewer regions when it is high).
    """
    n = len(scenes)
    rows = np.full((n, regions, COMPONENTS), bank.none, dtype=np.int64)
    weights = np.zeros((n, regions, COMPONENTS), dtype=np.float32)
    off = bank.offsets
    # Default 1/6 keeps the historical int(regions // 6) background regions (36 -> 6).
    reserved = max(1, int(regions * background + 1e-9))
    budget = max(1, regions - reserved)
    for i, scene in enumerate(scenes):
        wanted = [(5 if o.size == "large" else 3) + int(rng.integers(0, 3)) for o in scene.objects]
        owner: list[int] = []
        while len(owner) < budget and any(wanted):  # round-robin, so every object gets regions
            for j in range(len(wanted)):
                if wanted[j] and len(owner) < budget:
                    owner.append(j)
                    wanted[j] -= 1
        owner += [-1] * (regions - len(owner))
        order = rng.permutation(regions)  # region order carries no information
        region_object = [owner[r] for r in order]
        scene.region_object = region_object
        for r, j in enumerate(region_object):
            if j < 0:
                rows[i, r, 3] = off["scene"] + SCENE_TYPES.index(scene.scene_type)
                rows[i, r, 4] = off["clutter"] + int(rng.integers(NUM_CLUTTER))
                continue
            o = scene.objects[j]
            rows[i, r, 0] = off["category"] + CATEGORIES.index(o.category)
            rows[i, r, 1] = off["colour"] + COLOURS.index(o.colour)
            rows[i, r, 2] = off["size"] + SIZES.index(o.size)
            rows[i, r, 3] = off["position"] + POSITIONS.index(o.position)
        obj = np.array(region_object) >= 0
        w = rng.uniform(0.0, 1.0, size=(regions, COMPONENTS)).astype(np.float32)
        # object regions: category strongest; some boxes miss the colour (part/occlusion)
        w[obj] *= np.array([0.6, 0.8, 0.3, 0.3, 0.0], np.float32)
        w[obj, 0] += 0.4
        w[obj, 1] *= rng.random(int(obj.sum())) >= 0.2
        # background: scene type plus clutter
        w[~obj] *= np.array([0.0, 0.0, 0.0, 0.6, 0.6], np.float32)
        w[~obj, 3] += 0.3
        weights[i] = w
    return RegionRecipes(rows, weights)


def render_features(
    recipes: RegionRecipes,
    bank: DirectionBank,
    start: int,
    stop: int,
    rng: np.random.Generator,
    region_noise: float,
    *,
    nuisance: float = 0.5,
    sparsity: float = 0.0,
    scale: float = 0.5,
    nuisance_rng: np.random.Generator | None = None,
) -> np.ndarray:
    """Features of images ``start:stop``, (B, R, D) float32, non-negative.

    ``scale * relu(sum_c w_c dir_c + region_noise * e_region + nuisance * e_image - sparsity)``

    Args:
        recipes: region recipes of the split.
        bank: the world's directions.
        start, stop: image range.
        rng: generator of this chunk (seeded per chunk, so output does not depend on threads).
        region_noise: std of the per-region Gaussian noise (directions have unit variance).
        nuisance: std of the per-image nuisance vector shared by all regions of an image.
        sparsity: threshold subtracted before the ReLU; higher zeroes more entries (BUTD
            features are sparse: about half zeros at 0, about 80% at 1).
        scale: overall multiplier of the features (their magnitude, not their information).
        nuisance_rng: draw the per-image nuisance vectors from this generator instead (``rng``
            still draws its own, so the region noise is unchanged): the same images with
            another identity (:func:`precomputed.synthetic.writer.redraw_nuisance`).
    """
    rows = recipes.rows[start:stop]
    weights = recipes.weights[start:stop]
    b, r, _ = rows.shape
    dim = bank.table.shape[1]
    x = rng.standard_normal((b, r, dim), dtype=np.float32)
    x *= np.float32(region_noise)
    image = rng.standard_normal((b, 1, dim), dtype=np.float32)
    if nuisance_rng is not None:
        image = nuisance_rng.standard_normal((b, 1, dim), dtype=np.float32)
    x += np.float32(nuisance) * image
    for c in range(COMPONENTS):
        x += weights[:, :, c, None] * bank.table[rows[:, :, c]]
    if sparsity:
        x -= np.float32(sparsity)
    np.maximum(x, 0.0, out=x)
    x *= np.float32(scale)
    return x
