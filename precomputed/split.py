"""The split's rules, shared by every backbone: which caption->image index a run trains on and
its record in the run folder.

A run trains on the index read from ``noise_file`` (in its stated or detected convention) or,
without one, on the index built from ``noise_ratio`` and ``noise_seed`` (NCR's rule: a share of
the captions moved to other images); ratio 0 is the clean index. The index saved into the run
folder, and its sha256, are what identifies the split everywhere else (resume, comparison,
audits).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from precomputed.noise import (
    clean_image_index,
    load_noise_index,
    make_caption_noise,
    noise_sha256,
    save_noise_index,
)

__all__ = ["NoiseSpec", "record_noise", "training_noise"]

#: The file name of the index trained on, inside a run folder.
NOISE_INDEX_FILE = "noise_index.npy"


@dataclass(frozen=True)
class NoiseSpec:
    """Where a run's training index comes from (the ``data.noise_*`` keys)."""

    noise_file: str | None = None
    noise_format: str = "caption"  # caption | image | auto
    noise_ratio: float = 0.2
    noise_seed: int = 0


def training_noise(
    spec: NoiseSpec, num_images: int, captions_per_image: int
) -> tuple[np.ndarray, str]:
    """The ``(num_images * captions_per_image,)`` caption->image index to train on, and where it
    came from: loaded from ``spec.noise_file`` or built and seeded."""
    if spec.noise_file is not None:
        index = load_noise_index(
            spec.noise_file,
            num_images=num_images,
            captions_per_image=captions_per_image,
            fmt=spec.noise_format,
        )
        return index, str(spec.noise_file)
    true_index = clean_image_index(num_images, captions_per_image)
    if spec.noise_ratio == 0.0:
        return true_index, "clean (noise_ratio 0)"
    index = make_caption_noise(true_index, spec.noise_ratio, spec.noise_seed)
    return index, f"built (ratio {spec.noise_ratio}, seed {spec.noise_seed})"


def record_noise(index: np.ndarray, run_dir: Path) -> str:
    """Save the index trained on into the run directory; returns its sha256."""
    save_noise_index(run_dir / NOISE_INDEX_FILE, index)
    return noise_sha256(index)
