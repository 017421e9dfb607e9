"""The well-known corpus presets (conf/dataset/) and source=hf.

Nothing here reaches the internet: the URL presets and the Hub are played by a small HTTP
server on 127.0.0.1 (started and stopped by a fixture, as in test_url_source.py) serving
small stand-ins in the real formats; python_stdlib reads the local standard library.
"""

from __future__ import annotations

import glob
import hashlib
import io
import json
import os
import pickle
import random
import sysconfig
import zipfile
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import numpy as np
import pytest
from helpers import LocalHTTPServer, assert_one_line_error, compose, run_cli

from corpusprep.config import build
from corpusprep.errors import UserError
from corpusprep.sources.files import FilesSource
from corpusprep.sources.hf import HfSource
from corpusprep.sources.url import UrlSource
from corpusprep.tokenizers.byte import ByteTokenizer
from corpusprep.tokenizers.char import CharTokenizer
from corpusprep.tokenizers.tiktoken import TiktokenTokenizer

HOST = "127.0.0.1"
EOT = 50256  # gpt2's <|endoftext|>
OWT = "/api/datasets/Skylion007/openwebtext/parquet/plain_text/train"
TINY = "/api/datasets/test/tiny/parquet/default/train"


class Server(LocalHTTPServer):
    """Serves `routes` (path -> body, JSON for lists) on 127.0.0.1; counts requests and
    keeps their headers; anything else is a 404."""

    def __init__(self) -> None:
        self.routes: dict[str, bytes] = {}
        self.headers: dict[str, dict[str, str]] = {}
        super().__init__(_handler_for)

    def serve(self, path: str, body: bytes | list) -> str:
        if isinstance(body, list):  # a Hub listing: absolute URLs of this server
            body = json.dumps([self.root + p for p in body]).encode()
        self.routes[path] = body
        return self.root + path


def _handler_for(server: Server) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format, *args):
            pass

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            with server._lock:
                server.counts[path] += 1
                server.headers[path] = dict(self.headers.items())
            if path.startswith("/api/datasets/gated/"):
                code, body = 401, b'{"error": "Access to this dataset is restricted"}'
            elif path in server.routes:
                code, body = 200, server.routes[path]
            else:
                code, body = 404, b'{"error": "not found"}'
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)
            self.close_connection = True

    return Handler


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy between the tests and 127.0.0.1; no Hub settings from the developer's shell."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                 "HF_TOKEN", "HF_ENDPOINT"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


@pytest.fixture
def server():
    srv = Server()
    try:
        yield srv
    finally:
        srv.stop()


def _cli(tmp_path: Path, cache_dir: Path, *args: str):
    return run_cli(*args, "quiet=true", cwd=tmp_path, env={"CORPUSPREP_CACHE_DIR": str(cache_dir)})


def _manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def _ids(out: Path, side: str, manifest: dict) -> np.ndarray:
    return np.fromfile(out / f"{side}.bin", dtype=manifest["dtype"])


def _zip(member: str, data: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(member, data)
    return buf.getvalue()


def _zip_digest(manifest: dict, archive: bytes, member: str) -> str:
    """The input digest the manifest records for one zip member: over "name<TAB>digest"
    lines, the member's digest being sha256(archive's sha256 + member name)."""
    member_digest = hashlib.sha256(hashlib.sha256(archive).digest() + member.encode()).hexdigest()
    listed = manifest["source"]["files"][0]
    line = f"{listed['path']}!{member}\t{member_digest}\n"
    return hashlib.sha256(line.encode()).hexdigest()


# --- (a) every preset composes as documented --------------------------------------------


def _target(node) -> type:
    """The class a config node names (without building it: tiktoken would load its ranks)."""
    from hydra.utils import get_class

    return get_class(node._target_)


def test_enwik8_preset():
    cfg = compose("dataset=enwik8")
    assert cfg.name == "enwik8"
    assert cfg.source.url == "http://mattmahoney.net/dc/enwik8.zip"
    assert cfg.source.sha256 is None
    assert (cfg.split, cfg.split_by) == (0.9, "position")
    assert isinstance(build(cfg.source, "source"), UrlSource)
    assert isinstance(build(cfg.tokenizer, "tokenizer"), ByteTokenizer)


def test_text8_preset():
    cfg = compose("dataset=text8")
    assert cfg.name == "text8"
    assert cfg.source.url == "http://mattmahoney.net/dc/text8.zip"
    assert cfg.source.sha256 is None
    assert (cfg.split, cfg.split_by) == (0.9, "position")
    assert isinstance(build(cfg.source, "source"), UrlSource)
    assert isinstance(build(cfg.tokenizer, "tokenizer"), CharTokenizer)


def test_tinystories_preset():
    cfg = compose("dataset=tinystories")
    assert cfg.name == "tinystories"
    assert cfg.source.url == (
        "https://huggingface.co/datasets/roneneldan/TinyStories/resolve/main/"
        "TinyStoriesV2-GPT4-train.txt"
    )
    assert cfg.source.sha256 is None
    assert cfg.source.doc_separator == "<|endoftext|>"
    assert (cfg.split_by, cfg.eot) == ("document", "append")
    assert isinstance(build(cfg.source, "source"), UrlSource)
    assert _target(cfg.tokenizer) is TiktokenTokenizer and cfg.tokenizer.encoding == "gpt2"


def test_openwebtext_preset():
    cfg = compose("dataset=openwebtext")
    assert cfg.name == "openwebtext"
    src = cfg.source
    assert (src.dataset, src.config, src.split) == ("Skylion007/openwebtext", "plain_text", "train")
    assert src.endpoint == "https://huggingface.co"
    assert (src.format, src.text_field) == ("parquet", "text")
    assert (cfg.split, cfg.seed, cfg.eot, cfg.split_by) == (0.9995, 2357, "append", "document")
    hf = build(src, "source")
    assert isinstance(hf, HfSource)
    assert hf.listing_url() == "https://huggingface.co" + OWT
    assert _target(cfg.tokenizer) is TiktokenTokenizer and cfg.tokenizer.encoding == "gpt2"


def test_python_stdlib_preset():
    cfg = compose("dataset=python_stdlib")
    assert cfg.name == "python_stdlib"
    assert cfg.source.glob == sysconfig.get_paths()["stdlib"] + "/**/*.py"
    assert list(cfg.source.exclude) == ["**/site-packages/**"]
    assert cfg.source.skip_invalid is True
    assert (cfg.split_by, cfg.eot) == ("document", "append")
    assert isinstance(build(cfg.source, "source"), FilesSource)
    assert isinstance(build(cfg.tokenizer, "tokenizer"), CharTokenizer)


def test_hf_source_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    cfg = compose("source=hf", "source.dataset=someone/my.corpus")
    assert cfg.name == "my"  # named after the dataset
    assert (cfg.source.config, cfg.source.split, cfg.source.format) == (
        "default", "train", "parquet")  # fmt: skip
    monkeypatch.setenv("HF_ENDPOINT", "https://hf-mirror.example")
    cfg = compose("source=hf", "source.dataset=a/b", f"source.cache_dir={tmp_path}")
    src = build(cfg.source, "source")
    assert src.listing_url() == "https://hf-mirror.example/api/datasets/a/b/parquet/default/train"
    assert src.listing_path().parent == tmp_path
    # the listing's cache key: endpoint, dataset, config and split all count
    other = [
        HfSource("a/b", endpoint="https://huggingface.co", cache_dir=str(tmp_path)),
        HfSource("a/c", endpoint="https://hf-mirror.example", cache_dir=str(tmp_path)),
        HfSource("a/b", "x", endpoint="https://hf-mirror.example", cache_dir=str(tmp_path)),
        HfSource(
            "a/b", split="test", endpoint="https://hf-mirror.example", cache_dir=str(tmp_path)
        ),
    ]
    assert len({src.listing_path(), *(o.listing_path() for o in other)}) == 5


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"dataset": "no spaces/x"}, "source.dataset"),
        ({"dataset": "a/b/c"}, "source.dataset"),
        ({"dataset": "a/b", "config": ""}, "source.config"),
        ({"dataset": "a/b", "split": "x/y"}, "source.split"),
        ({"dataset": "a/b", "endpoint": "huggingface.co"}, "source.endpoint"),
    ],
)
def test_hf_source_bad_values(kwargs: dict, fragment: str):
    with pytest.raises(UserError, match=fragment):
        HfSource(**kwargs)


# --- (b) the URL presets end to end, against local stand-ins -----------------------------


def test_enwik8_end_to_end(server: Server, cache_dir: Path, tmp_path: Path):
    rng = random.Random(8)
    words = ["<page>", "<title>", "Anarchism", "[[Category:", "&amp;", "café", "Zürich", "日本"]
    text = "\n".join(" ".join(rng.choices(words, k=12)) for _ in range(400)) + "\n"
    archive = _zip("enwik8", text.encode())
    url = server.serve("/dc/enwik8.zip", archive)
    r = _cli(tmp_path, cache_dir, "dataset=enwik8", f"source.url={url}", "out_dir=out")
    assert r.returncode == 0, r.stderr
    out = tmp_path / "out"
    m = _manifest(out)
    assert m["name"] == "enwik8" and m["vocab_size"] == 256
    assert m["split"]["by"] == "position" and m["split"]["fraction"] == 0.9
    assert m["split"]["train_chars"] == int(len(text) * 0.9)  # nanoGPT's int(n * split)
    assert m["eot"]["mode"] == "none"
    train, val = _ids(out, "train", m), _ids(out, "val", m)
    assert bytes(np.concatenate([train, val]).astype(np.uint8)) == text.encode()
    assert bytes(train.astype(np.uint8)).decode() == text[: int(len(text) * 0.9)]
    cached = Path(m["source"]["cache_path"])
    assert cached.parent == cache_dir and cached.read_bytes() == archive
    assert m["source"]["files"][0]["member"] == "enwik8"
    assert m["source"]["sha256"] == _zip_digest(m, archive, "enwik8")
    assert server.count("/dc/enwik8.zip") == 1


def test_text8_end_to_end(server: Server, cache_dir: Path, tmp_path: Path):
    rng = random.Random(9)
    words = ["anarchism", "originated", "as", "a", "term", "of", "abuse", "first", "used"]
    text = " " + " ".join(rng.choices(words, k=8000))  # text8: one line, a-z and spaces
    archive = _zip("text8", text.encode())
    url = server.serve("/dc/text8.zip", archive)
    r = _cli(tmp_path, cache_dir, "dataset=text8", f"source.url={url}", "out_dir=out")
    assert r.returncode == 0, r.stderr
    out = tmp_path / "out"
    m = _manifest(out)
    n = len(text)
    assert m["tokens"] == {"train": int(n * 0.9), "val": n - int(n * 0.9)}
    with open(out / "meta.pkl", "rb") as f:
        meta = pickle.load(f)
    assert meta["vocab_size"] == len(set(text)) == m["vocab_size"]
    ids = np.concatenate([_ids(out, "train", m), _ids(out, "val", m)])
    assert "".join(meta["itos"][int(i)] for i in ids) == text
    assert m["source"]["sha256"] == _zip_digest(m, archive, "text8")


def test_tinystories_end_to_end(server: Server, cache_dir: Path, tmp_path: Path, tiktoken_cache):
    import tiktoken

    rng = random.Random(10)
    names = ["Lily", "Tom", "Ben", "Sue"]
    things = ["a red ball", "a big dog", "the park", "a little cake"]
    stories = [
        f"Once upon a time, {rng.choice(names)} found {rng.choice(things)}.\n"
        f"{rng.choice(names)} was very happy. Story {i}."
        for i in range(300)
    ]
    body = "\n<|endoftext|>\n".join(stories).encode() + b"\n<|endoftext|>\n"
    url = server.serve("/TinyStoriesV2-GPT4-train.txt", body)
    r = _cli(tmp_path, cache_dir, "dataset=tinystories", f"source.url={url}", "out_dir=out")
    assert r.returncode == 0, r.stderr
    m = _manifest(tmp_path / "out")
    assert m["name"] == "tinystories"
    assert m["source"]["sha256"] == hashlib.sha256(body).hexdigest()  # a single plain file
    assert m["documents"]["total"] == 300
    assert m["documents"]["train"] > m["documents"]["val"] > 0
    assert m["split"] == {"by": "document", "fraction": 0.9, "seed": 2357}
    assert m["eot"] == {"mode": "append", "id": EOT}
    enc = tiktoken.get_encoding("gpt2")
    assert sum(m["tokens"].values()) == sum(len(enc.encode_ordinary(s)) + 1 for s in stories)
    train = _ids(tmp_path / "out", "train", m)
    assert int((train == EOT).sum()) == m["documents"]["train"]


# --- (c) source=hf against a local stand-in for the Hub --------------------------------------


def _parquet(texts: list[str]) -> bytes:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(pa.table({"id": list(range(len(texts))), "text": texts}), buf, row_group_size=50)
    return buf.getvalue()


def _docs(out: Path, side: str, m: dict) -> list[str]:
    ids = _ids(out, side, m)
    starts = np.fromfile(out / f"{side}.docs.bin", dtype=np.uint64).tolist() + [len(ids)]
    return [bytes(ids[a:b].astype(np.uint8)).decode() for a, b in zip(starts, starts[1:])]


@pytest.fixture
def tiny_hub(server: Server) -> tuple[Server, list[str]]:
    """The dataset test/tiny: two Parquet files, listed out of order (10 before 2)."""
    docs = [f"document {i}: {'é' * (i % 3)} the cat sat on the mat\nline two" for i in range(300)]
    server.serve("/files/tiny/10.parquet", _parquet(docs[120:]))
    server.serve("/files/tiny/2.parquet", _parquet(docs[:120]))
    server.serve(TINY, ["/files/tiny/10.parquet", "/files/tiny/2.parquet"])
    return server, docs


def _hf(tmp_path: Path, cache_dir: Path, server: Server, out: str, *extra: str):
    return _cli(tmp_path, cache_dir, "source=hf", "source.dataset=test/tiny",
                f"source.endpoint={server.root}", "source.retries=0", "source.timeout=10",
                "tokenizer=byte", "eot=none", f"out_dir={out}", *extra)  # fmt: skip


def test_hf_source_end_to_end_then_offline(tiny_hub, cache_dir: Path, tmp_path: Path):
    server, docs = tiny_hub
    r = _hf(tmp_path, cache_dir, server, "out")
    assert r.returncode == 0, r.stderr
    out = tmp_path / "out"
    m = _manifest(out)
    assert m["name"] == "tiny"
    src = m["source"]
    assert (src["kind"], src["dataset"], src["config"], src["split"]) == (
        "hf", "test/tiny", "default", "train")  # fmt: skip
    assert src["url"] == server.root + TINY
    # sorted with numbers as numbers: 2.parquet, then 10.parquet
    assert [Path(f["path"]).name.split("-", 1)[1] for f in src["files"]] == [
        "2.parquet", "10.parquet"]  # fmt: skip
    for f, name in zip(src["files"], ["2.parquet", "10.parquet"]):
        assert f["format"] == "parquet"
        assert f["sha256"] == hashlib.sha256(server.routes[f"/files/tiny/{name}"]).hexdigest()
    assert m["documents"]["total"] == 300 and m["split"]["by"] == "document"
    assert sorted(_docs(out, "train", m) + _docs(out, "val", m)) == sorted(docs)
    assert Path(src["listing_path"]).parent == cache_dir
    assert json.loads(Path(src["listing_path"]).read_text()) == json.loads(server.routes[TINY])
    assert not [p for p in cache_dir.iterdir() if p.name.endswith(".part")]
    hits = {p: server.count(p) for p in (TINY, "/files/tiny/2.parquet", "/files/tiny/10.parquet")}
    assert set(hits.values()) == {1}

    # again with the server gone: the listing and the files come from the cache
    server.stop()
    again = _hf(tmp_path, cache_dir, server, "again")
    assert again.returncode == 0, again.stderr
    for name in ("train.bin", "val.bin", "train.docs.bin", "val.docs.bin"):
        assert (tmp_path / "again" / name).read_bytes() == (out / name).read_bytes(), name
    assert {p: server.count(p) for p in hits} == hits


def test_hf_unknown_dataset(server: Server, cache_dir: Path, tmp_path: Path):
    r = _cli(tmp_path, cache_dir, "source=hf", "source.dataset=nobody/nothing",
             f"source.endpoint={server.root}", "source.retries=0", "out_dir=out")  # fmt: skip
    assert_one_line_error(r, "nobody/nothing", "'default'", "'train'", "HTTP 404", "source.dataset")
    assert server.count("/api/datasets/nobody/nothing/parquet/default/train") == 1
    assert list(cache_dir.iterdir()) == []  # an error is never cached
    assert not (tmp_path / "out").exists()


def test_hf_offline_without_cached_listing(server: Server, cache_dir: Path, tmp_path: Path):
    root = server.root
    server.stop()  # nothing listens there now
    r = _cli(tmp_path, cache_dir, "source=hf", "source.dataset=test/tiny",
             f"source.endpoint={root}", "source.retries=0", "out_dir=out")  # fmt: skip
    assert_one_line_error(r, "test/tiny", "cannot connect", "run once with network",
                          str(cache_dir), "source=files")  # fmt: skip
    assert list(cache_dir.iterdir()) == []


def test_hf_token_is_sent_with_the_listing(
    tiny_hub, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
):
    server, docs = tiny_hub
    src = HfSource("test/tiny", endpoint=server.root, cache_dir=str(cache_dir), retries=0)
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    files = src.files(progress=False)
    assert [f.format for f in files] == ["parquet", "parquet"]
    assert server.headers[TINY].get("Authorization") == "Bearer hf_secret"

    monkeypatch.delenv("HF_TOKEN")
    other = HfSource("test/tiny", "other", endpoint=server.root, cache_dir=str(cache_dir))
    server.serve("/api/datasets/test/tiny/parquet/other/train", ["/files/tiny/2.parquet"])
    assert len(other.files(progress=False)) == 1
    assert "Authorization" not in server.headers["/api/datasets/test/tiny/parquet/other/train"]


def test_hf_gated_and_bad_listings(server: Server, cache_dir: Path):
    def source(dataset: str) -> HfSource:
        return HfSource(dataset, endpoint=server.root, cache_dir=str(cache_dir), retries=0)

    with pytest.raises(UserError) as e:
        source("gated/thing").files(progress=False)
    assert "HTTP 401" in str(e.value) and "HF_TOKEN" in str(e.value)
    # listed, but the file itself is refused; HF_TOKEN, when set, goes with the download too
    server.serve("/api/datasets/a/locked/parquet/default/train", ["/api/datasets/gated/0.parquet"])
    with pytest.raises(UserError) as e:
        source("a/locked").files(progress=False)
    assert "HTTP 401" in str(e.value) and "gated or private" in str(e.value)
    assert "set HF_TOKEN" in str(e.value)
    os.environ["HF_TOKEN"] = "hf_test_token"
    try:
        with pytest.raises(UserError):
            source("a/locked").files(progress=False)
    finally:
        del os.environ["HF_TOKEN"]
    assert (
        server.headers["/api/datasets/gated/0.parquet"]["Authorization"] == "Bearer hf_test_token"
    )
    server.serve("/api/datasets/a/empty/parquet/default/train", [])
    with pytest.raises(UserError, match="no Parquet files"):
        source("a/empty").files(progress=False)
    server.serve("/api/datasets/a/html/parquet/default/train", b"<html>hello</html>")
    with pytest.raises(UserError, match="not a Parquet file listing"):
        source("a/html").files(progress=False)
    # a broken cached listing is reported, never silently replaced
    src = source("a/broken")
    src.listing_path().write_text('{"not": "a list"}')
    with pytest.raises(UserError, match="delete it"):
        src.files(progress=False)
    assert server.count("/api/datasets/a/broken/parquet/default/train") == 0


def test_openwebtext_preset_against_a_stand_in(
    server: Server, cache_dir: Path, tmp_path: Path, tiktoken_cache
):
    import tiktoken

    rng = random.Random(11)
    words = ["the", "web", "page", "said", "that", "news", "today", "is", "good", "bad", "."]
    docs = [f"{i}. " + " ".join(rng.choices(words, k=rng.randint(3, 12))) for i in range(20_000)]
    server.serve("/owt/train/0.parquet", _parquet(docs[:10_000]))
    server.serve("/owt/train/1.parquet", _parquet(docs[10_000:]))
    server.serve(OWT, ["/owt/train/0.parquet", "/owt/train/1.parquet"])
    r = _cli(tmp_path, cache_dir, "dataset=openwebtext", f"source.endpoint={server.root}",
             "out_dir=out")  # fmt: skip
    assert r.returncode == 0, r.stderr
    m = _manifest(tmp_path / "out")
    assert m["name"] == "openwebtext"
    assert m["source"]["kind"] == "hf" and m["source"]["dataset"] == "Skylion007/openwebtext"
    assert m["split"] == {"by": "document", "fraction": 0.9995, "seed": 2357}
    assert m["eot"] == {"mode": "append", "id": EOT}
    assert m["tokenizer"]["encoding"] == "gpt2" and m["dtype"] == "uint16"
    assert m["documents"]["total"] == 20_000
    assert 0 < m["documents"]["val"] < 40  # 0.05% of 20,000 is 10
    enc = tiktoken.get_encoding("gpt2")
    assert sum(m["tokens"].values()) == sum(len(enc.encode_ordinary(d)) + 1 for d in docs)
    assert server.count(OWT) == 1


# --- (d) python_stdlib, for real: no network ---------------------------------------------


def test_python_stdlib_end_to_end(tmp_path: Path):
    stdlib = sysconfig.get_paths()["stdlib"]
    files = [p for p in glob.glob(f"{stdlib}/**/*.py", recursive=True)
             if "/site-packages/" not in p and os.path.getsize(p) > 0]  # fmt: skip
    invalid = []
    for p in files:
        try:
            Path(p).read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            invalid.append(p)
    r = run_cli("dataset=python_stdlib", "out_dir=out", "quiet=true", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    m = _manifest(tmp_path / "out")
    docs = m["documents"]
    assert docs["total"] == len(files) - len(invalid) > 500
    assert docs["train"] > docs["val"] > 0
    assert m["split"]["by"] == "document" and m["eot"]["mode"] == "append"
    assert len(m["source"]["files"]) == len(files)
    assert not any("site-packages" in f["path"] for f in m["source"]["files"])
    with open(tmp_path / "out" / "meta.pkl", "rb") as f:
        meta = pickle.load(f)
    assert meta["itos"][m["eot"]["id"]] == "<|endoftext|>"
    assert "skipped_invalid" in docs
    assert docs["skipped_invalid"] == len(invalid)
