"""Names from the config -> builders: backbones, methods, optimisers and schedules.

Adding a backbone = its module (a :class:`~ugncl.framework.similarity.SimilarityModel`, a config
dataclass, a builder) + one line in :data:`BACKBONES`; its config section ``model.<name>``
appears from that line. Methods register in :data:`ugncl.methods.METHODS` the same way
(section ``method.<name>``). Each config dataclass may declare ``CHOICES: ClassVar[dict]``
for its string keys.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from ugncl.backbones.clip.backbone import (
    CLIPConfig,
    build_clip_backbone,
    clip_eval_split,
    clip_from_config,
    clip_from_weights_file,
)
from ugncl.backbones.clip.loading import WeightsError
from ugncl.backbones.clip.run_data import open_clip_data, open_clip_view
from ugncl.backbones.sgraf.backbone import (
    SGRAFConfig,
    build_sgraf,
    open_sgraf_data,
    sgraf_from_config,
)
from ugncl.backbones.sgraf.experiment import open_eval_split
from ugncl.framework.config import ConfigError
from ugncl.framework.data import RunData, TrainingData
from ugncl.framework.engine.checkpoint import CheckpointError, load_checkpoint
from ugncl.framework.optim import Schedule, build_optimizer, build_schedule
from ugncl.framework.similarity import SimilarityModel
from ugncl.methods import METHODS, Method

if TYPE_CHECKING:
    from ugncl.framework.config import Config

__all__ = [
    "BACKBONES",
    "METHODS",
    "BackboneSpec",
    "build_method",
    "build_model",
    "build_optimizer_and_schedule",
    "check_method_backbone",
    "model_from_checkpoint",
    "model_from_file",
    "open_estimator_view",
    "open_run_data",
]


@dataclass(frozen=True)
class BackboneSpec:
    """A backbone: its config section, how to build it for a run, how to rebuild it from
    the plain ``model.config`` dict a checkpoint stores, and how ``tools/eval.py`` opens a
    split for a rebuilt model."""

    config: type
    open_data: Callable[[Config], RunData]  # the run's data source for this backbone
    build: Callable[[Any, RunData], SimilarityModel]  # (model.<name> section, data) -> model
    from_config: Callable[[dict[str, Any]], SimilarityModel]
    # (data section, split name, model) -> the split to rank (an EvalData or opened split)
    open_eval_split: Callable[[Any, str, SimilarityModel], Any] = open_eval_split
    # (data section, the run's data) -> model -> the run's training pairs in this backbone's
    # input format (``data.estimator``: an estimator of this backbone on another backbone's run)
    open_view: Callable[[Any, RunData], Callable[[SimilarityModel], TrainingData]] | None = None


BACKBONES: dict[str, BackboneSpec] = {
    "sgraf": BackboneSpec(SGRAFConfig, open_sgraf_data, build_sgraf, sgraf_from_config),
    "clip": BackboneSpec(
        CLIPConfig,
        open_clip_data,
        build_clip_backbone,
        clip_from_config,
        clip_eval_split,
        open_clip_view,
    ),
}


def open_run_data(config: Config) -> RunData:
    """The data source of ``model.backbone`` (precomputed regions for SGRAF)."""
    return BACKBONES[config.model.backbone].open_data(config)


def build_model(config: Config, data: RunData) -> SimilarityModel:
    """The ``model.backbone`` model for ``data`` from its ``model.<backbone>`` section."""
    name = config.model.backbone
    return BACKBONES[name].build(getattr(config.model, name), data)


def model_from_checkpoint(state: dict[str, Any]) -> SimilarityModel:
    """Rebuild the model a checkpoint (or model file) describes and load its weights.

    Checkpoints written before the backbone registry carry no ``backbone``: they are SGRAF.
    """
    name = state.get("backbone") or "sgraf"
    if name not in BACKBONES:
        raise ValueError(f"checkpoint backbone {name!r} is not one of {sorted(BACKBONES)}")
    model = BACKBONES[name].from_config(state["model_config"])
    model.load_state_dict(state["model"])
    return model


def model_from_file(path: str) -> tuple[SimilarityModel, dict[str, Any]]:
    """``(model, checkpoint)`` of a training checkpoint, or ``(model, {})`` of a CLIP weights
    file of this package (``tools/pretrain_clip.py``'s stand-in), on the CPU."""
    try:
        state = load_checkpoint(path, map_location="cpu")
    except CheckpointError as err:
        try:
            return clip_from_weights_file(path), {}
        except WeightsError:
            raise err from None
    return model_from_checkpoint(state), state


def open_estimator_view(
    config: Config, data: RunData
) -> Callable[[SimilarityModel], TrainingData] | None:
    """``data.estimator``: the run's training pairs in another backbone's input format, opened
    and checked against ``data`` (None when ``data.estimator.name`` is null)."""
    view = config.data.estimator
    if not view.name:
        return None
    spec = BACKBONES.get(view.backbone)
    if spec is None or spec.open_view is None:
        offered = sorted(n for n, b in BACKBONES.items() if b.open_view is not None)
        raise ConfigError(
            f"data.estimator.backbone={view.backbone!r} offers no view of the training pairs; "
            f"use one of {offered}"
        )
    return spec.open_view(config.data, data)


def build_method(
    config: Config, model: torch.nn.Module | None = None, num_samples: int | None = None
) -> Method:
    """The ``method.name`` method from its ``method.<name>`` section and ``eval.eval_score``;
    with ``model`` (training) also ``method.prepare(model, num_samples)``."""
    name = config.method.name
    options = dataclasses.asdict(getattr(config.method, name))
    method = METHODS[name].cls(**options, eval_score=config.eval.eval_score)
    if model is not None:
        method.prepare(model, int(num_samples or 0))
    return method


def image_decay_override(
    model: torch.nn.Module, data: RunData | None, per_rms: float | None
) -> list[tuple[list[torch.nn.Parameter], float]]:
    """``train.image_decay_per_rms`` as an optimiser override: the model's image projection
    weights at ``per_rms x`` the RMS of the training features (none when it is null).

    Why per RMS: decoupled weight decay pulls every weight towards 0 at the same rate, while
    the weights a projection needs scale as 1 / feature scale, so one decay value is weak on
    large features and strong on small ones (README "The image projection's weight decay")."""
    if per_rms is None:
        return []
    weights = getattr(model, "image_projection_weights", None)
    rms = getattr(data, "image_feature_rms", None)
    if weights is None or rms is None:
        raise ConfigError(
            f"train.image_decay_per_rms is set, but the {type(model).__name__} backbone has no "
            "image projection reading precomputed features to decay separately (only the "
            "precomputed SGRAF backbone has); set train.image_decay_per_rms to null"
        )
    return [(weights(), float(per_rms) * rms())]


def check_method_backbone(config: Config, model: SimilarityModel) -> None:
    """Refuse, before the run folder appears, a method that cannot be meaningful on the
    model's backbone (:meth:`Method.backbone_error`: the reason and the fix in one line)."""
    reason = build_method(config).backbone_error(model)
    if reason:
        raise ConfigError(f"method.name={config.method.name} on model.backbone="
                          f"{config.model.backbone}: {reason}")  # fmt: skip


def build_optimizer_and_schedule(
    config: Config,
    model: torch.nn.Module,
    method: Method,
    steps_per_epoch: int,
    *,
    data: RunData | None = None,
) -> tuple[torch.optim.Optimizer, Schedule]:
    """``train.optimizer`` over ``method.trainable_parameters(model)`` and ``train.schedule``;
    ``data`` (the run's data) scales ``train.image_decay_per_rms``."""
    train = config.train
    optimizer = build_optimizer(
        train.optimizer,
        method.trainable_parameters(model),
        modules=[model, method],
        lr=train.lr,
        weight_decay=train.weight_decay,
        overrides=image_decay_override(model, data, train.image_decay_per_rms),
        betas=(train.adam_beta1, train.adam_beta2),
        eps=train.adam_eps,
    )
    schedule = build_schedule(
        train.schedule,
        optimizer,
        warmup_epochs=train.warmup_epochs,
        lr_update=train.lr_update,
        lr_decay=train.lr_decay,
        warmup_steps=train.warmup_steps,
        total_steps=steps_per_epoch * (train.warmup_epochs + train.epochs),
    )
    return optimizer, schedule
