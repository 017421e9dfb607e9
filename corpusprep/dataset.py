"""Reading an output folder back: the token arrays, the tokenizer and the manifest.

    >>> ds = corpusprep.load("data/shakespeare_char")
    >>> ds.train[:10], ds.tokenizer.decode(ds.val[:50]), ds.manifest["tokens"]

Every format reads back the same way (`format=nanogpt`, `llmc`, `npy`, `megatron`): the
arrays are memory-mapped (nothing is read until used). A split kept in one file is an
`np.memmap`; a split cut into several shards (llmc, npy) is a `ShardedTokens`, which reads
like a 1-D array (len, x[i], x[a:b], x[[i, j]]) without ever joining the shards: a slice
reads only the shards it covers. load() checks that the files agree with the manifest
(every file's size, each format's headers, token counts, dtype, vocabulary, no id beyond
the vocabulary) and says clearly when they don't.

A folder may come from anyone, so reading it runs no code it names: meta.pkl is read
with an unpickler that accepts plain values only (read_meta), and the tokenizer is
rebuilt from the manifest by config.build, which makes only corpusprep's (and trusted
plugins') tokenizer classes.
"""

from __future__ import annotations

import json
import pickle
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, Optional, Union

import numpy as np

from corpusprep.errors import UserError
from corpusprep.exporters import doc_index_name
from corpusprep.tokenizers import Tokenizer

SIDES = ("train", "val")


class ShardedTokens:
    """One split's tokens, kept in several files, read as one 1-D array without joining
    them. `x[a:b]` (and any index) reads only the shards it touches, so memory follows the
    size of what you ask for; `x.shards` are the per-file memmaps. `np.asarray(x)` joins
    everything in memory: fine for small splits, and the one thing that is not bounded."""

    ndim = 1

    def __init__(self, shards: Sequence[np.ndarray]) -> None:
        if not shards:
            raise ValueError("ShardedTokens needs at least one shard")
        self.shards = list(shards)
        self.dtype = self.shards[0].dtype
        self.starts = np.cumsum([0] + [len(s) for s in self.shards])  # shard i: [s[i], s[i+1])

    def __len__(self) -> int:
        return int(self.starts[-1])

    @property
    def shape(self) -> tuple[int]:
        return (len(self),)

    @property
    def size(self) -> int:
        return len(self)

    @property
    def nbytes(self) -> int:
        return len(self) * self.dtype.itemsize

    def __repr__(self) -> str:
        return f"ShardedTokens({len(self):,} {self.dtype.name} tokens in {len(self.shards)} shards)"

    def _range(self, start: int, stop: int) -> np.ndarray:
        if stop <= start:
            return np.zeros(0, self.dtype)
        first = int(np.searchsorted(self.starts, start, side="right")) - 1
        last = int(np.searchsorted(self.starts, stop, side="left"))
        parts = [
            self.shards[i][max(start - self.starts[i], 0) : stop - self.starts[i]]
            for i in range(first, last)
        ]
        return np.array(parts[0]) if len(parts) == 1 else np.concatenate(parts)

    def _take(self, idx: np.ndarray) -> np.ndarray:
        n = len(self)
        idx = np.where(idx < 0, idx + n, idx)
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            raise IndexError(f"index out of range for {n:,} tokens")
        which = np.searchsorted(self.starts, idx, side="right") - 1
        out = np.empty(idx.shape, self.dtype)
        for i in np.unique(which):
            mask = which == i
            out[mask] = self.shards[i][idx[mask] - self.starts[i]]
        return out

    def __getitem__(self, key: Any) -> Union[np.ndarray, np.generic]:
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            if step == 1:
                return self._range(start, stop)
            return self._take(np.arange(start, stop, step))
        if isinstance(key, (int, np.integer)):
            i = int(key) + (len(self) if key < 0 else 0)
            if not 0 <= i < len(self):
                raise IndexError(f"index {int(key)} out of range for {len(self):,} tokens")
            s = int(np.searchsorted(self.starts, i, side="right")) - 1
            return self.shards[s][i - self.starts[s]]
        return self._take(np.asarray(key, dtype=np.int64))

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        joined = np.concatenate(self.shards)
        return joined if dtype is None else joined.astype(dtype)


Tokens = Union[np.ndarray, ShardedTokens]


@dataclass
class PreparedDataset:
    path: Path
    train: Tokens  # memory-mapped, read-only (see ShardedTokens for several shards)
    val: Tokens
    tokenizer: Optional[Tokenizer]  # None only with load(..., tokenizer=False)
    manifest: dict[str, Any]
    meta: dict[str, Any]  # meta.pkl's dict; {} when the folder has none (GPT-2)
    # where each document starts (token offsets into the split, uint64); None for one text
    train_docs: Optional[np.ndarray] = None
    val_docs: Optional[np.ndarray] = None
    files: dict[str, list[Path]] = field(default_factory=dict)  # the token files per split

    @property
    def dtype(self) -> np.dtype:
        return self.train.dtype

    @property
    def format(self) -> str:
        return self.manifest.get("format", {}).get("kind", "nanogpt")

    def splits(self) -> Iterator[tuple[str, Tokens]]:
        yield "train", self.train
        yield "val", self.val

    def docs(self, side: str) -> Optional[np.ndarray]:
        return self.train_docs if side == "train" else self.val_docs

    def __repr__(self) -> str:
        # one short line: the generated repr printed every field, the manifest and meta.pkl
        # in full (megabytes for a char vocabulary or a big run)
        m = self.manifest
        tok = m.get("tokenizer") or {}
        kind = " ".join(str(tok[k]) for k in ("kind", "encoding") if tok.get(k)) or "?"
        tokens = m.get("tokens") or {}
        names = list(m.get("files") or {})
        shown = ", ".join(names[:REPR_FILES])
        if len(names) > REPR_FILES:
            shown += f" and {len(names) - REPR_FILES} more"
        return (
            f"PreparedDataset({str(self.path)!r}: {m.get('name')}, {kind} vocab "
            f"{m.get('vocab_size', 0):,}, {m.get('dtype')}, {tokens.get('train', 0):,} train + "
            f"{tokens.get('val', 0):,} val tokens, {self.format}: {shown or 'no files listed'})"
        )


REPR_FILES = 3  # file names a repr shows before "and N more"


def _damaged(what: Path | str, detail: str) -> UserError:
    return UserError(
        f"{what}: {detail}; the folder is damaged or mixed with another run: prepare it again"
    )


def load(path: str | Path, tokenizer: bool = True, check_ids: bool = True) -> PreparedDataset:
    """Open an output folder made by corpusprep, in any of its formats. tokenizer=False
    skips rebuilding the tokenizer (ds.tokenizer is None): for counting ids only.

    check_ids=True (the default) reads every id once to check that none is beyond the
    vocabulary (a damaged or tampered file would otherwise fail deep inside training, as
    an index error of the embedding): memory stays flat, and it takes about 0.1 s per GB
    of ids from the page cache, the disk's own speed from a cold one. check_ids=False
    skips it, for a big folder you trust on a slow disk."""
    folder = Path(path)
    manifest_path = folder / "manifest.json"
    if not manifest_path.is_file():
        raise UserError(
            f"{folder}: not a corpusprep output folder (no manifest.json); "
            "give the out_dir of a finished run"
        )
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    dtype = np.dtype(manifest["dtype"])
    fmt = manifest.get("format", {}) or {}
    kind = fmt.get("kind", "nanogpt")
    readers = {"nanogpt": _nanogpt, "llmc": _llmc, "npy": _npy, "megatron": _megatron}
    if kind not in readers:
        raise UserError(f"{folder}: format {kind!r} is not one corpusprep.load can read")
    if kind != "nanogpt":  # nanogpt's own check below names tokens, as it always has
        _check_sizes(folder, manifest)
    arrays, docs, files = {}, {}, {}
    for side in SIDES:
        tokens = manifest["tokens"][side]
        arrays[side], docs[side], files[side] = readers[kind](folder, side, tokens, dtype, fmt)
        if len(arrays[side]) != tokens:
            raise _damaged(folder, f"{side} holds {len(arrays[side]):,} tokens, not {tokens:,}")
    if kind == "nanogpt":
        _check_sizes(folder, manifest)
    # no meta.pkl for the GPT-2 vocabulary (nanoGPT's train.py and sample.py default to it):
    # the manifest lists every file a run wrote, so an unlisted, absent one was never made;
    # one on disk is read (and checked) all the same, as nanoGPT would read it
    listed = manifest.get("files")
    has_meta = listed is None or "meta.pkl" in listed or (folder / "meta.pkl").exists()
    meta = read_meta(folder / "meta.pkl") if has_meta else {}
    if has_meta and meta.get("vocab_size") != manifest["vocab_size"]:
        raise UserError(
            f"{folder / 'meta.pkl'}: vocab_size {meta.get('vocab_size')} but the manifest says "
            f"{manifest['vocab_size']}; prepare the folder again"
        )
    if check_ids:
        for side in SIDES:
            _check_ids(arrays[side], files[side], manifest["vocab_size"])
    rebuilt = rebuild_tokenizer(manifest, folder) if tokenizer else None
    return PreparedDataset(folder, arrays["train"], arrays["val"], rebuilt, manifest, meta,
                           docs["train"], docs["val"], files)  # fmt: skip


class _PlainUnpickler(pickle.Unpickler):
    """Unpickles plain values only (dict, list, tuple, set, str, bytes, int, float, bool,
    None: pickle has opcodes of its own for them): anything else needs find_class, which
    refuses, so no code a hostile meta.pkl names is imported or called."""

    def __init__(self, file: Any, path: Path) -> None:
        super().__init__(file)
        self.path = path

    def find_class(self, module: str, name: str) -> NoReturn:
        raise UserError(
            f"refusing to load {self.path}: it asks to import {module}.{name}; a corpusprep "
            "meta.pkl holds only plain values (prepare the folder again)"
        )


def read_meta(path: Path) -> dict[str, Any]:
    """A meta.pkl, read without running code: the one way corpusprep reads a pickle it did
    not just make (nanoGPT's train.py and sample.py read ours with pickle.load)."""
    try:
        with open(path, "rb") as f:
            meta = _PlainUnpickler(f, path).load()
    except FileNotFoundError:
        raise _damaged(path, "missing") from None
    except UserError:
        raise
    except Exception as e:  # truncated, or not a pickle at all
        raise _damaged(path, f"not a readable pickle ({type(e).__name__}: {e})") from None
    if not isinstance(meta, dict):
        raise _damaged(path, f"holds a {type(meta).__name__}, not a dict")
    return meta


CHECK_CHUNK = 1 << 24  # ids per step of the check: 32 MiB of uint16, whatever the file size


def _check_ids(array: Tokens, files: list[Path], vocab_size: int) -> None:
    """Every id below vocab_size, one shard and one chunk at a time (memory stays flat)."""
    parts = array.shards if isinstance(array, ShardedTokens) else [array]
    if not len(array) or np.iinfo(array.dtype).max < vocab_size:
        return  # empty, or the dtype cannot hold a bad id
    for part, file in zip(parts, files):
        for i in range(0, len(part), CHECK_CHUNK):
            top = int(part[i : i + CHECK_CHUNK].max(initial=0))
            if top >= vocab_size:
                raise _damaged(
                    file, f"holds id {top:,}, but the vocabulary has {vocab_size:,} ids "
                    f"(0 to {vocab_size - 1:,})"
                )  # fmt: skip


def _check_sizes(folder: Path, manifest: dict[str, Any]) -> None:
    for name, expected in (manifest.get("files") or {}).items():
        file = folder / name
        size = file.stat().st_size if file.is_file() else None
        if size != expected:
            found = "missing" if size is None else f"{size:,} bytes"
            raise _damaged(file, f"{found}, but the manifest says {expected:,} bytes")


def _doc_index(folder: Path, side: str) -> Optional[np.ndarray]:
    file = folder / doc_index_name(side)
    if not file.is_file():
        file = folder / f"{side}.docs.bin"  # where folders made before kept it
    if not file.is_file():
        return None
    return np.memmap(file, dtype="<u8", mode="r") if file.stat().st_size else np.zeros(0, "<u8")


def _nanogpt(folder: Path, side: str, tokens: int, dtype: np.dtype, fmt: dict):
    file = folder / f"{side}.bin"
    expected = tokens * dtype.itemsize
    size = file.stat().st_size if file.is_file() else None
    if size != expected:
        found = "missing" if size is None else f"{size:,} bytes"
        raise _damaged(
            file,
            f"{found}, but the manifest says {tokens:,} {dtype.name} tokens ({expected:,} bytes)",
        )
    array = np.memmap(file, dtype=dtype, mode="r") if tokens else np.zeros(0, dtype)
    return array, _doc_index(folder, side), [file]


def _join(shards: list[np.ndarray], dtype: np.dtype) -> Tokens:
    if not shards:
        return np.zeros(0, dtype)
    return shards[0] if len(shards) == 1 else ShardedTokens(shards)


def _shard_files(folder: Path, side: str, fmt: dict) -> list[tuple[Path, int]]:
    try:
        return [(folder / s["file"], int(s["tokens"])) for s in fmt["shards"][side]]
    except (KeyError, TypeError) as e:
        raise _damaged(folder / "manifest.json", f"no list of {side} shards ({e})") from None


LLMC_HEADERS = {"uint16": (20240520, 1), "uint32": (20240801, 7)}  # data_common.py


def _llmc(folder: Path, side: str, tokens: int, dtype: np.dtype, fmt: dict):
    magic, version = LLMC_HEADERS[dtype.name]
    shards, files = [], []
    for file, count in _shard_files(folder, side, fmt):
        header = np.fromfile(file, dtype="<i4", count=256)
        if len(header) < 256 or (header[0], header[1]) != (magic, version):
            raise _damaged(file, f"not an llm.c {dtype.name} token file (magic {magic})")
        if header[2] != count or file.stat().st_size != 1024 + count * dtype.itemsize:
            raise _damaged(file, f"its header says {int(header[2]):,} tokens, not {count:,}")
        shards.append(np.memmap(file, dtype=dtype.newbyteorder("<"), mode="r", offset=1024))
        files.append(file)
    return _join(shards, dtype), _doc_index(folder, side), files


def _npy(folder: Path, side: str, tokens: int, dtype: np.dtype, fmt: dict):
    shards, files = [], []
    for file, count in _shard_files(folder, side, fmt):
        try:
            array = np.load(file, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError) as e:
            raise _damaged(file, f"not a .npy file ({e})") from None
        if array.dtype != dtype or array.shape != (count,):
            raise _damaged(file, f"{array.dtype} {array.shape}, not {dtype.name} ({count:,},)")
        shards.append(array)
        files.append(file)
    return _join(shards, dtype), _doc_index(folder, side), files


MEGATRON_CODES = {8: "uint16", 4: "uint32"}  # Megatron's int32 (code 4) holds uint32 ids


def _megatron(folder: Path, side: str, tokens: int, dtype: np.dtype, fmt: dict):
    stem = fmt.get("splits", {}).get(side, {}).get("prefix")
    if not stem:
        raise _damaged(folder / "manifest.json", f"no Megatron prefix for {side}")
    idx, data = folder / f"{stem}.idx", folder / f"{stem}.bin"
    raw = np.memmap(idx, dtype=np.uint8, mode="r")
    head = bytes(raw[:34])
    if len(head) < 34 or head[:9] != b"MMIDIDX\x00\x00" or struct.unpack("<Q", head[9:17])[0] != 1:
        raise _damaged(idx, "not a Megatron MMIDIDX index")
    code = head[17]
    count, ndocs = struct.unpack("<QQ", head[18:34])
    if MEGATRON_CODES.get(code) != dtype.name:
        raise _damaged(idx, f"dtype code {code}, but the manifest says {dtype.name}")
    if len(raw) != 34 + 12 * count + 8 * ndocs:
        raise _damaged(idx, f"{len(raw):,} bytes for {count:,} sequences and {ndocs:,} entries")
    lengths = np.frombuffer(raw, "<i4", count, 34)
    pointers = np.frombuffer(raw, "<i8", count, 34 + 4 * count)
    documents = np.frombuffer(raw, "<i8", ndocs, 34 + 12 * count)
    if int(lengths.sum(dtype=np.int64)) != tokens or documents[-1] != count:
        raise _damaged(idx, f"its sequences do not add up to {tokens:,} tokens")
    le = dtype.newbyteorder("<")
    array = np.memmap(data, dtype=le, mode="r") if tokens else np.zeros(0, dtype)
    docs = None
    if fmt.get("document_index", True):
        docs = (pointers[documents[:-1]] // dtype.itemsize).astype("<u8")
    return array, docs, [data, idx]


def rebuild_tokenizer(manifest: dict[str, Any], folder: Optional[Path] = None) -> Tokenizer:
    """The tokenizer that made the files: built from the recorded config, then given back
    what it learned from the corpus (the char vocabulary)."""
    from corpusprep.config import build
    from corpusprep.tokenizers.reuse import _recorded

    try:  # a folder made with tokenizer=reuse: the tokenizer it reused, recorded within
        node, described = _recorded(manifest)
    except (KeyError, TypeError, AttributeError):
        raise _damaged("manifest.json", "no tokenizer config (config.tokenizer)") from None
    # a plain dict, as recorded: build() interprets no ${...} in it and runs nothing it names
    tokenizer = build(node, "tokenizer")
    if tokenizer.keeps_files:  # what it learned is a file in the folder (a trained BPE)
        tokenizer.restore(described, folder=folder)
    else:
        tokenizer.restore(described)
    if tokenizer.vocab_size != manifest["vocab_size"]:
        raise UserError(
            f"the rebuilt tokenizer has {tokenizer.vocab_size:,} ids but the files were made "
            f"with {manifest['vocab_size']:,}; its files changed since (see the manifest)"
        )
    return tokenizer
