"""What a Parquet column chunk's page headers say, read without pyarrow: each page's rows
and size, and a dictionary page's shortest and longest entries. The footer counts a text
that many rows share once (a dictionary's entry, shared prefixes) and gives only a row
group's average; the pages' own headers, which pyarrow reads too, bound what a run of rows
can hold (formats/parquet.py sizes its batches by them). A small reader of Thrift's
compact protocol reads them, bounded in pages and bytes: a header it cannot read means
"unknown", never an error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

MAX_PAGES = 1 << 20  # of one column chunk: more, and its pages are not walked
CODECS = {"UNCOMPRESSED": None, "SNAPPY": "snappy", "GZIP": "gzip", "BROTLI": "brotli",
          "ZSTD": "zstd", "LZ4_RAW": "lz4_raw"}  # (Parquet's LZ4 is Hadoop's framing)  # fmt: skip

# parquet.thrift: PageHeader's fields, and those of the headers inside it
PAGE_TYPE, UNCOMPRESSED_SIZE, COMPRESSED_SIZE = 1, 2, 3
DATA_PAGE_HEADER, DICTIONARY_PAGE_HEADER, DATA_PAGE_HEADER_V2 = 5, 7, 8
NUM_VALUES, ENCODING = 1, 2  # DataPageHeader's (NUM_VALUES: DictionaryPageHeader's too)
NUM_ROWS, ENCODING_V2 = 3, 4  # DataPageHeaderV2's
# page types and encodings
DATA_PAGE, INDEX_PAGE, DICTIONARY_PAGE, DATA_PAGE_V2 = 0, 1, 2, 3
PLAIN, PLAIN_DICTIONARY, DELTA_LENGTH_BYTE_ARRAY, RLE_DICTIONARY = 0, 2, 6, 8


@dataclass
class Pages:
    """A column chunk's pages as their headers say: for each data page, its rows and how
    many bytes its rows can hold at most, each and together (decompressed)."""

    rows: list[int]
    each: list[int]  # the longest a row's text can be: its page's, or a dictionary entry's
    together: list[int]  # the most all its rows' texts can be
    dictionary_only: bool  # a dictionary page, and every data page indices into it
    largest: int  # the largest page, decompressed
    text_at_least: int  # the text the pages that store each row's text surely hold
    entries: int = 0  # the dictionary page's entries (0: none, or not known)

    @property
    def shared(self) -> bool:
        """Whether its rows are indices into a dictionary whose entries they share: more
        than two rows an entry (a text stored once for many rows), or entries not known.
        Else (datasets writes each row group's texts as a dictionary of its own, each
        entry one row's) the rows read as plain texts cost no more than the dictionary."""
        return self.dictionary_only and not 0 < sum(self.rows) <= 2 * self.entries

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


def read_pages(path: str, group: Any, column: Optional[int]) -> Optional[Pages]:
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
    end = position + chunk.total_compressed_size
    found: list[tuple[Any, int, int]] = []  # the pages: kind, rows, size
    dictionary, entry, least = 0, 0, 1 << 62  # its size, longest and shortest entries
    entries = 0  # its entries, as its header says
    try:
        with open(path, "rb") as f:
            for _ in range(MAX_PAGES):
                if position >= end:
                    return _summarized(found, dictionary, entry, least if dictionary else 0,
                                       entries)  # fmt: skip
                header, length = _page_header(f, position, end)
                plain, packed = header.get(UNCOMPRESSED_SIZE, -1), header.get(COMPRESSED_SIZE, -1)
                if not all(isinstance(n, int) and n >= 0 for n in (plain, packed)):
                    return None
                kind = _kind(header)
                if kind == DICTIONARY_PAGE:
                    dictionary = max(dictionary, plain)
                    f.seek(position + length)
                    page = f.read(packed)
                    found_lengths = _entry_lengths(page, plain, header, chunk.compression)
                    shortest, longest = found_lengths or (0, plain)
                    entries += _entries(header) if found_lengths else 0
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


def _summarized(found: list[tuple[Any, int, int]], dictionary: int, entry: int,
                least: int, entries: int = 0) -> Pages:  # fmt: skip
    """The pages found (kind, rows, size); the dictionary page's size, its longest entry's
    (its size if unknown) and its shortest entry's (0 if unknown)."""
    rows, each, together, text = [], [], [], 0
    for kind, n, size in found:
        if kind in (PLAIN, DELTA_LENGTH_BYTE_ARRAY):  # less what is not text: each row's
            text += max(size - 5 * n - n // 4 - 16, 0)  # 4-byte length, its level, RLE runs
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
    return Pages(rows, each, together, bool(dictionary) and kinds <= {"indices"}, largest, text,
                 entries)  # fmt: skip


def _entry_lengths(
    page: bytes, size: int, header: dict, compression: str
) -> Optional[tuple[int, int]]:
    """The shortest and the longest entry of a dictionary page (PLAIN: each a 4-byte
    length and its bytes), decompressed as pyarrow would; None if it cannot be read here."""
    import pyarrow as pa

    count = _entries(header)
    if count < 0 or compression not in CODECS:
        return None
    try:
        codec = CODECS[compression]
        # (a memoryview: a dictionary page may be a row group's whole text, not copied)
        data = memoryview(pa.Codec(codec).decompress(page, size) if codec else page)
        if count > len(data) // 4:  # the writer's word: each entry takes 4 bytes at least
            return None
        lengths, position = [], 0
        for _ in range(count):
            lengths.append(int.from_bytes(data[position : position + 4], "little"))
            position += 4 + lengths[-1]
        return (min(lengths), max(lengths)) if lengths and position <= len(data) else None
    except (pa.ArrowException, ValueError, OSError):
        return None


def _entries(header: dict) -> int:
    """A dictionary page's entries, as its header says (-1 if it does not)."""
    details = header.get(DICTIONARY_PAGE_HEADER)
    count = details.get(NUM_VALUES) if isinstance(details, dict) else None
    return count if isinstance(count, int) and count >= 0 else -1


def _rows(header: dict) -> Optional[int]:
    """A data page's rows: its values (a flat column: one a row, nulls too), or V2's rows."""
    v1 = header.get(PAGE_TYPE) == DATA_PAGE
    details = header.get(DATA_PAGE_HEADER if v1 else DATA_PAGE_HEADER_V2)
    if not isinstance(details, dict):
        return None
    rows = details.get(NUM_VALUES if v1 else NUM_ROWS)
    return rows if isinstance(rows, int) and rows >= 0 else None


def _kind(header: dict) -> Any:
    """A page's type, or a data page's encoding ("indices" for indices into the dictionary
    page; None if it has none)."""
    kind = header.get(PAGE_TYPE)
    if kind not in (DATA_PAGE, DATA_PAGE_V2):
        return kind
    v1 = kind == DATA_PAGE
    details = header.get(DATA_PAGE_HEADER if v1 else DATA_PAGE_HEADER_V2)
    field = ENCODING if v1 else ENCODING_V2
    encoding = details.get(field) if isinstance(details, dict) else None
    return "indices" if encoding in (PLAIN_DICTIONARY, RLE_DICTIONARY) else encoding


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
        found: dict[int, Any] = {}
        field = 0
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
