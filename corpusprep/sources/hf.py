"""A Hugging Face Hub dataset, read as `datasets.load_dataset(dataset, config, split=split)`
reads it: the repository's own data files, every one, in the same order (no `datasets`).

The Hub is asked once for the revision's commit sha and its file list (huggingface_hub's
dataset_info); the data files of the config and split are then found by `datasets`' rules
(the dataset card's `configs` / `data_files`, else its default patterns, see _Rules) and
downloaded through huggingface_hub at that sha: the user's HF cache, HF_HUB_OFFLINE,
HF_ENDPOINT, tokens and resumable downloads are the library's. The sha and the file list
are also kept in corpusprep's cache, so that offline (HF_HUB_OFFLINE=1, or the Hub out of
reach) a later run finds the same files in the HF cache.

A token goes only where it is safe (hub_token): to the Hub, to the endpoint $HF_ENDPOINT
names (the user's environment, never a config file: a downloaded preset could name any
host), or to this machine; over https, or plain http to a loopback address. Elsewhere the
library is told token=False. On a redirect to another host (the Hub's CDN links are
signed) huggingface_hub drops the token itself.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import posixpath
import re
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Optional
from urllib.parse import urlsplit

from corpusprep.errors import (
    StillRunning,
    UserError,
    check_path,
    checked_number,
    escape_controls,
    interruptible,
)
from corpusprep.formats import InputFile
from corpusprep.redact import redact
from corpusprep.sources import Source, input_files, new_part
from corpusprep.sources.url import default_cache_dir

DATASET = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")
SHA = re.compile(r"[0-9a-f]{40}")
INSTALL = "pip install 'corpusprep[hub]'"
MAX_LISTING_BYTES = 64 << 20  # a kept file list: a million files' names
# the Hub's Parquet conversion of a big dataset: only its first 5 GB, in a partial-* folder
PARTIAL = re.compile(r"[^/]+/partial-[^/]+/[^/]+\.parquet")


def _hub():
    try:
        import huggingface_hub
    except ImportError:
        raise UserError(
            f"source=hf needs the optional huggingface_hub library: {INSTALL}"
        ) from None
    return huggingface_hub


class HfSource(Source):
    def __init__(
        self,
        dataset: str,
        config: Optional[str] = None,
        split: str = "train",
        revision: str = "main",
        endpoint: str = "https://huggingface.co",
        cache_dir: Optional[str] = None,
        timeout: float = 30,
        retries: int = 3,
        deadline: Optional[float] = 3600,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        if not DATASET.fullmatch(str(dataset or "")):
            raise UserError(
                f"source.dataset={dataset!r}: not a Hub dataset name; "
                "use OWNER/NAME, e.g. source.dataset=Skylion007/openwebtext"
            )
        for key, value in (("config", config or "x"), ("split", split)):
            if not value or "/" in str(value):
                raise UserError(f"source.{key}={value!r}: must be a non-empty name without '/'")
        if not revision or not str(revision).strip():
            raise UserError(f"source.revision={revision!r}: name a branch, tag or commit sha")
        if not re.match(r"^https?://[^/]+", str(endpoint or "")):
            raise UserError(
                f"source.endpoint={endpoint!r}: not an http(s) URL, e.g. https://huggingface.co"
            )
        _hub()  # a missing library fails here, before any work
        self.dataset = str(dataset)
        self.config = str(config) if config else None  # None: the dataset's default
        self.split = str(split)
        self.revision = str(revision)
        self.endpoint = str(endpoint).rstrip("/")
        check_path("source.cache_dir", cache_dir)
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
        self.timeout = checked_number(timeout, "source.timeout", whole=False, above=True,
                                      hint=" (seconds)")  # fmt: skip
        self.retries = int(checked_number(retries, "source.retries"))
        self.deadline = (
            None
            if deadline is None
            else checked_number(
                deadline, "source.deadline", whole=False, above=True, hint=" (seconds; or null)"
            )
        )
        self._resolved: Optional[dict[str, Any]] = None

    @property
    def what(self) -> str:
        config = f"config {self.config!r}" if self.config else "its default config"
        return f"dataset {self.dataset!r} ({config}, split {self.split!r})"

    def files(self, progress: bool = True) -> list[InputFile]:
        repo = self.resolve()
        names, sha = repo["repo_files"], repo["sha"]
        paths = [self._download(name, sha, progress) for name in names]
        for path, (name, wrong) in _damaged(names, paths).items():  # once more, afresh
            print(f"corpusprep: note: source=hf: {escape_controls(name)}: not the file the Hub "
                  f"names ({wrong}); downloading it again", file=sys.stderr)  # fmt: skip
            _forget(path)
            again = self._download(name, sha, progress)
            if (still := _not_as_named(again)) is not None:
                _forget(again)
                raise UserError(
                    f"source=hf: {name} of {self.what} at {sha[:12]}: the bytes downloaded "
                    f"are not those the Hub names ({still}); nothing was kept; run again "
                    "later, or tell the dataset's owner"
                )
            paths = [again if p == path else p for p in paths]
        files = input_files(paths, self.options, skip_empty=True)  # no row in datasets either
        options = self.options
        if options.format == "auto" and not (options.doc_separator or options.doc_end):
            # datasets' text loader reads a .txt data file a row per line
            files = [replace(f, format="lines") if f.format == "text" else f for f in files]
        return files

    def describe(self) -> dict[str, Any]:
        return {"kind": "hf", "dataset": self.dataset, "endpoint": self.endpoint,
                "revision": self.revision, **self.resolve()}  # fmt: skip

    def resolve(self) -> dict[str, Any]:
        """The config, split, commit sha and data files (repository paths, in reading order)."""
        if self._resolved is None:
            sha, names = self._listing()
            card = self._card(sha, names)
            config, files = _Rules(self, names).data_files(card)
            for name in files:  # the listing is the Hub's (or a mirror's) word: checked
                if name.startswith("/") or ".." in PurePosixPath(name).parts:
                    raise UserError(
                        f"source=hf: {self.what} lists {name!r}, a path outside the "
                        "repository: refused, nothing was read; tell the dataset's owner"
                    )
            listing = str(self.listing_path())
            self._resolved = {"config": config, "split": self.split, "sha": sha,
                              "repo_files": files, "listing_path": listing}  # fmt: skip
        return self._resolved

    # --- the revision and its files -------------------------------------------------------

    def listing_path(self, revision: Optional[str] = None) -> Path:
        """Where the sha and file list of a revision are kept: a hash of what they are of."""
        what = "\n".join((self.endpoint, self.dataset, revision or self.revision))
        key = hashlib.sha256(what.encode()).hexdigest()[:16]
        label = re.sub(r"[^A-Za-z0-9._-]", "_", self.dataset)
        return self.cache_dir / f"{key}-hf-{label[-100:]}.json"

    def _listing(self) -> tuple[str, list[str]]:
        """(sha, every file of the repository) at source.revision: from the Hub, or, offline
        or out of reach, as a previous run kept it (a commit's files never change)."""
        hub = _hub()
        kept = self._kept() if SHA.fullmatch(self.revision) else None
        if kept:
            return kept
        api = hub.HfApi(endpoint=self.endpoint, token=hub_token(self.endpoint))
        try:
            info = self._retried(
                lambda: api.dataset_info(self.dataset, revision=self.revision, timeout=self.timeout)
            )
        except Exception as e:
            if not _unreachable(e):
                raise self._refusal(e) from None
            kept = self._kept()
            if kept:
                return kept
            raise UserError(
                f"source=hf: cannot ask {redact(self.endpoint)} for the files of {self.what} "
                f"at revision {self.revision!r} ({self._why(e)}), and no earlier run kept them; "
                f"{_fix(e)} (the files then stay in the HF cache, the list in {self.cache_dir})"
            ) from None
        names = sorted(s.rfilename for s in info.siblings or [])
        for revision in {self.revision, info.sha}:
            self._keep(self.listing_path(revision), {"sha": info.sha, "files": names})
        return info.sha, names

    def _kept(self) -> Optional[tuple[str, list[str]]]:
        from corpusprep._paths import read_regular

        path = self.listing_path()
        if not os.path.lexists(path):
            return None
        if hasattr(os, "getuid") and os.lstat(path).st_uid != os.getuid():
            return None  # another user's, in a shared cache: the Hub is asked (and it is kept)
        try:  # the cache may be shared: a regular file of a plausible size, never waited on
            kept = json.loads(read_regular(path, MAX_LISTING_BYTES))
            sha, files = str(kept["sha"]), [str(n) for n in kept["files"]]
        except (OSError, ValueError, KeyError, TypeError):
            raise UserError(
                f"{path}: the kept file list of {self.what} is unreadable; delete it to ask "
                "the Hub again"
            ) from None
        if SHA.fullmatch(self.revision) and sha != self.revision:  # not the pinned commit's
            return None  # (planted in a shared cache): the Hub is asked, and it is replaced
        return sha, files

    def _keep(self, path: Path, data: dict) -> None:
        part = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            part, f = new_part(path)
            with f:
                f.write(json.dumps(data).encode("utf-8"))
            os.replace(part, path)
        except OSError as e:
            raise UserError(
                f"cannot write the Hub file list to {path}: {e.strerror}; set "
                "source.cache_dir or CORPUSPREP_CACHE_DIR to a writable folder"
            ) from None
        finally:
            if part is not None:
                part.unlink(missing_ok=True)

    def _card(self, sha: str, names: list[str]) -> dict[str, Any]:
        """The dataset card's YAML (README.md), updated by .huggingface.yaml, as datasets reads."""
        import yaml

        hub = _hub()
        data: dict[str, Any] = {}
        if "README.md" in names:
            path = self._download("README.md", sha, progress=False)
            try:  # the YAML between the --- lines, as DatasetCard.load reads it
                data = hub.metadata_load(path) or {}
            except (ValueError, yaml.YAMLError) as e:
                raise UserError(
                    f"source=hf: the dataset card (README.md) of {self.dataset!r} at {sha[:12]} "
                    f"has unreadable YAML ({str(e).splitlines()[0]}); pick another "
                    "source.revision"
                ) from None
        if ".huggingface.yaml" in names:  # datasets lets it add to the card's YAML
            path = self._download(".huggingface.yaml", sha, progress=False)
            try:
                extra = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
            except (ValueError, yaml.YAMLError):
                extra = None
            if not isinstance(extra, dict):
                raise UserError(
                    f"source=hf: .huggingface.yaml of {self.dataset!r} at {sha[:12]} is not a "
                    "YAML map; pick another source.revision"
                )
            data.update(extra)
        return data

    # --- downloads ----------------------------------------------------------------------

    def _download(self, name: str, sha: str, progress: bool) -> Path:
        hub = _hub()
        from huggingface_hub import utils

        quiet = not progress and not utils.are_progress_bars_disabled()
        log = logging.getLogger("huggingface_hub")  # its retries are warnings
        level = log.level
        if quiet:
            utils.disable_progress_bars()
            log.setLevel(logging.ERROR)
        try:
            return Path(
                self._in_time(
                    name,
                    lambda: hub.hf_hub_download(
                        self.dataset,
                        name,
                        repo_type="dataset",
                        revision=sha,
                        endpoint=self.endpoint,
                        token=hub_token(self.endpoint),
                        etag_timeout=self.timeout,
                        **_escaped_bars(),
                    ),
                )
            )
        except UserError:  # said already (the deadline)
            raise
        except Exception as e:
            if isinstance(e, utils.LocalEntryNotFoundError) or _unreachable(e):
                raise UserError(
                    f"source=hf: cannot download {name} of {self.what} at {sha[:12]} from "
                    f"{redact(self.endpoint)} ({self._why(e)}), and the HF cache does not have "
                    f"it; {_fix(e)}"
                ) from None
            raise self._refusal(e, name) from None
        finally:
            if quiet:
                utils.enable_progress_bars()
                log.setLevel(level)

    def _in_time(self, name: str, ask: Callable[[], Any]) -> Any:
        """_retried(ask), given up once source.deadline has passed: huggingface_hub's
        timeout restarts with every byte, so a server sending one byte a second would
        hold the run for ever. The download's .incomplete file resumes next time."""
        try:
            return interruptible(lambda: self._retried(ask), self.deadline)
        except StillRunning:
            raise UserError(
                f"source=hf: {name} of {self.what}: not downloaded within "
                f"source.deadline={self.deadline:g} s (the server may be stalling); run again "
                "later (the download resumes), or raise source.deadline (null: no limit)"
            ) from None

    def _retried(self, ask: Callable[[], Any]) -> Any:
        """ask(), again after a wait where the Hub answered that it is busy or down (429,
        5xx: its Retry-After, else 1, 2, 4... s), up to source.retries times. A connection
        that fails is not retried: offline, the kept list and the HF cache answer at once."""
        for attempt in range(self.retries + 1):
            try:
                return ask()
            except Exception as e:
                status, wait = _answered(e)
                if status is None or attempt == self.retries:
                    raise
                time.sleep(min(wait if wait is not None else 2.0**attempt, MAX_RETRY_WAIT))

    def _why(self, e: BaseException) -> str:
        why = _why(e)
        if _answered(e)[0] is not None and self.retries:
            why += f", {self.retries + 1} attempts"
        return why

    def _refusal(self, e: Exception, name: Optional[str] = None) -> UserError:
        """One line for what the Hub answered: no such dataset, revision or file, gated, ..."""
        from huggingface_hub import utils

        where = f"{name} of {self.dataset!r}" if name else repr(self.dataset)
        if isinstance(e, utils.GatedRepoError):
            return UserError(
                f"source=hf: {where} is gated ({_status(e)}): accept its terms on the Hub and "
                f"set HF_TOKEN{self._withheld()}"
            )
        if isinstance(e, utils.RepositoryNotFoundError):
            return UserError(
                f"source.dataset={self.dataset!r}: {redact(self.endpoint)} has no such dataset "
                f"({_status(e)}), or it is private and needs HF_TOKEN{self._withheld()}; check "
                "the name"
            )
        if isinstance(e, utils.RevisionNotFoundError):
            return UserError(
                f"source.revision={self.revision!r}: {self.dataset!r} has no such branch, tag "
                "or commit; use main, a tag or a commit sha"
            )
        if isinstance(e, utils.EntryNotFoundError):
            return UserError(f"source=hf: {where}: listed by the Hub, but not found there")
        if isinstance(e, utils.HfHubHTTPError):
            return UserError(
                f"source=hf: {where}: {_status(e)} from {redact(self.endpoint)}; check "
                "source.endpoint and source.dataset"
            )
        fix = "; check source.endpoint" if "Redirect" in type(e).__name__ else ""
        return UserError(f"source=hf: {where}: {_why(e)} from {redact(self.endpoint)}{fix}")

    def _withheld(self) -> str:
        if os.environ.get("HF_TOKEN") and hub_token(self.endpoint) is False:
            return (
                " (HF_TOKEN was not sent: it goes only over https to the Hub or to the "
                "endpoint $HF_ENDPOINT names)"
            )
        return ""


HEX = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def _escaped_bars() -> dict[str, Any]:
    """hf_hub_download's download bar is named by the file name a server's
    Content-Disposition gives (the Hub's CDN gives one): a stranger's string, shown with
    its control characters escaped (escape_controls). {} where the installed library takes
    no tqdm_class (an older version)."""
    import inspect

    hub = _hub()
    if "tqdm_class" not in inspect.signature(hub.hf_hub_download).parameters:
        return {}
    from huggingface_hub.utils import tqdm

    class EscapedBar(tqdm):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            if isinstance(kwargs.get("desc"), str):
                kwargs["desc"] = escape_controls(kwargs["desc"])
            super().__init__(*args, **kwargs)

        def set_description_str(self, desc: Optional[str] = None, refresh: bool = True) -> None:
            super().set_description_str(escape_controls(desc) if desc else desc, refresh)

        def set_description(self, desc: Optional[str] = None, refresh: bool = True) -> None:
            super().set_description(escape_controls(desc) if desc else desc, refresh)

    return {"tqdm_class": EscapedBar}


def _not_as_named(path: Path) -> Optional[str]:
    """What is wrong with a file of the HF cache whose bytes are not those its name says
    (huggingface_hub names a blob by the Hub's ETag: an LFS file's sha256, else git's blob
    sha1, and checks only its size): a download cut short, other bytes served, a copy
    damaged since. None if it is right, or not a blob named so (nothing to check it by)."""
    from corpusprep.writer import file_sha256, git_blob_sha1, keep_sha256

    blob = Path(os.path.realpath(path))
    if blob.parent.name != "blobs" or not HEX.fullmatch(blob.name):
        return None
    try:
        digest = file_sha256(blob) if len(blob.name) == 64 else git_blob_sha1(blob)
    except OSError as e:  # unreadable, or not a regular file
        return f"cannot be read: {e.strerror or e}"
    if digest == blob.name:
        if len(digest) == 64:  # the run keys its input by it: not read again
            keep_sha256(blob, digest)
        return None
    kind = "sha256" if len(blob.name) == 64 else "git sha1"
    return f"{kind} {digest[:12]}..., where the Hub names {blob.name[:12]}..."


def _damaged(names: list[str], paths: list[Path]) -> dict[Path, tuple[str, str]]:
    """{path: (name, what is wrong)} of each download that is not as named, checked side
    by side (hashlib lets go of the GIL), each file once."""
    from concurrent.futures import ThreadPoolExecutor

    from corpusprep.executors.local import available_cores

    named = dict(zip(paths, names))
    with ThreadPoolExecutor(max(1, min(len(named), available_cores()))) as pool:
        found = dict(zip(named, pool.map(_not_as_named, named)))
    return {p: (named[p], wrong) for p, wrong in found.items() if wrong is not None}


def _forget(path: Path) -> None:
    """Take a file out of the HF cache (its blob and the snapshot's link to it): the next
    download fetches it afresh, and nothing damaged is left for a later run to read."""
    for leftover in {Path(os.path.realpath(path)), Path(path)}:
        try:
            leftover.unlink()
        except FileNotFoundError:
            pass
        except OSError as e:  # a read-only or shared cache: nothing this run can mend
            raise UserError(
                f"source=hf: {path} in the HF cache is not the file the Hub names, and it "
                f"cannot be removed ({e.strerror}); remove it, or point HF_HUB_CACHE at a "
                "cache you may write"
            ) from None


def _unreachable(e: Exception) -> bool:
    """Offline mode, or the endpoint out of reach (connection, timeout, 5xx): then the kept
    list and the HF cache may do. The HTTP libraries differ by version: judged by class."""
    from huggingface_hub import utils

    if isinstance(e, utils.OfflineModeIsEnabled):
        return True
    if isinstance(e, utils.HfHubHTTPError):
        status = getattr(getattr(e, "response", None), "status_code", None)
        return status is not None and (status >= 500 or status == 429)
    names = " ".join(c.__name__ for c in type(e).__mro__)
    return bool(re.search(r"Connect|Timeout|Network|ProtocolError", names))


MAX_RETRY_WAIT = 60.0  # seconds: a Retry-After of an hour is not waited for
BUSY = {429, 500, 502, 503, 504}


def _answered(e: BaseException) -> tuple[Optional[int], Optional[float]]:
    """(status, Retry-After seconds) where the Hub answered that it is busy or down, also
    behind huggingface_hub's 'not in the cache either' error; (None, None) otherwise."""
    from huggingface_hub import utils

    for cause in _causes(e):
        if isinstance(cause, utils.HfHubHTTPError):
            response = getattr(cause, "response", None)
            status = getattr(response, "status_code", None)
            if status not in BUSY:
                return None, None
            after = (getattr(response, "headers", None) or {}).get("Retry-After", "")
            return status, float(after) if re.fullmatch(r"\d{1,6}", after.strip()) else None
    return None, None


def _causes(e: Optional[BaseException], most: int = 5) -> Iterator[BaseException]:
    """The error, its cause, that one's cause... (huggingface_hub wraps what went wrong in
    its own 'not in the cache either' error)."""
    while e is not None and most > 0:
        yield e
        e, most = e.__cause__ or e.__context__, most - 1


def _fix(e: BaseException) -> str:
    """What to do when a file could not be had: the Hub answered busy or down (run again
    later), the answer broke off (run again: the download resumes), or the Hub was not
    reached (run with network)."""
    if _answered(e)[0] is not None:
        return "the Hub is busy or down: run again later"
    if _cut_short(e):
        return "the server broke off the answer: run again (the download resumes)"
    return "run once with network"


def _cut_short(e: Optional[BaseException]) -> bool:
    """An answer that began and broke off (a body shorter than its Content-Length, a
    connection closed mid-answer), for this error or its causes."""
    broke_off = re.compile(r"RemoteProtocolError|IncompleteRead|ChunkedEncoding|ReadError")
    return any(broke_off.search(" ".join(c.__name__ for c in type(cause).__mro__))
               for cause in _causes(e))  # fmt: skip


def _why(e: BaseException) -> str:
    from huggingface_hub import constants, utils

    if isinstance(e, utils.LocalEntryNotFoundError):  # the cache's miss: say why it was asked
        cause = e.__cause__ or e.__context__
        if cause is not None and not isinstance(cause, utils.LocalEntryNotFoundError):
            return _why(cause)
        if constants.HF_HUB_OFFLINE:
            return "offline: HF_HUB_OFFLINE is set"
    if isinstance(e, utils.OfflineModeIsEnabled):
        return "offline: HF_HUB_OFFLINE is set"
    if isinstance(e, utils.HfHubHTTPError):
        return _status(e)
    names = " ".join(c.__name__ for c in type(e).__mro__)
    if "Timeout" in names:
        return "timed out"
    if "Connect" in names:
        return "cannot connect" + (": connection refused" if "refused" in str(e) else "")
    return type(e).__name__


def _status(e: Exception) -> str:
    response = getattr(e, "response", None)
    status = getattr(response, "status_code", None)
    return f"HTTP {status}" if status else type(e).__name__


# --- which files datasets reads -------------------------------------------------------------

# datasets.data_files: the split keywords and default patterns (those of fsspec>=2023.12)
SPLIT_KEYWORDS = {
    "train": ["train", "training"],
    "validation": ["validation", "valid", "dev", "val"],
    "test": ["test", "testing", "eval", "evaluation"],
}
SEP = "-._ 0-9"
SHARDED = "data/{split}-[0-9][0-9][0-9][0-9][0-9]-of-[0-9][0-9][0-9][0-9][0-9]*.*"
IN_DIR_NAME = ["**/{k}/**", "**/{k}[{s}]*/**", "**/*[{s}]{k}/**", "**/*[{s}]{k}[{s}]*/**"]
IN_FILE_NAME = ["**/{k}[{s}]*", "**/*[{s}]{k}[{s}]*"]
DEFAULT_PATTERNS = [  # tried in this order; the first that finds files wins
    {"logs": ["**/*.eval"]},
    *({split: [p.format(k=k, s=SEP) for k in keywords for p in base]
       for split, keywords in SPLIT_KEYWORDS.items()} for base in (IN_DIR_NAME, IN_FILE_NAME)),
    {"train": ["**"]},
]  # fmt: skip
IGNORED = {"README.md", "config.json", "dataset_info.json", "dataset_infos.json",
           "dummy_data.zip", "dataset_dict.json"}  # fmt: skip
# datasets' packaged modules by extension (its image/audio/video folders left out: no text)
MODULES = {".csv": "csv", ".tsv": "csv", ".json": "json", ".jsonl": "json", ".ndjson": "json",
           ".parquet": "parquet", ".geoparquet": "parquet", ".gpq": "parquet", ".arrow": "arrow",
           ".txt": "text", ".conll": "conll", ".conllu": "conll", ".tar": "webdataset",
           ".xml": "xml", ".hdf5": "hdf5", ".h5": "hdf5", ".eval": "eval", ".lance": "lance",
           ".tsfile": "tsfile"}  # fmt: skip
ALLOWED = {*MODULES, ".zip"}
METADATA_FILES = {"metadata.csv", "metadata.jsonl", "metadata.parquet"}
READ = {"parquet": "Parquet", "json": "JSON Lines", "text": "text"}  # what corpusprep reads
PREFERRED = (".parquet", ".lance", ".arrow", ".jsonl", ".json", ".csv")  # datasets' ties


class _Rules:
    """datasets' HubDatasetModuleFactory, over the file list of one commit: glob patterns
    match as fsspec's glob does (`*` within a folder, `**` across them), each pattern's
    matches sorted as strings, the patterns' results concatenated in order."""

    def __init__(self, source: HfSource, names: list[str]) -> None:
        self.source = source
        self.names = sorted(names)

    def data_files(self, card: dict[str, Any]) -> tuple[str, list[str]]:
        """(config name, the split's files in reading order), or a one-line refusal."""
        src, what = self.source, repr(self.source.dataset)
        script = src.dataset.split("/")[-1] + ".py"
        if script in self.names:
            raise UserError(
                f"source=hf: {what} is built by its loading script {script}, code that "
                "corpusprep does not run (datasets 4 refuses it too); pick a source.revision "
                "with data files, or download them and use source=files"
            )
        configs = self._configs(card)
        if configs:
            first = next(iter(configs.values()))
            probe = (
                _sanitize(first["data_files"], what)
                if "data_files" in first else self._default_patterns("")
            )  # fmt: skip
            module = self._module(self._resolve_all(probe, ""))
            name = src.config or _default_config(configs, what)
            if name not in configs:
                raise UserError(
                    f"source.config={name!r}: {what} has no such config; it has "
                    f"{', '.join(map(repr, configs))}"
                )
            params = configs[name]
            base = str(params.get("data_dir") or "").strip("/")
            patterns = (
                _sanitize(params["data_files"], what)
                if params.get("data_files") is not None else self._default_patterns(base)
            )  # fmt: skip
            files = self._resolve_all(patterns, base)
        else:
            name = src.config or "default"
            if name != "default":
                raise UserError(
                    f"source.config={name!r}: {what} has no configs in its card, only "
                    "'default'; drop source.config"
                )
            files = self._resolve_all(self._default_patterns(""), "")
            module = self._module(files)
            keep = re.compile(f".*({'|'.join(map(re.escape, _extensions(module)))})(\\..+)?$")
            files = {split: [f for f in fs if keep.match(f)] for split, fs in files.items()}
        if src.split not in files:
            raise UserError(
                f"source.split={src.split!r}: {what} (config {name!r}) has no such split; it "
                f"has {', '.join(map(repr, files))}"
            )
        chosen = files[src.split]
        partial = [f for f in chosen if PARTIAL.fullmatch(f)]
        if partial:
            raise UserError(
                f"source=hf: {partial[0]} of {what} is from the Hub's partial Parquet "
                "conversion (its first 5 GB only); refusing to prepare part of a corpus: use "
                "source.revision=main"
            )
        if not chosen:
            raise UserError(f"source.split={src.split!r}: {what} has no data files for it")
        if module not in READ:
            raise UserError(
                f"source=hf: {what} is {module} data ({chosen[0]}); corpusprep reads "
                f"{', '.join(READ.values())}: convert it and use source=files"
            )
        return name, chosen

    def _configs(self, card: dict[str, Any]) -> dict[str, dict]:
        configs = card.get("configs")
        if not configs:
            return {}
        if not isinstance(configs, list) or not all(
            isinstance(c, dict) and isinstance(c.get("config_name"), str) for c in configs
        ):
            raise UserError(
                f"source=hf: the `configs` of {self.source.dataset!r}'s dataset card are not a "
                "list of maps with a config_name; pick another source.revision"
            )
        return {c["config_name"]: {k: v for k, v in c.items() if k != "config_name"}
                for c in configs}  # fmt: skip

    def _default_patterns(self, base: str) -> dict[str, list[str]]:
        """datasets' get_data_patterns: `data/{split}-00000-of-00001.*` files name their
        splits; else the first pattern family that finds any file (any extension)."""
        sharded = self._resolve(SHARDED.replace("{split}", "*"), base, allowed=None)
        if sharded:
            # datasets' string_to_dict: the pattern's name part read as a regex, {split} a group
            tail = posixpath.basename(SHARDED).replace("{split}", "(.+)")
            names = (re.search(tail, posixpath.basename(f)) for f in sharded)
            splits = {found.group(1) for found in names if found}  # (all: the glob found them)
            bad = [s for s in splits if not re.match(r"^\w+(\.\w+)*$", s)]
            if bad:
                raise UserError(
                    f"source=hf: {self.source.dataset!r} names a split {bad[0]!r} in its data "
                    "file names, which datasets refuses (split names are words)"
                )
            known = [s for s in SPLIT_KEYWORDS if s in splits]
            return {s: [SHARDED.format(split=s)] for s in known + sorted(splits - set(known))}
        for family in DEFAULT_PATTERNS:
            found = {split: patterns for split, patterns in family.items()
                     if any(self._resolve(p, base, allowed=None) for p in patterns)}  # fmt: skip
            if found:
                return found
        raise UserError(
            f"source=hf: {self.source.dataset!r} has no data files"
            + (f" in {base}/" if base else "")
        )

    def _resolve_all(self, patterns: dict[str, list[str]], base: str) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for split, split_patterns in patterns.items():
            out[split] = []
            for pattern in split_patterns:
                found = self._resolve(pattern, base, allowed=ALLOWED)
                if not found and not _has_magic(pattern):
                    raise UserError(
                        f"source=hf: the dataset card of {self.source.dataset!r} names "
                        f"{pattern!r} (split {split!r}), which the repository does not have"
                    )
                out[split] += found  # no de-duplication: datasets reads such a file twice
        return out

    def _resolve(self, pattern: str, base: str, allowed: Optional[set[str]]) -> list[str]:
        """datasets' resolve_pattern on the repository's files: relative paths, sorted."""
        from fsspec.utils import glob_translate

        if not isinstance(pattern, str) or "://" in pattern:
            raise UserError(
                f"source=hf: the dataset card of {self.source.dataset!r} names {pattern!r}: "
                "only paths inside the repository are read"
            )
        full = posixpath.join(base, pattern) if base else pattern
        full = full.lstrip("/")
        if not _has_magic(full):
            matches = [full] if full in self.names else []
        else:
            try:
                rx = re.compile(glob_translate(full))
            except ValueError as e:
                raise UserError(
                    f"source=hf: {pattern!r} in the dataset card of {self.source.dataset!r}: {e}"
                ) from None
            matches = [n for n in self.names if rx.match(n)]
        ignored = IGNORED - {posixpath.basename(full)}
        out = []
        for name in matches:
            suffixes = ["." + s for s in posixpath.basename(name).split(".")[1:]]
            if posixpath.basename(name) in ignored or _unrequested(name, full):
                continue
            if allowed is None or any(s in allowed for s in suffixes):
                out.append(name)
        return out

    def _module(self, files: dict[str, list[str]]) -> str:
        """datasets' infer_module_for_data_files: each split's most common extension (ties:
        Parquet first), the same for every split."""
        modules = {_infer(fs) for fs in files.values()}
        if len(modules) > 1:
            raise UserError(
                f"source=hf: {self.source.dataset!r} mixes file formats across its splits "
                f"({', '.join(sorted(map(str, modules)))}), which datasets refuses"
            )
        module = modules.pop() if modules else None
        if module == "zip":
            raise UserError(
                f"source=hf: {self.source.dataset!r} keeps its data in zip archives; download "
                "them and use source=files"
            )
        if not module:
            raise UserError(f"source=hf: {self.source.dataset!r} has no data files it can read")
        return module


def _infer(files: list[str]) -> Optional[str]:
    counts = Counter(
        ("." + suffix.lower(), posixpath.basename(f) in METADATA_FILES)
        for f in files
        for suffix in posixpath.basename(f).split(".")[1:]
    )

    def key(item):
        (ext, metadata), count = item
        return (not metadata, count, *(ext == p for p in PREFERRED), ext)

    for (ext, _), _ in sorted(counts.items(), key=key, reverse=True):
        if ext in MODULES:
            return MODULES[ext]
        if ext == ".zip":
            return "zip"
    return None


def _extensions(module: str) -> list[str]:
    return [ext for ext, m in MODULES.items() if m == module] + [".zip"]


def _has_magic(pattern: str) -> bool:
    return re.search(r"[*?[]", pattern) is not None


def _unrequested(name: str, pattern: str) -> bool:
    """Hidden files and folders (.x), and special folders (__x), unless the pattern names
    as many of them: datasets leaves them out."""

    def hidden(path: str) -> int:
        return sum(p.startswith(".") and set(p) != {"."} for p in PurePosixPath(path).parts)

    def special(path: str) -> int:
        return sum(p.startswith("__") for p in PurePosixPath(path).parent.parts)

    return hidden(name) != hidden(pattern) or special(name) != special(pattern)


def _sanitize(data_files: Any, what: str) -> dict[str, list[str]]:
    """datasets' sanitize_patterns for the card's data_files: a pattern, a list of them
    (the train split), or a list of {split, path}."""
    if isinstance(data_files, str):
        return {"train": [data_files]}
    if isinstance(data_files, list) and not any(isinstance(p, dict) for p in data_files):
        return {"train": data_files}
    if isinstance(data_files, list) and all(
        isinstance(p, dict) and set(p) == {"split", "path"} and isinstance(p["path"], (str, list))
        for p in data_files
    ):
        splits = [str(p["split"]) for p in data_files]
        if len(set(splits)) == len(splits):
            return {str(p["split"]): p["path"] if isinstance(p["path"], list) else [p["path"]]
                    for p in data_files}  # fmt: skip
    raise UserError(
        f"source=hf: the data_files of {what}'s dataset card are not a pattern, a list of "
        "patterns, or a list of {split, path} with each split once"
    )


def _default_config(configs: dict[str, dict], what: str) -> str:
    """datasets' default config: the only one, the one named default, or default: true."""
    chosen = [
        n for n, c in configs.items() if len(configs) == 1 or n == "default" or c.get("default")
    ]
    if len(chosen) == 1:
        return chosen[0]
    raise UserError(
        f"source.config=null: {what} has "
        + (
            f"several default configs ({', '.join(map(repr, chosen))})"
            if chosen
            else "no default config"
        )
        + f"; pick one of {', '.join(map(repr, configs))}, e.g. source.config={next(iter(configs))}"
    )


# --- where the token may go ------------------------------------------------------------

HUB_HOSTS = ("huggingface.co", "hf.co")  # one Hub, two names


def hub_token(endpoint: str) -> Optional[bool]:
    """What huggingface_hub is told about the token for `endpoint`: None (its own: HF_TOKEN,
    or the saved login) where a token may go (token_endpoint), over https or plain http to
    this machine; False (none at all) anywhere else."""
    try:
        scheme, host, _ = _origin(endpoint)
    except ValueError:
        return False
    secure = scheme == "https" or (scheme == "http" and _loopback(host))
    return None if secure and token_endpoint(endpoint) else False


def token_endpoint(endpoint: str) -> bool:
    """Whether a token may go to `endpoint`: the Hub (https://huggingface.co, hf.co), the
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
