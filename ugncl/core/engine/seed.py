"""Seeding and RNG state capture, so runs are reproducible and resumable."""

from __future__ import annotations

import random
import secrets

import numpy as np
import torch


def draw_seed() -> int:
    """A fresh seed for runs that did not set one (it is logged and written to config.yaml)."""
    return secrets.randbelow(2**31 - 1)


def seed_everything(seed: int) -> int:
    """Seed python, numpy and torch (all devices); returns the seed used."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    return seed


def epoch_generator(seed: int, epoch: int, stream: int = 0) -> torch.Generator:
    """A generator that depends only on (seed, epoch, stream).

    Data order is drawn from it, so the order of epoch e is the same whether the run went
    straight through or was resumed at e (exact resume without storing sampler state).
    """
    generator = torch.Generator()
    generator.manual_seed((seed * 1_000_003 + epoch * 7919 + stream) % (2**63 - 1))
    return generator


def capture_rng_state() -> dict:
    """Global RNG states as plain types and tensors (loadable with weights_only=True)."""
    np_state = np.random.get_state()
    state = {
        "python": _to_plain(random.getstate()),
        "numpy": [np_state[0], torch.from_numpy(np_state[1].copy()), *np_state[2:]],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict) -> None:
    random.setstate(_to_tuple(state["python"]))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _to_plain(value):
    if isinstance(value, tuple):
        return [_to_plain(v) for v in value]
    return value


def _to_tuple(value):
    if isinstance(value, list):
        return tuple(_to_tuple(v) for v in value)
    return value
