"""Dropout and BatchNorm that, on one rank's rows of a global batch, act as on the whole batch.

Several processes that train one global batch (each rank encodes rows ``[offset, offset + n)``)
differ from one process in two places of SGRAF: dropout draws each rank's masks on its own
rows, and BatchNorm normalises by the rank's rows. While a :class:`BatchShard` is active
(:func:`batch_shard`, set by the distributed forward around one global batch),

* :class:`ShardDropout` draws the mask of the *global* input from the default generator (every
  rank's generator is the one a single process has: the same seed, the same draws) and keeps
  its own rows, so each row gets the mask it gets in one process;
* :class:`ShardBatchNorm1d` sums its batch statistics over the group with autograd (the
  gradient through the shared mean and variance reaches every rank's rows), which on gloo
  replaces ``SyncBatchNorm`` (CUDA only); SAF's masked BatchNorm over a rank's image rows of
  the score matrix sums its statistics the same way (:func:`sum_over_shards`).

Without a shard (one process, evaluation, or an input that is already the global batch) both
run ``nn.Dropout``'s and ``nn.BatchNorm1d``'s own code, so one-process numbers are unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.nn import functional as F


@dataclass(frozen=True)
class BatchShard:
    """This rank's rows of the global batch.

    Attributes:
        offset: first global row of this rank's micro-batch.
        global_rows: rows of the global batch (B).
        group: the process group whose ranks hold the other rows (``None``: the default).
    """

    offset: int
    global_rows: int
    group: Any = None


_ACTIVE: BatchShard | None = None


def current_shard() -> BatchShard | None:
    """The active shard, or ``None`` (one process, or outside a distributed forward)."""
    return _ACTIVE


@contextmanager
def batch_shard(shard: BatchShard | None) -> Iterator[None]:
    """Make ``shard`` the active shard for the block (``None``: no shard)."""
    global _ACTIVE
    previous, _ACTIVE = _ACTIVE, shard
    try:
        yield
    finally:
        _ACTIVE = previous


def _local_rows(x: Tensor, shard: BatchShard | None) -> bool:
    """True when ``x`` holds a micro-batch (fewer rows than the shard's global batch)."""
    return shard is not None and x.dim() > 0 and x.shape[0] < shard.global_rows


def global_shape(x: Tensor, shard: BatchShard) -> list[int]:
    """The global input's shape: ``global_rows`` rows, other dims the largest rank's (caption
    word features are padded to each rank's longest caption, the global batch to its own)."""
    rest = torch.tensor(x.shape[1:], dtype=torch.int64)
    if dist.get_backend(shard.group) == "nccl":
        rest = rest.to(x.device)
    dist.all_reduce(rest, op=dist.ReduceOp.MAX, group=shard.group)
    return [shard.global_rows, *rest.tolist()]


def shard_dropout_mask(x: Tensor, p: float, shard: BatchShard) -> Tensor:
    """This rank's part of the global input's dropout mask, scaled by 1 / (1 - p).

    The mask is ``F.dropout`` of ones of the global shape: the same kernel, generator draws
    and scaling as one process's dropout of the global input (``x * mask`` is bit for bit its
    output on these rows), then rows ``[offset, offset + n)`` and the leading part of every
    other dim.
    """
    ones = torch.ones(global_shape(x, shard), dtype=x.dtype, device=x.device)
    noise = F.dropout(ones, p, training=True)
    index = (slice(shard.offset, shard.offset + x.shape[0]), *(slice(0, n) for n in x.shape[1:]))
    return noise[index]


class ShardDropout(nn.Dropout):
    """``nn.Dropout`` whose mask, on a rank's rows of a global batch, is the global batch's."""

    def forward(self, x: Tensor) -> Tensor:
        shard = current_shard()
        if not self.training or self.p == 0.0 or not _local_rows(x, shard) or x.numel() == 0:
            return super().forward(x)
        return x * shard_dropout_mask(x, self.p, shard)


class _AllReduceSum(torch.autograd.Function):
    """Sum over the group; backward sums every rank's gradient (as SyncBatchNorm's does): each
    rank's rows use the shared sum, so its gradient is the sum of all ranks' parts."""

    @staticmethod
    def forward(ctx: Any, tensor: Tensor, group: Any) -> Tensor:
        ctx.group = group
        out = tensor.detach().clone().contiguous()
        dist.all_reduce(out, group=group)
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


def _all_reduce_sum(t: Tensor, group: Any) -> Tensor:
    return _AllReduceSum.apply(t, group)


def sum_over_shards(t: Tensor) -> Tensor:
    """``t`` summed over the active shard's ranks, with autograd; ``t`` itself without one."""
    shard = current_shard()
    return t if shard is None else _all_reduce_sum(t, shard.group)


def holds_rows(n: int) -> bool:
    """True while a shard is active and ``n`` rows are a rank's part of its global batch."""
    shard = current_shard()
    return shard is not None and n < shard.global_rows


class ShardBatchNorm1d(nn.BatchNorm1d):
    """``nn.BatchNorm1d`` whose training statistics, on a rank's rows of a global batch, are
    the global batch's: per-channel sums, then centred squares, summed over the group."""

    def forward(self, x: Tensor) -> Tensor:
        shard = current_shard()
        if not self.training or not _local_rows(x, shard):
            return super().forward(x)
        self._check_input_dim(x)
        # (B, C) or (B, C, L): statistics over every dim but the channels (dim 1), summed in
        # float64 as ATen's CPU batch norm accumulates them.
        dims = [0] if x.dim() == 2 else [0, 2]
        wide = x.to(torch.float64)
        count = float(x.numel() // x.shape[1])
        count = float(_all_reduce_sum(torch.tensor(count, dtype=torch.float64, device=x.device),
                                      shard.group))  # fmt: skip
        mean = _all_reduce_sum(wide.sum(dim=dims), shard.group) / count
        shape = [1, -1] + [1] * (x.dim() - 2)
        var = _all_reduce_sum((wide - mean.view(shape)).square().sum(dim=dims), shard.group)
        var = var / count
        if self.track_running_stats:
            self._update_running_stats(mean.detach(), var.detach() * count / max(count - 1, 1))
        invstd = torch.rsqrt(var + self.eps).to(x.dtype)
        out = (x - mean.to(x.dtype).view(shape)) * invstd.view(shape)
        if self.affine:
            out = out * self.weight.view(shape) + self.bias.view(shape)
        return out

    @torch.no_grad()
    def _update_running_stats(self, mean: Tensor, unbiased_var: Tensor) -> None:
        """``nn.BatchNorm1d``'s update: exponential with ``momentum``, cumulative without."""
        self.num_batches_tracked.add_(1)
        factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        self.running_mean.mul_(1 - factor).add_(factor * mean.to(self.running_mean.dtype))
        self.running_var.mul_(1 - factor).add_(factor * unbiased_var.to(self.running_var.dtype))


__all__ = [
    "BatchShard",
    "ShardBatchNorm1d",
    "ShardDropout",
    "batch_shard",
    "current_shard",
    "global_shape",
    "holds_rows",
    "shard_dropout_mask",
    "sum_over_shards",
]
