"""The sentencepiece cut rule (issue 14: the speed of a long text): a text cut after a
newline (tiktoken.CUT_AT) and encoded in pieces, each piece after a cut through
encode_continued, gives exactly sentencepiece's own ids for the whole text, for every
kind of model the rule accepts; every model it refuses is one a cut would break, or one
the argument does not cover. Models are trained here, small, with sentencepiece itself.
"""

from __future__ import annotations

import io
import random
import re

import numpy as np
import pytest

from corpusprep.tokenizers import NOWHERE
from corpusprep.tokenizers import sentencepiece as sp_module
from corpusprep.tokenizers.sentencepiece import (
    TRAINING,
    SentencePieceTokenizer,
    cut_rule,
    model_spec,
)
from corpusprep.tokenizers.tiktoken import CUT_AT

spm = pytest.importorskip("sentencepiece")

ATOMS = [
    "a", "Z", "word", "It", "x1", "7", "123", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n",
    " \n", "\n ", ".", ",", "'s", "'", '"', "/", "é", "日本語", "e\u0301", "\u00a0", "😀",
    "\u2581", "\u2581\u2581", " \u2581", "a\nb", ".\nA", ":\n9", ")\nI", "!\n\n", "<s>",
    "\x00", "\u3000", "ﬁ",
]  # fmt: skip
CUT = re.compile(CUT_AT.decode("ascii"))


def adversarial(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(ATOMS) for _ in range(n))


@pytest.fixture(scope="module")
def lines(shakespeare) -> list[str]:
    text = shakespeare.read_text(encoding="utf-8")[:200_000]
    rng = random.Random(1)
    extra = [adversarial(rng, 30).replace("\n", " ") for _ in range(300)]
    return [line for line in text.split("\n") if line] + extra


def train(lines: list[str], **changes) -> bytes:
    written = io.BytesIO()
    options = {**TRAINING, "vocab_size": 400, "num_threads": 1, **changes}
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=written,
                                   **options)  # fmt: skip
    return written.getvalue()


CUTTABLE = {
    "ours": {},  # llama2.c's train_vocab, lossless (Llama 2's flags): what is trained here
    "collapsing spaces": {"remove_extra_whitespaces": True},  # llama2.c's own default
    "no dummy prefix": {"add_dummy_prefix": False},
    "no split by whitespace": {"split_by_whitespace": False},  # pieces may hold spaces
}
REFUSED = {
    "unigram": ({"model_type": "unigram"}, "not a BPE model"),
    "nfkc": ({"normalization_rule_name": "nmt_nfkc"}, "normalizer rewrites characters"),
    "suffix": ({"treat_whitespace_as_suffix": True}, "after a text"),
    "newline piece": ({"user_defined_symbols": ["a\nb"]}, "holds a newline"),
    "unknown newline": ({"byte_fallback": False}, "a newline is unknown"),
}


@pytest.fixture(scope="module")
def models(lines) -> dict[str, bytes]:
    kinds = {**CUTTABLE, **{name: changes for name, (changes, _) in REFUSED.items()}}
    return {name: train(lines, **changes) for name, changes in kinds.items()}


def tokenizer_of(model: bytes, tmp_path) -> SentencePieceTokenizer:
    path = tmp_path / "given.model"
    path.write_bytes(model)
    return SentencePieceTokenizer(model=str(path))


def cut_and_encode(tok: SentencePieceTokenizer, text: str, cuts: list[int]) -> list[int]:
    """First piece through encode_pieces, each one after a cut through encode_continued:
    what shards of one long text do."""
    bounds = [0, *cuts, len(text)]
    ids: list[int] = []
    for k, (a, b) in enumerate(zip(bounds, bounds[1:])):
        encode = tok.encode_pieces if k == 0 else tok.encode_continued
        ids += [int(i) for arr in encode([text[a:b]]) for i in arr]
    return ids


@pytest.mark.parametrize("name", list(CUTTABLE))
def test_cut_texts_give_sentencepieces_ids(models, name, tmp_path):
    tok = tokenizer_of(models[name], tmp_path)
    assert tok.cut_at == CUT_AT, tok.cuts
    sp = spm.SentencePieceProcessor(model_proto=models[name])
    rng = random.Random(name)
    checked = 0
    for _ in range(1500):
        text = adversarial(rng, rng.randint(1, 60))
        cuts = [m.end() for m in CUT.finditer(text)]
        if not cuts:
            continue
        chosen = sorted(rng.sample(cuts, rng.randint(1, len(cuts))))
        assert cut_and_encode(tok, text, chosen) == sp.encode(text), (text, chosen)
        checked += 1
    assert checked > 500


@pytest.mark.parametrize("name", list(CUTTABLE))
def test_pieces_of_a_long_text_give_sentencepieces_ids(models, name, tmp_path, monkeypatch):
    """encode_pieces cuts a long text itself (into segments of about SEGMENT characters,
    once MIN_SEGMENT are held)."""
    monkeypatch.setattr(sp_module, "MIN_SEGMENT", 100)
    monkeypatch.setattr(sp_module, "SEGMENT", 30)
    tok = tokenizer_of(models[name], tmp_path)
    sp = spm.SentencePieceProcessor(model_proto=models[name])
    rng = random.Random(7)
    for _ in range(60):
        text = adversarial(rng, 400)
        bounds = sorted(rng.sample(range(len(text)), 12))
        pieces = [text[a:b] for a, b in zip([0, *bounds], [*bounds, len(text)])]
        segments = list(tok.encode_pieces(pieces))
        assert np.concatenate(segments).tolist() == sp.encode(text)
        assert len(segments) > 1 or "\n" not in text[:-1]
        # from a cut on: the ids the whole text has there
        cuts = [m.end() for m in CUT.finditer(text)]
        if cuts:
            c = cuts[len(cuts) // 2]
            whole = sp.encode(text)
            head = sp.encode(text[:c])
            tail = np.concatenate(list(tok.encode_continued([text[c:]]))).tolist()
            assert whole == head + tail


@pytest.mark.parametrize("name", list(REFUSED))
def test_models_the_argument_does_not_cover_are_never_cut(models, name, tmp_path):
    tok = tokenizer_of(models[name], tmp_path)
    assert tok.cut_at == NOWHERE and REFUSED[name][1] in tok.cuts
    sp = spm.SentencePieceProcessor(model_proto=models[name])
    text = "First line\nSecond line\nThird\n" * 5
    assert np.concatenate(list(tok.encode_pieces([text[:7], text[7:]]))).tolist() == sp.encode(text)


@pytest.mark.parametrize("name", list(CUTTABLE))
def test_inside_a_piece_any_newline_is_a_cut(models, name, tmp_path):
    """Within a shard, calls end after any "\n" (not only where the plan cuts)."""
    tok = tokenizer_of(models[name], tmp_path)
    sp = spm.SentencePieceProcessor(model_proto=models[name])
    rng = random.Random(name + "anywhere")
    for _ in range(600):
        text = adversarial(rng, rng.randint(1, 50))
        cuts = [i + 1 for i, c in enumerate(text) if c == "\n"]
        if cuts:
            chosen = sorted(rng.sample(cuts, rng.randint(1, len(cuts))))
            assert cut_and_encode(tok, text, chosen) == sp.encode(text), (text, chosen)


def test_the_checks_matter(models, tmp_path):
    """Refused models really break at a cut: the rule is not vacuous."""
    text = "The first line\nThe second line a\nb ends\nAnd more"
    for name, c in (("suffix", text.index("\nThe") + 1), ("newline piece", text.index("\nb") + 1)):
        assert CUT.match(text, c - 1)  # a place the rule cuts at
        sp = spm.SentencePieceProcessor(model_proto=models[name])
        head = sp.encode(text[:c])
        rest = sp.encode("\n" + text[c:])[len(sp.encode("\n")) :]
        assert head + rest != sp.encode(text), name


def test_model_spec_reads_what_protobuf_reads(models):
    pb = pytest.importorskip("sentencepiece.sentencepiece_model_pb2")
    for name, model in models.items():
        proto = pb.ModelProto.FromString(model)
        spec = model_spec(model)
        assert spec["model_type"] == proto.trainer_spec.model_type, name
        assert spec["treat_whitespace_as_suffix"] == proto.trainer_spec.treat_whitespace_as_suffix
        assert spec["precompiled_charsmap"] == proto.normalizer_spec.precompiled_charsmap
        assert (
            spec["normalization_rule_tsv"] == proto.normalizer_spec.normalization_rule_tsv.encode()
        )


def test_a_field_sent_again_with_another_wire_type_is_malformed(models, tmp_path):
    """protobuf keeps a field of the wrong wire type aside (sentencepiece still uses the
    real value): read as a value, it would prove a model that is not cut-safe."""
    suffix = models["suffix"]
    crafted = {
        "suffix as length-delimited": suffix + bytes([0x12, 0x03, 0xC2, 0x01, 0x00]),
        "charsmap as varint": models["nfkc"] + bytes([0x1A, 0x02, 0x10, 0x00]),
        "model_type as fixed32": models["unigram"] + bytes([0x12, 0x05, 0x1D, 2, 0, 0, 0]),
        "normalizer as varint": models["ours"] + bytes([0x18, 0x00]),
    }
    for name, model in crafted.items():
        spm.SentencePieceProcessor(model_proto=model)  # sentencepiece loads it
        assert model_spec(model).get("malformed"), name
        assert tokenizer_of(model, tmp_path).cut_at == NOWHERE, name


def test_a_malformed_model_is_never_cut(models):
    model = models["ours"]
    for cut in (1, 7, len(model) // 2, len(model) - 1):
        spec = model_spec(model[:cut])
        if spec.get("malformed"):
            assert cut_rule(spec, [], False)[0] == NOWHERE
    assert model_spec(b"\xff" * 20).get("malformed")
    assert model_spec(b"\x0f")["model_type"] == 1 or model_spec(b"\x0f").get("malformed")


def test_a_trained_model_is_cut_as_planned(lines):
    """fit() checks the trained model against the rule the plan used before it existed."""
    tok = SentencePieceTokenizer(vocab_size=400)
    assert tok.cut_at == CUT_AT  # what the plan cuts at, before training
    from corpusprep.sample import Sample

    tok.fit("", sample=Sample(priorities=[0] * len(lines), units=lines))
    assert tok.cut_at == CUT_AT, tok.cuts
