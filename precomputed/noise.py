"""Noisy correspondence as data (STYLE pattern 15; reference §4.4, §6.7).

Canonical format (NCR/DECL noise file): a 1-D int64 array of length N_cap whose value k is the
image index assigned to caption k. UGNCL's release instead stores an image-level permutation
(length N_img; caption k uses ``perm[k // cpi]``); it is converted explicitly with
:func:`image_permutation_to_caption_index`, never read as a caption index by accident.

Number of corrupted captions: ``int(ratio * N_cap)`` (floor), exactly as NCR.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np

from ._io import atomic_open
from .errors import DataFormatError, DataNotFoundError, InvalidSettingError

__all__ = [
    "clean_image_index",
    "image_permutation_to_caption_index",
    "load_noise_index",
    "make_caption_noise",
    "noise_sha256",
    "num_noisy",
    "save_noise_index",
]


def clean_image_index(num_images: int, captions_per_image: int) -> np.ndarray:
    """The clean caption -> image map ``k // captions_per_image``, (N_cap,) int64."""
    if num_images < 0 or captions_per_image < 1:
        raise InvalidSettingError(
            f"need num_images >= 0 and captions_per_image >= 1, got {num_images}, "
            f"{captions_per_image}"
        )
    return np.arange(num_images * captions_per_image, dtype=np.int64) // captions_per_image


def _check_ratio(ratio: float) -> float:
    r = float(ratio)
    if not math.isfinite(r) or not 0.0 <= r < 1.0:
        raise InvalidSettingError(
            f"noise ratio must be in [0, 1) (the share of captions paired with another image), "
            f"got {ratio!r}; pass a value below 1, e.g. 0.2 or 0.5"
        )
    return r


def num_noisy(num_captions: int, ratio: float) -> int:
    """Captions that get shuffled: ``int(ratio * num_captions)`` (NCR's floor)."""
    return int(_check_ratio(ratio) * num_captions)


def make_caption_noise(image_index: np.ndarray, ratio: float, seed: int) -> np.ndarray:
    """NCR caption-level noise: shuffle the image indices of ``int(ratio*N)`` random captions.

    A caption may land on its own image by chance; it then counts as clean
    (``noisy == image_index``), as in NCR.

    Args:
        image_index: (N_cap,) integer clean caption -> image map (e.g. :func:`clean_image_index`).
        ratio: share of captions to shuffle, in [0, 1).
        seed: seed of a local ``np.random.default_rng``; no global state is touched.

    Returns:
        (N_cap,) int64 noisy caption -> image map.
    """
    clean = np.asarray(image_index)
    if clean.ndim != 1 or not np.issubdtype(clean.dtype, np.integer):
        raise ValueError(
            f"image_index must be a 1-D integer array, got shape {clean.shape} dtype {clean.dtype}"
        )
    k = num_noisy(len(clean), ratio)
    rng = np.random.default_rng(seed)
    selected = rng.permutation(len(clean))[:k]
    noisy = clean.astype(np.int64, copy=True)
    noisy[selected] = noisy[selected][rng.permutation(k)]
    return noisy


def image_permutation_to_caption_index(perm: np.ndarray, captions_per_image: int) -> np.ndarray:
    """Convert a UGNCL image-level permutation: caption k -> ``perm[k // captions_per_image]``.

    Args:
        perm: (N_img,) integer image -> image map.
        captions_per_image: captions per image.

    Returns:
        (N_img * captions_per_image,) int64 caption -> image map.
    """
    perm = np.asarray(perm)
    if perm.ndim != 1 or not np.issubdtype(perm.dtype, np.integer):
        raise DataFormatError(
            "an image permutation is a 1-D integer array, "
            f"got shape {perm.shape} dtype {perm.dtype}"
        )
    if captions_per_image < 1:
        raise InvalidSettingError(f"captions_per_image must be >= 1, got {captions_per_image}")
    return np.repeat(perm.astype(np.int64), captions_per_image)


def noise_sha256(index: np.ndarray) -> str:
    """sha256 of the index as int64 little-endian bytes (proves two runs used the same split)."""
    data = np.ascontiguousarray(np.asarray(index), dtype="<i8")
    return hashlib.sha256(data.tobytes()).hexdigest()


def save_noise_index(path: str | Path, index: np.ndarray) -> None:
    """Write an NCR noise file (1-D int64, ``np.save``), atomically; never appends."""
    index = np.asarray(index)
    if index.ndim != 1 or not np.issubdtype(index.dtype, np.integer):
        raise ValueError(
            f"a noise index is a 1-D integer array, got shape {index.shape} dtype {index.dtype}"
        )
    with atomic_open(path, "wb") as f:
        np.save(f, index.astype(np.int64), allow_pickle=False)


def load_noise_index(
    path: str | Path, *, num_images: int, captions_per_image: int, fmt: str = "caption"
) -> np.ndarray:
    """Load a noise file and return the (N_cap,) int64 caption -> image map.

    Args:
        path: ``.npy`` file.
        num_images: images of the split.
        captions_per_image: captions per image of the split.
        fmt: ``"caption"`` (NCR/DECL: length N_cap) or ``"image"`` (UGNCL release: a permutation
            of length N_img, converted with :func:`image_permutation_to_caption_index`).

    Raises:
        DataNotFoundError: missing file.
        DataFormatError: not 1-D, not integer, wrong length (an image-level file passed as
            ``fmt="caption"`` is named as such), or values outside [0, num_images).
    """
    if fmt not in ("caption", "image"):
        raise ValueError(f'fmt must be "caption" or "image", got {fmt!r}')
    path = Path(path)
    if not path.is_file():
        raise DataNotFoundError(
            f"noise file {path} not found; write one with tools/make_noise.py (NCR format: 1-D "
            "int64, one image index per caption)"
        )
    if path.stat().st_size == 0:
        raise DataFormatError(
            f"noise file {path} is empty (0 bytes): its write was cut off; write it again with "
            "tools/make_noise.py"
        )
    try:
        index = np.load(path, allow_pickle=False)
    except (ValueError, EOFError, OSError) as err:
        raise DataFormatError(
            f"noise file {path} is not a plain .npy array ({err or type(err).__name__})"
        ) from err
    if index.ndim != 1:
        raise DataFormatError(f"noise file {path} has shape {index.shape}; expected a 1-D array")
    if not np.issubdtype(index.dtype, np.integer):
        raise DataFormatError(
            f"noise file {path} has dtype {index.dtype}; expected integers (int64 image indices)"
        )
    num_captions = num_images * captions_per_image
    if fmt == "image":
        if len(index) != num_images:
            raise DataFormatError(
                f"image-level noise file {path} has length {len(index)}; expected one entry per "
                f"image ({num_images})"
            )
    elif len(index) != num_captions:
        if len(index) == num_images:
            raise DataFormatError(
                f"noise file {path} has length {len(index)} = number of images, not of captions "
                f"({num_captions}): it looks like an image-level permutation (UGNCL release); "
                'pass fmt="image" to convert it explicitly'
            )
        raise DataFormatError(
            f"noise file {path} has length {len(index)}; expected one image index per caption "
            f"({num_captions} = {num_images} images x {captions_per_image}); it was written for "
            "another split or subset: write one for this split with tools/make_noise.py"
        )
    lo, hi = (int(index.min()), int(index.max())) if len(index) else (0, 0)
    if len(index) and (lo < 0 or hi >= num_images):
        raise DataFormatError(
            f"noise file {path} has values in [{lo}, {hi}]; image indices must lie in "
            f"[0, {num_images}) for this split: write one for this split with tools/make_noise.py"
        )
    index = index.astype(np.int64)
    if fmt == "image":
        index = image_permutation_to_caption_index(index, captions_per_image)
    return index
