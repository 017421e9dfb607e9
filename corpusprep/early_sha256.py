"""The input's sha256, begun as the process starts: Python's imports and the config take a
tenth of a second in which the other cores idle, and every run hashes its input anyway (the
manifest records it; an up-to-date check compares it). On 2 cores a 200 MB text's digest
(0.14 s of a core) was otherwise taken while the workers encode, and slowed them.

Only for `source.path=FILE` written on the command line (no flags: not a sweep, --help or
--cfg), FILE a regular file of at least MIN_BYTES. Nothing but the standard library is
imported here: it runs before the rest of corpusprep is. The digest is kept only if the file
has the same identity (device, inode, size, mtime, ctime) after the hash as before it, and
file_sha256 takes it only for a file with that identity still: as for any input, a write
since changes its ctime.
"""

from __future__ import annotations

import hashlib
import os
import stat
import threading
from typing import Optional

MIN_BYTES = 32 << 20  # below this the digest takes under 25 ms: no thread for it
CHUNK = 1 << 23  # bytes per read: the thread takes the GIL back once per 8 MiB

Identity = tuple[int, int, int, int, int]

_pid = 0  # of the process that started the thread: a forked worker hashes for itself
_thread: Optional[threading.Thread] = None
_hashing: Optional[Identity] = None  # of the file the thread hashes
_taken: dict[Identity, str] = {}


def identity(st: os.stat_result) -> Identity:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def start(argv: list[str]) -> None:
    """Begin hashing the file `source.path=` names in `argv`, in a daemon thread (a failed or
    interrupted run does not wait for it)."""
    global _thread, _hashing, _pid
    if any(arg.startswith("-") for arg in argv):
        return  # -m, --help, --cfg: no run, or many
    paths = [arg.partition("=")[2] for arg in argv if arg.startswith("source.path=")]
    if len(paths) != 1 or not paths[0] or "${" in paths[0] or paths[0][0] in "'\"[{":
        return  # what Hydra would read as something other than this very path
    try:
        fd = os.open(os.path.expanduser(paths[0]), os.O_RDONLY | os.O_NONBLOCK)  # a FIFO: no wait
    except (OSError, ValueError):
        return  # the run says what is wrong with it
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_size < MIN_BYTES:
        os.close(fd)
        return
    _hashing, _pid = identity(st), os.getpid()
    _thread = threading.Thread(target=_hash, args=(fd, _hashing), daemon=True)
    _thread.start()


def _hash(fd: int, before: Identity) -> None:
    digest = hashlib.sha256()
    try:
        with os.fdopen(fd, "rb", buffering=0) as f:
            chunk = memoryview(bytearray(CHUNK))
            while size := f.readinto(chunk):
                digest.update(chunk[:size])
            after = identity(os.fstat(f.fileno()))
    except OSError:
        return
    if after == before:
        _taken[before] = digest.hexdigest()


def taken(st: os.stat_result) -> Optional[str]:
    """The digest of the file `st` describes, if this process hashed it early (waiting for
    the hash to end if it is under way), else None."""
    if _thread is None or identity(st) != _hashing or os.getpid() != _pid:
        return None
    _thread.join()
    return _taken.get(identity(st))
