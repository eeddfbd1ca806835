"""The CLIP-track paper configs agree where the papers and releases agree (weights, workers,
COCO's 5K dev set) and carry each method's own batch size."""

import dataclasses
from pathlib import Path

import pytest

from ugncl.methods import METHODS as METHOD_REGISTRY
from ugncl.run.config import load_config

DATASETS = ("flickr", "coco", "cc120k")
METHODS = ("clip", "npc", "sdd", "osa")


@pytest.mark.parametrize("dataset", DATASETS)
def test_clip_track_configs_share_weights_and_loader(dataset):
    configs = {m: load_config(f"{m}_{dataset}")[0] for m in METHODS}
    for method, cfg in configs.items():
        # The weights are the user's file (README "CLIP weights"): never a guessed path.
        assert cfg.model.clip.pretrained is None, method
        assert cfg.data.num_workers == configs["clip"].data.num_workers == 8, method
        # COCO: the releases select the epoch on the 5K dev set.
        assert cfg.data.dev_images == (5000 if dataset == "coco" else 1000), method
        assert cfg.train.batch_size == (128 if method == "sdd" else 256), method  # SDD paper


WEIGHTED = ("npc", "sdd", "osa")
READINGS = ("paper", "release", "package")


def _resolved(config, dotted: str):
    value = config
    for key in dotted.split("."):
        value = getattr(value, key)
    return value


@pytest.mark.parametrize("reading", READINGS)
@pytest.mark.parametrize("method", WEIGHTED)
def test_each_reading_resolves_to_its_keys(tmp_path, method, reading):
    spec = METHOD_REGISTRY[method].config
    cfg = tmp_path / "r.yaml"
    # On the backbone its paper fine-tunes (CLIP): there the reading gives its training recipe.
    cfg.write_text(f"_base_: base.yaml\nmodel:\n  backbone: {spec.READING_BACKBONE}\n"
                   f"method:\n  name: {method}\n  {method}:\n    reading: {reading}\n",
                   encoding="utf-8")  # fmt: skip
    config, _ = load_config(cfg)
    keys = spec.READINGS[reading]
    assert (reading == "package") == (not keys)  # package: the dataclass defaults
    for dotted, value in keys.items():
        assert _resolved(config, dotted) == value, dotted
    section = getattr(config.method, method)
    defaults = spec()
    own = {k.split(".", 2)[2] for k in keys if k.startswith(f"method.{method}.")}
    # every method key the reading does not set keeps its package value
    for f in dataclasses.fields(spec):
        if f.name != "reading" and not any(k == f.name or k.startswith(f.name + ".") for k in own):
            assert getattr(section, f.name) == getattr(defaults, f.name), f.name


def test_readings_set_the_switches_the_papers_and_releases_differ_on():
    npc, sdd, osa = (METHOD_REGISTRY[m].config.READINGS for m in WEIGHTED)
    # NPC's own-pair exclusion, SDD's w_con normalisation and OSA's adaptation: one switch each,
    # set by every reading that differs from the package.
    assert npc["paper"]["method.npc.siamese.exclude_own_pair"] is False
    assert npc["release"]["method.npc.siamese.exclude_own_pair"] is False
    assert sdd["paper"]["method.sdd.consistency_norm"] == "none"
    assert "method.sdd.consistency_norm" not in sdd["release"]  # min_max, as the package
    assert osa["paper"]["method.osa.adapt"] is False and osa["release"]["method.osa.adapt"] is False
    # the ratio is grouped by direction in both papers, by bank in both releases
    assert "method.npc.siamese.ratio_grouping" not in npc["paper"]
    assert npc["release"]["method.npc.siamese.ratio_grouping"] == "bank"
    assert sdd["release"]["method.sdd.siamese.ratio_grouping"] == "bank"
    assert sdd["paper"]["train.batch_size"] == 128 and sdd["release"]["train.batch_size"] == 256


def test_the_methods_page_names_every_key_a_reading_sets():
    page = (Path(__file__).parents[4] / "docs" / "methods" / "weighted.md").read_text()
    for method in WEIGHTED:
        for reading, keys in METHOD_REGISTRY[method].config.READINGS.items():
            for dotted in keys:
                name = dotted.removeprefix(f"method.{method}.")
                assert f"`{name}" in page, (method, reading, dotted)
