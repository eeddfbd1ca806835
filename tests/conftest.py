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


@pytest.fixture
def keep_threads():
    """Give the next tests their torch thread count back (a run's ``train.threads`` sets it for
    the whole process). Modules that train use it: ``pytest.mark.usefixtures("keep_threads")``."""
    import torch

    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def write_tiny_clip_world(root: Path, num_train: int, image_size: int = 32) -> Path:
    """A tiny synthetic world (features 36 x 64, 50% noise file) with its scenes rendered as
    ``image_size`` px images for the CLIP track; returns ``root``."""
    from precomputed.synthetic import make_synthetic
    from precomputed.synthetic.render import write_clip_images

    make_synthetic(root, num_train=num_train, num_dev=6, num_test=6, seed=0, feature_dim=64,
                   noise_ratios=(0.5,))  # fmt: skip
    write_clip_images(root, size=image_size)
    return root


def tiny_run_argv(world: Path, out: Path, name: str, *extra: str) -> list[str]:
    """``tools/train.py`` arguments of a one-epoch triplet run on the tiny world (the CPU-sized
    model, batch 16, seed 0, one thread) into ``out/name``; ``extra`` overrides come last."""
    return ["--cfg", "triplet_synthetic", "--set", f"data.root={world}", "data.noise_ratio=0.5",
            "data.dev_images=12", "data.train_images=null", f"run.out_dir={out}",
            f"run.name={name}", "train.batch_size=16", "train.eval_batch_size=12",
            "train.seed=0", "train.threads=1", "train.warmup_epochs=0", "train.epochs=1",
            *TINY_MODEL, *extra]  # fmt: skip
