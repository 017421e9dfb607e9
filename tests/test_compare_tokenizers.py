"""Comparing tokenizers fairly (issue 14): token_bytes with every output, the val bytes,
bytes per token and vocabulary use in the manifest and the sweep table, a figure of
compression against vocabulary size, and tokenizer=reuse (one vocabulary, many corpora).

- token_bytes.npy holds each id's UTF-8 length (0 for special tokens), so that
  token_bytes[val ids] sums to the val text's bytes (what bits per byte divide by), for
  char, byte, tiktoken and a trained bpe; nanochat computes it the same way;
- the manifest's val_bytes / bytes_per_token / vocab_used equal what numpy counts;
- a sweep over tokenizer.vocab_size gives the table columns and, in inspect, the curve;
- tokenizer=reuse encodes with exactly the ids of the folder it names, keeps working when
  that folder is gone, and refuses a folder that is not one.
"""

from __future__ import annotations

import csv
import json
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import FAULTS, assert_one_line_error, crash_after_documents, run_cli

TEXT = "Ça, naïve — 日本語 😀 <|endoftext|> and plain ASCII lines.\n" * 300 + "end\n"


def _val_text(path: Path, split: float = 0.9) -> str:
    text = path.read_text(encoding="utf-8")
    return text[int(len(text) * split) :]


@pytest.mark.parametrize("tokenizer", ["char", "byte", "tiktoken", "bpe"])
def test_token_bytes_sum_to_the_val_texts_bytes(tmp_path, tiktoken_cache, tokenizer):
    if tokenizer == "bpe":
        pytest.importorskip("rustbpe")
    (tmp_path / "t.txt").write_text(TEXT, encoding="utf-8")
    extra = ["tokenizer.vocab_size=300"] if tokenizer == "bpe" else []
    done = run_cli("source=file", "source.path=t.txt", f"tokenizer={tokenizer}", *extra,
                   "out_dir=out", "quiet=true", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out"
    manifest = json.loads((out / "manifest.json").read_text())
    sizes = np.load(out / "token_bytes.npy", allow_pickle=False)
    assert sizes.dtype == np.int32 and len(sizes) == manifest["vocab_size"]
    dtype = np.dtype(manifest["dtype"])
    val = np.fromfile(out / "val.bin", dtype=dtype)
    val_bytes = len(_val_text(tmp_path / "t.txt").encode("utf-8"))
    assert int(sizes[val].sum()) == val_bytes == manifest["val_bytes"]
    assert manifest["bytes_per_token"] == round(val_bytes / len(val), 4)
    ids = np.concatenate([np.fromfile(out / "train.bin", dtype=dtype), val])
    assert manifest["vocab_used"] == len(np.unique(ids))
    assert "token_bytes.npy" in manifest["files"]


@pytest.mark.parametrize(
    "split",
    ["split_by=position", "split_by=hash", "split_by=document", "split_by=tail",
     "split_by=hash executor.workers=1 eot=prepend", "split_by=position tokenizer=char",
     "split_by=document order=shuffle", "split_by=document long"],
)  # fmt: skip
def test_val_bytes_are_the_val_ids_bytes_for_every_split(tmp_path, tiktoken_cache, split):
    """Where the shards choose the sides (position, hash) they count val's bytes as they
    write them, split_by=document as it splits them off (long documents are copied unread:
    then measure reads val.bin), elsewhere the driver reads val.bin: the same number."""
    rows = [json.dumps({"text": f"doc {i} Ça {'naïve — 日本語 😀 ' * (i % 5)}{'x' * i}"})
            for i in range(400)]  # fmt: skip
    if split.endswith(" long"):  # runs of 32K tokens and more: copied, not read
        split = split[: -len(" long")]
        rows = [json.dumps({"text": f"{i} " + "é ab\n" * (20000 + i)}) for i in range(40)]
    (tmp_path / "d.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    extra = ["val_size=2000"] if "tail" in split else []
    done = run_cli("source=file", "source.path=d.jsonl", "tokenizer=tiktoken", "eot=append",
                   "shard_bytes=4000", *split.split(), *extra, "out_dir=out", "quiet=true",
                   cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["shards"]["count"] > 1
    sizes = np.load(out / "token_bytes.npy", allow_pickle=False)
    val = np.fromfile(out / "val.bin", dtype=np.dtype(manifest["dtype"]))
    assert manifest["val_bytes"] == int(sizes[val].sum()) > 0


def test_val_bytes_after_a_resume_from_shards_that_did_not_count_them(tmp_path, tiktoken_cache):
    """A marker from an earlier version has no val_bytes: the driver counts val.bin."""
    rows = [json.dumps({"text": f"doc {i} {'é' * (i % 7)}{'y' * i}"}) for i in range(300)]
    (tmp_path / "d.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    args = ["source=file", "source.path=d.jsonl", "tokenizer=tiktoken", "split_by=hash",
            "shard_bytes=4000", "executor.workers=1", "quiet=true"]  # fmt: skip
    done = run_cli(*args, "out_dir=ref", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    # the one process dies after 150 documents, its finished shards' markers left behind
    args = crash_after_documents(args, tmp_path)
    markers = list((tmp_path / "out").rglob("*.done"))
    assert markers
    for marker in markers:
        record = json.loads(marker.read_text())
        assert isinstance(record.pop("val_bytes"), int)
        marker.write_text(json.dumps(record))
    again = run_cli(*args, "out_dir=out", cwd=tmp_path, env=FAULTS)
    assert again.returncode == 0, again.stderr
    assert "resuming" in again.stderr
    ref = json.loads((tmp_path / "ref" / "manifest.json").read_text())
    made = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert made["val_bytes"] == ref["val_bytes"] > 0


def test_special_tokens_have_no_bytes(tiktoken_cache):
    from corpusprep.tokenizers.char import CharTokenizer
    from corpusprep.tokenizers.tiktoken import TiktokenTokenizer

    gpt2 = TiktokenTokenizer("gpt2").token_bytes()
    assert len(gpt2) == 50257 and gpt2[50256] == 0 and gpt2[0] == 1 and gpt2.min() == 0
    char = CharTokenizer()
    char.fit("ab\u00e9", eot=True)
    assert char.token_bytes().tolist() == [1, 1, 2, 0]  # the separator is special


def test_nanochat_computes_the_same_token_bytes(tiktoken_cache):
    """nanochat's token_bytes (scripts/tok_train.py, since its commit 2ce972a of 2026-07-03):
    len(decode_single_token_bytes(id)) for each id, 0 for specials, the token's raw bytes:
    ours for every id, those that hold part of a character too (they once counted U+FFFD's
    3 bytes there)."""
    from corpusprep.tokenizers.tiktoken import TiktokenTokenizer

    tok = TiktokenTokenizer("gpt2")
    ours = tok.token_bytes()
    enc = tok._enc()
    specials = set(enc._special_tokens.values())
    theirs = [0 if i in specials else len(enc.decode_single_token_bytes(i))
              for i in range(enc.n_vocab)]  # fmt: skip
    assert ours.tolist() == theirs
    assert any("\ufffd" in enc.decode([i]) for i in range(enc.n_vocab) if i not in specials)


def test_a_sweep_over_vocabulary_sizes_compares_them(tmp_path):
    pytest.importorskip("rustbpe")
    pytest.importorskip("matplotlib")
    from corpusprep import plot

    (tmp_path / "t.txt").write_text(TEXT * 3 + "".join(f"line {i} of many\n" for i in range(3000)))
    done = run_cli("-m", "source=file", "source.path=t.txt", "tokenizer=bpe",
                   "tokenizer.vocab_size=300,400,600", "hydra.sweep.dir=sweep", "quiet=true",
                   cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    with open(tmp_path / "sweep" / "summary.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["tokenizer"] for r in rows] == ["bpe300", "bpe400", "bpe600"]
    bpt = [float(r["bytes_per_token"]) for r in rows]
    assert bpt == sorted(bpt) and bpt[0] < bpt[-1]  # a bigger vocabulary: fewer tokens
    assert len({r["val_bytes"] for r in rows}) == 1  # the same val text for all
    assert all(0 < float(r["vocab_use"]) <= 1 for r in rows)
    data = plot.plot_sweep(tmp_path / "sweep", tmp_path / "sweep.png")
    curve = plot.compression_curve(data)
    assert curve["series"][0]["vocab_size"] == [300, 400, 600]
    assert curve["series"][0]["bytes_per_token"] == bpt
    assert (tmp_path / "sweep.png").stat().st_size > 10_000
    table = subprocess.run([sys.executable, "-m", "corpusprep.inspect", "sweep"], cwd=tmp_path,
                           capture_output=True, text=True)  # fmt: skip
    assert table.returncode == 0, table.stderr
    assert "bytes/tok" in table.stdout and f"{bpt[0]:.3f}" in table.stdout


# --- tokenizer=reuse ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    pytest.importorskip("rustbpe")
    root = tmp_path_factory.mktemp("reuse")
    (root / "a.txt").write_text(TEXT * 2, encoding="utf-8")
    done = run_cli("source=file", "source.path=a.txt", "tokenizer=bpe",
                   "tokenizer.vocab_size=290", "out_dir=a", "quiet=true", cwd=root)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return root


def test_reuse_encodes_another_corpus_with_the_same_ids(trained, tmp_path):
    import corpusprep

    other = "Another corpus, naïve lines 日本語 and more.\n" * 500
    (tmp_path / "b.txt").write_text(other, encoding="utf-8")
    shutil.copytree(trained / "a", tmp_path / "a")
    done = run_cli("source=file", "source.path=b.txt", "tokenizer=reuse", "tokenizer.dir=a",
                   "out_dir=b", "quiet=true", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    a = corpusprep.load(tmp_path / "a")
    b = tmp_path / "b"
    expected = a.tokenizer.encode(_val_text(tmp_path / "b.txt")).tolist()
    assert np.fromfile(b / "val.bin", dtype=np.uint16).tolist() == expected
    for name in ("tokenizer.tiktoken", "meta.pkl"):  # the same vocabulary, the same meta.pkl
        assert (b / name).read_bytes() == (tmp_path / "a" / name).read_bytes()
    manifest = json.loads((b / "manifest.json").read_text())
    assert manifest["tokenizer"]["kind"] == "reuse"
    assert manifest["tokenizer"]["reused"]["sha256"] == a.manifest["tokenizer"]["sha256"]
    with open(b / "meta.pkl", "rb") as f:
        assert pickle.load(f)["vocab_size"] == 290
    # the new folder stands on its own: the reused folder may go
    shutil.rmtree(tmp_path / "a")
    again = corpusprep.load(b)
    assert (
        again.tokenizer.decode(again.val[:40].tolist())
        == _val_text(tmp_path / "b.txt")[: len(again.tokenizer.decode(again.val[:40].tolist()))]
    )


def test_reuse_of_a_char_vocabulary_and_its_limits(tmp_path):
    (tmp_path / "a.txt").write_text("abc abc\n" * 200)
    (tmp_path / "b.txt").write_text("cab bac\n" * 200)
    (tmp_path / "c.txt").write_text("xyz\n" * 200)
    assert run_cli("source=file", "source.path=a.txt", "tokenizer=char", "out_dir=a",
                   "quiet=true", cwd=tmp_path).returncode == 0  # fmt: skip
    done = run_cli("source=file", "source.path=b.txt", "tokenizer=reuse", "tokenizer.dir=a",
                   "out_dir=b", "quiet=true", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "b" / "meta.pkl").read_bytes() == (tmp_path / "a" / "meta.pkl").read_bytes()
    bad = run_cli("source=file", "source.path=c.txt", "tokenizer=reuse", "tokenizer.dir=a",
                  "out_dir=c", cwd=tmp_path)  # fmt: skip
    assert_one_line_error(bad, "its vocabulary cannot encode this corpus", "'xyz'")
    missing = run_cli("source=file", "source.path=b.txt", "tokenizer=reuse",
                      "tokenizer.dir=nowhere", "out_dir=d", cwd=tmp_path)  # fmt: skip
    assert_one_line_error(missing, "tokenizer.dir=nowhere: no such folder")
    (tmp_path / "other").mkdir()  # a folder, of no run
    other = run_cli("source=file", "source.path=b.txt", "tokenizer=reuse",
                    "tokenizer.dir=other", "out_dir=d", cwd=tmp_path)  # fmt: skip
    assert_one_line_error(other, "tokenizer.dir=other: not a finished corpusprep output")


def test_reuse_refuses_a_changed_vocabulary_file(trained, tmp_path):
    shutil.copytree(trained / "a", tmp_path / "a")
    path = tmp_path / "a" / "tokenizer.tiktoken"
    path.write_bytes(path.read_bytes().replace(b" 280\n", b" 281\n", 1))
    (tmp_path / "b.txt").write_text("text\n" * 100)
    done = run_cli("source=file", "source.path=b.txt", "tokenizer=reuse", "tokenizer.dir=a",
                   "out_dir=b", cwd=tmp_path)  # fmt: skip
    assert_one_line_error(done, "tokenizer.tiktoken: not the file the manifest records")


@pytest.mark.parametrize("planted", ["device", "fifo"])
def test_reuse_reads_no_device_or_fifo_a_folder_plants(trained, tmp_path, planted):
    """A stranger's folder: its tokenizer.tiktoken may be a link to /dev/zero or a FIFO,
    which would fill memory or hang: refused in one line, at once."""
    import os

    shutil.copytree(trained / "a", tmp_path / "a")
    path = tmp_path / "a" / "tokenizer.tiktoken"
    path.unlink()
    if planted == "device":
        path.symlink_to("/dev/zero")
    else:
        os.mkfifo(path)
    (tmp_path / "b.txt").write_text("text\n" * 100)
    done = run_cli("source=file", "source.path=b.txt", "tokenizer=reuse", "tokenizer.dir=a",
                   "out_dir=b", cwd=tmp_path, timeout=60)  # fmt: skip
    assert_one_line_error(done, "tokenizer.tiktoken: not a regular file")


def test_reuse_never_runs_what_a_manifest_names(trained, tmp_path):
    """A stranger's folder: its manifest may name any class; only trusted ones are built."""
    shutil.copytree(trained / "a", tmp_path / "a")
    path = tmp_path / "a" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["config"]["tokenizer"]["_target_"] = "os.system"
    path.write_text(json.dumps(manifest))
    (tmp_path / "b.txt").write_text("text\n" * 100)
    done = run_cli("source=file", "source.path=b.txt", "tokenizer=reuse", "tokenizer.dir=a",
                   "out_dir=b", cwd=tmp_path)  # fmt: skip
    assert_one_line_error(done, "os.system")
    assert not (tmp_path / "b" / "train.bin").exists()


@pytest.mark.parametrize("tamper", ["vocab_size as a string", "reuses itself", "chars a number",
                                    "no chars"])  # fmt: skip
def test_reuse_of_a_tampered_record_is_one_line_naming_the_manifest(tmp_path, tamper):
    """An attack: a vocab_size of "65" gave "Cannot specify ',' with 's'."; a record that
    reuses its own folder recursed until Python gave up."""
    (tmp_path / "a.txt").write_text("abc abc\n" * 200)
    assert run_cli("source=file", "source.path=a.txt", "tokenizer=char", "out_dir=a",
                   "quiet=true", cwd=tmp_path).returncode == 0  # fmt: skip
    path = tmp_path / "a" / "manifest.json"
    manifest = json.loads(path.read_text())
    if tamper == "vocab_size as a string":
        manifest["tokenizer"]["vocab_size"] = str(manifest["tokenizer"]["vocab_size"])
    elif tamper == "chars a number":  # an attack: TypeError, "check the tokenizer.* keys"
        manifest["tokenizer"]["chars"] = 123
    elif tamper == "no chars":  # an attack: "cannot create ...ReusedTokenizer: 'chars'"
        del manifest["tokenizer"]["chars"]
    else:
        manifest["config"]["tokenizer"] = {
            "_target_": "corpusprep.tokenizers.reuse.ReusedTokenizer",
            "dir": str(tmp_path / "a"),
        }
    path.write_text(json.dumps(manifest))
    done = run_cli("source=file", "source.path=a.txt", "tokenizer=reuse", "tokenizer.dir=a",
                   "out_dir=b", cwd=tmp_path, timeout=120)  # fmt: skip
    assert_one_line_error(done, "manifest.json", "prepare that folder again")
