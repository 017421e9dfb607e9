"""Sources say where the text comes from: they give the list of input files (after any
download), in a fixed order. Each one is a class in its own module here, with a config
file of the same name in conf/source/. A source never tokenizes; formats read the files."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import stat
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Optional, Union

from corpusprep.errors import UserError, as_typed
from corpusprep.formats import InputFile

if TYPE_CHECKING:
    from corpusprep.writer import Identity


@dataclass(frozen=True)
class ReadOptions:
    """How to read the files: the keys every source config has."""

    format: str = "auto"  # auto (from the file name) | text | lines | jsonl | parquet
    text_field: str = "text"  # jsonl / parquet: where the text is
    doc_separator: Optional[str] = None  # text: a line that separates documents
    doc_end: Optional[str] = None  # text: a string that ends each document (kept with it)
    skip_invalid: bool = False  # leave out documents that are not valid UTF-8
    # the most text held at once where the tokenizer may not cut it (a document, a JSON
    # line, a text with no place to cut): memory stays bounded whatever the input
    max_uncut_bytes: int = 64 << 20
    max_bytes: Optional[int] = None  # the most bytes read from one input (after decompression)

    def __post_init__(self) -> None:
        if not isinstance(self.skip_invalid, bool):  # "no" is a string, and strings read as true
            raise UserError(
                f"source.skip_invalid={self.skip_invalid!r}: must be true or false, e.g. "
                "source.skip_invalid=true"
            )
        check_bytes("max_uncut_bytes", self.max_uncut_bytes)
        if self.max_bytes is not None:
            check_bytes("max_bytes", self.max_bytes, "(or null: no cap)")
        check_mark("doc_separator", self.doc_separator, one_line=True)
        check_mark("doc_end", self.doc_end, one_line=False)


def new_part(dest: Path) -> tuple[Path, BinaryIO]:
    """A new hidden file beside `dest` to write it in, then rename. The cache may be shared
    (CORPUSPREP_CACHE_DIR): a name a stranger can guess (the pid) lets them plant a symlink
    there that the write would follow. A random name, made exclusively (O_EXCL: never
    through a link), with the umask's mode as any file the user writes (others sharing the
    cache read it; mkstemp's would be 0600)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    for _ in range(100):
        path = dest.with_name(f".{dest.name}.{secrets.token_hex(8)}.part")
        try:
            return path, os.fdopen(os.open(path, flags, 0o666), "wb")
        except FileExistsError:  # planted, or a 1 in 2**64 clash: another name
            continue
    raise FileExistsError(errno.EEXIST, "no free name for a partial download", str(dest))


def publish(part: Path, dest: Path, sha256: Optional[str] = None) -> None:
    """Put a finished download in the cache, unless another run sharing the cache has put
    its own there meanwhile: replacing that would change a file the other run may be
    reading (it fails, "changed while it was being read"). The first complete copy stays,
    if it has the pinned `sha256` (else this one, checked, replaces it); `part` is left for
    the caller to remove. What is not a regular file there (a dangling link) is replaced,
    and so is anything where the file system cannot link; a folder is an error."""
    try:
        os.link(part, dest)
        return
    except FileExistsError:
        pass
    except OSError:  # no hard links here (FAT, some FUSE and network file systems)
        os.replace(part, dest)
        return
    try:
        there = os.lstat(dest)
    except FileNotFoundError:  # gone again meanwhile
        os.replace(part, dest)
        return
    if stat.S_ISDIR(there.st_mode):
        raise UserError(
            f"{dest}: a folder where the download goes; remove it, or set source.cache_dir "
            "to another folder"
        )
    # a copy of another size is other bytes: replaced unread
    if stat.S_ISREG(there.st_mode) and (
        sha256 is None or (there.st_size == os.stat(part).st_size and _has(dest, sha256))
    ):
        return
    os.replace(part, dest)


def _has(path: Path, sha256: str) -> bool:
    """Whether the file has this sha256 (unreadable: it is not the file)."""
    from corpusprep.writer import file_sha256

    try:
        return file_sha256(path) == sha256
    except OSError:
        return False


STALE_PART_SECONDS = 3600  # a part file unwritten this long: its download was killed


def remove_stale_parts(dest: Path, timeout: float = 0) -> None:
    """The part files of `dest` that killed downloads left (SIGKILL, a power cut: nothing
    removed them): this user's own regular files, unwritten for an hour and twice the
    download's timeout, which no live download could be (its timeout would have ended it).
    Best effort."""
    pattern = re.compile(rf"\.{re.escape(dest.name)}\.[0-9a-f]{{16}}\.part")
    now = time.time()
    try:
        entries = list(os.scandir(dest.parent))
    except OSError:
        return
    for entry in entries:
        if not pattern.fullmatch(entry.name):
            continue
        with contextlib.suppress(OSError):
            st = entry.stat(follow_symlinks=False)
            if (stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid()
                    and now - st.st_mtime > max(STALE_PART_SECONDS, 2 * timeout)):  # fmt: skip
                os.unlink(entry.path)


MAX_MARK_CHARS = 1 << 16  # a document separator's or end's length


def check_mark(key: str, value: Any, *, one_line: bool) -> None:
    """source.KEY (a document separator or end) must be null or a non-empty string (Hydra
    reads 123 as a number); a separator is a line of its own, so it holds no line break."""
    if value is None:
        return
    if isinstance(value, (bool, int, float)):  # as typed: true, 123
        typed = as_typed(f"source.{key}", value)
        raise UserError(
            f"source.{key}={typed}: must be a string, and Hydra reads this as a "
            f"{'boolean' if isinstance(value, bool) else 'number'}; quote it: "
            f"\"source.{key}='{typed}'\""
        )
    if not isinstance(value, str):
        raise UserError(f"source.{key}={value}: must be one string, or null")
    if not value:
        raise UserError(f"source.{key}='': must be a non-empty string; use null for none")
    if len(value) > MAX_MARK_CHARS:  # its regex takes about 100 bytes per character
        raise UserError(
            f"source.{key}: {len(value):,} characters, more than the {MAX_MARK_CHARS:,} a "
            "document mark may have; give a shorter one"
        )
    if one_line and ("\n" in value or "\r" in value):
        raise UserError(
            f"source.{key}={value!r}: must be one line (a separator is a line of its own); "
            "give the text of that line alone"
        )


def check_bytes(key: str, value: Any, also: str = "") -> None:
    """source.KEY must be a positive whole number of bytes."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(
            f"source.{key}={value!r}: must be a positive whole number of bytes {also}".rstrip()
        )


class Source(ABC):
    def __init__(self, **options: Any) -> None:
        self.options = ReadOptions(**options)
        # each file's identity at the listing's look at it (input_files), which the run
        # checks it against once read (a second stat of 50,311 files took 0.23 s)
        self.listed: dict[str, Identity] = {}

    @abstractmethod
    def files(self, progress: bool = True) -> list[InputFile]:
        """The input files, in the order their documents are read (a download first)."""

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """Where the text came from, for the manifest."""

    def real_paths(self, paths: Sequence[str]) -> list[str]:
        """Each file's real path (links resolved), for the manifest."""
        from corpusprep._paths import real_paths

        return real_paths(paths)


def input_files(
    paths: Sequence[Union[str, Path]],
    options: ReadOptions,
    skip_empty: bool = False,
    listed: Optional[dict[str, Identity]] = None,
) -> list[InputFile]:
    """InputFiles for `paths`: compression from the first bytes, zip archives opened up
    into their members, the format from the name (unless set); `skip_empty`: empty files
    left out; `listed` (a source's): each file's identity from that look added. A path given
    as a string must be absolute (a source's listing: a corpus may be 200,000 files, and
    a Path each took longer than opening them)."""
    from corpusprep.compression import detect, members
    from corpusprep.formats import format_from_name, get_format
    from corpusprep.writer import file_identity

    if options.format != "auto":
        get_format(options.format)  # an unknown format fails here, before any work
    files = []
    for given in paths:
        # workers may run elsewhere (another cwd, another node): every path is absolute
        path = given if isinstance(given, str) else str(given.absolute())
        try:  # the manifest, the plan's digest and every message are UTF-8
            path.encode("utf-8")
        except UnicodeEncodeError:
            if skip_empty and _size(path) == 0:  # left out anyway
                continue
            shown = path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            raise UserError(
                f"{shown}: the file name is not UTF-8 (made on another system?); rename it "
                "(e.g. with convmv), or leave it out of the source"
            ) from None
        try:
            head, parquet, found = _peek(path)
        except OSError as e:  # unreadable (permissions), or gone since it was listed
            if skip_empty and _size(path) == 0:  # left out anyway
                continue
            raise UserError(
                f"{path}: cannot read it ({e.strerror}); check that it exists and that you "
                "may read it, or leave it out of the source"
            ) from None
        size = found.st_size
        if skip_empty and size == 0:
            continue
        if listed is not None:
            listed[path] = file_identity(found)
        compression = detect(path, head)
        cap = options.max_bytes
        if cap is not None and compression == "none" and size > cap:
            raise UserError(
                f"{path}: {size:,} bytes, more than source.max_bytes={cap}; "
                "raise source.max_bytes (or set it to null) if the file is genuine"
            )
        names = members(path) if compression == "zip" else [None]
        for member in names:
            fmt = options.format
            if fmt == "auto":
                fmt = format_from_name(member or os.path.basename(path))
                if fmt != "parquet" and compression == "none" and parquet:
                    fmt = "parquet"  # by its bytes: a Parquet file under another name
            files.append(
                InputFile(
                    path=path,
                    format=fmt,
                    compression=compression,
                    size=size // len(names),
                    member=member,
                    text_field=options.text_field,
                    doc_separator=options.doc_separator,
                    doc_end=options.doc_end,
                    skip_invalid=options.skip_invalid,
                    max_uncut_bytes=options.max_uncut_bytes,
                    max_bytes=options.max_bytes,
                )
            )
    return files


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return -1


def _peek(path: str) -> tuple[bytes, bool, os.stat_result]:
    """A file's first 8 bytes (its compression's magic), whether it is Parquet by its bytes
    (PAR1 at its start and at its end) and its stat, from one open (unbuffered: a corpus
    may be 200,000 small files)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
    try:
        head, found = os.read(fd, 8), os.fstat(fd)
        if head[:4] != b"PAR1" or found.st_size < 12:
            return head, False, found
        os.lseek(fd, found.st_size - 4, os.SEEK_SET)
        return head, os.read(fd, 4) == b"PAR1", found
    finally:
        os.close(fd)


def check_text_file(path: Path, how_to_fix: str) -> int:
    """The size of a readable, non-empty regular file, or a UserError saying what is wrong."""
    if not path.exists():
        raise UserError(f"{path}: no such file; {how_to_fix}")
    if path.is_dir():
        raise UserError(f"{path}: is a directory, not a text file; {how_to_fix}")
    if not path.is_file():  # a FIFO, a device (/dev/zero): no size, maybe no end
        raise UserError(
            f"{path}: not a regular file (a pipe or a device); save the text to a file "
            f"first (e.g. cat {path} > corpus.txt) and give that"
        )
    if not os.access(path, os.R_OK):
        raise UserError(f"{path}: permission denied; make it readable or copy it elsewhere")
    size = path.stat().st_size
    if size == 0:
        raise UserError(f"{path}: the file is empty; there is nothing to tokenize; {how_to_fix}")
    return size
