"""Real corpora: many files, JSONL / Parquet / compressed, documents, the seeded document
split, end-of-text tokens, the document index, all cores, and every input error."""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import math
import os
import random
import zipfile

import numpy as np
import pytest
from helpers import assert_one_line_error, compose, run_cli

from corpusprep.errors import UserError
from corpusprep.prepare import prepare

EOT = 50256
WORDS = [
    "the",
    "cat",
    "sat",
    "on",
    "a",
    "mat",
    ";",
    "and",
    "then",
    "it",
    "ran",
    "away",
    "quickly",
    "from",
    "dog",
    "42",
    "é",
    "日本",
    "😀",
]


def make_docs(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    docs = []
    for _ in range(n):
        lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12)))
                 for _ in range(rng.randint(1, 5))]  # fmt: skip
        docs.append("\n".join(lines) + rng.choice(["", ".", "\n"]))
    return docs


def expected(docs, enc, split=0.9, seed=2357, eot="append"):
    """What corpusprep must write, built independently: each document encoded on its own,
    its side by HF train_test_split's rule (train_size=split: the last floor(split * n) of
    numpy's seeded permutation are train), the end-of-text token before or after it."""
    out = {"train": ([], []), "val": ([], [])}
    n = len(docs)
    val = set(np.random.default_rng(seed).permutation(n)[: n - math.floor(split * n)].tolist())
    for i, text in enumerate(docs):
        side = "val" if i in val else "train"
        ids, starts = out[side]
        starts.append(len(ids))
        ids += [EOT] if eot == "prepend" else []
        ids += enc.encode_ordinary(text)
        ids += [EOT] if eot == "append" else []
    return out


def read(out, side):
    return (np.fromfile(out / f"{side}.bin", np.uint16).tolist(),
            np.fromfile(out / "doc_index" / f"{side}.docs.bin", np.uint64).tolist())  # fmt: skip


def jsonl_bytes(docs, field="text"):
    return "".join(json.dumps({field: d, "n": i}) + "\n" for i, d in enumerate(docs)).encode()


def write(path, data: bytes, compression: str):
    import zstandard

    if compression == "zip":
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("docs.jsonl", data)
        return
    pack = {"none": bytes, "gzip": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress,
            "zstd": lambda b: zstandard.ZstdCompressor().compress(b)}[compression]  # fmt: skip
    path.write_bytes(pack(data))


def run(out, *overrides):
    return prepare(compose(f"out_dir={out}", "quiet=true", *overrides))


@pytest.fixture
def enc(tiktoken_cache):
    import tiktoken

    return tiktoken.get_encoding("gpt2")


@pytest.mark.parametrize("compression", ["none", "gzip", "bz2", "xz", "zstd", "zip"])
def test_jsonl_in_every_compression(tmp_path, enc, compression):
    docs = make_docs(300)
    # a misleading name on purpose: compression is recognised by the first bytes
    src = tmp_path / "docs.jsonl"
    write(src, jsonl_bytes(docs), compression)
    out = tmp_path / "out"
    m = run(out, "source=files", f"source.glob={src}", "source.format=jsonl",
            "tokenizer=tiktoken", "shard_bytes=3000")  # fmt: skip
    want = expected(docs, enc)
    assert read(out, "train") == want["train"] and read(out, "val") == want["val"]
    assert m["source"]["files"][0]["compression"] == compression
    assert m["documents"]["train"] + m["documents"]["val"] == 300


def test_many_files_sorted_nested_fields_and_any_worker_count(tmp_path, enc):
    docs = make_docs(600)
    (tmp_path / "c" / "deep").mkdir(parents=True)
    names = ["c/b.jsonl", "c/a.jsonl.gz", "c/deep/z.jsonl", "c/deep/a.jsonl.xz"]
    chunks = [docs[0:150], docs[150:300], docs[300:450], docs[450:600]]
    in_sorted_order = sorted(zip(names, chunks), key=lambda nc: str(tmp_path / nc[0]))
    for name, chunk in zip(names, chunks):
        data = "".join(json.dumps({"meta": {"body": d}}) + "\n" for d in chunk).encode()
        write(tmp_path / name, data, {"gz": "gzip", "xz": "xz"}.get(name[-2:], "none"))
    outs = []
    for workers, shard_bytes in [(1, 1 << 20), (2, 2000), (4, 777)]:
        out = tmp_path / f"out{workers}"
        run(
            out,
            "source=files",
            "source.glob='c/**/*.jsonl*'",
            "source.text_field=meta.body",
            "tokenizer=tiktoken",
            f"executor.workers={workers}",
            f"shard_bytes={shard_bytes}",
        )
        outs.append(out)
    ordered = [d for _, chunk in in_sorted_order for d in chunk]
    want = expected(ordered, enc)
    for out in outs:
        assert read(out, "train") == want["train"] and read(out, "val") == want["val"]


def test_spawn_start_method_gives_the_same_bytes(tmp_path, enc):
    docs = make_docs(200)
    (tmp_path / "d.jsonl").write_bytes(jsonl_bytes(docs))
    run(
        tmp_path / "fork",
        "source=files",
        "source.glob=d.jsonl",
        "tokenizer=tiktoken",
        "shard_bytes=2000",
        "executor.workers=2",
        "executor.start_method=fork",
    )
    run(
        tmp_path / "spawn",
        "source=files",
        "source.glob=d.jsonl",
        "tokenizer=tiktoken",
        "shard_bytes=2000",
        "executor.workers=2",
        "executor.start_method=spawn",
    )
    for name in ("train.bin", "val.bin", "doc_index/train.docs.bin", "doc_index/val.docs.bin"):
        assert (tmp_path / "fork" / name).read_bytes() == (tmp_path / "spawn" / name).read_bytes()


@pytest.fixture(autouse=True)
def _cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative globs, as a user types them


def test_parquet_row_groups(tmp_path, enc):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    docs = make_docs(500)
    pq.write_table(pa.table({"content": docs, "id": list(range(500))}), tmp_path / "d.parquet",
                   row_group_size=37)  # fmt: skip
    out = tmp_path / "out"
    m = run(
        out,
        "source=files",
        "source.glob=d.parquet",
        "source.text_field=content",
        "tokenizer=tiktoken",
        "eot=prepend",
        "shard_bytes=2000",
        "executor.workers=2",
    )
    want = expected(docs, enc, eot="prepend")
    assert read(out, "train") == want["train"] and read(out, "val") == want["val"]
    assert m["shards"]["count"] > 3


@pytest.mark.parametrize("eot", ["append", "prepend", "none"])
def test_eot_modes(tmp_path, enc, eot):
    docs = make_docs(100)
    (tmp_path / "d.jsonl").write_bytes(jsonl_bytes(docs))
    m = run(tmp_path / "out", "source=files", "source.glob=d.jsonl", "tokenizer=tiktoken",
            f"eot={eot}")  # fmt: skip
    want = expected(docs, enc, eot=eot)
    assert read(tmp_path / "out", "train") == want["train"]
    assert m["eot"] == {"mode": eot, "id": None if eot == "none" else EOT}


def test_text_files_are_documents_and_the_split_is_seeded(tmp_path):
    docs = make_docs(200, seed=1)
    (tmp_path / "books").mkdir()
    for i, d in enumerate(docs):
        (tmp_path / "books" / f"{i:04d}.txt").write_text(d, encoding="utf-8")
    a = run(tmp_path / "a", "source=files", "source.glob=books/*.txt", "split_by=document",
            "seed=1", "split=0.8")  # fmt: skip
    b = run(tmp_path / "b", "source=files", "source.glob=books/*.txt", "split_by=document",
            "seed=1", "split=0.8", "shard_bytes=300", "executor.workers=3")  # fmt: skip
    c = run(tmp_path / "c", "source=files", "source.glob=books/*.txt", "seed=2", "split=0.8")
    assert (tmp_path / "a" / "val.bin").read_bytes() == (tmp_path / "b" / "val.bin").read_bytes()
    assert (tmp_path / "a" / "val.bin").read_bytes() != (tmp_path / "c" / "val.bin").read_bytes()
    assert a["documents"]["val"] == b["documents"]["val"] and 20 < a["documents"]["val"] < 70
    assert a["split"] == {"by": "document", "fraction": 0.8, "seed": 1}
    # char level between documents: a separator, added to the vocabulary
    assert a["eot"]["mode"] == "none" and c["tokenizer"]["kind"] == "char"
    d = run(tmp_path / "d", "source=files", "source.glob=books/*.txt", "eot=append")
    assert d["tokenizer"]["separator"] == "<|endoftext|>"
    import pickle

    meta = pickle.loads((tmp_path / "d" / "meta.pkl").read_bytes())
    assert meta["itos"][d["eot"]["id"]] == "<|endoftext|>" and meta["vocab_size"] == d["vocab_size"]
    ids = np.fromfile(tmp_path / "d" / "train.bin", np.uint16)
    assert (ids == d["eot"]["id"]).sum() == d["documents"]["train"]


def test_a_long_text_document_is_read_in_parallel_pieces(tmp_path, enc):
    """A document bigger than a shard is cut where the tokenizer allows, not read whole."""
    big = "\n".join(f"Line {i}: " + " ".join(WORDS) + " end." for i in range(4000))
    small = make_docs(30)
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "big.txt").write_text(big, encoding="utf-8")
    for i, d in enumerate(small):
        (tmp_path / "t" / f"s{i:02d}.txt").write_text(d, encoding="utf-8")
    out = tmp_path / "out"
    m = run(out, "source=files", "source.glob=t/*.txt", "tokenizer=tiktoken", "shard_bytes=5000",
            "executor.workers=2")  # fmt: skip
    assert m["shards"]["count"] > 20
    # the big file's document goes whole to one side, its ids as if encoded in one piece
    ids = read(out, "train")[0] + read(out, "val")[0]
    big_ids = enc.encode_ordinary(big) + [EOT]
    joined = ",".join(map(str, ids))
    assert ",".join(map(str, big_ids)) in joined


def test_duplicates_across_splits_are_counted(tmp_path):
    docs = ["the same document"] * 50 + make_docs(50)
    (tmp_path / "d.jsonl").write_bytes(jsonl_bytes(docs))
    m = run(tmp_path / "out", "source=files", "source.glob=d.jsonl", "split=0.5")
    assert m["documents"]["exact_duplicates_across_splits"] > 0
    assert m["documents"]["train"] + m["documents"]["val"] == 100


def test_doc_separator_and_skip_invalid(tmp_path, enc):
    stories = make_docs(40)
    (tmp_path / "stories.txt").write_text(
        "".join(s.strip() + "\n<|endoftext|>\n" for s in stories), encoding="utf-8"
    )
    sep = 'source.doc_separator="<|endoftext|>"'  # Hydra quotes: | is special
    m = run(tmp_path / "a", "source=file", "source.path=stories.txt", sep, "tokenizer=tiktoken",
            "shard_bytes=400")  # fmt: skip
    assert m["documents"]["total"] == 40
    want = expected([s.strip() for s in stories], enc)
    assert read(tmp_path / "a", "train") == want["train"]
    lines = jsonl_bytes(stories[:10]) + b'{"text": "bad \xff byte"}\n' + jsonl_bytes(stories[10:])
    (tmp_path / "mixed.jsonl").write_bytes(lines)
    m = run(tmp_path / "b", "source=files", "source.glob=mixed.jsonl", "source.skip_invalid=true")
    assert m["documents"]["skipped_invalid"] == 1  # left out while reading, and counted
    assert m["documents"]["total"] == 40


def separated(raw: bytes, sep: str) -> list[str]:
    """TinyStories' documents, read independently: the text as open() reads it (universal
    newlines), cut at every line that holds the separator and nothing else but blanks."""
    text = io.TextIOWrapper(io.BytesIO(raw), encoding="utf-8", newline=None).read()
    docs, lines = [], []
    for line in text.split("\n"):
        if line.strip(" \t") == sep:
            docs.append("\n".join(lines))
            lines = []
        else:
            lines.append(line)
    docs.append("\n".join(lines))
    return [d.strip() for d in docs if d.strip()]


def test_doc_separator_only_where_it_is_a_line_of_its_own(tmp_path, enc):
    """A shard may end only after a separator *line*: "word<|endoftext|>" ending a line
    separates nothing, so cutting there split one document in two (and the document count
    and tokens depended on shard_bytes)."""
    rng = random.Random(5)
    real = [
        "\n<|endoftext|>\n",
        "\r\n<|endoftext|>\r\n",
        "\n \t<|endoftext|>\t \n",
        "\r<|endoftext|>\n",
    ]
    fake = [" word<|endoftext|>\n", "x<|endoftext|>\r\n", "\n<|endoftext|>x\n", "<|endoftext|>\n"]
    raw = b""
    for doc in make_docs(120, seed=3):
        raw += doc.replace("\n", rng.choice(["\n", "\r\n"])).encode()
        raw += rng.choice(real if rng.random() < 0.4 else fake).encode()
    (tmp_path / "stories.txt").write_bytes(raw)
    docs = separated(raw, "<|endoftext|>")
    assert len(docs) > 30 and any("<|endoftext|>" in d for d in docs)  # both kinds are there
    want = expected(docs, enc)
    sep = 'source.doc_separator="<|endoftext|>"'
    for shard_bytes in (1, 97, 1000, 10**9):
        out = tmp_path / f"s{shard_bytes}"
        m = run(out, "source=file", f"source.path={tmp_path / 'stories.txt'}", sep,
                "tokenizer=tiktoken", f"shard_bytes={shard_bytes}")  # fmt: skip
        assert m["documents"]["total"] == len(docs), shard_bytes
        assert read(out, "train") == want["train"], shard_bytes
        assert read(out, "val") == want["val"], shard_bytes


@pytest.mark.parametrize("compressed", [False, True])
def test_doc_separator_at_the_edge_of_a_read(tmp_path, enc, compressed):
    """A line that starts with the separator and goes on past the end of a 64 KiB read
    ("<|endoftext|>abc") was taken for a separator line, as `$` matched the end of what was
    read so far; so was it wherever a shard start moved the reads. A last line holding only
    the separator, with no newline after it, still is one."""
    head = "p\n<|endoftext|>\n"
    raw = (head + "x" * (65522 - len(head)) + "\n<|endoftext|>abc\nlast\n<|endoftext|>").encode()
    path = tmp_path / ("t.txt.gz" if compressed else "t.txt")
    path.write_bytes(gzip.compress(raw) if compressed else raw)
    docs = separated(raw, "<|endoftext|>")
    assert len(docs) == 2
    sep = 'source.doc_separator="<|endoftext|>"'
    for shard_bytes in (1, 10**9):
        out = tmp_path / f"s{shard_bytes}"
        m = run(out, "source=file", f"source.path={path}", sep, "tokenizer=tiktoken",
                "split_by=document", "val_size=1", f"shard_bytes={shard_bytes}")  # fmt: skip
        assert m["documents"]["total"] == 2, shard_bytes
        want = expected(docs, enc, split=0.5)  # of 2 documents, 1 to val: as val_size=1
        assert (read(out, "train"), read(out, "val")) == (want["train"], want["val"])


def test_doc_separator_whatever_the_reads():
    """The documents of a text, read in pieces cut anywhere, are those of the whole text."""
    from corpusprep.formats.text import _split

    rng = random.Random(11)
    lines = ["<|endoftext|>", " <|endoftext|>\t", "<|endoftext|>abc", "x<|endoftext|>", "",
             "word", "<|endoftext|><|endoftext|>", "é 😀"]  # fmt: skip
    for _ in range(300):
        text = "\n".join(rng.choice(lines) for _ in range(rng.randint(1, 30)))
        text += rng.choice(["", "\n"])
        cuts = sorted(
            rng.sample(range(1, len(text)), min(max(len(text) - 1, 0), rng.randint(0, 20)))
        )
        pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]
        got = list(_split(((0, p) for p in pieces), "<|endoftext|>", 10**6, "t"))
        assert got == separated(text.encode(), "<|endoftext|>"), (text, cuts)


def test_position_split_over_documents(tmp_path, enc):
    docs = make_docs(100)
    (tmp_path / "d.jsonl").write_bytes(jsonl_bytes(docs))
    m = run(tmp_path / "out", "source=files", "source.glob=d.jsonl", "split_by=position",
            "tokenizer=tiktoken", "eot=none")  # fmt: skip
    text = "".join(docs)
    assert m["split"]["train_chars"] == int(len(text) * 0.9)
    train = np.fromfile(tmp_path / "out" / "train.bin", np.uint16).tolist()
    cut, pos, want = int(len(text) * 0.9), 0, []
    for d in docs:  # each document encoded on its own, the one across the cut in two
        part = d[: max(0, cut - pos)]
        want += enc.encode_ordinary(part) if part else []
        pos += len(d)
    assert train == want


def test_progress_on_a_terminal(tmp_path):
    """tqdm with MB/s, documents/s and tokens/s on a terminal; nothing when piped."""
    import fcntl
    import pty
    import struct
    import subprocess
    import sys
    import termios

    from helpers import REPO

    (tmp_path / "d.jsonl").write_bytes(jsonl_bytes(make_docs(3000)) * 10)
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 200, 0, 0))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "corpusprep", "source=files", "source.glob=d.jsonl",
         "out_dir=out", "shard_bytes=20000", "executor.workers=1"],
        stdin=slave, stdout=slave, stderr=slave, cwd=tmp_path, env=env,
    )  # fmt: skip
    os.close(slave)
    seen = b""
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        seen += data
    assert proc.wait(timeout=120) == 0
    os.close(master)
    text = seen.decode(errors="replace")
    assert "docs/s" in text and "B/s" in text and "tok/s" in text
    piped = run_cli("source=files", "source.glob=d.jsonl", "out_dir=out2", cwd=tmp_path)
    assert "docs/s" not in piped.stderr and piped.returncode == 0


A, B = b'{"text": "a"}\n', b'{"text": "b"}\n'
BAD = {  # lines of d.jsonl, extra overrides, what the one-line error must say
    "glob matches nothing": ([], ["source.glob=nothing/*.jsonl"], ["matches no file"]),
    # its one match is excluded: the pattern was right, the exclusion took everything
    "exclude takes every match": (
        [A],
        ["source.exclude=['*.jsonl']"],
        ["source.glob='d.jsonl': matches 1 file,", "source.exclude=['*.jsonl'] leaves out every"],
    ),
    # a folder named as the glob: the pattern that reads the files in it
    "glob names a folder": (
        [A],
        ["source.glob=sub"],
        ["matches a folder", "source.glob='sub/**/*'"],
    ),  # fmt: skip
    "malformed json": ([A, b'{"text": "b"\n'], [], ["d.jsonl:2:", "not valid JSON"]),
    "missing field": ([A, b'{"body": "b"}\n'], [], ["d.jsonl:2:", "no field 'text'", "body"]),
    "not a string": ([b'{"text": 7}\n'], [], ["d.jsonl:1:", "int, not a string"]),
    "bad utf-8": ([b'{"text": "\xff"}\n'], [], ["d.jsonl:1:", "UTF-8"]),
    "unknown format": ([A], ["source.format=csv"], ["source.format=csv"]),
    "eot with byte": ([A] * 9, ["tokenizer=byte", "eot=append"], ["eot=append", "no end-of-text"]),
    "all docs on one side": ([A, B], ["split_by=hash", "split=0.999999"], ["leaves val empty"]),
    # the one val document is empty: val_size said so, not split (as the message had it)
    "val_size's document empty": (
        [A] * 20 + [b'{"text": ""}\n'] * 20,
        ["split_by=document", "val_size=1", "seed=2"],
        ["val_size=1 by document leaves val empty", "another val_size"],
    ),
    # split alone sized it: the fix names split (it said 'another val_size', a key not set)
    "split sends every document to val": (
        [A, B],
        ["split_by=document", "split=0.1"],
        ["split=0.1 of 2 documents leaves train empty", "more documents or another split"],
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_corpora(tmp_path, case):
    lines, extra, fragments = BAD[case]
    (tmp_path / "d.jsonl").write_bytes(b"".join(lines))
    (tmp_path / "sub").mkdir()
    glob = [] if any(e.startswith("source.glob") for e in extra) else ["source.glob=d.jsonl"]
    r = run_cli("source=files", *glob, *extra, "out_dir=out", cwd=tmp_path)
    assert_one_line_error(r, *fragments)
    assert not (tmp_path / "out").exists()


def test_corrupt_archives(tmp_path):
    (tmp_path / "d.jsonl.gz").write_bytes(gzip.compress(jsonl_bytes(make_docs(200)))[:-300])
    r = run_cli("source=files", "source.glob=d.jsonl.gz", "out_dir=out", cwd=tmp_path)
    assert_one_line_error(r, "d.jsonl.gz", "truncated gzip")
    (tmp_path / "e.jsonl.zst").write_bytes(b"\x28\xb5\x2f\xfd" + b"garbage" * 10)
    r = run_cli("source=files", "source.glob=e.jsonl.zst", "out_dir=out", cwd=tmp_path)
    assert_one_line_error(r, "e.jsonl.zst", "zstd")
    whole = tmp_path / "whole.zip"  # a zip cut short has lost its directory at the end
    with zipfile.ZipFile(whole, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("d.jsonl", jsonl_bytes(make_docs(200)))
    (tmp_path / "f.zip").write_bytes(whole.read_bytes()[:-40])
    r = run_cli("source=files", "source.glob=f.zip", "out_dir=out", cwd=tmp_path)
    assert_one_line_error(r, "f.zip: not a readable zip archive", "get the whole file again")
    assert not (tmp_path / "out").exists()


def test_parquet_errors(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"body": ["a", "b"]}), tmp_path / "d.parquet")
    r = run_cli("source=files", "source.glob=d.parquet", "out_dir=out", cwd=tmp_path)
    assert_one_line_error(r, "d.parquet", "no column 'text'", "body")
    pq.write_table(pa.table({"text": ["a", None]}), tmp_path / "n.parquet")
    r = run_cli("source=files", "source.glob=n.parquet", "out_dir=out", cwd=tmp_path)
    assert_one_line_error(r, "n.parquet", "row 1", "not a string")
    (tmp_path / "x.parquet").write_bytes(b"PAR1 not really")
    r = run_cli("source=files", "source.glob=x.parquet", "out_dir=out", cwd=tmp_path)
    assert_one_line_error(r, "x.parquet", "Parquet")


# an attack: a 38 KB Parquet file whose one row decompresses to 400 MB took 2.5 GB and
# ended in a MemoryError "run the same command again" (char), or Rust's allocation failure
# and SIGABRT (tiktoken). A text longer than source.max_uncut_bytes is refused as in JSONL
def test_a_parquet_text_longer_than_max_uncut_bytes_is_one_line(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    big = "hello world " * 200_000  # 2.4 MB in one row, 3 KB compressed
    rows = ["short one"] * 50 + [big] + ["short two"] * 50
    pq.write_table(pa.table({"text": rows}), tmp_path / "mixed.parquet", compression="zstd")
    pq.write_table(pa.table({"text": [big]}), tmp_path / "bomb.parquet", compression="zstd")
    for name, row in (("mixed.parquet", 50), ("bomb.parquet", 0)):
        r = run_cli("source=file", f"source.path={name}", "source.max_uncut_bytes=1000000",
                    "out_dir=out", cwd=tmp_path)  # fmt: skip
        assert_one_line_error(r, name, f"row {row}", "source.max_uncut_bytes=1000000")
        assert not (tmp_path / "out").exists()


def _refused_unread(path, monkeypatch) -> None:
    """The Parquet file's one row group is refused by its footer (its text is longer than
    source.max_uncut_bytes=1000000): no batch of it is read."""
    import pyarrow.parquet as pq

    from corpusprep.formats import InputFile, Segment
    from corpusprep.formats.parquet import FORMAT

    file = InputFile(path=str(path), format="parquet", compression="none",
                     size=path.stat().st_size, max_uncut_bytes=1_000_000)  # fmt: skip
    read = []
    real = pq.ParquetFile.iter_batches
    monkeypatch.setattr(pq.ParquetFile, "iter_batches",
                        lambda self, *a, **k: read.append(k) or real(self, *a, **k))  # fmt: skip
    with pytest.raises(UserError, match=r"row 0: .*source.max_uncut_bytes=1000000"):
        list(FORMAT.parts(Segment(file, 0, 1, file.size)))
    assert read == []


def test_a_parquet_row_group_that_must_hold_a_too_long_text_is_not_decompressed(
    tmp_path, monkeypatch
):
    """Its text column's size, from the footer, divided by its rows is more than the limit:
    one text at least is, so the group is refused before any of it is read."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path = tmp_path / "bomb.parquet"
    pq.write_table(pa.table({"text": ["x" * 3_000_000]}), path, compression="zstd")
    _refused_unread(path, monkeypatch)


def test_a_parquet_text_after_a_struct_column_is_measured_by_its_own_column(tmp_path, monkeypatch):
    """A row group's footer counts leaf columns: a struct before the text (dolma's metadata)
    is several, so the text's size is found by its path, not its place among the fields."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path = tmp_path / "nested.parquet"
    table = pa.table({"meta": pa.array([{"a": 1, "b": "small"}]), "text": ["x" * 3_000_000]})
    pq.write_table(table, path, compression="zstd")
    _refused_unread(path, monkeypatch)
