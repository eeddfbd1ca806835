"""Keep freed CPU memory in the process so a training step does not page-fault afresh.

glibc serves large allocations with fresh mmap pages and hands free memory at the top of its
heap back to the kernel once it exceeds the trim threshold; both thresholds adapt at run
time, the trim threshold to twice the largest chunk freed so far (tens of MB here). An SGRAF
training step frees hundreds of MB of activations at once in its backward pass, so the next
step maps and faults on the same memory again: 2,500-13,700 minor page faults in a step whose
longest caption has 21-28 tokens (the attention products grow with it), at most a few
hundred in steps of 14-20 tokens (1-thread `ugncl_synthetic`, a throwaway counter around
``Trainer._train_step``). Fixed thresholds keep those pages mapped. The values computed do
not change, only where their memory comes from: a whole `ugncl_synthetic` run (1 thread,
beside a second one on the other core) took 6 min 10 s instead of 6 min 52 s with the same
test rSum (docs/research/2026-ugncl-synthetic.md).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

__all__ = ["keep_freed_memory"]

# mallopt parameter numbers from glibc's <malloc.h>.
_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3

MIB = 1 << 20


def keep_freed_memory(
    mmap_threshold: int = 32 * MIB, trim_threshold: int = 1024 * MIB, top_pad: int = 64 * MIB
) -> bool:
    """Set glibc's malloc thresholds for this process; False where there is no glibc mallopt.

    Args:
        mmap_threshold: allocations up to this many bytes come from the heap, not fresh
            mmap pages (glibc's maximum on 64-bit is 32 MiB).
        trim_threshold: free heap memory kept before any is returned to the kernel.
        top_pad: extra bytes requested whenever the heap grows.
    """
    if not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c") or "libc.so.6"
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):  # no libc by that name, or a libc without mallopt (musl)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    settings = ((_M_MMAP_THRESHOLD, mmap_threshold), (_M_TRIM_THRESHOLD, trim_threshold),
                (_M_TOP_PAD, top_pad))  # fmt: skip
    return all(mallopt(param, value) == 1 for param, value in settings)
