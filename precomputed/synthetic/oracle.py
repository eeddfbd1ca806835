"""The exact-scene oracle: the retrieval ceiling of a synthetic split.

The oracle sees the scene behind every image (``{split}_scenes.jsonl``) instead of its region
features. It parses each caption back into what the templates of :mod:`.captions` put in it
(noun phrases with their optional size, colour and position, and the scene word) and scores a
(scene, caption) pair by how many of those claims the scene satisfies, minus how many it
contradicts:

* a noun phrase is satisfied if the scene has an object of its category whose colour, size and
  position match every attribute the phrase mentions;
* the scene word is satisfied if it names the scene type.

For text-to-image ranking (one caption, all scenes) this is the plain count of satisfied
claims, since a caption's number of claims is fixed. For image-to-text ranking subtracting the
contradicted claims keeps a long caption of another scene that shares some claims from
outranking a shorter caption that is entirely true (with the plain count the oracle's i2t R@1
on the default test split is 46.4, below a trained model's; with the difference 54.8).

Relations between objects are not checked (they follow from the positions). Scores are small
integers, so many pairs tie; ties are broken by a fixed pseudo-random jitter in [0, 0.5) per
pair (seeded, independent of the order of images and captions), which neither favours nor
penalises the ground truth. The result is a score matrix for :mod:`ugncl.core.metrics`-style
evaluation: how well a model that recovered every scene exactly could rank this split,
given how partial and ambiguous the captions are.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .captions import _POSITION_PHRASES, _SIZE_WORDS
from .world import CATEGORIES, COLOURS, SCENE_TYPES, Scene

__all__ = ["CaptionClaims", "NounPhrase", "oracle_scores", "parse_caption"]

_SIZE_OF = {w: size for size, words in _SIZE_WORDS.items() for w in words}
_CATEGORY_SET = frozenset(CATEGORIES)
_COLOUR_SET = frozenset(COLOURS)
_SCENE_SET = frozenset(SCENE_TYPES)
# Position phrases as token tuples, longest first, so "in the middle" is not read as "in the".
_POSITION_TOKENS = sorted(
    ((tuple(p.split()), pos) for pos, phrases in _POSITION_PHRASES.items() for p in phrases),
    key=lambda item: -len(item[0]),
)


@dataclass(frozen=True)
class NounPhrase:
    """One object a caption mentions; ``None`` attributes were left out by the caption."""

    category: str
    colour: str | None = None
    size: str | None = None
    position: str | None = None


@dataclass(frozen=True)
class CaptionClaims:
    """Everything a caption claims about its scene."""

    phrases: tuple[NounPhrase, ...]
    scene_type: str | None


def parse_caption(text: str) -> CaptionClaims:
    """Read a caption written by :func:`.captions.caption_scene` back into its claims.

    Args:
        text: one caption (whitespace-separated tokens, as in ``{split}_caps.txt``).

    Returns:
        The noun phrases (``a|an [size] [colour] category [position phrase]``) and the scene
        word (from a place phrase such as "on the beach" or from "a beach scene with").
    """
    tokens = text.lower().split()
    phrases: list[NounPhrase] = []
    scene_type = None
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok in _SCENE_SET:
            # "a beach scene with", or the last word of a place phrase ("in a park"): every
            # place phrase ends with its scene word (tested).
            scene_type = tok
            i += 1
            continue
        if tok in ("a", "an"):
            j, size, colour = i + 1, None, None
            if j < len(tokens) and tokens[j] in _SIZE_OF:
                size, j = _SIZE_OF[tokens[j]], j + 1
            if j < len(tokens) and tokens[j] in _COLOUR_SET:
                colour, j = tokens[j], j + 1
            if j < len(tokens) and tokens[j] in _CATEGORY_SET:
                category, j = tokens[j], j + 1
                position = _position_at(tokens, j)
                if position is not None:
                    j += len(position[0])
                pos = None if position is None else position[1]
                phrases.append(NounPhrase(category, colour, size, pos))
                i = j
                continue
        i += 1
    return CaptionClaims(tuple(phrases), scene_type)


def _position_at(tokens: list[str], j: int) -> tuple[tuple[str, ...], str] | None:
    """The position phrase starting at token ``j``, skipping a verb ("is", "can be seen")."""
    for skip in range(0, 4):
        for phrase, pos in _POSITION_TOKENS:
            k = j + skip
            if tuple(tokens[k : k + len(phrase)]) == phrase:
                # A relation ("to the left of") is not a position; "on the left" is.
                if k + len(phrase) < len(tokens) and tokens[k + len(phrase)] == "of":
                    return None
                return tuple(tokens[j : k + len(phrase)]), pos
        if j + skip >= len(tokens) or tokens[j + skip] in ("a", "an", ",", "and", "."):
            return None
    return None


def _satisfied(claims: CaptionClaims, scene: Scene) -> int:
    count = int(claims.scene_type is not None and claims.scene_type == scene.scene_type)
    for p in claims.phrases:
        count += any(
            o.category == p.category
            and (p.colour is None or o.colour == p.colour)
            and (p.size is None or o.size == p.size)
            and (p.position is None or o.position == p.position)
            for o in scene.objects
        )
    return count


def oracle_scores(scenes: list[Scene], captions: list[str], *, seed: int = 0) -> np.ndarray:
    """The oracle's ``(n_img, n_cap)`` score matrix: satisfied - contradicted claims + jitter.

    Args:
        scenes: the split's scenes in image order.
        captions: the split's captions in caption order.
        seed: seed of the tie-breaking jitter (fixed per (image, caption) pair).

    Returns:
        float64 ``(n_img, n_cap)``: the integer ``satisfied - contradicted`` plus a jitter in
        [0, 0.5), so a pair with a higher integer score always ranks higher.
    """
    claims = [parse_caption(c) for c in captions]
    total = np.array([len(c.phrases) + (c.scene_type is not None) for c in claims], np.float64)
    satisfied = np.array([[_satisfied(c, s) for c in claims] for s in scenes], dtype=np.float64)
    jitter = np.random.default_rng([seed, 104729]).random(satisfied.shape) * 0.5
    return 2.0 * satisfied - total[None, :] + jitter
