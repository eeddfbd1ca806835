"""The shipped configs: every experiment resolves over its track, and its first line says what it
runs (the method, and the reading wherever the method's section has one)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.ugncl.run.test_config_layers import ReadConfig, ReadMethod
from ugncl.methods import METHODS, MethodSpec
from ugncl.run.config import CONFIG_DIR, DEFAULT_BASE, config_chain, load_config

TRACKS = CONFIG_DIR / "tracks"
EXPERIMENTS = sorted(p for p in CONFIG_DIR.glob("*.yaml") if p != DEFAULT_BASE)


def first_line_problem(path: Path) -> str | None:
    """What the first line of the config at ``path`` fails to say, or None.

    It must open with ``# <method>`` (the name ``method.name`` resolves to, any case) and, where
    the method's section has a ``reading`` field, name the reading the config resolves to."""
    config, _ = load_config(path)
    line = path.read_text(encoding="utf-8").splitlines()[0]
    name = config.method.name
    if not re.match(rf"# {re.escape(name)}\b", line, re.IGNORECASE):
        return f"{path.name}: the first line does not open with '# {name}': {line!r}"
    reading = getattr(getattr(config.method, name), "reading", None)
    if reading is not None and not re.search(rf"\b{re.escape(reading)}\b", line):
        return f"{path.name}: the first line does not name the reading {reading!r}: {line!r}"
    if reading is not None:
        # The resolved values are the reading's, unless the first line names the departure.
        tree = config.to_dict()
        for key, value in getattr(METHODS[name].config, "READINGS", {}).get(reading, {}).items():
            node = tree
            for part in key.split("."):
                node = node[part]
            if node != value and key not in line:
                return f"{path.name}: {key} is {node!r}, not the {reading} reading's {value!r}"
    return None


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.stem)
def test_each_experiment_resolves_and_its_first_line_names_what_it_runs(path: Path) -> None:
    assert first_line_problem(path) is None


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.stem)
def test_each_experiment_stands_on_a_track(path: Path) -> None:
    chain = [file.resolve() for file, _ in config_chain(path)]
    assert chain[0] == DEFAULT_BASE.resolve()
    assert any(file.parent == TRACKS.resolve() for file in chain), chain


def test_each_track_says_it_is_one_and_resolves() -> None:
    tracks = sorted(TRACKS.glob("*.yaml"))
    assert {p.stem for p in tracks} >= {
        "sgraf_flickr", "sgraf_coco", "sgraf_cc152k", "sgraf_synthetic",
        "clip_flickr", "clip_coco", "clip_cc120k", "clip_synthetic",
    }  # fmt: skip
    for path in tracks:
        assert path.read_text(encoding="utf-8").startswith("# Track"), path
        load_config(path)


def test_the_clip_tracks_share_one_model_and_optimiser() -> None:
    """The drift the tracks removed: every CLIP-track config on the released datasets builds
    OpenAI's ViT-B/32 with QuickGELU and the releases' AdamW betas, clip baseline included."""
    for dataset in ("flickr", "coco", "cc120k"):
        for method in ("clip", "npc", "sdd", "osa"):
            config, _ = load_config(f"{method}_{dataset}")
            clip = config.model.clip
            assert (clip.name, clip.quick_gelu) == ("ViT-B-32", True), (method, dataset)
            assert (config.train.adam_beta2, config.train.adam_eps) == (0.98, 1e-6)


def test_a_config_that_departs_from_its_reading_silently_is_caught(tmp_path, monkeypatch):
    monkeypatch.setitem(METHODS, "read", MethodSpec(ReadConfig, ReadMethod))
    body = "method:\n  name: read\n  read:\n    reading: paper\n    margin: 0.7\n"
    silent = tmp_path / "silent.yaml"
    silent.write_text(f"# read, the paper reading\n_base_: base.yaml\n{body}", encoding="utf-8")
    assert "method.read.margin is 0.7" in first_line_problem(silent)
    said = tmp_path / "said.yaml"
    said.write_text(
        f"# read, the paper reading but method.read.margin 0.7\n_base_: base.yaml\n{body}",
        encoding="utf-8",
    )
    assert first_line_problem(said) is None


def test_a_first_line_that_names_another_method_or_no_reading_is_caught(
    tmp_path, monkeypatch
) -> None:
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("# UGNCL on the world\n_base_: triplet_synthetic.yaml\n", encoding="utf-8")
    assert "'# triplet'" in first_line_problem(wrong)
    monkeypatch.setitem(METHODS, "read", MethodSpec(ReadConfig, ReadMethod))
    body = "method:\n  name: read\n  read:\n    reading: paper\n"
    unnamed = tmp_path / "unnamed.yaml"
    unnamed.write_text(f"# read on the world\n{body}", encoding="utf-8")
    assert "reading 'paper'" in first_line_problem(unnamed)
    named = tmp_path / "named.yaml"
    named.write_text(f"# read on the world, paper reading\n{body}", encoding="utf-8")
    assert first_line_problem(named) is None
