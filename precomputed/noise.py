"""Noisy correspondence as data (conventions of the field: docs/data_formats.md).

Canonical format (NCR's noise file): a 1-D int64 array of length N_cap whose value k is the
image index assigned to caption k. The field's other conventions (:data:`NOISE_CONVENTIONS`)
are told apart by :func:`detect_noise_convention` and read or converted by
:func:`read_noise_file`:

* ``ncr``: NCR's caption-level index, ``{data_name}_{r}.npy``, (N_cap,);
* ``l2rm``: L2RM's released files, under NCR's file name and length, but image-level noise
  (every image's ``cpi`` captions point to one image; the images are permuted);
* ``image``: DECL's, RCL's (``noise_inx_{r}.npy``) and UGNCL's image-level permutation,
  (N_img,); caption k uses ``perm[k // cpi]``;
* ``text``: NPC/SDD/OSA's ``{r}_noise_train_caps.txt``, the train captions with the strings
  of ``int(r * N)`` positions permuted (:mod:`precomputed.noise_text`).

An image-level permutation is never read as a caption index by accident, and a file whose
convention cannot be told is refused.

Number of corrupted captions: ``int(ratio * N_cap)`` (floor), exactly as NCR.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np

from ._io import atomic_open
from .errors import DataFormatError, DataNotFoundError, InvalidSettingError

__all__ = [
    "NOISE_CONVENTIONS",
    "clean_image_index",
    "detect_noise_convention",
    "image_permutation_to_caption_index",
    "load_noise_index",
    "make_caption_noise",
    "noise_sha256",
    "num_noisy",
    "read_noise_file",
    "save_noise_index",
]

# What each convention is; the keys are what detect_noise_convention returns.
NOISE_CONVENTIONS: dict[str, str] = {
    "ncr": "NCR caption-level index (N_cap,): value k is the image of caption k",
    "l2rm": "L2RM image-level noise repeated per caption (N_cap,), under NCR's file name",
    "image": "DECL/RCL/UGNCL image-level permutation (N_img,): caption k -> perm[k // cpi]",
    "text": "NPC/SDD/OSA {r}_noise_train_caps.txt: the train captions, strings shuffled",
}
_NPY_MAGIC = b"\x93NUMPY"


def clean_image_index(num_images: int, captions_per_image: int) -> np.ndarray:
    """The clean caption -> image map ``k // captions_per_image``, (N_cap,) int64."""
    if num_images < 0 or captions_per_image < 1:
        raise InvalidSettingError(
            f"need num_images >= 0 and captions_per_image >= 1, got {num_images}, "
            f"{captions_per_image}"
        )
    return np.arange(num_images * captions_per_image, dtype=np.int64) // captions_per_image


def _check_ratio(ratio: float) -> float:
    r = float(ratio)
    if not math.isfinite(r) or not 0.0 <= r < 1.0:
        raise InvalidSettingError(
            f"noise ratio must be in [0, 1) (the share of captions paired with another image), "
            f"got {ratio!r}; pass a value below 1, e.g. 0.2 or 0.5"
        )
    return r


def num_noisy(num_captions: int, ratio: float) -> int:
    """Captions that get shuffled: ``int(ratio * num_captions)`` (NCR's floor)."""
    return int(_check_ratio(ratio) * num_captions)


def make_caption_noise(image_index: np.ndarray, ratio: float, seed: int) -> np.ndarray:
    """NCR caption-level noise: shuffle the image indices of ``int(ratio*N)`` random captions.

    A caption may land on its own image by chance; it then counts as clean
    (``noisy == image_index``), as in NCR.

    Args:
        image_index: (N_cap,) integer clean caption -> image map (e.g. :func:`clean_image_index`).
        ratio: share of captions to shuffle, in [0, 1).
        seed: seed of a local ``np.random.default_rng``; no global state is touched.

    Returns:
        (N_cap,) int64 noisy caption -> image map.
    """
    clean = np.asarray(image_index)
    if clean.ndim != 1 or not np.issubdtype(clean.dtype, np.integer):
        raise ValueError(
            f"image_index must be a 1-D integer array, got shape {clean.shape} dtype {clean.dtype}"
        )
    k = num_noisy(len(clean), ratio)
    rng = np.random.default_rng(seed)
    selected = rng.permutation(len(clean))[:k]
    noisy = clean.astype(np.int64, copy=True)
    noisy[selected] = noisy[selected][rng.permutation(k)]
    return noisy


def image_permutation_to_caption_index(perm: np.ndarray, captions_per_image: int) -> np.ndarray:
    """Convert a UGNCL image-level permutation: caption k -> ``perm[k // captions_per_image]``.

    Args:
        perm: (N_img,) integer image -> image map.
        captions_per_image: captions per image.

    Returns:
        (N_img * captions_per_image,) int64 caption -> image map.
    """
    perm = np.asarray(perm)
    if perm.ndim != 1 or not np.issubdtype(perm.dtype, np.integer):
        raise DataFormatError(
            "an image permutation is a 1-D integer array, "
            f"got shape {perm.shape} dtype {perm.dtype}"
        )
    if captions_per_image < 1:
        raise InvalidSettingError(f"captions_per_image must be >= 1, got {captions_per_image}")
    return np.repeat(perm.astype(np.int64), captions_per_image)


def noise_sha256(index: np.ndarray) -> str:
    """sha256 of the index as int64 little-endian bytes (proves two runs used the same split)."""
    data = np.ascontiguousarray(np.asarray(index), dtype="<i8")
    return hashlib.sha256(data.tobytes()).hexdigest()


def save_noise_index(path: str | Path, index: np.ndarray) -> None:
    """Write an NCR noise file (1-D int64, ``np.save``), atomically; never appends."""
    index = np.asarray(index)
    if index.ndim != 1 or not np.issubdtype(index.dtype, np.integer):
        raise ValueError(
            f"a noise index is a 1-D integer array, got shape {index.shape} dtype {index.dtype}"
        )
    with atomic_open(path, "wb") as f:
        np.save(f, index.astype(np.int64), allow_pickle=False)


def load_noise_index(
    path: str | Path, *, num_images: int, captions_per_image: int, fmt: str = "caption"
) -> np.ndarray:
    """Load a noise file and return the (N_cap,) int64 caption -> image map.

    Args:
        path: ``.npy`` file.
        num_images: images of the split.
        captions_per_image: captions per image of the split.
        fmt: ``"caption"`` (NCR, L2RM: length N_cap), ``"image"`` (DECL/RCL/UGNCL: a permutation
            of length N_img, converted with :func:`image_permutation_to_caption_index`) or
            ``"auto"`` (told apart by :func:`detect_noise_convention`; refused when it cannot).

    Raises:
        DataNotFoundError: missing file.
        DataFormatError: not 1-D, not integer, wrong length (an image-level file passed as
            ``fmt="caption"`` is named as such), or values outside [0, num_images).
    """
    if fmt not in ("caption", "image", "auto"):
        raise ValueError(f'fmt must be "caption", "image" or "auto", got {fmt!r}')
    path = Path(path)
    if not path.is_file():
        raise DataNotFoundError(
            f"noise file {path} not found; write one with tools/make_noise.py (NCR format: 1-D "
            "int64, one image index per caption)"
        )
    if path.stat().st_size == 0:
        raise DataFormatError(
            f"noise file {path} is empty (0 bytes): its write was cut off; write it again with "
            "tools/make_noise.py"
        )
    try:
        index = np.load(path, allow_pickle=False)
    except (ValueError, EOFError, OSError) as err:
        if _looks_like_text(path):  # numpy's own advice (allow_pickle) does not fit a text file
            raise DataFormatError(
                f"noise file {path} is a text file, not a .npy array: a noisy-caption text "
                "file of NPC/SDD/OSA is converted to a noise index with "
                "tools/convert_noise_text.py (--clean-caps, --noisy-caps, --out FILE.npy); "
                "pass that .npy as data.noise_file"
            ) from err
        raise DataFormatError(
            f"noise file {path} is not a plain .npy array ({err or type(err).__name__})"
        ) from err
    if index.ndim != 1:
        raise DataFormatError(f"noise file {path} has shape {index.shape}; expected a 1-D array")
    if not np.issubdtype(index.dtype, np.integer):
        raise DataFormatError(
            f"noise file {path} has dtype {index.dtype}; expected integers (int64 image indices)"
        )
    num_captions = num_images * captions_per_image
    if fmt == "auto":
        convention = detect_noise_convention(
            index, num_images=num_images, captions_per_image=captions_per_image, where=str(path)
        )
        fmt = "image" if convention == "image" else "caption"
    if fmt == "image":
        if len(index) != num_images:
            raise DataFormatError(
                f"image-level noise file {path} has length {len(index)}; expected one entry per "
                f"image ({num_images})"
            )
    elif len(index) != num_captions:
        if len(index) == num_images:
            raise DataFormatError(
                f"noise file {path} has length {len(index)} = number of images, not of captions "
                f"({num_captions}): it looks like an image-level permutation (UGNCL release); "
                "set data.noise_format=image to convert it explicitly"
            )
        raise DataFormatError(
            f"noise file {path} has length {len(index)}; expected one image index per caption "
            f"({num_captions} = {num_images} images x {captions_per_image}); it was written for "
            "another split or subset: write one for this split with tools/make_noise.py"
        )
    lo, hi = (int(index.min()), int(index.max())) if len(index) else (0, 0)
    if len(index) and (lo < 0 or hi >= num_images):
        raise DataFormatError(
            f"noise file {path} has values in [{lo}, {hi}]; image indices must lie in "
            f"[0, {num_images}) for this split: write one for this split with tools/make_noise.py"
        )
    index = index.astype(np.int64)
    if fmt == "image":
        check_permutation(index, str(path))
        index = image_permutation_to_caption_index(index, captions_per_image)
    return index


def check_permutation(index: np.ndarray, where: str) -> None:
    """An image-level noise file is a permutation of the images (DECL/RCL/UGNCL shuffle
    images among themselves): every image appears once.

    Raises:
        DataFormatError: naming the first repeated image and how many images never appear.
    """
    counts = np.bincount(index, minlength=len(index))
    if (counts == 1).all():
        return
    repeated = int(np.flatnonzero(counts > 1)[0])
    raise DataFormatError(
        f"image-level noise file {where} is not a permutation of the {len(index)} images: "
        f"image {repeated} appears {int(counts[repeated])} times and "
        f"{int((counts == 0).sum())} image(s) never appear; an image-level file "
        "(data.noise_format=image) must list every image once: write one with "
        "tools/make_noise.py, or use data.noise_format=caption for a caption-level index"
    )


def _looks_like_text(path: Path) -> bool:
    """The file's first KiB decodes as UTF-8 text without NUL bytes."""
    with open(path, "rb") as handle:
        head = handle.read(1024)
    try:
        head.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return b"\0" not in head


def detect_noise_convention(
    index: np.ndarray, *, num_images: int, captions_per_image: int, where: str = "noise index"
) -> str:
    """Which convention (:data:`NOISE_CONVENTIONS`) a loaded noise array follows.

    Args:
        index: the array as loaded, (N_cap,) or (N_img,) integers.
        num_images: images of the split.
        captions_per_image: captions per image of the split (cpi).
        where: the file, for messages.

    Returns:
        ``"ncr"`` (caption-level; also every file when cpi = 1, where the conventions
        coincide, and an index without noise), ``"l2rm"`` (length N_cap, each image's cpi
        captions on one image, those images a permutation) or ``"image"`` (length N_img, a
        permutation).

    Raises:
        DataFormatError: not a 1-D integer array, values outside [0, num_images), or a length
            or content that fits no convention (the message names what was expected).
    """
    index = np.asarray(index)
    if index.ndim != 1 or not np.issubdtype(index.dtype, np.integer):
        raise DataFormatError(
            f"cannot tell the noise convention of {where}: shape {index.shape} dtype "
            f"{index.dtype}; every convention is a 1-D integer array (docs/data_formats.md)"
        )
    if len(index) and (int(index.min()) < 0 or int(index.max()) >= num_images):
        raise DataFormatError(
            f"{where} has values in [{int(index.min())}, {int(index.max())}]; image indices "
            f"must lie in [0, {num_images}) for this split: it was written for another split"
        )
    cpi = captions_per_image
    num_captions = num_images * cpi
    is_permutation = (
        len(index) == num_images and (np.bincount(index, minlength=num_images) == 1).all()
    )
    if len(index) == num_captions:
        if cpi == 1:
            return "ncr"
        blocks = index.reshape(num_images, cpi)
        if (blocks == blocks[:, :1]).all():
            images = blocks[:, 0]
            if np.array_equal(images, np.arange(num_images)):
                return "ncr"  # no noise: every convention reads the same
            if (np.bincount(images, minlength=num_images) == 1).all():
                return "l2rm"
        return "ncr"
    if len(index) == num_images:
        if is_permutation:
            return "image"
        raise DataFormatError(
            f"cannot tell the noise convention of {where}: its length {len(index)} is the "
            "number of images, but it is not a permutation of them (DECL/RCL/UGNCL's image-level "
            f"files always are); a caption-level index has {num_captions} entries "
            f"({num_images} images x {cpi})"
        )
    raise DataFormatError(
        f"cannot tell the noise convention of {where}: length {len(index)} is neither the "
        f"number of captions ({num_captions}: NCR, L2RM) nor of images ({num_images}: DECL, "
        "RCL, UGNCL) of this split; it was written for another split or subset: write one "
        "with tools/make_noise.py"
    )


def read_noise_file(
    path: str | Path,
    *,
    num_images: int,
    captions_per_image: int,
    clean_captions: list[str] | None = None,
) -> tuple[np.ndarray, str]:
    """Read a noise file of any convention of :data:`NOISE_CONVENTIONS` as NCR's index.

    A ``.npy`` array (told by its magic bytes, whatever its name) is classified by
    :func:`detect_noise_convention`; a UTF-8 text file is NPC/SDD/OSA's noisy-caption file and
    needs the split's clean captions (:func:`precomputed.noise_text.noisy_text_to_caption_index`).

    Args:
        path: the noise file.
        num_images: images of the split.
        captions_per_image: captions per image.
        clean_captions: (N_cap,) the split's clean captions in SCAN order (text files only).

    Returns:
        ((N_cap,) int64 caption -> image index, the convention's key).

    Raises:
        DataNotFoundError: missing file.
        DataFormatError: a file whose convention cannot be told, or that does not fit the split.
    """
    path = Path(path)
    if not path.is_file():
        raise DataNotFoundError(
            f"noise file {path} not found; write one with tools/make_noise.py (NCR format: 1-D "
            "int64, one image index per caption)"
        )
    with open(path, "rb") as f:
        head = f.read(len(_NPY_MAGIC))
    if head == _NPY_MAGIC:
        try:
            array = np.load(path, allow_pickle=False)
        except ValueError as err:
            raise DataFormatError(f"noise file {path} is not a plain .npy array ({err})") from err
        convention = detect_noise_convention(
            array, num_images=num_images, captions_per_image=captions_per_image, where=str(path)
        )
        index = array.astype(np.int64)
        if convention == "image":
            index = image_permutation_to_caption_index(index, captions_per_image)
        return index, convention
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise DataFormatError(
            f"cannot tell the noise convention of {path}: neither a .npy array (NCR, L2RM, "
            "DECL/RCL/UGNCL) nor a UTF-8 caption file (NPC/SDD/OSA's "
            "{r}_noise_train_caps.txt); see docs/data_formats.md"
        ) from None
    if clean_captions is None:
        raise DataFormatError(
            f"{path} is a text file (NPC/SDD/OSA's {{r}}_noise_train_caps.txt convention); it "
            "needs the split's clean captions: convert it with tools/convert_noise_text.py"
        )
    from .noise_text import noisy_text_to_caption_index  # noise_text does not import noise

    lines = [line.strip() for line in text.splitlines()]
    index = noisy_text_to_caption_index(clean_captions, lines, captions_per_image, where=str(path))
    return index, "text"
