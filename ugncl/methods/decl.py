"""DECL (Qin et al., ACM MM 2022): evidential learning on one network, no uncertainty division.

Equations, readings and measurements: docs/methods/decl.md. Per batch of K pairs (rows images,
columns captions, pair i on the diagonal) with unit scores ``r`` (SGRAF's raw logit, CLIP's
cosine):

* evidence ``E = exp(tanh(r) / tau)``; ``alpha^{i2t} = E + 1`` per row, ``alpha^{t2i} = E^T + 1``
  per caption (Dirichlet over the batch's K candidates); uncertainty
  ``u_i = K / sum alpha^{i2t}_i + K / sum alpha^{t2i}_i`` (the release's sum of both);
* division (once per epoch after the warm-up, eval mode, batches of K): pair i is clean when
  row i of the symmetric evidence ``(E + E^T)`` normalised per row peaks on its diagonal;
* ``L_e``: the least-squares Dirichlet risk + ``lambda2`` KL of each direction, averaged over
  the batch's queries, both directions summed; target ``one_hot(i)`` for a clean pair, the zero
  vector for a noisy one. This is UGNCL's evidential loss at one view with DECL's evidence
  (:func:`ugncl.methods.ugncl.losses.evidential_loss`), reused, not copied;
* ``L_h``: the robust dynamic hinge (RDH) on ``tanh(r)``, margin 0.2, mean over the ``n``
  hardest negatives in each direction, ``n = max(int(K - eta * step), mu)``, on clean pairs only
  (every pair in the warm-up);
* ``L = L_e + lambda1 * sum_{clean i} RDH_i`` (release: a sum, so ``L_h`` weighs more at larger
  K; the package reading keeps the release's weight at K = 128 for every K).

UGNCL at one view without its division is not DECL: UGNCL divides with a GMM-free
uncertainty threshold into four sets, uses soft labels and trusted margins, and its hinge takes
the hardest negative on determined-clean pairs; DECL divides by the argmax of the symmetric
evidence and applies the top-n hinge to every clean pair (tests/ugncl/methods/decl/ shows
where the two coincide: the warm-up objective, and the evidential term for equal labels).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor, nn

from ugncl.core.data import PairBatch
from ugncl.core.engine.context import MethodContext, StepContext
from ugncl.core.engine.distributed import merge_rows
from ugncl.core.evaluation import eval_mode, view_reducer
from ugncl.core.method import Method, one_view_error, section_defaults
from ugncl.methods.hinge import hinge_costs
from ugncl.methods.noise_detection import detection_record
from ugncl.methods.readings import ADAM_NO_DECAY, READING_NAMES
from ugncl.methods.ugncl.evidential import evidence
from ugncl.methods.ugncl.losses import evidential_loss

__all__ = [
    "DECLConfig",
    "DECLMethod",
    "decl_evidence",
    "decl_objective",
    "divide_by_evidence",
    "rdh_negatives",
    "rdh_per_pair",
    "uncertainty",
]

logger = logging.getLogger(__name__)

READINGS = READING_NAMES
REFERENCE_BATCH = 128  # the batch at which the release's lambda1 = 0.8 was set (opts.py)
DIVISION_STREAM = 1  # RNG stream of the division pass order (training uses stream 0)


# ------------------------------------------------------------------------------- pure maths


def decl_evidence(raw: Tensor, tau: float = 0.1) -> Tensor:
    """DECL's evidence ``exp(tanh(raw) / tau)``, in ``[exp(-1/tau), exp(1/tau)]``.

    Args:
        raw: unit scores, any shape (SGRAF: the head's pre-sigmoid logit).
        tau: temperature (release 0.1).

    Returns:
        Evidence, same shape, float32 or wider. No cap binds: ``tanh / tau <= 1 / tau``.
    """
    return evidence(raw, tau=tau, ceiling=None, function="tanh")


def uncertainty(e: Tensor) -> Tensor:
    """Per-pair uncertainty ``K / sum_j alpha_ij + K / sum_j alpha_ji`` with ``alpha = e + 1``.

    Args:
        e: evidence ``(K, K)``, rows images, columns captions.

    Returns:
        ``(K,)`` in ``(0, 2]``: the i2t opinion's ``u`` of image i plus the t2i opinion's ``u``
        of caption i (the release's ``u_1 + u_2``, train.py ``get_correspondence``).
    """
    k = e.shape[-1]
    alpha = e + 1.0
    return k / alpha.sum(dim=1) + k / alpha.sum(dim=0)


def divide_by_evidence(e: Tensor) -> Tensor:
    """DECL's per-batch division: pair i is clean when row i of ``(E + E^T)``, normalised to
    sum 1, has its largest entry on the diagonal (ties: the first, as ``argmax``).

    Args:
        e: evidence ``(K, K)``.

    Returns:
        ``(K,)`` bool, True = predicted clean.
    """
    sym = e + e.t()
    norm = sym / sym.sum(dim=1, keepdim=True)
    return norm.argmax(dim=1) == torch.arange(e.shape[0], device=e.device)


def rdh_negatives(
    step: int, batch_length: int, batch_size: int, eta: float = 0.025, mu: int = 5
) -> int:
    """Number of hard negatives ``n`` of the RDH at global step ``step`` (the release's rule).

    ``n = max(int(batch_size - eta * step), mu)``, then ``batch_length - 1`` when the batch at
    hand is shorter than ``n`` (model/DECL.py). ``step`` counts from 1 at the first optimiser
    step (the release increments it before use); ``int`` truncates toward zero.

    Args:
        step: the global step the loss is computed at, ``>= 1``.
        batch_length: K of the batch at hand.
        batch_size: the K the schedule starts from (release: the nominal batch size; the
            paper reading: the batch at hand).
        eta, mu: decay per step and floor.

    Returns:
        ``n >= 1`` (for ``batch_length >= 2``).
    """
    neg = max(int(batch_size - eta * step), mu)
    if batch_length < neg:
        neg = batch_length - 1
    return max(neg, 1)


def rdh_per_pair(scores: Tensor, neg: int, margin: float = 0.2) -> Tensor:
    """Robust dynamic hinge of every pair: mean over the ``neg`` largest hinge costs in each
    direction, the two directions summed.

    Costs are ``[margin + s_ij - s_ii]_+`` (image i against caption j) and
    ``[margin + s_ji - s_ii]_+`` (caption i against image j), diagonal zero; the top ``neg`` are
    taken over all K entries of the row (the diagonal's 0 is never above a positive cost, so
    this is the top over the negatives when ``neg <= K - 1``), divided by ``neg``.

    Args:
        scores: ``(K, K)``, DECL feeds ``tanh(raw)``.
        neg: number of hard negatives, ``1 <= neg <= K``.
        margin: hinge margin (0.2).

    Returns:
        ``(K,)`` per-pair hinge.
    """
    k = scores.shape[0]
    if not 1 <= neg <= k:
        raise ValueError(f"neg must be in [1, {k}] for a batch of {k}, got {neg}")
    margins = torch.full((k,), margin, dtype=scores.dtype, device=scores.device)
    cost_i2t, cost_t2i = hinge_costs(scores, margins)
    top = cost_i2t.topk(neg, dim=1).values.sum(1) + cost_t2i.topk(neg, dim=1).values.sum(1)
    return top / neg


def decl_objective(
    raw: Tensor,
    clean: Tensor,
    *,
    neg: int,
    tau: float = 0.1,
    margin: float = 0.2,
    kl_weight: float = 0.1,
    rdh_weight: float = 0.8,
) -> dict[str, Tensor]:
    """DECL's batch loss ``L_e + rdh_weight * sum_{clean i} RDH_i`` (model/DECL.py).

    Args:
        raw: unit scores ``(K, K)`` with gradients.
        clean: ``(K,)`` bool division of the batch's pairs (all True in the warm-up).
        neg: RDH negatives (:func:`rdh_negatives`).
        tau: evidence temperature.
        margin: RDH margin.
        kl_weight: ``lambda2`` of the KL term.
        rdh_weight: weight of the RDH sum (release ``lambda1`` = 0.8).

    Returns:
        ``loss_edl`` (``L_e``), ``loss_rdh`` (the weighted sum; 0 without clean pairs) and
        detached diagnostics ``edl_ls``, ``edl_kl``, ``rdh`` (mean RDH over clean pairs),
        ``clean_share``.
    """
    if raw.dim() != 2 or raw.shape[0] != raw.shape[1]:
        raise ValueError(f"raw must be a (K, K) score matrix, got {tuple(raw.shape)}")
    labels = clean.to(device=raw.device, dtype=raw.dtype)
    edl = evidential_loss(
        raw[None], labels, tau=tau, ceiling=None, function="tanh", kl_weight=kl_weight,
        evidential="per_view",
    )  # fmt: skip
    per = rdh_per_pair(torch.tanh(raw), neg, margin)
    rdh = (per * labels).sum()
    n_clean = labels.sum()
    return {
        "loss_edl": edl["loss"],
        "loss_rdh": rdh_weight * rdh,
        "edl_ls": edl["ls"].detach(),
        "edl_kl": edl["kl"].detach(),
        "rdh": (rdh / n_clean.clamp_min(1.0)).detach(),
        "clean_share": (n_clean / labels.numel()).detach(),
    }


# ------------------------------------------------------------------------------- the method


@dataclass
class DECLConfig:
    """DECL's hyper-parameters (``method.decl``; release opts.py defaults).

    ``reading`` picks where the paper, the release and this package differ
    (docs/methods/decl.md, "Readings"): ``release`` sums the RDH over the batch's clean pairs
    at weight ``rdh_weight`` and starts the negatives' schedule from ``train.batch_size``;
    ``paper`` starts the schedule from the batch at hand (Suppl. Alg. 1's K); ``package`` as
    the paper, with the RDH weight ``rdh_weight * 128 / K`` so that its balance against the
    batch-averaged ``L_e`` is the release's at K = 128 for every batch size.
    """

    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {"reading": READINGS}
    RANGES: ClassVar[dict[str, str]] = {
        "tau": ">0", "margin": ">=0", "rdh_weight": ">=0", "kl_weight": ">=0", "eta": ">=0",
        "mu": ">=1",
    }  # fmt: skip
    # The keys each reading sets beyond this section's own switch (ugncl.run.config.apply_reading):
    # every reading trains with DECL's optimiser, Adam without weight decay (model/DECL.py of the
    # release; the paper's setting), and the paper and release in float32.
    # The backbone whose training recipe (train.*) the readings give: DECL's paper and release train
    # SGRAF; on the other backbone a reading sets the method's keys only
    # (ugncl.run.config.reading_layer).
    READING_BACKBONE: ClassVar[str] = "sgraf"
    READINGS: ClassVar[dict[str, dict[str, Any]]] = {
        "package": ADAM_NO_DECAY,
        "paper": {**ADAM_NO_DECAY, "train.amp": "off"},
        "release": {**ADAM_NO_DECAY, "train.amp": "off"},
    }
    # What each reading decides inside the method, beyond the keys (tools/readings.py).
    READING_NOTES: ClassVar[dict[str, str]] = {
        "package": "RDH negatives' schedule from the batch at hand; RDH weight "
        "rdh_weight * 128 / K (the release's balance at K = 128 for every K)",
        "paper": "RDH negatives' schedule from the batch at hand (Suppl. Alg. 1's K)",
        "release": "RDH negatives' schedule from train.batch_size",
    }

    reading: str = "package"
    tau: float = 0.1  # evidence temperature
    margin: float = 0.2  # RDH margin
    rdh_weight: float = 0.8  # lambda1
    kl_weight: float = 0.1  # lambda2, constant (release and Suppl. Table 1: no annealing)
    eta: float = 0.025  # RDH negatives' decay per global step
    mu: int = 5  # RDH negatives' floor


class DECLMethod(Method):
    """DECL on one network (SGRAF with one view, or CLIP on its cosine).

    DECL-SGRAF, the paper's headline row, is two runs (``model.sgraf.head=saf`` and ``sgr``)
    whose evidence ``tools/eval.py SAF_BEST.pt SGR_BEST.pt`` averages.
    """

    name = "decl"
    epoch_record = "noise_detection"
    reads_unit_scores = True
    nonfinite_hint = "Lower train.lr or check the input features for NaN."

    @section_defaults(DECLConfig)
    def __init__(
        self,
        *,
        reading: str,
        tau: float,
        margin: float,
        rdh_weight: float,
        kl_weight: float,
        eta: float,
        mu: int,
        eval_score: str = "evidence",
    ) -> None:
        super().__init__(eval_score=eval_score)
        if reading not in READINGS:
            raise ValueError(f"method.decl.reading must be one of {READINGS}, got {reading!r}")
        if not tau > 0:
            raise ValueError(f"method.decl.tau must be > 0, got {tau}; the release uses 0.1")
        if mu < 1:
            raise ValueError(f"method.decl.mu must be >= 1, got {mu}; the release uses 5")
        self.reading = reading
        self.tau, self.margin = float(tau), float(margin)
        self.rdh_weight, self.kl_weight = float(rdh_weight), float(kl_weight)
        self.eta, self.mu = float(eta), int(mu)
        self.batch_size: int | None = None  # train.batch_size, from the epoch start
        self.predicted_clean: np.ndarray | None = None  # (N,) bool, this epoch's division
        self.u: np.ndarray | None = None  # (N,) uncertainty at the division
        self._last: dict[str, float] = {}

    def retrieval_reducer(self) -> Callable[[Tensor], Tensor]:
        """Ranks by DECL's evidence: ``eval.eval_score: evidence`` is ``exp(tanh(r) / tau)``
        itself (evaluation.py ``shard_attn_scores``), so several checkpoints evaluated together
        (tools/eval.py: a saf and an sgr run, DECL-SGRAF) average their evidence as the release
        does (``validation_dul``); other scores as :func:`view_reducer`."""
        if self.eval_score != "evidence":
            return view_reducer(self.eval_score, self.tau, "tanh")
        tau = self.tau

        def mean_evidence(raw: Tensor) -> Tensor:  # (W, a, b) -> (a, b)
            return decl_evidence(raw.float(), tau).mean(0)

        return mean_evidence

    def backbone_error(self, model: nn.Module) -> str | None:
        return one_view_error(
            f"method decl trains one {model.backbone} network (one score per pair)",
            model,
            " (DECL-SGRAF is a saf run and an sgr run evaluated together by tools/eval.py)",
        )

    # ------------------------------------------------------------------ epoch start
    def on_epoch_start(self, ctx: MethodContext, epoch: int) -> dict[str, Any] | None:
        """After the warm-up: divide every training pair in batches of ``train.batch_size``
        (eval mode, a seeded shuffled order) and record how well ``u`` and the division find
        the truly noisy pairs."""
        self.batch_size = int(ctx.batch_size)
        if epoch < ctx.warmup_epochs:
            return None
        clean, u = self.divide(ctx, epoch)
        self.predicted_clean, self.u = clean, u
        # weight = 1 - u / 2 is high on pairs DECL trusts: weight_auc is the ROC-AUC of the
        # uncertainty as a detector of noisy pairs.
        record = detection_record(ctx.clean, weights=1.0 - u / 2.0, selected=clean)
        record["u_mean"] = float(u.mean())
        return record

    def divide(self, ctx: MethodContext, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """One no-grad pass: ``(N,)`` predicted-clean flags and uncertainties."""
        n = ctx.num_samples
        clean = np.zeros(n, dtype=np.float64)
        u = np.full(n, np.nan)
        with eval_mode(ctx.model):
            for batch in ctx.batches(epoch, ctx.batch_size, stream=DIVISION_STREAM):
                batch = batch.to(ctx.device)
                with ctx.autocast():
                    raw = self.scores(ctx.model, batch)
                e = decl_evidence(raw.float(), self.tau)
                idx = batch.index.cpu().numpy()
                clean[idx] = divide_by_evidence(e).cpu().numpy()
                u[idx] = uncertainty(e).cpu().numpy()
        visited = np.isfinite(u)
        clean, u = merge_rows(clean, visited), merge_rows(u, visited)
        if not np.isfinite(u).all():
            raise RuntimeError("the DECL division pass did not visit every training sample")
        return clean.astype(bool), u

    # ------------------------------------------------------------------ step
    @staticmethod
    def scores(model: nn.Module, batch: PairBatch) -> Tensor:
        """The batch's ``(K, K)`` unit scores of the model's one view."""
        return model.unit_scores(model(batch.images, batch.captions, batch.lengths))[0]

    def hard_negatives(self, k: int, global_step: int) -> int:
        """RDH negatives of a batch of ``k`` pairs after ``global_step`` optimiser steps."""
        start = self.batch_size if self.reading == "release" and self.batch_size else k
        return rdh_negatives(global_step + 1, k, start, self.eta, self.mu)

    def rdh_weight_at(self, k: int) -> float:
        """lambda1 of a batch of ``k``: as set (paper, release), or scaled by 128 / k
        (package)."""
        if self.reading == "package":
            return self.rdh_weight * REFERENCE_BATCH / k
        return self.rdh_weight

    def training_step(
        self, model: nn.Module, batch: PairBatch, ctx: StepContext
    ) -> dict[str, Tensor]:
        raw = self.scores(model, batch).float()
        k = raw.shape[-1]
        if ctx.warmup:
            clean = torch.ones(k, dtype=torch.bool, device=raw.device)
        elif self.predicted_clean is None:
            raise RuntimeError("DECL training step after warm-up without a division")
        else:
            flags = self.predicted_clean[batch.index.cpu().numpy()]
            clean = torch.as_tensor(flags, device=raw.device)
        neg = self.hard_negatives(k, ctx.global_step)
        out = decl_objective(
            raw, clean, neg=neg, tau=self.tau, margin=self.margin, kl_weight=self.kl_weight,
            rdh_weight=self.rdh_weight_at(k),
        )  # fmt: skip
        self._last = {"rdh_negatives": neg}
        return out

    # ------------------------------------------------------------------ bookkeeping
    def stats(self) -> dict[str, Any]:
        return dict(self._last)

    def get_extra_state(self) -> dict[str, Any]:
        """The epoch's division (indexed by sample), so a resumed epoch trains on it."""
        if self.predicted_clean is None:
            return {"predicted_clean": None, "u": None}
        return {
            "predicted_clean": torch.from_numpy(self.predicted_clean.copy()),
            "u": None if self.u is None else torch.from_numpy(self.u.astype(np.float64)),
        }

    def set_extra_state(self, state: dict[str, Any]) -> None:
        flags, u = state.get("predicted_clean"), state.get("u")
        self.predicted_clean = None if flags is None else np.asarray(flags, dtype=bool)
        self.u = None if u is None else np.asarray(u, dtype=np.float64)
