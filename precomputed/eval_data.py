"""A precomputed split as ranking data: contiguous reads of its regions and tokens, and the
memory hygiene of a pass over a whole split (mapped pages and the C heap handed back).

:class:`PrecomputedEvalData` has the shape of ``ugncl.core.data.EvalData`` (name, split, sizes,
clean caption->image map, ``images(a, b)``, ``captions(a, b)``) without importing it.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import sys

import numpy as np
import torch
from torch import Tensor

from precomputed.collate import pad_captions
from precomputed.dataset import PrecomputedSplit

__all__ = ["PrecomputedEvalData", "release_pages", "trim_heap"]


class PrecomputedEvalData:
    """:class:`~ugncl.core.data.EvalData` over an opened precomputed split (contiguous
    reads)."""

    def __init__(self, split: PrecomputedSplit) -> None:
        self.source = split
        self.name = str(split.name)
        self.split = str(split.split)

    @property
    def num_images(self) -> int:
        return int(self.source.num_images)

    @property
    def num_captions(self) -> int:
        return int(self.source.num_captions)

    @property
    def caption_to_image(self) -> np.ndarray:
        return np.asarray(self.source.true_image, dtype=np.int64)

    @property
    def lengths(self) -> np.ndarray:
        return np.asarray(self.source.tokens.lengths, dtype=np.int64)

    def images(self, start: int, stop: int) -> Tensor:
        feats = self.source.features.slice(start, stop)
        out = torch.from_numpy(np.require(feats, np.float32, ["C", "W"]))  # a copy: mmap is r/o
        release_pages(feats)
        return out

    def captions(self, start: int, stop: int) -> tuple[Tensor, Tensor]:
        return pad_captions([np.asarray(self.source.tokens[k]) for k in range(start, stop)])


def release_pages(array: np.ndarray) -> None:
    """Drop the pages of a memory-mapped array from this process once they were copied.

    Evaluation reads a feature file once from front to back; without this every page read
    stays mapped and counts in the process's resident memory (1.5 GB for COCO 5K). The file
    stays in the page cache, a later read maps it again. No-op off Linux or for other arrays.
    """
    if not sys.platform.startswith("linux") or not array.size or not _is_mapped(array):
        return
    page = mmap.PAGESIZE
    begin = array.ctypes.data
    first = -(-begin // page) * page  # whole pages inside the array only
    last = (begin + array.nbytes) // page * page
    if last > first:
        _libc().madvise(ctypes.c_void_p(first), ctypes.c_size_t(last - first), _MADV_DONTNEED)


_MADV_DONTNEED = 4


def trim_heap() -> None:
    """Return the C heap's free memory to the OS (glibc ``malloc_trim(0)``).

    Freed tensors below glibc's mmap threshold (up to 32 MB) go back to the heap, not to
    the OS, and stay in the resident set; after a pass of many such temporaries (caption
    batches) this hands them back. Live memory and results are untouched. No-op off Linux
    or without glibc.
    """
    if not sys.platform.startswith("linux"):
        return
    trim = getattr(_libc(), "malloc_trim", None)
    if trim is not None:
        trim(0)


def _is_mapped(array: np.ndarray) -> bool:
    """True for a view of a memory map (``np.load(mmap_mode="r")`` and slices of it)."""
    base = array
    while base is not None:
        if isinstance(base, (np.memmap, mmap.mmap)):
            return True
        base = getattr(base, "base", None)
    return False


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)
