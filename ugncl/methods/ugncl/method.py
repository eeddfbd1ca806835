"""UGNCL: uncertainty-guided division at each epoch start, evidential + trusted robust loss.

Equations: docs/methods/ugncl.md. The division pass runs over the whole training set with the
model in eval mode, in a seeded shuffled order, in batches of K; each sample keeps its set,
soft label and normalised uncertainty until the next epoch. With ``division_pass: training``
there is no such pass: the training steps record each pair's division within its training
batch, and the next epoch start reads the records.
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
from ugncl.core.errors import ConfigError
from ugncl.core.evaluation import eval_mode, view_reducer
from ugncl.core.method import Method, section_defaults
from ugncl.methods.ugncl.division import (
    UNVISITED,
    BatchDivision,
    DivisionAccumulator,
    DivisionResult,
    divide_batch,
    division_quality,
    fused_log_evidence,
    hard_division,
    hard_soft_label,
)
from ugncl.methods.ugncl.evidential import CENTRINGS, centre_scores
from ugncl.methods.ugncl.losses import (
    HARD_TARGETS,
    lambda_schedule,
    triplet_objective,
    ugncl_objective,
    warmup_objective,
)
from ugncl.methods.ugncl.seed import null_share, seed_selection, training_pair_pvalues
from ugncl.methods.ugncl.start import (
    division_agreement,
    label_logits,
    should_start_division,
    two_mode_separation,
)

logger = logging.getLogger(__name__)

XI2_TIMES_K = 0.8 * 128  # the paper's xi2 at its batch of 128 (Eq. 18)
DIVISION_STREAM = 1  # RNG stream of the division order (the training order uses stream 0)


@dataclass
class UGNCLConfig:
    """UGNCL hyper-parameters (``method.ugncl``); names follow docs/methods/ugncl.md."""

    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {
        "evidence": ("tanh", "softplus"),
        "evidence_floor": ("keep", "subtract"),
        "evidential_loss": ("fused", "per_view"),
        "centring": CENTRINGS,
        "division_source": ("model", "truth"),
        "division_pass": ("separate", "training"),
        "soft_label": ("mean_rival", "top_rival", "max_rival", "projected", "belief"),
        "hard_target": HARD_TARGETS,
        "warmup_loss": ("hinge_all", "released"),
        "division_start": ("agreed", "separated", "fixed"),
        "lambda_clock": ("division", "global"),
        "seed": ("linear", "none"),
    }

    tau: float = 0.1
    # Evidence function of Eq. 3: tanh = exp(tanh(r)/tau) (DECL; default,
    # docs/methods/ugncl.md has the measurement), softplus = exp(softplus(r)/tau) (paper, released).
    evidence: str = "tanh"
    evidence_ceiling: float = 50.0
    evidence_floor: str = "keep"
    p: float = 0.5  # uncertainty threshold of the division (Eq. 8)
    epsilon: float = 0.5  # hard-clean / hard-noisy threshold on the soft label
    # Hard-clean also needs the soft label above the 1 - null_level quantile of the batch's
    # mismatched pairs' soft labels (the null of a noisy pair not yet memorised): a model that
    # cannot yet rank gives every pair y ~ 0.5, and y > epsilon alone passes half the noisy
    # pairs. null: epsilon alone (paper; default). 0.1 was measured, not adopted: a
    # purer first division, and a slower take-off where the model learns slowly
    # (docs/methods/ugncl.md, "The division's null").
    null_level: float | None = None
    # Soft label of hard pairs: top_rival (decision, docs/methods/ugncl.md: against the
    # lambda strongest rivals of Eq. 16's schedule) | mean_rival | max_rival | projected
    # (released b_ii / (1 - u)) | belief (paper b_ii).
    soft_label: str = "top_rival"
    kl_weight: float = 0.1  # xi1
    # xi2 (paper; released 0.2). The paper's 0.8 is set at K = 128: L_t is summed over the
    # batch's anchors and L_e averaged, so a config at another batch keeps xi2 * K = 102.4
    # (docs/methods/ugncl.md, "The KL brake").
    # null (default): 102.4 / K, the paper's xi2 * K at every batch size K (0.8 at K = 128).
    trl_weight: float | None = None
    margin: float = 0.2  # gamma
    margin_base: float = 10.0  # m of the soft margin
    # Delta of Eq. 17; paper 10. 0 (f_C = f_N = 1/2) is our default: with u ~ 1 for every pair
    # at xi1 = 0.1, Delta = 10 zeroes every hard-clean margin (docs/methods/ugncl.md).
    trust_delta: float = 0.0
    lambda_delta: float = 0.025  # delta of the hardness schedule, per optimiser step
    # Which steps Eq. 16's hardness schedule counts: division (decision: the steps since the
    # division started; warm-up and deferred epochs keep lambda = K - 1, the hinge over all
    # negatives) | global (released: every optimiser step since the first, warm-up included;
    # on a world where the warm-up learns slowly it hands the hardest negatives to a model
    # that cannot yet rank, docs/methods/ugncl.md).
    lambda_clock: str = "division"
    lambda_min: int = 5  # theta
    evidential_loss: str = "fused"
    division_batch_size: int | None = None  # null -> train.batch_size (K of the division)
    # Anneal xi1 linearly from 0 over this many epochs (Sensoy et al. 2018); 0 = constant
    # (released code). Tried and not adopted: docs/methods/ugncl.md.
    kl_anneal_epochs: int = 0
    # Hard-noisy pairs in the trusted robust loss: true = paper Eq. 16 (trusted soft margin);
    # false (decision, docs/methods/ugncl.md) = no hinge for them, like determined-noisy
    # pairs: the soft hinge kept pulling memorised noisy pairs up.
    hard_noisy_trl: bool = False
    # Pairs divided noisy in the evidential loss: true = paper Eq. 15 (target 0 / the soft
    # label; default); false = their queries leave L_e, so the clean pairs a learned division
    # marks noisy (a third of hard-noisy early on) are not pushed down. Measured, not adopted:
    # it lifted the default world's stalled runs and lowered both world variants
    # (docs/methods/ugncl.md).
    noisy_edl: bool = True
    # Target of hard pairs in the evidential loss: soft (paper Eq. 15: the soft label y) |
    # set (1 for hard-clean, 0 for hard-noisy; the margins keep y). With every pair hard, a
    # soft target trains a hard-noisy pair at y = 0.45 almost like a hard-clean one at 0.55.
    # Measured over the 14-run grid, not adopted: it moves which run stalls (mean test rSum
    # 411.9 -> 409.2; docs/methods/ugncl.md, "The evidential target of hard pairs").
    hard_target: str = "soft"
    # Each view's scores minus their batch mean before the evidence, the losses and the
    # division: none (paper, released; default) | batch (the KL term can no longer lower
    # every evidence at once through the shared offset; measured, not adopted:
    # docs/methods/ugncl.md).
    centring: str = "none"
    # Where the division comes from: model (the paper: the uncertainty-guided division) |
    # truth (diagnostic ceiling: the ground-truth flags of the noise file, every pair hard
    # with soft label 1 if clean and 0 if noisy, u_bar = 1, the regime every learned division
    # of the synthetic runs is in; docs/methods/ugncl.md, "The KL brake").
    division_source: str = "model"
    # Which forward passes the learned division reads: separate (the paper, METHOD 6: a pass
    # over the whole training set at the epoch start, model in eval mode) | training (each
    # pair's opinion from the batch it was last trained in, recorded by the training step:
    # no extra pass, ~22% of a CPU epoch; docs/methods/ugncl.md, "The epoch budget").
    division_pass: str = "training"
    # Floor of top_rival's rival count: null = lambda_min (the division hardens with Eq. 16's
    # schedule, as the trusted robust loss); n keeps the division at >= n rivals while the
    # loss goes on to lambda_min. Measured at 12, not adopted (docs/methods/ugncl.md,
    # "Two changes that move which runs lag").
    division_lambda_min: int | None = None
    # Warm-up objective: released (identity-target L_e + xi2 x the top-lambda hinge; default) |
    # hinge_all (the hinge summed over all in-batch negatives on sigmoid scores, the plain
    # model's warm-up). Measured, not adopted: the hinge leaves raw scores so large that the
    # first division marks most pairs determined, and Eq. 9's argmax then marks most clean
    # pairs noisy (docs/research/ugncl-generalisation.md).
    warmup_loss: str = "released"
    # When the division starts: agreed (decision: at the first epoch start from
    # train.warmup_epochs on where the division repeats the previous epoch's, Cohen's kappa
    # of the noisy calls >= start_agreement, and at the latest start_max_wait epochs after
    # train.warmup_epochs; the last warm-up epoch divides for reference) | fixed (paper: right
    # after train.warmup_epochs) | separated (where the soft labels' two modes separate,
    # Ashman's D >= start_separation, or D fell since the previous epoch start). A division
    # made before the model ranks clean pairs above their rivals calls pairs noisy by the luck
    # of their batch (docs/methods/ugncl.md, "When the division starts").
    division_start: str = "agreed"
    start_separation: float = 2.0
    start_agreement: float = 0.5
    start_max_wait: int = 6
    # The seed division (seed.py; docs/methods/ugncl.md, "The seed division"): linear
    # (decision) -- for the seed_epochs epochs after the warm-up, the division is a cross-fitted
    # ridge fit's from caption words to pooled region features, made before any training: the
    # pairs whose paired image it ranks in the top seed_alpha of rival images (about
    # seed_alpha of the noisy pairs pass, whatever the noise ratio), and within the
    # Benjamini-Hochberg set at false-discovery rate seed_fdr, are hard-clean, the others
    # hard-noisy; then the model's own division, and division_start is not consulted. A model
    # that learnt only the coarsest cue in its warm-up keeps about half the noisy pairs in its
    # first division and may never take off (docs/research/ugncl-generalisation.md). none:
    # the model's division from the start (paper). Raw-image backbones (no pooled region
    # feature) and a fit that selects no pair run as none.
    seed: str = "linear"
    seed_alpha: float = 0.02
    seed_fdr: float = 0.1
    seed_epochs: int = 6


def merge_division(local: DivisionResult) -> DivisionResult:
    """The division of the whole pass on every rank: each rank divided its share of the
    batches (``ctx.batches`` is sharded in a multi-process run); identity in one process."""
    seen = local.sets != UNVISITED
    return DivisionResult(
        u=merge_rows(local.u, seen), u_bar=merge_rows(local.u_bar, seen),
        soft_label=merge_rows(local.soft_label, seen), sets=merge_rows(local.sets, seen),
    )  # fmt: skip


def truth_division(clean: np.ndarray) -> DivisionResult:
    """The ground-truth division (``division_source: truth``; a diagnostic, not the method).

    Every pair is hard (``u_bar = 1``): true-clean pairs are hard-clean with soft label 1,
    noisy pairs hard-noisy with soft label 0. That is the regime of every learned division at
    xi1 = 0.1 (the determined sets stay empty), so a run with it measures what the losses can
    reach when the division is perfect.

    Args:
        clean: ``(N,)`` bool ground truth, indexed by dataset sample.

    Returns:
        A :class:`DivisionResult` over all ``N`` samples.

    Raises:
        ConfigError: if no pair is marked noisy (nothing to divide by).
    """
    clean = np.asarray(clean, dtype=bool)
    if clean.all():
        # CC152K's noise is real and unlabelled (every flag is True), as is a run at
        # data.noise_ratio 0: "truth" would silently train on every pair as clean.
        raise ConfigError(
            "method.ugncl.division_source=truth needs ground-truth noise flags, but no training "
            "pair of this run is marked noisy (data.noise_ratio 0, or a dataset with real, "
            "unlabelled noise such as CC152K); use division_source=model"
        )
    return hard_division(clean)


class UGNCLMethod(Method):
    """The UGNCL training method over a W-view similarity model (SGRAF, CLIP).

    It reads the model's unit scores (``reads_unit_scores``, ``model.unit_scores``), the scale
    its evidence function is set for: SGRAF's raw scores as they are, CLIP's cosine rather
    than ``logit_scale.exp() * cos`` (on which ``tanh`` saturates and every evidence is
    ``e^(1/tau)``).
    """

    name = "ugncl"
    epoch_record = "division"
    reads_unit_scores = True
    nonfinite_hint = (
        "Lower train.lr, check the input features for NaN, or set "
        "method.ugncl.evidence_ceiling lower."
    )

    @section_defaults(UGNCLConfig)
    def __init__(
        self,
        *,
        tau: float,
        evidence: str,
        evidence_ceiling: float,
        evidence_floor: str,
        p: float,
        epsilon: float,
        null_level: float | None,
        soft_label: str,
        kl_weight: float,
        trl_weight: float | None,
        margin: float,
        margin_base: float,
        trust_delta: float,
        lambda_delta: float,
        lambda_clock: str,
        lambda_min: int,
        evidential_loss: str,
        division_batch_size: int | None,
        kl_anneal_epochs: int,
        hard_noisy_trl: bool,
        noisy_edl: bool,
        hard_target: str,
        centring: str,
        division_source: str,
        division_pass: str,
        division_lambda_min: int | None,
        warmup_loss: str,
        division_start: str,
        start_separation: float,
        start_agreement: float,
        start_max_wait: int,
        seed: str,
        seed_alpha: float,
        seed_fdr: float,
        seed_epochs: int,
        eval_score: str = "evidence",
    ) -> None:
        super().__init__(eval_score=eval_score)
        self.tau = tau
        self.evidence = evidence
        self.retrieval_reducer()  # fail at construction on a bad tau or evidence function
        self.ceiling = evidence_ceiling
        self.floor = evidence_floor
        self.p = p
        self.epsilon = epsilon
        self.null_level = null_level
        self.soft_label = soft_label
        self.kl_weight = kl_weight
        self.trl_weight = trl_weight
        self.margin = margin
        self.margin_base = margin_base
        self.trust_delta = trust_delta
        self.lambda_delta = lambda_delta
        self.lambda_clock = lambda_clock
        self.lambda_min = lambda_min
        self.evidential_loss = evidential_loss
        self.division_batch_size = division_batch_size
        self.kl_anneal_epochs = kl_anneal_epochs
        self.hard_noisy_trl = hard_noisy_trl
        self.noisy_edl = noisy_edl
        self.hard_target = hard_target
        self.centring = centring
        self.division_source = division_source
        self.division_pass = division_pass
        self.division_lambda_min = division_lambda_min
        self.warmup_loss = warmup_loss
        self.division_start = division_start
        self.start_separation = start_separation
        self.start_agreement = start_agreement
        self.start_max_wait = start_max_wait
        self.seed = seed
        self.seed_alpha = seed_alpha
        self.seed_fdr = seed_fdr
        self.seed_epochs = seed_epochs
        for key, value in (
            ("warmup_loss", warmup_loss), ("division_start", division_start),
            ("lambda_clock", lambda_clock), ("seed", seed),
        ):  # fmt: skip
            if value not in UGNCLConfig.CHOICES[key]:
                choices = " | ".join(UGNCLConfig.CHOICES[key])
                raise ConfigError(f"method.ugncl.{key} must be one of {choices}, got {value!r}")
        if not -1.0 < start_agreement <= 1.0:
            raise ConfigError(
                f"method.ugncl.start_agreement must be a kappa in (-1, 1], got {start_agreement}; "
                "0.5 starts the division once two epochs' noisy calls agree well beyond chance"
            )
        if not 0.0 < seed_alpha < 1.0:
            raise ConfigError(
                f"method.ugncl.seed_alpha must be in (0, 1), got {seed_alpha}; it is the share "
                "of the noisy pairs the seed division lets in (0.02 by default)"
            )
        if not 0.0 < seed_fdr < 1.0:
            raise ConfigError(
                f"method.ugncl.seed_fdr must be in (0, 1), got {seed_fdr}; it is the largest "
                "expected share of noisy pairs in the seed's clean set (0.1 by default)"
            )
        if seed_epochs < 0:
            raise ConfigError(
                f"method.ugncl.seed_epochs must be >= 0 epochs, got {seed_epochs}; 0 turns the "
                "seed division off"
            )
        if start_max_wait < 0:
            raise ConfigError(
                f"method.ugncl.start_max_wait must be >= 0 epochs, got {start_max_wait}"
            )
        if division_lambda_min is not None and division_lambda_min < 1:
            raise ConfigError(
                f"method.ugncl.division_lambda_min must be >= 1 (rivals) or null, got "
                f"{division_lambda_min}"
            )
        if null_level is not None and not 0.0 < null_level < 1.0:
            raise ConfigError(
                f"method.ugncl.null_level must be in (0, 1) or null, got {null_level}; 0.1 lets "
                "about a tenth of the unmemorised noisy pairs into hard-clean"
            )
        if division_pass == "training" and division_batch_size is not None:
            raise ConfigError(
                "method.ugncl.division_batch_size is set, but division_pass=training divides "
                "each pair within its training batch (train.batch_size); set it to null or "
                "use division_pass=separate"
            )
        self.division: DivisionResult | None = None
        # division_pass: training -- the opinions recorded by the training steps so far
        # (latest per sample), read at each epoch start.
        self._recorded: DivisionAccumulator | None = None
        self._last_lambda: int | None = None
        # division_start: separated -- whether the division has started, whether this epoch
        # is one more warm-up epoch (the start was deferred), and the soft labels' separation
        # at each epoch start since train.warmup_epochs (start.py).
        self.started = division_start == "fixed"
        self.deferred = False
        self._separations: list[float] = []
        # division_start: agreed -- the set codes of the previous epoch start's division.
        self._previous_sets: np.ndarray | None = None
        # lambda_clock: division -- the global step at which the division started.
        self._start_step: int | None = None
        self._start_labels: list[np.ndarray] = []  # top_rival labels of the divided batches
        # seed: linear -- the pairs' p-values (computed at the first epoch after the warm-up);
        # None before, or where the data has no region features.
        self._seed_pvalues: np.ndarray | None = None
        self._seed_unavailable = False

    def retrieval_reducer(self) -> Callable[[Tensor], Tensor]:
        """Ranks by this method's evidence (its ``tau`` and evidence function)."""
        return view_reducer(self.eval_score, self.tau, self.evidence)

    def prepare(self, model: nn.Module, num_samples: int) -> None:
        if self.division_pass == "training":
            self._recorded = DivisionAccumulator(num_samples)

    # ------------------------------------------------------------------ epoch start
    def on_epoch_start(self, ctx: MethodContext, epoch: int) -> dict[str, Any] | None:
        # division_start: agreed compares each division with the previous epoch's, so the
        # last warm-up epoch with opinions recorded before it divides too (recorded only).
        reference = (
            self.division_start == "agreed" and not self.started and epoch >= 1
            and epoch == ctx.warmup_epochs - 1
        )  # fmt: skip
        if epoch < ctx.warmup_epochs and not reference:
            self._start_labels.clear()  # the start rule reads the latest epoch's opinions
            return None
        batch_size = self.division_batch_size or ctx.batch_size
        # Hardness of Eq. 16 at this epoch's first step: top_rival's rival count.
        lam = self._division_lambda(self.hardness(batch_size, ctx.global_step))
        if self._seeds(ctx, epoch):
            return self._seed_epoch(ctx, lam)
        if self.division_source == "truth":
            self.division = truth_division(ctx.clean)
        elif self.division_pass == "training":
            self.division = self._division_from_training(ctx, epoch, batch_size, lam)
        else:
            self.division = self._divide_with_model(ctx, epoch, batch_size, lam)
        record = {**division_quality(self.division.sets, ctx.clean), "division_lambda": lam}
        if self.division_start == "agreed" and not self.started:
            self._decide_agreed_start(epoch - ctx.warmup_epochs, record)
            if epoch < ctx.warmup_epochs:
                self.division = None  # the reference division only
                return record
        elif not self.started:
            # Every pair's diagonal against its lambda strongest rivals (top_rival's label,
            # whatever the set): a determined pair's 0/1 label would make two modes of its own.
            labels = np.concatenate(self._start_labels) if self._start_labels else np.empty(0)
            self._start_labels.clear()
            sep = two_mode_separation(label_logits(labels))
            self._separations.append(sep["separation"])
            self.started = should_start_division(self._separations, self.start_separation)
            record.update({f"start_{k}": v for k, v in sep.items()})
        # Until the start, the epoch trains with the warm-up objective (the division above is
        # recorded, not used).
        self.deferred = not self.started
        if self.started and self._start_step is None:
            self._start_step = ctx.global_step
        record["dividing"] = self.started
        return record

    def _seeds(self, ctx: MethodContext, epoch: int) -> bool:
        """Whether this epoch trains on the seed division (``seed: linear``): one of the
        ``seed_epochs`` after the warm-up, on region features, with ``division_source:
        model`` (the truth diagnostic is never seeded)."""
        if self.seed != "linear" or self.division_source != "model":
            return False
        if not 0 <= epoch - ctx.warmup_epochs < self.seed_epochs:
            return False
        if self._seed_pvalues is None and not self._seed_unavailable:
            self._seed_pvalues = self._compute_seed(ctx)
            self._seed_unavailable = self._seed_pvalues is None
        return self._seed_pvalues is not None

    def _compute_seed(self, ctx: MethodContext) -> np.ndarray | None:
        """The seed's p-values over the training pairs (None on raw images)."""
        if ctx.fetch is None:
            raise RuntimeError("method.ugncl.seed=linear needs MethodContext.fetch")
        pvalues = training_pair_pvalues(ctx.fetch, ctx.num_samples, ctx.batch_size, ctx.seed)
        if pvalues is None:
            logger.warning(
                "method.ugncl.seed=linear needs region features; these images are pixels, so "
                "the model's own division starts as method.ugncl.division_start says"
            )
            return None
        if not seed_selection(pvalues, self.seed_alpha, self.seed_fdr).any():
            logger.warning(
                "the seed division selects no pair at method.ugncl.seed_fdr=%s (the linear fit "
                "tells too few pairs from unrelated ones); the model's own division starts as "
                "method.ugncl.division_start says",
                self.seed_fdr,
            )
            return None
        return pvalues

    def _seed_epoch(self, ctx: MethodContext, lam: int) -> dict[str, Any]:
        """Divide by the seed (:func:`seed_selection` hard-clean, the rest hard-noisy); the
        record adds the estimated share of noisy pairs (``seed_null_share``)."""
        self.division = hard_division(
            seed_selection(self._seed_pvalues, self.seed_alpha, self.seed_fdr)
        )
        self.started, self.deferred = True, False
        if self._start_step is None:
            self._start_step = ctx.global_step
        record = {**division_quality(self.division.sets, ctx.clean), "division_lambda": lam}
        record["seed_null_share"] = null_share(self._seed_pvalues)
        return {**record, "seeded": True, "dividing": True}

    def _decide_agreed_start(self, waited: int, record: dict[str, Any]) -> None:
        """``division_start: agreed``: start once this division repeats the previous one.

        ``waited``: epochs since ``train.warmup_epochs`` (negative for the reference division
        of the last warm-up epoch, which only keeps its sets)."""
        sets = np.asarray(self.division.sets).copy()
        previous, self._previous_sets = self._previous_sets, sets
        if waited < 0:
            record["dividing"] = False
            return
        kappa = None if previous is None else division_agreement(previous, sets)
        record["start_agreement"] = kappa
        self.started = (kappa is not None and kappa >= self.start_agreement) or (
            waited >= self.start_max_wait
        )

    def _divide_with_model(
        self,
        ctx: MethodContext,
        epoch: int,
        batch_size: int,
        lam: int,
        indices: np.ndarray | None = None,
    ) -> DivisionResult:
        """The uncertainty-guided division pass (Eqs. 4-11) over the whole training set (or
        only ``indices``; the others stay unvisited)."""
        model = ctx.model
        accumulator = DivisionAccumulator(ctx.num_samples)
        with eval_mode(model):
            batches = ctx.batches(epoch, batch_size, stream=DIVISION_STREAM, indices=indices)
            for batch in batches:
                batch = batch.to(ctx.device)
                with ctx.autocast():
                    raw = self.scores(model, batch)
                accumulator.add(batch.index.cpu(), self.divide(raw.float(), lam))
        return merge_division(accumulator.result())

    def divide(self, raw: Tensor, lam: int) -> BatchDivision:
        """``divide_batch`` with this method's settings: raw ``(W, K, K)`` -> BatchDivision.

        ``lam``: the hardness of Eq. 16 at the division (``top_rival``'s rival count, floored
        by ``division_lambda_min``); ``tools/audit_division.py`` divides with it too.
        Before the division starts (``division_start: separated``) it also keeps every pair's
        ``top_rival`` label for the start rule."""
        if self.division_start == "separated" and not self.started:
            with torch.no_grad():
                log_e = fused_log_evidence(
                    centre_scores(raw.detach(), self.centring), tau=self.tau, floor=self.floor,
                    function=self.evidence,
                )  # fmt: skip
                y = hard_soft_label(log_e, "top_rival", self._division_lambda(lam))
            self._start_labels.append(y.float().cpu().numpy())
        return divide_batch(
            raw,
            tau=self.tau,
            floor=self.floor,
            function=self.evidence,
            p=self.p,
            epsilon=self.epsilon,
            null_level=self.null_level,
            soft_label=self.soft_label,
            lam=self._division_lambda(lam),
            centring=self.centring,
        )

    def _division_lambda(self, lam: int) -> int:
        """top_rival's rival count for the loss's hardness ``lam`` (``division_lambda_min``)."""
        return max(lam, self.division_lambda_min or 0)

    def _division_from_training(
        self, ctx: MethodContext, epoch: int, batch_size: int, lam: int
    ) -> DivisionResult:
        """``division_pass: training``: the opinions the training steps recorded.

        Each pair keeps the opinion of the last batch it was trained in (the previous epoch;
        the one before for the few pairs the previous epoch's dropped tail left out). Pairs
        no training step has scored yet (a short warm-up) are divided by a model pass over
        them, each batch filled up with other pairs as rivals so that it holds K pairs.
        """
        if self._recorded is None:
            raise RuntimeError("division_pass=training needs prepare() before training")
        missing = np.flatnonzero(self._recorded.result().sets < 0)
        if len(missing):
            if ctx.num_samples < batch_size:
                indices = np.arange(ctx.num_samples)
            else:
                # Rivals: other pairs in a seeded order, enough to fill the last batch.
                rng = np.random.default_rng([ctx.seed, epoch, DIVISION_STREAM])
                others = np.setdiff1d(np.arange(ctx.num_samples), missing)
                fill = (-len(missing)) % batch_size
                indices = np.concatenate([missing, rng.permutation(others)[:fill]])
            filled = self._divide_with_model(ctx, epoch, batch_size, lam, indices=indices)
            self._recorded.copy_from(filled, missing)
        return self._recorded.result()

    # ------------------------------------------------------------------ step
    def training_step(
        self, model: nn.Module, batch: PairBatch, ctx: StepContext
    ) -> dict[str, Tensor]:
        """Warm-up (and epochs whose division start was deferred): the all-negatives hinge
        (``warmup_loss: hinge_all``) or the released identity-target evidential loss +
        top-lambda hinge; then Eqs. 12-18."""
        raw = self.scores(model, batch).float()
        lam = self.hardness(raw.shape[-1], ctx.global_step)
        self._last_lambda = lam
        common = dict(
            lam=lam,
            tau=self.tau,
            ceiling=self.ceiling,
            floor=self.floor,
            function=self.evidence,
            kl_weight=self.kl_weight_at(ctx.epoch),
            trl_weight=self.trl_weight_at(raw.shape[-1]),
            gamma=self.margin,
            evidential=self.evidential_loss,
            centring=self.centring,
        )
        if ctx.warmup or self.deferred:
            self._record(raw, batch, lam)
            if self.warmup_loss == "hinge_all":
                return triplet_objective(raw, margin=self.margin, max_violation=False)
            return warmup_objective(raw, **common)
        if self.division is None:
            raise RuntimeError(
                "UGNCL training step after warm-up without a division; "
                "on_epoch_start must run before the epoch"
            )
        sets, soft_label, u_bar = self.division.lookup(batch.index, device=raw.device)
        self._record(raw, batch, lam)
        return ugncl_objective(
            raw,
            sets=sets,
            soft_label=soft_label,
            u_bar=u_bar,
            margin_base=self.margin_base,
            trust_delta=self.trust_delta,
            hard_noisy_trl=self.hard_noisy_trl,
            noisy_edl=self.noisy_edl,
            hard_target=self.hard_target,
            **common,
        )

    @staticmethod
    def scores(model: nn.Module, batch: PairBatch) -> Tensor:
        """The batch's ``(W, K, K)`` scores on the model's unit scale, the scores the
        evidence, the division, the losses and (in evaluation) the retrieval score read."""
        return model.unit_scores(model(batch.images, batch.captions, batch.lengths))

    def _record(self, raw: Tensor, batch: PairBatch, lam: int) -> None:
        """``division_pass: training``: keep this batch's division for the next epoch start
        (Eqs. 4-11 on the training forward's scores, detached; rivals = this batch)."""
        if self._recorded is not None:
            self._recorded.add(batch.index.cpu(), self.divide(raw.detach(), lam))

    def hardness(self, k: int, global_step: int) -> int:
        """Eq. 16's ``lambda`` for a batch of ``k`` pairs at ``global_step``.

        ``lambda_clock: global`` counts every step (released); ``division`` counts the steps
        since the division started, so a world on which the warm-up learns slowly (and the
        start is deferred) is not handed the hardest negatives before its division can tell
        clean pairs from noisy ones."""
        step = global_step
        if self.lambda_clock == "division":
            step = 0 if self._start_step is None else max(global_step - self._start_step, 0)
        return lambda_schedule(k, step, delta=self.lambda_delta, theta=self.lambda_min)

    def trl_weight_at(self, k: int) -> float:
        """xi2 of a batch of ``k`` pairs: the set value, or (null) ``XI2_TIMES_K / k``.

        ``L_t`` is summed over the batch's anchors and ``L_e`` averaged over its queries, so
        each anchor's hinge weighs xi2 against 1/K of ``L_e``; the paper's 0.8 is set at
        K = 128 (docs/methods/ugncl.md, "The KL brake")."""
        return XI2_TIMES_K / k if self.trl_weight is None else self.trl_weight

    def kl_weight_at(self, epoch: int) -> float:
        """xi1, optionally annealed as in Sensoy et al. (2018): ``xi1 * min(1, epoch / n)``.

        ``kl_anneal_epochs = 0`` (default) keeps xi1 constant, as the released code does.
        """
        if self.kl_anneal_epochs <= 0:
            return self.kl_weight
        return self.kl_weight * min(1.0, epoch / self.kl_anneal_epochs)

    # ------------------------------------------------------------------ bookkeeping
    def stats(self) -> dict[str, Any]:
        """The hardness schedule's current lambda (the division has its own record)."""
        return {} if self._last_lambda is None else {"lambda": self._last_lambda}

    def get_extra_state(self) -> dict[str, Any]:
        """The last division (per-sample arrays indexed by sample index) and, with
        ``division_pass: training``, the opinions recorded since, for checkpoints."""
        state = {"division": None if self.division is None else self.division.to_state()}
        state["started"] = self.started
        state["deferred"] = self.deferred
        state["separations"] = list(self._separations)
        state["start_step"] = self._start_step
        if self._previous_sets is not None:
            state["previous_sets"] = torch.from_numpy(self._previous_sets.astype(np.int64))
        # The labels kept since the last epoch start: a run resumed at an epoch boundary
        # decides the start on the same opinions as an uninterrupted one.
        labels = np.concatenate(self._start_labels) if self._start_labels else np.empty(0)
        state["start_labels"] = torch.from_numpy(labels.astype(np.float32))
        if self._recorded is not None:
            state["recorded"] = self._recorded.result().to_state()
        if self._seed_pvalues is not None:
            state["seed_pvalues"] = torch.from_numpy(self._seed_pvalues.astype(np.float64))
        return state

    def set_extra_state(self, state: dict[str, Any]) -> None:
        division = state.get("division")
        self.division = None if division is None else DivisionResult.from_state(division)
        self.started = bool(state.get("started", self.division_start == "fixed"))
        self.deferred = bool(state.get("deferred", False))
        self._separations = [float(x) for x in state.get("separations", [])]
        start_step = state.get("start_step")
        self._start_step = None if start_step is None else int(start_step)
        previous = state.get("previous_sets")
        self._previous_sets = None if previous is None else np.asarray(previous)
        labels = state.get("start_labels")
        self._start_labels = [] if labels is None or not len(labels) else [np.asarray(labels)]
        seed = state.get("seed_pvalues")
        self._seed_pvalues = None if seed is None else np.asarray(seed, dtype=np.float64)
        recorded = state.get("recorded")
        if self._recorded is not None and recorded is not None:
            self._recorded = DivisionAccumulator.from_result(DivisionResult.from_state(recorded))
