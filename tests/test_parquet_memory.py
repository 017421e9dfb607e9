"""A process that reads Parquet gives back the pages it decoded (issue 13: memory < 300 MB
on the Parquet benchmarks, where it was 312 and 387 MB). pyarrow decodes a page whole, and
pyarrow's write_table puts 1,024 texts in a page: 16 MB where texts are 16 KB. mimalloc,
pyarrow's default allocator for its own buffers, kept them, and so did glibc's heap once
its mmap threshold had risen to their size. Linux (glibc) only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from corpusprep import memory
from corpusprep.executors.local import LocalExecutor

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or memory._glibc() is None, reason="mallopt is glibc's"
)
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

MB = 1 << 20
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def big_pages(tmp_path_factory) -> Path:
    """2,048 texts of 16 KB as write_table writes them: one row group, 16 MB pages."""
    path = tmp_path_factory.mktemp("big_pages") / "docs.parquet"
    texts = [f"{i} " + "lorem ipsum dolor sit amet " * 600 for i in range(2048)]
    pq.write_table(pa.table({"text": texts}), path)
    assert pq.ParquetFile(path).metadata.num_row_groups == 1
    return path


READ = """
import json, os, sys
if sys.argv[2] == "ours":
    from corpusprep.memory import lean_allocation
    lean_allocation()
from corpusprep.formats import InputFile, Segment
from corpusprep.formats.parquet import FORMAT

def held():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("RssAnon:"))

path = sys.argv[1]
file = InputFile(path=path, format="parquet", size=os.path.getsize(path))
pieces = FORMAT.plan(file, 1 << 20, None, pieces=True)
before, peak = held(), 0
for start, end, size in pieces:
    for part in FORMAT.parts(Segment(file, start, end, size)):
        peak = max(peak, held())
FORMAT.let_go()
print(json.dumps({"pieces": len(pieces), "peak": peak - before, "after": held() - before}))
"""


def _unchosen() -> dict:
    """This environment without a user's choice of pyarrow's or glibc's allocator."""
    chosen = ("ARROW_DEFAULT_MEMORY_POOL", "MALLOC_MMAP_THRESHOLD_")
    return {k: v for k, v in os.environ.items() if k not in chosen}


def _read(path: Path, process: str) -> dict:
    """Every piece of the file read in a fresh Python ("ours": set up as corpusprep's own
    process; "caller's": as a library's caller's), and what the reading left it holding."""
    env = {**_unchosen(), "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", READ, str(path), process], env=env,
                         capture_output=True, text=True, check=True)  # fmt: skip
    return json.loads(out.stdout)


def test_a_process_of_ours_gives_back_the_pages_it_read(big_pages):
    read = _read(big_pages, "ours")
    assert read["pieces"] > 1  # the row group in pieces, read on through
    assert read["after"] < 16 * MB, read  # no page kept (each is 16 MB)
    assert read["peak"] < 80 * MB, read


def test_a_callers_process_keeps_its_allocators_and_they_keep_the_pages(big_pages):
    """The check above can fail: with pyarrow's and glibc's defaults the pages stay (and a
    library's caller keeps those defaults)."""
    read = _read(big_pages, "caller's")
    assert read["after"] > 48 * MB, read


def _peak_of_command(path: Path, out: Path, env: dict) -> int:
    """The peak resident memory of `python -m corpusprep` char-encoding the file (one
    process: a small input is read in the driver), from a fresh parent's children."""
    command = [sys.executable, "-m", "corpusprep", "source=file", f"source.path={path}",
               "tokenizer=char", f"out_dir={out}", "quiet=true"]  # fmt: skip
    measure = (
        "import resource, subprocess, sys\n"
        f"subprocess.run({command!r}, check=True)\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    env = {**env, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", measure], env=env, cwd=out.parent,
                          capture_output=True, text=True, check=True)  # fmt: skip
    return int(done.stdout.split()[-1]) * 1024


def test_the_command_line_reads_parquet_in_less_memory(big_pages, tmp_path):
    """The command line sets up its processes; a user's own choice (glibc's and pyarrow's
    environment variables, here as their defaults behave) is kept, and costs memory."""
    env = _unchosen()
    lean = _peak_of_command(big_pages, tmp_path / "lean", env)
    chosen = {
        **env,
        "ARROW_DEFAULT_MEMORY_POOL": "mimalloc",
        "MALLOC_MMAP_THRESHOLD_": str(32 * MB),
    }
    kept = _peak_of_command(big_pages, tmp_path / "kept", chosen)
    assert (tmp_path / "lean" / "train.bin").read_bytes() == (
        tmp_path / "kept" / "train.bin"
    ).read_bytes()
    assert lean < kept - 16 * MB, (lean // MB, kept // MB)  # (about 170 against 200 MB)


class _Libc:
    """glibc's mallopt, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def mallopt(self, option: int, value: int) -> int:
        self.calls.append((option, value))
        return 1


@pytest.fixture
def libc(monkeypatch) -> _Libc:
    fake = _Libc()
    monkeypatch.setattr(memory, "_glibc", lambda: fake)
    monkeypatch.setattr(memory, "_lean", None)
    for chosen in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES"):
        monkeypatch.delenv(chosen, raising=False)
    return fake


def test_lean_heap_fixes_glibcs_thresholds_once_in_a_process_of_ours(libc, monkeypatch):
    monkeypatch.setattr(memory, "_ours", os.getpid())
    memory.lean_heap()
    memory.lean_heap()
    assert libc.calls == [(-3, memory.MMAP_THRESHOLD), (-1, 2 * memory.MMAP_THRESHOLD)]


def test_lean_heap_leaves_a_callers_process_and_a_users_choice_alone(libc, monkeypatch):
    monkeypatch.setattr(memory, "_ours", None)  # a library's caller's process
    memory.lean_heap()
    assert libc.calls == []
    monkeypatch.setattr(memory, "_ours", os.getpid())
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", str(MB))  # the user's choice
    memory.lean_heap()
    assert libc.calls == []


@pytest.mark.parametrize(
    ("variable", "value", "kept"),
    [
        ("GLIBC_TUNABLES", f"glibc.malloc.mmap_threshold={MB}", []),  # glibc's own spelling
        ("GLIBC_TUNABLES", f"glibc.malloc.arena_max=2:glibc.malloc.trim_threshold={MB}",
         [(-3, memory.MMAP_THRESHOLD)]),
        ("MALLOC_TRIM_THRESHOLD_", str(MB), [(-3, memory.MMAP_THRESHOLD)]),
        ("GLIBC_TUNABLES", "glibc.malloc.arena_max=2", None),  # (not a threshold: set)
    ],
)  # fmt: skip
def test_lean_heap_keeps_the_users_glibc_thresholds_however_set(libc, monkeypatch, variable,
                                                                value, kept):  # fmt: skip
    """A threshold the user gave glibc (as a MALLOC_* variable or as a tunable) stays."""
    monkeypatch.setattr(memory, "_ours", os.getpid())
    monkeypatch.setenv(variable, value)
    memory.lean_heap()
    every = [(-3, memory.MMAP_THRESHOLD), (-1, 2 * memory.MMAP_THRESHOLD)]
    assert libc.calls == (every if kept is None else kept)


@pytest.mark.parametrize("chosen", [None, "mimalloc"])
def test_pyarrow_allocates_with_the_c_allocator_unless_the_user_chose(chosen):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("ARROW_DEFAULT_MEMORY_POOL", None)
    if chosen:
        env["ARROW_DEFAULT_MEMORY_POOL"] = chosen
    code = ("from corpusprep.memory import lean_allocation; lean_allocation(); "
            "import pyarrow; print(pyarrow.default_memory_pool().backend_name)")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True)  # fmt: skip
    assert out.stdout.split() == [chosen or "system"]


def _is_ours(_: int) -> bool:
    return memory.is_ours()


def test_the_command_lines_workers_are_ours_and_a_library_callers_are_not(monkeypatch):
    monkeypatch.setattr(memory, "_ours", os.getpid())  # the command line's process
    with LocalExecutor(workers=2) as executor:
        assert list(executor.map(_is_ours, [0, 1, 2])) == [True] * 3
    monkeypatch.setattr(memory, "_ours", None)  # a library's caller's: its workers (its
    with LocalExecutor(workers=2) as executor:  # own Ray workers too) keep its allocators
        assert list(executor.map(_is_ours, [0, 1, 2])) == [False] * 3
    with LocalExecutor(workers=1) as executor:  # in the caller's process
        assert list(executor.map(_is_ours, [0])) == [False]
