"""Opening a possibly compressed input file as one stream of bytes.

The compression is recognised by the file's first bytes (magic numbers), so a misnamed
file still opens; the extension is only a fallback. gzip, bz2 and xz come with Python;
zstd needs the optional `zstandard` package (pip install 'corpusprep[zstd]'). A zip
archive is read member by member (see members()).

Inputs may be hostile: a stream that ends before its end-of-stream marker (a cut download)
is an error, never a short text, and `max_bytes` caps what a stream may decompress to.
"""

from __future__ import annotations

import bz2
import functools
import gzip
import io
import lzma
import os
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Optional

from corpusprep.errors import UserError

if TYPE_CHECKING:
    from corpusprep.formats import InputFile

MAGIC = {
    b"\x1f\x8b": "gzip",
    b"BZh": "bz2",
    b"\xfd7zXZ\x00": "xz",
    b"\x28\xb5\x2f\xfd": "zstd",
    b"PK\x03\x04": "zip",
}
SUFFIXES = {".gz": "gzip", ".bz2": "bz2", ".xz": "xz", ".zst": "zstd", ".zip": "zip"}
NAMES = ("none", *dict.fromkeys(SUFFIXES.values()))


def detect(path: str | Path, head: Optional[bytes] = None) -> str:
    """The compression of `path`: by its first bytes (`head`, if read already: 8 of them),
    else by its extension (a zip may start with other bytes), else none. A name that says
    gzip, bz2, xz or zstd, whose streams start with their magic, on bytes without it (a
    .gz saved decompressed) is none: read as the bytes are (a file shorter than the magic
    stays what its name says: a cut one)."""
    if head is None:
        with open(path, "rb") as f:
            head = f.read(8)
    if int.from_bytes(head[:4], "little") in SKIPPABLE:  # zstd's frames may start so
        return "zstd"
    for magic, name in MAGIC.items():
        if head.startswith(magic):
            return name
    named = SUFFIXES.get(suffix(os.fspath(path)), "none")
    if named in ("gzip", "bz2", "xz", "zstd"):
        magic = next(m for m, n in MAGIC.items() if n == named)
        return named if magic.startswith(head) else "none"
    return named


def suffix(name: str) -> str:
    """The last part of a name's last dot, lower case, as Path.suffix gives it ('..gz':
    '.gz'), without building a Path (a corpus may be 200,000 files)."""
    name = name.rsplit("/", 1)[-1]
    i = name.rfind(".")
    return name[i:].lower() if 0 < i < len(name) - 1 else ""


def strip_suffix(name: str) -> str:
    """'a.jsonl.zst' -> 'a.jsonl': the name that tells the format."""
    stem, dot, ext = name.rpartition(".")
    return stem if dot and f".{ext.lower()}" in SUFFIXES else name


# what the decompressors raise on bad data (zipfile's deflate: zlib.error)
_CORRUPT = (OSError, EOFError, zipfile.BadZipFile, lzma.LZMAError, zlib.error)


@contextmanager
def open_stream(
    path: str | Path, compression: str, member: str | None = None, max_bytes: Optional[int] = None
) -> Iterator[IO[bytes]]:
    """The decompressed bytes of `path` (of one `member` of a zip archive); more than
    `max_bytes` of them (source.max_bytes) is an error."""
    f = open_raw(path, compression, member, max_bytes)
    with f, reading_errors(f"{path}!{member}" if member else str(path), compression):
        yield f


def open_raw(
    path: str | Path, compression: str, member: str | None = None, max_bytes: Optional[int] = None
) -> IO[bytes]:
    """open_stream's stream, for a caller that keeps it open between reads (and reads it
    inside reading_errors); closing it closes the file."""
    if compression not in NAMES:
        raise UserError(f"{path}: unknown compression {compression!r}; use one of {NAMES}")
    name = f"{path}!{member}" if member else str(path)
    try:
        f = _open(path, compression, member)
    except _CORRUPT as e:
        raise UserError(f"{name}: cannot open as {compression}: {e}") from None
    return _Capped(f, max_bytes, name) if max_bytes is not None else f


@contextmanager
def reading_errors(name: str, compression: str) -> Iterator[None]:
    """What a damaged stream raises while it is read, as one line naming the file."""
    try:
        yield
    except EOFError:
        raise UserError(
            f"{name}: truncated {compression} data: the file ends before the end of its "
            "compressed stream (a cut download or copy?); get the whole file again"
        ) from None
    except _CORRUPT as e:
        raise UserError(f"{name}: corrupt {compression} data ({e}); check the file") from None
    except Exception as e:  # zstandard raises its own ZstdError
        if type(e).__name__ == "ZstdError":
            raise UserError(f"{name}: corrupt zstd data ({e}); check the file") from None
        raise


def _open(path: str | Path, compression: str, member: str | None) -> IO[bytes]:
    if compression == "zip":
        archive = zipfile.ZipFile(path)
        info = archive.getinfo(member or archive.namelist()[0])
        if info.flag_bits & 0x1:  # zipfile would raise a RuntimeError asking for a password
            raise zipfile.BadZipFile(f"member {info.filename!r} is encrypted; extract it first")
        try:
            return archive.open(info)
        except NotImplementedError as e:  # a compression method zipfile does not know
            raise zipfile.BadZipFile(f"member {info.filename!r}: {e}") from None
    if compression == "zstd":
        return _zstd_open(path)
    opener = {"none": open, "gzip": gzip.open, "bz2": bz2.open, "xz": lzma.open}[compression]
    return opener(path, "rb")


class _Capped(io.RawIOBase):
    """A stream that fails once more than `limit` bytes have come out of it."""

    def __init__(self, f: IO[bytes], limit: int, name: str) -> None:
        self.f, self.limit, self.name, self.count = f, limit, name, 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        return self._counted(self.f.readinto(b))

    def read(self, size: Optional[int] = -1) -> bytes:
        data = self.f.read(size)
        self._counted(len(data))
        return data

    def readline(self, size: Optional[int] = -1) -> bytes:
        line = self.f.readline(-1 if size is None else size)
        self._counted(len(line))
        return line

    def close(self) -> None:
        self.f.close()
        super().close()

    def _counted(self, n: int) -> int:
        self.count += n
        if self.count > self.limit:
            raise UserError(
                f"{self.name}: decompresses to more than source.max_bytes={self.limit} bytes; "
                "raise source.max_bytes (or set it to null) if the file is genuine"
            )
        return n


@dataclass
class Stream:
    """An open stream of a compressed file, `offset` bytes and `lines` lines into its text,
    at the start of a line; `end`: where the piece it was kept after ended."""

    f: IO[bytes]
    key: tuple  # the file as it was when opened: a changed file is opened again
    end: int = 0
    offset: int = 0
    lines: int = 0
    ahead: bytes = b""  # read from f past `offset` already (a text piece looked for its cut)


class Streams:
    """The stream of a compressed file that this process read a piece of last, kept where
    the piece ended (formats/jsonl.py): a worker that gets the next piece of the same file
    (they are handed out in order, so it often does) goes on reading there, instead of
    decompressing the file from its start again to skip to its piece. One at a time (a
    decoder holds up to its window, tens of MB); a forked process starts with none (it
    would share the file offset with its parent)."""

    def __init__(self) -> None:
        self.kept: Optional[Stream] = None
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._forget)

    def take(self, file: InputFile, start: int,
             usable: Optional[Callable[[Stream], bool]] = None) -> Stream:  # fmt: skip
        """A stream of `file` at a line start at or before `start`, no line that starts at
        or after `start` read from it yet (`usable`: another test of the kept stream)."""
        try:
            stat = os.stat(file.path)
        except OSError as e:
            raise UserError(f"{file.name}: cannot open as {file.compression}: {e}") from None
        key = (file.path, file.member, file.compression, file.max_bytes, stat.st_size,
               stat.st_mtime_ns, stat.st_ino)  # fmt: skip
        kept, self.kept = self.kept, None
        if kept is not None:
            if kept.key == key and kept.end <= start and (usable is None or usable(kept)):
                return kept
            kept.f.close()
        return Stream(open_raw(file.path, file.compression, file.member, file.max_bytes), key)

    def keep(self, stream: Stream, end: int, offset: int, lines: int, ahead: bytes = b"") -> None:
        """Keep `stream`, read through the lines that start before `end`."""
        stream.end, stream.offset, stream.lines, stream.ahead = end, offset, lines, ahead
        self.close()
        self.kept = stream

    def close(self) -> None:
        kept, self.kept = self.kept, None
        if kept is not None:
            kept.f.close()

    def _forget(self) -> None:
        self.kept = None


STREAMS = Streams()


GUESSED_RATIO = 4  # text compresses about this much: for formats that do not record the size


@functools.lru_cache(maxsize=1 << 14)  # asked by the shard sizing and again by the plan
def text_size(path: str | Path, compression: str, member: Optional[str], size: int) -> int:
    """About how many bytes a compressed file holds once decompressed, from its own header
    or trailer where it records them (recorded_text_size), else guessed: shards are packed
    by the work in them, and a compressed file's work is its text, several times its size
    on disk."""
    known = recorded_text_size(path, compression, member, size)
    if known:
        return known
    if size * GUESSED_RATIO < 4 * SAMPLE_TEXT:  # small: packed with others, a guess will do
        return size * GUESSED_RATIO
    guess = _size_from_its_start(path, compression, size)
    bound = text_bound(path, compression, member, size)
    # full blocks (as zstd writes a stream): the bound is within a block per frame of the
    # size, and no piece can run past it (see InputFile.size_bounded)
    return bound if 0 < bound <= guess * BOUND_SLACK else guess


BOUND_SLACK = 1.5  # a bound above this many times the guess is taken for what it is: loose


@functools.lru_cache(maxsize=1 << 14)
def text_bound(path: str | Path, compression: str, member: Optional[str], size: int) -> int:
    """The most text a zstd file's frames can hold, from their headers (_walk_frames); 0
    for other formats, or where the walk gives up."""
    if compression != "zstd":
        return 0
    try:
        with open(path, "rb") as f:
            walked = _walk_frames(f.fileno())
    except OSError:  # reading it reports that, in one line
        return 0
    return walked[1] if walked is not None and walked[0] == size else 0


@functools.lru_cache(maxsize=1 << 14)
def recorded_text_size(path: str | Path, compression: str, member: Optional[str], size: int) -> int:
    """The text size a compressed file records (zstd's frame content size, gzip's ISIZE, a
    zip member's size); 0 where it records none (or one smaller than the file itself: not
    a real one). Reads at most a few bytes."""
    known = 0
    try:
        if compression == "zip" and member is not None:  # `size` is the whole archive's
            stat = os.stat(path)
            return max(_member_sizes(str(path), stat.st_size, stat.st_mtime_ns)[member], 1)
        elif compression == "gzip" and size >= 18:
            with open(path, "rb") as f:
                f.seek(size - 4)
                known = int.from_bytes(f.read(4), "little")  # of the last member, mod 2**32
        elif compression == "zstd":
            import zstandard

            with open(path, "rb") as f:
                known = max(zstandard.frame_content_size(f.read(18)), 0)  # -1: not recorded
    except Exception:  # a damaged file: reading it reports that, in one line
        known = 0
    return known if known >= size else 0


SAMPLE_TEXT = 1 << 20  # text decompressed from a big file's start to guess its whole size
SAMPLE_STEP = 1 << 10  # compressed bytes per step: the count is this exact
SAMPLE_OUT = 1 << 16  # the most text one step may give: memory stays bounded for a bomb
SAMPLE_INPUT = 1 << 24  # the most compressed bytes read for a sample (stored blocks, comments)


def _size_from_its_start(path: str | Path, compression: str, size: int) -> int:
    """A compressed file's text size, guessed from the compressed size of its first
    SAMPLE_TEXT bytes of text (a guess sets only where its pieces start: the balance);
    its exact size when its text is shorter. Under 1% of decompressing a big file; not
    for bz2, which decompresses too slowly for a sample to pay (a fixed guess)."""
    if compression not in ("zstd", "gzip", "xz"):
        return size * GUESSED_RATIO
    try:
        with open(path, "rb") as f:
            text, used, ended = (
                _sample_zstd(f) if compression == "zstd" else _sample_stdlib(f, compression)
            )
    except Exception:  # a damaged file: reading it reports that, in one line
        return size * GUESSED_RATIO
    if ended:
        return max(text, 1)
    return max(size, size * text // max(used, 1))


def _sample_zstd(f: IO[bytes]) -> tuple[int, int, bool]:
    """(text bytes, compressed bytes they took, whether that is the whole file)."""
    import zstandard

    counted = _Counted(f)
    reader = zstandard.ZstdDecompressor().stream_reader(
        counted, read_size=SAMPLE_STEP, read_across_frames=True
    )
    text = 0
    while text < SAMPLE_TEXT and counted.read_bytes < SAMPLE_INPUT:
        out = reader.read(SAMPLE_OUT)
        if not out:
            return text, counted.read_bytes, True
        text += len(out)
    return text, counted.read_bytes, False


def _sample_stdlib(f: IO[bytes], compression: str) -> tuple[int, int, bool]:
    """As _sample_zstd, for gzip (its first member) and xz, each step's output bounded."""
    gzip_ = compression == "gzip"
    stream = zlib.decompressobj(wbits=31) if gzip_ else lzma.LZMADecompressor()
    text = used = 0
    data = b""
    while text < SAMPLE_TEXT and used < SAMPLE_INPUT and not stream.eof:
        if not data and (gzip_ or stream.needs_input):
            data = f.read(SAMPLE_STEP)
            if not data:
                break
            used += len(data)
        text += len(stream.decompress(data, SAMPLE_OUT))
        data = stream.unconsumed_tail if gzip_ else b""
    if stream.eof:  # the first member ends here: the file too, or not
        used -= len(stream.unused_data) + len(data)
        if not stream.unused_data and not data and not f.read(1):
            return text, used, True
    return text, used, False


class _Counted(io.RawIOBase):
    """A binary file that counts the bytes read from it."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw, self.read_bytes = raw, 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = self.raw.readinto(b)
        self.read_bytes += n or 0
        return n


@functools.lru_cache(maxsize=4)
def _member_sizes(path: str, size: int, mtime_ns: int) -> dict[str, int]:
    """Every member's size, read once per archive (a plan asks for each of its members)."""
    with zipfile.ZipFile(path) as archive:
        return {info.filename: info.file_size for info in archive.infolist()}


def members(path: str | Path) -> list[str]:
    """The file members of a zip archive, in archive order; none, or two with one name
    (only the last could be read), is an error."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = [i.filename for i in archive.infolist() if not i.is_dir()]
    except (OSError, zipfile.BadZipFile) as e:
        raise UserError(
            f"{path}: not a readable zip archive ({e}); it may be cut short: get the whole "
            "file again"
        ) from None
    if not names:
        raise UserError(f"{path}: the zip archive holds no file; there is nothing to tokenize")
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise UserError(
                f"{path}: the zip archive holds the member name {name!r} twice, and only the "
                "last of them could be read: rebuild the archive with distinct names"
            )
        seen.add(name)
    return names


def _zstd_open(path: str | Path) -> IO[bytes]:
    try:
        import zstandard
    except ImportError:
        raise UserError(
            f"{path}: zstd-compressed; install the optional package: pip install 'corpusprep[zstd]'"
        ) from None
    raw = open(path, "rb")  # noqa: SIM115 - closed with the reader
    try:
        whole = _frames_whole(raw.fileno())  # the file opened, not its name again
        if whole is None:
            reader: io.RawIOBase = _ZstdStepReader(raw, zstandard)
        else:
            counted = _Counted(raw)
            stream = zstandard.ZstdDecompressor().stream_reader(
                counted, read_size=ZSTD_READ, read_across_frames=True, closefd=True
            )
            reader = _ZstdReader(stream, counted, whole)
    except BaseException:
        raw.close()
        raise
    # the readers have read()/readinto() but no readline(): buffered like any binary file
    return io.BufferedReader(reader, ZSTD_BUFFER)


# text decompressed at a time: in 64 KiB steps between encoder calls, which push zstd's
# window (MBs) out of the cache, it took 3x as long as alone; 1 MiB steps, 1.7x
ZSTD_BUFFER = 1 << 20
ZSTD_READ = 1 << 16  # compressed bytes zstandard reads at a time
ZSTD_MAGIC = 0xFD2FB528
SKIPPABLE = range(0x184D2A50, 0x184D2A60)  # skippable frames' magic numbers
BYTES_PER_BLOCK = 2048  # blocks smaller than this on average: not walked (see _frames_whole)


def _frames_whole(fd: int) -> Optional[int]:
    """The file's size if it ends where a zstd frame ends, -1 if it ends inside one (or is
    empty), from the frames' headers and their blocks' 3-byte headers alone (RFC 8878),
    where zstandard's reader would give a short text at a cut without a word. A few reads
    per 128 KiB of text (about 1 ms per 10 MB); None, to be read by _ZstdStepReader, when
    the blocks are tiny (a walk in Python would cost more than decompressing) or a frame
    is not one this walk knows (zstd then reports it, or reads a legacy frame)."""
    walked = _walk_frames(fd)
    return None if walked is None else walked[0]


def _walk_frames(fd: int) -> Optional[tuple[int, int]]:
    """(_frames_whole's answer, the most text the frames can hold): a frame that records
    its size holds that, else each block at most its own size (raw, RLE) or the frame's
    largest block, min(window, 128 KiB) (compressed). None as for _frames_whole."""
    if not hasattr(os, "pread"):  # Windows: the exact reader
        return None
    size = os.fstat(fd).st_size

    def at(offset: int, n: int) -> bytes:
        return os.pread(fd, n, offset)  # the file's position stays where zstd reads

    pos = blocks = bound = 0
    while pos < size:
        head = at(pos, 18)  # magic, descriptor, window, dictionary id, content size
        if len(head) < 4:
            return -1, bound
        magic = int.from_bytes(head[:4], "little")
        if magic in SKIPPABLE:
            if len(head) < 8:
                return -1, bound
            pos += 8 + int.from_bytes(head[4:8], "little")
            continue
        if magic != ZSTD_MAGIC or len(head) < 5:
            return None if magic != ZSTD_MAGIC else (-1, bound)
        flags = head[4]  # the frame header descriptor
        single = flags >> 5 & 1
        at_size = 5 + (not single) + (0, 1, 2, 4)[flags & 3]
        size_bytes = (single, 2, 4, 8)[flags >> 6]
        if len(head) < at_size + size_bytes:
            return -1, bound
        recorded = int.from_bytes(head[at_size : at_size + size_bytes], "little")
        recorded += 256 if size_bytes == 2 else 0
        if single:  # the window is the content
            window = recorded
        else:
            exponent, mantissa = head[5] >> 3, head[5] & 7
            window = (1 << 10 + exponent) + ((1 << 10 + exponent) >> 3) * mantissa
        largest = min(window, 1 << 17)
        frame_bound = 0
        pos += at_size + size_bytes
        last = 0
        while not last:
            block = at(pos, 3)
            if len(block) < 3:
                return -1, bound
            header = int.from_bytes(block, "little")
            last, kind, block_size = header & 1, header >> 1 & 3, header >> 3
            blocks += 1
            if kind == 3 or block_size > 1 << 17:  # reserved, or larger than a block may be
                return None  # corrupt: zstd itself says so
            if blocks > 64 + pos // BYTES_PER_BLOCK:  # tiny blocks
                return None
            frame_bound += largest if kind == 2 else block_size  # raw, RLE: their size
            pos += 3 + (1 if kind == 1 else block_size)  # an RLE block: one byte
        bound += recorded if size_bytes else frame_bound
        pos += 4 * (flags >> 2 & 1)  # the content checksum
    return (size if 0 < pos == size else -1), bound


class _ZstdReader(io.RawIOBase):
    """zstandard's stream reader (every frame; each call's output bounded by the buffer it
    fills, so a bomb takes no memory), and an EOFError where the text ends short: the
    file ended inside a frame, or zstd read other bytes than those walked (the file grew
    or shrank while it was read)."""

    def __init__(self, stream: Any, counted: _Counted, whole: int) -> None:
        self.stream, self.counted, self.whole = stream, counted, whole

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        n = self.stream.readinto(b)
        if not n and len(b) and self.counted.read_bytes != self.whole:
            raise EOFError("the stream ends inside a zstd frame")
        return n

    def close(self) -> None:
        self.stream.close()
        super().close()


class _ZstdStepReader(io.RawIOBase):
    """Every frame of a zstd stream, and an EOFError when the stream ends inside a frame,
    decided from the bytes it decompresses: for files whose headers _frames_whole cannot
    walk cheaply (tiny blocks, frames it does not know).

    zstandard's own reader returns a short text at a cut without a word. Here each frame
    goes through its own decompressobj, which says when the frame is complete (eof); the
    compressed bytes go in ZSTD_IN bytes at a time, so one call decompresses to at most
    about ZSTD_IN * 32 KiB (zstd's largest ratio: a 4-byte block repeating one byte 128 KiB
    times) and memory stays bounded even for a bomb (32 MB). Calls are gathered until
    FILL_BYTES come out (text, ~4x, gives ~4 KB a call): the Python around each call, not
    zstd, was the cost (3x zstd's own time for 4 KB steps)."""

    ZSTD_IN = 1024
    FILL_BYTES = 1 << 18
    WRITE_SIZE = 1 << 15  # zstandard's output step within a call (its default: 128 KiB)

    def __init__(self, raw: IO[bytes], zstandard) -> None:
        self.raw, self.zstd = raw, zstandard.ZstdDecompressor()
        self.obj = self.zstd.decompressobj(write_size=self.WRITE_SIZE)
        self.started = False  # the current frame has had input
        self.out, self.pos = memoryview(b""), 0
        self.input, self.at = b"", 0  # compressed bytes read, and how many went in

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        while self.pos == len(self.out):
            if not self._fill():
                return 0
        n = min(len(b), len(self.out) - self.pos)
        b[:n] = self.out[self.pos : self.pos + n]
        self.pos += n
        return n

    def _fill(self) -> bool:
        """Decompress the next FILL_BYTES or so; False at the end of the stream."""
        chunks, size = [], 0
        while size < self.FILL_BYTES and self._more():
            chunk = self._step()
            chunks.append(chunk)
            size += len(chunk)
        self.out, self.pos = memoryview(b"".join(chunks)), 0
        return bool(chunks)

    def _more(self) -> bool:
        """Whether input is left (read more when it runs out); at the end of the stream,
        an EOFError if it ended inside a frame."""
        if self.at == len(self.input):
            self.input, self.at = self.raw.read(1 << 16), 0
            if not self.input:
                if self.started or not self.raw.tell():
                    raise EOFError("the stream ends inside a zstd frame")
                return False
        return True

    def _step(self) -> bytes:
        """Decompress the next ZSTD_IN bytes of input (at most ~32 MB out)."""
        if self.obj.eof:  # the previous frame is complete: the next one starts here
            self.obj, self.started = self.zstd.decompressobj(write_size=self.WRITE_SIZE), False
        chunk = memoryview(self.input)[self.at : self.at + self.ZSTD_IN]  # no copy
        self.at += len(chunk)
        out = self.obj.decompress(chunk)
        self.started = True
        if self.obj.eof:  # the frame ended inside the chunk: the rest starts the next one
            self.input, self.at = bytes(self.obj.unused_data) + self.input[self.at :], 0
            self.started = False
        return out

    def close(self) -> None:
        self.raw.close()
        super().close()
