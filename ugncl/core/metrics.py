"""Retrieval metrics as pure functions of a score matrix and a caption->image map.

Conventions (used by every function here):

* ``scores`` is an ``(n_img, n_cap)`` matrix, rows are images, columns are captions, higher
  means more similar. A ``numpy.ndarray`` or a ``torch.Tensor`` (any device; it is copied to
  the CPU) of a real dtype.
* ``caption_to_image`` is an ``(n_cap,)`` integer array: caption ``k`` describes image
  ``caption_to_image[k]``. For the SCAN/NCR precomputed releases this is ``k // cpi`` with
  ``cpi = 5`` captions per image for Flickr30K and MS-COCO and ``cpi = 1`` for CC152K
  (``precomputed.noise.clean_image_index``). Evaluation always uses the *clean* map, never a
  noisy training index. Every image must own at least one caption.
* Ranks are 0-based: rank 0 means the ground truth is the top candidate.
  i2t: the rank of the best-ranked ground-truth caption of each image (SCAN/NCR ``i2t``).
  t2i: the rank of the single ground-truth image of each caption (SCAN/NCR ``t2i``).
* **Tie rule** (``ties=``, see :data:`TIE_RULES`); the default is ``"random"``, the *expected*
  rank and recall when the ties are broken uniformly at random. With ``g`` candidates scoring
  strictly higher than the ground truth, ``t`` candidates tied with it and ``m`` ground-truth
  items sharing the best ground-truth score (``m = 1`` for t2i), the best ground truth sits at a
  uniformly random place among the ``t + m`` tied items, so

  - expected rank ``= g + t / (m + 1)``;
  - ``P(rank < K) = 1 - C(t, j) / C(t + m, j)`` with ``j = K - g`` (0 if ``j <= 0``, 1 if
    ``j > t``), and R@K is the mean of these probabilities.

  Why this rule: a model that cannot tell candidates apart must not score. A constant score
  matrix (a collapsed encoder, every caption tokenised to the same ids) gets exactly the chance
  recall ``K / n`` and rank ``(n - 1) / 2``, while the old optimistic rule (strictly-higher
  counting, ties favour the ground truth) reported R@1 100 for it. The pessimistic rule
  (``"pessimistic"``, every tie counts against the ground truth) also cannot reward a
  degenerate model, but it gives 0 instead of chance and penalises genuine ties of a good
  model (fp16 scores, quantised features); the expected rank is unbiased and agrees with both
  whenever there are no exact ties, which is the case with continuous scores.
  ``"release"`` reproduces the released code (``numpy.argsort`` of each row, read in
  descending order: ties resolved by sort order, so the result depends on the column order);
  ``"optimistic"`` is the previous strictly-higher rule, kept only to reproduce old numbers.
* R@K is in percent; ``medr = floor(median(rank)) + 1`` and ``meanr = mean(rank) + 1`` (1-based,
  as in SCAN/NCR; under ``"random"`` of the expected ranks); ``rsum`` is the sum of the six
  recalls.

The ranks are computed chunk by chunk (rows of the matrix) by counting candidates that beat the
ground-truth score: no dense label matrix and no full ``argsort`` of the matrix (the released
code allocates both: NPC's and NCR's evaluation.py).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import numpy as np
import torch

logger = logging.getLogger(__name__)

__all__ = [
    "METRIC_KEYS",
    "TIE_RULES",
    "coco_folds",
    "fold_metrics",
    "i2t_ranks",
    "query_hits",
    "recall_at",
    "retrieval_metrics",
    "t2i_ranks",
]

#: The metric keys returned by :func:`retrieval_metrics`, in table order.
METRIC_KEYS: tuple[str, ...] = (
    "i2t/R@1",
    "i2t/R@5",
    "i2t/R@10",
    "t2i/R@1",
    "t2i/R@5",
    "t2i/R@10",
    "rsum",
    "i2t/medr",
    "t2i/medr",
    "i2t/meanr",
    "t2i/meanr",
)

#: Tie rules accepted by the ``ties=`` argument (the first is the default; see the module doc).
TIE_RULES: tuple[str, ...] = ("random", "pessimistic", "release", "optimistic")

# Elements of the boolean comparison block allocated per chunk (16M bools = 16 MiB).
_CHUNK_ELEMENTS = 1 << 24

ScoreMatrix = np.ndarray | torch.Tensor


def _as_score_array(scores: ScoreMatrix) -> np.ndarray:
    """Return ``scores`` as a 2-D real numpy array (no copy when already one)."""
    if isinstance(scores, torch.Tensor):
        tensor = scores.detach()
        if not (tensor.dtype.is_floating_point or tensor.dtype in (torch.int32, torch.int64)):
            raise TypeError(f"scores must be a real tensor, got dtype {tensor.dtype}")
        if tensor.dtype in (torch.float16, torch.bfloat16):
            tensor = tensor.float()
        array = tensor.cpu().numpy()
    else:
        array = np.asarray(scores)
    if array.ndim != 2:
        raise ValueError(
            f"scores must be a 2-D (n_img, n_cap) matrix, got shape {tuple(array.shape)}"
        )
    if not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
        raise TypeError(f"scores must have a real dtype, got {array.dtype}")
    if array.shape[0] == 0 or array.shape[1] == 0:
        raise ValueError(f"scores is empty (shape {array.shape}); nothing to rank")
    if np.issubdtype(array.dtype, np.floating) and not np.isfinite(array).all():
        bad = np.argwhere(~np.isfinite(array))[0]
        raise ValueError(
            f"scores contains non-finite values (first at image {bad[0]}, caption {bad[1]}: "
            f"{array[bad[0], bad[1]]}); ranks would be meaningless. Check the model outputs."
        )
    return array


def _check_caption_to_image(
    caption_to_image: np.ndarray | torch.Tensor | Sequence[int], n_img: int, n_cap: int
) -> np.ndarray:
    """Validate the caption->image map against the matrix shape; return it as int64.

    Raises:
        ValueError: wrong length, indices outside ``[0, n_img)``, or an image without captions.
    """
    if isinstance(caption_to_image, torch.Tensor):
        caption_to_image = caption_to_image.detach().cpu().numpy()
    c2i = np.asarray(caption_to_image)
    if c2i.ndim != 1 or c2i.shape[0] != n_cap:
        raise ValueError(
            f"caption_to_image must have shape (n_cap,) = ({n_cap},) to match scores of shape "
            f"({n_img}, {n_cap}), got {tuple(c2i.shape)}. Pass one image index per caption "
            "column (usually np.arange(n_cap) // captions_per_image)."
        )
    if not np.issubdtype(c2i.dtype, np.integer):
        raise ValueError(f"caption_to_image must hold integers, got dtype {c2i.dtype}")
    c2i = c2i.astype(np.int64, copy=False)
    out = (c2i < 0) | (c2i >= n_img)
    if out.any():
        k = int(np.flatnonzero(out)[0])
        raise ValueError(
            f"caption_to_image[{k}] = {int(c2i[k])} is outside [0, {n_img}) "
            f"({int(out.sum())} captions out of range); the score matrix has {n_img} image rows."
        )
    counts = np.bincount(c2i, minlength=n_img)
    if (counts == 0).any():
        missing = np.flatnonzero(counts == 0)
        raise ValueError(
            f"{missing.size} image(s) have no caption in caption_to_image (first: image "
            f"{int(missing[0])}); i2t recall is undefined for them. Drop those rows from the "
            "score matrix or fix the caption->image map."
        )
    return c2i


def _rows_per_chunk(n_cols: int) -> int:
    return max(1, _CHUNK_ELEMENTS // max(1, n_cols))


def _check_ties(ties: str) -> str:
    if ties not in TIE_RULES:
        raise ValueError(f"ties={ties!r} is not one of {TIE_RULES}")
    return ties


def _i2t_counts(s: np.ndarray, c2i: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per image: (captions strictly above the best GT caption, impostors tied with it, GT
    captions tied at the best GT score), each ``(n_img,)`` int64."""
    n_img, n_cap = s.shape
    # Captions grouped by image: the GT captions of image i are order[starts[i]:starts[i+1]].
    order = np.argsort(c2i, kind="stable")
    counts = np.bincount(c2i, minlength=n_img)
    starts = np.concatenate(([0], np.cumsum(counts)))

    above = np.empty(n_img, dtype=np.int64)
    tied = np.empty(n_img, dtype=np.int64)
    gt_tied = np.empty(n_img, dtype=np.int64)
    step = _rows_per_chunk(n_cap)
    for a in range(0, n_img, step):
        b = min(a + step, n_img)
        block = s[a:b]
        cols = order[starts[a] : starts[b]]
        rows = np.repeat(np.arange(b - a), counts[a:b])
        gt_scores = block[rows, cols]
        offsets = starts[a:b] - starts[a]
        best_gt = np.maximum.reduceat(gt_scores, offsets)
        # No GT caption can beat the best GT score, so this counts impostors only.
        above[a:b] = np.count_nonzero(block > best_gt[:, None], axis=1)
        gt_at_best = np.add.reduceat((gt_scores == best_gt[rows]).astype(np.int64), offsets)
        gt_tied[a:b] = gt_at_best
        tied[a:b] = np.count_nonzero(block == best_gt[:, None], axis=1) - gt_at_best
    return above, tied, gt_tied


def _t2i_counts(s: np.ndarray, c2i: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per caption: (images strictly above the GT image, impostor images tied with it, 1)."""
    n_img, n_cap = s.shape
    gt = s[c2i, np.arange(n_cap)]
    above = np.zeros(n_cap, dtype=np.int64)
    tied = np.full(n_cap, -1, dtype=np.int64)  # the GT image itself is always "tied"
    step = _rows_per_chunk(n_cap)
    # Walk contiguous row blocks (cheap for a C-ordered matrix) and accumulate per column.
    for a in range(0, n_img, step):
        block = s[a : a + step]
        above += np.count_nonzero(block > gt[None, :], axis=0)
        tied += np.count_nonzero(block == gt[None, :], axis=0)
    return above, tied, np.ones(n_cap, dtype=np.int64)


def _release_ranks(s: np.ndarray, gt_sets: list[np.ndarray] | np.ndarray) -> np.ndarray:
    """The released code's ranks: ``argsort`` of each row read in descending order, the rank of
    a row's best-placed ground truth (SCAN/NCR ``i2t``/``t2i``); ``s`` rows are the queries."""
    ranks = np.empty(s.shape[0], dtype=np.int64)
    for i in range(s.shape[0]):
        inds = np.argsort(s[i])[::-1]
        position = np.empty_like(inds)
        position[inds] = np.arange(inds.size)
        ranks[i] = position[np.atleast_1d(gt_sets[i])].min()
    return ranks


def _ranks_from_counts(
    above: np.ndarray, tied: np.ndarray, gt_tied: np.ndarray, ties: str
) -> np.ndarray:
    if ties == "random":
        return above + tied / (gt_tied + 1.0)
    if ties == "pessimistic":
        return above + tied
    return above  # optimistic


def _hit_probability(
    above: np.ndarray, tied: np.ndarray, gt_tied: np.ndarray, k: int
) -> np.ndarray:
    """``P(rank < k)`` of each query when the ties are broken uniformly at random.

    The best GT is above rank ``k`` unless all of the first ``j = k - above`` places of the
    tied block go to impostors: ``P(miss) = C(t, j) / C(t + m, j) = prod_{i<j} (t-i)/(t+m-i)``.
    """
    j = k - above
    miss = np.ones(above.shape, dtype=np.float64)
    # j <= 0: a certain miss; j > t: a certain hit; else the product above (j < k terms).
    for i in range(int(k)):
        active = (i < j) & (i <= tied)
        num = np.where(active, tied - i, 1).astype(np.float64)
        den = np.where(active, tied + gt_tied - i, 1).astype(np.float64)
        miss *= num / den
    return np.where(j <= 0, 0.0, 1.0 - miss)


def i2t_ranks(
    scores: ScoreMatrix, caption_to_image: np.ndarray | torch.Tensor, *, ties: str = "random"
) -> np.ndarray:
    """Image-to-text rank of the best-ranked ground-truth caption of every image.

    Args:
        scores: ``(n_img, n_cap)`` score matrix.
        caption_to_image: ``(n_cap,)`` image index of each caption.
        ties: tie rule (:data:`TIE_RULES`, module doc).

    Returns:
        ``(n_img,)``, 0-based: float64 expected ranks for ``"random"``, int64 otherwise.
    """
    s = _as_score_array(scores)
    n_img, n_cap = s.shape
    c2i = _check_caption_to_image(caption_to_image, n_img, n_cap)
    if _check_ties(ties) == "release":
        order = np.argsort(c2i, kind="stable")
        starts = np.concatenate(([0], np.cumsum(np.bincount(c2i, minlength=n_img))))
        return _release_ranks(s, [order[starts[i] : starts[i + 1]] for i in range(n_img)])
    return _ranks_from_counts(*_i2t_counts(s, c2i), ties)


def t2i_ranks(
    scores: ScoreMatrix, caption_to_image: np.ndarray | torch.Tensor, *, ties: str = "random"
) -> np.ndarray:
    """Text-to-image rank of the ground-truth image of every caption.

    Args:
        scores: ``(n_img, n_cap)`` score matrix.
        caption_to_image: ``(n_cap,)`` image index of each caption.
        ties: tie rule (:data:`TIE_RULES`, module doc).

    Returns:
        ``(n_cap,)``, 0-based: float64 expected ranks for ``"random"``, int64 otherwise.
    """
    s = _as_score_array(scores)
    n_img, n_cap = s.shape
    c2i = _check_caption_to_image(caption_to_image, n_img, n_cap)
    if _check_ties(ties) == "release":
        return _release_ranks(np.ascontiguousarray(s.T), c2i)
    return _ranks_from_counts(*_t2i_counts(s, c2i), ties)


def query_hits(
    scores: ScoreMatrix, caption_to_image: np.ndarray | torch.Tensor, ks: Sequence[int] = (1, 5, 10)
) -> tuple[np.ndarray, np.ndarray]:
    """Per-query hit probabilities ``P(rank < K)`` under random tie-breaking, both directions.

    The retrieval metrics are their means (R@K = 100 x the column mean; rSum = 100 x the sum
    of both directions' column means), so a bootstrap over test queries resamples these rows.

    Args:
        scores: ``(n_img, n_cap)`` score matrix.
        caption_to_image: ``(n_cap,)`` image index of each caption.
        ks: cut-offs K.

    Returns:
        ``(i2t, t2i)``: ``(n_img, len(ks))`` and ``(n_cap, len(ks))`` float32 in [0, 1].
    """
    s = _as_score_array(scores)
    c2i = _check_caption_to_image(caption_to_image, *s.shape)
    ks = _check_ks(ks)
    out = []
    for counts in (_i2t_counts(s, c2i), _t2i_counts(s, c2i)):
        out.append(np.stack([_hit_probability(*counts, k) for k in ks], axis=1).astype(np.float32))
    return out[0], out[1]


def recall_at(ranks: np.ndarray, ks: Sequence[int] = (1, 5, 10)) -> dict[int, float]:
    """Recall@K in percent for 0-based ranks.

    Args:
        ranks: ``(N,)`` 0-based ranks.
        ks: cut-offs K (positive integers).

    Returns:
        ``{K: 100 * mean(ranks < K)}``.
    """
    r = np.asarray(ranks)
    if r.ndim != 1 or r.size == 0:
        raise ValueError(f"ranks must be a non-empty 1-D array, got shape {r.shape}")
    out: dict[int, float] = {}
    for k in _check_ks(ks):
        out[k] = 100.0 * float(np.count_nonzero(r < k)) / r.size
    return out


def _check_ks(ks: Sequence[int]) -> list[int]:
    for k in ks:
        if int(k) != k or k < 1:
            raise ValueError(f"recall cut-off K must be a positive integer, got {k!r}")
    return [int(k) for k in ks]


def _rank_summary(prefix: str, s: np.ndarray, c2i: np.ndarray, ties: str) -> dict[str, float]:
    if ties in ("release", "optimistic", "pessimistic"):
        ranks = (i2t_ranks if prefix == "i2t" else t2i_ranks)(s, c2i, ties=ties)
        out = {f"{prefix}/R@{k}": v for k, v in recall_at(ranks, (1, 5, 10)).items()}
    else:
        counts = (_i2t_counts if prefix == "i2t" else _t2i_counts)(s, c2i)
        ranks = _ranks_from_counts(*counts, ties)
        out = {
            f"{prefix}/R@{k}": 100.0 * float(np.mean(_hit_probability(*counts, k)))
            for k in (1, 5, 10)
        }
    out[f"{prefix}/medr"] = float(math.floor(np.median(ranks))) + 1.0
    out[f"{prefix}/meanr"] = float(np.mean(ranks)) + 1.0
    return out


def retrieval_metrics(
    scores: ScoreMatrix, caption_to_image: np.ndarray | torch.Tensor, *, ties: str = "random"
) -> dict[str, float]:
    """All retrieval metrics of one score matrix.

    Args:
        scores: ``(n_img, n_cap)`` score matrix (rows images, columns captions).
        caption_to_image: ``(n_cap,)`` image index of each caption (``k // 5`` for
            Flickr30K/COCO, ``k`` for CC152K).
        ties: tie rule (:data:`TIE_RULES`); the default ``"random"`` gives the expected
            metrics under uniformly random tie-breaking, so a constant matrix scores chance.

    Returns:
        Plain floats under exactly the keys of :data:`METRIC_KEYS` (R@K in percent).

    Example:
        >>> import numpy as np
        >>> s = np.array([[0.9, 0.1], [0.2, 0.8]], dtype=np.float32)
        >>> retrieval_metrics(s, np.array([0, 1]))["rsum"]
        600.0
        >>> retrieval_metrics(np.ones((2, 2), dtype=np.float32), np.array([0, 1]))["rsum"]
        300.0
    """
    _check_ties(ties)
    s = _as_score_array(scores)
    c2i = _check_caption_to_image(caption_to_image, *s.shape)
    summary = {**_rank_summary("i2t", s, c2i, ties), **_rank_summary("t2i", s, c2i, ties)}
    summary["rsum"] = sum(summary[f"{d}/R@{k}"] for d in ("i2t", "t2i") for k in (1, 5, 10))
    return {key: summary[key] for key in METRIC_KEYS}


def coco_folds(
    num_images: int = 5000, captions_per_image: int = 5, num_folds: int = 5
) -> list[tuple[slice, slice]]:
    """The published COCO 1K folds of the 5K ``testall`` split (SCAN/NCR ``evalrank(fold5=True)``).

    Fold ``i`` is images ``[1000 i, 1000 (i + 1))`` and captions ``[5000 i, 5000 (i + 1))``
    (in general ``num_images / num_folds`` images and their ``captions_per_image`` captions each).
    Unlike OSA's ``[1000 i : 1000 (i + 1) - 1]`` slicing, no image or caption is dropped.

    Args:
        num_images: images in the full split (5000 for COCO ``testall``).
        captions_per_image: captions per image (5 for COCO).
        num_folds: number of equal folds (5).

    Returns:
        ``num_folds`` pairs ``(image_slice, caption_slice)`` of step 1.
    """
    for name, value in (
        ("num_images", num_images),
        ("captions_per_image", captions_per_image),
        ("num_folds", num_folds),
    ):
        if int(value) != value or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if num_images % num_folds:
        raise ValueError(
            f"num_images={num_images} is not divisible into {num_folds} equal folds; "
            "the COCO 5-fold protocol needs the full 5000-image testall split."
        )
    size = num_images // num_folds
    return [
        (
            slice(i * size, (i + 1) * size),
            slice(i * size * captions_per_image, (i + 1) * size * captions_per_image),
        )
        for i in range(num_folds)
    ]


def fold_metrics(
    scores: ScoreMatrix,
    caption_to_image: np.ndarray | torch.Tensor,
    folds: Sequence[tuple[slice, slice]],
    *,
    ties: str = "random",
) -> dict[str, dict[str, float] | list[dict[str, float]]]:
    """Metrics of each fold's sub-matrix and their mean.

    Each fold only ranks its own images against its own captions; ``caption_to_image`` is
    re-based to the fold's first image.

    Args:
        scores: ``(n_img, n_cap)`` score matrix of the full split.
        caption_to_image: ``(n_cap,)`` image index of each caption in the full split.
        folds: ``(image_slice, caption_slice)`` pairs, e.g. from :func:`coco_folds`.
        ties: tie rule (:data:`TIE_RULES`).

    Returns:
        ``{"mean": {key: mean over folds}, "folds": [metrics of fold 0, ...]}``.

    Raises:
        ValueError: a fold is out of bounds, has a step, or has a caption whose image lies
            outside the fold's images.
    """
    s = _as_score_array(scores)
    n_img, n_cap = s.shape
    c2i = _check_caption_to_image(caption_to_image, n_img, n_cap)
    if len(folds) == 0:
        raise ValueError("folds is empty; pass at least one (image_slice, caption_slice) pair")

    per_fold: list[dict[str, float]] = []
    for i, (img_sl, cap_sl) in enumerate(folds):
        i0, i1 = _check_slice(img_sl, n_img, f"fold {i} image slice")
        c0, c1 = _check_slice(cap_sl, n_cap, f"fold {i} caption slice")
        local = c2i[c0:c1] - i0
        outside = (local < 0) | (local >= i1 - i0)
        if outside.any():
            k = int(np.flatnonzero(outside)[0]) + c0
            raise ValueError(
                f"fold {i}: caption {k} belongs to image {int(c2i[k])}, outside the fold's "
                f"images [{i0}, {i1}). Folds must pair each image block with exactly its "
                "captions (are the captions grouped by image, k // captions_per_image?)."
            )
        try:
            per_fold.append(retrieval_metrics(s[i0:i1, c0:c1], local, ties=ties))
        except ValueError as err:
            raise ValueError(
                f"fold {i} (images [{i0}, {i1}), captions [{c0}, {c1})): {err}"
            ) from err
    mean = {key: float(np.mean([m[key] for m in per_fold])) for key in METRIC_KEYS}
    return {"mean": mean, "folds": per_fold}


def _check_slice(sl: slice, n: int, what: str) -> tuple[int, int]:
    if not isinstance(sl, slice) or sl.step not in (None, 1):
        raise ValueError(f"{what} must be a slice with step 1, got {sl!r}")
    start = 0 if sl.start is None else sl.start
    stop = n if sl.stop is None else sl.stop
    if not 0 <= start < stop <= n:
        raise ValueError(f"{what} {sl!r} is empty or outside [0, {n}) of the score matrix")
    return int(start), int(stop)
