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
plugins') tokenizer classes. Nor does it read anything the folder does not hold: every
name the manifest gives is a file right in the folder (or in its doc_index/), every file
opened is a regular one (never a FIFO, which blocks, a device or a link), the manifest's
keys are checked for their kind when it is read (MANIFEST_KEYS), and meta.pkl has a
bounded size.
"""

from __future__ import annotations

import errno
import io
import json
import math
import os
import pickle
import pickletools
import stat
import struct
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, NoReturn, Optional, Union

import numpy as np

from corpusprep._paths import MAX_JSON_COST, json_cost, open_regular_fd, read_regular
from corpusprep.errors import UserError
from corpusprep.exporters import DOC_INDEX, doc_index_name
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
        self.shards = shards if isinstance(shards, _Mapped) else list(shards)
        self.dtype = self.shards[0].dtype
        lengths = getattr(self.shards, "lengths", None) or [len(s) for s in self.shards]
        self.starts = np.cumsum([0] + lengths)  # shard i: [s[i], s[i+1])

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
        out = np.empty(stop - start, self.dtype)
        for i in range(first, last):  # copied shard by shard: a view would keep it mapped
            a = max(self.starts[i], start)
            out[a - start : min(self.starts[i + 1], stop) - start] = self.shards[i][
                a - self.starts[i] : stop - self.starts[i]
            ]
        return out

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
        # numpy gives x[..., i] as a 0-d array, not the token
        zero_d = isinstance(key, tuple) and any(k is Ellipsis for k in key)
        key = _one_index(key)
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
            token = self.shards[s][i - self.starts[s]]
            return np.asarray(token) if zero_d else token
        idx = np.asarray(key)
        if idx.dtype == bool:  # a mask, as numpy takes one: not the indices 0 and 1
            if idx.shape != (len(self),):
                raise IndexError(f"a boolean index of shape {idx.shape} for {len(self):,} tokens")
            return self._take(np.flatnonzero(idx))
        if idx.size and not np.issubdtype(idx.dtype, np.integer):  # 1.5: not cut to 1
            raise IndexError(
                f"an index must be an integer, a slice or an array of them ({key!r:.40})"
            )
        return self._take(idx.astype(np.int64))

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        joined = np.empty(len(self), self.dtype)
        for i, start in enumerate(self.starts[:-1]):  # one shard mapped at a time
            part = self.shards[i]
            joined[start : start + len(part)] = part
        return joined if dtype is None else joined.astype(dtype)


MAPPED = 64  # shard files kept mapped at least (each map holds a file descriptor)
SPARE_FILES = 256  # of the open-file limit, left to the rest of the process
LOAD_AGAIN = "load it again"


def _identity(f: BinaryIO) -> tuple[int, ...]:
    """What tells a shard file the load checked from one put by that name since: a commit
    renames new files over the old ones (a new inode), or rewrites one (its size, mtime)."""
    st = os.fstat(f.fileno())
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _maps_allowed(shards: int) -> int:
    """How many of a split's shard files may stay mapped: all, where the open-file limit
    allows it, raising the soft limit toward the hard one as needed (as systemd advises a
    program that needs many files: the soft 1,024 is for select()'s sake); else what the
    limit leaves, and MAPPED at least. A training loop reading at random then maps each
    shard once (mapping again on each read was six times slower)."""
    try:
        import resource
    except ImportError:  # Windows: no such limit
        return shards
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        in_use = len(os.listdir("/proc/self/fd"))
    except OSError:  # not Linux
        in_use = 0
    wanted = in_use + shards + SPARE_FILES
    if soft != resource.RLIM_INFINITY and soft < wanted:
        raised = wanted if hard == resource.RLIM_INFINITY else min(hard, wanted)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
            soft = raised
        except (ValueError, OSError):  # (macOS caps it below an unlimited hard limit)
            pass
    if soft == resource.RLIM_INFINITY:
        return shards
    return min(shards, max(MAPPED, soft - in_use - SPARE_FILES))


class _Mapped(Sequence):
    """A split's shard files, each mapped when first read and kept so, up to what the
    open-file limit allows (_maps_allowed): a mapping holds a file descriptor (mmap keeps
    a copy of it), and a folder of more shards than the limit (1,024 by default) could not
    be loaded when all were mapped at once."""

    def __init__(self, files: list[tuple[Path, np.dtype, int, int, tuple[int, ...]]]) -> None:
        self.files = files  # (path, dtype, offset, count, identity), each checked at load
        self.lengths = [count for _, _, _, count, _ in files]
        self.dtype = files[0][1]
        self.__setstate__(self.__dict__)

    def __getstate__(self) -> dict[str, Any]:
        # what a process it is sent to (a spawned DataLoader worker) maps again by itself,
        # under its own limit: the maps pickled would be every mapped shard's data, and the
        # lock cannot be pickled
        return {k: v for k, v in self.__dict__.items()
                if k not in ("_open", "_lock", "keep", "_pid")}  # fmt: skip

    def __setstate__(self, state: dict[str, Any]) -> None:
        import threading

        self.__dict__.update(state)
        self._open: dict[int, np.ndarray] = {}  # oldest first
        self._lock = threading.Lock()  # threads that read at once (a prefetching loader)
        self.keep: Optional[int] = None  # maps kept: found at the first read
        self._pid = os.getpid()

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = range(len(self))[i]
        if self._pid != os.getpid():  # a forked child (a DataLoader worker): a lock another
            self.__setstate__(self.__getstate__())  # thread held at the fork stays held here
        with self._lock:
            array = self._open.pop(i, None)
            if array is None:
                try:
                    array = self._map(i)
                except OSError as e:  # the rest of the process took the files left: keep
                    if e.errno not in (errno.EMFILE, errno.ENFILE) or len(self._open) < 2:
                        raise
                    self._trim(max(1, len(self._open) // 2))  # half the maps, and try again
                    array = self._map(i)
            self._open[i] = array
            self._trim(self.keep if self.keep is not None else _maps_allowed(len(self.files)))
        return array

    def _trim(self, keep: int) -> None:
        """Keep at most `keep` maps from now on, the oldest dropped first."""
        self.keep = keep
        while len(self._open) > keep:
            del self._open[next(iter(self._open))]

    def _map(self, i: int) -> np.ndarray:
        path, dtype, offset, count, identity = self.files[i]
        with open_regular(path, LOAD_AGAIN) as f:
            if _identity(f) != identity:  # another run's, committed since the load
                raise _damaged(path, "replaced since the folder was loaded (another run "
                               "committed into it)", LOAD_AGAIN)  # fmt: skip
            return _map(f, dtype, offset, count)


def _one_index(key: Any) -> Any:
    """The index numpy reads `key` as on a 1-D array, for ShardedTokens: x[(i,)] is x[i],
    x[...] is x[:] and a 0-d array of an integer is that integer. A bool is refused: an int
    to Python (x[True] would be x[1]), a new axis to numpy, as None is."""
    if isinstance(key, tuple):  # x[()] and x[..., i] too: an Ellipsis stands for no axis here
        index = [k for k in key if k is not Ellipsis]
        if len(index) > 1 or len(key) - len(index) > 1:
            raise IndexError(f"ShardedTokens is 1-D: one index, not {len(key)} ({key!r:.40})")
        key = index[0] if index else Ellipsis
    if key is Ellipsis:
        return slice(None)
    if key is None or isinstance(key, (bool, np.bool_)):
        raise IndexError(f"a new axis (index {key!r}): index np.asarray(x[a:b]) for that")
    if isinstance(key, np.ndarray) and key.ndim == 0 and np.issubdtype(key.dtype, np.integer):
        return int(key)
    return key


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


def _damaged(what: Path | str, detail: str, fix: str = "prepare it again") -> UserError:
    return UserError(f"{what}: {detail}; the folder is damaged or mixed with another run: {fix}")


NOT_REGULAR = "not a regular file (a FIFO, a device, a folder)"


def open_regular(path: Path, fix: str = "prepare it again") -> BinaryIO:
    """A file of a folder that may come from anyone, open for reading: a regular file only
    (a link to one is fine: a Hub snapshot's files are links), checked on the open file
    itself, so that nothing can be swapped in between (_paths.open_regular_fd)."""
    try:
        return os.fdopen(open_regular_fd(path), "rb")
    except FileNotFoundError:
        raise _damaged(path, "missing", fix) from None
    except OSError as e:
        detail = NOT_REGULAR if e.errno == errno.EINVAL else f"cannot be read ({e.strerror})"
        raise _damaged(path, detail, fix) from None


def _size(file: Path) -> Optional[int]:
    """A regular file's size (through a link); None if there is none."""
    try:
        info = file.stat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not stat.S_ISREG(info.st_mode):
        raise _damaged(file, NOT_REGULAR)
    return info.st_size


def _path(folder: Path, name: str, key: str) -> Path:
    """A file a manifest names: right in the folder, or in its doc_index/. A stranger's
    manifest may say "/etc/passwd", "../x" or "doc_index/../../x": never followed."""
    parts = name.split("/")
    plain = all(p not in ("", ".", "..") and "\0" not in p for p in parts)
    if not plain or len(parts) > 2 or (len(parts) == 2 and parts[0] != DOC_INDEX):
        raise _damaged(folder / "manifest.json", f"{key} names {name!r}, not a file of the folder")
    return folder / name


def read_bounded(path: Path, limit: int, fix: str = "prepare it again") -> bytes:
    """A regular file's bytes, if it has at most `limit` of them (_paths.read_regular), or
    one line saying why not."""
    try:
        return read_regular(path, limit)
    except FileNotFoundError:
        raise _damaged(path, "missing", fix) from None
    except OSError as e:
        too_big = f"more than the {limit >> 20:,} MB such a file may have"
        detail: dict[Optional[int], str] = {errno.EINVAL: NOT_REGULAR, errno.EFBIG: too_big}
        raise _damaged(path, detail.get(e.errno, f"cannot be read ({e.strerror})"), fix) from None


def read_json(path: Path, limit: int, fix: str = "prepare it again") -> Any:
    """A JSON file of a folder that may come from anyone: a regular file of at most `limit`
    bytes, parsed; or one line saying what is wrong with it."""
    data = read_bounded(path, limit, fix)
    if json_cost(data) > MAX_JSON_COST:  # "[{},{},...]": 25 times its bytes
        raise _damaged(path, f"JSON that would take more than {MAX_JSON_COST >> 30} GB of "
                       "memory to read", fix)  # fmt: skip
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise _damaged(path, f"not valid JSON ({e})", fix) from None


# What load(), inspect and plot read from manifest.json, and the kinds each may be (a
# key's path: "*" is each key of an object, "[]" each item of a list). The manifest is
# JSON anyone can edit, and a value of another kind failed deep inside, as a traceback (a
# format spec's ValueError, a KeyError), instead of one line naming the key.
READ_FORMATS = ("nanogpt", "llmc", "npy", "megatron")  # a plugin's format: not read here
COUNT, NUMBER = "count", "number"  # an int >= 0 (not a bool); a finite int or float
KINDS = {COUNT: "a whole number", NUMBER: "a number", str: "text", dict: "an object",
         list: "a list", bool: "true or false", None: "null"}  # fmt: skip
MANIFEST_KEYS: dict[str, tuple] = {
    "dtype": (str,), "vocab_size": (COUNT,), "tokens": (dict,), "tokens.*": (COUNT,),
    "files": (dict,), "files.*": (COUNT,), "checksums": (dict,), "checksums.*": (str,),
    "format": (dict,), "format.kind": (str,), "format.document_index": (bool,),
    "format.shards": (dict,), "format.shards.*": (list,), "format.shards.*.[]": (dict,),
    "format.shards.*.[].file": (str,), "format.shards.*.[].tokens": (COUNT,),
    "format.splits": (dict,), "format.splits.*": (dict,), "format.splits.*.prefix": (str,),
    "format.shard_tokens": (COUNT,), "format.magic": (COUNT,), "format.version": (COUNT,),
    "format.dtype_code": (COUNT,), "format.token_dtype": (str,),
    "config": (dict,), "tokenizer": (dict,), "source": (dict,), "source.bytes": (COUNT,),
    "source.sha256": (str,), "source.file": (str,), "source.path": (str,), "source.url": (str,),
    "source.dataset": (str,), "source.glob": (list,), "source.glob.[]": (str,),
    "source.files": (list,), "chars": (COUNT,), "created": (str,), "corpusprep": (str,),
    "seconds": (dict,), "seconds.total": (NUMBER,), "chars_per_token": (NUMBER,),
    "bytes_per_token": (NUMBER, None), "val_bytes": (COUNT, None), "vocab_used": (COUNT, None),
    "split": (dict,), "split.by": (str,), "split.train_chars": (COUNT,),
    "split.val_chars": (COUNT,), "documents": (dict,), "documents.total": (COUNT,),
    "eot": (dict, None), "order": (dict,),
}  # fmt: skip
LOAD_NEEDS = ("dtype", "vocab_size", "tokens.train", "tokens.val")
SUMMARY_NEEDS = ("source", "source.bytes", "source.sha256", "tokenizer", "chars", "created",
                 "corpusprep", "seconds.total")  # fmt: skip
# what inspect --verify reads besides: checked only there (a list of every input file)
VERIFY_KEYS: dict[str, tuple] = {
    "source.files.[]": (dict,), "source.files.[].path": (str,), "source.files.[].sha256": (str,),
    "source.files.[].format": (str,), "source.files.[].compression": (str,),
    "source.files.[].member": (str, None), "source.files.[].bytes": (COUNT,),
    "split.fraction": (NUMBER,), "split.seed": (COUNT,),
    "split.val_size": (COUNT, NUMBER, None), "order.kind": (str,), "order.seed": (COUNT,),
    "eot.mode": (str,), "eot.id": (COUNT, None), "shards": (dict,), "shards.shard_bytes": (COUNT,),
    "config.shard_bytes": (COUNT,), "config.source": (dict,),
    # the input is read again with these (sources.ReadOptions)
    "config.source.text_field": (str,), "config.source.doc_separator": (str, None),
    "config.source.doc_end": (str, None), "config.source.skip_invalid": (bool,),
    "config.source.max_uncut_bytes": (COUNT,), "config.source.max_bytes": (COUNT, None),
}  # fmt: skip
VERIFY_NEEDS = ("source.sha256", "split.by", "split.fraction", "documents.total")
DTYPES = ("uint16", "uint32")
MAX_MANIFEST_BYTES = 1 << 30  # a glob of a million input files lists them in about 300 MB


def _is(value: Any, kind: Any) -> bool:
    if kind == COUNT:
        return type(value) is int and value >= 0
    if kind == NUMBER:
        return type(value) in (int, float) and math.isfinite(value)
    return value is None if kind is None else isinstance(value, kind)


def _found(value: Any, parts: list[str], name: str = "") -> Iterator[tuple[str, Any]]:
    """(its key, the value) for every value at a key's path (see MANIFEST_KEYS)."""
    if not parts:
        yield name, value
        return
    part, rest = parts[0], parts[1:]
    if part == "[]":
        items = enumerate(value) if isinstance(value, list) else ()
        for i, item in items:
            yield from _found(item, rest, f"{name}[{i}]")
        return
    if not isinstance(value, dict):
        return
    for key in value if part == "*" else [part] if part in value else []:
        yield from _found(value[key], rest, f"{name}.{key}" if name else str(key))


def check_json(value: Any, where: Path, keys: dict[str, tuple], needs: Sequence[str] = (),
               fix: str = "prepare it again") -> None:  # fmt: skip
    """That `value`, read from the JSON file `where`, is an object with each of `needs`,
    and that each of `keys` it has is of its kinds; else one line naming the first key
    that is not."""
    if not isinstance(value, dict):
        raise _damaged(where, f"not a JSON object but {KINDS.get(type(value), 'a value')}", fix)
    for key in needs:
        if next(_found(value, key.split(".")), None) is None:
            raise _damaged(where, f"no {key}", fix)
    for key, kinds in keys.items():
        for name, found in _found(value, key.split(".")):
            if not any(_is(found, kind) for kind in kinds):
                wanted = " or ".join(KINDS[kind] for kind in kinds)
                raise _damaged(where, f"{name} is {_shown(found)}, not {wanted}", fix)


def _shown(value: Any) -> str:
    """A JSON value in a message: a short one as it is, a container by its kind."""
    if value is None:
        return "null"
    if isinstance(value, (str, int, float)):
        return repr(value)[:40]
    return KINDS.get(type(value), type(value).__name__)


def read_manifest(folder: Path) -> dict[str, Any]:
    """An output folder's manifest.json, checked for what load() and inspect read of it."""
    path = folder / "manifest.json"
    if not os.path.lexists(path):
        if os.path.lexists(folder / "multirun.yaml"):  # a sweep's folder: its jobs' inside
            jobs = sorted(p.parent.name for p in folder.glob("*/manifest.json"))
            shown = ", ".join(jobs[:4]) + (", ..." if len(jobs) > 4 else "")
            raise UserError(f"{folder}: a sweep's folder; give one of its jobs' folders"
                            + (f" ({shown})" if jobs else ""))  # fmt: skip
        if not os.path.lexists(folder):  # run from another folder than the run's, often
            here = "" if folder.is_absolute() else f" (from {Path.cwd()})"
            raise UserError(f"{folder}: no such folder{here}; give the out_dir of a finished "
                            "run, from the folder it was made in or as a full path")  # fmt: skip
        if folder.is_file() and os.path.lexists(folder.parent / "manifest.json"):  # train.bin
            raise UserError(f"{folder}: a file, not an output folder; give its folder, "
                            f"{folder.parent}")  # fmt: skip
        raise UserError(
            f"{folder}: not a corpusprep output folder (no manifest.json); "
            "give the out_dir of a finished run"
        )
    manifest = read_json(path, MAX_MANIFEST_BYTES)
    check_json(manifest, path, MANIFEST_KEYS, LOAD_NEEDS)
    dtype, vocab_size = manifest["dtype"], manifest["vocab_size"]
    if dtype not in DTYPES:
        raise _damaged(path, f"dtype is {dtype!r}, not one of {', '.join(DTYPES)}")
    if not 1 <= vocab_size <= np.iinfo(dtype).max + 1:
        raise _damaged(path, f"vocab_size {vocab_size:,} does not fit {dtype} ids")
    for key in ("files", "checksums"):
        for name in manifest.get(key) or {}:
            _path(folder, name, key)
    check_records(manifest, path)
    return manifest


# how deep the records a reader takes whole (config, tokenizer) may be nested: a run writes
# fewer than 10 levels; copying one to rebuild the tokenizer recurses once a level, and
# json.loads parses about 1,000, past what that copy could take (a RecursionError)
MAX_RECORD_DEPTH = 100


def check_records(manifest: dict[str, Any], path: Path) -> None:
    """The manifest's config and tokenizer records, nested at most MAX_RECORD_DEPTH deep
    (walked without recursion; only containers are visited), or one line naming them."""
    for key in ("config", "tokenizer"):
        stack = [(manifest.get(key), 1)]
        while stack:
            node, depth = stack.pop()
            if depth > MAX_RECORD_DEPTH:
                raise _damaged(path, f"{key} is nested more than {MAX_RECORD_DEPTH} levels deep")
            values = (
                node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
            )
            stack.extend((v, depth + 1) for v in values if isinstance(v, (dict, list)))


def load(path: str | Path, tokenizer: bool = True, check_ids: bool = True) -> PreparedDataset:
    """Open an output folder made by corpusprep, in any of its formats. tokenizer=False
    skips rebuilding the tokenizer (ds.tokenizer is None): for counting ids only.

    check_ids=True (the default) reads every id once to check that none is beyond the
    vocabulary (a damaged or tampered file would otherwise fail deep inside training, as
    an index error of the embedding): memory stays flat, and it takes about 0.1 s per GB
    of ids from the page cache, the disk's own speed from a cold one. check_ids=False
    skips it, for a big folder you trust on a slow disk.

    Another run may commit into the folder meanwhile: the manifest is read again once
    everything is open, and if it changed, the folder is read again (never one run's
    manifest with another's files)."""
    folder = Path(path)
    for attempt in range(LOAD_ATTEMPTS):
        if attempt:
            time.sleep(0.05 * attempt)  # a commit under way: read once it is done
        try:
            manifest = read_manifest(folder)
        except UserError:  # a commit under way puts its manifest back last (or just has)
            if _committing(folder) or _manifest_now(folder) is not None:
                continue
            raise
        try:
            opened = _open_folder(folder, manifest, tokenizer, check_ids)
        except UserError:
            if _manifest_now(folder) == manifest:
                raise  # the folder is as it was: its own fault
            opened = None
        if opened is not None and _manifest_now(folder) == manifest:
            return opened
    raise UserError(
        f"{folder}: a commit was under way there all the while it was read ({LOAD_ATTEMPTS} "
        "tries), or a killed run left one half done (the next run in the folder finishes "
        "it); load it once that is done"
    )


LOAD_ATTEMPTS = 5


def _committing(folder: Path) -> bool:
    """A commit is under way in the folder (or a killed one waits for the next run)."""
    from corpusprep.writer import JOURNAL

    return os.path.lexists(folder / JOURNAL)


def _manifest_now(folder: Path) -> Optional[dict[str, Any]]:
    try:
        return read_manifest(folder)
    except UserError:  # gone (a commit under way) or damaged
        return None


def _open_folder(folder: Path, manifest: dict[str, Any], tokenizer: bool,
                 check_ids: bool) -> PreparedDataset:  # fmt: skip
    """load() for the folder as `manifest` describes it."""
    dtype = np.dtype(manifest["dtype"])
    fmt = manifest.get("format", {}) or {}
    kind = fmt.get("kind", "nanogpt")
    readers = {"nanogpt": _nanogpt, "llmc": _llmc, "npy": _npy, "megatron": _megatron}
    if kind not in READ_FORMATS:
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
    has_meta = listed is None or "meta.pkl" in listed or os.path.lexists(folder / "meta.pkl")
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
    if rebuilt is not None and has_meta:
        _check_meta(folder / "meta.pkl", meta, rebuilt)
    return PreparedDataset(folder, arrays["train"], arrays["val"], rebuilt, manifest, meta,
                           docs["train"], docs["val"], files)  # fmt: skip


def _check_meta(path: Path, meta: dict[str, Any], tokenizer: Tokenizer) -> None:
    """meta.pkl's itos and stoi are the rebuilt tokenizer's: nanoGPT's sample.py decodes
    with them, load()'s tokenizer with the manifest's record, and a meta.pkl copied from
    another run of the same vocabulary size would make the two disagree, silently."""
    expected = tokenizer.meta() or {}  # none for GPT-2: sample.py would decode with this one
    for key in ("itos", "stoi"):
        if meta.get(key) != expected.get(key):
            raise _damaged(path, f"its {key} is not the tokenizer's the manifest records")


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


MAX_META_BYTES = 64 << 20  # meta.pkl: see read_meta


def read_meta(path: Path) -> dict[str, Any]:
    """A meta.pkl, read without running code: the one way corpusprep reads a pickle it did
    not just make (nanoGPT's train.py and sample.py read ours with pickle.load).

    Its memory is bounded too. The biggest meta.pkl corpusprep writes, a char vocabulary of
    every Unicode character, is 24 MB; MAX_META_BYTES leaves room for big vocabularies.
    A pickle can ask for far more than its size (a memo slot numbered 2**31 in 9 bytes, a
    216-byte set in 1): its opcodes are looked at first, without running any, and what
    its values would cost is added up (_check_plain, MAX_META_COST)."""
    data = read_bounded(path, MAX_META_BYTES)
    try:
        _check_plain(data, path)
        meta = _PlainUnpickler(io.BytesIO(data), path).load()
    except UserError:
        raise
    except Exception as e:  # truncated, or not a pickle at all
        raise _damaged(path, f"not a readable pickle ({type(e).__name__}: {e})") from None
    if not isinstance(meta, dict):
        raise _damaged(path, f"holds a {type(meta).__name__}, not a dict")
    return meta


def _refusing(path: Path, why: str) -> UserError:
    return UserError(f"refusing to load {path}: {why}; a corpusprep meta.pkl holds only plain "
                     "values (prepare the folder again)")  # fmt: skip


# The pickle opcodes of plain values (protocols 0 to 5), by what follows each: that many
# bytes (>= 0), a line, or a length of 1, 4 or 8 bytes and that many (pickletools' own
# codes, -1 to -5); the memo's and STOP get codes of their own. Any other opcode (a class,
# a call, a buffer, DUP) is refused.
_PLAIN = {"PROTO", "FRAME", "MARK", "POP", "POP_MARK", "NONE", "NEWTRUE", "NEWFALSE", "INT",
          "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "FLOAT", "BINFLOAT",
          "UNICODE", "SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "SHORT_BINBYTES",
          "BINBYTES", "BINBYTES8", "EMPTY_DICT", "DICT", "SETITEM", "SETITEMS", "EMPTY_LIST",
          "LIST", "APPEND", "APPENDS", "EMPTY_TUPLE", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3",
          "EMPTY_SET", "ADDITEMS", "FROZENSET", "GET", "BINGET", "LONG_BINGET"}  # fmt: skip
_LINE, _LEN1, _LEN4, _LEN4U, _LEN8 = -1, -2, -3, -4, -5
_MEMOIZE, _PUT, _BINPUT, _LONG_BINPUT, _STOP, _REFUSED = -6, -7, -8, -9, -10, -11
_OWN = {"MEMOIZE": _MEMOIZE, "PUT": _PUT, "BINPUT": _BINPUT, "LONG_BINPUT": _LONG_BINPUT,
        "STOP": _STOP}  # fmt: skip
# what an opcode makes costs memory beyond its bytes: a 1-byte EMPTY_SET is a 216-byte set.
# Each opcode counts what it makes at most (an item it adds, a reference: 32 bytes), more
# for empty containers, and its text's or number's length more for its argument: a pickle
# that would take more than MAX_META_COST is refused before it is unpickled (the biggest
# meta.pkl corpusprep writes, every code point's char vocabulary, costs about 0.2 GB)
MAX_META_COST = 1 << 30
_COST = [32] * 256
_CONTAINERS = {"EMPTY_SET": 232, "FROZENSET": 232, "EMPTY_DICT": 80, "DICT": 80,
               "EMPTY_LIST": 72, "LIST": 72}  # fmt: skip
_OPCODES = [_REFUSED] * 256
_NAMES = {op.code: op.name for op in pickletools.opcodes}
for _op in pickletools.opcodes:
    _COST[ord(_op.code)] = _CONTAINERS.get(_op.name, 32)
    if _op.name in _OWN:
        _OPCODES[ord(_op.code)] = _OWN[_op.name]
    elif _op.name in _PLAIN:
        _OPCODES[ord(_op.code)] = _op.arg.n if _op.arg else 0


def _check_plain(data: bytes, path: Path) -> None:
    """Walk the opcodes of a pickle without running them: only those of plain values, and
    each memo slot stored numbered at most the count stored before it (the unpickler makes
    its memo as long as the highest number). A loop over a table: about as fast as the
    unpickling itself (pickletools.genops is 10 times slower). A cut pickle raises
    IndexError or ValueError."""
    i = stored = cost = 0
    while True:
        op = data[i]
        n = _OPCODES[op]
        cost += _COST[op]
        i += 1
        if cost > MAX_META_COST:
            raise _refusing(path, f"its values would take more than {MAX_META_COST >> 30} GB "
                            "of memory, a pickle made to fill memory")  # fmt: skip
        if n >= 0:
            i += n
        elif n == _MEMOIZE:
            stored += 1
        elif n == _LEN1:
            cost += data[i]
            i += 1 + data[i]
        elif n in (_LEN4, _LEN4U, _LEN8):
            size = 8 if n == _LEN8 else 4
            length = int.from_bytes(data[i : i + size], "little")
            cost += length
            i += size + length
        elif n == _LINE:
            end = data.index(b"\n", i) + 1
            cost += end - i
            i = end
        elif n == _STOP:
            return
        elif n == _REFUSED:
            name = _NAMES.get(chr(op))
            if name is None:  # not a pickle at all: damaged
                raise ValueError(f"byte {i - 1:,} is no pickle opcode")
            if name in ("GLOBAL", "STACK_GLOBAL", "INST"):
                raise _refusing(path, f"it asks to import {_imported(data, i - 1)}")
            raise _refusing(path, f"it holds pickle opcode {name}")
        else:  # a memo slot stored under a number
            if n == _PUT:
                end = data.index(b"\n", i)
                slot, i = int(data[i:end]), end + 1
            else:
                size = 1 if n == _BINPUT else 4
                slot, i = int.from_bytes(data[i : i + size], "little"), i + size
            if slot > stored:
                raise _refusing(path, f"memo index {slot:,} with {stored:,} values stored "
                                "before it, a pickle made to fill memory")  # fmt: skip
            stored += 1


def _imported(data: bytes, at: int) -> str:
    """What the GLOBAL, INST or STACK_GLOBAL opcode at `at` asks to import, for the message:
    its argument, or the last two strings before it."""
    strings: list[str] = []
    try:
        for op, arg, pos in pickletools.genops(data):
            if pos == at:
                return ".".join(arg.split(" ") if isinstance(arg, str) else strings[-2:])
            if isinstance(arg, str) and "UNICODE" in op.name:
                strings = [*strings[-1:], arg]
    except ValueError:
        pass
    return "a class"


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
        file = _path(folder, name, "files")
        size = _size(file)
        if size != expected:
            found = "missing" if size is None else f"{size:,} bytes"
            raise _damaged(file, f"{found}, but the manifest says {expected:,} bytes")


def _map(f: BinaryIO, dtype: np.dtype, offset: int, count: int) -> np.ndarray:
    """`count` ids after `offset` bytes of an open file (the mapping outlives the file)."""
    if not count:
        return np.zeros(0, dtype)  # mmap cannot map nothing
    return np.memmap(f, dtype=dtype, mode="r", offset=offset, shape=(count,))


def _in_order(values: np.ndarray, top: int) -> bool:
    """Whether the values never go down, from 0 to at most `top`, a chunk at a time."""
    last = 0
    for i in range(0, len(values), CHECK_CHUNK):
        part = np.asarray(values[i : i + CHECK_CHUNK])
        if part[0] < last or (part[1:] < part[:-1]).any() or part[-1] > top:
            return False
        last = part[-1]
    return True


def _doc_index(folder: Path, side: str, tokens: int) -> Optional[np.ndarray]:
    """Where each document starts, checked: in order, within the side's tokens (else an
    inspect --plot drew garbage, and --verify read past the end)."""
    for name in (doc_index_name(side), f"{side}.docs.bin"):  # where folders made before kept it
        file = _path(folder, name, DOC_INDEX)
        if os.path.lexists(file):
            break
    else:
        return None
    with open_regular(file) as f:
        size = os.fstat(f.fileno()).st_size
        if size % 8:
            raise _damaged(file, f"{size:,} bytes, not a whole number of 8-byte offsets")
        docs = _map(f, np.dtype("<u8"), 0, size // 8)
    if not _in_order(docs, tokens):
        raise _damaged(file, f"its document offsets are not in order within {side}'s "
                       f"{tokens:,} tokens")  # fmt: skip
    return docs


def _nanogpt(folder: Path, side: str, tokens: int, dtype: np.dtype, fmt: dict):
    file = folder / f"{side}.bin"
    expected = tokens * dtype.itemsize
    size = _size(file)
    if size != expected:
        found = "missing" if size is None else f"{size:,} bytes"
        raise _damaged(
            file,
            f"{found}, but the manifest says {tokens:,} {dtype.name} tokens ({expected:,} bytes)",
        )
    with open_regular(file) as f:
        if os.fstat(f.fileno()).st_size != expected:  # replaced since: the open file counts
            raise _damaged(file, f"changed while read; {tokens:,} tokens expected")
        array = _map(f, dtype, 0, tokens)
    return array, _doc_index(folder, side, tokens), [file]


def _join(shards: list[tuple[Path, np.dtype, int, int, tuple[int, ...]]],
          dtype: np.dtype) -> Tokens:  # fmt: skip
    """A split's shards (path, dtype, offset, count, identity): one file's memmap, or
    several's."""
    if not shards:
        return np.zeros(0, dtype)
    mapped = _Mapped(shards)
    return mapped[0] if len(shards) == 1 else ShardedTokens(mapped)


def _shard_files(folder: Path, side: str, fmt: dict) -> list[tuple[Path, int]]:
    key = f"format.shards.{side}"
    try:
        return [(_path(folder, s["file"], key), s["tokens"]) for s in fmt["shards"][side]]
    except KeyError as e:
        raise _damaged(folder / "manifest.json", f"no {key} ({e})") from None


LLMC_HEADERS = {"uint16": (20240520, 1), "uint32": (20240801, 7)}  # data_common.py


def _llmc(folder: Path, side: str, tokens: int, dtype: np.dtype, fmt: dict):
    magic, version = LLMC_HEADERS[dtype.name]
    shards, files = [], []
    for file, count in _shard_files(folder, side, fmt):
        with open_regular(file) as f:
            head = f.read(1024)
            # a file cut inside the header need not hold whole int32s (frombuffer raises)
            header = np.frombuffer(head, dtype="<i4") if len(head) == 1024 else None
            if header is None or (header[0], header[1]) != (magic, version):
                raise _damaged(file, f"not an llm.c {dtype.name} token file (magic {magic})")
            size = os.fstat(f.fileno()).st_size
            if header[2] != count or size != 1024 + count * dtype.itemsize:
                raise _damaged(file, f"its header says {int(header[2]):,} tokens, not {count:,}")
            shards.append((file, dtype.newbyteorder("<"), 1024, count, _identity(f)))
        files.append(file)
    return _join(shards, dtype), _doc_index(folder, side, tokens), files


NPY_HEADERS = {(1, 0): np.lib.format.read_array_header_1_0,
               (2, 0): np.lib.format.read_array_header_2_0}  # fmt: skip
# numpy's own bound on a header (max_header_size), checked here from the length field: a
# version 2.0 header may say it is up to 4 GB, and numpy reads it all before its check
MAX_NPY_HEADER = 10_000


def _npy(folder: Path, side: str, tokens: int, dtype: np.dtype, fmt: dict):
    shards, files = [], []
    for file, count in _shard_files(folder, side, fmt):
        with open_regular(file) as f:  # its header read here: np.load opens by name
            try:
                version = np.lib.format.read_magic(f)
                if version not in NPY_HEADERS:
                    raise ValueError(f"version {version}")
                field = f.read(2 if version == (1, 0) else 4)
                length = int.from_bytes(field, "little")
                if length > MAX_NPY_HEADER:
                    raise ValueError(f"a header of {length:,} bytes, more than the "
                                     f"{MAX_NPY_HEADER:,} numpy reads")  # fmt: skip
                f.seek(-len(field), os.SEEK_CUR)
                shape, _, found = NPY_HEADERS[version](f)
            except ValueError as e:  # numpy's messages may span lines: this one is one
                raise _damaged(file, f"not a .npy file ({' '.join(str(e).split())})") from None
            if found != dtype or shape != (count,):
                raise _damaged(file, f"{found} {shape}, not {dtype.name} ({count:,},)")
            offset, size = f.tell(), os.fstat(f.fileno()).st_size
            if size != offset + count * dtype.itemsize:
                raise _damaged(file, f"{size:,} bytes, not {offset + count * dtype.itemsize:,}")
            shards.append((file, found, offset, count, _identity(f)))
        files.append(file)
    return _join(shards, dtype), _doc_index(folder, side, tokens), files


MEGATRON_CODES = {8: "uint16", 4: "uint32"}  # Megatron's int32 (code 4) holds uint32 ids


def _megatron(folder: Path, side: str, tokens: int, dtype: np.dtype, fmt: dict):
    stem = (fmt.get("splits") or {}).get(side, {}).get("prefix")
    if not stem:
        raise _damaged(folder / "manifest.json", f"no Megatron prefix for {side}")
    key = f"format.splits.{side}.prefix"
    idx, data = _path(folder, f"{stem}.idx", key), _path(folder, f"{stem}.bin", key)
    with open_regular(idx) as f:
        head, size = f.read(34), os.fstat(f.fileno()).st_size
        version = struct.unpack("<Q", head[9:17])[0] if len(head) == 34 else None
        if head[:9] != b"MMIDIDX\x00\x00" or version != 1:
            raise _damaged(idx, "not a Megatron MMIDIDX index")
        code = head[17]
        count, ndocs = struct.unpack("<QQ", head[18:34])
        if MEGATRON_CODES.get(code) != dtype.name:
            raise _damaged(idx, f"dtype code {code}, but the manifest says {dtype.name}")
        if size != 34 + 12 * count + 8 * ndocs:
            raise _damaged(idx, f"{size:,} bytes for {count:,} sequences and {ndocs:,} entries")
        raw = _map(f, np.dtype(np.uint8), 0, size)
    lengths = np.frombuffer(raw, "<i4", count, 34)
    pointers = np.frombuffer(raw, "<i8", count, 34 + 4 * count)
    documents = np.frombuffer(raw, "<i8", ndocs, 34 + 12 * count)
    # Megatron's document list: where each document's sequences start, from 0 to count
    if not ndocs or documents[0] != 0 or documents[-1] != count or not _in_order(documents, count):
        raise _damaged(idx, f"its document list does not go from 0 to {count:,} in order")
    if int(lengths.sum(dtype=np.int64)) != tokens:
        raise _damaged(idx, f"its sequences do not add up to {tokens:,} tokens")
    # Megatron reads each sequence at its pointer: where the lengths before it end
    ends = np.cumsum(lengths, dtype=np.int64) * dtype.itemsize
    if count and (lengths.min() < 0 or pointers[0] != 0 or (pointers[1:] != ends[:-1]).any()):
        raise _damaged(idx, "its sequences' lengths and pointers do not agree")
    with open_regular(data) as f:
        if os.fstat(f.fileno()).st_size != tokens * dtype.itemsize:
            raise _damaged(data, f"not {tokens:,} {dtype.name} tokens")
        array = _map(f, dtype.newbyteorder("<"), 0, tokens)
    docs = None
    if fmt.get("document_index", True):
        # a document of no sequences at the end starts where the tokens end
        starts = np.append(pointers // dtype.itemsize, tokens)[documents[:-1]]
        if not _in_order(starts, tokens):
            raise _damaged(idx, f"its documents do not start in order within {tokens:,} tokens")
        docs = starts.astype("<u8")
    return array, docs, [data, idx]


def rebuild_tokenizer(manifest: dict[str, Any], folder: Optional[Path] = None) -> Tokenizer:
    """The tokenizer that made the files: built from the recorded config, then given back
    what it learned from the corpus (the char vocabulary)."""
    from corpusprep.config import build_recorded
    from corpusprep.tokenizers import restore_recorded
    from corpusprep.tokenizers.reuse import _recorded

    try:  # a folder made with tokenizer=reuse: the tokenizer it reused, recorded within
        node, described = _recorded(manifest, folder)
    except (KeyError, TypeError):
        raise _damaged("manifest.json", "no tokenizer config (config.tokenizer)") from None
    manifest_path = Path(folder or ".") / "manifest.json"
    # a plain dict, as recorded: build() interprets no ${...} in it and runs nothing it names
    tokenizer = build_recorded(node, manifest_path)
    # what it learned: in the record, or a file in the folder (a trained BPE)
    restore_recorded(tokenizer, described, folder, manifest_path)
    if tokenizer.vocab_size != manifest["vocab_size"]:
        raise UserError(
            f"the rebuilt tokenizer has {tokenizer.vocab_size:,} ids but the files were made "
            f"with {manifest['vocab_size']:,}; its files changed since (see the manifest)"
        )
    return tokenizer
