"""A worker gives the memory a task freed back to the system before the next task (issue 13:
memory flat from 50 MB to 1 GB). glibc keeps freed heap blocks below a live one; over 120
shards of a 1 GB text each worker grew by 12 MB. Linux (glibc) only."""

from __future__ import annotations

import sys

import pytest

from corpusprep import executors, memory
from corpusprep.executors.local import LocalExecutor


def _glibc() -> bool:
    return sys.platform.startswith("linux") and memory._glibc() is not None


pytestmark = pytest.mark.skipif(not _glibc(), reason="malloc_trim is glibc's")


@pytest.fixture(autouse=True)
def _clean_heap():
    """Each test starts on a trimmed heap: the tests an xdist worker ran before may have
    left free heap, which the first task's reading would count (and a task would reuse)."""
    import ctypes

    ctypes.CDLL(None).malloc_trim(0)


MB = 1 << 20
_pins: list[bytearray] = []  # blocks that stay alive between the freed ones


def _proc_bytes(path: str, field: str) -> int:
    """A "Field: N kB" line of a /proc file of this process, in bytes."""
    with open(path) as f:
        for line in f:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in {path}")


def _rss_anon() -> int:
    return _proc_bytes("/proc/self/status", "RssAnon")


def _fragmenting_task(_: int) -> int:
    """Allocates 64 MB in 60 KB blocks (under glibc's mmap threshold: from the heap), keeps
    every 100th alive and frees the rest (the holes cannot merge back into the heap's top);
    returns the memory held at its start."""
    held = _rss_anon()
    blocks = [bytearray(60_000) for _ in range(64 * MB // 60_000)]
    _pins.extend(blocks[::100])
    del blocks
    return held


@pytest.mark.parametrize("workers", [1, 2])
def test_memory_freed_by_a_task_goes_back_before_the_next(workers):
    with LocalExecutor(workers=workers) as executor:
        held = list(executor.map(_fragmenting_task, list(range(8))))
    # each worker's later tasks start where its first one did, not 64 MB higher each time
    assert max(held) - min(held) < 24 * MB, [h // MB for h in held]


def test_without_the_trim_the_memory_stays(monkeypatch):
    """The check above can fail: in one process without the trim, the freed blocks stay."""
    monkeypatch.setattr(memory, "_heap", False)
    with LocalExecutor(workers=1) as executor:
        held = list(executor.map(_fragmenting_task, list(range(3))))
    assert held[1] - held[0] > 40 * MB, [h // MB for h in held]


_inherited: list[list[int]] = []  # the driver's objects that forked workers inherit


def _private_dirty() -> int:
    return _proc_bytes("/proc/self/smaps_rollup", "Private_Dirty")


def _collect_task(_: int) -> tuple[int, int]:
    """A full collection in the worker: (its frozen objects, the pages it copied meanwhile)."""
    import gc

    before = _private_dirty()
    gc.collect()
    return gc.get_freeze_count(), _private_dirty() - before


def _pages_a_workers_collection_copies() -> tuple[int, int]:
    _inherited[:] = [[i] for i in range(300_000)]  # ~30 MB of objects the collector walks
    try:
        with LocalExecutor(workers=2, start_method="fork") as executor:
            (frozen, copied), _ = executor.map(_collect_task, [0, 1])
    finally:
        _inherited.clear()
    return frozen, copied


def test_a_workers_collections_leave_the_drivers_pages_shared():
    """The driver freezes its objects before forking: a worker's collections never walk
    them, so never write to (copy) the pages it shares with the driver."""
    import gc

    frozen, copied = _pages_a_workers_collection_copies()
    assert frozen >= 300_000 and copied < 4 * MB, (frozen, copied // MB)
    assert gc.get_freeze_count() == 0  # once the pool is closed, all collectable again


def test_without_the_freeze_a_workers_collection_copies_them(monkeypatch):
    """The check above can fail: unfrozen, one collection copies most of those pages."""
    import gc

    monkeypatch.setattr(gc, "freeze", lambda: None)
    frozen, copied = _pages_a_workers_collection_copies()
    assert frozen == 0 and copied > 12 * MB, (frozen, copied // MB)


class _FakeHeap:
    """The free heap and resident memory a task leaves, and the trims asked for."""

    def __init__(self, free: float, resident: int) -> None:
        self.free, self.resident = (lambda: free), (lambda: resident)
        self.trims: list[int] = []

    def trim(self, pad: int) -> None:
        self.trims.append(pad)


@pytest.mark.parametrize(
    ("free", "resident", "trimmed"),
    [(9 * MB, 61 * MB, False), (13 * MB, 43 * MB, True), (0, 43 * MB, False),
     (float("inf"), 61 * MB, True), (64 * MB, 500 * MB, True)],
    ids=["bpe-churn-kept", "char-surplus-trimmed", "nothing-free", "glibc-before-2.33",
         "big-process-capped"],
)  # fmt: skip
def test_a_worker_keeps_a_fifth_of_its_memory_free_for_the_next_task(
    monkeypatch, free, resident, trimmed
):
    """Trimmed only once more than KEEP_FREE of the worker's memory is free heap (and never
    more than KEEP_FREE_MAX): the splintr worker's 9 MB of each 1 MB shard (of 61 MB) stays
    for the next shard instead of being faulted back in; 13 MB left free by a char worker
    of 43 MB goes back, and so do 64 MB in a 500 MB process (workers=1 runs in the driver)."""
    heap = _FakeHeap(free, resident)
    monkeypatch.setattr(memory, "_heap", heap)
    memory.release_freed_memory()
    assert heap.trims == ([0] if trimmed else [])


def test_glibc_reports_the_heaps_free_bytes_and_the_resident_memory():
    """mallinfo2 is read as glibc lays it out: 64 MB freed in holes shows as free, and
    resident memory as /proc/self/status says it."""
    heap = memory._GlibcHeap.load()
    assert heap is not None
    if heap.free() == float("inf"):
        pytest.skip("glibc before 2.33: no mallinfo2 (trimmed after every task)")
    blocks = [bytearray(60_000) for _ in range(64 * MB // 60_000)]
    pins = blocks[::100]
    before = heap.free()
    del blocks
    assert heap.free() - before > 48 * MB
    assert abs(heap.resident() - _proc_bytes("/proc/self/status", "VmRSS")) < 4 * MB
    del pins
    heap.trim(0)


def test_a_run_keeps_its_freed_heap_between_its_pieces_and_gives_it_back_after(monkeypatch):
    """A run's shards are consecutive pieces of one file: each takes again what the one
    before freed, so the heap is not trimmed between them (87 Parquet pieces faulted
    173,000 pages against 57,000), only after the run, as after any task."""
    from corpusprep import shards
    from corpusprep.shards import ShardRun

    heap = _FakeHeap(float("inf"), 61 * MB)  # as much free as can be: any check trims
    monkeypatch.setattr(memory, "_heap", heap)
    encoded = []

    def encode_shard(task):
        encoded.append((task, len(heap.trims)))  # the trims before each piece
        return task

    monkeypatch.setattr(shards, "encode_shard", encode_shard)
    run = ShardRun(("piece 0", "piece 1", "piece 2"))
    assert executors._Guarded(shards.encode_run)(run) == list(run.tasks)
    assert encoded == [("piece 0", 0), ("piece 1", 0), ("piece 2", 0)]
    assert heap.trims == [0]  # once, after the run
