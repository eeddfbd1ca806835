"""The CLIP track's run data and baseline method: eval splits streamed from workers, config
resolution of naming and weights, and the plain InfoNCE step."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from precomputed.image_layout import open_image_split
from ugncl.backbones.clip.backbone import CLIPConfig, pretrained_path
from ugncl.backbones.clip.run_data import ImageEvalData, image_naming
from ugncl.core.config import DataConfig, ImageDataConfig
from ugncl.core.data import PairBatch
from ugncl.methods.infonce import clip_loss
from ugncl.methods.infonce_method import InfoNCEMethod
from ugncl.run.config import ConfigError

from ....precomputed.clip_layout import image_number, write_clip_dataset


def to_tensor(img) -> torch.Tensor:
    return torch.from_numpy(np.asarray(img, dtype=np.float32)).permute(2, 0, 1) / 255.0


def tokenizer(texts: list[str]) -> torch.Tensor:
    out = torch.zeros((len(texts), 8), dtype=torch.int64)
    for i, t in enumerate(texts):
        ids = [5, *[6 + len(w) for w in t.split()][:6], 99]
        out[i, : len(ids)] = torch.tensor(ids)
    return out


@pytest.mark.parametrize("workers", [0, 2])
def test_eval_images_stream_in_order_and_restart_anywhere(tmp_path, workers):
    root, _ = write_clip_dataset(tmp_path, naming="coco", num_images=7, cpi=2)
    split = open_image_split(root, "train", naming="coco", captions_per_image=2)
    data = ImageEvalData(split, to_tensor, tokenizer, name="coco", num_workers=workers)

    def numbers(a: int, b: int) -> list[int]:
        pixels = data.images(a, b)[:, :, 4, 4]
        return [image_number(tuple(round(float(v) * 255) for v in p)) for p in pixels]

    # encode_split's pattern: one size, the last call shorter.
    assert [numbers(a, min(a + 3, 7)) for a in range(0, 7, 3)] == [[0, 1, 2], [3, 4, 5], [6]]
    assert numbers(2, 4) == [2, 3] and numbers(5, 7) == [5, 6]  # out of order: a new stream
    assert data.num_images == 7 and data.num_captions == 14
    assert np.array_equal(data.caption_to_image, np.repeat(np.arange(7), 2))
    ids, lengths = data.captions(3, 6)
    assert torch.equal(ids, tokenizer(split.captions[3:6]))
    assert lengths.tolist() == data.lengths[3:6].tolist()


def test_naming_follows_the_dataset_name_or_is_stated():
    assert image_naming(DataConfig(name="coco")) == "coco"
    assert image_naming(DataConfig(name="cc120k")) == "cc"
    assert image_naming(DataConfig(name="mine", clip=ImageDataConfig(naming="cc"))) == "cc"
    with pytest.raises(ConfigError, match="data.clip.naming"):
        image_naming(DataConfig(name="mine"))


def test_pretrained_must_be_set_and_present(tmp_path):
    with pytest.raises(ConfigError, match="README 'CLIP weights'"):
        pretrained_path(CLIPConfig(name="ViT-B-32"))
    with pytest.raises(ConfigError, match="README 'CLIP weights'"):
        pretrained_path(CLIPConfig(name="ViT-B-32", pretrained=str(tmp_path / "vit.pt")))
    with pytest.raises(ConfigError, match="tools/pretrain_clip.py"):
        pretrained_path(CLIPConfig(pretrained=str(tmp_path / "tiny.pt")))
    assert pretrained_path(CLIPConfig(pretrained="random")) is None
    # A bare word is left to the loader, which refuses hub tags by name.
    assert pretrained_path(CLIPConfig(pretrained="openai")) == "openai"


class _Scores(torch.nn.Module):
    """Scores a batch by a learnable (K, K) matrix: enough to check the method's loss."""

    def __init__(self, k: int) -> None:
        super().__init__()
        self.s = torch.nn.Parameter(torch.randn(k, k) * 3)
        self.logit_scale = torch.nn.Parameter(torch.tensor(2.0))

    def forward(self, images, captions, lengths):
        return self.s.unsqueeze(0)


def test_clip_method_is_the_mean_symmetric_info_nce():
    model, k = _Scores(5), 5
    batch = PairBatch(
        images=torch.zeros(k, 3, 2, 2), captions=torch.zeros(k, 4, dtype=torch.long),
        lengths=torch.full((k,), 4), index=torch.arange(k), image_index=torch.arange(k),
        clean=torch.ones(k, dtype=torch.bool),
    )  # fmt: skip
    method = InfoNCEMethod()
    per = method.per_sample_loss(model, batch)
    assert per.shape == (k,)
    out = method.training_step(model, batch, None)
    torch.testing.assert_close(out["loss"], clip_loss(model.s.detach()))
    out["loss"].backward()
    assert model.s.grad is not None and torch.isfinite(model.s.grad).all()
    raw = torch.randn(1, 3, 4)
    assert torch.equal(method.retrieval_score(raw), raw[0])


def test_scores_stay_float32_under_autocast():
    from ugncl.backbones.clip.adapter import build_clip
    from ugncl.backbones.clip.models import TINY_MODEL

    torch.manual_seed(0)
    model = build_clip(TINY_MODEL, image_size=32, context_length=16).eval()
    img = torch.nn.functional.normalize(torch.randn(3, 128), dim=-1)
    cap = torch.nn.functional.normalize(torch.randn(4, 128), dim=-1)
    exact = model.score(img, cap)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        raw = model.score(img.bfloat16(), cap.bfloat16())
    assert raw.dtype == torch.float32 and raw.shape == (1, 3, 4)
    # Only the inputs' bf16 rounding remains (about 2**-8 relative), not the product's.
    torch.testing.assert_close(raw, exact, atol=0.1, rtol=0.02)
