"""Per-sample weight formulas of NPC, SDD and OSA (pure functions; no model inside).

Scores named ``sim`` are on the logit-scaled CLIP scale (``logit_scale.exp() * cos``, x100 for
pretrained CLIP), the scale every CLIP reference thresholds on (docs/methods/weighted.md).
Sources: NPC's, SDD's and OSA's released training code and papers (docs/methods/weighted.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import torch
from sklearn.mixture import GaussianMixture
from torch import Tensor

__all__ = [
    "SpaceShift",
    "auto_sdd_thresholds",
    "bank_clean_mask",
    "consistency_weight",
    "gmm_posterior",
    "min_max",
    "npc_weight",
    "osa_weights",
    "self_drop_keep",
    "significance_ratio",
    "significance_weight",
]

OSAScoring = Literal["paper", "released"]


# ------------------------------------------------------------------------------- NPC / SDD


RatioGrouping = Literal["direction", "bank"]


def significance_ratio(
    before: Sequence[Tensor],
    after: Sequence[Tensor],
    grouping: RatioGrouping = "direction",
    eps: float = 1e-8,
) -> Tensor:
    """NPC/SDD ratio ``r_k`` of the bank losses before and after the siamese step.

    The four loss vectors are, in order, ``(img_i2t, img_t2i, txt_i2t, txt_t2i)``: the
    image-to-text and text-to-image cross-entropy of the image-bank pair and of the text-bank
    pair of every sample.

    * ``"direction"`` (paper; NPC Eq. 6-7, SDD Eq. 9-10): ``p_k = CE_i2t(image entry) +
      CE_i2t(text entry)``, ``q_k`` the text-to-image counterpart, ``r_k = (p^b/p^a + q^b/q^a)
      / 2``.
    * ``"bank"`` (the releases, NPC main_NPC.py:181, SDD :230): ``L_I = (CE_i2t + CE_t2i)/2``
      of the image entry, ``L_T`` of the text entry, ``r_k = (L_I^b/L_I^a + L_T^b/L_T^a) / 2``.

    They differ when one entry's loss is small and moves a lot while the other's is large:
    image entry 0.2 -> 0.1 and text entry 4.0 -> 4.6 give bank ``r = 1.43`` (w = 1) but
    direction ``r = 0.894`` (w = 0.713): the paper weighs the entries by their loss, the
    release by their relative change.

    Each ratio is ``(before + eps) / (after + eps)``: the release has no epsilon and divides by
    zero when a loss reaches 0; with the guard an unchanged zero loss gives ratio 1.

    Args:
        before, after: four ``(K,)`` loss vectors each (order above).
        grouping: ``"direction"`` or ``"bank"``.

    Returns:
        ``(K,)`` ratios (no gradient).
    """
    if len(before) != 4 or len(after) != 4:
        raise ValueError("significance_ratio needs (img_i2t, img_t2i, txt_i2t, txt_t2i) twice")
    with torch.no_grad():
        b = [t.float() for t in before]
        a = [t.float() for t in after]
        if grouping == "direction":
            first_b, first_a = b[0] + b[2], a[0] + a[2]  # p: image-to-text over both entries
            second_b, second_a = b[1] + b[3], a[1] + a[3]  # q: text-to-image
        elif grouping == "bank":
            first_b, first_a = 0.5 * (b[0] + b[1]), 0.5 * (a[0] + a[1])  # L_I
            second_b, second_a = 0.5 * (b[2] + b[3]), 0.5 * (a[2] + a[3])  # L_T
        else:
            raise ValueError(f"grouping must be 'direction' or 'bank', got {grouping!r}")
        r1 = (first_b + eps) / (first_a + eps)
        r2 = (second_b + eps) / (second_a + eps)
        return 0.5 * (r1 + r2)


def npc_weight(r: Tensor) -> Tensor:
    """``w = tanh(r) if r < 1 else 1`` (NPC Eq. of the negative-impact weight).

    ``r < 1``: one step on the batch *raised* the loss of the clean neighbours, so the pair is
    treated as harmful and down-weighted to ``tanh(r) < tanh(1) = 0.7616``.
    """
    return torch.where(r < 1, torch.tanh(r), torch.ones_like(r))


def significance_weight(
    before: Sequence[Tensor],
    after: Sequence[Tensor],
    grouping: RatioGrouping = "direction",
    eps: float = 1e-8,
) -> Tensor:
    """NPC/SDD significance weight ``(K,)`` from the bank losses (:func:`significance_ratio`)."""
    return npc_weight(significance_ratio(before, after, grouping, eps))


# ------------------------------------------------------------------------------------ GMM


def gmm_posterior(
    values: np.ndarray,
    component: Literal["low", "high"],
    *,
    max_iter: int = 100,
    tol: float = 1e-2,
    reg_covar: float = 5e-4,
    seed: int = 0,
) -> np.ndarray:
    """Posterior of the lower- or higher-mean component of a 2-component 1-D GMM.

    NPC fits it on per-sample losses and keeps the *lower*-mean component (clean), SDD on the
    diagonal similarities and keeps the *higher*-mean one. Settings are the releases'
    (NPC get_memorybank.py:51-59: max_iter 100, tol 1e-2, reg_covar 5e-4; SDD uses max_iter 10).
    Non-finite values get posterior 0 and are left out of the fit.

    Args:
        values: ``(N,)`` values.
        component: ``"low"`` or ``"high"`` mean component.
        max_iter, tol, reg_covar: ``sklearn.mixture.GaussianMixture`` settings.
        seed: ``random_state`` of the fit (deterministic initialisation).

    Returns:
        ``(N,)`` float64 posteriors in [0, 1].
    """
    if component not in ("low", "high"):
        raise ValueError(f"component must be 'low' or 'high', got {component!r}")
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    finite = np.isfinite(v)
    out = np.zeros(v.shape, dtype=np.float64)
    if finite.sum() < 2 or np.ptp(v[finite]) == 0:
        # No two distinct values: nothing separates the components; every sample is alike.
        out[finite] = 1.0
        return out
    gmm = GaussianMixture(
        n_components=2, max_iter=max_iter, tol=tol, reg_covar=reg_covar, random_state=seed
    )
    x = v[finite].reshape(-1, 1)
    gmm.fit(x)
    means = gmm.means_.reshape(-1)
    pick = int(means.argmin() if component == "low" else means.argmax())
    out[finite] = gmm.predict_proba(x)[:, pick]
    return out


def min_max(values: np.ndarray) -> np.ndarray:
    """``(v - min) / (max - min)`` over the finite entries; all ones when they are constant."""
    v = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(v)
    out = np.zeros_like(v)
    if not finite.any():
        return out
    lo, hi = v[finite].min(), v[finite].max()
    out[finite] = (v[finite] - lo) / (hi - lo) if hi > lo else 1.0
    return out


ConsistencyNorm = Literal["min_max", "none"]


def consistency_weight(
    sim: np.ndarray,
    *,
    max_iter: int = 10,
    tol: float = 1e-2,
    reg_covar: float = 5e-4,
    seed: int = 0,
    norm: ConsistencyNorm = "min_max",
) -> np.ndarray:
    """SDD consistency weight: the higher-mean GMM component's posterior of each pair.

    ``norm``: ``"min_max"`` rescales the posteriors to [0, 1] over the training set (the
    release, main_SDD_sim.py:274-277); ``"none"`` keeps the raw posterior (SDD's paper).

    Args:
        sim: ``(N,)`` diagonal logit-scaled similarity of every training pair.

    Returns:
        ``(N,)`` float32 weights in [0, 1].
    """
    p = gmm_posterior(sim, "high", max_iter=max_iter, tol=tol, reg_covar=reg_covar, seed=seed)
    if norm == "min_max":
        p = min_max(p)
    elif norm != "none":
        raise ValueError(f"consistency norm must be 'min_max' or 'none', got {norm!r}")
    return np.asarray(p, dtype=np.float32)


def self_drop_keep(sim: np.ndarray, alpha: float) -> np.ndarray:
    """SDD self-drop: keep pairs with ``sim > alpha``; ``sim <= alpha`` is dropped (SDD :109)."""
    return np.asarray(sim) > alpha


def bank_clean_mask(sim: np.ndarray, beta: float) -> np.ndarray:
    """SDD bank clean set: ``sim > beta`` (SDD get_memorybank.py:37; 30 on the x100 scale)."""
    return np.asarray(sim) > beta


def auto_sdd_thresholds(
    shift_mean: float, shift_std: float, *, alpha_std: float = 0.0, beta_std: float = 2.0
) -> tuple[float, float]:
    """SDD thresholds on the scale of the model at hand, from OSA's space shift.

    SDD's constants (alpha = 20, beta = 30) are cosines 0.2 and 0.3 at CLIP ViT-B/32's
    logit scale of 100. Read as statements about the score distribution: a pair *no more
    similar than two unrelated inputs* carries no matching signal (drop it: alpha = the mean
    score of non-matching pairs, OSA's beta), and a pair is a trustworthy bank key when it sits
    well above that level (beta = mean + 2 std of the non-matching scores). For ViT-B/32 this
    gives roughly (20, 30) if unrelated pairs sit at cos ~0.2 +- 0.05, which is the level the
    constants suggest; that ViT-B/32 figure is an assumption, not a measurement here. For any
    other model (a tiny synthetic CLIP, another logit scale) the same statements stay meaningful
    while the fixed numbers do not.

    Args:
        shift_mean, shift_std: mean and standard deviation of non-matching pair scores
            (:class:`SpaceShift`), on the model's logit scale.
        alpha_std, beta_std: offsets in standard deviations.

    Returns:
        ``(alpha, beta)`` on the same scale.
    """
    alpha = shift_mean + alpha_std * shift_std
    beta = shift_mean + beta_std * shift_std
    return float(alpha), float(beta)


# ------------------------------------------------------------------------------------ OSA


class SpaceShift:
    """Accumulates the scores of non-matching pairs: OSA's space shift beta.

    The paper defines the shift as the mean similarity of unrelated pairs. The release scores
    uniform-noise pixels against random token ids in [0, 99] without SOT/EOT (depending on the
    batch size and RNG); here the non-matching pairs are the off-diagonal entries of real
    training batches whose image differs from the row's image (a random pair of the training
    distribution, mismatched by construction), collected during the setup pass.
    """

    def __init__(self) -> None:
        self.count = 0
        self.total = 0.0
        self.total_sq = 0.0

    def add(self, sim: Tensor, image_index: Tensor) -> None:
        """Add one batch.

        Args:
            sim: ``(K, K)`` logit-scaled scores, rows images of pairs, columns captions.
            image_index: ``(K,)`` image of each pair; entries ``(i, j)`` whose images are equal
                (the pair itself, sibling captions) are not non-matching and are skipped.
        """
        with torch.no_grad():
            s = sim.detach().double()
            ii = image_index.to(s.device)
            mask = ii[:, None] != ii[None, :]
            vals = s[mask]
            self.count += int(vals.numel())
            self.total += float(vals.sum())
            self.total_sq += float((vals * vals).sum())

    @property
    def mean(self) -> float:
        if self.count == 0:
            raise ValueError("space shift has no non-matching pairs; add batches of >= 2 images")
        return self.total / self.count

    @property
    def std(self) -> float:
        m = self.mean
        return float(np.sqrt(max(self.total_sq / self.count - m * m, 0.0)))


def osa_weights(
    sim: Tensor | np.ndarray,
    beta: float,
    *,
    scale: float = 100.0,
    scoring: OSAScoring = "paper",
) -> Tensor:
    """OSA anti-noise weight of each pair from the estimator's diagonal scores.

    * ``"paper"``: debiased cosine ``x = clamp((s - beta) / scale, 0, 1)`` and
      ``w = x^2 (1 - x)``: zero at or below the shift, increasing up to x = 2/3.
    * ``"released"`` (OSA main_clip.py:36-41): ``x = relu(s - beta) / max(x)``, max over the
      given scores (the release's batch), ``w = x^2 (1 - x^2)``. The most confident pair gets 0.
      When no pair exceeds beta the release divides 0 by 0 (NaN); here every weight is 0.

    Args:
        sim: ``(K,)`` estimator diagonal scores on the logit-scaled scale.
        beta: the space shift on the same scale.
        scale: the estimator's logit scale (``logit_scale.exp()``), to read cosines.
        scoring: ``"paper"`` or ``"released"``.

    Returns:
        ``(K,)`` float32 weights.
    """
    s = torch.as_tensor(sim).detach().float()
    if scoring == "paper":
        x = ((s - beta) / scale).clamp(0.0, 1.0)
        return x * x * (1.0 - x)
    if scoring == "released":
        x = (s - beta).clamp_min(0.0)
        top = x.max() if x.numel() else x.new_zeros(())
        x = torch.where(top > 0, x / top.clamp_min(torch.finfo(x.dtype).tiny), torch.zeros_like(x))
        return x * x * (1.0 - x * x)
    raise ValueError(f"scoring must be 'paper' or 'released', got {scoring!r}")
