"""The backbone registry: name -> :class:`BackboneSpec` (config section, data, builders, hooks).

Adding a backbone = its module (a :class:`~ugncl.core.similarity.SimilarityModel`, a config
dataclass, a builder) + one line in :data:`BACKBONES`; its config section ``model.<name>``
appears from that line. A leaf of the import graph: nothing it imports imports it back, so the
config loader (``model.backbone`` choices, ``model.<name>`` sections), the builders and a method
that loads a model of any backbone (OSA's estimator) can all read it.
"""

from __future__ import annotations

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
    open_clip_data,
)
from ugncl.backbones.clip.loading import WeightsError
from ugncl.backbones.clip.run_data import open_clip_view
from ugncl.backbones.sgraf.backbone import (
    SGRAFConfig,
    build_sgraf,
    check_sgraf_checkpoint,
    open_sgraf_data,
    sgraf_from_config,
)
from ugncl.backbones.sgraf.experiment import open_eval_split
from ugncl.core.data import RunData, TrainingData
from ugncl.core.engine.checkpoint import CheckpointError, load_checkpoint
from ugncl.core.errors import ConfigError
from ugncl.core.similarity import SimilarityModel

if TYPE_CHECKING:
    from ugncl.core.config import Config

__all__ = [
    "BACKBONES",
    "BackboneSpec",
    "check_checkpoint",
    "model_from_checkpoint",
    "model_from_file",
    "open_estimator_view",
]


def _no_check(data: Any, state: dict[str, Any], where: str) -> None:
    """A backbone whose inputs carry no per-checkpoint state (CLIP: pixels and BPE tokens)."""


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
    # (data section, checkpoint state, where) -> None: refuse a checkpoint whose inputs the data
    # encodes differently (SGRAF: another vocabulary); ``tools/eval.py`` asks it per checkpoint
    check_checkpoint: Callable[[Any, dict[str, Any], str], None] = _no_check


BACKBONES: dict[str, BackboneSpec] = {
    "sgraf": BackboneSpec(
        SGRAFConfig,
        open_sgraf_data,
        build_sgraf,
        sgraf_from_config,
        check_checkpoint=check_sgraf_checkpoint,
    ),
    "clip": BackboneSpec(
        CLIPConfig,
        open_clip_data,
        build_clip_backbone,
        clip_from_config,
        clip_eval_split,
        open_clip_view,
    ),
}


def check_checkpoint(backbone: str, data: Any, state: dict[str, Any], where: str) -> None:
    """The ``backbone``'s check that checkpoint ``state`` (file ``where``) reads ``data`` (a
    ``data`` section) as it was trained to, e.g. with the same vocabulary."""
    BACKBONES[backbone].check_checkpoint(data, state, where)


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
    model = model_from_checkpoint(state)
    check_weights(model, path)
    return model, state


def check_weights(model: torch.nn.Module, path: str) -> None:
    """Refuse a model whose weights cannot be a trained model's: a non-finite parameter or
    buffer, or a BatchNorm running variance below zero (a hand-edited or corrupted file; it
    would turn every score NaN).

    Raises:
        CheckpointError: naming the tensor.
    """
    for name, tensor in model.state_dict().items():
        if not torch.is_floating_point(tensor):
            continue
        if not torch.isfinite(tensor).all():
            raise CheckpointError(
                f"{path}: weight {name} holds NaN or inf; the file is damaged or the run "
                "diverged: evaluate another checkpoint (best.pt, an earlier run)"
            )
        if name.endswith("running_var") and (tensor < 0).any():
            raise CheckpointError(
                f"{path}: BatchNorm statistic {name} has negative values (min "
                f"{float(tensor.min()):.3g}); a variance is >= 0, so the file is damaged or "
                "was edited: evaluate another checkpoint"
            )


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


class RegistryServices:
    """:class:`ugncl.core.method.RunServices` over the registered backbones: what the run room
    hands a method's ``bind_data``."""

    def model_from_file(self, path: str) -> SimilarityModel:
        return model_from_file(path)[0]

    def open_estimator_view(
        self, config: Config, data: RunData
    ) -> Callable[[SimilarityModel], TrainingData] | None:
        return open_estimator_view(config, data)


REGISTRY_SERVICES = RegistryServices()
