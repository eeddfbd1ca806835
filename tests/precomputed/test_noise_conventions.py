"""The field's noise-file conventions, each written here exactly as its release writes it
(the release's generation code transcribed, ``np.save`` of its int64 arrays, NPC's text file
with one ``caption + "\\n"`` a line), read or converted by the package, and a file whose
convention cannot be told refused with one ``error:`` line."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from precomputed.errors import DataFormatError
from precomputed.noise import (
    NOISE_CONVENTIONS,
    clean_image_index,
    detect_noise_convention,
    load_noise_index,
    read_noise_file,
)
from precomputed.noise_text import noise_text_names

from .conftest import tiny_captions

N_IMG, CPI = 40, 5
N_CAP = N_IMG * CPI


# ---------------------------------------------------------------- the releases' writers
def ncr_noise_file(path: Path, ratio: float, seed: int) -> np.ndarray:
    """NCR data.py: shuffle the image indices of int(r * N_cap) random captions; np.save."""
    np.random.seed(seed)
    t2i_index = np.arange(0, N_CAP) // CPI
    idx = np.arange(N_CAP)
    np.random.shuffle(idx)
    noise_length = int(ratio * N_CAP)
    shuffle_index = t2i_index[idx[:noise_length]]
    np.random.shuffle(shuffle_index)
    t2i_index[idx[:noise_length]] = shuffle_index
    np.save(path, t2i_index)
    return t2i_index


def decl_noise_file(path: Path, ratio: float, seed: int) -> np.ndarray:
    """DECL/RCL data.py: permute int(r * N_img) random images among themselves; np.save."""
    np.random.seed(seed)
    noisy_inx = np.arange(N_IMG)
    inx = np.arange(N_IMG)
    np.random.shuffle(inx)
    chosen = inx[0 : int(ratio * N_IMG)]
    shuffle_noisy_inx = np.array(chosen)
    np.random.shuffle(shuffle_noisy_inx)
    noisy_inx[chosen] = shuffle_noisy_inx
    np.save(path, noisy_inx)
    return noisy_inx


def l2rm_noise_file(path: Path, ratio: float, seed: int) -> np.ndarray:
    """L2RM's released noise_index/{data_name}_{r}.npy: DECL-style image noise, one entry per
    caption (every image's 5 captions point to one image), int64, NCR's name and length."""
    perm = decl_noise_file(path, ratio, seed)
    index = np.repeat(perm, CPI)
    np.save(path, index)
    return index


def npc_noise_text(folder: Path, clean: list[str], ratio: float, seed: int) -> Path:
    """NPC data.py: permute the caption strings of int(r * N) random positions; mode 'a'."""
    np.random.seed(seed)
    idx = np.arange(len(clean))
    np.random.shuffle(idx)
    noise_length = int(ratio * len(clean))
    shuffle_cap = np.array(clean)[idx[:noise_length]]
    np.random.shuffle(shuffle_cap)
    noise_cap = np.array(clean)
    noise_cap[idx[:noise_length]] = shuffle_cap
    path = folder / noise_text_names(ratio)[0]
    with open(path, mode="a", encoding="utf-8") as f:
        for cap in list(noise_cap):
            f.write(cap + "\n")
    return path


def _npy_header(path: Path) -> dict:
    raw = path.read_bytes()
    assert raw[:8] == b"\x93NUMPY\x01\x00"
    length = int.from_bytes(raw[8:10], "little")
    return ast.literal_eval(raw[10 : 10 + length].decode("latin1"))


# ---------------------------------------------------------------- read or converted
def test_ncr_caption_level_index_is_read_as_is(tmp_path):
    path = tmp_path / "f30k_precomp_0.4.npy"
    written = ncr_noise_file(path, 0.4, seed=3)
    assert _npy_header(path) == {"descr": "<i8", "fortran_order": False, "shape": (N_CAP,)}
    index, convention = read_noise_file(path, num_images=N_IMG, captions_per_image=CPI)
    assert convention == "ncr" and np.array_equal(index, written)
    assert np.array_equal(load_noise_index(path, num_images=N_IMG, captions_per_image=CPI,
                                           fmt="auto"), written)  # fmt: skip


@pytest.mark.parametrize("name", ["decl_noise.npy", "noise_inx_0.2.npy"])  # DECL's, RCL's name
def test_decl_rcl_image_level_permutation_is_converted(tmp_path, name):
    path = tmp_path / name
    perm = decl_noise_file(path, 0.2, seed=1)
    assert _npy_header(path)["shape"] == (N_IMG,) and _npy_header(path)["descr"] == "<i8"
    index, convention = read_noise_file(path, num_images=N_IMG, captions_per_image=CPI)
    assert convention == "image"
    # Caption k is trained with image perm[k // cpi], as DECL's __getitem__ reads it.
    assert np.array_equal(index, [perm[k // CPI] for k in range(N_CAP)])
    assert (index != clean_image_index(N_IMG, CPI)).sum() == CPI * (perm != np.arange(N_IMG)).sum()
    auto = load_noise_index(path, num_images=N_IMG, captions_per_image=CPI, fmt="auto")
    assert np.array_equal(auto, index)
    with pytest.raises(DataFormatError, match="image-level permutation"):
        load_noise_index(path, num_images=N_IMG, captions_per_image=CPI)  # fmt="caption"


def test_l2rm_image_noise_under_ncr_name_is_recognised(tmp_path):
    path = tmp_path / "f30k_precomp_0.2.npy"  # NCR's file name
    written = l2rm_noise_file(path, 0.2, seed=2)
    assert _npy_header(path) == {"descr": "<i8", "fortran_order": False, "shape": (N_CAP,)}
    index, convention = read_noise_file(path, num_images=N_IMG, captions_per_image=CPI)
    assert convention == "l2rm" and np.array_equal(index, written)
    noisy = index != clean_image_index(N_IMG, CPI)
    assert noisy.reshape(N_IMG, CPI).all(1).sum() == noisy.sum() // CPI  # whole images move
    assert "L2RM" in NOISE_CONVENTIONS[convention]


def test_npc_sdd_osa_noisy_caption_text_is_converted(tmp_path):
    clean = tiny_captions(N_IMG, CPI)
    path = npc_noise_text(tmp_path, clean, 0.4, seed=99)
    assert path.name == "0.4_noise_train_caps.txt"
    index, convention = read_noise_file(path, num_images=N_IMG, captions_per_image=CPI,
                                        clean_captions=clean)  # fmt: skip
    assert convention == "text"
    lines = path.read_text(encoding="utf-8").splitlines()
    # Every (caption text, image) training pair of the text file is one of the index's pairs.
    text_pairs = sorted((line, k // CPI) for k, line in enumerate(lines))
    index_pairs = sorted((clean[j], int(index[j])) for j in range(N_CAP))
    assert text_pairs == index_pairs
    assert int((index != clean_image_index(N_IMG, CPI)).sum()) <= int(0.4 * N_CAP)


def test_captions_per_image_one_reads_every_array_as_caption_level(tmp_path):
    path = tmp_path / "cc.npy"
    np.save(path, np.random.default_rng(0).permutation(12))
    index, convention = read_noise_file(path, num_images=12, captions_per_image=1)
    assert convention == "ncr" and len(index) == 12


def test_a_file_without_noise_is_caption_level(tmp_path):
    path = tmp_path / "clean.npy"
    np.save(path, clean_image_index(N_IMG, CPI))
    assert read_noise_file(path, num_images=N_IMG, captions_per_image=CPI)[1] == "ncr"


# ---------------------------------------------------------------- refused
def _refused(path, **kw):
    with pytest.raises(DataFormatError) as err:
        read_noise_file(path, num_images=N_IMG, captions_per_image=CPI, **kw)
    return str(err.value)


def test_a_length_of_no_convention_is_refused(tmp_path):
    path = tmp_path / "subset.npy"
    np.save(path, clean_image_index(N_IMG, CPI)[:-5])
    assert "cannot tell the noise convention" in _refused(path)


def test_an_image_length_array_that_is_no_permutation_is_refused(tmp_path):
    path = tmp_path / "img.npy"
    bad = np.arange(N_IMG)
    bad[1] = 0  # image 0 twice, image 1 never: no DECL/RCL/UGNCL file looks like this
    np.save(path, bad)
    message = _refused(path)
    assert "not a permutation" in message
    with pytest.raises(DataFormatError, match="not a permutation"):
        load_noise_index(path, num_images=N_IMG, captions_per_image=CPI, fmt="auto")


@pytest.mark.parametrize(
    "array", [np.zeros((N_IMG, CPI), dtype=np.int64), np.zeros(N_CAP, dtype=np.float32)]
)
def test_arrays_of_no_convention_are_refused(tmp_path, array):
    path = tmp_path / "odd.npy"
    np.save(path, array)
    assert "cannot tell the noise convention" in _refused(path)


def test_binary_that_is_neither_npy_nor_text_is_refused(tmp_path):
    path = tmp_path / "noise.bin"
    path.write_bytes(b"\xff\xfe\x00\x81" * 10)
    assert "cannot tell the noise convention" in _refused(path)


def test_a_text_file_needs_the_clean_captions(tmp_path):
    path = npc_noise_text(tmp_path, tiny_captions(N_IMG, CPI), 0.2, seed=0)
    assert "convert_noise_text.py" in _refused(path)


def test_detect_refuses_values_of_another_split():
    with pytest.raises(DataFormatError, match="another split"):
        detect_noise_convention(np.full(N_CAP, N_IMG), num_images=N_IMG, captions_per_image=CPI)


# ---------------------------------------------------------------- the tool
def test_make_noise_from_file_names_the_convention_or_refuses(make_split, tmp_path, tool, capsys):
    root = make_split(name="toy_precomp", num_images=N_IMG, cpi=CPI)
    make_noise = tool("make_noise").main
    base = ["--data-root", str(root), "--name", "toy_precomp", "--captions-per-image", str(CPI)]

    rcl = tmp_path / "noise_inx_0.2.npy"
    perm = decl_noise_file(rcl, 0.2, seed=5)
    out = tmp_path / "out" / "rcl.npy"
    assert make_noise([*base, "--from-file", str(rcl), "--out", str(out)]) == 0
    assert "DECL/RCL/UGNCL image-level permutation" in capsys.readouterr().out
    assert np.array_equal(np.load(out), np.repeat(perm, CPI))

    clean = (root / "toy_precomp" / "train_caps.txt").read_text(encoding="utf-8").splitlines()
    text = npc_noise_text(tmp_path, clean, 0.4, seed=7)
    assert make_noise([*base, "--from-file", str(text), "--out", str(tmp_path / "t.npy")]) == 0
    assert "NPC/SDD/OSA" in capsys.readouterr().out

    odd = tmp_path / "odd.npy"
    np.save(odd, np.arange(7))
    assert make_noise([*base, "--from-file", str(odd), "--out", str(tmp_path / "o.npy")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "cannot tell" in err[0]
    assert not (tmp_path / "o.npy").exists()


def test_convert_noise_text_writes_an_image_level_file_as_text(tmp_path, tool):
    clean = tiny_captions(N_IMG, CPI)
    caps = tmp_path / "train_caps.txt"
    caps.write_text("\n".join(clean) + "\n", encoding="utf-8")
    l2rm = tmp_path / "f30k_precomp_0.2.npy"
    written = l2rm_noise_file(l2rm, 0.2, seed=4)
    text = tmp_path / "0.2_noise_train_caps.txt"
    argv = ["--clean-caps", str(caps), "--captions-per-image", str(CPI),
            "--noise-index", str(l2rm), "--to-text", str(text)]  # fmt: skip
    assert tool("convert_noise_text").main(argv) == 0
    index, convention = read_noise_file(text, num_images=N_IMG, captions_per_image=CPI,
                                        clean_captions=clean)  # fmt: skip
    assert convention == "text" and np.array_equal(index, written)


def test_convert_noise_text_refuses_an_npy_or_binary_noisy_file(tmp_path, tool, capsys):
    caps = tmp_path / "train_caps.txt"
    caps.write_text("\n".join(tiny_captions(N_IMG, CPI)) + "\n", encoding="utf-8")
    decl = tmp_path / "noise_inx_0.2.npy"
    decl_noise_file(decl, 0.2, seed=0)
    garbage = tmp_path / "0.2_noise_train_caps.txt"
    garbage.write_bytes(b"\xff\xfe\x81\x00" * 8)
    for noisy, fragment in ((decl, "make_noise.py --from-file"), (garbage, "cannot tell")):
        argv = ["--clean-caps", str(caps), "--captions-per-image", str(CPI),
                "--noisy-caps", str(noisy), "--out", str(tmp_path / "x.npy")]  # fmt: skip
        assert tool("convert_noise_text").main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ") and fragment in err[0]
