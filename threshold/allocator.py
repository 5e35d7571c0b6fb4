"""The C allocator told to keep freed memory for the next array, not hand it back at once.

A decision of the search builds and drops arrays of 1-30 MB by the thousand. glibc's malloc
serves each one above its threshold (128 kB at first, moved up to the largest freed so far)
with a fresh ``mmap`` and returns it with ``munmap`` when numpy frees it, and it gives the top
of its heap back to the system whenever more than its trim threshold lies free there (128 kB at
first, then twice the mmap threshold). Either way, the next array's pages are new to the
process: the kernel zeroes each one on its first touch, a page fault every 4 kB. Measured on
480 decisions and 10 cold reads of the benchmark's saved studies (docs/search-benchmark-passes.md,
"The allocator keeps freed memory"): 2.9 million page faults and 62 + 11 CPU s with the
defaults, 74 thousand and 53 + 1 s with the settings below, the same decisions to the last digit.

Arrays up to ``MMAP_THRESHOLD`` come from the heap, and up to ``TRIM_THRESHOLD`` of free heap
is kept for them: a process holds on to about its largest working set, as it would at its
peak anyway.
"""

from __future__ import annotations

import ctypes
import sys

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "keep_freed_memory"]

MMAP_THRESHOLD = 32 * 2**20  # glibc's largest on 64-bit systems
TRIM_THRESHOLD = 2**30
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters (malloc.h)


def keep_freed_memory() -> bool:
    """Set glibc's mmap and trim thresholds for this process; whether it could (False where
    the C library is not glibc, as on macOS or musl: nothing changes there)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # no mallopt: not glibc
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
