"""JSON Lines: one JSON object per line, the document's text at source.text_field
(a dotted path reaches into nested objects: "meta.body"). Blank lines are skipped.
The text is used as it is in the JSON (no newline translation).

An uncompressed file is cut into shards at line ends; a compressed one into up to
MAX_PIECES pieces by position in its text, each taking the lines that start in it.

What Hugging Face datasets' json builder reads is read too (source=hf promises its
documents): several objects on a line, separated by whitespace (a lone "\r" included),
and a file whose text starts with "[": one JSON array of objects, or of strings (each
one a "text"), read an element at a time and never cut.
"""

from __future__ import annotations

import codecs
import functools
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, Optional

from corpusprep.compression import STREAMS, open_stream, reading_errors, strip_suffix
from corpusprep.errors import SHORTER, UserError, changed_while_read
from corpusprep.formats import (
    SKIPPED,
    STREAM_END,
    Format,
    InputFile,
    Part,
    Segment,
    compressed_pieces,
    line_number,
)
from corpusprep.text import plan_shards

_LINE_END = re.compile(rb"\n")


class JsonlFormat(Format):
    name = "jsonl"

    def plan(self, file: InputFile, shard_bytes: int, boundary: Optional[re.Pattern],
             pieces: bool = False) -> list:  # fmt: skip
        if not file.seekable:
            planned = compressed_pieces(file, shard_bytes) if pieces else [file.whole()]
        else:
            cuts = plan_shards(file.path, file.size, shard_bytes, _LINE_END)
            planned = [(a, b, b - a) for a, b in cuts]
        if len(planned) > 1 and _is_array(file):
            return [file.whole()]  # one JSON value: no line of it stands alone
        return planned

    def _lines(self, segment: Segment) -> Iterator[Any]:
        """The segment's lines, each read with a bound (source.max_uncut_bytes): a line is
        held whole to be parsed, so a longer one is an error, never a read without end.
        Bytes; in a piece of a file (bytes, its line number in the file)."""
        file = segment.file
        limit = file.max_uncut_bytes
        if file.seekable:
            with open(file.path, "rb") as f:
                f.seek(segment.start)
                left = segment.end - segment.start
                while left > 0:
                    line = f.readline(min(left, limit + 1))
                    if not line:
                        raise changed_while_read(file.name, SHORTER)
                    _check_length(line, limit, segment, segment.end - left)
                    left -= len(line)
                    yield line
        else:
            stream = STREAMS.take(file, segment.start)
            reader, offset, number = stream.f, stream.offset, stream.lines
            kept = False
            try:
                with reading_errors(file.name, file.compression):
                    if offset < segment.start:  # the lines before the piece's: read past
                        offset, number = _skip_lines(reader, segment.start, limit, offset, number)
                    # a piece's lines are those that start in it
                    while offset < segment.end and (line := reader.readline(limit + 1)):
                        number += 1
                        _check_length(line, limit, segment, offset, number)
                        offset += len(line)
                        yield (line, number) if segment.piece else line
                if segment.piece and segment.end != STREAM_END:  # the next piece starts here
                    STREAMS.keep(stream, segment.end, offset, number)
                    kept = True
            finally:
                if not kept:
                    reader.close()

    def parts(self, segment: Segment) -> Iterator[Part]:
        file = segment.file
        if segment.whole_file and _is_array(file):
            yield from _array_parts(file)
            return
        path = file.text_field.split(".")
        for number, line in enumerate(self._lines(segment)):
            if segment.piece:  # its line number counts from the file's start
                line, number = line[0], line[1] - 1
            if not line.strip(b" \t\r\n"):  # JSON's whitespace only (not \f, \v)
                continue
            text = _fast_text(line, path) if _FAST_LOADS is not None else None
            if text is not None and (text.isascii() or _encodable(text)):
                yield Part([text], whole=text)
                continue
            where = _Where(segment, number)  # the stdlib reads it: its value or its error
            try:
                values = [json.loads(line)]
            except RecursionError:  # nested deeper than the stdlib's recursion limit
                raise _too_deep(where) from None
            except UnicodeDecodeError:
                if file.skip_invalid:
                    yield SKIPPED
                    continue
                raise UserError(
                    f"{where}: not valid UTF-8; fix the line or set source.skip_invalid=true"
                ) from None
            except ValueError as e:
                values = _several(line, where, e)
            for value in values:
                yield _part(value, file, where)


def _several(line: bytes, where: Any, error: ValueError) -> list[Any]:
    """The objects of a line that holds more than one, separated by whitespace (as
    datasets' json builder reads them); else the line's own error, in one line."""
    if getattr(error, "msg", None) == "Extra data":
        text = line.decode(json.detect_encoding(line), "surrogatepass")  # as json.loads
        values, at = [], _past_space(text, 0)
        try:
            while at < len(text):
                value, at = _DECODER.raw_decode(text, at)
                values.append(value)
                at = _past_space(text, at)
            return values
        except RecursionError:
            raise _too_deep(where) from None
        except ValueError as e:
            error = e
    raise UserError(
        f"{where}: not valid JSON ({_json_message(error)}, column "
        f"{getattr(error, 'colno', '?')}); fix or remove the line"
    ) from None


def _json_message(error: Exception) -> str:
    """json's message without its "at" (said before ": line 1 column 23"): "Invalid control
    character at" reads "Invalid control character" once the column follows."""
    return str(getattr(error, "msg", error)).removesuffix(" at")


def _part(value: Any, file: InputFile, where: Any) -> Part:
    """The document in one JSON value: its text at source.text_field."""
    for key in file.text_field.split("."):
        if not isinstance(value, dict) or key not in value:
            found = sorted(value) if isinstance(value, dict) else type(value).__name__
            raise UserError(
                f"{where}: no field {file.text_field!r} (found {found}); "
                "set source.text_field to the key that holds the text"
            )
        value = value[key]
    if not isinstance(value, str):
        raise UserError(
            f"{where}: {file.text_field!r} is {type(value).__name__}, not a string; "
            "set source.text_field to the key that holds the text"
        )
    if not value.isascii() and not _encodable(value):
        if file.skip_invalid:
            return SKIPPED
        raise UserError(
            f"{where}: the text holds a lone surrogate (\\ud800-\\udfff), which no UTF can "
            "store; fix or remove it, or set source.skip_invalid=true"
        )
    return Part([value], whole=value)


def _too_deep(where: Any) -> UserError:
    return UserError(f"{where}: JSON nested too deeply to read; fix or remove the line")


_DECODER = json.JSONDecoder()
_WHITESPACE = re.compile(r"[ \t\n\r]*")  # JSON's whitespace


def _past_space(text: str, at: int) -> int:
    """Where the JSON whitespace from `at` on ends (`at`, if there is none there)."""
    found = _WHITESPACE.match(text, at)  # (always found: the pattern matches nothing too)
    return found.end() if found else at


# --- a file that is one JSON array ----------------------------------------------------------


def _is_array(file: InputFile) -> bool:
    """Whether the file is one JSON array: a .json file whose text starts with "[" (after
    a BOM or whitespace), as datasets' json builder reads it. JSON Lines files (.jsonl,
    .ndjson) are never looked at: a file of many small ones (a zip's members) costs an
    open each."""
    if Path(strip_suffix(file.member or file.path)).suffix.lower() != ".json":
        return False
    stat = os.stat(file.path)
    return _starts_array(file.path, file.compression, file.member, file.max_bytes,
                         stat.st_size, stat.st_mtime_ns)  # fmt: skip


@functools.lru_cache(maxsize=1 << 14)  # asked by the plan, and by each whole-file segment
def _starts_array(path: str, compression: str, member: Optional[str], max_bytes: Optional[int],
                  size: int, mtime_ns: int) -> bool:  # fmt: skip
    """The text's first byte after a BOM and whitespace is "[" (size, mtime: the key)."""
    with open_stream(Path(path), compression, member, max_bytes) as f:
        head = f.read(len(BOM))
        head = head[len(BOM) :] if head == BOM else head
        while True:
            head = head.lstrip(b" \t\r\n")
            if head:
                return head[:1] == b"["
            head = f.read(ARRAY_BLOCK)
            if not head:
                return False


BOM = codecs.BOM_UTF8


def _array_parts(file: InputFile) -> Iterator[Part]:
    """The documents of a file that is one JSON array: each element an object (the text
    at source.text_field) or a string (a "text", as datasets reads it)."""
    with open_stream(Path(file.path), file.compression, file.member, file.max_bytes) as f:
        for number, value in _Elements(f, file).read():
            where = f"{file.name}: element {number:,} of its JSON array"
            if isinstance(value, str):
                if file.text_field != "text":  # datasets names such a column "text"
                    raise UserError(f"{where}: a string, read as a 'text' field; set "
                                    "source.text_field=text for an array of texts")  # fmt: skip
                value = {"text": value}
            yield _part(value, file, where)


class _Elements:
    """The elements of the JSON array that is a stream's text, one at a time: the text
    held at once is the element being read (at most source.max_uncut_bytes), however
    long the array."""

    def __init__(self, f: IO[bytes], file: InputFile) -> None:
        self.f, self.file = f, file
        self.decode = codecs.getincrementaldecoder("utf-8-sig")("surrogatepass").decode
        self.text, self.at, self.eof = "", 0, False
        self.offset = 0  # bytes decoded so far
        self.number = 0

    def read(self) -> Iterator[tuple[int, Any]]:
        self._expect("[")
        if self._next() == "]":
            return self._end()
        while True:
            self.number += 1
            yield self.number, self._value()
            if self._next() == "]":
                return self._end()
            self._expect(",")

    def _value(self) -> Any:
        self._next()
        while True:
            try:
                value, end = _DECODER.raw_decode(self.text, self.at)
            except RecursionError:
                raise self._error("nested too deeply to read") from None
            except ValueError as e:  # not valid, or not all read yet: read on to know
                if self.eof or _invalid(e, self.text):
                    raise self._error(f"not valid JSON ({_json_message(e)})") from None
                self._more()
                continue
            if self.eof or not _may_go_on(value, self.text, end):
                self._bounded(end)
                self.at = end
                return value
            self._more()  # a number at the end of what is read may go on in the next block

    def _bounded(self, end: int) -> None:
        """An element read whole (within what one read gave) is held to the bound too."""
        limit = self.file.max_uncut_bytes
        nbytes = self._nbytes(end)
        if nbytes > limit:
            raise self._too_long(f"{nbytes:,} bytes, longer than source.max_uncut_bytes={limit}")

    def _nbytes(self, end: int) -> int:
        """The UTF-8 bytes of the text from the element's start to `end`, where they may
        come near source.max_uncut_bytes; 0 where they cannot (4 bytes a character at
        most): counted only then."""
        if 4 * (end - self.at) <= self.file.max_uncut_bytes:
            return 0
        return len(self.text[self.at : end].encode("utf-8", "surrogatepass"))

    def _next(self) -> str:
        """The next character that is not whitespace ("" at the end), not taken."""
        while True:
            self.at = _past_space(self.text, self.at)
            if self.at < len(self.text) or self.eof:
                return self.text[self.at : self.at + 1]
            self._more()

    def _expect(self, char: str) -> None:
        if self._next() != char:
            found = self.text[self.at : self.at + 1] or "the end of the file"
            raise self._error(f"{char!r} expected, not {found!r}")
        self.at += 1

    def _end(self) -> None:
        self.at += 1
        if self._next():
            raise self._error("text after the array's end (a .json file that starts with '[' "
                              "is read as one array, not as JSON Lines)")  # fmt: skip

    def _more(self) -> None:
        """Read on: as much again as is held (an element is parsed again from its start
        each time, so its reads double), from at least a block; never more than
        source.max_uncut_bytes of UTF-8 held."""
        limit, held = self.file.max_uncut_bytes, len(self.text) - self.at
        held_bytes = self._nbytes(len(self.text))
        if held_bytes > limit:  # not ended within the limit (an error before it is raised
            # at once, by _value): a long element, as a JSON line that long is a long line
            raise self._too_long(f"longer than source.max_uncut_bytes={limit} bytes (not "
                                 "ended within them)")  # fmt: skip
        self.text = self.text[self.at :]
        self.at = 0
        wanted = max(ARRAY_BLOCK, held)
        block = self.f.read(min(wanted, limit + 1 - held_bytes) if held_bytes else wanted)
        self.eof = not block
        try:
            self.text += self.decode(block, final=self.eof)
        except UnicodeDecodeError as e:  # (source.skip_invalid skips JSON lines only)
            raise UserError(f"{self.file.name}: not valid UTF-8 at byte "
                            f"{self.offset + e.start:,}; fix the file (source.skip_invalid "
                            "skips a JSON line, not a part of an array)") from None  # fmt: skip
        self.offset += len(block)

    def _too_long(self, what: str) -> UserError:
        return UserError(f"{self.file.name}: element {self.number:,} of its JSON array is "
                         f"{what}; an element is held whole to be read: raise "
                         "source.max_uncut_bytes, or split the document")  # fmt: skip

    def _error(self, what: str) -> UserError:
        return UserError(f"{self.file.name}: element {self.number:,} of its JSON array: "
                         f"{what}; fix the file")  # fmt: skip


ARRAY_BLOCK = 1 << 20
NUMBER_GOES_ON = frozenset("0123456789.eE+-")


def _may_go_on(value: Any, text: str, end: int) -> bool:
    """A number that ends where the text read so far ends, or before a character that
    can go on a number (raw_decode reads "1." as 1): the next block may hold the rest."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    return end >= len(text) or text[end] in NUMBER_GOES_ON


def _invalid(error: ValueError, text: str) -> bool:
    """The error is the text's, whatever follows: found well before the end of what is
    read (an unterminated string is reported where it starts: more may end it)."""
    message, pos = getattr(error, "msg", ""), getattr(error, "pos", len(text))
    return pos < len(text) - LONGEST_TOKEN and not message.startswith("Unterminated string")


LONGEST_TOKEN = 16  # characters: "-Infinity", a \uXXXX\uXXXX pair: cut by a block, not wrong


def _fast_loads():
    """orjson's parser, where installed (pip install 'corpusprep[fast]'): twice the stdlib's
    speed. It refuses invalid UTF-8, lone surrogates, NaN and a BOM, and reads integers
    beyond 64 bits as floats: every line it refuses, and every one whose text is not a
    string where source.text_field points, is read again by the stdlib, so what is read,
    and every message, is the stdlib's (tests/test_jsonl_reader.py compares them)."""
    try:
        import orjson
    except ImportError:
        return None
    return orjson.loads


_FAST_LOADS = _fast_loads()


def _fast_text(line: bytes, path: list[str]) -> Optional[str]:
    """The line's text at `path` as orjson reads it; None: the stdlib decides."""
    try:
        value = _FAST_LOADS(line)
    except Exception:  # orjson.JSONDecodeError, or anything it cannot read
        return None
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value if isinstance(value, str) else None


class _Where:
    """file:line for messages; the line number is only worked out when one is printed."""

    def __init__(self, segment: Segment, number: int) -> None:
        self.segment, self.number = segment, number

    def __str__(self) -> str:
        file = self.segment.file
        first = line_number(file, self.segment.start) if file.seekable else 1
        return f"{file.name}:{first + self.number}"


def _skip_lines(f, start: int, limit: int, offset: int = 0, lines: int = 0) -> tuple[int, int]:
    """Read past the lines that start before byte `start` of a stream now at the start of
    a line, `offset` bytes and `lines` lines in: (where the first line at or after `start`
    starts, how many lines came before). In blocks up to `start` (newlines counted by
    bytes.count, not a readline each), then to the end of the line that runs across it,
    in steps of `limit`; the piece it starts in reports a long one."""
    last = b"\n"
    while offset < start:
        block = f.read(min(start - offset, SKIP_BLOCK))
        if not block:
            return offset, lines + (last != b"\n")  # the text ends before the piece
        offset += len(block)
        lines += block.count(b"\n")
        last = block[-1:]
    if last != b"\n":  # a line runs across `start`: it belongs to the piece before
        lines += 1
        while line := f.readline(limit + 1):
            offset += len(line)
            if line.endswith(b"\n"):
                break
    return offset, lines


SKIP_BLOCK = 1 << 20


def _check_length(
    line: bytes, limit: int, segment: Segment, offset: int, number: Optional[int] = None
) -> None:
    """A line read with readline(limit + 1) that did not reach its newline is too long."""
    if len(line) > limit and not line.endswith(b"\n"):
        file = segment.file
        number = number or line_number(file, offset)
        raise UserError(
            f"{file.name}:{number}: a line longer than source.max_uncut_bytes={limit} bytes, "
            f"at byte {offset:,}; a JSON line is held whole to be read: raise "
            "source.max_uncut_bytes, or split the document"
        )


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


FORMAT = JsonlFormat()
