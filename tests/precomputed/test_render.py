"""The synthetic world as images: deterministic renders, written in the CLIP layout."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from PIL import Image

from precomputed.catalog import dataset_entry
from precomputed.errors import DataFormatError, DataNotFoundError
from precomputed.image_layout import open_image_split
from precomputed.synthetic import make_synthetic
from precomputed.synthetic.render import GLYPHS, read_scenes, render_scene, write_clip_images
from precomputed.synthetic.world import CATEGORIES

SCENE = {
    "image_id": 3,
    "scene_type": "beach",
    "objects": [
        {"category": "dog", "colour": "red", "size": "large", "position": "left"},
        {"category": "kite", "colour": "blue", "size": "small", "position": "top"},
    ],
    "relations": [{"subject": 1, "relation": "above", "object": 0}],
    "region_object": [],
}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("render_world")
    make_synthetic(root, num_train=6, num_dev=2, num_test=2, regions=4, feature_dim=8)
    return root


def pixels(scene: dict, size: int = 64) -> np.ndarray:
    return np.asarray(render_scene(scene, size))


def test_render_is_deterministic_and_sized():
    a = pixels(SCENE, 64)
    assert a.shape == (64, 64, 3) and a.dtype == np.uint8
    assert np.array_equal(a, pixels(copy.deepcopy(SCENE), 64))
    assert pixels(SCENE, 96).shape == (96, 96, 3)


@pytest.mark.parametrize(
    "change",
    [
        ("scene_type", "snow"),
        ("colour", "green"),
        ("category", "car"),
        ("size", "small"),
        ("position", "right"),
    ],
)
def test_each_attribute_changes_the_picture(change):
    key, value = change
    other = copy.deepcopy(SCENE)
    if key == "scene_type":
        other[key] = value
    else:
        other["objects"][0][key] = value
    diff = np.abs(pixels(SCENE).astype(int) - pixels(other).astype(int)).sum(-1) > 0
    assert diff.sum() > 20  # more than a few jittered edge pixels


def test_the_object_colour_is_drawn_where_the_position_says():
    img = pixels(SCENE, 96).astype(int)
    red = (img[..., 0] > 200) & (img[..., 1] < 60)
    assert red[40:70, 5:40].sum() > 50  # the large red dog on the left
    assert red[:, 60:].sum() == 0


def test_every_category_has_a_glyph_and_bad_values_are_named():
    assert set(GLYPHS) == set(CATEGORIES)
    bad = copy.deepcopy(SCENE)
    bad["objects"][1]["colour"] = "teal"
    with pytest.raises(DataFormatError, match="colour 'teal'"):
        render_scene(bad, 64)
    with pytest.raises(ValueError, match="size must be >= 16"):
        render_scene(SCENE, 8)


def test_writer_uses_the_features_captions_splits_and_order(world):
    out = write_clip_images(world, size=32)
    ann = out / "annotations" / "scan_split"
    precomp = world / "synthetic_precomp"
    for split, n in (("train", 6), ("dev", 2), ("test", 2)):
        assert (ann / f"{split}_caps.txt").read_bytes() == (
            precomp / f"{split}_caps.txt"
        ).read_bytes()
        ids = (ann / f"{split}_ids.txt").read_text().split()
        assert len(ids) == (n if split == "train" else 5 * n)  # NPC: dev/test ids per caption
        split_obj = open_image_split(out, split, naming="f30k", captions_per_image=5)
        assert split_obj.num_images == n
        scenes = read_scenes(precomp / f"{split}_scenes.jsonl")
        for i in (0, n - 1):
            with Image.open(split_obj.image_path(i)) as img:
                assert np.array_equal(np.asarray(img.convert("RGB")), pixels(scenes[i], 32))
    names = (ann / "image_name.txt").read_text().split()
    assert len(names) == 10 and names[0] == "train_000000.png" and names[6] == "dev_000000.png"
    info = json.loads((out / "render.json").read_text())
    assert info["size"] == 32 and info["splits"]["dev"] == {"images": 2, "captions": 10}
    entry = dataset_entry(out.name)
    assert (entry.image_naming, entry.captions_per_image) == (
        info["image_naming"], info["captions_per_image"],
    )  # fmt: skip


def test_writer_names_a_missing_world(tmp_path, tool):
    with pytest.raises(DataNotFoundError, match="make_synthetic"):
        write_clip_images(tmp_path)
    assert tool("render_synthetic").main(["--root", str(tmp_path)]) == 2


def test_tool_writes_and_times(world, tool, capsys):
    render = tool("render_synthetic").main
    assert (
        render(["--root", str(world), "--name", "clip_jpg", "--size", "24", "--format", "jpg"]) == 0
    )
    assert (world / "clip_jpg" / "images" / "test_000001.jpg").is_file()
    assert render(["--root", str(world), "--time", "4"]) == 0
    assert "4 scenes at 64 px: render" in capsys.readouterr().out
