"""SGRAF: W image views, a (bi)GRU caption encoder and an SGR or SAF similarity head.

Scores are **raw** (before sigmoid), shape (W, n_img, n_cap): callers apply sigmoid, tanh
or evidence. The head lives in :mod:`sgraf.head`, block planning and batched all-pairs
scoring in :mod:`sgraf.scoring`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from sgraf.attention import check_num_regions
from sgraf.encoders import ImageEncoder, TextEncoder
from sgraf.head import HEADS, SimilarityHead
from sgraf.scoring import (
    DEFAULT_MEMORY_BUDGET,
    ImageSource,
    bytes_per_pair,
    check_pair_inputs,
    plan_blocks,
    score_all_pairs,
    score_pairs,
)

__all__ = [
    "DEFAULT_MEMORY_BUDGET",
    "HEADS",
    "SGRAF",
    "SimilarityHead",
    "bytes_per_pair",
    "plan_blocks",
    "score_all_pairs",
]


class SGRAF(nn.Module):
    """SGRAF (SGR or SAF head) with W image views; W = 2 is the UGNCL network.

    Implements the package's similarity-model interface (``ugncl.core.similarity``) without
    importing it: ``encode_images`` -> (W, n, R, E) (images on axis 1, ``image_axis``),
    ``encode_captions`` -> (n, L, E), ``score`` -> raw (W, n_img, n_cap), ``score_all_pairs``,
    ``unit_scores`` (the identity: no temperature).

    Attributes:
        backbone: ``"sgraf"``, the backbone registry key.
        config: the constructor arguments as plain types (stored in checkpoints).
        num_views: W.
        block_captions: at most this many captions per scored block of ``score`` and
            ``forward`` (``None``: the memory budget decides; see
            :func:`sgraf.scoring.score_pairs`).
    """

    backbone = "sgraf"
    image_axis = 1  # encode_images returns (W, n_img, R, E)
    accepts_image_source = True  # score_all_pairs takes images chunk by chunk (ImageSource)

    def __init__(
        self,
        vocab_size: int,
        *,
        word_dim: int = 300,
        img_dim: int = 2048,
        embed_dim: int = 1024,
        sim_dim: int = 256,
        num_regions: int = 36,
        num_views: int = 1,
        head: str = "sgr",
        sgr_steps: int = 3,
        bi_gru: bool = True,
        word_dropout: float = 0.4,
        sa_dropout: float = 0.4,
        attn_smooth: float = 9.0,
        block_captions: int | None = None,
    ) -> None:
        super().__init__()
        if block_captions is not None and block_captions < 1:
            raise ValueError(f"block_captions must be >= 1 or None, got {block_captions}")
        self.config: dict[str, Any] = {
            "vocab_size": int(vocab_size),
            "word_dim": int(word_dim),
            "img_dim": int(img_dim),
            "embed_dim": int(embed_dim),
            "sim_dim": int(sim_dim),
            "num_regions": int(num_regions),
            "num_views": int(num_views),
            "head": str(head),
            "sgr_steps": int(sgr_steps),
            "bi_gru": bool(bi_gru),
            "word_dropout": float(word_dropout),
            "sa_dropout": float(sa_dropout),
            "attn_smooth": float(attn_smooth),
            "block_captions": None if block_captions is None else int(block_captions),
        }
        self.num_views = int(num_views)
        self.num_regions = int(num_regions)
        self.block_captions = self.config["block_captions"]
        self.img_enc = ImageEncoder(img_dim, embed_dim, num_views)
        self.txt_enc = TextEncoder(
            vocab_size, word_dim, embed_dim, bi_gru=bi_gru, word_dropout=word_dropout
        )
        self.sim_enc = SimilarityHead(
            embed_dim,
            sim_dim,
            num_regions=num_regions,
            head=head,
            sgr_steps=sgr_steps,
            sa_dropout=sa_dropout,
            attn_smooth=attn_smooth,
        )

    def image_projection_weights(self) -> list[nn.Parameter]:
        """The weights that read an image's raw region features (one ``D x E`` matrix per
        view): the only map that sees each image's own feature statistics, so the route by
        which a noisy pair is memorised (``train.image_decay_per_rms``)."""
        return [fc.weight for fc in self.img_enc.fc]

    def encode_images(self, images: Tensor) -> Tensor:
        """(B, R, D) region features -> (W, B, R, E) l2-normalised region embeddings."""
        if images.dim() != 3:
            raise ValueError(f"images must be (B, R, D), got shape {tuple(images.shape)}")
        check_num_regions(images.shape[1], self.num_regions)
        return self.img_enc(images)

    def encode_captions(self, captions: Tensor, lengths: Tensor) -> Tensor:
        """(B, L) ids and (B,) lengths -> (B, L, E) word features, zero at padding."""
        return self.txt_enc(captions, lengths)

    def encode(
        self, images: Tensor, captions: Tensor, lengths: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Returns (W, B, R, E) image embeddings, (B, L, E) word features and lengths."""
        return self.encode_images(images), self.encode_captions(captions, lengths), lengths

    def score(
        self,
        img_emb: Tensor,
        cap_emb: Tensor,
        lengths: Tensor,
        *,
        memory_budget_bytes: int | None = None,
    ) -> Tensor:
        """Raw scores of all (image, caption) pairs, differentiable.

        Under autograd the saved activations of all blocks stay alive, so the budget bounds
        each block's working set, not the total. ``None``: the device's plan
        (:func:`sgraf.scoring.device_memory_budget`).

        Args:
            img_emb: (W, n_img, R, E) from ``encode_images``.
            cap_emb: (n_cap, L, E) from ``encode_captions``.
            lengths: (n_cap,) real words per caption (>= 1).

        Returns:
            (W, n_img, n_cap) raw scores.
        """
        check_pair_inputs(self.num_views, self.num_regions, img_emb, cap_emb, lengths)
        if img_emb.shape[1] == 0 or cap_emb.shape[0] == 0:
            return img_emb.new_zeros(self.num_views, img_emb.shape[1], cap_emb.shape[0])
        return score_pairs(
            self.sim_enc, img_emb, cap_emb, lengths, memory_budget_bytes=memory_budget_bytes,
            block_captions=self.block_captions,
        )  # fmt: skip

    def unit_scores(self, raw: Tensor) -> Tensor:
        """Raw scores on the unit scale of the similarity-model interface: SGRAF's
        pre-sigmoid scores are on it already (no temperature), so ``raw`` itself."""
        return raw

    def score_all_pairs(
        self,
        img_emb: Tensor | ImageSource,
        cap_emb: Tensor,
        lengths: Tensor,
        *,
        memory_budget_bytes: int | None = None,
        view_reduce: Callable[[Tensor], Tensor] | None = None,
        out_device: str | torch.device = "cpu",
    ) -> Tensor:
        """Every pair of an encoded split in shards, no autograd, eval mode (see
        :func:`sgraf.scoring.score_all_pairs`): (W, n_img, n_cap), or (n_img, n_cap) after
        ``view_reduce``."""
        return score_all_pairs(
            self,
            img_emb,
            cap_emb,
            lengths,
            view_reduce=view_reduce,
            memory_budget_bytes=memory_budget_bytes,
            out_device=out_device,
        )

    def forward(self, images: Tensor, captions: Tensor, lengths: Tensor) -> Tensor:
        """(B, R, D), (B, L), (B,) -> raw (W, B, B) scores; rows images, columns captions."""
        img_emb, cap_emb, lengths = self.encode(images, captions, lengths)
        return self.score(img_emb, cap_emb, lengths)
