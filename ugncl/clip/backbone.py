"""The ``clip`` backbone for the registry: config section, builder, rebuild from a checkpoint.

Registry line (``ugncl/build.py``)::

    "clip": BackboneSpec(CLIPConfig, build_clip_backbone, clip_from_config),
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .adapter import CLIPSimilarity, build_clip
from .models import TINY_MODEL

__all__ = ["CLIPConfig", "build_clip_backbone", "clip_from_config"]


@dataclass
class CLIPConfig:
    """``model.clip``: an open_clip architecture and the local file its weights come from.

    Attributes:
        name: registered open_clip architecture (``ViT-B-32`` for the paper settings,
            ``ugncl-tiny`` for the synthetic world).
        pretrained: local weights file (null: random init). Hub tags are refused.
        quick_gelu: null lets the file decide (OpenAI weights -> true); see README
            "CLIP weights".
        image_size: override of the architecture's image size (null: keep).
        context_length: override of the text context (null: keep).
    """

    name: str = TINY_MODEL
    pretrained: str | None = None
    quick_gelu: bool | None = None
    image_size: int | None = None
    context_length: int | None = None


def build_clip_backbone(config: CLIPConfig, data: Any = None) -> CLIPSimilarity:
    """The run's CLIP model; ``data`` is unused (images and tokens follow the model: its
    ``image_transform()`` and ``tokenizer()``)."""
    return build_clip(
        config.name, config.pretrained, config.quick_gelu,
        image_size=config.image_size, context_length=config.context_length,
    )  # fmt: skip


def clip_from_config(config: dict[str, Any]) -> CLIPSimilarity:
    """Rebuild the architecture a checkpoint's ``model_config`` describes, without reading
    its ``pretrained`` file (the checkpoint holds the trained weights)."""
    model = build_clip(
        config["model_name"], None, config["quick_gelu"],
        image_size=config["image_size"], context_length=config["context_length"],
    )  # fmt: skip
    model.config["pretrained"] = config.get("pretrained")
    return model
