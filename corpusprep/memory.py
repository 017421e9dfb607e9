"""How much memory a process keeps: what its allocators hand back to the system, and
when. Workers free nearly all that a task made, but the allocators keep it for the next
task by default, and each worker's peak then counts every worker's largest blocks."""

from __future__ import annotations

import os
import sys
from typing import Any, Optional

MMAP_THRESHOLD = 2 << 20  # a block this big or bigger is mapped on its own: given back when freed


def lean_allocation() -> None:
    """This process is corpusprep's own (the command line's, or one of its workers): its
    allocators may be set for corpusprep's sake (a library's caller, and the workers it
    runs tasks on, keep their own settings). pyarrow's buffers come from the C allocator
    (lean_heap), not mimalloc, which keeps what it freed: set before pyarrow is imported,
    as its C++ code reads it once (formats/parquet.py sets pyarrow's Python-level pool
    itself). Not if the user chose otherwise."""
    global _ours
    _ours = os.getpid()
    if "pyarrow" not in sys.modules:
        os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")


def is_ours() -> bool:
    """Whether lean_allocation was called in this process."""
    return _ours == os.getpid()


def lean_heap() -> None:
    """In a process of corpusprep's own (lean_allocation) that reads Parquet: glibc maps a
    block of MMAP_THRESHOLD or more on its own and unmaps it when freed. By default glibc
    raises that threshold to the largest block freed (up to 32 MB), and then such blocks
    come from a heap that keeps the pages freed, and each worker holds the largest pages
    it decoded (16 MB each where texts are 16 KB). 100 MB of Parquet on 2 workers: 387 MB
    (PSS, whole tree) against 275 MB with this and lean_allocation; the same time. Not
    for other input: char's blocks of a few MB each, faulted in afresh every time, cost it
    a tenth of its time. Not if the user set glibc's MALLOC_MMAP_THRESHOLD_ (or its
    tunable; a trim threshold of the user's is kept too)."""
    global _lean
    if _lean == os.getpid() or not is_ours():  # (a forked worker: once _Guarded says so)
        return
    _lean = os.getpid()
    libc = _glibc()
    if libc is not None and not _chosen("MALLOC_MMAP_THRESHOLD_", "mmap_threshold"):
        M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # (malloc.h)
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        if not _chosen("MALLOC_TRIM_THRESHOLD_", "trim_threshold"):
            libc.mallopt(M_TRIM_THRESHOLD, 2 * MMAP_THRESHOLD)  # what glibc's own rule sets


def _chosen(variable: str, tunable: str) -> bool:
    """Whether the user gave glibc this setting: as its MALLOC_*_ variable, or as a tunable
    (GLIBC_TUNABLES=glibc.malloc.NAME=VALUE:...)."""
    tunables = os.environ.get("GLIBC_TUNABLES", "").split(":")
    return variable in os.environ or any(t.startswith(f"glibc.malloc.{tunable}=") for t in tunables)


_ours: Optional[int] = None  # the process lean_allocation was called in
_lean: Optional[int] = None  # the process lean_heap set up


def _glibc() -> Any:
    """glibc's functions (None elsewhere)."""
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        libc.mallopt, libc.malloc_trim  # noqa: B018 (not glibc: missing)
        return libc
    except (AttributeError, OSError, TypeError):  # (Windows: no CDLL(None), a TypeError)
        return None


_heap: Any = None  # _GlibcHeap once looked up; False: not glibc
KEEP_FREE = 0.2  # of a worker's resident memory: free heap it keeps for its next task...
KEEP_FREE_MAX = 16 << 20  # ... and never more: a big process (workers=1 runs in the driver)


def release_freed_memory() -> None:
    """Give the heap's free pages back to the system after a task (glibc's malloc_trim)
    once more than KEEP_FREE of the worker's memory (at most KEEP_FREE_MAX) is free heap.
    A task frees nearly all it made, but glibc keeps the freed blocks, and over 120 shards
    of a 1 GB text each worker grew by 12 MB (bench/bench_scale.py). Not after every task:
    the next one takes those pages again, and faulting them back in cost a 50 MB BPE run
    with splintr a tenth of its encode time (9 MB free of a 61 MB worker after each 1 MB
    shard), where the char tokenizer's workers at times keep 13 MB free of 43. A no-op
    elsewhere."""
    global _heap
    if _heap is None:
        _heap = _GlibcHeap.load() or False
    if not _heap:
        return
    free = _heap.free()  # /proc is read only when the cap does not decide alone
    if free > KEEP_FREE_MAX or free > KEEP_FREE * _heap.resident():
        _heap.trim(0)


class _GlibcHeap:
    """glibc's malloc_trim, and the heap's free bytes (mallinfo2's fordblks: glibc 2.33
    on; before it, free() reports everything free, so the heap is trimmed after every
    task), against the process's resident memory (Linux's /proc/self/statm)."""

    FIELDS = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"

    def __init__(self, trim: Any, mallinfo2: Any) -> None:
        self.trim, self._mallinfo2 = trim, mallinfo2
        self._page = os.sysconf("SC_PAGE_SIZE")

    @classmethod
    def load(cls) -> Optional[_GlibcHeap]:
        import ctypes

        libc = _glibc()
        if libc is None:
            return None
        trim = libc.malloc_trim
        try:
            mallinfo2 = libc.mallinfo2
        except AttributeError:
            return cls(trim, None)

        class Mallinfo2(ctypes.Structure):
            _fields_ = [(name, ctypes.c_size_t) for name in cls.FIELDS.split()]

        mallinfo2.restype = Mallinfo2
        return cls(trim, mallinfo2)

    def free(self) -> float:
        return float("inf") if self._mallinfo2 is None else self._mallinfo2().fordblks

    def resident(self) -> int:
        try:
            with open("/proc/self/statm", "rb") as statm:
                return int(statm.read().split()[1]) * self._page
        except (OSError, IndexError, ValueError):  # no /proc: trimmed after every task
            return 0
