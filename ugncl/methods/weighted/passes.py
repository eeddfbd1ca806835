"""Whole-training-set inference passes and pair fetching shared by NPC, SDD and OSA.

The glue between a ``MethodContext`` and the pure maths: one no-grad pass of a model over every
training sample, scattering what the methods need into arrays indexed by sample index.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from ugncl.core.engine.distributed import (
    all_gather_object,
    all_reduce_sum,
    merge_rows,
    world_size,
)
from ugncl.core.evaluation import eval_mode
from ugncl.methods.infonce import as_logit_matrix, info_nce_per_sample
from ugncl.methods.weighted.memory_bank import EmbeddingTable
from ugncl.methods.weighted.weights import SpaceShift

__all__ = [
    "ScanResult",
    "logit_scale_of",
    "pair_fetcher",
    "pooled_embeddings",
    "scan_training_set",
    "untrained_start_error",
]


@dataclass
class ScanResult:
    """Per-sample results of one pass (``(N,)`` arrays; NaN / -1 where not visited)."""

    loss: np.ndarray  # in-batch symmetric InfoNCE (NPC's bank-selection loss)
    diag: np.ndarray  # logit-scaled similarity of the pair itself (SDD, OSA)
    image_index: np.ndarray  # int64 caption -> image index seen in the batches
    shift: SpaceShift  # non-matching pair scores (OSA's beta)
    image_emb: np.ndarray | None = None  # (N, D) embedding of each sample's image
    caption_emb: np.ndarray | None = None  # (N, D)

    @property
    def visited(self) -> np.ndarray:
        return self.image_index >= 0


def _progress(it: Iterable[Any], desc: str) -> Iterable[Any]:
    if not sys.stderr.isatty():
        return it
    from tqdm import tqdm

    return tqdm(it, desc=desc, leave=False)


def scan_training_set(
    ctx: Any,
    model: nn.Module,
    *,
    epoch: int,
    batch_size: int,
    stream: int,
    embeddings: bool = False,
    desc: str = "scan",
    batches: Callable[..., Iterable[Any]] | None = None,
) -> ScanResult:
    """One no-grad, eval-mode pass of ``model`` over every training sample.

    Args:
        ctx: the trainer's ``MethodContext`` (``batches``, ``device``, ``precision``,
            ``num_samples``).
        model: a CLIP-like ``SimilarityModel`` (W = 1; embeddings flattened per row).
        epoch, batch_size, stream: the seeded order of ``ctx.batches``.
        embeddings: also keep the image and caption embeddings (memory-bank construction).
        desc: progress-bar label (shown on interactive terminals only).
        batches: the pass's batch source (default ``ctx.batches``; an estimator of another
            backbone needs the same samples in its own input format).
    """
    n = ctx.num_samples
    loss, diag = EmbeddingTable(n, 1), EmbeddingTable(n, 1)
    img_tab, cap_tab = EmbeddingTable(n), EmbeddingTable(n)
    image_index = np.full(n, -1, dtype=np.int64)
    shift = SpaceShift()
    with eval_mode(model):
        source = batches if batches is not None else ctx.batches
        for batch in _progress(source(epoch, batch_size, stream), desc):
            batch = batch.to(ctx.device)
            with ctx.precision.autocast(ctx.device):
                img = model.encode_images(batch.images)
                cap = model.encode_captions(batch.captions, batch.lengths)
                raw = model.score(img, cap, batch.lengths)
            s = as_logit_matrix(raw).float()
            idx = batch.index.cpu()
            loss.add(idx, info_nce_per_sample(s))
            diag.add(idx, torch.diagonal(s))
            image_index[idx.numpy()] = batch.image_index.cpu().numpy()
            shift.add(s, batch.image_index)
            if embeddings:
                pooled_img, pooled_cap = pooled_embeddings(model, img, cap, batch.lengths)
                img_tab.add(idx, pooled_img)
                cap_tab.add(idx, pooled_cap)
    # Several processes: each rank visited its share of the batches; every rank now gets the
    # whole-set arrays (identical on all ranks, the one-process values).
    seen = image_index >= 0
    image_index = merge_rows(image_index, seen)
    allocate_like_peers((loss, diag, img_tab, cap_tab))
    for table in (loss, diag, img_tab, cap_tab):
        if table.values is not None:
            table.values = merge_rows(table.values, table.visited)
    shift.count, shift.total, shift.total_sq = all_reduce_sum(
        [shift.count, shift.total, shift.total_sq]
    )
    shift.count = int(shift.count)
    if (image_index < 0).any():
        raise RuntimeError(
            f"{int((image_index < 0).sum())} training samples were not visited by the pass; "
            "MethodContext.batches must cover every sample (drop_last=False)"
        )
    return ScanResult(
        loss=loss.column(), diag=diag.column(), image_index=image_index, shift=shift,
        image_emb=img_tab.values if embeddings else None,
        caption_emb=cap_tab.values if embeddings else None,
    )  # fmt: skip


def allocate_like_peers(tables: Sequence[EmbeddingTable]) -> None:
    """Give this rank's unallocated tables the width another rank's have, so that every rank
    merges the same tables (a rank that visited no pass batch, when the pass has fewer
    batches than there are ranks, allocated none). One process: nothing to do."""
    if world_size() == 1:
        return
    widths = all_gather_object([None if t.values is None else t.values.shape[1] for t in tables])
    for i, table in enumerate(tables):
        width = next((w[i] for w in widths if w[i] is not None), None)
        if width is not None:
            table.ensure_width(width)


def pair_fetcher(ctx: Any) -> Callable[[Tensor], Any]:
    """``indices (K,) -> PairBatch`` of those training samples, in that order.

    Uses ``ctx.fetch`` when the trainer offers it, else ``ctx.data.collate`` over
    ``ctx.data.dataset`` (the ``TrainingData`` protocol).
    """
    fetch = getattr(ctx, "fetch", None)
    if fetch is not None:
        return fetch
    data = getattr(ctx, "data", None)
    if data is None:
        raise RuntimeError(
            "memory-bank methods need the training pairs by index: the MethodContext must offer "
            "fetch(indices) -> PairBatch or data (TrainingData)"
        )

    def fetch_from_data(indices: Tensor) -> Any:
        return data.collate([data.dataset[int(i)] for i in indices.tolist()])

    return fetch_from_data


def logit_scale_of(model: nn.Module, fallback: float | None = None) -> float:
    """The model's ``logit_scale.exp()`` (raw = scale * cosine for CLIP), or ``fallback``."""
    for m in (model, getattr(model, "clip", None), getattr(model, "model", None)):
        ls = getattr(m, "logit_scale", None) if m is not None else None
        if isinstance(ls, Tensor):
            return float(ls.detach().float().exp())
    if fallback is None:
        raise ValueError(
            "cannot read the model's logit scale (no logit_scale attribute); set the method's "
            "logit_scale in the config"
        )
    return float(fallback)


def pooled_embeddings(
    model: nn.Module, img: Tensor, cap: Tensor, lengths: Tensor
) -> tuple[Tensor, Tensor]:
    """One vector per image and per caption for the memory bank's nearest-neighbour search.

    CLIP's embeddings are already ``(K, E)``. Set-valued encoders (SGRAF: images
    ``(W, K, R, E)`` on ``model.image_axis``, captions ``(K, L, E)`` zero beyond each length,
    ``L`` the batch's longest) are mean-pooled over views and regions / over each caption's
    words, so every batch gives rows of one width (the bank compares images with images and
    captions with captions only, by cosine, so a pooled vector is all it needs).
    """
    axis = int(getattr(model, "image_axis", 0))
    img = img.movedim(axis, 0)
    if img.dim() > 2:
        img = img.reshape(img.shape[0], -1, img.shape[-1]).mean(1)
    if cap.dim() > 2:
        n = lengths.to(cap.device).clamp_min(1).to(cap.dtype).reshape(-1, 1)
        cap = cap.reshape(cap.shape[0], -1, cap.shape[-1]).sum(1) / n
    return img, cap


def untrained_start_error(what: str, model: nn.Module) -> str | None:
    """Refuse a method that reads the starting model's scores on a randomly initialised one.

    NPC's memory bank, SDD's clean set and OSA's default estimator (a frozen copy) are built
    once from the starting model: the papers start from pretrained CLIP. A backbone without
    pretraining says where its weights came from in ``init_from`` (SGRAF's builder: the
    ``model.sgraf.init`` checkpoint, or None for random init, where its scores rank at chance
    and the bank would be random). A model without the attribute (CLIP, always loaded from
    ``model.clip.pretrained``) is taken as it is.
    """
    if not hasattr(model, "init_from") or model.init_from:
        return None
    backbone = getattr(model, "backbone", "?")
    return (
        f"{what} is built from the starting model's scores, but this {backbone} model starts "
        f"from random weights (chance-level scores); set model.{backbone}.init to a "
        f"checkpoint of the same {backbone} (e.g. a run of method.name=triplet with "
        "train.epochs=0 train.warmup_epochs=2 on the same split)"
    )
