"""The well-known corpus presets (conf/dataset/); source=hf itself: test_hf_source.py.

Nothing here reaches the internet: the URL presets are played by a small HTTP server on
127.0.0.1 (started and stopped by a fixture, as in test_url_source.py) and the Hub by
test_hf_source.Hub, serving small stand-ins in the real formats; python_stdlib reads the
local standard library.
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
from helpers import LocalHTTPServer, compose, run_cli

from corpusprep.config import build
from corpusprep.sources.files import FilesSource
from corpusprep.sources.hf import HfSource
from corpusprep.sources.url import UrlSource
from corpusprep.tokenizers.byte import ByteTokenizer
from corpusprep.tokenizers.char import CharTokenizer
from corpusprep.tokenizers.tiktoken import TiktokenTokenizer

HOST = "127.0.0.1"
EOT = 50256  # gpt2's <|endoftext|>


class Server(LocalHTTPServer):
    """Serves `routes` (path -> body) on 127.0.0.1; counts requests and keeps their
    headers; anything else is a 404."""

    def __init__(self) -> None:
        self.routes: dict[str, bytes] = {}
        self.headers: dict[str, dict[str, str]] = {}
        super().__init__(_handler_for)

    def serve(self, path: str, body: bytes) -> str:
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
            if path in server.routes:
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


pytestmark = pytest.mark.usefixtures("loopback_env")


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
    assert (src.format, src.text_field, src.revision) == ("auto", "text", "main")
    assert (cfg.val_size, cfg.order, cfg.seed, cfg.eot, cfg.split_by) == (
        0.0005, "shuffle", 2357, "append", "document")  # nanoGPT's train_test_split  # fmt: skip
    hf = build(src, "source")
    assert isinstance(hf, HfSource) and hf.config == "plain_text"
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


# --- (c) the openwebtext preset against a local stand-in for the Hub ---------------------


def _parquet(texts: list[str]) -> bytes:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(pa.table({"id": list(range(len(texts))), "text": texts}), buf, row_group_size=50)
    return buf.getvalue()


def test_openwebtext_preset_against_a_stand_in(
    cache_dir: Path, tmp_path: Path, tiktoken_cache, monkeypatch: pytest.MonkeyPatch
):
    import tiktoken

    pytest.importorskip("huggingface_hub")
    from test_hf_source import Cdn, Hub, card

    rng = random.Random(11)
    words = ["the", "web", "page", "said", "that", "news", "today", "is", "good", "bad", "."]
    docs = [f"{i}. " + " ".join(rng.choices(words, k=rng.randint(3, 12))) for i in range(20_000)]
    # the layout the Hub's datasets have once converted from a loading script: a card whose
    # configs name the Parquet files (assumed here for Skylion007/openwebtext: not checked)
    readme = card("configs:\n- config_name: plain_text\n  data_files:\n"
                  "  - split: train\n    path: plain_text/train-*\n  default: true")  # fmt: skip
    cdn = Cdn()
    hub = Hub(cdn)
    try:
        files = {"README.md": readme,
                 "plain_text/train-00001-of-00002.parquet": _parquet(docs[10_000:]),
                 "plain_text/train-00000-of-00002.parquet": _parquet(docs[:10_000])}  # fmt: skip
        sha = hub.push("Skylion007/openwebtext", files)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))  # the HF cache of the run
        r = _cli(tmp_path, cache_dir, "dataset=openwebtext", f"source.endpoint={hub.root}",
                 "out_dir=out")  # fmt: skip
    finally:
        hub.stop()
        cdn.stop()
    assert r.returncode == 0, r.stderr
    m = _manifest(tmp_path / "out")
    assert m["name"] == "openwebtext"
    assert m["source"]["kind"] == "hf" and m["source"]["dataset"] == "Skylion007/openwebtext"
    assert (m["source"]["config"], m["source"]["sha"]) == ("plain_text", sha)
    assert m["source"]["repo_files"] == [
        f"plain_text/train-0000{i}-of-00002.parquet" for i in (0, 1)
    ]
    assert m["split"] == {"by": "document", "fraction": 0.9, "seed": 2357, "val_size": 0.0005}
    assert m["order"] == {"kind": "shuffle", "seed": 2357}
    assert m["eot"] == {"mode": "append", "id": EOT}
    assert m["tokenizer"]["encoding"] == "gpt2" and m["dtype"] == "uint16"
    assert m["documents"]["total"] == 20_000
    assert 0 < m["documents"]["val"] < 40  # 0.05% of 20,000 is 10
    enc = tiktoken.get_encoding("gpt2")
    assert sum(m["tokens"].values()) == sum(len(enc.encode_ordinary(d)) + 1 for d in docs)


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
