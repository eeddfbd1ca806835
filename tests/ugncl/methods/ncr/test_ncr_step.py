"""NCR's step on a tiny SGRAF: warm-up trains both networks on every pair; the readings decide
when the noisy pairs' term starts; gradients reach both networks and only through their own
terms."""

from __future__ import annotations

import types

import pytest
import torch

from tests.ugncl.methods.test_methods import tiny_batch
from ugncl.core.engine.context import StepContext
from ugncl.methods.ncr.method import NCRMethod

WARMUP, EPOCHS = 2, 4


def _method(reading: str, model) -> NCRMethod:
    method = NCRMethod(reading=reading)
    method.bind_data(
        types.SimpleNamespace(train=types.SimpleNamespace(epochs=EPOCHS, seed=0)), None, None
    )
    method.prepare(model, 6)
    method.warmup_epochs = WARMUP
    # A division of the batch: pairs 0-3 clean for A, 2-5 clean for B.
    method._clean = [torch.arange(6) < 4, torch.arange(6) >= 2]
    method._prob = [torch.full((6,), 0.8, dtype=torch.float64)] * 2
    return method


def _step(epoch: int) -> StepContext:
    return StepContext(epoch, 0, epoch < WARMUP, torch.device("cpu"))


def test_the_second_network_is_initialised_apart():
    model, _ = tiny_batch()
    method = _method("package", model)
    a, b = model.state_dict(), method.peer.state_dict()
    assert a.keys() == b.keys()
    assert not torch.equal(a["sim_enc.sim_eval_w.weight"], b["sim_enc.sim_eval_w.weight"])
    names = {id(p) for p in method.trainable_parameters(model)}
    assert names == {id(p) for p in [*model.parameters(), *method.peer.parameters()]}


def test_warmup_trains_both_networks_on_every_pair():
    model, batch = tiny_batch()
    method = _method("package", model)
    terms = method.training_step(model, batch, _step(0))
    assert set(terms) == {"loss_a", "loss_b"}
    terms["loss_a"].backward()
    assert model.sim_enc.sim_eval_w.weight.grad is not None
    assert method.peer.sim_enc.sim_eval_w.weight.grad is None  # A's term reaches A only


@pytest.mark.parametrize(
    ("reading", "epoch", "noisy_on"),
    [("package", WARMUP, False), ("package", WARMUP + EPOCHS // 2, True),
     ("release", WARMUP + 1, False), ("release", WARMUP + EPOCHS // 2, True),
     ("paper", WARMUP, True)],
)  # fmt: skip
def test_the_noisy_term_starts_as_the_reading_says(reading, epoch, noisy_on):
    model, batch = tiny_batch()
    method = _method(reading, model)
    terms = method.training_step(model, batch, _step(epoch))
    for net in ("a", "b"):
        assert terms[f"loss_{net}_noisy"].requires_grad
        assert (terms[f"loss_{net}_noisy"].item() != 0) == noisy_on
        assert terms[f"loss_{net}_clean"].item() > 0
    assert terms["clean_share_a"].item() == pytest.approx(4 / 6)
    terms["loss_b_clean"].backward()
    assert method.peer.sim_enc.sim_eval_w.weight.grad is not None
    assert model.sim_enc.sim_eval_w.weight.grad is None


def test_readings_differ_in_the_clean_margins_only_by_the_label_shape():
    model, batch = tiny_batch()
    paper = _method("paper", model)
    release = _method("release", model)
    release.peer.load_state_dict(paper.peer.state_dict())
    step = _step(WARMUP + EPOCHS // 2)
    torch.manual_seed(1)
    a = paper.training_step(model, batch, step)
    torch.manual_seed(1)
    b = release.training_step(model, batch, step)
    assert a["loss_a_clean"].item() != pytest.approx(b["loss_a_clean"].item(), abs=1e-6)
