"""Reading a text file exactly as nanoGPT's prepare scripts do, in pieces.

nanoGPT reads with `open(path, 'r').read()` on a UTF-8 system, which means:
strict UTF-8 (an invalid byte is an error) and universal newlines ("\\r\\n" and a lone
"\\r" both become "\\n"; a byte-order mark is kept as the character U+FEFF).
Here the same text comes out in pieces of about BLOCK bytes, so memory stays flat
however big the file is: the pieces of a file, joined, equal what `open().read()` returns.

A file is cut into shards (byte ranges) only right after a b"\\n" byte, so every shard
decodes on its own and shards can be read in parallel.
"""

from __future__ import annotations

import os
import re
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Optional, Protocol

import numpy as np

from corpusprep._paths import open_regular_fd
from corpusprep.errors import SHORTER, UserError, changed_while_read

BLOCK = 1 << 16  # 64 KiB: big enough to amortise Python overhead, small enough to stay in cache
_NEWLINE = re.compile(rb"\n")


def _cut(buf: bytes) -> int:
    """Where `buf` may end a piece when more bytes follow: at the start of a character,
    and never between "\\r" and "\\n" (universal newlines turn the pair into one "\\n")."""
    n = len(buf)
    for p in range(n, max(n - 8, -1), -1):  # p == 0: nothing yet, carry it all over
        if p < n and (buf[p] & 0xC0) == 0x80:  # a UTF-8 continuation byte: inside a character
            continue
        if p == n and buf[n - 1] >= 0x80:  # the last character may continue in the next read
            continue
        if p and buf[p - 1] == 0x0D and (p == n or buf[p] == 0x0A):  # would split "\r\n"
            continue
        return p
    return n  # not UTF-8 near the end anyway: decoding will report it


class InvalidText(UserError):
    """Text that is not valid UTF-8 (source.skip_invalid leaves such documents out)."""


COUNT_BLOCK = 1 << 20


def count_chars(f: IO[bytes], nbytes: int) -> tuple[int, int]:
    """The characters in the next `nbytes` bytes of a UTF-8 file, from its bytes alone, as
    decode() would give them: one per byte that starts a character, "\r\n" as one (also
    across two blocks). Returns (characters, bytes not there: the file was shorter)."""
    chars, left, after_cr = 0, nbytes, False
    while left > 0 and (block := f.read(min(left, COUNT_BLOCK))):
        left -= len(block)
        chars += len(block) - (0 if block.isascii() else _continuation_bytes(block))
        if b"\r" in block or after_cr:
            chars -= block.count(b"\r\n") + (after_cr and block[:1] == b"\n")
        after_cr = block[-1:] == b"\r"
    return chars, left


def _continuation_bytes(block: bytes) -> int:
    """How many bytes of `block` continue a character (0x80-0xBF: below -64 read as int8;
    numpy counts them 7x faster than bytes.translate deletes them)."""
    return int(np.count_nonzero(np.frombuffer(block, np.int8) < -64))


def decode(raw: bytes, path: Path | str, offset: int) -> str:
    """Strict UTF-8 with universal newlines; `offset` is where `raw` starts in the file."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        bad = raw[e.start : e.start + 1].hex()
        raise InvalidText(
            f"{path}: not valid UTF-8 at byte {offset + e.start} (0x{bad}); {_not_utf8_fix(raw)}"
        ) from None
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text


def _not_utf8_fix(raw: bytes) -> str:
    """What to do with bytes that are not UTF-8: text in another encoding is converted,
    binary data (NUL bytes, as in a program or an image) is not text at all."""
    if raw[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return "it is UTF-16: convert it (iconv -f utf-16 -t utf-8)"
    if b"\x00" in raw[:65536]:
        return (
            "it holds NUL bytes, so it is binary data (a program, an image, an archive), "
            "not text: give a text file instead (among other files, source.skip_invalid=true "
            "leaves such files out)"
        )
    return "convert the file to UTF-8 (e.g. iconv -f latin1 -t utf-8)"


def read_raw(
    path: Path | str, start: int = 0, end: Optional[int] = None, block: int = BLOCK
) -> Iterator[tuple[int, bytes]]:
    """(offset, bytes) pieces of [start, end) of `path`, each cut where it decodes on its
    own. `start` and `end` must be shard boundaries (0, the size, or just after b"\\n")."""
    with open(path, "rb") as f:
        if end is None:
            end = f.seek(0, 2)
        f.seek(start)
        yield from raw_pieces(f, start, end - start, str(path), block)


def read_small(path: str, size: int) -> tuple[bytes, os.stat_result]:
    """The first `size` bytes of a regular file, read at once: a small file whole (a corpus
    may be 200,000 of them; a buffered open and its seeks took longer than the read), and
    the file's stat once they are read (what it was while read: a write meanwhile shows)."""
    try:
        fd = open_regular_fd(path)
    except FileNotFoundError:
        raise  # gone: the driver says so (a worker's view of a shared folder may lag)
    except OSError as e:
        raise UserError(
            f"{path}: cannot read it ({e.strerror}); check that it is a file you may read, "
            "or leave it out of the source"
        ) from None
    chunks = []
    try:
        while size > 0:
            data = os.read(fd, size)
            if not data:
                raise changed_while_read(path, SHORTER)
            chunks.append(data)
            size -= len(data)
        read = os.fstat(fd)
    finally:
        os.close(fd)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks), read


class Readable(Protocol):
    """What raw_pieces reads: an open binary file, or anything with its read()."""

    def read(self, size: int = -1, /) -> bytes: ...


def raw_pieces(
    f: Readable, offset: int, remaining: Optional[int], name: str, block: int = BLOCK
) -> Iterator[tuple[int, bytes]]:
    """Like read_raw, from an open stream: `remaining` bytes of it, or all (None)."""
    carry = b""
    while remaining is None or remaining > 0:
        data = f.read(block if remaining is None else min(block, remaining))
        if not data:
            if remaining is not None:
                raise changed_while_read(name, SHORTER)
            if carry:
                yield offset, carry
            return
        if remaining is not None:
            remaining -= len(data)
        buf = carry + data if carry else data
        p = len(buf) if remaining == 0 else _cut(buf)
        if p:
            yield offset, buf[:p]
        offset += p
        carry = buf[p:]


def guard_cuts(
    pieces: Iterable[tuple[int, bytes]], cut_at: Optional[bytes], limit: int, name: str
) -> Iterator[tuple[int, bytes]]:
    """The (offset, bytes) pieces of one text, failing before more than `limit` bytes pass
    without a place where the tokenizer may cut it (`cut_at`: a tokenizer's rule; None
    anywhere: nothing to check; b"" nowhere). A BPE tokenizer holds the text since its last
    cut, so this bounds its memory (source.max_uncut_bytes) whatever the input."""
    if cut_at is None:
        yield from pieces
        return
    rule = re.compile(cut_at) if cut_at else None
    last = None  # where the text could last be cut
    carry = b""  # the previous piece's last bytes: a cut's rule looks a byte around it
    for offset, raw in pieces:
        if last is None:
            last = offset  # a segment starts where the text may be cut
        if rule is not None:
            window, base = carry + raw, offset - len(carry)
            if base + len(window) - last > limit:  # a stretch may pass the limit here:
                for cut in (m.end() for m in rule.finditer(window)):  # each one judged
                    if base + cut - last > limit:
                        raise _uncut(name, last, base + cut, limit, rule)
                    last = max(last, base + cut)
            elif (final := _last_cut(rule, window)) is not None:  # else the last one will do
                last = max(last, base + final)
            carry = window[-CARRY:]
        end = offset + len(raw)
        if end - last > limit:
            raise _uncut(name, last, end, limit, rule)
        yield offset, raw


CARRY = 8  # bytes of a piece searched again with the next (a cut there needs the next byte)
LAST_CUT_STRETCH = 128  # bytes at the end of a piece where _last_cut first looks


def _last_cut(rule: re.Pattern, window: bytes) -> Optional[int]:
    """Where the window may last be cut: searched from the end back, in stretches that
    double (the last cut is usually near the end). Each search reads CARRY bytes past its
    stretch, so a cut at its edge is seen whole. The first stretch is short: tiktoken's
    word rule matches between most words, and each match is an object (from 4,096 bytes
    on, the search cost a third of what a shard does around the encoder)."""
    high, size = len(window), LAST_CUT_STRETCH
    while high > 0:
        low = max(high - size, 0)
        found = deque(rule.finditer(window, low, min(high + CARRY, len(window))), maxlen=1)
        if found:
            return found[0].end()
        high, size = low, size * 2
    return None


def _uncut(name: str, start: int, end: int, limit: int, rule: Optional[re.Pattern]) -> UserError:
    how = (
        "has no place where this tokenizer may cut it (for BPE: a newline between a "
        "non-space character and a letter or digit; for tiktoken also a space between two "
        "ASCII letters)"
        if rule is not None
        else "is one text, and this tokenizer never cuts a text (it encodes it whole)"
    )
    return UserError(
        f"{name}: the text from byte {start:,} to byte {end:,} {how}, more than "
        f"source.max_uncut_bytes={limit} to hold at once; raise source.max_uncut_bytes, "
        "or for a text without newlines use a tokenizer that can cut anywhere "
        "(tokenizer=char or tokenizer=byte)"
    )


def read_text(
    path: Path | str, start: int = 0, end: Optional[int] = None, block: int = BLOCK
) -> Iterator[str]:
    """The text of bytes [start, end) of `path`, in pieces that join to open().read()."""
    for offset, raw in read_raw(path, start, end, block):
        yield decode(raw, path, offset)


def plan_shards(
    path: Path | str, size: int, shard_bytes: int, boundary: re.Pattern = _NEWLINE
) -> list[tuple[int, int]]:
    """Cut [0, size) into byte ranges of about `shard_bytes`, each ending where `boundary`
    matches (after a newline by default). The plan depends only on the file and
    `shard_bytes`, never on how many workers will run it. A file with no boundary for a
    long stretch simply gets a longer shard."""
    if size <= shard_bytes:  # one shard: nothing to look for (a corpus may be 200,000 files)
        return [(0, size)]
    bounds = [0]
    with open(path, "rb") as f:
        target = shard_bytes
        while target < size:
            f.seek(target)
            pos, tail = target, b""
            cut = None
            while cut is None:
                data = f.read(BLOCK)
                if not data:
                    break
                window = tail + data
                m = boundary.search(window)
                if m:
                    cut = pos - len(tail) + m.end()
                tail = window[-16:]  # a boundary pattern may straddle two reads
                pos += len(data)
            if cut is None or cut >= size:
                break
            bounds.append(cut)
            target = cut + shard_bytes
    bounds.append(size)
    return list(zip(bounds[:-1], bounds[1:]))
