"""UGNCL: uncertainty-guided division at each epoch start, evidential + trusted robust loss.

Equations: docs/methods/ugncl.md. The division pass runs over the whole training set with the
model in eval mode, in a seeded shuffled order, in batches of K; each sample keeps its set,
soft label and normalised uncertainty until the next epoch. With ``division_pass: training``
there is no such pass: the training steps record each pair's division within its training
batch, and the next epoch start reads the records.
"""

from __future__ import annotations

import dataclasses
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
from ugncl.core.method import Method
from ugncl.methods.infonce import info_nce_per_sample, weighted_mean
from ugncl.methods.ugncl.division import (
    DETERMINED_RULES,
    UNVISITED,
    BatchDivision,
    DivisionAccumulator,
    DivisionResult,
    called_clean,
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
from ugncl.methods.ugncl.schedule import START_MODES, DivisionSchedule

XI2_TIMES_K = 0.8 * 128  # the paper's xi2 at its batch of 128 (Eq. 18)
DIVISION_STREAM = 1  # RNG stream of the division order (the training order uses stream 0)
# RNG stream of the agreed start's second batching of epoch 0 (no warm-up epoch before it).
REFERENCE_STREAM = 2


def clean_info_nce(logits: Tensor, sets: Tensor, weights: Tensor | None = None) -> Tensor:
    """The backbone's symmetric InfoNCE over the pairs a division keeps as clean (or over
    every pair, each by its weight).

    Args:
        logits: ``(W, K, K)`` raw model scores of a batch (CLIP: logit scale x cosine), rows
            images, columns captions; every caption of the batch is a negative of every row.
        sets: ``(K,)`` division set codes of the batch's pairs.
        weights: ``(K,)`` per-pair weights in [0, 1] (``clean_infonce_weights:
            soft_label``: Eq. 11's soft label of every pair on the batch's own scores), or
            None: weight 1 for a pair called clean and 0 for one called noisy.

    Returns:
        0-dim: per view, the weighted mean InfoNCE of the batch's pairs (0 when every
        weight is 0), averaged over views.
    """
    if weights is None:
        weights = called_clean(sets.to(logits.device)).float()
    else:
        weights = weights.to(logits.device).float().clamp(0.0, 1.0)
    views = [
        weighted_mean(info_nce_per_sample(view), weights, normalise=True) for view in logits.float()
    ]
    return torch.stack(views).mean()


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
        "division_start": START_MODES,
        "lambda_clock": ("division", "global", "epoch"),
        "reading": ("paper", "release", "package"),
        "clean_infonce_weights": ("called", "soft_label"),
        "determined_rule": DETERMINED_RULES,
    }
    # The keys each reading sets (docs/methods/ugncl.md, "Readings", lists them with the
    # equation each one reads): package is this dataclass's defaults plus the pre-filter;
    # paper every equation and setting as printed, where the printed form is numerically
    # safe (the evidence ceiling, Eq. 17's clamped logit and the exact fusion stay: the
    # printed forms overflow or are NaN); release where the public code differs from the
    # paper (it has no training driver: the division's pass and start follow the paper).
    # The backbone whose training recipe (train.*) the readings give: UGNCL's paper and release
    # train SGRAF; on the other backbone a reading sets the method's keys only
    # (ugncl.run.config.reading_layer).
    READING_BACKBONE: ClassVar[str] = "sgraf"
    READINGS: ClassVar[dict[str, dict[str, Any]]] = {
        # prefilter.kind is a run-level section (any method may use it), so the package
        # reading names it: UGNCL's defaults were measured with it on.
        "package": {"prefilter.kind": "linear"},
        "paper": {
            "method.ugncl.evidence": "softplus",  # Eq. 3
            "method.ugncl.soft_label": "belief",  # Eq. 11: y = b_ii
            "method.ugncl.trust_delta": 10.0,  # Eq. 17
            "method.ugncl.hard_noisy_trl": True,  # Eqs. 16-17
            "method.ugncl.lambda_clock": "epoch",  # Eq. 16: lambda per epoch
            "method.ugncl.lambda_delta": 0.25,
            "method.ugncl.trl_weight": 0.8,  # Eq. 18's xi2 as printed, at any batch
            "method.ugncl.division_pass": "separate",  # a pass at each epoch start
            "method.ugncl.division_start": "fixed",  # right after the warm-up
            "prefilter.kind": "none",
            "train.optimizer": "adam",  # NCR's optimiser, no decay
            "train.weight_decay": 0.0,
            "train.image_decay_per_rms": None,
            "train.amp": "off",
        },
        "release": {
            "method.ugncl.evidence": "softplus",
            "method.ugncl.soft_label": "projected",  # b_ii / (1 - u)
            "method.ugncl.trust_delta": 10.0,  # --triangle
            "method.ugncl.hard_noisy_trl": True,
            "method.ugncl.lambda_clock": "global",  # per optimiser step, delta 0.025
            "method.ugncl.trl_weight": 0.2,  # kxi2
            "method.ugncl.evidential_loss": "per_view",
            "method.ugncl.division_pass": "separate",
            "method.ugncl.division_start": "fixed",
            "prefilter.kind": "none",
            "train.optimizer": "adam",
            "train.weight_decay": 0.0,
            "train.image_decay_per_rms": None,
            "train.amp": "off",
            "eval.eval_score": "evidence_mean_exp",  # the mean of the views' exp evidence
        },
    }

    # paper | release | package: which reading the config starts from (READINGS); keys a
    # config states beside it are its departures.
    reading: str = "package"
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
    # Which determined pairs (u_bar < p) are clean: argmax (paper Eq. 9; default: the pair's
    # own caption holds the most evidence of its row, so a clean pair one rival of its batch
    # outranks is called noisy) | null_test (its evidence above the 1 - determined_level
    # quantile of the batch's mismatched pairs scored as training pairs: about
    # determined_level of the unmemorised noisy pairs pass, at any batch size; the CLIP
    # variant's rule; docs/methods/ugncl.md, "The determined pairs' test").
    determined_rule: str = "argmax"
    determined_level: float = 0.05
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
    lambda_delta: float = 0.025  # delta of the hardness schedule, per tick of lambda_clock
    # What Eq. 16's hardness schedule counts: division (decision: the optimiser steps since
    # the division started; warm-up and deferred epochs keep lambda = K - 1, the hinge over
    # all negatives) | global (released: every optimiser step since the first, warm-up
    # included; on a world where the warm-up learns slowly it hands the hardest negatives to
    # a model that cannot yet rank, docs/methods/ugncl.md) | epoch (paper: the epoch index,
    # warm-up included, with the paper's delta 0.25).
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
    # Weight of the backbone's own contrastive loss (symmetric InfoNCE on the model's raw
    # scores, as the ``infonce`` method trains) over the pairs the division keeps as clean,
    # added to Eq. 18 after the division starts. 0 (paper; default): Eq. 18 alone. Not in any
    # paper of the lineage (docs/methods/ugncl.md, "The backbone's loss on the kept pairs").
    clean_infonce: float = 0.0
    # How that InfoNCE weighs the batch's pairs: called (1 for a clean or hard-clean call of
    # the division, 0 otherwise) or soft_label (every pair by its soft label y_i, Eq. 11 with
    # the rule of soft_label, on the batch's own scores, detached: a pair counts by how much
    # of its evidence backs its own caption, as a weight method's pair counts by its weight).
    clean_infonce_weights: str = "called"
    start_separation: float = 2.0
    start_agreement: float = 0.5
    start_max_wait: int = 6
    # The pre-filter is the framework's (``prefilter.*``; docs/methods/ugncl.md, "The
    # pre-filter"): in its epochs this method divides by its selection (kept pairs hard-clean
    # with soft label 1, the rest hard-noisy), then by the model, and division_start is not
    # consulted. The package reading turns it on (prefilter.kind: linear).

    def validate(self) -> None:
        """Check the section once, whoever built it (a config file or a direct call).

        Raises:
            ConfigError: a choice outside :attr:`CHOICES`, a number outside its range, or
                ``division_batch_size`` beside ``division_pass: training``.
        """
        for key, options in self.CHOICES.items():
            if getattr(self, key) not in options:
                raise ConfigError(f"method.ugncl.{key} must be one of {' | '.join(options)}, "
                                  f"got {getattr(self, key)!r}")  # fmt: skip
        if not -1.0 < self.start_agreement <= 1.0:
            raise ConfigError(
                f"method.ugncl.start_agreement must be a kappa in (-1, 1], got "
                f"{self.start_agreement}; 0.5 starts the division once two epochs' noisy calls "
                "agree well beyond chance"
            )
        if self.start_max_wait < 0:
            raise ConfigError(
                f"method.ugncl.start_max_wait must be >= 0 epochs, got {self.start_max_wait}"
            )
        if self.division_lambda_min is not None and self.division_lambda_min < 1:
            raise ConfigError(
                "method.ugncl.division_lambda_min must be >= 1 (rivals) or null, got "
                f"{self.division_lambda_min}"
            )
        if self.clean_infonce < 0:
            raise ConfigError(
                f"method.ugncl.clean_infonce must be >= 0 (a loss weight), got "
                f"{self.clean_infonce}; 0 trains Eq. 18 alone"
            )
        if self.clean_infonce_weights != "called" and self.clean_infonce == 0:
            raise ConfigError(
                f"method.ugncl.clean_infonce_weights={self.clean_infonce_weights} weighs the "
                "backbone's InfoNCE term, which is off (method.ugncl.clean_infonce is 0); set "
                "method.ugncl.clean_infonce > 0 (e.g. 10) or drop clean_infonce_weights"
            )
        if self.null_level is not None and not 0.0 < self.null_level < 1.0:
            raise ConfigError(
                f"method.ugncl.null_level must be in (0, 1) or null, got {self.null_level}; "
                "0.1 lets about a tenth of the unmemorised noisy pairs into hard-clean"
            )
        if not 0.0 < self.determined_level < 1.0:
            raise ConfigError(
                f"method.ugncl.determined_level must be in (0, 1), got {self.determined_level}; "
                "0.05 calls about one in twenty unmemorised noisy pairs clean"
            )
        if self.division_pass == "training" and self.division_batch_size is not None:
            raise ConfigError(
                "method.ugncl.division_batch_size is set, but division_pass=training divides "
                "each pair within its training batch (train.batch_size); set it to null or "
                "use division_pass=separate"
            )


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
    ``e^(1/tau)``). In the pre-filter's epochs it divides by the pre-filter's selection
    (``reads_prefilter``): the rejected pairs stay in its objective as hard-noisy.
    """

    name = "ugncl"
    epoch_record = "division"
    reads_unit_scores = True
    reads_prefilter = True
    nonfinite_hint = (
        "Lower train.lr, check the input features for NaN, or set "
        "method.ugncl.evidence_ceiling lower."
    )

    def __init__(
        self, config: UGNCLConfig | None = None, *, eval_score: str = "evidence", **fields: Any
    ) -> None:
        """``config``: the ``method.ugncl`` section (default: its defaults); ``fields``
        replace single keys of it (``UGNCLMethod(lambda_min=2)``).

        Raises:
            ConfigError: a setting :meth:`UGNCLConfig.validate` refuses.
            TypeError: a keyword that is not a field of :class:`UGNCLConfig`.
        """
        super().__init__(eval_score=eval_score)
        self.config = dataclasses.replace(config or UGNCLConfig(), **fields)
        self.config.validate()
        self.retrieval_reducer()  # fail at construction on a bad tau or evidence function
        c = self.config
        self.schedule = DivisionSchedule(
            c.division_start, c.start_separation, c.start_agreement, c.start_max_wait
        )
        self.division: DivisionResult | None = None
        # division_pass: training -- the opinions recorded by the training steps so far
        # (latest per sample), read at each epoch start.
        self._recorded: DivisionAccumulator | None = None
        self._last_lambda: int | None = None

    @classmethod
    def from_config(cls, section: Any, *, eval_score: str) -> UGNCLMethod:
        """The method of the ``method.ugncl`` section, taken whole."""
        return cls(section, eval_score=eval_score)

    def retrieval_reducer(self) -> Callable[[Tensor], Tensor]:
        """Ranks by this method's evidence (its ``tau`` and evidence function)."""
        return view_reducer(self.eval_score, self.config.tau, self.config.evidence)

    def prepare(self, model: nn.Module, num_samples: int) -> None:
        if self.config.division_pass == "training":
            self._recorded = DivisionAccumulator(num_samples)

    # ------------------------------------------------------------------ epoch start
    def on_epoch_start(self, ctx: MethodContext, epoch: int) -> dict[str, Any] | None:
        """Divide the training pairs (the schedule says whether, and whether the epoch uses
        the division); the record holds the division's quality and the start fields."""
        if not self.schedule.divides(epoch, ctx.warmup_epochs):
            return None
        batch_size = self.config.division_batch_size or ctx.batch_size
        # Hardness of Eq. 16 at this epoch's first step: top_rival's rival count.
        lam = self._division_lambda(self.hardness(batch_size, ctx.global_step, epoch))
        if ctx.prefilter is not None and self.config.division_source == "model":
            return self._prefilter_epoch(ctx, lam)  # the truth diagnostic ignores it
        if self.config.division_source == "model" and self.schedule.wants_batching_reference(
            epoch, ctx.warmup_epochs
        ):
            reference = self._divide_with_model(
                ctx, epoch, batch_size, lam, stream=REFERENCE_STREAM
            )
            self.schedule.decide(-1, reference.sets, ctx.global_step)  # kept as the previous
        self.division = self._new_division(ctx, epoch, batch_size, lam)
        record = {**division_quality(self.division.sets, ctx.clean), "division_lambda": lam}
        record.update(
            self.schedule.decide(epoch - ctx.warmup_epochs, self.division.sets, ctx.global_step)
        )
        if epoch < ctx.warmup_epochs:
            self.division = None  # the reference division only
        # Until the start, the epoch trains with the warm-up objective (the division above is
        # recorded, not used).
        return record

    def _new_division(
        self, ctx: MethodContext, epoch: int, batch_size: int, lam: int
    ) -> DivisionResult:
        """This epoch's division: the truth diagnostic, the training steps' records
        (``division_pass: training``) or a pass over the training set (``separate``)."""
        if self.config.division_source == "truth":
            return truth_division(ctx.clean)
        if self.config.division_pass == "training":
            return self._division_from_training(ctx, epoch, batch_size, lam)
        return self._divide_with_model(ctx, epoch, batch_size, lam)

    def _prefilter_epoch(self, ctx: MethodContext, lam: int) -> dict[str, Any]:
        """Divide by the pre-filter's selection (kept pairs hard-clean, the rest hard-noisy);
        the record adds its estimate of the share of noisy pairs."""
        self.division = hard_division(ctx.prefilter.selected)
        self.schedule.start_now(ctx.global_step)
        record = {**division_quality(self.division.sets, ctx.clean), "division_lambda": lam}
        record["prefilter_null_share"] = ctx.prefilter.null_share
        return {**record, "prefiltered": True, "dividing": True}

    def _divide_with_model(
        self,
        ctx: MethodContext,
        epoch: int,
        batch_size: int,
        lam: int,
        indices: np.ndarray | None = None,
        stream: int = DIVISION_STREAM,
    ) -> DivisionResult:
        """The uncertainty-guided division pass (Eqs. 4-11) over the whole training set (or
        only ``indices``; the others stay unvisited), its batches in ``stream``'s order."""
        model = ctx.model
        accumulator = DivisionAccumulator(ctx.num_samples)
        with eval_mode(model):
            batches = ctx.batches(epoch, batch_size, stream=stream, indices=indices)
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
        c = self.config
        if self.schedule.wants_labels:
            with torch.no_grad():
                log_e = fused_log_evidence(
                    centre_scores(raw.detach(), c.centring), tau=c.tau, floor=c.evidence_floor,
                    function=c.evidence,
                )  # fmt: skip
                y = hard_soft_label(log_e, "top_rival", self._division_lambda(lam))
            self.schedule.labels.append(y.float().cpu().numpy())
        return divide_batch(
            raw, tau=c.tau, floor=c.evidence_floor, function=c.evidence, p=c.p,
            epsilon=c.epsilon, null_level=c.null_level, soft_label=c.soft_label,
            lam=self._division_lambda(lam), centring=c.centring,
            determined_rule=c.determined_rule, determined_level=c.determined_level,
        )  # fmt: skip

    def _division_lambda(self, lam: int) -> int:
        """top_rival's rival count for the loss's hardness ``lam`` (``division_lambda_min``)."""
        return max(lam, self.config.division_lambda_min or 0)

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
        logits = model(batch.images, batch.captions, batch.lengths)
        raw = model.unit_scores(logits).float()  # what self.scores(model, batch) returns
        lam = self.hardness(raw.shape[-1], ctx.global_step, ctx.epoch)
        self._last_lambda = lam
        common = dict(
            lam=lam,
            tau=self.config.tau,
            ceiling=self.config.evidence_ceiling,
            floor=self.config.evidence_floor,
            function=self.config.evidence,
            kl_weight=self.kl_weight_at(ctx.epoch),
            trl_weight=self.trl_weight_at(raw.shape[-1]),
            gamma=self.config.margin,
            evidential=self.config.evidential_loss,
            centring=self.config.centring,
        )
        if ctx.warmup or self.schedule.deferred:
            self._record(raw, batch, lam)
            if self.config.warmup_loss == "hinge_all":
                return triplet_objective(raw, margin=self.config.margin, max_violation=False)
            return warmup_objective(raw, **common)
        if self.division is None:
            raise RuntimeError(
                "UGNCL training step after warm-up without a division; "
                "on_epoch_start must run before the epoch"
            )
        sets, soft_label, u_bar = self.division.lookup(batch.index, device=raw.device)
        self._record(raw, batch, lam)
        terms = ugncl_objective(
            raw,
            sets=sets,
            soft_label=soft_label,
            u_bar=u_bar,
            margin_base=self.config.margin_base,
            trust_delta=self.config.trust_delta,
            hard_noisy_trl=self.config.hard_noisy_trl,
            noisy_edl=self.config.noisy_edl,
            hard_target=self.config.hard_target,
            **common,
        )
        if self.config.clean_infonce > 0:
            weights = None
            if self.config.clean_infonce_weights == "soft_label":
                weights = self.pair_soft_labels(raw.detach(), lam)
            terms["loss_nce"] = self.config.clean_infonce * clean_info_nce(logits, sets, weights)
        return terms

    def pair_soft_labels(self, raw: Tensor, lam: int) -> Tensor:
        """``(K,)`` Eq. 11's soft label of every pair of a batch from its raw scores
        ``(W, K, K)`` (fused bidirectional evidence, the rule of ``soft_label``), whether the
        division called the pair determined or hard."""
        c = self.config
        log_e = fused_log_evidence(raw, tau=c.tau, floor=c.evidence_floor, function=c.evidence)
        return hard_soft_label(log_e, c.soft_label, self._division_lambda(lam)).float()

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

    def hardness(self, k: int, global_step: int, epoch: int = 0) -> int:
        """Eq. 16's ``lambda`` for a batch of ``k`` pairs at ``global_step`` of ``epoch``.

        ``lambda_clock: global`` counts every step (released); ``epoch`` the epochs (paper,
        warm-up included); ``division`` counts the steps since the division started, so a
        world on which the warm-up learns slowly (and the start is deferred) is not handed
        the hardest negatives before its division can tell clean pairs from noisy ones."""
        clock = self.config.lambda_clock
        tick = {"global": global_step, "epoch": epoch}.get(clock)
        if tick is None:
            tick = self.schedule.steps_since_start(global_step)
        return lambda_schedule(k, tick, delta=self.config.lambda_delta,
                               theta=self.config.lambda_min)  # fmt: skip

    def trl_weight_at(self, k: int) -> float:
        """xi2 of a batch of ``k`` pairs: the set value, or (null) ``XI2_TIMES_K / k``.

        ``L_t`` is summed over the batch's anchors and ``L_e`` averaged over its queries, so
        each anchor's hinge weighs xi2 against 1/K of ``L_e``; the paper's 0.8 is set at
        K = 128 (docs/methods/ugncl.md, "The KL brake")."""
        return XI2_TIMES_K / k if self.config.trl_weight is None else self.config.trl_weight

    def kl_weight_at(self, epoch: int) -> float:
        """xi1, optionally annealed as in Sensoy et al. (2018): ``xi1 * min(1, epoch / n)``.

        ``kl_anneal_epochs = 0`` (default) keeps xi1 constant, as the released code does.
        """
        if self.config.kl_anneal_epochs <= 0:
            return self.config.kl_weight
        return self.config.kl_weight * min(1.0, epoch / self.config.kl_anneal_epochs)

    # ------------------------------------------------------------------ bookkeeping
    def stats(self) -> dict[str, Any]:
        """The hardness schedule's current lambda (the division has its own record)."""
        return {} if self._last_lambda is None else {"lambda": self._last_lambda}

    def get_extra_state(self) -> dict[str, Any]:
        """The last division (per-sample arrays indexed by sample index) and, with
        ``division_pass: training``, the opinions recorded since, for checkpoints."""
        state = {"division": None if self.division is None else self.division.to_state()}
        state.update(self.schedule.state())
        if self._recorded is not None:
            state["recorded"] = self._recorded.result().to_state()
        return state

    def set_extra_state(self, state: dict[str, Any]) -> None:
        division = state.get("division")
        self.division = None if division is None else DivisionResult.from_state(division)
        self.schedule.load_state(state)
        recorded = state.get("recorded")
        if self._recorded is not None and recorded is not None:
            self._recorded = DivisionAccumulator.from_result(DivisionResult.from_state(recorded))
