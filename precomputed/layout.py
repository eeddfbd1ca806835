"""Locate a split in the SCAN/NCR ``<root>/<name>_precomp/`` layout (docs/data_formats.md).

Files of one split (``split`` in train/dev/test/testall):

- features: ``{split}_ims.npy`` (N, R, D) float32, or ``{split}_ims.h5`` (dataset ``features``);
- captions: ``{split}_caps.txt`` (one caption per line, ``captions_per_image`` per image, in
  image order) or ``{split}_caps.tsv`` (image id TAB caption, CC152K).

Any folder in this layout works; :mod:`precomputed.catalog` names the known ones and their facts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .errors import DataFormatError, DataNotFoundError, InvalidSettingError

__all__ = ["SPLITS", "SplitPaths", "locate_split"]

SPLITS = ("train", "dev", "test", "testall")
FEATURE_SUFFIXES = ("_ims.npy", "_ims.h5")
CAPTION_SUFFIXES = ("_caps.txt", "_caps.tsv")
HINT = (
    "run `python tools/make_synthetic.py` for the synthetic default, or point data.root at the "
    "folder that holds the SCAN/NCR release (<root>/<name>_precomp/{split}_ims.npy + "
    "{split}_caps.txt|tsv)"
)


@dataclass(frozen=True)
class SplitPaths:
    """Resolved files of one split."""

    root: Path
    name: str
    split: str
    features: Path
    captions: Path


def _candidate_folders(root: Path, name: str) -> list[Path]:
    folders = [root / name]
    if not name.endswith("_precomp"):
        folders.append(root / f"{name}_precomp")
    if root.name == name:  # root already is the dataset folder
        folders.append(root)
    return folders


def _pick(folder: Path, split: str, suffixes: tuple[str, ...], what: str) -> Path | None:
    found = [folder / f"{split}{s}" for s in suffixes if (folder / f"{split}{s}").is_file()]
    if len(found) > 1:
        raise DataFormatError(
            f"ambiguous {what} for split {split!r}: both {found[0]} and {found[1]} exist; "
            "remove or rename one so the split has a single source"
        )
    return found[0] if found else None


def locate_split(root: str | Path, name: str, split: str) -> SplitPaths:
    """Find the feature and caption files of ``split`` of dataset ``name`` under ``root``.

    Args:
        root: the data root holding ``<name>`` folders (``data.root`` in configs).
        name: dataset folder name, e.g. ``f30k_precomp`` (``f30k`` also finds ``f30k_precomp``).
        split: one of ``train``, ``dev``, ``test``, ``testall``.

    Returns:
        The resolved paths.

    Raises:
        InvalidSettingError (a ValueError): unknown split name.
        DataNotFoundError: the folder or one of the files is missing; lists every path tried.
        DataFormatError: both ``.npy`` and ``.h5`` (or ``.txt`` and ``.tsv``) exist.
    """
    if split not in SPLITS:
        raise InvalidSettingError(f"unknown split {split!r}: expected one of {', '.join(SPLITS)}")
    root = Path(root).expanduser()
    folders = _candidate_folders(root, name)
    tried: list[Path] = []
    for folder in folders:
        if not folder.is_dir():
            tried.append(folder)
            continue
        features = _pick(folder, split, FEATURE_SUFFIXES, "feature files")
        captions = _pick(folder, split, CAPTION_SUFFIXES, "caption files")
        if features is not None and captions is not None:
            return SplitPaths(root, name, split, features, captions)
        missing = []
        if features is None:
            missing += [folder / f"{split}{s}" for s in FEATURE_SUFFIXES]
            what = (
                f"features ({split}_ims.npy: (N, R, D) float32, "
                f"or {split}_ims.h5 with dataset 'features')"
            )
        if captions is None:
            missing += [folder / f"{split}{s}" for s in CAPTION_SUFFIXES]
            what = (
                f"captions ({split}_caps.txt: one caption per line, "
                f"or {split}_caps.tsv: image id TAB caption)"
                if features is not None
                else what + f" and captions ({split}_caps.txt or {split}_caps.tsv)"
            )
        raise DataNotFoundError(
            f"split {split!r} of dataset {name!r} is incomplete in {folder}: missing {what}; "
            f"tried: {', '.join(str(p) for p in missing)}. Hint: {HINT}"
        )
    raise DataNotFoundError(
        f"dataset folder for {name!r} not found; tried: {', '.join(str(p) for p in tried)} "
        f"(expected a folder holding {split}_ims.npy|h5 and {split}_caps.txt|tsv). Hint: {HINT}"
    )
