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
    rc = tool("gpu_check").main(["--device", "cpu", "--quick", "--steps", "1", "--methods",
                                 "triplet", "infonce", "--bench-steps", "1"])  # fmt: skip
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
                  "--backbones", "sgraf", "--no-bench"])  # fmt: skip
    lines = capsys.readouterr().out.splitlines()
    row = next(line for line in lines if "toy_hinge x sgraf" in line)
    assert " ok " in row and "ms/step" in row, lines
    assert rc == 0
