"""Names from the config -> builders: backbones, methods, optimisers and schedules.

The registries live in leaf modules: backbones in :data:`ugncl.backbones.registry.BACKBONES`
(re-exported here), methods in :data:`ugncl.methods.METHODS`; a line there gives a backbone its
``model.<name>`` section and a method its ``method.<name>`` section. Each config dataclass may
declare ``CHOICES: ClassVar[dict]`` for its string keys.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import torch

from ugncl.backbones.registry import (
    BACKBONES,
    BackboneSpec,
    check_checkpoint,
    model_from_checkpoint,
    model_from_file,
    open_estimator_view,
)
from ugncl.core.data import RunData
from ugncl.core.errors import ConfigError
from ugncl.core.optim import Schedule, build_optimizer, build_schedule
from ugncl.core.prefilter import Prefilter
from ugncl.core.similarity import SimilarityModel
from ugncl.methods import METHODS, Method

if TYPE_CHECKING:
    from ugncl.core.config import Config

logger = logging.getLogger(__name__)

__all__ = [
    "BACKBONES",
    "METHODS",
    "BackboneSpec",
    "build_method",
    "build_model",
    "build_optimizer_and_schedule",
    "build_prefilter",
    "check_checkpoint",
    "check_method_backbone",
    "method_backbone_error",
    "model_from_checkpoint",
    "model_from_file",
    "open_estimator_view",
    "open_run_data",
]


def open_run_data(config: Config) -> RunData:
    """The data source of ``model.backbone`` (precomputed regions for SGRAF)."""
    return BACKBONES[config.model.backbone].open_data(config)


def build_model(config: Config, data: RunData) -> SimilarityModel:
    """The ``model.backbone`` model for ``data`` from its ``model.<backbone>`` section."""
    name = config.model.backbone
    return BACKBONES[name].build(getattr(config.model, name), data)


def build_method(
    config: Config, model: torch.nn.Module | None = None, num_samples: int | None = None
) -> Method:
    """The ``method.name`` method from its ``method.<name>`` section and ``eval.eval_score``;
    with ``model`` (training) also ``method.prepare(model, num_samples)``."""
    name = config.method.name
    section = getattr(config.method, name)
    method = METHODS[name].cls.from_config(section, eval_score=config.eval.eval_score)
    if model is not None:
        method.prepare(model, int(num_samples or 0))
    return method


def build_prefilter(config: Config) -> Prefilter | None:
    """The ``prefilter`` section as the trainer's :class:`Prefilter` (None for ``none``)."""
    section = config.prefilter
    if section.kind == "none":
        return None
    return Prefilter(kind=section.kind, alpha=section.alpha, fdr=section.fdr,
                     epochs=section.epochs)  # fmt: skip


def image_decay_override(
    model: torch.nn.Module, data: RunData | None, per_rms: float | None
) -> list[tuple[list[torch.nn.Parameter], float]]:
    """``train.image_decay_per_rms`` as an optimiser override: the model's image projection
    weights at ``per_rms x`` the RMS of the training features (none when it is null, or when
    the backbone has no projection reading precomputed features: CLIP's image tower is
    decayed at ``train.weight_decay`` like its other weights).

    Why per RMS: decoupled weight decay pulls every weight towards 0 at the same rate, while
    the weights a projection needs scale as 1 / feature scale, so one decay value is weak on
    large features and strong on small ones (docs/methods/ugncl.md)."""
    if per_rms is None:
        return []
    weights = getattr(model, "image_projection_weights", None)
    if weights is None:
        logger.info("train.image_decay_per_rms applies to a projection of precomputed "
                    "features; the %s backbone has none, so it is not used",
                    type(model).__name__)  # fmt: skip
        return []
    rms = getattr(data, "image_feature_rms", None)
    if rms is None:
        raise ConfigError(
            "train.image_decay_per_rms is counted in the training features' RMS, and this "
            f"{type(model).__name__} was built without its run's precomputed data; pass the "
            "data, or set train.image_decay_per_rms to null"
        )
    return [(weights(), float(per_rms) * rms())]


def method_backbone_error(config: Config, model: SimilarityModel) -> str | None:
    """Why ``method.name`` cannot be meaningful on the model's backbone, or None
    (:meth:`Method.backbone_error`: the reason and the fix in one line)."""
    return build_method(config).backbone_error(model)


def check_method_backbone(config: Config, model: SimilarityModel) -> None:
    """Refuse, before the run folder appears, a method that cannot be meaningful on the
    model's backbone (:func:`method_backbone_error`)."""
    reason = method_backbone_error(config, model)
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
