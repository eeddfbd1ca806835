"""Fixtures of the CLIP-track tests."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    """One intra-op thread: the tiny model's ops are too small to gain from more, and
    oversubscribed OpenMP threads on a busy machine slow them down many times over
    (measured: 24 pretraining steps took 185 s with 2 threads, 15 s with 1, on a loaded box)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
