"""Each id's raw bytes in token_bytes.npy, and the document index of a side a split cut.

token_bytes (what bits per byte divide by): nanochat's scripts/tok_train.py counts each id
as `len(tokenizer.decode_single_token_bytes(id))`, its raw bytes (since its commit 2ce972a;
decoding to a str first made a byte token that is part of a character U+FFFD's 3 bytes).
Every tokenizer here gives raw bytes, so token_bytes[val ids] sums to the val text's UTF-8
bytes (sentencepiece-style tokenizers: plus the dummy prefix's space): tokenizer=hf, whose
byte tokens went through decode() before, most of all. The peers run for real: the
`tokenizers` library encodes and decodes, tiktoken gives decode_single_token_bytes,
sentencepiece its pieces.

Document index: where split_by=head|tail|position cuts through a document, the part that
begins the other side is a document of its own (as Megatron's .idx of the same run has it),
so every side's index starts at 0 and the manifest counts that part too.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers import compose, without_kept_copies

from corpusprep.prepare import prepare

EOT = "<|endoftext|>"
EXTRA = ("日本語", "😀", "é", "中文字符", "🎉", "ß", "한국어", "€")


def shakespeare_docs(shakespeare: Path, chars: int = 120_000) -> list[str]:
    """Tiny shakespeare's paragraphs, every third with characters of 2, 3 and 4 bytes."""
    text = shakespeare.read_text(encoding="utf-8")[:chars]
    return [p + (f" {EXTRA[i % len(EXTRA)]}{EXTRA[(i * 7) % len(EXTRA)]}" if i % 3 == 0 else "")
            for i, p in enumerate(text.split("\n\n"))]  # fmt: skip


def run(src: Path, out: Path, *overrides: str) -> dict:
    return prepare(compose("source=file", f"source.path={src}", f"out_dir={out}", "quiet=true",
                           *overrides))  # fmt: skip


def val_of(out: Path, manifest: dict) -> np.ndarray:
    return np.fromfile(out / "val.bin", dtype=np.dtype(manifest["dtype"]))


# --- the peers' own raw bytes -------------------------------------------------------------


def gpt2_byte_of_char() -> dict[str, int]:
    """GPT-2's bytes_to_unicode (encoder.py), reversed: the character ByteLevel writes for
    each byte -> that byte."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
          *range(ord("®"), ord("ÿ") + 1)]  # fmt: skip
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


# --- tokenizer=hf -------------------------------------------------------------------------

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import decoders, models, pre_tokenizers, trainers  # noqa: E402

from corpusprep.tokenizers.hf import HfTokenizer  # noqa: E402

BYTES = [f"<0x{b:02X}>" for b in range(256)]


@pytest.fixture(scope="module")
def hf_files(tmp_path_factory, shakespeare) -> dict[str, Path]:
    """tokenizer.json files trained here: a byte-level BPE (GPT-2 style, as the checker's
    repro), a Llama-2 style BPE whose unknown characters fall back to <0xNN> byte tokens,
    and a Metaspace BPE (sentencepiece style, no byte fallback)."""
    d = tmp_path_factory.mktemp("hf")
    docs = shakespeare_docs(shakespeare)
    out = {}
    byte_level = tokenizers.Tokenizer(models.BPE())
    byte_level.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    byte_level.decoder = decoders.ByteLevel()
    byte_level.train_from_iterator(docs, trainers.BpeTrainer(
        vocab_size=600, special_tokens=[EOT], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))  # fmt: skip
    byte_level.save(str(d / "bytelevel.json"))
    out["bytelevel"] = d / "bytelevel.json"
    # Llama 2 (as transformers converts it): <0xNN> are ordinary ids of the model's
    # vocabulary, the decoder turns them back into bytes; trained on ASCII only, so every
    # other character goes by its bytes
    llama = tokenizers.Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    llama.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first", split=False)
    llama.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                       decoders.Fuse(), decoders.Strip(" ", 1, 0)])  # fmt: skip
    ascii_docs = [p for p in docs if p.isascii()]
    specials = ["<unk>", "<s>", "</s>", *BYTES]
    llama.train_from_iterator(ascii_docs, trainers.BpeTrainer(
        vocab_size=800, special_tokens=specials, show_progress=False))  # fmt: skip
    spec = json.loads(llama.to_str())
    spec["added_tokens"] = [t for t in spec["added_tokens"] if t["content"] not in BYTES]
    (d / "llama.json").write_text(json.dumps(spec), encoding="utf-8")
    out["llama"] = d / "llama.json"
    meta = tokenizers.Tokenizer(models.BPE(unk_token="<unk>"))
    meta.pre_tokenizer = pre_tokenizers.Metaspace()
    meta.decoder = decoders.Metaspace()
    meta.train_from_iterator(ascii_docs, trainers.BpeTrainer(
        vocab_size=500, special_tokens=["</s>", "<unk>"], show_progress=False))  # fmt: skip
    meta.save(str(d / "metaspace.json"))
    out["metaspace"] = d / "metaspace.json"
    return out


def test_the_gpt2_table_is_the_byte_level_alphabet():
    assert set(gpt2_byte_of_char()) == set(pre_tokenizers.ByteLevel.alphabet())
    assert sorted(gpt2_byte_of_char().values()) == list(range(256))


def test_hf_byte_level_token_bytes_are_each_ids_raw_bytes(hf_files):
    """As nanochat counts (decode_single_token_bytes): a byte token that is part of a
    character counts its 1 byte, not the 3 of the U+FFFD it decodes to alone."""
    lib = tokenizers.Tokenizer.from_file(str(hf_files["bytelevel"]))
    tok = HfTokenizer(str(hf_files["bytelevel"]), eot=EOT)
    sizes = tok.token_bytes()
    table = gpt2_byte_of_char()
    raw = {i: bytes(table[c] for c in lib.id_to_token(i)) for i in range(lib.get_vocab_size())}
    eot = lib.token_to_id(EOT)
    assert sizes.dtype == np.int32 and len(sizes) == lib.get_vocab_size() == tok.vocab_size
    assert sizes[eot] == 0
    partial = [i for i in raw if i != eot and "\ufffd" in lib.decode([i])]
    assert len(partial) > 100  # e.g. the byte 0xE6 alone, or 2 of 日's 3 bytes
    for i, b in raw.items():
        if i != eot:
            assert sizes[i] == len(b), (i, lib.id_to_token(i), b)
            # the library's own decode is these bytes, read as UTF-8
            assert lib.decode([i]) == b.decode("utf-8", errors="replace"), i


def test_hf_byte_level_decode_bytes_are_the_raw_bytes(hf_files, shakespeare):
    """decode_bytes of runs of ids concatenate to the text's bytes, wherever a run ends
    (decode() gives U+FFFD at a cut inside a character)."""
    lib = tokenizers.Tokenizer.from_file(str(hf_files["bytelevel"]))
    tok = HfTokenizer(str(hf_files["bytelevel"]), eot=EOT)
    text = "\n\n".join(shakespeare_docs(shakespeare, 20_000))
    ids = lib.encode(text, add_special_tokens=False).ids
    assert tok.decode_bytes(ids) == text.encode("utf-8")
    assert b"".join(tok.decode_bytes(ids[k : k + 3]) for k in range(0, len(ids), 3)) == (
        text.encode("utf-8")
    )
    assert tok.decode_bytes(ids).decode("utf-8") == lib.decode(ids)
    assert any("\ufffd" in lib.decode(ids[k : k + 3]) for k in range(0, len(ids), 3))
    eot = lib.token_to_id(EOT)
    assert tok.decode_bytes([eot]) == EOT.encode() == lib.decode([eot], False).encode()


def test_hf_val_bytes_are_the_val_texts_bytes(tmp_path, hf_files, shakespeare):
    """The checker's repro: one text with characters of 2-4 bytes, tokenizer=hf: the
    manifest's val_bytes and token_bytes[val ids] are the val text's UTF-8 bytes."""
    src = tmp_path / "t.txt"
    text = "\n\n".join(shakespeare_docs(shakespeare))
    src.write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    m = run(src, out, "tokenizer=hf", f"tokenizer.path={hf_files['bytelevel']}")
    val_text = text[int(len(text) * 0.9) :]
    val = val_of(out, m)
    lib = tokenizers.Tokenizer.from_file(str(hf_files["bytelevel"]))
    assert val.tolist() == lib.encode(val_text, add_special_tokens=False).ids
    sizes = np.load(out / "token_bytes.npy", allow_pickle=False)
    assert int(sizes[val].sum()) == len(val_text.encode("utf-8")) == m["val_bytes"]
    assert m["bytes_per_token"] == round(m["val_bytes"] / len(val), 4)


def test_hf_byte_fallback_tokens_count_their_one_byte(hf_files, shakespeare):
    """Llama 2 style: a character the vocabulary lacks is its <0xNN> tokens, one byte each
    (what the ByteFallback decoder turns them into); a "▁" is the space it stands for, so a
    document counts its bytes and the one space the pre-tokenizer put before it."""
    lib = tokenizers.Tokenizer.from_file(str(hf_files["llama"]))
    tok = HfTokenizer(str(hf_files["llama"]))
    sizes = tok.token_bytes()
    assert [int(sizes[lib.token_to_id(b)]) for b in BYTES] == [1] * 256
    assert [int(sizes[lib.token_to_id(s)]) for s in ("<unk>", "<s>", "</s>")] == [0, 0, 0]
    assert "\ufffd" in lib.decode([lib.token_to_id("<0xE6>")])  # alone: U+FFFD, 3 bytes
    for i in range(lib.get_vocab_size()):
        piece = lib.id_to_token(i)
        if piece not in BYTES and piece not in ("<unk>", "<s>", "</s>"):
            assert sizes[i] == len(piece.replace("▁", " ").encode()), (i, piece)
    fallbacks = 0
    for doc in shakespeare_docs(shakespeare, 30_000):
        ids = lib.encode(doc, add_special_tokens=False).ids
        assert lib.decode(ids) == doc.lstrip(" ")
        fallbacks += sum(lib.id_to_token(i) in BYTES for i in ids)
        dummy = 0 if doc.startswith(" ") else 1
        assert int(sizes[ids].sum()) == len(doc.encode("utf-8")) + dummy, doc
    assert fallbacks > 100


def test_hf_metaspace_counts_each_space_a_piece_stands_for(hf_files, shakespeare):
    """A decoder that drops the first token's "▁" (Metaspace) made a word's space count
    nothing when the token was decoded alone; it is the space it stands for."""
    lib = tokenizers.Tokenizer.from_file(str(hf_files["metaspace"]))
    tok = HfTokenizer(str(hf_files["metaspace"]), eot="</s>")
    sizes = tok.token_bytes()
    the = lib.token_to_id("▁the")
    assert the is not None and lib.decode([the]) == "the" and sizes[the] == 4
    for doc in [p for p in shakespeare_docs(shakespeare, 30_000) if p.isascii()]:
        ids = lib.encode(doc, add_special_tokens=False).ids
        assert lib.decode(ids) == doc
        dummy = 0 if doc.startswith(" ") else 1
        assert int(sizes[ids].sum()) == len(doc.encode("utf-8")) + dummy, doc


# --- every tokenizer: raw bytes, and val_bytes the val text's bytes -----------------------


@pytest.mark.parametrize("name", ["char", "byte", "tiktoken", "bpe", "sentencepiece", "hf"])
def test_every_tokenizer_counts_raw_bytes(tmp_path, tiktoken_cache, shakespeare, hf_files, name):
    """The same question for each: token_bytes[val ids] is the val text's UTF-8 bytes
    (sentencepiece: and its dummy prefix's space), the manifest's val_bytes too, and each
    id's entry is the peer's own raw bytes for it; the val ids include tokens that are part
    of a character (but for char, whose tokens are characters)."""
    if name == "bpe":
        pytest.importorskip("rustbpe")
    if name == "sentencepiece":
        spm = pytest.importorskip("sentencepiece")
    extra = {"char": [], "byte": [], "tiktoken": ["tokenizer.encoding=cl100k_base"],
             "bpe": ["tokenizer.vocab_size=400"], "sentencepiece": ["tokenizer.vocab_size=600"],
             "hf": [f"tokenizer.path={hf_files['bytelevel']}"]}[name]  # fmt: skip
    src = tmp_path / "t.txt"
    text = "\n\n".join(shakespeare_docs(shakespeare))
    src.write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    m = run(src, out, f"tokenizer={name}", *extra)
    val_text = text[int(len(text) * 0.9) :]
    val = val_of(out, m)
    sizes = np.load(out / "token_bytes.npy", allow_pickle=False)
    dummy = 1 if name == "sentencepiece" else 0  # "▁" before the val text, as encoded alone
    assert int(sizes[val].sum()) == len(val_text.encode("utf-8")) + dummy == m["val_bytes"]
    import corpusprep

    tok = corpusprep.load(out).tokenizer
    partial = [i for i in np.unique(val) if "\ufffd" in tok.decode([int(i)])]
    # sentencepiece's training keeps every character of the corpus (character_coverage=1):
    # its byte pieces are for characters it never saw (below)
    assert name in ("char", "sentencepiece") or len(partial) > 3, name
    # the peer's own raw bytes of each id
    if name == "byte":
        assert sizes.tolist() == [1] * 256
    elif name in ("tiktoken", "bpe"):
        enc = tok._enc()  # tiktoken's Encoding (bpe: over tokenizer.tiktoken's ranks)
        specials = set(enc._special_tokens.values())
        for i in range(0, tok.vocab_size, 1 if name == "bpe" else 97):
            want = 0 if i in specials else len(enc.decode_single_token_bytes(i))
            assert sizes[i] == want, i
    elif name == "sentencepiece":
        sp = spm.SentencePieceProcessor(model_file=str(out / "tokenizer.model"))
        for i in range(sp.get_piece_size()):
            if sp.is_control(i) or sp.is_unknown(i):
                want = 0
            elif sp.is_byte(i):
                want = 1
            else:
                want = len(sp.id_to_piece(i).replace("▁", " ").encode())
            assert sizes[i] == want, (i, sp.id_to_piece(i))
        unseen = "x \U0001d518\U0001d52b"  # 𝔘𝔫: in no training text
        ids = sp.encode(unseen)
        assert sum(sp.is_byte(i) for i in ids) == 8
        assert int(sizes[ids].sum()) == len(unseen.encode()) + 1
    elif name == "char":
        chars = json.loads((out / "manifest.json").read_text())["tokenizer"]["chars"]
        assert sizes.tolist() == [len(c.encode()) for c in chars]


def test_hf_wordpiece_counts_what_its_decoder_writes_between_two_tokens(tmp_path, shakespeare):
    """A decoder that puts a space before a word's first piece (WordPiece): the word
    counts that space, a "##" piece only its letters."""
    text = shakespeare.read_text(encoding="utf-8")[:50_000].lower()
    lib = tokenizers.Tokenizer(models.WordPiece(unk_token="[UNK]"))
    lib.pre_tokenizer = pre_tokenizers.Whitespace()
    lib.decoder = decoders.WordPiece()
    lib.train_from_iterator(text.splitlines(), trainers.WordPieceTrainer(
        vocab_size=400, special_tokens=["[UNK]", "[SEP]"], show_progress=False))  # fmt: skip
    lib.save(str(tmp_path / "wp.json"))
    sizes = HfTokenizer(str(tmp_path / "wp.json")).token_bytes()
    vocab = lib.get_vocab()
    suffixes = [t for t in vocab if t.startswith("##") and len(t) > 3]
    words = [t for t in vocab if t.isalpha() and len(t) > 2]
    assert suffixes and words
    for t in suffixes:
        assert sizes[vocab[t]] == len(t) - 2, t
    for t in words:
        assert sizes[vocab[t]] == len(t) + 1, t
    assert sizes[vocab["[UNK]"]] == sizes[vocab["[SEP]"]] == 0
    assert (sizes >= 0).all()


# --- the document index of a side a split cut --------------------------------------------

from test_formats import read_megatron  # noqa: E402

CUTS = {"head": ["split_by=head", "val_size=5000"], "tail": ["split_by=tail", "val_size=5000"],
        "position": ["split_by=position"]}  # fmt: skip


@pytest.fixture(scope="module")
def paragraphs(tmp_path_factory, shakespeare) -> Path:
    """tiny shakespeare's first 100,000 characters, a document per paragraph (the checker's
    repro)."""
    src = tmp_path_factory.mktemp("d5") / "d5.jsonl"
    text = shakespeare.read_text(encoding="utf-8")[:100_000]
    src.write_text("".join(json.dumps({"text": p}) + "\n" for p in text.split("\n\n")))
    return src


def docs_of(out: Path, side: str) -> np.ndarray:
    return np.fromfile(out / "doc_index" / f"{side}.docs.bin", dtype=np.uint64)


def sides_in_order(cut: str) -> tuple[str, str]:
    return ("val", "train") if cut == "head" else ("train", "val")


@pytest.mark.parametrize("fmt", ["nanogpt", "llmc", "npy"])
@pytest.mark.parametrize("eot", ["none", "append"])
@pytest.mark.parametrize("cut", sorted(CUTS))
def test_the_part_a_cut_leaves_is_document_0(tmp_path, tiktoken_cache, paragraphs, cut, eot,
                                             fmt):  # fmt: skip
    """The part of the cut document that begins the second side is document 0 of its index
    (tokens 0.. belonged to no document), the manifest counts it (train + val is one more
    than the documents read), and Megatron's .idx of the same run has the same counts."""
    import corpusprep

    common = ["tokenizer=tiktoken", f"eot={eot}", "name=d5", *CUTS[cut]]
    out = tmp_path / fmt
    m = prepare(compose("source=file", f"source.path={paragraphs}", f"out_dir={out}",
                        "quiet=true", f"format={fmt}", *common))  # fmt: skip
    mega = tmp_path / "megatron"
    mm = prepare(compose("source=file", f"source.path={paragraphs}", f"out_dir={mega}",
                         "quiet=true", "format=megatron", *common))  # fmt: skip
    ds = corpusprep.load(out)
    documents = m["documents"]
    assert documents["train"] + documents["val"] == documents["total"] + 1  # one was cut
    for side in ("train", "val"):
        docs = docs_of(out, side)
        ids = np.asarray(ds.train if side == "train" else ds.val)
        assert docs[0] == 0 and (np.diff(docs.astype(np.int64)) >= 0).all() and docs[-1] < len(ids)
        assert len(docs) == documents[side] == mm["documents"][side], side
        idx = read_megatron(mega / f"d5_{side}_text_document")
        assert len(idx["documents"]) == len(docs) == mm["format"]["splits"][side]["documents"]
        # the same documents, token for token
        ends = np.append(docs[1:], len(ids)).astype(np.int64)
        assert [ids[a:b].tolist() for a, b in zip(docs.astype(np.int64), ends)] == [
            d.tolist() for d in idx["documents"]
        ]
    # the cut document: the first side's last document, then the second side's first
    import tiktoken

    enc = tiktoken.get_encoding("gpt2")
    texts = [json.loads(line)["text"] for line in paragraphs.read_text().splitlines()]
    first, second = sides_in_order(cut)
    a, b = (np.asarray(ds.train if s == "train" else ds.val) for s in (first, second))
    head, tail = (
        a[int(docs_of(out, first)[-1]) :],
        b[: int(np.append(docs_of(out, second), len(b))[1])],
    )
    k = documents[first] - 1  # the cut document's place in the corpus
    want = enc.encode_ordinary(texts[k]) + ([enc.eot_token] if eot == "append" else [])
    assert len(head) > 0 and len(tail) > 0
    if cut == "position":  # cut by characters, each side encoded on its own: the same text
        assert enc.decode(head.tolist() + tail.tolist()) == enc.decode(want)
    else:
        assert head.tolist() + tail.tolist() == want


def prepared(src: Path, out: Path, *overrides: str) -> dict:
    return prepare(compose("source=file", f"source.path={src}", f"out_dir={out}", "quiet=true",
                           "tokenizer=tiktoken", "name=d5", *overrides))  # fmt: skip


def megatron_documents(out: Path, side: str) -> int:
    return len(read_megatron(out / f"d5_{side}_text_document")["documents"])


@pytest.mark.parametrize(
    "overrides",
    ["split_by=position shard_bytes=3000 executor.workers=2",
     "split_by=tail val_size=5000 order=shuffle eot=append",
     "split_by=head val_size=5000 order=shuffle shard_bytes=3000 eot=prepend"],
)  # fmt: skip
def test_sharded_and_shuffled_sides_begin_at_document_0(tmp_path, tiktoken_cache, paragraphs,
                                                        overrides):  # fmt: skip
    """Many shards (the cut document's rest in a shard whose index holds later documents
    only, or none), and a shuffle before the cut: still document 0 at 0, Megatron's count."""
    m = prepared(paragraphs, tmp_path / "a", *overrides.split())
    mm = prepared(paragraphs, tmp_path / "m", "format=megatron", *overrides.split())
    assert "shard_bytes" not in overrides or m["shards"]["count"] > 10
    assert m["documents"]["train"] + m["documents"]["val"] == m["documents"]["total"] + 1
    for side in ("train", "val"):
        docs = docs_of(tmp_path / "a", side)
        assert docs[0] == 0 and len(docs) == m["documents"][side] == mm["documents"][side]
        assert len(docs) == megatron_documents(tmp_path / "m", side)


def test_a_cut_between_two_documents_adds_none(tmp_path, tiktoken_cache, paragraphs):
    """val_size on a document boundary: no document is cut, none counts twice."""
    import tiktoken

    enc = tiktoken.get_encoding("gpt2")
    texts = [json.loads(line)["text"] for line in paragraphs.read_text().splitlines()]
    ends = np.cumsum([len(enc.encode_ordinary(t)) + 1 for t in texts])  # eot=append
    for cut, n in (("head", int(ends[40])), ("tail", int(ends[-1] - ends[-42]))):
        out = tmp_path / cut
        m = prepared(paragraphs, out, f"split_by={cut}", f"val_size={n}", "eot=append")
        mm = prepared(paragraphs, tmp_path / f"m{cut}", f"split_by={cut}", f"val_size={n}",
                      "eot=append", "format=megatron")  # fmt: skip
        assert m["documents"]["val"] == 41 and m["documents"]["train"] == len(texts) - 41
        for side in ("train", "val"):
            docs = docs_of(out, side)
            assert docs[0] == 0 and len(docs) == m["documents"][side] == mm["documents"][side]
            assert len(docs) == megatron_documents(tmp_path / f"m{cut}", side)


def test_a_side_inside_one_document_is_that_document(tmp_path, tiktoken_cache):
    """split_by=tail whose val lies inside the last document: val's index is [0], one
    document (it listed none)."""
    rows = [f"short document {i}" for i in range(30)] + ["a long one " * 2000]
    src = tmp_path / "d.jsonl"
    src.write_text("".join(json.dumps({"text": r}) + "\n" for r in rows))
    m = prepared(src, tmp_path / "out", "split_by=tail", "val_size=1000", "eot=append")
    mm = prepared(src, tmp_path / "m", "split_by=tail", "val_size=1000", "eot=append",
                  "format=megatron")  # fmt: skip
    assert docs_of(tmp_path / "out", "val").tolist() == [0]
    assert (
        m["documents"]["val"]
        == 1
        == mm["documents"]["val"]
        == megatron_documents(tmp_path / "m", "val")
    )
    assert m["documents"]["train"] == 31 == megatron_documents(tmp_path / "m", "train")


@pytest.mark.parametrize(
    "overrides",
    ["split_by=position", "split_by=position tokenizer=char", "split_by=head val_size=3000",
     "split_by=tail val_size=3000"],
)  # fmt: skip
def test_one_text_is_a_document_on_each_side(tmp_path, tiktoken_cache, shakespeare, overrides):
    """One text split in two: each side holds one document (its part), as Megatron's .idx
    of the same run says; no document index is written."""
    src = tmp_path / "t.txt"
    src.write_text(shakespeare.read_text(encoding="utf-8")[:60_000], encoding="utf-8")
    m = prepared(src, tmp_path / "out", *overrides.split())
    mm = prepared(src, tmp_path / "m", "format=megatron", *overrides.split())
    assert not (tmp_path / "out" / "doc_index").exists()
    for side in ("train", "val"):
        assert m["documents"][side] == 1 == mm["documents"][side], side
        assert megatron_documents(tmp_path / "m", side) == 1
    assert m["documents"]["total"] == 1


@pytest.mark.parametrize("overrides", ["split_by=head val_size=5000", "split_by=position",
                                       "split_by=tail val_size=5000 order=shuffle"])  # fmt: skip
def test_verify_reads_a_cut_document_back_whole(tmp_path, tiktoken_cache, paragraphs, overrides):
    from test_inspect import inspect_cli

    prepared(paragraphs, tmp_path / "out", *overrides.split())
    r = inspect_cli(tmp_path / "out", "--verify", cwd=tmp_path)
    assert r.returncode == 0, r.stderr


# an attack: an hf folder's tokenizer was rebuilt from config.tokenizer.path as typed (a
# relative path, read from wherever load() runs) and never checked against the recorded
# sha256: another tokenizer.json there decoded the ids into garbage, silently
def test_an_hf_folder_rebuilds_its_own_tokenizer_or_says_it_cannot(
    tmp_path, hf_files, shakespeare, monkeypatch
):
    import shutil

    import corpusprep
    from corpusprep.errors import UserError

    made_in, elsewhere = tmp_path / "made", tmp_path / "elsewhere"
    made_in.mkdir(), elsewhere.mkdir()
    shutil.copy(hf_files["bytelevel"], made_in / "tok.json")
    (made_in / "t.txt").write_text("\n\n".join(shakespeare_docs(shakespeare, 20_000)))
    monkeypatch.chdir(made_in)
    with without_kept_copies(monkeypatch):  # an older folder: the file is read where it was
        run(made_in / "t.txt", made_in / "out", "tokenizer=hf", "tokenizer.path=tok.json")
    shutil.copy(hf_files["metaspace"], elsewhere / "tok.json")  # another one, same name
    monkeypatch.chdir(elsewhere)
    ds = corpusprep.load(made_in / "out")
    text = (made_in / "t.txt").read_text()
    assert ds.tokenizer.decode(ds.train[:50]) == text[: len(ds.tokenizer.decode(ds.train[:50]))]
    shutil.copy(hf_files["metaspace"], made_in / "tok.json")  # changed where it was
    with pytest.raises(UserError, match="sha256"):
        corpusprep.load(made_in / "out")
