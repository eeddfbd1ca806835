"""Shared fixtures: a tiny synthetic world in the SCAN/NCR layout and loading of tools/*.py."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]

# A CPU-sized model for end-to-end runs on the tiny world (sizes only; the maths is the paper's).
TINY_MODEL = [
    "model.sgraf.word_dim=16",
    "model.sgraf.embed_dim=32",
    "model.sgraf.sim_dim=16",
    "model.sgraf.img_dim=64",
    "model.sgraf.num_regions=36",
]


@pytest.fixture(scope="session")
def tiny_model() -> list[str]:
    """Config overrides for the CPU-sized model used by end-to-end tests."""
    return list(TINY_MODEL)


@pytest.fixture(scope="session")
def tool():
    """``tool("train")`` imports ``tools/train.py`` so a test can call its ``main(argv)``."""
    return load_tool


def load_tool(name: str) -> ModuleType:
    """Import ``tools/<name>.py`` as a module so tests can call its ``main(argv)``."""
    spec = importlib.util.spec_from_file_location(f"tools_{name}", REPO / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def tiny_world(tmp_path_factory) -> Path:
    """A tiny synthetic world (features 36 x 64) written once per test session."""
    from precomputed.synthetic import make_synthetic

    root = tmp_path_factory.mktemp("world")
    make_synthetic(root, num_train=48, num_dev=12, num_test=12, seed=0, feature_dim=64)
    return root
