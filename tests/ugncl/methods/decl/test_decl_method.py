"""DECL's method class: the warm-up trains every pair, later steps read the epoch's division."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.ugncl.methods.test_methods import ctx, tiny_batch
from ugncl.methods.decl import DECLMethod, decl_objective, rdh_negatives


def test_warmup_step_treats_every_pair_as_clean_and_main_step_reads_the_division() -> None:
    model, batch = tiny_batch(k=6)
    model.eval()  # no dropout: the same scores for every call
    method = DECLMethod(mu=2, reading="release")
    raw = model(batch.images, batch.captions, batch.lengths)[0].float()
    neg = rdh_negatives(1, 6, 6, 0.025, 2)
    warm = method.training_step(model, batch, ctx(warmup=True))
    expected = decl_objective(raw, torch.ones(6, dtype=torch.bool), neg=neg)
    torch.testing.assert_close(warm["loss_rdh"], expected["loss_rdh"])
    with pytest.raises(RuntimeError, match="without a division"):
        method.training_step(model, batch, ctx(warmup=False))

    flags = np.zeros(int(batch.index.max()) + 1, dtype=bool)
    flags[batch.index[:2].numpy()] = True  # two of the six pairs divided clean
    method.set_extra_state({"predicted_clean": torch.from_numpy(flags), "u": None})
    main = method.training_step(model, batch, ctx(warmup=False))
    clean = torch.as_tensor(flags[batch.index.numpy()])
    expected = decl_objective(raw, clean, neg=neg)
    torch.testing.assert_close(main["loss_rdh"], expected["loss_rdh"])
    torch.testing.assert_close(main["loss_edl"], expected["loss_edl"])
    assert main["clean_share"] == pytest.approx(2 / 6)
    assert main["loss_rdh"] < warm["loss_rdh"]
