"""The one-step siamese copy shared by NPC and SDD (docs/methods/weighted.md).

Per batch: copy the model's trainable state into the siamese copy, evaluate the memory-bank
losses, take one optimiser step of a (per-sample weighted) loss on the batch with the copy,
and evaluate the bank losses again. The copy is built once (one ``deepcopy`` at setup); a sync
is an in-place ``copy_`` of the trainable tensors into the copy's own storage, so no module
or buffer is allocated per batch. Everything the copy runs is a callable on the copy, so it
works for any ``SimilarityModel``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from open_clip.transformer import PatchDropout
from torch import Tensor, nn

from ugncl.core.engine.distributed import mean_over_ranks

__all__ = ["OneStepLosses", "SiameseCopy", "draws_random_numbers"]

OptimizerFactory = Callable[[list[nn.Parameter], nn.Module], torch.optim.Optimizer]


def draws_random_numbers(model: nn.Module) -> bool:
    """Whether ``model``'s forward in its current mode samples random masks: a dropout layer
    (``nn.Dropout*``, attention dropout of ``nn.MultiheadAttention``, open_clip's patch
    dropout) with a positive rate in training mode.

    Then two forwards at equal weights differ, so the copy's forward may not be replaced by the
    model's (:meth:`SiameseCopy.one_step_shared`). Functional dropout called inside a custom
    ``forward`` is not visible here; the package's CLIP models (open_clip ViTs, ``ugncl-tiny``)
    have no dropout at all.
    """
    for mod in model.modules():
        if not mod.training:
            continue
        if isinstance(mod, nn.modules.dropout._DropoutNd) and mod.p > 0:
            return True
        if isinstance(mod, nn.MultiheadAttention) and mod.dropout > 0:
            return True
        if isinstance(mod, PatchDropout) and mod.prob > 0:
            return True
    return False


@dataclass
class OneStepLosses:
    """Bank losses (no gradient) around one siamese step; each entry a tuple of ``(K,)``."""

    before: tuple[Tensor, ...]
    after: tuple[Tensor, ...]
    step_loss: Tensor  # the (detached) loss the siamese step minimised


class SiameseCopy(nn.Module):
    """A copy of a model that can be synced from it and stepped once on a batch.

    Args:
        model: the model to mirror (its current weights are copied once, here).
        make_optimizer: ``(trainable parameters, copy module) -> optimiser`` of the copy
            (the module names the no-decay parameters; the
            releases use AdamW with the model's settings, NPC main_NPC.py:84-89).
        reset_state: clear the optimiser state at every sync. The release keeps the AdamW
            moments across syncs (False, the default): the copy always starts from the model's
            weights and sees the model's batches, so its moments track the ones the model's own
            optimiser holds, and the step is the step the model would take. With True every
            step is a first Adam step, i.e. a sign step of size lr.
    """

    def __init__(
        self, model: nn.Module, make_optimizer: OptimizerFactory, *, reset_state: bool = False
    ) -> None:
        super().__init__()
        self.copy = copy.deepcopy(model)
        self._names = [n for n, p in model.named_parameters() if p.requires_grad]
        own = dict(self.copy.named_parameters())
        for n, p in own.items():
            p.requires_grad_(n in self._names)
        self._params = [own[n] for n in self._names]
        self._buffers_names = [n for n, _ in model.named_buffers()]
        self.optimizer = make_optimizer(self._params, self.copy)
        self.reset_state = reset_state

    @torch.no_grad()
    def sync(self, model: nn.Module) -> None:
        """Copy the model's trainable parameters and buffers into the copy, in place."""
        params = dict(model.named_parameters())
        try:
            src = [params[n] for n in self._names]
        except KeyError as e:
            raise ValueError(f"model has no parameter {e}; sync from the model it copied") from e
        if src and src[0].device != self._params[0].device:
            # The model moved after the copy was made: follow it (moments restart there).
            self.copy.to(src[0].device)
            self.optimizer.state.clear()
        torch._foreach_copy_(self._params, [s.detach() for s in src])
        if self._buffers_names:
            bufs, own = dict(model.named_buffers()), dict(self.copy.named_buffers())
            for n in self._buffers_names:
                own[n].copy_(bufs[n])
        self.copy.train(model.training)
        if self.reset_state:
            self.optimizer.state.clear()

    @torch.no_grad()
    def evaluate(self, fn: Callable[[nn.Module], Tensor]) -> Tensor:
        """``fn(copy)`` without gradients (e.g. per-sample bank losses)."""
        return fn(self.copy).detach()

    def step(self, loss_fn: Callable[[nn.Module], Tensor], lr: float | None = None) -> Tensor:
        """One optimiser step of ``loss_fn(copy)`` (a scalar), at ``lr`` when given.

        One backward (the release calls ``backward`` twice, doubling the gradient).
        """
        if lr is not None:
            for group in self.optimizer.param_groups:
                group["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        with torch.enable_grad():
            loss = loss_fn(self.copy)
            loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    def step_from_grads(self, grads: Sequence[Tensor | None], lr: float | None = None) -> None:
        """One optimiser step of the copy with given gradients (one per trainable parameter,
        in the order of the model's ``named_parameters``; None = no gradient)."""
        if len(grads) != len(self._params):
            raise ValueError(f"got {len(grads)} gradients for {len(self._params)} parameters")
        if lr is not None:
            for group in self.optimizer.param_groups:
                group["lr"] = lr
        for p, g in zip(self._params, grads):
            p.grad = None if g is None else g.detach().to(p.dtype)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def one_step_shared(
        self,
        model: nn.Module,
        train_loss: Tensor,
        before: tuple[Tensor, ...],
        bank_losses: Callable[[nn.Module], tuple[Tensor, ...]],
        lr: float | None = None,
    ) -> OneStepLosses:
        """:meth:`one_step` reusing the model's own forward passes at the current weights.

        The copy is synced to the model, so before its step its batch loss and bank losses are
        the model's: the gradient of the step is taken from the model's graph
        (``autograd.grad`` with ``retain_graph``, the graph stays usable for the model's own
        loss) and ``before`` is what the model computed. Saves the copy's batch forward and
        the before pass; exact whenever the forward is deterministic: callers use
        :meth:`one_step` where :func:`draws_random_numbers` (dropout in training mode).

        Args:
            model: the model being trained.
            train_loss: scalar loss of the batch computed by ``model`` (with graph).
            before: the model's per-sample bank losses at the current weights.
            bank_losses: ``copy -> tuple of (K,)`` for the after pass.
            lr: the step's learning rate.
        """
        params = dict(model.named_parameters())
        grads = torch.autograd.grad(
            train_loss, [params[n] for n in self._names], retain_graph=True, allow_unused=True
        )
        # Several processes: ``train_loss`` is the global batch's, from gathered features;
        # the mean over the ranks of each rank's gradient is the one-process gradient.
        grads = mean_over_ranks(grads)
        self.sync(model)
        self.step_from_grads(grads, lr)
        with torch.no_grad():
            after = tuple(t.detach() for t in bank_losses(self.copy))
        return OneStepLosses(
            before=tuple(t.detach() for t in before), after=after, step_loss=train_loss.detach()
        )

    def one_step(
        self,
        model: nn.Module,
        train_loss: Callable[[nn.Module], Tensor],
        bank_losses: Callable[[nn.Module], tuple[Tensor, ...]],
        lr: float | None = None,
    ) -> OneStepLosses:
        """Sync, bank losses before, one step on ``train_loss``, bank losses after.

        Args:
            model: the model being trained (its weights are copied, never changed).
            train_loss: ``copy -> scalar`` loss on the batch (NPC: mean InfoNCE; SDD: the
                GMM-weighted mean).
            bank_losses: ``copy -> tuple of (K,)`` per-sample losses of the bank pairs.
            lr: the siamese step's learning rate (the model's current lr in the releases).
        """
        self.sync(model)
        with torch.no_grad():
            before = tuple(t.detach() for t in bank_losses(self.copy))
        step_loss = self.step(train_loss, lr)
        with torch.no_grad():
            after = tuple(t.detach() for t in bank_losses(self.copy))
        return OneStepLosses(before=before, after=after, step_loss=step_loss)
