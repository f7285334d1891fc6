"""Keep freed CPU memory for reuse: glibc malloc settings for training on the CPU.

PyTorch on the CPU allocates every activation and gradient with malloc. glibc serves blocks
above its mmap threshold (at most 32 MiB by default) with a fresh mmap and returns them with
munmap on free, so each large tensor of every step page-faults its memory in again, and the
kernel zeroes it first. A rollout-heavy GRPO step (64 rows x 280 tokens, activations of ~50 MB)
spends a large share of its time there: its element-wise ops ran 5-10x slower than the same ops
on reused memory. Raising the mmap and trim thresholds keeps freed blocks in the heap, so the
next step's tensors land on pages that are already mapped. The cost is that the process holds
on to its peak heap instead of returning it between steps (PyTorch's CUDA allocator does the
same on a GPU). Measured in docs/benchmarks.md.

It changes the whole process, so the trainer applies it only when it trains on the CPU, and does
nothing where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3
_KEEP = 1 << 30  # 1 GiB: blocks below this come from (and go back to) the heap
_TOP_PAD = 64 << 20  # grow the heap in 64 MiB steps


@functools.cache
def keep_freed_memory() -> bool:
    """Apply the settings once per process; True when they took effect."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to tune
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return all(
        mallopt(param, value) == 1
        for param, value in (
            (_M_MMAP_THRESHOLD, _KEEP),
            (_M_TRIM_THRESHOLD, 2 * _KEEP),
            (_M_TOP_PAD, _TOP_PAD),
        )
    )
