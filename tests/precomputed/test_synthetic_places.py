"""The place a synthetic caption names, against its paired image (synthetic.places)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from precomputed.errors import DataFormatError
from precomputed.noise import load_noise_index
from precomputed.synthetic import make_synthetic
from precomputed.synthetic.generators import GENERATORS
from precomputed.synthetic.places import (
    NAMES_ANOTHER_PLACE,
    NAMES_ITS_PLACE,
    NAMES_NO_PLACE,
    generator_places,
    place_claims,
    read_place_claims,
)

TINY = dict(num_train=40, num_dev=2, num_test=2, regions=8, feature_dim=16)


def test_a_caption_names_its_image_place_another_place_or_none() -> None:
    scenes = [{"scene_type": "beach"}, {"place": "snow"}]
    captions = ["a dog on the beach", "a dog on the beach", "a red cat", "Two men in the SNOW"]
    claims = place_claims(scenes, captions, np.array([0, 1, 0, 1]), frozenset({"beach", "snow"}))
    assert claims.tolist() == [NAMES_ITS_PLACE, NAMES_ANOTHER_PLACE, NAMES_NO_PLACE,
                               NAMES_ITS_PLACE]  # fmt: skip
    with pytest.raises(ValueError, match="4 captions but 3 paired images"):
        place_claims(scenes, captions, np.array([0, 1, 0]), frozenset({"beach"}))


@pytest.mark.parametrize("generator", ["default", *sorted(GENERATORS)])
def test_a_true_caption_never_names_another_place(tmp_path, generator: str) -> None:
    """Every generator's place words name only places: a caption paired with its own image
    names that image's place or none (a place word used for an object would fail this), and
    the 70% noise file pairs some captions with images of another place."""
    root = make_synthetic(tmp_path, seed=3, generator=generator, noise_ratios=(0.7,), **TINY)
    own = np.arange(40 * 5) // 5
    claims = read_place_claims(root, "synthetic_precomp", own)
    assert NAMES_ANOTHER_PLACE not in claims
    assert (claims == NAMES_ITS_PLACE).sum() >= 40  # most captions name the place
    noisy = load_noise_index(root / "synthetic_precomp" / "noise_0.7_seed0.npy", num_images=40,
                             captions_per_image=5)  # fmt: skip
    shuffled = read_place_claims(root, "synthetic_precomp", noisy)
    assert (shuffled == NAMES_ANOTHER_PLACE).sum() > 0
    assert (shuffled[noisy == own] == claims[noisy == own]).all()


def test_the_pairs_must_fit_the_world_and_its_generator_be_known(tmp_path) -> None:
    root = make_synthetic(tmp_path, seed=3, **TINY)
    with pytest.raises(DataFormatError, match="200 train captions and 40 scenes, fewer than"):
        read_place_claims(root, "synthetic_precomp", np.zeros(201, dtype=np.int64))
    settings = root / "synthetic_precomp" / "world.json"
    settings.write_text(json.dumps({**json.loads(settings.read_text()), "generator": "nope"}))
    with pytest.raises(DataFormatError, match="unknown synthetic generator 'nope'"):
        read_place_claims(root, "synthetic_precomp", np.zeros(5, dtype=np.int64))
    assert generator_places("default") >= {"beach", "street"}
