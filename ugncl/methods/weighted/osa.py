"""OSA (one-step anti-noise) as a method of the one trainer (docs/methods/weighted.md).

A frozen estimator scores every training pair once, in ``setup``: with the estimator frozen a
pair's weight never changes, so the release's estimator forward in every batch
(main_clip.py:149-151) is repeated work. The diagonal scores and the space shift beta are
cached in the run directory (``osa_weights.npz``) and reused on resume; the estimator is then
released. Loss: ``mean_k w_k * InfoNCE_k`` (the release's ``CrossEn`` on rows and columns).

* adaptation (``adapt``; the package's decision, on by default): before scoring, the
  estimator is adapted to the target domain: a GMM on its per-sample losses keeps a strict
  clean set (posterior > ``adapt_threshold``), and the estimator is warmed up on it for
  ``adapt_epochs`` of InfoNCE. OSA's paper describes it as optional and not needed, and the
  release has no code for it: the ``paper`` and ``release`` readings turn it off.
* beta (Eq. 4): the mean estimator score of random-input pairs (uniform-noise pixels against
  random token ids, as released; ``beta_source: random_inputs``), or the mean score of
  mismatched training pairs (``beta_source: mismatched_pairs``, a reading this package once
  used), or a fixed value from the config. Mismatched real pairs score low: a beta at their
  mean leaves about half of the noisy pairs a positive weight.
* scoring: ``paper`` ``w = x^2 (1 - x)`` on the debiased cosine; ``released`` ``x / batch max``
  and ``x^2 (1 - x^2)``, computed per batch as released; no NaN when no pair exceeds beta.
* :meth:`OSAMethod.sample_weights` gives the weights indexed by sample index, so they also
  weight SGRAF's per-pair hinge (``objective: triplet``; the estimator then is a CLIP model
  on the same pairs). That hinge sums all negatives by default: the hardest-negative hinge
  (``max_violation: true``) collapses on the synthetic world even on clean pairs.
"""

from __future__ import annotations

import copy
import functools
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor, nn

from precomputed.errors import DataNotFoundError
from ugncl.core.engine.distributed import is_main_process
from ugncl.core.errors import ConfigError
from ugncl.core.method import RunServices, section_defaults
from ugncl.core.optim import build_optimizer
from ugncl.methods.hinge import weighted_triplet
from ugncl.methods.infonce import as_logit_matrix, info_nce_per_sample, weighted_mean
from ugncl.methods.infonce_method import InfoNCEMethod
from ugncl.methods.noise_detection import detection_record
from ugncl.methods.triplet import sigmoid_hinge_error
from ugncl.methods.weighted.memory_bank import gmm_clean_set, index_digest
from ugncl.methods.weighted.passes import logit_scale_of, scan_training_set, untrained_start_error
from ugncl.methods.weighted.sections import READING_CHOICES
from ugncl.methods.weighted.weights import osa_weights

logger = logging.getLogger(__name__)

ESTIMATOR_STREAM = 4
ADAPT_STREAM = 5  # RNG stream of the adaptation's loss pass and warm-up epochs
RANDOM_INPUT_BATCHES = 4  # batches of random inputs behind the random-input beta


def random_input_shift(
    est: nn.Module, like: Any, generator: torch.Generator, token_high: int = 100
) -> tuple[float, float]:
    """OSA Eq. 4: the estimator's mean score of random-input pairs, and their std.

    Images are uniform noise of the batch's image shape (pixels in [0, 1), as released);
    captions are uniform token ids in ``[0, token_high)`` of the batch's caption shape, with
    the batch's lengths (the release draws ids in [0, 99] without SOT/EOT). Every entry of
    the ``K x K`` score matrix is a random pair.

    Args:
        est: the estimator (a CLIP-like ``SimilarityModel``).
        like: a batch giving the input shapes, dtypes and device.
        generator: CPU generator (seeded by the run).
        token_high: exclusive upper bound of the token ids.

    Returns:
        ``(mean, std)`` on the estimator's logit-scaled scale.
    """
    vocab = [
        m.num_embeddings for m in est.modules() if isinstance(m, nn.Embedding | nn.EmbeddingBag)
    ]
    if vocab:  # a vocabulary smaller than the release's 100 ids (tiny test models)
        token_high = min(token_high, vocab[0])
    images = torch.rand(like.images.shape, generator=generator).to(like.images)
    captions = torch.randint(0, token_high, like.captions.shape, generator=generator)
    captions = captions.to(like.captions)
    with torch.no_grad():
        s = as_logit_matrix(est(images, captions, like.lengths)).double()
    return float(s.mean()), float(s.std()) if s.numel() > 1 else 0.0


def checkpoint_estimator(path: str, load: Callable[[str], nn.Module] | None) -> nn.Module:
    """The model a training checkpoint holds, of any registered backbone, or a CLIP weights
    file of this package, read by ``load`` (the run room's loader)."""
    if not Path(path).is_file():
        raise DataNotFoundError(
            f"method.osa.estimator: checkpoint {path} does not exist; give a training "
            "checkpoint (runs/<name>/checkpoints/best.pt), a CLIP weights file of this package "
            "(tools/pretrain_clip.py) or null for a frozen copy of the model"
        )
    if load is None:
        raise ConfigError(
            "method.osa.estimator: no model loader; the run passes one through bind_data"
        )
    return load(path)


# The OSA README's training command (all datasets but CC120K, which trains 10 epochs); the
# paper prints the same. No gradient clipping in the release.
OSA_TRAINING: dict[str, Any] = {
    "train.optimizer": "adamw", "train.lr": 1.0e-5, "train.weight_decay": 0.2,
    "train.adam_beta1": 0.9, "train.adam_beta2": 0.98, "train.adam_eps": 1.0e-6,
    "train.batch_size": 256, "train.epochs": 5, "train.grad_clip": 0.0,
}  # fmt: skip


@dataclass
class OSAConfig:
    """OSA (``method.osa``); defaults are the package's reading, ``reading`` picks another."""

    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {
        "reading": READING_CHOICES,
        "scoring": ("paper", "released"),
        "objective": ("info_nce", "triplet"),
        "beta_source": ("random_inputs", "mismatched_pairs"),
    }
    # Every key where the paper as printed and the public release differ from the package
    # (docs/methods/weighted.md, "OSA").
    # The backbone whose training recipe (train.*) the readings give: OSA's paper settings are its
    # CLIP fine-tune's; on the other backbone a reading sets the method's keys only
    # (ugncl.run.config.reading_layer).
    READING_BACKBONE: ClassVar[str] = "clip"
    READINGS: ClassVar[dict[str, dict[str, Any]]] = {
        "package": {},
        "paper": {"method.osa.adapt": False, **OSA_TRAINING},
        "release": {"method.osa.adapt": False, "method.osa.scoring": "released", **OSA_TRAINING},
    }

    reading: str = "package"  # paper | release | package: sets the keys READINGS lists
    scoring: str = "paper"  # released: x / batch max, x^2 (1 - x^2)
    objective: str = "info_nce"  # triplet: weighted VSE++ hinge (the SGRAF track)
    margin: float = 0.2  # triplet only
    # triplet only. false: every negative of the batch (the package's SGRAF objective); true:
    # the hardest negative, which collapses on the synthetic world even on clean pairs
    max_violation: bool = False
    beta: float | None = None  # null: from beta_source
    beta_source: str = "random_inputs"  # Eq. 4; mismatched_pairs: mean of real non-matching pairs
    random_token_high: int = 100  # random captions: token ids in [0, this) (release: [0, 99])
    # GMM-strict clean set, then an estimator warm-up (package; the paper calls it optional,
    # the release has none)
    adapt: bool = True
    adapt_threshold: float = 0.99
    adapt_epochs: int = 1
    adapt_lr: float = 1.0e-5  # OSA's fine-tune lr (README); the paper gives none for it
    adapt_batch_size: int | None = None  # null: train.batch_size
    estimator: str | None = None  # null: frozen copy of the starting model; else a checkpoint
    logit_scale: float | None = None  # null: the estimator's logit_scale.exp()
    pass_batch_size: int | None = 256
    cache_file: str = "osa_weights.npz"


class OSAMethod(InfoNCEMethod):
    """OSA with a frozen estimator whose weights are computed once.

    Args:
        reading: the reading the config resolved (recorded; its keys are already set).
        scoring: ``paper`` or ``released`` (see :func:`ugncl.methods.weighted.weights.osa_weights`).
        objective: ``info_nce`` (CLIP) or ``triplet`` (:func:`weighted_triplet`, SGRAF).
        margin, max_violation: of the triplet objective (all negatives unless
            ``max_violation``).
        beta: fixed space shift on the estimator's logit scale (None: from ``beta_source``).
        beta_source: ``random_inputs`` (Eq. 4, :func:`random_input_shift`) or
            ``mismatched_pairs`` (mean score of real non-matching training pairs).
        random_token_high: token ids of the random captions are drawn in ``[0, this)``.
        adapt: domain adaptation of the estimator before scoring (the package's decision).
        adapt_threshold: GMM clean posterior of the adaptation's clean set.
        adapt_epochs: warm-up epochs over that clean set (InfoNCE, AdamW 0.9/0.98/1e-6,
            weight decay 0.2).
        adapt_lr: the warm-up's learning rate.
        adapt_batch_size: its batch size (None: the training batch size).
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

    @section_defaults(OSAConfig)
    def __init__(
        self,
        *,
        reading: str,
        scoring: str,
        objective: str,
        margin: float,
        max_violation: bool,
        beta: float | None,
        beta_source: str,
        random_token_high: int,
        adapt: bool,
        adapt_threshold: float,
        adapt_epochs: int,
        adapt_lr: float,
        adapt_batch_size: int | None,
        estimator: str | None,
        logit_scale: float | None,
        pass_batch_size: int | None,
        cache_file: str,
        load_estimator: Callable[[str], nn.Module] | None = None,
        eval_score: str = "raw",
    ) -> None:
        super().__init__(eval_score=eval_score)
        if scoring not in OSAConfig.CHOICES["scoring"]:
            raise ValueError(f"osa scoring must be paper or released, got {scoring!r}")
        if objective not in OSAConfig.CHOICES["objective"]:
            raise ValueError(f"osa objective must be info_nce or triplet, got {objective!r}")
        self.reading = reading
        self.scoring = scoring
        self.objective = objective
        self.margin = margin
        self.max_violation = max_violation
        if beta_source not in ("random_inputs", "mismatched_pairs"):
            raise ValueError(
                f"osa beta_source must be random_inputs or mismatched_pairs, got {beta_source!r}"
            )
        self.fixed_beta = beta
        self.beta_source = beta_source
        self.random_token_high = random_token_high
        self.adapt = adapt
        self.adapt_threshold = adapt_threshold
        self.adapt_epochs = adapt_epochs
        self.adapt_lr = adapt_lr
        self.adapt_batch_size = adapt_batch_size
        self.estimator_path = estimator
        self.logit_scale = logit_scale
        self.pass_batch_size = pass_batch_size
        self.cache_file = cache_file
        self.load_estimator = load_estimator
        self.estimator_data: Callable[[nn.Module], Any] | None = None  # see bind_data
        self.sim: np.ndarray | None = None  # (N,) estimator diagonal scores
        self.beta: float | None = None
        self.scale: float | None = None
        self._clean: np.ndarray | None = None
        self._setup_extra: dict[str, Any] = {}

    def backbone_error(self, model: nn.Module) -> str | None:
        if self.objective == "triplet":
            error = sigmoid_hinge_error("method.osa.objective=triplet", model)
        else:
            error = super().backbone_error(model)
        if error is None and self.estimator_path is None:  # the estimator: a frozen copy
            error = untrained_start_error("osa's default estimator (a frozen copy)", model)
            no_scale = getattr(model, "logit_scale", None) is None and self.logit_scale is None
            if error is None and no_scale:
                error = (
                    f"osa's frozen copy of the {model.backbone} model has no logit scale to "
                    "read; set method.osa.logit_scale (1.0: its raw score is a logit)"
                )
        return error

    # ------------------------------------------------------------------ estimator
    def build_estimator(self, model: nn.Module) -> nn.Module:
        """A frozen copy of ``model`` (default) or the configured checkpoint, in eval mode."""
        if self.estimator_path is None:
            est = copy.deepcopy(model)
        else:
            est = checkpoint_estimator(self.estimator_path, self.load_estimator)
            est.to(next(model.parameters()).device)
        est.eval()
        est.requires_grad_(False)
        return est

    def bind_data(self, config: Any, data: Any, services: RunServices) -> None:
        """``data.estimator``: the run's training pairs in the estimator's input format (the
        raw-image view of an SGRAF run for a CLIP estimator), opened and checked against the
        run's pairs before the run starts; nothing when it is not set. The estimator
        checkpoint is read with the run room's loader unless one was given."""
        self.estimator_data = services.open_estimator_view(config, data)
        if self.load_estimator is None:
            self.load_estimator = services.model_from_file

    def estimator_batches(
        self, ctx: Any, est: nn.Module, batches: Callable[..., Any] | None = None
    ) -> Callable[..., Any] | None:
        """The pass's batches: the trainer's (None), or with ``data.estimator`` set the same
        samples in the same seeded orders, in the estimator's input format. ``batches``: the
        trainer's source they come from (default ``ctx.batches``)."""
        if self.estimator_data is not None:
            view = self.estimator_data(est)
            index = getattr(ctx, "image_index", None)
            if view.num_samples != ctx.num_samples or (
                index is not None and not np.array_equal(view.image_index, index)
            ):
                raise ValueError("the estimator view pairs other samples than the training data")
            return functools.partial(ctx.batches if batches is None else batches, data=view)
        backbone = getattr(est, "backbone", None)
        if backbone is not None and backbone != getattr(ctx.model, "backbone", backbone):
            raise ConfigError(
                f"method.osa.estimator is a {backbone} model but the run trains "
                f"{ctx.model.backbone}: it needs the training pairs in its input format; set "
                f"data.estimator.name to the same split in the {backbone} layout (e.g. "
                f"{'synthetic_clip' if backbone == 'clip' else 'synthetic_precomp'})"
            )
        return None

    def adapt_estimator(
        self,
        ctx: Any,
        est: nn.Module,
        source: Callable[..., Any],
        every: Callable[..., Any] | None = None,
    ) -> dict:
        """Domain adaptation (optional in OSA's paper, absent from its release): a strict clean
        set from a GMM on the estimator's per-sample InfoNCE, then ``adapt_epochs`` of InfoNCE
        on it.

        ``source`` gives the pass's batches (``ctx.batches`` or the estimator view); ``every``
        the same with every batch on every rank (default ``source``): with several processes
        each rank takes every adaptation step, so all hold one process's estimator. The
        estimator is left frozen in eval mode. Returns the record fields.
        """
        started = time.perf_counter()
        bs = self.adapt_batch_size or getattr(ctx, "batch_size", 256)
        scan = scan_training_set(
            ctx, est, epoch=0, stream=ADAPT_STREAM, desc="osa adapt", batch_size=bs,
            batches=source,
        )  # fmt: skip
        clean, _ = gmm_clean_set(scan.loss, self.adapt_threshold, seed=int(ctx.seed or 0))
        idx = np.flatnonzero(clean)
        record: dict[str, Any] = {"adapt_clean": int(idx.size)}
        if self._clean is not None and idx.size:
            record["adapt_clean_precision"] = float(self._clean[idx].mean())
        if idx.size < 2:
            logger.warning("osa: the adaptation's clean set has %d pairs; not adapting", idx.size)
            return record
        params = [p for p in est.parameters() if p.is_floating_point()]
        for p in params:
            p.requires_grad_(True)
        opt = build_optimizer(
            "adamw", params, modules=[est], lr=self.adapt_lr, weight_decay=0.2,
            betas=(0.9, 0.98), eps=1e-6,
        )  # fmt: skip
        est.train()
        steps = 0
        for epoch in range(self.adapt_epochs):
            for batch in (every or source)(epoch, bs, ADAPT_STREAM, indices=idx):
                if len(batch.index) < 2:
                    continue
                batch = batch.to(ctx.device)
                with ctx.precision.autocast(ctx.device):
                    raw = est(batch.images, batch.captions, batch.lengths)
                loss = info_nce_per_sample(as_logit_matrix(raw)).mean()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                steps += 1
        est.eval()
        est.requires_grad_(False)
        record.update(adapt_steps=steps, adapt_seconds=round(time.perf_counter() - started, 2))
        return record

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
            source = self.estimator_batches(ctx, est) or ctx.batches
            # Several processes: the adaptation's steps and the random-input batches are taken
            # on every rank from every batch (the passes share theirs out and merge).
            every_rank = getattr(ctx, "every_batch", None) or ctx.batches
            every = self.estimator_batches(ctx, est, every_rank) or every_rank
            extra = self.adapt_estimator(ctx, est, source, every) if self.adapt else {}
            bs = self.pass_batch_size or 256
            scan = scan_training_set(
                ctx, est, epoch=0, stream=ESTIMATOR_STREAM, desc="osa estimator",
                batch_size=bs, batches=source,
            )  # fmt: skip
            sim = scan.diag
            extra.update(mismatched_mean=scan.shift.mean, mismatched_std=scan.shift.std)
            gen = torch.Generator().manual_seed(int(ctx.seed or 0))
            shifts = []
            for i, batch in enumerate(every(0, bs, ESTIMATOR_STREAM)):
                if i == RANDOM_INPUT_BATCHES:
                    break
                with ctx.precision.autocast(ctx.device):
                    shifts.append(
                        random_input_shift(est, batch.to(ctx.device), gen, self.random_token_high)
                    )
            extra.update(random_mean=float(np.mean([m for m, _ in shifts])))
            if self.fixed_beta is not None:
                beta = self.fixed_beta
            elif self.beta_source == "random_inputs":
                beta = extra["random_mean"]
            else:
                beta = scan.shift.mean
            scale = logit_scale_of(est, self.logit_scale)
            self._setup_extra = extra
            del est  # frozen and fully used: every weight is now fixed
            if is_main_process():  # every rank holds the scores; rank 0 writes them
                tmp = path.with_name(path.name + ".tmp.npz")
                np.savez(
                    tmp, sim=sim.astype(np.float32), beta=np.float64(beta),
                    scale=np.float64(scale), index_sha256=np.str_(index_digest(scan.image_index)),
                )  # fmt: skip
                os.replace(tmp, path)
        self.sim, self.beta, self.scale = sim.astype(np.float32), beta, scale
        record = detection_record(self._clean, weights=self.sample_weights())
        return {"beta": self.beta, "logit_scale": self.scale, **self._setup_extra, **record}

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
        if self.objective == "triplet":
            raw = model(batch.images, batch.captions, batch.lengths).float()
            # The triplet baseline's warm-up (ugncl.methods.triplet): all negatives summed.
            max_violation = self.max_violation and not getattr(step, "warmup", False)
            loss = weighted_triplet(raw, w, self.margin, max_violation)
            return {"loss_triplet": loss, "weight_mean": w.mean().detach()}
        per = self.per_sample_loss(model, batch)
        return {"loss": weighted_mean(per, w), "weight_mean": w.mean().detach()}
