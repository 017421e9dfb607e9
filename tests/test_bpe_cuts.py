"""The BPE cut rule never changes a token: proven per split pattern, then per real encoding.

BPE merges never cross a pre-token boundary, so a cut is safe when the pre-tokens of the
two pieces, joined, are the pre-tokens of the whole. That is checked with the `regex`
module on each pattern (o200k's ranks are not available offline, its pattern is), and
then on the real encodings available offline by comparing ids.
"""

from __future__ import annotations

import json
import random
import re

import numpy as np
import pytest
import regex

from corpusprep.tokenizers.tiktoken import (
    CUT_AT,
    PROVEN_PATTERNS,
    WORD_CUT_AT,
    TiktokenTokenizer,
    last_cut,
    last_word_cut,
)

ATOMS = [
    "a", "Z", "word", "It", "x1", "7", "123456", " ", "  ", "\t", "\n", "\n\n", "\r\n", " \n",
    "\n ", ".", ",", "!?", ":", ";", "'s", "'ll", "'", '"', "/", "//", "(", ")", "-", "é",
    "日本語", "ü", "e\u0301", "\u00a0", "\u2028", "😀", "<|endoftext|>", "#", "$", "\x0b",
    "a\nb", ".\nA", ":\n9", "/\nx", ")\nI", "'\ns", "!\n\n", "-\n/",
    "a b", "Ab cD", "s ", " t", "ab  cd", "a\u0301 b", "x \u0301", "\u0301", "e's x",
]  # fmt: skip


def adversarial(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(ATOMS) for _ in range(n))


CUT = re.compile(CUT_AT.decode())
RULES = {"newline": CUT_AT, "word": WORD_CUT_AT}  # the shared rule; tiktoken's own


def cuts(text: str, rule: bytes = CUT_AT) -> list[int]:
    return [m.end() for m in re.compile(rule.decode()).finditer(text)]


@pytest.mark.parametrize("rule", sorted(RULES))
@pytest.mark.parametrize("name", sorted(PROVEN_PATTERNS))
def test_every_cut_keeps_the_pretokens(name, rule):
    pat = regex.compile(PROVEN_PATTERNS[name])
    rng = random.Random(name)
    checked = 0
    for _ in range(2000):
        text = adversarial(rng, rng.randint(2, 120))
        whole = pat.findall(text)
        found = cuts(text, RULES[rule])
        for c in found:
            assert pat.findall(text[:c]) + pat.findall(text[c:]) == whole, (name, text, c)
            checked += 1
        # every cut at once: each piece alone gives the pre-tokens the whole has there
        bounds = [0, *found, len(text)]
        pieces = [t for a, b in zip(bounds, bounds[1:]) for t in pat.findall(text[a:b])]
        assert pieces == whole, (name, text, found)
    assert checked > 1000  # the generator does produce cut points


def test_the_word_rule_cuts_before_a_space_between_ascii_letters():
    """tiktoken's rule adds "letter|␣letter" to the newline rule: a text with no newline
    (text8, a one-line dump) can be cut too. Not after the space ("a␣|b" splits " b")."""
    assert cuts("ab cd", WORD_CUT_AT) == [2]
    assert cuts("ab  cd", WORD_CUT_AT) == []  # two spaces: "\s+(?!\S)" takes the first
    assert cuts("a1 b", WORD_CUT_AT) == [] and cuts("é b", WORD_CUT_AT) == []
    assert cuts("x.\nA b", WORD_CUT_AT) == [3, 4]
    for name in PROVEN_PATTERNS:  # control: a cut after the space is caught
        pat = regex.compile(PROVEN_PATTERNS[name])
        assert pat.findall("ab ") + pat.findall("cd") != pat.findall("ab cd")


def test_last_word_cut_is_the_last_cut_of_the_word_rule():
    assert last_word_cut("ab cd ef") == 5
    assert last_word_cut("ab cd\nEf") == 6  # the newline's, later
    assert last_word_cut("ab\ncd e") == 5 and last_word_cut("ab\ncd 1") == 3
    assert last_word_cut("no_cut_here") == 0
    assert last_word_cut("ab c") == 2 and last_word_cut("ab ") == 0 and last_word_cut(" b") == 0
    rng = random.Random(5)
    for _ in range(3000):
        text = adversarial(rng, rng.randint(0, 60))
        assert last_word_cut(text) == max([0, *cuts(text, WORD_CUT_AT)]), text


@pytest.mark.parametrize("name", sorted(PROVEN_PATTERNS))
def test_the_check_catches_an_unsafe_rule(name):
    """Control: the same check rejects the naive rule "cut after every newline" (for
    example "a\\n\\n" | "b" makes "\\n\\n" one pre-token at the end of the left piece)."""
    pat = regex.compile(PROVEN_PATTERNS[name])
    rng = random.Random(name)
    for _ in range(2000):
        text = adversarial(rng, rng.randint(2, 120))
        for c in [m.end() for m in re.finditer("\n", text)]:
            if pat.findall(text[:c]) + pat.findall(text[c:]) != pat.findall(text):
                return
    pytest.fail("the naive rule was never caught: the check has no teeth")


def test_last_cut():
    assert last_cut("abc\ndef") == 4
    assert last_cut("abc\n def") == 0  # next is a space
    assert last_cut("abc \ndef") == 0  # previous is a space
    assert last_cut("a\n\nb") == 0
    assert last_cut("x.\nA\nb:\n9 z") == 8
    assert last_cut("no newline") == 0
    assert last_cut("ends with\n") == 0
    text = "line\nnext\n\nother\nlast"
    assert last_cut(text) == max(cuts(text))


ENCODINGS = ["gpt2", "r50k_base", "cl100k_base"]  # the ones ../shared/data has offline


@pytest.fixture(params=ENCODINGS)
def tokenizer(request, tiktoken_cache):
    return TiktokenTokenizer(request.param)


def test_pieces_give_the_ids_of_the_whole_text(tokenizer, shakespeare, monkeypatch):
    import corpusprep.tokenizers.tiktoken as tt

    monkeypatch.setattr(tt, "MIN_SEGMENT", 1)  # cut at every chance
    rng = random.Random(1)
    texts = [adversarial(rng, rng.randint(1, 3000)) for _ in range(40)]
    texts += [shakespeare.read_text()[:200_000], "\n" * 500, " " * 500, "x" * 5000]
    texts += ["a\r\nb\r\n" * 100, "First:\nSecond\n\nThird.\nfourth\n" * 300]
    for text in texts:
        cut = sorted(rng.sample(range(len(text) + 1), min(len(text), 30)))
        pieces = [text[a:b] for a, b in zip([0, *cut], [*cut, len(text)])]
        got = np.concatenate([np.zeros(0, np.uint32), *tokenizer.encode_pieces(pieces)])
        assert got.tolist() == tokenizer._enc().encode_ordinary(text)


def test_an_unknown_pattern_is_never_cut(tiktoken_cache, monkeypatch):
    tok = TiktokenTokenizer("gpt2")
    monkeypatch.setattr(type(tok), "cut_at", property(lambda self: b""))
    out = list(tok.encode_pieces(["ab\ncd\n", "ef\ngh"]))
    assert len(out) == 1 and out[0].tolist() == tok._enc().encode_ordinary("ab\ncd\nef\ngh")


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_the_riptoken_backend_gives_tiktokens_ids(encoding, tiktoken_cache, shakespeare):
    """The proof behind RIPTOKEN_PROVEN: same ids on real and adversarial text, pieces too."""
    pytest.importorskip("riptoken")
    from corpusprep.tokenizers.tiktoken import RIPTOKEN_PROVEN

    assert encoding in RIPTOKEN_PROVEN
    fast, slow = TiktokenTokenizer(encoding, backend="riptoken"), TiktokenTokenizer(encoding)
    rng = random.Random(encoding)
    texts = [shakespeare.read_text()] + [adversarial(rng, rng.randint(1, 3000)) for _ in range(60)]
    for text in texts:
        assert fast.encode(text).tolist() == slow._enc().encode_ordinary(text)
        pieces = [text[i : i + 5000] for i in range(0, len(text), 5000)]
        got = np.concatenate([np.zeros(0, np.uint32), *fast.encode_pieces(pieces)])
        assert got.tolist() == slow._enc().encode_ordinary(text)


LONG_RUNS = ["a", "b", " ", "e", "1", ".", "!", "\n", "\t", "\x0b", "中", "😀", "é", "\u3000",
             " \u3000", "\xa0 ", ".\n", " .", "\x01", "-=", "ab", "//\n", "\n/"]  # fmt: skip


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_riptoken_backend_on_long_pre_tokens(encoding, tiktoken_cache):
    """riptoken 0.2.4 merges a pre-token of 500 bytes or more otherwise than tiktoken
    ("." * 500 gives other ids): such text is encoded by tiktoken, the rest still by
    riptoken, and the ids are tiktoken's, alone, amid text, whole and in pieces."""
    pytest.importorskip("riptoken")
    import riptoken

    from corpusprep.tokenizers.tiktoken import may_hold_long_piece

    fast, slow = TiktokenTokenizer(encoding, backend="riptoken"), TiktokenTokenizer(encoding)
    enc = slow._enc()
    raw = riptoken.Encoding(riptoken.CoreBPE(enc._mergeable_ranks, enc._special_tokens,
                                             enc._pat_str), enc)  # fmt: skip
    assert raw.encode_ordinary("." * 500) != enc.encode_ordinary("." * 500)  # why this exists
    lines = "Line one\nSecond line\n" * 500
    for run in LONG_RUNS:
        for n in (2, 150, 257, 499, 500, 501, 1000, 5002):
            for text in (run * n, f"Hello\nWorld {run * n} end\nNext", lines + run * n + lines):
                expected = enc.encode_ordinary(text)
                assert fast.encode(text).tolist() == expected, (run, n)
                pieces = [text[i : i + 7000] for i in range(0, len(text), 7000)]
                got = np.concatenate([np.zeros(0, np.uint32), *fast.encode_pieces(pieces)])
                assert got.tolist() == expected, (run, n)
                if len(run) == 1 and len((run * n).encode()) >= 500:  # one pre-token
                    assert may_hold_long_piece(text)
    assert not may_hold_long_piece(lines)  # ordinary text stays on riptoken


def _longest_unmarked_run(raw: bytes) -> int:
    """The definition, byte by byte: the longest run without " " or "\n", or without a
    printable ASCII byte other than "/"."""
    longest = 0
    for marks in (b" \n", bytes(b for b in range(33, 127) if b != 47)):
        run = 0
        for b in raw:
            run = 0 if b in marks else run + 1
            longest = max(longest, run)
    return longest


def test_may_hold_long_piece_is_exactly_a_run_longer_than_the_bound():
    from corpusprep.tokenizers.tiktoken import LONG_RUN_BYTES, may_hold_long_piece

    rng = random.Random(7)
    alphabet = ["a", " ", "\n", "/", "\t", "é", "日", ".", "\r", "x" * 40, " " * 30, "/" * 25]
    for i in range(300):
        size = 70_000 if i % 50 == 0 else rng.choice([10, 200, 300, 600, 3000])  # 2 windows
        text = "".join(rng.choice(alphabet) for _ in range(size // 4))
        if rng.random() < 0.3:  # a run right around the bound, somewhere
            run = rng.choice(["a", "/", "日", " ", "\t"]) * rng.randint(
                LONG_RUN_BYTES // 3, LONG_RUN_BYTES + 3
            )
            at = rng.randint(0, len(text))
            text = text[:at] + run + text[at:]
        expected = _longest_unmarked_run(text.encode("utf-8")) > LONG_RUN_BYTES
        assert may_hold_long_piece(text) == expected


@pytest.mark.parametrize("backend", ["riptoken", "splintr"])
def test_faster_backends_refuse_unproven_encodings(backend, tiktoken_cache):
    from corpusprep.errors import UserError

    with pytest.raises(UserError, match="proven identical"):
        TiktokenTokenizer("o200k_base", backend=backend)


def _unicode(rng: random.Random, n: int) -> str:
    """Characters from every range the patterns treat apart: ASCII, Latin and symbols, CJK,
    emoji, and the whitespace and line breaks of every kind (\x85, \u2028, \x0b, \x0c)."""

    def one() -> int:
        return rng.choice([rng.randint(0x20, 0x7E), rng.randint(0xA0, 0x2FFF),
                           rng.randint(0x3000, 0x9FFF), rng.randint(0x1F300, 0x1FAFF),
                           9, 10, 11, 12, 13, 32, 0x85, 0x2028, 0x3000])  # fmt: skip

    return "".join(chr(one()) for _ in range(n))


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_the_splintr_backend_gives_tiktokens_ids(encoding, tiktoken_cache, shakespeare):
    """The proof behind SPLINTR_PROVEN: splintr, with tiktoken's pattern as its regex
    engine takes it (no possessive quantifiers), gives tiktoken's ids on real text,
    adversarial and random Unicode text, long runs of one kind of character (where
    riptoken merges otherwise), texts seen before (its cache), whole and in pieces."""
    pytest.importorskip("splintr")
    from corpusprep.tokenizers.tiktoken import SPLINTR_PROVEN

    assert encoding in SPLINTR_PROVEN
    fast, slow = TiktokenTokenizer(encoding, backend="splintr"), TiktokenTokenizer(encoding)
    enc = slow._enc()
    rng = random.Random(encoding)
    texts = [shakespeare.read_text(), "<|endoftext|>", "a <|endoftext|>\n<|endoftext|>b"]
    texts += [adversarial(rng, rng.randint(1, 400)) for _ in range(1500)]
    texts += [_unicode(rng, rng.randint(1, 300)) for _ in range(1000)]
    for run in LONG_RUNS:
        for n in (2, 257, 499, 500, 501, 5002):
            texts += [run * n, f"Hello\nWorld {run * n} end\nNext"]
    # where splintr's own regex engine read other pre-tokens (letters new in Unicode 17),
    # and where PCRE2 does (U+180E, a space before Unicode 6.3)
    texts += ["\ua7ce's", "x\U000323b0's", "\u088f'll", "   \u180e's", "Z\u180e'S", "\u180e"]
    for text in texts + texts[:300]:  # the second time from its cache
        assert fast.encode(text).tolist() == enc.encode_ordinary(text), text[:80]
    for text in texts[:50]:
        pieces = [text[i : i + 5000] for i in range(0, len(text), 5000)]
        got = np.concatenate([np.zeros(0, np.uint32), *fast.encode_pieces(pieces)])
        assert got.tolist() == enc.encode_ordinary(text)


SWEEP_PROBES = ["{c}'s", "x{c}'ll", "{c}{c}", " {c}1", "{c}\n", "1{c}2", "{c} ", "\u3000{c}",
                " {c}'T", "{c}'", "a{c}b", "{c}\r\n x", "{c}.", "({c}"]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_splintr_on_every_code_point(encoding, tiktoken_cache):
    """Every code point (but surrogates) in a dozen contexts (before a contraction, among
    letters, digits, spaces and line ends), through the splintr backend, gives tiktoken's
    ids: where the regex engines' Unicode tables or whitespace differ, it shows here."""
    pytest.importorskip("splintr")
    fast, slow = TiktokenTokenizer(encoding, backend="splintr"), TiktokenTokenizer(encoding)
    enc = slow._enc()
    code_points = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    wrong = []
    for at in range(0, len(code_points), 4000):  # a block at a time; a block that differs
        block = [chr(c) for c in code_points[at : at + 4000]]  # is looked at probe by probe
        text = "\n".join(p.format(c=c) for c in block for p in SWEEP_PROBES)
        if fast.encode(text).tolist() != enc.encode_ordinary(text):
            wrong += [
                t
                for c in block
                for p in SWEEP_PROBES
                if fast.encode(t := p.format(c=c)).tolist() != enc.encode_ordinary(t)
            ]
    assert not wrong, wrong[:20]


def test_splintrs_cache_is_emptied_as_text_goes_by(tiktoken_cache, monkeypatch):
    """splintr caches every piece whole, however long: pieces that never repeat (DNA here)
    would grow it by 3 MB per MB of text, so it is emptied every SPLINTR_CACHE_CHARS."""
    pytest.importorskip("splintr")
    import corpusprep.tokenizers.tiktoken as tt

    monkeypatch.setattr(tt, "SPLINTR_CACHE_CHARS", 100_000)
    monkeypatch.setattr(tt, "_cache", {})
    tok = TiktokenTokenizer("gpt2", backend="splintr")
    rng = random.Random(0)
    lines = ["".join(rng.choices("ACGT", k=2000)) for _ in range(400)]  # a piece each
    most = 0
    for at in range(0, len(lines), 10):
        text = " ".join(lines[at : at + 10])
        assert tok.encode(text).tolist() == tok._enc().encode_ordinary(text)
        most = max(most, tok._fast().core.cache_len)
    assert most <= 100_000 // 2000 + 10  # the pieces of the last 100,000 characters, about


def test_a_long_run_of_spaces_goes_to_tiktoken(tiktoken_cache, monkeypatch):
    """PCRE2 runs out of its match limit on millions of spaces and splintr then retries
    for ever: a long text with a long run without printable ASCII goes to tiktoken, and
    so does a text holding U+180E; other text stays on splintr."""
    pytest.importorskip("splintr")
    import corpusprep.tokenizers.tiktoken as tt

    monkeypatch.setattr(tt, "SPLINTR_LONG_TEXT", 2000)
    monkeypatch.setattr(tt, "SPLINTR_LONG_RUN", 1000)
    tok = TiktokenTokenizer("cl100k_base", backend="splintr")
    routed = []
    real = tok._tiktoken
    monkeypatch.setattr(tok, "_tiktoken", lambda text: routed.append(len(text)) or real(text))
    cases = {"x" * 1500 + " " * 1001 + "\nx": True, " " * 1001 + "\nx": False,
             "ab " * 1500: False, "\u3000" * 1200 + "a" * 900: True, "a\u180e b": True}  # fmt: skip
    for text, to_tiktoken in cases.items():
        routed.clear()
        assert tok.encode(text).tolist() == real(text).tolist()
        assert bool(routed) == to_tiktoken, text[:20]


@pytest.mark.slow
def test_ten_million_spaces_end(tmp_path, tiktoken_cache):
    """The text that made splintr spin for ever (cl100k_base, ten million spaces, a line
    end and a letter) gets tiktoken's ids, in a child process stopped if it hangs."""
    pytest.importorskip("splintr")
    code = (
        "import numpy as np, tiktoken\n"
        "from corpusprep.tokenizers.tiktoken import TiktokenTokenizer\n"
        "text = ' ' * 10_000_000 + '\\nx'\n"
        "got = TiktokenTokenizer('cl100k_base', backend='splintr').encode(text)\n"
        "want = tiktoken.get_encoding('cl100k_base').encode_ordinary(text)\n"
        "print(got.tolist() == want)\n"
    )
    import os
    import subprocess
    import sys

    from helpers import REPO

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                          env=env) as child:  # fmt: skip
        try:
            out, _ = child.communicate(timeout=240)
        finally:
            if child.poll() is None:
                os.kill(child.pid, 9)  # a hang: stopped by its pid
                child.wait()
    assert out.strip() == "True"


def test_cut_rule_spelled_newline_first_matches_as_the_lookbehind_rule():
    """CUT_AT starts at its "\\n" (fast to search); the same matches as the rule written
    the obvious way, from any start and up to any end."""
    plain = re.compile(rb"(?<=[\x21-\x7e])\n(?=[0-9A-Za-z])")
    fast = re.compile(CUT_AT)
    rng = random.Random(3)
    for _ in range(3000):
        raw = adversarial(rng, rng.randint(0, 12)).encode()
        a, b = rng.randint(0, len(raw)), rng.randint(0, len(raw))
        spans = [(m.span()) for m in plain.finditer(raw, min(a, b), max(a, b))]
        assert spans == [m.span() for m in fast.finditer(raw, min(a, b), max(a, b))]


@pytest.mark.parametrize("seed", range(20))
def test_encode_at_cuts_segments_are_the_held_texts_cut_at_their_last_cut(seed):
    """Pieces held until there is at least the minimum, then cut at the last cut of all
    that is held (wherever the pieces end): the segments of the plain way of doing it."""
    from corpusprep.tokenizers.tiktoken import encode_at_cuts

    def plainly(pieces, minimum):
        held = ""
        for piece in pieces:
            held += piece
            if len(held) >= minimum and (cut := last_cut(held)):
                yield held[:cut]
                held = held[cut:]
        if held:
            yield held

    rng = random.Random(seed)
    text = adversarial(rng, 3000)
    pieces, at = [], 0
    while at < len(text):
        step = rng.choice([1, 5, 40, 300])
        pieces.append(text[at : at + step])
        at += step
    minimum = rng.choice([1, 16, 200])
    segments = list(encode_at_cuts(lambda s: s, pieces, True, minimum))
    assert segments == list(plainly(pieces, minimum))
    assert "".join(segments) == text and len(segments) > 1


TEXT8_WORDS = ["the", "of", "and", "one", "in", "a", "to", "zero", "nine", "two", "is",
               "anarchism", "originated", "as", "term", "abuse"]  # fmt: skip


@pytest.mark.parametrize("backend", ["tiktoken", "auto"])
def test_a_text_without_newlines_is_cut_between_words_as_nanogpt_encodes_it(
    tmp_path, tiktoken_cache, backend
):
    """text8's shape: one line of words and single spaces, longer than
    source.max_uncut_bytes. With only the newline rule it had no place to cut: refused (or,
    under the limit, encoded whole by one worker, its memory growing with the text). Cut
    between words into shards, it gives nanoGPT's files byte for byte, in the bound."""
    from helpers import run_cli, same_files
    from nanogpt_reference import prepare_bpe

    rng = random.Random(8)
    text = " ".join(rng.choice(TEXT8_WORDS) for _ in range(500_000))  # 2.6 MB, one line
    (tmp_path / "text8").write_text(text)
    (tmp_path / "ref").mkdir()
    prepare_bpe(tmp_path / "text8", tmp_path / "ref")
    r = run_cli("source=file", "source.path=text8", "tokenizer=tiktoken",
                f"tokenizer.backend={backend}", "source.max_uncut_bytes=100000",
                "shard_bytes=300000", "out_dir=out", "quiet=true", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    same_files(tmp_path / "ref", tmp_path / "out", names=("train.bin", "val.bin"))
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["shards"]["count"] >= 8


def test_the_word_rule_is_tiktokens_alone(tiktoken_cache):
    """The tokenizers that share the newline rule (sentencepiece, Hugging Face's ByteLevel
    BPE, tokenizer=bpe's plan and training units) keep it: the word rule is proven for tiktoken's
    patterns only."""
    from corpusprep.sample import UNIT_END
    from corpusprep.tokenizers.sentencepiece import SentencePieceTokenizer

    assert TiktokenTokenizer("gpt2").cut_at == WORD_CUT_AT
    assert UNIT_END.pattern == CUT_AT.decode() and SentencePieceTokenizer.cut_at == CUT_AT


def test_the_one_byte_rules_match_one_byte():
    """Compressed texts are cut into pieces only by rules each of whose matches is one
    byte (ONE_BYTE_CUTS): the first cut at or after a place then never precedes the first
    at or after an earlier one, so pieces found from either side meet exactly."""
    from corpusprep.tokenizers.tiktoken import ONE_BYTE_CUTS

    rng = random.Random(11)
    for rule in ONE_BYTE_CUTS:
        found = 0
        for _ in range(500):
            raw = adversarial(rng, rng.randint(1, 80)).encode()
            for m in re.finditer(rule, raw):
                assert m.end() - m.start() == 1, (rule, raw, m)
                found += 1
        assert found > 100


def test_last_word_cut_finds_a_cut_far_back():
    """A word cut further back than the last few KB is still the last cut: a text whose
    pieces each end a few KB past their last word ("ab cd" then digits, a period of 8 KB,
    with 64 KB pieces) was held whole, its memory growing with it, not with
    source.max_uncut_bytes."""
    from corpusprep.tokenizers.tiktoken import MIN_SEGMENT, encode_at_cuts

    filler = "12 " * 3000
    assert last_word_cut("ab cd" + filler) == 2
    assert last_word_cut("x.\nab cd" + filler) == 5 and last_word_cut("x.\nA" + filler) == 3
    rng = random.Random(9)
    for _ in range(200):
        text = adversarial(rng, rng.randint(0, 20)) + filler[: rng.randint(0, 9000)]
        assert last_word_cut(text) == max([0, *cuts(text, WORD_CUT_AT)]), text[:40]
    period = ("ab cd" + filler)[:8192]
    text = (period * 800)[2:]  # 6.5 MB, as a segment: from a cut
    pieces = [text[i : i + 65536] for i in range(0, len(text), 65536)]
    segments = list(encode_at_cuts(lambda s: s, pieces, True, MIN_SEGMENT, last_word_cut))
    assert "".join(segments) == text
    assert max(map(len, segments)) < MIN_SEGMENT + 2 * 65536, [len(s) for s in segments]


@pytest.mark.parametrize("seed", range(10))
def test_encode_at_cuts_with_the_word_rule_cuts_at_the_last_cut_of_all_held(seed):
    """As test_encode_at_cuts_segments_are_the_held_texts_cut_at_their_last_cut, for the
    word rule, with stretches without a cut longer than a piece and than WORD_WINDOW."""
    from corpusprep.tokenizers.tiktoken import encode_at_cuts

    def plainly(pieces, minimum):
        held = ""
        for piece in pieces:
            held += piece
            if len(held) >= minimum and (cut := max([0, *cuts(held, WORD_CUT_AT)])):
                yield held[:cut]
                held = held[cut:]
        if held:
            yield held

    rng = random.Random(seed)
    text = "".join(
        adversarial(rng, 30) if rng.random() < 0.7 else "1 " * rng.randint(10, 6000)
        for _ in range(60)
    )
    pieces, at = [], 0
    while at < len(text):
        step = rng.choice([1, 5, 40, 300, 5000])
        pieces.append(text[at : at + step])
        at += step
    minimum = rng.choice([1, 16, 200, 9000])
    segments = list(encode_at_cuts(lambda s: s, pieces, True, minimum, last_word_cut))
    assert segments == list(plainly(pieces, minimum))
    assert "".join(segments) == text and len(segments) > 1


def test_a_stretch_without_a_cut_is_searched_once_not_with_every_piece():
    """A text with no cut, arriving in 64 KB pieces: each character is looked at about once
    (the held text was joined and searched again with every piece, which made a stretch
    of source.max_uncut_bytes cost its square: 50 MB of one line took 13 s, nanoGPT 3 s);
    the segments are the text, cut at its last cut as before."""
    from corpusprep.tokenizers.tiktoken import encode_at_cuts

    looked: list[int] = []

    def counted(text: str) -> int:
        looked.append(len(text))
        return last_word_cut(text)

    text = "12 3.4 " * 600_000 + "ab cd " + "7 " * 1000  # 4.2 MB without a cut, then one
    pieces = [text[i : i + 65536] for i in range(0, len(text), 65536)]
    segments = list(encode_at_cuts(lambda s: s, pieces, True, 1 << 20, counted))
    assert segments == [text[: text.index("b cd") + 1], text[text.index("b cd") + 1 :]]
    assert sum(looked) < 1.2 * len(text), (sum(looked), len(text))


def test_riptoken_hands_tiktoken_only_the_block_that_may_hold_a_long_pre_token(
    tiktoken_cache, monkeypatch
):
    """A line of words with a run of 600 dots in it (riptoken merges such a pre-token
    otherwise than tiktoken): the text went to tiktoken whole, having no newline to cut
    at; it is cut into blocks at the word rule too, and only the block with the run goes."""
    pytest.importorskip("riptoken")
    fast = TiktokenTokenizer("gpt2", backend="riptoken")
    words = " ".join(["quick brown fox jumps"] * 20_000)  # 440 KB, no newline
    text = words + " " + "." * 600 + " " + words
    handed = []
    slow = fast._tiktoken
    monkeypatch.setattr(fast, "_tiktoken", lambda t: handed.append(len(t)) or slow(t))
    assert fast.encode(text).tolist() == fast._enc().encode_ordinary(text)
    assert handed and sum(handed) < 200_000, handed  # before: the whole 880 KB


def test_one_long_piece_is_encoded_a_segment_at_a_time(tokenizer, monkeypatch):
    """A document that comes as one piece (a JSON line, a Parquet row, a line of
    source.format=lines: up to source.max_uncut_bytes) is cut into segments of about the
    minimum as a text read in blocks is, not encoded whole at its last cut: a 50 MB line
    of words went to splintr in one call and took 574 MB. The ids are the whole text's."""
    import corpusprep.tokenizers.tiktoken as tt

    monkeypatch.setattr(tt, "MIN_SEGMENT", 4096)
    rng = random.Random(3)
    words = ["the", "of", "Romeo", "and", "12", "3.5", "über", "日本", "\n", ",", "  "]
    text = " ".join(rng.choice(words) for _ in range(120_000))  # ~500K characters
    encoded: list[int] = []
    encode = tokenizer.encode

    def recorded(segment: str) -> np.ndarray:
        encoded.append(len(segment))
        return encode(segment)

    monkeypatch.setattr(tokenizer, "encode", recorded)
    got = np.concatenate(list(tokenizer.encode_pieces([text])))
    assert got.tolist() == tokenizer._enc().encode_ordinary(text)
    assert len(encoded) > 1 and max(encoded) < 4 * (1 << 16), encoded
