"""Writing the output folder so that a run either completes or changes nothing.

Every file is written under a temporary name in out_dir (same filesystem, so a rename is
atomic) and flushed to disk. The commit then writes a journal of its renames, removes the
old manifest (a folder without one is not finished), renames the data into place and
writes the manifest last, with every file's size and sha256: a folder with a manifest is
a finished one, all of whose files belong to that run. A commit cut short (a SIGKILL
between two renames) is finished from its journal by the next run in that folder.

One run at a time per out_dir: a lock file held for the whole run (flock), so a second
run stops with one line instead of mixing its files with the first one's. Under the lock,
temporary files of dead runs are removed. A failed or interrupted run removes its own
temporary files and leaves the previous outputs as they were.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import itertools
import json
import math
import os
import pickle
import queue
import re
import secrets
import shutil
import signal
import socket
import stat
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple, Optional

import numpy as np

from corpusprep._paths import LINK_ERRNOS, open_regular_fd, read_regular
from corpusprep.errors import UserError, is_interrupt

DTYPES = {"uint16": np.uint16, "uint32": np.uint32}
WORK = ".corpusprep-work"  # resumable shard parts, inside out_dir
LOCK = ".corpusprep.lock"  # held (flock) for the whole run
SWEEP_LOCK = ".corpusprep-sweep.lock"  # in hydra.sweep.dir, held for the whole sweep
JOURNAL = ".corpusprep-commit.json"  # the renames of a commit under way
MANIFEST = "manifest.json"
MAX_JOURNAL_BYTES = 256 << 20  # a commit's renames: about 100 bytes a file
TEMP = re.compile(r"\.[^/]+\.\d+-[0-9a-f]{6}\.tmp")  # what temp() names files
# out of space, out of quota, read-only: trying again cannot help
# a disk that cannot take what a run writes: never tried again (EFBIG: a file over the file
# system's largest, or the limit on file sizes, ulimit -f)
NO_SPACE = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG}


def hidden_name(name: str, tag: str) -> str:
    """The temporary name in out_dir of a file that becomes (or is a scratch file named)
    `name`: hidden, and holding nothing of `name`. build-nanogpt's loader lists the folder
    with os.listdir, hidden files too, and takes every name containing "train" or "val":
    the `.web_train_000001.npy.<tag>.tmp` of a SIGKILLed run was read as a shard (or failed
    np.load) until the next run in the folder removed it."""
    return f".cp-{hashlib.sha256(name.encode()).hexdigest()[:16]}.{tag}.tmp"


def choose_dtype(requested: str, max_id: int, wide_from: Optional[int] = None) -> str:
    """`auto`: the smallest dtype that holds every id, or uint32 from `wide_from` ids on
    (the format's own writer goes 32-bit there: Exporter.wide_from); an explicit one must
    hold them too."""
    if requested == "auto":
        wide = wide_from is not None and max_id + 1 >= wide_from
        return "uint16" if max_id <= np.iinfo(np.uint16).max and not wide else "uint32"
    if max_id > np.iinfo(DTYPES[requested]).max:
        raise UserError(
            f"dtype={requested}: too small for this vocabulary (largest id {max_id:,}); "
            "use dtype=uint32 or dtype=auto"
        )
    return requested


def room_for(code: Optional[int]) -> str:
    """What lets a write that was refused (errno `code`) go through: a read-only disk or
    folder, a folder where the file goes (a stranger's sweep folder), or a full disk."""
    if code in (errno.EROFS, errno.EACCES, errno.EPERM):
        return "make it writable"
    if code in (errno.EISDIR, errno.ENOTDIR):
        return "move what is in its way"
    return "free some space"


def no_space(e: OSError, folder: Path | str, needed: Optional[int] = None,
             committing: bool = False) -> UserError:  # fmt: skip
    """The one line for a full (or read-only) disk: the folder and, if known, the space.
    `committing`: it stopped a commit halfway (its journal written), which the next run
    in the folder finishes: the previous outputs are gone already."""
    what = "is read-only" if e.errno == errno.EROFS else "has no space left"
    if e.errno == errno.EDQUOT:
        what = "is over its disk quota"
    need = f" (this run needs about {_mb(needed)} MB there)" if needed else ""
    room = room_for(e.errno)
    if e.errno == errno.EFBIG:
        return UserError(
            f"{folder}: a file would be larger than the largest this process may write (ulimit "
            "-f, or the file system's own limit); raise it (ulimit -f unlimited) or choose "
            "another out_dir" + ("; the next run in this folder finishes the commit this one "
                                 "began" if committing else _untouched(folder))
        )  # fmt: skip
    if committing:
        return UserError(
            f"{folder}: the disk {what} in the middle of a commit; {room} and run again: "
            "the next run in this folder finishes that commit"
        )
    return UserError(f"{folder}: the disk {what}{need}; {room} or choose another out_dir"
                     f"{_untouched(folder)}")  # fmt: skip


def _untouched(folder: Path | str) -> str:
    """Said of a folder that holds a finished run's outputs (in one with none yet, there is
    nothing to say)."""
    return " (the previous outputs are untouched)" if (Path(folder) / MANIFEST).exists() else ""


@contextlib.contextmanager
def disk_errors(folder: Path | str, needed: Optional[int] = None,
                committing: bool = False) -> Iterator[None]:  # fmt: skip
    """Turn a full or read-only disk into the one-line error (never retried)."""
    try:
        yield
    except OSError as e:
        if e.errno in NO_SPACE:
            raise no_space(e, folder, needed, committing) from None
        raise


def save_array(array: np.ndarray, dst: Path | str | BinaryIO) -> None:
    """An array's bytes into a file (a path, or an open binary file at its position), as
    ndarray.tofile writes them; but a full disk raises ENOSPC, where tofile raises a bare
    OSError ("1260 requested and 512 written") that no one can tell from a bug."""
    data = memoryview(np.ascontiguousarray(array)).cast("B")
    if isinstance(dst, (str, Path)):
        with open(dst, "wb") as f:
            f.write(data)
    else:
        dst.write(data)


def check_free_space(folder: Path, needed: int, total: Optional[int] = None) -> None:
    """Fail before writing when the disk visibly cannot hold `needed` more bytes (of the
    `total` the run writes at its peak, what a user must make room for)."""
    try:
        st = os.statvfs(folder)
    except (OSError, AttributeError):
        return
    free = st.f_bavail * st.f_frsize
    if needed > free:
        in_all = f" ({_mb(total)} MB in all)" if total and total > needed else ""
        raise UserError(
            f"{folder}: the disk has {_mb(free, up=False)} MB free but this run needs about "
            f"{_mb(needed)} MB more{in_all}; free some space or choose another out_dir"
            f"{_untouched(folder)}"
        )


def _mb(nbytes: int, up: bool = True) -> str:
    """Megabytes to a tenth: a space needed rounded up (never said too little), one free
    rounded down."""
    tenths = math.ceil(nbytes / 1e5) if up else math.floor(nbytes / 1e5)
    return f"{max(tenths / 10, 0.1):,.1f}"


# the out_dirs this process committed, in order (a sweep: several): an interrupt is said
# as after the commit or before it by whether its run added one
COMMITS: list[str] = []
# the out_dirs where this process finished the commit an earlier run began (and was killed
# or failed in): what they hold then is that run's outputs, whole
FINISHED: list[str] = []


# json.dumps(ensure_ascii=False) builds an encoder a call: a third of the time of a small
# object (the manifest's line for each of 50,000 input files: 0.17 -> 0.12 s)
_JSON = json.JSONEncoder(ensure_ascii=False)


def manifest_text(value: Any, level: int = 0) -> str:
    """`value` as json.dumps(indent=2, ensure_ascii=False) writes it, but a list of objects
    (the input files: there may be 200,000) has an object a line, each written by json's C
    encoder (indent=2 is pure Python: a second for 50,000 files)."""
    pad = "  " * (level + 1)
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        lines = [pad + _JSON.encode(v) for v in value]
    elif isinstance(value, dict) and value:
        keys = (k if isinstance(k, str) else json.dumps(k) for k in value)  # as json says 1, None
        lines = [f"{pad}{_JSON.encode(k)}: {manifest_text(v, level + 1)}"
                 for k, v in zip(keys, value.values())]  # fmt: skip
    elif isinstance(value, list) and value:
        lines = [pad + manifest_text(v, level + 1) for v in value]
    else:
        return _JSON.encode(value)
    opening, closing = "[]" if isinstance(value, list) else "{}"
    return opening + "\n" + ",\n".join(lines) + "\n" + "  " * level + closing


class OutputWriter:
    """Use as `with OutputWriter(out_dir) as out: ...; out.commit(manifest)`."""

    def __init__(self, out_dir: str | Path) -> None:
        self.label = str(out_dir)  # as the user wrote it, for messages
        self.out_dir = Path(out_dir).absolute()  # workers may run in another directory
        self._tag = f"{os.getpid()}-{secrets.token_hex(3)}"
        self._temps: dict[str, Path] = {}  # final name -> temporary path, in commit order
        self._scratch: list[Path] = []  # dropped temporary files: deleted on commit or abort
        self._obsolete: list[str] = []  # files of the previous run this one does not make
        self._digests: dict[Path, GrowingDigest] = {}  # sha256 taken as it was written
        self._work: Optional[Path] = None
        self._made_dirs: list[Path] = []
        self._lock: Optional[int] = None
        self._folder: Optional[tuple[int, int]] = None  # out_dir's identity when locked
        self.committed = False
        # a driver thread may still write into the work folder (the input's record) when
        # a Ctrl-C aborts: it writes only under this lock, and not once the abort began
        self._work_guard = threading.Lock()
        self._aborting = False
        self._journaled = False  # the commit began writing its journal
        self._held: Optional[contextlib.AbstractContextManager] = None  # signals_held()
        self._refusal: Optional[UserError] = None  # why out_dir may only be read
        self.needed: Optional[int] = None  # about how many bytes the run writes, once known

    def __enter__(self) -> OutputWriter:
        try:
            _make_folder(self.out_dir, self._made_dirs)
        except NotADirectoryError as e:
            where = f"out_dir={self.label}: {e.filename}"
            raise UserError(f"{where} is a file, not a folder; choose another out_dir") from None
        except OSError as e:
            raise UserError(
                f"out_dir={self.label}: cannot create it ({e.strerror}); choose a writable out_dir"
            ) from None
        if not os.access(self.out_dir, os.W_OK | os.X_OK):
            not_writable = f"out_dir={self.label}: not writable; choose another out_dir"
            return self._only_to_read(UserError(not_writable))
        try:
            # Ctrl-C waits: the lock file is made and held as one step, and a commit a
            # killed run began is finished whole, never half (then its journal is gone)
            with signals_held():
                try:
                    self._lock = _acquire_lock(self.out_dir, self.label, self._made_dirs)
                    self._folder = _folder_identity(self.out_dir)
                except OSError as e:  # no inode left for the lock file (or no quota)
                    if e.errno not in NO_SPACE:
                        raise
                    stopped = (self.out_dir / JOURNAL).exists()  # a commit a full disk cut
                    return self._only_to_read(no_space(e, self.label, committing=stopped))
                with disk_errors(self.label, committing=True):
                    if recover(self.out_dir):
                        FINISHED.append(self.label)
            self._remove_dead_temps()
        except BaseException:
            self._release_lock()
            self._remove_made_dirs()
            raise
        return self

    def _only_to_read(self, refusal: UserError) -> OutputWriter:
        """A folder this run cannot write to (a read-only or full disk, another user's):
        a finished one may still be found up to date, which writes nothing and takes no
        lock; anything more is refused (check_writable) with `refusal`."""
        self._remove_made_dirs()
        try:
            finished = (self.out_dir / MANIFEST).is_file()
        except OSError:  # not even readable (another user's private folder)
            finished = False
        if not finished:
            raise refusal
        self._refusal = refusal
        return self

    @property
    def read_only(self) -> bool:
        return self._refusal is not None

    def check_writable(self) -> None:
        """Before a run writes anything: out_dir must be writable (it was not, which only
        a run that finds it up to date can live with)."""
        if self._refusal is not None:
            raise self._refusal

    def __exit__(self, exc_type: Any, exc: Optional[BaseException], *tb: object) -> None:
        """Tidy up (the work folder, temporary files, the lock) with Ctrl-C waiting until
        it is done, then let it act (COMMITS says whether it came after the commit)."""
        if self.read_only:  # nothing was written, nor locked
            return
        held, self._held = self._held, None  # held since the commit's journal, if it began
        if held is None:
            held = signals_held()
            held.__enter__()
        try:
            self._tidy(exc)
        finally:
            held.__exit__(None, None, None)  # a signal that waited acts now

    def _tidy(self, exc: Optional[BaseException]) -> None:
        # out_dir moved away mid-run: a folder by its name now is another run's, whose
        # work folder (the same key, for the same input) and lock are not this run's
        moved = self.moved()
        try:
            if self.committed:
                for path in self._scratch:
                    _remove(path)
                self.remove_stale_work()
            else:
                # finished shards stay for a re-run after a failure the user did not cause
                # (a dead node, retries used up); a user error or Ctrl-C tidies them away
                keep = exc is not None and not (isinstance(exc, UserError) or is_interrupt(exc))
                self.abort(keep_work=keep or moved)
        finally:
            self._release_lock()
            if not moved:
                self._remove_made_dirs()
            self._made_dirs = []

    def moved(self) -> bool:
        """Whether out_dir is no longer the folder this run locked (moved or removed)."""
        return self._folder is not None and _folder_identity(self.out_dir) != self._folder

    def temp(self, name: str, nbytes: int = 0) -> Path:
        """A new temporary file that becomes `name` on commit, with `nbytes` reserved on
        disk (so a full disk fails here, before any work, rather than halfway). `name` may
        be in one subfolder ("doc_index/train.docs.bin"): the temporary file stays in out_dir."""
        self.check_writable()
        if "/" in name:
            sub = self.out_dir / Path(name).parent
            if sub.is_symlink() or (sub.exists() and not sub.is_dir()):
                raise UserError(
                    f"{sub}: not a folder (a file or a symlink) where this run puts "
                    f"{name}; remove it, or choose another out_dir"
                )
        path = self.out_dir / hidden_name(name, self._tag)
        self._temps[name] = path
        with disk_errors(self.out_dir, self.needed or nbytes), open(path, "wb") as f:
            if nbytes:
                _reserve(f.fileno(), nbytes)
        return path

    def path_of(self, name: str) -> Optional[Path]:
        """The temporary path of a file that will become `name`, if there is one."""
        return self._temps.get(name)

    def work(self, key: str) -> Path:
        """A folder for shard parts and completion markers that outlives a failed run, so
        that a re-run with the same input, settings and plan (`key`) redoes only missing
        shards. It lives in out_dir (shared by every worker, on a shared file system)."""
        self._work = self.out_dir / WORK / key
        with disk_errors(self.out_dir, self.needed):
            for folder in (self.out_dir / WORK, self._work):  # not a link leading elsewhere
                if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
                    remove_planted(folder, "its work folder")
                folder.mkdir(exist_ok=True)
            # a resume takes only regular files and folders (an executor's logs: slurm/): a
            # link planted under a key that can be worked out (the input's stat, the
            # settings) would have parts written through it, or read back as ids
            for entry in os.scandir(self._work):
                if not (
                    entry.is_file(follow_symlinks=False) or entry.is_dir(follow_symlinks=False)
                ):
                    _remove(Path(entry.path))  # the link, never what it leads to
        return self._work

    def write_work_file(self, name: str, data: bytes) -> None:
        """A file of the work folder, written whole (a temporary name, then renamed), unless
        the run is aborting: a file put back while abort() removes the folder would keep it."""
        with self._work_guard:
            if self._aborting or self._work is None:
                return
            tmp = self._work / f".{name}.{os.getpid()}.tmp"
            tmp.write_bytes(data)
            os.replace(tmp, self._work / name)

    def obsolete(self, name: str) -> None:
        """A file of an earlier run (another format, more shards) to delete on commit: a
        reader globbing the folder must not find stale files next to the new ones."""
        if _plain_name(name) and name != MANIFEST:
            self._obsolete.append(name)  # unless this run makes it after all (see commit)

    def removes(self, name: str) -> bool:
        """Whether the commit removes `name` (an earlier run's file this one does not make)."""
        return name in self._obsolete

    def scratch(self, name: str) -> Path:
        """A temporary file that is never committed (deleted on commit or abort)."""
        path = self.out_dir / hidden_name(name, self._tag)
        self._scratch.append(path)
        return path

    def drop(self, name: str) -> None:
        """Keep a temporary file out of the final folder (it becomes scratch)."""
        path = self._temps.pop(name)
        self._scratch.append(path)

    def write_bytes(self, name: str, data: bytes) -> None:
        with disk_errors(self.out_dir, self.needed), open(self.temp(name), "wb") as f:
            f.write(data)

    def write_pickle(self, name: str, obj: Any) -> None:
        with disk_errors(self.out_dir, self.needed), open(self.temp(name), "wb") as f:
            pickle.dump(obj, f)

    def commit(
        self, manifest: dict[str, Any], sealed: Optional[Callable[[dict], dict]] = None
    ) -> dict[str, Any]:
        """Seal every file (fsync, size, sha256), then put them all in place: the old
        manifest goes first, the new one (listing every file) last. `sealed`: what the
        manifest becomes once the files are sealed (the run's clock stopped then). Returns
        the manifest."""
        with disk_errors(self.out_dir, self.needed):
            files, checksums = self._seal()
            manifest = {**(sealed(manifest) if sealed else manifest), "files": files,
                        "checksums": checksums}  # fmt: skip
            final = self.out_dir / f".{MANIFEST}.{self._tag}.tmp"
            self._temps[MANIFEST] = final  # before it exists: an abort removes it from then on
            with open(final, "w", encoding="utf-8") as f:
                f.write(manifest_text(manifest) + "\n")
                f.flush()
                os.fsync(f.fileno())
            renames = [[path.name, name] for name, path in self._temps.items()]
            obsolete = [n for n in self._obsolete if n not in self._temps]
            journal = {"renames": renames, "obsolete": obsolete}
            for _, name in renames:  # checked before the folder changes: it stays as it was
                if not _room_for(self.out_dir, name):
                    raise UserError(
                        f"{self.out_dir / name} is a folder where this run puts a file; "
                        "remove it, or choose another out_dir"
                    )
        if self.moved():  # its files would go into another folder, maybe another run's
            raise UserError(f"out_dir={self.label}: the folder was moved or removed during "
                            "the run; run again")  # fmt: skip
        # From the journal on, Ctrl-C waits until the writer is closed (the renames, then
        # its tidying): the folder must not end up half old, half new, nor the end of the
        # run be said wrongly (a SIGKILL still can cut it: the journal lets the next run
        # in the folder finish the commit)
        self._held = signals_held()
        self._held.__enter__()
        self._journaled = True  # from here the files a journal names are its own
        with disk_errors(self.out_dir, self.needed):
            write_atomic(self.out_dir / JOURNAL, json.dumps(journal).encode(), self._tag)
        with disk_errors(self.out_dir, committing=True):  # a folder, a rename: an inode
            _apply(self.out_dir, journal)
        self.committed = True
        COMMITS.append(self.label)
        return manifest  # the scratch files and the work folder go as the block is left

    def remove_stale_work(self) -> None:
        """This run's work folder and any a dead run left (the lock: no one else is here)."""
        if self.read_only:
            return
        work = self.out_dir / WORK
        if work.is_symlink():  # planted: the link goes, not what it leads to
            _remove(work)
        shutil.rmtree(work, ignore_errors=True)

    def abort(self, keep_work: bool = False) -> None:
        with self._work_guard:
            self._aborting = True
        for digest in self._digests.values():
            digest.stop()
        # a commit whose journal is written is finished by the next run in this folder
        # (recover), from the files it names: they stay
        journaled = self._journal_files() if self._journaled else set()
        for path in [*self._temps.values(), *self._scratch]:
            if path not in journaled:
                _remove(path)
        self._temps.clear()
        if self._work is not None and not keep_work:
            shutil.rmtree(self._work, ignore_errors=True)
            with contextlib.suppress(OSError):
                (self.out_dir / WORK).rmdir()

    def _journal_files(self) -> set[Path]:
        """The files a commit's journal on disk names (none if it was never written)."""
        try:
            journal = json.loads((self.out_dir / JOURNAL).read_bytes())
            return {self.out_dir / str(temp) for temp, _ in journal["renames"]}
        except (OSError, ValueError, KeyError, TypeError):
            return set()

    def hashing(self, digest: GrowingDigest) -> None:
        """A temporary file's sha256 being taken as it was written: the seal waits for it
        rather than reading the file again."""
        self._digests[digest.path] = digest

    def _sha256(self, path: Path) -> str:
        known = self._digests.get(path)
        digest = known.result() if known is not None else None
        return digest if digest is not None else file_sha256(path)

    def _seal(self) -> tuple[dict[str, int], dict[str, str]]:
        """fsync every temporary file and take its size and sha256 (threads: hashlib and
        fsync release the GIL, so the files are read in parallel)."""
        names = list(self._temps)
        paths = [self._temps[n] for n in names]
        # a file's fsync (the disk) and its sha256 (a core, from the page cache) at once
        with ThreadPoolExecutor(min(8, max(2 * len(names), 1))) as pool:
            synced = [pool.submit(_fsync_file, path) for path in paths]
            digests = list(pool.map(self._sha256, paths))
            for done in synced:
                done.result()
        return ({n: p.stat().st_size for n, p in zip(names, paths)},
                dict(zip(names, digests)))  # fmt: skip

    def _remove_dead_temps(self) -> None:
        """Temporary files of runs that died (we hold the lock: no live run owns them)."""
        for path in self.out_dir.iterdir():
            if TEMP.fullmatch(path.name) and path.is_file():
                _remove(path)

    def _release_lock(self) -> None:
        if self._lock is not None:
            release_lock(self.out_dir / LOCK, self._lock)
            self._lock = None

    def _remove_made_dirs(self) -> None:
        for d in self._made_dirs:  # deepest first; only folders this run created, if empty
            try:
                d.rmdir()
            except OSError:
                break
        self._made_dirs = []


def recover(folder: Path) -> bool:
    """Finish a commit that a killed run left half done (its journal is still there);
    True if there was one."""
    path = folder / JOURNAL
    try:  # a regular file of a plausible size: a FIFO planted there would block, held signals
        journal = json.loads(read_regular(path, MAX_JOURNAL_BYTES))
        renames = [(str(a), str(b)) for a, b in journal["renames"]]
        obsolete = [str(n) for n in journal["obsolete"]]
    except FileNotFoundError:
        return False
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        _remove(path)  # not ours, or unreadable: nothing to finish
        return False
    # only our own temporary files, renamed to plain names in this folder, where nothing
    # stands in the way (a folder cannot be replaced by a file): a journal that could not
    # be finished would jam the folder for every later run
    if all(
        TEMP.fullmatch(a) and _plain_name(b) and _room_for(folder, b) for a, b in renames
    ) and all(_plain_name(n) for n in obsolete):
        _apply(folder, {"renames": renames, "obsolete": obsolete})
        return True
    path.unlink(missing_ok=True)
    return False


def _room_for(folder: Path, name: str) -> bool:
    """Whether a file can be renamed to `name` in folder: no folder (a real one) is there,
    and its subfolder, if any, is a folder or a link (replaced) or not there yet."""
    path = folder / name
    if path.is_dir() and not path.is_symlink():
        return False
    parent = path.parent
    return parent == folder or parent.is_symlink() or parent.is_dir() or not parent.exists()


def _apply(folder: Path, journal: dict[str, Any]) -> None:
    """Carry out a commit's journal; safe to repeat from any point it was cut at."""
    renames = journal["renames"]
    manifest_temp = next((folder / a for a, b in renames if b == MANIFEST), None)
    if manifest_temp is not None and manifest_temp.exists():
        (folder / MANIFEST).unlink(missing_ok=True)  # from now on the folder is unfinished
        _fsync_dir(folder)
    subfolders = {folder / Path(name).parent for _, name in renames} - {folder}
    for sub in subfolders:  # a real folder: never a symlink that would lead elsewhere
        if sub.is_symlink():
            sub.unlink()
        sub.mkdir(exist_ok=True)
    for temp, name in renames:
        if name != MANIFEST and (folder / temp).exists():
            os.replace(folder / temp, folder / name)
    for name in journal["obsolete"]:
        if "/" in name and (folder / name).parent.is_symlink():
            continue  # a file elsewhere, not of this folder (which may itself be a link)
        if (folder / name).is_dir() and not (folder / name).is_symlink():
            continue  # a folder is not a file an earlier run made: the user's
        (folder / name).unlink(missing_ok=True)
        if "/" in name:  # a subfolder the new run no longer uses goes too, once empty
            with contextlib.suppress(OSError):
                (folder / name).parent.rmdir()
    for sub in subfolders:
        _fsync_dir(sub)
    _fsync_dir(folder)
    if manifest_temp is not None and manifest_temp.exists():
        os.replace(manifest_temp, folder / MANIFEST)
        _fsync_dir(folder)
    (folder / JOURNAL).unlink(missing_ok=True)


def lock_sweep(folder: Path) -> Optional[int]:
    """A sweep's hold on its hydra.sweep.dir (made if missing) for as long as it runs: two
    sweeps given one folder wrote their jobs' records over each other's, and a sweep whose
    jobs failed on the other's locks read the other's records and exited 0."""
    folder.mkdir(parents=True, exist_ok=True)

    def busy(holder: str) -> str:
        return (f"hydra.sweep.dir={folder}: another corpusprep sweep ({holder}) is "
                "writing there; wait for it to finish, or give this sweep another "
                "hydra.sweep.dir")  # fmt: skip

    return _acquire_lock(folder, str(folder), name=SWEEP_LOCK, busy=busy)


def release_lock(path: Path, fd: int) -> None:
    """Let go of a lock _acquire_lock took, its file removed first (before the close: no
    one can take a dead inode), if it is still ours: another run's, in a folder made again
    by that name after ours was moved away, still keeps a third run out."""
    with contextlib.suppress(OSError):
        if os.lstat(path).st_ino == os.fstat(fd).st_ino:
            os.unlink(path)
    os.close(fd)


def _acquire_lock(folder: Path, label: str, made: Optional[list[Path]] = None, name: str = LOCK,
                  busy: Optional[Callable[[str], str]] = None) -> Optional[int]:  # fmt: skip
    """An exclusive flock on folder/.corpusprep.lock (or `name`), holding our pid; None where
    there is no flock (not POSIX). A second run gets one line naming the holder (`busy`'s,
    given the holder, if any). Folders made again (another run removed them) are added to
    `made`, deepest first."""
    try:
        import fcntl
    except ImportError:
        return None
    path = folder / name
    for attempt in itertools.count():
        try:
            fd = _open_lock(path)
        except FileNotFoundError:  # another run that made the folder failed and removed it,
            if attempt > 2:  # empty, as this one came in: it is made again
                raise
            _make_folder(folder, made if made is not None else [])
            continue
        except _NotALockFile:  # a symlink, FIFO or folder planted in its place: not ours
            if attempt > 2:
                raise
            remove_planted(path, "corpusprep's lock file")
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = _read_holder(fd)
            os.close(fd)
            if e.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            raise UserError(
                busy(holder) if busy else
                f"out_dir={label}: another corpusprep run ({holder}) is writing there; "
                "wait for it to finish, or choose another out_dir"
            ) from None  # fmt: skip
        try:  # the holder may have removed the file as we opened it: lock the one on disk
            same = os.fstat(fd).st_ino == os.lstat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    # who holds it, for another run's message; a full disk leaves it unsaid ("unknown pid")
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode())
    return fd


def _folder_identity(path: Path) -> Optional[tuple[int, int]]:
    try:
        st = os.stat(path)
    except OSError:  # gone
        return None
    return st.st_dev, st.st_ino


def _make_folder(folder: Path, made: list[Path]) -> None:
    """mkdir -p, noting in `made` the folders it created (deepest first), which are the
    only ones the run removes again. A file in the way: NotADirectoryError naming it."""
    missing, d = [], folder
    while not d.exists():
        missing.append(d)
        d = d.parent
    if not d.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "not a folder", str(d))
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:  # data/ made, data/<a name too long> not: the run ends, data/ must go
        for path in missing:  # deepest first; one another run filled stays
            with contextlib.suppress(OSError):
                path.rmdir()
        raise
    made[:] = sorted(set(made) | set(missing), key=lambda p: -len(p.parts))


class _NotALockFile(Exception):
    """What is at the lock's name is not a regular file (a symlink, a FIFO, a folder)."""


def remove_planted(path: Path, what: str) -> None:
    """A symlink or special file a stranger's folder holds where this run keeps one of its
    own: it goes (a link, never what it leads to). A folder there is the user's to remove."""
    if path.is_dir() and not path.is_symlink():  # (macOS's unlink says EPERM, not EISDIR)
        raise UserError(f"{path} is a folder where corpusprep keeps {what}; remove it")
    path.unlink(missing_ok=True)


def _open_lock(path: Path) -> int:
    """The lock file, made if missing; read-only if it is another user's (flock needs no
    write access, so their live run still keeps this one out)."""
    # never through a symlink (it would truncate the file it leads to), and a FIFO planted
    # there must not block the open
    flags = os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        try:
            fd = os.open(path, os.O_RDWR | flags, 0o644)
        except PermissionError:
            fd = os.open(path, os.O_RDONLY | flags)
    except IsADirectoryError:
        raise _NotALockFile() from None
    except OSError as e:
        if e.errno in LINK_ERRNOS:  # a symlink
            raise _NotALockFile() from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _NotALockFile()
    return fd


def _read_holder(fd: int) -> str:
    try:
        return os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "unknown pid"
    except OSError:
        return "unknown pid"


def _identity(path: Path) -> tuple:
    return file_identity(path.stat())


class Identity(NamedTuple):
    """What any change to a file changes: a write sets the ctime, which nothing can put
    back (utime sets only atime and mtime); its inode if it was replaced. Not the device:
    a network file system's can differ from one mount to the next. A third of an
    os.stat_result's memory (a run keeps one for each of its 200,000 small files)."""

    ino: int
    size: int  # (second: GrowingDigest.result reads it there)
    mtime_ns: int
    ctime_ns: int


def file_identity(stat: os.stat_result) -> Identity:
    """A file's Identity, from its stat."""
    return Identity(stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def changed_files(
    folder: Path,
    manifest: dict[str, Any],
    threads: Optional[int] = None,
    stop: Optional[threading.Event] = None,
) -> Optional[list[str]]:
    """The files of a finished folder whose size or sha256 is not what its manifest says
    ([] when all agree); None when the manifest lists no checksums for all of them. The
    files are hashed side by side, `threads` at most (default: a thread per core); a
    caller's `stop`, once set, ends the reading (its verdict then means nothing)."""
    files, sums = manifest.get("files"), manifest.get("checksums")
    if not isinstance(files, dict) or not isinstance(sums, dict) or set(files) != set(sums):
        return None
    largest_first = sorted(
        files, key=lambda name: -files[name] if isinstance(files[name], int) else 0
    )
    sized = {name: sums[name] for name in largest_first if _has_size(folder, name, files[name])}
    same = _sha256_matches(folder, sized, threads or os.cpu_count() or 1, stop)
    return [name for name in files if name not in same]


def _has_size(folder: Path, name: str, size: Any) -> bool:
    """A regular file (or a link to one; not a FIFO or device: reading one may never end)
    of that size."""
    try:
        found = (folder / name).stat() if _plain_name(name) else None
    except OSError:
        return False
    return found is not None and stat.S_ISREG(found.st_mode) and found.st_size == size


def _sha256_matches(folder: Path, sums: dict[str, Any], threads: int,
                    stop: Optional[threading.Event] = None) -> set[str]:  # fmt: skip
    """The files among `sums` whose sha256 is the one given, hashed in their order (the
    largest first: they decide how long it takes) by daemon threads, which a Ctrl-C waits
    for none of (hashlib lets go of the GIL)."""
    same: set[str] = set()
    stop = stop or threading.Event()

    def check(name: str) -> None:
        with contextlib.suppress(OSError):  # unreadable, or gone since: not the same
            if file_sha256(folder / name, stop) == sums[name]:
                same.add(name)

    try:
        for thread in in_threads(sums, check, min(threads, len(sums)), stop):
            thread.join()
    finally:  # done, or interrupted: none goes on reading
        stop.set()
    return same


def in_threads(items: Iterable[Any], work: Callable[[Any], None], threads: int,
               stop: threading.Event) -> list[threading.Thread]:  # fmt: skip
    """work(item) for each of `items`, taken in their order by up to `threads` daemon
    threads (which neither a Ctrl-C nor an error waits for) until every one is taken or
    `stop` is set. Returns the threads started: fewer where no more can be had."""
    todo, taking = iter(items), threading.Lock()

    def take_the_next_ones() -> None:
        while not stop.is_set():
            with taking:
                item = next(todo, _TAKEN)
            if item is _TAKEN:
                return
            work(item)

    started: list[threading.Thread] = []
    for _ in range(threads):
        thread = threading.Thread(target=take_the_next_ones, daemon=True)
        try:
            thread.start()
        except RuntimeError:  # no more threads to be had: those running do the work
            if not started:
                raise
            break
        started.append(thread)
    return started


_TAKEN = object()  # in_threads: no item is left


_LEFT = object()  # GrowingDigest: the writer has left the file


class GrowingDigest:
    """The sha256 of a file taken in a thread while it is written front to back: `grew(end)`
    says its first `end` bytes are final, and the thread hashes up to there (from the page
    cache; hashlib releases the GIL) while the writer goes on, and goes on hashing while the
    run does its last steps; then sends the file to disk (fsync). The seal takes the digest
    instead of reading the file again, if the whole file was hashed and it is unchanged
    since the writer left it (and its fsync then finds nothing left to write). Used as a
    context manager: leaving it normally hands the digest to the seal; an error stops it."""

    STEP = 1 << 22  # bytes read at a time

    def __init__(self, out: OutputWriter, path: Path) -> None:
        self.out, self.path = out, path
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._hash, self._done, self._failed = hashlib.sha256(), 0, False
        self._left: Optional[tuple] = None  # the file's identity when the writer left it

    def __enter__(self) -> GrowingDigest:
        return self

    def __exit__(self, kind: Any, *exc: Any) -> None:
        if kind is not None:
            self.stop()
            return
        self._left = _identity(self.path)
        self.out.hashing(self)  # the seal waits for it
        self._queue.put(_LEFT)  # hash the rest, send it to disk, end

    def grew(self, end: int) -> None:
        if self._thread.ident is None:  # started with the first bytes, not before a fork
            self._thread.start()
        self._queue.put(end)

    def result(self) -> Optional[str]:
        """The file's sha256, or None if it was not hashed whole or changed since."""
        self.stop()
        try:
            same = self._left is not None and self._left == _identity(self.path)
        except OSError:
            return None
        whole = same and not self._failed and self._done == self._left[1]
        return self._hash.hexdigest() if whole else None

    def stop(self) -> None:
        if self._thread.ident is not None:
            self._queue.put(None)
            self._thread.join()

    def _run(self) -> None:
        try:  # unbuffered: a buffer would read ahead into what is not written yet
            with open(self.path, "rb", buffering=0) as f:
                buffer = memoryview(bytearray(self.STEP))  # one, as _digest_of's
                while (end := self._queue.get()) is not None:
                    if end is _LEFT:  # written whole: its fsync now, while the run goes on,
                        os.fsync(f.fileno())  # not in the seal's
                        return
                    while self._done < end:
                        size = f.readinto(buffer[: min(self.STEP, end - self._done)])
                        if not size:  # shorter than the writer said: the seal reads it
                            raise OSError(f"{self.path}: ended at {self._done} bytes")
                        self._hash.update(buffer[:size])
                        self._done += size
        except OSError:
            self._failed = True


def file_sha256(path: Path, stop: Optional[threading.Event] = None, keep: bool = False) -> str:
    """The file's sha256; a thread given `stop` gives up (OSError) once it is set. One kept
    for the file as it is now (inode, size, times) is not read again. `keep`: keep this one
    (the file is checked against a pin by the caller, and its identity did not change while
    it was read)."""
    with os.fdopen(open_regular_fd(path), "rb") as f:  # a FIFO swapped in never blocks
        st = os.fstat(f.fileno())
        if (known := _KEPT.get(_kept_key(st))) is not None:
            return known
        digest = _digest_of(f, hashlib.sha256(), stop, path)
        if keep and file_identity(os.fstat(f.fileno())) == file_identity(st):
            _KEPT[_kept_key(st)] = digest
        return digest


def keep_sha256(path: Path, digest: str) -> None:
    """Keep a checked input's sha256 for this process (source=hf checks each download's,
    then the run keys its input by it). Only a digest checked against what the file must
    hold, of a file no one writes: an output may be rewritten within a timestamp's tick."""
    with contextlib.suppress(OSError):
        _KEPT[_kept_key(os.stat(path))] = digest


def _kept_key(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, *file_identity(st))


def git_blob_sha1(path: Path) -> str:
    """The id git gives the file's bytes (sha1 of "blob SIZE\\0" and them): a Hub file kept in
    git, not LFS, is named by it."""
    with os.fdopen(open_regular_fd(path), "rb") as f:
        header = b"blob %d\0" % os.fstat(f.fileno()).st_size
        return _digest_of(f, hashlib.sha1(header), None, path)


def _digest_of(f: BinaryIO, digest: Any, stop: Optional[threading.Event], path: Path) -> str:
    chunk = memoryview(bytearray(1 << 22))  # one buffer: a block this big is mapped afresh
    while size := f.readinto(chunk):  # each time it is allocated (memory.lean_heap)
        if stop is not None and stop.is_set():
            raise InterruptedError(f"{path}: hashing stopped")
        digest.update(chunk[:size])
    return digest.hexdigest()


_KEPT: dict[tuple[int, ...], str] = {}  # file_sha256's kept digests, by the file's identity


COPY_BYTES = 1 << 24  # 16 MiB per step of copy_range: memory stays flat
_kernel_copies = hasattr(os, "copy_file_range")  # turned off at the first refusal


def _kernel_copy(src: BinaryIO, dst: BinaryIO, offset: int, nbytes: int,
                 progress: Optional[Callable[[int], None]]) -> bool:  # fmt: skip
    """copy_range through os.copy_file_range; False (nothing copied) where it is refused."""
    global _kernel_copies
    if not _kernel_copies or nbytes <= 0:
        return nbytes <= 0
    dst.flush()
    done = 0
    try:
        while done < nbytes:
            step = os.copy_file_range(src.fileno(), dst.fileno(), min(COPY_BYTES, nbytes - done),
                                      offset + done)  # fmt: skip
            if step == 0:
                raise RuntimeError(f"{src.name}: ended {nbytes - done} bytes early")
            done += step
            if progress is not None:
                progress(step)
    except OSError:
        if done:
            raise  # part of it copied: a real error (a full disk), not a refusal
        _kernel_copies = False  # another file system, an old kernel: read and write
        return False
    return True


def copy_range(src: BinaryIO, dst: BinaryIO, offset: int, nbytes: int,
               progress: Optional[Callable[[int], None]] = None) -> None:  # fmt: skip
    """Copy nbytes of src from offset to dst's current position, in bounded steps
    (`progress`: told the bytes of every step, for a bar). Inside the kernel where it can
    (copy_file_range: no trip through this process's memory, a reflink on file systems
    that share blocks), else read and write."""
    if _kernel_copy(src, dst, offset, nbytes, progress):
        return
    src.seek(offset)
    while nbytes > 0:
        chunk = src.read(min(COPY_BYTES, nbytes))
        if not chunk:
            raise RuntimeError(f"{src.name}: ended {nbytes} bytes early")
        dst.write(chunk)
        nbytes -= len(chunk)
        if progress is not None:
            progress(len(chunk))


def _remove(path: Path) -> None:
    """A temporary file, gone: on a disk turned read-only (or failing) the tidying goes on,
    and the run's own error is the one said; a later run removes what is left."""
    with contextlib.suppress(OSError):
        path.unlink(missing_ok=True)


def write_atomic(path: Path, data: bytes, tag: str) -> None:
    """`data` at `path` whole or not at all: written beside it under a name `tag` makes
    this run's, synced, then renamed over it."""
    tmp = path.with_name(f".{path.name.lstrip('.')}.{tag}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:  # a full disk: nothing half written stays behind
        _remove(tmp)
        raise
    _fsync_dir(path.parent)


def _reserve(fd: int, nbytes: int) -> None:
    """Allocate the blocks now where the file system can (a full disk fails here)."""
    try:
        os.posix_fallocate(fd, 0, nbytes)
    except (AttributeError, OSError) as e:
        if isinstance(e, OSError) and e.errno in NO_SPACE:
            raise
        os.ftruncate(fd, nbytes)  # no fallocate here: a sparse file of the right size


def _plain_name(name: str) -> bool:
    """A file right in the folder, or in one subfolder of it (not a hidden one): "a.bin",
    "doc_index/train.docs.bin"; never "..", an absolute path or deeper."""
    parts = name.split("/")
    if len(parts) == 2 and parts[0].startswith("."):
        return False
    return 1 <= len(parts) <= 2 and all(
        p and Path(p).name == p and p not in (".", "..") for p in parts
    )


def start_writeback(fd: int, offset: int, nbytes: int) -> None:
    """Ask Linux to start writing a range of a file to disk now, without waiting, so the
    disk works while shards still compute and the commit's fsync has little left to do.
    Elsewhere nothing happens here: the fsync at commit does all of it."""
    if _sync_file_range is not None and nbytes > 0:
        _sync_file_range(fd, offset, nbytes, 2)  # SYNC_FILE_RANGE_WRITE


def _load_sync_file_range():
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    return fn


_sync_file_range = _load_sync_file_range()


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Ctrl-C and SIGTERM wait until the block is done, then act as they would have; if
    the block fails, its error is the one raised. Not pthread_sigmask: it masks only this
    thread, and the kernel gives a signal sent to the process to any thread that does not
    mask it (a hashing thread), after which Python runs the handler in the main thread all
    the same, halfway through the block."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread runs handlers (and may set them)
        return
    caught: list[int] = []
    before: dict[int, Any] = {}
    try:
        # a handler set outside Python (getsignal: None) could not be put back: left as is
        for s in (signal.SIGINT, signal.SIGTERM):
            if signal.getsignal(s) is not None:
                before[s] = signal.signal(s, lambda signum, frame: caught.append(signum))
        yield
    finally:
        _put_back(before)
    if caught:  # the first one, as it would have been handled
        handler = before[caught[0]]
        if callable(handler):
            handler(caught[0], None)
        elif handler == signal.SIG_DFL:
            os.kill(os.getpid(), caught[0])


def _put_back(handlers: dict[int, Any]) -> None:
    """The handlers as they were, every one of them, even if one that is put back runs at
    once for a signal waiting for it (signal.signal runs pending handlers)."""
    raised: Optional[BaseException] = None
    for s, handler in handlers.items():
        while True:
            try:
                signal.signal(s, handler)
                break
            except BaseException as e:  # KeyboardInterrupt from a handler already put back
                raised = raised or e
    if raised is not None:
        raise raised


def _fsync_dir(path: Path) -> None:
    if os.name != "posix":
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
