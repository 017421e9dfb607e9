"""Lines: a text file with one document per line, read as Hugging Face `datasets` reads a
.txt data file (its `text` loader): strict UTF-8, universal newlines, each line without its
line end, an empty line an empty document; a file that ends with a line end has no empty
last line. source=hf reads a dataset's .txt files so; source.format=lines reads any."""

from __future__ import annotations

import re
from collections.abc import Iterator

from corpusprep.errors import UserError
from corpusprep.formats import SKIPPED, Format, InputFile, Part, Segment, compressed_pieces
from corpusprep.formats.text import FORMAT as TEXT
from corpusprep.formats.text import MARKED, marking_invalid, piece_of
from corpusprep.text import decode, plan_shards

UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
_LINE_END = re.compile(rb"\n")  # universal newlines: "\r\n" and "\r" end lines too, but a
# cut right after "\n" is never inside one


class LinesFormat(Format):
    name = "lines"

    def plan(self, file: InputFile, shard_bytes: int, boundary, pieces: bool = False) -> list:
        """Cut after any line end (every line is a document of its own, whatever the
        tokenizer); a compressed file into pieces by position in its text (each taking
        the lines that start in it), or, for a tokenizer as fast as decompressing, one
        shard, streamed."""
        if not file.seekable:
            return compressed_pieces(file, shard_bytes) if pieces else [file.whole()]
        return [(a, b, b - a) for a, b in plan_shards(file.path, file.size, shard_bytes)]

    def parts(self, segment: Segment) -> Iterator[Part]:
        file = segment.file
        read = marking_invalid if file.skip_invalid else decode
        line: list[str] = []  # the line not yet ended, as read: joined once it ends (adding
        held = 0  # each block to it and splitting it again took time that grew as its square)
        # pieces that end where a character does; a compressed file's piece after line ends
        chunks = piece_of(segment, _LINE_END) if segment.piece else TEXT.raw(segment)
        for offset, raw in chunks:
            if offset == 0 and raw[:2] in UTF16_BOMS and file.skip_invalid:
                # not lines to skip: past its first line, each line of UTF-16 text (a NUL
                # before each ASCII letter) is valid UTF-8, of other characters
                decode(raw[:2], file.name, 0)  # (raises: "it is UTF-16: convert it")
            *ended, rest = read(raw, file.name, offset).split("\n")
            if ended:
                ended[0] = "".join([*line, ended[0]])
                line, held = [], 0
            line.append(rest)
            held += len(rest)
            for text in ended:
                yield _document(text, file.skip_invalid)
            if held > file.max_uncut_bytes:  # a line is held whole
                raise UserError(
                    f"{file.name}: a line longer than source.max_uncut_bytes="
                    f"{file.max_uncut_bytes} bytes, up to byte {offset + len(raw):,}: each "
                    "line is a document; raise source.max_uncut_bytes, or use source.format=text"
                )
        if last := "".join(line):
            yield _document(last, file.skip_invalid)


def _document(text: str, skip_invalid: bool) -> Part:
    if skip_invalid and MARKED.search(text):  # a byte not UTF-8: left out, and counted
        return SKIPPED
    return Part([text], whole=text)


FORMAT = LinesFormat()
