import numpy as np
import pytest

from precomputed.errors import DataFormatError, DataNotFoundError
from precomputed.noise import (
    clean_image_index,
    image_permutation_to_caption_index,
    load_noise_index,
    make_caption_noise,
    noise_sha256,
    num_noisy,
    save_noise_index,
)


def test_clean_index():
    assert clean_image_index(3, 2).tolist() == [0, 0, 1, 1, 2, 2]


def test_deterministic_per_seed():
    clean = clean_image_index(100, 5)
    a, b = make_caption_noise(clean, 0.4, seed=3), make_caption_noise(clean, 0.4, seed=3)
    assert np.array_equal(a, b) and a.dtype == np.int64
    assert not np.array_equal(a, make_caption_noise(clean, 0.4, seed=4))
    assert noise_sha256(a) == noise_sha256(b) != noise_sha256(make_caption_noise(clean, 0.4, 4))


@pytest.mark.parametrize("ratio", [0.0, 0.2, 0.5, 0.79])
def test_exactly_requested_number_moved(ratio):
    clean = clean_image_index(101, 5)
    noisy = make_caption_noise(clean, ratio, seed=0)
    # make_caption_noise's first draw picks the captions it shuffles
    selected = np.random.default_rng(0).permutation(len(clean))[: num_noisy(len(clean), ratio)]
    assert len(selected) == int(ratio * len(clean)) == num_noisy(len(clean), ratio)
    assert len(np.unique(selected)) == len(selected)
    untouched = np.setdiff1d(np.arange(len(clean)), selected)
    assert np.array_equal(noisy[untouched], clean[untouched])
    # shuffled among themselves: the multiset of image indices is unchanged
    assert sorted(noisy[selected].tolist()) == sorted(clean[selected].tolist())
    # clean flags count a caption that lands on its own image as clean
    flags = noisy == clean
    assert (~flags).sum() <= len(selected)
    assert flags[untouched].all()


def test_bad_ratio():
    for r in (-0.1, 1.0, 1.5, float("nan")):
        with pytest.raises(ValueError, match=r"\[0, 1\)"):
            make_caption_noise(clean_image_index(4, 1), r, 0)


def test_roundtrip(tmp_path):
    noisy = make_caption_noise(clean_image_index(20, 5), 0.5, seed=1)
    save_noise_index(tmp_path / "n.npy", noisy.astype(np.int32))
    assert np.load(tmp_path / "n.npy").dtype == np.int64
    back = load_noise_index(tmp_path / "n.npy", num_images=20, captions_per_image=5)
    assert np.array_equal(back, noisy) and noise_sha256(back) == noise_sha256(noisy)


def test_image_level_conversion(tmp_path):
    perm = np.array([2, 0, 1, 3])
    assert image_permutation_to_caption_index(perm, 2).tolist() == [2, 2, 0, 0, 1, 1, 3, 3]
    np.save(tmp_path / "p.npy", perm)
    got = load_noise_index(tmp_path / "p.npy", num_images=4, captions_per_image=2, fmt="image")
    assert got.tolist() == [2, 2, 0, 0, 1, 1, 3, 3]
    with pytest.raises(DataFormatError, match="set data.noise_format=image"):
        load_noise_index(tmp_path / "p.npy", num_images=4, captions_per_image=2)


def test_image_level_file_must_be_a_permutation(tmp_path):
    """``noise_format=image`` checks what its name promises: np.zeros(4) would move every
    caption to image 0."""
    np.save(tmp_path / "z.npy", np.zeros(4, np.int64))
    with pytest.raises(DataFormatError, match=r"not a permutation.*image 0 appears 4 times.*3"):
        load_noise_index(tmp_path / "z.npy", num_images=4, captions_per_image=2, fmt="image")


def test_noise_text_file_gets_the_converter_hint(tmp_path):
    """An NPC noisy-caption text file under ``auto`` names tools/convert_noise_text.py, not
    numpy's allow_pickle advice."""
    (tmp_path / "0.4_noise_train_caps.txt").write_text("a dog runs\na cat sits\n")
    with pytest.raises(DataFormatError, match="convert_noise_text.py") as err:
        load_noise_index(tmp_path / "0.4_noise_train_caps.txt", num_images=1,
                         captions_per_image=2, fmt="auto")  # fmt: skip
    assert "allow_pickle" not in str(err.value)


@pytest.mark.parametrize(
    "arr,match",
    [
        (np.zeros(7, np.int64), r"length 7"),
        (np.zeros(8, np.float64), "dtype float64"),
        (np.zeros((2, 4), np.int64), "1-D"),
        (np.array([0, 1, 2, 3, 4, 0, 0, 0]), r"values in \[0, 4\]"),
        (np.array([0, 1, 2, 3, -1, 0, 0, 0]), r"\[-1, 3\]"),
    ],
)
def test_bad_noise_files(tmp_path, arr, match):
    np.save(tmp_path / "n.npy", arr)
    with pytest.raises(DataFormatError, match=match):
        load_noise_index(tmp_path / "n.npy", num_images=4, captions_per_image=2)


def test_missing_noise_file_and_bad_fmt(tmp_path):
    with pytest.raises(DataNotFoundError, match=r"make_noise\.py"):
        load_noise_index(tmp_path / "x.npy", num_images=4, captions_per_image=2)
    with pytest.raises(ValueError, match="fmt"):
        load_noise_index(tmp_path / "x.npy", num_images=4, captions_per_image=2, fmt="img")
