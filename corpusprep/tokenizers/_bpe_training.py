"""rustbpe's training in a process of its own, which the driver waits on (bpe.py's fit).

rustbpe lets go of the GIL while it counts the sample's pieces, but holds it for its whole
merge loop (seconds to minutes on a big sample), and Python runs a signal's handler only
in a thread holding the GIL: in the driver, a Ctrl-C or SIGTERM waited for the training
to end. Waiting on a pipe instead, the driver acts on it at once and kills this process.

This file runs as a script (stdlib and rustbpe only: it starts in 0.04 s). The driver
sends on its stdin the vocabulary size, the pattern, then the sample in batches, each
`<QQ` (units, bytes), each unit's length in characters (`<Q`) and the units' UTF-8. It
answers on stdout with one letter: K and the tokens by rank (`<Q` count, then each `<Q`
length and bytes); R and the message of rustbpe's ValueError (a pattern that does not
compile); P and the first line of a panic (the regex engine's backtrack limit).
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import struct
import subprocess
import sys
import tempfile
import threading
from array import array
from collections.abc import Iterator, Sequence
from typing import IO, BinaryIO

BATCH_CHARS = 1 << 22  # characters per batch sent: a few MB held on each side at a time
_U64 = struct.Struct("<Q")
_BATCH = struct.Struct("<QQ")
# runs this file by its path, not as `-m`: corpusprep (numpy: 0.16 s) is never imported,
# and neither its folder (tiktoken.py, hf.py...) nor the working folder is on sys.path,
# which is the driver's (PYTHONPATH): rustbpe is found where the driver found it. (The
# working folder is sys.path[0], "", unless PYTHONSAFEPATH is set: then [0] is PYTHONPATH's)
_BOOT = ("import sys; sys.path[:1] = filter(None, sys.path[:1]); del sys.argv[0]; "
         "import runpy; runpy.run_path(sys.argv[0], run_name='__main__')")  # fmt: skip


class Refused(Exception):
    """rustbpe refused the pattern (kind "regex") or its regex engine panicked ("panic")."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class Died(Exception):
    """The training process ended without an answer: `signal` killed it, or it failed."""

    def __init__(self, signal: int, said: str) -> None:
        super().__init__(said)
        self.signal = signal


def train(units: Sequence[str], vocab_size: int, pattern: str) -> list[bytes]:
    """The tokens of rustbpe's vocabulary trained on `units`, by rank (256 bytes, then the
    merges). A Ctrl-C or SIGTERM in this thread kills the training and is raised here."""
    with tempfile.TemporaryFile() as said:  # its stderr: a crash's last words
        child = subprocess.Popen(
            [sys.executable, "-c", _BOOT, __file__, str(os.getpid())],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=said,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
        )  # fmt: skip
        stdin, stdout = child.stdin, child.stdout
        assert stdin is not None and stdout is not None  # (both are pipes)
        try:
            try:
                _send(stdin, units, vocab_size, pattern)
                stdin.close()
            except BrokenPipeError:  # it stopped reading: its answer says why
                pass
            answer = stdout.read()
            child.wait()
        except BaseException:  # a Ctrl-C or SIGTERM: the training stops now
            child.kill()
            child.wait()
            raise
        finally:
            for pipe in (stdin, stdout):
                with contextlib.suppress(OSError):  # a write it never read: nothing to flush to
                    pipe.close()
        if not answer:
            said.seek(0)
            last = said.read().decode(errors="replace").strip().splitlines()
            raise Died(-child.returncode if child.returncode < 0 else 0,
                       last[-1] if last else f"exit code {child.returncode}")  # fmt: skip
    return _answer(answer)


def _send(stream: IO[bytes], units: Sequence[str], vocab_size: int, pattern: str) -> None:
    stream.write(_U64.pack(vocab_size) + _framed(pattern.encode()))
    batch: list[str] = []
    chars = 0
    for unit in units:
        batch.append(unit)
        chars += len(unit)
        if chars >= BATCH_CHARS:
            _send_batch(stream, batch)
            batch, chars = [], 0
    if batch:
        _send_batch(stream, batch)
    stream.write(_BATCH.pack(0, 0))


def _send_batch(stream: IO[bytes], batch: list[str]) -> None:
    data = "".join(batch).encode()
    stream.write(_BATCH.pack(len(batch), len(data)))
    stream.write(array("Q", map(len, batch)).tobytes())
    stream.write(data)


def _framed(data: bytes) -> bytes:
    return _U64.pack(len(data)) + data


def _answer(answer: bytes) -> list[bytes]:
    kind, body = answer[:1], answer[1:]
    if kind in (b"R", b"P"):
        raise Refused("regex" if kind == b"R" else "panic", body.decode(errors="replace"))
    tokens = []
    try:
        (count,), at = _U64.unpack_from(body), _U64.size
        for _ in range(count):
            (size,) = _U64.unpack_from(body, at)
            at += _U64.size
            tokens.append(body[at : at + size])
            at += size
    except struct.error:
        at = -1
    if kind != b"K" or at != len(body):
        raise Died(0, f"an answer cut short or garbled ({len(answer)} bytes)")
    return tokens


# --- the training process ---------------------------------------------------------------


def _read(stream: BinaryIO, size: int) -> bytes:
    data = stream.read(size)
    if len(data) != size:  # the driver ended: nothing to train for
        os._exit(1)
    return data


def _units(stream: BinaryIO) -> Iterator[str]:
    """The sample's units, as rustbpe takes them: the next batch is read and decoded in a
    thread meanwhile, while rustbpe counts the last one (it lets go of the GIL then)."""
    batches: queue.Queue = queue.Queue(maxsize=2)
    threading.Thread(target=_read_batches, args=(stream, batches), daemon=True).start()
    while (batch := batches.get()) is not None:
        text, lengths = batch
        at = 0
        for length in lengths:
            yield text[at : at + length]
            at += length


def _read_batches(stream: BinaryIO, batches: queue.Queue) -> None:
    while True:
        count, size = _BATCH.unpack(_read(stream, _BATCH.size))
        if count == 0:
            batches.put(None)
            return
        lengths = array("Q")
        lengths.frombytes(_read(stream, 8 * count))
        batches.put((_read(stream, size).decode(), lengths))


def _serve(parent: int) -> None:
    # a terminal's Ctrl-C reaches the whole process group: the driver kills this process
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):  # and it ends with the driver, even a SIGKILLed one
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the driver died before that was set
        os._exit(1)
    import rustbpe

    stream, out = sys.stdin.buffer, sys.stdout.buffer
    (vocab_size,) = _U64.unpack(_read(stream, _U64.size))
    (size,) = _U64.unpack(_read(stream, _U64.size))
    pattern = _read(stream, size).decode()
    trainer = rustbpe.Tokenizer()
    try:
        trainer.train_from_iterator(_units(stream), vocab_size, pattern=pattern)
    except ValueError as e:  # the pattern does not compile
        out.write(b"R" + str(e).encode())
        return
    except BaseException as e:  # pyo3's PanicException (a BaseException)
        if type(e).__name__ != "PanicException":
            raise
        out.write(b"P" + ((str(e).splitlines() or ["a panic"])[0][:200]).encode())
        return
    tokens = [token for token, _ in sorted(trainer.get_mergeable_ranks(), key=lambda p: p[1])]
    out.write(b"K" + _U64.pack(len(tokens)) + b"".join(_framed(bytes(t)) for t in tokens))


if __name__ == "__main__":
    _serve(int(sys.argv[1]))
