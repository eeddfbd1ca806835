"""OSA (one-step anti-noise) as a method of the one trainer (reference section 3).

A frozen estimator scores every training pair once, in ``setup``: with the estimator frozen a
pair's weight never changes, so the release's estimator forward in every batch
(main_clip.py:149-151) is repeated work. The diagonal scores and the space shift beta are
cached in the run directory (``osa_weights.npz``) and reused on resume; the estimator is then
released. Loss: ``mean_k w_k * InfoNCE_k`` (the release's ``CrossEn`` on rows and columns).

* beta: the mean estimator score of non-matching training pairs (the paper's space shift;
  the release scores uniform-noise pixels against random token ids, section 3.3), or a fixed
  value from the config.
* scoring: ``paper`` ``w = x^2 (1 - x)`` on the debiased cosine; ``released`` ``x / batch max``
  and ``x^2 (1 - x^2)``, computed per batch as released; no NaN when no pair exceeds beta.
* :meth:`OSAMethod.sample_weights` gives the weights indexed by sample index, so they also
  weight SGRAF's per-pair triplet loss (the estimator then is a CLIP model on the same pairs).
"""

from __future__ import annotations

import copy
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor, nn

from precomputed.errors import DataNotFoundError
from ugncl.framework.config import ConfigError
from ugncl.methods.clip import CLIPMethod
from ugncl.methods.infonce import weighted_mean
from ugncl.methods.noise_detection import detection_record
from ugncl.methods.ugncl.losses import _hinge_costs
from ugncl.methods.weighted.memory_bank import index_digest
from ugncl.methods.weighted.passes import logit_scale_of, scan_training_set
from ugncl.methods.weighted.weights import osa_weights

logger = logging.getLogger(__name__)

ESTIMATOR_STREAM = 4


def weighted_triplet(
    raw: Tensor, weights: Tensor, margin: float = 0.2, max_violation: bool = True
) -> Tensor:
    """OSA's weights on the SGRAF track: per-pair VSE++ hinge on ``sigmoid(raw)``, weighted.

    Pair ``i``'s cost is its image-anchor plus its caption-anchor hinge; ``sum_i w_i cost_i``
    (view-averaged) equals ``triplet_objective`` when every weight is 1.

    Args:
        raw: raw scores ``(W, K, K)``.
        weights: ``(K,)`` per-pair weights (no gradient).
        margin, max_violation: as :func:`ugncl.methods.ugncl.losses.vse_hinge`.

    Returns:
        0-dim tensor.
    """
    if raw.dim() != 3 or raw.shape[1] != raw.shape[2] or weights.shape != (raw.shape[1],):
        raise ValueError(
            f"raw must be (W, K, K) and weights (K,), got {raw.shape}, {weights.shape}"
        )
    w = weights.detach().to(raw.dtype)
    total = raw.new_zeros(())
    for view in raw:
        s = torch.sigmoid(view)
        margins = torch.full((s.shape[0],), margin, dtype=s.dtype, device=s.device)
        cost_i2t, cost_t2i = _hinge_costs(s, margins)
        if max_violation:
            per = cost_i2t.max(dim=1).values + cost_t2i.max(dim=1).values
        else:
            per = cost_i2t.sum(dim=1) + cost_t2i.sum(dim=1)
        total = total + (w * per).sum()
    return total / raw.shape[0]


def checkpoint_estimator(path: str) -> nn.Module:
    """The model a training checkpoint holds, of any registered backbone, or a CLIP weights
    file of this package."""
    # Imported here: ugncl.framework.build imports the method registry, which imports this module.
    from ugncl.framework.build import model_from_file

    if not Path(path).is_file():
        raise DataNotFoundError(
            f"method.osa.estimator: checkpoint {path} does not exist; give a training "
            "checkpoint (runs/<name>/checkpoints/best.pt), a CLIP weights file of this package "
            "(tools/pretrain_clip.py) or null for a frozen copy of the model"
        )
    return model_from_file(path)[0]


@dataclass
class OSAConfig:
    """OSA (``method.osa``)."""

    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {
        "scoring": ("paper", "released"),
        "objective": ("info_nce", "triplet"),
    }

    scoring: str = "paper"  # released: x / batch max, x^2 (1 - x^2)
    objective: str = "info_nce"  # triplet: weighted VSE++ hinge (the SGRAF track)
    margin: float = 0.2  # triplet only
    max_violation: bool = True  # triplet only
    beta: float | None = None  # null: mean score of non-matching training pairs
    estimator: str | None = None  # null: frozen copy of the starting model; else a checkpoint
    logit_scale: float | None = None  # null: the estimator's logit_scale.exp()
    pass_batch_size: int | None = 256
    cache_file: str = "osa_weights.npz"


class OSAMethod(CLIPMethod):
    """OSA with a frozen estimator whose weights are computed once.

    Args:
        scoring: ``paper`` or ``released`` (see :func:`ugncl.methods.weighted.weights.osa_weights`).
        objective: ``info_nce`` (CLIP) or ``triplet`` (:func:`weighted_triplet`, SGRAF).
        margin, max_violation: of the triplet objective.
        beta: fixed space shift on the estimator's logit scale (None: from random pairs).
        estimator: None = a frozen copy of the starting model; else a checkpoint path loaded
            with ``load_estimator`` (any backbone the package builds).
        logit_scale: the estimator's ``logit_scale.exp()`` when it has no ``logit_scale``
            attribute (None: read it from the estimator).
        pass_batch_size: batch size of the estimator pass (None: 256).
        cache_file: file name in the run directory.
        load_estimator: checkpoint path -> ``SimilarityModel`` (default
            :func:`checkpoint_estimator`).
    """

    name = "osa"
    epoch_record = "noise_detection"

    def __init__(
        self,
        *,
        scoring: str = "paper",
        objective: str = "info_nce",
        margin: float = 0.2,
        max_violation: bool = True,
        beta: float | None = None,
        estimator: str | None = None,
        logit_scale: float | None = None,
        pass_batch_size: int | None = 256,
        cache_file: str = "osa_weights.npz",
        load_estimator: Callable[[str], nn.Module] | None = None,
        eval_score: str = "raw",
    ) -> None:
        super().__init__(eval_score=eval_score)
        if scoring not in ("paper", "released"):
            raise ValueError(f"osa scoring must be paper or released, got {scoring!r}")
        if objective not in ("info_nce", "triplet"):
            raise ValueError(f"osa objective must be info_nce or triplet, got {objective!r}")
        self.scoring = scoring
        self.objective = objective
        self.margin = margin
        self.max_violation = max_violation
        self.fixed_beta = beta
        self.estimator_path = estimator
        self.logit_scale = logit_scale
        self.pass_batch_size = pass_batch_size
        self.cache_file = cache_file
        self.load_estimator = load_estimator
        self.sim: np.ndarray | None = None  # (N,) estimator diagonal scores
        self.beta: float | None = None
        self.scale: float | None = None
        self._clean: np.ndarray | None = None
        self._last: dict[str, float] = {}

    # ------------------------------------------------------------------ estimator
    def build_estimator(self, model: nn.Module) -> nn.Module:
        """A frozen copy of ``model`` (default) or the configured checkpoint, in eval mode."""
        if self.estimator_path is None:
            est = copy.deepcopy(model)
        else:
            load = self.load_estimator or checkpoint_estimator
            est = load(self.estimator_path)
            est.to(next(model.parameters()).device)
        est.eval()
        est.requires_grad_(False)
        return est

    def estimator_batches(self, ctx: Any, est: nn.Module) -> Callable[..., Any] | None:
        """The pass's batches: the trainer's, or with ``data.estimator`` set the same samples
        in the estimator's input format (``ctx.estimator_view(est)``: the SGRAF track scored
        by a CLIP estimator on the raw-image view)."""
        view = getattr(ctx, "estimator_view", None)
        if view is not None:
            return view(est)
        backbone = getattr(est, "backbone", None)
        if backbone is not None and backbone != getattr(ctx.model, "backbone", backbone):
            raise ConfigError(
                f"method.osa.estimator is a {backbone} model but the run trains "
                f"{ctx.model.backbone}: it needs the training pairs in its input format; set "
                f"data.estimator.name to the same split in the {backbone} layout (e.g. "
                f"{'synthetic_clip' if backbone == 'clip' else 'synthetic_precomp'})"
            )
        return None

    def setup(self, ctx: Any) -> dict[str, Any]:
        """One estimator pass over the training set (or the cached result of one)."""
        path = Path(ctx.run_dir) / self.cache_file
        self._clean = np.asarray(ctx.clean, dtype=bool)
        image_index = getattr(ctx, "image_index", None)
        if path.exists():
            with np.load(path, allow_pickle=False) as f:
                sim, beta, scale = f["sim"], float(f["beta"]), float(f["scale"])
                digest = str(f["index_sha256"])
            if len(sim) != ctx.num_samples or (
                image_index is not None and digest != index_digest(image_index)
            ):
                raise ValueError(
                    f"{path} was computed on other training pairs; delete it to recompute"
                )
            logger.info("osa: reusing estimator scores %s", path)
        else:
            est = self.build_estimator(ctx.model)
            scan = scan_training_set(
                ctx, est, epoch=0, stream=ESTIMATOR_STREAM, desc="osa estimator",
                batch_size=self.pass_batch_size or 256,
                batches=self.estimator_batches(ctx, est),
            )  # fmt: skip
            sim = scan.diag
            beta = self.fixed_beta if self.fixed_beta is not None else scan.shift.mean
            scale = logit_scale_of(est, self.logit_scale)
            del est  # frozen and fully used: every weight is now fixed
            tmp = path.with_name(path.name + ".tmp.npz")
            np.savez(
                tmp, sim=sim.astype(np.float32), beta=np.float64(beta), scale=np.float64(scale),
                index_sha256=np.str_(index_digest(scan.image_index)),
            )  # fmt: skip
            os.replace(tmp, path)
        self.sim, self.beta, self.scale = sim.astype(np.float32), beta, scale
        record = detection_record(self._clean, weights=self.sample_weights())
        return {"beta": self.beta, "logit_scale": self.scale, **record}

    def sample_weights(self) -> np.ndarray:
        """``(N,)`` float32 weight of every training pair, indexed by sample index.

        ``released`` scoring normalises by a batch maximum; for a whole-set array the maximum
        is taken over the training set (the one place a batch is not defined).
        """
        if self.sim is None:
            raise RuntimeError("osa weights are not computed; setup(ctx) must run first")
        w = osa_weights(self.sim, self.beta, scale=self.scale, scoring=self.scoring)
        return w.numpy()

    def on_epoch_start(self, ctx: Any, epoch: int) -> dict[str, Any] | None:
        if self.sim is None:  # resumed run: setup's scores are reloaded from the run dir
            self.setup(ctx)
        return detection_record(self._clean, weights=self.sample_weights())

    def epoch_samples(self, ctx: Any, epoch: int) -> np.ndarray | None:
        return None

    def trainable_parameters(self, model: nn.Module):
        return [p for p in model.parameters() if p.requires_grad]

    # ------------------------------------------------------------------ step
    def batch_weights(self, index: Tensor) -> Tensor:
        """``(K,)`` weights of a batch's pairs (released scoring: normalised in the batch)."""
        if self.sim is None:
            raise RuntimeError("osa weights are not computed; setup(ctx) must run first")
        sim = torch.as_tensor(self.sim[index.cpu().numpy()])
        w = osa_weights(sim, self.beta, scale=self.scale, scoring=self.scoring)
        return w.to(index.device)

    def training_step(self, model: nn.Module, batch: Any, step: Any) -> dict[str, Tensor]:
        w = self.batch_weights(batch.index)
        self._last = {"weight_mean": float(w.mean())}
        if self.objective == "triplet":
            raw = model(batch.images, batch.captions, batch.lengths).float()
            # The triplet baseline's warm-up (ugncl.methods.triplet): all negatives summed.
            max_violation = self.max_violation and not getattr(step, "warmup", False)
            loss = weighted_triplet(raw, w, self.margin, max_violation)
            return {"loss_triplet": loss, "weight_mean": w.mean().detach()}
        per = self.per_sample_loss(model, batch)
        return {"loss": weighted_mean(per, w), "weight_mean": w.mean().detach()}

    def stats(self) -> dict[str, Any]:
        return dict(self._last)
