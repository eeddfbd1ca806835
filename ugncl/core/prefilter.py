"""The pre-filter (``prefilter.kind: linear``): a closed-form linear fit of the noisy pairs,
cross-fitted, whose per-pair p-values select the pairs that train for the first
``prefilter.epochs`` epochs after the warm-up, whatever the method.

Why a second, model-free view. On a world where the warm-up learns only the coarsest cue (the
default synthetic world at 70% noise learns its place word and no objects), the network's
first division keeps about half of the noisy pairs, and a hard-clean set that noisy does not
let the model take off (docs/research/ugncl-generalisation.md); a plain hinge trained on
all pairs there collapses. A ridge regression from a
caption's bag of words to its paired image's pooled region features sees the same noisy
pairs, but it is fitted in closed form: the 70% of unrelated pairs add variance, not a
direction, and the related 30% still pull each word towards the features of its objects.

Cross-fitting makes its scores a test. The images are split into folds; each fold's pairs
are scored by the map fitted on the other folds' pairs, so no caption is scored by a map that
saw it. For each caption the paired image is ranked among a fixed set of rival images. For a
noisy pair the paired image is unrelated to the caption, so its rank is uniform: ``rank /
rivals`` is a p-value, and the pairs with ``p < alpha`` let in about ``alpha`` of the noisy
pairs whatever the noise ratio, the world or the fit's quality. The fit's quality decides only
how many clean pairs pass. :func:`select_pairs` also keeps the selection within a
Benjamini-Hochberg bound on its share of noisy pairs, so a weak fit selects fewer, or none.

One refit sharpens it: the second fit weighs each pair by ``max(1 - 2 p, 0)`` of a first fit,
so the pairs the first fit finds unrelated (most of the noisy ones) stop pulling the map. The
first fit's p-values come from within the fitted folds alone (:func:`linear_pair_pvalues`),
so the refit stays cross-fitted.

Shapes: N pairs (captions), I images, V words, D region-feature dimensions.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

from ugncl.core.data import PairBatch

logger = logging.getLogger(__name__)

__all__ = [
    "KINDS",
    "Prefilter",
    "PrefilterSelection",
    "caption_bags",
    "fit_text_to_image",
    "gather_prefilter_inputs",
    "image_components",
    "linear_pair_pvalues",
    "null_share",
    "pair_pvalues",
    "prefilter_pvalues",
    "select_pairs",
    "training_pair_pvalues",
]


def caption_bags(
    captions: Sequence[np.ndarray], vocab_size: int, max_words: int = 4096
) -> sp.csr_matrix:
    """Each caption as a set of words, idf-weighted and L2-normalised.

    Args:
        captions: N arrays of token ids (padding and special tokens may be included; ids that
            occur in every caption carry no idf weight).
        vocab_size: V, one more than the largest token id.
        max_words: only the ``max_words`` most frequent words are columns (the normal matrix
            of the ridge fit is ``max_words`` squared).

    Returns:
        ``(N, min(V, max_words))`` CSR matrix, float64.
    """
    rows = np.repeat(np.arange(len(captions)), [len(np.unique(c)) for c in captions])
    cols = np.concatenate([np.unique(np.asarray(c, dtype=np.int64)) for c in captions])
    if len(cols) and (cols.min() < 0 or cols.max() >= vocab_size):
        raise ValueError(f"token ids must lie in [0, {vocab_size}), got {cols.min()}..{cols.max()}")
    bags = sp.csr_matrix((np.ones(len(cols)), (rows, cols)), shape=(len(captions), vocab_size))
    df = np.asarray(bags.sum(0)).ravel()
    keep = np.argsort(-df, kind="stable")[: min(max_words, vocab_size)]
    bags = bags[:, keep]
    idf = np.log(len(captions) / (1.0 + df[keep]))
    bags = bags @ sp.diags(np.maximum(idf, 0.0))
    norms = np.sqrt(np.asarray(bags.multiply(bags).sum(1)).ravel())
    return sp.csr_matrix(sp.diags(1.0 / np.maximum(norms, 1e-12)) @ bags)


def image_components(pooled: np.ndarray, rank: int = 64, seed: int = 0) -> np.ndarray:
    """Pooled image features, standardised per dimension, on their top ``rank`` principal
    components (not normalised: the fit's targets keep each image's norm).

    Args:
        pooled: ``(I, D)`` one vector per image (e.g. its regions' max).
        rank: the components kept (``min(rank, I, D)``).
        seed: the randomised SVD's seed.

    Returns:
        ``(I, rank)`` float64.
    """
    x = torch.tensor(np.asarray(pooled), dtype=torch.float64)  # a copy, standardised in place
    mean, std = x.mean(0), x.std(0)
    x.sub_(mean).div_(std + 1e-9)
    q = min(rank, *x.shape)
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        _, _, v = torch.svd_lowrank(x, q=q, niter=4)
    finally:
        torch.random.set_rng_state(generator_state)
    return (x @ v).numpy()


def fit_text_to_image(
    bags: sp.csr_matrix, targets: np.ndarray, weights: np.ndarray, ridge: float = 10.0
) -> np.ndarray:
    """Weighted ridge regression from caption bags to image vectors.

    Args:
        bags: ``(n, V)`` the fitted pairs' captions.
        targets: ``(n, r)`` their paired images' vectors.
        weights: ``(n,)`` non-negative pair weights.
        ridge: the L2 penalty on the map.

    Returns:
        ``(V, r)`` the map ``W`` minimising ``sum_k w_k |b_k W - t_k|^2 + ridge |W|^2``.
    """
    weighted = sp.diags(weights) @ bags
    normal = (weighted.T @ bags).toarray() + ridge * np.eye(bags.shape[1])
    return np.linalg.solve(normal, weighted.T @ targets)


def pair_pvalues(
    predicted: np.ndarray,
    images: np.ndarray,
    paired: np.ndarray,
    rivals: np.ndarray,
    block: int = 8192,
) -> np.ndarray:
    """Each caption's paired image ranked among rival images by cosine similarity.

    Args:
        predicted: ``(n, r)`` the captions' predicted image vectors.
        images: ``(I, r)`` image vectors (compared by cosine).
        paired: ``(n,)`` each caption's paired image.
        rivals: ``(M,)`` the rival images (the paired one among them is skipped).
        block: captions compared at once (bounds the memory, not the result).

    Returns:
        ``(n,)`` p-values ``(1 + #rivals at or above the paired image) / (M + 1)``, in
        (0, 1].
    """
    p = torch.as_tensor(predicted)
    p = p / p.norm(dim=1, keepdim=True).clamp_min(1e-12)
    im = torch.as_tensor(images)
    im = im / im.norm(dim=1, keepdim=True).clamp_min(1e-12)
    paired_t = torch.as_tensor(paired)
    riv = torch.as_tensor(rivals)
    rival_images = im[riv].T
    counts = torch.empty(len(p), dtype=torch.float64)
    # In blocks of captions: an (n, M) similarity matrix at COCO's size (140k captions a fold)
    # would take over a gigabyte.
    for start in range(0, len(p), block):
        rows = slice(start, start + block)
        own = (p[rows] * im[paired_t[rows]]).sum(1, keepdim=True)
        # Ties count against the pair: a caption the map cannot place (a zero prediction, all
        # its words unseen by the fit) must not get the smallest p-value.
        above = (p[rows] @ rival_images >= own) & (riv[None, :] != paired_t[rows, None])
        counts[rows] = above.sum(1).double()
    return ((1.0 + counts) / (len(rivals) + 1.0)).numpy()


def _fit_and_score(
    bags: sp.csr_matrix,
    images: np.ndarray,
    image_index: np.ndarray,
    weights: np.ndarray,
    fit: np.ndarray,
    scored: np.ndarray,
    rivals: np.ndarray,
    ridge: float,
) -> np.ndarray:
    """p-values of the ``scored`` pairs under the map fitted on the ``fit`` pairs (bool masks)."""
    w = fit_text_to_image(bags[fit], images[image_index[fit]], weights[fit], ridge=ridge)
    return pair_pvalues(bags[scored] @ w, images, image_index[scored], rivals)


def linear_pair_pvalues(
    bags: sp.csr_matrix,
    images: np.ndarray,
    image_index: np.ndarray,
    *,
    seed: int = 0,
    folds: int = 4,
    rivals: int = 1023,
    ridge: float = 10.0,
    refits: int = 1,
) -> np.ndarray:
    """Cross-fitted p-values of the pairs ``(caption k, image image_index[k])``.

    The images are split into ``folds`` folds. A fold's pairs are scored by the map fitted on
    the other folds' pairs; a refit weighs those by ``max(1 - 2 p, 0)``, with ``p`` from
    within the other folds (each scored by the map of the rest of them). So no weight, and no
    map, has seen the pair it scores: a weight computed with the scored fold would carry its
    noisy pairs into the map that scores them.

    Args:
        bags: ``(N, V)`` caption bags (:func:`caption_bags`).
        images: ``(I, r)`` image vectors (:func:`image_components`).
        image_index: ``(N,)`` the image each caption is paired with.
        seed: folds and rivals are drawn from it.
        folds: image folds (>= 3 with a refit).
        rivals: M, the rival images each caption's pair is ranked among (all but one when
            there are fewer).
        ridge: the fit's L2 penalty.
        refits: fits after the first, each weighing the pairs by the previous p-values.

    Returns:
        ``(N,)`` p-values; a noisy pair's is uniform on (0, 1] (a little above, in practice:
        a map ranks the images of the pairs it was fitted on slightly higher).
    """
    if folds < (3 if refits else 2):
        raise ValueError(f"need folds >= 3 with a refit (2 without), got {folds}")
    image_index = np.asarray(image_index, dtype=np.int64)
    num_images = images.shape[0]
    rng = np.random.default_rng([seed, 0x5EED])
    fold = (rng.permutation(num_images) % folds)[image_index]  # each pair's image's fold
    riv = np.sort(rng.permutation(num_images)[: min(rivals, num_images - 1)])
    pvalues = np.ones(len(image_index))
    for f in range(folds):
        scored = fold == f
        weights = np.ones(len(image_index))
        for _ in range(refits):
            inner = np.ones(len(image_index))
            for g in range(folds):
                if g != f:
                    part = fold == g
                    fit = ~scored & ~part
                    inner[part] = _fit_and_score(
                        bags, images, image_index, weights, fit, part, riv, ridge
                    )
            weights = np.where(scored, 0.0, np.clip(1.0 - 2.0 * inner, 0.0, None))
        pvalues[scored] = _fit_and_score(
            bags, images, image_index, weights, ~scored, scored, riv, ridge
        )
    return pvalues


def prefilter_pvalues(
    captions: Sequence[np.ndarray],
    vocab_size: int,
    pooled: np.ndarray,
    image_index: np.ndarray,
    *,
    seed: int = 0,
    rank: int = 64,
) -> np.ndarray:
    """:func:`linear_pair_pvalues` from raw inputs.

    Args:
        captions: N token-id arrays.
        vocab_size: one more than the largest token id.
        pooled: ``(I, D)`` one pooled feature vector per image (rows of images no caption is
            paired with are left out, as rivals too: they may be unfilled).
        image_index: ``(N,)`` the image each caption is paired with.
        seed: the run's seed.
        rank: the image vectors' principal components.

    Returns:
        ``(N,)`` p-values.
    """
    bags = caption_bags(captions, vocab_size)
    paired, local = np.unique(np.asarray(image_index), return_inverse=True)
    images = image_components(np.asarray(pooled)[paired], rank=rank, seed=seed)
    return linear_pair_pvalues(bags, images, local.reshape(-1), seed=seed)


def null_share(pvalues: np.ndarray, lam: float = 0.5) -> float:
    """Storey's estimate of the share of pairs drawn from the null (the noisy pairs):
    ``#{p > lam} / ((1 - lam) N)``, capped at 1. The few clean pairs above ``lam`` make it an
    overestimate, on the safe side.

    Args:
        pvalues: ``(N,)`` p-values.
        lam: where the p-values are taken to be the null's alone.

    Returns:
        The estimate in [0, 1] (1 for an empty input).
    """
    p = np.asarray(pvalues)
    if not len(p):
        return 1.0
    return float(min(1.0, (p > lam).mean() / (1.0 - lam)))


def select_pairs(pvalues: np.ndarray, alpha: float, fdr: float) -> np.ndarray:
    """The pairs the pre-filter keeps: ``p < alpha``, and within the Benjamini-Hochberg
    set at false-discovery rate ``fdr`` (with :func:`null_share` for the null's share).

    ``alpha`` bounds the share of the noisy pairs let in; ``fdr`` bounds the share of the
    selected pairs that are noisy, so a weak fit (few images, features that say little)
    selects fewer pairs, or none.

    Args:
        pvalues: ``(N,)`` the pairs' p-values.
        alpha: the p-value threshold.
        fdr: the largest expected share of noisy pairs among those selected.

    Returns:
        ``(N,)`` bool.
    """
    p = np.asarray(pvalues, dtype=np.float64)
    n = len(p)
    ordered = np.sort(p)
    # BH: the largest p_(k) with p_(k) * pi0 * N / k <= fdr.
    passing = ordered * null_share(p) * n / np.arange(1, n + 1) <= fdr
    cut = ordered[np.flatnonzero(passing).max()] if passing.any() else -np.inf
    return (p < alpha) & (p <= cut)


def gather_prefilter_inputs(
    fetch: Callable[[np.ndarray], PairBatch], num_samples: int, batch_size: int
) -> tuple[list[np.ndarray], np.ndarray, np.ndarray] | None:
    """Every training pair's caption tokens, paired image and its regions' max, in one pass.

    Every process reads all samples itself (``fetch`` is not sharded), so whichever process
    calls it needs no communication (the trainer calls it on rank 0 and broadcasts).

    Args:
        fetch: ``fetch(indices (K,)) -> PairBatch`` of the training samples.
        num_samples: N.
        batch_size: samples per fetch.

    Returns:
        ``(captions, pooled (I, D) float32, image_index (N,))``, rows of images no caption is
        paired with left zero; None when the images are not region features (``(K, R, D)``:
        raw pixels have no pooled feature a linear map could read).
    """
    captions: list[np.ndarray] = []
    image_index = np.empty(num_samples, dtype=np.int64)
    pooled: np.ndarray | None = None
    for start in range(0, num_samples, batch_size):
        batch = fetch(np.arange(start, min(start + batch_size, num_samples)))
        if batch.images.dim() != 3:
            return None
        index = batch.index.numpy()
        paired = batch.image_index.numpy()
        image_index[index] = paired
        if pooled is None:
            pooled = np.zeros((0, batch.images.shape[-1]), dtype=np.float32)
        if paired.max() >= pooled.shape[0]:
            grown = np.zeros((int(paired.max()) + 1, pooled.shape[1]), dtype=np.float32)
            grown[: pooled.shape[0]] = pooled
            pooled = grown
        pooled[paired] = batch.images.float().amax(1).numpy()
        lengths = batch.lengths.numpy()
        captions.extend(row[:n] for row, n in zip(batch.captions.numpy(), lengths))
    if pooled is None:  # no sample at all
        return None
    return captions, pooled, image_index


def training_pair_pvalues(
    fetch: Callable[[np.ndarray], PairBatch], num_samples: int, batch_size: int, seed: int
) -> np.ndarray | None:
    """The pre-filter's p-values of every training pair, read through ``fetch``
    (:func:`gather_prefilter_inputs`, then :func:`prefilter_pvalues`).

    Args:
        fetch: ``fetch(indices (K,)) -> PairBatch`` of the training samples.
        num_samples: N.
        batch_size: samples per fetch.
        seed: the run's seed (folds, rivals, the randomised SVD).

    Returns:
        ``(N,)`` p-values; None where the images are not region features.
    """
    inputs = gather_prefilter_inputs(fetch, num_samples, batch_size)
    if inputs is None:
        return None
    captions, pooled, image_index = inputs
    vocab_size = 1 + max((int(c.max()) for c in captions if len(c)), default=0)
    return prefilter_pvalues(captions, vocab_size, pooled, image_index, seed=seed)


KINDS = ("none", "linear")  # prefilter.kind


@dataclass(frozen=True)
class PrefilterSelection:
    """The pre-filter's verdict on a run's training pairs, indexed by sample.

    Attributes:
        pvalues: ``(N,)`` each pair's p-value (:func:`training_pair_pvalues`).
        selected: ``(N,)`` bool, the pairs kept (:func:`select_pairs`).
    """

    pvalues: np.ndarray
    selected: np.ndarray

    @property
    def null_share(self) -> float:
        """Storey's estimate of the share of noisy pairs (:func:`null_share`)."""
        return null_share(self.pvalues)

    def keep(self, samples: np.ndarray | None) -> np.ndarray:
        """``samples`` (None: every sample) without the pairs the pre-filter rejects."""
        chosen = np.flatnonzero(self.selected)
        return chosen if samples is None else np.intersect1d(np.asarray(samples), chosen)

    def record(self, clean: np.ndarray) -> dict[str, Any]:
        """The ``prefilter`` record: pairs, selected, the estimated noisy share and, where the
        noise file marks noisy pairs (``clean`` not all true), the shares of the clean and of
        the noisy pairs selected (reported, never used)."""
        clean = np.asarray(clean, dtype=bool)
        chosen = self.selected
        out: dict[str, Any] = {
            "pairs": len(chosen), "selected": int(chosen.sum()),
            "estimated_noisy_share": self.null_share,
        }  # fmt: skip
        if len(clean) == len(chosen) and not clean.all():
            out.update(
                noisy_share=float((~clean).mean()),
                clean_selected=float(chosen[clean].mean()) if clean.any() else None,
                noisy_selected=float(chosen[~clean].mean()),
                selected_clean_share=float(clean[chosen].mean()) if chosen.any() else None,
            )
        return out


class Prefilter:
    """``prefilter.*`` over one run: which epochs it applies to and its selection, computed
    once (at the first epoch it applies to) and kept in the trainer's checkpoints.

    The trainer hands the selection to the method (``MethodContext.prefilter``) in the
    ``epochs`` epochs after the warm-up and, unless the method reads it itself
    (``Method.reads_prefilter``), leaves the rejected pairs out of those epochs' samples.
    """

    def __init__(self, *, kind: str, alpha: float, fdr: float, epochs: int) -> None:
        if kind not in KINDS:
            raise ValueError(f"prefilter.kind must be one of {' | '.join(KINDS)}, got {kind!r}")
        self.kind, self.alpha, self.fdr, self.epochs = kind, alpha, fdr, epochs
        self._pvalues: np.ndarray | None = None
        self._unavailable = False

    def applies(self, epoch: int, warmup_epochs: int) -> bool:
        """Whether epoch ``epoch`` (0-based, warm-up included) is one of the pre-filter's."""
        return self.kind != "none" and 0 <= epoch - warmup_epochs < self.epochs

    def selection(
        self, pvalues: Callable[[], np.ndarray | None]
    ) -> tuple[PrefilterSelection | None, bool]:
        """The selection, computing the p-values with ``pvalues()`` the first time (None:
        the images are not region features). Returns ``(selection or None, computed now)``;
        None where it cannot run (pixels) or selects no pair: the run trains as
        ``prefilter.kind: none``, with one warning."""
        fresh = self._pvalues is None and not self._unavailable
        if fresh:
            self._pvalues = pvalues()
            if self._pvalues is None:
                logger.warning(
                    "prefilter.kind=%s needs region features; this run's images are pixels, "
                    "so it trains as prefilter.kind=none", self.kind,
                )  # fmt: skip
            elif not select_pairs(self._pvalues, self.alpha, self.fdr).any():
                logger.warning(
                    "the pre-filter selects no pair at prefilter.fdr=%s (the linear fit tells "
                    "too few pairs from unrelated ones); the run trains as prefilter.kind=none",
                    self.fdr,
                )  # fmt: skip
            self._unavailable = self._pvalues is None
        if self._pvalues is None:
            return None, fresh
        chosen = select_pairs(self._pvalues, self.alpha, self.fdr)
        if not chosen.any():
            return None, fresh
        return PrefilterSelection(self._pvalues, chosen), fresh

    def state_dict(self) -> dict[str, Any]:
        """The p-values (a float64 tensor, or None before they are computed) for checkpoints."""
        pvalues = None if self._pvalues is None else torch.from_numpy(self._pvalues.copy())
        return {"pvalues": pvalues, "unavailable": self._unavailable}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pvalues = state.get("pvalues")
        self._pvalues = None if pvalues is None else np.asarray(pvalues, dtype=np.float64)
        self._unavailable = bool(state.get("unavailable", False))
