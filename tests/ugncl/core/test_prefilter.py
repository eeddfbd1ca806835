"""The pre-filter: a cross-fitted linear fit's p-values, their selection, the run-level state
the trainer keeps, and a training run whose pre-filter epochs leave the rejected pairs out."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.ugncl.prefilter_world import WORDS, fake_fetch, planted_world
from ugncl.core.engine.recorder import read_metrics
from ugncl.core.prefilter import (
    Prefilter,
    PrefilterSelection,
    caption_bags,
    gather_prefilter_inputs,
    image_components,
    linear_pair_pvalues,
    null_share,
    pair_pvalues,
    prefilter_pvalues,
    select_pairs,
)


@pytest.fixture(scope="module")
def noisy_world():
    captions, pooled, image_index, clean = planted_world(0.7)
    pvalues = prefilter_pvalues(captions, WORDS + 1, pooled, image_index, seed=0)
    return pvalues, clean


def test_caption_bags_weigh_rare_words_and_normalise_rows() -> None:
    captions = [np.array(c) for c in ([1, 2, 2, 3], [1, 2], [1], [1], [1], [1])]
    bags = caption_bags(captions, vocab_size=4)
    assert bags.shape == (6, 4)
    dense = bags.toarray()
    # Word 1 is in every caption: no weight, so captions 2-5 are empty. Word 3 (one caption)
    # outweighs word 2 (two), and a repeated word counts once.
    assert not dense[2:].any()
    np.testing.assert_allclose(np.linalg.norm(dense[:2], axis=1), 1.0)
    columns = {int(np.argmax(row)) for row in dense[:1]}
    assert len(columns) == 1 and dense[0].max() > dense[0][dense[0] > 0].min()
    with pytest.raises(ValueError, match="token ids"):
        caption_bags([np.array([5])], vocab_size=4)


def test_image_components_keep_the_rank_and_the_row_count() -> None:
    pooled = np.random.default_rng(0).normal(size=(50, 20))
    assert image_components(pooled, rank=8).shape == (50, 8)
    assert image_components(pooled, rank=64).shape == (50, 20)


def test_unrelated_pairs_get_uniform_pvalues_related_ones_small(noisy_world) -> None:
    pvalues, clean = noisy_world
    noisy = pvalues[~clean]
    # Uniform under the null: each tail holds about its share of the noisy pairs.
    for level in (0.02, 0.1, 0.5):
        assert abs((noisy < level).mean() - level) < 0.04 + 0.1 * level, level
    assert np.median(pvalues[clean]) < 0.02
    assert (pvalues[clean] < 0.02).mean() > 0.4


def test_null_share_estimates_the_noise_ratio(noisy_world) -> None:
    pvalues, clean = noisy_world
    assert abs(null_share(pvalues) - (~clean).mean()) < 0.05
    assert null_share(np.array([])) == 1.0


def test_the_selection_is_mostly_clean_and_empty_for_a_fit_that_says_nothing(
    noisy_world,
) -> None:
    pvalues, clean = noisy_world
    chosen = select_pairs(pvalues, alpha=0.02, fdr=0.1)
    assert clean[chosen].mean() > 0.9
    assert chosen[clean].mean() > 0.4
    assert chosen[~clean].mean() < 0.03
    # A tighter false-discovery rate keeps fewer pairs, never more.
    assert not (select_pairs(pvalues, alpha=0.02, fdr=0.01) & ~chosen).any()
    # Uniform p-values (no related pair at all): nothing passes.
    uniform = np.random.default_rng(1).random(5000)
    assert not select_pairs(uniform, alpha=0.02, fdr=0.1).any()


def test_pair_pvalues_do_not_depend_on_the_block_size() -> None:
    rng = np.random.default_rng(2)
    predicted, images = rng.normal(size=(37, 8)), rng.normal(size=(20, 8))
    paired, rivals = rng.integers(0, 20, 37), np.arange(20)
    whole = pair_pvalues(predicted, images, paired, rivals, block=1000)
    np.testing.assert_array_equal(pair_pvalues(predicted, images, paired, rivals, block=5), whole)
    # (1 + rivals at or above the pair) / (M + 1), the pair's own image never counted.
    assert whole.min() >= 1 / 21 and whole.max() <= 20 / 21


def test_cross_fitting_keeps_a_memorisable_pair_at_chance() -> None:
    """A caption whose words appear nowhere else cannot be placed by a map that never saw
    it: its p-value is not small, however its image looks."""
    captions, pooled, image_index, _ = planted_world(0.0, seed=3)
    captions[0] = np.array([WORDS + 1, WORDS + 2])  # words of its own
    bags = caption_bags(captions, WORDS + 3)
    images = image_components(pooled, rank=16)
    pvalues = linear_pair_pvalues(bags, images, image_index, seed=0)
    assert pvalues[0] > 0.05
    assert np.median(pvalues[1:]) < 0.02


def test_gather_prefilter_inputs_pools_each_image_and_keeps_the_sample_order() -> None:
    images = torch.arange(4 * 3 * 2, dtype=torch.float32).reshape(4, 3, 2)
    captions = [[1, 2], [3], [4, 5, 6], [7], [8, 9]]
    image_index = np.array([2, 0, 2, 1, 0])
    got = gather_prefilter_inputs(fake_fetch(images, captions, image_index), 5, batch_size=2)
    assert got is not None
    tokens, pooled, paired = got
    assert [t.tolist() for t in tokens] == captions
    np.testing.assert_array_equal(paired, image_index)
    np.testing.assert_array_equal(pooled[:3], images[:3].amax(1).numpy())
    pixels = torch.zeros(4, 3, 2, 2)
    assert gather_prefilter_inputs(fake_fetch(pixels, captions, image_index), 5, 2) is None


def test_the_prefilter_applies_to_its_epochs_after_the_warm_up_and_keeps_its_state() -> None:
    prefilter = Prefilter(kind="linear", alpha=0.02, fdr=0.1, epochs=2)
    assert [prefilter.applies(e, warmup_epochs=1) for e in range(4)] == [False, True, True, False]
    assert not Prefilter(kind="none", alpha=0.02, fdr=0.1, epochs=2).applies(1, 1)
    calls = []
    pvalues = np.array([0.001, 0.5, 0.002, 0.9])

    def compute():
        calls.append(1)
        return pvalues

    selection, fresh = prefilter.selection(compute)
    assert fresh and selection.selected.tolist() == [True, False, True, False]
    assert prefilter.selection(compute)[1] is False and len(calls) == 1  # computed once
    resumed = Prefilter(kind="linear", alpha=0.02, fdr=0.1, epochs=2)
    resumed.load_state_dict(prefilter.state_dict())
    again, fresh = resumed.selection(lambda: pytest.fail("a resumed run reads its checkpoint"))
    assert not fresh and again.selected.tolist() == selection.selected.tolist()
    # Pixels (no p-values): one warning, then the run trains as kind none.
    pixels = Prefilter(kind="linear", alpha=0.02, fdr=0.1, epochs=2)
    assert pixels.selection(lambda: None) == (None, True)
    assert pixels.selection(compute) == (None, False) and len(calls) == 1


def test_the_selection_leaves_the_rejected_pairs_out_of_any_subset() -> None:
    selection = PrefilterSelection(np.array([0.01, 0.9, 0.01, 0.01]), np.array([1, 0, 1, 1], bool))
    assert selection.keep(None).tolist() == [0, 2, 3]
    assert selection.keep(np.array([3, 1])).tolist() == [3]
    record = selection.record(np.array([True, False, True, False]))
    assert record["selected"] == 3 and record["noisy_selected"] == 0.5
    assert record["selected_clean_share"] == pytest.approx(2 / 3)
    assert "noisy_share" not in selection.record(np.ones(4, bool))  # unlabelled noise


def test_a_plain_method_trains_its_prefilter_epochs_on_the_kept_pairs_only(
    tool, tiny_world, tmp_path
) -> None:
    """The hinge with ``prefilter.kind: linear``: the warm-up epoch visits every pair (240,
    15 steps of 16), the pre-filter's epoch only those it keeps, the epoch after it all."""
    argv = [
        "--cfg", "triplet_synthetic", "--set", f"data.root={tiny_world}", "data.dev_images=12",
        "data.noise_ratio=0.2", f"run.out_dir={tmp_path}", "run.name=p", "train.batch_size=16",
        "train.eval_batch_size=12", "train.warmup_epochs=1", "train.epochs=2",
        "train.threads=1", "train.seed=0", "eval.test_after_training=false",
        "prefilter.kind=linear", "prefilter.alpha=0.5", "prefilter.fdr=0.9",
        "prefilter.epochs=1", "model.sgraf.img_dim=64", "model.sgraf.embed_dim=16",
        "model.sgraf.sim_dim=8", "model.sgraf.word_dim=16", "model.sgraf.num_views=1",
    ]  # fmt: skip
    assert tool("train").main(argv) == 0
    records = read_metrics(tmp_path / "p")
    [kept] = [r for r in records if r["event"] == "prefilter"]
    assert kept["epoch"] == 1 and 16 <= kept["selected"] < 240 and kept["pairs"] == 240
    assert kept["selected_clean_share"] > 0.8  # above the split's 0.8 clean
    last = {r["epoch"]: r["step"] for r in records if r["event"] == "train"}
    assert last == {0: 15, 1: 15 + kept["selected"] // 16, 2: 30 + kept["selected"] // 16}
