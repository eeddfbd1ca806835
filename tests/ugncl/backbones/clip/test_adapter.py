"""CLIPSimilarity: the open_clip backbone behind the similarity-model interface."""

from __future__ import annotations

import open_clip
import pytest
import torch

from ugncl.backbones.clip.adapter import build_clip
from ugncl.backbones.clip.models import TINY_MODEL, architecture_config


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    return build_clip(TINY_MODEL).eval()


def _inputs(model, n_img=3, n_cap=4):
    g = torch.Generator().manual_seed(1)
    pixels = torch.randn(n_img, 3, model.image_size, model.image_size, generator=g)
    tokens = model.tokenizer()([f"a red dog and {k} blue cats on the left" for k in range(n_cap)])
    return pixels, tokens, torch.full((n_cap,), 10)


def test_tiny_config_is_registered_with_open_clip_offline():
    assert TINY_MODEL in open_clip.list_models()
    model = open_clip.create_model(TINY_MODEL)
    assert model.visual.image_size == (64, 64)
    tok = open_clip.get_tokenizer(TINY_MODEL)
    ids = tok(["word " * 100])
    assert ids.shape == (1, 40) and int(ids[0, -1]) == tok.eot_token_id  # truncated at 40


def test_shapes_views_and_normalised_embeddings(tiny):
    pixels, tokens, lengths = _inputs(tiny)
    img, cap = tiny.encode_images(pixels), tiny.encode_captions(tokens, lengths)
    assert img.shape == (3, 128) and cap.shape == (4, 128)
    torch.testing.assert_close(img.norm(dim=1), torch.ones(3))
    torch.testing.assert_close(cap.norm(dim=1), torch.ones(4))
    raw = tiny(pixels, tokens, lengths)
    assert tiny.backbone == "clip" and tiny.num_views == 1 and raw.shape == (1, 3, 4)


def test_score_is_logit_scale_times_cosine(tiny):
    pixels, tokens, lengths = _inputs(tiny)
    img, cap = tiny.encode_images(pixels), tiny.encode_captions(tokens, lengths)
    with torch.no_grad():
        tiny.model.logit_scale.fill_(torch.log(torch.tensor(100.0)))
        expected = 100.0 * torch.nn.functional.cosine_similarity(
            img[:, None, :], cap[None, :, :], dim=-1
        )
        torch.testing.assert_close(tiny.score(img, cap, lengths)[0], expected, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("budget", [4, 4 * 7, 4 * 50, 1 << 20])
def test_score_all_pairs_in_blocks_equals_dense_product(tiny, budget):
    g = torch.Generator().manual_seed(2)
    img = torch.nn.functional.normalize(torch.randn(13, 128, generator=g), dim=1)
    cap = torch.nn.functional.normalize(torch.randn(29, 128, generator=g), dim=1)
    got = tiny.score_all_pairs(img, cap, None, memory_budget_bytes=budget)
    assert got.shape == (1, 13, 29) and got.dtype == torch.float32
    torch.testing.assert_close(got, tiny.score(img, cap).detach())


def test_config_rebuilds_the_same_architecture(tiny):
    cfg = {k: v for k, v in tiny.config.items() if k != "backbone"}
    again = build_clip(**{k: cfg[k] for k in ("model_name", "pretrained", "quick_gelu")})
    assert again.config == tiny.config
    assert {k: v.shape for k, v in again.state_dict().items()} == {
        k: v.shape for k, v in tiny.state_dict().items()
    }
    assert all(p.dtype == torch.float32 for p in again.parameters())


def test_caption_context_mismatch_names_the_tokenizer(tiny):
    with pytest.raises(ValueError, match="tokenizer"):
        tiny.encode_captions(torch.zeros(2, 77, dtype=torch.long), None)


@pytest.mark.parametrize("name", ["hf-hub:timm/ViT-B-32", "local-dir:/tmp/x", "no-such-arch"])
def test_remote_or_unknown_architectures_are_refused(name):
    with pytest.raises(ValueError, match="architecture|remote"):
        architecture_config(name)


def test_checkpoint_config_rebuilds_without_the_pretrained_file(tmp_path, tiny):
    from ugncl.backbones.clip.adapter import save_clip_weights
    from ugncl.backbones.clip.backbone import CLIPConfig, build_clip_backbone, clip_from_config

    path = save_clip_weights(tiny, tmp_path / "w.pt")
    model = build_clip_backbone(CLIPConfig(pretrained=str(path)))
    path.unlink()  # a checkpoint elsewhere carries the weights, not the original file
    again = clip_from_config(model.config)
    again.load_state_dict(model.state_dict())
    assert again.config == model.config and again.config["pretrained"] == str(path)


def test_score_all_pairs_view_reduce(tiny):
    img = torch.nn.functional.normalize(torch.randn(5, 128), dim=1)
    cap = torch.nn.functional.normalize(torch.randn(7, 128), dim=1)
    got = tiny.score_all_pairs(img, cap, None, memory_budget_bytes=12, view_reduce=lambda r: r[0])
    torch.testing.assert_close(got, tiny.score(img, cap)[0].detach())


@pytest.fixture(scope="module")
def three_views():
    torch.manual_seed(0)
    return build_clip(TINY_MODEL, num_views=3, view_spread=0.3).eval()


def test_view_heads_score_w_views_and_head_zero_is_the_pretrained_projection(three_views, tiny):
    pixels, tokens, lengths = _inputs(three_views)
    plain = build_clip(TINY_MODEL).eval()
    plain.load_state_dict({k: v for k, v in three_views.state_dict().items() if k != "view_heads"})
    img = three_views.encode_images(pixels)
    assert img.shape == (3, 3, 128)  # images on axis 0, then views
    torch.testing.assert_close(img.norm(dim=-1), torch.ones(3, 3))
    torch.testing.assert_close(img[:, 0], plain.encode_images(pixels))
    raw = three_views(pixels, tokens, lengths)
    assert raw.shape == (3, 3, 4)
    torch.testing.assert_close(raw[0], plain(pixels, tokens, lengths)[0])
    # the extra heads start apart from head 0 by about view_spread (0.3 rad ~ cos 0.956)
    cos = (img[:, 1:] * img[:, :1]).sum(-1)
    assert bool(((cos > 0.9) & (cos < 0.99)).all()), cos


def test_view_heads_blocks_equal_the_dense_product_and_views_get_own_gradients(three_views):
    g = torch.Generator().manual_seed(3)
    img = torch.nn.functional.normalize(torch.randn(6, 3, 128, generator=g), dim=-1)
    cap = torch.nn.functional.normalize(torch.randn(9, 128, generator=g), dim=-1)
    got = three_views.score_all_pairs(img, cap, None, memory_budget_bytes=4 * 3 * 6 * 2)
    torch.testing.assert_close(got, three_views.score(img, cap).detach())
    pixels, tokens, lengths = _inputs(three_views)
    three_views.zero_grad()
    three_views(pixels, tokens, lengths)[1].sum().backward()  # a loss on view 1 alone
    grad = three_views.view_heads.grad
    assert grad[1].abs().sum() > 0 and grad[0].abs().sum() == 0 and grad[2].abs().sum() == 0
    three_views.zero_grad()


def test_view_heads_survive_the_checkpoint_config_and_refuse_a_weights_file(tmp_path, three_views):
    from ugncl.backbones.clip.adapter import save_clip_weights
    from ugncl.backbones.clip.backbone import clip_from_config

    again = clip_from_config(three_views.config)
    again.load_state_dict(three_views.state_dict())  # strict: the heads have a place
    assert again.num_views == 3 and again.config == three_views.config
    with pytest.raises(ValueError, match="3 view heads"):
        save_clip_weights(three_views, tmp_path / "w.pt")


def test_an_old_checkpoint_config_without_views_rebuilds_one_view(tiny):
    from ugncl.backbones.clip.backbone import clip_from_config

    old = {k: v for k, v in tiny.config.items() if k not in ("num_views", "view_spread")}
    again = clip_from_config(old)
    assert again.num_views == 1 and again.view_heads is None
