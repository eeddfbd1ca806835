"""NPC/SDD/OSA noisy-caption text files <-> this package's NCR caption -> image index.

The references store noise as ``{r}_noise_train_caps.txt``: the train captions with the
*strings* of ``int(r * N)`` positions permuted among those positions (docs/data_formats.md). Line
``k`` is trained with image ``k // captions_per_image``. If line ``k`` holds the text of clean
caption ``j``, the pair is (caption ``j``, image ``k // cpi``), which is ``index[j] = k // cpi``
in the NCR format (a 1-D int64 array over the clean caption order, ``precomputed.noise``).

Identical caption strings (COCO has many: "A man riding a wave on top of a surfboard.") make the
text ambiguous: a line could stand for any clean position holding that string. Every choice
gives the same (text, image) training pairs; only the clean flags differ. The conversion is
deterministic and takes the reading that keeps the most pairs clean: per string, a noisy line
first matches a clean position of the *same image* (lowest first), then the remaining lines
and positions are matched in ascending order. So ``text -> index`` never invents noise, and
``index -> text -> index`` is exact whenever the captions are distinct (tested).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .captions import read_captions_txt
from .errors import DataFormatError

__all__ = [
    "caption_index_to_noisy_text",
    "noise_text_names",
    "noisy_text_to_caption_index",
    "read_noisy_caption_index",
]


def noise_text_names(ratio: float) -> list[str]:
    """File names the references use for ratio ``r``: ``{r}_noise_train_caps.txt``.

    NPC writes ``str(noise_ratio)``, which is ``0`` for the int default and ``0.0`` from the
    command line (NPC's params.py), so both spellings are listed (``0.2`` has one).
    """
    spellings = [str(ratio), str(float(ratio))]
    if float(ratio).is_integer():
        spellings.append(str(int(ratio)))
    unique = list(dict.fromkeys(spellings))
    return [f"{s}_noise_train_caps.txt" for s in unique]


def _check_cpi(num_captions: int, captions_per_image: int, where: str) -> int:
    if captions_per_image < 1:
        raise ValueError(f"captions_per_image must be >= 1, got {captions_per_image}")
    if num_captions == 0:
        raise DataFormatError(f"{where}: no captions (the clean captions file is empty)")
    if num_captions % captions_per_image:
        raise DataFormatError(
            f"{where}: {num_captions} captions are not a multiple of captions_per_image="
            f"{captions_per_image}"
        )
    return num_captions // captions_per_image


def noisy_text_to_caption_index(
    clean: Sequence[str], noisy: Sequence[str], captions_per_image: int, *, where: str = "noisy"
) -> np.ndarray:
    """Convert noisy caption lines into the NCR caption -> image index.

    Args:
        clean: (N,) clean captions in SCAN order (``train_caps.txt``, stripped).
        noisy: (N,) the noisy file's lines (stripped), line k trained with image
            ``k // captions_per_image``.
        captions_per_image: captions per image.
        where: the noisy file's name, for messages.

    Returns:
        (N,) int64 index: clean caption j is paired with image ``index[j]``.

    Raises:
        DataFormatError: wrong length, a line that is no clean caption, or a string that
            occurs a different number of times than among the clean captions.
    """
    n = len(clean)
    _check_cpi(n, captions_per_image, where)
    if len(noisy) != n:
        hint = ""
        if n and len(noisy) % n == 0:
            hint = (
                f" ({len(noisy) // n} copies: NPC appends to this file on every run, so a "
                "re-run or crash duplicates it; keep the first copy only if it is complete)"
            )
        raise DataFormatError(
            f"{where} has {len(noisy)} lines; expected one per clean caption ({n}){hint}"
        )
    clean_at: dict[str, list[int]] = defaultdict(list)
    for j, text in enumerate(clean):
        clean_at[text].append(j)
    noisy_at: dict[str, list[int]] = defaultdict(list)
    for k, text in enumerate(noisy):
        if text not in clean_at:
            raise DataFormatError(
                f"{where}:{k + 1} is not one of the clean captions: {text!r}; the file must be "
                "a permutation of the clean train_caps.txt of the same split"
            )
        noisy_at[text].append(k)
    index = np.empty(n, dtype=np.int64)
    cpi = captions_per_image
    for text, lines in noisy_at.items():
        positions = clean_at[text]
        if len(positions) != len(lines):
            raise DataFormatError(
                f"{where}: caption {text!r} occurs {len(lines)} times (first at line "
                f"{lines[0] + 1}) but {len(positions)} times among the clean captions; the file "
                "must be a permutation of the clean captions"
            )
        if len(lines) == 1:
            index[positions[0]] = lines[0] // cpi
            continue
        free_lines = list(lines)
        rest = []
        for j in positions:  # same-image matches first: the most clean pairs
            k = next((k for k in free_lines if k // cpi == j // cpi), None)
            if k is None:
                rest.append(j)
            else:
                free_lines.remove(k)
                index[j] = k // cpi
        for j, k in zip(rest, free_lines):
            index[j] = k // cpi
    # Equal lengths plus equal counts of every noisy string imply the same multiset, so every
    # clean position was assigned.
    return index


def caption_index_to_noisy_text(
    clean: Sequence[str], index: np.ndarray, captions_per_image: int
) -> list[str]:
    """The NPC/SDD/OSA noisy-caption lines of an NCR caption -> image index.

    Line ``k`` is a caption paired with image ``k // cpi``; a caption paired with its own
    image keeps its own line, the others fill the image's remaining lines in caption order.

    Args:
        clean: (N,) clean captions in SCAN order.
        index: (N,) caption -> image map.
        captions_per_image: captions per image.

    Returns:
        N lines (write them one per line as ``{r}_noise_train_caps.txt``).

    Raises:
        DataFormatError: wrong length or range, or an image with other than
            ``captions_per_image`` captions (the text format cannot express it; NCR caption
            noise permutes image indices, so it always can).
    """
    n = len(clean)
    n_img = _check_cpi(n, captions_per_image, "clean captions")
    index = np.asarray(index)
    if index.shape != (n,) or not np.issubdtype(index.dtype, np.integer):
        raise DataFormatError(
            f"index must be a 1-D integer array of length {n}, got shape {index.shape} "
            f"dtype {index.dtype}"
        )
    if n and (index.min() < 0 or index.max() >= n_img):
        raise DataFormatError(
            f"index values lie in [{index.min()}, {index.max()}]; expected [0, {n_img})"
        )
    counts = np.bincount(index, minlength=n_img)
    bad = np.flatnonzero(counts != captions_per_image)
    if len(bad):
        raise DataFormatError(
            f"image {bad[0]} has {counts[bad[0]]} captions in the index; the noisy-caption text "
            f"format needs exactly {captions_per_image} per image (an image-level or "
            "resampled noise cannot be written as a caption permutation)"
        )
    cpi = captions_per_image
    lines: list[str | None] = [None] * n
    by_image = np.argsort(index, kind="stable").reshape(n_img, cpi)
    for i, members in enumerate(by_image):
        own = [j for j in members if j // cpi == i]
        for j in own:
            lines[j] = clean[j]
        free = (k for k in range(i * cpi, (i + 1) * cpi) if lines[k] is None)
        for j, k in zip((j for j in members if j // cpi != i), free):
            lines[k] = clean[j]
    return lines


def read_noisy_caption_index(
    clean_path: str | Path, noisy_path: str | Path, captions_per_image: int
) -> np.ndarray:
    """Read ``train_caps.txt`` and a ``{r}_noise_train_caps.txt`` and convert (see above).

    Raises:
        DataFormatError: the noisy file is not text (e.g. a ``.npy`` noise index of another
            convention, which :func:`precomputed.noise.read_noise_file` reads).
    """
    head = b""
    if Path(noisy_path).is_file():  # a missing file is read_captions_txt's error below
        with open(noisy_path, "rb") as f:
            head = f.read(4096)
    if head.startswith(b"\x93NUMPY"):
        raise DataFormatError(
            f"{noisy_path} is a .npy noise index (NCR, L2RM, DECL/RCL/UGNCL convention), not "
            "NPC/SDD/OSA's caption text; convert it with tools/make_noise.py --from-file"
        )
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as err:
        if err.start < len(head) - 3:  # not a multi-byte character cut by the 4096-byte read
            raise DataFormatError(
                f"cannot tell the noise convention of {noisy_path}: neither UTF-8 caption text "
                "(NPC/SDD/OSA) nor a .npy array; see docs/data_formats.md"
            ) from None
    clean = read_captions_txt(clean_path)
    noisy = read_captions_txt(noisy_path)
    return noisy_text_to_caption_index(clean, noisy, captions_per_image, where=str(noisy_path))
