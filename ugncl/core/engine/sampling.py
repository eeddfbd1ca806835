"""The order of an epoch: a pure function of (seed, epoch, stream), optionally of a subset.

Exact resume needs no sampler state, and the same order can later be sharded across ranks
(rank r takes batches ``r::world``). :func:`training_batches` cuts an epoch into the training
loop's batches at either epoch length of :data:`EPOCH_LENGTHS`.
"""

from __future__ import annotations

import numpy as np
import torch

from ugncl.core.engine.seed import epoch_generator

#: ``train.epoch_length``: ``samples`` (one pass over the epoch's samples) or ``full`` (as
#: many batches as one pass over every training sample); see :func:`training_batches`.
EPOCH_LENGTHS: tuple[str, ...] = ("samples", "full")


def epoch_order(
    num_samples: int, seed: int, epoch: int, stream: int = 0, indices: np.ndarray | None = None
) -> list[int]:
    """Sample indices of one epoch in a seeded order.

    A subset (``indices``) keeps its samples in the order they take in the full permutation,
    so restricting an epoch does not reshuffle the samples it keeps.
    """
    return _restricted(epoch_generator(seed, epoch, stream), num_samples, indices)


def _repeat_generator(seed: int, epoch: int, stream: int, repeat: int) -> torch.Generator:
    """The generator of pass ``repeat`` >= 1 over an epoch's samples: a function of (seed,
    epoch, stream, repeat) alone, hashed through numpy's SeedSequence: unlike
    :func:`~ugncl.core.engine.seed.epoch_generator`'s linear mix (pass 0's), a pass number
    cannot land on another epoch's or stream's seed."""
    state = np.random.SeedSequence((seed, epoch, stream, repeat)).generate_state(1, np.uint64)
    generator = torch.Generator()
    generator.manual_seed(int(state[0]) % (2**63 - 1))
    return generator


def _restricted(
    generator: torch.Generator, num_samples: int, indices: np.ndarray | None
) -> list[int]:
    """A permutation of ``num_samples`` drawn from ``generator``, restricted to ``indices``."""
    order = torch.randperm(num_samples, generator=generator)
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


def training_batches(
    num_samples: int,
    batch_size: int,
    seed: int,
    epoch: int,
    stream: int = 0,
    indices: np.ndarray | None = None,
    *,
    length: str = "samples",
) -> list[list[int]]:
    """The global training batches of one epoch (lists of sample indices, tails dropped).

    ``samples``: one pass over the epoch's samples (``indices``; None: all of them), i.e.
    :func:`epoch_order` cut into batches of ``batch_size``. ``full``: an epoch of
    ``num_samples // batch_size`` batches, the count of a pass over every sample, whatever
    ``indices`` keeps: after that first pass come further passes over the same samples, pass
    p >= 1 in the order of a generator of (seed, epoch, stream, p), until the count is reached
    (the last pass cut short). Each pass is cut into batches on its own, its incomplete tail
    dropped, so that no batch holds a sample twice (a duplicate would be its own in-batch
    negative); the dropped tails differ from pass to pass, so the kept samples are visited
    about equally often. Everything is a function of (seed, epoch, stream) and the subset:
    resume needs no sampler state and ranks shard the same list.

    A subset holding every sample gives the same batches at both lengths; a subset smaller
    than one batch gives no batch at either (the trainer refuses such an epoch).
    """
    if length not in EPOCH_LENGTHS:
        raise ValueError(f"unknown epoch length {length!r}; use one of {EPOCH_LENGTHS}")
    order = epoch_order(num_samples, seed, epoch, stream, indices)
    batches = batch_indices(order, batch_size, drop_last=True)
    if length == "samples" or not batches:
        return batches
    target = num_samples // batch_size
    kept = None if indices is None else np.asarray(order, dtype=np.int64)
    repeat = 1
    while len(batches) < target:
        again = _restricted(_repeat_generator(seed, epoch, stream, repeat), num_samples, kept)
        batches += batch_indices(again, batch_size, drop_last=True)
        repeat += 1
    return batches[:target]
