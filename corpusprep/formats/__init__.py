"""Formats turn one shard of an input file into documents. One module per format:

    text     a text file is one document (nanoGPT's reading rules), or several separated
             by a line such as "<|endoftext|>" (source.doc_separator, TinyStories), or
             cut after each occurrence of a string (source.doc_end, llm.c's "\n\n")
    lines    a text file with one document per line (Hugging Face datasets' .txt files)
    jsonl    one JSON object per line, the text at source.text_field (nested: "a.b")
    parquet  one row per document, the text in column source.text_field (needs pyarrow)

Each format cuts a file into segments (byte ranges, or rows) and reads a segment as
Parts: the text of one document, or of the piece of a long document inside the segment.
"""

from __future__ import annotations

import importlib
import os
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from corpusprep.errors import UserError

if TYPE_CHECKING:
    from corpusprep.sample import Sampler


@dataclass(frozen=True)
class InputFile:
    """One input file (or zip member), and how to read it."""

    path: str
    format: str  # text | lines | jsonl | parquet
    compression: str = "none"  # none | gzip | bz2 | xz | zstd | zip
    size: int = 0  # bytes on disk
    member: Optional[str] = None  # a zip archive's member
    text_field: str = "text"  # jsonl / parquet: where the text is
    doc_separator: Optional[str] = None  # text: a line that separates documents
    doc_end: Optional[str] = None  # text: a string that ends each document (kept with it)
    skip_invalid: bool = False  # skip documents that are not valid UTF-8 instead of failing
    max_uncut_bytes: int = 64 << 20  # the most text held at once without a cut
    max_bytes: Optional[int] = None  # the most bytes read from the file (decompressed)

    @cached_property  # asked for about 14 times a file (dictionaries of files by name)
    def name(self) -> str:
        return f"{self.path}!{self.member}" if self.member else self.path

    @property
    def capped_in_shards(self) -> bool:
        """Whether source.max_bytes caps text its shards read apart (Parquet's rows;
        a compressed file's pieces each count from the start of its text): each shard
        stops at the cap, and the driver adds up what they read (Part.read)."""
        return self.max_bytes is not None and self.format == "parquet"

    @property
    def seekable(self) -> bool:
        return self.compression == "none"

    def whole(self) -> tuple[int, int, int]:
        """The file as one unplanned segment (start, end, nbytes), nbytes its text's size:
        a compressed file counts as the text it holds when shards are packed."""
        if self.seekable:
            return (0, self.size, self.size)
        from corpusprep.compression import text_size

        text = text_size(Path(self.path), self.compression, self.member, self.size)
        return (0, STREAM_END, text)  # to the end of the text, whatever its size

    @property
    def size_bounded(self) -> bool:
        """Whether the text can be no longer than whole() says: its size as the file
        records it, or the most its zstd frames can hold (else a guess, that a last piece
        running to STREAM_END may overrun by any amount)."""
        if self.seekable:
            return True
        from corpusprep.compression import recorded_text_size, text_bound, text_size

        where = (Path(self.path), self.compression, self.member, self.size)
        if recorded_text_size(*where) > 0:
            return True
        bound = text_bound(*where)
        return 0 < bound <= text_size(*where)


STREAM_END = 2**63 - 1  # the end of a compressed file's last piece: the end of its text
MAX_PIECES = 16  # a compressed file is cut into at most this many pieces (see compressed_pieces)


@dataclass(frozen=True)
class Segment:
    """Units [start, end) of one file: bytes (of a compressed file: of its text, the last
    piece ending at STREAM_END), or Parquet rows."""

    file: InputFile
    start: int
    end: int
    nbytes: int  # about how many input bytes: for packing shards, progress and ETA
    cut_at: Optional[bytes] = None  # the tokenizer's rule for cutting a text (Tokenizer.cut_at)

    @property
    def whole_file(self) -> bool:
        return self.start == 0 and self.end == (
            self.file.size if self.file.seekable else STREAM_END
        )

    @property
    def piece(self) -> bool:
        """One of several pieces of a compressed file (by position in its text)."""
        return not self.file.seekable and not self.whole_file


@dataclass
class Part:
    """Text of one document, or of the part of a long document that lies in one shard."""

    pieces: Iterable[str]
    starts: bool = True  # the document begins here
    ends: bool = True  # ... and ends here
    whole: Optional[str] = None  # the full text, when in one piece (pieces is then [whole])
    skipped: bool = False  # an invalid document left out (source.skip_invalid): no text
    key: Optional[bytes] = None  # its key where not its text's: a small text file's sha256
    sha256: Optional[bytes] = None  # a small text file read whole: its bytes' whole digest
    read_as: Optional[os.stat_result] = None  # ... and its stat once read (file_identity)
    # Parquet, when source.max_bytes caps its text: the bytes of text its segment has read
    # so far (the driver adds them up over the file's shards)
    read: Optional[int] = None


SKIPPED = Part((), starts=False, ends=False, skipped=True)


@dataclass
class Census:
    """What the scan pass learns from a shard: characters, distinct characters, documents."""

    chars: int = 0
    docs: int = 0
    skipped: int = 0  # invalid documents left out (skip_invalid)
    seen: set = field(default_factory=set)
    read: int = 0  # Parquet, source.max_bytes: the text its segment read (Part.read)
    _known: bytes = b"\r"  # ASCII bytes already seen; "\r" never reaches a text file's text

    def add_text(self, text: str) -> None:
        """A text as it is used (JSON Lines, Parquet: no newline translation, so a "\r"
        in it is a character of its own)."""
        self.chars += len(text)
        if "\r" in text:
            self.seen.add("\r")
        self._collect(text.encode("utf-8"))

    def add_raw(self, raw: bytes, chars: int) -> None:
        """Raw bytes already checked as UTF-8, holding `chars` characters (after newlines):
        collected from the bytes themselves, not a decoded text encoded again."""
        self.chars += chars
        if b"\r" in raw:
            self._learn("\n")
        self._collect(raw)

    def add_undecoded(self, raw: bytes) -> None:
        """Raw UTF-8 that the encode pass decodes (and checks) anyway: its characters
        counted and collected without decoding it here. Only what is left once the ASCII
        already seen is dropped gets decoded: every non-ASCII byte, since ASCII bytes
        never occur inside a multibyte character, so its continuation bytes are the
        difference between that rest's length in bytes and in characters. Bytes that are
        not UTF-8 fail here only if that rest shows it; the encode pass says where."""
        crlf = 0
        if b"\r" in raw:  # universal newlines: "\r\n" is one character, "\r" is "\n"
            crlf = raw.count(b"\r\n")
            self._learn("\n")  # learnt, not only seen: its byte is then dropped as known
        rest, text = self._collect(raw)
        self.chars += len(raw) - crlf - (len(rest) - len(text))

    def _collect(self, raw: bytes) -> tuple[bytes, str]:
        """The bytes not seen before, and their text."""
        # Drop the ASCII bytes already seen (bytes.translate runs at GB/s); whatever is left
        # is new ASCII or non-ASCII text, usually a few bytes, and goes through a set. A
        # shard's first piece has nothing seen yet: the characters of its first few KB
        # are learnt first, so the set does not see a whole piece of common letters.
        rest = raw.translate(None, self._known)
        if len(rest) > LEARN_FIRST:
            self._learn(rest[:LEARN_FIRST].decode("utf-8", "ignore"))  # a cut character: dropped
            rest = rest.translate(None, self._known)
        text = rest.decode("utf-8")
        if text:
            self._learn(text)
        return rest, text

    def _learn(self, text: str) -> None:
        new = set(text) - self.seen
        self.seen |= new
        self._known += bytes(ord(c) for c in new if c.isascii())


LEARN_FIRST = 4096  # bytes


class Format(ABC):
    name: str

    @abstractmethod
    def plan(self, file: InputFile, shard_bytes: int, boundary: Optional[re.Pattern],
             pieces: bool = False) -> list:  # fmt: skip
        """The file's segments as (start, end, nbytes), never depending on the worker count.
        `boundary`: where a long text may be cut (None: nowhere); `pieces`: a compressed
        file may be cut into pieces by position in its text (see compressed_pieces)."""

    @abstractmethod
    def parts(self, segment: Segment) -> Iterator[Part]:
        """The segment's documents (or document pieces), in order."""

    def scan(self, segment: Segment, sampler: Optional[Sampler] = None) -> Census:
        """Count, collect the characters, check; a `sampler` takes its training units."""
        census = Census()
        for part in self.parts(segment):
            if part.read is not None:  # the count so far: the last one is the segment's
                census.read = part.read
            census.docs += part.starts
            census.skipped += part.skipped
            pieces = part.pieces
            if sampler is not None and not part.skipped:
                pieces = sampler.document(pieces, 0 if part.starts else self.before(segment,
                                          sampler.rule.max_doc_chars))  # fmt: skip
            for text in pieces:
                census.add_text(text)
        return census

    def reads_on(self, before: Segment, after: Segment) -> bool:
        """Whether a worker that read `before` goes on into `after` where it ended, instead
        of starting over (a compressed file's next piece: the stream it kept)."""
        return (before.piece and after.piece and before.file == after.file
                and after.start == before.end)  # fmt: skip

    def let_go(self) -> None:
        """Close what this process kept open to read on into the segment after its last
        (a reading that the next shard of a run goes on with)."""
        return None  # nothing, unless the format reads on

    def check_files(self, files: list[InputFile]) -> None:  # noqa: B027 - optional hook
        """Before any file of this format is planned: refuse, in one line, one that would
        take the process down with it when read (a library that aborts)."""

    def before(self, segment: Segment, cap: Optional[int]) -> Optional[int]:
        """Characters of the document before a segment that continues one (a plain text
        cut into shards), when fewer than `cap`; None when more (or not counted)."""
        return None


def compressed_pieces(file: InputFile, shard_bytes: int) -> list[tuple[int, int, int]]:
    """A compressed file's pieces by position in its text (as its header records the
    size; else guessed: the last piece runs to STREAM_END, so a wrong guess only changes
    the balance). A worker reading a piece decompresses everything before it and skips it
    (~1 GB/s against BPE's ~10 MB/s per core), unless it read the piece before: so the
    workers take a file's pieces in runs (prepare's _runs: one worker goes on through
    them), and a file read by many workers at once costs at most MAX_PIECES / 2 times its
    decompression. Depends on the file alone."""
    start, end, size = file.whole()
    count = min(MAX_PIECES, -(-size // max(shard_bytes, 1)))
    if count <= 1:
        return [(start, end, size)]
    step = -(-size // count)
    cuts = [i * step for i in range(count)]
    return [(a, b, b - a) for a, b in zip(cuts, cuts[1:])] + [(cuts[-1], STREAM_END,
                                                              size - cuts[-1])]  # fmt: skip


FORMATS = {name: f"corpusprep.formats.{name}" for name in ("text", "lines", "jsonl", "parquet")}
SUFFIX_FORMATS = {".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl",
                  ".parquet": "parquet"}  # anything else is text  # fmt: skip


def get_format(name: str) -> Format:
    if name not in FORMATS:
        raise UserError(f"source.format={name}: unknown format; use one of {', '.join(FORMATS)}")
    if name not in _LOADED:  # once: a shard may hold 1,000 small files
        _LOADED[name] = importlib.import_module(FORMATS[name]).FORMAT
    return _LOADED[name]


_LOADED: dict[str, Format] = {}


def let_go_of_readers() -> None:
    """Close what this process kept open to read on into a next piece: a compressed file's
    stream, a Parquet row group being read (at a run's end: it holds tens of MB)."""
    from corpusprep.compression import STREAMS

    STREAMS.close()
    for format in list(_LOADED.values()):  # (another thread may load one meanwhile)
        format.let_go()


def format_from_name(name: str) -> str:
    """'shard-0001.jsonl.zst' -> 'jsonl'; anything unknown is text."""
    from corpusprep.compression import strip_suffix, suffix

    return SUFFIX_FORMATS.get(suffix(strip_suffix(name)), "text")


def line_number(file: InputFile, offset: int) -> int:
    """The 1-based line at byte `offset` of an uncompressed file (for error messages)."""
    lines = 1
    with open(file.path, "rb") as f:
        while offset > 0:  # in blocks: the offset may be far into a big file
            block = f.read(min(offset, 1 << 20))
            if not block:
                break
            lines += block.count(b"\n")
            offset -= len(block)
    return lines
