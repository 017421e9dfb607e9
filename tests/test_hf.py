"""tokenizer=hf: Hugging Face tokenizer.json files, trained here on the spot (no download).

The ids must be those of `tok.encode(side, add_special_tokens=False)` on each side of the
text, however the file is sharded; the largest id (added tokens included) picks the
dtype; a cut is made only where it is proven harmless, and that proof is here too.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import random
import re
import subprocess
import sys

import numpy as np
import pytest
from helpers import REPO, assert_one_line_error, compose, run_cli
from test_bpe_cuts import adversarial, cuts

from corpusprep.config import build
from corpusprep.errors import UserError
from corpusprep.prepare import prepare
from corpusprep.tokenizers import NOWHERE
from corpusprep.tokenizers.tiktoken import CUT_AT

tokenizers = pytest.importorskip(
    "tokenizers", reason="tokenizer=hf needs the optional tokenizers library: pip install '.[hf]'"
)
from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers, trainers  # noqa: E402

from corpusprep.tokenizers import hf  # noqa: E402
from corpusprep.tokenizers.hf import PROVEN_PATTERNS, HfTokenizer, cut_rule  # noqa: E402

EOT = "<|endoftext|>"
WORDS = (  # noqa: SIM905 - a sentence's words read better as a sentence
    "the of and to in a is that for it as was with be by on not he I this are or his from at "
    "which but have an they you were her she there one all we their King Queen ROMEO: 1599 42"
).split()


def english(rng: random.Random, lines: int) -> str:
    out = []
    for _ in range(lines):
        words = [rng.choice(WORDS) for _ in range(rng.randint(2, 12))]
        out.append(" ".join(words).capitalize() + rng.choice([".", "!", "?", ",", ":", ";", ""]))
    return "\n".join(out) + "\n"


def corpus(seed: str, blocks: int) -> str:
    """English-like lines, adversarial runs (tests/test_bpe_cuts.py), \\r\\n line ends and
    end-of-text markers: every kind of place the cut rule has to get right."""
    rng = random.Random(seed)
    parts = []
    for _ in range(blocks):
        parts.append(english(rng, rng.randint(1, 8)))
        parts.append(adversarial(rng, rng.randint(0, 60)))
        parts.append(rng.choice(["\n", "\r\n", "\nA line.\nAnother one\n", f"\n{EOT}", ""]))
    return "".join(parts)


def train(pre_tokenizer, decoder, specials=(EOT,), vocab=500, unk=None) -> tokenizers.Tokenizer:
    tok = tokenizers.Tokenizer(models.BPE(unk_token=unk))
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoder
    alphabet = (
        pre_tokenizers.ByteLevel.alphabet() if isinstance(decoder, decoders.ByteLevel) else []
    )
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=list(specials),
        initial_alphabet=alphabet,
        show_progress=False,
    )
    text = corpus("train", 300)
    tok.train_from_iterator(text.splitlines(keepends=True), trainer)
    return tok


def bytelevel():
    return pre_tokenizers.ByteLevel(add_prefix_space=False)


def llama3():
    # Llama-3 / GPT-4 style: a Split regex, then ByteLevel without its own regex
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PROVEN_PATTERNS["llama3"]), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """tokenizer.json files: ByteLevel (GPT-2 style), Llama-3 style, Metaspace
    (sentencepiece style), ByteLevel with rstrip/single_word added tokens, and ByteLevel
    with an added token at id 70000."""
    d = tmp_path_factory.mktemp("tokenizers")
    out = {}
    byte_tok = train(bytelevel(), decoders.ByteLevel())
    byte_tok.save(str(d / "bytelevel.json"))
    out["bytelevel"] = d / "bytelevel.json"
    train(llama3(), decoders.ByteLevel()).save(str(d / "llama3.json"))
    out["llama3"] = d / "llama3.json"
    meta_tok = train(
        pre_tokenizers.Metaspace(), decoders.Metaspace(), ("</s>", "<unk>"), 400, "<unk>"
    )
    meta_tok.save(str(d / "metaspace.json"))
    out["metaspace"] = d / "metaspace.json"
    # added tokens that take the whitespace after them, or match only as whole words
    stripping = library(out["bytelevel"])
    word = AddedToken("word", single_word=True, rstrip=True)
    stripping.add_tokens([word, AddedToken("It", rstrip=True), AddedToken(". ", rstrip=True)])
    stripping.save(str(d / "stripping.json"))
    out["stripping"] = d / "stripping.json"
    # the library numbers added tokens itself; an id far beyond the vocabulary (as in
    # models with reserved ranges) is written by hand, with its vocabulary entry
    spec = json.loads(byte_tok.to_str())
    spec["added_tokens"].append(
        {"id": 70000, "content": "<|big|>", "single_word": False, "lstrip": False,
         "rstrip": False, "normalized": False, "special": True}
    )  # fmt: skip
    spec["model"]["vocab"]["<|big|>"] = 70000
    (d / "big.json").write_text(json.dumps(spec), encoding="utf-8")
    out["big"] = d / "big.json"
    return out


def library(path) -> tokenizers.Tokenizer:
    return tokenizers.Tokenizer.from_file(str(path))


def expected(tok, path) -> dict[str, list[int]]:
    with open(path, encoding="utf-8") as f:  # universal newlines, as nanoGPT reads
        data = f.read()
    n = len(data)
    return {
        "train": tok.encode(data[: int(n * 0.9)], add_special_tokens=False).ids,
        "val": tok.encode(data[int(n * 0.9) :], add_special_tokens=False).ids,
    }


def run(src, out, tj, *overrides):
    return prepare(compose("source=file", f"source.path={src}", f"out_dir={out}", "quiet=true",
                           "tokenizer=hf", f"tokenizer.path={tj}", *overrides))  # fmt: skip


# --- end to end ---------------------------------------------------------------------------


def test_cli_sharded_with_two_workers_equals_encoding_each_side_whole(tmp_path, files):
    src = tmp_path / "corpus.txt"
    src.write_bytes(corpus("cli", 400).encode("utf-8"))
    out = tmp_path / "out"
    r = run_cli("source=file", f"source.path={src}", "tokenizer=hf",
                f"tokenizer.path={files['bytelevel']}", f'tokenizer.eot="{EOT}"', f"out_dir={out}",
                "shard_bytes=2000", "executor.workers=2", "quiet=true", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    m = json.loads((out / "manifest.json").read_text())
    assert m["shards"]["count"] > 20 and m["dtype"] == "uint16"
    tok = library(files["bytelevel"])
    want = expected(tok, src)
    for side in ("train", "val"):
        assert np.fromfile(out / f"{side}.bin", np.uint16).tolist() == want[side], side
    assert m["tokens"] == {"train": len(want["train"]), "val": len(want["val"])}
    # the eot string written in the corpus is the eot token (the library's behaviour)
    assert tok.token_to_id(EOT) in want["train"]
    assert m["tokenizer"]["kind"] == "hf" and m["tokenizer"]["eot_id"] == tok.token_to_id(EOT)
    assert m["tokenizer"]["cuts"].startswith("after a newline")


def test_llama3_style_sharded_equals_whole(tmp_path, files):
    src = tmp_path / "corpus.txt"
    src.write_bytes(corpus("llama", 300).encode("utf-8"))
    out = tmp_path / "out"
    m = run(src, out, files["llama3"], "shard_bytes=2000", "executor.workers=2")
    assert m["shards"]["count"] > 20
    want = expected(library(files["llama3"]), src)
    for side in ("train", "val"):
        assert np.fromfile(out / f"{side}.bin", np.uint16).tolist() == want[side], side


def test_metaspace_is_never_cut_and_still_exact(tmp_path, files):
    tok = HfTokenizer(str(files["metaspace"]))
    assert tok.cut_at == NOWHERE and tok.cut_at is not None
    assert "not ByteLevel" in tok.cuts
    src = tmp_path / "corpus.txt"
    src.write_bytes(corpus("meta", 200).encode("utf-8"))
    out = tmp_path / "out"
    m = run(src, out, files["metaspace"], "shard_bytes=2000", "executor.workers=2")
    assert m["shards"]["count"] == 1  # no safe cut: one shard, each side encoded whole
    want = expected(library(files["metaspace"]), src)
    for side in ("train", "val"):
        assert np.fromfile(out / f"{side}.bin", np.uint16).tolist() == want[side], side


def test_an_added_token_beyond_the_vocabulary_picks_uint32(tmp_path, files):
    lib = library(files["big"])
    assert lib.token_to_id("<|big|>") == 70000
    assert lib.get_vocab_size() < 70001  # counts tokens: not the size the ids need
    tok = HfTokenizer(str(files["big"]), eot="<|big|>")
    assert tok.max_id == 70000 and tok.vocab_size == 70001 and tok.eot_id == 70000
    src = tmp_path / "corpus.txt"
    src.write_text(("Some text.\n<|big|>More text\n" * 200), encoding="utf-8")
    out = tmp_path / "out"
    m = run(src, out, files["big"])
    assert m["dtype"] == "uint32" and m["vocab_size"] == 70001 and "nanogpt_note" in m
    want = expected(lib, src)
    for side in ("train", "val"):
        assert np.fromfile(out / f"{side}.bin", np.uint32).tolist() == want[side], side
    assert 70000 in want["train"]
    assert pickle.loads((out / "meta.pkl").read_bytes())["vocab_size"] == 70001
    r = run_cli(
        "source=file",
        f"source.path={src}",
        "tokenizer=hf",
        f"tokenizer.path={files['big']}",
        "dtype=uint16",
        "out_dir=u16",
        cwd=tmp_path,
    )
    assert_one_line_error(r, "dtype=uint16", "70,000", "uint32")
    assert not (tmp_path / "u16").exists()


@pytest.mark.parametrize("big", [100_000_000, 2**32 - 1, 1 << 24, 2 * 600 + (1 << 17)])
def test_an_added_token_far_beyond_the_vocabulary_is_refused_before_any_work(tmp_path, files, big):
    # a 27 KB file from a stranger: every per-id table would run to the huge id (minutes,
    # gigabytes); one line naming the file and the id, at once
    spec = json.loads(files["bytelevel"].read_text(encoding="utf-8"))
    spec["added_tokens"].append(
        {"id": big, "content": "<|big|>", "single_word": False, "lstrip": False,
         "rstrip": False, "normalized": False, "special": True}
    )  # fmt: skip
    spec["model"]["vocab"]["<|big|>"] = big
    tj = tmp_path / "huge.json"
    tj.write_text(json.dumps(spec), encoding="utf-8")
    src = tmp_path / "c.txt"
    src.write_text("hello world\n" * 100)
    r = run_cli("source=file", f"source.path={src}", "tokenizer=hf", f"tokenizer.path={tj}",
                "out_dir=o", cwd=tmp_path, timeout=60)  # fmt: skip
    assert_one_line_error(r, f"tokenizer.path={tj}", f"{big:,}", "not a real vocabulary")
    assert not (tmp_path / "o").exists()


# found by an attack: the library takes a template's ids unchecked; one not in the
# vocabulary was a TypeError's traceback (even with add_special_tokens=false)
@pytest.mark.parametrize("add", ["true", "false"])
def test_a_template_id_not_in_the_vocabulary_is_one_line(tmp_path, files, add):
    spec = json.loads(files["bytelevel"].read_text(encoding="utf-8"))
    spec["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": EOT, "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}],
        "special_tokens": {EOT: {"id": EOT, "ids": [99_999], "tokens": [EOT]}},
    }  # fmt: skip
    tj = tmp_path / "template.json"
    tj.write_text(json.dumps(spec), encoding="utf-8")
    (tmp_path / "c.txt").write_text("hello world\n" * 100)
    r = run_cli("source=file", "source.path=c.txt", "tokenizer=hf", f"tokenizer.path={tj}",
                f"tokenizer.add_special_tokens={add}", "out_dir=o", cwd=tmp_path)  # fmt: skip
    if add == "true":
        assert_one_line_error(r, f"tokenizer.path={tj}", "99,999", "add_special_tokens=false")
        assert not (tmp_path / "o").exists()
        return
    assert r.returncode == 0, r.stderr
    ids = np.fromfile(tmp_path / "o" / "train.bin", np.uint16)
    assert ids.max() < json.loads((tmp_path / "o" / "manifest.json").read_text())["vocab_size"]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_split_regex_the_engine_gives_up_on_is_one_line(tmp_path, files, workers):
    # Oniguruma hits its retry limit on "(a|a)*$" over a run of a's, and the library
    # panics (pyo3's PanicException, a BaseException): one line naming the file, in a
    # worker too, and no Rust panic report (even with RUST_BACKTRACE=1)
    spec = json.loads(files["bytelevel"].read_text(encoding="utf-8"))
    spec["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "(a|a)*$|(a+)+b"}, "behavior": "Isolated",
         "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
         "use_regex": False}]}  # fmt: skip
    tj = tmp_path / "redos.json"
    tj.write_text(json.dumps(spec), encoding="utf-8")
    src = tmp_path / "c.txt"
    lines = [f"hello world line {i}\n" for i in range(3000)]
    lines.insert(2500, "a" * 30 + "!\n")
    src.write_text("".join(lines))
    r = run_cli("source=file", f"source.path={src}", "tokenizer=hf", f"tokenizer.path={tj}",
                f"executor.workers={workers}", "shard_bytes=10000", "out_dir=o", cwd=tmp_path,
                env={"RUST_BACKTRACE": "1"})  # fmt: skip
    assert_one_line_error(r, f"tokenizer.path={tj}", "regex failed on the text")
    assert "panicked" not in r.stderr and not (tmp_path / "o").exists()


def test_a_folder_load_would_refuse_is_never_written(tmp_path, files, monkeypatch):
    # a 64 MB tokenizer.json of 3M tokens (within its 256 MB cap) made an 80 MB meta.pkl,
    # which load() and inspect then called damaged: too many tokens are refused before the
    # run, and any meta.pkl over what load() reads before the commit (limits made small
    # here: the real ones take a 64 MB file)
    monkeypatch.setattr(hf, "MAX_TOKENS", 400)
    with pytest.raises(UserError, match=r"tokenizer.path=.*: 50\d tokens, more than the 400"):
        HfTokenizer(str(files["bytelevel"]))
    monkeypatch.undo()
    src = tmp_path / "c.txt"
    src.write_text(english(random.Random(4), 200), encoding="utf-8")
    out = tmp_path / "out"
    run(src, out, files["bytelevel"])
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    monkeypatch.setattr("corpusprep.dataset.MAX_META_BYTES", 1000)
    with pytest.raises(UserError, match="meta.pkl would be .* more than the 0 MB"):
        run(src, out, files["bytelevel"], "split=0.8")
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before


def test_truncation_and_padding_saved_in_the_file_are_ignored(tmp_path, files):
    spec = json.loads(files["bytelevel"].read_text(encoding="utf-8"))
    spec["truncation"] = {"direction": "Right", "max_length": 8, "strategy": "LongestFirst",
                          "stride": 0}  # fmt: skip
    spec["padding"] = {"strategy": {"Fixed": 512}, "direction": "Right", "pad_to_multiple_of": None,
                       "pad_id": 0, "pad_type_id": 0, "pad_token": EOT}  # fmt: skip
    tj = tmp_path / "truncating.json"
    tj.write_text(json.dumps(spec), encoding="utf-8")
    text = english(random.Random(3), 50)
    full = library(files["bytelevel"]).encode(text).ids
    padded = library(tj).encode(text).ids  # what the file alone does: cut at 8, padded to 512
    assert padded[:8] == full[:8] and padded[8:] == [0] * 504
    ids = HfTokenizer(str(tj)).encode(text)
    assert ids.tolist() == full and len(full) > 100


# --- meta.pkl, describe, pickling ---------------------------------------------------------


def test_meta_pkl(tmp_path, files):
    src = tmp_path / "corpus.txt"
    text = english(random.Random(5), 400)
    src.write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    run(src, out, files["bytelevel"], f'tokenizer.eot="{EOT}"')
    meta = pickle.loads((out / "meta.pkl").read_bytes())
    lib = library(files["bytelevel"])
    assert meta["kind"] == "hf" and meta["vocab_size"] == lib.get_vocab_size()
    assert meta["path"] == str(files["bytelevel"].resolve())
    assert meta["sha256"] == hashlib.sha256(files["bytelevel"].read_bytes()).hexdigest()
    assert meta["eot"] == EOT and meta["eot_id"] == lib.token_to_id(EOT)
    assert meta["special_tokens"] == {EOT: lib.token_to_id(EOT)}
    assert meta["tokenizers_version"] == tokenizers.__version__
    # nanoGPT's sample.py: decode = ''.join(itos[i] for i in ids); its prompt "\n" via stoi
    val = np.fromfile(out / "val.bin", np.uint16)
    assert "".join(meta["itos"][int(i)] for i in val) == text[int(len(text) * 0.9) :]
    assert set(meta["itos"]) == set(range(meta["vocab_size"]))
    assert meta["itos"][lib.token_to_id(EOT)] == EOT
    assert meta["stoi"]["\n"] == lib.token_to_id("Ċ") and meta["stoi"][" the"] < meta["vocab_size"]
    json.dumps(HfTokenizer(str(files["bytelevel"]), eot=EOT).describe())  # JSON-able


def test_metaspace_itos_keeps_the_spaces(files):
    tok = HfTokenizer(str(files["metaspace"]), eot="</s>")
    itos = tok.meta()["itos"]
    text = "The king and the queen were there.\nHe is not one"
    ids = tok.encode(text).tolist()
    assert "".join(itos[i] for i in ids).lstrip(" ") == tok.decode(ids)
    assert itos[tok.eot_id] == "</s>"


def test_pickles_without_the_loaded_tokenizer_and_reloads(tmp_path, files):
    tj = tmp_path / "t.json"
    tj.write_bytes(files["bytelevel"].read_bytes())
    tok = HfTokenizer(str(tj), eot=EOT)
    text = corpus("pickle", 20)
    blob = pickle.dumps(tok)
    assert len(blob) < 2000  # a path, a hash and a few fields: no vocabulary inside
    hf._cache.clear()  # as in a fresh worker process
    again = pickle.loads(blob)
    assert again._tok is None
    assert again.encode(text).tolist() == tok.encode(text).tolist()
    assert again.describe() == tok.describe() and again.cut_at == tok.cut_at == CUT_AT
    # in a worker, a tokenizer.json that changed since the run started is refused
    hf._cache.clear()
    tj.write_bytes(files["llama3"].read_bytes())
    with pytest.raises(UserError, match="changed"):
        pickle.loads(blob).encode("x")


# --- errors -------------------------------------------------------------------------------


def test_eot_not_in_the_vocabulary(tmp_path, files):
    src = tmp_path / "c.txt"
    src.write_text("hello\n" * 10)
    r = run_cli("source=file", f"source.path={src}", "tokenizer=hf",
                f"tokenizer.path={files['bytelevel']}", 'tokenizer.eot="</s>"', "out_dir=o",
                cwd=tmp_path)  # fmt: skip
    assert_one_line_error(r, "tokenizer.eot='</s>'", "not in the vocabulary", EOT)
    assert not (tmp_path / "o").exists()
    with pytest.raises(UserError, match="not an id"):
        HfTokenizer(str(files["bytelevel"]), eot=50256)


@pytest.mark.parametrize(
    "case", ["missing", "not json", "json, not a tokenizer", "folder", "unset"]
)
def test_bad_path_is_one_line(tmp_path, case):
    src = tmp_path / "c.txt"
    src.write_text("hello\n" * 10)
    if case == "missing":
        arg, fragments = "tokenizer.path=nope.json", ["tokenizer.path=nope.json", "no such file"]
    elif case == "not json":
        (tmp_path / "bad.json").write_text("this is not json\n")
        arg, fragments = "tokenizer.path=bad.json", ["bad.json", "not a Hugging Face tokenizer"]
    elif case == "json, not a tokenizer":
        (tmp_path / "bad.json").write_text('{"vocab": {"a": 0}}')
        arg, fragments = "tokenizer.path=bad.json", ["bad.json", "not a Hugging Face tokenizer"]
    elif case == "folder":
        (tmp_path / "model").mkdir()
        arg, fragments = "tokenizer.path=model", ["tokenizer.path=model", "folder"]
    else:
        arg, fragments = "quiet=false", ["tokenizer.path"]
    r = run_cli("source=file", f"source.path={src}", "tokenizer=hf", arg, "out_dir=o", cwd=tmp_path)
    assert_one_line_error(r, *fragments)
    assert not (tmp_path / "o").exists()


def test_without_the_library_the_error_says_what_to_install(files, monkeypatch):
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # import tokenizers -> ImportError
    node = compose("tokenizer=hf", f"tokenizer.path={files['bytelevel']}").tokenizer
    with pytest.raises(UserError, match=re.escape("pip install 'corpusprep[hf]'")):
        build(node, "tokenizer")


def test_corpusprep_does_not_import_tokenizers():
    code = (
        "import sys, corpusprep.app, corpusprep.prepare, corpusprep.tokenizers.hf\n"
        "assert 'tokenizers' not in sys.modules, 'tokenizers imported'\n"
    )
    env_path = str(REPO)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={"PYTHONPATH": env_path, "PATH": ""})  # fmt: skip
    assert r.returncode == 0, r.stderr


# --- the cut rule: when it applies, and the proof that it is safe --------------------------


def spec_of(tok) -> dict:
    return json.loads(tok.to_str())


def test_cut_rule_is_conservative(files):
    base = spec_of(library(files["bytelevel"]))
    assert cut_rule(base)[0] == CUT_AT
    assert cut_rule(spec_of(library(files["llama3"])))[0] == CUT_AT
    assert cut_rule(spec_of(library(files["metaspace"])))[0] == NOWHERE

    def variant(**changes):
        spec = json.loads(json.dumps(base))
        for dotted, value in changes.items():
            node, *path = dotted.split("__")
            target = spec
            for key in [node, *path][:-1]:
                target = target[key]
            target[[node, *path][-1]] = value
        return cut_rule(spec)[0]

    assert variant(normalizer={"type": "NFC"}) == NOWHERE
    assert variant(pre_tokenizer__add_prefix_space=True) == NOWHERE
    assert variant(pre_tokenizer__use_regex=False) == NOWHERE  # splits nothing
    assert variant(pre_tokenizer={"type": "Whitespace"}) == NOWHERE
    assert variant(model__dropout=0.1) == NOWHERE
    assert variant(model__type="WordPiece") == NOWHERE
    newline_token = {"id": 999, "content": "a\nb", "lstrip": False}
    assert variant(added_tokens=[*base["added_tokens"], newline_token]) == NOWHERE
    lstrip_token = {"id": 999, "content": "Hello", "lstrip": True}
    assert variant(added_tokens=[*base["added_tokens"], lstrip_token]) == NOWHERE
    split = {"type": "Split", "pattern": {"Regex": r"\s+|\S+"}, "behavior": "Isolated",
             "invert": False}  # fmt: skip
    seq = {"type": "Sequence", "pretokenizers": [split, base["pre_tokenizer"]]}
    assert variant(pre_tokenizer=seq) == NOWHERE
    split["pattern"] = {"Regex": PROVEN_PATTERNS["qwen2"]}
    assert variant(pre_tokenizer=seq) == CUT_AT
    no_regex = {**base["pre_tokenizer"], "use_regex": False}
    seq["pretokenizers"] = [no_regex, split]  # the Split would see byte-mapped text
    assert variant(pre_tokenizer=seq) == NOWHERE
    seq["pretokenizers"] = [split, no_regex]  # Llama-3's order
    assert variant(pre_tokenizer=seq) == CUT_AT
    split["behavior"] = "Removed"
    assert variant(pre_tokenizer=seq) == NOWHERE


PRETOKENIZERS = {
    **{
        name: lambda p=p: pre_tokenizers.Split(Regex(p), behavior="isolated")
        for name, p in PROVEN_PATTERNS.items()
    },  # fmt: skip
    "ByteLevel(use_regex)": lambda: pre_tokenizers.ByteLevel(add_prefix_space=False),
}


@pytest.mark.parametrize("name", sorted(PRETOKENIZERS))
def test_every_cut_keeps_the_pretokens(name):
    """With the library's own regex engine: the pre-tokens of the pieces, joined, are
    those of the whole text, at every cut CUT_AT allows."""
    pre = PRETOKENIZERS[name]()
    rng = random.Random(name)
    checked = 0
    for _ in range(1500):
        text = adversarial(rng, rng.randint(2, 120))
        whole = [s for s, _ in pre.pre_tokenize_str(text)]
        for c in cuts(text):
            left = [s for s, _ in pre.pre_tokenize_str(text[:c])]
            assert left + [s for s, _ in pre.pre_tokenize_str(text[c:])] == whole, (text, c)
            checked += 1
    assert checked > 1000


@pytest.mark.parametrize("name", ["bytelevel", "llama3", "stripping"])
def test_ids_of_pieces_cut_at_every_cut_equal_the_whole(files, name, monkeypatch):
    tok = HfTokenizer(str(files[name]), eot=EOT)
    lib = library(files[name])
    assert tok.cut_at == CUT_AT
    rng = random.Random(name)
    checked = 0
    for _ in range(600):
        text = adversarial(rng, rng.randint(2, 200))
        at = cuts(text)
        pieces = [text[a:b] for a, b in zip([0, *at], [*at, len(text)])]
        got = [i for p in pieces for i in lib.encode(p, add_special_tokens=False).ids]
        assert got == lib.encode(text, add_special_tokens=False).ids, (text, at)
        checked += len(at)
    assert checked > 500
    # and encode_pieces, cutting at every chance, from pieces split anywhere
    monkeypatch.setattr(hf, "MIN_SEGMENT", 1)
    for _ in range(40):
        text = corpus(str(rng.random()), 5)
        at = sorted(rng.sample(range(len(text) + 1), min(len(text), 30)))
        pieces = [text[a:b] for a, b in zip([0, *at], [*at, len(text)])]
        got = np.concatenate([np.zeros(0, np.uint32), *tok.encode_pieces(pieces)])
        assert got.tolist() == lib.encode(text, add_special_tokens=False).ids


def test_the_check_catches_an_unsafe_rule(files):
    """Control: the same comparison rejects cutting after every newline."""
    lib = library(files["bytelevel"])
    rng = random.Random(0)
    for _ in range(2000):
        text = adversarial(rng, rng.randint(2, 120))
        at = [m.end() for m in re.finditer("\n", text)]
        pieces = [text[a:b] for a, b in zip([0, *at], [*at, len(text)])]
        got = [i for p in pieces for i in lib.encode(p, add_special_tokens=False).ids]
        if got != lib.encode(text, add_special_tokens=False).ids:
            return
    pytest.fail("the naive rule was never caught: the check has no teeth")
