"""What the methods' readings share: their names, and the optimiser of the SGRAF-track
releases (NCR, DECL) that every one of their readings sets."""

from __future__ import annotations

from typing import Any

#: ``method.<name>.reading``: as printed, as the public code runs, as this package decides.
READING_NAMES: tuple[str, ...] = ("package", "paper", "release")

#: Adam without weight decay (and the image projection without its own decay), as the NCR and
#: DECL releases train.
ADAM_NO_DECAY: dict[str, Any] = {
    "train.optimizer": "adam", "train.weight_decay": 0.0, "train.image_decay_per_rms": None,
}  # fmt: skip
