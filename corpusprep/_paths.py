"""Where Hydra finds corpusprep's configs (the installed package, or conf/ in a source
checkout), where its caches are, and how a file of a folder that may come from anyone is read."""

from __future__ import annotations

import errno
import os
import stat
from collections import Counter
from collections.abc import Iterable
from contextlib import suppress
from functools import lru_cache
from importlib.util import find_spec
from itertools import islice
from pathlib import Path
from typing import Any

_REPO_CONF = Path(__file__).resolve().parent.parent / "conf"


def config_path() -> str:
    import corpusprep.config  # noqa: F401 - composing these configs needs their ${cp.*} resolvers

    # find_spec first: an installed (or editable) corpusprep ships conf/ as corpusprep.conf.
    try:
        if find_spec("corpusprep.conf") is not None:
            return "pkg://corpusprep.conf"
    except ModuleNotFoundError:
        pass
    if (_REPO_CONF / "config.yaml").is_file():  # a bare checkout run with PYTHONPATH
        return str(_REPO_CONF)
    raise RuntimeError("corpusprep: cannot find its conf/ directory; reinstall the package")


def user_cache_dir() -> Path:
    """The user's own cache folder for corpusprep: $XDG_CACHE_HOME/corpusprep, else
    ~/.cache/corpusprep."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "corpusprep"


def default_cache_dir() -> Path:
    """The download cache: $CORPUSPREP_CACHE_DIR (which may be shared), else user_cache_dir()."""
    if os.environ.get("CORPUSPREP_CACHE_DIR"):
        return Path(os.environ["CORPUSPREP_CACHE_DIR"]).expanduser()
    return user_cache_dir()


PLUGIN_GROUP = "corpusprep.conf"  # entry points: name -> a package of plugin configs


@lru_cache(maxsize=1)
def plugin_config_packages() -> list[tuple[str, str]]:
    """(name, config package) of every installed plugin, sorted by name (read once per
    process: a scan of every installed package's metadata, asked for a dozen times)."""
    from importlib.metadata import entry_points

    eps = entry_points()
    found = eps.select(group=PLUGIN_GROUP) if hasattr(eps, "select") else eps.get(PLUGIN_GROUP, [])
    return sorted((ep.name, ep.value) for ep in found)


def config_dirs(plugins: bool = True) -> list[Any]:
    """The folders Hydra composes from, as importlib.resources Traversables, corpusprep first,
    then (plugins=True) installed plugins' config packages."""
    from importlib.resources import files

    cp = config_path()
    dirs = [files(cp[len("pkg://") :])] if cp.startswith("pkg://") else [Path(cp)]
    for _, package in plugin_config_packages() if plugins else ():
        with suppress(ModuleNotFoundError, TypeError):  # a broken plugin: Hydra skips it too
            dirs.append(files(package))
    return dirs


def real_paths(paths: Iterable[str | os.PathLike]) -> list[str]:
    """os.path.realpath of each path, each folder resolved once: realpath takes one lstat
    per component, and a corpus of 200,000 files in 200 folders spent seconds on them.
    A file that is not itself a link is its folder's real path joined with its name;
    which files are links, a folder's listing says where many of its files are asked for
    (one read of the folder, not an lstat each; of a huge folder, its first entries)."""
    cwd = os.getcwd()
    given = [os.fspath(p) for p in paths]
    split = [os.path.split(os.path.join(cwd, path)) for path in given]  # absolute stays
    many = Counter(folder for folder, _ in split)
    folders: dict[str, str] = {}
    links: dict[str, tuple[set[str], set[str]]] = {}  # a folder's names listed, its links
    real = []
    for path, (folder, name) in zip(given, split):
        if folder not in links:
            asked = many[folder]
            links[folder] = _links_in(folder, asked) if asked >= LISTED_FROM else (set(), set())
        listed, linked = links[folder]  # a name not listed as given: an lstat says
        if name in ("", ".", "..") or (name in linked if name in listed else os.path.islink(path)):
            real.append(os.path.realpath(path))
            continue
        if folder not in folders:
            folders[folder] = os.path.realpath(folder)
        real.append(os.path.join(folders[folder], name))
    return real


LISTED_FROM = 64  # files asked for in one folder from which its listing is read
# entries of a folder read at most per file asked for in it (an entry costs about a tenth
# of an lstat): 64 files of a folder of a million took 0.6 s to list, not 0.6 ms
LISTED_PER_NAME = 4


def _links_in(folder: str, asked: int) -> tuple[set[str], set[str]]:
    """The names in a folder's listing, and those of its links: of its first LISTED_PER_NAME
    entries per file asked for (none: it cannot be listed). A name not listed as given
    (further on in a huge folder, or spelt otherwise: in another case on a file system
    that ignores it, unnormalised, with undecodable bytes' escapes for valid UTF-8) may
    be a link: an lstat answers for it."""
    try:
        with os.scandir(folder) as entries:
            read = list(islice(entries, LISTED_PER_NAME * asked))
        return {entry.name for entry in read}, {entry.name for entry in read if entry.is_symlink()}
    except OSError:
        return set(), set()


# a file of a folder that may come from anyone (a download, a stranger's out_dir): opened
# without waiting (a FIFO's open blocks until a writer comes), in binary on Windows. A link
# is followed (a Hub snapshot's files are links into its blobs): what is opened must be a
# regular file, checked on the open file itself, so nothing can be swapped in between
READ_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
# a link where we refuse one: Linux says ELOOP, FreeBSD EMLINK, NetBSD EFTYPE
LINK_ERRNOS = {errno.ELOOP, errno.EMLINK, getattr(errno, "EFTYPE", errno.ELOOP)}


def open_regular_fd(path: str | Path) -> int:
    """A descriptor of `path` open for reading; OSError (EINVAL) if it is not a regular file
    (a FIFO, a device, a folder)."""
    fd = os.open(path, READ_FLAGS)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    return fd


def read_regular(path: str | Path, limit: int) -> bytes:
    """A regular file's bytes, if it has at most `limit` of them (checked on the open file
    before reading). OSError otherwise: ENOENT, EINVAL (not a regular file), EFBIG (too big),
    EAGAIN (it changed size while read: not whole)."""
    with os.fdopen(open_regular_fd(path), "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size > limit:
            raise OSError(errno.EFBIG, f"more than {limit:,} bytes", str(path))
        data = f.read(size + 1)  # read(n) allocates n at once; one more shows a growth
    if len(data) != size:
        raise OSError(errno.EAGAIN, "it changed while read", str(path))
    return data


# JSON of small objects takes far more memory than its bytes: "[{},{},...]" about 25 times
MAX_JSON_COST = 2 << 30


def json_cost(data: bytes) -> int:
    """About the most memory json.loads(data) can take: each byte twice (the text, then what
    it holds), and each object or list some 100 bytes more."""
    return 2 * len(data) + 100 * (data.count(b"{") + data.count(b"["))
