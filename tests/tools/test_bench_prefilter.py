"""tools/bench_prefilter.py times the pre-filter on a small planted world and reports a selection
that keeps the planted noisy pairs out."""

import json

import pytest


def test_bench_prefilter_small(tool, capsys):
    bench = tool("bench_prefilter")
    argv = ["--images", "1000", "--dim", "256", "--vocab", "400", "--noise", "0.5", "--json"]
    assert bench.main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["pairs"] == 5000 and out["dim"] == 256
    assert abs(out["estimated_noisy_share"] - 0.5) < 0.08
    assert out["selected"] > 1000 and out["selected_clean_share"] > 0.95
    assert out["noisy_selected"] < 0.05


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--noise", "1.0"], "--noise"),
        (["--images", "1"], "--images"),
        (["--vocab", "300"], "--vocab"),
    ],
)
def test_bench_prefilter_rejects_bad_sizes(tool, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        tool("bench_prefilter").main(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err
