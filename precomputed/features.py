"""Read-only region features: memory-mapped ``.npy`` or an HDF5 dataset ``features``.

COCO's train file is about 33 GB, so nothing here loads a whole file: ``.npy``
is opened with ``np.load(mmap_mode="r")``, HDF5 reads only the requested rows, and the NaN/inf
check at open streams the file through one bounded buffer (plain reads, not the memory map, so
the pages it touches do not stay in this process's resident set).

The scan runs once per file version: its result is recorded in a sidecar ``<file>.finite.json``
keyed by the file's size, ``mtime_ns`` and a hash of its first 64 KiB (the ``.npy`` header,
the HDF5 superblock), written atomically after a successful scan. A later open that finds a
matching record skips the re-read; any change to the file (a rewrite changes ``mtime_ns``)
makes it rescan. Where the data folder is read-only the record goes to
``$XDG_CACHE_HOME/precomputed/finite/`` (default ``~/.cache``) instead.

dtype: float32 is the layout's dtype. float16 files are accepted and upcast to float32 on read
(half the disk for the same model inputs); any other dtype is refused.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

from ._io import atomic_open
from .errors import DataFormatError, DataNotFoundError

__all__ = ["FeatureStore", "count_nonfinite", "open_features", "scan_record_paths"]

ACCEPTED_DTYPES = (np.dtype(np.float32), np.dtype(np.float16))
SCAN_CHUNK_BYTES = 16 * 2**20  # bound on the buffer used by the NaN/inf scan
SCAN_RECORD_VERSION = 1
_HEAD_BYTES = 64 * 2**10  # hashed into the scan record key (header / superblock)


class FeatureStore:
    """Read-only (N, R, D) region features; every read returns float32.

    Attributes:
        path: the file.
        shape: (N, R, D).
        dtype: the dtype stored on disk (float32 or float16).
    """

    def __init__(self, path: Path, array, h5file=None) -> None:
        self.path = path
        self._array = array  # np.memmap or h5py.Dataset
        self._h5file = h5file
        self.shape: tuple[int, int, int] = tuple(int(s) for s in array.shape)  # type: ignore[assignment]
        self.dtype = np.dtype(array.dtype)

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"FeatureStore({str(self.path)!r}, shape={self.shape}, dtype={self.dtype})"

    def _check_index(self, idx: int) -> int:
        n = self.shape[0]
        if not -n <= idx < n:
            raise IndexError(f"image index {idx} out of range for {n} images in {self.path}")
        return idx % n

    def __getitem__(self, idx: int) -> np.ndarray:
        """One image's regions, (R, D) float32."""
        return np.asarray(self._array[self._check_index(int(idx))], dtype=np.float32)

    def slice(self, start: int, stop: int) -> np.ndarray:
        """Images ``start:stop`` as one contiguous read, (stop-start, R, D) float32."""
        start, stop, _ = slice(start, stop).indices(self.shape[0])
        return np.ascontiguousarray(self._array[start:stop], dtype=np.float32)

    def __getstate__(self) -> dict:
        # Pickled by path (DataLoader workers under "spawn"): pickling np.memmap would copy the
        # whole array, and h5py handles cannot be pickled. Reopening skips the NaN/inf scan,
        # which already ran in the parent.
        return {"path": self.path}

    def __setstate__(self, state: dict) -> None:
        path = Path(state["path"])
        if path.suffix == ".h5":
            f = _open_h5(path)
            self.__init__(path, f["features"], h5file=f)
        else:
            self.__init__(path, np.load(path, mmap_mode="r"))

    def close(self) -> None:
        """Close the HDF5 file (no-op for ``.npy``)."""
        if self._h5file is not None:
            self._h5file.close()
            self._h5file = None


def _npy_header(path: Path) -> tuple[tuple[int, ...], np.dtype, bool, int]:
    with open(path, "rb") as f:
        try:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
            else:  # format 3.0 (utf-8 field names) has no public reader
                shape, fortran, dtype = np.lib.format._read_array_header(f, version)
        except ValueError as err:
            raise DataFormatError(f"{path} is not a valid .npy file ({err})") from err
        return shape, dtype, fortran, f.tell()


def _validate(path: Path, shape: tuple[int, ...], dtype: np.dtype) -> None:
    if len(shape) != 3:
        raise DataFormatError(
            f"features in {path} have shape {shape} (rank {len(shape)}); expected rank 3 "
            "(N images, R regions, D dims), e.g. (N, 36, 2048)"
        )
    if dtype not in ACCEPTED_DTYPES:
        raise DataFormatError(
            f"features in {path} have dtype {dtype}; expected float32 (float16 is accepted and "
            "upcast); convert the file, e.g. np.save(path, arr.astype(np.float32))"
        )


def count_nonfinite(path: str | Path, *, chunk_bytes: int = SCAN_CHUNK_BYTES) -> int:
    """Count NaN/inf values of a feature file with memory bounded by ``chunk_bytes``.

    Args:
        path: a ``.npy`` or ``.h5`` feature file.
        chunk_bytes: size of the read buffer.

    Returns:
        The number of non-finite values.
    """
    path = Path(path)
    if path.suffix == ".h5":
        with _open_h5(path) as f:
            ds = _h5_dataset(f, path)
            row_bytes = max(1, int(np.prod(ds.shape[1:])) * ds.dtype.itemsize)
            step = max(1, chunk_bytes // row_bytes)
            return sum(
                int(np.count_nonzero(~np.isfinite(ds[i : i + step])))
                for i in range(0, ds.shape[0], step)
            )
    shape, dtype, _, offset = _npy_header(path)
    total = int(np.prod(shape))
    per_read = max(1, chunk_bytes // dtype.itemsize)
    buf = np.empty(per_read, dtype=dtype)
    count = 0
    with open(path, "rb", buffering=0) as f:
        f.seek(offset)
        remaining = total
        while remaining > 0:
            n = min(per_read, remaining)
            view = memoryview(buf[:n]).cast("B")
            got = f.readinto(view)
            while got < view.nbytes:  # readinto may return short reads
                more = f.readinto(view[got:])
                if not more:
                    raise DataFormatError(f"{path} is truncated: shorter than its header says")
                got += more
            count += int(np.count_nonzero(~np.isfinite(buf[:n])))
            remaining -= n
    return count


def _check_npy_size(path: Path, shape: tuple[int, ...], dtype: np.dtype, offset: int) -> None:
    expected = offset + int(np.prod(shape)) * dtype.itemsize
    size = path.stat().st_size
    if size < expected:
        raise DataFormatError(
            f"{path} is truncated: {size} bytes, but its header promises shape {shape} "
            f"{dtype} = {expected} bytes; the copy or download was cut short, copy the file again"
        )


def _open_h5(path: Path):
    import h5py

    try:
        return h5py.File(path, "r")
    except OSError as err:  # h5py's message does not name the file
        raise DataFormatError(
            f"{path} is not a readable HDF5 file ({err}); copy the file again, or store the "
            "(N, R, D) float32 features as .npy instead"
        ) from err


def _scan_key(path: Path) -> dict:
    stat = path.stat()
    with open(path, "rb") as f:
        head = hashlib.sha256(f.read(_HEAD_BYTES)).hexdigest()
    return {
        "version": SCAN_RECORD_VERSION,
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "head_sha256": head,
    }


def scan_record_paths(path: str | Path) -> list[Path]:
    """Where the NaN/inf scan record of ``path`` may live: beside it, then in the user cache."""
    path = Path(path).resolve()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:32]
    return [
        path.with_name(f"{path.name}.finite.json"),
        cache / "precomputed" / "finite" / f"{digest}.json",
    ]


def _recorded_nonfinite(path: Path) -> int | None:
    """The recorded NaN/inf count if a record matches the file as it is now, else None."""
    key = None
    for record_path in scan_record_paths(path):
        try:
            record = json.loads(record_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        key = key or _scan_key(path)
        if isinstance(record, dict) and {k: record.get(k) for k in key} == key:
            count = record.get("nonfinite")
            if isinstance(count, int) and count >= 0:
                return count
    return None


def _record_nonfinite(path: Path, count: int) -> None:
    """Write the scan record (best effort: a read-only place is skipped)."""
    record = {**_scan_key(path), "nonfinite": int(count)}
    for record_path in scan_record_paths(path):
        try:
            with atomic_open(record_path, "w", encoding="utf-8") as f:
                json.dump(record, f)
            return
        except OSError:
            continue


def _h5_dataset(f, path: Path):
    if "features" not in f:
        raise DataFormatError(
            f"HDF5 file {path} has no dataset 'features' (found: {sorted(f.keys())}); write the "
            "(N, R, D) float32 array as dataset 'features'"
        )
    return f["features"]


def open_features(path: str | Path, *, allow_nonfinite: bool = False) -> FeatureStore:
    """Open a feature file read-only without loading it.

    Args:
        path: ``{split}_ims.npy`` or ``{split}_ims.h5``.
        allow_nonfinite: accept files holding NaN/inf (they are counted either way).

    Returns:
        The store.

    Raises:
        DataNotFoundError: missing file.
        DataFormatError: wrong rank/dtype, no ``features`` dataset, or NaN/inf values.
    """
    path = Path(path)
    if not path.is_file():
        raise DataNotFoundError(
            f"feature file {path} not found; expected (N, R, D) float32 as .npy or as an .h5 "
            "dataset 'features'"
        )
    if path.suffix == ".h5":
        f = _open_h5(path)
        try:
            ds = _h5_dataset(f, path)
            _validate(path, tuple(ds.shape), np.dtype(ds.dtype))
        except Exception:
            f.close()
            raise
        store = FeatureStore(path, ds, h5file=f)
    else:
        shape, dtype, fortran, offset = _npy_header(path)
        _validate(path, shape, dtype)
        if fortran:
            raise DataFormatError(f"{path} is Fortran-ordered; save it C-contiguous")
        _check_npy_size(path, shape, dtype, offset)
        store = FeatureStore(path, np.load(path, mmap_mode="r"))
    bad = _recorded_nonfinite(path)
    if bad is None:
        bad = count_nonfinite(path)
        _record_nonfinite(path, bad)
    if bad and not allow_nonfinite:
        store.close()
        raise DataFormatError(
            f"{path} holds {bad} non-finite (NaN/inf) values; fix the file, or pass "
            "allow_nonfinite=True (data.allow_nonfinite: true) to use it anyway"
        )
    return store
