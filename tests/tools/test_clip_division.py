"""tools/clip_division.py: UGNCL's division (Eq. 9) in batches of K against rules on each
pair's own cosine, on a CLIP stand-in's scores before fine-tuning."""

from __future__ import annotations

import json

import numpy as np
import torch

from precomputed.split import NoiseSpec, training_noise
from precomputed.synthetic import make_synthetic
from ugncl.backbones.clip.adapter import build_clip, save_clip_weights
from ugncl.run.config import load_config


def _ugncl():
    return load_config("clip_synthetic", ["method.name=ugncl"])[0].method.ugncl


def test_a_planted_ranking_is_divided_by_it(tool):
    """Clean pairs at cosine 0.9 against rivals at 0.1: noisy pairs lose the argmax, and a
    clean pair loses it only to another caption of its image in the same batch (a tie), more
    often in larger batches. Reversed scores call the clean pairs noisy."""
    division = tool("clip_division")
    n_img = 20
    pair_image = training_noise(NoiseSpec(noise_ratio=0.5, noise_seed=0), n_img, 5)[0]
    clean = pair_image == np.arange(5 * n_img) // 5
    cos = np.full((n_img, 5 * n_img), 0.1)
    cos[np.arange(5 * n_img) // 5, np.arange(5 * n_img)] = 0.9
    f1 = {k: division.divide_in_batches(cos, pair_image, clean, k, 0, _ugncl()) for k in (8, 32)}
    assert f1[8] > 0.85 and f1[32] < f1[8]
    assert division.divide_in_batches(-cos, pair_image, clean, 8, 0, _ugncl()) < 0.5
    rules = division.own_score_rules(cos[pair_image, np.arange(5 * n_img)], clean)
    assert rules["auc_own_cosine"] == 1.0 and rules["best_threshold_f1"] == 1.0


def test_the_tool_prints_and_records_every_rule(tool, tmp_path, capsys):
    division = tool("clip_division")
    world = make_synthetic(tmp_path / "w", num_train=12, num_dev=2, num_test=2, regions=4,
                           feature_dim=8, noise_ratios=())  # fmt: skip
    torch.manual_seed(0)
    weights = save_clip_weights(build_clip(), tmp_path / "tiny.pt")
    out = tmp_path / "record.json"
    argv = ["--weights", str(weights), "--data", str(world), "--train-images", "10",
            "--batch-sizes", "4", "8", "--repeats", "2", "--json", str(out)]  # fmt: skip
    assert division.main(argv) == 0
    text = capsys.readouterr().out
    assert "| Eq. 9 in batches of 4 |" in text and "| GMM on the own cosine |" in text
    record = json.loads(out.read_text())
    index = training_noise(NoiseSpec(noise_ratio=0.5, noise_seed=0), 10, 5)[0]
    noisy = int((index != np.arange(50) // 5).sum())
    assert (record["pairs"], record["noisy"]) == (50, noisy) and 20 <= noisy <= 30
    assert set(record["in_batch"]) == {"4", "8"}
    assert all(0.0 <= v["mean"] <= 1.0 for v in record["in_batch"].values())
