"""NPC/SDD/OSA noisy-caption text files <-> the NCR caption -> image index."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from precomputed.errors import DataFormatError
from precomputed.noise import clean_image_index, make_caption_noise, noise_sha256
from precomputed.noise_text import (
    caption_index_to_noisy_text,
    noise_text_names,
    noisy_text_to_caption_index,
)

CPI = 5


def npc_noisy_text(captions: list[str], ratio: float, seed: int) -> list[str]:
    """What NPC's data.py does: permute the strings of int(r*N) random positions."""
    rng = np.random.default_rng(seed)
    idx = rng.permutation(len(captions))[: int(ratio * len(captions))]
    out = np.array(captions, dtype=object)
    out[idx] = out[idx][rng.permutation(len(idx))]
    return list(out)


def unique_captions(n_img: int) -> list[str]:
    return [f"image {i} caption {c}" for i in range(n_img) for c in range(CPI)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_index_text_index_round_trip_is_exact_for_distinct_captions(seed):
    clean = unique_captions(20)
    index = make_caption_noise(clean_image_index(20, CPI), 0.6, seed)
    text = caption_index_to_noisy_text(clean, index, CPI)
    assert sorted(text) == sorted(clean)
    back = noisy_text_to_caption_index(clean, text, CPI)
    assert np.array_equal(back, index) and noise_sha256(back) == noise_sha256(index)


def test_text_from_npc_pairs_every_line_with_its_image():
    clean = unique_captions(10)
    noisy = npc_noisy_text(clean, 0.4, seed=3)
    index = noisy_text_to_caption_index(clean, noisy, CPI)
    position = {t: j for j, t in enumerate(clean)}
    for k, text in enumerate(noisy):  # line k is trained with image k // cpi
        assert index[position[text]] == k // CPI
    assert (index != clean_image_index(10, CPI)).sum() > 0
    # text -> index -> text keeps each image's set of captions (order inside an image is free)
    again = caption_index_to_noisy_text(clean, index, CPI)
    for i in range(10):
        assert sorted(again[i * CPI : (i + 1) * CPI]) == sorted(noisy[i * CPI : (i + 1) * CPI])


def test_clean_text_is_the_clean_index():
    clean = unique_captions(4)
    assert np.array_equal(noisy_text_to_caption_index(clean, clean, CPI), clean_image_index(4, CPI))


def test_identical_captions_resolve_to_the_most_clean_reading():
    # "dup" is a caption of image 0 (position 0) and image 1 (position 2), cpi = 2.
    clean = ["dup", "a", "dup", "b", "c", "d"]
    # Image 1 keeps a "dup" (line 2) and image 2 gets the other one (line 4).
    noisy = ["c", "a", "dup", "b", "dup", "d"]
    index = noisy_text_to_caption_index(clean, noisy, 2)
    # Position 2 ("dup" of image 1) matches line 2 (image 1): clean. Position 0 takes line 4.
    assert index.tolist() == [2, 0, 1, 1, 0, 2]
    clean_flags = index == clean_image_index(3, 2)
    assert clean_flags.tolist() == [False, True, True, True, False, True]
    # Ascending matching would have paired position 0 with line 2 and made both "dup" noisy.


def test_identical_captions_round_trip_keeps_pairs_and_never_adds_noise():
    rng = np.random.default_rng(0)
    clean = [f"caption {rng.integers(6)}" for _ in range(40)]  # many repeats, cpi 5
    truth = clean_image_index(8, CPI)
    for seed in range(5):
        index = make_caption_noise(truth, 0.5, seed)
        text = caption_index_to_noisy_text(clean, index, CPI)
        back = noisy_text_to_caption_index(clean, text, CPI)
        for i in range(8):  # same (caption text, image) pairs
            assert Counter(np.array(clean)[back == i]) == Counter(np.array(clean)[index == i])
        assert (back == truth).sum() >= (index == truth).sum()
        assert np.array_equal(noisy_text_to_caption_index(clean, text, CPI), back)  # determinism


def test_bad_text_files_are_refused():
    clean = unique_captions(2)
    with pytest.raises(DataFormatError, match="has 9 lines; expected one per clean caption"):
        noisy_text_to_caption_index(clean, clean[:9], CPI)
    with pytest.raises(DataFormatError, match="2 copies: NPC appends"):
        noisy_text_to_caption_index(clean, clean + clean, CPI)
    with pytest.raises(DataFormatError, match=r"noisy:3 is not one of the clean captions"):
        noisy_text_to_caption_index(clean, [*clean[:2], "made up", *clean[3:]], CPI)
    with pytest.raises(DataFormatError, match="occurs 2 times .* but 1 times"):
        noisy_text_to_caption_index(clean, [clean[0], *clean[:-1]], CPI)


def test_index_that_is_not_a_caption_permutation_cannot_be_written_as_text():
    clean = unique_captions(2)
    index = np.zeros(10, dtype=np.int64)  # every caption on image 0
    with pytest.raises(DataFormatError, match="image 0 has 10 captions"):
        caption_index_to_noisy_text(clean, index, CPI)
    with pytest.raises(DataFormatError, match="length 10"):
        caption_index_to_noisy_text(clean, index[:4], CPI)


def test_reference_file_names():
    assert noise_text_names(0.2) == ["0.2_noise_train_caps.txt"]
    assert noise_text_names(0) == ["0_noise_train_caps.txt", "0.0_noise_train_caps.txt"]


def test_tool_converts_both_ways(tmp_path, tool):
    clean = unique_captions(6)
    noisy = npc_noisy_text(clean, 0.5, seed=0)
    (tmp_path / "train_caps.txt").write_text("\n".join(clean) + "\n")
    (tmp_path / "0.5_noise_train_caps.txt").write_text("\n".join(noisy) + "\n")
    convert = tool("convert_noise_text").main
    common = ["--clean-caps", str(tmp_path / "train_caps.txt"), "--captions-per-image", "5"]
    out = tmp_path / "noise.npy"
    assert convert([*common, "--noisy-caps", str(tmp_path / "0.5_noise_train_caps.txt"),
                    "--out", str(out)]) == 0  # fmt: skip
    index = np.load(out)
    assert np.array_equal(index, noisy_text_to_caption_index(clean, noisy, CPI))
    text = tmp_path / "back.txt"
    assert convert([*common, "--noise-index", str(out), "--to-text", str(text)]) == 0
    assert np.array_equal(
        noisy_text_to_caption_index(clean, text.read_text().splitlines(), CPI), index
    )
    (tmp_path / "bad.txt").write_text("\n".join(noisy[:-1]) + "\n")
    assert convert([*common, "--noisy-caps", str(tmp_path / "bad.txt"), "--out", str(out)]) == 2


@pytest.mark.parametrize("ids", ["per_image", "per_caption", "features"])
def test_tool_refuses_a_captions_per_image_the_split_files_contradict(tmp_path, tool, capsys, ids):
    """5-caption data converted with --captions-per-image 4 would give another index."""
    clean = unique_captions(8)  # 40 captions: a multiple of 4 and of 5
    noisy = npc_noisy_text(clean, 0.5, seed=0)
    (tmp_path / "train_caps.txt").write_text("\n".join(clean) + "\n")
    (tmp_path / "noisy.txt").write_text("\n".join(noisy) + "\n")
    if ids == "features":
        np.save(tmp_path / "train_ims.npy", np.zeros((8, 2, 3), dtype=np.float32))
    else:
        per = 1 if ids == "per_image" else CPI
        (tmp_path / "train_ids.txt").write_text("".join(f"{i}\n" * per for i in range(8)))
    convert = tool("convert_noise_text").main
    args = ["--clean-caps", str(tmp_path / "train_caps.txt"), "--noisy-caps",
            str(tmp_path / "noisy.txt"), "--out", str(tmp_path / "n.npy")]  # fmt: skip
    assert convert([*args, "--captions-per-image", "4"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: ") and not (tmp_path / "n.npy").exists()
    assert convert([*args, "--captions-per-image", "5"]) == 0
