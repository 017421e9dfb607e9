"""A worker gives the memory a task freed back to the system before the next task (issue 13:
memory flat from 50 MB to 1 GB). glibc keeps freed heap blocks below a live one; over 120
shards of a 1 GB text each worker grew by 12 MB. Linux (glibc) only."""

from __future__ import annotations

import sys

import pytest

from corpusprep import executors
from corpusprep.executors.local import LocalExecutor


def _glibc() -> bool:
    import ctypes

    try:
        return sys.platform.startswith("linux") and bool(ctypes.CDLL(None).malloc_trim)
    except (AttributeError, OSError):
        return False


pytestmark = pytest.mark.skipif(not _glibc(), reason="malloc_trim is glibc's")

MB = 1 << 20
_pins: list[bytearray] = []  # blocks that stay alive between the freed ones


def _rss_anon() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no RssAnon")


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
    monkeypatch.setattr(executors, "_malloc_trim", False)
    with LocalExecutor(workers=1) as executor:
        held = list(executor.map(_fragmenting_task, list(range(3))))
    assert held[1] - held[0] > 40 * MB, [h // MB for h in held]
