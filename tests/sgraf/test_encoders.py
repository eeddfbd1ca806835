"""Image and caption encoders."""

from __future__ import annotations

import torch

from tests.sgraf.conftest import make_batch, make_model


def test_image_views_are_independent_unit_projections():
    model = make_model(views=3).eval()
    images, _, _ = make_batch()
    emb = model.encode_images(images)
    assert emb.shape == (3, 5, 4, 12)
    torch.testing.assert_close(emb.norm(dim=-1), torch.ones(3, 5, 4, dtype=emb.dtype))
    assert not torch.allclose(emb[0], emb[1])
    w = model.img_enc.fc[0].weight
    bound = (6.0 / (w.shape[0] + w.shape[1])) ** 0.5
    assert w.abs().max() <= bound and float(model.img_enc.fc[0].bias.detach().abs().max()) == 0.0


def test_text_encoder_unsorted_batch_equals_one_by_one_and_zero_padding():
    model = make_model().eval()
    _, captions, lengths = make_batch(n_cap=6, max_len=7)
    batch = model.encode_captions(captions, lengths)
    for i in range(len(lengths)):
        n = int(lengths[i])
        single = model.encode_captions(captions[i : i + 1, :n], lengths[i : i + 1])
        torch.testing.assert_close(batch[i, :n], single[0], rtol=1e-10, atol=1e-12)
        assert torch.all(batch[i, n:] == 0)
        torch.testing.assert_close(batch[i, :n].norm(dim=-1), torch.ones(n, dtype=batch.dtype))


def test_text_encoder_zero_length_and_extra_padding():
    model = make_model(bi_gru=False).eval()
    captions = torch.tensor([[5, 6, 7], [9, 0, 0], [3, 3, 3]])
    lengths = torch.tensor([3, 0, 1])
    out = model.encode_captions(captions, lengths)
    assert torch.isfinite(out).all() and torch.all(out[1] == 0) and torch.all(out[2, 1:] == 0)
    wider = torch.cat([captions, torch.full((3, 4), 11)], dim=1)  # garbage past the length
    torch.testing.assert_close(model.encode_captions(wider, lengths)[:, :3], out)


def test_embedding_init_range():
    model = make_model()
    assert model.txt_enc.embed.weight.abs().max() <= 0.1
