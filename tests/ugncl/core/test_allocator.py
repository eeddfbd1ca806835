"""``keep_freed_memory``: large CPU tensors freed and allocated again reuse their pages."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ugncl.core.engine.allocator import keep_freed_memory

# Forty 4 MB tensors allocated and all freed at once, as a training step's backward frees its
# activations; prints the minor page faults of two rounds after three to settle. Both modes
# first pin glibc's thresholds at their start values (128 KiB), which hand the memory back
# every round; glibc's adaptive thresholds do so too, but not reliably in a short script.
CHURN = """
import resource, sys, torch
from ugncl.core.engine.allocator import keep_freed_memory
assert keep_freed_memory(mmap_threshold=128 << 10, trim_threshold=128 << 10, top_pad=0)
if sys.argv[1] == "keep":
    assert keep_freed_memory()
def churn():
    xs = [torch.ones(1 << 20) for _ in range(40)]
    del xs
for _ in range(3):
    churn()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(2):
    churn()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run(
        [sys.executable, "-c", CHURN, mode], capture_output=True, text=True, check=True, env=env
    )
    return int(out.stdout.strip().splitlines()[-1])


def test_keep_freed_memory_stops_page_faults_on_reallocated_tensors():
    if not keep_freed_memory():
        pytest.skip("no glibc mallopt on this platform")
    handed_back = _faults("default")
    assert handed_back > 40_000  # 2 rounds x 160 MB = ~82,000 pages mapped afresh
    assert _faults("keep") < handed_back / 10


def test_keep_freed_memory_is_a_no_op_without_glibc(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    assert keep_freed_memory() is False
