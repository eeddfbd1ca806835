"""World generators of other structure than the default scene world (``--generator NAME``).

The default generator (:mod:`.world`, :mod:`.features`, :mod:`.captions`) builds every region
as an *additive* mix of attribute directions, gives objects most regions, and writes short
template captions. A method tuned on it can lean on that structure, so these generators
change the structure itself, not its knobs, and write the same SCAN/NCR layout:

``counting``
    Groups of 1-3 instances of a category (1-7 objects per scene). A region shows one
    instance; its feature *binds* colour to category multiplicatively (the colour direction
    is masked by a per-category sign pattern, so "red dog" and "red car" share no colour
    direction), each instance gets its own random gain (log-normal), and regions that show
    no instance are empty (near zero) or weakly show the ground. Captions count ("two black
    dogs and a ball on the grass"), use plurals, and put the place first or last.
``activity``
    One or two actors, each with a clothing colour, an action and an item, in a place. An
    actor region is a random two-layer network of the *conjunction* (actor, colour, action),
    so no attribute has a direction of its own; at least 40% of the regions show the place
    and clutter, and every image gets a structured appearance shift (a mix of 8 shared
    "lighting" directions) instead of isotropic noise. Captions are long Flickr-style
    sentences ("a young man in a red shirt is riding a bicycle on a street while a dog
    watches ."), 10-22 words.

Every word either generator writes is in the Flickr30K SCAN vocabulary (tested). Output is
deterministic given the arguments (seeded per split and stream, element-wise float32 maths
and fixed-order matrix products).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = [
    "GENERATORS",
    "GENERATOR_PLACES",
    "GeneratedSplit",
    "counting_captions",
    "counting_scene",
    "generator_words",
]

_SPLIT_CODES = {"train": 0, "dev": 1, "test": 2}


@dataclass
class GeneratedSplit:
    """One split of a generated world.

    Attributes:
        features: ``(N, regions, dim)`` float32, non-negative.
        captions: ``5 N`` captions in image order.
        scenes: one JSON-serialisable description per image.
    """

    features: np.ndarray
    captions: list[str]
    scenes: list[dict]


def _pick(rng: np.random.Generator, options: tuple[str, ...] | list[str]) -> str:
    return options[int(rng.integers(len(options)))]


def _join(parts: list[str]) -> str:
    if len(parts) == 1:
        return parts[0]
    return " , ".join(parts[:-1]) + " and " + parts[-1]


def _zipf(n: int, s: float = 0.8) -> np.ndarray:
    w = (np.arange(n) + 1.0) ** (-s)
    return w / w.sum()


# --------------------------------------------------------------------------- counting
_C_CATEGORIES = {
    "dog": "dogs", "cat": "cats", "man": "men", "woman": "women", "boy": "boys", "girl": "girls",
    "horse": "horses", "bird": "birds", "car": "cars", "bicycle": "bicycles", "ball": "balls",
    "umbrella": "umbrellas", "chair": "chairs", "boat": "boats", "bench": "benches",
    "kite": "kites", "tree": "trees", "cow": "cows", "bus": "buses", "hat": "hats",
}  # fmt: skip
_C_COLOURS = ("red", "blue", "green", "yellow", "black", "white", "brown", "orange")
_C_PLACES = ("grass", "water", "sand", "road", "snow", "street", "beach", "field", "stage",
             "sidewalk")  # fmt: skip
_C_COUNTS = {1: ("a", "one"), 2: ("two",), 3: ("three", "several")}
_C_LINKS = ("on the", "in the", "near the")
_C_OPENERS = ("", "there are", "we see", "a picture of")


def _counting_caption(rng: np.random.Generator, scene: dict) -> str:
    groups = scene["groups"]
    order = rng.permutation(len(groups))
    keep = [int(order[0])] + [int(i) for i in order[1:] if rng.random() < 0.55]
    nps = []
    for i in keep:
        g = groups[i]
        words = [_pick(rng, _C_COUNTS[g["count"]])]
        if rng.random() < 0.65:
            words.append(g["colour"])
        words.append(g["category"] if g["count"] == 1 else _C_CATEGORIES[g["category"]])
        if words[0] == "a" and words[1][0] in "aeiou":
            words[0] = "an"
        nps.append(" ".join(words))
    place = f"{_pick(rng, _C_LINKS)} {scene['place']}" if rng.random() < 0.7 else ""
    if place and rng.random() < 0.4:
        text = f"{place} , {_join(nps)}"
    else:
        text = f"{_pick(rng, _C_OPENERS)} {_join(nps)} {place}"
    return " ".join(text.split())


def counting_scene(rng: np.random.Generator, image_id: int) -> dict:
    """One counting scene record: 1-3 groups of 1-3 instances of a category, in a place
    (categories, colours and places Zipf-distributed)."""
    cats = list(_C_CATEGORIES)
    n_groups = int(rng.integers(1, 4))
    chosen = rng.choice(len(cats), size=n_groups, replace=False, p=_zipf(len(cats)))
    p_col = _zipf(len(_C_COLOURS))
    groups = [
        {"category": cats[int(c)], "colour": _C_COLOURS[int(rng.choice(8, p=p_col))],
         "count": int(rng.integers(1, 4))}
        for c in chosen
    ]  # fmt: skip
    place = int(rng.choice(len(_C_PLACES), p=_zipf(len(_C_PLACES))))
    return {"image_id": image_id, "place": _C_PLACES[place], "groups": groups}


def counting_captions(rng: np.random.Generator, scene: dict, num: int = 5) -> list[str]:
    """``num`` captions of one counting scene record."""
    return [_counting_caption(rng, scene) for _ in range(num)]


def _counting(
    seed: int, split: str, num: int, *, regions: int, dim: int
) -> GeneratedSplit:  # fmt: skip
    code = _SPLIT_CODES[split]
    cats = list(_C_CATEGORIES)
    bank = np.random.default_rng([seed, 101])
    cat_dir = bank.standard_normal((len(cats), dim), dtype=np.float32)
    col_dir = bank.standard_normal((len(_C_COLOURS), dim), dtype=np.float32)
    # Binding: the colour is seen through a per-category sign pattern (element-wise product),
    # so a colour has no direction shared across categories.
    col_mask = np.where(bank.random((len(cats), dim)) < 0.5, -1.0, 1.0).astype(np.float32)
    place_dir = bank.standard_normal((len(_C_PLACES), dim), dtype=np.float32)
    rng = np.random.default_rng([seed, code, 111])
    feats = np.zeros((num, regions, dim), dtype=np.float32)
    scenes, captions = [], []
    for i in range(num):
        scene = counting_scene(rng, i)
        place = _C_PLACES.index(scene["place"])
        groups = scene["groups"]
        instances = [(g, k) for g in groups for k in range(g["count"])]
        owner: list[int] = []
        for j in range(len(instances)):
            owner += [j] * int(rng.integers(2, 6))
        owner = owner[:regions] + [-1] * max(0, regions - len(owner))
        owner = [owner[r] for r in rng.permutation(regions)]
        x = np.zeros((regions, dim), dtype=np.float32)
        gains = np.exp(0.5 * rng.standard_normal(len(instances))).astype(np.float32)
        for r, j in enumerate(owner):
            if j < 0:
                # Empty region (no box content) or a weak view of the ground.
                if rng.random() < 0.5:
                    x[r] = 0.4 * place_dir[place]
                continue
            g, _ = instances[j]
            c, k = cats.index(g["category"]), _C_COLOURS.index(g["colour"])
            x[r] = gains[j] * (cat_dir[c] + 0.8 * col_dir[k] * col_mask[c])
        x += np.float32(0.35) * rng.standard_normal((regions, dim), dtype=np.float32)
        x -= np.float32(0.3)  # sparser than the default world's features
        np.maximum(x, 0.0, out=x)
        feats[i] = x
        scenes.append(scene)
        captions += [_counting_caption(rng, scene) for _ in range(5)]
    return GeneratedSplit(feats, captions, scenes)


# --------------------------------------------------------------------------- activity
_A_ACTORS = ("man", "woman", "boy", "girl", "child", "player", "dog")
_A_ACTOR_ADJ = ("young", "old", "little", "tall")
_A_COLOURS = ("red", "blue", "green", "yellow", "black", "white", "pink", "gray")
_A_CLOTHES = ("shirt", "jacket", "dress", "hat", "helmet")
_A_ACTIONS = {
    "riding": ("bicycle", "horse", "skateboard", "surfboard"),
    "holding": ("umbrella", "camera", "guitar", "bag", "book"),
    "throwing": ("ball", "frisbee"),
    "carrying": ("bag", "surfboard", "book"),
    "pushing": ("bicycle", "cart"),
    "playing": ("guitar", "ball"),
}
_A_ITEMS = sorted({x for v in _A_ACTIONS.values() for x in v})
_A_PLACES = {"street": "on a street", "beach": "on the beach", "park": "in a park",
             "snow": "in the snow", "stage": "on a stage", "field": "in a field",
             "sidewalk": "on the sidewalk", "mountain": "on a mountain"}  # fmt: skip
_A_WATCH = ("watches", "looks on", "stands nearby", "smiles")
_A_LINKS = ("while", "as")
_HIDDEN = 64
_LIGHTS = 8


def _activity_np(rng: np.random.Generator, actor: dict, detail: bool) -> str:
    words = ["a"]
    if rng.random() < 0.5:
        words.append(_pick(rng, _A_ACTOR_ADJ))
    words.append(actor["actor"])
    if actor["actor"] == "dog":
        if detail:
            words.insert(-1, actor["colour"])
        text = " ".join(words)
    else:
        text = " ".join(words)
        if detail:
            text += f" in a {actor['colour']} {actor['clothes']}"
    if text.startswith("a ") and text[2] in "aeiou":
        text = "an" + text[1:]
    return text


def _activity_caption(rng: np.random.Generator, scene: dict) -> str:
    actors = scene["actors"]
    first = actors[int(rng.integers(len(actors)))]
    subject = _activity_np(rng, first, detail=rng.random() < 0.75)
    item = first["item"]
    article = "an" if item[0] in "aeiou" else "a"
    text = f"{subject} is {first['action']} {article} {item}"
    if rng.random() < 0.75:
        text += " " + _A_PLACES[scene["place"]]
    others = [a for a in actors if a is not first]
    if others and rng.random() < 0.6:
        other = others[0]
        o_np = _activity_np(rng, other, detail=rng.random() < 0.5)
        if rng.random() < 0.5:
            text += f" {_pick(rng, _A_LINKS)} {o_np} {_pick(rng, _A_WATCH)}"
        else:
            art = "an" if other["item"][0] in "aeiou" else "a"
            text += f" and {o_np} is {other['action']} {art} {other['item']} nearby"
    if rng.random() < 0.6:
        text += " ."
    return text


def _activity(
    seed: int, split: str, num: int, *, regions: int, dim: int
) -> GeneratedSplit:  # fmt: skip
    code = _SPLIT_CODES[split]
    actions = list(_A_ACTIONS)
    places = list(_A_PLACES)
    bank = np.random.default_rng([seed, 202])
    # A random two-layer network of the conjunction (actor, colour, action) and of (item,
    # action): the features of an attribute depend on the others, there is no additive code.
    width = len(_A_ACTORS) + len(_A_COLOURS) + len(actions)
    w_actor = bank.standard_normal((width, _HIDDEN), dtype=np.float32)
    w_item = bank.standard_normal((len(_A_ITEMS) + len(actions), _HIDDEN), dtype=np.float32)
    out = bank.standard_normal((_HIDDEN, dim), dtype=np.float32) / np.float32(np.sqrt(_HIDDEN))
    place_dir = bank.standard_normal((len(places), dim), dtype=np.float32)
    clutter = bank.standard_normal((12, dim), dtype=np.float32)
    lights = bank.standard_normal((_LIGHTS, dim), dtype=np.float32)
    rng = np.random.default_rng([seed, code, 222])
    p_actor, p_place = _zipf(len(_A_ACTORS)), _zipf(len(places))
    feats = np.zeros((num, regions, dim), dtype=np.float32)
    scenes, captions = [], []
    content = max(1, int(0.6 * regions))  # at least 40% of regions show place and clutter
    for i in range(num):
        actors = []
        for _ in range(int(rng.integers(1, 3))):
            action = _pick(rng, actions)
            actors.append({
                "actor": _A_ACTORS[int(rng.choice(len(_A_ACTORS), p=p_actor))],
                "colour": _pick(rng, _A_COLOURS), "clothes": _pick(rng, _A_CLOTHES),
                "action": action, "item": _pick(rng, _A_ACTIONS[action]),
            })  # fmt: skip
        place = int(rng.choice(len(places), p=p_place))
        scene = {"image_id": i, "place": places[place], "actors": actors}
        x = np.zeros((regions, dim), dtype=np.float32)
        kinds = []
        for j in range(len(actors)):
            per = content // len(actors)
            kinds += [(j, "actor")] * (per - per // 3) + [(j, "item")] * (per // 3)
        kinds += [(-1, "place")] * (regions - len(kinds))
        kinds = [kinds[r] for r in rng.permutation(regions)]
        for r, (j, kind) in enumerate(kinds):
            if kind == "place":
                x[r] = 0.7 * place_dir[place] + 0.7 * clutter[int(rng.integers(12))]
                continue
            a = actors[j]
            act = actions.index(a["action"])
            if kind == "actor":
                h = (w_actor[_A_ACTORS.index(a["actor"])]
                     + w_actor[len(_A_ACTORS) + _A_COLOURS.index(a["colour"])]
                     + w_actor[len(_A_ACTORS) + len(_A_COLOURS) + act])  # fmt: skip
            else:
                h = w_item[_A_ITEMS.index(a["item"])] + w_item[len(_A_ITEMS) + act]
            h = np.tanh(h + 0.3 * rng.standard_normal(_HIDDEN, dtype=np.float32))
            x[r] = 2.0 * (h @ out)
        shift = rng.standard_normal(_LIGHTS, dtype=np.float32) @ lights
        x += np.float32(0.3) * shift[None, :]
        x += np.float32(0.4) * rng.standard_normal((regions, dim), dtype=np.float32)
        np.maximum(x, 0.0, out=x)
        feats[i] = np.float32(1.5) * x
        scenes.append(scene)
        captions += [_activity_caption(rng, scene) for _ in range(5)]
    return GeneratedSplit(feats, captions, scenes)


GENERATORS: dict[str, Callable[..., GeneratedSplit]] = {
    "counting": _counting,
    "activity": _activity,
}

# The place words each generator's captions use ("on the grass", "in a park").
GENERATOR_PLACES: dict[str, tuple[str, ...]] = {
    "counting": _C_PLACES,
    "activity": tuple(_A_PLACES),
}


def generator_words(name: str) -> set[str]:
    """Every word generator ``name`` can write (for the vocabulary test)."""
    if name == "counting":
        words = [*_C_CATEGORIES, *_C_CATEGORIES.values(), *_C_COLOURS, *_C_PLACES, *_C_LINKS,
                 *_C_OPENERS, "a an one two three several , and"]  # fmt: skip
    elif name == "activity":
        words = [*_A_ACTORS, *_A_ACTOR_ADJ, *_A_COLOURS, *_A_CLOTHES, *_A_ACTIONS, *_A_ITEMS,
                 *_A_PLACES.values(), *_A_WATCH, *_A_LINKS,
                 "a an in is and nearby ."]  # fmt: skip
    else:
        raise KeyError(name)
    return {w for phrase in words for w in phrase.split()}
