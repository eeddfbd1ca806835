"""The division audit (trained vs fresh noisy pairs) on a tiny split with scripted scorers."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
import torch
from torch import Tensor, nn

from precomputed.dataset import open_split
from precomputed.noise import clean_image_index, make_caption_noise
from precomputed.vocab import build_vocab
from ugncl.methods.ugncl.division import CLEAN, HARD_CLEAN, HARD_NOISY, NOISY
from ugncl.run.division_audit import (
    audit_division,
    divide_split,
    fresh_noisy_index,
    kept_as_clean,
    kept_by_group,
    label_separation,
    score_spread,
)

N_IMG, CPI = 12, 2


@pytest.fixture(scope="module")
def noisy_split(tmp_path_factory):
    """12 images x 2 captions, caption k is the one word ``c<k>``; image id in feature [0, 0];
    half the captions re-paired (seeded)."""
    root = tmp_path_factory.mktemp("data")
    folder = root / "tiny_precomp"
    folder.mkdir()
    feats = np.random.default_rng(0).random((N_IMG, 3, 4), dtype=np.float32)
    feats[:, 0, 0] = np.arange(N_IMG)
    np.save(folder / "train_ims.npy", feats)
    texts = [f"c{k}" for k in range(N_IMG * CPI)]
    (folder / "train_caps.txt").write_text("\n".join(texts) + "\n")
    split = open_split(root, "tiny_precomp", "train", build_vocab(texts, min_count=1),
                       captions_per_image=CPI)  # fmt: skip
    noise = make_caption_noise(clean_image_index(N_IMG, CPI), 0.5, seed=3)
    return split.with_noise(noise)


class ScriptedScorer(nn.Module):
    """Raw score 1 where ``match(image, caption)`` holds, else 0 (W = 2 equal views)."""

    def __init__(self, split, match) -> None:
        super().__init__()
        self.caption_of = {tuple(split.tokens[k].tolist()): k for k in range(split.num_captions)}
        self.match = match

    def forward(self, images: Tensor, captions: Tensor, lengths: Tensor) -> Tensor:
        ids = images[:, 0, 0].long().tolist()
        caps = [self.caption_of[tuple(c[:n].tolist())] for c, n in zip(captions, lengths.tolist())]
        raw = torch.tensor([[float(self.match(i, k)) for k in caps] for i in ids])
        return raw.expand(2, -1, -1)


def diagonal_matches(raw: Tensor) -> Tensor:
    """Hard-clean where the scorer says the pair itself matches (a rule without rivals: two
    slots of one image in a batch would tie a rival rule)."""
    return torch.where(torch.diagonal(raw[0]) > 0.5, HARD_CLEAN, HARD_NOISY)


def test_fresh_pairs_change_only_the_noisy_captions_and_never_repeat_a_pairing() -> None:
    true = clean_image_index(50, 5)
    trained = make_caption_noise(true, 0.6, seed=1)
    fresh = fresh_noisy_index(true, trained, seed=0)
    noisy = trained != true
    assert np.array_equal(fresh[~noisy], trained[~noisy])
    assert (fresh[noisy] != true[noisy]).all() and (fresh[noisy] != trained[noisy]).all()
    assert np.array_equal(fresh, fresh_noisy_index(true, trained, seed=0))
    assert not np.array_equal(fresh, fresh_noisy_index(true, trained, seed=1))
    assert len(np.unique(fresh[noisy])) > 40  # drawn over the images, not a fixed shift


def test_fresh_pairs_refuse_what_cannot_be_re_paired() -> None:
    with pytest.raises(ValueError, match="same length"):
        fresh_noisy_index(np.arange(4), np.arange(3))
    with pytest.raises(ValueError, match="at least 3 images"):
        fresh_noisy_index(np.array([0, 1]), np.array([1, 0]))
    clean = np.arange(6) // 2
    assert np.array_equal(fresh_noisy_index(clean, clean), clean)  # nothing noisy: unchanged


def test_a_model_that_knows_the_truth_memorises_nothing(noisy_split) -> None:
    truth = noisy_split.true_image
    model = ScriptedScorer(noisy_split, lambda image, k: truth[k] == image)
    out = audit_division(noisy_split, partial(divide_split, model, diagonal_matches, batch_size=8))
    for name in ("trained", "fresh"):
        assert out[name]["noisy_f1"] == pytest.approx(1.0)
        assert out[name]["noisy_kept"] == 0.0
    assert out["memorised"] == 0.0
    assert out["trained"]["n_hard_noisy"] == int((~noisy_split.clean).sum())


def test_a_model_that_memorised_its_pairs_keeps_the_trained_noise_and_not_the_fresh(
    noisy_split,
) -> None:
    trained = noisy_split.image_index
    model = ScriptedScorer(noisy_split, lambda image, k: trained[k] == image)
    out = audit_division(noisy_split, partial(divide_split, model, diagonal_matches, batch_size=8))
    assert out["trained"]["noisy_kept"] == 1.0  # every trained pair scores as a match
    assert out["fresh"]["noisy_kept"] == 0.0 and out["fresh"]["noisy_f1"] == pytest.approx(1.0)
    assert out["memorised"] == 1.0


def test_kept_as_clean_counts_both_clean_sets_over_the_noisy_pairs() -> None:
    sets = np.array([CLEAN, HARD_CLEAN, NOISY, HARD_NOISY, CLEAN])
    clean = np.array([False, False, False, False, True])
    assert kept_as_clean(sets, clean) == 0.5
    assert kept_as_clean(sets, np.ones(5, dtype=bool)) is None


def test_kept_by_group_splits_the_kept_shares_by_group_and_truth() -> None:
    sets = np.array([CLEAN, HARD_CLEAN, NOISY, HARD_NOISY, HARD_CLEAN, HARD_NOISY])
    clean = np.array([True, False, False, True, False, False])
    first = np.array([True, True, True, True, False, False])
    out = kept_by_group(sets, clean, {"first": first, "last": ~first})
    assert out["first"] == {"clean": 2, "clean_kept": 0.5, "noisy": 2, "noisy_kept": 0.5}
    assert out["last"] == {"clean": 0, "clean_kept": None, "noisy": 2, "noisy_kept": 0.5}
    with pytest.raises(ValueError, match="group 'short' masks"):
        kept_by_group(sets, clean, {"short": first[:3]})


def test_the_audit_breaks_the_trained_division_down_by_group(noisy_split) -> None:
    trained = noisy_split.image_index
    model = ScriptedScorer(noisy_split, lambda image, k: trained[k] == image)
    groups = {"even": np.arange(N_IMG * CPI) % 2 == 0}
    out = audit_division(noisy_split, partial(divide_split, model, diagonal_matches, batch_size=8),
                         groups=groups)  # fmt: skip
    even = out["trained"]["groups"]["even"]
    assert even["noisy_kept"] == 1.0  # the memorising model keeps every trained pair
    assert even["clean"] + even["noisy"] == N_IMG * CPI // 2
    assert "groups" not in out["fresh"]


def test_label_separation_tells_the_pairs_errors_from_their_batches() -> None:
    rng = np.random.default_rng(0)
    clean = rng.random(400) < 0.3
    own = np.where(clean, 0.6, 0.4) + rng.normal(0, 0.3, 400)  # the pair's own score

    def by_pair(seed: int) -> np.ndarray:  # the same label in every batch order
        return own

    def by_batch(seed: int) -> np.ndarray:  # the batch's luck, drawn anew per order
        return own + np.random.default_rng(seed).normal(0, 0.6, 400)

    fixed = label_separation(by_pair, clean, draws=4)
    assert fixed["draws"] == 4
    assert fixed["auc_mean"] == pytest.approx(fixed["auc_one_order"])
    luck = label_separation(by_batch, clean, draws=8)
    assert luck["auc_mean"] > luck["auc_one_order"] + 0.05
    assert 0.3 < fixed["top_clean_share"] <= 1.0
    perfect = label_separation(lambda seed: clean.astype(float), clean, draws=1)
    assert perfect["auc_one_order"] == 1.0 and perfect["top_clean_share"] == 1.0
    with pytest.raises(ValueError, match="draws must be >= 1"):
        label_separation(by_pair, clean, draws=0)


class VectorHead(nn.Module):
    """Scores read by ``readout`` from a per-pair vector ``[match, 1] * scale + offset``: its
    pair-dependent part and a part that is the same for every pair."""

    def __init__(self, split, scale: float, offset: float) -> None:
        super().__init__()
        self.scripted = ScriptedScorer(split, lambda i, k: i == k // CPI)
        self.scale, self.offset = scale, offset
        self.readout = nn.Linear(2, 1, bias=False)
        with torch.no_grad():
            self.readout.weight.copy_(torch.tensor([[1.0, -1.0]]))

    def forward(self, images: Tensor, captions: Tensor, lengths: Tensor) -> Tensor:
        match = self.scripted(images, captions, lengths)[0]
        vec = torch.stack([match * self.scale, torch.ones_like(match)], dim=-1) + self.offset
        return self.readout(vec).squeeze(-1).unsqueeze(0)


def test_score_spread_tells_a_head_that_reads_its_input_from_one_that_does_not(
    noisy_split,
) -> None:
    spread = partial(score_spread, split=noisy_split, batch_size=6)
    reads = VectorHead(noisy_split, scale=1.0, offset=0.0)
    got = spread(reads, head_input=reads.readout)
    assert got["score_std"] > 0.1 and got["input_spread"] > 0.1
    # the same head with the pair-dependent part drowned by a vector common to every pair
    drowned = VectorHead(noisy_split, scale=1e-3, offset=50.0)
    flat = spread(drowned, head_input=drowned.readout)
    assert flat["score_std"] < 1e-3 and flat["input_spread"] < 1e-4
    assert flat["input_norm"] > 50 * got["input_norm"] / 2
    assert spread(reads)["input_spread"] is None  # no head to read: scores only
    with pytest.raises(ValueError, match="no whole batch"):
        spread(reads, batch_size=1000)
