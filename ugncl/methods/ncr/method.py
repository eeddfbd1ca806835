"""NCR as a method of the one trainer: the trainer's model is network A, the method owns
network B (``peer``), and both train in every step on the divisions each made for the other.

Per co-training epoch (after the trainer's warm-up epochs):

1. ``on_epoch_start``: one no-grad pass of both networks over the training pairs gives each
   pair's all-negatives hinge per network (:func:`~ugncl.methods.ncr.losses.per_sample_loss`);
   a two-component GMM per network turns them into clean probabilities; A's probabilities
   divide the pairs for B and B's for A (co-divide).
2. ``training_step``: per network, the batch's pairs divided clean get the label
   ``w + (1 - w) P`` (w of the other network, P of this one), the pairs divided noisy
   ``(P_A + P_B) / 2``; each subset's soft-margin hinge (negatives within the subset, as the
   release's separate clean and noisy loaders) is summed. The noisy term starts at co-training
   epoch ``epochs // 2`` under the ``release`` and ``package`` readings.

Evaluation averages the two networks' sigmoid score matrices (:meth:`evaluation_models`).
The readings differ as docs/methods/ncr.md's table says.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor, nn

from ugncl.core.data import PairBatch
from ugncl.core.engine import distributed
from ugncl.core.engine.context import MethodContext, StepContext
from ugncl.core.evaluation import eval_mode
from ugncl.core.method import Method, RunServices, section_defaults
from ugncl.methods.ncr.division import clean_probability, split_clean
from ugncl.methods.ncr.losses import (
    SOFT_MARGINS,
    all_negatives_loss,
    anchor_margins,
    correspondence_prediction,
    per_sample_loss,
    rectified_clean_labels,
    rectified_noisy_labels,
    soft_margin,
    soft_margin_hinge,
)
from ugncl.methods.noise_detection import detection_record
from ugncl.methods.readings import ADAM_NO_DECAY, READING_NAMES
from ugncl.methods.triplet import sigmoid_hinge_error

__all__ = ["READINGS", "NCRConfig", "NCRMethod", "Reading", "ncr_pair_fields", "reading_settings"]

READINGS: tuple[str, ...] = READING_NAMES
DIVISION_STREAM = 7  # RNG stream of the division pass's order (independent of training's)
PEER_INIT_STREAM = 1  # seed stream of network B's initial weights


@dataclass(frozen=True)
class Reading:
    """What the readings decide: the margins' shape (``anchor``: each pair's own label in both
    directions; ``release``: the release's (K, K) clean and (K, 1) noisy broadcasts) and
    whether the noisy pairs' term waits for the second half of co-training."""

    margin_shape: str
    noisy_from_half: bool


_READINGS = {
    "paper": Reading(margin_shape="anchor", noisy_from_half=False),
    "release": Reading(margin_shape="release", noisy_from_half=True),
    "package": Reading(margin_shape="anchor", noisy_from_half=True),
}


def reading_settings(reading: str) -> Reading:
    """The settings of ``method.ncr.reading``."""
    if reading not in _READINGS:
        raise ValueError(f"method.ncr.reading={reading!r} is not one of {READINGS}")
    return _READINGS[reading]


@dataclass
class NCRConfig:
    """NCR (``method.ncr``); the schedule (warm-up, epochs, lr steps) is the ``train`` section's."""

    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {
        "reading": READINGS,
        "soft_margin": SOFT_MARGINS,
    }
    RANGES: ClassVar[dict[str, str]] = {"margin": ">0", "p_threshold": "[0,1)"}
    # The keys each reading sets beyond this section (ugncl.run.config.apply_reading): every
    # reading trains with NCR's optimiser (Adam, no weight decay: the release's co_train.py) and
    # ranks by the mean of both networks' sigmoid scores; the paper and release in float32.
    # The backbone whose training recipe (train.*) the readings give: NCR's paper and release train
    # SGRAF; on the other backbone a reading sets the method's keys only
    # (ugncl.run.config.reading_layer).
    READING_BACKBONE: ClassVar[str] = "sgraf"
    READINGS: ClassVar[dict[str, dict[str, Any]]] = {
        "package": {**ADAM_NO_DECAY, "eval.eval_score": "sigmoid"},
        "paper": {**ADAM_NO_DECAY, "eval.eval_score": "sigmoid", "train.amp": "off"},
        "release": {**ADAM_NO_DECAY, "eval.eval_score": "sigmoid", "train.amp": "off"},
    }

    # What each reading decides inside the method, beyond the keys (tools/readings.py).
    READING_NOTES: ClassVar[dict[str, str]] = {
        name: f"margins {r.margin_shape}, noisy pairs' term "
        + ("from co-training epoch train.epochs // 2" if r.noisy_from_half else "from the start")
        for name, r in _READINGS.items()
    }

    # package: per-pair soft labels and margins, the noisy pairs' term from the second half of
    # co-training; paper: per-pair, the noisy term from the first co-training epoch; release:
    # the released broadcasts (docs/methods/ncr.md).
    reading: str = "package"
    margin: float = 0.2  # alpha of the hinge and of P
    soft_margin: str = "exponential"  # exponential (m = 10) | linear | sin
    p_threshold: float = 0.5  # clean when the other network's GMM says w > p_threshold


class NCRMethod(Method):
    """NCR: two co-trained SGRAF networks, the GMM co-divide and co-rectified soft margins."""

    name = "ncr"
    epoch_record = "noise_detection"
    nonfinite_hint = "Lower train.lr or check the input features for NaN."

    @section_defaults(NCRConfig)
    def __init__(
        self,
        *,
        reading: str,
        margin: float,
        soft_margin: str,
        p_threshold: float,
        eval_score: str = "sigmoid",
    ) -> None:
        super().__init__(eval_score=eval_score)
        self.reading = reading
        self.settings = reading_settings(reading)
        if soft_margin not in SOFT_MARGINS:
            raise ValueError(f"method.ncr.soft_margin={soft_margin!r} is not one of {SOFT_MARGINS}")
        self.margin = float(margin)
        self.soft_margin = soft_margin
        self.p_threshold = float(p_threshold)
        self.main_epochs: int | None = None  # train.epochs (bind_data)
        self.init_seed: int | None = None  # train.seed (bind_data): network B's initial weights
        self.warmup_epochs = 0
        self.peer: nn.Module | None = None
        # The epoch's divisions: index 0 trains network A (made by B), 1 trains B (made by A).
        self._prob: list[Tensor] = []
        self._clean: list[Tensor] = []

    # ------------------------------------------------------------------ lifecycle
    def bind_data(self, config: Any, data: Any, services: RunServices) -> None:
        self.main_epochs = int(config.train.epochs)
        self.init_seed = None if config.train.seed is None else int(config.train.seed)

    def backbone_error(self, model: nn.Module) -> str | None:
        return sigmoid_hinge_error("method ncr", model)

    def prepare(self, model: nn.Module, num_samples: int) -> None:
        """Network B: a second network of A's architecture, initialised independently from a
        generator seeded by the run's seed (the same weights in every process of a
        multi-process run, whose global RNGs differ by rank after A's init), or a copy of A's
        weights when A starts from a checkpoint (``model.sgraf.init``)."""
        config = getattr(model, "config", None)
        if not isinstance(config, dict):
            raise TypeError(f"NCR builds its second network from the model's config; "
                            f"{type(model).__name__} has none")  # fmt: skip
        with torch.random.fork_rng(devices=[]):
            if self.init_seed is not None:
                seed = np.random.SeedSequence([self.init_seed, PEER_INIT_STREAM])
                torch.manual_seed(int(seed.generate_state(1)[0]))
            peer = type(model)(**config)
        if getattr(model, "init_from", None):
            peer.load_state_dict(model.state_dict())
        peer.to(next(model.parameters()).device)
        self.peer = peer

    def trainable_parameters(self, model: nn.Module):
        return itertools.chain(model.parameters(), self._peer().parameters())

    def evaluation_models(self, model: nn.Module) -> list[nn.Module]:
        """NCR ranks by the mean of both networks' score matrices (release evaluation.py)."""
        return [model, self._peer()]

    def _peer(self) -> nn.Module:
        if self.peer is None:
            raise RuntimeError("NCRMethod.prepare(model, n) must run before training or scoring")
        return self.peer

    def _training_peer(self, model: Any) -> Any:
        """Network B as the step calls it: itself, or with several processes its DDP proxy
        (the trainer's negatives, gathered over the ranks like A's), built on first use."""
        if distributed.world_size() == 1:
            return self._peer()
        proxy = self.__dict__.get("_peer_ddp")
        if proxy is None:
            device = next(self._peer().parameters()).device
            proxy = distributed.DistributedModel(
                distributed.wrap_model(self._peer(), device), gathered=self.negatives == "gathered"
            )
            self.__dict__["_peer_ddp"] = proxy  # not a submodule: the state dict stays B's own
        return proxy

    # ------------------------------------------------------------------ co-divide
    def on_epoch_start(self, ctx: MethodContext, epoch: int) -> dict[str, Any] | None:
        self.warmup_epochs = ctx.warmup_epochs
        if epoch < ctx.warmup_epochs:
            return None
        losses = self._pass_losses(ctx, epoch)
        fits, preds = [], []
        for net, loss in enumerate(losses):
            seed = np.random.SeedSequence([ctx.seed, epoch, net]).generate_state(1)[0]
            fit = clean_probability(loss, random_state=int(seed))
            fits.append(fit)
            preds.append(split_clean(fit.prob, self.p_threshold))
        # Co-divide: network A trains on B's division, B on A's.
        self._prob = [torch.from_numpy(fits[1].prob), torch.from_numpy(fits[0].prob)]
        self._clean = [torch.from_numpy(preds[1]), torch.from_numpy(preds[0])]
        record: dict[str, Any] = {"co_epoch": epoch - ctx.warmup_epochs}
        for prefix, fit, pred in (("", fits[1], preds[1]), ("b_", fits[0], preds[0])):
            record.update(
                detection_record(ctx.clean, weights=fit.prob, selected=pred, prefix=prefix)
            )
            record[f"{prefix}gmm_means"] = list(fit.means)
            record[f"{prefix}gmm_iterations"] = fit.n_iter
        return record

    def _pass_losses(self, ctx: MethodContext, epoch: int) -> list[np.ndarray]:
        """Per-sample all-negatives hinges ``(N,)`` of A and of B (eval mode, no grad)."""
        n = ctx.num_samples
        out = [np.full(n, np.nan, dtype=np.float32) for _ in range(2)]
        seen = np.zeros(n, dtype=bool)
        nets = (ctx.model, self._peer())
        with torch.no_grad(), eval_mode(nets[0]), eval_mode(nets[1]):
            for batch in ctx.batches(epoch, ctx.batch_size, DIVISION_STREAM):
                batch = batch.to(ctx.device)
                idx = batch.index.cpu().numpy()
                for net, values in zip(nets, out):
                    with ctx.autocast():
                        raw = net(batch.images, batch.captions, batch.lengths)
                    values[idx] = per_sample_loss(_scores(raw), self.margin).cpu().numpy()
                seen[idx] = True
        return [distributed.merge_rows(values, seen) for values in out]

    # ------------------------------------------------------------------ training step
    def training_step(
        self, model: nn.Module, batch: PairBatch, step: StepContext
    ) -> dict[str, Tensor]:
        peer = self._training_peer(model)
        args = (batch.images, batch.captions, batch.lengths)
        if step.warmup:
            self._peer().train()
            # Warm-up: both networks on every pair with the all-negatives hinge (release
            # warm-up, mean over the K columns, summed over the batch).
            return {
                "loss_a": all_negatives_loss(_scores(model(*args)), self.margin),
                "loss_b": all_negatives_loss(_scores(peer(*args)), self.margin),
            }
        if not self._prob:
            raise RuntimeError("NCR's co-training step ran before its epoch's division")
        # P is predicted in eval mode without gradients (release: net.val_start()).
        with torch.no_grad(), eval_mode(model), eval_mode(self._peer()):
            fixed = (_scores(model(*args)), _scores(peer(*args)))
        self._peer().train()
        trained = (_scores(model(*args)), _scores(peer(*args)))
        co_epoch = step.epoch - self.warmup_epochs
        with_noisy = not self.settings.noisy_from_half or co_epoch >= (self.main_epochs or 0) // 2
        idx = batch.index.cpu()
        terms: dict[str, Tensor] = {}
        for net, name in enumerate(("a", "b")):
            clean = self._clean[net][idx].to(trained[net].device)
            prob = self._prob[net][idx].to(trained[net])
            loss_l, loss_u = self._network_loss(
                trained[net], fixed[net], fixed[1 - net], prob, clean, with_noisy
            )
            terms[f"loss_{name}_clean"] = loss_l
            terms[f"loss_{name}_noisy"] = loss_u
            terms[f"clean_share_{name}"] = clean.float().mean().detach()
        return terms

    def _network_loss(
        self,
        scores: Tensor,
        own_fixed: Tensor,
        other_fixed: Tensor,
        prob: Tensor,
        clean: Tensor,
        with_noisy: bool,
    ) -> tuple[Tensor, Tensor]:
        """One network's clean and noisy terms on a batch.

        Args:
            scores: ``(K, K)`` this network's scores, with gradient.
            own_fixed, other_fixed: ``(K, K)`` both networks' eval-mode scores (no gradient).
            prob: ``(K,)`` the other network's clean probability w of each pair.
            clean: ``(K,)`` bool, the other network's division.
            with_noisy: whether the noisy pairs' term is on.
        """
        zero = scores[0, 0] * 0.0  # a zero on the graph (a term may be empty)
        loss_l, loss_u = zero, zero
        shape = self.settings.margin_shape
        c = torch.nonzero(clean).reshape(-1)
        if c.numel() > 0:
            p = correspondence_prediction(_sub(own_fixed, c), self.margin)
            labels = rectified_clean_labels(prob[c], p, shape=shape)
            loss_l = self._hinge(_sub(scores, c), labels)
        u = torch.nonzero(~clean).reshape(-1)
        if with_noisy and u.numel() > 0:
            labels = rectified_noisy_labels(
                correspondence_prediction(_sub(own_fixed, u), self.margin),
                correspondence_prediction(_sub(other_fixed, u), self.margin),
            )
            if shape == "release":
                labels = labels.reshape(-1, 1)  # the release's targets_u.view(-1, 1)
            loss_u = self._hinge(_sub(scores, u), labels)
        return loss_l, loss_u

    def _hinge(self, scores: Tensor, labels: Tensor) -> Tensor:
        """Hardest-negative soft-margin hinge; ``labels`` ``(K,)`` per anchor, or the release's
        ``(K, 1)`` / ``(K, K)`` used as is in both directions."""
        alpha = soft_margin(labels, self.margin, self.soft_margin)
        if labels.dim() == 1:
            margin_s, margin_im = anchor_margins(alpha)
        else:
            margin_s = margin_im = alpha
        return soft_margin_hinge(scores, margin_s, margin_im, hardest=True)


def ncr_pair_fields(peer_state: dict[str, Tensor]) -> dict[str, Any]:
    """The fields that make a model file of network A an NCR pair: network B's weights as
    :class:`NCRMethod`'s state, the method's name, and the config keys evaluation reads
    (``method.name=ncr``, ``eval.eval_score=sigmoid``: the mean of sigmoid scores)."""
    return {
        "method": NCRMethod.name,
        "method_state": {f"peer.{k}": v for k, v in peer_state.items()},
        "method_config": {"method": {"name": NCRMethod.name}, "eval": {"eval_score": "sigmoid"}},
    }


def _scores(raw: Tensor) -> Tensor:
    """Raw ``(W, K, K)`` -> SGRAF's sigmoid similarity ``(K, K)`` (views averaged)."""
    return torch.sigmoid(raw.float()).mean(0)


def _sub(scores: Tensor, idx: Tensor) -> Tensor:
    """The ``(k, k)`` block of the pairs ``idx`` (their images x their captions)."""
    return scores.index_select(0, idx).index_select(1, idx)
