"""Whole short documents are encoded and written a batch at a time (shards._Batch): the
files must be byte for byte those of encoding each document on its own (encode_part), for
every split, end-of-text placement and tokenizer, with documents of every size: empty,
tiny, long enough to go on their own, and cut across shards."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from helpers import compose

import corpusprep.shards as shards
from corpusprep.prepare import prepare
from corpusprep.tokenizers.tiktoken import TiktokenTokenizer

COUNTS = ("tokens", "documents", "vocab_used", "chars", "split")


def documents(seed: int) -> list[str]:
    """Empty, tiny, unicode, repeated (exact duplicates across sides), a run of spaces
    (BPE's backtracking case), and two longer than a batch takes."""
    rng = random.Random(seed)
    words = ["the", "king", "and", "queen", "naïve", "café", "日本語", "—", "42", "\t\n", ""]
    docs = ["", "a", " ", "\n\n", "Hello world", "x" * 10]
    for _ in range(600):
        docs.append(" ".join(rng.choice(words) for _ in range(rng.randint(0, 120))))
    docs += ["a repeated document"] * 5 + [" " * 3000]
    long = " ".join(rng.choice(words) for _ in range(15_000))
    docs.insert(300, long)
    docs.insert(450, long[: shards.BATCH_DOC_CHARS + 1])
    return docs


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("batches") / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in documents(0)), "utf-8")
    return path


def run(out: Path, src: Path, *overrides: str) -> dict:
    return prepare(compose("source=file", f"source.path={src}", f"out_dir={out}", "quiet=true",
                           "shard_bytes=65536", *overrides))  # fmt: skip


def outputs(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and p.name != "manifest.json"}  # fmt: skip


@pytest.mark.parametrize(
    "settings",
    [
        ("tokenizer=tiktoken", "split_by=document", "eot=prepend"),
        ("tokenizer=tiktoken", "split_by=hash", "eot=append"),
        ("tokenizer=tiktoken", "split_by=document", "eot=none", "tokenizer.backend=tiktoken"),
        (
            "tokenizer=tiktoken",
            "split_by=head",
            "val_size=5000",
            "eot=prepend",
            "tokenizer.backend=riptoken",
        ),
        ("tokenizer=tiktoken", "split_by=tail", "val_size=5000", "eot=append", "order=shuffle"),
        ("tokenizer=char", "split_by=document", "eot=append"),
        ("tokenizer=byte", "split_by=hash", "eot=none", "format=llmc"),
        ("tokenizer=char", "split_by=position"),
    ],
)
def test_batched_documents_are_written_as_each_on_its_own(
    tmp_path, corpus, monkeypatch, tiktoken_cache, settings
):
    batched = run(tmp_path / "batched", corpus, *settings)
    monkeypatch.setattr(shards, "BATCH_DOC_CHARS", -1)  # every document on its own
    alone = run(tmp_path / "alone", corpus, *settings)
    assert outputs(tmp_path / "batched") == outputs(tmp_path / "alone")
    for key in COUNTS:
        assert batched.get(key) == alone.get(key), key
    assert batched["documents"]["total"] == len(documents(0))


def test_batches_flush_in_document_order_across_sizes(tmp_path, corpus, tiktoken_cache):
    """The ids through the document index are each document's own encode, in order: a
    batch held while a long document goes on its own is written before it."""
    import corpusprep

    run(tmp_path / "o", corpus, "tokenizer=tiktoken", "split_by=document", "eot=none")
    ds = corpusprep.load(tmp_path / "o")
    slices = {}
    for side, ids in ds.splits():
        bounds = [*ds.docs(side).tolist(), len(ids)]
        slices[side] = [np.asarray(ids[a:b]).tolist() for a, b in zip(bounds, bounds[1:])]
    enc = TiktokenTokenizer("gpt2", backend="tiktoken")
    at = dict.fromkeys(slices, 0)
    for i, doc in enumerate(documents(0)):
        want = enc.encode(doc).tolist()
        side = next((s for s in at if at[s] < len(slices[s]) and slices[s][at[s]] == want), None)
        assert side is not None, f"document {i} is not next on either side"
        at[side] += 1
    assert at == {side: len(docs) for side, docs in slices.items()}


def test_the_tiktoken_batch_sends_a_long_text_the_cut_way(tiktoken_cache, monkeypatch):
    """encode_documents on a text of MIN_SEGMENT characters or more gives encode_pieces'
    ids (cut at safe places), the batch's shortcut being only for shorter texts."""
    import corpusprep.tokenizers.tiktoken as tk

    monkeypatch.setattr(tk, "MIN_SEGMENT", 64)
    enc = TiktokenTokenizer("gpt2", backend="tiktoken")
    texts = ["short", "a line\n" * 40 + "end", ""]
    got = enc.encode_documents(texts)
    for text, ids in zip(texts, got):
        pieces = list(enc.encode_pieces([text]))
        assert ids.tolist() == np.concatenate([*pieces, np.zeros(0, np.uint32)]).tolist()
    assert len(list(enc.encode_pieces([texts[1]]))) > 1  # it was cut


def test_the_default_batch_never_shares_a_reused_buffer():
    """char's encode_pieces reuses one buffer for its arrays; encode_documents' arrays must
    each stay valid while the batch is gathered."""
    from corpusprep.tokenizers.char import CharTokenizer

    tok = CharTokenizer()
    tok.fit("abcdefgh")
    texts = ["abcd", "efgh", "hgfe", "dcba"]
    got = tok.encode_documents(texts)
    assert [a.tolist() for a in got] == [tok.encode(t).tolist() for t in texts]


def test_the_first_bad_document_is_the_one_reported(tmp_path, monkeypatch):
    """A document the tokenizer cannot encode, held in a batch, is reported before a
    broken line after it, as without batching."""
    from corpusprep.errors import UserError

    vocab = tmp_path / "vocab.jsonl"
    vocab.write_text("".join(json.dumps({"text": t}) + "\n" for t in ["abc", "cab"]))
    prepare(compose("source=file", f"source.path={vocab}", f"out_dir={tmp_path / 'v'}",
                    "quiet=true"))  # fmt: skip
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": "abc"}) + "\n" + json.dumps({"text": "abz"})
                   + '\n{"text": broken\n')  # fmt: skip

    def error() -> str:
        with pytest.raises(UserError) as e:
            prepare(compose("source=file", f"source.path={bad}", f"out_dir={tmp_path / 'o'}",
                            "quiet=true", "tokenizer=reuse",
                            f"tokenizer.dir={tmp_path / 'v'}"))  # fmt: skip
        return str(e.value)

    batched = error()
    monkeypatch.setattr(shards, "BATCH_DOC_CHARS", -1)
    assert batched == error()
    assert "'z'" in batched


def test_a_subclass_that_encodes_its_own_way_is_batched_its_own_way(tiktoken_cache):
    """A plugin deriving from TiktokenTokenizer with its own encode gets its own ids from
    a batch too, not the backend's."""

    class Shifted(TiktokenTokenizer):
        def encode(self, text: str) -> np.ndarray:
            return super().encode(text) + 1

    tok = Shifted("gpt2", backend="tiktoken")
    texts = ["hello world", "", "naïve café"]
    got = [ids.tolist() for ids in tok.encode_documents(texts)]
    assert got == [tok.encode(t).tolist() for t in texts]
