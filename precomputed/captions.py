"""Caption files (``.txt``: one per line; ``.tsv``: image id TAB caption) and count checks."""

from __future__ import annotations

from pathlib import Path

from .errors import DataFormatError, DataNotFoundError, InvalidSettingError

__all__ = ["check_caption_count", "read_captions", "read_captions_tsv", "read_captions_txt"]


def _lines(path: Path) -> list[str]:
    if not path.is_file():
        raise DataNotFoundError(
            f"caption file {path} not found; expected {path.name} with one caption per line "
            "(.txt) or image id TAB caption (.tsv)"
        )
    try:
        # utf-8-sig: a byte-order mark (Windows editors write one) is not part of the first
        # caption's first word.
        with open(path, encoding="utf-8-sig", newline=None) as f:
            lines = f.read().splitlines()
    except UnicodeDecodeError as err:
        line = path.read_bytes()[: err.start].count(b"\n") + 1
        raise DataFormatError(
            f"caption file {path} is not UTF-8 text (line {line}, byte {err.start}: {err.reason}); "
            "re-encode it as UTF-8, e.g. iconv -f latin1 -t utf-8"
        ) from err
    for i, line in enumerate(lines, start=1):
        if "\0" in line:  # a binary file or a botched concatenation; no tokenizer wants it
            raise DataFormatError(
                f"caption file {path}:{i} holds a NUL character (\\0); captions are plain "
                "text: remove the NUL bytes (e.g. tr -d '\\000') or fix the file's source"
            )
    return lines


def _check_nonempty(path: Path, lineno: int, caption: str) -> None:
    if not caption.strip():
        raise DataFormatError(
            f"empty caption at {path}:{lineno}; every line must hold one caption (remove the "
            "line together with its image, or fill in the caption)"
        )


def read_captions_txt(path: str | Path) -> list[str]:
    """Captions of a SCAN ``{split}_caps.txt`` file, one per line, in order.

    Raises:
        DataNotFoundError: missing file.
        DataFormatError: an empty caption (the message gives the 1-based line number).
    """
    path = Path(path)
    lines = _lines(path)
    for i, line in enumerate(lines, start=1):
        _check_nonempty(path, i, line)
    return [line.strip() for line in lines]


def read_captions_tsv(path: str | Path) -> tuple[list[str], list[str]]:
    """Image ids and captions of a CC152K-style ``{split}_caps.tsv`` (id TAB caption [TAB ...]).

    Returns:
        ``(image_ids, captions)``.

    Raises:
        DataNotFoundError: missing file.
        DataFormatError: a line without a tab, or an empty caption (with line number).
    """
    path = Path(path)
    ids: list[str] = []
    captions: list[str] = []
    for i, line in enumerate(_lines(path), start=1):
        parts = line.split("\t")
        if len(parts) < 2:
            raise DataFormatError(
                f"{path}:{i} has no tab; a .tsv caption line is 'image id<TAB>caption'"
            )
        _check_nonempty(path, i, parts[1])
        ids.append(parts[0])
        captions.append(parts[1].strip())
    return ids, captions


def read_captions(path: str | Path) -> list[str]:
    """Captions of a ``.txt`` or ``.tsv`` caption file (ids of a ``.tsv`` are dropped)."""
    path = Path(path)
    if path.suffix == ".tsv":
        return read_captions_tsv(path)[1]
    return read_captions_txt(path)


def check_caption_count(
    num_captions: int, num_images: int, captions_per_image: int, *, where: str = ""
) -> None:
    """Check ``num_captions == captions_per_image * num_images``.

    Raises:
        InvalidSettingError (a ValueError): bad ``captions_per_image``.
        DataFormatError: the counts do not match; says both counts and what would match.
    """
    if captions_per_image < 1:
        raise InvalidSettingError(f"captions_per_image must be >= 1, got {captions_per_image}")
    if num_captions == captions_per_image * num_images:
        return
    hints = []
    if num_images and num_captions % num_images == 0:
        hints.append(f"captions_per_image={num_captions // num_images} would match")
    else:
        hints.append(
            f"no captions_per_image matches ({num_captions} is not a multiple of {num_images})"
        )
    raise DataFormatError(
        f"{where + ': ' if where else ''}{num_captions} captions for {num_images} images do not "
        f"match captions_per_image={captions_per_image} (expected "
        f"{captions_per_image * num_images} captions); {hints[0]}"
    )
