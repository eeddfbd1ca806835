"""The CLIP-track paper configs agree where the papers and releases agree (weights, workers,
COCO's 5K dev set) and carry each method's own batch size."""

import pytest

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


def test_weight_methods_default_to_the_papers_readings():
    npc = load_config("npc_flickr")[0].method.npc
    sdd = load_config("sdd_flickr")[0].method.sdd
    osa = load_config("osa_flickr")[0].method.osa
    assert npc.ratio_grouping == sdd.ratio_grouping == "direction"
    assert npc.image_neighbour == sdd.image_neighbour == "image_itself"
    assert osa.adapt and osa.beta_source == "random_inputs"
