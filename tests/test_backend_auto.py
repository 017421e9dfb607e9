"""tokenizer.backend=auto, the default: splintr, else riptoken, where installed and proven
to give tiktoken's ids, else tiktoken; the same bytes whichever, and the manifest names it."""

from __future__ import annotations

import base64
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import REPO, assert_one_line_error, compose, run_cli, same_files

from corpusprep.errors import UserError
from corpusprep.tokenizers.tiktoken import TiktokenTokenizer, bundled_ranks

pytest.importorskip("riptoken")  # in the test extra: auto then picks one where proven
pytest.importorskip("splintr")

FAST = ("splintr", "riptoken")  # auto's order
TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n"


def blocking(folder: Path, *modules: str) -> dict:
    """The environment of a process in which `modules` cannot be imported."""
    folder.mkdir()
    lines = "".join(f"sys.modules[{m!r}] = None\n" for m in modules)
    (folder / "sitecustomize.py").write_text(f"import sys\n{lines}")
    return {"PYTHONPATH": str(folder)}


@pytest.fixture
def no_fast(tmp_path: Path) -> dict:
    """The environment of a process in which neither faster backend can be imported."""
    return blocking(tmp_path / "block", *FAST)


def gpt2_ranks_file(path: Path) -> Path:
    ranks = bundled_ranks("gpt2")
    lines = (f"{base64.b64encode(t).decode()} {r}\n" for t, r in ranks.items())
    path.write_text("".join(lines))
    return path


def test_the_config_default_is_auto():
    assert compose("tokenizer=tiktoken").tokenizer.backend == "auto"


@pytest.mark.parametrize("encoding", ["gpt2", "cl100k_base"])
def test_auto_picks_the_fastest_proven_backend(encoding, tiktoken_cache, monkeypatch):
    """splintr where installed, else riptoken, else tiktoken."""
    for missing, picked in (((), "splintr"), (("splintr",), "riptoken"), (FAST, "tiktoken")):
        for module in missing:
            monkeypatch.setitem(sys.modules, module, None)  # `import` fails
        tok = TiktokenTokenizer(encoding, backend="auto")
        assert tok.backend == picked and tok.describe()["backend"] == picked
        worker = pickle.loads(pickle.dumps(tok))  # what a worker process gets: the choice made
        assert worker.backend == picked and (worker._fast() is None) == (picked == "tiktoken")
        assert worker.encode(TEXT).tolist() == tok._enc().encode_ordinary(TEXT)
    assert TiktokenTokenizer(encoding, backend="tiktoken").describe()["backend"] == "tiktoken"


@pytest.mark.parametrize("encoding", ["gpt2", "p50k_base"])
def test_auto_keeps_tiktoken_for_a_ranks_file(encoding, tmp_path, tiktoken_cache):
    ranks = gpt2_ranks_file(tmp_path / "mine.tiktoken")
    tok = TiktokenTokenizer(encoding, ranks_file=str(ranks), backend="auto")
    assert tok.backend == "tiktoken" and tok.describe()["backend"] == "tiktoken"
    assert tok.encode(TEXT).tolist() == TiktokenTokenizer("gpt2")._enc().encode_ordinary(TEXT)
    for backend in FAST:
        with pytest.raises(UserError, match="proven identical"):
            TiktokenTokenizer(encoding, ranks_file=str(ranks), backend=backend)


def test_a_bad_backend_is_one_line_naming_the_choices(tmp_path, tiktoken_cache):
    (tmp_path / "in.txt").write_text(TEXT * 20)
    r = run_cli("source=file", "source.path=in.txt", "tokenizer=tiktoken",
                "tokenizer.backend=fast", "out_dir=out", cwd=tmp_path)  # fmt: skip
    assert_one_line_error(r, "tokenizer.backend=fast", "auto", "tiktoken", "riptoken", "splintr")


def test_auto_falls_back_to_tiktoken_without_either(tmp_path, tiktoken_cache, no_fast):
    (tmp_path / "in.txt").write_text(TEXT * 200)
    r = run_cli("source=file", "source.path=in.txt", "tokenizer=tiktoken", "out_dir=out",
                "quiet=true", cwd=tmp_path, env=no_fast)  # fmt: skip
    assert r.returncode == 0, r.stderr
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["config"]["tokenizer"]["backend"] == "auto"
    assert manifest["tokenizer"]["backend"] == "tiktoken"


@pytest.mark.parametrize("backend", FAST)
def test_a_worker_without_the_backend_keeps_the_ids(tmp_path, tiktoken_cache, monkeypatch,
                                                    backend):  # fmt: skip
    """auto chose a faster backend, a worker on another machine cannot import it:
    tiktoken's ids (the same); an explicit backend there is one clear line instead."""
    for other in FAST[: FAST.index(backend)]:  # auto passes them over here
        monkeypatch.setitem(sys.modules, other, None)
    for name in ("auto", backend):
        tok = TiktokenTokenizer("gpt2", backend=name)
        assert tok.backend == backend
        (tmp_path / f"{name}.pkl").write_bytes(pickle.dumps(tok))
    code = (
        "import pickle, sys\n"
        "from corpusprep.errors import UserError\n"
        f"for name in ('auto', {backend!r}):\n"
        "    tok = pickle.loads(open(name + '.pkl', 'rb').read())\n"
        "    try:\n"
        "        print(name, tok.backend, tok.encode(sys.argv[1]).tolist())\n"
        "    except UserError as e:\n"
        "        print(name, 'error', e)\n"
    )
    blocked = blocking(tmp_path / "block", backend)
    env = {"PYTHONPATH": f"{blocked['PYTHONPATH']}:{REPO}"}
    r = subprocess.run([sys.executable, "-c", code, TEXT], cwd=tmp_path, capture_output=True,
                       text=True, env={**os.environ, **env}, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    auto, explicit = r.stdout.splitlines()
    want = TiktokenTokenizer("gpt2")._enc().encode_ordinary(TEXT)
    assert auto == f"auto {backend} {want}"
    assert explicit.startswith(f"{backend} error ") and "pip install 'corpusprep[fast]'" in explicit


def test_every_backend_writes_the_same_bytes(tmp_path, tiktoken_cache):
    """Documents in a JSONL file, cl100k_base (so a meta.pkl too), several shards and
    workers: auto, tiktoken, splintr and riptoken write identical files; each manifest names the
    backend that encoded; corpusprep.load rebuilds each, and an older manifest."""
    import corpusprep

    words = ["the", "cat", "sat", "on", "a", "mat;", "42", "é", "日本", "😀", "\n", "\n\n"]
    rng = np.random.default_rng(0)
    docs = ["".join(rng.choice(words, 60) + " ") for _ in range(300)]
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    outs = {}
    for backend in ("auto", "tiktoken", *FAST):
        r = run_cli("source=files", "source.glob=docs.jsonl", "source.format=jsonl",
                    "tokenizer=tiktoken", "tokenizer.encoding=cl100k_base",
                    f"tokenizer.backend={backend}", "shard_bytes=20000", "executor.workers=2",
                    f"out_dir={backend}", "quiet=true", cwd=tmp_path)  # fmt: skip
        assert r.returncode == 0, r.stderr
        outs[backend] = tmp_path / backend
    for backend in ("tiktoken", *FAST):
        same_files(outs["auto"], outs[backend])
    used = {b: json.loads((o / "manifest.json").read_text())["tokenizer"]["backend"]
            for b, o in outs.items()}  # fmt: skip
    assert used == {"auto": "splintr", "tiktoken": "tiktoken", **{b: b for b in FAST}}
    assert corpusprep.load(outs["auto"]).tokenizer.backend == "splintr"
    # manifests written before auto: no backend in their tokenizer, and tiktoken (or, older
    # still, nothing) in their config
    path = outs["tiktoken"] / "manifest.json"
    old = json.loads(path.read_text())
    del old["tokenizer"]["backend"]
    want = TiktokenTokenizer("cl100k_base")._enc().encode_ordinary(docs[0])
    older = json.loads(json.dumps(old))
    del older["config"]["tokenizer"]["backend"]
    for manifest in (old, older):
        path.write_text(json.dumps(manifest))
        ds = corpusprep.load(outs["tiktoken"])
        assert ds.tokenizer.backend == "tiktoken"
        assert ds.tokenizer.encode(docs[0]).tolist() == want


def test_installing_a_backend_leaves_a_folder_up_to_date(tmp_path, tiktoken_cache, no_fast):
    """The backend changes how fast, never the ids: a folder auto made with tiktoken is up
    to date once splintr and riptoken are there, and for each named backend too."""
    (tmp_path / "in.txt").write_text(TEXT * 200)
    args = ("source=file", "source.path=in.txt", "tokenizer=tiktoken", "out_dir=out")
    r = run_cli(*args, "quiet=true", cwd=tmp_path, env=no_fast)
    assert r.returncode == 0, r.stderr
    for backend in ("auto", *FAST):
        r = run_cli(*args, f"tokenizer.backend={backend}", cwd=tmp_path)
        assert r.returncode == 0 and "is up to date" in r.stdout, r.stdout + r.stderr
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["tokenizer"]["backend"] == "tiktoken"  # what encoded the files


@pytest.mark.parametrize("encoding", ["gpt2", "cl100k_base"])
def test_splintr_needs_no_tiktoken_encoding(encoding, tiktoken_cache, monkeypatch):
    """With splintr, what a run asks of the tokenizer (its description, ids, dtype, token
    bytes, the core, the ids themselves) comes from the vocabulary: tiktoken's Encoding
    (0.04 s to build) is never made. The answers are those the Encoding gives."""
    import tiktoken

    import corpusprep.tokenizers.tiktoken as tiktoken_tokenizer

    reference = TiktokenTokenizer(encoding, backend="tiktoken")
    enc = reference._enc()
    monkeypatch.setattr(tiktoken_tokenizer, "_cache", {})

    def refuse(*args, **kwargs):
        raise AssertionError("tiktoken's Encoding built")

    monkeypatch.setattr(tiktoken, "Encoding", refuse)
    tok = TiktokenTokenizer(encoding, backend="splintr")
    tok.load()
    assert tok.vocab_size == enc.n_vocab and tok.max_id == enc.max_token_value
    assert tok.eot_id == enc.eot_token
    assert tok.special_ids() == set(enc._special_tokens.values())
    assert {k: v for k, v in tok.describe().items() if k != "backend"} == {
        k: v for k, v in reference.describe().items() if k != "backend"}  # fmt: skip
    assert np.array_equal(tok.token_bytes(), reference.token_bytes())
    assert tok.encode(TEXT).tolist() == enc.encode_ordinary(TEXT)
