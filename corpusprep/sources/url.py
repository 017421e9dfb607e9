"""A text file downloaded once into a local cache, then read from there.

The download streams into a temporary file in the cache folder, hashing as it goes, and is
renamed into place only when it is complete and its sha256 matches: a cut connection or a
wrong file never enters the cache. Later runs read the cached copy and need no network,
so a machine without internet works once the file is in the cache (or with source=file).

A hostile server cannot hold a run forever or fill the disk: the whole download of a file
has a deadline (source.deadline; the timeout alone restarts with every byte received), and
source.max_bytes caps its size.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import re
import sys
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional
from urllib.parse import unquote, urlsplit

from corpusprep._paths import default_cache_dir
from corpusprep.errors import StillRunning, UserError, check_path, checked_number, interruptible
from corpusprep.formats import InputFile
from corpusprep.redact import redact
from corpusprep.sources import (
    Source,
    check_text_file,
    input_files,
    new_part,
    publish,
    remove_stale_parts,
)
from corpusprep.writer import file_sha256

CHUNK = 1 << 20
# (URL, sha256) -> the compressed copy in corpusprep/data, byte-identical to the download,
# and the download's size (a cached copy of another size is told without reading it)
BUNDLED = {
    ("https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
     "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"):
        ("tinyshakespeare.txt.xz", 1_115_394),
}  # fmt: skip


def _cache_error(dest: Path, e: OSError, size: Optional[int]) -> UserError:
    """The one line for a download cache that cannot take the file: the folder (not the
    hidden file being written), why, and how big the file is."""
    need = ""
    if size:
        shown = f"{size / 1e3:.0f} kB" if size < 999_500 else f"{size / 1e6:.1f} MB"
        need = f" (the file is {shown})"
    room = "free some space there, or " if e.errno in (errno.ENOSPC, errno.EDQUOT) else ""
    return UserError(
        f"cannot write the download to the cache {dest.parent}: {e.strerror}{need}; {room}"
        "set source.cache_dir or CORPUSPREP_CACHE_DIR to another folder"
    )


def _remove(part: Optional[Path]) -> None:
    """A partial download, gone (on a read-only disk there is none to remove)."""
    if part is not None:
        with contextlib.suppress(OSError):
            part.unlink(missing_ok=True)


class _Transient(Exception):
    """A failure worth another attempt: connection trouble, a cut transfer, HTTP 5xx/429."""


class _Late(Exception):
    """The deadline passed: no attempt is worth starting."""


class UrlSource(Source):
    def __init__(
        self,
        url: str,
        sha256: Optional[str] = None,
        cache_dir: Optional[str] = None,
        timeout: float = 30,
        retries: int = 3,
        headers: Optional[dict[str, str]] = None,
        deadline: Optional[float] = 3600,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        # e.g. authorization for gated files (source=hf); a value as written (Hydra reads
        # X-Api-Key=12345678 as a number, which requests refuses to send)
        if headers is not None and not isinstance(headers, dict):  # +source.headers=5
            raise UserError(  # not shown: it may be a token (+source.headers='Bearer x')
                "source.headers: must be HTTP headers, one key each: +source.headers.NAME=VALUE "
                "(e.g. '+source.headers.Accept=text/plain')"
            )
        self.headers = {str(k): str(v) for k, v in (headers or {}).items()}
        if not re.match(r"^https?://[^/]+", str(url or "")):
            raise UserError(
                f"source.url={redact(url)!r}: not an http(s) URL; for a local file use "
                "source=file source.path=FILE"
            )
        if sha256 is not None and not re.fullmatch(r"[0-9a-fA-F]{64}", str(sha256)):
            raise UserError(f"source.sha256={sha256!r}: must be 64 hex digits (or null)")
        self.retries = int(checked_number(retries, "source.retries"))
        self.timeout = checked_number(timeout, "source.timeout", whole=False, above=True,
                                      hint=" (seconds)")  # fmt: skip
        if deadline is not None and (
            isinstance(deadline, bool) or not isinstance(deadline, (int, float)) or deadline <= 0
        ):
            raise UserError(
                f"source.deadline={deadline!r}: must be a positive number of seconds (or null)"
            )
        self.deadline = None if deadline is None else float(deadline)
        self.url = str(url)
        self.sha256 = str(sha256).lower() if sha256 else None
        check_path("source.cache_dir", cache_dir)
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()

    def cache_path(self) -> Path:
        """Where this URL's file lives in the cache: a hash of the URL plus its file name."""
        name = unquote(Path(urlsplit(self.url).path).name) or "download"
        name = re.sub(r"[^A-Za-z0-9._-]", "_", name)[-100:]
        # the whole URL, credentials too: another user's token may fetch other content, which
        # must not be served from this one's copy
        key = hashlib.sha256(self.url.encode()).hexdigest()[:16]
        return self.cache_dir / f"{key}-{name}"

    def files(self, progress: bool = True) -> list[InputFile]:
        return input_files([self.local_path(progress)], self.options)

    def local_path(self, progress: bool = True) -> Path:
        path = self.cache_path()
        try:
            cached = path.is_file()
        except OSError as e:  # a folder on the way this user may not enter
            raise UserError(
                f"{path}: cannot look in the download cache ({e.strerror}); set "
                "source.cache_dir or CORPUSPREP_CACHE_DIR to a folder you can read and write"
            ) from None
        if cached:
            if self.sha256:
                self._check_cached(path)
        elif not self._from_bundle(path):  # (both check what they put there)
            self._download(path, progress)
        check_text_file(path, f"delete it to download {redact(self.url)} again")
        return path

    def _check_cached(self, path: Path) -> None:
        """The cached copy has the pinned sha256; for a URL corpusprep ships, a copy of
        another size is told by its size (a planted sparse file of many GB is not read)."""
        fix = "delete the file to download it again"
        try:
            size, bundled = path.stat().st_size, self._bundled()
            if bundled is not None and size != bundled[1]:
                raise UserError(f"{path}: the cached copy of {redact(self.url)} is {size:,} "
                                f"bytes, not {bundled[1]:,}; {fix}")  # fmt: skip
            found = file_sha256(path, keep=True)  # the input's sha256 too: not read again
        except OSError as e:
            raise UserError(
                f"{path}: cannot read the cached copy of {redact(self.url)} ({e.strerror}); "
                f"{fix}, or set source.cache_dir to another folder"
            ) from None
        if found != self.sha256:
            raise UserError(f"{path}: the cached copy of {redact(self.url)} has sha256 {found}, "
                            f"expected {self.sha256}; {fix}")  # fmt: skip

    def _bundled(self) -> Optional[tuple[str, int]]:
        """The copy corpusprep ships of this URL and pinned sha256 (its name in
        corpusprep/data, the download's size), if any."""
        return BUNDLED.get((self.url, self.sha256 or ""))

    def describe(self) -> dict[str, Any]:
        described = {"kind": "url", "url": self.url, "cache_path": str(self.cache_path())}
        if self.bundled:
            described["copy"] = "bundled with corpusprep (same sha256 as the URL's file)"
        return described

    bundled = False  # whether the cache was filled from the copy corpusprep ships

    def _from_bundle(self, dest: Path) -> bool:
        """Fill the cache from the copy inside the package, if this URL and pinned sha256
        are one corpusprep ships (tiny shakespeare: the nanoGPT presets work offline)."""
        bundled = self._bundled()
        if bundled is None:
            return False
        name = bundled[0]
        import lzma
        from importlib.resources import files

        try:
            data = lzma.decompress(files("corpusprep.data").joinpath(name).read_bytes())
        except (OSError, lzma.LZMAError, ModuleNotFoundError):
            return False  # not shipped in this install: download as usual
        if hashlib.sha256(data).hexdigest() != self.sha256:
            return False
        part = None
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            part, f = new_part(dest)
            with f:
                f.write(data)
            publish(part, dest, self.sha256)
        except OSError as e:
            raise _cache_error(dest, e, len(data)) from None
        finally:
            _remove(part)
        self.bundled = True
        return True

    def _download(self, dest: Path, progress: bool) -> None:
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UserError(
                f"cannot create the download cache {dest.parent}: {e.strerror}; "
                "set source.cache_dir or CORPUSPREP_CACHE_DIR to a writable folder"
            ) from None
        remove_stale_parts(dest, self.timeout)
        error = None
        end = None if self.deadline is None else time.monotonic() + self.deadline
        try:
            for attempt in range(self.retries + 1):
                if attempt:
                    pause = min(2 ** (attempt - 1), 30)  # 1 s, 2 s, 4 s, ...
                    if end is not None and time.monotonic() + pause >= end:
                        raise _Late(f"{error}; no time left for another attempt")
                    time.sleep(pause)
                try:
                    self._fetch(dest, progress, end)
                    return
                except _Transient as e:
                    error = e
        except _Late as e:
            raise UserError(
                f"could not download {redact(self.url)} within source.deadline={self.deadline:g} s "
                f"({e}); nothing was cached; raise source.deadline (or set it to null) for a "
                f"slow connection, or put the file at {dest}"
            ) from None
        raise UserError(
            f"could not download {redact(self.url)}: {error} "
            f"(after {self.retries + 1} attempt{'s' if self.retries else ''}); "
            f"put the file at {dest} or use source=file source.path=FILE"
        )

    def _fetch(self, dest: Path, progress: bool, end: Optional[float]) -> None:
        import requests
        import urllib3
        from tqdm import tqdm

        part, cap, total = None, self.options.max_bytes, None
        left = None if end is None else max(end - time.monotonic(), 0.1)
        timeout = self.timeout if left is None else min(self.timeout, left)  # no wait past the end
        try:
            # identity: the bytes on disk are the file's bytes, and Content-Length counts them
            with (
                _session_for(self.url, self.headers) as session,
                _by(
                    end,
                    lambda: session.get(
                        self.url,
                        stream=True,
                        timeout=(timeout, timeout),
                        headers={**self.headers, "Accept-Encoding": "identity"},
                    ),
                ) as r,
            ):
                if r.status_code >= 500 or r.status_code == 429:
                    raise _Transient(f"HTTP {r.status_code} {r.reason}")
                if r.status_code != 200:
                    raise UserError(
                        f"could not download {redact(self.url)}: HTTP {r.status_code} {r.reason}; "
                        "check source.url"
                    )
                total = self._length(r.headers.get("Content-Length"), dest)
                inflate = self._inflater(r.headers.get("Content-Encoding"), dest)
                if cap is not None and total is not None and total > cap and not inflate:
                    raise self._too_big(f"{total:,} bytes")
                digest, size, sent = hashlib.sha256(), 0, 0
                # read1: whatever has arrived, so the deadline is checked however slowly the
                # bytes come (iter_content waits for a whole chunk; urllib3 < 2 has no read1)
                read = getattr(r.raw, "read1", None) or r.raw.read
                part, f = new_part(dest)
                with (
                    f,
                    tqdm(
                        total=total,
                        unit="B",
                        unit_scale=True,
                        desc=f"download {dest.name}",
                        disable=None if progress else True,
                        leave=False,
                    ) as bar,
                ):
                    while received := read(CHUNK, decode_content=False):
                        sent += len(received)  # what Content-Length counts
                        for chunk in inflate.feed(received) if inflate else (received,):
                            f.write(chunk)
                            digest.update(chunk)
                            size += len(chunk)
                            if cap is not None and size > cap:
                                raise self._too_big(f"{size:,} bytes so far")
                        bar.update(len(received))
                        if end is not None and time.monotonic() > end:
                            raise _Late(f"{sent:,} of {total or '?'} bytes in")
                if total is not None and sent != total:
                    raise _Transient(f"the connection closed after {sent} of {total} bytes")
                if inflate is not None and sent and not inflate.ended():
                    raise _Transient("the transfer ended before its compressed stream did")
                if size == 0:
                    raise UserError(
                        f"could not download {redact(self.url)}: the server sent an empty file; "
                        "nothing was cached; check source.url"
                    )
            found = digest.hexdigest()
            if self.sha256 and found != self.sha256:
                raise UserError(
                    f"{redact(self.url)}: the download has sha256 {found}, expected {self.sha256}; "
                    "check source.url and source.sha256 (nothing was cached)"
                )
            if not self.sha256 and _web_page(r.headers.get("Content-Type"), dest):
                raise UserError(
                    f"could not download {redact(self.url)}: the server sent a web page "
                    f"(Content-Type: {r.headers['Content-Type']}), not the file (an error page, "
                    "or a page that shows the file); nothing was cached; check source.url (a "
                    "raw file's URL), or if the page is the text, pin it with "
                    f"source.sha256={found}"
                )
            publish(part, dest, self.sha256)
            if total is None and not inflate and not self.sha256 and not _framed(r.headers):
                print(f"corpusprep: warning: {redact(self.url)} came with no Content-Length, so "
                      f"a connection cut short cannot be told from the whole file ({size:,} "
                      f"bytes at {dest}); check it, then pin it with source.sha256={found}",
                      file=sys.stderr)  # fmt: skip
        except requests.exceptions.InvalidHeader as e:  # urllib3's check of Content-Length
            why = redact(str(e).splitlines()[0] if str(e) else "InvalidHeader")
            raise self._refused(f"the server's answer is invalid ({why})", dest) from None
        except requests.exceptions.TooManyRedirects:  # a loop: no retry will end it
            raise UserError(
                f"could not download {redact(self.url)}: the server redirects it more than "
                f"{requests.models.DEFAULT_REDIRECT_LIMIT} times (a redirect loop?); nothing "
                "was cached; check source.url"
            ) from None
        except (
            requests.exceptions.InvalidURL,  # (a redirect's: source.url is checked)
            requests.exceptions.InvalidSchema,  # a redirect to ftp:, file:, ...
            requests.exceptions.MissingSchema,
        ) as e:
            raise UserError(
                f"could not download {redact(self.url)}: {redact(str(e))}; nothing was cached; "
                "check source.url"
            ) from None
        except requests.RequestException as e:
            if "NameResolution" in repr(e) or "Name or service not known" in str(e):
                # offline or a typo in the host: retrying will not help
                host = urlsplit(self.url).hostname
                raise UserError(
                    f"could not download {redact(self.url)}: cannot resolve host {host!r} "
                    f"(offline?); put the file at {dest} or use source=file source.path=FILE"
                ) from None
            raise _Transient(_reason(e)) from None
        except urllib3.exceptions.HTTPError as e:  # from read1: urllib3's own, not requests'
            if end is not None and time.monotonic() > end:
                raise _Late(_reason(e)) from None
            raise _Transient(_reason(e)) from None
        except OSError as e:
            raise _cache_error(dest, e, total) from None
        finally:
            _remove(part)

    def _length(self, header: Optional[str], dest: Path) -> Optional[int]:
        """The body's length in bytes as Content-Length gives it (the same number repeated,
        as a proxy joins two headers, is that number); None if the server did not say. A
        value that is not a length leaves the body's end unknown (RFC 9110): an error."""
        if header is None:
            return None
        values = {v.strip() for v in header.split(",")}
        value = values.pop() if len(values) == 1 else ""
        if not (value.isascii() and value.isdigit() and len(value) <= 20):  # 20: 10**20 bytes
            raise self._refused(f"the server sent an invalid Content-Length {header.strip()!r}, "
                                "so the end of the file is unknown", dest)  # fmt: skip
        return int(value)

    def _inflater(self, header: Optional[str], dest: Path) -> Optional[_Inflate]:
        """What undoes the body's Content-Encoding (the request asked for the file as it
        is; the file is what the body decompresses to); None if nothing is to be undone, as
        for a .gz file that a server labels gzip because of its name (the file is the .gz)."""
        # "gzip, identity": identity changes nothing
        codings = [c.strip() for c in (header or "").lower().split(",")]
        encoding = ",".join(c for c in codings if c not in ("", "identity")) or "identity"
        if encoding == "identity" or dest.name.lower().endswith(OWN_SUFFIXES.get(encoding, ())):
            return None
        if encoding not in ("gzip", "x-gzip", "deflate"):
            raise self._refused(f"the server sent it compressed (Content-Encoding: {header}), "
                                "which corpusprep cannot undo", dest)  # fmt: skip
        return _Inflate(gzip=encoding != "deflate")

    def _refused(self, why: str, dest: Path) -> UserError:
        """The one line for an answer no retry will mend."""
        return UserError(
            f"could not download {redact(self.url)}: {why}; nothing was cached; put the file "
            f"at {dest} or use source=file source.path=FILE"
        )

    def _too_big(self, size: str) -> UserError:
        return UserError(
            f"could not download {redact(self.url)}: {size}, more than source.max_bytes="
            f"{self.options.max_bytes}; nothing was cached; raise source.max_bytes (or set it "
            "to null) if the file is genuine"
        )


# a file whose name says it is compressed so, labelled so by a server that goes by the name
OWN_SUFFIXES = {"gzip": (".gz", ".tgz"), "x-gzip": (".gz", ".tgz"), "zstd": (".zst",),
                "br": (".br",), "bzip2": (".bz2",), "xz": (".xz",)}  # fmt: skip


class _Inflate:
    """A gzip or deflate transfer undone as its bytes come, at most CHUNK bytes out at once
    (a small body may stand for a huge file). A stream that stops before its own end
    (gzip's trailer, deflate's last block) is a cut transfer, however the connection ended."""

    def __init__(self, gzip: bool) -> None:
        self.gzip, self.head = gzip, b""
        self.stream: Any = zlib.decompressobj(31) if gzip else None  # deflate: see _start

    def _start(self, data: bytes) -> bytes:
        """Deflate is zlib-wrapped (RFC 9110), though some servers send it raw: its first
        two bytes tell (a zlib header is a multiple of 31, method 8); b"" until they came."""
        self.head += data
        if len(self.head) < 2:
            return b""
        zlib_header = self.head[0] & 0x0F == 8 and int.from_bytes(self.head[:2], "big") % 31 == 0
        self.stream = zlib.decompressobj(15 if zlib_header else -15)
        data, self.head = self.head, b""
        return data

    def feed(self, data: bytes) -> Iterator[bytes]:
        if self.stream is None and not (data := self._start(data)):
            return
        while True:
            if self.stream.eof and data:  # gzip: another member follows; deflate: nothing may
                if not self.gzip:
                    raise _Transient("the compressed stream has bytes after its end")
                data = data.lstrip(b"\0")  # zeros that pad a gzip file, as gzip reads it
                if not data:
                    return
                self.stream = zlib.decompressobj(31)
            try:
                out = self.stream.decompress(data, CHUNK)
            except zlib.error:
                raise _Transient("the compressed stream is corrupt") from None
            if out:
                yield out
            data = self.stream.unconsumed_tail or self.stream.unused_data
            if not data and (len(out) < CHUNK or self.stream.eof):  # nothing held back
                return

    def ended(self) -> bool:
        return self.stream is not None and self.stream.eof


def _by(end: Optional[float], ask: Any) -> Any:
    """ask() (the request, up to its answer's headers), given up once the deadline has
    passed: the timeout restarts with every byte, so headers sent a byte at a time would
    hold the run for ever."""
    if end is None:
        return ask()
    try:
        return interruptible(ask, max(end - time.monotonic(), 0.1))
    except StillRunning:
        raise _Late("no complete answer from the server") from None


def _web_page(content_type: Optional[str], dest: Path) -> bool:
    """Whether the answer is an HTML page where the URL names no page (x.txt, x.jsonl):
    an error page served with 200, or a site's page showing the file instead of it."""
    media = (content_type or "").split(";")[0].strip().lower()
    page = dest.name.lower().endswith((".html", ".htm", ".xhtml"))
    return media in ("text/html", "application/xhtml+xml") and not page


def _framed(headers: Any) -> bool:
    """Whether the body's own framing tells its end (chunked: a cut is an error). As
    http.client decides it, which reads the body: only a Transfer-Encoding of exactly
    'chunked' is unchunked, any other is read to the connection's end."""
    return headers.get("Transfer-Encoding", "").lower() == "chunked"


def _origin(url: str) -> tuple[str, str, Optional[int]]:
    parts = urlsplit(url)
    try:
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:  # a port that is no number, or out of range: no one's origin
        return parts.scheme, "", -1
    return parts.scheme, (parts.hostname or "").lower(), port


def _session_for(url: str, given: dict[str, str]) -> Any:
    """A requests session that sends the headers the user gave to the URL's own scheme, host
    and port only: a redirect elsewhere gets none of them (requests drops Authorization
    alone, and a token may be under any name: X-Api-Key, Private-Token). Dropped once, they
    stay dropped for the rest of the redirects."""
    import requests

    class Session(requests.Session):
        def rebuild_auth(self, prepared: Any, response: Any) -> None:
            try:
                super().rebuild_auth(prepared, response)
            except ValueError as e:  # requests' own reading of a bad port: not a crash
                raise requests.exceptions.InvalidURL(f"a redirect to {prepared.url}: {e}") from None
            if _origin(prepared.url) != _origin(url):
                for name in given:
                    prepared.headers.pop(name, None)

    return Session()


def _reason(e: Exception) -> str:
    import requests
    import urllib3

    if isinstance(e, (requests.Timeout, urllib3.exceptions.TimeoutError)):
        return "timed out"
    if isinstance(e, (requests.exceptions.ChunkedEncodingError, urllib3.exceptions.ProtocolError)):
        return "the connection was cut during the transfer"
    if isinstance(e, requests.ConnectionError):
        return "cannot connect" + (": connection refused" if "refused" in str(e) else "")
    return type(e).__name__
