"""The first ten minutes (issue 12): inspect --verify on every kind of input, a short repr
of a loaded folder, quiet=true for a whole sweep, and a dry run that says how sure it is."""

from __future__ import annotations

import csv
import gzip
import hashlib
import json
import random
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from helpers import REPO, run_cli

import corpusprep


def inspect_cli(*args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "corpusprep.inspect", *map(str, args)],
        cwd=cwd, capture_output=True, text=True, env=_env(),
    )  # fmt: skip


def _env() -> dict:
    import os

    return {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "PYTHONPATH": str(REPO)}


def assert_inspect_error(r: subprocess.CompletedProcess, *fragments: str) -> str:
    assert r.returncode == 1, r.stdout + r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("corpusprep.inspect: error: "), r.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def prepared(tmp_path: Path, *args: str) -> Path:
    r = run_cli(*args, "out_dir=out", "quiet=true", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    return tmp_path / "out"


def _texts(folder: Path, n: int = 8) -> list[Path]:
    folder.mkdir()
    rng = random.Random(12)
    paths = []
    for i in range(n):
        lines = [f"file {i}, line {j}: ünïcode ✓ {'x' * rng.randrange(40)}\r\n"
                 for j in range(rng.randrange(5, 80))]  # fmt: skip
        paths.append(folder / f"part{i:02d}.txt")
        paths[-1].write_bytes("".join(lines).encode())
    return paths


def _jsonl(path: Path, n: int = 400) -> Path:
    rng = random.Random(3)
    rows = [json.dumps({"text": f"doc {i}: " + " ".join(["wörd"] * rng.randrange(1, 60))})
            for i in range(n)]  # fmt: skip
    data = ("\n".join(rows) + "\n").encode()
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


# --- 1. --verify: every input file checked on its own, then every document decoded ------


def _make(kind: str, tmp_path: Path) -> list[str]:
    """A corpus of `kind` in tmp_path; the overrides that prepare it."""
    if kind == "file":  # one text, val first (llm.c's head split): not train + val in order
        src = tmp_path / "one.txt"
        src.write_text("To be, or not to be: that is the question.\n" * 400, encoding="utf-8")
        return ["source=file", f"source.path={src}", "tokenizer=tiktoken", "split_by=head",
                "val_size=500"]  # fmt: skip
    if kind == "files":
        _texts(tmp_path / "txt")
        return ["source=files", "source.glob=txt/*.txt"]
    if kind == "files-hash":  # small shards: documents read in pieces, keyed by their file
        _texts(tmp_path / "txt", 12)
        return ["source=files", "source.glob=txt/*.txt", "tokenizer=tiktoken", "split_by=hash",
                "split=0.5", "shard_bytes=1000"]  # fmt: skip
    if kind == "jsonl-shuffled":
        _jsonl(tmp_path / "docs.jsonl")
        return ["source=files", "source.glob=*.jsonl", "tokenizer=tiktoken", "order=shuffle"]
    if kind == "jsonl.gz":
        _jsonl(tmp_path / "docs.jsonl.gz")
        return ["source=file", f"source.path={tmp_path / 'docs.jsonl.gz'}", "tokenizer=byte"]
    if kind == "zip":
        with zipfile.ZipFile(tmp_path / "a.zip", "w") as z:
            for i in range(6):
                z.writestr(f"m{i}.txt", f"member {i} says hello\n" * (i + 3))
        return ["source=file", f"source.path={tmp_path / 'a.zip'}", "tokenizer=byte"]
    if kind == "separator":  # TinyStories: documents between "<|endoftext|>" lines, trimmed
        text = "".join(f"  story {i}\n{'once upon a time ' * i}\n<|endoftext|>\n"
                       for i in range(40))  # fmt: skip
        (tmp_path / "stories.txt").write_text(text)
        return ["source=file", f"source.path={tmp_path / 'stories.txt'}",
                "source.doc_separator='<|endoftext|>'", "tokenizer=tiktoken"]  # fmt: skip
    raise AssertionError(kind)


KINDS = ["file", "files", "files-hash", "jsonl-shuffled", "jsonl.gz", "zip", "separator"]


@pytest.mark.parametrize("kind", KINDS)
def test_verify_gives_back_every_kind_of_input(kind, tmp_path, tiktoken_cache):
    out = prepared(tmp_path, *_make(kind, tmp_path))
    r = inspect_cli(out, "--verify", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "verified: decoding train + val gives back" in r.stdout


def test_verify_of_a_url_source(tmp_path, seeded_cache, tiktoken_cache):
    # llm.c's layout: sections cut at "\n\n", <|endoftext|> before each, val the first tokens
    out = prepared(tmp_path, "dataset=shakespeare_llmc")
    r = inspect_cli(out, "--verify", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "verified" in r.stdout and str(seeded_cache) in r.stdout


def test_verify_names_the_one_file_that_changed(tmp_path):
    paths = _texts(tmp_path / "txt")
    out = prepared(tmp_path, "source=files", "source.glob=txt/*.txt")
    assert inspect_cli(out, "--verify", cwd=tmp_path).returncode == 0
    paths[3].write_text(paths[3].read_text() + "one more line\n")
    line = assert_inspect_error(inspect_cli(out, "--verify", cwd=tmp_path), "source changed")
    assert str(paths[3].resolve()) in line
    assert str(paths[0].resolve()) not in line


def test_verify_finds_a_changed_id_in_a_document(tmp_path, tiktoken_cache):
    _jsonl(tmp_path / "docs.jsonl")
    out = prepared(tmp_path, "source=files", "source.glob=*.jsonl", "tokenizer=tiktoken")
    ids = np.fromfile(out / "train.bin", np.uint16)
    ids[200] = ids[200] + 1 if ids[200] < 50_000 else 1
    ids.tofile(out / "train.bin")
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["checksums"]["train.bin"] = hashlib.sha256(ids.tobytes()).hexdigest()
    (out / "manifest.json").write_text(json.dumps(manifest))
    assert_inspect_error(inspect_cli(out, "--verify", cwd=tmp_path), "decoding train.bin differs",
                         "docs.jsonl", "document")  # fmt: skip


# --- 2. a short repr --------------------------------------------------------------------


def test_repr_is_one_short_line(tmp_path):
    src = tmp_path / "one.txt"
    src.write_text("First Citizen:\nBefore we proceed any further, hear me speak.\n" * 200)
    out = prepared(tmp_path, "source=file", f"source.path={src}", "name=tiny")
    ds = corpusprep.load(out)
    text = repr(ds)
    m = ds.manifest
    assert text == (
        f"PreparedDataset({str(out)!r}: tiny, char vocab {m['vocab_size']}, uint16, "
        f"{m['tokens']['train']:,} train + {m['tokens']['val']:,} val tokens, nanogpt: "
        "train.bin, val.bin, meta.pkl and 1 more)"  # token_bytes.npy
    )
    # many files: a few names, then how many more
    out = prepared(tmp_path, "source=file", f"source.path={src}", "format=npy",
                   "shard_tokens=500", "force=true")  # fmt: skip
    files = len(json.loads((out / "manifest.json").read_text())["files"])
    text = repr(corpusprep.load(out))
    assert files > 20 and "\n" not in text and len(text) < 250
    assert re.search(rf"and {files - 3} more\)$", text), text


# --- 3. quiet=true silences the sweep's table -------------------------------------------


def test_quiet_sweep_prints_nothing_on_stdout(tmp_path):
    (tmp_path / "a.txt").write_text("hello there, general kenobi\n" * 3000)
    args = ["-m", "source=file", "source.path=a.txt", "split=0.8,0.9"]
    r = run_cli(*args, "quiet=true", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "" and "corpusprep sweep" not in r.stderr
    (sweep,) = [p for p in (tmp_path / "multirun").glob("*/*") if p.is_dir()]
    with open(sweep / "summary.csv") as f:
        assert [row["status"] for row in csv.DictReader(f)] == ["ok", "ok"]
    assert (sweep / "summary.md").is_file()
    r = run_cli(*args, "out_dir=o/${split}", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "corpusprep sweep: 2 jobs (2 ok)" in r.stdout and "| job |" in r.stdout


def test_quiet_sweep_with_a_failed_job_says_so_on_stderr(tmp_path):
    (tmp_path / "a.txt").write_text("hello\n" * 50)
    r = run_cli("-m", "source=file", "source.path=a.txt,missing.txt", "quiet=true", cwd=tmp_path)
    assert r.returncode == 1 and r.stdout == ""
    assert "missing.txt: no such file" in r.stderr and "1 failed" in r.stderr


# --- 4. the dry run's document count, and how sure it is --------------------------------


def _stdlib_like(folder: Path, small: int, big: int, invalid: int = 3) -> int:
    """Many small .py files and a few big ones (sorted names put the small ones together,
    as in a package folder), some not UTF-8; how many are valid."""
    folder.mkdir()
    rng = random.Random(7)
    for i in range(small + big):
        size = rng.randrange(200, 3000) if i < small else rng.randrange(150_000, 250_000)
        lines, n = [], 0
        while n < size:
            lines.append(f"def f_{i}_{len(lines)}(x):\n    return x * {rng.randrange(99)}\n")
            n += len(lines[-1])
        name = f"a{i:03d}.py" if i < small else f"b{i:03d}.py"
        (folder / name).write_text("".join(lines))
    for i in range(invalid):
        (folder / f"a{i:03d}_latin1.py").write_bytes(b"# caf\xe9\nx = 1\n")
    return small + big


def _dry_run_documents(r: subprocess.CompletedProcess) -> tuple[int, str]:
    assert r.returncode == 0, r.stderr
    (line,) = [line for line in r.stdout.splitlines() if line.strip().startswith("documents")]
    count = int(re.search(r"documents\s+(?:about )?([\d,]+)", line).group(1).replace(",", ""))
    return count, line


def test_dry_run_documents_of_many_small_files(tmp_path):
    real = _stdlib_like(tmp_path / "lib", small=250, big=50)  # about 10 MB: a sample of it
    args = ["source=files", "source.glob=lib/**/*.py", "source.skip_invalid=true",
            "split_by=document", "eot=append", "shard_bytes=1000000", "out_dir=out"]  # fmt: skip
    guess, line = _dry_run_documents(run_cli(*args, "dry_run=true", cwd=tmp_path))
    assert "about" in line and "from a sample of" in line and "of 303 files" in line
    assert prepared(tmp_path, *args[:-1]).joinpath("manifest.json").is_file()
    documents = json.loads((tmp_path / "out" / "manifest.json").read_text())["documents"]
    assert documents["total"] == real and documents["skipped_invalid"] == 3
    assert abs(guess - real) <= 0.1 * real, line
    # without invalid files to skip, each file is one document: counted, not guessed
    r = run_cli(*args[:2], "shard_bytes=1000000", "dry_run=true",
                "source.exclude=['**/*latin1*']", cwd=tmp_path)  # fmt: skip
    guess, line = _dry_run_documents(r)
    assert guess == real and "exact: one per file" in line


def test_dry_run_of_a_small_input_is_exact(tmp_path):
    _stdlib_like(tmp_path / "lib", small=30, big=0, invalid=0)
    r = run_cli("source=files", "source.glob=lib/*.py", "dry_run=true", cwd=tmp_path)
    guess, line = _dry_run_documents(r)
    assert guess == 30 and "exact" in line and "counts are exact" in r.stdout


@pytest.mark.parametrize("split", ["0.9", "0.7"])
def test_dry_run_of_one_text_splits_as_the_run(tmp_path, split):
    """A dry run that read the whole text gives each side's tokens by the run's own rule
    (train int(n * split), as nanoGPT): it said val ~111,539 where the run writes 111,540."""
    rng = random.Random(1)
    (tmp_path / "t.txt").write_text("".join(rng.choice("ab c\né") for _ in range(111_544)))
    dry = run_cli("source=file", "source.path=t.txt", f"split={split}", "dry_run=true",
                  cwd=tmp_path)  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    line = next(line for line in dry.stdout.splitlines() if line.strip().startswith("tokens"))
    train, val = (int(n.replace(",", "")) for n in re.findall(r"(?:train|val) ~([\d,]+)", line))
    real = run_cli("source=file", "source.path=t.txt", f"split={split}", cwd=tmp_path)
    assert real.returncode == 0, real.stderr
    tokens = json.loads((tmp_path / "data" / "t" / "manifest.json").read_text())["tokens"]
    assert (train, val) == (tokens["train"], tokens["val"]), line


def test_dry_run_of_documents_splits_as_the_run(tmp_path):
    """7 documents: the run puts 7 - floor(0.9 * 7) = 1 in val, and the dry run says so (it
    said 10% of the tokens); a val_size the run refuses, the dry run refuses alike."""
    docs = [f"{i}" + "abcdefghij" * 30 for i in range(7)]  # each the same length
    (tmp_path / "d.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    args = ["source=files", "source.glob=d.jsonl", "eot=none"]
    dry = run_cli(*args, "dry_run=true", cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    line = next(line for line in dry.stdout.splitlines() if line.strip().startswith("tokens"))
    train, val = (int(n.replace(",", "")) for n in re.findall(r"(?:train|val) ~([\d,]+)", line))
    assert (train, val) == (6 * 301, 301), line
    (tmp_path / "t.txt").write_text("one text\n" * 100)
    for extra in ([], ["dry_run=true"]):
        r = run_cli("source=file", "source.path=t.txt", "val_size=0.1", *extra, cwd=tmp_path)
        assert r.returncode == 1 and "val_size=0.1: does nothing with split_by=position" in r.stderr


def test_help_names_the_reference_pages_that_are_there(tmp_path):
    """--help pointed at 'docs/keys.md in corpusprep's source', which a pip install lacks:
    it names the folder of the pages, which exists (the checkout's here; the installed
    package's in tests/test_install.py)."""
    r = run_cli("--help", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    (keys,) = re.findall(r"option: (\S+/keys\.md);", r.stdout)
    assert Path(keys).is_file() and (Path(keys).parent / "errors.md").is_file()
