"""Where DECL and UGNCL at one view coincide, and where they differ.

They share the evidence function (tanh), the evidential loss and the warm-up; they differ in
the hinge after the warm-up (DECL: the top-n hinge on every clean pair; UGNCL: the hardest
negative on determined-clean pairs, a trusted soft margin on hard ones) and in the division
(DECL: the argmax of the symmetric evidence; UGNCL: an uncertainty threshold into four sets).
"""

from __future__ import annotations

import pytest
import torch

from ugncl.methods.decl import DECLMethod, decl_objective, divide_by_evidence, rdh_negatives
from ugncl.methods.ugncl.division import CLEAN, HARD_CLEAN, NOISY
from ugncl.methods.ugncl.losses import (
    evidential_loss,
    lambda_schedule,
    ugncl_objective,
    warmup_objective,
)

K = 8


@pytest.fixture
def raw() -> torch.Tensor:
    torch.manual_seed(3)
    return torch.randn(K, K) + 2.0 * torch.eye(K)


CLEAN_FLAGS = torch.tensor([1, 1, 0, 1, 0, 1, 1, 0], dtype=torch.bool)


def ugncl_terms(raw: torch.Tensor, sets: torch.Tensor, lam: int) -> dict[str, torch.Tensor]:
    return ugncl_objective(
        raw[None], sets=sets, soft_label=(sets != NOISY).double(), u_bar=torch.zeros(K),
        lam=lam, function="tanh", kl_weight=0.1, trl_weight=0.8, gamma=0.2,
        evidential="per_view", trust_delta=0.0, hard_target="set",
    )  # fmt: skip


@pytest.mark.parametrize("step", [1, 40, 300])
def test_warmup_objectives_coincide(raw, step) -> None:
    """DECL's warm-up (every pair clean) is UGNCL's released warm-up objective at W = 1 with
    tanh evidence: the same L_e, the same top-n hinge at the same n."""
    n = rdh_negatives(step, K, K, 0.025, 3)
    assert n == lambda_schedule(K, step, 0.025, 3)
    decl = decl_objective(raw, torch.ones(K, dtype=torch.bool), neg=n)
    ugncl = warmup_objective(
        raw[None], lam=n, function="tanh", kl_weight=0.1, trl_weight=0.8, evidential="per_view"
    )
    torch.testing.assert_close(decl["loss_edl"], ugncl["loss_edl"])
    torch.testing.assert_close(decl["loss_rdh"], ugncl["loss_trl"])


def test_evidential_terms_coincide_on_the_same_labels(raw) -> None:
    """After the warm-up, L_e of DECL's division equals UGNCL's at the same 0/1 labels."""
    decl = decl_objective(raw, CLEAN_FLAGS, neg=5)
    sets = torch.where(CLEAN_FLAGS, CLEAN, NOISY)
    torch.testing.assert_close(decl["loss_edl"], ugncl_terms(raw, sets, 5)["loss_edl"])
    fused = evidential_loss(raw[None], CLEAN_FLAGS.float(), function="tanh", evidential="fused")
    torch.testing.assert_close(decl["loss_edl"], fused["loss"])  # one view: fusion is identity


def test_hinges_coincide_only_at_one_negative(raw) -> None:
    """UGNCL's determined-clean hinge takes the hardest negative; DECL's clean hinge the mean
    of the n hardest: equal at n = 1, different beyond."""
    sets = torch.where(CLEAN_FLAGS, CLEAN, NOISY)
    one = decl_objective(raw, CLEAN_FLAGS, neg=1)
    torch.testing.assert_close(one["loss_rdh"], ugncl_terms(raw, sets, 1)["loss_trl"])
    five = decl_objective(raw, CLEAN_FLAGS, neg=5)
    assert five["loss_rdh"] < ugncl_terms(raw, sets, 5)["loss_trl"] - 1e-3
    # UGNCL's hard-clean pairs get a trusted soft margin (0.5 x gamma at trust_delta 0), not
    # DECL's full margin: another difference at the same n.
    hard = torch.where(CLEAN_FLAGS, HARD_CLEAN, NOISY)
    assert not torch.isclose(five["loss_rdh"], ugncl_terms(raw, hard, 5)["loss_trl"])


def test_division_reads_both_directions() -> None:
    """DECL calls pair i clean when row i of E + E^T (image i's captions plus caption i's
    images) peaks on the diagonal; ties go to the first index (argmax)."""
    e = torch.tensor([[5.0, 1.0, 1.0], [4.0, 6.0, 1.0], [1.0, 1.0, 0.5]])
    # Pair 0: image 0's best caption is 0 (5); caption 0 prefers image 0 (5 vs 4): clean.
    # Pair 2: image 2 scores 1, 1, 0.5; with the columns, row 2 of E + E^T is 2, 2, 1: not 2.
    assert divide_by_evidence(e).tolist() == [True, True, False]


def test_readings_set_the_hinge_weight_and_the_schedule_start() -> None:
    package, release = DECLMethod(reading="package"), DECLMethod(reading="release")
    assert package.rdh_weight_at(128) == pytest.approx(0.8)
    assert package.rdh_weight_at(32) == pytest.approx(3.2)
    assert release.rdh_weight_at(32) == pytest.approx(0.8)
    release.batch_size = package.batch_size = 128
    # A batch of 140 (a short tail joined to it): the release starts n from batch_size.
    assert release.hard_negatives(140, 0) == 127 and package.hard_negatives(140, 0) == 139
    with pytest.raises(ValueError, match="reading"):
        DECLMethod(reading="printed")
