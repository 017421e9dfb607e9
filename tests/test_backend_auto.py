"""tokenizer.backend=auto, the default: riptoken where it is installed and proven to give
tiktoken's ids, else tiktoken; the same bytes whichever, and the manifest names it."""

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

pytest.importorskip("riptoken")  # in the test extra: auto then picks it where proven

# makes `import riptoken` fail in a process started with this folder on PYTHONPATH
BLOCK = "import sys\nsys.modules['riptoken'] = None\n"
TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n"


@pytest.fixture
def no_riptoken(tmp_path: Path) -> dict:
    """The environment of a process in which riptoken cannot be imported."""
    folder = tmp_path / "block"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(BLOCK)
    return {"PYTHONPATH": str(folder)}


def gpt2_ranks_file(path: Path) -> Path:
    ranks = bundled_ranks("gpt2")
    lines = (f"{base64.b64encode(t).decode()} {r}\n" for t, r in ranks.items())
    path.write_text("".join(lines))
    return path


def test_the_config_default_is_auto():
    assert compose("tokenizer=tiktoken").tokenizer.backend == "auto"


@pytest.mark.parametrize("encoding", ["gpt2", "cl100k_base"])
def test_auto_picks_riptoken_where_proven(encoding, tiktoken_cache):
    tok = TiktokenTokenizer(encoding, backend="auto")
    assert tok.backend == "riptoken" and tok.describe()["backend"] == "riptoken"
    worker = pickle.loads(pickle.dumps(tok))  # what a worker process gets: the choice made
    assert worker.backend == "riptoken" and worker._fast() is not None
    assert worker.encode(TEXT).tolist() == tok._enc().encode_ordinary(TEXT)
    assert TiktokenTokenizer(encoding, backend="tiktoken").describe()["backend"] == "tiktoken"


@pytest.mark.parametrize("encoding", ["gpt2", "p50k_base"])
def test_auto_keeps_tiktoken_for_a_ranks_file(encoding, tmp_path, tiktoken_cache):
    ranks = gpt2_ranks_file(tmp_path / "mine.tiktoken")
    tok = TiktokenTokenizer(encoding, ranks_file=str(ranks), backend="auto")
    assert tok.backend == "tiktoken" and tok.describe()["backend"] == "tiktoken"
    assert tok.encode(TEXT).tolist() == TiktokenTokenizer("gpt2")._enc().encode_ordinary(TEXT)
    with pytest.raises(UserError, match="proven identical"):
        TiktokenTokenizer(encoding, ranks_file=str(ranks), backend="riptoken")


def test_a_bad_backend_is_one_line_naming_the_choices(tmp_path, tiktoken_cache):
    (tmp_path / "in.txt").write_text(TEXT * 20)
    r = run_cli("source=file", "source.path=in.txt", "tokenizer=tiktoken",
                "tokenizer.backend=fast", "out_dir=out", cwd=tmp_path)  # fmt: skip
    assert_one_line_error(r, "tokenizer.backend=fast", "auto", "tiktoken", "riptoken")


def test_auto_falls_back_to_tiktoken_without_riptoken(tmp_path, tiktoken_cache, no_riptoken):
    (tmp_path / "in.txt").write_text(TEXT * 200)
    r = run_cli("source=file", "source.path=in.txt", "tokenizer=tiktoken", "out_dir=out",
                "quiet=true", cwd=tmp_path, env=no_riptoken)  # fmt: skip
    assert r.returncode == 0, r.stderr
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["config"]["tokenizer"]["backend"] == "auto"
    assert manifest["tokenizer"]["backend"] == "tiktoken"


def test_a_worker_without_riptoken_keeps_the_ids(tmp_path, tiktoken_cache, no_riptoken):
    """auto chose riptoken, a worker on another machine cannot import it: tiktoken's ids
    (the same); an explicit backend=riptoken there is one clear line instead."""
    for backend in ("auto", "riptoken"):
        tok = TiktokenTokenizer("gpt2", backend=backend)
        (tmp_path / f"{backend}.pkl").write_bytes(pickle.dumps(tok))
    code = (
        "import pickle, sys\n"
        "from corpusprep.errors import UserError\n"
        "for name in ('auto', 'riptoken'):\n"
        "    tok = pickle.loads(open(name + '.pkl', 'rb').read())\n"
        "    try:\n"
        "        print(name, tok.backend, tok.encode(sys.argv[1]).tolist())\n"
        "    except UserError as e:\n"
        "        print(name, 'error', e)\n"
    )
    env = {**no_riptoken, "PYTHONPATH": f"{no_riptoken['PYTHONPATH']}:{REPO}"}
    r = subprocess.run([sys.executable, "-c", code, TEXT], cwd=tmp_path, capture_output=True,
                       text=True, env={**os.environ, **env}, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    auto, explicit = r.stdout.splitlines()
    want = TiktokenTokenizer("gpt2")._enc().encode_ordinary(TEXT)
    assert auto == f"auto riptoken {want}"
    assert explicit.startswith("riptoken error ") and "pip install 'corpusprep[fast]'" in explicit


def test_every_backend_writes_the_same_bytes(tmp_path, tiktoken_cache):
    """Documents in a JSONL file, cl100k_base (so a meta.pkl too), several shards and
    workers: auto, tiktoken and riptoken write identical files; each manifest names the
    backend that encoded; corpusprep.load rebuilds each, and an older manifest."""
    import corpusprep

    words = ["the", "cat", "sat", "on", "a", "mat;", "42", "é", "日本", "😀", "\n", "\n\n"]
    rng = np.random.default_rng(0)
    docs = ["".join(rng.choice(words, 60) + " ") for _ in range(300)]
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    outs = {}
    for backend in ("auto", "tiktoken", "riptoken"):
        r = run_cli("source=files", "source.glob=docs.jsonl", "source.format=jsonl",
                    "tokenizer=tiktoken", "tokenizer.encoding=cl100k_base",
                    f"tokenizer.backend={backend}", "shard_bytes=20000", "executor.workers=2",
                    f"out_dir={backend}", "quiet=true", cwd=tmp_path)  # fmt: skip
        assert r.returncode == 0, r.stderr
        outs[backend] = tmp_path / backend
    for backend in ("tiktoken", "riptoken"):
        same_files(outs["auto"], outs[backend])
    used = {b: json.loads((o / "manifest.json").read_text())["tokenizer"]["backend"]
            for b, o in outs.items()}  # fmt: skip
    assert used == {"auto": "riptoken", "tiktoken": "tiktoken", "riptoken": "riptoken"}
    assert corpusprep.load(outs["auto"]).tokenizer.backend == "riptoken"
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


def test_installing_riptoken_leaves_a_folder_up_to_date(tmp_path, tiktoken_cache, no_riptoken):
    """The backend changes how fast, never the ids: a folder auto made with tiktoken is up
    to date once riptoken is there, and for backend=riptoken too."""
    (tmp_path / "in.txt").write_text(TEXT * 200)
    args = ("source=file", "source.path=in.txt", "tokenizer=tiktoken", "out_dir=out")
    r = run_cli(*args, "quiet=true", cwd=tmp_path, env=no_riptoken)
    assert r.returncode == 0, r.stderr
    for backend in ("auto", "riptoken"):
        r = run_cli(*args, f"tokenizer.backend={backend}", cwd=tmp_path)
        assert r.returncode == 0 and "is up to date" in r.stdout, r.stdout + r.stderr
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["tokenizer"]["backend"] == "tiktoken"  # what encoded the files
