"""The ``clip`` backbone for the registry: config section, run data, builder, rebuild.

Registry line (``ugncl/backbones/registry.py``)::

    "clip": BackboneSpec(CLIPConfig, open_clip_data, build_clip_backbone, clip_from_config,
                         clip_eval_split, open_clip_view),

The run's data is raw images (:mod:`ugncl.backbones.clip.run_data`); the builder binds it to the
model's preprocessing and tokenizer.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from precomputed.split import training_noise
from ugncl.core.errors import ConfigError

from .adapter import DEFAULT_VIEW_SPREAD, CLIPSimilarity, build_clip
from .loading import WEIGHTS_FORMAT_KEY, WeightsError, read_weights
from .models import TINY_MODEL
from .run_data import CLIPRunData, ImageEvalData, open_clip_split, pixel_source

__all__ = [
    "RANDOM_INIT",
    "CLIPConfig",
    "build_clip_backbone",
    "clip_eval_split",
    "clip_from_config",
    "clip_from_weights_file",
    "open_clip_data",
    "pretrained_path",
]

#: ``model.clip.pretrained`` value for a randomly initialised model (tests, ablations).
RANDOM_INIT = "random"
_WEIGHTS_HINT = "README 'CLIP weights' says where to get them and how to convert OpenAI's files"


@dataclass
class CLIPConfig:
    """``model.clip``: an open_clip architecture and the local file its weights come from.

    Attributes:
        name: registered open_clip architecture (``ViT-B-32`` for the paper settings,
            ``ugncl-tiny`` for the synthetic world).
        pretrained: local weights file; must be set (``random`` = random init, deliberately).
            Hub tags are refused; nothing downloads.
        quick_gelu: null lets the file decide (OpenAI weights -> true); see README
            "CLIP weights".
        image_size: override of the architecture's image size (null: keep).
        context_length: override of the text context (null: keep).
        num_views: W image projection heads on the image tower (UGNCL's W views); 1 is the
            plain model, and the methods that read one score per pair need it.
        view_spread: relative size of the extra heads' random start
            (:func:`~ugncl.backbones.clip.adapter.init_view_heads`).
    """

    RANGES: ClassVar[dict[str, str]] = {"num_views": "[1,64]", "view_spread": ">=0"}

    name: str = TINY_MODEL  # open_clip architecture (ViT-B-32 for the paper settings)
    pretrained: str | None = None  # local weights file, must be set (`random`: random init)
    quick_gelu: bool | None = None  # null: the file decides (OpenAI weights -> true)
    image_size: int | None = None  # null: the architecture's
    context_length: int | None = None  # null: the architecture's
    num_views: int = 1  # W image projection heads (1 = the plain model)
    view_spread: float = DEFAULT_VIEW_SPREAD  # extra heads start ~0.3 rad from head 0


def pretrained_path(config: CLIPConfig) -> str | None:
    """The weights file ``model.clip.pretrained`` names (None for ``random``).

    Raises:
        ConfigError: unset, or naming a file that is not there (with where to get it).
    """
    value = config.pretrained
    if value == RANDOM_INIT:
        return None
    if value is None or not str(value).strip():
        raise ConfigError(
            f"model.clip.pretrained is not set: CLIP fine-tuning starts from local "
            f"{config.name} weights; set it, e.g. --set model.clip.pretrained=/path/to/"
            f"{config.name}.pt ({_WEIGHTS_HINT}; `random` trains from scratch)"
        )
    path = Path(value).expanduser()
    looks_like_path = "/" in str(value) or bool(path.suffix)  # else a hub tag: build refuses it
    if looks_like_path and not path.exists():
        if config.name == TINY_MODEL:
            fix = (
                "pretrain the stand-in once with `python tools/pretrain_clip.py` (it writes "
                "data/synthetic/clip/ugncl-tiny-pretrained.pt)"
            )
        else:
            fix = _WEIGHTS_HINT
        raise ConfigError(f"model.clip.pretrained file {path} not found; {fix}")
    return str(path)


def build_clip_backbone(config: CLIPConfig, data: Any = None) -> CLIPSimilarity:
    """The run's CLIP model from ``model.clip``; a :class:`CLIPRunData` is bound to the
    model's image preprocessing and tokenizer."""
    try:
        model = build_clip(
            config.name, pretrained_path(config), config.quick_gelu,
            image_size=config.image_size, context_length=config.context_length,
            num_views=config.num_views, view_spread=config.view_spread,
        )  # fmt: skip
    except (WeightsError, ValueError) as err:
        if isinstance(err, ConfigError):
            raise
        raise ConfigError(f"model.clip: {err}") from err
    if isinstance(data, CLIPRunData):
        data.use_model(model)
    return model


def clip_from_config(config: dict[str, Any]) -> CLIPSimilarity:
    """Rebuild the architecture a checkpoint's ``model_config`` describes, without reading
    its ``pretrained`` file (the checkpoint holds the trained weights)."""
    model = build_clip(
        config["model_name"], None, config["quick_gelu"],
        image_size=config["image_size"], context_length=config["context_length"],
        num_views=config.get("num_views", 1),
        view_spread=config.get("view_spread", DEFAULT_VIEW_SPREAD),
    )  # fmt: skip
    model.config["pretrained"] = config.get("pretrained")
    return model


def clip_from_weights_file(path: str | Path) -> CLIPSimilarity:
    """A weights file written by this package
    (:func:`~ugncl.backbones.clip.adapter.save_clip_weights`,
    e.g. ``tools/pretrain_clip.py``'s stand-in) as a model: zero-shot evaluation.

    Raises:
        WeightsError: unreadable, or not such a file (it records its architecture).
    """
    saved = read_weights(path).meta.get(WEIGHTS_FORMAT_KEY)
    if not isinstance(saved, dict) or "model_name" not in saved:
        raise WeightsError(
            f"{path} is neither a training checkpoint nor a CLIP weights file of this package "
            "(tools/pretrain_clip.py writes those; they record their architecture)"
        )
    return build_clip(
        saved["model_name"], path, saved.get("quick_gelu"),
        image_size=saved.get("image_size"), context_length=saved.get("context_length"),
    )  # fmt: skip


def clip_eval_split(data: Any, split: str, model: CLIPSimilarity) -> ImageEvalData:
    """One whole raw-image split for ``tools/eval.py``, in ``model``'s pixels and tokens."""
    opened = open_clip_split(data, split)
    return ImageEvalData(
        opened, model.image_transform(train=False), model.tokenizer(),
        name=data.name, num_workers=data.num_workers,
        pixels=pixel_source(data, opened, model.pixel_transform()),
    )  # fmt: skip


def open_clip_data(config: Any) -> CLIPRunData:
    """The run's raw-image data from ``config.data`` (the backbone registry's ``open_data``):
    the training split with the noise index of the shared rules, and the dev subset. The
    weights setting is checked first, before any image is looked at."""
    pretrained_path(config.model.clip)
    data = config.data
    train = open_clip_split(data, data.train_split, max_images=data.train_images)
    noise, source = training_noise(data.noise_spec(), train.num_images, train.captions_per_image)
    # The index is valid by construction (built) or checked against the split (loaded).
    train = dataclasses.replace(train, image_index=np.asarray(noise, dtype=np.int64))
    dev = None
    if data.dev_split:
        dev = open_clip_split(data, data.dev_split, max_images=data.dev_images)
    return CLIPRunData(data, train, dev, source)
