"""Shared tiny models and the per-caption reference loop (tests/sgraf/reference.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from sgraf.model import SGRAF
from tests.sgraf import reference

REPO = Path(__file__).resolve().parents[2]
TINY = {"word_dim": 6, "img_dim": 10, "embed_dim": 12, "sim_dim": 8, "num_regions": 4}
VOCAB = 30


@pytest.fixture(scope="session")
def reference_scores():
    """The released-style per-caption loop: (model, img_emb, cap_emb, lengths) -> (W,n,m)."""
    return reference.reference_scores


def make_model(head: str = "sgr", views: int = 1, dtype=torch.float64, seed: int = 0, **kw):
    torch.manual_seed(seed)
    cfg = {**TINY, **kw}
    return SGRAF(VOCAB, num_views=views, head=head, **cfg).to(dtype)


def make_batch(n_img: int = 5, n_cap: int = 6, max_len: int = 7, dtype=torch.float64, seed=1):
    """Images (n_img, R, D), unsorted captions (n_cap, L) padded with 0, lengths (n_cap,)."""
    gen = torch.Generator().manual_seed(seed)
    images = torch.randn(n_img, TINY["num_regions"], TINY["img_dim"], generator=gen, dtype=dtype)
    lengths = torch.randint(1, max_len + 1, (n_cap,), generator=gen)
    lengths[0] = max_len
    lengths[-1] = 1
    captions = torch.randint(4, VOCAB, (n_cap, max_len), generator=gen)
    captions = captions * (torch.arange(max_len) < lengths[:, None])
    return images, captions, lengths
