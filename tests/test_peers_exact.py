"""Exactly the peers' files (issue 11): each peer's method, written here from its published
behaviour, run on the same input as corpusprep, and the bytes compared.

- nanoGPT's data/openwebtext/prepare.py: HF `datasets`' train_test_split(test_size=0.0005,
  seed=2357, shuffle=True), encode_ordinary + eot per document, each split written in the
  split's row order;
- llm.c's dev/data/tinyshakespeare.py: sections at "\\n\\n", eot before each, val the first
  32,768 tokens, llm.c's .bin header.
"""

from __future__ import annotations

import json
import math
import os
import random
from pathlib import Path

import numpy as np
import pytest
from helpers import assert_one_line_error, run_cli

OWT_ARGS = ["dataset=openwebtext", "source=files", "source.glob=owt.jsonl", "source.format=jsonl"]


def _llmc_reference(text: str) -> tuple[bytes, bytes]:
    """llm.c's tinyshakespeare.py steps: its val and train .bin bytes."""
    import tiktoken

    enc = tiktoken.get_encoding("gpt2")
    eot = enc._special_tokens["<|endoftext|>"]
    sections = text.split("\n\n")
    tokens: list[int] = []
    for i, section in enumerate(sections):
        tokens.append(eot)
        tokens.extend(enc.encode_ordinary(section + "\n\n" if i != len(sections) - 1 else section))

    def datafile(toks: list[int]) -> bytes:
        header = np.zeros(256, dtype=np.int32)
        header[:3] = (20240520, 1, len(toks))
        return header.tobytes() + np.array(toks, dtype=np.uint16).tobytes()

    return datafile(tokens[:32768]), datafile(tokens[32768:])


def test_shakespeare_llmc_is_llm_c_tinyshakespeare_byte_for_byte(
    tmp_path, seeded_cache, tiktoken_cache, shakespeare
):
    r = run_cli("dataset=shakespeare_llmc", "out_dir=out", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    val, train = _llmc_reference(shakespeare.read_text(encoding="utf-8"))
    out = tmp_path / "out"
    assert (out / "tiny_shakespeare_val_000000.bin").read_bytes() == val
    assert (out / "tiny_shakespeare_train_000001.bin").read_bytes() == train
    m = json.loads((out / "manifest.json").read_text())
    assert m["tokens"] == {"train": 305_260, "val": 32_768}


@pytest.mark.parametrize("text", ["a\n\n\n\nb\n\n", "x", "\n\n", "p\n\nq\n\n\nr\n"])
def test_doc_end_cuts_as_str_split_does(tmp_path, tiktoken_cache, text):
    """Edge cases of llm.c's sectioning: empty sections, a trailing "\\n\\n", none at all."""
    (tmp_path / "t.txt").write_text(text * 3000)
    r = run_cli("source=file", "source.path=t.txt", "tokenizer=tiktoken", "source.doc_end='\n\n'",
                "eot=prepend", "split_by=head", "val_size=5", "format=llmc", "name=t",
                "out_dir=out", "executor.workers=2", "shard_bytes=1000", cwd=tmp_path)  # fmt: skip
    if "leaves" in r.stderr or "only" in r.stderr:
        pytest.skip("too few tokens for this case")
    assert r.returncode == 0, r.stderr
    val, train = _llmc_reference(text * 3000)
    # the reference cuts val at 32,768; compare the joined streams and the val cut instead
    got = b"".join((tmp_path / "out" / n).read_bytes()[1024:] for n in
                   ("t_val_000000.bin", "t_train_000001.bin"))  # fmt: skip
    assert got == val[1024:] + train[1024:]


def _owt_corpus(path: Path, n: int) -> list[str]:
    """Web-like documents: uneven lengths, unicode, blank lines, a few exact duplicates."""
    rng = random.Random(n)
    words = ["the", "web", "text", "naïve", "日本語", "😀", "data", "model", "\n", "  "]
    docs = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 300))) for _ in range(n)]
    docs[5] = docs[3]
    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs), encoding="utf-8")
    return docs


def _nanogpt_owt(jsonl: Path, out: Path) -> None:
    """nanoGPT's data/openwebtext/prepare.py, with its load_dataset pointed at a JSONL."""
    import tiktoken
    from datasets import load_dataset

    enc = tiktoken.get_encoding("gpt2")
    dataset = load_dataset("json", data_files=str(jsonl), split="train")
    split = dataset.train_test_split(test_size=0.0005, seed=2357, shuffle=True)
    split["val"] = split.pop("test")

    def process(example):
        ids = enc.encode_ordinary(example["text"])
        ids.append(enc.eot_token)
        return {"ids": ids, "len": len(ids)}

    tokenized = split.map(process, remove_columns=["text"])
    out.mkdir()
    for name, dset in tokenized.items():
        arr_len = np.sum(dset["len"], dtype=np.uint64)
        arr = np.memmap(out / f"{name}.bin", dtype=np.uint16, mode="w+", shape=(arr_len,))
        batches = min(1024, len(dset))  # nanoGPT: 1024 (its corpus has millions of rows)
        idx = 0
        for i in range(batches):
            batch = dset.shard(num_shards=batches, index=i, contiguous=True).with_format("numpy")
            arr_batch = np.concatenate(batch["ids"])
            arr[idx : idx + len(arr_batch)] = arr_batch
            idx += len(arr_batch)
        arr.flush()


@pytest.mark.parametrize("n", [2000, 4017])  # ceil(0.0005 n): 1 and 3 val documents
def test_openwebtext_is_nanogpt_byte_for_byte(tmp_path, tiktoken_cache, n):
    pytest.importorskip("datasets")
    os.environ.setdefault("HF_DATASETS_CACHE", str(tmp_path / "hf"))
    _owt_corpus(tmp_path / "owt.jsonl", n)
    _nanogpt_owt(tmp_path / "owt.jsonl", tmp_path / "ref")
    r = run_cli(*OWT_ARGS, "out_dir=out", "shard_bytes=50000", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    for side in ("train", "val"):
        ours = (tmp_path / "out" / f"{side}.bin").read_bytes()
        assert ours == (tmp_path / "ref" / f"{side}.bin").read_bytes(), side
    m = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert m["documents"]["val"] == math.ceil(0.0005 * n)


def test_the_shuffle_is_the_same_for_any_workers_and_shards(tmp_path, tiktoken_cache):
    _owt_corpus(tmp_path / "owt.jsonl", 3000)
    outs = []
    for workers, shard_bytes in [(1, 10**7), (2, 30_000), (2, 7_000), (1, 123_457)]:
        out = f"out_{workers}_{shard_bytes}"
        r = run_cli(*OWT_ARGS, "val_size=0.1", f"executor.workers={workers}",
                    f"shard_bytes={shard_bytes}", f"out_dir={out}", cwd=tmp_path)  # fmt: skip
        assert r.returncode == 0, r.stderr
        m = json.loads((tmp_path / out / "manifest.json").read_text())
        assert m["shards"]["count"] >= 1
        outs.append({n: (tmp_path / out / n).read_bytes() for n in m["files"]})
    assert all(o == outs[0] for o in outs[1:])


def test_shuffle_order_is_the_permutation_and_source_order_keeps_the_corpus(tmp_path):
    """With the byte tokenizer each document's ids are its UTF-8: the files show the order."""
    docs = [f"doc{i:04d}|" for i in range(500)]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    base = ["source=files", "source.glob=d.jsonl", "tokenizer=byte", "eot=none",
            "split_by=document", "val_size=50", "seed=7", "shard_bytes=3000"]  # fmt: skip
    perm = np.random.default_rng(7).permutation(500)
    val_set = set(perm[:50].tolist())
    for order, expect_val, expect_train in [
        ("shuffle", perm[:50], perm[50:]),
        ("source", sorted(val_set), [i for i in range(500) if i not in val_set]),
    ]:
        r = run_cli(*base, f"order={order}", f"out_dir={order}", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        for side, expect in (("val", expect_val), ("train", expect_train)):
            got = (tmp_path / order / f"{side}.bin").read_bytes()[::2].decode()  # uint16 bytes
            assert got == "".join(docs[i] for i in expect), (order, side)
        # the document index follows the order
        import corpusprep

        ds = corpusprep.load(tmp_path / order)
        starts = np.asarray(ds.val_docs)
        assert list(starts) == [len(docs[0]) * k for k in range(50)]


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["split_by=document", "val_size=2000"], "val_size=2000 of 2,000 documents"),
        (["split_by=document", "val_size=1.5"], "val_size=1.5"),
        (["split_by=head"], "needs val_size"),
        (["split_by=head", "val_size=0.5"], "whole number of tokens"),
        (["order=sideways"], "order=sideways"),
    ],
)
def test_bad_split_settings_are_one_line(tmp_path, args, fragment):
    (tmp_path / "d.jsonl").write_text("".join(json.dumps({"text": f"d{i}"}) + "\n"
                                              for i in range(2000)))  # fmt: skip
    r = run_cli("source=files", "source.glob=d.jsonl", *args, "out_dir=out", cwd=tmp_path)
    assert_one_line_error(r, fragment)
    assert not (tmp_path / "out").exists()


def test_shuffle_of_one_text_is_refused(tmp_path):
    (tmp_path / "t.txt").write_text("one text\n" * 100)
    r = run_cli("source=file", "source.path=t.txt", "order=shuffle", "out_dir=out", cwd=tmp_path)
    assert_one_line_error(r, "order=shuffle", "one text")


def test_val_size_is_taken_as_given_never_as_one_minus_split(tmp_path):
    """1 - 0.95 is 0.05000000000000004: ceil of it times 2,000 is 101; val_size=0.05 is 100."""
    (tmp_path / "d.jsonl").write_text("".join(json.dumps({"text": f"d{i}"}) + "\n"
                                              for i in range(2000)))  # fmt: skip
    r = run_cli("source=files", "source.glob=d.jsonl", "split_by=document", "val_size=0.05",
                "out_dir=a", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "a" / "manifest.json").read_text())["documents"]["val"] == 100
    r = run_cli("source=files", "source.glob=d.jsonl", "split_by=document", "split=0.95",
                "out_dir=b", cwd=tmp_path)  # fmt: skip
    assert json.loads((tmp_path / "b" / "manifest.json").read_text())["documents"]["val"] == 100
