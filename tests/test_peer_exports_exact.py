"""What each peer's trainer sees of our files, token for token (found by an attack on the
exporters). Each peer's loader is re-implemented here step by step from its published
code, never from corpusprep's:

- nanoGPT train.py get_batch: np.memmap(split + '.bin', dtype) of the exact file name;
- llm.c llmc/dataloader.h (train_gpt2cu, train_gpt2.c) and train_gpt2.py: a sorted glob of
  -i/-j, each shard's 256-int32 header checked (magic 20240520, version 1, size = header +
  ntok uint16, ntok > 0); train_llama3.py the same with 20240801 / 7 / uint32;
- build-nanogpt train_gpt2.py DataLoaderLite: os.listdir, every name holding the split
  word, sorted, np.load(...).astype(np.int32);
- Megatron-LM megatron/core/datasets/indexed_dataset.py IndexedDataset: the .idx header
  (MMIDIDX, version 1, dtype code, sequence and document counts), the arrays at their
  offsets, its three asserts, and each sequence read from the memmapped .bin.

The ids are checked against tiktoken's own encoding of each document, with the end of
text where the run puts it, val the first val_size tokens (llm.c's convention)."""

from __future__ import annotations

import glob
import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest
from helpers import compose

from corpusprep.prepare import prepare

# --- the peers' loaders ------------------------------------------------------------------


def nanogpt_split(data_dir: Path, split: str, dtype) -> np.ndarray:
    """nanoGPT train.py get_batch (np.uint16; a user of a larger vocabulary edits the dtype)."""
    return np.memmap(os.path.join(data_dir, f"{split}.bin"), dtype=dtype, mode="r")


def llmc_split(pattern: str, llama3: bool) -> list[np.ndarray]:
    """llm.c: sorted(glob(pattern)), every shard's header validated, its tokens."""
    magic, version, dtype = (20240801, 7, np.uint32) if llama3 else (20240520, 1, np.uint16)
    files = sorted(glob.glob(pattern))
    assert files, f"no files found matching the pattern: {pattern}"
    shards = []
    for name in files:
        with open(name, "rb") as f:
            header = np.frombuffer(f.read(256 * 4), dtype=np.int32)
            assert header[0] == magic, f"{name}: Bad magic in the data file"
            assert header[1] == version, f"{name}: Bad version in data file"
            ntok = int(header[2])
            assert ntok > 0
            size = os.path.getsize(name)
            assert size == 256 * 4 + ntok * np.dtype(dtype).itemsize, "file size is not as expected"
            tokens = np.frombuffer(f.read(), dtype=dtype)
        assert len(tokens) == ntok, "number of tokens read does not match header?"
        shards.append(tokens)
    return shards


def build_nanogpt_split(data_root: Path, split: str) -> list[np.ndarray]:
    shards = os.listdir(data_root)
    shards = [s for s in shards if split in s]
    shards = sorted(shards)
    shards = [os.path.join(data_root, s) for s in shards]
    assert len(shards) > 0, f"no shards found for split {split}"
    return [np.load(s).astype(np.int32) for s in shards]


MEGATRON_DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64,
                   6: np.float64, 7: np.float32, 8: np.uint16}  # fmt: skip


def megatron_dataset(path_prefix: str) -> tuple[list[np.ndarray], np.ndarray]:
    """IndexedDataset(path_prefix): (every sequence, document_indices)."""
    idx_path, bin_path = path_prefix + ".idx", path_prefix + ".bin"
    assert os.path.exists(idx_path) and os.path.exists(bin_path)
    bin_buffer = np.memmap(bin_path, mode="r", order="C")  # _MMapBinReader
    with open(idx_path, "rb") as stream:
        assert stream.read(9) == b"MMIDIDX\x00\x00", "bad header"
        assert struct.unpack("<Q", stream.read(8))[0] == 1, "bad version"
        dtype = MEGATRON_DTYPES[struct.unpack("<B", stream.read(1))[0]]
        sequence_count = struct.unpack("<Q", stream.read(8))[0]
        document_count = struct.unpack("<Q", stream.read(8))[0]
        offset = stream.tell()
    buf = memoryview(np.memmap(idx_path, mode="r", order="C"))
    lengths = np.frombuffer(buf, dtype=np.int32, count=sequence_count, offset=offset)
    pointers = np.frombuffer(buf, dtype=np.int64, count=sequence_count,
                             offset=offset + lengths.nbytes)  # fmt: skip
    documents = np.frombuffer(buf, dtype=np.int64, count=document_count,
                              offset=offset + lengths.nbytes + pointers.nbytes)  # fmt: skip
    assert lengths.shape[0] == documents[-1]
    assert lengths.shape[0] == sequence_count
    sequences = [np.frombuffer(bin_buffer, dtype=dtype, count=int(n), offset=int(p))
                 for n, p in zip(lengths, pointers)]  # fmt: skip
    return sequences, documents


# --- a corpus whose every document's ids are known ----------------------------------------


def documents() -> list[str]:
    """Uneven documents: a one-token one, non-ASCII, one of a character cl100k holds only as
    byte tokens, long ones."""
    docs = ["a"]
    for i in range(120):
        docs.append(f"Document {i}: naïve café 日本語 😀 " + "the king and the queen " * (i % 17))
    docs += ["語", "x" * 5000, "b"]
    return docs


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("peers_exact") / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in documents()), "utf-8")
    return path


def reference(encoding: str, eot: str) -> list[list[int]]:
    import tiktoken

    enc = tiktoken.get_encoding(encoding)
    e = enc.eot_token
    out = []
    for text in documents():
        ids = enc.encode_ordinary(text)
        out.append({"append": ids + [e], "prepend": [e] + ids, "none": ids}[eot])
    return out


def run(corpus: Path, out: Path, *extra: str) -> dict:
    return prepare(compose("source=file", f"source.path={corpus}", f"out_dir={out}",
                           "quiet=true", "name=web", "tokenizer=tiktoken", "split_by=head",
                           *extra))  # fmt: skip


VAL = 1000  # val: the first 1,000 tokens (head)


def seen(fmt: str, out: Path, llama3: bool) -> dict[str, np.ndarray]:
    """What the peer's trainer reads of each split, as one stream."""
    if fmt == "nanogpt":
        dtype = np.uint32 if llama3 else np.uint16
        return {s: np.asarray(nanogpt_split(out, s, dtype)) for s in ("train", "val")}
    if fmt == "llmc":
        return {s: np.concatenate(llmc_split(f"{glob.escape(str(out))}/web_{s}_*.bin", llama3))
                for s in ("train", "val")}  # fmt: skip
    if fmt == "npy":
        return {s: np.concatenate(build_nanogpt_split(out, s)) for s in ("train", "val")}
    got = {}
    for s in ("train", "val"):
        sequences, _ = megatron_dataset(str(out / f"web_{s}_text_document"))
        got[s] = np.concatenate(sequences)
    return got


CASES = [  # (encoding, eot, shard_tokens)
    ("gpt2", "prepend", 500),  # val: exactly two full shards
    ("gpt2", "append", 333),
    ("cl100k_base", "append", 1000),  # val: exactly one full shard
    ("cl100k_base", "prepend", 7),
]


@pytest.mark.parametrize("fmt", ["nanogpt", "llmc", "npy", "megatron"])
@pytest.mark.parametrize("encoding, eot, shard_tokens", CASES)
def test_each_peer_sees_the_documents_ids(corpus, tmp_path, tiktoken_cache, fmt, encoding, eot,
                                          shard_tokens):  # fmt: skip
    extra = [f"tokenizer.encoding={encoding}", f"eot={eot}", f"val_size={VAL}", f"format={fmt}"]
    if fmt in ("llmc", "npy"):
        extra.append(f"shard_tokens={shard_tokens}")
    m = run(corpus, tmp_path / "out", *extra)
    stream = np.concatenate([np.array(d, dtype=np.int64) for d in reference(encoding, eot)])
    want = {"val": stream[:VAL], "train": stream[VAL:]}
    llama3 = encoding == "cl100k_base"
    assert m["dtype"] == ("uint32" if llama3 else "uint16")
    got = seen(fmt, tmp_path / "out", llama3)
    for side in ("train", "val"):
        assert np.array_equal(got[side].astype(np.int64), want[side]), side
    if fmt in ("llmc", "npy"):
        shards = m["format"]["shards"]
        assert [s["tokens"] for s in shards["val"]] == [shard_tokens] * (VAL // shard_tokens) + (
            [VAL % shard_tokens] if VAL % shard_tokens else []
        )


@pytest.mark.parametrize("eot", ["append", "prepend", "none"])
def test_megatron_sequences_are_the_documents(corpus, tmp_path, tiktoken_cache, eot):
    """One sequence per document, the document indices 0..n; the document the head cut
    through: its val part ends val, its rest begins train as a document of its own."""
    run(corpus, tmp_path / "out", f"eot={eot}", f"val_size={VAL}", "format=megatron")
    docs = reference("gpt2", eot)
    ends = np.cumsum([len(d) for d in docs])
    cut = int(np.searchsorted(ends, VAL, side="right"))  # the document holding token VAL
    before = VAL - (int(ends[cut - 1]) if cut else 0)
    want_val = docs[:cut] + ([docs[cut][:before]] if before else [])
    want_train = ([docs[cut][before:]] if before else [docs[cut]]) + docs[cut + 1 :]
    for side, want in (("val", want_val), ("train", want_train)):
        sequences, indices = megatron_dataset(str(tmp_path / "out" / f"web_{side}_text_document"))
        assert [s.tolist() for s in sequences] == want, side
        assert indices.tolist() == list(range(len(want) + 1)), side


def test_megatron_one_text_is_one_document_per_side(tmp_path, tiktoken_cache):
    src = tmp_path / "one.txt"
    src.write_text("To be, or not to be, that is the question.\n" * 400)
    prepare(compose("source=file", f"source.path={src}", f"out_dir={tmp_path / 'out'}",
                    "quiet=true", "name=one", "tokenizer=tiktoken", "format=megatron"))  # fmt: skip
    import tiktoken

    text = src.read_text()
    cut = int(len(text) * 0.9)
    enc = tiktoken.get_encoding("gpt2")
    for side, part in (("train", text[:cut]), ("val", text[cut:])):
        sequences, indices = megatron_dataset(str(tmp_path / "out" / f"one_{side}_text_document"))
        assert [s.tolist() for s in sequences] == [enc.encode_ordinary(part)]
        assert indices.tolist() == [0, 1]


@pytest.mark.parametrize("fmt", ["nanogpt", "llmc", "npy", "megatron"])
def test_files_do_not_depend_on_workers_or_shard_bytes(corpus, tmp_path, tiktoken_cache, fmt):
    extra = [f"format={fmt}", "val_size=1000", "tokenizer.encoding=cl100k_base"]
    if fmt in ("llmc", "npy"):
        extra.append("shard_tokens=997")
    folders = []
    for i, (workers, shard_bytes) in enumerate([(1, 8388608), (3, 700), (2, 2500)]):
        out = tmp_path / f"o{i}"
        run(corpus, out, *extra, f"executor.workers={workers}", f"shard_bytes={shard_bytes}")
        folders.append(out)

    def files(folder: Path) -> dict[str, bytes]:
        return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
                if p.is_file() and p.name != "manifest.json"}  # fmt: skip

    first = files(folders[0])
    assert len(first) > 3
    for other in folders[1:]:
        assert files(other) == first, other


# --- what a killed run leaves: no file a peer's loader takes ------------------------------

KILL_AT_COMMIT = """
import os, signal, sys
import corpusprep.prepare as prepare
def killed(run, *a, **k):  # every file is written, under its temporary name: SIGKILL now
    os.kill(os.getpid(), signal.SIGKILL)
prepare.commit = killed
from corpusprep.app import main
sys.argv[0] = "corpusprep"
main()
"""


@pytest.mark.parametrize("fmt", ["npy", "llmc", "nanogpt"])
def test_a_killed_run_leaves_nothing_a_loader_reads(corpus, tmp_path, tiktoken_cache, fmt):
    """A SIGKILLed run cannot tidy up: its temporary files stay, hidden, until the next run
    in the folder removes them. build-nanogpt's DataLoaderLite lists the folder with
    os.listdir (hidden files too) and takes every name holding 'train' / 'val': a finished
    temporary shard of the dead run was loaded as one more shard, before the real ones."""
    import subprocess
    import sys

    from helpers import REPO

    out = tmp_path / "out"
    args = ["source=file", f"source.path={corpus}", f"out_dir={out}", "name=web",
            "tokenizer=tiktoken", f"format={fmt}", "quiet=true"]  # fmt: skip
    if fmt != "nanogpt":
        args.append("shard_tokens=3000")
    prepare(compose(*args))
    before = {"train": seen(fmt, out, False)["train"], "val": seen(fmt, out, False)["val"]}
    env = {**os.environ, "PYTHONPATH": str(REPO), "TIKTOKEN_CACHE_DIR": str(tiktoken_cache)}
    r = subprocess.run([sys.executable, "-c", KILL_AT_COMMIT, *args, "split=0.5"], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == -9, r.stderr
    assert any(p.name.endswith(".tmp") for p in out.iterdir())  # the dead run's files
    after = seen(fmt, out, False)
    for side in ("train", "val"):
        assert np.array_equal(after[side], before[side]), side
        names = [s for s in os.listdir(out) if side in s]  # build-nanogpt's filter
        assert not [n for n in names if n.endswith(".tmp")], names


# --- shard names a sorted listing keeps in order --------------------------------------------


@pytest.mark.parametrize("shards", [1, 10**6, 10**6 + 1, 12_345_678])
def test_shard_names_sort_in_shard_order(shards):
    """llm.c's glob and build-nanogpt's sorted() order shards by name: with fineweb.py's
    `{index:06d}` a run of over a million shards had `web_train_1000000` sorted between
    `web_train_100000` and `web_train_100001`. (The names are those export() writes; a run
    of a million files is too slow for a test.)"""
    from corpusprep.exporters.llmc import index_width

    width = index_width(shards)
    assert width == max(6, len(str(shards - 1)))
    picks = sorted({0, 1, 9, 99_999, 100_000, 100_001, 999_999} | {shards - 2, shards - 1})
    names = [f"web_train_{i:0{width}d}.bin" for i in picks if 0 <= i < shards]
    assert sorted(names) == names


def test_shard_names_keep_fineweb_width_under_a_million(corpus, tmp_path, tiktoken_cache):
    m = run(corpus, tmp_path / "out", "format=llmc", "shard_tokens=1000", "val_size=1000")
    names = [s["file"] for side in ("val", "train") for s in m["format"]["shards"][side]]
    assert names[:2] == ["web_val_000000.bin", "web_train_000001.bin"]
    assert sorted(names[1:]) == names[1:]


# --- a folder whose manifest is lost: no shard of the run before is read with the new ones --


@pytest.mark.parametrize("fmt", ["llmc", "npy"])
@pytest.mark.parametrize("damage", ["truncated", "removed"])
def test_shards_of_a_run_whose_manifest_is_lost_are_not_read(corpus, tmp_path, tiktoken_cache,
                                                             fmt, damage):  # fmt: skip
    """A re-run learns which files the run before made from its manifest. With that
    manifest cut short or deleted, its surplus shards (web_train_000009... when the new run
    makes fewer) stayed, and llm.c's glob and build-nanogpt's listing read them after the
    new run's own, as train data."""
    out = tmp_path / "out"
    run(corpus, out, f"format={fmt}", "shard_tokens=700", "val_size=1000")
    manifest = out / "manifest.json"
    if damage == "truncated":
        manifest.write_bytes(manifest.read_bytes()[:100])
    else:
        manifest.unlink()
    m = run(corpus, out, f"format={fmt}", "shard_tokens=3000", "val_size=1000")
    llama3 = False
    got = seen(fmt, out, llama3)
    stream = np.concatenate([np.array(d, dtype=np.int64) for d in reference("gpt2", "append")])
    assert np.array_equal(got["val"], stream[:VAL])
    assert np.array_equal(got["train"], stream[VAL:])
    listed = {s["file"] for side in ("train", "val") for s in m["format"]["shards"][side]}
    suffix = ".bin" if fmt == "llmc" else ".npy"
    assert {p.name for p in out.glob(f"web_*{suffix}")} == listed
