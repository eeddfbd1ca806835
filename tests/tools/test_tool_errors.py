"""Every tool in tools/ given a read-only output folder, a zero-byte file or a non-UTF-8 file
answers with one ``error: ...`` line and exit code 2, before any heavy work (the tools are
called in-process through their ``main(argv)``).

A case is ``None`` where the tool has no such input or output (it only prints, or reads no
file): ``bench.py``, ``bench_memory_bank.py`` and ``bench_prefilter.py`` read no file and
write only to stdout (``gpu_check.py`` reads no file and writes only its ``--json`` file);
``lint_prose.py`` and ``write_base_config.py`` read and write the repository's own files;
``readings.py`` resolves the repository's configs and only prints.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOOLS = sorted(p.stem for p in (REPO / "tools").glob("*.py"))
BAD_BYTES = b"\xff\xfe caption \x80\x81 not utf-8\n"


@pytest.fixture(scope="module")
def places(tiny_world: Path, tmp_path_factory) -> dict[str, Path]:
    """A read-only folder, a zero-byte and a non-UTF-8 file, and copies of the tiny world
    with a zero-byte / non-UTF-8 ``train_caps.txt`` (and scene list)."""
    tmp = tmp_path_factory.mktemp("bad_inputs")
    ro = tmp / "read_only"
    ro.mkdir()
    ro.chmod(0o555)
    if os.geteuid() == 0 or os.access(ro, os.W_OK):  # root writes anywhere: a kernel folder
        ro = Path("/sys/fs")
    zero, bad = tmp / "zero.pt", tmp / "bad.txt"
    zero.write_bytes(b"")
    bad.write_bytes(BAD_BYTES)
    worlds = {}
    for kind, content in (("zero_world", b""), ("bad_world", BAD_BYTES)):
        world = tmp / kind
        shutil.copytree(tiny_world, world)
        folder = world / "synthetic_precomp"
        (folder / "train_caps.txt").write_bytes(content)
        for scenes in folder.glob("*_scenes.jsonl"):
            scenes.write_bytes(content)
        (folder / "world.json").write_bytes(content)
        worlds[kind] = world
    return {"ro": ro, "zero": zero, "bad": bad, "tmp": tmp, **worlds}


def _demo_folder(tmp: Path, name: str, content: bytes) -> Path:
    """A demo output folder whose ``demo_summary.json`` holds ``content``."""
    folder = tmp / f"demo_{name}"
    folder.mkdir(exist_ok=True)
    (folder / "demo_summary.json").write_bytes(content)
    return folder


def cases(p: dict[str, Path], world: Path) -> dict[str, dict[str, list[str] | None]]:
    ro, zero, bad, tmp = p["ro"], p["zero"], p["bad"], p["tmp"]
    zw, bw = p["zero_world"], p["bad_world"]
    caps = str(world / "synthetic_precomp" / "train_caps.txt")
    return {
        "audit_division": {"ro": None, "zero": [str(zero)], "bad": [str(bad)]},
        "bench": {"ro": None, "zero": None, "bad": None},
        "bench_memory_bank": {"ro": None, "zero": None, "bad": None},
        "bench_prefilter": {"ro": None, "zero": None, "bad": None},
        "gpu_check": {
            "ro": ["--device", "cpu", "--json", str(ro / "g.json")],
            "zero": None,
            "bad": None,
        },
        "fuzz_config": {
            "ro": ["--json", str(ro / "f.json")],
            "zero": ["--world", str(zero)],
            "bad": ["--world", str(bad)],
        },
        "lint_prose": {"ro": None, "zero": None, "bad": None},
        "readings": {"ro": None, "zero": None, "bad": None},  # resolves configs, prints
        "write_base_config": {"ro": None, "zero": None, "bad": None},
        "build_vocab": {
            "ro": [
                "--data-root",
                str(world),
                "--name",
                "synthetic_precomp",
                "--out",
                str(ro / "v.json"),
            ],
            "zero": [
                "--data-root",
                str(zw),
                "--name",
                "synthetic_precomp",
                "--out",
                str(tmp / "v0.json"),
            ],
            "bad": [
                "--data-root",
                str(bw),
                "--name",
                "synthetic_precomp",
                "--out",
                str(tmp / "v1.json"),
            ],
        },
        "compare": {
            "ro": [str(zw), "--out", str(ro / "t.md")],
            "zero": [str(zero)],
            "bad": ["--cfg", str(bad)],
        },
        "convert_checkpoint": {
            "ro": [str(zero), str(ro / "m.pt")],
            "zero": [str(zero), str(tmp / "m.pt")],
            "bad": [str(bad), str(tmp / "m.pt")],
        },
        "convert_clip": {
            "ro": [str(zero), str(ro / "w.pt")],
            "zero": [str(zero), str(tmp / "w.pt")],
            "bad": [str(bad), str(tmp / "w.pt")],
        },
        "convert_noise_text": {
            "ro": [
                "--clean-caps",
                caps,
                "--noisy-caps",
                caps,
                "--captions-per-image",
                "5",
                "--out",
                str(ro / "n.npy"),
            ],
            "zero": [
                "--clean-caps",
                str(zero),
                "--noisy-caps",
                str(zero),
                "--captions-per-image",
                "5",
                "--out",
                str(tmp / "n0.npy"),
            ],
            "bad": [
                "--clean-caps",
                str(bad),
                "--noisy-caps",
                caps,
                "--captions-per-image",
                "5",
                "--out",
                str(tmp / "n1.npy"),
            ],
        },
        "demo": {
            "ro": ["--world-root", str(world), "--out", str(ro / "demo")],
            "zero": ["--world-root", str(zw), "--out", str(tmp / "demo0")],
            "bad": ["--world-root", str(bw), "--out", str(tmp / "demo1")],
        },
        "eval": {
            "ro": [str(zero), "--json", str(ro / "r.json")],
            "zero": [str(zero)],
            "bad": [str(bad)],
        },
        "make_noise": {
            "ro": [
                "--data-root",
                str(world),
                "--name",
                "synthetic_precomp",
                "--ratio",
                "0.2",
                "--out",
                str(ro / "n.npy"),
            ],
            "zero": [
                "--data-root",
                str(world),
                "--name",
                "synthetic_precomp",
                "--captions-per-image",
                "5",
                "--from-image-perm",
                str(zero),
                "--out",
                str(tmp / "p0.npy"),
            ],
            "bad": [
                "--data-root",
                str(bw),
                "--name",
                "synthetic_precomp",
                "--ratio",
                "0.2",
                "--captions-per-image",
                "5",
                "--out",
                str(tmp / "p1.npy"),
            ],
        },
        "make_synthetic": {
            "ro": ["--out", str(ro / "world")],
            "zero": ["--redraw-nuisance", str(zw), "--out", str(tmp / "redraw0")],
            "bad": ["--redraw-nuisance", str(bw), "--out", str(tmp / "redraw1")],
        },
        "oracle": {
            "ro": None,
            "zero": ["--data-root", str(zw), "--split", "train"],
            "bad": ["--data-root", str(bw), "--split", "train"],
        },
        "clip_division": {
            "ro": ["--weights", str(zero), "--data", str(world), "--json", str(ro / "d.json")],
            "zero": ["--weights", str(zero), "--data", str(world)],
            "bad": ["--weights", str(zero), "--data", str(bw)],
        },
        "pretrain_clip": {
            "ro": ["--data", str(world), "--out", str(ro / "w.pt")],
            "zero": ["--data", str(zw), "--out", str(tmp / "w0.pt"), "--steps", "1"],
            "bad": ["--data", str(bw), "--out", str(tmp / "w1.pt"), "--steps", "1"],
        },
        "render_synthetic": {
            "ro": ["--root", str(ro)],
            "zero": ["--root", str(zw), "--name", "r0"],
            "bad": ["--root", str(bw), "--name", "r1"],
        },
        "prefilter": {
            "ro": None,  # writes nothing
            "zero": ["--cfg", "ugncl_synthetic", "--set", f"data.root={zw}", "data.dev_images=12"],
            "bad": ["--cfg", "ugncl_synthetic", "--set", f"data.root={bw}", "data.dev_images=12"],
        },
        "write_results": {
            "ro": [
                "--demo",
                str(_demo_folder(tmp, "ok", b'{"rows": []}')),
                "--readme",
                str(ro / "README.md"),
                "--step-seconds",
                "1",
            ],
            "zero": ["--demo", str(_demo_folder(tmp, "zero", b""))],
            "bad": ["--demo", str(_demo_folder(tmp, "bad", BAD_BYTES))],
        },
        "train": {
            "ro": [
                "--cfg",
                "ugncl_synthetic",
                "--set",
                f"data.root={world}",
                f"run.out_dir={ro}",
                "run.name=x",
            ],
            "zero": ["--cfg", str(zero)],
            "bad": ["--cfg", str(bad)],
        },
    }


def test_every_tool_has_cases(places, tiny_world) -> None:
    assert sorted(cases(places, tiny_world)) == TOOLS


@pytest.mark.parametrize("case", ["ro", "zero", "bad"])
@pytest.mark.parametrize("name", TOOLS)
def test_bad_input_is_one_error_line(tool, places, tiny_world, capsys, name, case) -> None:
    argv = cases(places, tiny_world)[name][case]
    if argv is None:
        pytest.skip(f"{name} has no {case} input or output")
    capsys.readouterr()
    rc = tool(name).main(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err


@pytest.mark.parametrize("name", ["make_noise", "build_vocab"])
def test_existing_output_needs_force(tool, tiny_world, tmp_path, capsys, name) -> None:
    out = tmp_path / ("noise.npy" if name == "make_noise" else "vocab.json")
    argv = ["--data-root", str(tiny_world), "--name", "synthetic_precomp", "--out", str(out)]
    if name == "make_noise":
        argv += ["--ratio", "0.2", "--captions-per-image", "5"]
    assert tool(name).main(argv) == 0
    out.write_bytes(b"precious")
    capsys.readouterr()
    assert tool(name).main(argv) == 2
    assert "already exists; pass --force" in capsys.readouterr().err
    assert out.read_bytes() == b"precious"
    assert tool(name).main([*argv, "--force"]) == 0
    assert out.read_bytes() != b"precious"


def test_worker_traceback_becomes_its_last_line() -> None:
    from precomputed.errors import DataFormatError
    from ugncl.run.cli import error_line

    err = DataFormatError(
        "Caught DataFormatError in DataLoader worker process 0.\n"
        'Original Traceback (most recent call last):\n  File "x.py", line 1, in f\n    g()\n'
        "precomputed.errors.DataFormatError: image a.jpg cannot be decoded; replace it\n"
    )
    assert error_line(err) == "error: image a.jpg cannot be decoded; replace it"
