"""tools/bench.py loader: CPU ms per CLIP training sample, PIL + transform vs the pixel cache."""

import json

import pytest


def test_bench_loader_small(tool, capsys):
    bench = tool("bench")
    assert bench.main(["loader", "--images", "4", "--size", "32", "--repeats", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["images"] == 4 and out["cached_shape"] == [3, 32, 32]
    assert 50 < out["jpeg_kb_mean"] < 200  # Flickr30K-sized JPEGs, not noise, not blank
    # A memory-mapped read of 3 KB is far cheaper than decoding a 500 x 375 JPEG.
    assert out["image_ms_after"] < out["image_ms_before"] / 3
    assert out["sample_ms_after"] == pytest.approx(
        out["image_ms_after"] + out["tokenize_ms"], abs=2e-3
    )
    assert out["batch_bytes_256_before"] == 4 * out["batch_bytes_256_after"]


def test_bench_loader_rejects_an_empty_run(tool, capsys):
    with pytest.raises(SystemExit) as exit_:
        tool("bench").main(["loader", "--images", "0"])
    assert exit_.value.code == 2 and "--images" in capsys.readouterr().err
