"""The work done on one shard, as pure functions an executor can run anywhere.

Two passes, as nanoGPT needs the whole text before it can number characters or split:
  scan_shard    count characters and documents, collect the distinct characters, and
                check the input (JSON, fields; UTF-8 once encoded) before anything is in place;
  encode_shard  encode the shard's documents, each on its own, give each to train or val,
                and write the ids (and where documents start) where the plan says;
  encode_run    encode_shard on consecutive pieces of a file, in one worker (scan_run: scan).
Results come back in plan order, so the output never depends on how many workers there
were or which finished first.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from itertools import groupby
from operator import itemgetter
from typing import Optional

import numpy as np

from corpusprep.errors import SHORTER, changed_while_read
from corpusprep.formats import Census, Part, Segment, get_format
from corpusprep.sample import Sample, Sampler, SampleRule
from corpusprep.split import KEY_HASHES, goes_to_train, key_hash_for
from corpusprep.text import count_chars
from corpusprep.tokenizers import Tokenizer
from corpusprep.writer import Identity, file_identity, save_array, start_writeback

SIDES = ("train", "val")
# the splits whose documents are keyed by their content (for the duplicate count, and
# split_by=hash's assignment); the others keep no keys
KEYED = ("stream", "document", "hash")


@dataclass(frozen=True)
class Shard:
    """A unit of work: a run of segments (a piece of a big file, or many small files)."""

    index: int
    segments: tuple[Segment, ...]

    @property
    def label(self) -> str:
        return f"shard {self.index}"

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes for s in self.segments)

    def parts(self) -> Iterator[Part]:
        for segment in self.segments:
            yield from get_format(segment.file.format).parts(segment)


@dataclass(frozen=True)
class ScanResult:
    chars: int  # characters of text (newlines translated, as len(open().read()) counts them)
    charset: str  # every distinct character, sorted
    docs: int  # documents that start in this shard
    skipped: int  # invalid documents left out (source.skip_invalid)
    sample: Optional[Sample] = None  # the shard's training units (a tokenizer that trains)
    # the bytes of text it read of each Parquet file that source.max_bytes caps (the
    # driver adds them up over the file's shards, as EncodeResult.read_bytes)
    read_bytes: dict[str, int] = field(default_factory=dict)


def scan_shard(shard: Shard, rule: Optional[SampleRule] = None) -> ScanResult:
    total = Census()
    sampler = Sampler(rule) if rule is not None else None
    read_bytes: dict[str, int] = {}
    for segment in shard.segments:
        census = get_format(segment.file.format).scan(segment, sampler)
        if segment.file.capped_in_shards:  # (0 for no rows: the driver needs each)
            name = segment.file.name
            read_bytes[name] = read_bytes.get(name, 0) + census.read
        total.chars += census.chars
        total.docs += census.docs
        total.skipped += census.skipped
        total.seen |= census.seen
    sample = sampler.result() if sampler is not None else None
    return ScanResult(total.chars, "".join(sorted(total.seen)), total.docs, total.skipped, sample,
                      read_bytes)  # fmt: skip


def count_characters(shard: Shard) -> ScanResult:
    """What the scan would count in a shard of one plain UTF-8 text, from its bytes alone:
    one character per byte that starts one, "\r\n" as one (universal newlines; a shard
    never ends between them). No character set (a tokenizer that learns none)."""
    chars = 0
    for segment in shard.segments:
        with open(segment.file.path, "rb") as f:
            f.seek(segment.start)
            counted, left = count_chars(f, segment.end - segment.start)
            chars += counted
            if left > 0:
                raise changed_while_read(segment.file.name, SHORTER)
    return ScanResult(chars, "", int(shard.segments[0].start == 0), 0)


@dataclass(frozen=True)
class Target:
    """Where one side's ids go: a file and the token position in it."""

    path: str
    position: int = 0
    fresh: bool = False  # a part file of this shard's own: start it empty (a retry may redo it)


@dataclass(frozen=True)
class Rules:
    """How every shard of a run encodes: decided once by the driver, the same for all."""

    tokenizer: Tokenizer
    dtype: str
    split_by: str  # position | hash (routed here) | stream (one stream, split after merging)
    split: float = 0.9  # hash: each document's chance to go to train
    split_char: int = 0  # position: characters before this go to train
    seed: int = 0  # hash: the seed of the assignment hash
    eot: str = "none"  # append | prepend | none
    eot_id: Optional[int] = None
    # position | hash: each id's UTF-8 bytes, to count val's text as it is written (the
    # manifest's val_bytes, without a pass over val.bin); None: the driver counts it
    val_token_bytes: Optional[np.ndarray] = field(default=None, compare=False)

    @property
    def key_hash(self) -> str:
        """The hash that keys each document (see split.key_hash_for)."""
        return key_hash_for(self.split_by)

    def document_key(self, text: str) -> bytes:
        """A document's key, by this run's hash."""
        return KEY_HASHES[self.key_hash](text)


@dataclass
class EncodeTask:
    """One shard's work: the run's rules, where the shard starts, and where it writes."""

    shard: Shard
    rules: Rules
    first_char: int = 0  # position: index in the whole text of the shard's first character
    first_doc: int = 0  # index of the first document that starts in this shard
    doc_keys: dict[str, bytes] = field(default_factory=dict)  # long documents' keys, by file
    train: Optional[Target] = None
    val: Optional[Target] = None
    train_index: Optional[str] = None  # where document starts go (uint64 token offsets)
    val_index: Optional[str] = None
    marker: Optional[str] = None  # written last, when the shard's parts are complete
    # document: which documents go to val, from the one before first_doc (a long document
    # the shard continues) to the shard's last
    val_docs: Optional[np.ndarray] = None

    @property
    def label(self) -> str:
        return self.shard.label


@dataclass
class EncodeResult:
    train_tokens: int = 0
    val_tokens: int = 0
    train_docs: int = 0
    val_docs: int = 0
    chars: int = 0  # characters encoded (what the scan pass counts, for a run without one)
    skipped: int = 0  # invalid documents left out (source.skip_invalid)
    # 64-bit keys of the documents on each side, to count exact duplicates across sides
    train_keys: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    val_keys: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    # which ids the shard wrote (np.packbits of one flag per id), for the manifest's
    # vocab_used; None where unknown (a shard resumed from an earlier run)
    ids_seen: Optional[np.ndarray] = None
    val_bytes: Optional[int] = None  # the UTF-8 bytes of the val ids it wrote; None: not counted
    # the sha256 of each small text file it read whole (the driver does not read them),
    # and its identity once read (file_identity: the driver checks it against the listing's)
    digests: dict[str, bytes] = field(default_factory=dict)
    read_as: dict[str, Identity] = field(default_factory=dict)
    # the bytes of text it read of each Parquet file that source.max_bytes caps (the
    # driver adds them up over the file's shards)
    read_bytes: dict[str, int] = field(default_factory=dict)

    @property
    def docs(self) -> int:
        return self.train_docs + self.val_docs

    @property
    def tokens(self) -> int:
        return self.train_tokens + self.val_tokens


WRITE_BYTES = 1 << 22  # small arrays of ids are held until this many bytes, then written
HOLD_BYTES = 1 << 16  # an array this big is written at once


class Index:
    """Ids (uint16 or uint32, the outputs' dtype) as numpy's intp, a chunk at a time in one
    buffer: numpy indexes by intp fastest (a third less time than by uint16 ids as they
    are, bench/README.md), and a chunk this size stays in the cache."""

    CHUNK = 1 << 16

    def __init__(self) -> None:
        self.buffer = np.empty(self.CHUNK, dtype=np.intp)

    def chunks(self, ids: np.ndarray) -> Iterator[np.ndarray]:
        for start in range(0, len(ids), self.CHUNK):
            chunk = ids[start : start + self.CHUNK]
            index = self.buffer[: len(chunk)]
            np.copyto(index, chunk, casting="safe")  # ids are unsigned, at most 32 bits
            yield index


class _Seen:
    """Which ids a shard wrote: a flag per id up to the tokenizer's max_id (an id beyond
    it, a plugin's bug, leaves the answer unknown rather than failing the shard)."""

    flags: Optional[np.ndarray]

    MOST_IDS = 1 << 24  # a vocabulary larger than this (a plugin's) is counted instead

    def __init__(self, max_id: int) -> None:
        self.flags = np.zeros(max_id + 1, dtype=bool) if max_id < self.MOST_IDS else None
        self.index = Index()

    def add(self, ids: np.ndarray) -> None:
        if self.flags is not None:
            try:
                for index in self.index.chunks(ids):
                    self.flags[index] = True
            except (IndexError, TypeError):  # beyond max_id; not castable (not uint16/32)
                self.flags = None

    def packed(self) -> Optional[np.ndarray]:
        return None if self.flags is None else np.packbits(self.flags)


class _Writer:
    """Writes ids into a file from a token position on (a preallocated file shared by
    shards, each at its own place, or a part file of its own). Small arrays (an
    end-of-text token, a short document) are gathered and written a few MB at a time."""

    def __init__(self, target: Target, dtype: np.dtype, max_id: Optional[int] = None,
                 seen: Optional[_Seen] = None,
                 token_bytes: Optional[np.ndarray] = None) -> None:  # fmt: skip
        mode = "wb" if target.fresh else "r+b"
        # a part file of its own is written under a private name and renamed when whole:
        # the same shard may run twice at once (Ray's retry of a task on a node it took
        # for dead; a killed driver's Slurm array beside the re-run's), and a second run
        # must never empty the file the first finished, as a merge reads it
        self.path = target.path
        self.written = _private(target.path) if target.fresh else target.path
        self.seen = seen  # which ids were written (shared by the sides)
        # each id's UTF-8 bytes: the text written is counted (None: not counted)
        self.token_bytes = token_bytes
        self.text_bytes: Optional[int] = None if token_bytes is None else 0
        self.index = None if token_bytes is None else Index()  # to count the text's bytes
        self.file = open(self.written, mode, buffering=0)  # noqa: SIM115 - closed in close()
        # an output file goes to disk as it is written; a part file of its own is read back
        # by the merge and deleted at the commit: written out, it would be disk work the
        # commit's fsync waits behind, and slower to delete (70 ms at 50 MB of BPE)
        self.final = not target.fresh
        self.start = target.position * dtype.itemsize
        self.file.seek(self.start)
        self.dtype = dtype
        # ids up to the tokenizer's largest fit the dtype chosen for it: no check needed
        self.checked = max_id is not None and max_id <= np.iinfo(dtype).max
        self.tokens = 0
        self.held: list[np.ndarray] = []
        self.held_bytes = 0
        # a part file's CRC-32, kept in the shard's marker: a resume reuses the part only
        # if it still has it (damaged in place at the same size, it is redone)
        self.crc: Optional[int] = 0 if target.fresh else None

    def write(self, ids: np.ndarray, owned: bool = False) -> None:
        """Write ids; `owned`: an array of our own, held without a copy."""
        if not ids.size:  # a tokenizer's empty BOS/EOS, an empty document
            return
        given = None if owned else ids
        if ids.dtype != self.dtype:
            if not self.checked and int(ids.max()) > np.iinfo(self.dtype).max:
                raise OverflowError(f"token id {int(ids.max())} does not fit in {self.dtype}")
            ids = ids.astype(self.dtype)
        self.tokens += len(ids)
        if ids.nbytes >= HOLD_BYTES:  # big enough for a call of its own
            self.flush()
            self._write(ids)
            return
        # held: a copy of an array the tokenizer gave (it may reuse it), not of our own
        self.held.append(ids.copy() if ids is given else ids)
        self.held_bytes += ids.nbytes
        if self.held_bytes >= WRITE_BYTES:
            self.flush()

    def write_joined(self, arrays: list[np.ndarray]) -> None:
        """Several arrays (a batch of documents) written as one, joined straight into the
        file's dtype where every id fits it (one pass instead of a join and a cast)."""
        if self.checked:
            self.write(np.concatenate(arrays, dtype=self.dtype, casting="unsafe"), owned=True)
        else:
            self.write(np.concatenate(arrays), owned=True)

    def flush(self) -> None:
        if self.held:
            held, self.held, self.held_bytes = np.concatenate(self.held), [], 0
            self._write(held)

    def _write(self, ids: np.ndarray) -> None:
        if self.seen is not None:
            self.seen.add(ids)
        if self.text_bytes is not None:
            self.text_bytes = add_text_bytes(self.text_bytes, ids, self.token_bytes, self.index)
        data = memoryview(np.ascontiguousarray(ids)).cast("B")
        if self.crc is not None:
            self.crc = zlib.crc32(data, self.crc)
        while data:
            data = data[self.file.write(data) :]

    def close(self, done: bool = True) -> None:
        """Write what is held and put the file in place; `done` False: the shard failed."""
        try:
            if done:
                self.flush()
                if self.final:
                    start_writeback(self.file.fileno(), self.start, self.file.tell() - self.start)
        finally:
            self.file.close()
            if self.written != self.path:
                _put_in_place(self.written, self.path, done)


def add_text_bytes(total: Optional[int], ids: np.ndarray, token_bytes: np.ndarray,
                   index: Index) -> Optional[int]:  # fmt: skip
    """`total` plus the UTF-8 bytes of `ids` (each id's from token_bytes); None once unknown:
    an id beyond the vocabulary (a plugin's bug), which measure's own count leaves out."""
    if total is None:
        return None
    try:
        for chunk in index.chunks(ids):
            total += int(token_bytes[chunk].sum(dtype=np.int64))
        return total
    except (IndexError, TypeError):
        return None


def encode_shard(task: EncodeTask) -> EncodeResult:
    dtype = np.dtype(task.rules.dtype)
    targets = {"train": task.train, "val": task.val}
    max_id = getattr(task.rules.tokenizer, "max_id", None)
    # which ids were written, unless the tokenizer knows it uses all of them (char): a
    # flag per id written costs char a third of its encoding
    counted = max_id is not None and task.rules.tokenizer.ids_used() is None
    seen = _Seen(max_id) if counted else None
    sizes = task.rules.val_token_bytes
    writers = {side: _Writer(t, dtype, max_id, seen, sizes if side == "val" else None)
               for side, t in targets.items() if t is not None}  # fmt: skip
    starts: dict[str, list[int]] = {"train": [], "val": []}
    keys: dict[str, list[int]] = {"train": [], "val": []}
    eot = None if task.rules.eot_id is None else np.array([task.rules.eot_id], dtype=np.uint32)
    doc = task.first_doc - 1
    position = [task.first_char]
    chars, skipped = [0], 0  # chars: a list, added to as the pieces are read
    digests, read_as, read_bytes = {}, {}, {}
    # whole short documents go a batch at a time (split by document, hash or stream)
    batch = _Batch(task, writers, starts, keys, eot) if task.rules.split_by != "position" else None
    done = False
    try:
        for segment in task.shard.segments:
            key = task.doc_keys.get(segment.file.name)
            read = None
            for part in _held_first(get_format(segment.file.format).parts(segment), batch):
                if part.read is not None:
                    read = part.read
                doc += part.starts
                skipped += part.skipped
                if part.skipped:  # counted, and nothing to write or key a side by
                    continue
                if part.sha256 is not None:
                    digests[segment.file.name] = part.sha256
                if part.read_as is not None:
                    read_as[segment.file.name] = file_identity(part.read_as)
                if part.whole is not None:  # one piece (pieces == [whole]): counted now
                    chars[0] += len(part.whole)
                    if batch is not None and part.starts and part.ends and batch.add(doc, part):
                        continue
                else:  # counted as its pieces are read
                    part = replace(part, pieces=_counted(part.pieces, chars))
                if batch is not None:  # what came before it is written first
                    batch.flush()
                encode_part(task, part, doc, key, position, writers, starts, keys, eot)
            if segment.file.capped_in_shards:  # (0 for no rows: the driver needs each)
                name = segment.file.name
                read_bytes[name] = read_bytes.get(name, 0) + (read or 0)
        if batch is not None:
            batch.flush()
        done = True
    finally:
        for w in writers.values():
            w.close(done)
    val_bytes = writers["val"].text_bytes if "val" in writers else 0  # no val: none of it
    result = EncodeResult(chars=chars[0], skipped=skipped,
                          ids_seen=None if seen is None else seen.packed(),
                          val_bytes=None if sizes is None else val_bytes,
                          digests=digests, read_as=read_as, read_bytes=read_bytes)  # fmt: skip
    crcs = {side: w.crc for side, w in writers.items() if w.crc is not None}
    for side in SIDES:
        if side in writers:
            setattr(result, f"{side}_tokens", writers[side].tokens)
        setattr(result, f"{side}_docs", len(starts[side]))
        setattr(result, f"{side}_keys", np.array(keys[side], dtype=np.uint64))
        index = getattr(task, f"{side}_index")
        if index is not None:
            array = np.array(starts[side], dtype=np.uint64)
            crcs[f"{side}_index"] = zlib.crc32(array)
            _save_in_place(array, index)
    if task.marker is not None:  # the shard is done: a re-run can take it as it is
        _write_marker(task.marker, result, task.rules.key_hash, crcs)
    return result


@dataclass(frozen=True)
class ShardRun:
    """Shards one worker encodes one after the other (consecutive pieces of a compressed
    file or a Parquet row group: each reads on where the one before ended)."""

    tasks: tuple[EncodeTask, ...]

    @property
    def label(self) -> str:
        return _label(self.tasks[0].shard, self.tasks[-1].shard)


@dataclass(frozen=True)
class ScanRun:
    """Shards one worker scans one after the other (as ShardRun), with `scan`: scan_shard
    (with a tokenizer's sample rule) or count_characters."""

    shards: tuple[Shard, ...]
    scan: Callable[[Shard], ScanResult]

    @property
    def label(self) -> str:
        return _label(self.shards[0], self.shards[-1])


def scan_run(run: ScanRun) -> list[ScanResult]:
    return [run.scan(shard) for shard in run.shards]


def _label(first: Shard, last: Shard) -> str:
    return first.label if first.index == last.index else f"shards {first.index}-{last.index}"


def encode_run(run: ShardRun) -> list[EncodeResult]:
    """encode_shard on each of the run's shards. The heap's freed pages are kept between
    them (given back after the run, as after any task): each piece takes again what the
    one before freed, and faulting them back in after a trim cost 87 Parquet pieces read
    in one process 13% of their CPU time (173,000 page faults against 57,000)."""
    return [encode_shard(task) for task in run.tasks]


# A marker is JSON (never a pickle: a work folder may come from anyone) with the counts;
# the duplicate-check keys go next to it as raw uint64, train's then val's.
COUNTS = ("train_tokens", "val_tokens", "train_docs", "val_docs", "chars", "skipped")


def _write_marker(marker: str, result: EncodeResult, key_hash: str, crcs: dict[str, int]) -> None:
    keys = np.concatenate([result.train_keys, result.val_keys]).astype("<u8")
    crcs = {**crcs, "keys": zlib.crc32(keys)}
    _save_in_place(keys, f"{marker}.keys")
    record = {k: getattr(result, k) for k in COUNTS}
    record["train_keys"] = len(result.train_keys)
    record["key_hash"] = key_hash
    record["val_bytes"] = result.val_bytes
    record["sha256"] = {name: digest.hex() for name, digest in result.digests.items()}
    record["read_bytes"] = result.read_bytes
    record["crc32"] = crcs  # of each file the shard wrote (its part of train, val, index, keys)
    with _in_place(marker) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(record))  # json.dump is pure Python: 1,000 files' digests a shard


def _private(path: str) -> str:
    """A temporary name beside `path` that no other run of the same shard takes, on any
    node (a process id may be another node's too)."""
    return f"{path}.{os.getpid()}-{secrets.token_hex(6)}.tmp"


def _put_in_place(written: str, path: str, done: bool) -> None:
    """A file written under a private name becomes `path` (or goes, if not `done`)."""
    if done:
        os.replace(written, path)
    else:
        with contextlib.suppress(OSError):
            os.unlink(written)


@contextlib.contextmanager
def _in_place(path: str) -> Iterator[str]:
    """A private name to write `path` under, renamed to `path` when the block ends (removed
    if it fails)."""
    tmp = _private(path)
    done = False
    try:
        yield tmp
        done = True
    finally:
        _put_in_place(tmp, path, done)


def _save_in_place(array: np.ndarray, path: str) -> None:
    """save_array, under a private name renamed to `path` once written whole."""
    with _in_place(path) as tmp:
        save_array(array, tmp)


def finished(task: EncodeTask, itemsize: int, hashes: dict[str, bytes]) -> Optional[EncodeResult]:
    """The result of a shard a previous run completed, if its marker and parts are whole,
    and the small files it read whole (it took their sha256) have those `hashes` now."""
    from corpusprep._paths import open_regular_fd, read_regular
    from corpusprep.formats.text import read_whole

    if task.marker is None or not os.path.exists(task.marker):
        return None
    try:  # a regular file (a FIFO planted in a stranger's work folder would block), of a
        # marker's size at most: counts, and a digest for each of its files
        most = 4096 + sum(len(s.file.name) + 80 for s in task.shard.segments)
        record = json.loads(read_regular(task.marker, most))
        read = {s.file.name: hashes[s.file.name].hex() for s in task.shard.segments
                if read_whole(s)}  # fmt: skip
        if not isinstance(record, dict) or record.get("sha256", {}) != read:
            return None  # (a marker of null or a list: cut short, or planted)
        counts = {k: record[k] for k in COUNTS}
        split = record["train_keys"]
        # keyed another way (an older version keyed every document by blake2b): its keys
        # would never match the others' duplicates
        keyed = task.rules.split_by in KEYED
        if keyed and record.get("key_hash", "blake2b") != task.rules.key_hash:
            return None
        val_bytes = record.get("val_bytes")  # absent from an older marker: not counted
        if not all(_count(v) for v in [*counts.values(), split]) or not (
            val_bytes is None or _count(val_bytes)
        ):
            return None
        # the text read of each file source.max_bytes caps: the driver needs it to add up
        # (a marker without it, from a run without the cap or an older version: not taken)
        read_bytes = record.get("read_bytes", {})
        capped = {s.file.name for s in task.shard.segments if s.file.capped_in_shards}
        if (
            not isinstance(read_bytes, dict)
            or not capped <= read_bytes.keys()
            or not all(isinstance(k, str) and _count(v) for k, v in read_bytes.items())
        ):
            return None
        with os.fdopen(open_regular_fd(f"{task.marker}.keys"), "rb") as f:
            keys = np.fromfile(f, dtype="<u8")
        crcs = record.get("crc32")
        if not isinstance(crcs, dict) or zlib.crc32(keys) != crcs.get("keys"):
            return None
        # a key per document where the split keys them; else none (one text: its document)
        docs = counts["train_docs"] + counts["val_docs"] if keyed else 0
        if len(keys) != docs or split > len(keys):
            return None
        result = EncodeResult(**counts, train_keys=keys[:split].astype(np.uint64),
                              val_keys=keys[split:].astype(np.uint64),
                              val_bytes=val_bytes, read_bytes=read_bytes)  # fmt: skip
        for side in SIDES:
            target = getattr(task, side)
            tokens = getattr(result, f"{side}_tokens")
            if target is not None and not _whole(target.path, tokens * itemsize, crcs.get(side)):
                return None
            index = getattr(task, f"{side}_index")
            docs = getattr(result, f"{side}_docs")
            if index is not None and not _whole(index, 8 * docs, crcs.get(f"{side}_index")):
                return None
        return result
    except (OSError, ValueError, KeyError, TypeError, RecursionError):  # not one we wrote
        return None


def _whole(path: str, size: int, crc: object) -> bool:
    """Whether a file a finished shard wrote is as it was: its size, then its CRC-32
    (a regular file, read without following a link: the work folder may be anyone's)."""
    from corpusprep._paths import open_regular_fd

    if os.path.getsize(path) != size or not _count(crc):
        return False
    found = 0
    with os.fdopen(open_regular_fd(path), "rb", buffering=0) as f:
        while chunk := f.read(1 << 20):
            found = zlib.crc32(chunk, found)
    return found == crc


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def encode_part(task, part, doc, key, position, writers, starts, keys, eot) -> None:
    """One document (or the piece of it in this shard): prepend/append the end-of-text
    token, note where it starts, and encode it on its side(s)."""
    pending_eot = None  # the side where the document may end (eot=append)
    tokenizer = task.rules.tokenizer
    # the part begins at a cut inside its text, unless that is where val's text begins
    val_begins = task.rules.split_by == "position" and position[0] == task.rules.split_char
    continues = not part.starts and not val_begins
    sides = _sides(task, part, doc, key, position, keys)
    for i, (side, group) in enumerate(groupby(sides, key=itemgetter(0))):
        out = writers[side]
        pending_eot = side
        if i == 0 and part.starts:
            starts[side].append(out.tokens)
            if task.rules.eot == "prepend":
                out.write(eot)
            out.write(tokenizer.document_specials()[0])  # its own BOS, if any (hf)
        encode = tokenizer.encode_continued if i == 0 and continues else tokenizer.encode_pieces
        for ids in encode(text for _, text in group):
            out.write(ids)
    if part.ends and pending_eot is None and not part.starts:  # an empty last piece (of a
        pending_eot = _end_side(task, part, doc, key, position)  # compressed text) ends it
        if pending_eot not in writers:
            pending_eot = None
    if part.ends and pending_eot is not None:
        writers[pending_eot].write(tokenizer.document_specials()[1])
        if task.rules.eot == "append":
            writers[pending_eot].write(eot)


BATCH_CHARS = 1 << 18  # whole documents are gathered until this many characters...
BATCH_DOC_CHARS = 1 << 16  # ... each at most this long (a longer one goes on its own)


class _Batch:
    """Whole short documents gathered and written a batch at a time: the same ids, starts
    and keys as encode_part gives each, in the same order, with one encoder call per
    document and one write per side per batch (about 60 µs less per document)."""

    def __init__(self, task: EncodeTask, writers: dict, starts: dict, keys: dict,
                 eot: Optional[np.ndarray]) -> None:  # fmt: skip
        self.task, self.writers, self.starts, self.keys = task, writers, starts, keys
        self.prepend = eot if task.rules.eot == "prepend" else None
        self.append = eot if task.rules.eot == "append" else None
        self.keyed = task.rules.split_by in KEYED
        self.docs: list[int] = []
        self.given: list[Optional[bytes]] = []  # a document's key, where not its text's
        self.texts: list[str] = []
        self.size = 0

    def add(self, doc: int, part: Part) -> bool:
        """Take a whole document, if short enough; False: it goes on its own."""
        text = part.whole
        if len(text) > BATCH_DOC_CHARS:
            return False
        self.docs.append(doc)
        self.given.append(part.key)
        self.texts.append(text)
        self.size += len(text)
        if self.size >= BATCH_CHARS:
            self.flush()
        return True

    def flush(self) -> None:
        if not self.texts:
            return
        tokenizer = self.task.rules.tokenizer
        before, after = tokenizer.document_specials()
        unit = [a for a in (self.prepend, before) if a is not None and a.size]
        end = [a for a in (after, self.append) if a is not None and a.size]
        extra = sum(len(a) for a in unit + end)
        pending: dict[str, list[np.ndarray]] = {side: [] for side in self.writers}
        counted = dict.fromkeys(self.writers, 0)
        documents = zip(self.docs, self.given, self.texts, tokenizer.encode_documents(self.texts))
        for doc, given, text, ids in documents:
            side = "train"
            if self.keyed:
                key = given if given is not None else self.task.rules.document_key(text)
                side = _document_side(self.task, doc, key)
                self.keys[side].append(int.from_bytes(key[:8], "little"))
            self.starts[side].append(self.writers[side].tokens + counted[side])
            pending[side] += [*unit, ids, *end]
            counted[side] += len(ids) + extra
        for side, arrays in pending.items():
            if arrays:
                self.writers[side].write_joined(arrays)
        self.docs, self.given, self.texts, self.size = [], [], [], 0


def _held_first(parts: Iterator[Part], batch: Optional[_Batch]) -> Iterator[Part]:
    """The parts; where reading the next one fails (bad JSON, a cut file), the documents
    held before it are encoded first: an error of theirs is the one to report, as it is
    without batching."""
    if batch is None:
        yield from parts
        return
    try:
        yield from parts
    except Exception:
        batch.flush()
        raise


def _end_side(task: EncodeTask, part: Part, doc: int, key, position: list[int]) -> str:
    """The side where a document whose text came before this (empty) part ends: its
    own side (split by document or hash), else where its last character went."""
    if task.rules.split_by in ("head", "tail"):
        return "train"
    if task.rules.split_by in KEYED:
        return _document_side(task, doc, part.key if part.key is not None else key)
    return "train" if position[0] <= task.rules.split_char else "val"


def _document_side(task: EncodeTask, doc: int, key: bytes) -> str:
    """Where a whole document goes: split by document (the plan's choice), hash (its own
    draw) or stream (all to train, split after the merge)."""
    if task.rules.split_by == "document":
        return "val" if task.val_docs[doc - task.first_doc + 1] else "train"
    if task.rules.split_by == "hash":
        return "train" if goes_to_train(task.rules.seed, doc, key, task.rules.split) else "val"
    return "train"


def _counted(pieces: Iterable[str], chars: list[int]) -> Iterator[str]:
    """The pieces, their characters added up in chars[0] as they are read."""
    for text in pieces:
        chars[0] += len(text)
        yield text


def _sides(task: EncodeTask, part: Part, doc: int, key, position: list[int], keys) -> Iterator:
    """(side, text) for the part's pieces: the whole document to one side (split by
    document or hash; "stream": all to one stream, split after the merge), or cut at the
    train/val character (split by position, nanoGPT's rule)."""
    if task.rules.split_by in ("head", "tail"):  # one stream, cut after the merge
        yield from _given("train", part)
        return
    if task.rules.split_by in KEYED:
        if part.key is not None:  # a small text file's sha256
            key = part.key
        elif part.whole is not None:
            key = task.rules.document_key(part.whole)
        side = _document_side(task, doc, key)
        if part.starts:
            keys[side].append(int.from_bytes(key[:8], "little"))
        yield from _given(side, part)
        return
    given = False
    for text in part.pieces:
        k = min(max(task.rules.split_char - position[0], 0), len(text))
        if k:
            yield "train", text[:k]
        if k < len(text):
            yield "val", text[k:]
        given = given or bool(text)
        position[0] += len(text)
    if part.starts and not given:  # an empty document is one all the same (its start, its
        # eot), on the side of its place: val from where val's text begins (as val_begins)
        yield ("train" if position[0] < task.rules.split_char else "val"), ""


def _given(side: str, part: Part) -> Iterator[tuple[str, str]]:
    """(side, text) for each of the part's pieces; a document that starts here with no
    text at all (a compressed empty file) is one all the same: its start and eot on its
    side, as the position split has it, and as a later empty piece that ends it does."""
    given = False
    for text in part.pieces:
        given = given or bool(text)
        yield side, text
    if part.starts and not given:
        yield side, ""
