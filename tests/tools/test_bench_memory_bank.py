"""tools/bench_memory_bank.py runs on a tiny problem and reports a consistent bank."""

import json


def test_bench_memory_bank_tiny(tool, capsys):
    bench = tool("bench_memory_bank")
    assert bench.main(["--images", "20", "--dim", "8", "--key-block", "7", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["samples"] == 100 and out["bank_ok"] is True
    assert out["scores"] == (100 + 20) * out["clean_keys"]
