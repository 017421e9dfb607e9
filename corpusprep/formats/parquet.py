"""Parquet: one row per document, the text in column source.text_field. Read in record
batches through pyarrow (an optional extra: pip install 'corpusprep[parquet]'), so memory
stays bounded; the shards of a file are runs of its row groups."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Optional

from corpusprep.errors import UserError
from corpusprep.formats import Format, InputFile, Part, Segment

BATCH_ROWS = 1024


def _open(file: InputFile) -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise UserError(
            f"{file.name}: reading Parquet needs pyarrow: pip install 'corpusprep[parquet]'"
        ) from None
    if not file.seekable:
        raise UserError(f"{file.name}: a compressed Parquet file; decompress it first")
    try:
        return pq.ParquetFile(file.path)
    except Exception as e:  # pyarrow.ArrowInvalid and friends
        raise UserError(f"{file.name}: not a readable Parquet file ({e})") from None


class ParquetFormat(Format):
    name = "parquet"

    def plan(self, file: InputFile, shard_bytes: int, boundary: Optional[re.Pattern],
             pieces: bool = False) -> list:  # fmt: skip
        pf = _open(file)
        meta = pf.metadata
        column = _leaf(pf, file.text_field)
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
        file = segment.file
        pf = _open(file)
        if file.text_field not in pf.schema_arrow.names:
            raise UserError(
                f"{file.name}: no column {file.text_field!r} (found {pf.schema_arrow.names}); "
                "set source.text_field to the column that holds the text"
            )
        row = sum(pf.metadata.row_group(i).num_rows for i in range(segment.start))
        limit = file.max_uncut_bytes
        column = _leaf(pf, file.text_field)
        try:
            for group in range(segment.start, segment.end):
                meta = pf.metadata.row_group(group)
                rows, size = meta.num_rows, _text_bytes(meta, column)
                if rows and size > limit * rows:  # one text at least is longer: not read
                    where = f"row {row}" if rows == 1 else f"rows {row}-{row + rows - 1}"
                    raise _too_long(file, where, limit, "one text at least is")
                # as many rows as hold about `limit` bytes, at most BATCH_ROWS: a group of
                # long texts is read a few at a time
                batch = max(1, min(BATCH_ROWS, limit * rows // max(size, 1)))
                for values in pf.iter_batches(batch, row_groups=[group], columns=[file.text_field]):
                    for value in values.column(0).to_pylist():
                        if not isinstance(value, str):
                            raise UserError(
                                f"{file.name}: row {row}: {file.text_field!r} is "
                                f"{type(value).__name__}, not a string"
                            )
                        if len(value) * 4 > limit and len(value.encode()) > limit:
                            raise _too_long(file, f"row {row}", limit)
                        row += 1
                        yield Part([value], whole=value)
        except UserError:
            raise
        except Exception as e:
            raise UserError(f"{file.name}: cannot read row {row} ({e})") from None


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
