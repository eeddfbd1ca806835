"""UGNCL in the pre-filter's epochs: its division is the pre-filter's selection (kept pairs
hard-clean, the rest hard-noisy), read from the method context, then the model's own."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from tests.ugncl.prefilter_world import planted_world
from ugncl.core.engine.context import MethodContext
from ugncl.core.engine.device import select_precision
from ugncl.core.prefilter import PrefilterSelection, select_pairs
from ugncl.methods.ugncl.division import HARD_CLEAN, HARD_NOISY, hard_division
from ugncl.methods.ugncl.method import UGNCLMethod


def _context(tmp_path, clean: np.ndarray, prefilter=None) -> MethodContext:
    cpu = torch.device("cpu")
    return MethodContext(
        model=torch.nn.Identity(), device=cpu, precision=select_precision("off", cpu),
        run_dir=tmp_path, seed=0, warmup_epochs=1, batch_size=64,
        num_samples=len(clean), clean=clean, recorder=None,
        batches=lambda *a, **kw: [], prefilter=prefilter,
    )  # fmt: skip


def test_the_division_is_the_prefilter_selection_in_its_epochs(tmp_path) -> None:
    from ugncl.core.prefilter import prefilter_pvalues

    captions, pooled, image_index, clean = planted_world(0.7)
    pvalues = prefilter_pvalues(captions, 101, pooled, image_index, seed=0)
    selection = PrefilterSelection(pvalues, select_pairs(pvalues, 0.02, 0.1))
    method = UGNCLMethod(division_pass="separate")
    ctx = _context(tmp_path, clean, selection)
    assert method.on_epoch_start(ctx, 0) is None  # warm-up
    record = method.on_epoch_start(ctx, 1)
    assert record["prefiltered"] and record["dividing"] and method.schedule.started
    sets = np.asarray(method.division.sets)
    assert set(np.unique(sets)) == {HARD_CLEAN, HARD_NOISY}
    np.testing.assert_array_equal(sets == HARD_CLEAN, selection.selected)
    assert clean[sets == HARD_CLEAN].mean() > 0.9
    assert abs(record["prefilter_null_share"] - (~clean).mean()) < 0.05
    # The truth diagnostic ignores it.
    truth = UGNCLMethod(division_pass="separate", division_source="truth")
    assert "prefiltered" not in truth.on_epoch_start(ctx, 1)
    np.testing.assert_array_equal(truth.division.sets, hard_division(clean).sets)


def test_after_the_prefilter_epochs_the_model_divides(tmp_path) -> None:
    clean = np.array([True, False] * 16)
    selection = PrefilterSelection(np.full(32, 0.01), clean.copy())
    method = UGNCLMethod(division_source="truth")  # stands in for the model's division
    method.on_epoch_start(_context(tmp_path, clean, selection), 1)
    ctx = dataclasses.replace(_context(tmp_path, clean), global_step=7)
    record = method.on_epoch_start(ctx, 2)
    assert "prefiltered" not in record and record["dividing"]
