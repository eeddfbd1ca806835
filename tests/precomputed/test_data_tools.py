"""tools/make_synthetic.py, tools/build_vocab.py, tools/make_noise.py (thin wrappers)."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from precomputed.noise import noise_sha256
from precomputed.vocab import load_vocab

TOOLS = Path(__file__).resolve().parents[2] / "tools"


def _tool(name):
    spec = importlib.util.spec_from_file_location(f"tool_{name}", TOOLS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def test_make_synthetic_help_lists_every_option(capsys):
    with pytest.raises(SystemExit):
        _tool("make_synthetic")(["--help"])
    out = capsys.readouterr().out
    for opt in ("--out", "--num-train", "--num-dev", "--num-test", "--seed", "--regions",
                "--feature-dim", "--region-noise", "--attribute-sharing", "--partialness",
                "--noise-ratios", "--noise-seed"):  # fmt: skip
        assert opt in out


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    out = tmp_path_factory.mktemp("tools") / "synthetic"
    argv = ["--out", str(out), "--num-train", "10", "--num-dev", "4", "--num-test", "4",
            "--feature-dim", "32", "--noise-ratios", "0.3"]  # fmt: skip
    assert _tool("make_synthetic")(argv) == 0
    return out


def test_build_vocab_tool(synth, tmp_path):
    out = tmp_path / "v.json"
    argv = ["--data-root", str(synth), "--name", "synthetic_precomp", "--min-count", "1",
            "--out", str(out)]  # fmt: skip
    assert _tool("build_vocab")(argv) == 0
    vocab = load_vocab(out)
    assert "dog" in vocab or "cat" in vocab or len(vocab) > 10


def test_make_noise_tool(synth, tmp_path, capsys):
    base = ["--data-root", str(synth), "--name", "synthetic_precomp", "--captions-per-image", "5"]
    out = tmp_path / "n.npy"
    assert _tool("make_noise")([*base, "--ratio", "0.4", "--seed", "1", "--out", str(out)]) == 0
    index = np.load(out)
    assert index.dtype == np.int64 and len(index) == 50
    assert noise_sha256(index) in capsys.readouterr().out
    perm = np.array([1, 0, 2, 3, 4, 5, 6, 7, 9, 8])
    np.save(tmp_path / "perm.npy", perm)
    out2 = tmp_path / "n2.npy"
    argv = [*base, "--from-image-perm", str(tmp_path / "perm.npy"), "--out", str(out2)]
    assert _tool("make_noise")(argv) == 0
    assert np.load(out2).tolist() == np.repeat(perm, 5).tolist()


def _one_error_line(capsys, *fragments: str) -> str:
    """The tool printed exactly one ``error: ...`` line (no traceback) naming ``fragments``."""
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    assert "Traceback" not in captured.err + captured.out
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def test_make_noise_ratio_one_is_one_error_line(synth, tmp_path, capsys):
    argv = ["--data-root", str(synth), "--name", "synthetic_precomp", "--captions-per-image",
            "5", "--ratio", "1.0", "--out", str(tmp_path / "n.npy")]  # fmt: skip
    assert _tool("make_noise")(argv) == 2
    _one_error_line(capsys, "noise ratio must be in [0, 1)", "got 1.0", "below 1")
    assert not (tmp_path / "n.npy").exists()


def test_data_problems_in_tools_are_one_error_line(synth, tmp_path, capsys):
    base = ["--data-root", str(synth), "--name", "synthetic_precomp"]
    # a truncated feature file: named, with the fix
    broken = tmp_path / "root" / "synthetic_precomp"
    broken.mkdir(parents=True)
    for name in ("train_caps.txt",):
        (broken / name).write_bytes((synth / "synthetic_precomp" / name).read_bytes())
    feats = (synth / "synthetic_precomp" / "train_ims.npy").read_bytes()
    (broken / "train_ims.npy").write_bytes(feats[: len(feats) // 2])
    argv = ["--data-root", str(tmp_path / "root"), "--name", "synthetic_precomp",
            "--captions-per-image", "5", "--ratio", "0.2",
            "--out", str(tmp_path / "n.npy")]  # fmt: skip
    assert _tool("make_noise")(argv) == 2
    _one_error_line(capsys, "train_ims.npy is truncated", "copy the file again")
    # wrong captions per image: DataFormatError with both counts
    argv = [*base, "--captions-per-image", "3", "--ratio", "0.2", "--out", str(tmp_path / "n.npy")]
    assert _tool("make_noise")(argv) == 2
    _one_error_line(capsys, "train_caps.txt", "captions_per_image=5 would match")
    # a missing split folder
    argv = ["--data-root", str(tmp_path / "nowhere"), "--name", "x_precomp", "--out",
            str(tmp_path / "v.json")]  # fmt: skip
    assert _tool("build_vocab")(argv) == 2
    _one_error_line(capsys, "nowhere")
    assert _tool("build_vocab")([*base, "--min-count", "0", "--out", str(tmp_path / "v.json")]) == 2
    _one_error_line(capsys, "min_count must be >= 1")
    argv = ["--out", str(tmp_path / "s"), "--num-train", "4", "--num-dev", "2", "--num-test", "2",
            "--feature-dim", "8", "--noise-ratios", "1.5"]  # fmt: skip
    assert _tool("make_synthetic")(argv) == 2
    _one_error_line(capsys, "noise ratio must be in [0, 1)")
