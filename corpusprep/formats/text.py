"""Plain text: a file is one document, read exactly as nanoGPT reads it (strict UTF-8,
universal newlines); or, with source.doc_separator, several documents separated by lines
holding just that string (TinyStories separates stories with "<|endoftext|>").

An uncompressed file is cut into shards where the tokenizer allows (a long document is
read in parallel); a compressed one is one shard, streamed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Optional

from corpusprep.compression import open_stream
from corpusprep.errors import UserError
from corpusprep.formats import Census, Format, InputFile, Part, Segment
from corpusprep.text import decode, plan_shards, raw_pieces, read_raw


class TextFormat(Format):
    name = "text"

    def plan(self, file: InputFile, shard_bytes: int, boundary: Optional[re.Pattern]) -> list:
        if file.doc_separator:  # cut only right after a separator line: documents stay whole
            boundary = re.compile(re.escape(file.doc_separator.encode()) + rb"\r?\n")
        if not file.seekable or boundary is None:
            return [(0, file.size, file.size)]
        return [(a, b, b - a) for a, b in plan_shards(file.path, file.size, shard_bytes, boundary)]

    def raw(self, segment: Segment) -> Iterator[tuple[int, bytes]]:
        file = segment.file
        if file.seekable:
            yield from read_raw(file.path, segment.start, segment.end)
            return
        with ExitStack() as stack:
            f = stack.enter_context(open_stream(file.path, file.compression, file.member))
            yield from raw_pieces(f, 0, None, file.name)

    def text(self, segment: Segment) -> Iterator[str]:
        return (decode(raw, segment.file.name, offset) for offset, raw in self.raw(segment))

    def parts(self, segment: Segment) -> Iterator[Part]:
        file = segment.file
        if file.doc_separator:
            for doc in _split(self.text(segment), file.doc_separator):
                yield Part([doc], whole=doc)
            return
        if file.skip_invalid and segment.whole_file:  # small enough to check before use
            try:
                text = "".join(self.text(segment))
            except UserError:
                return  # left out; the scan pass counted it as skipped
            yield Part([text], whole=text)
            return
        last = not file.seekable or segment.end == file.size
        yield Part(self.text(segment), starts=segment.start == 0, ends=last)

    def scan(self, segment: Segment) -> Census:
        file = segment.file
        if file.doc_separator:
            return super().scan(segment)
        if file.skip_invalid and segment.whole_file:  # as parts(): checked whole, or left out
            try:
                text = "".join(self.text(segment))
            except UserError:
                return Census(skipped=1)
            census = Census(docs=1)
            census.add_text(text)
            return census
        census = Census(docs=int(segment.start == 0))
        for offset, raw in self.raw(segment):
            if raw.isascii():  # valid UTF-8 already: count without decoding
                crlf = raw.count(b"\r\n") if b"\r" in raw else 0  # "\r\n" is one character
                census.add_ascii(raw, len(raw) - crlf)
            else:
                census.add_text(decode(raw, file.name, offset))  # checks the UTF-8
        return census


def _split(pieces: Iterator[str], separator: str) -> Iterator[str]:
    """Documents between lines that hold only `separator`; surrounding blank space trimmed,
    empty documents dropped."""
    line = re.compile(rf"(?m)^[ \t]*{re.escape(separator)}[ \t]*$")
    buf = ""
    for piece in pieces:
        buf += piece
        docs = line.split(buf)
        for doc in docs[:-1]:
            if doc.strip():
                yield doc.strip()
        buf = docs[-1]
    if buf.strip():
        yield buf.strip()


FORMAT = TextFormat()
