"""Batched all-pairs scoring against the released per-caption loop."""

from __future__ import annotations

import pytest
import torch

from sgraf.model import score_all_pairs
from tests.sgraf.conftest import make_batch, make_model


def _encoded(model, **kw):
    images, captions, lengths = make_batch(**kw)
    return model.encode_images(images), model.encode_captions(captions, lengths), lengths


@pytest.mark.parametrize("head", ["sgr", "saf"])
@pytest.mark.parametrize("views", [1, 2])
def test_batched_equals_per_caption_loop_float64(head, views, reference_scores):
    model = make_model(head, views).eval()
    with torch.no_grad():
        img, cap, lengths = _encoded(model)
        expected = reference_scores(model, img, cap, lengths)
        got = model.score(img, cap, lengths)
        tiled = model.score(img, cap, lengths, memory_budget_bytes=1)  # one pair per block
    assert got.shape == (views, 5, 6)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-10)
    torch.testing.assert_close(tiled, expected, rtol=0, atol=1e-10)


@pytest.mark.parametrize("head", ["sgr", "saf"])
def test_float32_matches_loop_and_score_all_pairs(head, reference_scores):
    model = make_model(head, 2, dtype=torch.float32).eval()
    with torch.no_grad():
        img, cap, lengths = _encoded(model, dtype=torch.float32)
        expected = reference_scores(model, img, cap, lengths)
    model.train()
    out = score_all_pairs(model, img, cap, lengths, memory_budget_bytes=4000)
    assert model.training, "score_all_pairs must restore the training flag"
    assert out.dtype == torch.float32 and out.shape == (2, 5, 6)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-5)
    reduced = score_all_pairs(model, img, cap, lengths, view_reduce=lambda s: s.mean(0))
    torch.testing.assert_close(reduced, expected.mean(0), rtol=0, atol=1e-5)


def test_saf_training_mode_matches_loop_including_running_stats(reference_scores):
    """SAF's BatchNorm1d(1) sees one batch per (view, caption) in the released loop."""
    model = make_model("saf", 2, sa_dropout=0.0, word_dropout=0.0).train()
    twin = make_model("saf", 2, sa_dropout=0.0, word_dropout=0.0).train()
    images, captions, lengths = make_batch()
    img, cap = model.encode_images(images), model.encode_captions(captions, lengths)
    got = model.score(img, cap, lengths, memory_budget_bytes=30_000)
    expected = reference_scores(twin, img.detach(), cap.detach(), lengths)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-10)
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        torch.testing.assert_close(
            getattr(model.sim_enc.saf.bn, name), getattr(twin.sim_enc.saf.bn, name)
        )


@pytest.mark.parametrize("head", ["sgr", "saf"])
def test_padding_invariance(head):
    model = make_model(head).eval()
    images, captions, lengths = make_batch()
    wide = torch.cat([captions, torch.randint(4, 30, (captions.shape[0], 5))], dim=1)
    with torch.no_grad():
        base = model(images, captions, lengths)
        padded = model(images, wide, lengths)
        # Garbage beyond the length in already-encoded features is ignored too.
        cap = model.encode_captions(captions, lengths)
        pad = torch.arange(cap.shape[1])[None, :, None] >= lengths[:, None, None]
        noisy = cap + torch.randn_like(cap) * pad
        img = model.encode_images(images)
        torch.testing.assert_close(model.score(img, noisy, lengths), base, rtol=0, atol=1e-12)
    torch.testing.assert_close(padded, base, rtol=0, atol=1e-12)


@pytest.mark.parametrize("head", ["sgr", "saf"])
@pytest.mark.parametrize("block", [1, 2, 4])
def test_caption_blocks_give_the_budgets_scores_and_gradients(head, block):
    """``block_captions`` only cuts the scoring into smaller length-sorted blocks: scores,
    gradients of every parameter and SAF's BatchNorm statistics are those of one block
    (training mode, dropout off so that both models draw nothing)."""
    kw = dict(sa_dropout=0.0, word_dropout=0.0)
    whole = make_model(head, 2, **kw).train()
    cut = make_model(head, 2, block_captions=block, **kw).train()
    assert cut.config["block_captions"] == block
    images, captions, lengths = make_batch()
    outs = []
    for model in (whole, cut):
        scores = model(images, captions, lengths)
        (scores.sigmoid().sum() + scores.tanh().square().sum()).backward()
        outs.append(scores)
    torch.testing.assert_close(outs[1], outs[0], rtol=0, atol=1e-12)
    for (name, p), q in zip(whole.named_parameters(), cut.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, rtol=0, atol=1e-12, msg=name)
    for (name, b), c in zip(whole.named_buffers(), cut.buffers(), strict=True):
        torch.testing.assert_close(c, b, rtol=0, atol=1e-12, msg=name)


def test_caption_blocks_trim_each_block_to_its_longest_caption(monkeypatch):
    """With blocks of 2 the head never sees the longest caption's padding in the block of the
    two shortest captions: the word axis of each block is its own longest length."""
    model = make_model("sgr", 1, block_captions=2).eval()
    images, captions, lengths = make_batch()
    widths = []
    original = model.sim_enc.score_block

    def spy(regions, img_glo, words, *args, **kwargs):
        widths.append(words.shape[1])
        return original(regions, img_glo, words, *args, **kwargs)

    monkeypatch.setattr(model.sim_enc, "score_block", spy)
    with torch.no_grad():
        model(images, captions, lengths)
    expected = [int(lengths.sort().values[i : i + 2].max()) for i in range(0, 6, 2)]
    assert widths == expected and widths[0] < int(lengths.max())


def test_block_captions_must_be_positive():
    with pytest.raises(ValueError, match="block_captions must be >= 1"):
        make_model("sgr", 1, block_captions=0)


def _backward(model) -> None:
    images, captions, lengths = make_batch()
    scores = model(images, captions, lengths)
    (scores.sigmoid().sum() + scores.tanh().square().sum()).backward()


@pytest.mark.parametrize("head", ["sgr", "saf"])
def test_every_parameter_gets_a_gradient(head):
    """Every parameter gets a finite gradient, non-zero unless the maths cancels it.

    Biases whose shift is removed downstream have a gradient that is zero in exact arithmetic
    (the same holds in the released code); in float64 it is rounding noise, ~1e-16, whose
    value (exactly 0 included) depends on the summation order and so on the thread count
    (``saf.attn_sim_w.bias`` was exactly 0 with OMP_NUM_THREADS=1). They are checked to be
    zero up to rounding: ``graph_key_w`` / ``embedding_common`` biases shift logits along
    their softmax axis; ``saf.attn_sim_w.bias`` and ``v_global_w.embedding_global.0.bias``
    feed a training-mode BatchNorm (``BatchNorm1d(1)`` / ``BatchNorm1d(embed_dim)``, one
    channel per bias entry) that subtracts the batch mean, bias included. (The old check,
    ``sum |grad| > 0``, passed on that rounding noise for every thread count but one.)
    """
    model = make_model(head, 2).train()
    _backward(model)
    cancelling = (
        "graph_key_w.bias",
        "embedding_common.0.bias",
        "saf.attn_sim_w.bias",
        "v_global_w.embedding_global.0.bias",
    )
    for name, param in model.named_parameters():
        assert param.grad is not None, name
        assert torch.isfinite(param.grad).all(), name
        if name.endswith(cancelling):
            assert param.grad.abs().max() < 1e-13, name  # float64 rounding: ~1e-16
        else:
            assert param.grad.abs().sum() > 1e-11, name  # smallest real one: ~3e-9


def test_batchnorm_fed_biases_matter_with_running_statistics():
    """In eval mode BatchNorm uses running statistics: the BatchNorm-fed biases count."""
    model = make_model("saf", 2)
    with torch.no_grad():
        model.sim_enc.saf.bn.running_mean.fill_(0.3)
    _backward(model.eval())
    assert model.sim_enc.saf.attn_sim_w.bias.grad.abs().max() > 1e-4
    assert model.sim_enc.v_global_w.embedding_global[0].bias.grad.abs().max() > 1e-4


@pytest.mark.parametrize("head", ["sgr", "saf"])
def test_no_nan_for_zero_regions_and_single_word_captions(head):
    model = make_model(head, 2).train()
    images, captions, lengths = make_batch()
    images[0] = 0
    lengths = torch.ones_like(lengths)
    scores = model(images, captions, lengths)
    scores.sum().backward()
    assert torch.isfinite(scores).all()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    model.eval()
    with torch.no_grad():
        assert torch.isfinite(model(images, captions, lengths)).all()


def test_views_give_different_scores():
    model = make_model("sgr", 3).eval()
    with torch.no_grad():
        scores = model(*make_batch())
    assert scores.shape == (3, 5, 6)
    assert (scores[0] - scores[1]).abs().max() > 1e-6
    assert (scores[1] - scores[2]).abs().max() > 1e-6


def test_region_count_mismatch_names_both_numbers():
    model = make_model()
    images = torch.randn(3, 7, 10, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"7 regions.*num_regions=4"):
        model.encode_images(images)
    img = torch.randn(1, 3, 7, 12, dtype=torch.float64)
    with pytest.raises(ValueError, match="num_regions=4"):
        model.score(img, torch.randn(2, 3, 12, dtype=torch.float64), torch.tensor([3, 2]))


def test_single_image_training_batch_is_a_clear_error():
    model = make_model().train()
    images, captions, lengths = make_batch(n_img=1, n_cap=1)
    with pytest.raises(ValueError, match="at least 2 images"):
        model(images, captions, lengths)
    model.eval()
    assert model(images, captions, lengths).shape == (1, 1, 1)


def test_empty_caption_is_rejected_for_scoring():
    model = make_model().eval()
    img = model.encode_images(make_batch()[0])
    with pytest.raises(ValueError, match="length"):
        model.score(img, torch.zeros(2, 3, 12, dtype=torch.float64), torch.tensor([0, 2]))
