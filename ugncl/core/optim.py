"""Optimisers (Adam | AdamW with no-decay groups) and lr schedules (per-epoch step | per-step
cosine with linear warm-up), built from explicit arguments.

A :class:`Schedule` wraps a ``LambdaLR`` and says when it advances: ``"epoch"`` (the trainer
steps it after every epoch) or ``"step"`` (after every optimiser step).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

__all__ = [
    "OPTIMIZERS",
    "SCHEDULES",
    "Schedule",
    "build_optimizer",
    "cosine_schedule",
    "no_decay_ids",
    "parameter_groups",
    "step_schedule",
]

#: Optimiser names (``train.optimizer``) -> classes.
OPTIMIZERS: dict[str, type[torch.optim.Optimizer]] = {
    "adam": torch.optim.Adam,
    "adamw": torch.optim.AdamW,
}
#: Schedule names (``train.schedule``): per-epoch step decay, per-step cosine with warm-up.
SCHEDULES: tuple[str, ...] = ("step", "cosine")

_NO_DECAY_MODULES = (nn.Embedding, nn.LayerNorm, nn.GroupNorm, nn.modules.batchnorm._NormBase)


def no_decay_ids(modules: Sequence[nn.Module]) -> set[int]:
    """Ids of parameters exempt from weight decay: biases and other vectors, normalisation
    layers, embeddings (token, positional, class) and ``logit_scale`` (as open_clip and timm)."""
    exempt: set[int] = set()
    for module in modules:
        for mod in module.modules():
            for name, param in mod.named_parameters(recurse=False):
                if (
                    param.ndim < 2
                    or isinstance(mod, _NO_DECAY_MODULES)
                    or "embedding" in name
                    or name == "logit_scale"
                ):
                    exempt.add(id(param))
    return exempt


def parameter_groups(
    params: Iterable[nn.Parameter],
    modules: Sequence[nn.Module],
    weight_decay: float,
    overrides: Sequence[tuple[Iterable[nn.Parameter], float]] = (),
) -> list[dict[str, Any]]:
    """``params`` (trainable ones only) as one group, or a decayed and a no-decay group.

    With ``weight_decay == 0`` and no ``overrides`` there is one group in the given order, so
    plain Adam sees its parameters exactly as ``Adam(model.parameters())`` would.
    ``overrides``: ``(parameters, weight decay)`` pairs; each listed trainable parameter gets
    its own group at that decay, exempt or not (e.g. ``train.image_decay_per_rms``).
    """
    params = [p for p in params if p.requires_grad]
    trainable = {id(p) for p in params}
    special: list[dict[str, Any]] = []
    claimed: set[int] = set()
    for group_params, decay in overrides:
        chosen = [p for p in group_params if id(p) in trainable and id(p) not in claimed]
        claimed.update(id(p) for p in chosen)
        if chosen:
            special.append({"params": chosen, "weight_decay": float(decay)})
    params = [p for p in params if id(p) not in claimed]
    if weight_decay == 0:
        return [{"params": params, "weight_decay": 0.0}, *special] if params else special
    exempt = no_decay_ids(modules)
    groups = [{"params": [p for p in params if id(p) not in exempt], "weight_decay": weight_decay}]
    kept = [p for p in params if id(p) in exempt]
    if kept:
        groups.append({"params": kept, "weight_decay": 0.0})
    return groups + special


def build_optimizer(
    name: str,
    params: Iterable[nn.Parameter],
    *,
    modules: Sequence[nn.Module] = (),
    lr: float,
    weight_decay: float = 0.0,
    overrides: Sequence[tuple[Iterable[nn.Parameter], float]] = (),
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    fused: bool = False,
) -> torch.optim.Optimizer:
    """``adam`` or ``adamw`` over ``params``; ``modules`` (model, method) name the no-decay ones,
    ``overrides`` give some parameters their own weight decay (:func:`parameter_groups`).

    ``fused``: torch's fused kernel (one pass per tensor; CPU and CUDA), the same update to
    float rounding; used where the optimiser step is pure overhead (the siamese copy).
    """
    groups = parameter_groups(params, modules, weight_decay, overrides)
    if not any(g["params"] for g in groups):
        raise ValueError("no trainable parameters: the method's trainable_parameters() is empty")
    cls = OPTIMIZERS.get(name)
    if cls is None:
        raise ValueError(f"unknown optimizer {name!r}; use one of {sorted(OPTIMIZERS)}")
    return cls(groups, lr=lr, betas=betas, eps=eps, **({"fused": True} if fused else {}))


# ---------------------------------------------------------------------------- schedules
def step_schedule(warmup_epochs: int, lr_update: int, lr_decay: float) -> Callable[[int], float]:
    """Per-epoch factor: ``lr_decay ** (main_epoch // lr_update)``; warm-up epochs run at lr
    and are not counted (NCR's convention)."""

    def factor(epoch: int) -> float:
        main_epoch = max(0, epoch - warmup_epochs)
        return lr_decay ** (main_epoch // max(1, lr_update))

    return factor


def cosine_schedule(warmup_steps: int, total_steps: int) -> Callable[[int], float]:
    """Per-step factor: linear warm-up over ``warmup_steps`` optimiser steps (step s runs at
    ``(s + 1) / warmup_steps``), then cosine from 1 to 0 at ``total_steps``.

    Counted in optimiser steps (the CLIP references count samples, which changes the
    warm-up length with the batch size)."""
    total = max(1, total_steps)

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = min(1.0, (step - warmup_steps) / max(1, total - warmup_steps))
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


@dataclass
class Schedule:
    """An lr scheduler and when the trainer advances it (``"epoch"`` or ``"step"``)."""

    scheduler: torch.optim.lr_scheduler.LRScheduler
    interval: str

    def after_step(self) -> None:
        if self.interval == "step":
            self.scheduler.step()

    def after_epoch(self) -> None:
        if self.interval == "epoch":
            self.scheduler.step()

    def state_dict(self) -> dict[str, Any]:
        return self.scheduler.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.scheduler.load_state_dict(state)


def build_schedule(
    name: str,
    optimizer: torch.optim.Optimizer,
    *,
    warmup_epochs: int = 0,
    lr_update: int = 20,
    lr_decay: float = 0.1,
    warmup_steps: int = 0,
    total_steps: int = 1,
) -> Schedule:
    """``step`` (per epoch) or ``cosine`` (per optimiser step) around ``optimizer``."""
    if name == "step":
        factor = step_schedule(warmup_epochs, lr_update, lr_decay)
        return Schedule(torch.optim.lr_scheduler.LambdaLR(optimizer, factor), "epoch")
    if name == "cosine":
        factor = cosine_schedule(warmup_steps, total_steps)
        return Schedule(torch.optim.lr_scheduler.LambdaLR(optimizer, factor), "step")
    raise ValueError(f"unknown schedule {name!r}; use one of {SCHEDULES}")
