"""The dataset catalog: each known name's facts, exact-name lookups, and the rule for a name it
does not hold."""

from __future__ import annotations

import pytest

from precomputed.catalog import (
    CATALOG,
    IMAGE_NAMINGS,
    UNKNOWN_PROTOCOL,
    dataset_entry,
    image_datasets,
    split_protocol,
)
from precomputed.synthetic import DATASET_NAME
from precomputed.synthetic.render import CLIP_DATASET_NAME
from ugncl.run.config import CONFIG_DIR, DEFAULT_BASE, load_config


@pytest.mark.parametrize(
    ("name", "captions", "dev", "naming"),
    [
        ("f30k_precomp", 5, 1000, None), ("f30k", 5, 1000, "f30k"),
        ("coco_precomp", 5, 1000, None), ("coco", 5, 5000, "coco"),
        ("cc152k_precomp", 1, 1000, None), ("cc120k", 1, 1000, "cc"),
        ("synthetic_precomp", 5, None, None), ("synthetic_clip", 5, None, "f30k"),
    ],
)  # fmt: skip
def test_each_known_dataset_states_its_facts(name, captions, dev, naming) -> None:
    entry = dataset_entry(name)
    assert (entry.captions_per_image, entry.dev_images, entry.image_naming) == (
        captions, dev, naming,
    )  # fmt: skip
    assert entry.view == ("region" if naming is None else "image")


@pytest.mark.parametrize(
    ("name", "split", "num_images", "expected"),
    [
        ("coco_precomp", "testall", None, "coco5fold"), ("coco_precomp", "test", None, "1k"),
        ("coco", "test", 5000, "coco5fold"), ("coco", "test", 1000, "1k"),
        ("coco_precomp", "test", 5000, "1k"),  # SCAN/NCR call the 5K set testall, not test
        ("f30k_precomp", "test", None, "1k"), ("f30k", "test", 5000, "1k"),
        ("cc152k_precomp", "test", None, "1k"), ("cc120k", "test", None, "1k"),
        ("f30k_precomp", "dev", None, "full"), ("coco", "dev", 5000, "full"),
        ("synthetic_precomp", "test", None, "full"), ("synthetic_clip", "test", None, "full"),
    ],
)  # fmt: skip
def test_the_protocol_of_each_known_split(name, split, num_images, expected) -> None:
    assert split_protocol(name, split, num_images) == expected


@pytest.mark.parametrize("name", ["my_coco_subset", "COCO_precomp", "flickr30k", "cc1m", "f30k_2"])
def test_an_unknown_name_is_full_and_nothing_is_guessed_from_its_letters(name) -> None:
    assert dataset_entry(name) is None
    assert split_protocol(name, "testall", 5000) == split_protocol(name, "test") == "full"
    assert UNKNOWN_PROTOCOL == "full"


def test_the_synthetic_writers_folders_are_known() -> None:
    assert dataset_entry(DATASET_NAME).view == "region"
    assert dataset_entry(CLIP_DATASET_NAME).image_naming in IMAGE_NAMINGS
    assert set(image_datasets()) == {"f30k", "coco", "cc120k", "synthetic_clip"}


def test_the_shipped_configs_agree_with_the_catalog() -> None:
    """Every shipped config on a known dataset reads it with the catalog's captions per image,
    and on a released dataset selects the epoch on the catalog's dev size."""
    seen = set()
    for path in sorted(CONFIG_DIR.glob("*.yaml")):
        if path == DEFAULT_BASE:
            continue
        data = load_config(path)[0].data
        entry = CATALOG[data.name]  # a KeyError names a shipped config off the catalog
        seen.add(entry.family)
        assert data.captions_per_image == entry.captions_per_image, path.name
        if entry.dev_images is not None:
            assert data.dev_images == entry.dev_images, path.name
    assert seen == {"Flickr30K", "MS-COCO", "CC152K", "CC120K", "synthetic"}
