"""A text file downloaded once into a local cache, then read from there.

The download streams into a temporary file in the cache folder, hashing as it goes, and is
renamed into place only when it is complete and its sha256 matches: a cut connection or a
wrong file never enters the cache. Later runs read the cached copy and need no network,
so a machine without internet works once the file is in the cache (or with source=file).
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from pathlib import Path
from typing import Any, Optional
from urllib.parse import unquote, urlsplit

from corpusprep.errors import UserError
from corpusprep.formats import InputFile
from corpusprep.sources import Source, check_text_file, input_files

CHUNK = 1 << 20


def default_cache_dir() -> Path:
    """$CORPUSPREP_CACHE_DIR, else $XDG_CACHE_HOME/corpusprep, else ~/.cache/corpusprep."""
    if os.environ.get("CORPUSPREP_CACHE_DIR"):
        return Path(os.environ["CORPUSPREP_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "corpusprep"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


class _Transient(Exception):
    """A failure worth another attempt: connection trouble, a cut transfer, HTTP 5xx/429."""


class UrlSource(Source):
    def __init__(
        self,
        url: str,
        sha256: Optional[str] = None,
        cache_dir: Optional[str] = None,
        timeout: float = 30,
        retries: int = 3,
        headers: Optional[dict[str, str]] = None,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        self.headers = dict(headers or {})  # e.g. authorization for gated files (source=hf)
        if not re.match(r"^https?://[^/]+", str(url or "")):
            raise UserError(
                f"source.url={url!r}: not an http(s) URL; for a local file use "
                "source=file source.path=FILE"
            )
        if sha256 is not None and not re.fullmatch(r"[0-9a-fA-F]{64}", str(sha256)):
            raise UserError(f"source.sha256={sha256!r}: must be 64 hex digits (or null)")
        if isinstance(retries, bool) or int(retries) < 0:
            raise UserError(f"source.retries={retries!r}: must be 0 or more")
        self.url = str(url)
        self.sha256 = str(sha256).lower() if sha256 else None
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
        self.timeout = float(timeout)
        self.retries = int(retries)

    def cache_path(self) -> Path:
        """Where this URL's file lives in the cache: a hash of the URL plus its file name."""
        name = unquote(Path(urlsplit(self.url).path).name) or "download"
        name = re.sub(r"[^A-Za-z0-9._-]", "_", name)[-100:]
        key = hashlib.sha256(self.url.encode()).hexdigest()[:16]
        return self.cache_dir / f"{key}-{name}"

    def files(self, progress: bool = True) -> list[InputFile]:
        return input_files([self.local_path(progress)], self.options)

    def local_path(self, progress: bool = True) -> Path:
        path = self.cache_path()
        if not path.is_file():
            self._download(path, progress)
        elif self.sha256 and (found := sha256_file(path)) != self.sha256:
            raise UserError(
                f"{path}: the cached copy of {self.url} has sha256 {found}, expected "
                f"{self.sha256}; delete the file to download it again"
            )
        check_text_file(path, f"delete it to download {self.url} again")
        return path

    def describe(self) -> dict[str, Any]:
        return {"kind": "url", "url": self.url, "cache_path": str(self.cache_path())}

    def _download(self, dest: Path, progress: bool) -> None:
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UserError(
                f"cannot create the download cache {dest.parent}: {e.strerror}; "
                "set source.cache_dir or CORPUSPREP_CACHE_DIR to a writable folder"
            ) from None
        error = None
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(min(2 ** (attempt - 1), 30))  # 1 s, 2 s, 4 s, ...
            try:
                self._fetch(dest, progress)
                return
            except _Transient as e:
                error = e
        raise UserError(
            f"could not download {self.url}: {error} "
            f"(after {self.retries + 1} attempt{'s' if self.retries else ''}); "
            f"put the file at {dest} or use source=file source.path=FILE"
        )

    def _fetch(self, dest: Path, progress: bool) -> None:
        import requests
        from tqdm import tqdm

        part = dest.with_name(f".{dest.name}.{os.getpid()}.part")
        try:
            # identity: the bytes on disk are the file's bytes, and Content-Length counts them
            with requests.get(
                self.url,
                stream=True,
                timeout=(self.timeout, self.timeout),
                headers={**self.headers, "Accept-Encoding": "identity"},
            ) as r:
                if r.status_code >= 500 or r.status_code == 429:
                    raise _Transient(f"HTTP {r.status_code} {r.reason}")
                if r.status_code != 200:
                    raise UserError(
                        f"could not download {self.url}: HTTP {r.status_code} {r.reason}; "
                        "check source.url"
                    )
                total = int(r.headers.get("Content-Length") or 0) or None
                digest, size = hashlib.sha256(), 0
                with (
                    open(part, "wb") as f,
                    tqdm(
                        total=total,
                        unit="B",
                        unit_scale=True,
                        desc=f"download {dest.name}",
                        disable=None if progress else True,
                        leave=False,
                    ) as bar,
                ):
                    for chunk in r.iter_content(CHUNK):
                        f.write(chunk)
                        digest.update(chunk)
                        size += len(chunk)
                        bar.update(len(chunk))
                if total is not None and size != total:
                    raise _Transient(f"the connection closed after {size} of {total} bytes")
            found = digest.hexdigest()
            if self.sha256 and found != self.sha256:
                raise UserError(
                    f"{self.url}: the download has sha256 {found}, expected {self.sha256}; "
                    "check source.url and source.sha256 (nothing was cached)"
                )
            os.replace(part, dest)
        except requests.RequestException as e:
            if "NameResolution" in repr(e) or "Name or service not known" in str(e):
                # offline or a typo in the host: retrying will not help
                host = urlsplit(self.url).hostname
                raise UserError(
                    f"could not download {self.url}: cannot resolve host {host!r} (offline?); "
                    f"put the file at {dest} or use source=file source.path=FILE"
                ) from None
            raise _Transient(_reason(e)) from None
        except OSError as e:
            raise UserError(f"cannot write the download to {part}: {e.strerror}") from None
        finally:
            part.unlink(missing_ok=True)


def _reason(e: Exception) -> str:
    import requests

    if isinstance(e, requests.Timeout):
        return "timed out"
    if isinstance(e, requests.exceptions.ChunkedEncodingError):
        return "the connection was cut during the transfer"
    if isinstance(e, requests.ConnectionError):
        return "cannot connect" + (": connection refused" if "refused" in str(e) else "")
    return type(e).__name__
