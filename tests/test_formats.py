"""Output formats (`format=llmc|npy|megatron`) checked against each format's published
layout: the readers here are written from the specs (llm.c's `_load_data_shard`, np.load,
Megatron-LM's indexed_dataset.py `.idx` layout), never from corpusprep's writers, and
the tokens they read must equal the nanoGPT output of the same run (`format=nanogpt`)."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import numpy as np
import pytest
from helpers import assert_one_line_error, compose, run_cli

import corpusprep
from corpusprep.dataset import ShardedTokens
from corpusprep.errors import UserError
from corpusprep.prepare import prepare

SHARD = 100_000  # tiny shakespeare in gpt2: 301,966 train tokens -> 4 shards, val 36,059 -> 1


# --- readers from the published layouts ------------------------------------------------


def read_llmc(path: Path) -> tuple[np.ndarray, int, int]:
    """llm.c's _load_data_shard (train_gpt2.py), for both headers of data_common.py."""
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(256 * 4), dtype="<i4")
        magic, version, ntok = (int(x) for x in header[:3])
        dtype = {(20240520, 1): "<u2", (20240801, 7): "<u4"}[(magic, version)]
        tokens = np.frombuffer(f.read(), dtype=dtype)
    assert len(tokens) == ntok, "number of tokens read does not match header"
    assert not header[3:].any()  # the rest of the header is zeros
    return tokens, magic, version


MEGATRON_DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64,
                   6: np.float64, 7: np.float32, 8: np.uint16}  # fmt: skip


def read_megatron(prefix: Path) -> dict:
    """Megatron-LM's _IndexReader + IndexedDataset, from indexed_dataset.py's layout."""
    with open(f"{prefix}.idx", "rb") as f:
        assert f.read(9) == b"MMIDIDX\x00\x00", "bad header"
        assert struct.unpack("<Q", f.read(8))[0] == 1, "bad version"
        code = struct.unpack("<B", f.read(1))[0]
        sequence_count = struct.unpack("<Q", f.read(8))[0]
        document_count = struct.unpack("<Q", f.read(8))[0]
        lengths = np.frombuffer(f.read(4 * sequence_count), dtype=np.int32)
        pointers = np.frombuffer(f.read(8 * sequence_count), dtype=np.int64)
        document_indices = np.frombuffer(f.read(8 * document_count), dtype=np.int64)
        assert f.read() == b""  # nothing else (no multimodal sequence modes)
    # IndexedDataset.__init__'s own checks
    assert lengths.shape[0] == document_indices[-1] == sequence_count
    dtype = MEGATRON_DTYPES[code]
    data = np.fromfile(f"{prefix}.bin", dtype=dtype)
    size = np.dtype(dtype).itemsize
    sequences = [data[p // size : p // size + n] for p, n in zip(pointers, lengths)]
    documents = [
        np.concatenate(sequences[a:b]) if b > a else np.zeros(0, dtype)
        for a, b in zip(document_indices[:-1], document_indices[1:])
    ]
    return {"code": code, "dtype": dtype, "data": data, "lengths": lengths,
            "pointers": pointers, "document_indices": document_indices,
            "sequences": sequences, "documents": documents}  # fmt: skip


# --- runs ------------------------------------------------------------------------------


def run(src: Path | str, out: Path, *extra: str, source: str = "file") -> Path:
    key = "source.path" if source == "file" else "source.glob"
    prepare(compose(f"source={source}", f"{key}={src}", f"out_dir={out}", "quiet=true", *extra))
    return out


def nanogpt(out: Path, side: str) -> np.ndarray:
    m = json.loads((out / "manifest.json").read_text())
    return np.fromfile(out / f"{side}.bin", dtype=m["dtype"])


def shards(out: Path, stem: str, suffix: str) -> list[Path]:
    """The shard files (as llm.c's loaders glob them), in the order of their index."""
    files = out.glob(f"{stem}_*_[0-9][0-9][0-9][0-9][0-9][0-9]{suffix}")
    return sorted(files, key=lambda f: int(f.name[-len(suffix) - 6 : -len(suffix)]))


@pytest.fixture(scope="module")
def corpus_docs(tmp_path_factory, shared_data) -> Path:
    """tiny shakespeare cut into 60 files of whole paragraphs: a corpus of documents."""
    folder = tmp_path_factory.mktemp("corpus") / "docs"  # the run's name: docs
    folder.mkdir()
    paragraphs = (shared_data / "tinyshakespeare" / "input.txt").read_text().split("\n\n")
    k = len(paragraphs) // 60
    for i in range(60):
        part = paragraphs[i * k : (i + 1) * k if i < 59 else len(paragraphs)]
        (folder / f"d{i:03d}.txt").write_text("\n\n".join(part))
    return folder


@pytest.fixture(scope="module")
def bpe_runs(tmp_path_factory, shared_data, corpus_docs) -> dict:
    """Every format of the same two runs (one text; documents), GPT-2 BPE."""
    root = tmp_path_factory.mktemp("runs")
    text = shared_data / "tinyshakespeare" / "input.txt"
    outs = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TIKTOKEN_CACHE_DIR", str(shared_data / "tiktoken"))
        corpora = (("text", text, "file"), ("docs", corpus_docs / "*.txt", "files"))
        for corpus, src, source in corpora:
            for fmt in ("nanogpt", "llmc", "npy", "megatron"):
                extra = [f"shard_tokens={SHARD}"] if fmt in ("llmc", "npy") else []
                outs[corpus, fmt] = run(src, root / f"{corpus}-{fmt}", "tokenizer=tiktoken",
                                        f"format={fmt}", *extra, source=source)  # fmt: skip
    return outs


# --- llm.c -----------------------------------------------------------------------------


@pytest.mark.parametrize("corpus", ["text", "docs"])
def test_llmc_shards_read_as_llmc_reads_them(bpe_runs, corpus):
    out, ref = bpe_runs[corpus, "llmc"], bpe_runs[corpus, "nanogpt"]
    stem = "input" if corpus == "text" else "docs"
    files = shards(out, stem, ".bin")
    names = [f.name for f in files]
    val_n = -(-len(nanogpt(ref, "val")) // SHARD)
    train_n = -(-len(nanogpt(ref, "train")) // SHARD)
    # fineweb.py's names: one running index, val first
    assert names == [f"{stem}_val_{i:06d}.bin" for i in range(val_n)] + [
        f"{stem}_train_{i:06d}.bin" for i in range(val_n, val_n + train_n)
    ]
    for side in ("train", "val"):
        parts = [read_llmc(f) for f in files if f"_{side}_" in f.name]
        assert {(magic, version) for _, magic, version in parts} == {(20240520, 1)}
        sizes = [len(t) for t, _, _ in parts]
        assert all(s == SHARD for s in sizes[:-1]) and 0 < sizes[-1] <= SHARD
        assert np.array_equal(np.concatenate([t for t, _, _ in parts]), nanogpt(ref, side))
    m = json.loads((out / "manifest.json").read_text())
    assert m["format"]["kind"] == "llmc" and m["format"]["shard_tokens"] == SHARD
    on_disk = {str(p.relative_to(out)): p.stat().st_size for p in out.rglob("*") if p.is_file()}
    del on_disk["manifest.json"]
    assert m["files"] == on_disk
    assert not (out / "train.bin").exists() and not (out / "val.bin").exists()
    # the document index stays (offsets into the whole split) when there are documents, in
    # doc_index/: out of the way of llm.c's globs
    assert (out / "doc_index" / "train.docs.bin").is_file() == (corpus == "docs")


def test_llmc_uint32_is_the_llama3_header(shakespeare, tmp_path):
    ref = run(shakespeare, tmp_path / "ref", "dtype=uint32")
    out = run(shakespeare, tmp_path / "out", "dtype=uint32", "format=llmc")
    for side, name in (("val", "input_val_000000.bin"), ("train", "input_train_000001.bin")):
        tokens, magic, version = read_llmc(out / name)
        assert (magic, version) == (20240801, 7) and tokens.dtype == np.uint32
        assert np.array_equal(tokens, nanogpt(ref, side))
    assert json.loads((out / "manifest.json").read_text())["format"]["shard_tokens"] == 10**8


def test_several_val_shards_come_first(shakespeare, tmp_path):
    ref = run(shakespeare, tmp_path / "ref")
    out = run(shakespeare, tmp_path / "out", "format=llmc", "shard_tokens=40000")
    names = [f.name for f in shards(out, "input", ".bin")]
    val, train = len(nanogpt(ref, "val")), len(nanogpt(ref, "train"))  # 111,540 / 1,003,854
    nv, nt = -(-val // 40000), -(-train // 40000)
    assert nv == 3 and names[:nv] == [f"input_val_{i:06d}.bin" for i in range(nv)]
    assert names[nv:] == [f"input_train_{i:06d}.bin" for i in range(nv, nv + nt)]


# --- npy -------------------------------------------------------------------------------


@pytest.mark.parametrize("corpus", ["text", "docs"])
def test_npy_shards_load_with_numpy(bpe_runs, corpus):
    out, ref = bpe_runs[corpus, "npy"], bpe_runs[corpus, "nanogpt"]
    stem = "input" if corpus == "text" else "docs"
    files = shards(out, stem, ".npy")
    assert files[0].name == f"{stem}_val_000000.npy"  # build-nanogpt: shard 0 is val
    assert [int(f.stem[-6:]) for f in files] == list(range(len(files)))
    assert all("_val_" in f.name for f in files[:1]) and all("_train_" in f.name for f in files[1:])
    for side in ("train", "val"):
        parts = [np.load(f) for f in files if f"_{side}_" in f.name]  # no pickle, plain arrays
        assert all(p.dtype == np.uint16 and p.ndim == 1 for p in parts)
        assert all(len(p) == SHARD for p in parts[:-1])
        assert np.array_equal(np.concatenate(parts), nanogpt(ref, side))


def test_npy_uint32(shakespeare, tmp_path):
    ref = run(shakespeare, tmp_path / "ref", "dtype=uint32")
    out = run(shakespeare, tmp_path / "out", "dtype=uint32", "format=npy", "shard_tokens=300000")
    train = [np.load(f) for f in shards(out, "input", ".npy") if "_train_" in f.name]
    assert len(train) == 4 and all(t.dtype == np.uint32 for t in train)
    assert np.array_equal(np.concatenate(train), nanogpt(ref, "train"))
    assert np.array_equal(np.load(out / "input_val_000000.npy"), nanogpt(ref, "val"))


# --- Megatron-LM -----------------------------------------------------------------------


def test_megatron_documents(bpe_runs):
    out, ref = bpe_runs["docs", "megatron"], bpe_runs["docs", "nanogpt"]
    m = json.loads((out / "manifest.json").read_text())
    for side in ("train", "val"):
        ds = read_megatron(out / f"docs_{side}_text_document")
        ids = nanogpt(ref, side)
        starts = np.fromfile(ref / "doc_index" / f"{side}.docs.bin", np.uint64).astype(np.int64)
        n = len(starts)
        assert n == m["documents"][side] and ds["code"] == 8  # uint16
        assert np.array_equal(ds["data"], ids)
        assert np.array_equal(ds["lengths"], np.diff(np.append(starts, len(ids))))
        assert np.array_equal(ds["pointers"], starts * 2)  # bytes
        assert np.array_equal(ds["document_indices"], np.arange(n + 1))  # one sequence each
        bounds = np.append(starts, len(ids))
        for i in (0, n // 2, n - 1):
            assert np.array_equal(ds["documents"][i], ids[bounds[i] : bounds[i + 1]])
            assert ds["documents"][i][-1] == 50256  # eot=append: each ends with <|endoftext|>
    assert not (out / "doc_index").exists()  # the .idx holds the document index


def test_megatron_one_text_is_one_document_per_side(bpe_runs):
    out, ref = bpe_runs["text", "megatron"], bpe_runs["text", "nanogpt"]
    for side in ("train", "val"):
        ds = read_megatron(out / f"input_{side}_text_document")
        assert list(ds["document_indices"]) == [0, 1] and list(ds["pointers"]) == [0]
        assert np.array_equal(ds["documents"][0], nanogpt(ref, side))
        assert (out / f"input_{side}_text_document.bin").read_bytes() == (
            ref / f"{side}.bin"
        ).read_bytes()


def test_megatron_uint32_is_int32(shakespeare, tmp_path):
    ref = run(shakespeare, tmp_path / "ref", "dtype=uint32")
    out = run(shakespeare, tmp_path / "out", "dtype=uint32", "format=megatron")
    ds = read_megatron(out / "input_train_text_document")
    assert ds["code"] == 4 and ds["data"].dtype == np.int32  # Megatron has no uint32
    assert np.array_equal(ds["data"].astype(np.uint32), nanogpt(ref, "train"))
    assert list(ds["pointers"]) == [0]


def test_megatron_long_documents_become_several_sequences(tmp_path):
    from corpusprep.exporters.megatron import write_index

    starts = np.array([0, 25, 25, 30], dtype=np.uint64)  # lengths 25, 0 (empty), 5, 12
    with open(tmp_path / "x.idx", "wb") as f:
        assert write_index(f, starts, 42, "uint16", max_len=10) == (6, 4)
    np.arange(42, dtype=np.uint16).tofile(tmp_path / "x.bin")
    ds = read_megatron(tmp_path / "x")
    # the empty document has no sequence, as Megatron's builder records it (add_document of
    # no tokens: no length, its document index the next one's)
    assert list(ds["lengths"]) == [10, 10, 5, 5, 10, 2]
    assert list(ds["pointers"]) == [0, 20, 40, 50, 60, 80]
    assert list(ds["document_indices"]) == [0, 3, 3, 4, 6]
    bounds = [0, 25, 25, 30, 42]
    for i, doc in enumerate(ds["documents"]):
        assert list(doc) == list(range(bounds[i], bounds[i + 1]))


def test_megatron_a_side_that_begins_inside_a_document(tmp_path):
    """split_by=position (or head / tail) can cut through a document: the rest of it that
    begins the side is a document of its own (also when longer than a sequence)."""
    from corpusprep.exporters.megatron import write_index

    with open(tmp_path / "x.idx", "wb") as f:
        assert write_index(f, np.array([23, 30], np.uint64), 42, "uint16", max_len=10) == (6, 3)
    np.arange(42, dtype=np.uint16).tofile(tmp_path / "x.bin")
    ds = read_megatron(tmp_path / "x")
    assert list(ds["lengths"]) == [10, 10, 3, 7, 10, 2]
    assert list(ds["document_indices"]) == [0, 3, 4, 6]
    with open(tmp_path / "y.idx", "wb") as f:  # no document starts in the side at all
        assert write_index(f, np.zeros(0, np.uint64), 8, "uint16") == (1, 1)


@pytest.mark.parametrize("split", [["split_by=position"], ["split_by=tail", "val_size=300"],
                                   ["split_by=head", "val_size=300"]])  # fmt: skip
def test_megatron_documents_split_through_one(tmp_path, tiktoken_cache, split):
    rows = "".join(json.dumps({"text": f"document {i} " + "words " * (i % 40)}) + "\n"
                   for i in range(200))  # fmt: skip
    (tmp_path / "d.jsonl").write_text(rows)
    ref = run(tmp_path / "d.jsonl", tmp_path / "ref", "tokenizer=tiktoken", *split)
    out = run(tmp_path / "d.jsonl", tmp_path / "out", "tokenizer=tiktoken", "format=megatron",
              *split)  # fmt: skip
    for side in ("train", "val"):
        ds = read_megatron(out / f"d_{side}_text_document")
        ids = nanogpt(ref, side)
        assert np.array_equal(ds["data"], ids)
        assert np.array_equal(np.concatenate(ds["documents"]), ids)
        starts = np.fromfile(ref / "doc_index" / f"{side}.docs.bin", np.uint64)
        assert len(ds["documents"]) == len(starts) + (len(starts) == 0 or starts[0] != 0)


# --- corpusprep.load reads every format --------------------------------------------------


@pytest.mark.parametrize("fmt", ["llmc", "npy", "megatron"])
@pytest.mark.parametrize("corpus", ["text", "docs"])
def test_load_reads_every_format(bpe_runs, fmt, corpus, tiktoken_cache):
    ds = corpusprep.load(bpe_runs[corpus, fmt])
    ref = corpusprep.load(bpe_runs[corpus, "nanogpt"])
    assert ds.format == fmt and ds.dtype == np.uint16
    for side in ("train", "val"):
        a, b = getattr(ds, side), getattr(ref, side)
        assert len(a) == len(b) and np.array_equal(a[:], b[:])
        assert np.array_equal(a[SHARD - 5 : SHARD + 5], b[SHARD - 5 : SHARD + 5])
        da, db = ds.docs(side), ref.docs(side)
        assert (da is None) == (db is None) == (corpus == "text")
        if da is not None:
            assert np.array_equal(da, db)
    if fmt != "megatron":  # several train shards: read through without joining them
        assert isinstance(ds.train, ShardedTokens) and len(ds.train.shards) == 4
        assert all(isinstance(s, np.memmap) for s in ds.train.shards)
        assert isinstance(ds.val, np.memmap)  # one shard: the memmap itself
    else:
        assert isinstance(ds.train, np.memmap)
    assert ds.tokenizer.decode(ds.val[:20]) == ref.tokenizer.decode(ref.val[:20])


def test_a_sharded_split_pickles_light_and_reads_from_threads(bpe_runs, tiktoken_cache):
    """A spawned DataLoader worker gets the split pickled: its mapped shards' data would
    go along (and the lock guarding them cannot be pickled); threads read it at once, with
    fewer maps kept than shards, so each read maps and drops shards under the others."""
    import pickle
    from concurrent.futures import ThreadPoolExecutor

    train = corpusprep.load(bpe_runs["docs", "npy"]).train
    train.shards.keep = 2  # of its 4 shards
    whole = np.asarray(train)
    sent = pickle.dumps(train)
    assert len(sent) < 4096  # file names and counts, no ids
    again = pickle.loads(sent)
    assert np.array_equal(np.asarray(again), whole)
    starts = [(i * 7919) % (len(whole) - 50) for i in range(400)]
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda a: train[a : a + 50], starts))
    assert all(np.array_equal(g, whole[a : a + 50]) for g, a in zip(got, starts))


def test_a_sharded_split_reads_in_a_child_forked_mid_read(bpe_runs, tiktoken_cache):
    """A forked DataLoader worker inherits the split's lock as it was: held, if another
    thread was reading at the fork, and then never let go in the child."""
    import multiprocessing
    import os

    train = corpusprep.load(bpe_runs["docs", "npy"]).train
    expected = np.array(train[:10])
    train.shards._lock.acquire()  # another thread, mid-read
    try:
        child = multiprocessing.get_context("fork").Process(
            target=lambda: os._exit(0 if np.array_equal(train[:10], expected) else 1)
        )
        child.start()
        child.join(20)
        if child.is_alive():
            child.kill()
        assert child.exitcode == 0
    finally:
        train.shards._lock.release()


def test_sharded_tokens_index_like_an_array():
    data = np.arange(100, dtype=np.uint16)
    x = ShardedTokens([data[:30], data[30:31], data[31:70], data[70:]])
    assert len(x) == 100 and x.shape == (100,) and x.nbytes == 200 and x.dtype == np.uint16
    keys = [
        slice(None),
        slice(25, 75),
        slice(29, 31),
        slice(-10, None),
        slice(5, 95, 7),
        slice(90, 10, -3),
        slice(50, 50),
        [0, 99, 30, 31, 69, 70],
        np.array([-1, 5]),
    ]
    for key in keys:
        assert np.array_equal(x[key], data[key]), key
    assert x[30] == 30 and x[-1] == 99 and x[np.int64(70)] == 70
    assert np.array_equal(np.asarray(x), data)
    with pytest.raises(IndexError):
        x[100]
    with pytest.raises(IndexError):
        x[[0, 100]]


def test_sharded_tokens_take_a_mask_as_an_array_does_and_refuse_other_keys():
    """Found by an attack: a boolean mask was read as the indices 0 and 1 (x[x_arr == 7]
    gave len(x) copies of x[0] and x[1], silently), and a float index was cut to an int.
    A mask of the array's length selects, as numpy's does; any other is an IndexError, as
    is a float."""
    data = np.arange(100, dtype=np.uint16)
    x = ShardedTokens([data[:30], data[30:31], data[31:70], data[70:]])
    mask = data % 7 == 0
    assert np.array_equal(x[mask], data[mask])
    assert np.array_equal(x[list(mask)], data[list(mask)])
    assert np.array_equal(x[np.zeros(100, bool)], data[:0])
    for key in (np.array([True, False]), [True, False, True], 1.5, np.array([1.5]), [0.0, 2.0]):
        with pytest.raises(IndexError):
            x[key]


def test_sharded_tokens_read_the_keys_numpy_reads_the_same_way_or_refuse_them():
    """Found by an attack: x[True] was x[1] (a bool is an int to Python; to numpy a new
    axis), x[(i,)] an array of one token, not the token, and x[...] was refused. Each key
    numpy reads on a 1-D array gives what numpy gives, or an IndexError naming the key."""
    data = np.arange(100, dtype=np.uint16)
    x = ShardedTokens([data[:30], data[30:31], data[31:70], data[70:]])
    keys = [(31,), (slice(25, 75),), (np.int64(-1),), ..., (...,), np.array(70), (70,), (),
            (..., 5), (slice(3, 9), ...)]  # fmt: skip
    for key in keys:
        got, want = x[key], data[key]
        assert type(got) is type(want) and np.array_equal(got, want), key
    for key in (True, False, np.True_, None, (None,), (1, 2), (slice(None), None), (..., ...)):
        with pytest.raises(IndexError, match="index"):
            x[key]


def test_load_checks_every_file(bpe_runs, tmp_path, tiktoken_cache):
    import shutil

    out = tmp_path / "llmc"
    shutil.copytree(bpe_runs["text", "llmc"], out)
    shard = out / "input_train_000002.bin"
    data = bytearray(shard.read_bytes())
    data[0] ^= 1  # a wrong magic, same size
    shard.write_bytes(bytes(data))
    with pytest.raises(UserError, match="input_train_000002.bin: not an llm.c uint16"):
        corpusprep.load(out)
    shard.write_bytes(bytes(data[:-2]))  # one token short
    with pytest.raises(UserError, match="input_train_000002.bin: .* but the manifest says"):
        corpusprep.load(out)
    shard.unlink()
    with pytest.raises(UserError, match="input_train_000002.bin: missing"):
        corpusprep.load(out)

    meg = tmp_path / "megatron"
    shutil.copytree(bpe_runs["docs", "megatron"], meg)
    idx = meg / "docs_val_text_document.idx"
    data = bytearray(idx.read_bytes())
    data[34:38] = struct.pack("<i", struct.unpack("<i", bytes(data[34:38]))[0] + 1)
    idx.write_bytes(bytes(data))
    with pytest.raises(UserError, match="docs_val_text_document.idx: its sequences"):
        corpusprep.load(meg)


# --- the command line --------------------------------------------------------------------


def test_the_issue_example(tmp_path, seeded_cache, tiktoken_cache):
    r = run_cli("dataset=shakespeare", "format=llmc", "quiet=true", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "data" / "shakespeare"
    names = sorted(p.name for p in out.iterdir())
    assert names == [
        "manifest.json",
        "shakespeare_train_000001.bin",
        "shakespeare_val_000000.bin",
        "token_bytes.npy",  # no *_train_*/*_val_* name: llm.c's globs never see it
    ]  # fmt: skip  (GPT-2: no meta.pkl)
    tokens, magic, _ = read_llmc(out / "shakespeare_train_000001.bin")
    assert magic == 20240520 and len(tokens) == 301_966  # nanoGPT's data/shakespeare count
    r = run_cli("dataset=shakespeare", "format=npy", "shard_tokens=100000", cwd=tmp_path)
    assert r.returncode == 0, r.stderr  # another format: not "up to date", redone
    assert "up to date" not in r.stdout
    assert len(list(out.glob("shakespeare_train_*.npy"))) == 4
    r = run_cli("dataset=shakespeare", "format=npy", "shard_tokens=100000", cwd=tmp_path)
    assert "up to date" in r.stdout


@pytest.mark.parametrize("value", ["0", "-5", "2147483648", "1.5", "lots"])
def test_bad_shard_tokens_is_one_line(tmp_path, shakespeare, value):
    r = run_cli("source=file", f"source.path={shakespeare}", "format=npy",
                f"shard_tokens={value}", f"out_dir={tmp_path / 'o'}", cwd=tmp_path)  # fmt: skip
    assert_one_line_error(r, "shard_tokens=")
    assert not (tmp_path / "o").exists()


def test_each_format_config_names_its_exporter():
    for fmt in ("llmc", "npy", "megatron"):
        cfg = compose("source=file", "source.path=x.txt", f"format={fmt}")
        assert cfg.format.name == fmt
        assert re.match(rf"corpusprep\.exporters\.{fmt}\.\w+Exporter$", cfg.format._target_)


def test_switching_format_removes_the_old_files_only_on_success(tmp_path):
    src = tmp_path / "t.txt"
    src.write_text("some text for a format switch\n" * 400)
    args = ["source=file", f"source.path={src}", "out_dir=out"]
    assert run_cli(*args, "format=llmc", "shard_tokens=4000", cwd=tmp_path).returncode == 0
    llmc = sorted(p.name for p in (tmp_path / "out").glob("t_*.bin"))
    assert len(llmc) == 4
    bad = run_cli(*args, "split=2", cwd=tmp_path)  # a failed run changes nothing
    assert bad.returncode == 1
    assert sorted(p.name for p in (tmp_path / "out").glob("t_*.bin")) == llmc
    assert run_cli(*args, cwd=tmp_path).returncode == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "manifest.json", "meta.pkl", "token_bytes.npy", "train.bin", "val.bin",
    ]  # fmt: skip


def test_npy_warns_of_a_file_in_out_dir_build_nanogpts_loader_would_take(tmp_path, shakespeare):
    """build-nanogpt's DataLoaderLite takes every name in the folder that holds "train" or
    "val" (os.listdir): a file of the user's there (notes, a text) would be read as a
    shard. It stays (corpusprep did not write it), and a warning names it with a fix. A
    previous run's files, which the commit removes, are not named."""
    out = tmp_path / "o"
    base = ["source=file", f"source.path={shakespeare}", "tokenizer=tiktoken",
            "tokenizer.backend=tiktoken", f"out_dir={out}"]  # fmt: skip
    args = [*base, "format=npy", "shard_tokens=75492"]  # no last shard too short
    first = run_cli(*base, cwd=tmp_path)
    assert first.returncode == 0, first.stderr  # train.bin, val.bin: to go at the commit
    (out / "train_notes.txt").write_text("how this corpus was made\n")
    (out / "doc_index").mkdir(exist_ok=True)
    r = run_cli(*args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    warned = [line for line in r.stderr.splitlines() if "train_notes.txt" in line]
    assert len(warned) == 1 and warned[0].startswith("corpusprep: warning: "), r.stderr
    assert "build-nanogpt" in warned[0] and "move it out of" in warned[0]
    assert "train.bin" not in r.stderr and (out / "train_notes.txt").exists()
    again = run_cli(*args, "force=true", cwd=tmp_path)
    assert "train_notes.txt" in again.stderr
    (out / "train_notes.txt").unlink()
    clean = run_cli(*args, "force=true", cwd=tmp_path)
    assert clean.returncode == 0 and "warning" not in clean.stderr, clean.stderr


def test_llmc_warns_of_a_file_in_out_dir_its_glob_would_take(tmp_path, shakespeare):
    """llm.c reads the shards its -i glob matches ({name}_train_*.bin): a file of the
    user's that it matches stays, and a warning names it."""
    out = tmp_path / "o"
    out.mkdir()
    (out / "input_train_backup.bin").write_bytes(b"old ids")
    (out / "train_notes.txt").write_text("no glob of llm.c's matches this\n")
    r = run_cli("source=file", f"source.path={shakespeare}", "format=llmc", "tokenizer=byte",
                f"out_dir={out}", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    warned = [line for line in r.stderr.splitlines() if "out_dir holds" in line]
    assert len(warned) == 1 and "input_train_backup.bin" in warned[0], r.stderr
    assert "llm.c's glob (input_train_*.bin)" in warned[0]
    assert (out / "input_train_backup.bin").read_bytes() == b"old ids"


SPLITS = [["split_by=position"], ["split=0.7", "split_by=position"], ["split_by=document"],
          ["split_by=head", "val_size=300"]]  # fmt: skip


@pytest.mark.parametrize("split", SPLITS)
def test_empty_documents_keep_their_eot_and_place_under_every_split(tmp_path, tiktoken_cache,
                                                                    split):  # fmt: skip
    """An empty JSON text is a document (as datasets counts it): its end-of-text token and
    its place in the index (in Megatron's .idx, a sequence of its own) under every split.
    split_by=position dropped it whole: the manifest counted 200 documents and its sides
    134, and inspect --verify said the fresh folder differed from its input."""
    from corpusprep.inspect import verify

    rows = "".join(json.dumps({"text": "" if i % 3 == 0 else f"doc {i} " + "word " * (i % 7)})
                   + "\n" for i in range(200))  # fmt: skip
    (tmp_path / "d.jsonl").write_text(rows)
    out = run(tmp_path / "d.jsonl", tmp_path / "out", "tokenizer=tiktoken", "format=megatron",
              *split)  # fmt: skip
    m = json.loads((out / "manifest.json").read_text())
    cut = split[-1] != "split_by=document"  # a side may begin inside a document
    assert m["documents"]["train"] + m["documents"]["val"] in ((200, 201) if cut else (200,))
    ids = [read_megatron(out / f"d_{side}_text_document") for side in ("train", "val")]
    assert sum(int((ds["data"] == 50256).sum()) for ds in ids) == 200  # one eot a document
    assert "verified" in verify(corpusprep.load(out))


@pytest.mark.parametrize("fmt", ["nanogpt", "megatron"])
@pytest.mark.parametrize("mode", ["head", "tail"])
def test_empty_documents_at_the_cut_and_the_end_stay_on_their_side(tmp_path, tiktoken_cache,
                                                                  mode, fmt):  # fmt: skip
    """eot=none: an empty text is a document of no tokens. split_by=tail gave the empty
    documents after the last token to train, at an offset past train's end: the fresh
    folder did not load ('its document offsets are not in order within train's 4 tokens';
    Megatron's .idx had train's sequences add up to more tokens than its .bin holds)."""
    from corpusprep.inspect import verify

    texts = ["", "hello there", "x y z w", "", "", ""]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    out = run(tmp_path / "d.jsonl", tmp_path / "out", "tokenizer=tiktoken", "eot=none",
              f"format={fmt}", f"split_by={mode}", "val_size=3")  # fmt: skip
    ds = corpusprep.load(out)
    assert "verified" in verify(ds)
    for side, tokens in ds.splits():
        docs = ds.docs(side)
        assert docs[0] == 0 and (np.diff(docs.astype(np.int64)) >= 0).all()
        assert int(docs[-1]) <= len(tokens), side
    m = json.loads((out / "manifest.json").read_text())
    assert m["documents"]["train"] + m["documents"]["val"] == 7  # x y z w cut in two
    if fmt == "megatron":
        for side in ("train", "val"):
            read_megatron(out / f"d_{side}_text_document")
