"""Captions of a scene from varied templates, each mentioning a subset of its objects."""

from __future__ import annotations

import numpy as np

from .world import Scene, SceneObject, relation_between

__all__ = ["TEMPLATE_WORDS", "caption_scene"]

_SIZE_WORDS = {"small": ("small", "little", "tiny"), "large": ("large", "big", "huge")}
_POSITION_PHRASES = {
    "left": ("on the left",),
    "right": ("on the right",),
    "center": ("in the center", "in the middle"),
    "top": ("at the top",),
    "bottom": ("at the bottom",),
}
_RELATION_PHRASES = {
    "left of": ("to the left of",),
    "right of": ("to the right of",),
    "above": ("above",),
    "below": ("below", "under"),
    "next to": ("next to", "near", "beside"),
}
_SCENE_PHRASES = {
    "beach": "on the beach", "street": "on a street", "park": "in a park", "field": "in a field",
    "kitchen": "in a kitchen", "room": "in a room", "city": "in the city",
    "forest": "in a forest", "garden": "in a garden", "stage": "on a stage",
    "market": "at a market", "desert": "in the desert", "lake": "near a lake",
    "snow": "in the snow",
}  # fmt: skip
_OPENERS = ("there is", "a picture of", "a photo of", "this image shows", "we can see")
_VERBS = ("is", "can be seen", "is shown", "stands")
# Words used by the templates themselves (for the vocabulary test).
TEMPLATE_WORDS = " ".join(
    [*_OPENERS, *_VERBS, "a an and , . scene with"]
    + [w for v in _SIZE_WORDS.values() for w in v]
    + [p for v in _POSITION_PHRASES.values() for p in v]
    + [p for v in _RELATION_PHRASES.values() for p in v]
    + list(_SCENE_PHRASES.values())
).split()


def _pick(rng: np.random.Generator, options: tuple[str, ...]) -> str:
    return options[int(rng.integers(len(options)))]


def _noun_phrase(rng: np.random.Generator, obj: SceneObject, partialness: float) -> str:
    words = []
    if rng.random() < 0.6 * (1.0 - partialness):
        words.append(_pick(rng, _SIZE_WORDS[obj.size]))
    if rng.random() < 1.0 - 0.6 * partialness:
        words.append(obj.colour)
    words.append(obj.category)
    article = "an" if words[0][0] in "aeiou" else "a"
    return " ".join([article, *words])


def _join(phrases: list[str]) -> str:
    if len(phrases) == 1:
        return phrases[0]
    return " , ".join(phrases[:-1]) + " and " + phrases[-1]


def caption_scene(
    rng: np.random.Generator, scene: Scene, num_captions: int, partialness: float
) -> list[str]:
    """``num_captions`` captions of ``scene`` from distinct templates where possible.

    Args:
        rng: the split's caption generator.
        scene: the scene.
        num_captions: captions to write (5 in the default world).
        partialness: in [0, 1]; higher mentions fewer objects and attributes.
    """
    templates = rng.permutation(6)
    out = []
    for j in range(num_captions):
        n = len(scene.objects)
        order = rng.permutation(n)
        keep = [int(order[0])] + [int(i) for i in order[1:] if rng.random() >= partialness]
        nps = [_noun_phrase(rng, scene.objects[i], partialness) for i in keep]
        place = _SCENE_PHRASES[scene.scene_type] if rng.random() >= 0.5 * partialness else ""
        t = int(templates[j % len(templates)])
        if t == 0 and len(keep) >= 2:
            a, b = scene.objects[keep[0]], scene.objects[keep[1]]
            rel = _pick(rng, _RELATION_PHRASES[relation_between(a, b)])
            text = f"{nps[0]} {rel} {nps[1]} {place}"
        elif t == 1:
            text = f"{_pick(rng, _OPENERS)} {_join(nps)} {place}"
        elif t == 2:
            text = f"a {scene.scene_type} scene with {_join(nps)}"
        elif t == 3:
            obj = scene.objects[keep[0]]
            pos = _pick(rng, _POSITION_PHRASES[obj.position])
            text = f"{nps[0]} {_pick(rng, _VERBS)} {pos} {place}"
        elif t == 4 and len(keep) >= 2:
            parts = [
                f"{np_} {_pick(rng, _POSITION_PHRASES[scene.objects[i].position])}"
                for np_, i in zip(nps, keep)
            ]
            text = _join(parts)
        else:
            text = f"{_join(nps)} {place}"
        text = " ".join(text.split())
        if rng.random() < 0.5:
            text += " ."
        out.append(text)
    return out
