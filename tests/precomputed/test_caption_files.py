"""Caption files: a UTF-8 byte-order mark is not part of the first caption; a NUL character
is refused with the file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from precomputed.captions import read_captions
from precomputed.errors import DataFormatError


@pytest.mark.parametrize("suffix", [".txt", ".tsv"])
def test_byte_order_mark_is_stripped(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"train_caps{suffix}"
    lines = ["a dog runs", "a cat sits"] if suffix == ".txt" else ["1\ta dog runs", "2\ta cat"]
    path.write_bytes(b"\xef\xbb\xbf" + "\n".join(lines).encode("utf-8"))
    captions = read_captions(path)
    assert captions[0] == "a dog runs"  # not '\ufeffa dog runs'


def test_nul_character_is_refused_with_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "train_caps.txt"
    path.write_bytes(b"a dog runs\na cat\x00 sits\n")
    with pytest.raises(DataFormatError, match=r"train_caps.txt:2 holds a NUL"):
        read_captions(path)
