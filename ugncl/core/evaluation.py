"""Evaluation: encode a split once, score all pairs in shards, ensemble, apply a dataset protocol.

The pipeline for one split and one or more checkpoints is::

    encoded = encode_split(model, split, device=device)            # once per model
    scores = score_matrix(model, encoded, score=method.retrieval_score,
                          unit_scores=method.reads_unit_scores)  # (n_img, n_cap) float32
    scores = ensemble([scores_sgr, scores_saf])                    # "SGRAF" / UGNCL*
    results = evaluate_scores(scores, encoded.caption_to_image, protocol="coco5fold")

Every image is encoded once (the released code encodes each image once per caption, in
float64, NCR's evaluation.py), embeddings are kept in float32 on the CPU;
for models whose ``score_all_pairs`` accepts an image source (SGRAF) :func:`evaluate_models`
streams the images (:class:`StreamedImages`: encoded chunk by chunk while they are scored, so a
split's region embeddings are never held at once; scores bit-identical to held ones),
and the metrics come from :mod:`ugncl.core.metrics` (pure functions of the score matrix and
the clean
caption->image map). Only the similarity-model interface (:mod:`ugncl.core.similarity`) and the
evaluation-data interface (:class:`ugncl.core.data.EvalData`; an opened precomputed split is
wrapped) are used, so every backbone and data source evaluates the same way.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from precomputed.catalog import split_protocol
from precomputed.dataset import PrecomputedSplit
from precomputed.eval_data import PrecomputedEvalData, trim_heap
from sgraf.functional import PackedWords
from ugncl.core.data import EvalData
from ugncl.core.engine import distributed
from ugncl.core.metrics import (
    METRIC_KEYS,
    coco_folds,
    fold_metrics,
    query_hits,
    retrieval_metrics,
)

logger = logging.getLogger(__name__)

__all__ = [
    "EVAL_SCORES",
    "PROTOCOLS",
    "EncodedSplit",
    "Evaluator",
    "StreamedImages",
    "as_eval_data",
    "batch_block",
    "default_protocol",
    "encode_split",
    "ensemble",
    "eval_mode",
    "evaluate_models",
    "evaluate_scores",
    "metric_table",
    "pack_words",
    "score_matrix",
    "view_reducer",
]

#: Per-view score transforms accepted by :func:`score_matrix`.
EVAL_SCORES: tuple[str, ...] = ("evidence", "evidence_mean_exp", "sigmoid", "raw")
#: Protocols accepted by :func:`evaluate_scores`.
PROTOCOLS: tuple[str, ...] = ("1k", "coco5fold", "full")


@dataclass
class EncodedSplit:
    """Embeddings of one split under one model, kept on the CPU in float32.

    Attributes:
        img_emb: image embeddings, images on the model's ``image_axis`` (SGRAF: ``(W, n_img,
            R, E)`` region embeddings per view), each image once; or a
            :class:`StreamedImages` that encodes them chunk by chunk while they are scored.
        cap_emb: ``(n_cap, ...)`` caption embeddings; token-level ones as
            :class:`~sgraf.functional.PackedWords` (shape ``(n_cap, L_max, E)``, stored
            without padding: a padded COCO 5K split would take about 6 GB).
        lengths: ``(n_cap,)`` int64 caption lengths (tokens incl. ``<start>``/``<end>``).
        caption_to_image: ``(n_cap,)`` int64 *clean* caption->image map used for ranking.
        name: dataset name (e.g. ``"f30k_precomp"``).
        split: split name (e.g. ``"test"``).
    """

    img_emb: Tensor | StreamedImages
    cap_emb: Tensor | PackedWords
    lengths: Tensor
    caption_to_image: np.ndarray
    name: str = ""
    split: str = ""
    image_axis: int = 1

    @property
    def num_images(self) -> int:
        return int(self.img_emb.shape[self.image_axis])

    @property
    def num_captions(self) -> int:
        return int(self.cap_emb.shape[0])


@contextlib.contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    """Eval mode and no autograd inside; the caller's train/eval mode is restored after."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


def _model_device(model: nn.Module) -> torch.device:
    param = next(model.parameters(), None)
    return param.device if param is not None else torch.device("cpu")


def _same_device(a: torch.device, b: torch.device) -> bool:
    return a.type == b.type and (a.index is None or b.index is None or a.index == b.index)


def batch_block(n: int, batch_size: int) -> tuple[int, int]:
    """``[start, stop)`` of the ``n`` images or captions this rank encodes: a contiguous run
    of whole encoding batches (:func:`distributed.row_block` over the batches); all of them
    in one process, or when there are fewer batches than ranks."""
    world = distributed.world_size()
    n_batches = -(-n // batch_size)
    if world == 1 or n_batches < world:
        return 0, n
    first, last = distributed.row_block(n_batches)
    return first * batch_size, min(last * batch_size, n)


class StreamedImages:
    """A split's image embeddings encoded on demand, front to back (a
    :class:`sgraf.scoring.ImageSource`, for models whose ``score_all_pairs`` accepts one).

    Region embeddings of a COCO 5K split take 1.5 GB at W = 2; streamed, scoring holds one
    chunk at a time. Images are encoded in :func:`encode_split`'s batches (``[k * batch_size,
    (k + 1) * batch_size)`` of the whole split), so every embedding is bit-identical to the
    held ones; each pass over the chunks encodes every image once more.

    Args:
        model: the similarity model (``encode_images`` -> ``(W, n, R, E)``).
        data: the split.
        batch_size: images per forward pass.
        device: where the forward passes run and the chunks stay.
        stop: stream only the first ``stop`` images (default: all).
        start: stream from image ``start`` on (a rank's block of a sharded evaluation).
    """

    def __init__(
        self,
        model: nn.Module,
        data: EvalData,
        *,
        batch_size: int,
        device: torch.device,
        stop: int | None = None,
        start: int = 0,
    ) -> None:
        self.model, self.data, self.batch_size, self.device = model, data, batch_size, device
        total = int(data.num_images)
        self.start = int(start)
        self.num_images = (total if stop is None else min(int(stop), total)) - self.start
        with eval_mode(model):
            probe = model.encode_images(data.images(0, min(1, total)).to(device))
        if probe.dim() != 4 or int(getattr(model, "image_axis", 0)) != 1:
            raise ValueError(
                f"streamed images need (W, n, R, E) embeddings on axis 1, got {tuple(probe.shape)}"
            )
        w, _, r, e = probe.shape
        self.shape = (int(w), self.num_images, int(r), int(e))

    def first(self, n: int) -> StreamedImages:
        """The first ``n`` images (same batches, so the same embeddings)."""
        return StreamedImages(
            self.model, self.data, batch_size=self.batch_size, device=self.device,
            start=self.start, stop=self.start + n,
        )  # fmt: skip

    def window(self, a: int, b: int) -> StreamedImages:
        """Images ``[a, b)`` of this stream (same batches, so the same embeddings)."""
        return StreamedImages(
            self.model, self.data, batch_size=self.batch_size, device=self.device,
            start=self.start + a, stop=self.start + b,
        )  # fmt: skip

    def chunks(self, size: int) -> Iterator[Tensor]:
        """Consecutive ``(W, <= size, R, E)`` float32 chunks, each a fresh tensor."""
        w, n, r, e = self.shape
        total, bs = int(self.data.num_images), self.batch_size
        batch, batch_start = None, 0  # the last encoded batch and its first image
        first, n = self.start, self.start + n  # absolute image positions
        for c0 in range(first, n, size):
            c1 = min(c0 + size, n)
            chunk = torch.empty((w, c1 - c0, r, e), dtype=torch.float32, device=self.device)
            filled = c0
            while filled < c1:
                if batch is None or filled >= batch_start + batch.shape[1]:
                    batch_start = filled // bs * bs
                    b = min(batch_start + bs, total)
                    images = self.data.images(batch_start, b).to(self.device)
                    with eval_mode(self.model):
                        batch = self.model.encode_images(images).float()
                    del images
                take = min(c1, batch_start + batch.shape[1]) - filled
                chunk[:, filled - c0 : filled - c0 + take] = batch[
                    :, filled - batch_start : filled - batch_start + take
                ]
                filled += take
                if filled == batch_start + batch.shape[1]:
                    batch = None  # used up: not held while the chunk is scored
            yield chunk
            del chunk


def pack_words(words: Tensor, lengths: Tensor, packed: Tensor, start: int) -> int:
    """Copy the real words of padded features into a packed buffer, caption after caption.

    Writes straight into ``packed`` (no ``words[mask]`` temporary of the batch's size).

    Args:
        words: (B, L, E) word features, any device and float dtype.
        lengths: (B,) real words per caption (<= L).
        packed: (N, E) float32 destination (CPU); rows ``start : start + sum(lengths)`` are
            written.
        start: first destination row.

    Returns:
        The row after the last one written.
    """
    lens = torch.as_tensor(lengths).to("cpu", torch.int64).tolist()
    if any(n < 0 or n > words.shape[1] for n in lens):
        raise ValueError(f"lengths must lie in [0, {words.shape[1]}], got {lens}")
    if start + sum(lens) > packed.shape[0]:
        raise ValueError(
            f"packed buffer has {packed.shape[0]} rows, cannot write {sum(lens)} from row {start}"
        )
    for row, n in zip(words, lens):
        packed[start : start + n].copy_(row[:n])
        start += n
    return start


#: Seconds between two progress lines of a long evaluation pass.
PROGRESS_SECONDS = 30.0


class PassProgress:
    """Log lines ``<what>: done/total (pct), eta Ns`` at most every :data:`PROGRESS_SECONDS`
    (a pass shorter than that logs nothing): the test split of COCO 5K or CC152K takes
    minutes to encode and score on a CPU, and a silent log reads as a hang."""

    def __init__(self, what: str, total: int) -> None:
        self.what, self.total = what, max(1, int(total))
        self.started = self.last = time.monotonic()

    def update(self, done: int) -> None:
        now = time.monotonic()
        if now - self.last < PROGRESS_SECONDS or done <= 0:
            return
        self.last = now
        eta = (now - self.started) / done * max(0, self.total - done)
        logger.info("%s: %d/%d (%.0f%%), eta %.0fs", self.what, done, self.total,
                    100.0 * done / self.total, eta)  # fmt: skip


def encode_split(
    model: nn.Module,
    split: EvalData | PrecomputedSplit,
    *,
    batch_size: int = 128,
    device: torch.device | str | None = None,
    stream_images: bool = False,
) -> EncodedSplit:
    """Encode every image once and every caption once.

    Args:
        model: a similarity model (``encode_images`` / ``encode_captions``), already on
            ``device``.
        split: the split to encode (an opened precomputed split reads its images with
            contiguous ``features.slice`` calls).
        batch_size: images or captions per forward pass.
        device: where the forward passes run (default: the model's parameter device).
        stream_images: do not encode images now; ``img_emb`` is a :class:`StreamedImages`
            that scoring reads chunk by chunk (for models with ``accepts_image_source``).

    Returns:
        The split's embeddings on the CPU in float32 (see :class:`EncodedSplit`).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    data = as_eval_data(split)
    device = torch.device(device) if device is not None else _model_device(model)
    axis = int(getattr(model, "image_axis", 0))
    n_img, n_cap = int(data.num_images), int(data.num_captions)
    lengths = torch.as_tensor(np.asarray(data.lengths), dtype=torch.int64)
    if lengths.shape != (n_cap,):
        raise ValueError(f"caption lengths have shape {tuple(lengths.shape)}, want ({n_cap},)")
    l_max = int(lengths.max())

    img_emb: Tensor | StreamedImages | None = None
    if stream_images:
        if not getattr(model, "accepts_image_source", False):
            raise ValueError(f"{type(model).__name__}.score_all_pairs cannot stream images")
        img_emb = StreamedImages(model, data, batch_size=batch_size, device=device)
    cap_emb: Tensor | None = None  # sentence-level (n_cap, E), or token-level packed words
    packed: Tensor | None = None
    offsets = torch.cumsum(lengths, 0) - lengths
    progress = PassProgress(f"encoding {data.name}/{data.split}", n_img + n_cap)
    # Several processes: each rank encodes its block of whole batches of the images (held,
    # not streamed) and of the captions (the batches of one process, so every embedding is
    # bit-identical to one process's) and the blocks are joined below. Streamed images are
    # encoded where they are scored, so each rank encodes its own rows there.
    i0, i1 = (0, 0) if img_emb is not None else batch_block(n_img, batch_size)
    with eval_mode(model):
        for a in range(i0, i1, batch_size):
            b = min(a + batch_size, i1)
            progress.update(b)
            out = model.encode_images(data.images(a, b).to(device))
            if img_emb is None:
                shape = list(out.shape)
                shape[axis] = i1 - i0
                img_emb = torch.empty(shape, dtype=torch.float32)
            img_emb.narrow(axis, a - i0, b - a).copy_(out.float().cpu())
        c0, c1 = batch_block(n_cap, batch_size)
        for a in range(c0, c1, batch_size):
            b = min(a + batch_size, n_cap)
            progress.update(n_img + b)
            ids, lens = data.captions(a, b)
            out = model.encode_captions(ids.to(device), lens.to(device))
            del ids
            if out.dim() >= 3:  # token-level (B, L_b, E): keep the real words only
                if packed is None:
                    words = int(lengths[c0:c1].sum())
                    packed = torch.empty((words, *out.shape[2:]), dtype=torch.float32)
                pack_words(out, lens, packed, int(offsets[a] - offsets[c0]))
                del out
                continue
            if cap_emb is None:
                cap_emb = torch.empty((c1 - c0, *out.shape[1:]), dtype=torch.float32)
            cap_emb[a - c0 : b - c0] = out.float().cpu()
    if (i0, i1) != (0, n_img) and not isinstance(img_emb, StreamedImages):
        img_emb = distributed.gather_blocks(img_emb.movedim(axis, 0)).movedim(0, axis).contiguous()
    if (c0, c1) != (0, n_cap):
        if packed is not None:
            packed = distributed.gather_blocks(packed)
        else:
            cap_emb = distributed.gather_blocks(cap_emb)
    if packed is not None:
        cap_emb = PackedWords(packed, lengths)
    # The caption batches' transients (GRU outputs of varying width, 10-50 MB each) leave
    # free but resident heap behind (about 0.1-0.2 GB at COCO 5K) under the memory that
    # scoring adds; hand it back to the OS before scoring starts.
    trim_heap()
    logger.info(
        "encoded %s/%s: %d images, %d captions (L_max %d)", data.name, data.split, n_img, n_cap,
        l_max,
    )  # fmt: skip
    return EncodedSplit(
        img_emb=img_emb,
        cap_emb=cap_emb,
        lengths=lengths,
        caption_to_image=np.asarray(data.caption_to_image, dtype=np.int64),
        name=str(data.name),
        split=str(data.split),
        image_axis=axis,
    )


def view_reducer(
    eval_score: str, tau: float = 0.1, function: str = "softplus"
) -> Callable[[Tensor], Tensor]:
    """Map raw per-view scores ``(W, a, b)`` to one retrieval score ``(a, b)``.

    ``function`` is the evidence function of the method (``softplus``: paper Eq. 3; ``tanh``:
    the DECL evidence UGNCL trains with by default); the evidence scores below use it.

    * ``"evidence"``: ``mean_w softplus(r_w) / tau``, the mean of the per-view *log* evidence
      (docs/methods/ugncl.md). Each view is ranked exactly as by its evidence
      ``exp(softplus(r)/tau)``, but no view dominates the mean. This deliberately differs from the
      released code, which averages ``exp`` evidence, so the larger view decides
      (UGNCL's evaluation.py).
    * ``"evidence_mean_exp"``: the released average, in log space:
      ``log(mean_w exp(softplus(r_w)/tau))``; the same ranking as the release without overflow.
    * ``"sigmoid"``: ``mean_w sigmoid(r_w)``.
    * ``"raw"``: ``mean_w r_w``.
    With one view (``W = 1``) the three evidence/raw variants rank identically.
    """
    if eval_score not in EVAL_SCORES:
        raise ValueError(f"eval_score={eval_score!r} is not one of {EVAL_SCORES}")
    if eval_score.startswith("evidence") and not tau > 0:
        raise ValueError(f"tau must be > 0 for evidence scores, got {tau!r}")
    if function not in ("softplus", "tanh"):
        raise ValueError(f"evidence function {function!r} is not one of ('softplus', 'tanh')")
    squash = nn.functional.softplus if function == "softplus" else torch.tanh

    def reduce(raw: Tensor) -> Tensor:
        raw = raw.float()
        if eval_score == "evidence":
            return (squash(raw) / tau).mean(0)
        if eval_score == "evidence_mean_exp":
            log_e = squash(raw) / tau
            return torch.logsumexp(log_e, dim=0) - math.log(raw.shape[0])
        if eval_score == "sigmoid":
            return torch.sigmoid(raw).mean(0)
        return raw.mean(0)

    return reduce


#: The arithmetic of an evaluation (``eval.precision``).
EVAL_PRECISIONS = ("fp32", "bf16", "tf32")


@contextlib.contextmanager
def eval_precision(precision: str, device: torch.device | str) -> Iterator[None]:
    """Run an evaluation's encoding and scoring in ``precision`` on ``device``.

    ``fp32``: as is. ``bf16``: autocast to bfloat16 (each scored block is cast to float32
    before the view reduction, so evidence and ranks are computed in float32). ``tf32``:
    float32 tensors with TF32 matrix products on CUDA (``torch.set_float32_matmul_precision
    ("high")``, restored afterwards); elsewhere the same as ``fp32``.
    """
    if precision not in EVAL_PRECISIONS:
        raise ValueError(f"eval precision must be one of {EVAL_PRECISIONS}, got {precision!r}")
    device = torch.device(device)
    if precision == "bf16":
        with torch.autocast(device.type, dtype=torch.bfloat16):
            yield
        return
    if precision == "tf32" and device.type == "cuda":
        before = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision("high")
        try:
            yield
        finally:
            torch.set_float32_matmul_precision(before)
        return
    yield


def score_matrix(
    model: nn.Module,
    encoded: EncodedSplit,
    *,
    score: Callable[[Tensor], Tensor] | None = None,
    eval_score: str = "evidence",
    tau: float = 0.1,
    device: torch.device | str | None = None,
    memory_budget_bytes: int | None = None,
    unit_scores: bool = False,
) -> np.ndarray:
    """Score every (image, caption) pair of an encoded split, shard by shard.

    Args:
        model: the model that produced ``encoded`` (its ``score_all_pairs`` scores the shards).
        encoded: output of :func:`encode_split`.
        score: raw (W, a, b) -> (a, b) retrieval score, e.g. a method's ``retrieval_score``;
            None -> ``view_reducer(eval_score, tau)``.
        eval_score, tau: see :func:`view_reducer` (used when ``score`` is None).
        device: where shards are scored. ``score_all_pairs`` runs on the model's parameter
            device, so this only checks that they agree (move the model first).
        memory_budget_bytes: working-memory budget per shard (default: the model's).
        unit_scores: ``score`` reads each shard as ``model.unit_scores(raw)`` (a method's
            ``reads_unit_scores``: CLIP's cosine instead of its logit-scaled cosine).

    Returns:
        ``(n_img, n_cap)`` float32 scores, rows images, columns captions.
    """
    reduce = score if score is not None else view_reducer(eval_score, tau)
    if unit_scores:
        reduce = _after_unit_scores(model, reduce)
    # The matrix stays on the scoring device, block after block, and is copied to the host
    # once below: a copy per block would make the host wait for the device at every block.
    kwargs: dict = {"view_reduce": reduce, "out_device": _model_device(model)}
    if memory_budget_bytes is not None:
        kwargs["memory_budget_bytes"] = int(memory_budget_bytes)
    if device is not None and not _same_device(torch.device(device), _model_device(model)):
        raise ValueError(
            f"score_matrix was asked to run on {torch.device(device)} but the model is on "
            f"{_model_device(model)}; move the model with model.to(device) first"
        )
    # Several processes: each rank scores a contiguous block of image rows (the all-pairs
    # cost, 125M SGRAF pairs at COCO 5K, is split over the ranks) and the blocks are joined,
    # so every rank ranks the same matrix.
    n_img = encoded.num_images
    start, stop = distributed.row_block(n_img)
    img_emb = _image_block(encoded.img_emb, encoded.image_axis, start, stop, n_img)
    with eval_mode(model):
        scores = model.score_all_pairs(img_emb, encoded.cap_emb, encoded.lengths, **kwargs)
    scores = distributed.gather_rows(scores.float().cpu(), n_img).numpy()
    expected = (encoded.num_images, encoded.num_captions)
    if scores.shape != expected:
        raise RuntimeError(f"score_all_pairs returned shape {scores.shape}, expected {expected}")
    return scores


def _after_unit_scores(
    model: nn.Module, score: Callable[[Tensor], Tensor]
) -> Callable[[Tensor], Tensor]:
    """``score`` of ``model``'s unit scores: raw (W, a, b) -> ``score(model.unit_scores(raw))``."""

    def reduce(raw: Tensor) -> Tensor:
        return score(model.unit_scores(raw))

    return reduce


def _image_block(
    img_emb: Tensor | StreamedImages, axis: int, start: int, stop: int, n: int
) -> Tensor | StreamedImages:
    """Images ``[start, stop)`` of an encoded split (all of them: the object itself)."""
    if start == 0 and stop == n:
        return img_emb
    if isinstance(img_emb, StreamedImages):
        return img_emb.window(start, stop)
    return img_emb.narrow(axis, start, stop - start)


def ensemble(scores: Sequence[np.ndarray]) -> np.ndarray:
    """Mean of several ``(n_img, n_cap)`` score matrices (e.g. SGR + SAF = "SGRAF", UGNCL*).

    The matrices should use the same ``eval_score``; with ``"evidence"`` this averages log
    evidence (the release averages exp evidence of its four view/model matrices).
    """
    mats = [np.asarray(s) for s in scores]
    if not mats:
        raise ValueError("ensemble needs at least one score matrix")
    shapes = {m.shape for m in mats}
    if len(shapes) != 1:
        raise ValueError(
            f"score matrices disagree in shape {sorted(shapes)}; ensemble models that were "
            "evaluated on the same split"
        )
    out = np.zeros(mats[0].shape, dtype=np.float32)
    for m in mats:
        out += m.astype(np.float32, copy=False)
    out /= len(mats)
    return out


def default_protocol(dataset_name: str, split: str, num_images: int | None = None) -> str:
    """The published protocol of a dataset split, looked up in :mod:`precomputed.catalog`.

    COCO ``testall`` (5K images), or a COCO ``test`` of 5000 images (the NPC/SDD/OSA raw-image
    layout keeps the 5K test set under that name) -> ``"coco5fold"`` (five 1K folds and the 5K
    matrix); Flickr30K, CC152K and CC120K ``test`` and COCO's 1K ``test`` -> ``"1k"``; every
    other split (dev splits, the synthetic world) and every split of a name the catalog does
    not hold -> ``"full"`` (nothing is guessed from the name's letters).
    """
    return split_protocol(dataset_name, split, num_images)


def evaluate_scores(
    scores: np.ndarray | Tensor,
    caption_to_image: np.ndarray | Tensor,
    *,
    protocol: str = "full",
    ties: str = "random",
) -> dict[str, dict[str, float]]:
    """Apply a protocol to a score matrix.

    Args:
        scores: ``(n_img, n_cap)`` scores.
        caption_to_image: ``(n_cap,)`` clean caption->image map.
        protocol: ``"full"`` (the whole matrix), ``"1k"`` (the whole matrix, expected to be
            1000 images: Flickr30K test, CC152K test) or ``"coco5fold"`` (COCO ``testall``: the
            mean of five 1000-image folds, and the full 5K matrix).
        ties: tie rule of :mod:`ugncl.core.metrics` (default: expected ranks and recalls
            under random tie-breaking, so a collapsed model scores chance).

    Returns:
        ``{section: metrics}`` with metrics keyed by :data:`ugncl.core.metrics.METRIC_KEYS`.
        ``"full"`` -> ``{"full": ...}``; ``"1k"`` -> ``{"1k": ...}``; ``"coco5fold"`` ->
        ``{"5fold": mean over folds, "5k": full matrix, "fold0": ..., ..., "fold4": ...}``.
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol={protocol!r} is not one of {PROTOCOLS}")
    n_img, n_cap = tuple(scores.shape)
    if protocol == "full":
        return {"full": retrieval_metrics(scores, caption_to_image, ties=ties)}
    if protocol == "1k":
        if n_img != 1000:
            logger.warning("protocol '1k' on %d images (published 1K test sets have 1000)", n_img)
        return {"1k": retrieval_metrics(scores, caption_to_image, ties=ties)}

    if n_cap % n_img:
        raise ValueError(
            f"coco5fold needs the same number of captions per image, got {n_cap} captions for "
            f"{n_img} images"
        )
    if n_img != 5000:
        logger.warning("protocol 'coco5fold' on %d images (COCO testall has 5000)", n_img)
    folds = fold_metrics(scores, caption_to_image, coco_folds(n_img, n_cap // n_img, 5), ties=ties)
    out: dict[str, dict[str, float]] = {"5fold": folds["mean"]}
    out["5k"] = retrieval_metrics(scores, caption_to_image, ties=ties)
    out.update({f"fold{i}": m for i, m in enumerate(folds["folds"])})
    return out


def evaluate_models(
    models: Sequence[nn.Module],
    split: EvalData | PrecomputedSplit,
    *,
    protocol: str | None = None,
    score: Callable[[Tensor], Tensor] | None = None,
    eval_score: str = "evidence",
    tau: float = 0.1,
    batch_size: int = 128,
    device: torch.device | str | None = None,
    memory_budget_bytes: int | None = None,
    ties: str = "random",
    unit_scores: bool = False,
    precision: str = "fp32",
) -> tuple[dict[str, dict[str, float]], np.ndarray]:
    """Encode ``split`` with each model, average their score matrices and evaluate.

    Args:
        models: one model, or several whose score matrices are averaged (SGR + SAF).
        split: the split to rank (its clean caption->image map is the ground truth).
        protocol: see :func:`evaluate_scores`; ``None`` -> :func:`default_protocol`.
        ties: tie rule, see :func:`evaluate_scores`.
        score, eval_score, tau, memory_budget_bytes, unit_scores: see :func:`score_matrix`.
        batch_size, device: see :func:`encode_split`.
        precision: ``fp32`` | ``bf16`` | ``tf32`` (:func:`eval_precision`).

    Returns:
        ``(results, scores)``: the protocol's ``{section: metrics}`` and the ``(n_img, n_cap)``
        ensembled score matrix.
    """
    if not models:
        raise ValueError("evaluate_models needs at least one model")
    data = as_eval_data(split)
    protocol = protocol or default_protocol(data.name, data.split, data.num_images)
    mats = []
    for model in models:
        # Streamed images: the region embeddings of a whole split are never held at once.
        stream = bool(getattr(model, "accepts_image_source", False))
        with eval_precision(precision, device if device is not None else _model_device(model)):
            encoded = encode_split(
                model, data, batch_size=batch_size, device=device, stream_images=stream
            )
            mats.append(
                score_matrix(
                    model,
                    encoded,
                    score=score,
                    eval_score=eval_score,
                    tau=tau,
                    unit_scores=unit_scores,
                    device=device,
                    memory_budget_bytes=memory_budget_bytes,
                )
            )
        del encoded  # free one model's embeddings before encoding with the next
    scores = ensemble(mats)
    results = evaluate_scores(scores, data.caption_to_image, protocol=protocol, ties=ties)
    return results, scores


def as_eval_data(data: EvalData | PrecomputedSplit) -> EvalData:
    """An :class:`EvalData` as is; an opened precomputed split wrapped."""
    if isinstance(data, PrecomputedSplit):
        return PrecomputedEvalData(data)
    return data


class Evaluator:
    """Ranks the validation and test splits of a run with the method's retrieval score.

    The trainer calls :meth:`evaluate` with ``"val"`` (the full dev matrix) or ``"test"`` (the
    dataset's published protocol, :func:`default_protocol`); records are named after the
    split, e.g. ``dev``, ``test``, ``testall/5fold``.

    Args:
        val: the validation split, or None (no per-epoch validation).
        test: the test split, or a zero-argument function that opens it on first use.
        score: raw (W, a, b) -> (a, b), e.g. ``method.retrieval_score``.
        batch_size: images or captions per encoding pass.
        memory_budget_bytes: per-shard budget of all-pairs scoring (None: the model's).
        unit_scores: ``score`` reads unit scores (``method.reads_unit_scores``; see
            :func:`score_matrix`).
        models: ``model -> the models whose score matrices are averaged``
            (``method.evaluation_models``; None: the model alone).
        precision: ``eval.precision`` (:func:`eval_precision`).
    """

    def __init__(
        self,
        *,
        val: EvalData | PrecomputedSplit | None,
        test: EvalData | PrecomputedSplit | Callable[[], EvalData | PrecomputedSplit] | None,
        score: Callable[[Tensor], Tensor],
        batch_size: int = 128,
        memory_budget_bytes: int | None = None,
        unit_scores: bool = False,
        models: Callable[[nn.Module], Sequence[nn.Module]] | None = None,
        precision: str = "fp32",
    ) -> None:
        self.precision = precision
        self._splits: dict[str, object] = {"val": val, "test": test}
        self.models = models
        self.score = score
        self.unit_scores = unit_scores
        self.batch_size = batch_size
        self.memory_budget_bytes = memory_budget_bytes
        #: The last test's per-query hit probabilities at K = 1, 5, 10 over the whole test
        #: matrix (``{"i2t": (n_img, 3), "t2i": (n_cap, 3)}``, :func:`query_hits`), kept
        #: for the run folder: a comparison's bootstrap over test queries reads them.
        self.test_query_hits: dict[str, np.ndarray] | None = None

    @property
    def has_val(self) -> bool:
        return self._splits["val"] is not None

    def data(self, which: str) -> EvalData:
        """The ``which`` split ("val" | "test"), opened on first use."""
        source = self._splits.get(which)
        if source is None:
            raise ValueError(f"this evaluator has no {which!r} split")
        if callable(source) and not isinstance(source, (EvalData, PrecomputedSplit)):
            source = source()
        data = as_eval_data(source)
        self._splits[which] = data
        return data

    def evaluate(self, model: nn.Module, which: str) -> dict[str, dict[str, float]]:
        """``{record split name: metrics}``; the headline section first."""
        data = self.data(which)
        protocol = (
            "full" if which == "val" else default_protocol(data.name, data.split, data.num_images)
        )
        results, scores = evaluate_models(
            [model] if self.models is None else list(self.models(model)),
            data,
            protocol=protocol,
            score=self.score,
            batch_size=self.batch_size,
            memory_budget_bytes=self.memory_budget_bytes,
            unit_scores=self.unit_scores,
            precision=self.precision,
        )
        if which == "test":
            i2t, t2i = query_hits(scores, data.caption_to_image)
            self.test_query_hits = {"i2t": i2t, "t2i": t2i}
        return {
            data.split if section in {"full", "1k"} else f"{data.split}/{section}": metrics
            for section, metrics in results.items()
        }


def metric_table(results: dict[str, dict[str, float]]) -> str:
    """Plain-text table of ``{section: metrics}`` (one row per section, all metric keys)."""
    header = ["section", *METRIC_KEYS]
    rows = [
        [name] + [f"{metrics[k]:.2f}" for k in METRIC_KEYS] for name, metrics in results.items()
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in [header, *rows])
