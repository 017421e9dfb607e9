"""Parquet: one row per document, the text in column source.text_field. Read in record
batches through pyarrow (an optional extra: pip install 'corpusprep[parquet]'), so memory
stays bounded; the shards of a file are runs of its row groups."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Optional

from corpusprep.errors import UserError
from corpusprep.formats import SKIPPED, Format, InputFile, Part, Segment

BATCH_ROWS = 1024


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


def _close(pf: Any) -> None:
    """A ParquetFile's file closed now, not when it is collected (pyarrow < 7: no close)."""
    if pf is not None and hasattr(pf, "close"):
        pf.close()


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split())  # pyarrow's messages may end in a newline


class ParquetFormat(Format):
    name = "parquet"

    def plan(self, file: InputFile, shard_bytes: int, boundary: Optional[re.Pattern],
             pieces: bool = False) -> list:  # fmt: skip
        pf = _open(file)
        meta = pf.metadata
        column = _leaf(pf, file.text_field)
        _close(pf)
        shards, start, size = [], 0, 0
        for i in range(meta.num_row_groups):
            # packed by the text it holds: the text column's uncompressed size
            text = _text_bytes(meta.row_group(i), column)
            size += text
            if size >= shard_bytes or i == meta.num_row_groups - 1:
                shards.append((start, i + 1, size))
                start, size = i + 1, 0
        return shards or [(0, 0, file.size)]

    def parts(self, segment: Segment) -> Iterator[Part]:
        pf = _open(segment.file)
        try:
            yield from self._parts(segment, pf)
        finally:
            _close(pf)

    def _parts(self, segment: Segment, pf: Any) -> Iterator[Part]:
        file = segment.file
        if file.text_field not in pf.schema_arrow.names:
            raise UserError(
                f"{file.name}: no column {file.text_field!r} (found {pf.schema_arrow.names}); "
                "set source.text_field to the column that holds the text"
            )
        row = sum(pf.metadata.row_group(i).num_rows for i in range(segment.start))
        limit, decoded = file.max_uncut_bytes, 0
        column = _leaf(pf, file.text_field)
        by_index = None  # the file read as indices into its dictionaries, if needed
        try:
            for group in range(segment.start, segment.end):
                meta = pf.metadata.row_group(group)
                pages = _pages(file.path, meta, column)
                rows = meta.num_rows
                if rows and pages is not None and pages.text_at_least > limit * rows:
                    where = f"row {row}" if rows == 1 else f"rows {row}-{row + rows - 1}"
                    raise _too_long(file, where, limit, "one text at least is")  # not read
                if pages is not None and pages.dictionary_only:  # every row an index
                    if by_index is None:
                        by_index = _open(file, read_dictionary=[file.text_field],
                                         metadata=pf.metadata)  # fmt: skip
                    batches = _dictionary_batches(by_index, file, group)
                else:
                    batches = _batches(pf, file, group, pages)
                for values in batches:
                    texts, decoded = _texts(values, file, row, decoded)
                    for value in texts:
                        if value is SKIPPED:  # not UTF-8, and source.skip_invalid
                            row += 1
                            yield SKIPPED
                            continue
                        if len(value) * 4 > limit and len(value.encode()) > limit:
                            raise _too_long(file, f"row {row}", limit)
                        row += 1
                        yield Part([value], whole=value)
        except UserError:
            raise
        except Exception as e:
            raise UserError(f"{file.name}: cannot read row {row} ({_one_line(e)})") from None
        finally:
            _close(by_index)


def _batches(pf: Any, file: InputFile, group: int, pages: Optional[_Pages]) -> Iterator[Any]:
    """A row group's texts in arrays of at most BATCH_ROWS rows, as many as the pages'
    headers show cannot hold more than source.max_uncut_bytes (or two of the largest
    pages, which pyarrow holds anyway); a row at a time if the headers cannot be read."""
    limit = file.max_uncut_bytes
    batch = 1 if pages is None else pages.rows_within(max(limit, 2 * pages.largest), BATCH_ROWS)
    for values in pf.iter_batches(batch, row_groups=[group], columns=[file.text_field]):
        yield values.column(0)


def _dictionary_batches(pf: Any, file: InputFile, group: int) -> Iterator[Any]:
    """A row group whose text is all dictionary entries, read as indices into the
    dictionary (pf: read_dictionary; pyarrow passes its pages through, whatever the
    dictionary's size), and expanded as many rows at a time as hold source.max_uncut_bytes
    by the entries' own lengths."""
    import numpy as np
    import pyarrow.compute as pc

    lengths, seen, limit = None, None, file.max_uncut_bytes
    for values in pf.iter_batches(BATCH_ROWS, row_groups=[group], columns=[file.text_field]):
        column = values.column(0)
        dictionary = column.dictionary
        held = (dictionary.buffers()[1].address, len(dictionary))  # the batches share it
        if held != seen:  # its entries' lengths: once per dictionary, not per batch
            seen = held
            lengths = pc.fill_null(pc.binary_length(dictionary), 0).to_numpy()
        indices = column.indices
        sizes = np.cumsum(lengths[pc.fill_null(indices, 0).to_numpy()])
        start = 0
        while start < len(column):
            before = sizes[start - 1] if start else 0
            end = max(int(np.searchsorted(sizes, before + limit, "right")), start + 1)
            yield pc.take(dictionary, indices.slice(start, end - start))
            start = end


def _texts(column: Any, file: InputFile, row: int, decoded: int) -> tuple[list, int]:
    """A batch's texts (SKIPPED for one that is not UTF-8, with source.skip_invalid), and
    the bytes of text read from the file so far, which source.max_bytes caps."""
    import pyarrow as pa  # (not pyarrow.compute unless needed: 0.1-0.3 s to import)

    if pa.types.is_dictionary(column.type):  # a column written from a DictionaryArray
        column = column.cast(column.type.value_type)
    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        first = next((v for v in column.to_pylist() if not isinstance(v, str)), None)
        raise UserError(
            f"{file.name}: row {row}: {file.text_field!r} is {type(first).__name__}, not a "
            "string; set source.text_field to the column that holds the text"
        )
    if file.max_bytes is not None:
        import pyarrow.compute as pc

        decoded += int(pc.sum(pc.binary_length(column)).as_py() or 0)
    if file.max_bytes is not None and decoded > file.max_bytes:
        raise UserError(
            f"{file.name}: its text is more than source.max_bytes={file.max_bytes} bytes; "
            "raise source.max_bytes (or set it to null) if the file is genuine"
        )
    try:
        texts = column.to_pylist()
    except UnicodeDecodeError:  # which row: each decoded on its own
        raw = column.cast(pa.large_binary() if pa.types.is_large_string(column.type)
                          else pa.binary()).to_pylist()  # fmt: skip
        texts = [_text(v, file, row + i) for i, v in enumerate(raw)]
    if column.null_count:
        i = texts.index(None)
        raise UserError(
            f"{file.name}: row {row + i}: {file.text_field!r} is empty (null), not a string"
        )
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


@dataclass
class _Pages:
    """A column chunk's pages as their headers say: for each data page, its rows and how
    many bytes its rows can hold at most, each and together (decompressed)."""

    rows: list[int]
    each: list[int]  # the longest a row's text can be: its page's, or a dictionary entry's
    together: list[int]  # the most all its rows' texts can be
    dictionary_only: bool  # a dictionary page, and every data page indices into it
    largest: int  # the largest page, decompressed
    text_at_least: int  # the text the pages that store each row's text surely hold

    def rows_within(self, budget: int, most: int) -> int:
        """The most rows (up to `most`, at least 1) that any run of that many rows in the
        chunk can hold in `budget` bytes."""
        low, high = 1, max(most, 1)
        while low < high:  # the largest that fits: what fits for k fits for fewer
            k = (low + high + 1) // 2
            low, high = (k, high) if self._most_in_run(k) <= budget else (low, k - 1)
        return low

    def _most_in_run(self, k: int) -> int:
        """At least the most bytes a run of k rows can hold: over each page it overlaps,
        its rows there (at most k) times the longest a row can be, or all its rows' texts
        if less. A run that starts in page i overlaps at most pages i to the one that holds
        the k-th row from i's last row."""
        import numpy as np

        rows, each, together = (np.asarray(a, dtype=np.int64)
                                for a in (self.rows, self.each, self.together))  # fmt: skip
        held = np.minimum(np.minimum(rows, k) * each, together)
        held_before = np.concatenate([[0], np.cumsum(held)])
        rows_before = np.concatenate([[0], np.cumsum(rows)])
        # a run from page i's last row ends at row rows_before[i + 1] + k - 2, the latest
        last = np.searchsorted(rows_before, rows_before[1:] + k - 2, "right")  # pages i..last-1
        last = np.minimum(last, len(rows))
        return int((held_before[last] - held_before[:-1]).max(initial=0))


def _pages(path: str, group: Any, column: Optional[int]) -> Optional[_Pages]:
    """What the page headers of the text's column chunk in a row group say (the file's own
    headers, which pyarrow reads too, not its footer, which a writer may fill as it likes);
    None if they cannot be read."""
    if column is None or column >= group.num_columns:
        return None
    chunk = group.column(column)
    offsets = [o for o in (chunk.dictionary_page_offset, chunk.data_page_offset) if o]
    if not offsets:
        return None
    position = min(offsets)
    end, found = position + chunk.total_compressed_size, []
    dictionary, entry, least = 0, 0, 1 << 62  # its size, longest and shortest entries
    try:
        with open(path, "rb") as f:
            for _ in range(MAX_PAGES):
                if position >= end:
                    return _summed(found, dictionary, entry, least if dictionary else 0)
                header, length = _page_header(f, position, end)
                plain, packed = header.get(2, -1), header.get(3, -1)
                if not all(isinstance(n, int) and n >= 0 for n in (plain, packed)):
                    return None
                kind = _kind(header)
                if kind == DICTIONARY_PAGE:
                    dictionary = max(dictionary, plain)
                    f.seek(position + length)
                    page = f.read(packed)
                    found_lengths = _entry_lengths(page, plain, header, chunk.compression)
                    shortest, longest = found_lengths or (0, plain)
                    entry, least = max(entry, longest), min(least, shortest)
                elif kind != INDEX_PAGE:
                    rows = _rows(header)
                    if rows is None:
                        return None
                    found.append((kind, rows, plain))
                position += length + packed
    except (OSError, ValueError, IndexError, RecursionError):
        pass
    return None


def _summed(found: list[tuple[Any, int, int]], dictionary: int, entry: int,
            least: int) -> _Pages:  # fmt: skip
    """The pages found (kind, rows, size); the dictionary page's size, its longest entry's
    (its size if unknown) and its shortest entry's (0 if unknown)."""
    rows, each, together, text = [], [], [], 0
    for kind, n, size in found:
        if kind in (PLAIN, DELTA_LENGTH_BYTE_ARRAY):  # less a length and a level each
            text += max(size - 5 * n - n // 4 - 16, 0)
        elif kind == "indices":  # each row an entry, at least the shortest
            text += n * least
        # a row's text stored in its page (PLAIN, DELTA_LENGTH_BYTE_ARRAY): the page holds
        # them all; indices: each an entry of the dictionary page; another encoding (shared
        # prefixes): each no longer than its page, but rows may share one
        row_most = entry if kind == "indices" else size
        rows.append(max(n, 1))
        each.append(row_most)
        together.append(size if kind in (PLAIN, DELTA_LENGTH_BYTE_ARRAY) else n * row_most)
    kinds = {kind for kind, _, _ in found}
    largest = max([dictionary, *(size for _, _, size in found)])
    return _Pages(rows, each, together, bool(dictionary) and kinds <= {"indices"}, largest, text)


CODECS = {"UNCOMPRESSED": None, "SNAPPY": "snappy", "GZIP": "gzip", "BROTLI": "brotli",
          "ZSTD": "zstd", "LZ4_RAW": "lz4_raw"}  # (Parquet's LZ4 is Hadoop's framing)  # fmt: skip


def _entry_lengths(
    page: bytes, size: int, header: dict, compression: str
) -> Optional[tuple[int, int]]:
    """The shortest and the longest entry of a dictionary page (PLAIN: each a 4-byte
    length and its bytes), decompressed as pyarrow would; None if it cannot be read here."""
    import pyarrow as pa

    details = header.get(7)
    count = details.get(1) if isinstance(details, dict) else None
    if not isinstance(count, int) or count < 0 or compression not in CODECS:
        return None
    try:
        codec = CODECS[compression]
        data = bytes(pa.Codec(codec).decompress(page, size)) if codec else page
        if count > len(data) // 4:  # the writer's word: each entry takes 4 bytes at least
            return None
        lengths, position = [], 0
        for _ in range(count):
            lengths.append(int.from_bytes(data[position : position + 4], "little"))
            position += 4 + lengths[-1]
        return (min(lengths), max(lengths)) if lengths and position <= len(data) else None
    except (pa.ArrowException, ValueError, OSError):
        return None


def _rows(header: dict) -> Optional[int]:
    """A data page's rows: its values (a flat column: one a row, nulls too), or V2's rows."""
    details = header.get(5) if header.get(1) == DATA_PAGE else header.get(8)
    if not isinstance(details, dict):
        return None
    rows = details.get(1) if header.get(1) == DATA_PAGE else details.get(3)
    return rows if isinstance(rows, int) and rows >= 0 else None


# Parquet's page types and encodings (parquet.thrift)
DATA_PAGE, INDEX_PAGE, DICTIONARY_PAGE, DATA_PAGE_V2 = 0, 1, 2, 3
PLAIN, PLAIN_DICTIONARY, DELTA_LENGTH_BYTE_ARRAY, RLE_DICTIONARY = 0, 2, 6, 8


def _kind(header: dict) -> Any:
    """A page's type, or a data page's encoding ("indices" for indices into the dictionary
    page; None if it has none)."""
    kind = header.get(1)
    if kind not in (DATA_PAGE, DATA_PAGE_V2):
        return kind
    details = header.get(5 if kind == DATA_PAGE else 8)
    encoding = details.get(2 if kind == DATA_PAGE else 4) if isinstance(details, dict) else None
    return "indices" if encoding in (PLAIN_DICTIONARY, RLE_DICTIONARY) else encoding


MAX_PAGES = 1 << 20  # of one column chunk: more, and its pages are not walked


def _page_header(f: Any, position: int, end: int) -> tuple[dict[int, int], int]:
    """A page header's whole-number fields and its length in bytes (Thrift's compact
    protocol); read in a window that grows while a header (with its statistics) is longer."""
    window = 4096
    while True:
        f.seek(position)
        data = f.read(min(window, end - position))
        try:
            reader = _Compact(data)
            return reader.fields(), reader.position
        except IndexError:
            if len(data) < window or window >= 1 << 26:
                raise
            window *= 4


class _Compact:
    """Just enough of Thrift's compact protocol to read a struct's integers and skip the
    rest."""

    def __init__(self, data: bytes) -> None:
        self.data, self.position = data, 0

    def byte(self) -> int:
        self.position += 1
        return self.data[self.position - 1]

    def varint(self) -> int:
        value = shift = 0
        while shift < 70:
            b = self.byte()
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value
            shift += 7
        raise ValueError("varint too long")

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def fields(self) -> dict[int, Any]:
        found, field = {}, 0
        while (head := self.byte()) != 0:
            kind = head & 0x0F
            field = field + (head >> 4) if head >> 4 else self.zigzag()
            if kind in (4, 5, 6):  # i16, i32, i64
                found[field] = self.zigzag()
            elif kind == 12:
                found[field] = self.fields()
            else:
                self.skip(kind)
        return found

    def skip(self, kind: int, element: bool = False) -> None:
        if kind in (1, 2):  # a bool: in the field's type, a byte of its own in a list
            self.position += 1 if element else 0
        elif kind == 3:
            self.position += 1
        elif kind in (4, 5, 6):
            self.varint()
        elif kind == 7:
            self.position += 8
        elif kind == 8:
            length = self.varint()  # (first: += would add to the position before it)
            self.position += length
        elif kind in (9, 10):  # list, set
            head = self.byte()
            count = head >> 4 if head >> 4 != 15 else self.varint()
            for _ in range(count):
                self.skip(head & 0x0F, element=True)
        elif kind == 11:  # map
            count = self.varint()
            types = self.byte() if count else 0
            for _ in range(count):
                self.skip(types >> 4, element=True)
                self.skip(types & 0x0F, element=True)
        elif kind == 12:
            self.fields()
        else:
            raise ValueError(f"thrift type {kind}")
        if self.position > len(self.data):
            raise IndexError("past the window")


def _leaf(pf: Any, field: str) -> Optional[int]:
    """The text's column among the file's leaf columns, which a row group's footer counts
    (a struct column before it, like dolma's metadata, is several)."""
    paths = [pf.schema.column(i).path for i in range(len(pf.schema))]
    return paths.index(field) if field in paths else None


def _text_bytes(group: Any, column: Optional[int]) -> int:
    """The text column's uncompressed size in a row group (the footer says it)."""
    if column is not None and column < group.num_columns:
        return group.column(column).total_uncompressed_size
    return group.total_byte_size


def _too_long(file: InputFile, where: str, limit: int, what: str = "a text") -> UserError:
    return UserError(
        f"{file.name}: {where}: {what} longer than source.max_uncut_bytes={limit} bytes; "
        "raise source.max_uncut_bytes (memory grows with it), or split the document"
    )


FORMAT = ParquetFormat()
