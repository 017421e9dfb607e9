"""Opening a possibly compressed input file as one stream of bytes.

The compression is recognised by the file's first bytes (magic numbers), so a misnamed
file still opens; the extension is only a fallback. gzip, bz2 and xz come with Python;
zstd needs the optional `zstandard` package (pip install 'corpusprep[zstd]'). A zip
archive is read member by member (see members()).
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import zipfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import IO

from corpusprep.errors import UserError

MAGIC = {
    b"\x1f\x8b": "gzip",
    b"BZh": "bz2",
    b"\xfd7zXZ\x00": "xz",
    b"\x28\xb5\x2f\xfd": "zstd",
    b"PK\x03\x04": "zip",
}
SUFFIXES = {".gz": "gzip", ".bz2": "bz2", ".xz": "xz", ".zst": "zstd", ".zip": "zip"}
NAMES = ("none", *dict.fromkeys(SUFFIXES.values()))


def detect(path: Path) -> str:
    """The compression of `path`: by its first bytes, else by its extension, else none."""
    with open(path, "rb") as f:
        head = f.read(8)
    for magic, name in MAGIC.items():
        if head.startswith(magic):
            return name
    return SUFFIXES.get(path.suffix.lower(), "none")


def strip_suffix(name: str) -> str:
    """'a.jsonl.zst' -> 'a.jsonl': the name that tells the format."""
    stem, dot, ext = name.rpartition(".")
    return stem if dot and f".{ext.lower()}" in SUFFIXES else name


@contextmanager
def open_stream(path: Path, compression: str, member: str | None = None) -> Iterator[IO[bytes]]:
    """The decompressed bytes of `path` (of one `member` of a zip archive)."""
    if compression not in NAMES:
        raise UserError(f"{path}: unknown compression {compression!r}; use one of {NAMES}")
    with ExitStack() as stack:
        try:
            f = stack.enter_context(_open(path, compression, member))
        except (OSError, EOFError, zipfile.BadZipFile, lzma.LZMAError) as e:
            raise UserError(f"{path}: cannot open as {compression}: {e}") from None
        try:
            yield f
        except (OSError, EOFError, zipfile.BadZipFile, lzma.LZMAError) as e:
            raise UserError(
                f"{path}: corrupt or truncated {compression} data ({e}); check the file"
            ) from None
        except Exception as e:  # zstandard raises its own ZstdError
            if type(e).__name__ == "ZstdError":
                raise UserError(f"{path}: corrupt or truncated zstd data ({e})") from None
            raise


def _open(path: Path, compression: str, member: str | None) -> IO[bytes]:
    if compression == "zip":
        archive = zipfile.ZipFile(path)
        return archive.open(member or archive.namelist()[0])
    if compression == "zstd":
        return _zstd_open(path)
    opener = {"none": open, "gzip": gzip.open, "bz2": bz2.open, "xz": lzma.open}[compression]
    return opener(path, "rb")


def members(path: Path) -> list[str]:
    """The file members of a zip archive, in archive order."""
    try:
        with zipfile.ZipFile(path) as archive:
            return [i.filename for i in archive.infolist() if not i.is_dir()]
    except (OSError, zipfile.BadZipFile) as e:
        raise UserError(f"{path}: not a readable zip archive ({e})") from None


def _zstd_open(path: Path) -> IO[bytes]:
    try:
        import zstandard
    except ImportError:
        raise UserError(
            f"{path}: zstd-compressed; install the optional package: pip install 'corpusprep[zstd]'"
        ) from None
    # the reader has read()/readinto() but no readline(): buffer it like any binary file
    return io.BufferedReader(zstandard.open(path, "rb"), 1 << 16)
