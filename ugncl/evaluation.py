"""Evaluation: encode a split once, score all pairs in shards, ensemble, apply a dataset protocol.

The pipeline for one split and one or more checkpoints is::

    encoded = encode_split(model, split, device=device)            # once per model
    scores = score_matrix(model, encoded, eval_score="evidence")   # (n_img, n_cap) float32
    scores = ensemble([scores_sgr, scores_saf])                    # "SGRAF" / UGNCL*
    results = evaluate_scores(scores, encoded.caption_to_image, protocol="coco5fold")

Every image is encoded once (the released code encodes each image once per caption, in
float64; reference_implementations.md section 4.6), embeddings are kept in float32 on the CPU,
and the metrics come from :mod:`ugncl.metrics` (pure functions of the score matrix and the clean
caption->image map).
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from precomputed.collate import pad_captions
from precomputed.dataset import PrecomputedSplit
from sgraf.model import score_all_pairs
from ugncl.metrics import METRIC_KEYS, coco_folds, fold_metrics, retrieval_metrics

logger = logging.getLogger(__name__)

__all__ = [
    "EVAL_SCORES",
    "PROTOCOLS",
    "EncodedSplit",
    "default_protocol",
    "encode_split",
    "ensemble",
    "eval_mode",
    "evaluate_models",
    "evaluate_scores",
    "metric_table",
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
        img_emb: ``(W, n_img, R, E)`` region embeddings per image view (each image once).
        cap_emb: ``(n_cap, L_max, E)`` word embeddings, zero beyond each caption's length.
        lengths: ``(n_cap,)`` int64 caption lengths (tokens incl. ``<start>``/``<end>``).
        caption_to_image: ``(n_cap,)`` int64 *clean* caption->image map used for ranking.
        name: dataset name (e.g. ``"f30k_precomp"``).
        split: split name (e.g. ``"test"``).
    """

    img_emb: Tensor
    cap_emb: Tensor
    lengths: Tensor
    caption_to_image: np.ndarray
    name: str = ""
    split: str = ""

    @property
    def num_images(self) -> int:
        return int(self.img_emb.shape[1])

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


def encode_split(
    model: nn.Module,
    split: PrecomputedSplit,
    *,
    batch_size: int = 128,
    device: torch.device | str | None = None,
) -> EncodedSplit:
    """Encode every image once and every caption once.

    Args:
        model: an ``sgraf.SGRAF`` (or any module with ``encode_images`` / ``encode_captions``),
            already on ``device``.
        split: the opened split; images are read with contiguous ``features.slice`` calls.
        batch_size: images or captions per forward pass.
        device: where the forward passes run (default: the model's parameter device).

    Returns:
        The split's embeddings on the CPU in float32 (see :class:`EncodedSplit`).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    device = torch.device(device) if device is not None else _model_device(model)
    n_img, n_cap = int(split.num_images), int(split.num_captions)
    lengths = torch.as_tensor(np.asarray(split.tokens.lengths), dtype=torch.int64)
    if lengths.shape != (n_cap,):
        raise ValueError(f"split.tokens.lengths has shape {tuple(lengths.shape)}, want ({n_cap},)")
    l_max = int(lengths.max())

    img_emb: Tensor | None = None
    cap_emb: Tensor | None = None
    with eval_mode(model):
        for a in range(0, n_img, batch_size):
            b = min(a + batch_size, n_img)
            feats = torch.from_numpy(np.require(split.features.slice(a, b), np.float32, ["C", "W"]))
            out = model.encode_images(feats.to(device=device, dtype=torch.float32))  # (W,B,R,E)
            if img_emb is None:
                img_emb = torch.empty((out.shape[0], n_img, *out.shape[2:]), dtype=torch.float32)
            img_emb[:, a:b] = out.float().cpu()
        for a in range(0, n_cap, batch_size):
            b = min(a + batch_size, n_cap)
            ids, lens = pad_captions([np.asarray(split.tokens[k]) for k in range(a, b)])
            out = model.encode_captions(ids.to(device), lens.to(device))  # (B, L_b, E)
            if cap_emb is None:
                cap_emb = torch.zeros((n_cap, l_max, out.shape[-1]), dtype=torch.float32)
            cap_emb[a:b, : out.shape[1]] = out.float().cpu()
    logger.info(
        "encoded %s/%s: %d images x %d views, %d captions (L_max %d)",
        split.name,
        split.split,
        n_img,
        img_emb.shape[0],
        n_cap,
        l_max,
    )
    return EncodedSplit(
        img_emb=img_emb,
        cap_emb=cap_emb,
        lengths=lengths,
        caption_to_image=np.asarray(split.true_image, dtype=np.int64),
        name=str(split.name),
        split=str(split.split),
    )


def view_reducer(eval_score: str, tau: float = 0.1) -> Callable[[Tensor], Tensor]:
    """Map raw per-view scores ``(W, a, b)`` to one retrieval score ``(a, b)``.

    * ``"evidence"``: ``mean_w softplus(r_w) / tau``, the mean of the per-view *log* evidence
      (UGNCL_METHOD.md section 10). Each view is ranked exactly as by its evidence
      ``exp(softplus(r)/tau)``, but no view dominates the mean. This deliberately differs from the
      released code, which averages ``exp`` evidence, so the larger view decides
      (reference_implementations.md section 6.8).
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

    def reduce(raw: Tensor) -> Tensor:
        raw = raw.float()
        if eval_score == "evidence":
            return (nn.functional.softplus(raw) / tau).mean(0)
        if eval_score == "evidence_mean_exp":
            log_e = nn.functional.softplus(raw) / tau
            return torch.logsumexp(log_e, dim=0) - math.log(raw.shape[0])
        if eval_score == "sigmoid":
            return torch.sigmoid(raw).mean(0)
        return raw.mean(0)

    return reduce


def score_matrix(
    model: nn.Module,
    encoded: EncodedSplit,
    *,
    eval_score: str = "evidence",
    tau: float = 0.1,
    device: torch.device | str | None = None,
    memory_budget_bytes: int | None = None,
) -> np.ndarray:
    """Score every (image, caption) pair of an encoded split, shard by shard.

    Args:
        model: the model that produced ``encoded`` (its similarity head scores the shards).
        encoded: output of :func:`encode_split`.
        eval_score: per-view transform before averaging over views (see :func:`view_reducer`).
        tau: evidence temperature (UGNCL tau = 0.1).
        device: where shards are scored. ``sgraf.score_all_pairs`` runs on the model's
            parameter device, so this only checks that they agree (move the model first).
        memory_budget_bytes: working-memory budget per shard (default: ``sgraf``'s).

    Returns:
        ``(n_img, n_cap)`` float32 scores, rows images, columns captions.
    """
    reduce = view_reducer(eval_score, tau)
    kwargs: dict = {"view_reduce": reduce, "out_device": "cpu"}
    if memory_budget_bytes is not None:
        kwargs["memory_budget_bytes"] = int(memory_budget_bytes)
    if device is not None and not _same_device(torch.device(device), _model_device(model)):
        raise ValueError(
            f"score_matrix was asked to run on {torch.device(device)} but the model is on "
            f"{_model_device(model)}; move the model with model.to(device) first"
        )
    with eval_mode(model):
        scores = score_all_pairs(model, encoded.img_emb, encoded.cap_emb, encoded.lengths, **kwargs)
    scores = scores.float().cpu().numpy()
    expected = (encoded.num_images, encoded.num_captions)
    if scores.shape != expected:
        raise RuntimeError(f"score_all_pairs returned shape {scores.shape}, expected {expected}")
    return scores


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


def default_protocol(dataset_name: str, split: str) -> str:
    """The published protocol of a dataset split.

    COCO ``testall`` (5K images) -> ``"coco5fold"`` (five 1K folds and the 5K matrix);
    Flickr30K ``test`` and CC152K ``test`` (1K images each) and COCO ``test`` -> ``"1k"``;
    anything else (dev splits, the synthetic world) -> ``"full"``.
    """
    name, split = dataset_name.lower(), split.lower()
    if "coco" in name and split == "testall":
        return "coco5fold"
    if split == "test" and any(
        tag in name for tag in ("coco", "f30k", "flickr", "cc152k", "cc120k")
    ):
        return "1k"
    return "full"


def evaluate_scores(
    scores: np.ndarray | Tensor,
    caption_to_image: np.ndarray | Tensor,
    *,
    protocol: str = "full",
) -> dict[str, dict[str, float]]:
    """Apply a protocol to a score matrix.

    Args:
        scores: ``(n_img, n_cap)`` scores.
        caption_to_image: ``(n_cap,)`` clean caption->image map.
        protocol: ``"full"`` (the whole matrix), ``"1k"`` (the whole matrix, expected to be
            1000 images: Flickr30K test, CC152K test) or ``"coco5fold"`` (COCO ``testall``: the
            mean of five 1000-image folds, and the full 5K matrix).

    Returns:
        ``{section: metrics}`` with metrics keyed by :data:`ugncl.metrics.METRIC_KEYS`.
        ``"full"`` -> ``{"full": ...}``; ``"1k"`` -> ``{"1k": ...}``; ``"coco5fold"`` ->
        ``{"5fold": mean over folds, "5k": full matrix, "fold0": ..., ..., "fold4": ...}``.
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol={protocol!r} is not one of {PROTOCOLS}")
    n_img, n_cap = tuple(scores.shape)
    if protocol == "full":
        return {"full": retrieval_metrics(scores, caption_to_image)}
    if protocol == "1k":
        if n_img != 1000:
            logger.warning("protocol '1k' on %d images (published 1K test sets have 1000)", n_img)
        return {"1k": retrieval_metrics(scores, caption_to_image)}

    if n_cap % n_img:
        raise ValueError(
            f"coco5fold needs the same number of captions per image, got {n_cap} captions for "
            f"{n_img} images"
        )
    if n_img != 5000:
        logger.warning("protocol 'coco5fold' on %d images (COCO testall has 5000)", n_img)
    folds = fold_metrics(scores, caption_to_image, coco_folds(n_img, n_cap // n_img, 5))
    out: dict[str, dict[str, float]] = {"5fold": folds["mean"]}
    out["5k"] = retrieval_metrics(scores, caption_to_image)
    out.update({f"fold{i}": m for i, m in enumerate(folds["folds"])})
    return out


def evaluate_models(
    models: Sequence[nn.Module],
    split: PrecomputedSplit,
    *,
    protocol: str | None = None,
    eval_score: str = "evidence",
    tau: float = 0.1,
    batch_size: int = 128,
    device: torch.device | str | None = None,
    memory_budget_bytes: int | None = None,
) -> tuple[dict[str, dict[str, float]], np.ndarray]:
    """Encode ``split`` with each model, average their score matrices and evaluate.

    Args:
        models: one model, or several whose score matrices are averaged (SGR + SAF).
        split: the split to rank (its clean ``true_image`` map is the ground truth).
        protocol: see :func:`evaluate_scores`; ``None`` -> :func:`default_protocol`.
        eval_score, tau, memory_budget_bytes: see :func:`score_matrix`.
        batch_size, device: see :func:`encode_split`.

    Returns:
        ``(results, scores)``: the protocol's ``{section: metrics}`` and the ``(n_img, n_cap)``
        ensembled score matrix.
    """
    if not models:
        raise ValueError("evaluate_models needs at least one model")
    protocol = protocol or default_protocol(split.name, split.split)
    mats = []
    c2i = None
    for model in models:
        encoded = encode_split(model, split, batch_size=batch_size, device=device)
        c2i = encoded.caption_to_image
        mats.append(
            score_matrix(
                model,
                encoded,
                eval_score=eval_score,
                tau=tau,
                device=device,
                memory_budget_bytes=memory_budget_bytes,
            )
        )
        del encoded  # free one model's embeddings before encoding with the next
    scores = ensemble(mats)
    return evaluate_scores(scores, c2i, protocol=protocol), scores


def metric_table(results: dict[str, dict[str, float]]) -> str:
    """Plain-text table of ``{section: metrics}`` (one row per section, all metric keys)."""
    header = ["section", *METRIC_KEYS]
    rows = [
        [name] + [f"{metrics[k]:.2f}" for k in METRIC_KEYS] for name, metrics in results.items()
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in [header, *rows])
