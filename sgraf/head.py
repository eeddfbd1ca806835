"""The SGRAF similarity head: global vectors, SCAN attention, alignment vectors, SGR or SAF."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from sgraf.attention import TextSA, VisualSA, scan_text_to_image
from sgraf.encoders import xavier_linear_
from sgraf.functional import l2norm
from sgraf.reasoning import SAF, SGR

HEADS = ("sgr", "saf")


class SimilarityHead(nn.Module):
    """Shared similarity head: global vectors, SCAN attention, alignment vectors, SGR/SAF."""

    def __init__(
        self,
        embed_dim: int,
        sim_dim: int,
        *,
        num_regions: int = 36,
        head: str = "sgr",
        sgr_steps: int = 3,
        sa_dropout: float = 0.4,
        attn_smooth: float = 9.0,
    ) -> None:
        super().__init__()
        if head not in HEADS:
            raise ValueError(f"head must be one of {HEADS}, got {head!r}")
        self.head = head
        self.num_regions = num_regions
        self.attn_smooth = attn_smooth
        self.v_global_w = VisualSA(embed_dim, sa_dropout, num_regions)
        self.t_global_w = TextSA(embed_dim, sa_dropout)
        self.sim_tranloc_w = nn.Linear(embed_dim, sim_dim)
        self.sim_tranglo_w = nn.Linear(embed_dim, sim_dim)
        self.sim_eval_w = nn.Linear(sim_dim, 1)
        for layer in (self.sim_tranloc_w, self.sim_tranglo_w, self.sim_eval_w):
            xavier_linear_(layer)
        if head == "sgr":
            self.sgr = SGR(sim_dim, sgr_steps)
        else:
            self.saf = SAF(sim_dim)

    def image_globals(self, img_emb: Tensor) -> Tensor:
        """(W, n, R, E) -> (W, n, E). One VisualSA call per view, as in UGNCL (BN batch
        statistics per view in training mode)."""
        return torch.stack([self.v_global_w(view) for view in img_emb], dim=0)

    def score_block(
        self,
        regions: Tensor,
        img_glo: Tensor,
        words: Tensor,
        cap_glo: Tensor,
        mask: Tensor,
        *,
        views: int = 1,
        saf_stats: list | None = None,
        sgr_folds: list | None = None,
    ) -> Tensor:
        """Raw scores of every pair of one block.

        Args:
            regions: (I, R, E) region embeddings (views flattened into I, view-major).
            img_glo: (I, E) image global vectors.
            words: (C, L, E) word features, zero at padding.
            cap_glo: (C, E) caption global vectors.
            mask: (C, L) bool, True for real words (at least one per caption).
            views: number of views in I (SAF training statistics are per view).
            saf_stats: collector for SAF BatchNorm statistics in training mode.
            sgr_folds: ``self.sgr.fold()`` shared by the blocks of one call.

        Returns:
            (I, C) raw scores.
        """
        n_img, n_cap, n_word = regions.shape[0], words.shape[0], words.shape[1]
        context = scan_text_to_image(regions, words, self.attn_smooth)  # (I, C, L, E)
        if torch.is_grad_enabled():
            diff = (context - words).square()
        else:
            diff = context.sub_(words).square_()
        local = l2norm(self.sim_tranloc_w(diff), dim=-1)  # (I, C, L, S)
        del context, diff
        glob = (img_glo.unsqueeze(1) - cap_glo.unsqueeze(0)).square()
        glob = l2norm(self.sim_tranglo_w(glob), dim=-1)  # (I, C, S)
        nodes = torch.cat([glob.unsqueeze(2), local], dim=2)  # (I, C, L+1, S)
        node_mask = torch.cat([mask.new_ones(n_cap, 1), mask], dim=1)
        if self.head == "sgr":
            flat_mask = node_mask.unsqueeze(0).expand(n_img, -1, -1).reshape(-1, n_word + 1)
            vec = self.sgr(nodes.flatten(0, 1), flat_mask, sgr_folds)
        else:
            shaped = nodes.view(views, n_img // views, n_cap, n_word + 1, -1)
            vec = self.saf(shaped, node_mask, saf_stats)
        return self.sim_eval_w(vec).view(n_img, n_cap)
