"""A test-only CLIP-like backbone on the precomputed tiny world (W = 1, raw = scale * cosine),
registered by the ``meanpool`` fixture: the seams and the weight-based methods train through
the unchanged trainer with it."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from torch import Tensor, nn

from ugncl.backbones.sgraf.experiment import open_training_data
from ugncl.core.similarity import SimilarityModel
from ugncl.run.build import BACKBONES, BackboneSpec


# ---------------------------------------------------------------- a test-only backbone
@dataclass
class MeanPoolConfig:
    embed_dim: int = 16
    scale: float = 10.0


class MeanPoolModel(SimilarityModel):
    """Mean-pooled regions and mean-pooled word embeddings, one linear map each, W = 1;
    raw score = scale * cosine."""

    backbone = "meanpool"

    def __init__(self, vocab_size: int, img_dim: int, embed_dim: int, scale: float) -> None:
        super().__init__()
        self.config = {"vocab_size": vocab_size, "img_dim": img_dim, "embed_dim": embed_dim,
                       "scale": scale}  # fmt: skip
        self.num_views = 1
        self.scale = scale
        self.img = nn.Linear(img_dim, embed_dim)
        self.words = nn.Embedding(vocab_size, embed_dim)

    def encode_images(self, images: Tensor) -> Tensor:
        return nn.functional.normalize(self.img(images.mean(1)), dim=-1)  # (n, E)

    def encode_captions(self, captions: Tensor, lengths: Tensor) -> Tensor:
        mask = (torch.arange(captions.shape[1], device=captions.device) < lengths[:, None]).float()
        pooled = (self.words(captions) * mask[..., None]).sum(1) / lengths[:, None].float()
        return nn.functional.normalize(pooled, dim=-1)  # (n, E)

    def score(self, img_emb: Tensor, cap_emb: Tensor, lengths: Tensor) -> Tensor:
        return (self.scale * img_emb @ cap_emb.T).unsqueeze(0)


def build_meanpool(config: MeanPoolConfig, data) -> MeanPoolModel:
    return MeanPoolModel(len(data.vocab), data.train.features.shape[2], config.embed_dim,
                         config.scale)  # fmt: skip


MEANPOOL = BackboneSpec(
    config=MeanPoolConfig,
    open_data=lambda config: open_training_data(config.data),  # precomputed regions
    build=build_meanpool,
    from_config=lambda c: MeanPoolModel(**c),
)


@pytest.fixture
def meanpool(monkeypatch):
    """Register the ``meanpool`` backbone for one test."""
    monkeypatch.setitem(BACKBONES, "meanpool", MEANPOOL)
