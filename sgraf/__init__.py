"""SGRAF networks shared by every method on the precomputed track.

W-view image encoder, (bi)GRU caption encoder, SGR/SAF similarity heads with batched,
memory-bounded all-pairs scoring, and loading of released SGRAF/NCR/UGNCL checkpoints.
"""

from sgraf.checkpoint import (
    CheckpointError,
    build_model_from_config,
    load_model,
    load_model_file,
    load_released_checkpoint,
    save_model_file,
)
from sgraf.model import DEFAULT_MEMORY_BUDGET, SGRAF, score_all_pairs

__all__ = [
    "DEFAULT_MEMORY_BUDGET",
    "SGRAF",
    "CheckpointError",
    "build_model_from_config",
    "load_model",
    "load_model_file",
    "load_released_checkpoint",
    "save_model_file",
    "score_all_pairs",
]
