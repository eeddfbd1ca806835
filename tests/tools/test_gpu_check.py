"""tools/gpu_check.py: without CUDA it says so and exits 0; its checks and table run on the CPU
at toy sizes (``--device cpu --quick``), so what a CUDA machine runs is tested code."""

from __future__ import annotations

import pytest
import torch

# A run's train.threads sets torch's thread count for the process; give it back.
pytestmark = pytest.mark.usefixtures("keep_threads")


def test_without_cuda_it_says_so_and_exits_0(tool, monkeypatch, capsys) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert tool("gpu_check").main([]) == 0
    out = capsys.readouterr().out
    assert "CUDA is not available" in out and "--device cpu --quick" in out


def test_table_has_one_line_per_row_and_shows_failures(tool) -> None:
    gc = tool("gpu_check")
    failing = gc._guard("step", "x", lambda: 1 / 0)
    assert failing.status == "FAIL" and "ZeroDivisionError" in failing.note
    rows = [gc.Row("bench", "scoring 5x5", "ok", 1234.5, "pairs/s", "0.1 s"), failing]
    table = gc.format_table(rows, "gpu_check on CPU").splitlines()
    assert table[0] == "gpu_check on CPU" and table[1].split()[:3] == ["section", "case", "status"]
    assert "1,234.5" in table[3] and "FAIL" in table[4] and len(table) == 5


@pytest.mark.slow
def test_quick_cpu_run_prints_every_check(tool, capsys) -> None:
    rc = tool("gpu_check").main(["--device", "cpu", "--quick", "--steps", "1",
                                 "--methods", "triplet", "infonce", "--bench-steps", "1", "--bench",
                                 "--no-loop"])  # fmt: skip
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("gpu_check on CPU")
    for case in ("triplet x sgraf", "infonce x clip", "infonce x sgraf", "evaluate_models x sgraf",
                 "evaluate_models x clip", "SGRAF step (batch 16)", "scoring 20x100",
                 "CLIP ugncl-tiny (batch 8)"):  # fmt: skip
        row = next(line for line in lines if case in line)
        assert " ok " in row, out
    # Every method on every backbone has a row: the pair the trainer refuses says so.
    assert sum(" x sgraf " in line or " x clip " in line for line in lines) >= 4
    refused = next(line for line in lines if "triplet x clip" in line)
    assert " refused " in refused and "sigmoid" in refused
    assert rc == 0


def test_a_registered_method_gets_its_rows_with_no_edit(tool, monkeypatch, capsys) -> None:
    from dataclasses import make_dataclass

    from ugncl.methods import METHODS, MethodSpec
    from ugncl.methods.triplet import TripletConfig, TripletMethod

    class ToyHinge(TripletMethod):
        name = "toy_hinge"

    section = make_dataclass("ToyHingeConfig", [], bases=(TripletConfig,))
    monkeypatch.setitem(METHODS, "toy_hinge", MethodSpec(section, ToyHinge))
    gc = tool("gpu_check")
    assert "toy_hinge" in gc.parse_args(["--device", "cpu"]).methods
    rc = gc.main(["--device", "cpu", "--quick", "--steps", "1", "--methods", "toy_hinge",
                  "--backbones", "sgraf", "--no-loop"])  # fmt: skip
    lines = capsys.readouterr().out.splitlines()
    row = next(line for line in lines if "toy_hinge x sgraf" in line)
    assert " ok " in row and "ms/step" in row, lines
    assert rc == 0


@pytest.mark.slow
def test_loop_rows_time_the_real_loops_against_the_goals(tool) -> None:
    gc = tool("gpu_check")
    args = gc.parse_args(["--device", "cpu", "--quick", "--loop-methods", "infonce", "npc"])
    rows = {r.case: r for r in gc.loop_rows(args)}
    assert all(r.status == "ok" for r in rows.values()), [(r.case, r.note) for r in rows.values()]
    clip = rows["infonce x clip ugncl-tiny (batch 8)"]
    npc = rows["npc x clip ugncl-tiny (batch 8)"]
    ugncl = rows["ugncl x sgraf W=2 (batch 16)"]
    assert clip.unit == "pairs/s" and clip.value > 0 and clip.goal == ">= 3,000 pairs/s"
    assert "x the plain fine-tune's step" in npc.note and npc.goal == "<= 3x clip"
    assert ugncl.unit == "ms/step" and ugncl.goal == "<= 60 ms/step"
    # Flickr30K caption lengths: 12.3 words on average plus <start>/<end>.
    tokens = float(ugncl.note.split("tokens/caption ")[1].split(",")[0])
    assert 11 < tokens < 17
    for precision in ("fp32", "tf32", "bf16"):
        row = rows[f"COCO-5K eval {precision} (20x100, W=2)"]
        assert row.unit == "s" and row.note.startswith("measured") and row.goal == "<= 60 s"
    # On the CPU the goals are printed, not judged, and no device memory is read.
    assert {r.peak for r in rows.values()} == {"n/a"}
    assert {r.verdict for r in rows.values()} == {""}


def test_photo_world_holds_flickr_sized_jpegs(tool, tmp_path) -> None:
    from PIL import Image

    gc = tool("gpu_check")
    world = gc.make_photo_world(tmp_path, 8)
    files = sorted((world / "synthetic_clip" / "images").rglob("*.jpg"))
    assert len(files) >= 8
    with Image.open(files[0]) as img:
        assert img.format == "JPEG" and img.size == (500, 375)
    assert files[0].stat().st_size > 50_000


def test_verdicts_json_file_and_bad_sizes(tool, tmp_path, capsys) -> None:
    import argparse
    import json

    gc = tool("gpu_check")
    cuda = argparse.Namespace(device="cuda", quick=False)
    assert gc._verdict(cuda, True) == "meets" and gc._verdict(cuda, False) == "misses"
    assert gc._verdict(argparse.Namespace(device="cuda", quick=True), True) == ""
    out = tmp_path / "check.json"
    rc = gc.main(["--device", "cpu", "--quick", "--steps", "1", "--methods", "triplet",
                  "--backbones", "sgraf", "--no-loop", "--json", str(out)])  # fmt: skip
    report = json.loads(out.read_text())
    assert rc == 0 and report["machine"].startswith("CPU")
    assert [r["case"] for r in report["rows"]] == ["triplet x sgraf", "evaluate_models x sgraf"]
    assert {"goal", "verdict", "peak"} <= set(report["rows"][0])
    with pytest.raises(SystemExit) as exit_:
        gc.main(["--device", "cpu", "--loop-steps", "0"])
    assert exit_.value.code == 2 and "--loop-steps" in capsys.readouterr().err


def test_compile_runs_the_loop_rows_through_torch_compile(tool, tmp_path, monkeypatch) -> None:
    """``--compile``: the loop rows train through ``torch.compile`` (here its ``aot_eager``
    backend, which keeps code generation out of the test) and say so in their case name."""
    import functools

    calls = []
    real = torch.compile

    def spy(model, **kwargs):
        calls.append(type(model).__name__)
        return functools.partial(real, backend="aot_eager")(model, **kwargs)

    monkeypatch.setattr(torch, "compile", spy)
    gc = tool("gpu_check")
    args = gc.parse_args(["--device", "cpu", "--quick", "--compile"])
    row = gc.loop_ugncl_sgraf(tmp_path, args)
    assert row.status == "ok" and row.case == "ugncl x sgraf W=2 (batch 16), compiled"
    assert calls, "the trainer did not compile its model"
    plain = gc.parse_args(["--device", "cpu", "--quick"])
    assert not plain.compile and gc._compiled(plain) == ""
