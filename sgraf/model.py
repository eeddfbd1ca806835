"""SGRAF network with W image views and batched, memory-bounded all-pairs scoring.

Scores are **raw** (before sigmoid), shape (W, n_img, n_cap): callers apply sigmoid, tanh
or evidence. The released code loops over captions in Python; here every (image, caption)
pair of a block is scored at once, with padded words masked so that padding never changes a
score, and the (image, caption) grid is cut into blocks whose estimated working set fits a
byte budget.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor, nn

from sgraf.attention import TextSA, VisualSA, check_num_regions, scan_text_to_image
from sgraf.encoders import ImageEncoder, TextEncoder, xavier_linear_
from sgraf.functional import l2norm, word_mask
from sgraf.reasoning import SAF, SGR

DEFAULT_MEMORY_BUDGET = 512 * 2**20
HEADS = ("sgr", "saf")


def bytes_per_pair(
    n_words: int,
    n_regions: int,
    embed_dim: int,
    sim_dim: int,
    *,
    head: str = "sgr",
    sgr_steps: int = 3,
    itemsize: int = 4,
    autograd: bool = False,
) -> int:
    """Estimated peak working set of scoring one (image, caption) pair, in bytes.

    With ``autograd`` every intermediate stays alive for the backward pass: attention maps
    (3 R L), attended context and squared difference (2 L E), local alignment (3 L S),
    global alignment (E + 2 S), nodes, and per graph step the packed projection, edges and
    outputs. Without it (the no_grad path updates in place and frees stages) the peak is
    the larger of the attention stage (2 R L + L E) and the projection stage (L E + 2 L S),
    plus the node tensors of the head.
    """
    L, R, E, S = n_words, n_regions, embed_dim, sim_dim
    nodes = L + 1
    if head == "sgr":
        per_step = nodes * (2 * S + 2) + 2 * nodes * nodes + 2 * nodes * S
        head_elems = sgr_steps * per_step if autograd else per_step + 2 * nodes * S
    else:
        head_elems = 4 * nodes + 2 * nodes * S
    if autograd:
        elems = 3 * R * L + 2 * L * E + 3 * L * S + E + 2 * S + nodes * S + head_elems
    else:
        elems = max(2 * R * L + L * E, L * E + 2 * L * S) + E + nodes * S + head_elems
    return int(elems * itemsize)


def plan_blocks(
    n_img: int, n_cap: int, pair_bytes: int, budget: int, *, split_images: bool = True
) -> tuple[int, int]:
    """Block shape (images, captions) whose pair count fits ``budget // pair_bytes``.

    Square-ish blocks keep both GEMM sides large. With ``split_images=False`` (SAF in
    training mode, whose BatchNorm statistics span all images) only captions are split,
    even if one caption column exceeds the budget.
    """
    if budget <= 0:
        raise ValueError(f"memory_budget_bytes must be positive, got {budget}")
    pairs = max(1, budget // max(1, pair_bytes))
    if not split_images:
        return n_img, min(n_cap, max(1, pairs // max(1, n_img)))
    side = math.isqrt(pairs)
    rows = min(n_img, max(side, pairs // max(1, n_cap)))
    return max(1, rows), min(n_cap, max(1, pairs // max(1, rows)))


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


class SGRAF(nn.Module):
    """SGRAF (SGR or SAF head) with W image views; W = 2 is the UGNCL network.

    Attributes:
        config: the constructor arguments as plain types (stored in checkpoints).
        num_views: W.
    """

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
    ) -> None:
        super().__init__()
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
        }
        self.num_views = int(num_views)
        self.num_regions = int(num_regions)
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
        memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET,
    ) -> Tensor:
        """Raw scores of all (image, caption) pairs, differentiable.

        Under autograd the saved activations of all blocks stay alive, so the budget bounds
        each block's working set, not the total.

        Args:
            img_emb: (W, n_img, R, E) from ``encode_images``.
            cap_emb: (n_cap, L, E) from ``encode_captions``.
            lengths: (n_cap,) real words per caption (>= 1).

        Returns:
            (W, n_img, n_cap) raw scores.
        """
        _check_pair_inputs(self, img_emb, cap_emb, lengths)
        if img_emb.shape[1] == 0 or cap_emb.shape[0] == 0:
            return img_emb.new_zeros(self.num_views, img_emb.shape[1], cap_emb.shape[0])
        head = self.sim_enc
        img_glo = head.image_globals(img_emb)
        mask = word_mask(lengths, cap_emb.shape[1])
        cap_glo = head.t_global_w(cap_emb, mask)
        stats: list = []
        blocks = _iter_blocks(
            head, img_emb, img_glo, cap_emb, cap_glo, lengths, memory_budget_bytes, stats
        )
        rows: dict[int, list[Tensor]] = {}
        col_order: list[Tensor] = []
        for img_start, cap_idx, block in blocks:
            if img_start == 0:
                col_order.append(cap_idx)
            rows.setdefault(img_start, []).append(block)
        order = torch.cat(col_order)
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(order.numel(), device=order.device)
        sorted_scores = torch.cat([torch.cat(rows[r], dim=2) for r in sorted(rows)], dim=1)
        _commit_saf_stats(head, stats, order)
        return sorted_scores[:, :, inverse]

    def forward(self, images: Tensor, captions: Tensor, lengths: Tensor) -> Tensor:
        """(B, R, D), (B, L), (B,) -> raw (W, B, B) scores; rows images, columns captions."""
        img_emb, cap_emb, lengths = self.encode(images, captions, lengths)
        return self.score(img_emb, cap_emb, lengths)


def _check_pair_inputs(model: SGRAF, img_emb: Tensor, cap_emb: Tensor, lengths: Tensor) -> None:
    if img_emb.dim() != 4 or img_emb.shape[0] != model.num_views:
        raise ValueError(
            f"img_emb must be (W={model.num_views}, n_img, R, E) as returned by encode_images, "
            f"got shape {tuple(img_emb.shape)}"
        )
    check_num_regions(img_emb.shape[2], model.num_regions)
    if cap_emb.dim() != 3 or lengths.shape != (cap_emb.shape[0],):
        raise ValueError(
            f"cap_emb must be (n_cap, L, E) with lengths (n_cap,), got {tuple(cap_emb.shape)} "
            f"and {tuple(lengths.shape)}"
        )
    if lengths.numel() and (int(lengths.min()) < 1 or int(lengths.max()) > cap_emb.shape[1]):
        raise ValueError(
            f"every caption needs 1 <= length <= L={cap_emb.shape[1]} to be scored, got lengths "
            f"in [{int(lengths.min())}, {int(lengths.max())}]; drop empty captions first"
        )


def _iter_blocks(
    head: SimilarityHead,
    img_emb: Tensor,
    img_glo: Tensor,
    cap_emb: Tensor,
    cap_glo: Tensor,
    lengths: Tensor,
    budget: int,
    saf_stats: list,
) -> Iterator[tuple[int, Tensor, Tensor]]:
    """Yield ``(image_start, caption_indices, raw (W, rows, cols) block)`` over the grid.

    Captions are visited sorted by length and each block is trimmed to its longest caption,
    which removes most padding work (exact, since padding is masked). A block holds all W
    views of its images, so ``view_reduce`` can be applied per block. Caption chunks are the
    outer loop: only one chunk of captions needs to be on the device at a time.

    Args:
        img_emb: (W, n_img, R, E) on the head's device; img_glo: (W, n_img, E) likewise.
        cap_emb: (n_cap, L, E) anywhere; cap_glo: (n_cap, E) anywhere.
        lengths: (n_cap,) lengths >= 1.
    """
    n_views, n_img, n_reg, dim = img_emb.shape
    device = img_emb.device
    lengths_cpu = lengths.detach().to("cpu", torch.int64)
    order_cpu = torch.argsort(lengths_cpu, stable=True)
    train_saf = head.head == "saf" and head.training
    pair_bytes = n_views * bytes_per_pair(
        int(lengths_cpu.max()),
        n_reg,
        dim,
        head.sim_tranloc_w.out_features,
        head=head.head,
        sgr_steps=len(head.sgr.steps) if head.head == "sgr" else 0,
        itemsize=img_emb.element_size(),
        autograd=torch.is_grad_enabled(),
    )
    n_cap = lengths_cpu.numel()
    rows, cols = plan_blocks(n_img, n_cap, pair_bytes, budget, split_images=not train_saf)
    folds = head.sgr.fold() if head.head == "sgr" else None
    for start in range(0, n_cap, cols):
        idx_cpu = order_cpu[start : start + cols]
        width = int(lengths_cpu[idx_cpu].max())
        mask = word_mask(lengths_cpu[idx_cpu], width).to(device)
        idx = idx_cpu.to(cap_emb.device)
        words = cap_emb[idx, :width].to(device)
        words = words * mask.to(words.dtype).unsqueeze(-1)  # padding must be exactly zero
        cglo = cap_glo[idx].to(device)
        for img_start in range(0, n_img, rows):
            sl = slice(img_start, img_start + rows)
            n_rows = img_emb[:, sl].shape[1]
            block = head.score_block(
                img_emb[:, sl].reshape(n_views * n_rows, n_reg, dim),
                img_glo[:, sl].reshape(n_views * n_rows, dim),
                words,
                cglo,
                mask,
                views=n_views,
                saf_stats=saf_stats,
                sgr_folds=folds,
            )
            yield img_start, idx_cpu, block.view(n_views, n_rows, -1)


def _commit_saf_stats(head: SimilarityHead, stats: list, order: Tensor) -> None:
    """Apply collected SAF BatchNorm updates in (view, original caption) order."""
    if not stats:
        return
    means = torch.cat([m for m, _ in stats], dim=1)
    variances = torch.cat([v for _, v in stats], dim=1)
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(order.numel(), device=order.device)
    inverse = inverse.to(means.device)
    head.saf.update_running_stats(means[:, inverse], variances[:, inverse])


@torch.no_grad()
def score_all_pairs(
    model: SGRAF,
    img_emb: Tensor,
    cap_emb: Tensor,
    lengths: Tensor,
    *,
    view_reduce: Callable[[Tensor], Tensor] | None = None,
    memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET,
    out_device: str | torch.device = "cpu",
) -> Tensor:
    """Score every (image, caption) pair of an evaluation split in shards.

    Each image and caption is encoded once beforehand (float32, one entry per image, not per
    caption). Image embeddings are moved to the model's device once; caption features one
    shard at a time. The model runs in eval mode (BatchNorm running statistics, no
    dropout); its previous mode is restored afterwards.

    Args:
        model: the network.
        img_emb: (W, n_img, R, E) image embeddings from ``model.encode_images``.
        cap_emb: (n_cap, L, E) caption features from ``model.encode_captions``.
        lengths: (n_cap,) real words per caption (>= 1).
        view_reduce: maps a raw (W, a, b) shard to (a, b) (e.g. mean over views, or mean
            evidence); None keeps all views.
        memory_budget_bytes: bound on the estimated working set of one block.
        out_device: where the result matrix is allocated.

    Returns:
        float32 (W, n_img, n_cap) raw scores, or (n_img, n_cap) after ``view_reduce``.
    """
    _check_pair_inputs(model, img_emb, cap_emb, lengths)
    n_views, n_img = img_emb.shape[:2]
    n_cap = cap_emb.shape[0]
    shape = (n_img, n_cap) if view_reduce is not None else (n_views, n_img, n_cap)
    out = torch.empty(shape, dtype=torch.float32, device=out_device)
    if n_img == 0 or n_cap == 0:
        return out
    was_training = model.training
    model.eval()
    try:
        device = next(model.parameters()).device
        head = model.sim_enc
        regions = img_emb.to(device)
        img_glo = torch.cat(
            [head.image_globals(regions[:, i : i + 1024]) for i in range(0, n_img, 1024)], dim=1
        )
        lengths_cpu = lengths.detach().to("cpu", torch.int64)
        cap_glo = torch.cat(
            [
                head.t_global_w(
                    cap_emb[i : i + 1024].to(device),
                    word_mask(lengths_cpu[i : i + 1024], cap_emb.shape[1]).to(device),
                )
                for i in range(0, n_cap, 1024)
            ],
            dim=0,
        )
        blocks = _iter_blocks(
            head, regions, img_glo, cap_emb, cap_glo, lengths_cpu, memory_budget_bytes, []
        )
        for img_start, idx, block in blocks:
            if view_reduce is not None:
                block = view_reduce(block)
            block = block.to(out.device, torch.float32)
            sl = slice(img_start, img_start + block.shape[-2])
            out[..., sl, idx.to(out.device)] = block
        return out
    finally:
        model.train(was_training)
