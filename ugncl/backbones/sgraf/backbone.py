"""SGRAF as a backbone of the package: its config section, its builders, its registration.

``sgraf.SGRAF`` already has the similarity-model calls; this module only turns the
``model.sgraf`` config section into constructor arguments and rebuilds a model from the plain
``config`` dict stored in checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from sgraf.checkpoint import build_model_from_config
from sgraf.head import HEADS
from sgraf.model import SGRAF
from ugncl.backbones.sgraf.experiment import (
    PrecomputedRunData,
    check_vocab,
    open_training_data,
    open_vocab,
)
from ugncl.core.errors import ConfigError
from ugncl.core.similarity import SimilarityModel

__all__ = [
    "SGRAFConfig",
    "build_sgraf",
    "check_sgraf_checkpoint",
    "open_sgraf_data",
    "sgraf_from_config",
]

# SGRAF implements the interface without importing ugncl (sgraf never imports ugncl).
SimilarityModel.register(SGRAF)


@dataclass
class SGRAFConfig:
    """SGRAF network sizes (the SGRAF/NCR release defaults)."""

    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {"head": HEADS}
    RANGES: ClassVar[dict[str, str]] = {
        "word_dim": ">=1", "img_dim": ">=1", "embed_dim": ">=1", "sim_dim": ">=1",
        "num_regions": ">=1", "num_views": "[1,64]", "sgr_steps": "[1,64]",
        "word_dropout": "[0,1)",
        "block_captions": ">=1",
    }  # fmt: skip

    head: str = "sgr"
    word_dim: int = 300
    img_dim: int = 2048
    embed_dim: int = 1024
    sim_dim: int = 256
    num_regions: int = 36
    num_views: int = 2  # W image views (1 = plain SGRAF)
    sgr_steps: int = 3
    bi_gru: bool = True
    word_dropout: float = 0.4
    # Captions per scored block (null: the memory budget decides). The scorer sorts captions
    # by length and trims each block to its longest, so CPU-sized batches run faster in small
    # blocks (8 at K = 32: a UGNCL training step 25-30% less CPU time); the scores are the same
    # up to float rounding. The paper configs keep null: on a GPU one large block should be
    # faster (not measured; no GPU was lent when this was added).
    block_captions: int | None = None
    # A training checkpoint of an SGRAF of these sizes to start from (null: random init).
    # SGRAF has no pretraining; the methods that read the starting model's scores (NPC's
    # memory bank, SDD's clean set, OSA's frozen copy) need a warm start, as CLIP's weights
    # are for them on the CLIP track: e.g. a triplet warm-up run on the same split.
    init: str | None = None


def open_sgraf_data(config: Any) -> PrecomputedRunData:
    """SGRAF reads precomputed region features: the precomputed track's run data."""
    return open_training_data(config.data)


def build_sgraf(config: SGRAFConfig, data: PrecomputedRunData) -> SGRAF:
    """An SGRAF for ``data`` (an opened precomputed run: its vocabulary and training split);
    the region count and feature size must match the features."""
    _, regions, dim = data.train.features.shape
    if (regions, dim) != (config.num_regions, config.img_dim):
        raise ConfigError(
            f"features of {data.train.name}/{data.train.split} are {regions} regions x {dim} "
            f"dims but the model expects model.sgraf.num_regions={config.num_regions}, "
            f"model.sgraf.img_dim={config.img_dim}; set them to {regions} and {dim}"
        )
    model = SGRAF(
        len(data.vocab),
        word_dim=config.word_dim,
        img_dim=config.img_dim,
        embed_dim=config.embed_dim,
        sim_dim=config.sim_dim,
        num_regions=config.num_regions,
        num_views=config.num_views,
        head=config.head,
        sgr_steps=config.sgr_steps,
        bi_gru=config.bi_gru,
        word_dropout=config.word_dropout,
        block_captions=config.block_captions,
    )
    # Where the weights come from (None: random init); methods that read the starting
    # model's scores refuse a random one (untrained_start_error).
    model.init_from = None
    if config.init:
        load_init(model, config.init)
    return model


def load_init(model: SGRAF, path: str) -> None:
    """Load the weights of the SGRAF checkpoint ``path`` into ``model`` (same sizes and
    vocabulary); marks ``model.init_from``. Errors name the file and what differs."""
    from ugncl.core.engine.checkpoint import CheckpointError, load_checkpoint

    try:
        state = load_checkpoint(path, map_location="cpu")
    except CheckpointError as err:
        raise ConfigError(f"model.sgraf.init: {err}") from None
    backbone = state.get("backbone") or "sgraf"
    if backbone != "sgraf":
        raise ConfigError(
            f"model.sgraf.init={path} is a {backbone} checkpoint; it needs an SGRAF one"
        )
    theirs = dict(state.get("model_config") or {})
    free = ("block_captions", "word_dropout")  # neither changes a weight's shape or meaning
    keys = (set(theirs) | set(model.config)) - set(free)
    differ = sorted(k for k in keys if theirs.get(k) != model.config.get(k))
    if differ:
        pairs = ", ".join(f"{k} {theirs.get(k)} vs {model.config.get(k)}" for k in differ)
        raise ConfigError(
            f"model.sgraf.init={path} is an SGRAF of other sizes or vocabulary ({pairs}); "
            "set model.sgraf.* as its run had them"
        )
    model.load_state_dict(state["model"])
    model.init_from = str(path)


def sgraf_from_config(model_config: dict[str, Any]) -> SGRAF:
    """Rebuild from ``model.config`` (checkpoints); unknown keys are an error."""
    return build_model_from_config(model_config)


def check_sgraf_checkpoint(data: Any, state: dict[str, Any], where: str) -> None:
    """Caption ids index the vocabulary a checkpoint was trained with: refuse ``state`` (file
    ``where``) when ``data``'s vocabulary (``data.vocab`` or beside the features) is another."""
    vocab, vocab_path = open_vocab(data)
    check_vocab(state, vocab, vocab_path, where)
