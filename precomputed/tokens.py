"""Captions tokenised once per split into one flat int32 array plus int64 offsets.

A list of Python lists costs ~100 bytes per token; CC3M-sized caption sets need the compact
form (4 bytes per token + 8 per caption).

Caption length is capped (``max_tokens``, ids counted with ``<start>`` and ``<end>``): SGR
scoring costs grow with the caption length L for every image it is scored against (one
14k-token web caption took over 300 s, a 1,500-token one 31 s and 2.4 GB). A longer caption
keeps its first ``max_tokens - 1`` ids and ends with ``<end>``. The default, 100, leaves the
released datasets untouched: their captions are far shorter (CC152K test: at most 35 words
with this tokenizer; Flickr30K and MS-COCO captions are single sentences well under 100).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

import numpy as np

from .errors import InvalidSettingError
from .tokenizer import tokenize_caption
from .vocab import END, START, Vocabulary

__all__ = ["DEFAULT_MAX_CAPTION_TOKENS", "TokenizedCaptions"]

DEFAULT_MAX_CAPTION_TOKENS = 100


class TokenizedCaptions:
    """Caption k is ``ids[offsets[k]:offsets[k + 1]]`` (``<start>`` ... ``<end>`` included).

    Attributes:
        ids: (T,) int32 all token ids, concatenated.
        offsets: (N + 1,) int64 start of each caption in ``ids``.
        lengths: (N,) int64 tokens per caption (with ``<start>``/``<end>``).
        num_truncated: captions cut to ``max_tokens`` by :meth:`from_texts` (0 otherwise).
    """

    num_truncated: int = 0

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
    def from_texts(
        cls,
        texts: Sequence[str],
        vocab: Vocabulary,
        *,
        max_tokens: int | None = DEFAULT_MAX_CAPTION_TOKENS,
    ) -> TokenizedCaptions:
        """Tokenise ``texts`` (``word_tokenize(text.lower())``) and map them to ids.

        Args:
            texts: N raw captions.
            vocab: the vocabulary.
            max_tokens: cap on ids per caption, ``<start>`` and ``<end>`` included (>= 3);
                longer captions keep their first ``max_tokens - 2`` words. None: no cap.

        Returns:
            The captions; ``num_truncated`` counts those that were cut.
        """
        if max_tokens is not None and max_tokens < 3:
            raise InvalidSettingError(
                f"max_caption_tokens must be >= 3 (<start>, one word, <end>) or null, got "
                f"{max_tokens}"
            )
        keep = None if max_tokens is None else max_tokens - 2
        ids = array("i")
        offsets = np.empty(len(texts) + 1, dtype=np.int64)
        offsets[0] = 0
        truncated = 0
        for k, text in enumerate(texts):
            words = vocab.ids(tokenize_caption(text))
            if keep is not None and len(words) > keep:
                words = words[:keep]
                truncated += 1
            ids.append(START)
            ids.extend(words)
            ids.append(END)
            offsets[k + 1] = len(ids)
        out = cls(
            np.frombuffer(ids, dtype=np.int32).copy() if len(ids) else np.empty(0, np.int32),
            offsets,
        )
        out.num_truncated = truncated
        return out
