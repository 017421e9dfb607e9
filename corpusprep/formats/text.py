"""Plain text: a file is one document, read exactly as nanoGPT reads it (strict UTF-8,
universal newlines); or, with source.doc_separator, several documents separated by lines
holding just that string (TinyStories separates stories with "<|endoftext|>"); or, with
source.doc_end, cut right after each occurrence of a string, which each document keeps
(llm.c's tinyshakespeare.py: `text.split("\n\n")`, each section but the last given its
"\n\n" back, so the pieces are exactly the text's; the last may be empty).

An uncompressed file is cut into shards where the tokenizer allows (a long document is
read in parallel); a compressed one into pieces by position in its text, where the
tokenizer costs more than decompressing (BPE; see piece_of), else it is one shard, streamed.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Optional

from corpusprep.compression import STREAMS, Stream, open_stream, reading_errors
from corpusprep.errors import UserError
from corpusprep.formats import (
    SKIPPED,
    STREAM_END,
    Census,
    Format,
    InputFile,
    Part,
    Segment,
    compressed_pieces,
)
from corpusprep.sample import Sampler
from corpusprep.text import (
    BLOCK,
    InvalidText,
    count_chars,
    decode,
    guard_cuts,
    plan_shards,
    raw_pieces,
    read_raw,
    read_small,
)

SMALL_FILE = 1 << 16  # bytes: a text file this small is read whole, in one piece


def read_whole(segment: Segment) -> bool:
    """Whether parts() reads a segment as one small text file, whole, and keys its document
    by the sha256 of the bytes it read: the driver need not hash it before shards start."""
    file = segment.file
    return (file.format == "text" and not (file.doc_separator or file.doc_end or file.skip_invalid)
            and file.seekable and segment.whole_file and file.size <= SMALL_FILE)  # fmt: skip


class TextFormat(Format):
    name = "text"

    def plan(self, file: InputFile, shard_bytes: int, boundary: Optional[re.Pattern],
             pieces: bool = False) -> list:  # fmt: skip
        plain = not (file.doc_separator or file.doc_end or file.skip_invalid)
        if file.doc_separator:  # cut only right after a separator line: documents stay whole
            boundary = separator_line(file.doc_separator)
        if not file.seekable:  # by position in its text: a BPE corpus's usual download
            cut = pieces and plain and boundary is not None
            return compressed_pieces(file, shard_bytes) if cut else [file.whole()]
        if boundary is None or file.doc_end:  # doc_end: read in order
            return [file.whole()]
        if file.skip_invalid and not file.doc_separator:  # left out whole or used whole:
            return [file.whole()]  # decided on all of its bytes, whatever shard_bytes says
        return [(a, b, b - a) for a, b in plan_shards(file.path, file.size, shard_bytes, boundary)]

    def raw(self, segment: Segment) -> Iterator[tuple[int, bytes]]:
        file = segment.file
        if file.seekable:
            yield from read_raw(file.path, segment.start, segment.end)
            return
        if segment.piece:
            yield from piece_of(segment)
            return
        with ExitStack() as stack:
            f = stack.enter_context(
                open_stream(file.path, file.compression, file.member, file.max_bytes)
            )
            yield from raw_pieces(f, 0, None, file.name)

    def text(self, segment: Segment) -> Iterator[str]:
        """The segment's text in pieces; one that runs longer than source.max_uncut_bytes
        without a place the tokenizer may cut it is an error (it would be held whole)."""
        file = segment.file
        raw = guard_cuts(self.raw(segment), segment.cut_at, file.max_uncut_bytes, file.name)
        return (decode(piece, file.name, offset) for offset, piece in raw)

    def parts(self, segment: Segment) -> Iterator[Part]:
        file = segment.file
        if file.doc_end or file.doc_separator:
            read = marking_invalid if file.skip_invalid else decode
            ends = ((o + len(raw), read(raw, file.name, o)) for o, raw in self.raw(segment))
            limit = file.max_uncut_bytes
            if file.doc_end:
                docs = _split_after(ends, file.doc_end, limit, file.name)
            else:
                assert file.doc_separator  # one of the two, as the test above says
                docs = _split(ends, file.doc_separator, limit, file.name)
            for doc in docs:
                if file.skip_invalid and MARKED.search(doc):  # a byte not UTF-8: left out
                    yield SKIPPED
                else:
                    yield Part([doc], whole=doc)
            return
        if file.skip_invalid and segment.whole_file:  # checked whole before use, or left out
            held: Optional[list[str]] = []
            size = 0
            try:
                for offset, raw in self.raw(segment):
                    text = decode(raw, file.name, offset)
                    size += len(raw)
                    if held is not None:
                        held.append(text)
                        if size > file.max_uncut_bytes:  # too big to hold: check, then stream
                            held = None
            except InvalidText:
                yield SKIPPED  # left out, and counted
                return
            # keyed as every text file is, by its sha256 (not `whole`: by its text's digest)
            yield Part(self.text(segment) if held is None else ["".join(held)])
            return
        if read_whole(segment):  # in one piece: encoded with others a batch at a time (a
            # corpus of 200,000 small files spent as long in per-document steps as encoding)
            data, stat = read_small(file.path, file.size)
            if file.size > file.max_uncut_bytes:  # else no stretch of it can be too long
                for _ in guard_cuts([(0, data)], segment.cut_at, file.max_uncut_bytes, file.name):
                    pass
            text = decode(data, file.name, 0)
            # keyed as every text file is, by its sha256: of the very bytes read
            digest = hashlib.sha256(data).digest()
            yield Part([text], whole=text, key=digest[:16], sha256=digest, read_as=stat)
            return
        last = segment.end == (file.size if file.seekable else STREAM_END)
        yield Part(self.text(segment), starts=segment.start == 0, ends=last)

    def scan(self, segment: Segment, sampler: Optional[Sampler] = None) -> Census:
        file = segment.file
        if file.doc_separator or file.doc_end or sampler is not None:
            return super().scan(segment, sampler)  # decoded, document by document
        census = Census(docs=int(segment.start == 0))
        pieces = guard_cuts(self.raw(segment), segment.cut_at, file.max_uncut_bytes, file.name)
        # left out if not UTF-8 (skip_invalid): decided here, so every byte is checked
        check = file.skip_invalid and segment.whole_file
        try:
            for offset, raw in pieces:
                if check and not raw.isascii():  # decoding checks it and counts it
                    census.add_raw(raw, len(decode(raw, file.name, offset)))
                    continue
                try:  # else the encode pass decodes (and checks) every piece
                    census.add_undecoded(raw)
                except UnicodeDecodeError:  # the first bad byte may lie in a piece before
                    for at, earlier in self.raw(segment):
                        decode(earlier, file.name, at)  # says which byte
                    raise
        except InvalidText:
            if file.skip_invalid and segment.whole_file:  # as parts(): left out
                return Census(skipped=1)
            raise
        return census

    def before(self, segment: Segment, cap: Optional[int]) -> Optional[int]:
        """The characters before a segment of a plain uncompressed text, counted from its
        bytes (universal newlines: "\r\n" is one); None once they are surely `cap` or more
        (a character is at most 4 bytes)."""
        if cap is None:
            return 0
        if segment.start >= 4 * cap:
            return None
        with open(segment.file.path, "rb") as f:
            chars, _ = count_chars(f, segment.start)
        return chars if chars < cap else None


# --- a piece of a compressed text ------------------------------------------------------------


def piece_of(segment: Segment, rule: Optional[re.Pattern] = None) -> Iterator[tuple[int, bytes]]:
    """A compressed text's piece, in (offset, bytes) pieces that decode on their own: its
    text from the first cut at or after the piece's start (the start itself for the first
    piece) to the first at or after its end (the text's end for the last). A cut is the
    end of a match of the tokenizer's rule found with the text before it in view, so the
    first at or after a place depends on the text alone: consecutive pieces meet exactly,
    and one whose stretch holds no cut is empty. Read on from where this process stopped
    reading the piece before (STREAMS), else decompressed from the start and skipped.
    `rule`: where it may be cut (one byte a match), if not the tokenizer's (segment.cut_at)."""
    file, start, end = segment.file, segment.start, segment.end
    rule = rule or re.compile(segment.cut_at or rb"\n")
    # a kept stream: at the cut where the piece before this one ended, or far enough
    # before this one's start to see the text before it
    stream = STREAMS.take(file, start, lambda kept: kept.end == start
                          or kept.offset + CONTEXT <= start)  # fmt: skip
    text = _Text(stream)
    kept = False
    try:
        with reading_errors(file.name, file.compression):
            if start and stream.end != start:  # (else at the start, or at the cut)
                text.skip_to(start)
                for _ in text.through_cut(rule):  # the text before the piece's first cut
                    pass
            if end == STREAM_END:
                chunks = text.rest()
            elif text.offset > end:  # its first cut lies past its end: that is its last
                chunks = iter(())  # too (a match is one byte: it starts at or after `end`)
            else:
                chunks = text.through_cut(rule, end)
            yield from raw_pieces(_Chunks(chunks), text.offset, None, file.name)
            if end != STREAM_END:  # the next piece starts at this cut
                STREAMS.keep(stream, end, text.offset, 0, text.ahead)
                kept = True
    finally:
        if not kept:
            stream.f.close()


CONTEXT = 16  # bytes around a place that a cut's rule may look at (it looks at one or two)


class _Text:
    """A compressed text read on from a Stream: `offset` bytes of it taken, the last
    CONTEXT of them at hand (a rule's lookbehind sees them), `ahead` read but not taken."""

    def __init__(self, stream: Stream) -> None:
        self.f, self.offset, self.ahead = stream.f, stream.offset, stream.ahead
        self.behind, self.eof = b"", False

    def _next(self) -> bytes:
        """What comes next: more than CONTEXT bytes unless the text ends (a match near the
        end of what is held may need the bytes after it)."""
        data, self.ahead = self.ahead, b""
        if len(data) <= CONTEXT and not self.eof:
            more = self.f.read(BLOCK)
            self.eof = not more
            data += more
        return data

    def _take(self, data: bytes, n: int) -> bytes:
        """Take the first n bytes of `data`, what _next gave; the rest comes next again."""
        taken, self.ahead = data[:n], data[n:]
        self.offset += n
        self.behind = (self.behind + taken[-CONTEXT:])[-CONTEXT:]  # not a block's copy
        return taken

    def skip_to(self, place: int) -> None:
        while self.offset < place and (data := self._next()):
            self._take(data, min(len(data), place - self.offset))

    def rest(self) -> Iterator[bytes]:
        while data := self._next():
            yield self._take(data, len(data))

    def through_cut(self, rule: re.Pattern, place: Optional[int] = None) -> Iterator[bytes]:
        """The text up to `place` (not past it; from here if None), then on to the end of
        the first match of `rule` that starts there or later, found with the text before
        it in view (the text's end if none)."""
        while place is not None and self.offset < place and (data := self._next()):
            yield self._take(data, min(len(data), place - self.offset))
        while data := self._next():
            m = rule.search(self.behind + data, len(self.behind))
            if m is not None:
                n = m.end() - len(self.behind)
            else:  # the last bytes may start a match that the next ones decide
                n = len(data) if self.eof else len(data) - CONTEXT
            if n:
                yield self._take(data, n)
            else:
                self.ahead = data
            if m is not None:
                return


class _Chunks:
    """An iterator of bytes as a stream (raw_pieces reads one)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self.chunks = chunks

    def read(self, size: int = -1) -> bytes:
        return next(self.chunks, b"")


# Bytes that are not UTF-8, each read as a lone surrogate (U+DC80..U+DCFF), which strict
# UTF-8 never yields: a document is split from the others as if they were valid, then left
# out if it holds one.
MARKED = re.compile("[\udc80-\udcff]")


def marking_invalid(raw: bytes, name: str, offset: int) -> str:
    """decode(), with each byte that is not UTF-8 marked instead of refused."""
    text = raw.decode("utf-8", "surrogateescape")
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text


def separator_line(separator: str) -> re.Pattern:
    """Where a shard may end in a text of documents: right after a line that holds the
    separator and nothing else but blanks (as `_split` reads it), so never inside a line
    such as "word<|endoftext|>". The line end before it is part of the match: a shard
    search that starts mid-line cannot take a line's tail for a whole line."""
    return re.compile(rb"[\r\n][ \t]*" + re.escape(separator.encode()) + rb"[ \t]*\r?\n")


def _split(
    pieces: Iterator[tuple[int, str]], separator: str, limit: int, name: str
) -> Iterator[str]:
    """Documents between lines that hold only `separator`; surrounding blank space trimmed,
    empty documents dropped. `pieces`: (byte offset where the piece ends, its text). A
    document is held whole: one longer than `limit` characters is an error."""
    # a line is whole once its newline is read (or the text ends): a line read so far as
    # "<|endoftext|>" may go on in the next piece ("<|endoftext|>abc")
    ended = re.compile(rf"(?m)^[ \t]*{re.escape(separator)}[ \t]*\n")
    last = re.compile(rf"(?m)^[ \t]*{re.escape(separator)}[ \t]*\Z")
    buf, open_line = "", 0  # open_line: where the line not yet ended begins in buf
    for end, piece in pieces:
        held = len(buf)
        buf += piece
        docs, done = _separated(buf, ended, open_line, held)
        yield from docs
        buf = buf[done:]
        newline = buf.rfind("\n", max(held - done, 0))  # in this piece only: lines stay linear
        open_line = newline + 1 if newline >= 0 else open_line if done == 0 else 0
        if len(buf) > limit:
            raise UserError(
                f"{name}: no line {separator!r} for more than source.max_uncut_bytes={limit} "
                f"bytes, up to byte {end:,}: a document is held whole; check "
                "source.doc_separator, or raise source.max_uncut_bytes"
            )
    docs, done = _separated(buf, last, open_line, len(buf))  # the last line, if unended
    yield from docs
    if rest := buf[done:].strip():
        yield rest


def _separated(buf: str, line: re.Pattern, open_line: int, held: int) -> tuple[list[str], int]:
    """The documents before each separator `line` in `buf`, and where the text after the
    last one begins. A separator line begins at `open_line` (the line that was not ended
    when the newest text came) or in the newest text, after `held`: every other line was
    looked at when it ended."""
    docs, done = [], 0
    first = line.match(buf, open_line)
    rest = line.finditer(buf, first.end() if first else held)
    for m in itertools.chain([first] if first else [], rest):
        doc = buf[done : m.start()].strip()
        if doc:
            docs.append(doc)
        done = m.end()
    return docs, done


def _split_after(
    pieces: Iterator[tuple[int, str]], end: str, limit: int, name: str
) -> Iterator[str]:
    """The text cut right after each occurrence of `end` (left to right, not overlapping),
    every piece kept, the last one even when empty: `text.split(end)` with `end` given back
    to all but the last. A document is held whole, up to `limit` characters."""
    buf = ""
    for offset, piece in pieces:
        start = max(len(buf) - len(end) + 1, 0)  # an `end` may straddle the two pieces
        buf += piece
        done = 0
        at = buf.find(end, start)
        while at != -1:
            yield buf[done : at + len(end)]
            done = at + len(end)
            at = buf.find(end, done)
        buf = buf[done:]
        if len(buf) > limit:
            raise UserError(
                f"{name}: no {end!r} for more than source.max_uncut_bytes={limit} bytes, up to "
                f"byte {offset:,}: a document is held whole; check source.doc_end, or raise "
                "source.max_uncut_bytes"
            )
    yield buf


FORMAT = TextFormat()
