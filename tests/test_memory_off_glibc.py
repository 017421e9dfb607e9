"""Where there is no glibc, the heap is left as it is and nothing fails: a task's end
(release_freed_memory) and a Parquet read in a process of corpusprep's own (lean_heap)."""

from __future__ import annotations

import ctypes
import os

from corpusprep import memory

_CDLL = ctypes.CDLL


def _windows_cdll(name, *args, **kwargs):
    """ctypes.CDLL on Windows: no handle for the process itself (CDLL(None) does `'/' in
    name` before any loading)."""
    if name is None:
        raise TypeError("argument of type 'NoneType' is not iterable")
    return _CDLL(name, *args, **kwargs)


def test_without_glibc_the_heap_is_left_alone(monkeypatch):
    monkeypatch.setattr(ctypes, "CDLL", _windows_cdll)
    monkeypatch.setattr(memory, "_heap", None)
    monkeypatch.setattr(memory, "_lean", None)
    monkeypatch.setattr(memory, "_ours", os.getpid())
    assert memory._glibc() is None
    memory.release_freed_memory()  # after every task
    memory.lean_heap()  # as a Parquet file is read
    assert memory._heap is False
