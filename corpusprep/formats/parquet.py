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
        names = pf.schema_arrow.names
        column = names.index(file.text_field) if file.text_field in names else None
        shards, start, size = [], 0, 0
        for i in range(meta.num_row_groups):
            group = meta.row_group(i)
            # packed by the text it holds: the text column's uncompressed size (the column
            # index is the field's when the schema is flat, as for a text column)
            text = group.column(column).total_uncompressed_size if column is not None and (
                column < group.num_columns) else group.total_byte_size  # fmt: skip
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
        groups = list(range(segment.start, segment.end))
        row = sum(pf.metadata.row_group(i).num_rows for i in range(segment.start))
        batches = pf.iter_batches(BATCH_ROWS, row_groups=groups, columns=[file.text_field])
        try:
            for batch in batches:
                for value in batch.column(0).to_pylist():
                    if not isinstance(value, str):
                        raise UserError(
                            f"{file.name}: row {row}: {file.text_field!r} is "
                            f"{type(value).__name__}, not a string"
                        )
                    row += 1
                    yield Part([value], whole=value)
        except UserError:
            raise
        except Exception as e:
            raise UserError(f"{file.name}: cannot read row {row} ({e})") from None


FORMAT = ParquetFormat()
