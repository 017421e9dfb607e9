"""JSON Lines: one JSON object per line, the document's text at source.text_field
(a dotted path reaches into nested objects: "meta.body"). Blank lines are skipped.
The text is used as it is in the JSON (no newline translation).

An uncompressed file is cut into shards at line ends; a compressed one into up to
MAX_PIECES pieces by position in its text, each taking the lines that start in it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Optional

from corpusprep.compression import STREAMS, reading_errors
from corpusprep.errors import UserError
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
            return compressed_pieces(file, shard_bytes) if pieces else [file.whole()]
        return [(a, b, b - a) for a, b in plan_shards(file.path, file.size, shard_bytes, _LINE_END)]

    def _lines(self, segment: Segment) -> Iterator[bytes]:
        """The segment's lines, each read with a bound (source.max_uncut_bytes): a line is
        held whole to be parsed, so a longer one is an error, never a read without end."""
        file = segment.file
        limit = file.max_uncut_bytes
        if file.seekable:
            with open(file.path, "rb") as f:
                f.seek(segment.start)
                left = segment.end - segment.start
                while left > 0:
                    line = f.readline(min(left, limit + 1))
                    if not line:
                        raise UserError(f"{file.name}: the file got shorter while it was read")
                    _check_length(line, limit, segment, segment.end - left)
                    left -= len(line)
                    yield line
        else:
            stream = STREAMS.take(file, segment.start)
            f, offset, number = stream.f, stream.offset, stream.lines
            kept = False
            try:
                with reading_errors(file.name, file.compression):
                    if offset < segment.start:  # the lines before the piece's: read past
                        offset, number = _skip_lines(f, segment.start, limit, offset, number)
                    # a piece's lines are those that start in it
                    while offset < segment.end and (line := f.readline(limit + 1)):
                        number += 1
                        _check_length(line, limit, segment, offset, number)
                        offset += len(line)
                        yield (line, number) if segment.piece else line
                if segment.piece and segment.end != STREAM_END:  # the next piece starts here
                    STREAMS.keep(stream, segment.end, offset, number)
                    kept = True
            finally:
                if not kept:
                    f.close()

    def parts(self, segment: Segment) -> Iterator[Part]:
        file = segment.file
        path = file.text_field.split(".")
        for number, line in enumerate(self._lines(segment)):
            if segment.piece:  # its line number counts from the file's start
                line, number = line[0], line[1] - 1
            if not line.strip():
                continue
            text = _fast_text(line, path) if _FAST_LOADS is not None else None
            if text is not None and (text.isascii() or _encodable(text)):
                yield Part([text], whole=text)
                continue
            where = _Where(segment, number)  # the stdlib reads it: its value or its error
            try:
                value = json.loads(line)
            except RecursionError:  # nested deeper than the stdlib's recursion limit
                raise UserError(
                    f"{where}: JSON nested too deeply to read; fix or remove the line"
                ) from None
            except UnicodeDecodeError:
                if file.skip_invalid:
                    yield SKIPPED
                    continue
                raise UserError(
                    f"{where}: not valid UTF-8; fix the line or set source.skip_invalid=true"
                ) from None
            except ValueError as e:
                raise UserError(
                    f"{where}: not valid JSON ({getattr(e, 'msg', e)}, column "
                    f"{getattr(e, 'colno', '?')}); fix or remove the line"
                ) from None
            for key in path:
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
                    yield SKIPPED
                    continue
                raise UserError(f"{where}: the text holds a lone surrogate (\\ud800-\\udfff)")
            yield Part([value], whole=value)


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
