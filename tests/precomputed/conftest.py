"""Fixtures: a tiny split in the exact SCAN/NCR layout, written into tmp_path."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from precomputed.vocab import build_vocab

WORDS = ["dog", "cat", "man", "red", "blue", "ball", "runs", "sits", "on", "grass"]


def tiny_captions(num_images: int, cpi: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [
        f"a {' '.join(rng.choice(WORDS, size=3))} number {i} ." for i in range(num_images * cpi)
    ]


@pytest.fixture
def make_split(tmp_path):
    """Factory writing ``<tmp>/<name>/{split}_ims.npy|h5 + {split}_caps.txt|tsv``; returns root."""

    def _make(
        name: str = "toy_precomp",
        split: str = "train",
        num_images: int = 8,
        cpi: int = 5,
        regions: int = 4,
        dim: int = 6,
        fmt: str = "npy",
        caps: str = "txt",
        captions: list[str] | None = None,
    ) -> Path:
        folder = tmp_path / "data" / name
        folder.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(1)
        feats = rng.random((num_images, regions, dim), dtype=np.float32)
        feats[:, 0, 0] = np.arange(num_images)  # image id readable from the features
        if fmt == "npy":
            np.save(folder / f"{split}_ims.npy", feats)
        else:
            import h5py

            with h5py.File(folder / f"{split}_ims.h5", "w") as f:
                f.create_dataset("features", data=feats)
        texts = captions if captions is not None else tiny_captions(num_images, cpi)
        if caps == "txt":
            (folder / f"{split}_caps.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
        else:
            lines = [f"{k // cpi}_{k}\t{t}" for k, t in enumerate(texts)]
            (folder / f"{split}_caps.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
        return tmp_path / "data"

    return _make


@pytest.fixture
def toy_vocab():
    return build_vocab(tiny_captions(8, 5), min_count=1)
