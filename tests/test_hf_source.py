"""source=hf: a Hub dataset's own data files, all of them, in the order `datasets` reads them.

Nothing here reaches the internet. The Hub is played by `Hub`, a LocalHTTPServer on
127.0.0.1 answering the requests huggingface_hub makes, as the Hub documents them:
GET /api/datasets/{repo}[/revision/{rev}] (the dataset's info: the commit `sha` and its
`siblings`), and HEAD / GET /datasets/{repo}/resolve/{rev}/{path} (X-Repo-Commit, ETag,
Content-Length; LFS files answer 302 to a CDN with X-Linked-Etag and X-Linked-Size; errors
carry X-Error-Code). The CDN is a second LocalHTTPServer on 127.0.0.2. The library is
pointed at them with source.endpoint, and its cache is HF_HOME in tmp_path.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import subprocess
import sys
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Optional
from urllib.parse import unquote

import numpy as np
import pytest
from helpers import REPO, LocalHTTPServer, assert_one_line_error, compose, run_cli

pytest.importorskip("huggingface_hub", reason="source=hf needs pip install '.[hub]'")

from corpusprep.config import build  # noqa: E402
from corpusprep.errors import UserError  # noqa: E402
from corpusprep.sources.hf import HfSource  # noqa: E402


def commit_sha(*parts: str) -> str:
    return hashlib.sha1("\n".join(parts).encode()).hexdigest()


class Hub(LocalHTTPServer):
    """The Hub's dataset API for the repositories in `repos` (name -> {branch or sha ->
    {path: bytes}}). Files ending in .parquet are LFS files: their resolve URL redirects to
    `cdn`. Every request is logged in `log` as (method, path, headers)."""

    def __init__(self, cdn: Optional[LocalHTTPServer] = None) -> None:
        self.repos: dict[str, dict[str, dict[str, bytes]]] = {}
        self.branches: dict[str, dict[str, str]] = {}
        self.gated: set[str] = set()
        self.log: list[tuple[str, str, dict[str, str]]] = []
        self.cdn = cdn
        super().__init__(_hub_handler)

    def push(self, repo: str, files: dict[str, bytes | str], branch: str = "main") -> str:
        """A new commit of `repo` with exactly `files`, at the head of `branch`; its sha."""
        data = {p: b.encode() if isinstance(b, str) else b for p, b in files.items()}
        sha = commit_sha(repo, branch, *(f"{p}:{hashlib.sha256(b).hexdigest()}"
                                         for p, b in sorted(data.items())))  # fmt: skip
        self.repos.setdefault(repo, {})[sha] = data
        self.branches.setdefault(repo, {})[branch] = sha
        if self.cdn is not None:
            for body in data.values():
                self.cdn.blobs[hashlib.sha256(body).hexdigest()] = body
        return sha

    def commit(self, repo: str, rev: str) -> Optional[str]:
        if rev in self.repos.get(repo, {}):
            return rev
        return self.branches.get(repo, {}).get(rev)

    def asked(self, method: str, part: str) -> list[tuple[str, str, dict[str, str]]]:
        with self._lock:
            return [r for r in self.log if r[0] == method and part in r[1]]


def _hub_handler(hub: Hub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format, *args):
            pass

        def do_HEAD(self) -> None:
            self._answer(head=True)

        def do_GET(self) -> None:
            self._answer(head=False)

        def _answer(self, head: bool) -> None:
            # a proxy's request names the whole URL: its path is what the host would see
            path = unquote(re.sub(r"^https?://[^/]+", "", self.path).split("?", 1)[0])
            with hub._lock:
                hub.log.append((self.command, path, _headers(self)))
            hub.hit(path)
            if path.startswith("/api/datasets/"):
                return self._info(path[len("/api/datasets/") :], head)
            if path.startswith("/datasets/") and "/resolve/" in path:
                repo, _, rest = path[len("/datasets/") :].partition("/resolve/")
                rev, _, name = rest.partition("/")
                return self._resolve(repo, rev, name, head)
            self._send(404, {"error": "Not Found"}, head=head)

        def _refused(self, repo: str, head: bool) -> bool:
            """The Hub's answers for an unknown repository, or a gated one without a token."""
            if repo not in hub.repos:
                self._send(401, {"error": "Repository not found"}, head=head,
                           headers={"X-Error-Code": "RepoNotFound",
                                    "X-Error-Message": "Repository not found"})  # fmt: skip
                return True
            if repo in hub.gated and "Authorization" not in self.headers:
                message = (f"Access to dataset {repo} is restricted. You must have access to "
                           "it and be authenticated to access it. Please log in.")  # fmt: skip
                headers = {"X-Error-Code": "GatedRepo", "X-Error-Message": message}
                self._send(401, {"error": message}, head=head, headers=headers)
                return True
            return False

        def _info(self, rest: str, head: bool) -> None:
            # /api/datasets/{owner}/{name} or /api/datasets/{owner}/{name}/revision/{rev}
            repo, _, rev = rest.partition("/revision/")
            if self._refused(repo, head):
                return
            sha = hub.commit(repo, rev or "main")
            if sha is None:
                self._send(404, {"error": f"Invalid rev id: {rev}"}, head=head,
                           headers={"X-Error-Code": "RevisionNotFound"})  # fmt: skip
                return
            files = hub.repos[repo][sha]
            self._send(200, {
                "_id": sha[:24], "id": repo, "author": repo.split("/")[0], "sha": sha,
                "lastModified": "2024-01-01T00:00:00.000Z", "createdAt": "2023-01-01T00:00:00.000Z",
                "private": False, "gated": "auto" if repo in hub.gated else False,
                "disabled": False, "downloads": 0, "likes": 0, "tags": [],
                "siblings": [{"rfilename": p} for p in sorted(files)],
                "usedStorage": sum(map(len, files.values())),
            }, head=head)  # fmt: skip

        def _resolve(self, repo: str, rev: str, name: str, head: bool) -> None:
            if self._refused(repo, head):
                return
            sha = hub.commit(repo, rev)
            if sha is None:
                self._send(404, {"error": f"Invalid rev id: {rev}"}, head=head,
                           headers={"X-Error-Code": "RevisionNotFound"})  # fmt: skip
                return
            body = hub.repos[repo][sha].get(name)
            if body is None:
                headers = {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": sha}
                self._send(404, {"error": "Entry not found"}, head=head, headers=headers)
                return
            blob = hashlib.sha1(b"blob %d\0" % len(body) + body).hexdigest()  # git's blob id
            if name.endswith(".parquet") and hub.cdn is not None:  # an LFS file: to the CDN
                oid = hashlib.sha256(body).hexdigest()
                self._send(302, b"", head=head, headers={
                    "Location": f"{hub.cdn.root}/lfs/{oid}", "X-Repo-Commit": sha,
                    "ETag": f'"{blob}"', "X-Linked-Etag": f'"{oid}"',
                    "X-Linked-Size": str(len(body))})  # fmt: skip
                return
            self._send(200, body, head=head, range_=self.headers.get("Range"),
                       headers={"X-Repo-Commit": sha, "ETag": f'"{blob}"'})  # fmt: skip

        def _send(self, code, body, head, headers=None, range_=None) -> None:
            _send(self, code, body, head, headers, range_)

    return Handler


def _headers(handler) -> dict[str, str]:
    """The request's headers, names in one case (httpx sends them in lower case)."""
    return {k.title(): v for k, v in handler.headers.items()}


def _send(handler, code, body, head, headers=None, range_=None) -> None:
    """An answer with Content-Length (a JSON body for dicts); `range_` ("bytes=N-") for a
    resumed download: 206 with the rest."""
    if isinstance(body, dict):
        body = json.dumps(body).encode()
        headers = {"Content-Type": "application/json", **(headers or {})}
    if range_ and range_.startswith("bytes=") and code == 200:
        start = int(range_[len("bytes=") :].split("-")[0] or 0)
        headers = {**(headers or {}), "Content-Range": f"bytes {start}-{len(body) - 1}/{len(body)}"}
        code, body = 206, body[start:]
    handler.send_response(code)
    for key, value in (headers or {}).items():
        handler.send_header(key, value)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    if not head:
        handler.wfile.write(body)


class Cdn(LocalHTTPServer):
    """The Hub's CDN: GET /lfs/{sha256} (signed URLs on the real one: no token needed)."""

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}
        self.log: list[tuple[str, str, dict[str, str]]] = []
        super().__init__(_cdn_handler, host="127.0.0.2")


def _cdn_handler(cdn: Cdn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format, *args):
            pass

        def do_HEAD(self) -> None:
            self._answer(head=True)

        def do_GET(self) -> None:
            self._answer(head=False)

        def _answer(self, head: bool) -> None:
            path = self.path.split("?", 1)[0]
            with cdn._lock:
                cdn.log.append((self.command, path, _headers(self)))
            cdn.hit(path)
            body = cdn.blobs.get(path[len("/lfs/") :]) if path.startswith("/lfs/") else None
            if body is None:
                _send(self, 404, b"NoSuchKey", head)
            else:
                _send(self, 200, body, head, {"ETag": f'"{path[5:]}"'}, self.headers.get("Range"))

    return Handler


# --- fixtures -------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No proxy between the tests and the loopback servers; no Hub settings from the
    developer's shell; the HF cache in tmp_path."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                 "HF_TOKEN", "HF_ENDPOINT", "HF_HUB_OFFLINE", "HF_HUB_CACHE",
                 "HUGGINGFACE_HUB_CACHE", "HF_DATASETS_CACHE", "HF_HUB_DISABLE_IMPLICIT_TOKEN",
                 "HF_TOKEN_PATH"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,127.0.0.2,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,127.0.0.2,localhost")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("CORPUSPREP_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def hub():
    cdn = Cdn()
    srv = Hub(cdn)
    try:
        yield srv
    finally:
        srv.stop()
        cdn.stop()


def parquet(texts: list[str], **columns) -> bytes:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    table = pa.table({"id": list(range(len(texts))), "text": texts, **columns})
    pq.write_table(table, buf, row_group_size=7)
    return buf.getvalue()


def jsonl(texts: list[str]) -> bytes:
    return "".join(json.dumps({"text": t}) + "\n" for t in texts).encode()


def card(yaml: str) -> str:
    return f"---\n{yaml.strip()}\n---\n\n# A dataset\n\nSome words about it.\n"


def hf_cli(tmp_path: Path, hub: Hub, dataset: str, *extra: str, env: Optional[dict] = None):
    """The CLI on source=hf, byte tokenizer, no end-of-text, every token kept in order
    (split_by=tail: val is the last 2 tokens), so the ids are the corpus's bytes."""
    return run_cli("source=hf", f"source.dataset={dataset}", f"source.endpoint={hub.root}",
                   "source.timeout=10", "tokenizer=byte", "eot=none", "split_by=tail",
                   "val_size=2", "quiet=true", *extra, cwd=tmp_path, env=env)  # fmt: skip


def corpus(out: Path) -> bytes:
    m = json.loads((out / "manifest.json").read_text())
    ids = [np.fromfile(out / f"{side}.bin", dtype=m["dtype"]) for side in ("train", "val")]
    return bytes(np.concatenate(ids).astype(np.uint8))


def texts(prefix: str, n: int) -> list[str]:
    return [f"<{prefix} {i}: the cat sat on the mat>\n" for i in range(n)]


# --- the files and their order are those of datasets.load_dataset ---------------------------

# Each layout: the repository's files, the config and split asked for, and the data files
# `datasets` reads, in its order (checked below against the library itself where installed).
LAYOUTS = {
    "sharded names, no card": (
        {
            "README.md": "# no YAML here\n",
            ".gitattributes": "*.parquet filter=lfs diff=lfs merge=lfs -text\n",
            "data/train-00001-of-00002.parquet": ("b", 30),
            "data/train-00000-of-00002.parquet": ("a", 25),
            "data/test-00000-of-00001.parquet": ("t", 5),
            "data/validation-00000-of-00001.parquet": ("v", 5),
        },
        None, "train",
        ["data/train-00000-of-00002.parquet", "data/train-00001-of-00002.parquet"],
    ),
    "split folders, strings sorted, hidden and special left out": (
        {
            "train/shard_2.jsonl": ("two", 9),
            "train/shard_10.jsonl": ("ten", 8),  # "shard_10" < "shard_2": strings, not numbers
            "train/Shard_3.jsonl": ("upper", 4),  # capitals first
            "train/.hidden.jsonl": ("hidden", 3),
            "train/__pycache__/x.jsonl": ("special", 3),
            "test/a.jsonl": ("test", 3),
            "LICENSE": "MIT\n",
        },
        "default", "train",
        ["train/Shard_3.jsonl", "train/shard_10.jsonl", "train/shard_2.jsonl"],
    ),
    "split in file names: each pattern's matches in turn, duplicates kept": (
        {
            "data/train_2.jsonl": ("t2", 5),
            "data/train_1.jsonl.gz": ("t1", 6),
            "data/my_train.jsonl": ("my", 4),  # matched by the second pattern only
            "data/train_x_train.jsonl": ("twice", 2),  # matched by both: read twice
            "data/training-3.jsonl": ("training", 3),  # the keyword "training" comes next
            "data/test.jsonl": ("test", 2),
        },
        None, "train",
        ["data/train_1.jsonl.gz", "data/train_2.jsonl", "data/train_x_train.jsonl",
         "data/my_train.jsonl", "data/train_x_train.jsonl", "data/training-3.jsonl"],
    ),
    "card configs: patterns in the card's order, data_dir": (
        {
            "README.md": card("""
configs:
- config_name: web
  default: true
  data_files:
  - split: train
    path: [part_b/*.parquet, part_a/*.parquet]
  - split: test
    path: part_a/x0.parquet
- config_name: books
  data_dir: books
"""),
            "part_a/x1.parquet": ("a1", 6),
            "part_a/x0.parquet": ("a0", 7),
            "part_b/y.parquet": ("b", 8),
            "books/train-1.parquet": ("book1", 3),
            "books/train-0.parquet": ("book0", 3),
            "books/test.parquet": ("booktest", 3),
        },
        None, "train",
        ["part_b/y.parquet", "part_a/x0.parquet", "part_a/x1.parquet"],
    ),
    ".huggingface.yaml updates the card": (
        {
            "README.md": card("configs:\n- config_name: default\n  data_files: a/*.jsonl"),
            ".huggingface.yaml": "configs:\n- config_name: default\n  data_files: b/*.jsonl\n",
            "a/x.jsonl": ("a", 3),
            "b/y.jsonl": ("b", 4),
        },
        None, "train", ["b/y.jsonl"],
    ),
    "card configs: a data_dir config": (
        None,  # the same repository as above
        "books", "train",
        ["books/train-0.parquet", "books/train-1.parquet"],
    ),
}  # fmt: skip


def layout(name: str) -> tuple[dict, Optional[str], str, list[str]]:
    files, config, split, expected = LAYOUTS[name]
    if files is None:
        files = LAYOUTS["card configs: patterns in the card's order, data_dir"][0]
    return files, config, split, expected


def materialize(files: dict) -> dict[str, bytes]:
    """The layout's files as bytes: ("prefix", n) is n documents, in the file's format."""
    import gzip

    out = {}
    for path, spec in files.items():
        if isinstance(spec, str):
            out[path] = spec.encode()
            continue
        docs = texts(spec[0], spec[1])
        if ".parquet" in path:
            out[path] = parquet(docs)
        else:
            out[path] = jsonl(docs)
            if path.endswith(".gz"):
                out[path] = gzip.compress(out[path], mtime=0)
    return out


def expected_text(files: dict[str, bytes], order: list[str]) -> bytes:
    import gzip

    pq = pytest.importorskip("pyarrow.parquet")
    out = []
    for path in order:
        data = files[path]
        if path.endswith(".parquet"):
            out += pq.read_table(io.BytesIO(data)).column("text").to_pylist()
        else:
            data = gzip.decompress(data) if path.endswith(".gz") else data
            out += [json.loads(line)["text"] for line in data.decode().splitlines()]
    return "".join(out).encode()


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_the_files_and_their_order_are_datasets(name, hub, tmp_path):
    spec, config, split, order = layout(name)
    files = materialize(spec)
    sha = hub.push("test/layout", files)
    extra = [f"source.config={config}"] if config else []
    r = hf_cli(tmp_path, hub, "test/layout", f"source.split={split}", "out_dir=out", *extra)
    assert r.returncode == 0, r.stderr
    m = json.loads((tmp_path / "out" / "manifest.json").read_text())
    src = m["source"]
    assert (src["kind"], src["dataset"], src["split"], src["revision"], src["sha"]) == (
        "hf", "test/layout", split, "main", sha)  # fmt: skip
    assert src["config"] == config or (config is None and src["config"] in ("default", "web"))
    assert src["repo_files"] == order
    assert corpus(tmp_path / "out") == expected_text(files, order)
    # each file downloaded once, through the resolve API at the commit's sha
    for path in set(order):
        assert len(hub.asked("HEAD", f"/resolve/{sha}/{path}")) == 1, path


def datasets_rows(arguments: str, argv: list[str], home: Path) -> list[str]:
    """The text of each row datasets.load_dataset(ARGUMENTS) gives, run offline in a process
    of its own; `arguments` may read `argv` as sys.argv[1:]."""
    code = (
        "import json, sys, datasets\n"
        f"ds = datasets.load_dataset({arguments})\n"
        "sys.stdout.write(json.dumps(list(ds['text'])))\n"
    )
    env = {**os.environ, "HF_HOME": str(home), "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "HF_DATASETS_CACHE": str(home / "datasets")}  # fmt: skip
    r = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                       env=env, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


def load_dataset_texts(folder: Path, config: Optional[str], split: str, home: Path) -> bytes:
    """What datasets.load_dataset reads from a copy of the repository on disk (offline)."""
    rows = datasets_rows("sys.argv[1], sys.argv[2] or None, split=sys.argv[3]",
                         [str(folder), config or "", split], home)  # fmt: skip
    return "".join(rows).encode()


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_datasets_reads_the_same_text_in_the_same_order(name, hub, tmp_path):
    """corpusprep from the stand-in Hub, and datasets.load_dataset on a copy of the same
    repository on disk: the same text, in the same order (and the table above holds)."""
    pytest.importorskip("datasets")
    spec, config, split, order = layout(name)
    files = materialize(spec)
    hub.push("test/layout", files)
    extra = [f"source.config={config}"] if config else []
    r = hf_cli(tmp_path, hub, "test/layout", f"source.split={split}", "out_dir=out", *extra)
    assert r.returncode == 0, r.stderr
    repo = tmp_path / "layout"
    for path, data in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_bytes(data)
    theirs = load_dataset_texts(repo, config, split, tmp_path / "datasets_home")
    assert corpus(tmp_path / "out") == theirs == expected_text(files, order)


# --- a revision, recorded; offline from the HF cache -----------------------------------------


def tiny(hub: Hub, prefix: str = "a", n: int = 40) -> tuple[str, dict[str, bytes]]:
    files = {
        "README.md": card("configs:\n- config_name: default\n  data_files: data/*.parquet"),
        "data/0.parquet": parquet(texts(prefix, n)),
        "data/1.parquet": parquet(texts(prefix.upper(), n // 2)),
    }
    return hub.push("test/tiny", files), files


def test_a_servers_file_name_in_a_download_bar_is_shown_escaped(hub, tmp_path, monkeypatch):
    """Found by an attack: huggingface_hub's download bar is named by the file name the
    server's Content-Disposition gives (the Hub's CDN gives one), a stranger's string: its
    escape sequence (here one that sets the terminal's title) reached the terminal raw.
    The bar shows it escaped. (TQDM_POSITION=-1 draws the bars without a terminal.)"""
    real = sys.modules[__name__]._send

    def send(handler, code, body, head, headers=None, range_=None) -> None:
        if code == 200 and isinstance(body, bytes):
            named = 'attachment; filename="x\x1b]0;pwned\x07y";'
            headers = {**(headers or {}), "Content-Disposition": named}
        real(handler, code, body, head, headers, range_)

    monkeypatch.setattr(sys.modules[__name__], "_send", send)
    tiny(hub)
    bars = {"TQDM_POSITION": "-1"}
    r = run_cli("source=hf", "source.dataset=test/tiny", f"source.endpoint={hub.root}",
                "tokenizer=byte", "out_dir=o", cwd=tmp_path, env=bars)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "x\\x1b]0;pwned\\x07y" in r.stderr  # the bar was drawn
    assert "\x1b]" not in r.stderr and "\x07" not in r.stderr, repr(r.stderr)


def test_a_second_run_downloads_nothing_and_offline_needs_no_hub(hub, tmp_path):
    sha, files = tiny(hub)
    r = hf_cli(tmp_path, hub, "test/tiny", "out_dir=first")
    assert r.returncode == 0, r.stderr
    first = json.loads((tmp_path / "first" / "manifest.json").read_text())["source"]
    assert first["sha"] == sha and first["repo_files"] == ["data/0.parquet", "data/1.parquet"]
    assert Path(first["listing_path"]).parent == tmp_path / "cache"
    downloads = len(hub.cdn.log)
    assert downloads == 2
    # online again: one question (the revision), no download
    asked = len(hub.log)
    r = hf_cli(tmp_path, hub, "test/tiny", "out_dir=second")
    assert r.returncode == 0, r.stderr
    assert [(m, p) for m, p, _ in hub.log[asked:]] == [
        ("GET", "/api/datasets/test/tiny/revision/main")]  # fmt: skip
    assert len(hub.cdn.log) == downloads
    # HF_HUB_OFFLINE=1: not one request; the Hub gone: the same files from the caches
    asked = len(hub.log)
    r = hf_cli(tmp_path, hub, "test/tiny", "out_dir=offline", env={"HF_HUB_OFFLINE": "1"})
    assert r.returncode == 0, r.stderr
    assert len(hub.log) == asked and len(hub.cdn.log) == downloads
    hub.stop()
    r = hf_cli(tmp_path, hub, "test/tiny", "out_dir=gone")
    assert r.returncode == 0, r.stderr
    for out in ("second", "offline", "gone"):
        assert corpus(tmp_path / out) == corpus(tmp_path / "first"), out
        m = json.loads((tmp_path / out / "manifest.json").read_text())["source"]
        assert (m["sha"], m["repo_files"]) == (sha, first["repo_files"]), out
    # the list is kept, the files are not: one line, not part of a corpus
    import shutil

    shutil.rmtree(tmp_path / "hf_home")
    r = hf_cli(tmp_path, hub, "test/tiny", "out_dir=nofiles", env={"HF_HUB_OFFLINE": "1"})
    assert_one_line_error(r, "cannot download README.md", "HF cache does not have it")
    assert not (tmp_path / "nofiles").exists()


def test_the_revision_is_pinned_and_recorded(hub, tmp_path):
    old, _ = tiny(hub, "old")
    new, _ = tiny(hub, "new")
    assert old != new
    r = hf_cli(tmp_path, hub, "test/tiny", f"source.revision={old}", "out_dir=old")
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "old" / "manifest.json").read_text())["source"]["sha"] == old
    assert corpus(tmp_path / "old").startswith(b"<old 0:")
    assert hub.asked("GET", f"/api/datasets/test/tiny/revision/{old}")
    r = hf_cli(tmp_path, hub, "test/tiny", "out_dir=new")
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "new" / "manifest.json").read_text())["source"]["sha"] == new
    assert corpus(tmp_path / "new").startswith(b"<new 0:")
    # a commit's files never change: a pinned sha read before needs no request at all
    asked = len(hub.log)
    r = hf_cli(tmp_path, hub, "test/tiny", f"source.revision={old}", "out_dir=again")
    assert r.returncode == 0, r.stderr
    assert len(hub.log) == asked
    assert corpus(tmp_path / "again") == corpus(tmp_path / "old")


def test_offline_before_any_run_is_one_line(hub, tmp_path):
    tiny(hub)
    r = hf_cli(tmp_path, hub, "test/tiny", "out_dir=out", env={"HF_HUB_OFFLINE": "1"})
    assert_one_line_error(r, "test/tiny", "HF_HUB_OFFLINE", "run once with network")
    assert hub.log == [] and not (tmp_path / "out").exists()
    root = hub.root
    hub.stop()
    r = run_cli("source=hf", "source.dataset=test/tiny", f"source.endpoint={root}",
                "tokenizer=byte", "out_dir=out", cwd=tmp_path)  # fmt: skip
    assert_one_line_error(r, "test/tiny", "cannot connect", "run once with network")


# --- refusals: one line each -----------------------------------------------------------------


def test_a_split_or_config_that_does_not_exist_names_those_that_do(hub, tmp_path):
    hub.push("test/cfg", {
        "README.md": card("""
configs:
- config_name: en
  data_files:
  - {split: train, path: en/train.jsonl}
  - {split: validation, path: en/val.jsonl}
- config_name: fr
  data_files: fr/*.jsonl
"""),
        "en/train.jsonl": jsonl(["a"]), "en/val.jsonl": jsonl(["b"]),
        "fr/x.jsonl": jsonl(texts("fr", 3)),
    })  # fmt: skip
    r = hf_cli(tmp_path, hub, "test/cfg", "source.config=en", "source.split=test", "out_dir=o")
    assert_one_line_error(r, "source.split='test'", "'train', 'validation'")
    r = hf_cli(tmp_path, hub, "test/cfg", "source.config=de", "out_dir=o")
    assert_one_line_error(r, "source.config='de'", "'en', 'fr'")
    r = hf_cli(tmp_path, hub, "test/cfg", "out_dir=o")  # two configs, neither the default
    assert_one_line_error(r, "no default config", "source.config=en")
    hub.push("test/plain", {"data/train.jsonl": jsonl(["a"])})
    r = hf_cli(tmp_path, hub, "test/plain", "source.config=en", "out_dir=o")
    assert_one_line_error(r, "source.config='en'", "only 'default'")
    assert not (tmp_path / "o").exists()
    r = hf_cli(tmp_path, hub, "test/cfg", "source.config=fr", "out_dir=fr")
    assert r.returncode == 0, r.stderr
    assert corpus(tmp_path / "fr") == "".join(texts("fr", 3)).encode()


def test_a_loading_script_and_a_partial_conversion_are_refused(hub, tmp_path):
    hub.push("test/scripted", {"scripted.py": "import datasets\n", "README.md": "# x\n",
                               "subsets/a.tar": b"\0" * 512})  # fmt: skip
    r = hf_cli(tmp_path, hub, "test/scripted", "out_dir=o")
    assert_one_line_error(r, "loading script scripted.py", "source=files")
    # the Hub's Parquet conversion of a big dataset: only its first 5 GB, partial-train
    hub.push("test/big", {"default/partial-train/0000.parquet": parquet(texts("p", 3)),
                          "default/partial-train/0001.parquet": parquet(texts("q", 3))},
             branch="refs/convert/parquet")  # fmt: skip
    hub.push("test/big", {"data/train-00000-of-00001.parquet": parquet(texts("whole", 3))})
    r = hf_cli(tmp_path, hub, "test/big", "source.revision=refs/convert/parquet", "out_dir=o")
    assert_one_line_error(r, "partial", "5 GB", "source.revision=main")
    assert not (tmp_path / "o").exists()
    r = hf_cli(tmp_path, hub, "test/big", "out_dir=whole")
    assert r.returncode == 0, r.stderr
    assert corpus(tmp_path / "whole") == "".join(texts("whole", 3)).encode()


def test_unknown_dataset_revision_and_formats(hub, tmp_path):
    r = hf_cli(tmp_path, hub, "nobody/nothing", "out_dir=o")
    assert_one_line_error(r, "source.dataset='nobody/nothing'", "no such dataset", "HTTP 401")
    tiny(hub)
    r = hf_cli(tmp_path, hub, "test/tiny", "source.revision=v9", "out_dir=o")
    assert_one_line_error(r, "source.revision='v9'", "no such branch, tag or commit")
    hub.push("test/csv", {"train.csv": "text\nhello\n"})
    r = hf_cli(tmp_path, hub, "test/csv", "out_dir=o")
    assert_one_line_error(r, "csv data (train.csv)", "Parquet, JSON Lines, text")
    hub.push("test/empty", {"README.md": "# nothing yet\n", ".gitattributes": "x\n"})
    r = hf_cli(tmp_path, hub, "test/empty", "out_dir=o")
    assert_one_line_error(r, "'test/empty' has no data files")
    assert not (tmp_path / "o").exists()
    assert list((tmp_path / "cache").glob("*nobody*")) == []  # an error is never kept


def test_without_huggingface_hub_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import -> ImportError
    node = compose("source=hf", "source.dataset=a/b").source
    with pytest.raises(UserError, match=re.escape("pip install 'corpusprep[hub]'")):
        build(node, "source")


def test_the_config_keys(monkeypatch):
    cfg = compose("source=hf", "source.dataset=someone/my.corpus")
    src = cfg.source
    assert cfg.name == "my"  # named after the dataset
    assert (src.config, src.split, src.revision, src.format) == (None, "train", "main", "auto")
    assert src.endpoint == "https://huggingface.co"
    monkeypatch.setenv("HF_ENDPOINT", "https://hf-mirror.example")
    hf = build(compose("source=hf", "source.dataset=a/b").source, "source")
    assert isinstance(hf, HfSource) and hf.endpoint == "https://hf-mirror.example"
    # the kept lists: endpoint, dataset and revision all count
    paths = {HfSource("a/b", endpoint=e, revision=r).listing_path()
             for e in ("https://huggingface.co", "https://hf-mirror.example")
             for r in ("main", "v1")} | {HfSource("a/c").listing_path()}  # fmt: skip
    assert len(paths) == 5


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"dataset": "no spaces/x"}, "source.dataset"),
        ({"dataset": "a/b/c"}, "source.dataset"),
        ({"dataset": "a/b", "split": "x/y"}, "source.split"),
        ({"dataset": "a/b", "config": "x/y"}, "source.config"),
        ({"dataset": "a/b", "revision": " "}, "source.revision"),
        ({"dataset": "a/b", "endpoint": "huggingface.co"}, "source.endpoint"),
    ],
)
def test_bad_values(kwargs: dict, fragment: str):
    with pytest.raises(UserError, match=fragment):
        HfSource(**kwargs)


# --- the token, the library -----------------------------------------------------------------------


def test_a_gated_dataset_needs_the_token(hub, tmp_path):
    """(Where the token may go: tests/test_trust.py.)"""
    sha, files = tiny(hub)
    hub.gated.add("test/tiny")
    r = hf_cli(tmp_path, hub, "test/tiny", "out_dir=o")
    assert_one_line_error(r, "gated", "HF_TOKEN")
    r = hf_cli(tmp_path, hub, "test/tiny", "out_dir=o", env={"HF_TOKEN": "hf_secret"})
    assert r.returncode == 0, r.stderr
    sent = [h.get("Authorization") for _, _, h in hub.log[1:]]  # after the refused one
    assert sent and set(sent) == {"Bearer hf_secret"}
    assert len(hub.cdn.log) == 2
    assert all("Authorization" not in h for _, _, h in hub.cdn.log)  # another host


def test_corpusprep_imports_huggingface_hub_only_for_source_hf():
    code = (
        "import sys, corpusprep.app, corpusprep.prepare, corpusprep.sources.hf\n"
        "assert 'huggingface_hub' not in sys.modules, 'huggingface_hub imported'\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={"PYTHONPATH": str(REPO), "PATH": ""})  # fmt: skip
    assert r.returncode == 0, r.stderr


# an attack: a kept file list planted in a shared CORPUSPREP_CACHE_DIR, under a pinned
# commit's key but naming another commit, made the run read that other commit's files
def test_a_kept_list_of_another_commit_than_the_pinned_one_is_not_used(tmp_path):
    import json

    pinned, other = "a" * 40, "b" * 40
    src = HfSource("own/ds", revision=pinned, cache_dir=str(tmp_path))
    path = src.listing_path()
    path.write_text(json.dumps({"sha": other, "files": ["train.txt"]}))
    assert src._kept() is None
    path.write_text(json.dumps({"sha": pinned, "files": ["train.txt"]}))
    assert src._kept() == (pinned, ["train.txt"])
    if os.getuid() == 0:  # another user's list (a subset of the files, say): not taken
        os.chown(path, 12345, -1)
        assert src._kept() is None
        os.chown(path, 0, -1)
    path.unlink()
    os.mkfifo(path)  # a kept list is a regular file of a plausible size: never waited on
    with pytest.raises(UserError, match="unreadable"):
        src._kept()


# --- JSON data files that are not one object per "\n" line -----------------------------------

# datasets' json builder reads a file whose first byte is "[" as one array (of objects, or
# of strings: each string a "text"), and any other as a stream of objects, whatever the
# whitespace between them (pyarrow's reader): one per line, several on a line, or lines
# ended by a lone "\r"
JSON_DOCS = [f"<doc {i}: the cat sat\non the mat>\n" for i in range(30)]
JSON_LINES = [json.dumps({"text": t}) for t in JSON_DOCS]
JSON_FORMS = {
    "array of objects": ("data/train.json", json.dumps([{"text": t} for t in JSON_DOCS], indent=1)),
    "array of strings": ("data/train.json", json.dumps(JSON_DOCS)),
    "lines ended by CR": ("data/train.jsonl", "".join(line + "\r" for line in JSON_LINES)),
    "two objects on a line": ("data/train.jsonl",
                              "".join(line + " \n"[i % 2] for i, line in enumerate(JSON_LINES))),
}  # fmt: skip


@pytest.mark.parametrize("form", sorted(JSON_FORMS))
def test_json_files_read_as_datasets_reads_them(form, hub, tmp_path):
    pytest.importorskip("datasets")
    path, body = JSON_FORMS[form]
    readme = f"configs:\n- config_name: default\n  data_files:\n  - split: train\n    path: {path}"
    files = {"README.md": card(readme).encode(), path: body.encode()}
    hub.push("test/jsonforms", files)
    repo = tmp_path / "jsonforms"
    for name, data in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_bytes(data)
    theirs = load_dataset_texts(repo, None, "train", tmp_path / "datasets_home")
    assert theirs == "".join(JSON_DOCS).encode()
    r = hf_cli(tmp_path, hub, "test/jsonforms", "out_dir=out")
    assert r.returncode == 0, r.stderr
    assert corpus(tmp_path / "out") == theirs
