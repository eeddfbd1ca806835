"""SCAN vocabulary JSON (``word2idx``, ``idx2word``, ``idx``) and the SCAN vocabulary builder."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from ._io import atomic_open
from .errors import DataFormatError, DataNotFoundError, InvalidSettingError
from .tokenizer import tokenize_caption

__all__ = ["SPECIALS", "Vocabulary", "build_vocab", "load_vocab"]

PAD, START, END, UNK = 0, 1, 2, 3
SPECIALS = ("<pad>", "<start>", "<end>", "<unk>")  # ids 0..3, as SCAN/NCR/SGRAF


class Vocabulary:
    """Word <-> id map with the SCAN specials ``<pad>`` 0, ``<start>`` 1, ``<end>`` 2, ``<unk>`` 3.

    Attributes:
        word2idx: word -> id.
        idx2word: id -> word (list position is the id).
    """

    def __init__(self, idx2word: Sequence[str]) -> None:
        self.idx2word: list[str] = list(idx2word)
        self.word2idx: dict[str, int] = {w: i for i, w in enumerate(self.idx2word)}
        if len(self.word2idx) != len(self.idx2word):
            dup = [w for w, c in Counter(self.idx2word).items() if c > 1][:5]
            raise DataFormatError(f"vocabulary has duplicate words: {dup}")
        _check_specials(self.word2idx, "vocabulary")

    def __len__(self) -> int:
        return len(self.idx2word)

    def __contains__(self, word: str) -> bool:
        return word in self.word2idx

    def ids(self, tokens: Iterable[str]) -> list[int]:
        """Ids of ``tokens`` without ``<start>``/``<end>``; OOV -> ``<unk>``."""
        get = self.word2idx.get
        return [get(t, UNK) for t in tokens]

    def to_json(self) -> dict:
        """The SCAN JSON structure."""
        return {
            "word2idx": dict(self.word2idx),
            "idx2word": {str(i): w for i, w in enumerate(self.idx2word)},
            "idx": len(self.idx2word),
        }

    def save(self, path: str | Path) -> None:
        """Write the SCAN JSON atomically (temp file + rename)."""
        with atomic_open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_json(), f, ensure_ascii=False)


def _check_specials(word2idx: dict[str, int], where: str) -> None:
    wrong = [
        f"{w!r} is {word2idx.get(w, 'missing')}"
        for i, w in enumerate(SPECIALS)
        if word2idx.get(w) != i
    ]
    if wrong:
        raise DataFormatError(
            f"{where}: special tokens must be <pad>=0 <start>=1 <end>=2 <unk>=3, but "
            f"{'; '.join(wrong)}; rebuild it with tools/build_vocab.py (SCAN format)"
        )


def load_vocab(path: str | Path) -> Vocabulary:
    """Load a SCAN vocabulary JSON.

    Raises:
        DataNotFoundError: missing file.
        DataFormatError: not JSON, missing keys, missing/misplaced specials, or inconsistent maps.
    """
    path = Path(path)
    if not path.is_file():
        raise DataNotFoundError(
            f"vocabulary {path} not found; expected a SCAN JSON (word2idx, idx2word, idx), e.g. "
            "from tools/build_vocab.py or the SGRAF release's vocab/<name>_vocab.json"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DataFormatError(
            f"vocabulary {path} is not valid UTF-8 JSON ({err}); use the SCAN vocabulary JSON "
            "of the SGRAF release or rebuild it with tools/build_vocab.py"
        ) from err
    missing = [
        k for k in ("word2idx", "idx2word", "idx") if not isinstance(data, dict) or k not in data
    ]
    if missing:
        raise DataFormatError(
            f"vocabulary {path} lacks key(s) {missing}; expected the SCAN format "
            '{"word2idx": {word: id}, "idx2word": {"id": word}, "idx": size}'
        )
    try:
        word2idx = {str(w): int(i) for w, i in data["word2idx"].items()}
        size = int(data["idx"])
        idx2word_raw = {int(k): str(w) for k, w in data["idx2word"].items()}
    except (AttributeError, TypeError, ValueError) as err:
        raise DataFormatError(
            f"vocabulary {path} is not in the SCAN format ({type(err).__name__}: {err}); expected "
            '{"word2idx": {word: id}, "idx2word": {"id": word}, "idx": size}'
        ) from err
    _check_specials(word2idx, f"vocabulary {path}")
    if sorted(idx2word_raw) != list(range(size)) or len(word2idx) != size:
        raise DataFormatError(
            f"vocabulary {path}: idx={size} but word2idx has {len(word2idx)} words and idx2word "
            f"{len(idx2word_raw)} ids (expected ids 0..{size - 1} in both); rebuild it with "
            "tools/build_vocab.py"
        )
    idx2word = [idx2word_raw[i] for i in range(size)]
    bad = [w for w, i in word2idx.items() if idx2word[i] != w][:5]
    if bad:
        raise DataFormatError(
            f"vocabulary {path}: word2idx and idx2word disagree on {bad}; rebuild it with "
            "tools/build_vocab.py"
        )
    try:
        return Vocabulary(idx2word)
    except DataFormatError as err:
        raise DataFormatError(
            f"vocabulary {path}: {err}; rebuild it with tools/build_vocab.py"
        ) from err


def build_vocab(captions: Iterable[str], min_count: int = 4) -> Vocabulary:
    """Build a vocabulary as SCAN does: specials, then words with count >= ``min_count``.

    Words are tokenised with :func:`~precomputed.tokenizer.tokenize_caption` and kept in order
    of first occurrence (SCAN iterates a ``Counter``, which keeps insertion order).

    Args:
        captions: raw captions (the training split's).
        min_count: minimum number of occurrences (SCAN: 4).
    """
    if min_count < 1:
        raise InvalidSettingError(f"min_count must be >= 1, got {min_count}")
    counter: Counter[str] = Counter()
    for caption in captions:
        counter.update(tokenize_caption(caption))
    words = [w for w, c in counter.items() if c >= min_count and w not in SPECIALS]
    return Vocabulary([*SPECIALS, *words])
