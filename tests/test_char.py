"""Char level: byte-identical to nanoGPT's data/shakespeare_char/prepare.py, whatever the
text, the shard size or the number of workers."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
from helpers import compose, run_cli, same_files
from nanogpt_reference import prepare_char

from corpusprep.prepare import prepare

TEXTS = {
    "ascii": "hello world\nthis is a test.\n" * 50,
    "non_ascii": "Größe, naïve café; Ελληνικά; русский; 日本語のテキスト。\n" * 40,
    "emoji": "ok 😀👍🏽 family 👨‍👩‍👧 flags 🇫🇷\nmore 🎉\n" * 30,
    "crlf": "line one\r\nline two\r\n\r\nlone cr\rend\r\n" * 40,
    "crlf_non_ascii": "café\r\nnaïve\rend 日本\r\n\r\nlast\r" * 40,  # scanned as bytes
    "bom": "\ufeffstarts with a byte-order mark\nand goes on\n" * 20,
    "one_line": "no newline at all, just one long line of text " * 200,
    "mixed": "tabs\tand\x0bvertical\x0cform feeds\u2028line sep\u00a0nbsp\n" * 30,
}


@pytest.fixture
def reference(tmp_path):
    def make(src, split=0.9):
        out = tmp_path / f"nanogpt-{src.stem}-{split}"
        out.mkdir()
        prepare_char(str(src), str(out), split)
        return out

    return make


@pytest.mark.parametrize("kind", sorted(TEXTS))
@pytest.mark.parametrize("shard_bytes", [37, 8 << 20])
def test_identical_to_nanogpt(tmp_path, reference, kind, shard_bytes):
    src = tmp_path / f"{kind}.txt"
    src.write_bytes(TEXTS[kind].encode("utf-8"))
    out = tmp_path / "out"
    cfg = compose(
        "source=file",
        f"source.path={src}",
        f"out_dir={out}",
        f"shard_bytes={shard_bytes}",
        "executor.workers=1",
        "quiet=true",
    )
    prepare(cfg)
    same_files(out, reference(src))


@pytest.mark.parametrize("split", [0.5, 0.8, 0.9, 0.999])
def test_split_fraction_matches_nanogpt(tmp_path, reference, shakespeare, split):
    out = tmp_path / "out"
    prepare(
        compose(
            "source=file",
            f"source.path={shakespeare}",
            f"out_dir={out}",
            f"split={split}",
            "quiet=true",
        )
    )
    same_files(out, reference(shakespeare, split))


def test_workers_and_start_methods_do_not_change_bytes(tmp_path, shakespeare):
    outs = []
    for workers, method in [(1, None), (2, "fork"), (3, "spawn")]:
        out = tmp_path / f"w{workers}"
        prepare(
            compose(
                "source=file",
                f"source.path={shakespeare}",
                f"out_dir={out}",
                "shard_bytes=100000",
                f"executor.workers={workers}",
                f"executor.start_method={method or 'null'}",
                "quiet=true",
            )
        )
        outs.append(out)
        assert json.loads((out / "manifest.json").read_text())["shards"]["count"] == 12
    for out in outs[1:]:
        same_files(
            outs[0],
            out,
            (
                "train.bin",
                "val.bin",
                "meta.pkl",
            ),
        )


def test_dataset_shakespeare_char_through_the_cli(tmp_path, seeded_cache, reference, shakespeare):
    """`python -m corpusprep dataset=shakespeare_char` gives nanoGPT's files and numbers."""
    cwd = tmp_path / "work"
    cwd.mkdir()
    r = run_cli("dataset=shakespeare_char", cwd=cwd)
    assert r.returncode == 0, r.stderr
    out = cwd / "data" / "shakespeare_char"
    same_files(out, reference(shakespeare))
    assert sorted(p.name for p in cwd.iterdir()) == ["data"]  # nothing else in the cwd
    assert sorted(p.name for p in out.iterdir()) == [
        "manifest.json",
        "meta.pkl",
        "token_bytes.npy",  # each id's bytes, beside nanoGPT's files (issue 14)
        "train.bin",
        "val.bin",
    ]
    train = np.memmap(out / "train.bin", dtype=np.uint16, mode="r")
    val = np.memmap(out / "val.bin", dtype=np.uint16, mode="r")
    assert (len(train), len(val)) == (1_003_854, 111_540)
    meta = pickle.loads((out / "meta.pkl").read_bytes())
    assert meta["vocab_size"] == 65
    assert (
        "".join(meta["itos"][int(i)] for i in val[:20]) == shakespeare.read_text()[1_003_854:][:20]
    )
    m = json.loads((out / "manifest.json").read_text())
    assert m["source"]["sha256"] == (
        "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
    )
    assert m["tokens"] == {"train": 1_003_854, "val": 111_540}
    assert m["dtype"] == "uint16" and m["vocab_size"] == 65
    assert m["config"]["split"] == 0.9 and m["source"]["url"].endswith("input.txt")
    assert "1,003,854" in r.stdout and "111,540" in r.stdout


def test_split_and_out_dir_overrides(tmp_path, seeded_cache, reference, shakespeare):
    r = run_cli("dataset=shakespeare_char", "split=0.8", "out_dir=data/sc80", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    same_files(tmp_path / "data" / "sc80", reference(shakespeare, 0.8))
    assert json.loads((tmp_path / "data/sc80/manifest.json").read_text())["overrides"] == [
        "dataset=shakespeare_char",
        "split=0.8",
        "out_dir=data/sc80",
    ]


def test_own_file_and_uint32(tmp_path):
    (tmp_path / "my.txt").write_text("abcabc\nxyz\n" * 100)
    r = run_cli("source=file", "source.path=my.txt", "dtype=uint32", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "data" / "my"  # default out_dir: data/<file stem>
    train = np.fromfile(out / "train.bin", dtype=np.uint32)
    assert len(train) == 990 and train.max() < 7
    m = json.loads((out / "manifest.json").read_text())
    assert m["dtype"] == "uint32" and "uint16" in m["nanogpt_note"]
    assert "np.uint32" in r.stdout


def test_a_big_vocabulary_picks_uint32_automatically(tmp_path):
    text = "".join(chr(c) for c in range(0x10000, 0x10000 + 70_000))  # all valid code points
    src = tmp_path / "wide.txt"
    src.write_text(text * 2, encoding="utf-8")
    out = tmp_path / "out"
    m = prepare(compose("source=file", f"source.path={src}", f"out_dir={out}", "quiet=true"))
    assert m["vocab_size"] == 70_000 and m["dtype"] == "uint32"
    ids = np.concatenate(
        [np.fromfile(out / "train.bin", np.uint32), np.fromfile(out / "val.bin", np.uint32)]
    )
    itos = pickle.loads((out / "meta.pkl").read_bytes())["itos"]
    assert "".join(itos[int(i)] for i in ids) == text * 2


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
def test_a_carriage_return_inside_a_json_text_is_a_character(tmp_path, suffix):
    """JSON Lines texts are used as written (no newline translation): a "\\r" in one is a
    character of the vocabulary, not a crash, and every document reads back as it was."""
    import gzip

    import corpusprep

    docs = ["a\r\nb", "lone\rcr", "plain text", "\r"] * 50
    data = "".join(json.dumps({"text": d}) + "\n" for d in docs).encode()
    src = tmp_path / f"cr{suffix}"
    src.write_bytes(gzip.compress(data) if suffix.endswith(".gz") else data)
    r = run_cli("source=file", f"source.path={src}", "out_dir=out", "eot=none", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    meta = pickle.loads((tmp_path / "out" / "meta.pkl").read_bytes())
    assert "\r" in meta["stoi"]
    ds = corpusprep.load(tmp_path / "out")
    got = []
    for side, ids in ds.splits():
        bounds = [*ds.docs(side).tolist(), len(ids)]
        got += ["".join(meta["itos"][int(i)] for i in ids[a:b]) for a, b in zip(bounds, bounds[1:])]
    assert sorted(got) == sorted(docs)


def _nanogpt_ids(chars: str, text: str) -> list[int]:
    stoi = {ch: i for i, ch in enumerate(sorted(set(chars)))}
    return [stoi[c] for c in text]


def test_encode_pieces_gives_nanogpts_ids_for_any_mix_of_characters():
    """encode_pieces (ASCII two characters at a time, other text by code point, into one
    reused buffer) gives stoi's ids for ASCII, text sprinkled with characters of UTF-16's
    first plane or beyond it, odd and even lengths, a non-ASCII character last, ids past 255."""
    from corpusprep.tokenizers.char import CharTokenizer

    rng = np.random.default_rng(5)
    ascii_ = [chr(c) for c in range(128)]
    plane = ["é", "ÿ", "Ā", "€", "日", "\u2028", "\uffff", "ɀ", "\u0100", "\u0180"]
    beyond = ["😀", "𝄞"]
    many = [chr(0x4E00 + i) for i in range(400)]  # ids up to 500+: wider than one byte
    texts = [""]
    for pool in (ascii_, ascii_ + plane, ascii_ + plane + beyond, plane, ascii_ + many):
        for n in (1, 2, 3, 7, 64, 1001):
            for _ in range(4):
                weights = np.where(np.array([c.isascii() for c in pool]), 50.0, 1.0)
                picks = rng.choice(len(pool), size=n, p=weights / weights.sum())
                texts.append("".join(pool[i] for i in picks))
    texts += ["abcé", "abcdé", "éabc", "é", "a€", "€a€", "x" * 999 + "日", "😀", "😀😀"]
    texts += ["a😀b😀", "\uffff😀\uffff", "😀\uffffé𝄞", "ab" * 9 + "𝄞"]
    corpus = "".join(texts)
    tok = CharTokenizer(corpus)
    for text, ids in zip(texts, tok.encode_pieces(texts)):
        assert ids.tolist() == _nanogpt_ids(corpus, text), repr(text[:40])
        assert ids.tolist() == tok.encode(text).tolist()


@pytest.mark.parametrize("unknown", ["Z", "é", "日", "\u0100", "😀", "\uffff"])
@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_encode_pieces_refuses_a_character_outside_the_vocabulary(unknown, where):
    """A character the scan did not see (the text changed in between) is an error that
    names it, wherever it stands in ASCII or sprinkled text, past the table or inside it."""
    from corpusprep.tokenizers.char import CharTokenizer

    tok = CharTokenizer("abc d\n€ÿ")
    body = "abc d €ÿ abc"
    text = {
        "first": unknown + body,
        "middle": body[:5] + unknown + body[5:],
        "last": body + unknown,
    }
    with pytest.raises(KeyError, match="not in the vocabulary"):
        list(tok.encode_pieces([text[where]]))
    with pytest.raises(KeyError, match="not in the vocabulary"):
        list(tok.encode_pieces(["abc", text[where].replace("€ÿ", "")]))


def test_encode_pieces_on_a_lone_surrogate_fails_as_encode_does():
    from corpusprep.tokenizers.char import CharTokenizer

    tok = CharTokenizer("ab\udc80")
    with pytest.raises(UnicodeEncodeError):
        tok.encode("a\udc80b")
    with pytest.raises(UnicodeEncodeError):
        list(tok.encode_pieces(["a\udc80b"]))


def test_encode_pieces_holds_a_long_text_a_block_at_a_time():
    """One long piece (a JSON line, a Parquet row or a document between separators: up to
    source.max_uncut_bytes) is encoded a block at a time: its code points (4 bytes each)
    and numpy's indices for the lookup (8 each) were made for the whole text at once, so a
    64 MB JSON line of non-ASCII text took 830 MB. The ids are the same."""
    import tracemalloc

    from corpusprep.tokenizers.char import CharTokenizer

    texts = ["日本 abc é😀\n" * 400_000, "hello world\n" * 400_000]  # 4.4M, 4.8M characters
    tok = CharTokenizer("".join(texts))
    for text in texts:
        want = tok.encode(text)
        tracemalloc.start()
        try:
            got = [ids.copy() for ids in tok.encode_pieces([text])]
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert np.concatenate(got).tolist() == want.tolist()
        # the ids kept above (2 bytes a character) and a block's worth more
        assert peak < 2 * len(text) + 8 * (1 << 20), (len(text), peak)


def test_the_byte_tokenizer_holds_a_long_text_a_block_at_a_time():
    """As the char tokenizer: one long piece's UTF-8 bytes are made a block at a time, not
    for the whole piece (then widened whole to uint16 by the writer)."""
    import hashlib
    import tracemalloc

    from corpusprep.tokenizers.byte import ByteTokenizer

    text = "日本 abc é😀\n" * 400_000  # 8.4 MB of UTF-8
    digest = hashlib.sha256()
    tracemalloc.start()
    try:
        for ids in ByteTokenizer().encode_pieces([text]):
            digest.update(ids.astype(np.uint8).tobytes())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert digest.digest() == hashlib.sha256(text.encode("utf-8")).digest()
    assert peak < 8 * (1 << 20), peak
