"""Merge: the shards' part files become the two token streams, train.bin and val.bin
(with where each document starts), in the order the run asks for.

1. concatenate each side's parts in plan order (never finish order): the corpus order;
   split_by=document: the shards encoded one stream, and each document goes to its side
   here, read in plan order, so the split needs no count of the documents beforehand;
2. order=shuffle: rewrite each side with its documents in the seeded permutation's order
   (sequential writes, random reads from the page cache; memory: the document index);
3. split_by=head|tail: every document was encoded to one stream; val becomes its first
   (or last) val_size tokens and train the rest.

Everything is decided from the document index and the token counts, after encoding, so
the result is the same for any number of workers, shards or machines.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Optional

import numpy as np

from corpusprep.progress import Bar
from corpusprep.shards import SIDES, EncodeResult, Index, add_text_bytes
from corpusprep.writer import (
    GrowingDigest,
    OutputWriter,
    check_free_space,
    copy_range,
    save_array,
)

GATHER_TOKENS = 1 << 22  # tokens per gather step of the shuffle (about 50 MB with positions)
LONG_RUN = 1 << 15  # tokens: documents on one side this long on average are copied, not masked


@dataclass(frozen=True)
class PartFile:
    shard: int
    side: str
    tokens: str  # path of the part's ids
    index: Optional[str]  # path of its document starts (uint64), None for one text


@dataclass
class Merged:
    """What the streams hold once merged: tokens and documents per side. Where the split
    cut through a document (split_by=position, head or tail), the part of it that begins
    the other side is a document of that side too (as in Megatron's .idx, and first in its
    document index, at 0): a side with tokens holds at least one document (one text: one
    on each side)."""

    tokens: dict[str, int]
    docs: dict[str, int]
    val_bytes: Optional[int] = None  # val's UTF-8 bytes, where the split counted them

    def __post_init__(self) -> None:
        self.docs = {side: max(n, 1) if self.tokens.get(side) else n
                     for side, n in self.docs.items()}  # fmt: skip


def merge(out: OutputWriter, parts: list[PartFile], results: list[EncodeResult], dtype: str,
          order: Optional[dict[str, np.ndarray]] = None,
          cut: Optional[tuple[str, int]] = None, val_docs: Optional[np.ndarray] = None,
          token_bytes: Optional[np.ndarray] = None, show: bool = False) -> Merged:  # fmt: skip
    """Write train.bin / val.bin (and *.docs.bin) under temporary names in `out`.
    order: per side, its documents' new order (indices into the side's corpus order);
    cut: ("head" | "tail", n): val is the first | last n tokens of the one stream;
    val_docs: split_by=document: which documents of the one stream go to val (and
    token_bytes: each id's UTF-8 bytes, to count val's as it is split off);
    show: progress bars (on a terminal)."""
    itemsize = np.dtype(dtype).itemsize
    totals = {side: sum(getattr(r, f"{side}_tokens") for r in results) for side in SIDES}
    # the merge writes every id once more (twice with a shuffle) while the parts still exist
    check_free_space(out.out_dir, sum(totals.values()) * itemsize * (2 if order or cut else 1),
                     out.needed)  # fmt: skip
    indexed = bool(parts) and parts[0].index is not None
    docs = {side: sum(getattr(r, f"{side}_docs") for r in results) for side in SIDES}
    follow = not (order or cut)  # a shuffle or a cut rewrites the streams afterwards
    with ExitStack() as stack:
        # each stream's sha256 taken in a thread as it is written: the seal reads it no more
        streams = [out.temp(f"{side}.bin") for side in SIDES]  # registered either way
        digests = [stack.enter_context(GrowingDigest(out, path)) if follow else None
                   for path in streams]  # fmt: skip
        val_bytes = None
        if val_docs is not None:
            totals, docs, val_bytes = _split_documents(out, parts, results, dtype, val_docs,
                                                       token_bytes, show, digests)  # fmt: skip
        for side, digest in zip(SIDES, digests) if val_docs is None else ():
            mine = sorted((p for p in parts if p.side == side), key=lambda p: p.shard)
            with Bar(f"merge {side}.bin", totals[side] * itemsize, show) as bar:
                _concatenate(out.path_of(f"{side}.bin"), [p.tokens for p in mine],
                             totals[side] * itemsize, bar.update, digest)  # fmt: skip
            if indexed:
                counts = [getattr(r, f"{side}_tokens") for r in results]
                docs[side] += _concatenate_index(out.temp(f"{side}.docs.bin"),
                                                 [p.index for p in mine], counts)  # fmt: skip
    if order:
        for side in SIDES:
            with Bar(f"shuffle {side}.bin", totals[side] * itemsize, show) as bar:
                _reorder(out, side, dtype, order[side], bar.update)
    if cut:
        return _cut(out, dtype, *cut, indexed, show)
    return Merged(totals, docs, val_bytes)


def _split_documents(out: OutputWriter, parts: list[PartFile], results: list[EncodeResult],
                     dtype: str, val_docs: np.ndarray, token_bytes: Optional[np.ndarray],
                     show: bool, digests: list[Optional[GrowingDigest]],
                     ) -> tuple[dict[str, int], dict[str, int], Optional[int]]:  # fmt: skip
    """The one stream (every shard's part, in plan order) into train.bin and val.bin, each
    document whole on its side: read GATHER_TOKENS at a time, each block's ids picked by a
    mask of its documents' sides (memory: the document index and one block). Also val's
    UTF-8 bytes, from the ids it reads (None: some went by a copy, unread)."""
    dt = np.dtype(dtype)
    val_bytes = None if token_bytes is None else 0
    as_intp = Index()
    mine = sorted(parts, key=lambda p: p.shard)
    counts = [r.train_tokens for r in results]
    offsets = np.cumsum([0, *counts])
    starts = np.concatenate([np.zeros(0, np.int64)] + [
        np.fromfile(p.index, dtype=np.uint64).astype(np.int64) + offset
        for p, offset in zip(mine, offsets)])  # fmt: skip
    if len(starts) != len(val_docs):
        raise RuntimeError(f"{len(val_docs)} documents to split, {len(starts)} in the index")
    lengths = np.diff(np.append(starts, offsets[-1]))
    # runs of neighbouring documents on the same side: where each starts, and its side
    change = np.flatnonzero(val_docs[1:] != val_docs[:-1]) + 1
    first = np.concatenate([[0], change]).astype(np.int64)
    run_side, run_start = val_docs[first], starts[first]
    run_end = np.append(run_start[1:], offsets[-1])
    with ExitStack() as stack:
        dst = [stack.enter_context(open(out.path_of(f"{side}.bin"), "r+b")) for side in SIDES]
        bar = stack.enter_context(Bar("split train.bin / val.bin", int(offsets[-1]) * dt.itemsize,
                                      show))  # fmt: skip
        for part, offset, n in zip(mine, offsets, counts):
            with open(part.tokens, "rb") as src:
                i, j = (
                    np.searchsorted(run_end, offset, "right"),
                    np.searchsorted(run_start, offset + n),
                )
                if n and n // max(j - i, 1) >= LONG_RUN:  # few runs: each copied whole
                    for k in range(i, j):
                        a, b = (
                            max(int(run_start[k]), int(offset)),
                            min(int(run_end[k]), int(offset) + n),
                        )
                        copy_range(src, dst[int(run_side[k])], (a - int(offset)) * dt.itemsize,
                                   (b - a) * dt.itemsize, bar.update)  # fmt: skip
                        if run_side[k] and b > a:
                            val_bytes = None  # copied unread: measure counts val
                    _grown(dst, digests)
                    continue
                for a in range(int(offset), int(offset) + n, GATHER_TOKENS):
                    b = min(a + GATHER_TOKENS, int(offset) + n)
                    block = np.fromfile(src, dtype=dt, count=b - a)
                    if len(block) != b - a:
                        raise RuntimeError(f"{part.tokens}: ended {b - a - len(block)} ids early")
                    i, j = np.searchsorted(run_end, a, "right"), np.searchsorted(run_start, b)
                    if j - i == 1:  # the block lies in one run: all to one side
                        dst[int(run_side[i])].write(memoryview(block))
                        if run_side[i]:
                            val_bytes = add_text_bytes(val_bytes, block, token_bytes, as_intp)
                    else:
                        within = np.minimum(run_end[i:j], b) - np.maximum(run_start[i:j], a)
                        to_val = np.repeat(run_side[i:j], within)
                        dst[0].write(memoryview(block[~to_val]))
                        dst[1].write(memoryview(to_val_ids := block[to_val]))
                        val_bytes = add_text_bytes(val_bytes, to_val_ids, token_bytes, as_intp)
                    bar.update((b - a) * dt.itemsize)
                    _grown(dst, digests)
    totals, docs = {}, {}
    for k, side in enumerate(SIDES):
        mine_lengths = lengths[val_docs == bool(k)]
        index = np.cumsum(mine_lengths) - mine_lengths
        save_array(index.astype(np.uint64), out.temp(f"{side}.docs.bin"))
        totals[side], docs[side] = int(mine_lengths.sum()), len(mine_lengths)
    return totals, docs, val_bytes


def _grown(files: list[BinaryIO], digests: list[Optional[GrowingDigest]]) -> None:
    """What each stream holds so far is final: its digest may read it."""
    for f, digest in zip(files, digests):
        if digest is not None:
            f.flush()
            digest.grew(f.tell())


def _concatenate(dst_path: Path, sources: list[str], expected: int,
                 progress: Callable[[int], None],
                 digest: Optional[GrowingDigest] = None) -> None:  # fmt: skip
    with open(dst_path, "r+b") as dst:
        for path in sources:
            with open(path, "rb") as src:
                copy_range(src, dst, 0, os.path.getsize(path), progress)
            _grown([dst], [digest])
        if dst.tell() != expected:
            raise RuntimeError(f"{dst_path.name}: merged {dst.tell()} bytes, not {expected}")


def _concatenate_index(dst_path: Path, sources: list[str], counts: list[int]) -> int:
    """Document starts, shifted by the tokens of the shards before; first a start at 0
    where the side begins inside a document (split_by=position cut through it: its rest
    is a document of this side). Returns the number of such starts added (0 or 1)."""
    lead = _begins_inside(sources, counts)
    with open(dst_path, "r+b") as dst:
        if lead:
            save_array(np.zeros(1, dtype=np.uint64), dst)
        base = 0
        for path, tokens in zip(sources, counts):
            save_array(np.fromfile(path, dtype=np.uint64) + np.uint64(base), dst)
            base += tokens
    return int(lead)


def _begins_inside(sources: list[str], counts: list[int]) -> bool:
    """The side has tokens and its first document start (if any) is not at token 0."""
    base = 0
    for path, tokens in zip(sources, counts):
        first = np.fromfile(path, dtype=np.uint64, count=1)
        if len(first):
            return int(first[0]) + base != 0
        base += tokens
    return base > 0


def _with_leading_part(starts: np.ndarray) -> np.ndarray:
    """A side's document starts (sorted, non-empty side), with one at 0 first if the side
    begins inside a document: the part there is a document of its own."""
    if len(starts) and starts[0] == 0:
        return starts
    return np.concatenate([np.zeros(1, dtype=starts.dtype), starts])


def _starts_and_ends(out: OutputWriter, side: str, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    starts = np.fromfile(out.path_of(f"{side}.docs.bin"), dtype=np.uint64).astype(np.int64)
    total = os.path.getsize(out.path_of(f"{side}.bin")) // np.dtype(dtype).itemsize
    return starts, np.append(starts[1:], total)


def _reorder(out: OutputWriter, side: str, dtype: str, order: np.ndarray,
             progress: Callable[[int], None]) -> None:  # fmt: skip
    """Rewrite one side with its documents in `order`: sequential writes, random reads,
    GATHER_TOKENS at a time from a fresh memory map (memory: the index, not the corpus)."""
    path = out.path_of(f"{side}.bin")
    starts, ends = _starts_and_ends(out, side, dtype)
    if len(order) != len(starts):
        raise RuntimeError(f"{side}: {len(order)} documents to order, {len(starts)} in the index")
    lengths = ends - starts
    ordered_starts, ordered_lengths = starts[order], lengths[order]
    # where each group of documents ends: about GATHER_TOKENS tokens a group
    bounds = np.searchsorted(np.cumsum(ordered_lengths), np.arange(
        GATHER_TOKENS, int(ordered_lengths.sum()) + GATHER_TOKENS, GATHER_TOKENS))  # fmt: skip
    shuffled = out.scratch(f"{side}.bin.order")
    with open(shuffled, "wb") as dst:
        first = 0
        for last in np.unique(np.append(bounds + 1, len(order)).clip(max=len(order))):
            group_starts, group_lengths = ordered_starts[first:last], ordered_lengths[first:last]
            first = last
            if not group_lengths.sum():
                continue
            # every token position of the group's documents, in order
            shift = np.repeat(group_starts - np.cumsum(group_lengths) + group_lengths,
                              group_lengths)  # fmt: skip
            positions = np.arange(int(group_lengths.sum())) + shift
            source = np.memmap(path, dtype=dtype, mode="r")  # mapped anew: pages let go
            dst.write(source[positions].tobytes())
            del source
            progress(len(positions) * np.dtype(dtype).itemsize)
    os.replace(shuffled, path)
    new_starts = np.concatenate([[0], np.cumsum(lengths[order])[:-1]]).astype(np.uint64)
    save_array(new_starts, out.path_of(f"{side}.docs.bin"))


def _cut(out: OutputWriter, dtype: str, mode: str, n: int, indexed: bool,
         show: bool = False) -> Merged:  # fmt: skip
    """Everything is in the train stream: move its first (head) or last (tail) n tokens
    to val."""
    itemsize = np.dtype(dtype).itemsize
    stream = out.path_of("train.bin")
    total = os.path.getsize(stream) // itemsize
    val_at = 0 if mode == "head" else total - n
    train_at = n if mode == "head" else 0
    copied = total if mode == "head" else n  # head: train is copied too
    with Bar("write val.bin", copied * itemsize, show) as bar:
        with open(stream, "rb") as src, open(out.path_of("val.bin"), "wb") as val:
            copy_range(src, val, val_at * itemsize, n * itemsize, bar.update)
        if mode == "head":  # train: the stream from n on, moved to the front
            bar.describe("write train.bin")
            rest = out.scratch("train.bin.rest")
            with open(stream, "rb") as src, open(rest, "wb") as dst:
                copy_range(src, dst, n * itemsize, (total - n) * itemsize, bar.update)
            os.replace(rest, stream)
    if mode == "tail":
        os.truncate(stream, (total - n) * itemsize)
    docs = {"val": 1, "train": 1}  # one text: a part of it on each side
    if indexed:
        starts = np.fromfile(out.path_of("train.docs.bin"), dtype=np.uint64).astype(np.int64)
        # tail: val runs to the stream's end, empty documents there (at `total`) included
        in_val = starts >= val_at if mode == "tail" else starts < n
        # the side after the cut begins inside the document the cut went through, unless
        # the cut is where a document starts
        sides = {"val": _with_leading_part(starts[in_val] - val_at),
                 "train": _with_leading_part(starts[~in_val] - train_at)}  # fmt: skip
        for side, mine in sides.items():
            save_array(mine.astype(np.uint64), out.path_of(f"{side}.docs.bin"))
        docs = {side: len(mine) for side, mine in sides.items()}
    return Merged({"train": total - n, "val": n}, docs)
