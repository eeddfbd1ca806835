"""Global self-attention vectors and SCAN text-to-image attention (SGRAF paper).

``VisualSA``/``TextSA`` keep the released module and parameter names so that released
state dicts map onto them key for key.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from sgraf.encoders import xavier_linear_
from sgraf.functional import EPS, l2norm, masked_softmax
from sgraf.shard import ShardBatchNorm1d, ShardDropout


def _init_sa(module: nn.Module) -> None:
    for layer in module.modules():
        if isinstance(layer, nn.Linear):
            xavier_linear_(layer)
        elif isinstance(layer, nn.BatchNorm1d):
            nn.init.ones_(layer.weight)
            nn.init.zeros_(layer.bias)


class VisualSA(nn.Module):
    """Image global vector: attention-pooled regions guided by the mean region.

    a = softmax_r(w_c . (tanh BN_R(W_l v_r) * tanh BN_E(W_g mean(v)))),
    g_v = l2norm(sum_r a_r v_r). Note the un-embedded regions v are pooled.

    ``BatchNorm1d(num_regions)`` treats the region axis as channels, so the region count is
    part of the parameters: a feature tensor with another count is rejected with an error.
    """

    def __init__(self, embed_dim: int, dropout: float, num_regions: int) -> None:
        super().__init__()
        self.num_regions = num_regions
        self.embedding_local = nn.Sequential(
            nn.Linear(embed_dim, embed_dim),
            ShardBatchNorm1d(num_regions),
            nn.Tanh(),
            ShardDropout(dropout),
        )
        self.embedding_global = nn.Sequential(
            nn.Linear(embed_dim, embed_dim),
            ShardBatchNorm1d(embed_dim),
            nn.Tanh(),
            ShardDropout(dropout),
        )
        self.embedding_common = nn.Sequential(nn.Linear(embed_dim, 1))
        _init_sa(self)

    def forward(self, regions: Tensor) -> Tensor:
        """Global image vectors.

        Args:
            regions: (B, R, E) region embeddings of one view, R == num_regions.

        Returns:
            (B, E) l2-normalised global vectors.

        Raises:
            ValueError: R differs from ``num_regions``, or training mode with B == 1
                (BatchNorm batch statistics need at least two images).
        """
        check_num_regions(regions.shape[1], self.num_regions)
        if self.training and regions.shape[0] < 2:
            raise ValueError(
                f"VisualSA's BatchNorm1d needs at least 2 images per batch in training mode, got "
                f"{regions.shape[0]}; drop singleton batches (the released NCR/SGRAF code skips "
                "them) or call model.eval()"
            )
        local = self.embedding_local(regions)
        glob = self.embedding_global(regions.mean(dim=1))
        logits = self.embedding_common(local * glob.unsqueeze(1)).squeeze(-1)
        weights = torch.softmax(logits, dim=1)
        return l2norm(torch.bmm(weights.unsqueeze(1), regions).squeeze(1), dim=-1)


class TextSA(nn.Module):
    """Caption global vector: VisualSA without BatchNorm, over real words only.

    The mean and the attention softmax exclude padding, which reproduces the released
    per-caption computation on ``cap_emb[i, :len_i]``.
    """

    def __init__(self, embed_dim: int, dropout: float) -> None:
        super().__init__()
        self.embedding_local = nn.Sequential(
            nn.Linear(embed_dim, embed_dim), nn.Tanh(), ShardDropout(dropout)
        )
        self.embedding_global = nn.Sequential(
            nn.Linear(embed_dim, embed_dim), nn.Tanh(), ShardDropout(dropout)
        )
        self.embedding_common = nn.Sequential(nn.Linear(embed_dim, 1))
        _init_sa(self)

    def forward(self, words: Tensor, mask: Tensor) -> Tensor:
        """Global caption vectors.

        Args:
            words: (N, L, E) word features.
            mask: (N, L) bool, True for real words; every row needs at least one.

        Returns:
            (N, E) l2-normalised global vectors.
        """
        maskf = mask.to(words.dtype).unsqueeze(-1)
        mean = (words * maskf).sum(dim=1) / maskf.sum(dim=1)
        local = self.embedding_local(words)
        glob = self.embedding_global(mean)
        logits = self.embedding_common(local * glob.unsqueeze(1)).squeeze(-1)
        weights = masked_softmax(logits, mask, dim=1)
        return l2norm(torch.bmm(weights.unsqueeze(1), words).squeeze(1), dim=-1)


def check_num_regions(got: int, expected: int) -> None:
    """Raise a ValueError naming both region counts when they differ."""
    if got != expected:
        raise ValueError(
            f"image features have {got} regions but the model was built with num_regions="
            f"{expected} (VisualSA's BatchNorm1d has one channel per region); build the model "
            f"with num_regions={got} or use features with {expected} regions per image"
        )


def scan_text_to_image(regions: Tensor, words: Tensor, smooth: float) -> Tensor:
    """SCAN text-to-image attention for every (image, caption) pair at once.

    For image i and caption c: A = LeakyReLU_0.1(v w^T) (R x L), l2-normalised over the
    *word* axis, then alpha = softmax over regions of smooth * A, and the attended context
    c_t = l2norm(sum_r alpha_{t,r} v_r). Padded words must be exactly zero: they then add
    nothing to the word-axis norm, so real words see the same attention as in the released
    per-caption loop. (Padded positions get a context too; callers mask them later.)

    Args:
        regions: (I, R, E) region embeddings.
        words: (C, L, E) word features, zero at padding.
        smooth: softmax inverse temperature (9 in SGRAF).

    Returns:
        (I, C, L, E) attended, l2-normalised region context per word.
    """
    n_img, n_reg, dim = regions.shape
    n_cap, n_word, _ = words.shape
    # One GEMM for all pairs: (I*R, E) x (E, C*L).
    attn = (regions.reshape(n_img * n_reg, dim) @ words.reshape(n_cap * n_word, dim).t()).view(
        n_img, n_reg, n_cap, n_word
    )
    inplace = not torch.is_grad_enabled()
    if inplace:
        F.leaky_relu_(attn, 0.1)
        attn.div_(torch.linalg.vector_norm(attn, dim=-1, keepdim=True).add_(EPS)).mul_(smooth)
    else:
        attn = F.leaky_relu(attn, 0.1)
        attn = l2norm(attn, dim=-1) * smooth
    attn = torch.softmax(attn, dim=1).view(n_img, n_reg, n_cap * n_word)
    context = torch.bmm(attn.transpose(1, 2), regions)
    if inplace:
        context.div_(torch.linalg.vector_norm(context, dim=-1, keepdim=True).add_(EPS))
    else:
        context = l2norm(context, dim=-1)
    return context.view(n_img, n_cap, n_word, dim)
