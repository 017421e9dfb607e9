"""format=megatron against Megatron-LM's own writer, byte for byte.

Megatron-LM's tools/preprocess_data.py (process_json_file) encodes each JSON line's text,
appends the end-of-document id when --append-eod is given and the document has tokens, and
hands it to megatron/core/datasets/indexed_dataset.py's IndexedDatasetBuilder, made with
`dtype=DType.optimal_dtype(tokenizer.vocab_size)`: uint16 for a vocabulary of fewer than
65,500 ids, else int32. add_document(ids, [len(ids)]) writes the ids to the .bin, and
records one sequence length and the document's end; finalize() writes the .idx
(_IndexWriter): b"MMIDIDX\\x00\\x00", version 1 (<Q), the dtype's code (<B: 8 uint16, 4
int32), the sequence count and the document-index count (<Q each), then the lengths
(int32), the pointers (int64: running byte offsets) and the document indices (int64).

That writer is written here from that code and run on the documents each side of a
corpusprep run holds (split_by=head cut at a document's end: val the first documents, train
the rest), and both files of each side compared."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from helpers import compose

from corpusprep.prepare import prepare


def optimal_dtype(cardinality: int):
    """indexed_dataset.py DType.optimal_dtype."""
    return np.uint16 if cardinality is not None and cardinality < 65500 else np.int32


CODES = {np.uint16: 8, np.int32: 4}  # DType's codes


def preprocess_data(prefix: Path, documents: list[list[int]], vocab_size: int) -> None:
    """process_json_file's loop with IndexedDatasetBuilder, then finalize()."""
    dtype = optimal_dtype(vocab_size)
    sequence_lengths: list[int] = []
    document_indices = [0]
    with open(f"{prefix}.bin", "wb") as data_file:
        for doc_ids in documents:
            sentence_lens = [len(doc_ids)] if len(doc_ids) > 0 else []
            np_array = np.array(doc_ids, dtype=dtype)  # add_document
            data_file.write(np_array.tobytes(order="C"))
            sequence_lengths.extend(sentence_lens)
            document_indices.append(len(sequence_lengths))
    itemsize = np.int64(np.dtype(dtype).itemsize)  # _IndexWriter._sequence_pointers
    pointers, curr = [], np.int64(0)
    for length in sequence_lengths:
        pointers.append(curr.item())
        curr += length * itemsize
    with open(f"{prefix}.idx", "wb") as idx:
        idx.write(b"MMIDIDX\x00\x00")
        idx.write(struct.pack("<Q", 1))
        idx.write(struct.pack("<B", CODES[dtype]))
        idx.write(struct.pack("<Q", len(sequence_lengths)))
        idx.write(struct.pack("<Q", len(document_indices)))
        idx.write(np.array(sequence_lengths, dtype=np.int32).tobytes(order="C"))
        idx.write(np.array(pointers, dtype=np.int64).tobytes(order="C"))
        idx.write(np.array(document_indices, dtype=np.int64).tobytes(order="C"))


def compare(out: Path, ref: Path, name: str, sides: dict[str, list[list[int]]], vocab: int):
    ref.mkdir()
    for side, documents in sides.items():
        prefix = f"{name}_{side}_text_document"
        preprocess_data(ref / prefix, documents, vocab)
        for suffix in (".bin", ".idx"):
            ours = (out / f"{prefix}{suffix}").read_bytes()
            assert ours == (ref / f"{prefix}{suffix}").read_bytes(), f"{prefix}{suffix}"


def texts(n: int) -> list[str]:
    rng = np.random.default_rng(5)
    words = ["the", "king", "naïve", "日本語", "😀", "queen", "\n", "data"]
    return [" ".join(rng.choice(words, size=int(rng.integers(1, 80)))) for _ in range(n)]


@pytest.mark.parametrize("encoding", ["gpt2", "cl100k_base"])
def test_megatron_files_are_preprocess_data_append_eod_byte_for_byte(tmp_path, tiktoken_cache,
                                                                     encoding):  # fmt: skip
    """preprocess_data.py --append-eod on each side's documents (a tiktoken encoding as the
    tokenizer): gpt2's 50,257 ids are uint16 there, cl100k_base's 100,277 int32."""
    import tiktoken

    enc = tiktoken.get_encoding(encoding)
    docs = texts(200)
    ids = [enc.encode_ordinary(d) + [enc.eot_token] for d in docs]
    k = 37
    src = tmp_path / "web.jsonl"
    src.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs), encoding="utf-8")
    out = tmp_path / "out"
    m = prepare(compose("source=file", f"source.path={src}", f"out_dir={out}", "quiet=true",
                        "name=web", "tokenizer=tiktoken", f"tokenizer.encoding={encoding}",
                        "eot=append", "split_by=head", f"val_size={sum(map(len, ids[:k]))}",
                        "format=megatron", "executor.workers=2", "shard_bytes=2000"))  # fmt: skip
    assert m["vocab_size"] == enc.n_vocab
    compare(out, tmp_path / "ref", "web", {"val": ids[:k], "train": ids[k:]}, enc.n_vocab)


def char_text(vocab: int) -> str:
    """Every one of `vocab` characters (no surrogates, none a line end), twice, shuffled."""
    points = [c for c in range(0x100, 0x100 + vocab + 4096) if not 0xD800 <= c <= 0xDFFF]
    chars = [chr(c) for c in points[:vocab]]
    rng = np.random.default_rng(0)
    return "".join(rng.permutation(chars + chars).tolist())


@pytest.mark.parametrize("vocab", [65_499, 65_500, 65_510])
def test_megatron_dtype_is_preprocess_datas_for_the_vocabulary(tmp_path, vocab):
    """Megatron writes int32 from 65,500 ids on, though ids below 65,536 fit uint16: a
    vocabulary of 65,500 to 65,536 ids is int32 (code 4) in Megatron's own files."""
    text = char_text(vocab)
    src = tmp_path / "chars.txt"
    src.write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    args = ["source=file", f"source.path={src}", f"out_dir={out}", "quiet=true", "name=chars",
            "tokenizer=char", "format=megatron"]  # fmt: skip
    m = prepare(compose(*args))
    assert m["vocab_size"] == vocab
    assert m["dtype"] == ("uint16" if vocab < 65500 else "uint32")  # uint32: written as int32
    stoi = {c: i for i, c in enumerate(sorted(set(text)))}
    cut = int(len(text) * 0.9)  # one text: split by position, one document a side
    sides = {"train": [[stoi[c] for c in text[:cut]]], "val": [[stoi[c] for c in text[cut:]]]}
    compare(out, tmp_path / "ref", "chars", sides, vocab)
    assert prepare(compose(*args)).get("skipped")  # dtype=auto chose it: up to date
    import corpusprep

    ds = corpusprep.load(out)
    assert np.array_equal(ds.val[:], sides["val"][0]) and ds.tokenizer.vocab_size == vocab
    from corpusprep.estimate import estimate

    assert estimate(compose(*args, "dry_run=true"))["dtype"] == m["dtype"]
    nanogpt = prepare(compose(*args[:-1], f"out_dir={tmp_path / 'nanogpt'}"))
    assert nanogpt["dtype"] == "uint16"  # nanoGPT's layout: the smallest dtype, as before


def test_an_empty_document_has_no_sequence_as_in_preprocess_data(tmp_path, tiktoken_cache):
    """preprocess_data.py without --append-eod (eot=none): a text of no tokens adds no
    sequence length, only its document's end (the index repeats). Megatron's GPTDataset
    takes each sequence as a document and splits them by count (--split), so a sequence of
    no tokens per empty text also moved its split points."""
    import tiktoken

    enc = tiktoken.get_encoding("gpt2")
    docs = texts(120)
    for i in (0, 40, 41, 77, 119):  # the first of train, two in a row, the last
        docs[i] = ""
    ids = [enc.encode_ordinary(d) for d in docs]
    src = tmp_path / "web.jsonl"
    src.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs), encoding="utf-8")
    out = tmp_path / "out"
    m = prepare(compose("source=file", f"source.path={src}", f"out_dir={out}", "quiet=true",
                        "name=web", "tokenizer=tiktoken", "eot=none", "split_by=document",
                        "val_size=0.25", "format=megatron"))  # fmt: skip
    assert m["documents"]["val"] == 30
    import corpusprep

    ds = corpusprep.load(out)
    perm = np.random.default_rng(2357).permutation(len(docs))  # split_by=document's choice
    val = sorted(perm[:30].tolist())
    sides = {"val": [ids[i] for i in val], "train": [ids[i] for i in range(120) if i not in val]}
    assert sum(not d for d in sides["val"]) and sum(not d for d in sides["train"]) >= 2
    compare(out, tmp_path / "ref", "web", sides, enc.n_vocab)
    for side, want in sides.items():  # corpusprep reads the empty documents back
        starts = np.cumsum([0] + [len(d) for d in want[:-1]])
        assert np.array_equal(ds.docs(side), starts), side


def _old_pieces(first: np.ndarray, lengths: np.ndarray, max_len: int):
    """megatron.py's _pieces as 0.2.3 had it: an empty document a sequence of length 0."""
    pieces = np.maximum(1, -(-lengths // max_len))
    if (pieces == 1).all():
        return first, lengths, np.arange(len(first))
    raise AssertionError("no document longer than max_len here")


@pytest.mark.parametrize("made", ["uint16 at 65,500 ids", "a sequence per empty text"])
def test_a_megatron_folder_in_0_2_3s_layout_is_redone(tmp_path, monkeypatch, tiktoken_cache,
                                                      made):  # fmt: skip
    """0.2.3 wrote format=megatron's int32 vocabularies of 65,500 ids as uint16 and gave an
    empty text a sequence of no tokens; the same settings now write Megatron's own files.
    A folder 0.2.3 made under those settings (its layout, its version in the manifest) was
    found up to date by the new code and kept as it was: the version must change, as
    safety.md says a change of the outputs does, so it is redone once."""
    import corpusprep
    from corpusprep.exporters import megatron

    if made.startswith("uint16"):
        src = tmp_path / "chars.txt"
        src.write_text(char_text(65_500), encoding="utf-8")
        args = ["tokenizer=char"]
    else:
        src = tmp_path / "web.jsonl"
        docs = ["", *texts(20), "", ""]
        src.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs), encoding="utf-8")
        args = ["tokenizer=tiktoken", "eot=none", "split_by=document"]
    args = ["source=file", f"source.path={src}", f"out_dir={tmp_path / 'out'}", "quiet=true",
            "name=x", "format=megatron", *args]  # fmt: skip
    with monkeypatch.context() as old:  # what 0.2.3 wrote
        old.setattr(corpusprep, "__version__", "0.2.3")
        old.setattr(megatron.MegatronExporter, "wide_from", None)
        old.setattr(megatron, "_pieces", _old_pieces)
        before = prepare(compose(*args))
    prepare(compose(*args, f"out_dir={tmp_path / 'fresh'}"))
    names = [f"x_{side}_text_document{suffix}" for side in ("train", "val")
             for suffix in (".bin", ".idx")]  # fmt: skip

    def same() -> bool:
        return all((tmp_path / "out" / n).read_bytes() == (tmp_path / "fresh" / n).read_bytes()
                   for n in names)  # fmt: skip

    assert not same()  # 0.2.3's layout
    again = prepare(compose(*args))
    assert not again.get("skipped")
    assert again["corpusprep"] == corpusprep.__version__ != before["corpusprep"]
    assert same()
