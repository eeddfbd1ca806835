"""Evaluation pipeline on a tiny real SGRAF model and a tiny precomputed split on disk."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from precomputed.collate import pad_captions
from precomputed.dataset import open_split
from precomputed.vocab import build_vocab
from sgraf.functional import word_mask
from sgraf.model import SGRAF
from sgraf.scoring import CaptionOrder, iter_blocks, plan_grid, score_all_pairs
from ugncl.core.evaluation import (
    StreamedImages,
    default_protocol,
    encode_split,
    ensemble,
    evaluate_models,
    evaluate_scores,
    metric_table,
    pack_words,
    score_matrix,
    view_reducer,
)
from ugncl.core.metrics import METRIC_KEYS, coco_folds, fold_metrics, retrieval_metrics

N_IMG, CPI, R, D, E = 7, 2, 4, 12, 16
WORDS = ["a", "dog", "cat", "runs", "red", "blue", "ball", "on", "the", "grass", "sits"]


@pytest.fixture(scope="module")
def tiny_split(tmp_path_factory):
    """7 images x 2 captions of 2-7 words; 4 regions x 12 dims."""
    root = tmp_path_factory.mktemp("data")
    folder = root / "tiny_precomp"
    folder.mkdir()
    rng = np.random.default_rng(0)
    np.save(folder / "test_ims.npy", rng.standard_normal((N_IMG, R, D)).astype(np.float32))
    texts = [" ".join(rng.choice(WORDS, size=rng.integers(2, 8))) for _ in range(N_IMG * CPI)]
    (folder / "test_caps.txt").write_text("\n".join(texts) + "\n")
    vocab = build_vocab(texts, min_count=1)
    return open_split(root, "tiny_precomp", "test", vocab, captions_per_image=CPI), len(vocab)


def tiny_model(vocab_size: int, head: str, seed: int) -> SGRAF:
    torch.manual_seed(seed)
    model = SGRAF(
        vocab_size,
        word_dim=8,
        img_dim=D,
        embed_dim=E,
        sim_dim=8,
        num_regions=R,
        num_views=2,
        head=head,
        sgr_steps=2,
    )
    if head == "saf":
        # Non-trivial BatchNorm running statistics, so eval mode visibly differs from train.
        for m in model.modules():
            if isinstance(m, nn.BatchNorm1d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    return model


def all_pairs_by_forward(model: SGRAF, split) -> torch.Tensor:
    """Raw (W, n_img, n_cap) scores via ``model.forward`` on the (image of k, caption k) pairs."""
    c2i = split.true_image
    feats = torch.from_numpy(np.array(split.features.slice(0, split.num_images)))[
        torch.from_numpy(c2i)
    ]
    ids, lengths = pad_captions([split.tokens[k] for k in range(split.num_captions)])
    model.eval()
    with torch.no_grad():
        raw = model(feats, ids, lengths)  # (W, n_cap, n_cap): row k is image c2i[k]
    first_caption = np.searchsorted(c2i, np.arange(split.num_images))
    return raw[:, torch.from_numpy(first_caption)]


def test_encode_split_encodes_each_image_once(tiny_split, monkeypatch):
    split, vocab_size = tiny_split
    model = tiny_model(vocab_size, "sgr", 0)
    model.train()
    calls = []
    original = split.features.slice
    monkeypatch.setattr(
        split.features, "slice", lambda a, b: calls.append((a, b)) or original(a, b)
    )

    enc = encode_split(model, split, batch_size=3, device="cpu")

    assert calls == [(0, 3), (3, 6), (6, 7)]
    assert model.training, "the caller's train mode must be restored"
    assert enc.img_emb.shape == (2, N_IMG, R, E) and enc.img_emb.dtype == torch.float32
    lengths = split.tokens.lengths
    assert enc.cap_emb.shape == (N_IMG * CPI, int(lengths.max()), E)
    np.testing.assert_array_equal(enc.lengths.numpy(), lengths)
    np.testing.assert_array_equal(enc.caption_to_image, np.arange(N_IMG * CPI) // CPI)
    assert (enc.name, enc.split) == ("tiny_precomp", "test")

    model.eval()
    with torch.no_grad():
        images = model.encode_images(torch.from_numpy(np.array(original(0, N_IMG))))
        torch.testing.assert_close(enc.img_emb, images)
        for k in (0, 5, N_IMG * CPI - 1):
            n = int(lengths[k])
            ids = torch.from_numpy(split.tokens[k].astype(np.int64))[None]
            words = model.encode_captions(ids, torch.tensor([n]))[0]
            padded = enc.cap_emb.padded(torch.tensor([k]), int(lengths.max()))[0]
            torch.testing.assert_close(padded[:n], words, rtol=1e-5, atol=1e-6)
            assert not padded[n:].any(), "padding must be zero"


def padded_like_before(model: SGRAF, split, batch_size: int) -> torch.Tensor:
    """Caption features as encode_split kept them before packing: (n_cap, L_max, E), zeros."""
    lengths = torch.as_tensor(split.tokens.lengths, dtype=torch.int64)
    out = torch.zeros(len(lengths), int(lengths.max()), E)
    model.eval()
    with torch.no_grad():
        for a in range(0, len(lengths), batch_size):
            stop = min(a + batch_size, len(lengths))
            ids, lens = pad_captions([split.tokens[k] for k in range(a, stop)])
            words = model.encode_captions(ids, lens)
            out[a : a + len(lens), : words.shape[1]] = words
    return out


def test_pack_words_writes_the_real_words_in_place():
    gen = torch.Generator().manual_seed(0)
    words = torch.randn(5, 6, 3, generator=gen)
    lengths = torch.tensor([6, 0, 2, 5, 1])
    packed = torch.full((2 + 14 + 3, 3), 7.0)
    end = pack_words(words, lengths, packed, 2)
    assert end == 2 + 14
    assert torch.equal(packed[2:end], words[word_mask(lengths, 6)])  # the previous path
    assert (packed[:2] == 7).all() and (packed[end:] == 7).all()  # nothing else touched
    with pytest.raises(ValueError, match="cannot write 14 from row 6"):
        pack_words(words, lengths, packed, 6)
    with pytest.raises(ValueError, match=r"lengths must lie in \[0, 6\]"):
        pack_words(words, torch.tensor([7, 0, 0, 0, 0]), packed, 0)


@pytest.mark.parametrize("head", ["sgr", "saf"])
def test_packed_caption_features_score_bit_identically(tiny_split, head):
    split, vocab_size = tiny_split
    model = tiny_model(vocab_size, head, 4)
    enc = encode_split(model, split, batch_size=4)
    before = padded_like_before(model, split, 4)
    n_cap = before.shape[0]
    assert enc.cap_emb.data.numel() < before.numel()  # stored without the padding
    assert torch.equal(enc.cap_emb.padded(torch.arange(n_cap), before.shape[1]), before)
    for budget in (20_000, 10**9):
        with torch.no_grad():
            got = model.score_all_pairs(enc.img_emb, enc.cap_emb, enc.lengths,
                                        memory_budget_bytes=budget)  # fmt: skip
            want = model.score_all_pairs(enc.img_emb, before, enc.lengths,
                                         memory_budget_bytes=budget)  # fmt: skip
        assert torch.equal(got, want)


def reference_all_pairs(model: SGRAF, img_emb, cap_emb, lengths, budget, image_chunk):
    """All pairs the straightforward way: every image held, image globals per
    ``image_chunk`` images, caption chunks outer and image blocks inner (``iter_blocks``)."""
    head = model.sim_enc
    model.eval()
    with torch.no_grad():
        img_glo = torch.cat(
            [head.image_globals(img_emb[:, i : i + image_chunk])
             for i in range(0, img_emb.shape[1], image_chunk)], dim=1,
        )  # fmt: skip
        cap_glo = head.t_global_w(cap_emb, word_mask(lengths, cap_emb.shape[1]))
        out = torch.empty(img_emb.shape[0], img_emb.shape[1], cap_emb.shape[0])
        captions = CaptionOrder(lengths, img_emb.device)
        for start, idx, block in iter_blocks(
            head, img_emb, img_glo, cap_emb, cap_glo, captions, budget, []
        ):
            out[:, start : start + block.shape[1], idx] = block
    return out


@pytest.mark.parametrize("head", ["sgr", "saf"])
def test_streamed_images_score_bit_identically_to_held_ones(tiny_split, head, monkeypatch):
    split, vocab_size = tiny_split
    model = tiny_model(vocab_size, head, 5)
    held = encode_split(model, split, batch_size=2)
    before = padded_like_before(model, split, 2)
    calls = []
    original = split.features.slice
    monkeypatch.setattr(
        split.features, "slice", lambda a, b: calls.append((a, b)) or original(a, b)
    )
    streamed = encode_split(model, split, batch_size=2, stream_images=True)
    assert isinstance(streamed.img_emb, StreamedImages) and streamed.num_images == N_IMG
    # Image chunks of 3 cut encoding batches of 2 and blocks of 2 images (budget 20 kB):
    # chunk and block boundaries disagree, as 1024 and a block height do at full size.
    with torch.no_grad():
        rows = plan_grid(model.sim_enc, held.img_emb.shape, 4, held.lengths, 20_000)[0]
    assert rows % 3 and rows < N_IMG
    for budget, chunk in ((20_000, 3), (20_000, 1024), (10**9, 3)):
        want = reference_all_pairs(model, held.img_emb, before, held.lengths, budget, chunk)
        for img in (held.img_emb, streamed.img_emb):
            calls.clear()
            with torch.no_grad():
                got = score_all_pairs(model, img, streamed.cap_emb, held.lengths,
                                      memory_budget_bytes=budget, image_chunk=chunk)  # fmt: skip
            assert torch.equal(got, want), (budget, chunk)
        # streamed: encode_split's batches, each read once per pass
        assert calls == ([(0, 2), (2, 4), (4, 6), (6, 7)] if img is streamed.img_emb else [])
    # The first n images alone score as the first n rows.
    with torch.no_grad():
        part = model.score_all_pairs(streamed.img_emb.first(5), streamed.cap_emb, held.lengths)
        whole = model.score_all_pairs(held.img_emb[:, :5], before, held.lengths)
    assert torch.equal(part, whole)
    # evaluate_models streams (SGRAF accepts an image source) and still ranks the same matrix.
    _, scores = evaluate_models([model], split, eval_score="raw", batch_size=2, protocol="full")
    assert np.array_equal(scores, score_matrix(model, held, eval_score="raw"))


REDUCERS = {
    "raw": lambda r: r.mean(0),
    "sigmoid": lambda r: torch.sigmoid(r).mean(0),
    "evidence": lambda r: (nn.functional.softplus(r) / 0.1).mean(0),
    "evidence_mean_exp": lambda r: torch.log(
        torch.exp(nn.functional.softplus(r.double()) / 0.1).mean(0)
    ).float(),
}


@pytest.mark.parametrize("head", ["sgr", "saf"])
def test_score_matrix_equals_forward_on_all_pairs(tiny_split, head):
    split, vocab_size = tiny_split
    model = tiny_model(vocab_size, head, 1)
    raw = all_pairs_by_forward(model, split)
    enc = encode_split(model, split, batch_size=4)
    for eval_score, reduce in REDUCERS.items():
        # A tiny budget forces many (image, caption) blocks.
        got = score_matrix(model, enc, eval_score=eval_score, memory_budget_bytes=20_000)
        assert got.shape == (N_IMG, N_IMG * CPI) and got.dtype == np.float32
        np.testing.assert_allclose(
            got, reduce(raw).numpy(), rtol=1e-4, atol=1e-5, err_msg=eval_score
        )


def test_ensemble_and_evaluate_models(tiny_split):
    split, vocab_size = tiny_split
    sgr, saf = tiny_model(vocab_size, "sgr", 2), tiny_model(vocab_size, "saf", 3)
    s_sgr = score_matrix(sgr, encode_split(sgr, split), eval_score="sigmoid")
    s_saf = score_matrix(saf, encode_split(saf, split), eval_score="sigmoid")
    assert not np.allclose(s_sgr, s_saf)
    np.testing.assert_allclose(ensemble([s_sgr, s_saf]), (s_sgr + s_saf) / 2, rtol=1e-6)

    results, scores = evaluate_models(
        [sgr, saf], split, eval_score="sigmoid", batch_size=5, protocol="full"
    )
    np.testing.assert_allclose(scores, (s_sgr + s_saf) / 2, rtol=1e-5, atol=1e-6)
    assert results == {"full": retrieval_metrics(scores, split.true_image)}
    # The default protocol of a split called "test" of an unknown dataset is the full matrix.
    assert list(evaluate_models([sgr], split, eval_score="raw")[0]) == ["full"]


def test_ensemble_rejects_bad_input():
    with pytest.raises(ValueError, match="at least one"):
        ensemble([])
    with pytest.raises(ValueError, match="disagree in shape"):
        ensemble([np.zeros((2, 4)), np.zeros((2, 5))])


def test_view_reducer_evidence_is_log_space_mean():
    # Pair A has one strong and one weak view, pair B two moderate views. Averaging log
    # evidence prefers B; the released average of exp evidence is dominated by A's strong view.
    raw = torch.tensor([[3.0, 2.0], [-3.0, 2.0]]).view(2, 1, 2)  # (W=2, 1 image, 2 captions)
    log_mean = view_reducer("evidence")(raw)[0]
    released = view_reducer("evidence_mean_exp")(raw)[0]
    assert log_mean[1] > log_mean[0]
    assert released[0] > released[1]
    # Far beyond float32 exp range the released ranking is still finite and ordered.
    big = view_reducer("evidence_mean_exp")(torch.tensor([[100.0, 90.0]]).view(1, 1, 2))
    assert torch.isfinite(big).all() and big[0, 0] > big[0, 1]
    with pytest.raises(ValueError, match="eval_score"):
        view_reducer("probability")
    with pytest.raises(ValueError, match="tau"):
        view_reducer("evidence", tau=0.0)


def random_scores(n_img: int, cpi: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    c2i = np.arange(n_img * cpi) // cpi
    scores = rng.standard_normal((n_img, n_img * cpi)).astype(np.float32)
    scores[c2i, np.arange(c2i.size)] += 2.0
    return scores, c2i


def test_evaluate_scores_protocols():
    scores, c2i = random_scores(50, 5)
    full = retrieval_metrics(scores, c2i)
    assert evaluate_scores(scores, c2i, protocol="full") == {"full": full}
    assert evaluate_scores(scores, c2i, protocol="1k") == {"1k": full}

    coco = evaluate_scores(scores, c2i, protocol="coco5fold")
    assert list(coco) == ["5fold", "5k", "fold0", "fold1", "fold2", "fold3", "fold4"]
    assert coco["5k"] == full
    folds = fold_metrics(scores, c2i, coco_folds(50, 5, 5))
    assert coco["5fold"] == folds["mean"]
    assert coco["fold3"] == retrieval_metrics(scores[30:40, 150:200], np.arange(50) // 5)
    assert all(tuple(m) == METRIC_KEYS for m in coco.values())

    table = metric_table(coco)
    assert len(table.splitlines()) == 1 + len(coco) and "rsum" in table.splitlines()[0]


def test_evaluate_scores_bad_input():
    scores, c2i = random_scores(7, 5)
    with pytest.raises(ValueError, match="protocol"):
        evaluate_scores(scores, c2i, protocol="5fold")
    with pytest.raises(ValueError, match="divisible"):
        evaluate_scores(scores, c2i, protocol="coco5fold")
    with pytest.raises(ValueError, match="caption_to_image"):
        evaluate_scores(scores, c2i[:-1], protocol="full")


@pytest.mark.parametrize(
    ("name", "split", "expected"),
    [
        ("coco_precomp", "testall", "coco5fold"),
        ("coco_precomp", "test", "1k"),
        ("f30k_precomp", "test", "1k"),
        ("cc152k_precomp", "test", "1k"),
        ("f30k_precomp", "dev", "full"),
        ("coco_precomp", "dev", "full"),
        ("synthetic_precomp", "test", "full"),
        ("f30k", "test", "1k"),
        ("cc120k", "test", "1k"),
        ("my_coco_subset", "testall", "full"),  # a name off the catalog: no substring guess
    ],
)
def test_default_protocol(name, split, expected):
    assert default_protocol(name, split) == expected


def test_evidence_score_follows_the_evidence_function() -> None:
    """UGNCL trains with exp(tanh(r)/tau) by default; ranking by softplus would rank by another
    evidence than the one the model was trained to produce."""
    raw = torch.tensor([[[-3.0, 0.5, 4.0]], [[1.0, -0.5, 2.0]]])
    tanh_score = view_reducer("evidence", tau=0.1, function="tanh")(raw)
    assert torch.allclose(tanh_score, (torch.tanh(raw) / 0.1).mean(0))
    assert not torch.allclose(tanh_score, view_reducer("evidence", tau=0.1)(raw))
    with pytest.raises(ValueError, match="evidence function"):
        view_reducer("evidence", function="relu")


def test_coco_test_of_5k_images_is_the_5fold_protocol():
    # The NPC/SDD/OSA raw-image layout names COCO's 5K test set "test".
    assert default_protocol("coco", "test", 5000) == "coco5fold"
    assert default_protocol("coco", "test", 1000) == "1k"
    assert default_protocol("f30k", "test", 5000) == "1k"


def test_a_rank_block_of_streamed_images_scores_as_those_rows(tiny_split) -> None:
    """Sharded evaluation: a rank scores images [a, b) (``StreamedImages.window``); its rows
    are the whole matrix's rows a..b-1 (up to float rounding: other block shapes)."""
    split, vocab_size = tiny_split
    model = tiny_model(vocab_size, "saf", 3)
    held = encode_split(model, split, batch_size=2)
    streamed = encode_split(model, split, batch_size=2, stream_images=True)
    with torch.no_grad():
        whole = model.score_all_pairs(held.img_emb, held.cap_emb, held.lengths)
        for a, b in ((0, 3), (3, 7), (1, 6)):
            block = streamed.img_emb.window(a, b)
            assert block.shape[1] == b - a
            got = model.score_all_pairs(block, streamed.cap_emb, held.lengths)
            torch.testing.assert_close(got, whole[:, a:b], rtol=1e-5, atol=1e-6)
            inner = model.score_all_pairs(block.window(1, 2), streamed.cap_emb, held.lengths)
            torch.testing.assert_close(inner, whole[:, a + 1 : a + 2], rtol=1e-5, atol=1e-6)
