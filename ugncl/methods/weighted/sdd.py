"""SDD (self-drop + dual weight) as a method of the one trainer (docs/methods/weighted.md).

Per epoch (``on_epoch_start``): the diagonal logit-scaled similarity of every training pair
under the current model; a 2-component GMM on it gives the consistency weight (higher-mean
posterior; min-max normalised as released, ``consistency_norm``); pairs with similarity
``<= alpha`` are dropped for the epoch (``epoch_samples``). Per batch: NPC's significance
weight from a siamese step weighted by the consistency weight; loss
``mean_k w_sig,k * w_con,k * InfoNCE_k``.

Fixed against the release: bank lookups use the sample index (the release looks the text
bank up by position in the self-dropped subset, data.py:376), InfoNCE is log-sum-exp
stabilised (InfoNCELoss.py), the bank is built by ``setup`` with the features indexed by
sample (the release mis-pairs shuffled features), normalised keys. The package also excludes
the query's own pair (``siamese.exclude_own_pair``; the paper and release readings do not).
``thresholds: auto`` places alpha/beta on the scale of the model at hand
(:func:`ugncl.methods.weighted.weights.auto_sdd_thresholds`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor, nn

from ugncl.core.engine.distributed import is_main_process, on_main
from ugncl.core.method import section_defaults
from ugncl.methods.infonce import weighted_mean
from ugncl.methods.infonce_method import InfoNCEMethod
from ugncl.methods.noise_detection import detection_record
from ugncl.methods.weighted.memory_bank import MemoryBank
from ugncl.methods.weighted.npc import BANK_STREAM, BankExtras, BankSiamese
from ugncl.methods.weighted.passes import scan_training_set, untrained_start_error
from ugncl.methods.weighted.sections import (
    READING_CHOICES,
    GMMConfig,
    SiameseConfig,
    nested_choices,
    section_value,
)
from ugncl.methods.weighted.weights import (
    auto_sdd_thresholds,
    bank_clean_mask,
    consistency_weight,
    self_drop_keep,
)

logger = logging.getLogger(__name__)

GMM_STREAM = 3  # RNG stream of the per-epoch similarity pass


# The SDD README's training command; the paper prints batch 128 (else as the README).
SDD_TRAINING: dict[str, Any] = {
    "train.optimizer": "adamw", "train.lr": 2.0e-7, "train.weight_decay": 0.2,
    "train.adam_beta1": 0.9, "train.adam_beta2": 0.98, "train.adam_eps": 1.0e-6,
    "train.batch_size": 256, "train.epochs": 5,
}  # fmt: skip


@dataclass
class SDDConfig:
    """SDD (``method.sdd``); thresholds on the model's logit-scaled scale. Defaults are the
    package's reading, ``reading`` picks another."""

    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {
        "reading": READING_CHOICES,
        "thresholds": ("fixed", "auto"),
        "consistency_norm": ("min_max", "none"),
        **nested_choices("siamese", SiameseConfig),
    }
    # Every key where the paper as printed and the public release differ from the package
    # (docs/methods/weighted.md, "SDD").
    # The backbone whose training recipe (train.*) the readings give: SDD's paper and release fine-
    # tune CLIP; on the other backbone a reading sets the method's keys only
    # (ugncl.run.config.reading_layer).
    READING_BACKBONE: ClassVar[str] = "clip"
    READINGS: ClassVar[dict[str, dict[str, Any]]] = {
        "package": {},
        "paper": {
            "method.sdd.consistency_norm": "none",
            "method.sdd.siamese.exclude_own_pair": False,
            **SDD_TRAINING,
            "train.batch_size": 128,
        },
        "release": {
            "method.sdd.siamese.ratio_grouping": "bank",
            "method.sdd.siamese.exclude_own_pair": False,
            **SDD_TRAINING,
        },
    }

    reading: str = "package"  # paper | release | package: sets the keys READINGS lists
    alpha: float = 20.0  # self-drop: sim <= alpha (release, x100 scale)
    beta: float = 30.0  # bank clean set: sim > beta (release)
    thresholds: str = "fixed"  # auto: from the starting model's non-matching pair scores
    auto_alpha_std: float = 0.0
    auto_beta_std: float = 2.0
    # min_max: the GMM posterior rescaled to [0, 1] over the training set (release);
    # none: the raw posterior (paper)
    consistency_norm: str = "min_max"
    pass_batch_size: int | None = 512
    bank_file: str = "sdd_memory_bank.npz"
    siamese: SiameseConfig = field(default_factory=SiameseConfig)
    # the per-epoch GMM (release main_SDD_sim.py:101-117: 10 iterations)
    gmm: GMMConfig = field(default_factory=lambda: GMMConfig(max_iter=10))


class SDDMethod(InfoNCEMethod):
    """SDD on a CLIP-like ``SimilarityModel``.

    Args:
        reading: the reading the config resolved (recorded; its keys are already set).
        alpha: self-drop threshold (drop ``sim <= alpha``; release 20 on the x100 scale).
        beta: bank clean threshold (``sim > beta``; release 30).
        thresholds: ``fixed`` (alpha, beta as given) or ``auto`` (from the starting model's
            non-matching pair scores, see ``auto_sdd_thresholds``; alpha/beta are then unused).
        auto_alpha_std, auto_beta_std: offsets of the auto mode, in standard deviations.
        consistency_norm: ``min_max`` (release) or ``none`` (paper: the raw GMM posterior).
        pass_batch_size: batch size of the bank and per-epoch passes (release 512).
        bank_file: file name in the run directory (reused on resume).
        siamese, gmm: as :class:`ugncl.methods.weighted.npc.NPCMethod` (SDD Eq. 9-10 group
            the ratio by direction; the GMM is the per-epoch one).
    """

    name = "sdd"
    epoch_record = "noise_detection"
    negatives = "gathered"  # as NPC: the loss and the siamese step are the global batch's

    @section_defaults(SDDConfig)
    def __init__(
        self,
        *,
        reading: str,
        alpha: float,
        beta: float,
        thresholds: str,
        auto_alpha_std: float,
        auto_beta_std: float,
        consistency_norm: str,
        pass_batch_size: int | None,
        bank_file: str,
        siamese: SiameseConfig | dict[str, Any],
        gmm: GMMConfig | dict[str, Any],
        eval_score: str = "raw",
    ) -> None:
        super().__init__(eval_score=eval_score)
        if thresholds not in SDDConfig.CHOICES["thresholds"]:
            raise ValueError(f"sdd thresholds must be fixed or auto, got {thresholds!r}")
        if consistency_norm not in SDDConfig.CHOICES["consistency_norm"]:
            raise ValueError(
                f"sdd consistency_norm must be min_max or none, got {consistency_norm!r}"
            )
        self.reading = reading
        self.alpha, self.beta = float(alpha), float(beta)
        self.thresholds = thresholds
        self.auto_std = (auto_alpha_std, auto_beta_std)
        self.consistency_norm = consistency_norm
        self.gmm = section_value(SDDConfig().gmm, gmm)
        self.pass_batch_size = pass_batch_size
        self.bank_file = bank_file
        self.core = BankSiamese(section_value(SDDConfig().siamese, siamese))
        self._clean: np.ndarray | None = None
        self.consistency: np.ndarray | None = None  # (N,) this epoch's GMM weight
        self._consistency_on: Tensor | None = None  # the same on the batches' device
        self.keep: np.ndarray | None = None  # (N,) bool, not self-dropped this epoch
        self._seed = 0
        self._start_diag: np.ndarray | None = None  # setup's scores of the starting model

    def _batch_size(self, ctx: Any) -> int:
        return self.pass_batch_size or getattr(ctx, "batch_size", 256)

    def backbone_error(self, model: nn.Module) -> str | None:
        return (
            super().backbone_error(model)
            or untrained_start_error("sdd's memory bank and thresholds", model)
            or self._threshold_scale_error(model)
        )

    def _threshold_scale_error(self, model: nn.Module) -> str | None:
        """The release's fixed thresholds are CLIP scores; on another backbone's scale they
        keep every pair or none (measured: SGRAF after a 2-epoch warm-up, beta 30 kept none)."""
        backbone = getattr(model, "backbone", "clip")
        release = (SDDConfig.alpha, SDDConfig.beta)
        if self.thresholds != "fixed" or backbone == "clip" or (self.alpha, self.beta) != release:
            return None
        return (
            f"sdd's fixed thresholds (alpha {self.alpha:g}, beta {self.beta:g}) are CLIP "
            f"ViT-B/32 cosines on its x100 logit scale, and {backbone} scores live on another "
            "scale; set method.sdd.thresholds=auto (from the starting model's non-matching pair "
            "scores) or method.sdd.alpha/beta on that scale"
        )

    # ------------------------------------------------------------------ lifecycle
    def setup(self, ctx: Any) -> dict[str, Any]:
        """Build (or reload) the bank from the starting model; resolve auto thresholds."""
        run_dir = Path(ctx.run_dir)
        path, meta_path = run_dir / self.bank_file, run_dir / (self.bank_file + ".json")
        self._clean = np.asarray(ctx.clean, dtype=bool)
        self._seed = int(ctx.seed or 0)
        if path.exists() and meta_path.exists():
            bank = MemoryBank.load(path, getattr(ctx, "image_index", None))
            meta = json.loads(meta_path.read_text())
            self.alpha, self.beta = float(meta["alpha"]), float(meta["beta"])
            logger.info(
                "sdd: reusing memory bank %s (alpha %.4g, beta %.4g)", path, self.alpha, self.beta
            )
        else:
            scan = scan_training_set(
                ctx, ctx.model, epoch=0, stream=BANK_STREAM, embeddings=True, desc="sdd bank",
                batch_size=self._batch_size(ctx),
            )  # fmt: skip
            meta = {}
            if self.thresholds == "auto":
                self.alpha, self.beta = auto_sdd_thresholds(
                    scan.shift.mean, scan.shift.std,
                    alpha_std=self.auto_std[0], beta_std=self.auto_std[1],
                )  # fmt: skip
                meta = {"shift_mean": scan.shift.mean, "shift_std": scan.shift.std}
            clean = bank_clean_mask(scan.diag, self.beta)
            # The nearest-neighbour search over all samples once, on rank 0, sent to every
            # rank (their merged pass results are identical).
            bank = on_main(lambda: self.core.build_bank(clean, scan, scan.diag, ctx.device))
            self._start_diag = scan.diag  # epoch 0 starts from this model: no second pass
            if is_main_process():  # every rank holds the bank; rank 0 writes it
                bank.save(path)
                meta_path.write_text(json.dumps({"alpha": self.alpha, "beta": self.beta, **meta}))
        self.core.attach(ctx, bank)
        record = detection_record(self._clean, weights=bank.score, selected=bank.clean)
        return {
            "alpha": self.alpha,
            "beta": self.beta,
            "bank_keys": int(bank.clean.sum()),
            **{f"bank_{k}": v for k, v in record.items()},
        }

    def on_epoch_start(self, ctx: Any, epoch: int) -> dict[str, Any]:
        """Per-epoch GMM consistency weights and self-drop set (SDD main_SDD_sim.py:101-117)."""
        if self.core.bank is None:  # resumed run: setup's bank is reloaded from the run dir
            self.setup(ctx)
        record: dict[str, Any] = {}
        w = self.core.merged_weights()
        if w is not None and np.isfinite(w).any():
            # Final weight of the previous epoch, w_sig * w_con, where it was applied.
            record.update(detection_record(self._clean, weights=w, prefix="step_"))
            self.core.epoch_weights = np.full_like(w, np.nan)
        if epoch == 0 and self._start_diag is not None:
            diag = self._start_diag
        else:
            diag = scan_training_set(
                ctx, ctx.model, epoch=epoch, stream=GMM_STREAM, batch_size=self._batch_size(ctx),
                desc=f"sdd gmm {epoch}",
            ).diag  # fmt: skip
        self._start_diag = None
        self._consistency_on = None
        self.consistency = consistency_weight(
            diag, seed=self._seed, norm=self.consistency_norm, **self.gmm.kwargs()
        )
        self.keep = self_drop_keep(diag, self.alpha)
        record.update(detection_record(self._clean, weights=self.consistency, selected=self.keep))
        record["n_dropped"] = int((~self.keep).sum())
        return record

    def epoch_samples(self, ctx: Any, epoch: int) -> np.ndarray | None:
        """Sample indices kept this epoch (all when everything would be dropped)."""
        if self.keep is None:
            return None
        kept = np.flatnonzero(self.keep)
        if kept.size == 0:
            logger.warning("sdd: every pair is at or below alpha=%.4g; training on all", self.alpha)
            return None
        return kept

    def prefetch_samples(self) -> BankExtras | None:
        return self.core.extras

    def trainable_parameters(self, model: nn.Module):
        return [p for p in model.parameters() if p.requires_grad]

    # ------------------------------------------------------------------ step
    def _consistency_weights(self, device: torch.device) -> Tensor:
        """``(N,)`` this epoch's consistency weights on ``device``, copied there once per
        epoch: a step looks its pairs up by sample index on the device, with no copy of the
        indices back to the host."""
        if self._consistency_on is None or self._consistency_on.device != device:
            self._consistency_on = torch.as_tensor(self.consistency, device=device)
        return self._consistency_on

    def training_step(self, model: nn.Module, batch: Any, step: Any) -> dict[str, Tensor]:
        if self.consistency is None:
            raise RuntimeError("sdd training step before on_epoch_start computed its weights")
        # Sample indices, not positions in the kept subset (the release's text-bank bug).
        w_con = self._consistency_weights(batch.captions.device)[
            batch.index.to(batch.captions.device)
        ]
        view = self.core.bank_view(self.core.global_inputs(batch), getattr(step, "extra", None))
        img, cap, per = self.core.encode_global(model, batch)
        lr = getattr(step, "lr", None)
        w_sig, res = self.core.significance(model, view, per, w_con, lr, None, (img, cap))
        w = w_sig * w_con
        self.core.note_weights(batch.index, w)
        return {
            "loss": weighted_mean(per, w),
            "weight_mean": w.mean().detach(),
            "w_sig_mean": w_sig.mean().detach(),
            "siamese_loss": res.step_loss,
        }
