"""tools/eval.py: the protocol a training run recorded is accepted; a checkpoint whose weights
cannot be a model's (negative BatchNorm variance, NaN) is one error line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.usefixtures("keep_threads")


@pytest.fixture(scope="module")
def best(tmp_path_factory, tiny_world: Path) -> Path:
    from tests.conftest import load_tool, tiny_run_argv

    out = tmp_path_factory.mktemp("evalck")
    argv = tiny_run_argv(tiny_world, out, "r", "eval.test_after_training=false")
    assert load_tool("train").main(argv) == 0
    return out / "r" / "checkpoints" / "best.pt"


def test_protocol_1k_is_accepted_on_another_image_count(best: Path, tool, capsys) -> None:
    """A run records its test under "1k" whatever the image count (with a warning); eval.py
    answers the same, where it used to refuse."""
    assert tool("eval").main([str(best), "--protocol", "1k"]) == 0
    assert "rsum" in capsys.readouterr().out
    assert tool("eval").main([str(best), "--protocol", "coco5fold"]) == 2
    err = capsys.readouterr().err
    assert "Use --protocol full (or 1k" in err


def test_precision_is_a_setting_of_the_scoring(best: Path, tool, tmp_path: Path) -> None:
    """--precision bf16 scores the same checkpoint in bfloat16: the metrics are those of a
    ranking (finite, rSum in range) and may differ from fp32's by rounding only."""
    import json

    rsum = {}
    for precision in ("fp32", "bf16"):
        out = tmp_path / f"{precision}.json"
        assert tool("eval").main([str(best), "--precision", precision, "--json", str(out)]) == 0
        data = json.loads(out.read_text())
        assert data["precision"] == precision
        rsum[precision] = next(iter(data["results"].values()))["rsum"]
    assert 0 <= rsum["bf16"] <= 600 and abs(rsum["bf16"] - rsum["fp32"]) < 60


@pytest.mark.parametrize("damage", ["negative_var", "nan"])
def test_a_damaged_checkpoint_is_one_error_line(
    best: Path, tool, tmp_path: Path, capsys, damage: str
) -> None:
    state = torch.load(best, weights_only=True)
    key = next(k for k in state["model"] if k.endswith("running_var"))
    if damage == "negative_var":
        state["model"][key][0] = -1.0
    else:
        key = next(k for k, v in state["model"].items() if v.is_floating_point())
        state["model"][key].view(-1)[0] = float("nan")
    bad = tmp_path / "bad.pt"
    torch.save(state, bad)
    assert tool("eval").main([str(bad)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and key in lines[0]
