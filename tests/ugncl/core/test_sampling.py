"""An epoch's training batches at both epoch lengths (``train.epoch_length``)."""

from __future__ import annotations

import numpy as np
import pytest

from ugncl.core.engine.sampling import batch_indices, epoch_order, training_batches

N, BATCH, SEED = 2000, 32, 3


def _subset(fraction: float) -> np.ndarray:
    return np.random.default_rng(0).choice(N, int(N * fraction), replace=False)


@pytest.mark.parametrize("length", ["samples", "full"])
@pytest.mark.parametrize("indices", [None, np.arange(N)])
def test_an_epoch_over_every_sample_is_one_pass_at_both_lengths(length, indices) -> None:
    today = batch_indices(epoch_order(N, SEED, 2, 0), BATCH, drop_last=True)
    assert training_batches(N, BATCH, SEED, 2, 0, indices, length=length) == today


def test_samples_passes_once_over_a_subset() -> None:
    subset = _subset(0.3)
    batches = training_batches(N, BATCH, SEED, 2, 0, subset, length="samples")
    assert batches == batch_indices(epoch_order(N, SEED, 2, 0, subset), BATCH, drop_last=True)
    assert len(batches) == len(subset) // BATCH


def test_full_revisits_a_subset_up_to_the_whole_epochs_batch_count() -> None:
    subset = _subset(0.3)  # 600 samples: 18 batches a pass, 62 in a pass over all 2000
    batches = training_batches(N, BATCH, SEED, 2, 0, subset, length="full")
    assert len(batches) == N // BATCH == 62
    assert all(len(b) == BATCH and len(set(b)) == BATCH for b in batches)  # no sample twice
    # it opens with the one pass ``samples`` takes
    once = training_batches(N, BATCH, SEED, 2, 0, subset, length="samples")
    assert batches[: len(once)] == once
    visits = np.bincount(np.concatenate(batches), minlength=N)
    assert set(np.flatnonzero(visits)) == set(subset.tolist())  # only the subset's samples
    # 62 x 32 / 600 = 3.3 visits each: three full passes less their dropped tails, then part
    # of a fourth
    kept = visits[subset]
    assert kept.min() >= 1 and kept.max() <= 4
    assert np.mean(kept >= 3) > 0.9


def test_full_is_a_function_of_seed_epoch_and_stream() -> None:
    subset = _subset(0.3)

    def batches(seed: int, epoch: int, stream: int = 0) -> list[list[int]]:
        return training_batches(N, BATCH, seed, epoch, stream, subset, length="full")

    assert batches(SEED, 2) == batches(SEED, 2)
    assert batches(SEED, 2) != batches(SEED, 3)
    assert batches(SEED, 2) != batches(SEED + 1, 2)
    assert batches(SEED, 2, 0) != batches(SEED, 2, 1)
    # the further passes differ from the first and from each other
    passes = [batches(SEED, 2)[i : i + 18] for i in (0, 18, 36)]
    assert passes[0] != passes[1] != passes[2] != passes[0]


def test_full_with_fewer_samples_than_a_batch_gives_no_batch() -> None:
    assert training_batches(N, BATCH, SEED, 0, 0, np.arange(BATCH - 1), length="full") == []


def test_an_unknown_length_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown epoch length 'half'"):
        training_batches(N, BATCH, SEED, 0, 0, None, length="half")
