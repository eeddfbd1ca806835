"""The precomputed-region track behind :mod:`ugncl.core.data`: a split's pairs and its ranking
data."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from precomputed.collate import pad_captions
from precomputed.dataset import PairDataset, PrecomputedSplit
from ugncl.core.data import PairBatch, SplitTrainingData

__all__ = [
    "PrecomputedTrainingData",
    "collate_pairs",
]


def collate_pairs(items: Sequence[tuple]) -> PairBatch:
    """Collate :class:`~precomputed.dataset.PairDataset` items; keeps the item order."""
    feats, ids, index, image_index, clean = zip(*items)
    captions, lengths = pad_captions(ids)
    return PairBatch(
        images=torch.from_numpy(np.stack(feats).astype(np.float32, copy=False)),
        captions=captions,
        lengths=lengths,
        index=torch.tensor(index, dtype=torch.int64),
        image_index=torch.tensor(image_index, dtype=torch.int64),
        clean=torch.tensor(clean, dtype=torch.bool),
    )


class PrecomputedTrainingData(SplitTrainingData):
    """:class:`~ugncl.core.data.TrainingData` over an opened (noisy) precomputed split."""

    def __init__(self, split: PrecomputedSplit) -> None:
        self.split = split
        self.dataset = PairDataset(split)
        self.collate = collate_pairs
