"""Pixels decoded once: a memory-mapped uint8 cache at the model's input size.

open_clip's evaluation preprocessing (the training transform too: the references train without
augmentation) is ``Resize -> CenterCrop -> RGB -> ToTensor -> Normalize``. Everything before
``ToTensor`` is geometry on a decoded image and gives the same uint8 pixels every epoch, so it is
done once per image and stored; ``ToTensor``'s division by 255 and ``Normalize`` are cheap
elementwise work done on the model's device (:func:`normalize_pixels`, called by
``CLIPSimilarity.encode_images`` on uint8 input). A batch then crosses to the device as uint8:
a quarter of float32's bytes.

The cache of a split is one ``.npy`` file of shape ``(n_images, 3, H, W)`` uint8, read memory-
mapped (each DataLoader worker maps it; the page cache shares it), named by a key over every
image file's identity (path, size, mtime) and the geometry's parameters: a changed image file
or another input size gives another file, never stale pixels.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch import Tensor

from .data import PixelSource, load_rgb

__all__ = [
    "CachedPixels",
    "DecodedPixels",
    "PixelSource",
    "PixelTransform",
    "cache_key",
    "normalize_pixels",
    "open_pixel_cache",
    "split_transform",
    "uint8_pixels",
]

#: Bumped when the cache's layout or the geometry's meaning changes (old files are ignored).
CACHE_FORMAT = 1
_TO_TENSOR = ("ToTensor", "MaybeToTensor")
_BUILD_BATCH = 32


@dataclass(frozen=True)
class PixelTransform:
    """A ``Compose`` transform split at ``ToTensor``.

    Attributes:
        geometry: PIL image -> PIL image at the input size (resize, crop, mode).
        mean, std: the ``Normalize`` that follows ``ToTensor`` (per channel).
        key: the geometry's parameters as text (its ``repr``), part of the cache key.
    """

    geometry: Callable[[Image.Image], Image.Image]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    key: str


def split_transform(transform: object) -> PixelTransform:
    """Split a torchvision ``Compose`` ending in ``ToTensor, Normalize`` (open_clip's).

    Raises:
        ValueError: another shape of transform (its pixels cannot be cached as uint8).
    """
    from torchvision.transforms import Compose, Normalize

    steps = list(getattr(transform, "transforms", []))
    names = [type(t).__name__ for t in steps]
    at = next((i for i, n in enumerate(names) if n in _TO_TENSOR), None)
    if at is None or at + 2 != len(steps) or not isinstance(steps[-1], Normalize):
        raise ValueError(
            f"cannot cache the pixels of transform {names or type(transform).__name__}: "
            "expected a Compose of PIL steps followed by ToTensor and Normalize (open_clip's "
            "image_transform)"
        )
    geometry = Compose(steps[:at])
    norm = steps[-1]
    return PixelTransform(
        geometry=geometry,
        mean=tuple(float(v) for v in norm.mean),
        std=tuple(float(v) for v in norm.std),
        key=repr(geometry),
    )


def uint8_pixels(image: Image.Image, geometry: Callable[[Image.Image], Image.Image]) -> Tensor:
    """A decoded image through ``geometry`` as ``(3, H, W)`` uint8 (what ``ToTensor`` scales)."""
    out = np.asarray(geometry(image).convert("RGB"), dtype=np.uint8)
    return torch.from_numpy(np.ascontiguousarray(out.transpose(2, 0, 1)))


def normalize_pixels(images: Tensor, mean: Sequence[float], std: Sequence[float]) -> Tensor:
    """``(..., 3, H, W)`` uint8 -> float32 ``(x / 255 - mean) / std`` on ``images``' device.

    The same operations, in the same order, as ``ToTensor`` then ``Normalize``.
    """
    m = torch.tensor(mean, dtype=torch.float32, device=images.device).view(-1, 1, 1)
    s = torch.tensor(std, dtype=torch.float32, device=images.device).view(-1, 1, 1)
    return images.to(torch.float32).div(255).sub(m).div(s)


class DecodedPixels:
    """Image number -> uint8 pixels, decoded on every call (no cache: ``data.clip.pixel_cache``
    false)."""

    def __init__(self, paths: Sequence[Path], pixels: PixelTransform) -> None:
        self.paths = list(paths)
        self.geometry = pixels.geometry

    def __len__(self) -> int:
        return len(self.paths)

    def __call__(self, i: int) -> Tensor:
        return uint8_pixels(load_rgb(self.paths[int(i)]), self.geometry)


class CachedPixels:
    """Image number -> uint8 pixels read from a cache file, mapped lazily in each process
    (a pickled instance carries the path, not the mapping)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._array: np.ndarray | None = None

    def _mapped(self) -> np.ndarray:
        if self._array is None:
            self._array = np.load(self.path, mmap_mode="r")
        return self._array

    def __len__(self) -> int:
        return int(self._mapped().shape[0])

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._mapped().shape)

    def __call__(self, i: int) -> Tensor:
        return torch.from_numpy(np.array(self._mapped()[int(i)]))

    def __getstate__(self) -> dict:
        return {"path": self.path, "_array": None}


def cache_key(paths: Sequence[Path], pixels: PixelTransform) -> str:
    """sha256 over every file's (path, size, mtime) and the geometry's parameters."""
    h = hashlib.sha256()
    h.update(json.dumps({"format": CACHE_FORMAT, "geometry": pixels.key}).encode())
    for p in paths:
        st = os.stat(p)
        h.update(f"\n{os.path.abspath(p)}\t{st.st_size}\t{st.st_mtime_ns}".encode())
    return h.hexdigest()


class _Decode(torch.utils.data.Dataset):
    def __init__(self, source: DecodedPixels) -> None:
        self.source = source

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, i: int) -> Tensor:
        return self.source(i)


def open_pixel_cache(
    paths: Sequence[Path],
    pixels: PixelTransform,
    cache_dir: str | Path,
    *,
    num_workers: int = 0,
) -> CachedPixels:
    """The cache of these images under this geometry, built first if it does not exist.

    Building decodes every image once in ``num_workers`` DataLoader workers and writes
    ``<cache_dir>/<key>.npy`` through a temporary file renamed at the end, so an interrupted
    build leaves no file that looks complete.

    Raises:
        DataNotFoundError, DataFormatError: an image is missing or cannot be decoded.
    """
    paths = [Path(p) for p in paths]
    folder = Path(cache_dir)
    target = folder / f"{cache_key(paths, pixels)[:32]}.npy"
    if target.exists():
        return CachedPixels(target)
    folder.mkdir(parents=True, exist_ok=True)
    decode = DecodedPixels(paths, pixels)
    first = decode(0) if paths else torch.zeros((3, 0, 0), dtype=torch.uint8)
    tmp = folder / f"{target.stem}.tmp-{os.getpid()}.npy"
    out = np.lib.format.open_memmap(
        tmp, mode="w+", dtype=np.uint8, shape=(len(paths), *first.shape)
    )
    loader = torch.utils.data.DataLoader(
        _Decode(decode), batch_size=_BUILD_BATCH, num_workers=num_workers
    )
    try:
        start = 0
        with torch.random.fork_rng(devices=[]):
            # Iterating a DataLoader draws its base seed from torch's global generator: a run
            # that builds the cache would draw other dropout masks afterwards than a run that
            # finds it built (SGRAF with a CLIP estimator); the build leaves it as it was.
            for batch in loader:
                if tuple(batch.shape[1:]) != tuple(first.shape):
                    raise ValueError(
                        f"the transform gives images of shape {tuple(batch.shape[1:])} and "
                        f"{tuple(first.shape)}; a cached split needs one input size"
                    )
                out[start : start + batch.shape[0]] = batch.numpy()
                start += batch.shape[0]
        out.flush()
        del out
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return CachedPixels(target)
