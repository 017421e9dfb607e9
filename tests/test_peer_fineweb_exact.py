"""The sharded formats against the peers' own shard writers, byte for byte.

llm.c's dev/data/fineweb.py and build-nanogpt's fineweb.py fill shards of `shard_size`
tokens from a stream of documents, each `[<|endoftext|>] + encode_ordinary(text)`: a
document that fits (`token_count + len(tokens) < shard_size`) is appended; otherwise the
shard is topped up with the document's head, written, and its rest starts the next shard
(a document ending exactly at the boundary fills the shard and leaves nothing over); the
tokens left at the end are one last shard, none when nothing is left. Shard 0 is `val`, the
rest `train`, named `{name}_{split}_{index:06d}`: llm.c writes each with data_common.py's
write_datafile (256 int32 header: magic, version, count; then uint16 for gpt-2, uint32 for
llama-3), build-nanogpt with np.save (`.npy`).

So corpusprep with eot=prepend, split_by=head, val_size=shard_tokens is the same job: val
the first shard, train the rest. The peers' loops are written here from their code (the
progress bar left out), run on the same documents, and every file compared. The corpora
hit the edges: a document ending exactly at a shard boundary, a total that is an exact
multiple of the shard size (no short last shard, no empty one), train in one shard."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from helpers import compose

from corpusprep.prepare import prepare


def fineweb_shards(docs: list[np.ndarray], shard_size: int, dtype) -> list[tuple[str, np.ndarray]]:
    """The shard loop of fineweb.py (llm.c's and build-nanogpt's are the same): the
    (split, tokens) of each shard written, in order."""
    out = []
    shard_index = 0
    all_tokens_np = np.empty((shard_size,), dtype=dtype)
    token_count = 0
    for tokens in docs:
        if token_count + len(tokens) < shard_size:
            all_tokens_np[token_count : token_count + len(tokens)] = tokens
            token_count += len(tokens)
        else:
            split = "val" if shard_index == 0 else "train"
            remainder = shard_size - token_count
            all_tokens_np[token_count : token_count + remainder] = tokens[:remainder]
            out.append((split, all_tokens_np.copy()))
            shard_index += 1
            all_tokens_np[0 : len(tokens) - remainder] = tokens[remainder:]
            token_count = len(tokens) - remainder
    if token_count != 0:
        split = "val" if shard_index == 0 else "train"
        out.append((split, all_tokens_np[:token_count].copy()))
    return out


def llmc_write_datafile(filename: Path, toks: np.ndarray, model_desc: str) -> None:
    """llm.c dev/data/data_common.py write_datafile."""
    assert len(toks) < 2**31
    info = {"gpt-2": (20240520, 1, np.uint16), "llama-3": (20240801, 7, np.uint32)}[model_desc]
    header = np.zeros(256, dtype=np.int32)
    header[0], header[1], header[2] = info[0], info[1], len(toks)
    toks_np = np.array(toks.tolist(), dtype=info[2])
    with open(filename, "wb") as f:
        f.write(header.tobytes())
        f.write(toks_np.tobytes())


def reference(folder: Path, name: str, docs, shard_size: int, fmt: str, encoding: str) -> None:
    folder.mkdir()
    dtype = np.uint16 if encoding == "gpt2" else np.uint32
    for index, (split, tokens) in enumerate(fineweb_shards(docs, shard_size, dtype)):
        filename = folder / f"{name}_{split}_{index:06d}"
        if fmt == "npy":  # build-nanogpt: write_datafile is np.save (which adds .npy)
            np.save(filename, tokens)
        else:
            model = "gpt-2" if encoding == "gpt2" else "llama-3"
            llmc_write_datafile(filename.with_name(filename.name + ".bin"), tokens, model)


def texts(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    words = ["the", "king", "naïve", "日本語", "😀", "queen", "\n", "data"]
    return [" ".join(rng.choice(words, size=int(rng.integers(1, 60)))) for _ in range(n)]


def encode(encoding: str, docs: list[str]) -> list[np.ndarray]:
    """fineweb.py's tokenize: the end of text first, then the document's ordinary tokens."""
    import tiktoken

    enc = tiktoken.get_encoding(encoding)
    eot = enc._special_tokens["<|endoftext|>"]
    return [np.array([eot] + enc.encode_ordinary(d), dtype=np.int64) for d in docs]


def corpus(case: str, encoding: str) -> tuple[list[str], int]:
    """Documents and a shard size giving `case`'s edge."""
    docs = texts(300, seed=len(case))
    lengths = [len(t) for t in encode(encoding, docs)]
    ends = np.cumsum(lengths)
    if case == "boundary":  # shard 0 (val) ends exactly where document 40 ends
        return docs, int(ends[40])
    shard = int(ends[-1]) // 4 + 7
    if case == "one_train_shard":  # val one shard, train one shorter one
        shard = int(ends[-1]) * 2 // 3
        return docs, shard
    # "exact": documents of " the" (1 token each, after the end of text) added until the
    # total is a multiple of the shard size: the last shard is full, and nothing follows
    missing = -int(ends[-1]) % shard
    missing += shard if missing == 1 else 0  # no document of the end of text alone
    while missing:
        take = min(missing, 50) if missing != 51 else 49  # never a document of the eot alone
        docs.append(" the" * (take - 1))
        missing -= take
    return docs, shard


# build-nanogpt's fineweb.py is GPT-2 only; llm.c's writes llama-3 (uint32) files too
FORMATS = [("npy", "gpt2"), ("llmc", "gpt2"), ("llmc", "cl100k_base")]


@pytest.mark.parametrize("fmt, encoding", FORMATS)
@pytest.mark.parametrize("case", ["boundary", "exact", "one_train_shard"])
def test_shards_are_fineweb_py_byte_for_byte(tmp_path, tiktoken_cache, fmt, case, encoding):
    docs, shard = corpus(case, encoding)
    ids = encode(encoding, docs)
    total = sum(len(t) for t in ids)
    if case == "boundary":
        assert shard == sum(len(t) for t in ids[:41])
    if case == "exact":
        assert total % shard == 0 and total // shard >= 3
    src = tmp_path / "fw.jsonl"
    src.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs), encoding="utf-8")
    name = "edufineweb" if fmt == "npy" else "fineweb"
    reference(tmp_path / "ref", name, ids, shard, fmt, encoding)
    out = tmp_path / "out"
    prepare(compose("source=file", f"source.path={src}", f"out_dir={out}", "quiet=true",
                    f"name={name}", "tokenizer=tiktoken", f"tokenizer.encoding={encoding}",
                    "eot=prepend", "split_by=head", f"val_size={shard}", f"format={fmt}",
                    f"shard_tokens={shard}", "executor.workers=2", "shard_bytes=3000"))  # fmt: skip
    want = sorted(os.listdir(tmp_path / "ref"))
    got = sorted(p.name for p in out.iterdir() if p.is_file() and p.name.startswith(name))
    assert got == want
    if case == "exact":
        assert len(want) == total // shard
    if case == "one_train_shard":
        assert len(want) == 2
    for f in want:
        assert (out / f).read_bytes() == (tmp_path / "ref" / f).read_bytes(), f
