"""Operator launches and host reads of a piece of code, counted on the CPU.

``python tools/bench.py launches`` counts a UGNCL training step and an evaluation with it.
Every ATen operator that is not a view is one kernel launch on CUDA (a few fused ones launch
more, a few CPU-only ones none), so counting them under a ``TorchDispatchMode`` on the CPU
gives the launches of a step without a GPU. Host reads (``item``/``int``/``float`` of a
tensor, ``nonzero``, boolean-mask indexing) are listed by call site: on CUDA each read of a
device tensor makes the host wait for the device; reads of host bookkeeping (caption
lengths, which a batch keeps on the CPU) do not.
"""

from __future__ import annotations

import traceback
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

REPO = Path(__file__).resolve().parents[3]
HOST_READ_OPS = frozenset({"_local_scalar_dense", "nonzero", "masked_select", "is_nonzero"})
INDEX_OPS = frozenset({"index", "index_put", "index_put_", "_index_put_impl_"})


class OpCounter(TorchDispatchMode):
    """Counts non-view ATen operators (``launches``) and host reads by repository call site."""

    def __init__(self) -> None:
        super().__init__()
        self.launches = 0
        self.by_op: Counter[str] = Counter()
        self.host_reads: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: Any = None):
        name = func.overloadpacket.__name__
        if not (func.is_view or name in ("detach", "alias", "lift_fresh")):
            self.launches += 1
            self.by_op[name] += 1
        if name in HOST_READ_OPS or (name in INDEX_OPS and _bool_index(args)):
            self.host_reads[f"{name} at {_call_site()}"] += 1
        return func(*args, **(kwargs or {}))


def _bool_index(args: tuple) -> bool:
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(t, torch.Tensor) and t.dtype == torch.bool for t in indices or ())


def _call_site() -> str:
    """The innermost frame of this repository that is not this module (file:line function)."""
    for frame in reversed(traceback.extract_stack()):
        path = Path(frame.filename)
        if path == Path(__file__) or REPO not in path.parents or ".venv" in path.parts:
            continue
        return f"{path.relative_to(REPO)}:{frame.lineno} {frame.name}"
    return "outside the repository"


def count(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, OpCounter]:
    """``fn(*args, **kwargs)`` under a fresh :class:`OpCounter`; returns (result, counter)."""
    counter = OpCounter()
    with counter:
        out = fn(*args, **kwargs)
    return out, counter
