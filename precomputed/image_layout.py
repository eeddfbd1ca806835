"""Raw-image splits in the CLIP-family layouts (NPC/SDD and OSA; docs/data_formats.md).

A dataset root holds the images and the annotations::

    <root>/images/<file>                              every image of every split
    <root>/annotations/scan_split/{split}_caps.txt    NPC/SDD: one caption per line, SCAN order
    <root>/annotations/scan_split/{split}_ids.txt     one image id per image (or per caption)
    <root>/annotations/scan_split/image_name.txt      Flickr30K only: line k = file of id k
    <root>/annotations/{split}_caps.txt ...           OSA: the same files one folder up

Image ids become file names by the dataset's naming scheme (``naming``):

- ``f30k``: ``image_name.txt`` line ``id`` (0-based; the synthetic world's images use it too);
- ``coco``: ``COCO_2014_<id zero-padded to 12 digits>.jpg`` (NPC's ``MSCOCO_rename.py``);
- ``cc``: ``<id>.jpg`` (CC120K; ids are strings).

Caption ``k`` belongs to image ``k // captions_per_image`` (SCAN order), exactly like the
precomputed track, so one NCR noise index (``precomputed.noise``) drives both tracks. An id
file may list each image once or once per caption (the NPC release does the latter for
dev/test); any other count, a block of caption lines whose ids differ, or an image listed twice
is an error: the alignment is never guessed.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .captions import check_caption_count, read_captions_txt
from .catalog import IMAGE_NAMINGS, dataset_entry
from .errors import DataFormatError, DataNotFoundError
from .layout import SPLITS
from .noise import clean_image_index

__all__ = [
    "ANNOTATION_LAYOUTS",
    "IMAGE_NAMINGS",
    "ImageSplit",
    "ImageSplitPaths",
    "PackedStrings",
    "image_names_for_ids",
    "locate_image_split",
    "open_image_split",
    "read_image_ids",
]

# Folder of the annotation files under <root>: NPC/SDD and OSA.
ANNOTATION_LAYOUTS = {"scan_split": Path("annotations/scan_split"), "osa": Path("annotations")}
_NAMING_HINT = {
    "f30k": "Flickr30K images under their original names, listed in image_name.txt",
    "coco": "COCO images renamed to COCO_2014_<12-digit id>.jpg (NPC's dataset/MSCOCO_rename.py)",
    "cc": "CC120K images named <id>.jpg",
}
_MISSING_SHOWN = 5


class PackedStrings(Sequence):
    """Strings stored as one UTF-8 buffer plus offsets: no per-item Python objects.

    A list of 150K Python strings is copied page by page into every forked DataLoader worker
    as reference counts change; two arrays are not (the references' "memory leak").
    """

    def __init__(self, items: Sequence[str]) -> None:
        encoded = [s.encode("utf-8") for s in items]
        self.offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in encoded], out=self.offsets[1:])
        self.data = np.frombuffer(b"".join(encoded), dtype=np.uint8).copy()

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, k: int | slice) -> str | list[str]:
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(len(self)))]
        k = int(k)
        if k < 0:
            k += len(self)
        if not 0 <= k < len(self):
            raise IndexError(f"index {k} out of range for {len(self)} strings")
        return self.data[self.offsets[k] : self.offsets[k + 1]].tobytes().decode("utf-8")


@dataclass(frozen=True)
class ImageSplitPaths:
    """Resolved files of one split.

    Attributes:
        root: dataset root.
        split: split name.
        layout: ``scan_split`` (NPC/SDD) or ``osa``.
        annotation_dir: folder of the annotation files.
        captions: ``{split}_caps.txt``.
        ids: ``{split}_ids.txt``.
        image_names: ``image_name.txt`` (``f30k`` naming only, else None).
        image_dir: ``<root>/images``.
    """

    root: Path
    split: str
    layout: str
    annotation_dir: Path
    captions: Path
    ids: Path
    image_names: Path | None
    image_dir: Path


def _layout_hint(root: Path) -> str:
    return (
        f"expected {root}/images/ and {root}/annotations/scan_split/{{split}}_caps.txt + "
        "{split}_ids.txt (NPC/SDD; Flickr30K also image_name.txt) or the same files directly in "
        f"{root}/annotations/ (OSA); for the synthetic world run `python "
        "tools/render_synthetic.py`"
    )


def locate_image_split(
    root: str | Path, split: str, *, naming: str, layout: str = "auto"
) -> ImageSplitPaths:
    """Find the annotation files and image folder of ``split`` under ``root``.

    Args:
        root: dataset root (NPC's ``dataset_root``).
        split: ``train``, ``dev``, ``test`` or ``testall``.
        naming: image naming scheme, one of :data:`IMAGE_NAMINGS`.
        layout: ``scan_split``, ``osa`` or ``auto`` (whichever holds ``{split}_caps.txt``).

    Raises:
        ValueError: unknown split, naming or layout.
        DataNotFoundError: a folder or file is missing; every path tried is named.
        DataFormatError: ``auto`` finds the split in both layouts.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}: expected one of {', '.join(SPLITS)}")
    if naming not in IMAGE_NAMINGS:
        raise ValueError(f"unknown image naming {naming!r}: expected {', '.join(IMAGE_NAMINGS)}")
    if layout != "auto" and layout not in ANNOTATION_LAYOUTS:
        raise ValueError(
            f"unknown layout {layout!r}: expected auto, {', '.join(ANNOTATION_LAYOUTS)}"
        )
    root = Path(root).expanduser()
    if not root.is_dir():
        raise DataNotFoundError(f"dataset root {root} not found; {_layout_hint(root)}")
    names = [layout] if layout != "auto" else list(ANNOTATION_LAYOUTS)
    found = [n for n in names if (root / ANNOTATION_LAYOUTS[n] / f"{split}_caps.txt").is_file()]
    if not found:
        tried = ", ".join(str(root / ANNOTATION_LAYOUTS[n] / f"{split}_caps.txt") for n in names)
        raise DataNotFoundError(
            f"captions of split {split!r} not found; tried: {tried}. {_layout_hint(root)}"
        )
    if len(found) > 1:
        a, b = (root / ANNOTATION_LAYOUTS[n] / f"{split}_caps.txt" for n in found)
        raise DataFormatError(
            f"split {split!r} exists in both layouts: {a} and {b}; set the layout explicitly "
            "(scan_split or osa) or remove one copy"
        )
    ann = root / ANNOTATION_LAYOUTS[found[0]]
    missing = [ann / f"{split}_ids.txt"]
    if naming == "f30k":
        missing.append(ann / "image_name.txt")
    image_dir = root / "images"
    missing = [p for p in missing if not p.is_file()]
    if not image_dir.is_dir():
        missing.append(image_dir)
    if missing:
        raise DataNotFoundError(
            f"split {split!r} under {root} is incomplete: missing "
            f"{', '.join(str(p) for p in missing)}. {_layout_hint(root)}"
        )
    return ImageSplitPaths(
        root=root,
        split=split,
        layout=found[0],
        annotation_dir=ann,
        captions=ann / f"{split}_caps.txt",
        ids=ann / f"{split}_ids.txt",
        image_names=ann / "image_name.txt" if naming == "f30k" else None,
        image_dir=image_dir,
    )


def _read_lines(path: Path, what: str) -> list[str]:
    with open(path, encoding="utf-8", newline=None) as f:
        lines = [line.strip() for line in f.read().splitlines()]
    for i, line in enumerate(lines, start=1):
        if not line:
            raise DataFormatError(f"empty line at {path}:{i}; every line must hold one {what}")
    return lines


def read_image_ids(
    path: str | Path, num_captions: int, captions_per_image: int, *, where: str = ""
) -> list[str]:
    """Image ids of a split, one per image, from ids listed per image or per caption.

    Args:
        path: ``{split}_ids.txt``.
        num_captions: captions of the split (lines of ``{split}_caps.txt``).
        captions_per_image: captions per image.
        where: the caption file, for messages.

    Returns:
        ``num_captions // captions_per_image`` ids (as stripped strings), in SCAN order.

    Raises:
        DataFormatError: counts that fit neither convention, a caption block with differing
            ids, or an image listed twice.
    """
    if captions_per_image < 1:
        raise ValueError(f"captions_per_image must be >= 1, got {captions_per_image}")
    path = Path(path)
    ids = _read_lines(path, "image id")
    n_img = num_captions // captions_per_image
    check_caption_count(num_captions, n_img, captions_per_image, where=where or str(path))
    if len(ids) == n_img:
        per_image = ids
    elif len(ids) == num_captions:
        per_image = ids[::captions_per_image]
        for k, value in enumerate(ids):
            if value != per_image[k // captions_per_image]:
                first = k - k % captions_per_image
                raise DataFormatError(
                    f"{path}:{k + 1} has id {value!r} but line {first + 1} has "
                    f"{per_image[k // captions_per_image]!r}: with one id per caption, the "
                    f"{captions_per_image} lines of an image must repeat its id (captions "
                    f"{first}..{first + captions_per_image - 1} belong to one image)"
                )
    else:
        raise DataFormatError(
            f"{path} has {len(ids)} ids but {where or 'the caption file'} has {num_captions} "
            f"captions = {n_img} images x {captions_per_image}: expected {n_img} ids (one per "
            f"image) or {num_captions} (one per caption); check captions_per_image and that "
            "both files belong to the same split"
        )
    seen: dict[str, int] = {}
    for i, value in enumerate(per_image):
        if value in seen:
            raise DataFormatError(
                f"{path}: image id {value!r} is listed for image {seen[value]} and image {i} of "
                "the split; each image must appear once (a duplicate would make two "
                "'different' images in evaluation)"
            )
        seen[value] = i
    return per_image


def image_names_for_ids(
    ids: Sequence[str], naming: str, *, ids_path: Path, image_names: Path | None = None
) -> list[str]:
    """File names (relative to ``images/``) of image ids under a naming scheme.

    Raises:
        DataFormatError: a non-integer id for ``f30k``/``coco``, or an ``f30k`` id beyond
            ``image_name.txt``.
    """
    if naming == "cc":
        return [f"{i}.jpg" for i in ids]
    numeric = []
    for k, value in enumerate(ids):
        try:
            numeric.append(int(value))
        except ValueError:
            raise DataFormatError(
                f"{ids_path}: image id {value!r} (image {k}) is not an integer; {naming} ids "
                "are integers (string ids are the cc naming)"
            ) from None
    if naming == "coco":
        return [f"COCO_2014_{i:012d}.jpg" for i in numeric]
    table = _read_lines(image_names, "image file name")
    bad = [i for i in numeric if not 0 <= i < len(table)]
    if bad:
        raise DataFormatError(
            f"{ids_path}: image id {bad[0]} is outside {image_names} ({len(table)} lines; id k "
            "is the 0-based line k); use the image_name.txt that belongs to these ids"
        )
    return [table[i] for i in numeric]


@dataclass
class ImageSplit:
    """One opened raw-image split; the same split definition as ``PrecomputedSplit``.

    Attributes:
        root: dataset root.
        split: split name.
        naming: image naming scheme.
        image_dir: folder the file names are relative to.
        image_files: (N_img,) file names in SCAN order.
        captions: (N_cap,) caption strings in SCAN order.
        captions_per_image: captions per image.
        true_image: (N_cap,) int64 clean caption -> image map (``k // cpi``).
        image_index: (N_cap,) int64 caption -> image used for training (noisy or clean).
    """

    root: Path
    split: str
    naming: str
    image_dir: Path
    image_files: PackedStrings
    captions: PackedStrings
    captions_per_image: int
    true_image: np.ndarray
    image_index: np.ndarray

    def __post_init__(self) -> None:
        self._clean = self.image_index == self.true_image

    @property
    def clean(self) -> np.ndarray:
        """(N_cap,) bool: caption k is paired with its own image."""
        return self._clean

    @property
    def num_images(self) -> int:
        return len(self.image_files)

    @property
    def num_captions(self) -> int:
        return len(self.captions)

    def image_path(self, i: int) -> Path:
        """Path of image ``i`` (SCAN order)."""
        return self.image_dir / self.image_files[i]


def _check_names(image_dir: Path, files: Sequence[str]) -> None:
    """Refuse image names that leave the image folder (``../../etc/passwd``, ``/abs/path``)."""
    for name in files:
        parts = Path(name).parts
        if Path(name).is_absolute() or ".." in parts or not parts:
            raise DataFormatError(
                f"image name {name!r} (listed for {image_dir}) is not a file name inside the "
                "image folder; image lists hold plain names such as 1000092795.jpg"
            )


def _check_files(image_dir: Path, files: Sequence[str], naming: str) -> None:
    missing = [f for f in files if not os.path.isfile(os.path.join(image_dir, f))]
    if missing:
        shown = ", ".join(str(image_dir / f) for f in missing[:_MISSING_SHOWN])
        more = f" and {len(missing) - _MISSING_SHOWN} more" if len(missing) > _MISSING_SHOWN else ""
        hint = f"Put the {_NAMING_HINT[naming]} into {image_dir}"
        entry = dataset_entry(image_dir.parent.name)
        if entry is not None and entry.family == "synthetic":
            hint = (
                f"Render the synthetic world's images into {image_dir} with `python "
                f"tools/render_synthetic.py --root {image_dir.parent.parent}`"
            )
        raise DataNotFoundError(
            f"{len(missing)} of {len(files)} images are missing: {shown}{more}. {hint}"
        )
    # Each header once (no pixel decoding): a file that is no image, or one whose pixel count
    # Pillow refuses (a decompression bomb), is named now rather than by a loader worker.
    from PIL import Image

    bad = []
    for f in files:
        path = os.path.join(image_dir, f)
        try:
            with Image.open(path) as img:
                image_format = img.format
            if not _has_end_marker(path, image_format):
                bad.append(f"{image_dir / f} (truncated: no {image_format} end marker)")
        except (OSError, Image.DecompressionBombError) as err:
            bad.append(f"{image_dir / f} ({str(err).splitlines()[0] if str(err) else err})")
        if len(bad) >= _MISSING_SHOWN:
            break
    if bad:
        raise DataFormatError(
            f"image file(s) cannot be read as images: {'; '.join(bad)}. Replace them with valid "
            f"images ({_NAMING_HINT[naming]})"
        )


# The marker a complete file of the format ends with (JPEG EOI, PNG IEND chunk), looked for in
# its last bytes: a file cut off by a failed copy lacks it, and only decoding its pixels (in a
# loader worker, after the run folder exists) would notice otherwise.
_END_MARKERS = {"JPEG": b"\xff\xd9", "PNG": b"IEND"}
_TAIL_BYTES = 1024  # some writers pad after the marker


def _has_end_marker(path: str, image_format: str | None) -> bool:
    marker = _END_MARKERS.get(image_format or "")
    if marker is None:
        return True
    with open(path, "rb") as handle:
        handle.seek(max(0, os.path.getsize(path) - _TAIL_BYTES))
        return marker in handle.read()


def _check_noise(noise_index: np.ndarray, n_cap: int, n_img: int) -> np.ndarray:
    index = np.asarray(noise_index)
    if index.ndim != 1 or not np.issubdtype(index.dtype, np.integer):
        raise DataFormatError(
            f"noise_index must be 1-D integer, got shape {index.shape} dtype {index.dtype}"
        )
    if len(index) != n_cap:
        raise DataFormatError(f"noise_index has length {len(index)}; expected {n_cap} captions")
    if len(index) and (index.min() < 0 or index.max() >= n_img):
        raise DataFormatError(
            f"noise_index values lie in [{index.min()}, {index.max()}]; expected [0, {n_img})"
        )
    return index.astype(np.int64)


def open_image_split(
    root: str | Path,
    split: str,
    *,
    naming: str,
    captions_per_image: int,
    layout: str = "auto",
    max_images: int | None = None,
    noise_index: np.ndarray | None = None,
    check_files: bool = True,
) -> ImageSplit:
    """Open ``split`` of a CLIP-layout dataset with explicit captions-per-image.

    Args:
        root: dataset root (holds ``images/`` and ``annotations/``).
        split: split name.
        naming: ``f30k``, ``coco`` or ``cc`` (see the module docstring).
        captions_per_image: checked against the files (5 for F30K/COCO, 1 for CC120K).
        layout: ``scan_split`` (NPC/SDD), ``osa`` or ``auto``.
        max_images: keep the first ``max_images`` images and their captions; None keeps all.
        noise_index: (N_cap,) caption -> image map of the (subset) split; None means clean.
        check_files: check that every image file exists (a stat per image).

    Raises:
        DataNotFoundError, DataFormatError, ValueError: see messages.
    """
    paths = locate_image_split(root, split, naming=naming, layout=layout)
    captions = read_captions_txt(paths.captions)
    ids = read_image_ids(paths.ids, len(captions), captions_per_image, where=str(paths.captions))
    if max_images is not None:
        if not max_images >= 1:
            raise ValueError(f"max_images must be >= 1 or None, got {max_images}")
        ids = ids[:max_images]
        captions = captions[: len(ids) * captions_per_image]
    files = image_names_for_ids(ids, naming, ids_path=paths.ids, image_names=paths.image_names)
    _check_names(paths.image_dir, files)
    if check_files:
        _check_files(paths.image_dir, files, naming)
    true_image = clean_image_index(len(files), captions_per_image)
    if noise_index is None:
        image_index = true_image.copy()
    else:
        image_index = _check_noise(noise_index, len(true_image), len(files))
    return ImageSplit(
        root=paths.root,
        split=split,
        naming=naming,
        image_dir=paths.image_dir,
        image_files=PackedStrings(files),
        captions=PackedStrings(captions),
        captions_per_image=captions_per_image,
        true_image=true_image,
        image_index=image_index,
    )
