import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from precomputed.captions import read_captions_txt
from precomputed.dataset import PairDataset, open_split
from precomputed.noise import (
    clean_image_index,
    load_noise_index,
    make_caption_noise,
    noise_sha256,
)
from precomputed.synthetic import make_synthetic
from precomputed.synthetic.captions import TEMPLATE_WORDS
from precomputed.synthetic.world import CATEGORIES, COLOURS, SCENE_TYPES
from precomputed.synthetic.writer import redraw_nuisance
from precomputed.tokenizer import tokenize_caption
from precomputed.vocab import load_vocab

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"  # tests/fixtures, see README there
TINY = dict(num_train=12, num_dev=6, num_test=6, regions=36, feature_dim=64)


def _digest(folder: Path) -> dict[str, str]:
    """sha256 of every data file (NaN/inf scan records ``*.finite.json`` are a cache, skipped)."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.name.endswith(".finite.json")
    }


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return make_synthetic(tmp_path_factory.mktemp("syn"), seed=3, **TINY)


def test_layout_and_open_split(world):
    vocab = load_vocab(world / "synthetic_precomp_vocab.json")
    for split, n in (("train", 12), ("dev", 6), ("test", 6)):
        s = open_split(world, "synthetic_precomp", split, vocab, captions_per_image=5)
        assert s.features.shape == (n, 36, 64) and s.num_captions == 5 * n
        assert (s.tokens.ids != 3).all()  # no <unk>: vocab covers every split
        feats = s.features.slice(0, n)
        assert np.isfinite(feats).all() and (feats >= 0).all() and feats.std() > 0
        scenes = [
            json.loads(line)
            for line in (world / "synthetic_precomp" / f"{split}_scenes.jsonl").open()
        ]
        assert len(scenes) == n
        assert all(2 <= len(sc["objects"]) <= 4 and len(sc["region_object"]) == 36 for sc in scenes)
    item = PairDataset(s)[0]
    assert item[1][0] == 1 and item[1][-1] == 2


def test_noise_files(world):
    folder = world / "synthetic_precomp"
    meta = json.loads((folder / "world.json").read_text())
    for ratio in (0.2, 0.5):
        name = f"noise_{ratio:g}_seed0.npy"
        index = load_noise_index(folder / name, num_images=12, captions_per_image=5)
        assert noise_sha256(index) == meta["noise_sha256"][name]
        moved = (index != clean_image_index(12, 5)).sum()
        assert moved <= int(ratio * 60)


def test_noise_files_for_train_subsets(tmp_path):
    # A run with data.train_images: n needs noise over the captions of the first n images; the
    # whole-split file does not fit it (its entries point beyond the subset).
    root = make_synthetic(tmp_path, seed=3, noise_subsets=(5, 12, 40), **TINY)
    folder = root / "synthetic_precomp"
    meta = json.loads((folder / "world.json").read_text())
    assert sorted(p.name for p in folder.glob("noise_0.5_*")) == [
        "noise_0.5_seed0.npy",
        "noise_0.5_seed0_train5.npy",
    ]  # fmt: skip  (12 is the whole split, 40 is larger than it)
    index = load_noise_index(folder / "noise_0.5_seed0_train5.npy", num_images=5,
                             captions_per_image=5)  # fmt: skip
    # exactly the noise a run with train_images 5 and noise_seed 0 builds itself
    assert np.array_equal(index, make_caption_noise(clean_image_index(5, 5), 0.5, 0))
    assert index.max() < 5 and (index != clean_image_index(5, 5)).any()
    assert noise_sha256(index) == meta["noise_sha256"]["noise_0.5_seed0_train5.npy"]
    with pytest.raises(Exception, match="length"):
        load_noise_index(folder / "noise_0.5_seed0.npy", num_images=5, captions_per_image=5)


def _features(root: Path, split: str = "train") -> np.ndarray:
    return np.load(root / "synthetic_precomp" / f"{split}_ims.npy")


def test_feature_statistics_knobs(tmp_path):
    base = make_synthetic(tmp_path / "base", seed=3, **TINY)
    x = _features(base)
    scaled = _features(make_synthetic(tmp_path / "scaled", seed=3, feature_scale=1.0, **TINY))
    assert np.array_equal(scaled, 2 * x)  # scale changes magnitudes only
    sparse = _features(make_synthetic(tmp_path / "sparse", seed=3, sparsity=1.0, **TINY))
    assert (sparse == 0).mean() > (x == 0).mean() + 0.2
    calm = _features(make_synthetic(tmp_path / "calm", seed=3, nuisance=0.0, **TINY))
    assert calm.shape == x.shape and not np.array_equal(calm, x)
    busy = make_synthetic(tmp_path / "busy", seed=3, background=0.5, **TINY)
    lines = (busy / "synthetic_precomp" / "train_scenes.jsonl").read_text().splitlines()
    assert all(json.loads(line)["region_object"].count(-1) >= 18 for line in lines)
    meta = json.loads((busy / "synthetic_precomp" / "world.json").read_text())
    assert meta["background"] == 0.5 and meta["sparsity"] == 0.0


def test_every_caption_word_in_f30k_vocab(world):
    f30k = load_vocab(FIXTURES / "f30k_precomp_vocab.json")
    words = set(TEMPLATE_WORDS) | set(CATEGORIES) | set(COLOURS) | set(SCENE_TYPES)
    for split in ("train", "dev", "test"):
        for cap in read_captions_txt(world / "synthetic_precomp" / f"{split}_caps.txt"):
            words.update(tokenize_caption(cap))
    missing = sorted(w for w in words if w not in f30k)
    assert not missing


def test_captions_mention_scene_objects(world):
    folder = world / "synthetic_precomp"
    scenes = [json.loads(line) for line in (folder / "train_scenes.jsonl").open()]
    caps = read_captions_txt(folder / "train_caps.txt")
    for k, cap in enumerate(caps):
        cats = {o["category"] for o in scenes[k // 5]["objects"]}
        mentioned = {w for w in tokenize_caption(cap) if w in CATEGORIES}
        assert mentioned and mentioned <= cats, (cap, cats)


def test_deterministic_bytes(tmp_path, world):
    again = make_synthetic(tmp_path / "again", seed=3, **TINY)
    assert _digest(again) == _digest(world)
    other = make_synthetic(tmp_path / "other", seed=4, **TINY)
    assert _digest(other) != _digest(world)


def test_redrawn_nuisance_changes_only_the_features(tmp_path, world):
    redrawn = redraw_nuisance(world, tmp_path / "redrawn")
    before, after = _digest(world), _digest(redrawn)
    assert before.keys() == after.keys()
    changed = {k for k in before if before[k] != after[k]}
    assert changed == {f"synthetic_precomp/{s}_ims.npy" for s in ("train", "dev", "test")} | {
        "synthetic_precomp/world.json"
    }
    w_before = json.loads((world / "synthetic_precomp/world.json").read_text())
    w_after = json.loads((redrawn / "synthetic_precomp/world.json").read_text())
    assert w_after == {**w_before, "nuisance_redraw": 1}
    # Deterministic per redraw; another redraw draws other vectors.
    again = redraw_nuisance(world, tmp_path / "again")
    assert _digest(again) == after
    other = redraw_nuisance(world, tmp_path / "other", redraw=2)
    assert (
        _digest(other)["synthetic_precomp/train_ims.npy"]
        != after["synthetic_precomp/train_ims.npy"]
    )


def test_redraw_keeps_everything_but_the_nuisance(tmp_path):
    """Without a nuisance vector the redrawn features are the original ones: the scenes,
    regions, weights and region noise are reproduced, only the identity is drawn anew."""
    plain = make_synthetic(tmp_path / "plain", seed=5, nuisance=0.0, **TINY)
    assert _digest(redraw_nuisance(plain, tmp_path / "r")) == {
        **_digest(plain),
        "synthetic_precomp/world.json": _digest(tmp_path / "r")["synthetic_precomp/world.json"],
    }
    with pytest.raises(FileExistsError, match="already exists"):
        redraw_nuisance(plain, tmp_path / "r")
    with pytest.raises(FileNotFoundError, match="world.json does not exist"):
        redraw_nuisance(tmp_path / "nowhere", tmp_path / "r2")
    world_json = plain / "synthetic_precomp" / "world.json"
    old = {k: v for k, v in json.loads(world_json.read_text()).items() if k != "background"}
    world_json.write_text(json.dumps(old))
    with pytest.raises(ValueError, match="lacks background"):
        redraw_nuisance(plain, tmp_path / "r3")


@pytest.mark.parametrize(
    "knob",
    [
        {"partialness": 1.5},
        {"sparsity": -0.1},
        {"nuisance": float("nan")},
        {"feature_scale": 0.0},
        {"background": 1.0},
        {"region_noise": -1.0},
    ],
)
def test_bad_knobs_name_the_knob(tmp_path, knob):
    with pytest.raises(ValueError, match=next(iter(knob))):
        make_synthetic(tmp_path, **knob, **TINY)
    assert not (tmp_path / "synthetic_precomp").exists()  # validated before writing


def test_bad_noise_ratio(tmp_path):
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        make_synthetic(tmp_path, noise_ratios=(1.0,), **TINY)
