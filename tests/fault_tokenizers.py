"""Char tokenizers that fail or stall on purpose, to test what a broken run leaves behind.
Used through the real CLI: tokenizer._target_=fault_tokenizers.FailingCharTokenizer"""

from __future__ import annotations

import time

from corpusprep.sources import ReadOptions, Source, input_files
from corpusprep.tokenizers.byte import ByteTokenizer
from corpusprep.tokenizers.char import CharTokenizer
from corpusprep.tokenizers.tiktoken import TiktokenTokenizer

_calls = 0  # per process: each task gets a fresh unpickled tokenizer


class FailingCharTokenizer(CharTokenizer):
    """Raises after n encoded pieces in a process: a crash halfway through writing."""

    def __init__(self, fail_after: int = 3, **kwargs) -> None:
        super().__init__(**kwargs)
        self.fail_after = fail_after

    def encode_pieces(self, pieces):
        global _calls
        for ids in super().encode_pieces(pieces):
            _calls += 1
            if _calls > self.fail_after:
                raise RuntimeError("injected failure while encoding")
            yield ids


class SlowCharTokenizer(CharTokenizer):
    """Sleeps before every piece, so a test can interrupt the run while it writes."""

    def __init__(self, delay: float = 0.05, **kwargs) -> None:
        super().__init__(**kwargs)
        self.delay = delay

    def encode_pieces(self, pieces):
        for ids in super().encode_pieces(pieces):
            time.sleep(self.delay)
            yield ids


class StallCharTokenizer(SlowCharTokenizer):
    """Slow, and stalls for as long as the file named by $CP_TEST_STALL exists: read where
    the task runs, not a setting, so that a re-run without it is the same run (a resume)
    whose tasks go on, while an earlier run's tasks stay stalled until cancelled."""

    def encode_pieces(self, pieces):
        import os

        flag = os.environ.get("CP_TEST_STALL")
        for ids in super().encode_pieces(pieces):
            while flag and os.path.exists(flag):
                time.sleep(0.1)
            yield ids


class CrashOnceCharTokenizer(CharTokenizer):
    """Kills its worker process (no exception, no cleanup) the first time anything is
    encoded, once per `flag` file: a worker or node dying mid-shard."""

    def __init__(self, flag: str = "", **kwargs) -> None:
        super().__init__(**kwargs)
        self.flag = flag

    def encode_pieces(self, pieces):
        import os

        if self.flag and not os.path.exists(self.flag):
            open(self.flag, "w").close()
            os._exit(3)
        yield from super().encode_pieces(pieces)


class KilledInFitCharTokenizer(CharTokenizer):
    """The run's own process killed (SIGKILL, as the kernel's OOM killer does) while it
    learns the vocabulary, where `split` is `kill_at`: one job of a sweep dying; once the
    file `wait_for` exists, if given (another job's manifest: a launcher that runs jobs side
    by side may stop the others with a dying one, as joblib's loky does)."""

    def __init__(self, split: float = 0.0, kill_at: float = -1.0, wait_for: str = "",
                 **kwargs) -> None:  # fmt: skip
        super().__init__(**kwargs)
        self.split, self.kill_at, self.wait_for = float(split), float(kill_at), wait_for

    def fit(self, charset, eot=False, **kwargs):
        import os
        import signal

        if self.split == self.kill_at:
            deadline = time.monotonic() + 60
            while self.wait_for and not os.path.exists(self.wait_for):
                assert time.monotonic() < deadline, f"{self.wait_for} never came"
                time.sleep(0.05)
            os.kill(os.getpid(), signal.SIGKILL)
        return super().fit(charset, eot, **kwargs)


class CrashOnTextCharTokenizer(CharTokenizer):
    """Kills its worker process whenever it is to encode a text holding `poison`: a shard
    that takes its worker down every time (memory, a crash in native code)."""

    def __init__(self, poison: str = "", **kwargs) -> None:
        super().__init__(**kwargs)
        self.poison = poison

    def encode_pieces(self, pieces):
        import os

        for piece in pieces:
            if self.poison and self.poison in piece:
                os._exit(3)
            yield from super().encode_pieces([piece])


class FailOnceCharTokenizer(CrashOnceCharTokenizer):
    """Raises (a bug, not an input error) the first time, once per `flag` file."""

    def encode_pieces(self, pieces):
        import os

        if self.flag and not os.path.exists(self.flag):
            open(self.flag, "w").close()
            raise RuntimeError("injected failure, once")
        yield from CharTokenizer.encode_pieces(self, pieces)


class _FailWhileFlag:
    """Raises after n encoded pieces in a process while the file `flag` exists (every
    retry too): a run that dies halfway, which the same config resumes once the flag is
    gone."""

    def __init__(self, flag: str = "", fail_after: int = 3, **kwargs) -> None:
        super().__init__(**kwargs)
        self.flag = flag
        self.fail_after = fail_after

    def encode_pieces(self, pieces):
        import os

        global _calls
        for ids in super().encode_pieces(pieces):
            _calls += 1
            if _calls > self.fail_after and os.path.exists(self.flag):
                raise RuntimeError("injected failure while encoding")
            yield ids


class FailWhileFlagCharTokenizer(_FailWhileFlag, CharTokenizer):
    """_FailWhileFlag's failure on the char tokenizer."""


class FailWhileFlagByteTokenizer(_FailWhileFlag, ByteTokenizer):
    """_FailWhileFlag's failure on the byte tokenizer, which learns nothing: a run of
    documents that has no scan pass (split_by=document), only the encode pass."""

    def __init__(self, flag: str = "", fail_after: int = 3, **unused) -> None:
        super().__init__(flag, fail_after)  # (named on char's config: its keys go unused)


class CrashLaterTiktokenTokenizer(TiktokenTokenizer):
    """GPT-2 that kills its worker after `after` documents in a process, once per `flag`
    file: a worker dying while the other has a run of shards to report."""

    def __init__(self, flag: str = "", after: int = 40, **kwargs) -> None:
        super().__init__(**kwargs)
        self.flag, self.after = flag, after

    def encode(self, text):
        import os

        global _calls
        _calls += 1
        if self.flag and _calls > self.after and not os.path.exists(self.flag):
            open(self.flag, "w").close()
            os._exit(3)
        return super().encode(text)


class OutOfMemoryCharTokenizer(CharTokenizer):
    """Runs out of memory on every piece, as a worker does that holds too much at once."""

    def encode_pieces(self, pieces):
        for _ in super().encode_pieces(pieces):
            raise MemoryError(419430396)
        yield from ()


class CharInPiecesTokenizer(CharTokenizer):
    """Char, as slow as a BPE to the plan: a Parquet row group or a compressed file bigger
    than a shard is cut into pieces, which the workers take in runs and read on through."""

    fast = False


class OwnInitSource(Source):
    """A plugin's source, written against the abstract methods alone: its own __init__,
    without Source's (which a plugin need not call)."""

    def __init__(self, path: str, **options) -> None:
        self.path, self.read = path, ReadOptions(**options)

    def files(self, progress: bool = True):
        return input_files([self.path], self.read)

    def describe(self):
        return {"kind": "own", "path": self.path}
