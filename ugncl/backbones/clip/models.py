"""open_clip model architectures: the package's own configs, registered offline.

open_clip keeps a registry of architecture configs (JSON files with ``embed_dim``,
``vision_cfg`` and ``text_cfg``) filled from the folders in ``open_clip.factory``'s config
path list; ``open_clip.add_model_config(path)`` appends a folder and rescans it. Importing this
module registers ``model_configs/*.json`` next to it, so after ``import
ugncl.backbones.clip.models``
``open_clip.create_model("ugncl-tiny")``, ``open_clip.get_tokenizer("ugncl-tiny")`` (context
length 40) and the transforms work like the built-in names, with no network access.

``ugncl-tiny`` is the CPU-sized model of the synthetic world: 64 px images, 8 px patches (64
tokens + class token), width 128, 3 layers in each tower, a 40-token text context and 128-d
embeddings. Its token embedding keeps open_clip's 49,408-entry BPE vocabulary (the tokenizer
emits those ids), which is 6.3 M of its ~7.9 M parameters.
"""

from __future__ import annotations

import functools
from pathlib import Path

import open_clip
from open_clip.factory import get_model_config

__all__ = [
    "CONFIG_DIR",
    "TINY_MODEL",
    "architecture_config",
    "clip_tokenizer",
    "register_model_configs",
]

CONFIG_DIR = Path(__file__).parent / "model_configs"
TINY_MODEL = "ugncl-tiny"

# open_clip's own name prefixes that fetch configs (and weights) from elsewhere.
_SCHEMAS = ("hf-hub:", "local-dir:")


def register_model_configs() -> None:
    """Add this package's config folder to open_clip's registry (idempotent)."""
    names = {p.stem for p in CONFIG_DIR.glob("*.json")}
    if not names.issubset(open_clip.list_models()):
        open_clip.add_model_config(CONFIG_DIR)


def architecture_config(model_name: str) -> dict:
    """A copy of the registered open_clip config of ``model_name``.

    Raises:
        ValueError: ``model_name`` carries an ``hf-hub:``/``local-dir:`` schema (those read
            configs and weights from elsewhere; this package builds only registered
            architectures and loads weights from a file it is given) or is not registered.
    """
    if model_name.startswith(_SCHEMAS):
        raise ValueError(
            f"model name {model_name!r} names a remote or directory source; use an "
            f"architecture name (e.g. 'ViT-B-32' or '{TINY_MODEL}') and give the weights "
            "file as pretrained=/path/to/weights.pt"
        )
    register_model_configs()
    cfg = get_model_config(model_name.replace("/", "-"))
    if cfg is None:
        known = ", ".join(n for n in open_clip.list_models() if "ViT-B" in n or "ugncl" in n)
        raise ValueError(
            f"unknown open_clip architecture {model_name!r}; pick a registered one "
            f"(e.g. {known}; all: open_clip.list_models())"
        )
    for tower, key in (("vision_cfg", "timm_model_name"), ("text_cfg", "hf_model_name")):
        if cfg.get(tower, {}).get(key):
            raise ValueError(
                f"architecture {model_name!r} builds its {tower[:-4]} tower from "
                f"{key.split('_')[0]} weights fetched by name; pick a native open_clip "
                "architecture (e.g. 'ViT-B-32')"
            )
    return cfg


@functools.lru_cache(maxsize=8)
def clip_tokenizer(model_name: str, context_length: int):
    """open_clip's tokenizer of ``model_name`` at ``context_length`` (cached: building one
    reads the BPE vocabulary, ~0.3 s)."""
    register_model_configs()
    return open_clip.get_tokenizer(model_name, context_length=context_length)


register_model_configs()
