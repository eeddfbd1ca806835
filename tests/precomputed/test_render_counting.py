"""The counting world as images (a second CLIP world): deterministic top-down renders whose
counts can be read off the picture, written by the same CLIP-layout writer."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from PIL import Image

from precomputed.errors import DataFormatError
from precomputed.image_layout import open_image_split
from precomputed.synthetic import make_synthetic
from precomputed.synthetic.glyphs import COLOUR_RGB
from precomputed.synthetic.render import renderer_for, write_clip_images
from precomputed.synthetic.render_counting import GROUNDS, render_counting_scene

SCENE = {
    "image_id": 0,
    "place": "grass",
    "groups": [{"category": "dog", "colour": "red", "count": 2},
               {"category": "car", "colour": "blue", "count": 1}],
}  # fmt: skip


def pixels(scene: dict, size: int = 64) -> np.ndarray:
    return np.asarray(render_counting_scene(scene, size))


def test_render_is_deterministic_and_sized():
    a = pixels(SCENE)
    assert a.shape == (64, 64, 3) and a.dtype == np.uint8
    assert np.array_equal(a, pixels(copy.deepcopy(SCENE)))
    assert pixels(SCENE, 96).shape == (96, 96, 3)


def cells_showing(img: np.ndarray, colour: str) -> int:
    """Cells of the 3 x 3 grid in which ``colour`` covers over 4% of the cell."""
    side = img.shape[0] // 3
    mask = np.abs(img.astype(int) - COLOUR_RGB[colour]).sum(-1) < 10
    return sum(mask[r * side : (r + 1) * side, c * side : (c + 1) * side].mean() > 0.04
               for r in range(3) for c in range(3))  # fmt: skip


@pytest.mark.parametrize("image_id", range(6))
def test_a_count_is_drawn_as_that_many_instances(image_id):
    """Each instance of a group takes a cell of its own: the red cells are the dogs' count."""
    for count in (1, 2, 3):
        scene = copy.deepcopy({**SCENE, "image_id": image_id})
        scene["groups"][0]["count"] = count
        img = pixels(scene, 96)
        assert cells_showing(img, "red") == count and cells_showing(img, "blue") == 1


@pytest.mark.parametrize("change", [("place", "water"), ("colour", "green"), ("category", "cat")])
def test_each_attribute_changes_the_picture(change):
    key, value = change
    other = copy.deepcopy(SCENE)
    (other if key == "place" else other["groups"][0])[key] = value
    assert not np.array_equal(pixels(SCENE), pixels(other))


def test_every_place_has_a_ground_and_bad_values_are_named():
    from precomputed.synthetic.generators import GENERATOR_PLACES

    assert set(GROUNDS) == set(GENERATOR_PLACES["counting"])
    with pytest.raises(DataFormatError, match="place 'moon'"):
        render_counting_scene({**SCENE, "place": "moon"}, 64)
    bad = copy.deepcopy(SCENE)
    bad["groups"][0]["count"] = 4
    with pytest.raises(DataFormatError, match="count 1-3"):
        render_counting_scene(bad, 64)


def test_the_writer_renders_a_counting_world_with_its_renderer(tmp_path):
    root = make_synthetic(tmp_path, generator="counting", num_train=6, num_dev=2, num_test=2,
                          regions=4, feature_dim=8)  # fmt: skip
    out = write_clip_images(root, size=32)
    info = json.loads((out / "render.json").read_text())
    assert info["generator"] == "counting" and info["splits"]["train"]["images"] == 6
    scenes = [json.loads(x) for x in (root / "synthetic_precomp" / "train_scenes.jsonl")
              .read_text().splitlines()]  # fmt: skip
    split = open_image_split(out, "train", naming="f30k", captions_per_image=5)
    with Image.open(split.image_path(0)) as img:
        assert np.array_equal(np.asarray(img.convert("RGB")), pixels(scenes[0], 32))


def test_a_world_without_a_renderer_is_refused_by_name(tmp_path):
    root = make_synthetic(tmp_path, generator="activity", num_train=4, num_dev=2, num_test=2,
                          regions=4, feature_dim=8)  # fmt: skip
    with pytest.raises(ValueError, match="activity generator has no image renderer"):
        write_clip_images(root, size=32)
    with pytest.raises(ValueError, match="no image renderer"):
        renderer_for("activity")


def test_the_render_tool_times_and_refuses_by_the_worlds_generator(tmp_path, tool, capsys):
    counting = make_synthetic(tmp_path / "c", generator="counting", num_train=4, num_dev=2,
                              num_test=2, regions=4, feature_dim=8)  # fmt: skip
    assert tool("render_synthetic").main(["--root", str(counting), "--time", "4"]) == 0
    assert "4 scenes at 64 px" in capsys.readouterr().out
    activity = make_synthetic(tmp_path / "a", generator="activity", num_train=4, num_dev=2,
                              num_test=2, regions=4, feature_dim=8)  # fmt: skip
    assert tool("render_synthetic").main(["--root", str(activity)]) == 2
    assert "activity generator has no image renderer" in capsys.readouterr().err
