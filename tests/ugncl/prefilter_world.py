"""A planted world for the pre-filter's tests: captions that name their image's words, and a
``fetch`` over it as the trainer's."""

from __future__ import annotations

import numpy as np
import torch

from ugncl.core.data import PairBatch

N_IMG, CPI, WORDS, DIM = 300, 5, 100, 64


def planted_world(noise: float, seed: int = 0):
    """Images whose pooled feature is the sum of their caption words' directions plus noise;
    each of the 5 captions names 3 of the image's 4 words; ``noise`` of the captions are
    re-paired with a random other image.

    Returns ``(captions, pooled (I, D), image_index (N,), clean (N,))``."""
    rng = np.random.default_rng(seed)
    directions = rng.normal(size=(WORDS, DIM))
    words = np.stack([rng.choice(WORDS, 4, replace=False) for _ in range(N_IMG)])
    pooled = directions[words].sum(1) + rng.normal(scale=0.5, size=(N_IMG, DIM))
    captions = [
        rng.choice(words[i], 3, replace=False) + 1 for i in range(N_IMG) for _ in range(CPI)
    ]  # ids from 1: 0 is padding
    truth = np.arange(N_IMG * CPI) // CPI
    image_index = truth.copy()
    moved = rng.random(len(truth)) < noise
    image_index[moved] = (truth[moved] + rng.integers(1, N_IMG, moved.sum())) % N_IMG
    return captions, pooled.astype(np.float32), image_index, image_index == truth


def fake_fetch(images: torch.Tensor, captions: list[list[int]], image_index: np.ndarray):
    def fetch(indices: np.ndarray) -> PairBatch:
        indices = np.asarray(indices)
        longest = max(len(captions[k]) for k in indices)
        tokens = torch.zeros(len(indices), longest, dtype=torch.long)
        for row, k in enumerate(indices):
            tokens[row, : len(captions[k])] = torch.tensor(captions[k])
        return PairBatch(
            images=images[image_index[indices]],
            captions=tokens,
            lengths=torch.tensor([len(captions[k]) for k in indices]),
            index=torch.as_tensor(indices),
            image_index=torch.as_tensor(image_index[indices]),
            clean=torch.ones(len(indices), dtype=torch.bool),
        )

    return fetch
