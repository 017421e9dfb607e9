"""Parquet: one row per document, the text in column source.text_field. Read in record
batches through pyarrow (an optional extra: pip install 'corpusprep[parquet]'), so memory
stays bounded; the shards of a file are runs of its rows: whole row groups, or pieces of a
big one."""

from __future__ import annotations

import faulthandler
import os
import re
import signal
import threading
import time
from bisect import bisect_right
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, Optional

from corpusprep.errors import UserError
from corpusprep.formats import MAX_PIECES, SKIPPED, Format, InputFile, Part, Segment
from corpusprep.formats.parquet_pages import Pages, read_pages
from corpusprep.memory import lean_heap

BATCH_ROWS = 1024
BATCH_BYTES = 1 << 22  # the most text a batch of rows holds (a text longer than this: alone)


# pyarrow reads a row group's column whole first by default (pre_buffer): in pieces instead
READ_IN_PIECES = {"pre_buffer": False, "buffer_size": 1 << 20}


def _open(file: InputFile, **options: Any) -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise UserError(
            f"{file.name}: reading Parquet needs pyarrow: pip install 'corpusprep[parquet]'"
        ) from None
    if not file.seekable:
        raise UserError(f"{file.name}: a compressed Parquet file; decompress it first")
    try:
        return pq.ParquetFile(file.path, **READ_IN_PIECES, **options)
    except Exception as e:  # pyarrow.ArrowInvalid and friends
        raise UserError(f"{file.name}: not a readable Parquet file ({_one_line(e)})") from None


@contextmanager
def _system_pool() -> Iterator[None]:
    """pyarrow's allocations made with the C allocator's pool while a segment is read (and
    the caller's pool back after): pyarrow's default (mimalloc) keeps what a row group
    freed for the next, and a worker reading row groups of 20 MB of text held 170 MB
    against 120 MB. mimalloc reads about 15% faster: a few percent of a BPE run."""
    import pyarrow as pa

    # readers open at once (a library's, side by side; threads) share one setting: the
    # first sets it, the last gives the caller's back. Each giving back the pool it found
    # left the system pool set for good once they closed in the order they opened.
    with _POOL_LOCK:
        if not _POOL_HELD[0]:
            _POOL_HELD[1] = pa.default_memory_pool()
            pa.set_memory_pool(pa.system_memory_pool())
        _POOL_HELD[0] += 1
    try:
        yield
    finally:
        with _POOL_LOCK:
            _POOL_HELD[0] -= 1
            if not _POOL_HELD[0]:
                pa.set_memory_pool(_POOL_HELD[1])
                _POOL_HELD[1] = None


_POOL_LOCK = threading.Lock()
_POOL_HELD: list = [0, None]  # readers within _system_pool, and the caller's pool


def _close(pf: Any) -> None:
    """A ParquetFile's file closed now, not when it is collected (pyarrow < 7: no close)."""
    if pf is not None and hasattr(pf, "close"):
        pf.close()


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split())  # pyarrow's messages may end in a newline


class ParquetFormat(Format):
    name = "parquet"

    def check_files(self, files: list[InputFile]) -> None:
        """pyarrow ends the process (std::terminate: its binding lets a C++ exception out)
        when it is asked for the metadata of some damaged column chunks, where reading the
        file raises as it should. So the chunks corpusprep asks for are asked for first in
        a forked child, which says which file it is at: its death is that file's one line,
        not the run's end (one child for all the files: a fork costs a few ms)."""
        if not files or not hasattr(os, "fork"):
            return
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: nothing but the footers, then out, whatever happens
            os.close(read)
            try:
                os.dup2(os.open(os.devnull, os.O_WRONLY), 2)  # (C++'s "terminate called")
                faulthandler.disable()  # (PYTHONFAULTHANDLER's dump, on its own descriptor)
                for i, file in enumerate(files):
                    os.write(write, b"%d\n" % i)
                    _ask_for_chunks(file)
            finally:
                os._exit(0)
        os.close(write)
        reached = _read_until_closed(read, CHECK_SECONDS)
        if reached is None:  # stuck (a lock another thread held at the fork): unchecked
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        if reached and os.WIFSIGNALED(status) and os.WTERMSIG(status) != signal.SIGKILL:
            file = files[int(reached[-1])]
            raise UserError(f"{file.name}: its footer is damaged (pyarrow aborts on a column's "
                            "metadata); download or copy the file again")  # fmt: skip

    def plan(self, file: InputFile, shard_bytes: int, boundary: Optional[re.Pattern],
             pieces: bool = False) -> list:  # fmt: skip
        """Rows [start, end) of the file: runs of whole row groups packed by the text they
        hold (the text column's uncompressed size, as the footer says), and, with `pieces`
        (a tokenizer slower than reading), a row group holding more than shard_bytes cut
        into up to MAX_PIECES pieces by rows: pyarrow's write_table puts up to a million
        rows in one, which would otherwise be one worker's. A piece's reader skips the rows
        before it (pyarrow decodes a row group's pages in order, about 1 GB/s), unless its
        process read the piece before (_READ_ON); a row group whose text is all in its
        dictionary page stays whole (_in_dictionary)."""
        pf = _open(file)
        meta = pf.metadata
        column = _leaf(pf, file.text_field)
        _close(pf)
        shards, start, size, row = [], 0, 0, 0
        for i in range(meta.num_row_groups):
            group = meta.row_group(i)
            rows, text = _num_rows(file, group, i), _text_bytes(group, column)
            cuttable = pieces and not _in_dictionary(group, column)
            count = min(MAX_PIECES, rows, -(-text // max(shard_bytes, 1))) if cuttable else 1
            if count > 1:  # alone, in pieces of as many rows each
                if row > start:
                    shards.append((start, row, size))
                cuts = [row + rows * k // count for k in range(count + 1)]
                shards += [(a, b, text * (b - a) // rows) for a, b in zip(cuts, cuts[1:])]
                start, size = row + rows, 0
            else:
                size += text
                if size >= shard_bytes:
                    shards.append((start, row + rows, size))
                    start, size = row + rows, 0
            row += rows
        if row > start:
            shards.append((start, row, size))
        return shards or [(0, 0, file.size)]

    def parts(self, segment: Segment) -> Iterator[Part]:
        lean_heap()
        with _system_pool():
            key = _identity(segment.file)
            reading = _READ_ON.take(key, segment.start) or _Reading(segment.file, key)
            read = False
            try:
                yield from self._parts(segment, reading)
                read = True
            finally:  # read on from where it ended, if inside a row group; never if cut short
                if read and reading.inside_group:
                    _READ_ON.keep(reading)
                else:
                    reading.close()

    def reads_on(self, before: Segment, after: Segment) -> bool:
        """The next piece of the same row group (_READ_ON); not the next row group, which
        is decoded from its start anyway."""
        if before.file != after.file or after.start != before.end:
            return False
        try:
            starts = _group_starts(after.file)
        except (OSError, UserError):  # gone or damaged since the plan: its reader says so
            return False
        at = bisect_right(starts, after.start) - 1
        return 0 <= at < len(starts) - 1 and starts[at] < after.start

    def let_go(self) -> None:
        _READ_ON.close()

    def _parts(self, segment: Segment, reading: _Reading) -> Iterator[Part]:
        """The segment's rows."""
        file, pf, starts = segment.file, reading.pf, reading.starts
        if file.text_field not in pf.schema_arrow.names:
            raise UserError(
                f"{file.name}: no column {file.text_field!r} (found {pf.schema_arrow.names}); "
                "set source.text_field to the column that holds the text"
            )
        row = segment.start  # (for messages: the row being read)
        limit, decoded = file.max_uncut_bytes, 0
        column = _leaf(pf, file.text_field)
        try:
            first = max(bisect_right(starts, segment.start) - 1, 0)
            for group in range(first, len(starts) - 1):
                if starts[group] >= segment.end:
                    break
                low = max(segment.start - starts[group], 0)  # this segment's rows of the group
                high = min(segment.end - starts[group], starts[group + 1] - starts[group])
                rows = reading.rows
                if rows is None or rows.group != group or rows.at > low:  # from its start
                    rows = reading.start_group(group, column, limit)
                row = starts[group] + low
                for values in rows.between(low, high):
                    texts, decoded = _texts(values, file, row, decoded)
                    # the count so far goes with the batch's first row (source.max_bytes)
                    read = decoded if file.max_bytes is not None else None
                    for value in texts:
                        if value is SKIPPED:  # not UTF-8, and source.skip_invalid
                            row += 1
                            yield SKIPPED if read is None else replace(SKIPPED, read=read)
                        else:
                            if len(value) * 4 > limit and len(value.encode()) > limit:
                                raise _too_long(file, f"row {row}", limit)
                            row += 1
                            yield Part([value], whole=value, read=read)
                        read = None
        except UserError:
            raise
        except Exception as e:
            unsupported = type(e).__name__ == "ArrowNotImplementedError"  # (a newer writer's)
            fix = ("this pyarrow cannot read it: upgrade pyarrow, or write the file again"
                   if unsupported else
                   "the file is damaged or cut short: download or copy it again")  # fmt: skip
            raise UserError(f"{file.name}: cannot read row {row} ({_one_line(e)}); {fix}") from None


class _Reading:
    """A Parquet file open to read rows, and the row group being read (rows)."""

    def __init__(self, file: InputFile, key: tuple) -> None:
        self.file, self.key = file, key
        self.pf, self.starts = _reader(file, key)
        self.by_index: Any = None  # the file read as indices into its dictionaries, if needed
        self.rows: Optional[_Rows] = None

    def start_group(self, group: int, column: Optional[int], limit: int) -> _Rows:
        """Row group `group` read from its first row (its texts' size checked first)."""
        file, starts = self.file, self.starts
        meta = self.pf.metadata.row_group(group)
        pages = read_pages(file.path, meta, column)
        rows = meta.num_rows
        if rows and pages is not None and pages.text_at_least > limit * rows:
            at = starts[group]
            where = f"row {at}" if rows == 1 else f"rows {at}-{at + rows - 1}"
            raise _too_long(file, where, limit, "one text at least is")  # not read
        if pages is not None and pages.shared:  # rows sharing dictionary entries
            if self.by_index is None:
                self.by_index = _open(file, read_dictionary=[file.text_field],
                                      metadata=self.pf.metadata)  # fmt: skip
            arrays = _dictionary_batches(self.by_index, file, group)
        else:
            arrays = _batches(self.pf, file, group, pages)
        self.rows = _Rows(group, rows, arrays)
        return self.rows

    @property
    def inside_group(self) -> bool:
        """Whether rows are left in the row group read last (the next piece's)."""
        return self.rows is not None and self.rows.at < self.rows.count

    def reads_on_to(self, row: int) -> bool:
        """Whether `row` is ahead in the row group being read: reading on (skipping the
        rows between, as a reader from the row group's start would) reaches it."""
        if self.rows is None:
            return False
        group = self.rows.group
        return self.starts[group] + self.rows.at <= row < self.starts[group + 1]

    def close(self) -> None:
        self.rows = None
        _close(self.pf)
        _close(self.by_index)


class _Rows:
    """A row group's arrays of texts, read in order: from its row `at` on (`held`: the
    rest of an array read already)."""

    def __init__(self, group: int, count: int, arrays: Iterator[Any]) -> None:
        self.group, self.count, self.arrays = group, count, arrays
        self.at, self.held = 0, None

    def between(self, low: int, high: int) -> Iterator[Any]:
        """Rows [low, high), low >= at: slices of the arrays (no copies); the rows past
        high stay for a reader of the rows after."""
        while self.at < high:
            array, self.held = self.held, None
            if array is None:
                array = next(self.arrays, None)
                if array is None:
                    return
            begin, end = max(low - self.at, 0), min(high - self.at, len(array))
            if end < len(array):
                self.held = array.slice(end)
            self.at += end
            if begin < end:
                yield array if (begin, end) == (0, len(array)) else array.slice(begin, end - begin)


class _ReadOn:
    """The reading that this process's last segment ended inside a row group with, for
    the next segment of the same rows, which the same worker reads next when it has a run
    of a row group's pieces (prepare._runs): it goes on from there instead of decoding the
    row group's pages from their start again to skip to its rows (100 MB in one row group,
    as pyarrow's write_table writes it, in 16 pieces: 2.45 s against 2.64 s with splintr,
    a third fewer page faults). One at a time (it holds a page of text); a forked process
    starts with none (it shares the parent's open files)."""

    def __init__(self) -> None:
        self.kept: Optional[_Reading] = None
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._forget)

    def take(self, key: tuple, row: int) -> Optional[_Reading]:
        """The kept reading if it reads the file `key` names on to `row` (the next piece's
        first row, or a later piece's of the same row group: a worker whose run ended
        there and that gets a later run of the row group skips the rows between)."""
        kept, self.kept = self.kept, None
        if kept is not None and kept.key == key and kept.reads_on_to(row):
            return kept
        if kept is not None:
            kept.close()
        return None

    def keep(self, reading: _Reading) -> None:
        self.close()
        self.kept = reading

    def close(self) -> None:
        kept, self.kept = self.kept, None
        if kept is not None:
            kept.close()

    def _forget(self) -> None:
        self.kept = None


_READ_ON = _ReadOn()


def _in_dictionary(group: Any, column: Optional[int]) -> bool:
    """Whether a row group's text is mostly in its dictionary page, as the footer says
    (datasets writes 1,000 rows a row group, each text an entry). A reader of any of its
    rows decodes all of that page first (30 ms for 13 MB of text), so such a row group
    stays whole: cut, 100 MB of them in 87 pieces took 2.4x as long with splintr; read on
    through in runs (_READ_ON), still 2.45 s against 1.80 s on 2 cores (the pieces' own
    costs, and a run's first piece decoding the page again). Unknown counts as yes."""
    if column is None or column >= group.num_columns:
        return True
    chunk = group.column(column)
    if not chunk.has_dictionary_page:
        return False
    dictionary = chunk.data_page_offset - (chunk.dictionary_page_offset or 0)
    return 2 * dictionary >= chunk.total_compressed_size


def _identity(file: InputFile) -> tuple:
    """What a file read, and how, is known by: its settings, and its identity on disk
    (a file written again since, in a library's process: its ctime too, which nothing
    puts back: a rewrite in place at the same size, mtime restored by cp -p, touch -r)."""
    from corpusprep.writer import file_identity

    return (file, *file_identity(os.stat(file.path)))


def _reader(file: InputFile, key: tuple) -> tuple[Any, list[int]]:
    """The file opened to read its rows, and the row at which each row group starts (the
    file's rows last): its footer parsed and walked once per file and process (the parse
    was most of a shard's time where a file has thousands of row groups, 2.7 ms a shard
    for 5,000 of them, and each shard walked every row group before its own)."""
    kept = _KEPT.get(key)
    if kept is not None:
        metadata, starts = kept
        return _open(file, metadata=metadata), starts
    pf = _open(file)
    meta, starts = pf.metadata, [0]
    try:
        for i in range(meta.num_row_groups):
            starts.append(starts[-1] + _num_rows(file, meta.row_group(i), i))
    except UserError:  # a footer that lies: the file closed, not left to the collector
        _close(pf)
        raise
    _KEPT.clear()  # one file's: a worker reads a file's shards in a row
    _KEPT[key] = (meta, starts)
    return pf, starts  # (these: another thread may have cleared _KEPT since)


_KEPT: dict[tuple, tuple[Any, list[int]]] = {}


def _group_starts(file: InputFile) -> list[int]:
    """The row at which each row group starts (the file's rows last), from _KEPT."""
    key = _identity(file)
    kept = _KEPT.get(key)
    if kept is not None:
        return kept[1]
    pf, starts = _reader(file, key)
    _close(pf)
    return starts


def _num_rows(file: InputFile, group: Any, i: int) -> int:
    """A row group's rows, as the footer says: never negative (pyarrow refuses such a
    file; counted, it put the row group's rows before the file's start, and a run left
    them out without a word)."""
    if group.num_rows < 0:
        raise UserError(
            f"{file.name}: row group {i}: its footer says {group.num_rows} rows; the file is "
            "damaged: download or copy it again"
        )
    return group.num_rows


def _batches(pf: Any, file: InputFile, group: int, pages: Optional[Pages]) -> Iterator[Any]:
    """A row group's texts in arrays of at most BATCH_ROWS rows, as many as the pages'
    headers show cannot hold more than BATCH_BYTES (or source.max_uncut_bytes, if less; or
    two of the largest data pages, which pyarrow holds anyway); a row at a time if the
    headers cannot be read. (A dictionary page is held anyway too, but its rows are
    expanded batch by batch: a batch as big as it would hold its text twice.)"""
    if pages is None:
        batch = 1
    else:
        held = 0 if pages.dictionary_only else 2 * pages.largest
        batch = pages.rows_within(max(min(file.max_uncut_bytes, BATCH_BYTES), held), BATCH_ROWS)
    for values in pf.iter_batches(batch, row_groups=[group], columns=[file.text_field]):
        yield values.column(0)


def _dictionary_batches(pf: Any, file: InputFile, group: int) -> Iterator[Any]:
    """A row group whose text is all dictionary entries, read as indices into the
    dictionary (pf: read_dictionary; pyarrow passes its pages through, whatever the
    dictionary's size), and expanded as many rows at a time as hold source.max_uncut_bytes
    by the entries' own lengths."""
    import numpy as np
    import pyarrow.compute as pc

    lengths: Any = None
    seen, limit = None, min(file.max_uncut_bytes, BATCH_BYTES)
    for values in pf.iter_batches(BATCH_ROWS, row_groups=[group], columns=[file.text_field]):
        column = values.column(0)
        if not hasattr(column, "dictionary"):  # read_dictionary holds for text alone: a
            yield column  # number's indices come expanded; _texts names its type
            continue
        dictionary = column.dictionary
        held = (dictionary.buffers()[1].address, len(dictionary))  # the batches share it
        if held != seen:  # its entries' lengths: once per dictionary, not per batch
            seen = held
            lengths = _lengths(dictionary)
        indices = column.indices
        sizes = np.cumsum(lengths[_values(indices)])
        start = 0
        while start < len(column):
            before = sizes[start - 1] if start else 0
            end = max(int(np.searchsorted(sizes, before + limit, "right")), start + 1)
            yield pc.take(dictionary, indices.slice(start, end - start))
            start = end


# From an Arrow array's own buffers, with numpy: pyarrow imports pandas (0.3-0.4 s, 30-50 MB
# in every worker) to convert any Python or numpy value into Arrow (pc.fill_null(x, 0) did).


def _lengths(texts: Any) -> Any:
    """The bytes of each entry of a string array (a null one's: whatever its offsets say,
    never negative; these only size batches)."""
    import numpy as np
    import pyarrow as pa

    wide = pa.types.is_large_string(texts.type) or pa.types.is_large_binary(texts.type)
    offsets = np.frombuffer(texts.buffers()[1], "<i8" if wide else "<i4")
    return np.diff(offsets[texts.offset : texts.offset + len(texts) + 1])


def _values(indices: Any) -> Any:
    """An integer array's values (a null one's: 0)."""
    import numpy as np
    import pyarrow as pa

    kind = "i" if pa.types.is_signed_integer(indices.type) else "u"
    values = np.frombuffer(indices.buffers()[1], f"<{kind}{indices.type.bit_width // 8}")
    values = values[indices.offset : indices.offset + len(indices)]
    if indices.null_count:
        valid = np.unpackbits(np.frombuffer(indices.buffers()[0], np.uint8), bitorder="little")
        values = np.where(valid[indices.offset : indices.offset + len(indices)], values, 0)
    return values


def _texts(column: Any, file: InputFile, row: int, decoded: int) -> tuple[list, int]:
    """A batch's texts (SKIPPED for one that is not UTF-8, with source.skip_invalid), and
    the bytes of text read from the file so far, which source.max_bytes caps."""
    import pyarrow as pa  # (not pyarrow.compute unless needed: 0.1-0.3 s to import)

    if pa.types.is_dictionary(column.type):  # a column written from a DictionaryArray
        column = column.cast(column.type.value_type)
    if getattr(pa.types, "is_string_view", lambda _: False)(column.type):  # pyarrow 15+
        column = column.cast(pa.large_string())  # (its bytes as they are: checked below)
    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        first = next((v for v in column.to_pylist() if not isinstance(v, str)), None)
        raise UserError(
            f"{file.name}: row {row}: {file.text_field!r} is {type(first).__name__}, not a "
            "string; set source.text_field to the column that holds the text"
        )
    if file.max_bytes is not None:
        import pyarrow.compute as pc

        decoded += int(pc.sum(pc.binary_length(column)).as_py() or 0)
        if decoded > file.max_bytes:
            raise past_max_bytes(file.name, file.max_bytes)
    try:
        texts = column.to_pylist()
    except UnicodeDecodeError:  # which row: each decoded on its own
        raw = column.cast(pa.large_binary() if pa.types.is_large_string(column.type)
                          else pa.binary()).to_pylist()  # fmt: skip
        texts = [_text(v, file, row + i) for i, v in enumerate(raw)]
    if column.null_count:
        i = texts.index(None)
        raise UserError(
            f"{file.name}: row {row + i}: {file.text_field!r} is empty (null), not a string; "
            "drop or fill such rows (a null is no document: source.skip_invalid leaves out "
            "text that is not UTF-8), or set source.text_field to the column that holds the text"
        )  # (it named the row alone: an error says what to do)
    return texts, decoded


def _text(value: Optional[bytes], file: InputFile, row: int) -> Any:
    if value is None:
        return None
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as e:
        if file.skip_invalid:
            return SKIPPED
        raise UserError(
            f"{file.name}: row {row}: {file.text_field!r} is not valid UTF-8 (byte {e.start}); "
            "fix the file, or set source.skip_invalid=true to leave such rows out"
        ) from None


def _leaf(pf: Any, field: str) -> Optional[int]:
    """The text's column among the file's leaf columns, which a row group's footer counts
    (a struct column before it, like dolma's metadata, is several); None without row
    groups (nothing to size or read). From a row group's column chunks, not pf.schema:
    that ties the whole footer to itself in a reference cycle (pyarrow's FileMetaData
    keeps its ParquetSchema, which keeps it), freed only by Python's rare full
    collections, so a worker held a footer (megabytes, for thousands of row groups) per
    shard it read."""
    meta = pf.metadata
    if not meta.num_row_groups:
        return None
    group = meta.row_group(0)
    paths = [group.column(i).path_in_schema for i in range(group.num_columns)]
    return paths.index(field) if field in paths else None


CHECK_SECONDS = 120  # for check_files' child: footers take milliseconds each


def _read_until_closed(fd: int, seconds: float) -> Optional[list[bytes]]:
    """The lines written to a pipe until its writer closed it, or None after `seconds`."""
    import select

    end, data = time.monotonic() + seconds, b""
    with os.fdopen(fd, "rb", buffering=0) as f:
        while select.select([f], [], [], max(end - time.monotonic(), 0))[0]:
            chunk = f.read(65536)
            if not chunk:
                return data.split()
            data += chunk
    return None


def _ask_for_chunks(file: InputFile) -> None:
    """Ask pyarrow for the metadata of every column chunk corpusprep asks for: row group
    0's (_leaf) and the text column's in every row group. An error is said by the reading."""
    try:
        pf = _open(file)
        meta, column = pf.metadata, _leaf(pf, file.text_field)
        for i in range(meta.num_row_groups if column is not None else 0):
            group = meta.row_group(i)
            if column < group.num_columns:
                group.column(column)
        _close(pf)
    except Exception:
        pass


def _text_bytes(group: Any, column: Optional[int]) -> int:
    """The text column's uncompressed size in a row group (the footer says it)."""
    if column is not None and column < group.num_columns:
        return group.column(column).total_uncompressed_size
    return group.total_byte_size


def past_max_bytes(name: str, cap: int) -> UserError:
    """A Parquet file whose text (in one shard, or summed over its shards) is past the cap."""
    return UserError(
        f"{name}: its text is more than source.max_bytes={cap} bytes; "
        "raise source.max_bytes (or set it to null) if the file is genuine"
    )


def _too_long(file: InputFile, where: str, limit: int, what: str = "a text") -> UserError:
    return UserError(
        f"{file.name}: {where}: {what} longer than source.max_uncut_bytes={limit} bytes; "
        "raise source.max_uncut_bytes (memory grows with it), or split the document"
    )


FORMAT = ParquetFormat()
