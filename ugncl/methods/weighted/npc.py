"""NPC (negative pre-aware contrastive, AAAI'24) as a method of the one trainer.

Paper, release and package side by side: docs/methods/weighted.md (``method.npc.reading``
selects one; the package's decisions are the defaults):
* the loss is ``mean_k w_k * InfoNCE_k`` with **per-sample** weights (paper and package; the
  release multiplies batch-mean losses, collapsing w to one scalar per batch, NPC#18;
  ``weighting: batch_scalar``) plus a **trainable** memory-bank loss ``L_MB`` computed with
  the model (the release computes it under no_grad with the siamese copy, so it trains
  nothing; ``bank_loss: released``);
* the bank is built by ``setup`` from the starting model (the release ships banks it never
  builds), indexed by sample, nearest neighbours by normalised embedding, clean posterior >
  0.99 (paper; the release uses 0.9); the package excludes the query's own pair
  (``siamese.exclude_own_pair``; the paper and the release search every clean key).
All maths lives in ``memory_bank``, ``siamese``, ``weights`` and ``ugncl.methods.infonce``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor, nn

from ugncl.core.engine.distributed import (
    encode_global_batch,
    gather_no_grad,
    gather_padded,
    is_main_process,
    on_main,
    world_size,
)
from ugncl.core.method import section_defaults
from ugncl.core.optim import build_optimizer
from ugncl.methods.infonce import (
    as_logit_matrix,
    info_nce_directions,
    info_nce_per_sample,
    weighted_mean,
)
from ugncl.methods.infonce_method import InfoNCEMethod
from ugncl.methods.noise_detection import detection_record
from ugncl.methods.weighted.memory_bank import (
    BankPlan,
    MemoryBank,
    build_memory_bank,
    gmm_clean_set,
    plan_bank_pairs,
)
from ugncl.methods.weighted.passes import pair_fetcher, scan_training_set, untrained_start_error
from ugncl.methods.weighted.sections import (
    READING_CHOICES,
    GMMConfig,
    SiameseConfig,
    nested_choices,
    section_value,
)
from ugncl.methods.weighted.siamese import OneStepLosses, SiameseCopy, draws_random_numbers
from ugncl.methods.weighted.weights import significance_weight

logger = logging.getLogger(__name__)

BANK_STREAM = 2  # RNG stream of the bank pass (training order 0, division 1)
FUSED_DEVICES = ("cpu", "cuda")  # where torch ships a fused AdamW kernel


def npc_bank(
    scan: Any,
    clean_threshold: float,
    *,
    seed: int,
    gmm: dict[str, Any],
    device: torch.device | str | None,
    image_neighbour: str,
    exclude_own_pair: bool = True,
) -> MemoryBank:
    """NPC's memory bank from a pass's per-sample losses and embeddings: the GMM clean set
    (posterior >= ``clean_threshold``) and every sample's nearest clean image and caption."""
    clean, posterior = gmm_clean_set(scan.loss, clean_threshold, seed=seed, **gmm)
    return build_memory_bank(
        clean, scan.image_emb, scan.caption_emb, scan.image_index, posterior,
        device=device, image_neighbour=image_neighbour, exclude_own_pair=exclude_own_pair,
    )  # fmt: skip


def shared_npc_bank(scan: Any, clean_threshold: float, **kwargs: Any) -> MemoryBank:
    """:func:`npc_bank` computed once, on rank 0, and sent to every rank (the bank is integer
    arrays, N int64 per side; the GMM fit and the all-samples nearest-neighbour search would
    otherwise repeat on every rank, whose merged pass results are identical)."""
    return on_main(lambda: npc_bank(scan, clean_threshold, **kwargs))


def pair_logits(model: nn.Module, batch: Any) -> Tensor:
    """``(K, K)`` logit-scaled scores of a batch's pairs."""
    return as_logit_matrix(model(batch.images, batch.captions, batch.lengths))


def adamw_factory(lr: float, betas: tuple[float, float], eps: float, weight_decay: float):
    """The siamese copy's AdamW (release settings, NPC main_NPC.py:84-89).

    Its weight decay exempts the parameters the run's own optimiser exempts (biases, norms,
    embeddings, logit_scale; :func:`ugncl.core.optim.parameter_groups`), so the copy's step is
    the
    step the model would take; the release decays every parameter of both optimisers alike.
    It runs torch's fused AdamW kernel where the parameters live on a device that has one
    (CPU, CUDA): the same update to float rounding, about 6x cheaper on CPU than the
    per-tensor loop (0.039 s -> 0.006 s per step for ugncl-tiny's 7.9 M parameters, 1 thread),
    and this step is pure overhead of the method.
    """

    def make(params: list[nn.Parameter], module: nn.Module) -> torch.optim.Optimizer:
        fused = all(p.device.type in FUSED_DEVICES and p.is_floating_point() for p in params)
        return build_optimizer(
            "adamw", params, modules=[module], lr=lr, weight_decay=weight_decay, betas=betas,
            eps=eps, fused=fused,
        )  # fmt: skip

    return make


@dataclass
class BankExtras:
    """``batch sample indices -> the bank samples the batch lacks`` (picklable: the training
    loader's workers call it to decode them with the batch, ``Method.prefetch_samples``)."""

    bank: MemoryBank

    def __call__(self, index: np.ndarray) -> np.ndarray:
        index = np.asarray(index, dtype=np.int64)
        t = torch.as_tensor(index)
        image_index = self.bank.image_index[index]
        img_side, txt_side = self.bank.lookup(t, torch.as_tensor(image_index))
        plan = plan_bank_pairs(
            torch.stack([img_side, txt_side]).numpy(), index, image_index, self.bank.image_index
        )
        return plan.extra_samples


@dataclass
class BankView:
    """A batch with its bank pairs: the plan and the fetched samples the batch lacks."""

    batch: Any
    plan: BankPlan
    extra: Any | None  # PairBatch of plan.extra_samples (None: every bank pair is in the batch)

    def lengths(self) -> Tensor:
        """``(K + M,)`` caption lengths of the caption rows."""
        if self.extra is None:
            return self.batch.lengths
        return torch.cat([self.batch.lengths, self.extra.lengths.to(self.batch.lengths.device)])

    def sources(self) -> tuple[Tensor, Tensor, Tensor]:
        """Inputs of the image rows and the caption rows: ``(images, captions, lengths)``."""
        b = self.batch
        if self.extra is None:
            return b.images, b.captions, b.lengths
        rows = torch.as_tensor(self.plan.extra_image_rows, device=self.extra.images.device)
        images = torch.cat([b.images, self.extra.images[rows].to(b.images.dtype)])
        return images, cat_tokens(b.captions, self.extra.captions), self.lengths()


def _rows(rows: np.ndarray, like: Tensor) -> Tensor:
    return torch.as_tensor(rows, dtype=torch.long, device=like.device)


def _image_axis(model: nn.Module) -> int:
    """The axis of ``encode_images``' output that indexes images (SGRAF stacks views first)."""
    return int(getattr(model, "image_axis", 0))


def cat_rows(a: Tensor, b: Tensor) -> Tensor:
    """Row-concatenate caption embeddings; token-level ``(n, L, E)`` ones (SGRAF) of different
    ``L`` are zero-padded to the longer (zero beyond a caption's length, as the encoder)."""
    if a.dim() == 3 and a.shape[1] != b.shape[1]:
        width = max(a.shape[1], b.shape[1])
        a = torch.nn.functional.pad(a, (0, 0, 0, width - a.shape[1]))
        b = torch.nn.functional.pad(b, (0, 0, 0, width - b.shape[1]))
    return torch.cat([a, b])


def cat_tokens(a: Tensor, b: Tensor) -> Tensor:
    """Row-concatenate two 0-padded ``(n, L)`` token batches of possibly different ``L``."""
    width = max(a.shape[1], b.shape[1])
    a = torch.nn.functional.pad(a, (0, width - a.shape[1]))
    return torch.cat([a, torch.nn.functional.pad(b, (0, width - b.shape[1])).to(a.device)])


class BankSiamese(nn.Module):
    """What NPC and SDD share: the bank, the pair fetcher and the one-step siamese copy."""

    def __init__(self, config: SiameseConfig) -> None:
        super().__init__()
        if config.ratio_grouping not in SiameseConfig.CHOICES["ratio_grouping"]:
            raise ValueError(
                f"ratio_grouping must be direction or bank, got {config.ratio_grouping!r}"
            )
        self.config = config
        self.grouping = config.ratio_grouping
        self.siamese_lr = config.lr
        self.bank: MemoryBank | None = None
        # The loader's bank-sample function, one object per bank: the trainer keeps its
        # loader's workers while it gets the same one (Method.prefetch_samples).
        self.extras: BankExtras | None = None
        # Not a registered submodule on purpose: it is re-synced from the model before every
        # use, so it stays out of checkpoints (half their size; the release does not save it
        # either, docs/methods/weighted.md) and resume does not depend on setup having created it.
        self._siamese: list[SiameseCopy] = []
        self._fetch = None
        # The steps' (index, weight) pairs not yet written into epoch_weights: kept on the
        # device and read once where epoch_weights is read, not mid-step (a read of a device
        # tensor makes the host wait for the step's forward before it queues the backward).
        self._noted: list[tuple[Tensor, Tensor]] = []
        self.epoch_weights = None
        self._resumed: dict[str, Any] = {}  # checkpoint state waiting for attach()

    @property
    def epoch_weights(self) -> np.ndarray | None:
        """``(N,)`` the last weight of each sample this epoch (NaN: not yet weighted); the
        steps' noted weights are written in when it is read."""
        noted, self._noted = self._noted, []
        for index, w in noted:  # in step order: a later step's weight of a sample wins
            self._epoch_weights[index.cpu().numpy()] = w.cpu().numpy()
        return self._epoch_weights

    @epoch_weights.setter
    def epoch_weights(self, value: np.ndarray | None) -> None:
        self._noted, self._epoch_weights = [], value

    def build_bank(
        self, clean: np.ndarray, scan: Any, score: np.ndarray, device: Any
    ) -> MemoryBank:
        """The memory bank of a training-set scan (its embeddings and caption -> image index)
        with this section's neighbour rules."""
        return build_memory_bank(
            clean, scan.image_emb, scan.caption_emb, scan.image_index, score, device=device,
            image_neighbour=self.config.image_neighbour,
            exclude_own_pair=self.config.exclude_own_pair,
        )  # fmt: skip

    def attach(self, ctx: Any, bank: MemoryBank) -> None:
        self.bank, self.extras = bank, BankExtras(bank)
        self._fetch = pair_fetcher(ctx)
        # The lr is set at every step (siamese.lr, else step.lr); 0.0 is only a placeholder.
        c = self.config
        lr = self.siamese_lr if self.siamese_lr is not None else 0.0
        factory = adamw_factory(lr, (c.beta1, c.beta2), c.eps, c.weight_decay)
        self._siamese[:] = [SiameseCopy(ctx.model, factory, reset_state=c.reset_state)]
        self.epoch_weights = np.full(bank.num_samples, np.nan, dtype=np.float32)
        self._restore_resumed()

    # ------------------------------------------------------------------ resume
    # The copy's weights are re-synced from the model before every use and stay out of
    # checkpoints; its AdamW moments and the per-sample weights of the epoch are not: without
    # them a resumed run's siamese steps, hence its weights and losses, and the next epoch's
    # noise-detection record would differ from the uninterrupted run's.
    def get_extra_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {}
        if self._siamese:
            state["siamese_optimizer"] = self._siamese[0].optimizer.state_dict()
        if self.epoch_weights is not None:
            state["epoch_weights"] = torch.from_numpy(self.epoch_weights.copy())
        return state

    def set_extra_state(self, state: dict[str, Any]) -> None:
        # Resume loads the method state before setup() attaches the bank and the copy.
        self._resumed = dict(state or {})
        if self._siamese:
            self._restore_resumed()

    def _restore_resumed(self) -> None:
        state, self._resumed = self._resumed, {}
        if "siamese_optimizer" in state:
            self._siamese[0].optimizer.load_state_dict(state["siamese_optimizer"])
        if "epoch_weights" in state:
            self.epoch_weights = state["epoch_weights"].cpu().numpy().astype(np.float32)

    def bank_view(self, batch: Any, prefetched: Any | None = None) -> BankView:
        """The batch's image-bank and text-bank pairs, each distinct sample fetched once
        (``prefetched``: those samples decoded by the loader, ``StepContext.extra``)."""
        if self.bank is None:
            raise RuntimeError("the memory bank is not built; setup(ctx) must run first")
        img_side, txt_side = self.bank.lookup(batch.index, batch.image_index)
        plan = plan_bank_pairs(
            torch.stack([img_side, txt_side]).cpu().numpy(), batch.index.cpu().numpy(),
            batch.image_index.cpu().numpy(), self.bank.image_index,
        )  # fmt: skip
        extra = None
        if plan.extra_samples.size:
            if prefetched is not None and np.array_equal(
                prefetched.index.cpu().numpy(), plan.extra_samples
            ):
                extra = prefetched
            else:
                extra = self._fetch(torch.as_tensor(plan.extra_samples))
            extra = extra.to(batch.captions.device)
        return BankView(batch, plan, extra)

    def bank_losses(
        self, model: nn.Module, view: BankView, batch_emb: tuple[Tensor, Tensor] | None = None
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Per-sample cross-entropies ``(K,)`` of the bank pairs under ``model``, by direction:
        ``(img_i2t, img_t2i, txt_i2t, txt_t2i)`` (image-bank pair, then text-bank pair).

        The paper groups the significance ratio by direction (NPC Eq. 6-7), the release by
        bank (:func:`ugncl.methods.weighted.weights.significance_ratio`); the symmetric InfoNCE
        of a side is the mean of its two entries. Each bank pair forms its side's ``K x K``
        in-batch matrix (docs/methods/weighted.md). With
        ``batch_emb`` (the batch's image and caption embeddings under ``model`` at its current
        weights) only the images and captions the batch lacks are encoded; else every distinct
        one the two sides use is encoded once.
        """
        plan = view.plan
        if batch_emb is not None:  # rows as planned: [batch; the extra samples' new rows]
            img, cap = batch_emb
            if view.extra is not None:
                if plan.extra_image_rows.size:
                    new = view.extra.images[_rows(plan.extra_image_rows, view.extra.images)]
                    img = torch.cat([img, model.encode_images(new)], dim=_image_axis(model))
                extra_cap = model.encode_captions(view.extra.captions, view.extra.lengths)
                cap = cat_rows(cap, extra_cap)
            img_rows, cap_rows = plan.img_rows, plan.cap_rows
        else:  # encode only the rows the bank pairs use
            images, captions, lengths = view.sources()
            img_used, img_rows = np.unique(plan.img_rows, return_inverse=True)
            cap_used, cap_rows = np.unique(plan.cap_rows, return_inverse=True)
            img = model.encode_images(images[_rows(img_used, images)])
            cap = model.encode_captions(
                captions[_rows(cap_used, captions)], lengths[_rows(cap_used, lengths)]
            )
            img_rows = img_rows.reshape(plan.img_rows.shape)
            cap_rows = cap_rows.reshape(plan.cap_rows.shape)
        lengths = view.lengths()
        out = []
        for side in range(len(plan.bank_ids)):
            i, c = _rows(img_rows[side], img), _rows(cap_rows[side], cap)
            side_lengths = lengths[_rows(plan.cap_rows[side], lengths)]
            img_side = img.index_select(_image_axis(model), i)
            out.extend(info_nce_directions(model.score(img_side, cap[c], side_lengths)))
        return tuple(out)

    @staticmethod
    def side_means(losses: tuple[Tensor, ...]) -> Tensor:
        """``mean(L_I) + mean(L_T)``: the two bank pairs' symmetric InfoNCE (NPC's ``L_MB``)."""
        return 0.5 * (losses[0] + losses[1]).mean() + 0.5 * (losses[2] + losses[3]).mean()

    @staticmethod
    def global_inputs(batch: Any) -> Any:
        """The global batch's inputs: ``batch`` itself in one process; with several (negatives
        ``gathered``: ``batch`` holds the rank's images and captions and the global batch's
        ``index``) every rank's images and captions gathered without graph, captions 0-padded
        to the longest as one process's collate pads them. The siamese copy steps on them and
        the bank pairs take their batch rows from them, as in one process."""
        if world_size() == 1:
            return batch
        return replace(batch, images=gather_no_grad(batch.images),
                       captions=gather_padded(batch.captions),
                       lengths=gather_no_grad(batch.lengths))  # fmt: skip

    def encode_global(self, model: nn.Module, batch: Any) -> tuple[Tensor, Tensor, Tensor]:
        """:meth:`encode_batch` of the global batch, from the rank's micro-batch ``batch``:
        the image and caption embeddings of the B pairs and their per-sample InfoNCE ``(B,)``,
        with graph. One process: :meth:`encode_batch` itself; several: each rank encodes its
        micro-batch and the embeddings and score rows are gathered with gradient
        (:func:`~ugncl.core.engine.distributed.encode_global_batch`)."""
        pairs = encode_global_batch(
            model, batch.images, batch.captions, batch.lengths, _image_axis(model)
        )
        return pairs.images, pairs.captions, info_nce_per_sample(pairs.scores)

    def encode_batch(self, model: nn.Module, batch: Any) -> tuple[Tensor, Tensor, Tensor]:
        """``(image emb, caption emb, per-sample InfoNCE (K,))`` of the batch (with graph);
        ``score(encode_images, encode_captions)`` is the model's forward (SimilarityModel)."""
        img = model.encode_images(batch.images)
        cap = model.encode_captions(batch.captions, batch.lengths)
        return img, cap, info_nce_per_sample(model.score(img, cap, batch.lengths))

    def significance(
        self,
        model: nn.Module,
        view: BankView,
        per: Tensor,
        train_weights: Tensor | None,
        lr: float | None,
        before: tuple[Tensor, ...] | None = None,
        batch_emb: tuple[Tensor, Tensor] | None = None,
    ) -> tuple[Tensor, OneStepLosses]:
        """NPC/SDD significance weight ``(K,)`` of the batch's pairs (docs/methods/weighted.md).

        Args:
            model: the model being trained.
            view: the batch's bank pairs (:meth:`bank_view`).
            per: ``(K,)`` the model's per-sample InfoNCE on the batch (with graph); the
                siamese step minimises ``weighted_mean(per, train_weights)``.
            train_weights: ``(K,)`` weights of the siamese step (SDD: consistency), or None.
            lr: the trainer's current lr (used unless ``siamese.lr`` is set).
            before: the model's bank losses at the current weights when already computed
                (NPC's trainable L_MB); else computed here without gradients.
            batch_emb: the batch's embeddings under the model (reused by that computation).
        """
        if not self._siamese:
            raise RuntimeError("the siamese copy is not built; setup(ctx) must run first")
        lr = self.siamese_lr if self.siamese_lr is not None else lr
        if lr is None:
            raise ValueError(
                "the siamese step needs a learning rate: set siamese.lr, or the trainer must "
                "pass its current lr as StepContext.lr"
            )
        siamese = self._siamese[0]
        device_type = per.device.type
        if torch.is_autocast_enabled(device_type):
            # Mixed precision: one AdamW step at CLIP's lr (5e-7) moves the bank losses by far
            # less than bf16 resolves, so r would be rounding noise (r's sign agreed with fp32
            # for ~75% of the samples). The copy's before pass, step and after pass run in
            # fp32 on its own forwards; the model's autocast graph is not reused.
            with torch.autocast(device_type, enabled=False):
                res = siamese.one_step(
                    model,
                    lambda m: weighted_mean(self.encode_batch(m, view.batch)[2], train_weights),
                    lambda m: self.bank_losses(m, view),
                    lr,
                )
        elif draws_random_numbers(model):
            # Dropout: the model's forward is one draw, the copy's another (as in the release),
            # so the copy runs its own batch and before passes.
            res = siamese.one_step(
                model,
                lambda m: weighted_mean(self.encode_batch(m, view.batch)[2], train_weights),
                lambda m: self.bank_losses(m, view),
                lr,
            )
        else:
            if before is None:
                with torch.no_grad():
                    emb = None if batch_emb is None else tuple(e.detach() for e in batch_emb)
                    before = self.bank_losses(model, view, emb)
            res = siamese.one_step_shared(
                model,
                weighted_mean(per, train_weights),
                before,
                lambda m: self.bank_losses(m, view),
                lr,
            )
        return significance_weight(res.before, res.after, self.grouping), res

    def merged_weights(self) -> np.ndarray | None:
        """``epoch_weights`` of every sample (several processes: every rank computed and noted
        the weights of each global batch, so each holds all of them)."""
        return self.epoch_weights

    def note_weights(self, index: Tensor, w: Tensor) -> None:
        """Keep a step's weights of its samples ``index``; written into ``epoch_weights`` in
        step order when it is read (no read of the device inside the step)."""
        self._noted.append((index.detach(), w.detach().float()))


# The NPC README's training command (main_NPC.py, params.py); the paper prints the same
# (batch 256, 5 epochs, lr 2e-7, AdamW 0.9/0.98/1e-6, weight decay 0.2).
NPC_TRAINING: dict[str, Any] = {
    "train.optimizer": "adamw", "train.lr": 2.0e-7, "train.weight_decay": 0.2,
    "train.adam_beta1": 0.9, "train.adam_beta2": 0.98, "train.adam_eps": 1.0e-6,
    "train.batch_size": 256, "train.epochs": 5,
}  # fmt: skip


@dataclass
class NPCConfig:
    """NPC (``method.npc``); defaults are the package's reading, ``reading`` picks another."""

    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {
        "reading": READING_CHOICES,
        "weighting": ("per_sample", "batch_scalar"),
        "bank_loss": ("trainable", "released"),
        **nested_choices("siamese", SiameseConfig),
    }
    # Every key where the paper as printed and the public release differ from the package
    # (docs/methods/weighted.md, "NPC").
    # The backbone whose training recipe (train.*) the readings give: NPC's paper and release fine-
    # tune CLIP; on the other backbone a reading sets the method's keys only
    # (ugncl.run.config.reading_layer).
    READING_BACKBONE: ClassVar[str] = "clip"
    READINGS: ClassVar[dict[str, dict[str, Any]]] = {
        "package": {},
        "paper": {"method.npc.siamese.exclude_own_pair": False, **NPC_TRAINING},
        "release": {
            "method.npc.clean_threshold": 0.9,
            "method.npc.weighting": "batch_scalar",
            "method.npc.bank_loss": "released",
            "method.npc.siamese.ratio_grouping": "bank",
            "method.npc.siamese.exclude_own_pair": False,
            **NPC_TRAINING,
        },
    }

    reading: str = "package"  # paper | release | package: sets the keys READINGS lists
    clean_threshold: float = 0.99  # paper; release 0.9
    bank_batch_size: int | None = None  # null: train.batch_size
    bank_loss_weight: float = 1.0
    weighting: str = "per_sample"  # batch_scalar = release (NPC#18)
    bank_loss: str = "trainable"  # released = no-grad constant (trains nothing)
    bank_file: str = "npc_memory_bank.npz"
    siamese: SiameseConfig = field(default_factory=SiameseConfig)
    gmm: GMMConfig = field(default_factory=GMMConfig)  # the bank's (get_memorybank.py:51-59)


class NPCMethod(InfoNCEMethod):
    """NPC on a CLIP-like ``SimilarityModel`` (W = 1, logit-scaled scores).

    Args:
        reading: the reading the config resolved (recorded; its keys are already set).
        clean_threshold: GMM clean posterior for bank keys (paper 0.99, release 0.9).
        bank_batch_size: batch size of the bank pass (None: the training batch size).
        bank_loss_weight: weight of ``L_MB``.
        weighting: ``per_sample`` (paper) or ``batch_scalar`` (release, NPC#18).
        bank_loss: ``trainable`` (paper) or ``released`` (a no-grad constant from the copy).
        bank_file: file name in the run directory (reused on resume).
        siamese: the bank's neighbours, the ratio's grouping and the copy's optimiser
            (:class:`~ugncl.methods.weighted.sections.SiameseConfig`, or a mapping of the keys
            that differ from it).
        gmm: the bank GMM (:class:`~ugncl.methods.weighted.sections.GMMConfig` or a mapping).
        eval_score: how raw scores rank at evaluation (CLIP: ``raw``).
    """

    name = "npc"
    epoch_record = "noise_detection"
    # Several processes: the loss, the bank pairs and the siamese copy's step are the global
    # batch's (BankSiamese.encode_global), so the weights and the loss are one process's.
    negatives = "gathered"

    @section_defaults(NPCConfig)
    def __init__(
        self,
        *,
        reading: str,
        clean_threshold: float,
        bank_batch_size: int | None,
        bank_loss_weight: float,
        weighting: str,
        bank_loss: str,
        bank_file: str,
        siamese: SiameseConfig | dict[str, Any],
        gmm: GMMConfig | dict[str, Any],
        eval_score: str = "raw",
    ) -> None:
        super().__init__(eval_score=eval_score)
        if weighting not in NPCConfig.CHOICES["weighting"]:
            raise ValueError(f"npc weighting must be per_sample or batch_scalar, got {weighting!r}")
        if bank_loss not in NPCConfig.CHOICES["bank_loss"]:
            raise ValueError(f"npc bank_loss must be trainable or released, got {bank_loss!r}")
        self.reading = reading
        self.clean_threshold = clean_threshold
        self.gmm = section_value(NPCConfig().gmm, gmm)
        self.bank_batch_size = bank_batch_size
        self.bank_loss_weight = bank_loss_weight
        self.weighting = weighting
        self.bank_loss = bank_loss
        self.bank_file = bank_file
        self.core = BankSiamese(section_value(NPCConfig().siamese, siamese))
        self._clean: np.ndarray | None = None

    def backbone_error(self, model: nn.Module) -> str | None:
        return super().backbone_error(model) or untrained_start_error("npc's memory bank", model)

    # ------------------------------------------------------------------ lifecycle
    def setup(self, ctx: Any) -> dict[str, Any]:
        """Build (or reload) the memory bank from the starting model; create the siamese copy."""
        path = Path(ctx.run_dir) / self.bank_file
        self._clean = np.asarray(ctx.clean, dtype=bool)
        if path.exists():
            bank = MemoryBank.load(path, getattr(ctx, "image_index", None))
            logger.info("npc: reusing memory bank %s", path)
        else:
            scan = scan_training_set(
                ctx, ctx.model, epoch=0, stream=BANK_STREAM, embeddings=True, desc="npc bank",
                batch_size=self.bank_batch_size or getattr(ctx, "batch_size", 256),
            )  # fmt: skip
            bank = shared_npc_bank(
                scan, self.clean_threshold, seed=int(ctx.seed or 0), gmm=self.gmm.kwargs(),
                device=ctx.device, image_neighbour=self.core.config.image_neighbour,
                exclude_own_pair=self.core.config.exclude_own_pair,
            )  # fmt: skip
            if is_main_process():  # every rank holds the bank; rank 0 writes it
                bank.save(path)
        self.core.attach(ctx, bank)
        record = detection_record(self._clean, weights=bank.score, selected=bank.clean)
        return {"bank_keys": int(bank.clean.sum()), **{f"bank_{k}": v for k, v in record.items()}}

    def on_epoch_start(self, ctx: Any, epoch: int) -> dict[str, Any] | None:
        if self.core.bank is None:  # resumed run: setup's bank is reloaded from the run dir
            self.setup(ctx)
        return None

    def on_epoch_end(self, ctx: Any, epoch: int) -> dict[str, Any] | None:
        """Noise-detection record of the significance weights the epoch's steps applied
        (several processes: every rank noted the whole global batches')."""
        w = self.core.merged_weights()
        if w is None or not np.isfinite(w).any():
            return None
        record = detection_record(self._clean, weights=w)
        self.core.epoch_weights = np.full_like(w, np.nan)
        return record

    def epoch_samples(self, ctx: Any, epoch: int) -> np.ndarray | None:
        return None

    def prefetch_samples(self) -> BankExtras | None:
        return self.core.extras

    def trainable_parameters(self, model: nn.Module):
        return [p for p in model.parameters() if p.requires_grad]

    # ------------------------------------------------------------------ step
    def training_step(self, model: nn.Module, batch: Any, step: Any) -> dict[str, Tensor]:
        view = self.core.bank_view(self.core.global_inputs(batch), getattr(step, "extra", None))
        img, cap, per = self.core.encode_global(model, batch)
        trainable = self.bank_loss == "trainable"
        # Paper L_MB at the current weights: also the siamese copy's before-losses (shared).
        bank = self.core.bank_losses(model, view, (img, cap)) if trainable else None
        lr = getattr(step, "lr", None)
        w, res = self.core.significance(model, view, per, None, lr, bank, (img, cap))
        self.core.note_weights(batch.index, w)
        # Release: mean(w * batch-mean CE) = mean(w) * mean(CE), one scalar per batch (NPC#18).
        collapse = self.weighting == "batch_scalar"
        loss = w.mean() * per.mean() if collapse else weighted_mean(per, w)
        if trainable:  # paper L_MB: the bank pairs' contrastive loss, trained through the model
            loss_bank = self.bank_loss_weight * self.core.side_means(bank)
        else:  # release: the siamese copy's before-losses under no_grad, a constant
            loss_bank = self.bank_loss_weight * self.core.side_means(res.before)
        # Logged as step terms: the trainer reads them with the losses, in its one read.
        return {
            "loss": loss,
            "loss_bank": loss_bank,
            "weight_mean": w.mean().detach(),
            "weight_low": (w < 1).float().mean().detach(),
            "siamese_loss": res.step_loss,
        }
