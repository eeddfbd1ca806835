import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from precomputed.errors import DataFormatError, DataNotFoundError
from precomputed.features import count_nonfinite, open_features


def test_npy_and_h5_read_api(make_split):
    for fmt in ("npy", "h5"):
        root = make_split(fmt=fmt, num_images=5)
        store = open_features(root / "toy_precomp" / f"train_ims.{fmt}")
        assert store.shape == (5, 4, 6) and len(store) == 5
        assert store[3].dtype == np.float32 and store[3][0, 0] == 3
        assert list(store.slice(1, 3)[:, 0, 0]) == [1, 2]
        with pytest.raises(IndexError):
            store[5]
        store.close()


def test_npy_is_memory_mapped(make_split):
    root = make_split()
    store = open_features(root / "toy_precomp" / "train_ims.npy")
    assert isinstance(store._array, np.memmap)


def test_pickles_by_path(make_split):
    import pickle

    for fmt in ("npy", "h5"):
        root = make_split(fmt=fmt, num_images=5)
        store = open_features(root / "toy_precomp" / f"train_ims.{fmt}")
        blob = pickle.dumps(store)
        assert len(blob) < 1000  # not the array
        again = pickle.loads(blob)
        assert np.array_equal(again.slice(0, 5), store.slice(0, 5))


def test_float16_upcast(tmp_path):
    np.save(tmp_path / "x.npy", np.ones((2, 3, 4), np.float16))
    assert open_features(tmp_path / "x.npy")[0].dtype == np.float32


@pytest.mark.parametrize(
    "arr,match",
    [(np.zeros((2, 3), np.float32), "rank 2"), (np.zeros((2, 3, 4), np.float64), "float64")],
)
def test_wrong_rank_or_dtype(tmp_path, arr, match):
    np.save(tmp_path / "x.npy", arr)
    with pytest.raises(DataFormatError, match=match):
        open_features(tmp_path / "x.npy")


def test_nonfinite_counted_and_refused(tmp_path):
    arr = np.zeros((3, 2, 4), np.float32)
    arr[0, 0, 0] = np.nan
    arr[2, 1, 3] = np.inf
    arr[1, 1, 1] = -np.inf
    np.save(tmp_path / "x.npy", arr)
    assert count_nonfinite(tmp_path / "x.npy", chunk_bytes=8) == 3
    with pytest.raises(DataFormatError, match=r"3 non-finite.*allow_nonfinite=True"):
        open_features(tmp_path / "x.npy")
    assert open_features(tmp_path / "x.npy", allow_nonfinite=True).shape == (3, 2, 4)


def test_h5_without_features_dataset(tmp_path):
    import h5py

    with h5py.File(tmp_path / "x.h5", "w") as f:
        f.create_dataset("feats", data=np.zeros((2, 3, 4), np.float32))
    with pytest.raises(DataFormatError, match=r"no dataset 'features'.*feats"):
        open_features(tmp_path / "x.h5")


def test_missing_file(tmp_path):
    with pytest.raises(DataNotFoundError, match="not found"):
        open_features(tmp_path / "nope.npy")


RSS_SCRIPT = textwrap.dedent(
    """
    import sys, numpy as np
    from precomputed.features import open_features

    def status(key):
        for line in open("/proc/self/status"):
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    path = sys.argv[1]
    arr = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(3400, 36, 2048))
    arr[-1, -1, -1] = np.nan  # touches one page only: the file stays sparse
    arr.flush(); del arr
    base = status("VmHWM:")
    store = open_features(path, allow_nonfinite=True)  # includes the chunked NaN/inf scan
    row = store[1234]
    print(store.shape[0] * 36 * 2048 * 4, status("VmHWM:") - base, status("VmRSS:") - base)
    """
)


def test_large_file_open_and_scan_keep_rss_small(tmp_path):
    """A ~1 GB feature file: open + full NaN/inf scan must not grow the peak RSS with the file."""
    out = subprocess.run(
        [sys.executable, "-c", RSS_SCRIPT, str(tmp_path / "big.npy")],
        capture_output=True,
        text=True,
        check=True,
    )
    size, peak_growth, rss_growth = map(int, out.stdout.split())
    assert size > 10**9
    assert peak_growth < 100 * 2**20, out.stdout
    assert rss_growth < 100 * 2**20, out.stdout


def test_truncated_npy_names_the_file(tmp_path):
    np.save(tmp_path / "x.npy", np.ones((10, 4, 6), np.float32))
    data = (tmp_path / "x.npy").read_bytes()
    (tmp_path / "x.npy").write_bytes(data[:300])
    with pytest.raises(DataFormatError, match=r"x\.npy is truncated: 300 bytes.*copy the file"):
        open_features(tmp_path / "x.npy")


def test_garbage_h5_names_the_file(tmp_path):
    (tmp_path / "x.h5").write_bytes(b"not an hdf5 file" * 40)
    with pytest.raises(DataFormatError, match=r"x\.h5 is not a readable HDF5 file"):
        open_features(tmp_path / "x.h5")


@pytest.fixture
def scan_calls(monkeypatch):
    """Counts full NaN/inf scans made by ``open_features``."""
    import precomputed.features as features

    calls = []
    real = features.count_nonfinite

    def counting(path, **kwargs):
        calls.append(path)
        return real(path, **kwargs)

    monkeypatch.setattr(features, "count_nonfinite", counting)
    return calls


@pytest.mark.parametrize("fmt", ["npy", "h5"])
def test_nonfinite_scan_runs_once_per_file_version(make_split, scan_calls, fmt):
    path = make_split(fmt=fmt) / "toy_precomp" / f"train_ims.{fmt}"
    open_features(path).close()
    open_features(path).close()
    assert len(scan_calls) == 1  # the second open reused the record
    assert path.with_name(path.name + ".finite.json").is_file()


def test_changed_file_is_rescanned(tmp_path, scan_calls):
    path = tmp_path / "x.npy"
    np.save(path, np.ones((3, 2, 4), np.float32))
    open_features(path).close()
    bad = np.ones((3, 2, 4), np.float32)
    bad[2, 1, 3] = np.nan
    np.save(path, bad)  # same size, new content
    with pytest.raises(DataFormatError, match="1 non-finite"):
        open_features(path)
    # only the modification time differs from the record: still rescanned
    stat = path.stat()
    open_features(path, allow_nonfinite=True).close()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    open_features(path, allow_nonfinite=True).close()
    assert len(scan_calls) == 3


def test_record_with_allow_nonfinite_still_refuses_later(tmp_path, scan_calls):
    path = tmp_path / "x.npy"
    bad = np.ones((3, 2, 4), np.float32)
    bad[0, 0, 0] = np.inf
    np.save(path, bad)
    open_features(path, allow_nonfinite=True).close()
    with pytest.raises(DataFormatError, match="1 non-finite"):
        open_features(path)  # from the record, without a second scan
    assert len(scan_calls) == 1


def test_scan_record_falls_back_to_the_user_cache(tmp_path, scan_calls, monkeypatch):
    """Where no record can be written beside the file (read-only data), the cache holds it."""
    from precomputed.features import scan_record_paths

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = tmp_path / "data" / "x.npy"
    path.parent.mkdir()
    np.save(path, np.ones((3, 2, 4), np.float32))
    beside, cached = scan_record_paths(path)
    beside.mkdir()  # occupies the sidecar's name: writing it fails like a read-only folder
    open_features(path).close()
    open_features(path).close()
    assert cached.is_file() and cached.parent == tmp_path / "cache" / "precomputed" / "finite"
    assert len(scan_calls) == 1
