"""Megatron-LM's indexed dataset (megatron/core/datasets/indexed_dataset.py, the "MMIDIDX"
format that tools/preprocess_data.py writes), one per split:
`{name}_train_text_document.bin` / `.idx` and `{name}_val_text_document.bin` / `.idx`
(preprocess_data.py's `{prefix}_{key}_{level}` with key `text`, level `document`); give
Megatron `--data-path {name}_train_text_document` (the prefix, without the suffix).

`.bin` is the tokens, flat, little-endian: exactly nanoGPT's train.bin, so it is moved into
place, not copied. `.idx`, all little-endian:

    9 bytes   b"MMIDIDX\\x00\\x00"
    uint64    version, 1
    uint8     dtype code of the tokens: 8 = uint16, 4 = int32 (Megatron's DType has no
              uint32: uint32 ids are written as int32, whose bytes are the same for an id
              below 2**31). preprocess_data.py takes DType.optimal_dtype(vocab_size):
              uint16 under 65,500 ids, else int32, so with dtype=auto a vocabulary of
              65,500 ids or more is uint32 here (MegatronExporter.wide_from), though ids
              below 65,536 fit uint16: the files are Megatron's own
    uint64    sequence count S
    uint64    document count D + 1 (the length of the document indices)
    int32[S]  sequence lengths, in tokens
    int64[S]  sequence pointers, in bytes into .bin
    int64[D+1] document indices: the first sequence of each document, then S

One document is one sequence (document indices 0, 1, ..., D), from corpusprep's document
index; a single text is one document per split. A document longer than an int32 holds
(2**31 - 1 tokens) becomes several sequences of that one document, as the format allows.
An empty document (eot=none and a text of no tokens) has no sequence, its document index
the same as the next one's, as IndexedDatasetBuilder.add_document(ids, []) records one:
preprocess_data.py gives a document no sequence length when it has no tokens.
Everything is streamed through the document index in chunks: memory stays flat.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, Optional

import numpy as np

from corpusprep.exporters import Exporter, Streams
from corpusprep.exporters.llmc import check_stem, file_stem
from corpusprep.progress import Bar
from corpusprep.writer import OutputWriter

INDEX_HEADER = b"MMIDIDX\x00\x00"
VERSION = 1
DTYPE_CODES = {"uint16": 8, "uint32": 4}  # uint32 ids are written as Megatron's int32 (code 4)
CODE_NAMES = {8: "uint16", 4: "int32"}
MAX_SEQUENCE = 2**31 - 1  # sequence lengths are int32
CHUNK = 1 << 20  # documents per step


def prefix(name: str, side: str) -> str:
    return f"{file_stem(name)}_{side}_text_document"


def sequences(
    starts: Optional[np.ndarray], total: int, max_len: int = MAX_SEQUENCE
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """From where documents start (token offsets; None: one document), chunk by chunk:
    (sequence starts, sequence lengths, each document's first sequence counted from the
    chunk's first). A side that begins inside a document (split_by=position, head or tail
    cut through one) has that document's rest first: a document of its own."""
    if starts is None or len(starts) == 0:  # no document starts in it: one document
        starts = np.zeros(1, dtype=np.uint64)
    n = len(starts)
    if int(starts[0]) != 0:
        yield _pieces(np.zeros(1, dtype=np.int64), np.array([int(starts[0])]), max_len)
    for a in range(0, n, CHUNK):
        b = min(a + CHUNK, n)
        first = np.asarray(starts[a:b], dtype=np.int64)
        ends = np.append(first[1:], int(starts[b]) if b < n else total)
        yield _pieces(first, ends - first, max_len)


def _pieces(first: np.ndarray, lengths: np.ndarray,
            max_len: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """Documents as sequences: each one, several where it is longer than max_len, none
    where it is empty (Megatron's builder records no length for a document of no tokens)."""
    pieces = -(-lengths // max_len)  # ceil: 0 for an empty document
    heads = np.cumsum(pieces) - pieces  # each document's first sequence
    if (pieces == 1).all():
        return first, lengths, heads
    doc = np.repeat(np.arange(len(first)), pieces)
    k = np.arange(len(doc)) - np.repeat(heads, pieces)
    seq_starts = first[doc] + k * max_len
    seq_lengths = np.minimum(max_len, lengths[doc] - k * max_len)
    return seq_starts, seq_lengths, heads


def write_index(f: BinaryIO, starts: Optional[np.ndarray], total: int, dtype: str,
                max_len: int = MAX_SEQUENCE,
                progress: Optional[Callable[[int], None]] = None) -> tuple[int, int]:  # fmt: skip
    """Write the .idx; returns (sequences, documents). `progress`: told the documents of
    every chunk written, for a bar."""
    itemsize = np.dtype(dtype).itemsize
    count = docs = 0
    for seq_starts, _, heads in sequences(starts, total, max_len):
        count += len(seq_starts)
        docs += len(heads)
    f.write(INDEX_HEADER)
    f.write(struct.pack("<Q", VERSION))
    f.write(struct.pack("<B", DTYPE_CODES[dtype]))
    f.write(struct.pack("<Q", count))
    f.write(struct.pack("<Q", docs + 1))
    base = f.tell()
    where = {"lengths": base, "pointers": base + 4 * count, "documents": base + 12 * count}
    seen = 0
    for seq_starts, seq_lengths, heads in sequences(starts, total, max_len):
        for part, array in (
            ("lengths", seq_lengths.astype("<i4")),
            ("pointers", (seq_starts * itemsize).astype("<i8")),
            ("documents", (heads + seen).astype("<i8")),
        ):
            f.seek(where[part])
            f.write(array.tobytes())
            where[part] += array.nbytes
        seen += len(seq_starts)
        if progress is not None:
            progress(len(heads))
    f.seek(where["documents"])
    f.write(struct.pack("<q", count))
    return count, docs


class MegatronExporter(Exporter):
    copies_ids = False  # its files are the merged ones, renamed
    wide_from = 65500  # indexed_dataset.py DType.optimal_dtype: int32 from 65,500 ids

    def __init__(self) -> None:
        self._described: dict[str, Any] = {}

    def check(self, name: str) -> None:
        check_stem(name)

    def export(self, streams: Streams, out: OutputWriter) -> dict[str, int]:
        itemsize = np.dtype(streams.dtype).itemsize
        produced: dict[str, int] = {}
        sides: dict[str, Any] = {}
        for side in ("train", "val"):
            stem = prefix(streams.name, side)
            src = Path(getattr(streams, side))
            total = src.stat().st_size // itemsize
            docs_path = getattr(streams, f"{side}_docs")
            starts = None
            if docs_path is not None and Path(docs_path).stat().st_size:
                starts = np.memmap(docs_path, dtype="<u8", mode="r")
            idx = out.temp(f"{stem}.idx")
            documents = 1 if starts is None else len(starts)
            bar = Bar(f"write {stem}.idx", documents, streams.show, unit="doc")
            with open(idx, "r+b") as f, bar:
                count, docs = write_index(f, starts, total, streams.dtype, progress=bar.update)
            del starts
            # the tokens are already laid out as Megatron wants: rename, no copy
            os.replace(src, out.temp(f"{stem}.bin"))
            out.drop(f"{side}.bin")
            if docs_path is not None:
                out.drop(f"{side}.docs.bin")  # the .idx holds it now
            produced[f"{stem}.bin"] = total * itemsize
            produced[f"{stem}.idx"] = idx.stat().st_size
            sides[side] = {"prefix": stem, "sequences": count, "documents": docs}
        self._described = {
            "dtype_code": DTYPE_CODES[streams.dtype],
            "token_dtype": CODE_NAMES[DTYPE_CODES[streams.dtype]],
            "document_index": streams.train_docs is not None,
            "splits": sides,
        }
        return produced

    def describe(self) -> dict[str, Any]:
        return {"kind": "megatron", **self._described}
