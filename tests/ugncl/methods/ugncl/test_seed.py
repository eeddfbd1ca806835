"""The seed division: a cross-fitted linear fit's p-values, their selection, and the method's
use of them in the epochs after the warm-up."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ugncl.core.data import PairBatch
from ugncl.core.engine.context import MethodContext
from ugncl.core.engine.device import select_precision
from ugncl.core.errors import ConfigError
from ugncl.methods.ugncl.division import HARD_CLEAN, HARD_NOISY
from ugncl.methods.ugncl.method import UGNCLMethod
from ugncl.methods.ugncl.seed import (
    caption_bags,
    gather_seed_inputs,
    image_components,
    linear_pair_pvalues,
    null_share,
    pair_pvalues,
    seed_pvalues,
    seed_selection,
)

N_IMG, CPI, WORDS, DIM = 300, 5, 100, 64


def planted_world(noise: float, seed: int = 0):
    """Images whose pooled feature is the sum of their caption words' directions plus noise;
    each of the 5 captions names 3 of the image's 4 words; ``noise`` of the captions are
    re-paired with a random other image.

    Returns ``(captions, pooled (I, D), image_index (N,), clean (N,))``."""
    rng = np.random.default_rng(seed)
    directions = rng.normal(size=(WORDS, DIM))
    words = np.stack([rng.choice(WORDS, 4, replace=False) for _ in range(N_IMG)])
    pooled = directions[words].sum(1) + rng.normal(scale=0.5, size=(N_IMG, DIM))
    captions = [
        rng.choice(words[i], 3, replace=False) + 1 for i in range(N_IMG) for _ in range(CPI)
    ]  # ids from 1: 0 is padding
    truth = np.arange(N_IMG * CPI) // CPI
    image_index = truth.copy()
    moved = rng.random(len(truth)) < noise
    image_index[moved] = (truth[moved] + rng.integers(1, N_IMG, moved.sum())) % N_IMG
    return captions, pooled.astype(np.float32), image_index, image_index == truth


@pytest.fixture(scope="module")
def noisy_world():
    captions, pooled, image_index, clean = planted_world(0.7)
    pvalues = seed_pvalues(captions, WORDS + 1, pooled, image_index, seed=0)
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
    chosen = seed_selection(pvalues, alpha=0.02, fdr=0.1)
    assert clean[chosen].mean() > 0.9
    assert chosen[clean].mean() > 0.4
    assert chosen[~clean].mean() < 0.03
    # A tighter false-discovery rate keeps fewer pairs, never more.
    assert not (seed_selection(pvalues, alpha=0.02, fdr=0.01) & ~chosen).any()
    # Uniform p-values (no related pair at all): nothing passes.
    uniform = np.random.default_rng(1).random(5000)
    assert not seed_selection(uniform, alpha=0.02, fdr=0.1).any()


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


def _fake_fetch(images: torch.Tensor, captions: list[list[int]], image_index: np.ndarray):
    def fetch(indices: np.ndarray) -> PairBatch:
        indices = np.asarray(indices)
        longest = max(len(captions[k]) for k in indices)
        tokens = torch.zeros(len(indices), longest, dtype=torch.long)
        for row, k in enumerate(indices):
            tokens[row, : len(captions[k])] = torch.tensor(captions[k])
        return PairBatch(
            images=images[image_index[indices]],
            captions=tokens,
            lengths=torch.tensor([len(captions[k]) for k in indices]),
            index=torch.as_tensor(indices),
            image_index=torch.as_tensor(image_index[indices]),
            clean=torch.ones(len(indices), dtype=torch.bool),
        )

    return fetch


def test_gather_seed_inputs_pools_each_image_and_keeps_the_sample_order() -> None:
    images = torch.arange(4 * 3 * 2, dtype=torch.float32).reshape(4, 3, 2)
    captions = [[1, 2], [3], [4, 5, 6], [7], [8, 9]]
    image_index = np.array([2, 0, 2, 1, 0])
    got = gather_seed_inputs(_fake_fetch(images, captions, image_index), 5, batch_size=2)
    assert got is not None
    tokens, pooled, paired = got
    assert [t.tolist() for t in tokens] == captions
    np.testing.assert_array_equal(paired, image_index)
    np.testing.assert_array_equal(pooled[:3], images[:3].amax(1).numpy())
    pixels = torch.zeros(4, 3, 2, 2)
    assert gather_seed_inputs(_fake_fetch(pixels, captions, image_index), 5, 2) is None


def _context(tmp_path, fetch, clean: np.ndarray, warmup: int) -> MethodContext:
    cpu = torch.device("cpu")
    return MethodContext(
        model=torch.nn.Identity(), device=cpu, precision=select_precision("off", cpu),
        run_dir=tmp_path, seed=0, warmup_epochs=warmup, batch_size=64,
        num_samples=len(clean), clean=clean, recorder=None,
        batches=lambda *a, **kw: [], fetch=fetch,
    )  # fmt: skip


def test_the_method_divides_by_the_seed_for_its_epochs_after_the_warm_up(tmp_path) -> None:
    captions, pooled, image_index, clean = planted_world(0.7)
    regions = torch.as_tensor(pooled)[:, None, :].expand(-1, 2, -1)  # (I, 2 regions, D)
    fetch = _fake_fetch(regions, [list(c) for c in captions], image_index)
    ctx = _context(tmp_path, fetch, clean, warmup=1)
    method = UGNCLMethod(division_pass="separate", seed_epochs=2)
    assert method.on_epoch_start(ctx, 0) is None  # warm-up
    record = method.on_epoch_start(ctx, 1)
    assert record["seeded"] and record["dividing"]
    sets = np.asarray(method.division.sets)
    assert set(np.unique(sets)) == {HARD_CLEAN, HARD_NOISY}
    assert clean[sets == HARD_CLEAN].mean() > 0.9
    assert abs(record["seed_null_share"] - (~clean).mean()) < 0.05
    # A resumed method divides by the same seed without recomputing it.
    resumed = UGNCLMethod(division_pass="separate", seed_epochs=2)
    resumed.set_extra_state(method.get_extra_state())
    again = resumed.on_epoch_start(_context(tmp_path, None, clean, warmup=1), 2)
    assert again["seeded"]
    np.testing.assert_array_equal(np.asarray(resumed.division.sets), sets)


def test_seed_none_and_bad_seed_settings() -> None:
    method = UGNCLMethod(seed="none")
    assert not method._seeds(None, 5)  # never consulted: no context needed
    for key, value in (("seed", "cca"), ("seed_alpha", 0.0), ("seed_fdr", 1.0),
                       ("seed_epochs", -1)):  # fmt: skip
        with pytest.raises(ConfigError, match=f"method.ugncl.{key}"):
            UGNCLMethod(**{key: value})
