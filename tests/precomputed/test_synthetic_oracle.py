import numpy as np
import pytest

from precomputed.synthetic import make_synthetic
from precomputed.synthetic.captions import _SCENE_PHRASES, caption_scene
from precomputed.synthetic.oracle import NounPhrase, oracle_scores, parse_caption
from precomputed.synthetic.world import Scene, SceneObject, read_scenes, sample_scenes

TINY = dict(num_train=6, num_dev=6, num_test=20, regions=12, feature_dim=16)


def _scene(scene_type="beach", objects=(("dog", "red", "small", "left"),)) -> Scene:
    return Scene(0, scene_type, [SceneObject(*o) for o in objects], [])


def test_parse_caption_reads_templates():
    claims = parse_caption("a tiny red dog can be seen on the left on the beach .")
    assert claims.phrases == (NounPhrase("dog", "red", "small", "left"),)
    assert claims.scene_type == "beach"
    claims = parse_caption("a big cat to the left of an orange ball")
    assert claims.phrases == (NounPhrase("cat", None, "large"), NounPhrase("ball", "orange"))
    assert claims.scene_type is None
    claims = parse_caption("a park scene with a man , a bus and a green kite")
    assert [p.category for p in claims.phrases] == ["man", "bus", "kite"]
    assert claims.scene_type == "park"


def test_every_place_phrase_ends_with_its_scene_word():
    # the parser relies on it to read the scene word of "on the beach", "near a lake", ...
    assert all(v.split()[-1] == k for k, v in _SCENE_PHRASES.items())


def test_every_generated_caption_is_satisfied_by_its_own_scene():
    rng = np.random.default_rng(0)
    scenes = sample_scenes(rng, 40, sharing=0.5)
    for scene in scenes:
        for cap in caption_scene(rng, scene, 5, partialness=0.3):
            claims = parse_caption(cap)
            assert claims.phrases, cap
            score = oracle_scores([scene], [cap])[0, 0]
            # every claim holds: the integer part is the number of claims
            assert int(score) == len(claims.phrases) + (claims.scene_type is not None), cap


def test_scores_count_satisfied_minus_contradicted_and_break_ties_deterministically():
    right = _scene()
    wrong_colour = _scene(objects=(("dog", "blue", "small", "left"),))
    wrong_scene = _scene("street")
    caps = ["a red dog on the left on the beach", "a dog"]
    s = oracle_scores([right, wrong_colour, wrong_scene], caps)
    assert np.array_equal(np.floor(s), [[2, 1], [0, 1], [0, 1]])  # satisfied - contradicted
    assert ((s - np.floor(s)) < 0.5).all()
    assert np.array_equal(s, oracle_scores([right, wrong_colour, wrong_scene], caps))
    assert not np.array_equal(s, oracle_scores([right, wrong_colour, wrong_scene], caps, seed=1))


def test_oracle_tool_on_a_generated_world(tmp_path, capsys):
    from tools.oracle import main, oracle_metrics

    root = make_synthetic(tmp_path, seed=1, **TINY)
    scenes = read_scenes(root / "synthetic_precomp" / "test_scenes.jsonl")
    assert len(scenes) == 20 and scenes[0].objects
    m = oracle_metrics(root, "test")
    assert 0 <= m["rsum"] <= 600 and set(m) >= {"i2t/R@1", "t2i/R@1"}
    assert m["rsum"] > 300  # the oracle knows every scene: far above chance (~180 for 20 images)
    assert main(["--data-root", str(root), "--json"]) == 0
    assert '"rsum"' in capsys.readouterr().out
    assert main(["--data-root", str(tmp_path / "nope")]) == 2
    assert "error:" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--max-images", "0"]])
def test_oracle_tool_bad_input(argv, capsys):
    from tools.oracle import main

    assert main(argv) == 2
    assert capsys.readouterr().err.startswith("error:")
