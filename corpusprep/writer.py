"""Writing the output folder so that a run either completes or changes nothing.

Every file is written under a temporary name in out_dir (same filesystem, so a rename is
atomic), flushed to disk, and renamed into place only when all of them are complete;
the manifest goes last, so a folder with a manifest is a finished one. A failed or
interrupted run removes its temporary files and leaves the previous outputs as they were.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import secrets
import shutil
import signal
import sys
from pathlib import Path
from typing import Any, Optional

import numpy as np

from corpusprep.errors import UserError

DTYPES = {"uint16": np.uint16, "uint32": np.uint32}
WORK = ".corpusprep-work"  # resumable shard parts, inside out_dir


def choose_dtype(requested: str, max_id: int) -> str:
    """`auto`: the smallest dtype that holds every id; an explicit one must hold them too."""
    if requested == "auto":
        return "uint16" if max_id <= np.iinfo(np.uint16).max else "uint32"
    if max_id > np.iinfo(DTYPES[requested]).max:
        raise UserError(
            f"dtype={requested}: too small for this vocabulary (largest id {max_id:,}); "
            "use dtype=uint32 or dtype=auto"
        )
    return requested


class OutputWriter:
    """Use as `with OutputWriter(out_dir) as out: ...; out.commit()`."""

    def __init__(self, out_dir: str | Path) -> None:
        self.label = str(out_dir)  # as the user wrote it, for messages
        self.out_dir = Path(out_dir).absolute()  # workers may run in another directory
        self._tag = f"{os.getpid()}-{secrets.token_hex(3)}"
        self._temps: dict[str, Path] = {}  # final name -> temporary path, in commit order
        self._scratch: list[Path] = []  # dropped temporary files: deleted on commit or abort
        self._obsolete: list[Path] = []  # files of the previous run this one does not make
        self._work: Optional[Path] = None
        self._made_dirs: list[Path] = []
        self.committed = False

    def __enter__(self) -> OutputWriter:
        missing = []
        d = self.out_dir.absolute()
        while not d.exists():
            missing.append(d)
            d = d.parent
        try:
            self.out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UserError(
                f"out_dir={self.label}: cannot create it ({e.strerror}); choose a writable out_dir"
            ) from None
        self._made_dirs = missing
        if not self.out_dir.is_dir():
            raise UserError(f"out_dir={self.label}: exists and is not a folder")
        if not os.access(self.out_dir, os.W_OK | os.X_OK):
            self._remove_made_dirs()
            raise UserError(f"out_dir={self.label}: not writable; choose another out_dir")
        return self

    def __exit__(self, exc_type: Any, *exc: object) -> None:
        if not self.committed:
            # finished shards stay for a re-run after a failure the user did not cause (a
            # dead node, retries used up); a user error or Ctrl-C tidies everything away
            keep = exc_type is not None and not issubclass(exc_type, (UserError, KeyboardInterrupt))
            self.abort(keep_work=keep)

    def temp(self, name: str, nbytes: int = 0) -> Path:
        """A new temporary file that becomes `name` on commit, preallocated to `nbytes`."""
        path = self.out_dir / f".{name}.{self._tag}.tmp"
        self._temps[name] = path
        try:
            with open(path, "wb") as f:
                f.truncate(nbytes)
        except OSError as e:
            raise UserError(
                f"out_dir={self.label}: cannot write {path.name}: {e.strerror}"
            ) from None
        return path

    def path_of(self, name: str) -> Optional[Path]:
        """The temporary path of a file that will become `name`, if there is one."""
        return self._temps.get(name)

    def work(self, key: str) -> Path:
        """A folder for shard parts and completion markers that outlives a failed run, so
        that a re-run with the same input, settings and plan (`key`) redoes only missing
        shards. It lives in out_dir (shared by every worker, on a shared file system)."""
        self._work = self.out_dir / WORK / key
        self._work.mkdir(parents=True, exist_ok=True)
        return self._work

    def obsolete(self, name: str) -> None:
        """A file of an earlier run (another format, more shards) to delete on commit: a
        reader globbing the folder must not find stale files next to the new ones."""
        if Path(name).name == name and name not in self._temps:
            self._obsolete.append(self.out_dir / name)

    def drop(self, name: str) -> None:
        """Keep a temporary file out of the final folder (it becomes scratch)."""
        path = self._temps.pop(name)
        self._scratch.append(path)

    def write_pickle(self, name: str, obj: Any) -> None:
        with open(self.temp(name), "wb") as f:
            pickle.dump(obj, f)

    def write_json(self, name: str, obj: Any) -> None:
        with open(self.temp(name), "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=2, ensure_ascii=False)
            f.write("\n")

    def commit(self) -> None:
        """Flush every file to disk, then rename them all into place."""
        for path in self._temps.values():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        # No Ctrl-C between the renames: the folder must not end up half old, half new.
        blocked = {signal.SIGINT, signal.SIGTERM}
        old = signal.pthread_sigmask(signal.SIG_BLOCK, blocked) if _can_mask() else None
        try:
            for name, path in self._temps.items():
                os.replace(path, self.out_dir / name)
            for path in self._obsolete:
                path.unlink(missing_ok=True)
            self.committed = True
        finally:
            for path in self._scratch:
                path.unlink(missing_ok=True)
            if old is not None:
                signal.pthread_sigmask(signal.SIG_SETMASK, old)
        _fsync_dir(self.out_dir)
        shutil.rmtree(self.out_dir / WORK, ignore_errors=True)  # this run's and stale ones

    def abort(self, keep_work: bool = False) -> None:
        for path in [*self._temps.values(), *self._scratch]:
            path.unlink(missing_ok=True)
        self._temps.clear()
        if self._work is not None and not keep_work:
            shutil.rmtree(self._work, ignore_errors=True)
            with contextlib.suppress(OSError):
                (self.out_dir / WORK).rmdir()
        self._remove_made_dirs()

    def _remove_made_dirs(self) -> None:
        for d in self._made_dirs:  # deepest first; only folders this run created, if empty
            try:
                d.rmdir()
            except OSError:
                break


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


def _can_mask() -> bool:
    return hasattr(signal, "pthread_sigmask")


def _fsync_dir(path: Path) -> None:
    if os.name != "posix":
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
