"""World generators of other structure (``make_synthetic(generator=...)``): the same layout."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from precomputed.dataset import open_split
from precomputed.noise import load_noise_index
from precomputed.synthetic import make_synthetic
from precomputed.synthetic.generators import GENERATORS, generator_words
from precomputed.tokenizer import tokenize_caption
from precomputed.vocab import load_vocab

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TINY = dict(num_train=10, num_dev=4, num_test=4, regions=12, feature_dim=48)


@pytest.fixture(scope="module", params=sorted(GENERATORS))
def world(request, tmp_path_factory):
    name = request.param
    root = make_synthetic(tmp_path_factory.mktemp(name), seed=2, generator=name, **TINY)
    return name, root


def test_layout_opens_like_the_default_world(world):
    name, root = world
    folder = root / "synthetic_precomp"
    vocab = load_vocab(root / "synthetic_precomp_vocab.json")
    for split, n in (("train", 10), ("dev", 4), ("test", 4)):
        s = open_split(root, "synthetic_precomp", split, vocab, captions_per_image=5)
        assert s.features.shape == (n, 12, 48) and s.num_captions == 5 * n
        feats = s.features.slice(0, n)
        assert np.isfinite(feats).all() and (feats >= 0).all() and feats.std() > 0
        assert len((folder / f"{split}_scenes.jsonl").read_text().splitlines()) == n
    world_json = json.loads((folder / "world.json").read_text())
    assert world_json["generator"] == name and world_json["num_train"] == 10
    assert "region_noise" not in world_json  # the default generator's knobs do not apply
    index = load_noise_index(folder / "noise_0.5_seed0.npy", num_images=10, captions_per_image=5)
    assert len(index) == 50


def test_every_word_is_in_the_f30k_vocabulary(world):
    name, root = world
    f30k = load_vocab(FIXTURES / "f30k_precomp_vocab.json")
    assert not {w for w in generator_words(name) if w not in f30k}
    for split in ("train", "dev", "test"):
        for line in (root / "synthetic_precomp" / f"{split}_caps.txt").read_text().splitlines():
            assert set(tokenize_caption(line)) <= generator_words(name) | {"."}, line


def test_deterministic(world, tmp_path):
    name, root = world
    again = make_synthetic(tmp_path, seed=2, generator=name, **TINY)

    def digest(r: Path) -> dict[str, str]:
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted((r / "synthetic_precomp").iterdir())
                if not p.name.endswith(".finite.json")}  # fmt: skip

    assert digest(again) == digest(root)


def test_structure_differs_from_the_default_world(tmp_path):
    """Counting captions count and use plurals; activity captions are long sentences with
    actions; counting leaves regions empty (all-zero) where no instance is."""
    counting = make_synthetic(tmp_path / "c", generator="counting", num_train=30, num_dev=2,
                              num_test=2, regions=16, feature_dim=48)  # fmt: skip
    caps = (counting / "synthetic_precomp" / "train_caps.txt").read_text().split()
    assert {"two", "three"} & set(caps) and {"dogs", "men", "cars", "birds"} & set(caps)
    ims = np.load(counting / "synthetic_precomp" / "train_ims.npy")
    assert (np.abs(ims).sum(-1) < 1e-3 * ims.sum(-1).max()).any() or (ims == 0).mean() > 0.6
    activity = make_synthetic(tmp_path / "a", generator="activity", num_train=30, num_dev=2,
                              num_test=2, regions=16, feature_dim=48)  # fmt: skip
    lines = (activity / "synthetic_precomp" / "train_caps.txt").read_text().splitlines()
    assert np.mean([len(x.split()) for x in lines]) > 10
    assert all(" is " in x for x in lines)


def test_unknown_generator_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown generator 'nope'"):
        make_synthetic(tmp_path, generator="nope", **TINY)


def test_make_synthetic_tool_selects_the_generator(tool, tmp_path, capsys):
    argv = ["--generator", "activity", "--out", str(tmp_path), "--num-train", "6", "--num-dev",
            "2", "--num-test", "2", "--regions", "8", "--feature-dim", "16"]  # fmt: skip
    assert tool("make_synthetic").main(argv) == 0
    assert "no images rendered" in capsys.readouterr().out
    world = json.loads((tmp_path / "synthetic_precomp" / "world.json").read_text())
    assert world["generator"] == "activity"
