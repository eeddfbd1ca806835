"""Captions tokenised once per split into one flat int32 array plus int64 offsets.

A list of Python lists costs ~100 bytes per token; CC3M-sized caption sets need the compact
form (4 bytes per token + 8 per caption).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

import numpy as np

from .tokenizer import tokenize_caption
from .vocab import END, START, Vocabulary

__all__ = ["TokenizedCaptions"]


class TokenizedCaptions:
    """Caption k is ``ids[offsets[k]:offsets[k + 1]]`` (``<start>`` ... ``<end>`` included).

    Attributes:
        ids: (T,) int32 all token ids, concatenated.
        offsets: (N + 1,) int64 start of each caption in ``ids``.
        lengths: (N,) int64 tokens per caption (with ``<start>``/``<end>``).
    """

    def __init__(self, ids: np.ndarray, offsets: np.ndarray) -> None:
        ids = np.ascontiguousarray(ids, dtype=np.int32)
        offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        if offsets.ndim != 1 or len(offsets) < 1 or offsets[0] != 0 or offsets[-1] != len(ids):
            raise ValueError("offsets must start at 0 and end at len(ids)")
        if np.any(np.diff(offsets) < 0):
            raise ValueError("offsets must be non-decreasing")
        self.ids = ids
        self.offsets = offsets
        self.lengths = np.diff(offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, k: int) -> np.ndarray:
        """Ids of caption ``k``, (L,) int32 (a view, do not modify)."""
        n = len(self)
        if not -n <= k < n:
            raise IndexError(f"caption index {k} out of range for {n} captions")
        k %= n
        return self.ids[self.offsets[k] : self.offsets[k + 1]]

    @classmethod
    def from_texts(cls, texts: Sequence[str], vocab: Vocabulary) -> TokenizedCaptions:
        """Tokenise ``texts`` (``word_tokenize(text.lower())``) and map them to ids."""
        ids = array("i")
        offsets = np.empty(len(texts) + 1, dtype=np.int64)
        offsets[0] = 0
        for k, text in enumerate(texts):
            ids.append(START)
            ids.extend(vocab.ids(tokenize_caption(text)))
            ids.append(END)
            offsets[k + 1] = len(ids)
        return cls(
            np.frombuffer(ids, dtype=np.int32).copy() if len(ids) else np.empty(0, np.int32),
            offsets,
        )
