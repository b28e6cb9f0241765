"""The process's heap, on glibc: give freed memory back to the system, keep it in one arena,
and read the resident size. Elsewhere each of these does nothing (returns 0).

Why: LibCST's native parser peaks at ~350 bytes per source byte (torch 2.13.0's
distributed_test.py, 462 KB: ~160 MB, of which the tree it returns keeps ~16 MB) and frees it
all when the tree is built, but glibc keeps freed heap pages mapped. Without a trim a process
holds its largest parse's peak, and the peaks of parses of different sizes add up as
fragments. The parse runs on a thread of its own (:func:`accumlint.source.parsing.parse_module`);
with a second arena for that thread, the heap the other thread freed (the ``ast`` stage
before it) is not reused (speed set, two cores: the worker of that file peaked at 220 MB PSS
with two arenas, 201 MB with one).
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any

#: The most memory (bytes) a worker may hold: past it, the check of its file gets ``ACC000``
#: (:func:`accumlint.run.pool.out_of_memory`). LibCST's memory grows with the square of an
#: expression's depth: a 60 KB chain of ``2**`` or of conditional expressions takes it past 4 GB.
#: (Here, in the leaf both the pool and the engine's estimate read.)
MEMORY_LIMIT = 2**30

#: glibc's ``mallopt`` parameter for the most arenas (malloc.h: ``M_ARENA_MAX``)
_M_ARENA_MAX = -8


@functools.cache
def _libc() -> Any | None:
    """The C library this process runs on, where it is glibc's (has ``malloc_trim``), else None."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        libc.malloc_trim  # noqa: B018 - musl and others lack it
        libc.mallopt  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


def trim() -> int:
    """Give the freed heap back to the system (``malloc_trim(0)``): 1 when memory was released."""
    libc = _libc()
    return int(libc.malloc_trim(0)) if libc is not None else 0


@functools.cache
def one_arena() -> int:
    """Make every thread allocate from the main arena from now on (``mallopt(M_ARENA_MAX, 1)``):
    1 on success. Call it before starting threads that allocate much; the threads of a
    process here never allocate at the same time for long (the parser thread runs while the
    thread that asked for the parse waits), so there is no contention to lose."""
    libc = _libc()
    return int(libc.mallopt(_M_ARENA_MAX, 1)) if libc is not None else 0


def resident() -> int:
    """The resident set size of this process in bytes (Linux ``/proc/self/statm``); 0 elsewhere."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0
