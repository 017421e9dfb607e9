"""The work done on one shard (a byte range of the input), as pure functions.

Two passes, as nanoGPT needs the whole text before it can number characters or split:
  scan_shard    count characters and collect the distinct ones (also checks the UTF-8);
  encode_shard  encode the shard's text and write its ids where the plan says.
Any executor (local processes today) runs these; results come back in plan order, so
the output never depends on how many workers there were or which finished first.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import groupby
from operator import itemgetter
from typing import Optional

import numpy as np

from corpusprep.text import decode, read_raw, read_text
from corpusprep.tokenizers import Tokenizer
from corpusprep.writer import start_writeback


@dataclass(frozen=True)
class Shard:
    index: int
    path: str
    start: int  # byte range [start, end) of the file
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class ScanResult:
    chars: int  # characters after newline translation, as len(open().read()) counts them
    charset: str  # every distinct character, sorted


def scan_shard(shard: Shard) -> ScanResult:
    chars = 0
    seen: set[str] = set()
    known = b"\r"  # ASCII bytes already seen; "\r" never reaches the text (it becomes "\n")
    for offset, raw in read_raw(shard.path, shard.start, shard.end):
        has_cr = b"\r" in raw  # a one-byte search is a fast memchr; most text has no "\r"
        if raw.isascii():  # valid UTF-8 already; count without decoding
            chars += len(raw) - (raw.count(b"\r\n") if has_cr else 0)  # "\r\n" is one char
        else:
            chars += len(decode(raw, shard.path, offset))  # checks the UTF-8
        if has_cr:
            seen.add("\n")
        # Drop the ASCII bytes already seen (bytes.translate runs at GB/s); whatever is left
        # is new ASCII or non-ASCII text, usually a few bytes, and goes through a set.
        rest = raw.translate(None, known)
        if rest:
            seen.update(rest.decode("utf-8"))
            known = b"\r" + bytes(sorted(ord(c) for c in seen if c.isascii()))
    return ScanResult(chars=chars, charset="".join(sorted(seen)))


@dataclass(frozen=True)
class Target:
    """Where one side (train or val) of a shard goes: a file and the token position in it."""

    path: str
    position: int


@dataclass(frozen=True)
class EncodeTask:
    shard: Shard
    first_char: int  # index in the whole text of the shard's first character
    split_char: int  # characters before this go to train, the rest to val
    tokenizer: Tokenizer
    dtype: str
    train: Optional[Target]
    val: Optional[Target]


@dataclass(frozen=True)
class EncodeResult:
    train_tokens: int
    val_tokens: int


def _sides(task: EncodeTask) -> Iterator[tuple[str, str]]:
    """The shard's text as (side, piece), cut at the train/val split character."""
    pos = task.first_char
    for text in read_text(task.shard.path, task.shard.start, task.shard.end):
        k = min(max(task.split_char - pos, 0), len(text))
        if k:
            yield "train", text[:k]
        if k < len(text):
            yield "val", text[k:]
        pos += len(text)


class _PositionalWriter:
    """Writes ids into a preallocated file from a token position on: shards fill one file
    in parallel, each at its own place."""

    def __init__(self, target: Target, dtype: np.dtype) -> None:
        self.file = open(target.path, "r+b", buffering=0)  # noqa: SIM115 - closed in close()
        self.start = target.position * dtype.itemsize
        self.file.seek(self.start)
        self.dtype = dtype
        self.tokens = 0

    def write(self, ids: np.ndarray) -> None:
        if ids.dtype != self.dtype:
            if ids.size and int(ids.max()) > np.iinfo(self.dtype).max:
                raise OverflowError(f"token id {int(ids.max())} does not fit in {self.dtype}")
            ids = ids.astype(self.dtype)
        data = memoryview(np.ascontiguousarray(ids)).cast("B")
        while data:
            data = data[self.file.write(data) :]
        self.tokens += len(ids)

    def close(self) -> None:
        try:
            start_writeback(self.file.fileno(), self.start, self.file.tell() - self.start)
        finally:
            self.file.close()


def encode_shard(task: EncodeTask) -> EncodeResult:
    dtype = np.dtype(task.dtype)
    writers = {
        side: _PositionalWriter(target, dtype)
        for side, target in (("train", task.train), ("val", task.val))
        if target is not None
    }
    try:
        # Train text and val text are encoded separately, as nanoGPT does; each side is one
        # lazy stream of pieces, so a tokenizer that must not cut anywhere sees it whole.
        for side, group in groupby(_sides(task), key=itemgetter(0)):
            for ids in task.tokenizer.encode_pieces(text for _, text in group):
                writers[side].write(ids)
    finally:
        for w in writers.values():
            w.close()
    count = {side: w.tokens for side, w in writers.items()}
    return EncodeResult(count.get("train", 0), count.get("val", 0))
