"""NCR's maths against the values the released code computes on fixed inputs
(tests/fixtures/ncr_release_parity.json names the release and its commit).

Tolerances: the float32 losses, margins and predictions to 1e-6 relative / 1e-7 absolute
(the same float32 operations, in a different order in places). The GMM: the release passes no
random_state, so its k-means init draws from numpy's global RNG; the fixture seeded it with
``np.random.seed(0)`` before the fit, and a ``RandomState(0)`` passed here draws the same
numbers, so with the fixture's scikit-learn (1.9.1) the probabilities agree to 1e-6. Across
scikit-learn versions they need not (the fixture measured up to 4.5e-3 between numpy seeds), so
the division they make (prob > 0.5) is checked as well: that is the quantity that trains.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import sklearn
import torch

from ugncl.core.evaluation import ensemble
from ugncl.core.metrics import retrieval_metrics
from ugncl.core.optim import step_schedule
from ugncl.methods.ncr.division import clean_probability, min_max, split_clean
from ugncl.methods.ncr.losses import (
    all_negatives_loss,
    correspondence_prediction,
    per_sample_loss,
    soft_margin,
    soft_margin_hinge,
)
from ugncl.methods.ncr.method import NCRMethod

FIXTURE = Path(__file__).resolve().parents[3] / "fixtures" / "ncr_release_parity.json"
DATA = json.loads(FIXTURE.read_text(encoding="utf-8"))
ENTRIES = {e["id"]: e for e in DATA["entries"]}
F32 = {"rtol": 1e-6, "atol": 1e-7}


def t(x) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.float32)


def close(got, want, **tol) -> None:
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), np.asarray(want), **(tol or F32))


def test_fixture_names_the_release():
    assert DATA["release"]["repository"].endswith("XLearning-SCU/2021-NeurIPS-NCR")
    assert DATA["release"]["commit"] == "60256ba1095798319099af6c93e8e2b4edf563fa"


@pytest.mark.parametrize("kind", ["linear", "exponential", "sin"])
def test_soft_margin(kind):
    e = ENTRIES[f"soft_margin_{kind}"]
    got = soft_margin(t(e["inputs"]["labels"]), e["hyperparameters"]["margin"], kind)
    close(got, e["outputs"]["margin_per_label"])


@pytest.mark.parametrize("kind", ["linear", "exponential", "sin"])
@pytest.mark.parametrize("shape", ["column_Bx1", "row_1d_B"])
@pytest.mark.parametrize("reduce", ["hardest", "all_mean"])
def test_soft_margin_hinge_in_the_release_shapes(kind, shape, reduce):
    """The release's ``(K, 1)`` labels set the margin of row i in both directions, ``(K,)``
    labels that of column j: the same tensor for both roles reproduces either."""
    e = ENTRIES[f"contrastive_train_{kind}_{shape}_{reduce}"]
    labels = t(e["inputs"]["labels"]).reshape(e["inputs"]["labels_shape"])
    margin = soft_margin(labels, e["hyperparameters"]["margin"], kind)
    got = soft_margin_hinge(t(e["inputs"]["scores"]), margin, margin, hardest=reduce == "hardest")
    close(got, e["outputs"]["loss"])


def test_plain_hinge_warmup_and_per_sample_loss():
    hard = ENTRIES["contrastive_train_nolabels_hardest"]
    mean = ENTRIES["contrastive_train_nolabels_all_mean"]
    close(soft_margin_hinge(t(hard["inputs"]["scores"]), 0.2, 0.2), hard["outputs"]["loss"])
    got = soft_margin_hinge(t(mean["inputs"]["scores"]), 0.2, 0.2, hardest=False)
    close(got, mean["outputs"]["loss"])
    warm = ENTRIES["contrastive_warmup_nolabels"]
    close(all_negatives_loss(t(warm["inputs"]["scores"]), 0.2), warm["outputs"]["value"])
    per = ENTRIES["contrastive_eval_loss_nolabels"]
    close(per_sample_loss(t(per["inputs"]["scores"]), 0.2), per["outputs"]["value"])


@pytest.mark.parametrize(
    "which", ["predict_A_labeled", "predict_A_unlabeled", "predict_B_unlabeled"]
)
def test_correspondence_prediction(which):
    e = ENTRIES[which]
    close(correspondence_prediction(t(e["inputs"]["sims"]), 0.2), e["outputs"]["p"])
    raw = ENTRIES["contrastive_predict_nolabels"]  # before the clamp to [0, 1]
    got = correspondence_prediction(t(raw["inputs"]["scores"]), 0.2)
    close(got, np.clip(raw["outputs"]["value"], 0, 1))


def test_prediction_of_a_batch_without_margin_left_is_zero_not_nan():
    """Every pair violated by more than the margin: the release divides 0 by 0."""
    scores = torch.full((4, 4), 0.9)
    scores.fill_diagonal_(0.1)
    assert torch.equal(correspondence_prediction(scores, 0.2), torch.zeros(4))


def _block(a: list, b: list) -> torch.Tensor:
    """A 16-pair batch whose clean pairs are the first 8 (block ``a``) and noisy the last 8
    (``b``); the off-diagonal blocks are never read (each subset's negatives are its own)."""
    out = torch.full((16, 16), float("nan"))
    out[:8, :8], out[8:, 8:] = t(a), t(b)
    return out


@pytest.mark.parametrize("kind", ["exponential", "linear", "sin"])
@pytest.mark.parametrize("epoch", [0, 39])
def test_co_training_step_release_reading(kind, epoch):
    """One network's step of the release's co_train.train: the clean batch's (K, K) labels
    w_i + (1 - w_i) P_j, the noisy batch's (P_A + P_B) / 2 as (K, 1), each subset's hinge,
    the noisy term only from epoch num_epochs // 2."""
    e = ENTRIES[f"co_train_train_step_{kind}_epoch{epoch}"]
    x, hp = e["inputs"], e["hyperparameters"]
    method = NCRMethod(reading="release", soft_margin=kind, margin=hp["margin"])
    own = _block(x["sims_labeled_net"], x["sims_unlabeled_net"])
    other = _block(x["sims_labeled_net"], x["sims_unlabeled_net2"])
    prob = torch.cat([t(x["batch_prob_l"]).reshape(-1), torch.zeros(8)])
    clean = torch.arange(16) < 8
    with_noisy = epoch >= hp["num_epochs"] // 2
    loss_l, loss_u = method._network_loss(own, own, other, prob, clean, with_noisy)
    close(loss_l, e["outputs"]["loss_l"])
    close(loss_u, e["outputs"]["loss_u"])


def test_co_training_step_anchor_reading_is_the_per_pair_loss():
    """The paper/package readings: pair i's label y_i sets the margin of image i and of
    caption i; checked against the hinge written out pair by pair in float64."""
    e = ENTRIES["co_train_train_step_exponential_epoch39"]
    x = e["inputs"]
    s = np.asarray(x["sims_labeled_net"], dtype=np.float64)
    w = np.asarray(x["batch_prob_l"], dtype=np.float64).reshape(-1)
    p = np.asarray(x["pl_net_predict_labeled"], dtype=np.float64)
    y = w + (1 - w) * p
    alpha = 0.2 * (10**y - 1) / 9
    want = 0.0
    for i in range(8):
        neg = [j for j in range(8) if j != i]
        want += max(0.0, max(alpha[i] + s[i, j] - s[i, i] for j in neg))
        want += max(0.0, max(alpha[i] + s[j, i] - s[i, i] for j in neg))
    method = NCRMethod(reading="package")
    own = _block(x["sims_labeled_net"], x["sims_unlabeled_net"])
    prob = torch.cat([t(x["batch_prob_l"]).reshape(-1), torch.zeros(8)])
    loss_l, _ = method._network_loss(own, own, own, prob, torch.arange(16) < 8, False)
    close(loss_l, want, rtol=1e-5, atol=1e-6)


def test_gmm_division_over_a_pass():
    """Per-sample losses scattered by sample id, min-max normalised, one GMM per network
    (A's fit first, B's continuing the same RNG, as the release's global RNG does)."""
    e = ENTRIES["eval_train_gmm"]
    n = e["inputs"]["data_size"]
    losses = {"A": np.zeros(n, np.float32), "B": np.zeros(n, np.float32)}
    for batch in e["inputs"]["batches"]:
        for net in ("A", "B"):
            losses[net][batch["ids"]] = per_sample_loss(t(batch[f"sims_model_{net}"])).numpy()
    rng = np.random.RandomState(e["hyperparameters"]["numpy_global_seed_before_call"])
    for net in ("A", "B"):
        out = e["outputs"]
        close(losses[net], out[f"per_sample_loss_{net}"])
        close(min_max(losses[net]), out[f"normalized_loss_{net}"])
        fit = clean_probability(losses[net], random_state=rng)
        want = np.asarray(out[f"prob_{net}"])
        assert np.array_equal(split_clean(fit.prob), split_clean(want))
        if sklearn.__version__ == DATA["environment"]["sklearn"]:
            close(fit.prob, want, rtol=0, atol=1e-6)
            close(sorted(fit.means), sorted(out[f"gmm_{net}"]["means_"]), rtol=0, atol=1e-6)


def test_gmm_on_a_loss_vector():
    e = ENTRIES["gmm_clean_prob_from_loss_vector"]
    fit = clean_probability(np.asarray(e["inputs"]["loss"], np.float32), random_state=0)
    close(fit.normalized, e["outputs"]["normalized_loss"])
    want = np.asarray(e["outputs"]["prob_clean"])
    assert np.array_equal(split_clean(fit.prob), split_clean(want))
    if sklearn.__version__ == DATA["environment"]["sklearn"]:
        close(fit.prob, want, rtol=0, atol=1e-6)
        assert fit.n_iter == e["outputs"]["n_iter_"]


@pytest.mark.parametrize(
    "which",
    ["split_prob_from_gmm", "split_prob_all_above_threshold", "split_prob_len250_all_above"],
)
def test_split_and_the_one_percent_rule(which):
    e = ENTRIES[which]
    got = split_clean(np.asarray(e["inputs"]["prob"]), e["hyperparameters"]["p_threshold"])
    assert got.tolist() == e["outputs"]["pred"]


@pytest.mark.parametrize("which", ["lr_schedule_f30k_cc152k", "lr_schedule_coco"])
@pytest.mark.parametrize("warmup", [0, 5])
def test_lr_schedule(which, warmup):
    """The trainer's ``step`` schedule with warm-up epochs uncounted (release: the co-training
    epoch decides)."""
    e = ENTRIES[which]
    hp = e["hyperparameters"]
    factor = step_schedule(warmup, hp["lr_update"], 0.1)
    got = [hp["learning_rate"] * factor(warmup + ep) for ep in e["inputs"]["epochs"]]
    close(got, e["outputs"]["lr"], rtol=1e-12, atol=0)
    assert factor(0) == 1.0  # warm-up at the initial lr


def test_evaluation_averages_the_two_networks():
    e = ENTRIES["evalrank_average_two_nets"]
    x = e["inputs"]
    avg = ensemble([np.asarray(x["sims_A"], np.float32), np.asarray(x["sims_B"], np.float32)])
    close(avg, e["outputs"]["sims_avg"])
    n_img = x["n_images"]
    c2i = np.arange(avg.shape[1]) // (avg.shape[1] // n_img)
    want = e["outputs"]["recall"]["avg"]
    got = retrieval_metrics(avg, c2i, ties="release")
    close([got["i2t/R@1"], got["i2t/R@5"], got["i2t/R@10"]], want["i2t"][:3], rtol=1e-9)
    close([got["t2i/R@1"], got["t2i/R@5"], got["t2i/R@10"]], want["t2i"][:3], rtol=1e-9)
    close(got["rsum"], want["rsum"], rtol=1e-9)
