"""Retrieval metrics against a brute-force reference written the way SCAN/NCR compute them."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ugncl.core.metrics import (
    METRIC_KEYS,
    coco_folds,
    fold_metrics,
    i2t_ranks,
    recall_at,
    retrieval_metrics,
    t2i_ranks,
)


def brute_i2t(scores: np.ndarray, c2i: np.ndarray) -> np.ndarray:
    """NCR ``i2t``: sort each row descending, rank = best position among the image's captions."""
    ranks = np.empty(scores.shape[0], dtype=np.int64)
    for i in range(scores.shape[0]):
        order = np.argsort(-scores[i], kind="stable")
        gt = np.flatnonzero(c2i == i)
        ranks[i] = min(int(np.where(order == k)[0][0]) for k in gt)
    return ranks


def brute_t2i(scores: np.ndarray, c2i: np.ndarray) -> np.ndarray:
    """NCR ``t2i``: sort each column descending, rank = position of the caption's image."""
    ranks = np.empty(scores.shape[1], dtype=np.int64)
    for k in range(scores.shape[1]):
        order = np.argsort(-scores[:, k], kind="stable")
        ranks[k] = int(np.where(order == c2i[k])[0][0])
    return ranks


def brute_metrics(scores: np.ndarray, c2i: np.ndarray) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, r in (("i2t", brute_i2t(scores, c2i)), ("t2i", brute_t2i(scores, c2i))):
        for k in (1, 5, 10):
            out[f"{name}/R@{k}"] = 100.0 * len(np.where(r < k)[0]) / len(r)
        out[f"{name}/medr"] = np.floor(np.median(r)) + 1
        out[f"{name}/meanr"] = r.mean() + 1
    out["rsum"] = sum(out[f"{d}/R@{k}"] for d in ("i2t", "t2i") for k in (1, 5, 10))
    return out


def random_problem(n_img: int, cpi: int, seed: int, signal: float = 1.5):
    """Continuous random scores with some signal on the diagonal blocks (so recalls vary)."""
    rng = np.random.default_rng(seed)
    c2i = np.arange(n_img * cpi) // cpi
    scores = rng.standard_normal((n_img, n_img * cpi)).astype(np.float32)
    scores[c2i, np.arange(c2i.size)] += signal
    return scores, c2i


@pytest.mark.parametrize(
    ("n_img", "cpi", "seed"), [(1, 1, 0), (7, 1, 1), (40, 1, 2), (13, 5, 3), (60, 5, 4), (25, 3, 5)]
)
def test_ranks_and_metrics_match_brute_force(n_img, cpi, seed):
    scores, c2i = random_problem(n_img, cpi, seed)
    np.testing.assert_array_equal(i2t_ranks(scores, c2i), brute_i2t(scores, c2i))
    np.testing.assert_array_equal(t2i_ranks(scores, c2i), brute_t2i(scores, c2i))
    got = retrieval_metrics(scores, c2i)
    assert tuple(got) == METRIC_KEYS
    expected = brute_metrics(scores, c2i)
    for key in METRIC_KEYS:
        assert got[key] == pytest.approx(expected[key], abs=1e-9), key
        assert isinstance(got[key], float)


def test_shuffled_caption_order_and_torch_input():
    """A non-grouped caption->image map and a torch tensor give the brute-force answer."""
    scores, c2i = random_problem(30, 5, seed=11)
    perm = np.random.default_rng(0).permutation(c2i.size)
    scores, c2i = scores[:, perm], c2i[perm]
    np.testing.assert_array_equal(i2t_ranks(torch.from_numpy(scores), c2i), brute_i2t(scores, c2i))
    np.testing.assert_array_equal(t2i_ranks(scores, torch.from_numpy(c2i)), brute_t2i(scores, c2i))


def test_chunked_path_matches_brute_force(monkeypatch):
    """Force many tiny chunks so the chunk boundaries are exercised."""
    import ugncl.core.metrics as metrics

    monkeypatch.setattr(metrics, "_CHUNK_ELEMENTS", 17)
    scores, c2i = random_problem(23, 5, seed=7)
    np.testing.assert_array_equal(i2t_ranks(scores, c2i), brute_i2t(scores, c2i))
    np.testing.assert_array_equal(t2i_ranks(scores, c2i), brute_t2i(scores, c2i))


def test_tie_rules_hand_worked():
    """One 3x3 matrix with ties under each rule (module doc of ugncl.core.metrics)."""
    scores = np.array([[1.0, 1.0, 1.0], [1.0, 1.0, 0.5], [2.0, 1.0, 1.0]], dtype=np.float32)
    c2i = np.array([0, 1, 2])
    # image 0: GT c0 tied with c1, c2 -> optimistic 0, pessimistic 2, expected 2/2 = 1.
    # image 1: GT c1 tied with c0 -> 0, 1, 0.5. image 2: c0 above, c1 tied -> 1, 2, 1.5.
    np.testing.assert_array_equal(i2t_ranks(scores, c2i, ties="optimistic"), [0, 0, 1])
    np.testing.assert_array_equal(i2t_ranks(scores, c2i, ties="pessimistic"), [2, 1, 2])
    np.testing.assert_allclose(i2t_ranks(scores, c2i), [1.0, 0.5, 1.5])
    # caption 0: img2 above GT img0, img1 tied -> 1, 2, 1.5; caption 1: all tied -> 0, 2, 1;
    # caption 2: GT img2 tied with img0 -> 0, 1, 0.5.
    np.testing.assert_array_equal(t2i_ranks(scores, c2i, ties="optimistic"), [1, 0, 0])
    np.testing.assert_array_equal(t2i_ranks(scores, c2i, ties="pessimistic"), [2, 2, 1])
    np.testing.assert_allclose(t2i_ranks(scores, c2i), [1.5, 1.0, 0.5])
    # The released code: descending read of numpy's argsort.
    for ranks, brute in (
        (i2t_ranks(scores, c2i, ties="release"), release_i2t(scores, c2i)),
        (t2i_ranks(scores, c2i, ties="release"), release_t2i(scores, c2i)),
    ):
        np.testing.assert_array_equal(ranks, brute)
    # Expected recall: image 0 hits R@1 with probability 1/3, image 1 with 1/2, image 2 never.
    m = retrieval_metrics(scores, c2i)
    assert m["i2t/R@1"] == pytest.approx(100 * (1 / 3 + 1 / 2) / 3)
    assert m["t2i/R@1"] == pytest.approx(100 * (0 + 1 / 3 + 1 / 2) / 3)


def release_i2t(scores: np.ndarray, c2i: np.ndarray) -> np.ndarray:
    """SCAN/NCR ``i2t`` verbatim: ``inds = numpy.argsort(d[i])[::-1]``."""
    out = []
    for i in range(scores.shape[0]):
        inds = np.argsort(scores[i])[::-1]
        out.append(min(int(np.where(inds == k)[0][0]) for k in np.flatnonzero(c2i == i)))
    return np.array(out)


def release_t2i(scores: np.ndarray, c2i: np.ndarray) -> np.ndarray:
    out = []
    for k in range(scores.shape[1]):
        inds = np.argsort(scores[:, k])[::-1]
        out.append(int(np.where(inds == c2i[k])[0][0]))
    return np.array(out)


def test_release_rule_matches_the_released_code_on_ties():
    rng = np.random.default_rng(3)
    scores = rng.integers(0, 3, size=(6, 12)).astype(np.float32)
    c2i = np.arange(12) // 2
    np.testing.assert_array_equal(i2t_ranks(scores, c2i, ties="release"), release_i2t(scores, c2i))
    np.testing.assert_array_equal(t2i_ranks(scores, c2i, ties="release"), release_t2i(scores, c2i))
    assert retrieval_metrics(scores, c2i, ties="release")["rsum"] >= 0


def test_random_rule_is_the_exact_mean_over_every_tie_order():
    """Average the stable-sort brute force over every candidate order: heavy ties, 2 captions
    per image, so i2t has ground truths tied with each other and with impostors."""
    from itertools import permutations

    scores = np.array(
        [[1, 1, 0, 1, 2, 1], [1, 0, 1, 1, 1, 0], [0, 1, 1, 1, 1, 1]], dtype=np.float32
    )
    c2i = np.array([0, 0, 1, 1, 2, 2])
    acc = {key: 0.0 for key in METRIC_KEYS if "medr" not in key}
    i2t_mean = np.zeros(3)
    t2i_mean = np.zeros(6)
    perms_cap = list(permutations(range(6)))
    perms_img = list(permutations(range(3)))
    for p in perms_cap:  # i2t: caption order decides ties
        p = np.array(p)
        r = brute_i2t(scores[:, p], c2i[p])
        i2t_mean += r / len(perms_cap)
        for k in (1, 5, 10):
            acc[f"i2t/R@{k}"] += 100 * np.mean(r < k) / len(perms_cap)
    for q in perms_img:  # t2i: image order decides ties
        q = np.array(q)
        inv = np.argsort(q)
        r = brute_t2i(scores[q], inv[c2i])
        t2i_mean += r / len(perms_img)
        for k in (1, 5, 10):
            acc[f"t2i/R@{k}"] += 100 * np.mean(r < k) / len(perms_img)
    np.testing.assert_allclose(i2t_ranks(scores, c2i), i2t_mean)
    np.testing.assert_allclose(t2i_ranks(scores, c2i), t2i_mean)
    m = retrieval_metrics(scores, c2i)
    for key in ("i2t/R@1", "i2t/R@5", "t2i/R@1", "t2i/R@5"):
        assert m[key] == pytest.approx(acc[key]), key
    assert m["i2t/meanr"] == pytest.approx(i2t_mean.mean() + 1)


@pytest.mark.parametrize("ties", ["random", "pessimistic"])
def test_constant_scores_do_not_score(ties):
    """A collapsed model (every score equal) gets chance recall, never a perfect one."""
    n_img, cpi = 100, 5
    c2i = np.arange(n_img * cpi) // cpi
    m = retrieval_metrics(np.zeros((n_img, n_img * cpi), dtype=np.float32), c2i, ties=ties)
    if ties == "random":
        # t2i: K / n_img; i2t: 1 - C(495, K) / C(500, K) (5 GT captions among 500).
        for k in (1, 5, 10):
            assert m[f"t2i/R@{k}"] == pytest.approx(100 * k / n_img)
            miss = math.comb(n_img * cpi - cpi, k) / math.comb(n_img * cpi, k)
            assert m[f"i2t/R@{k}"] == pytest.approx(100 * (1 - miss))
        assert m["t2i/meanr"] == pytest.approx((n_img - 1) / 2 + 1)
        assert m["rsum"] < 60
    else:
        assert m["rsum"] == 0.0
    # The old strictly-higher rule reported the collapsed model as perfect.
    assert retrieval_metrics(np.zeros((n_img, n_img * cpi)), c2i, ties="optimistic")["rsum"] == 600


def test_collapsed_clip_does_not_score():
    """A random-init CLIP with a 2-token context sees every caption as [SOT, EOT]: identical
    caption embeddings, so every image row is constant; it must report chance, not R@1 100."""
    from ugncl.backbones.clip.adapter import build_clip
    from ugncl.backbones.clip.models import TINY_MODEL

    torch.manual_seed(0)
    model = build_clip(TINY_MODEL, image_size=32, context_length=2).eval()
    captions = ["a dog runs", "two cats sleep on a red sofa", "a man rides a bike", "sky"] * 5
    tokens = torch.as_tensor(model.tokenizer()(captions))
    with torch.no_grad():
        images = torch.rand(20, 3, 32, 32)
        scores = model.score(model.encode_images(images), model.encode_captions(tokens))[0]
    assert scores.shape == (20, 20)
    assert torch.equal(scores, scores[:, :1].expand_as(scores))  # collapsed: rows constant
    m = retrieval_metrics(scores, np.arange(20))
    assert m["i2t/R@1"] == pytest.approx(100 / 20)
    assert m["rsum"] < 200


def test_hand_built_3x6():
    """3 images x 2 captions each; hand-worked ranks."""
    s = np.array(
        [
            # c0   c1   c2   c3   c4   c5
            [0.9, 0.1, 0.8, 0.0, 0.2, 0.3],  # img0: GT c0 top -> rank 0
            [0.1, 0.2, 0.3, 0.4, 0.7, 0.6],  # img1: GT c2 (0.3), c3 (0.4); c4, c5 higher -> 2
            [0.0, 0.5, 0.1, 0.2, 0.3, 0.9],  # img2: GT c5 top -> rank 0
        ],
        dtype=np.float32,
    )
    c2i = np.array([0, 0, 1, 1, 2, 2])
    np.testing.assert_array_equal(i2t_ranks(s, c2i), [0, 2, 0])
    # t2i: c0 img0 top ->0; c1 GT img0 0.1 < 0.2, 0.5 -> 2; c2 GT img1 0.3 < 0.8 -> 1;
    # c3 img1 top -> 0; c4 GT img2 0.3 < 0.7 -> 1; c5 img2 top -> 0.
    np.testing.assert_array_equal(t2i_ranks(s, c2i), [0, 2, 1, 0, 1, 0])
    m = retrieval_metrics(s, c2i)
    assert m["i2t/R@1"] == pytest.approx(200 / 3)
    assert m["t2i/R@1"] == pytest.approx(50.0)
    assert m["i2t/R@5"] == m["t2i/R@5"] == 100.0
    assert m["rsum"] == pytest.approx(200 / 3 + 50.0 + 400.0)
    assert m["i2t/medr"] == 1.0  # median rank 0
    assert m["t2i/medr"] == 1.0  # median of [0,0,0,1,1,2] = 0.5 -> floor 0 -> 1
    assert m["i2t/meanr"] == pytest.approx(2 / 3 + 1)
    assert m["t2i/meanr"] == pytest.approx(4 / 6 + 1)


def test_recall_at():
    r = np.array([0, 1, 4, 5, 9, 10, 100, 0])
    assert recall_at(r) == {1: 25.0, 5: 50.0, 10: 75.0}
    assert recall_at(r, ks=(101,)) == {101: 100.0}
    with pytest.raises(ValueError, match="positive integer"):
        recall_at(r, ks=(0,))


def test_medr_uses_floor_of_median():
    # ranks [0, 3] -> median 1.5 -> floor 1 -> medr 2 (SCAN/NCR), not 2.5.
    s = np.array([[1.0, 0.0, 0.0, 0.0, 0.0], [0.9, 0.8, 0.7, 0.6, 0.1]], dtype=np.float32)
    c2i = np.array([0, 0, 0, 1, 1])
    np.testing.assert_array_equal(i2t_ranks(s, c2i), [0, 3])
    assert retrieval_metrics(s, c2i)["i2t/medr"] == 2.0


def test_coco_folds_exact_slicing():
    folds = coco_folds()
    assert len(folds) == 5
    for i, (img, cap) in enumerate(folds):
        assert (img.start, img.stop, img.step) == (1000 * i, 1000 * (i + 1), None)
        assert (cap.start, cap.stop, cap.step) == (5000 * i, 5000 * (i + 1), None)
        assert len(range(5000)[img]) == 1000 and len(range(25000)[cap]) == 5000
    # Folds tile the split without gaps or overlaps (OSA's slicing drops one of each).
    assert np.array_equal(np.concatenate([np.arange(5000)[f[0]] for f in folds]), np.arange(5000))
    assert np.array_equal(np.concatenate([np.arange(25000)[f[1]] for f in folds]), np.arange(25000))
    assert coco_folds(100, 1, 4)[3] == (slice(75, 100), slice(75, 100))
    with pytest.raises(ValueError, match="divisible"):
        coco_folds(4999)


def test_fold_metrics_equal_manual_submatrices():
    n_img, cpi, n_folds = 50, 5, 5
    scores, c2i = random_problem(n_img, cpi, seed=21)
    folds = coco_folds(n_img, cpi, n_folds)
    result = fold_metrics(scores, c2i, folds)
    assert len(result["folds"]) == n_folds
    for i, got in enumerate(result["folds"]):
        sub = scores[10 * i : 10 * (i + 1), 50 * i : 50 * (i + 1)]
        expected = brute_metrics(sub, np.arange(50) // 5)
        for key in METRIC_KEYS:
            assert got[key] == pytest.approx(expected[key]), (i, key)
    for key in METRIC_KEYS:
        assert result["mean"][key] == pytest.approx(np.mean([f[key] for f in result["folds"]]))
    # Folds rank against fewer candidates, so recall cannot be lower than on the full matrix.
    assert result["mean"]["rsum"] >= retrieval_metrics(scores, c2i)["rsum"]


def test_fold_with_foreign_caption_is_rejected():
    scores, c2i = random_problem(10, 1, seed=0)
    c2i = c2i.copy()
    c2i[[2, 7]] = c2i[[7, 2]]  # caption 2 now belongs to image 7 (the other fold)
    with pytest.raises(ValueError, match="fold 0: caption 2 belongs to image 7"):
        fold_metrics(scores, c2i, coco_folds(10, 1, 2))


@pytest.mark.parametrize(
    ("scores", "c2i", "match"),
    [
        (np.zeros((3, 6), np.float32), np.arange(5) // 2, r"shape \(n_cap,\) = \(6,\)"),
        (np.zeros((3, 6), np.float32), np.array([0, 0, 1, 1, 2, 3]), r"caption_to_image\[5\] = 3"),
        (np.zeros((3, 6), np.float32), np.array([0, 0, 1, 1, -1, 2]), r"caption_to_image\[4\]"),
        (np.zeros((3, 6), np.float32), np.array([0, 0, 0, 1, 1, 1]), "image 2"),
        (np.zeros(6, np.float32), np.arange(6), "2-D"),
        (np.full((2, 2), np.nan, np.float32), np.arange(2), "non-finite"),
        (np.zeros((2, 2), np.float32), np.array([0.0, 1.0]), "integers"),
    ],
)
def test_bad_inputs_raise_clear_errors(scores, c2i, match):
    with pytest.raises(ValueError, match=match):
        retrieval_metrics(scores, c2i)


def test_results_are_json_friendly():
    import json

    scores, c2i = random_problem(12, 5, seed=1)
    m = retrieval_metrics(scores, c2i)
    assert json.loads(json.dumps(m)) == m
    assert all(math.isfinite(v) for v in m.values())
