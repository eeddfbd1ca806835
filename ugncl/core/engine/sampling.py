"""The order of an epoch: a pure function of (seed, epoch, stream), optionally of a subset.

Exact resume needs no sampler state, and the same order can later be sharded across ranks
(rank r takes batches ``r::world``).
"""

from __future__ import annotations

import numpy as np
import torch

from ugncl.core.engine.seed import epoch_generator


def epoch_order(
    num_samples: int, seed: int, epoch: int, stream: int = 0, indices: np.ndarray | None = None
) -> list[int]:
    """Sample indices of one epoch in a seeded order.

    A subset (``indices``) keeps its samples in the order they take in the full permutation,
    so restricting an epoch does not reshuffle the samples it keeps.
    """
    order = torch.randperm(num_samples, generator=epoch_generator(seed, epoch, stream))
    if indices is None:
        return order.tolist()
    keep = np.zeros(num_samples, dtype=bool)
    keep[np.asarray(indices, dtype=np.int64)] = True
    return order[torch.from_numpy(keep)[order]].tolist()


def batch_indices(order: list[int], batch_size: int, *, drop_last: bool) -> list[list[int]]:
    """Cut an order into batches.

    With ``drop_last`` the incomplete tail is dropped (training: BatchNorm needs > 1 sample);
    otherwise a tail shorter than half a batch joins the previous batch so every sample is
    visited in a batch of comparable size (whole-set passes such as UGNCL's division).
    """
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    if batches and len(batches[-1]) < batch_size:
        if drop_last:
            batches.pop()
        elif len(batches) > 1 and len(batches[-1]) < batch_size // 2:
            batches[-2].extend(batches.pop())
    return batches
