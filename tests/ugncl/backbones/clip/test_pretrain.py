"""The tiny CLIP's stand-in pretraining: a disjoint clean pool, InfoNCE steps, zero-shot eval."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw

from precomputed.synthetic import make_synthetic
from ugncl.backbones.clip.adapter import build_clip
from ugncl.backbones.clip.models import TINY_MODEL
from ugncl.backbones.clip.pretrain import (
    RENAMED_WORDS,
    WITHHELD_WORDS,
    PretrainConfig,
    exchange_token_rows,
    load_world_settings,
    make_pool,
    pretrain,
    pretrain_on_world,
    read_split,
    rename,
    rename_stand_in,
    render_images,
    scene_key,
)

_RGB = {"red": (220, 30, 30), "blue": (30, 70, 220), "green": (30, 160, 50)}
_XY = {"left": (0.2, 0.5), "right": (0.8, 0.5), "center": (0.5, 0.5), "top": (0.5, 0.2),
       "bottom": (0.5, 0.8)}  # fmt: skip


def stub_render(scene: dict, size: int) -> Image.Image:
    """Test-only renderer (the real one is precomputed.synthetic.render.render_scene)."""
    shade = sum(map(ord, scene["scene_type"])) % 200
    img = Image.new("RGB", (size, size), (shade, 255 - shade, 128))
    draw = ImageDraw.Draw(img)
    for obj in scene["objects"]:
        cx, cy = _XY[obj["position"]]
        r = size * (0.15 if obj["size"] == "large" else 0.08)
        colour = _RGB.get(obj["colour"], (sum(map(ord, obj["colour"])) % 255, 90, 40))
        box = (cx * size - r, cy * size - r, cx * size + r, cy * size + r)
        (draw.ellipse if len(obj["category"]) % 2 else draw.rectangle)(box, fill=colour)
    return img


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("world")
    make_synthetic(root, num_train=12, num_dev=4, num_test=6, regions=4, feature_dim=8,
                   noise_ratios=())  # fmt: skip
    return root


def test_pool_is_disjoint_from_the_splits_and_deterministic(world):
    settings = load_world_settings(world)
    split_scenes = [s for split in ("train", "dev", "test") for s in read_split(world, split)[0]]
    scenes, captions, _ = make_pool(settings, 40, split_scenes)
    assert len(scenes) == 40 and all(len(c) == 5 for c in captions)
    assert not {scene_key(s) for s in scenes} & {scene_key(s) for s in split_scenes}
    assert [s["image_id"] for s in scenes] == list(range(40))
    again, captions_again, _ = make_pool(settings, 40, split_scenes)
    assert again == scenes and captions_again == captions
    # Scenes equal to an excluded one are redrawn, not kept.
    redrawn, _, dropped = make_pool(settings, 40, scenes[:10])
    assert dropped >= 10 and not {scene_key(s) for s in redrawn} & {
        scene_key(s) for s in scenes[:10]
    }
    other, _, _ = make_pool(settings, 40, split_scenes, offset=1)
    assert other != scenes


def test_pretrain_steps_lower_the_loss(world):
    settings = load_world_settings(world)
    scenes, captions, _ = make_pool(settings, 16, [])
    torch.manual_seed(0)
    model = build_clip(TINY_MODEL)
    images = render_images(scenes, stub_render, model.image_size)
    assert images.dtype == torch.uint8 and images.shape == (16, 3, 64, 64)
    tokens = model.tokenizer()([c for caps in captions for c in caps]).view(16, 5, -1)
    logs = []
    cfg = PretrainConfig(steps=24, batch_size=8, lr=1e-3, warmup_steps=2, log_every=6)
    summary = pretrain(model, images, tokens, cfg, log=logs.append)
    assert [r["step"] for r in logs] == [6, 12, 18, 24]
    assert summary["last_loss"] < summary["first_loss"] - 0.1  # measured: 2.23 -> 1.94
    assert summary["pairs"] == 24 * 8 and summary["pairs_per_s"] > 0
    assert model.logit_scale.exp().item() <= 100.0 + 1e-3


def test_pretrain_on_world_records_pool_and_zero_shot(world):
    torch.manual_seed(0)
    model = build_clip(TINY_MODEL)
    cfg = PretrainConfig(steps=3, batch_size=4, warmup_steps=1, log_every=3)
    record = pretrain_on_world(model, world, stub_render, cfg, pool_size=8)
    assert record["pool"]["images"] == 8 and record["pool"]["captions"] == 40
    zs = record["zero_shot"]
    assert zs["split"] == "test" and 0.0 <= zs["rsum"] <= 600.0
    json.dumps(record)  # plain, for the checkpoint and the .json record


def test_renderer_size_mismatch_is_named(world):
    scenes, _, _ = make_pool(load_world_settings(world), 2, [])
    with pytest.raises(ValueError, match="renderer returned"):
        render_images(scenes, lambda s, size: stub_render(s, size + 1), 32)
    assert np.array_equal(render_images(scenes, stub_render, 32)[0].permute(1, 2, 0).numpy(),
                          np.asarray(stub_render(scenes[0], 32)))  # fmt: skip


def test_pretrain_tool_writes_a_loadable_checkpoint(world, tmp_path, tool, monkeypatch, capsys):
    # The tool picks the world's renderer; the test puts the stub in its place.
    pretrain_tool = tool("pretrain_clip")
    picked = []
    monkeypatch.setattr(pretrain_tool, "renderer_for", lambda g: picked.append(g) or stub_render)
    out = tmp_path / "tiny.pt"
    argv = ["--data", str(world), "--out", str(out), "--pool", "8", "--steps", "2",
            "--batch-size", "4", "--warmup", "1", "--threads", "1"]  # fmt: skip
    assert pretrain_tool.main(argv) == 0 and picked == [None]  # the default world
    record = json.loads(out.with_suffix(".json").read_text())
    assert record["train"]["steps"] == 2 and "rsum" in record["zero_shot"]
    model = build_clip(TINY_MODEL, pretrained=out)
    assert model.config["quick_gelu"] is False
    assert torch.load(out, weights_only=True)["pretraining"]["pool"]["images"] == 8
    assert pretrain_tool.main(["--data", str(tmp_path / "none"), "--out", str(out)]) == 2
    assert "make_synthetic" in capsys.readouterr().err


def test_a_counting_world_pools_its_own_scenes_disjoint_from_its_splits(tmp_path):
    """The counting world's pool: counting scenes and captions, none equal to a split scene;
    the activity world (no renderer) is refused by name."""
    root = make_synthetic(tmp_path / "c", generator="counting", num_train=12, num_dev=4,
                          num_test=4, regions=4, feature_dim=8, noise_ratios=())  # fmt: skip
    settings = load_world_settings(root)
    split_scenes = [s for split in ("train", "dev", "test") for s in read_split(root, split)[0]]
    scenes, captions, _ = make_pool(settings, 30, split_scenes)
    assert all("groups" in s for s in scenes) and [s["image_id"] for s in scenes] == list(range(30))
    assert not {scene_key(s) for s in scenes} & {scene_key(s) for s in split_scenes}
    assert all(len(c) == 5 and all(isinstance(x, str) and x for x in c) for c in captions)
    assert make_pool(settings, 30, split_scenes) == (scenes, captions, _)
    activity = make_synthetic(tmp_path / "a", generator="activity", num_train=4, num_dev=2,
                              num_test=2, regions=4, feature_dim=8, noise_ratios=())  # fmt: skip
    with pytest.raises(ValueError, match="activity world has no images"):
        make_pool(load_world_settings(activity), 5)


@pytest.mark.parametrize("generator", ["default", "counting"])
def test_the_withheld_pool_never_states_the_withheld_concept(tmp_path, generator):
    """The "withheld" pool is the stand-in's pool with the world's withheld words taken out of
    its captions, scene for scene; the world's own captions keep them."""
    options = {} if generator == "default" else {"generator": "counting"}
    root = make_synthetic(tmp_path / generator, num_train=40, num_dev=4, num_test=4, regions=4,
                          feature_dim=8, noise_ratios=(), **options)  # fmt: skip
    settings = load_world_settings(root)
    words = WITHHELD_WORDS[generator]
    scenes, captions, _ = make_pool(settings, 60, [], shift="withheld")
    plain_scenes, plain_captions, _ = make_pool(settings, 60, [])
    assert scenes == plain_scenes
    said = {w for caps in plain_captions for c in caps for w in c.split()}
    assert said & words, "the unshifted pool states the concept"
    for caps, plain in zip(captions, plain_captions):
        assert not {w for c in caps for w in c.split()} & words
        assert caps == [" ".join(w for w in c.split() if w not in words) for c in plain]
    world_words = {w for c in read_split(root, "train")[1] for w in c.split()}
    assert world_words & words
    with pytest.raises(ValueError, match="unknown pool shift 'colour'"):
        make_pool(settings, 2, [], shift="colour")


@pytest.mark.parametrize("generator", ["default", "counting"])
def test_the_renamed_pool_says_the_pool_word_where_the_world_says_its_own(tmp_path, generator):
    """The "renamed" pool is the stand-in's pool, scene for scene, with every world word of
    RENAMED_WORDS replaced by its pool word; the world's captions never say a pool word."""
    options = {} if generator == "default" else {"generator": "counting"}
    root = make_synthetic(tmp_path / generator, num_train=40, num_dev=4, num_test=4, regions=4,
                          feature_dim=8, noise_ratios=(), **options)  # fmt: skip
    settings = load_world_settings(root)
    scenes, captions, _ = make_pool(settings, 80, [], shift="renamed")
    plain_scenes, plain_captions, _ = make_pool(settings, 80, [])
    assert scenes == plain_scenes
    said = {w for caps in plain_captions for c in caps for w in c.split()}
    assert set(RENAMED_WORDS) <= said, "the unshifted pool says every renamed word"
    for caps, plain in zip(captions, plain_captions):
        assert not {w for c in caps for w in c.split()} & set(RENAMED_WORDS)
        assert caps == [rename(c, RENAMED_WORDS) for c in plain]
    world_words = {w for split in ("train", "test") for c in read_split(root, split)[1]
                   for w in c.split()}  # fmt: skip
    assert set(RENAMED_WORDS) <= world_words
    assert not world_words & set(RENAMED_WORDS.values())


def test_exchanging_token_rows_is_pretraining_on_the_renamed_pool(world):
    """exchange_token_rows' claim, bit for bit: pretraining on the renamed pool from an
    initialisation with the words' rows exchanged equals pretraining on the unshifted pool
    and exchanging the rows afterwards."""
    import copy

    settings = load_world_settings(world)
    scenes, captions, _ = make_pool(settings, 16, [])
    _, renamed, _ = make_pool(settings, 16, [], shift="renamed")
    assert any("red" in c.split() for caps in captions for c in caps)
    torch.manual_seed(0)
    plain_model = build_clip(TINY_MODEL)
    renamed_model = copy.deepcopy(plain_model)
    exchange_token_rows(renamed_model)
    images = render_images(scenes, stub_render, plain_model.image_size)

    def tokens(caps):
        return plain_model.tokenizer()([c for cs in caps for c in cs]).view(16, 5, -1)

    cfg = PretrainConfig(steps=6, batch_size=8, lr=1e-3, warmup_steps=2, log_every=6)
    pretrain(plain_model, images, tokens(captions), cfg)
    pretrain(renamed_model, images, tokens(renamed), cfg)
    plain_state = plain_model.model.state_dict()
    renamed_state = renamed_model.model.state_dict()
    assert not torch.equal(plain_state["token_embedding.weight"],
                           renamed_state["token_embedding.weight"])  # fmt: skip
    exchange_token_rows(plain_model)
    for name, value in plain_model.model.state_dict().items():
        assert torch.equal(value, renamed_state[name]), name


def test_a_renamed_stand_in_needs_an_unshifted_one_of_the_same_world(world, tmp_path, tool,
                                                                     capsys):  # fmt: skip
    torch.manual_seed(0)
    model = build_clip(TINY_MODEL)
    seed = load_world_settings(world)["seed"]
    base = {"pool": {"shift": "none", "world_seed": seed}, "train": {"steps": 3}}
    record = rename_stand_in(model, base, world, stub_render, eval_split=None)
    assert record["pool"]["shift"] == "renamed" and record["renamed"] == RENAMED_WORDS
    assert record["train"] == {"steps": 3} and "zero_shot" not in record
    with pytest.raises(ValueError, match="already shifted"):
        rename_stand_in(model, record, world, stub_render)
    with pytest.raises(ValueError, match="world of seed 99"):
        rename_stand_in(model, {"pool": {"world_seed": 99}}, world, stub_render)
    with pytest.raises(ValueError, match="3 tokens"):
        exchange_token_rows(model, {"red": "vermilion"})
    out = tmp_path / "x.pt"
    argv = ["--data", str(world), "--from", str(out), "--out", str(out)]
    assert tool("pretrain_clip").main(argv) == 2
    assert "add --shift renamed" in capsys.readouterr().err
