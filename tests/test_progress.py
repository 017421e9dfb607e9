"""Progress bars (issue 12): on a terminal, every stage that can take long shows a bar
naming it (scan, encode, merge, shuffle, write ...) that advances and finishes; nothing
when stderr is not a terminal or with quiet=true; the same bytes either way. The real CLI
runs under a pseudo-terminal (pty) for stderr, as a user's shell gives it."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from helpers import REPO, run_cli

from corpusprep import writer

ROWS, COLS = 40, 200  # a pty starts at 0x0, where tqdm draws nothing: size it as a terminal


def run_on_terminal(*args: str, cwd: Path, env: dict | None = None, timeout: float = 120):
    """`python -m corpusprep ARGS` with stderr on a pty: (exit code, what the terminal
    showed, stdout)."""
    full_env = {**os.environ, **(env or {})}
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), full_env.get("PYTHONPATH")]))
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
    command = [sys.executable, "-m", "corpusprep", *args]
    proc = subprocess.Popen(command, cwd=cwd, env=full_env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=slave)  # fmt: skip
    os.close(slave)
    shown, deadline = b"", time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if not select.select([master], [], [], 1)[0]:
                continue
            try:
                chunk = os.read(master, 1 << 16)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            shown += chunk
        stdout, _ = proc.communicate(timeout=max(deadline - time.monotonic(), 1))
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, shown.decode("utf-8", "replace"), stdout.decode()


def bars(shown: str) -> list[str]:
    """Every state of the bars the terminal was shown, in order (tqdm redraws with \\r)."""
    return [line.strip() for line in shown.split("\r") if line.strip()]


def started_and_finished(shown: str, desc: str) -> None:
    """A bar named desc was drawn at 0% and drawn full before it was cleared."""
    states = [b for b in bars(shown) if b.startswith(f"{desc}:")]
    assert any(s.startswith(f"{desc}:   0%") for s in states), (desc, bars(shown))
    assert any(s.startswith(f"{desc}: 100%") for s in states), (desc, bars(shown))


def outputs(folder: Path) -> dict[str, bytes]:
    """Every file a run left, but the manifest (it holds timings)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != "manifest.json"}  # fmt: skip


@pytest.fixture
def documents(tmp_path: Path) -> Path:
    """300 JSONL documents, about 62 kB: with shard_bytes=20000, four shards; about
    13,000 gpt2 tokens, enough for both sides to get no warning with split=0.5."""
    path = tmp_path / "docs.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for i in range(300):
            text = f"Document {i}: " + "the quick brown fox jumps over the lazy dog. " * (1 + i % 7)
            f.write(json.dumps({"text": text}) + "\n")
    return path


def gpt2_run(documents: Path, *extra: str) -> list[str]:
    sized = any(e.startswith("val_size=") for e in extra)  # val_size alone sizes val: no split
    return ["source=file", f"source.path={documents}", "tokenizer=tiktoken",
            *([] if sized else ["split=0.5"]), "shard_bytes=20000", *extra]  # fmt: skip


def same_without_terminal(tmp_path: Path, args: list[str], on_terminal: Path) -> None:
    """The run with plain pipes prints no bar at all and writes the same bytes."""
    piped = tmp_path / "piped"
    result = run_cli(*args, f"out_dir={piped}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert outputs(piped) == outputs(on_terminal)


def test_char_in_place_shows_scan_and_encode_to_the_end(tmp_path, seeded_cache):
    # one shard, written in place: the encode bar still finishes (it showed only 0%)
    args = ["dataset=shakespeare_char"]
    out = tmp_path / "tty"
    code, shown, stdout = run_on_terminal(*args, f"out_dir={out}", cwd=tmp_path)
    assert code == 0, shown
    started_and_finished(shown, "scan")
    started_and_finished(shown, "encode")
    assert "shakespeare_char" in stdout  # the summary still goes to stdout
    same_without_terminal(tmp_path, args, out)


def test_documents_show_every_stage(tmp_path, documents, tiktoken_cache):
    args = gpt2_run(documents)
    out = tmp_path / "tty"
    code, shown, _ = run_on_terminal(*args, f"out_dir={out}", cwd=tmp_path)
    assert code == 0, shown
    # documents: one pass (no scan), each document sent to its side after the encode
    for desc in ("encode", "split train.bin / val.bin"):
        started_and_finished(shown, desc)
    assert not any(b.startswith("scan:") for b in bars(shown))
    assert any("4/4 shards" in b for b in bars(shown) if b.startswith("encode:"))
    same_without_terminal(tmp_path, args, out)


def test_bars_advance_in_the_middle(tmp_path, documents, tiktoken_cache):
    # tqdm draws at most every 0.1 s: at every step here, to see each step of the work
    args = gpt2_run(documents, f"out_dir={tmp_path / 'tty'}")
    code, shown, _ = run_on_terminal(*args, cwd=tmp_path, env={"TQDM_MININTERVAL": "0"})
    assert code == 0, shown
    for desc in ("encode", "split train.bin / val.bin"):
        middle = [b for b in bars(shown) if b.startswith(f"{desc}:")
                  and not b.startswith((f"{desc}:   0%", f"{desc}: 100%"))]  # fmt: skip
        assert middle, (desc, bars(shown))
    assert any("2/4 shards" in b for b in bars(shown) if b.startswith("encode:"))


@pytest.mark.parametrize(
    "extra, stages",
    [
        (["order=shuffle"], ["split train.bin / val.bin", "shuffle train.bin", "shuffle val.bin"]),
        (["split_by=head", "val_size=5000"], ["merge train.bin", "write train.bin"]),
        (["split_by=tail", "val_size=5000"], ["merge train.bin", "write val.bin"]),
    ],
)
def test_shuffle_and_head_tail_show_their_writes(tmp_path, documents, tiktoken_cache, extra,
                                                 stages):  # fmt: skip
    args = gpt2_run(documents, *extra)
    out = tmp_path / "tty"
    code, shown, _ = run_on_terminal(*args, f"out_dir={out}", cwd=tmp_path)
    assert code == 0, shown
    for desc in ("encode", *stages):
        assert any(b.startswith(f"{desc}:") for b in bars(shown)), (desc, bars(shown))
    assert any(b.startswith(f"{stages[-1]}: 100%") for b in bars(shown)), bars(shown)
    same_without_terminal(tmp_path, args, out)


@pytest.mark.parametrize(
    "fmt, written",
    [
        ("llmc", ["write docs_val_000000.bin", "write docs_train_000001.bin"]),
        ("megatron", ["write docs_train_text_document.idx", "write docs_val_text_document.idx"]),
    ],
)
def test_exporters_show_the_files_they_write(tmp_path, documents, tiktoken_cache, fmt, written):
    args = gpt2_run(documents, f"format={fmt}")
    out = tmp_path / "tty"
    code, shown, _ = run_on_terminal(*args, f"out_dir={out}", cwd=tmp_path)
    assert code == 0, shown
    for desc in ("encode", "split train.bin / val.bin", *written):
        assert any(b.startswith(f"{desc}:") for b in bars(shown)), (desc, bars(shown))
    assert any(b.startswith(f"{written[-1]}: 100%") for b in bars(shown)), bars(shown)
    same_without_terminal(tmp_path, args, out)
    # quiet=true on the same terminal: no bar at all, and the same bytes
    quiet = tmp_path / "quiet"
    code, shown, _ = run_on_terminal(*args, "quiet=true", f"out_dir={quiet}", cwd=tmp_path)
    assert code == 0, shown
    assert shown == ""
    assert outputs(quiet) == outputs(out)


def test_copy_range_reports_every_step(tmp_path, monkeypatch):
    # a long copy (16 MiB steps) moves its bar at every step, not once at the end
    monkeypatch.setattr(writer, "COPY_BYTES", 4)
    (tmp_path / "src").write_bytes(bytes(range(20)))
    steps: list[int] = []
    with open(tmp_path / "src", "rb") as src, open(tmp_path / "dst", "wb") as dst:
        writer.copy_range(src, dst, 3, 14, steps.append)
    assert steps == [4, 4, 4, 2]
    assert (tmp_path / "dst").read_bytes() == bytes(range(3, 17))
