"""How much of a trained UGNCL model's division is memorisation.

A division can miss a noisy pair for two reasons: the model cannot tell its caption from a
true one (generalisation), or it has been trained on the pair as clean and learnt it
(memorisation). The audit tells them apart by dividing two versions of the training set with
the same model, in the same batches:

* **trained**: the pairs the run trained on (its noise index);
* **fresh**: every noisy pair's caption given another image, one it was never trained with
  and not its own (:func:`fresh_noisy_index`); the clean pairs are unchanged.

The fresh noisy pairs are as wrong as the trained ones but unseen, so the noise-detection F1
on them is what the model's generalisation allows; the share of noisy pairs the division keeps
as clean rises from fresh to trained by what the model memorised. ``tools/audit_division.py``
runs it on a run directory.

:func:`label_separation` asks a second question of the same model: are the division's errors
the pairs' own or their batches' (the rivals a batch happens to hold)? :func:`score_spread` a
third, of a model that divides nothing: do its scores still depend on the pair, or has every
pair of a batch one score?
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from precomputed.dataset import PrecomputedSplit
from ugncl.backbones.sgraf.data import PrecomputedTrainingData
from ugncl.core.engine.sampling import batch_indices, epoch_order
from ugncl.core.evaluation import eval_mode
from ugncl.methods.noise_detection import weight_quality
from ugncl.methods.ugncl.division import called_clean, division_quality

__all__ = [
    "audit_division",
    "divide_split",
    "fresh_noisy_index",
    "kept_as_clean",
    "kept_by_group",
    "label_separation",
    "score_spread",
    "soft_labels_split",
]


def fresh_noisy_index(true_image: np.ndarray, image_index: np.ndarray, seed: int = 0) -> np.ndarray:
    """Re-pair every noisy caption with an image it was neither trained with nor belongs to.

    Args:
        true_image: ``(N,)`` each caption's own image.
        image_index: ``(N,)`` the image each caption was trained with (noisy where it differs).
        seed: of the draw.

    Returns:
        ``(N,)`` int64: ``image_index`` where it equals ``true_image``; elsewhere an image drawn
        uniformly from the others (``!= true_image`` and ``!= image_index``).

    Raises:
        ValueError: on arrays of different lengths, or noisy captions with fewer than three
            images to choose from.
    """
    true_image = np.asarray(true_image, dtype=np.int64).reshape(-1)
    image_index = np.asarray(image_index, dtype=np.int64).reshape(-1)
    if true_image.shape != image_index.shape:
        raise ValueError(
            f"true_image {true_image.shape} and image_index {image_index.shape} must have the "
            "same length (one entry per caption)"
        )
    noisy = np.flatnonzero(image_index != true_image)
    fresh = image_index.copy()
    if len(noisy) == 0:
        return fresh
    num_images = int(max(true_image.max(), image_index.max())) + 1
    if num_images < 3:
        raise ValueError(
            f"re-pairing noisy captions needs at least 3 images (own, trained, fresh), got "
            f"{num_images}"
        )
    rng = np.random.default_rng(seed)
    todo = noisy
    while len(todo):  # rejection: each round keeps ~1 - 2/num_images of the draws
        draw = rng.integers(num_images, size=len(todo))
        ok = (draw != true_image[todo]) & (draw != image_index[todo])
        fresh[todo[ok]] = draw[ok]
        todo = todo[~ok]
    return fresh


def divide_split(
    model: nn.Module,
    divide: Callable[[Tensor], Tensor],
    split: PrecomputedSplit,
    *,
    batch_size: int,
    seed: int = 0,
    device: torch.device | str = "cpu",
) -> np.ndarray:
    """Set codes ``(N,)`` of every pair of ``split``, divided in eval mode in seeded batches.

    Args:
        model: raw scores ``(W, K, K)`` from ``model(images, captions, lengths)``.
        divide: raw ``(W, K, K)`` -> set codes ``(K,)`` (e.g. ``UGNCLMethod.divide``).
        split: the pairs (``split.image_index`` pairs caption ``k`` with its image).
        batch_size: K, the rivals of a division (the run's ``train.batch_size``).
        seed: of the batch order; the same seed gives the same batches for any pairing.
        device: where the model runs.
    """
    return _per_pair(model, divide, split, batch_size, seed, device, np.int64, -1)


def soft_labels_split(
    model: nn.Module,
    label: Callable[[Tensor], Tensor],
    split: PrecomputedSplit,
    *,
    batch_size: int,
    seed: int = 0,
    device: torch.device | str = "cpu",
) -> np.ndarray:
    """Soft labels ``(N,)`` of every pair of ``split`` (as :func:`divide_split`, with
    ``label``: raw ``(W, K, K)`` -> the division's soft labels ``(K,)``)."""
    return _per_pair(model, label, split, batch_size, seed, device, np.float64, np.nan)


def _per_pair(
    model: nn.Module,
    fn: Callable[[Tensor], Tensor],
    split: PrecomputedSplit,
    batch_size: int,
    seed: int,
    device: torch.device | str,
    dtype: type,
    fill: float,
) -> np.ndarray:
    # fn of each seeded batch's raw scores (eval mode), scattered back to dataset order.
    out = np.full(split.num_captions, fill, dtype=dtype)
    with eval_mode(model):
        for idx, raw in _seeded_scores(model, split, batch_size, seed, device, drop_last=False):
            out[np.asarray(idx)] = fn(raw).detach().cpu().numpy()
    return out


def _seeded_scores(
    model: nn.Module,
    split: PrecomputedSplit,
    batch_size: int,
    seed: int,
    device: torch.device | str,
    *,
    drop_last: bool,
) -> Iterator[tuple[Sequence[int], Tensor]]:
    """``(sample indices, raw (W, K, K) float32 scores)`` of ``split``'s pairs in the seeded
    batches of an epoch's order (the caller sets the model's mode)."""
    data = PrecomputedTrainingData(split)
    order = epoch_order(data.num_samples, seed, 0)
    for idx in batch_indices(order, batch_size, drop_last=drop_last):
        batch = data.collate([data.dataset[i] for i in idx]).to(device)
        yield idx, model(batch.images, batch.captions, batch.lengths).float()


def label_separation(
    labels: Callable[[int], np.ndarray], clean: np.ndarray, *, draws: int, seed: int = 0
) -> dict[str, Any]:
    """How well the division's soft labels separate clean from noisy pairs, and whether that
    is the pairs' or their batches' doing.

    A pair's soft label depends on the rivals its batch happens to hold. If the division's
    errors came from unlucky batches, averaging the labels of several batch orders would
    separate the pairs better; if they are the pairs' own (the model scores a mismatched
    pair high whatever its rivals), the average separates them no better than one order.

    Args:
        labels: batch-order seed -> soft labels ``(N,)`` (e.g. :func:`soft_labels_split`).
        clean: ``(N,)`` bool ground truth.
        draws: batch orders, seeds ``seed .. seed + draws - 1``; ``>= 1``.
        seed: the first order's seed.

    Returns:
        ``draws``; ``auc_one_order`` and ``auc_mean``: ROC-AUC (clean vs noisy) of the first
        order's labels and of the mean over the orders; ``top_clean_share``: the share of
        clean pairs among the as many pairs as are clean with the highest mean label (the
        precision of a division told the noise ratio). None where a class is absent.
    """
    if draws < 1:
        raise ValueError(f"draws must be >= 1 (batch orders to average), got {draws}")
    clean = np.asarray(clean, dtype=bool)
    ys = np.stack([labels(seed + r) for r in range(draws)])
    mean = ys.mean(axis=0)
    n_clean = int(clean.sum())
    top = np.argsort(-mean, kind="stable")[:n_clean]
    return {
        "draws": draws,
        "auc_one_order": weight_quality(ys[0], clean)["weight_auc"],
        "auc_mean": weight_quality(mean, clean)["weight_auc"],
        "top_clean_share": float(clean[top].mean()) if 0 < n_clean < len(clean) else None,
    }


def kept_as_clean(sets: np.ndarray, clean: np.ndarray) -> float | None:
    """Share of the noisy pairs that ``sets`` puts in the clean or hard-clean set (``1 -``
    the noisy recall of :func:`ugncl.methods.ugncl.division.division_quality`; None without noisy
    pairs)."""
    return _noisy_kept(division_quality(sets, clean), clean)


def kept_by_group(
    sets: np.ndarray, clean: np.ndarray, groups: Mapping[str, np.ndarray]
) -> dict[str, dict[str, Any]]:
    """Which pairs of each group a division keeps as clean, clean and noisy apart.

    Args:
        sets: set codes ``(N,)``.
        clean: ``(N,)`` bool ground truth.
        groups: name -> ``(N,)`` bool mask.

    Returns:
        name -> ``clean`` and ``noisy`` (pair counts) and ``clean_kept`` and ``noisy_kept``
        (their shares in the clean or hard-clean set; None for an empty class).
    """
    sets, clean = np.asarray(sets), np.asarray(clean, dtype=bool)
    kept = called_clean(sets)
    out: dict[str, dict[str, Any]] = {}
    for name, mask in groups.items():
        mask = np.asarray(mask, dtype=bool)
        if mask.shape != sets.shape:
            raise ValueError(f"group {name!r} masks {mask.shape} pairs, the division {sets.shape}")
        record: dict[str, Any] = {}
        for label, members in (("clean", mask & clean), ("noisy", mask & ~clean)):
            record[label] = int(members.sum())
            record[f"{label}_kept"] = float(kept[members].mean()) if members.any() else None
        out[name] = record
    return out


def _noisy_kept(quality: dict[str, Any], clean: np.ndarray) -> float | None:
    # Every noisy pair not detected as noisy (NOISY, HARD_NOISY) is kept as clean.
    return None if np.asarray(clean, dtype=bool).all() else 1.0 - quality["noisy_recall"]


def audit_division(
    split: PrecomputedSplit,
    divide_pairs: Callable[[PrecomputedSplit], np.ndarray],
    *,
    seed: int = 0,
    groups: Mapping[str, np.ndarray] | None = None,
) -> dict[str, Any]:
    """Divide the trained pairs and the fresh ones (module docstring) with one model.

    Args:
        split: the training split as trained (``split.image_index`` = the run's noise index).
        divide_pairs: a split -> its set codes ``(N,)``, the same batches for any pairing, e.g.
            ``functools.partial(divide_split, model, divide, batch_size=K)``.
        seed: of the fresh pairing.
        groups: optional name -> ``(N,)`` bool mask of the trained pairs, e.g. by what their
            captions claim (:func:`precomputed.synthetic.places.place_claims`).

    Returns:
        ``trained`` and ``fresh``: :func:`ugncl.methods.ugncl.division.division_quality` records
        plus ``noisy_kept`` (:func:`kept_as_clean`); ``memorised``: ``noisy_kept`` trained minus
        fresh (None without noisy pairs); with ``groups``, ``trained["groups"]``:
        :func:`kept_by_group` of the trained division.
    """
    fresh_index = fresh_noisy_index(split.true_image, split.image_index, seed)
    out: dict[str, Any] = {}
    for name, pairs in (("trained", split), ("fresh", split.with_noise(fresh_index))):
        sets = divide_pairs(pairs)
        clean = np.asarray(pairs.clean)
        quality = division_quality(sets, clean)
        out[name] = {**quality, "noisy_kept": _noisy_kept(quality, clean)}
        if groups is not None and name == "trained":
            out[name]["groups"] = kept_by_group(sets, clean, groups)
    kept = out["trained"]["noisy_kept"], out["fresh"]["noisy_kept"]
    out["memorised"] = None if kept[0] is None else kept[0] - kept[1]
    return out


def score_spread(
    model: nn.Module,
    split: PrecomputedSplit,
    *,
    batch_size: int,
    seed: int = 0,
    device: torch.device | str = "cpu",
    head_input: nn.Module | None = None,
) -> dict[str, float | None]:
    """Whether a model's scores still depend on the pair, over ``split``'s pairs in seeded
    batches of ``batch_size`` (eval mode), averaged over the batches.

    A model whose every score of a batch is one value ranks nothing: the triplet term then
    sits at ``2 x margin x K``. That happens when the scores saturate (each is at the flat end
    of its function) or when the head's input stops depending on the pair (the similarity
    vector it reads is one vector for every pair); ``head_input`` (a module whose input is
    the per-pair vector the score is read from, SGRAF's ``sim_enc.sim_eval_w``) tells which.

    Returns:
        ``score_mean``: the raw scores' mean; ``score_std``: their standard deviation within
        a batch's ``(W, K, K)`` block; ``margin``: the diagonal's mean minus the block's;
        ``input_spread``: per dimension of the head's input, the standard deviation over the
        batch's pairs over its root mean square (mean over dimensions; 0 when every pair's
        vector is the same), None without ``head_input``; ``input_norm``: that vector's mean
        norm.
    """
    inputs: list[Tensor] = []
    hook = None
    if head_input is not None:
        hook = head_input.register_forward_hook(lambda mod, args, out: inputs.append(args[0]))
    sums = {"score_mean": 0.0, "score_std": 0.0, "margin": 0.0, "input_spread": 0.0,
            "input_norm": 0.0}  # fmt: skip
    batches = 0
    try:
        with eval_mode(model), torch.no_grad():
            batches_of = _seeded_scores(model, split, batch_size, seed, device, drop_last=True)
            for _, raw in batches_of:
                diag = torch.diagonal(raw, dim1=-2, dim2=-1)
                sums["score_mean"] += float(raw.mean())
                sums["score_std"] += float(raw.std())
                sums["margin"] += float(diag.mean() - raw.mean())
                if inputs:
                    vec = torch.cat([v.reshape(-1, v.shape[-1]) for v in inputs]).float()
                    rms = vec.square().mean(0).sqrt().clamp_min(1e-12)
                    sums["input_spread"] += float((vec.std(0) / rms).mean())
                    sums["input_norm"] += float(vec.norm(dim=-1).mean())
                inputs.clear()  # the next batch's forward appends its own blocks
                batches += 1
    finally:
        if hook is not None:
            hook.remove()
    if batches == 0:
        raise ValueError(
            f"{split.num_captions} pairs make no whole batch of {batch_size}; pass a smaller "
            "batch size"
        )
    out: dict[str, float | None] = {k: v / batches for k, v in sums.items()}
    if head_input is None:
        out["input_spread"] = out["input_norm"] = None
    return out
