"""A Hugging Face Hub dataset, read through the Hub's Parquet conversion (no `datasets`).

The Hub converts every public dataset to Parquet and lists the files of one config and
split at GET {endpoint}/api/datasets/{dataset}/parquet/{config}/{split} (a JSON list of
URLs). The listing is cached next to the downloads, keyed by endpoint, dataset, config and
split; each file is downloaded once through UrlSource (cache, retries, temporary file then
rename, progress). Once both are cached, later runs need no network at all.

HF_TOKEN, when set, is sent as `Authorization: Bearer ...` with the listing request and
the file downloads (gated or private datasets), and only where it is safe: the endpoint
must be the Hub, the one $HF_ENDPOINT names (the user's environment, never a config
file: a downloaded preset could name any host), or on this machine; the URL must be on
the endpoint itself (scheme, host and port; huggingface.co and hf.co are one Hub), over
https, or plain http to a loopback address (a local stand-in: the token never leaves the
machine). A listed URL on another host gets no token, and requests drops it on a
redirect to another host (the Hub's CDN links are signed: they need none).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from pathlib import Path
from typing import Any, NoReturn, Optional
from urllib.parse import quote, urlsplit

from corpusprep.errors import UserError
from corpusprep.formats import InputFile
from corpusprep.redact import redact
from corpusprep.sources import Source, input_files
from corpusprep.sources.url import UrlSource, _reason, default_cache_dir

DATASET = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")


class _Transient(Exception):
    """Worth another attempt: connection trouble, HTTP 5xx or 429."""


class HfSource(Source):
    def __init__(
        self,
        dataset: str,
        config: str = "default",
        split: str = "train",
        endpoint: str = "https://huggingface.co",
        cache_dir: Optional[str] = None,
        timeout: float = 30,
        retries: int = 3,
        deadline: Optional[float] = 3600,  # seconds for each file's download (see UrlSource)
        **options: Any,
    ) -> None:
        super().__init__(**options)
        if not DATASET.fullmatch(str(dataset or "")):
            raise UserError(
                f"source.dataset={dataset!r}: not a Hub dataset name; "
                "use OWNER/NAME, e.g. source.dataset=Skylion007/openwebtext"
            )
        for key, value in (("config", config), ("split", split)):
            if not value or "/" in str(value):
                raise UserError(f"source.{key}={value!r}: must be a non-empty name without '/'")
        if not re.match(r"^https?://[^/]+", str(endpoint or "")):
            raise UserError(
                f"source.endpoint={endpoint!r}: not an http(s) URL, e.g. https://huggingface.co"
            )
        if isinstance(retries, bool) or int(retries) < 0:
            raise UserError(f"source.retries={retries!r}: must be 0 or more")
        self.dataset = str(dataset)
        self.config = str(config)
        self.split = str(split)
        self.endpoint = str(endpoint).rstrip("/")
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
        self.timeout = float(timeout)
        self.retries = int(retries)
        self.deadline = deadline

    @property
    def what(self) -> str:
        return f"dataset {self.dataset!r} (config {self.config!r}, split {self.split!r})"

    def listing_url(self) -> str:
        parts = (self.dataset, self.config, self.split)
        ds, config, split = (quote(p, safe="/") for p in parts)
        return f"{self.endpoint}/api/datasets/{ds}/parquet/{config}/{split}"

    def listing_path(self) -> Path:
        """Where the listing lives in the cache: a hash of what it is the listing of."""
        what = "\n".join((self.endpoint, self.dataset, self.config, self.split))
        key = hashlib.sha256(what.encode()).hexdigest()[:16]
        label = re.sub(r"[^A-Za-z0-9._-]", "_", f"{self.dataset}-{self.config}-{self.split}")
        return self.cache_dir / f"{key}-hf-{label[-100:]}.json"

    def urls(self) -> list[str]:
        """The Parquet files' URLs: from the cached listing, else from the Hub (then cached);
        sorted, numbers compared as numbers (2.parquet before 10.parquet)."""
        path = self.listing_path()
        if path.is_file():
            try:
                urls = _parse(path.read_bytes())
            except ValueError as e:
                raise UserError(
                    f"{path}: the cached Parquet listing of {self.what} is unreadable ({e}); "
                    "delete it to fetch the listing again"
                ) from None
        else:
            body = self._fetch_listing()
            try:
                urls = _parse(body)
            except ValueError as e:
                raise UserError(
                    f"{redact(self.listing_url())}: not a Parquet file listing ({e}); "
                    "check source.endpoint"
                ) from None
            self._store(path, body)
        if not urls:
            raise UserError(
                f"source=hf: the Hub lists no Parquet files for {self.what}; "
                "check source.config and source.split"
            )
        return sorted(urls, key=_natural)

    def files(self, progress: bool = True) -> list[InputFile]:
        paths = []
        for url in self.urls():
            src = UrlSource(url, cache_dir=str(self.cache_dir), timeout=self.timeout,
                            retries=self.retries, headers=_auth(url, self.endpoint),
                            deadline=self.deadline, max_bytes=self.options.max_bytes)  # fmt: skip
            try:
                paths.append(src.local_path(progress))
            except UserError as e:
                if re.search(r"HTTP 40[13]\b", str(e)):
                    raise UserError(
                        f"{e.args[0].split('; ')[0]}: {self.what} is gated or private; "
                        "accept its terms on the Hub and set HF_TOKEN"
                    ) from None
                raise
        return input_files(paths, self.options)

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "hf",
            "dataset": self.dataset,
            "config": self.config,
            "split": self.split,
            "endpoint": self.endpoint,
            "url": self.listing_url(),
            "listing_path": str(self.listing_path()),
        }

    # --- the listing ----------------------------------------------------------------------

    def _fetch_listing(self) -> bytes:
        url, error = self.listing_url(), None
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(min(2 ** (attempt - 1), 30))  # 1 s, 2 s, 4 s, ...
            try:
                return self._get(url)
            except _Transient as e:
                error = str(e)
        self._offline(f"{error} (after {self.retries + 1} attempt{'s' if self.retries else ''})")

    def _get(self, url: str) -> bytes:
        import requests

        headers = {"Accept": "application/json", **_auth(url, self.endpoint)}
        try:
            r = requests.get(url, timeout=(self.timeout, self.timeout), headers=headers)
            body = r.content
        except requests.RequestException as e:
            if "NameResolution" in repr(e) or "Name or service not known" in str(e):
                host = urlsplit(url).hostname
                self._offline(f"cannot resolve host {host!r} (offline?)")
            raise _Transient(_reason(e)) from None
        if r.status_code >= 500 or r.status_code == 429:
            raise _Transient(f"HTTP {r.status_code} {r.reason}")
        if r.status_code == 404:
            raise UserError(
                f"source=hf: {redact(self.endpoint)} has no Parquet files for {self.what} (HTTP "
                f"404 from {redact(url)}); check source.dataset, source.config and source.split "
                f"(the configs and splits are listed at {redact(self.endpoint)}/api/datasets/"
                f"{self.dataset}/parquet)"
            )
        if r.status_code in (401, 403):
            if "Authorization" in headers:
                why = "HF_TOKEN is set but not allowed"
            elif os.environ.get("HF_TOKEN"):  # withheld: see token_endpoint
                why = (
                    "HF_TOKEN was not sent: it goes only over https to the Hub or to the "
                    "endpoint $HF_ENDPOINT names"
                )
            else:
                why = "HF_TOKEN is not set: not allowed"
            raise UserError(
                f"source=hf: HTTP {r.status_code} for {self.what} from {redact(url)}: it does "
                f"not exist, or it is gated or private and {why}; check source.dataset, "
                "accept the dataset's terms on the Hub and set HF_TOKEN"
            )
        if r.status_code != 200:
            raise UserError(
                f"source=hf: HTTP {r.status_code} {r.reason} from {redact(url)}; "
                "check source.endpoint and source.dataset"
            )
        return body

    def _offline(self, reason: str) -> NoReturn:
        raise UserError(
            f"source=hf: cannot fetch the Parquet file list of {self.what} from "
            f"{redact(self.listing_url())}: {reason}; run once with network (the list and the "
            f"files are then cached in {self.cache_dir}), or download the Parquet files and use "
            "source=files source.glob='DIR/*.parquet'"
        )

    def _store(self, path: Path, body: bytes) -> None:
        part = path.with_name(f".{path.name}.{os.getpid()}.part")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            part.write_bytes(body)
            os.replace(part, path)
        except OSError as e:
            raise UserError(
                f"cannot write the Parquet listing to {path}: {e.strerror}; set "
                "source.cache_dir or CORPUSPREP_CACHE_DIR to a writable folder"
            ) from None
        finally:
            part.unlink(missing_ok=True)


def _parse(body: bytes) -> list[str]:
    """The URLs of a listing: a JSON list of http(s) URLs."""
    try:
        urls = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ValueError("not JSON") from None
    if not isinstance(urls, list):
        raise ValueError(f"a JSON {type(urls).__name__}, not a list of URLs")
    for url in urls:
        if not isinstance(url, str) or not re.match(r"^https?://[^/]+", url):
            raise ValueError(f"{url!r} is not an http(s) URL")
    return urls


HUB_HOSTS = ("huggingface.co", "hf.co")  # one Hub, two names


def _auth(url: str, endpoint: str) -> dict[str, str]:
    """The Authorization header for `url`: HF_TOKEN, if set, `url` is on the endpoint and
    the endpoint is one the token may go to (token_endpoint)."""
    token = os.environ.get("HF_TOKEN")
    if not token or not token_endpoint(endpoint):
        return {}
    try:
        to, hub = _origin(url), _origin(endpoint)
    except ValueError:  # a port that is not a number
        return {}
    same = to == hub or (to[::2] == ("https", 443) and {to[1], hub[1]} <= set(HUB_HOSTS))
    secure = to[0] == "https" or (to[0] == "http" and _loopback(to[1]))
    return {"Authorization": f"Bearer {token}"} if same and secure else {}


def token_endpoint(endpoint: str) -> bool:
    """Whether HF_TOKEN may go to `endpoint`: the Hub (https://huggingface.co, hf.co), the
    endpoint $HF_ENDPOINT names (the user's own setting, as huggingface_hub reads it), or
    one on this machine (loopback: a local stand-in). Never one that only a config file
    names: a downloaded preset could point source.endpoint at any host to collect it."""
    try:
        hub = _origin(endpoint)
        mirror = _origin(os.environ["HF_ENDPOINT"]) if os.environ.get("HF_ENDPOINT") else None
    except ValueError:
        return False
    the_hub = hub[::2] == ("https", 443) and hub[1] in HUB_HOSTS
    return the_hub or hub == mirror or _loopback(hub[1])


def _origin(url: str) -> tuple[str, Optional[str], Optional[int]]:
    """(scheme, host, port) of a URL, the port filled in; ValueError for a bad port."""
    parts = urlsplit(url.rstrip("/"))
    default = {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, parts.hostname, parts.port or default


def _loopback(host: Optional[str]) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host or "").is_loopback
    except ValueError:
        return False


def _natural(text: str) -> list:
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", text)]
