"""tokenizer=sentencepiece (issue 14): a .model file, or one trained on the corpus as
llama2.c's train_vocab does (lossless: remove_extra_whitespaces off, as Llama 2's model).

- trained on tiny shakespeare: the same files for 1 or 2 workers, the folder verifies,
  and sentencepiece itself, loading the saved tokenizer.model, gives train.bin's and
  val.bin's ids (<s> first, as llama2.c's pretokenize: bos=True, eos=False);
- documents: each one is <s> + sentencepiece's ids for it, on mixed text;
- a given model file encodes exactly as sentencepiece does, and the folder keeps a copy;
- mistakes are one line.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import REPO, assert_one_line_error, run_cli, same_files

spm = pytest.importorskip("sentencepiece")

FILES = ("train.bin", "val.bin", "meta.pkl", "tokenizer.model")
MIXED = [
    "Hello, World!\nSecond line\n\n",
    "emoji 😀🎉 and CJK 中文字符 日本語のテキスト 한국어",
    "    indented   with    runs\t\t\tof whitespace      \n\n\n\nx",
    "a" * 3000 + " " + "b" * 2000,
    "def f(x):\n    return x ** 2  # it's, we'll DON'T",
    " leading space, trailing space ",
]


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sp")
    env = {"CORPUSPREP_CACHE_DIR": str(root / "cache")}
    outs = {}
    for name, extra in {"one": ["executor.workers=1"],
                        "two": ["executor.workers=2", "shard_bytes=65536"]}.items():  # fmt: skip
        out = outs[name] = root / name
        done = run_cli("dataset=shakespeare_char", "tokenizer=sentencepiece",
                       "tokenizer.vocab_size=1024", *extra, f"out_dir={out}", "quiet=true",
                       cwd=root, env=env)  # fmt: skip
        assert done.returncode == 0, done.stderr
    return outs


# an attack: the up-to-date check took the untrained tokenizer's identity, the manifest the
# trained one's: a trained folder was never up to date, and the run said "made from other
# input" with the same sha256
def test_a_trained_folder_is_up_to_date_on_the_same_command(made):
    out = made["one"]
    env = {"CORPUSPREP_CACHE_DIR": str(out.parent / "cache")}
    again = run_cli("dataset=shakespeare_char", "tokenizer=sentencepiece",
                    "tokenizer.vocab_size=1024", "executor.workers=1", f"out_dir={out}",
                    cwd=out.parent, env=env)  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert "up to date" in again.stdout and "replacing" not in again.stderr


def test_the_same_files_and_sentencepieces_own_ids(made, shakespeare):
    same_files(made["one"], made["two"], FILES)
    out = made["one"]
    sp = spm.SentencePieceProcessor(model_file=str(out / "tokenizer.model"))
    assert sp.get_piece_size() == 1024
    text = shakespeare.read_text(encoding="utf-8")
    n = int(len(text) * 0.9)
    train = np.fromfile(out / "train.bin", dtype=np.uint16).tolist()
    val = np.fromfile(out / "val.bin", dtype=np.uint16).tolist()
    assert train == [sp.bos_id(), *sp.encode(text[:n])]
    assert val == sp.encode(text[n:])
    assert sp.decode(val) == text[n:]  # lossless
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["vocab_size"] == 1024 and manifest["tokenizer"]["kind"] == "sentencepiece"
    # "two" encoded the one text in many shards, cut after newlines (the sample unchanged)
    two = json.loads((made["two"] / "manifest.json").read_text())
    assert two["shards"]["count"] > 10 and two["tokenizer"]["cuts"].startswith("after a newline")
    assert manifest["checksums"]["tokenizer.model"] == manifest["tokenizer"]["sha256"]
    # token_bytes: "▁" is a space, so val counts one more byte: the dummy prefix
    sizes = np.load(out / "token_bytes.npy")
    assert int(sizes[val].sum()) == len(text[n:].encode()) + 1 == manifest["val_bytes"] + 0
    assert sizes[sp.bos_id()] == 0 and sizes[sp.unk_id()] == 0


def test_reuse_cuts_as_the_model_itself(made, tmp_path):
    """tokenizer=reuse of a sentencepiece folder encodes a text cut into shards exactly as
    the run that made it (reuse passes the pieces after a cut on as they are)."""
    done = run_cli("dataset=shakespeare_char", "tokenizer=reuse", f"tokenizer.dir={made['one']}",
                   "shard_bytes=100000", "executor.workers=2", "out_dir=again", "quiet=true",
                   cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "again" / "manifest.json").read_text())["shards"]["count"] > 5
    same_files(made["one"], tmp_path / "again", ("train.bin", "val.bin", "tokenizer.model"))


def test_the_folder_verifies_and_loads(made):
    import corpusprep

    done = subprocess.run([sys.executable, "-m", "corpusprep.inspect", str(made["two"]),
                           "--verify"], capture_output=True, text=True, cwd=REPO)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "verified" in done.stdout
    ds = corpusprep.load(made["two"])
    assert ds.tokenizer.decode(ds.val[:100].tolist()) == ds.tokenizer._sp().decode(
        ds.val[:100].tolist()
    )


def test_documents_get_bos_and_sentencepieces_ids(made, tmp_path):
    import corpusprep

    docs = [f"{i}: {MIXED[i % len(MIXED)]}" for i in range(60)]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    model = made["one"] / "tokenizer.model"
    done = run_cli("source=file", "source.path=d.jsonl", "tokenizer=sentencepiece",
                   f"tokenizer.model={model}", "out_dir=out", "quiet=true",
                   cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    sp = spm.SentencePieceProcessor(model_file=str(model))
    ds = corpusprep.load(tmp_path / "out")
    expected = sorted(tuple([sp.bos_id(), *sp.encode(d)]) for d in docs)
    got = []
    for side in ("train", "val"):
        ids, starts = getattr(ds, side), getattr(ds, f"{side}_docs")
        ends = [*starts[1:].tolist(), len(ids)]
        got += [tuple(ids[a:b].tolist()) for a, b in zip(starts.tolist(), ends)]
    assert sorted(got) == expected
    assert (tmp_path / "out" / "tokenizer.model").read_bytes() == model.read_bytes()
    verified = subprocess.run([sys.executable, "-m", "corpusprep.inspect", "out", "--verify"],
                              capture_output=True, text=True, cwd=tmp_path)  # fmt: skip
    assert verified.returncode == 0, verified.stderr
    # the folder stands on its own: the model it was given may go
    copy = tmp_path / "given.model"
    shutil.copyfile(model, copy)
    again = run_cli("source=file", "source.path=d.jsonl", "tokenizer=sentencepiece",
                    f"tokenizer.model={copy}", "out_dir=out2", "quiet=true",
                    cwd=tmp_path)  # fmt: skip
    assert again.returncode == 0, again.stderr
    copy.unlink()
    assert corpusprep.load(tmp_path / "out2").tokenizer.vocab_size == 1024


def test_a_folder_with_an_empty_document_verifies(made, tmp_path):
    """An empty JSON text is a document of <s> alone: sentencepiece gives no dummy prefix
    for no text. Before, --verify expected the prefix's space and failed at its byte 0."""
    docs = ["", *(f"{i}: {MIXED[i % len(MIXED)]}" for i in range(20)), ""]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    done = run_cli("source=file", "source.path=d.jsonl", "tokenizer=sentencepiece",
                   f"tokenizer.model={made['one'] / 'tokenizer.model'}", "out_dir=out",
                   "quiet=true", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    verified = subprocess.run([sys.executable, "-m", "corpusprep.inspect", "out", "--verify"],
                              capture_output=True, text=True, cwd=tmp_path)  # fmt: skip
    assert verified.returncode == 0, verified.stderr


@pytest.mark.parametrize("collapse", [False, True], ids=["llama2-flags", "collapsing-spaces"])
def test_a_given_model_cut_into_shards(tmp_path, shakespeare, collapse):
    """A given model (Llama 2's normalizer flags; or one that collapses runs of spaces) on
    one text cut into shards, val beginning right at a shard's start: each side is
    sentencepiece's ids for its text alone (nanoGPT's split), whatever shards and workers."""
    import io

    from corpusprep.tokenizers.sentencepiece import TRAINING

    text = shakespeare.read_text(encoding="utf-8")[:300_000]
    lines = [line for line in text.split("\n") if line]
    written = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=written,
                                   **{**TRAINING, "remove_extra_whitespaces": collapse,
                                      "vocab_size": 500, "num_threads": 1})  # fmt: skip
    (tmp_path / "llama.model").write_bytes(written.getvalue())
    # 110 ASCII lines of 64 bytes: shard_bytes=640 cuts after every 11th, split=0.5 at the 55th
    line = "Line {:03d}:  with   runs  of spaces,\ttabs and {}"
    text = "".join(line.format(i, "x" * (i % 7)).ljust(63, ".") + "\n" for i in range(110))
    (tmp_path / "t.txt").write_text(text)
    outs = {}
    for name, extra in {"cut": ["shard_bytes=640", "executor.workers=2"],
                        "whole": ["executor.workers=1"]}.items():  # fmt: skip
        done = run_cli("source=file", "source.path=t.txt", "tokenizer=sentencepiece",
                       "tokenizer.model=llama.model", "split=0.5", *extra, f"out_dir={name}",
                       "quiet=true", cwd=tmp_path)  # fmt: skip
        assert done.returncode == 0, done.stderr
        outs[name] = tmp_path / name
    assert json.loads((outs["cut"] / "manifest.json").read_text())["shards"]["count"] == 10
    same_files(outs["cut"], outs["whole"], ("train.bin", "val.bin"))
    sp = spm.SentencePieceProcessor(model_file=str(tmp_path / "llama.model"))
    n = len(text) // 2
    assert n == 55 * 64
    train = np.fromfile(outs["cut"] / "train.bin", dtype=np.uint16).tolist()
    val = np.fromfile(outs["cut"] / "val.bin", dtype=np.uint16).tolist()
    assert train == [sp.bos_id(), *sp.encode(text[:n])]
    assert val == sp.encode(text[n:])
    if not collapse:  # lossless: decoding the ids gives the text back
        verified = subprocess.run([sys.executable, "-m", "corpusprep.inspect", "cut",
                                   "--verify"], capture_output=True, text=True,
                                  cwd=tmp_path)  # fmt: skip
        assert verified.returncode == 0, verified.stderr + verified.stdout


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("tokenizer.vocab_size=100", "tokenizer.vocab_size=100: a byte-fallback model needs"),
        # the trainer's int32: it failed after the scan with "cannot parse ... as int"
        ("tokenizer.vocab_size=2147483648", "tokenizer.vocab_size=2147483648: more than"),
        # a review: a model of more pieces than corpusprep takes was refused once trained
        ("tokenizer.vocab_size=2097153", "more than the 2,097,152 pieces corpusprep takes"),
        ("tokenizer.model=nowhere.model", "tokenizer.model=nowhere.model: no such file"),
        ("tokenizer.model=bad.model", "SentencePiece model (the tokenizer.model file spm_train"),
        # an attack: an empty file got sentencepiece's "Model is not initialized" and its
        # log lines; a FIFO was said to be no file at all
        ("tokenizer.model=empty.model", "tokenizer.model=empty.model: the file is empty"),
        ("tokenizer.model=fifo.model", "tokenizer.model=fifo.model: not a regular file"),
        ("eot=append", "use eot=none"),
    ],
)
def test_mistakes_get_one_line(tmp_path, override, fragment):
    (tmp_path / "bad.model").write_bytes(b"not a model at all")
    (tmp_path / "empty.model").write_bytes(b"")
    os.mkfifo(tmp_path / "fifo.model")
    (tmp_path / "docs.jsonl").write_text('{"text": "a b c"}\n{"text": "d e f"}\n' * 50)
    done = run_cli("source=file", "source.path=docs.jsonl", "tokenizer=sentencepiece",
                   "tokenizer.vocab_size=300", override, "out_dir=out",
                   cwd=tmp_path)  # fmt: skip
    assert_one_line_error(done, fragment)


def test_training_on_lines_all_too_long_says_what_works(tmp_path):
    # the trainer drops every line over max_sentence_length (64 KiB): it said "try another
    # tokenizer.vocab_size", which never helps
    words = ["the", "king", "and", "queen", "were", "there", "he", "is", "not", "one"]
    (tmp_path / "t.txt").write_text(" ".join(words[i * 7 % 10] for i in range(30_000)))
    done = run_cli("source=file", "source.path=t.txt", "tokenizer=sentencepiece",
                   "tokenizer.vocab_size=300", "out_dir=out", cwd=tmp_path)  # fmt: skip
    assert_one_line_error(done, "over the trainer's 65,536-byte limit", "put newlines")
    assert "try another tokenizer.vocab_size" not in done.stderr


def test_a_vocabulary_bigger_than_the_text_gives_names_the_size_that_works(tmp_path):
    """The newcomer attack: a small text and the default 4,096 pieces quoted the trainer's
    internals (INTERNAL: src/trainer_interface.cc(744) [(trainer_spec_.vocab_size()) ==
    ...]). The line says, in corpusprep's words, what the trainer allows, and that works."""
    words = ["the", "king", "and", "queen", "were", "there", "he", "is", "not", "one"]
    (tmp_path / "t.txt").write_text("\n".join(words[i * 7 % 10] * (i % 5 + 1)
                                               for i in range(3000)))  # fmt: skip
    _the_size_it_names_trains(tmp_path, 4096, "or less")


def test_a_vocabulary_smaller_than_the_texts_characters_names_the_size_that_works(tmp_path):
    """Found by an attack: a text of more distinct characters than the vocabulary holds
    quoted the trainer's internals, cut mid-word (INTERNAL: src/trainer_interface.cc(638)
    [...] Vocabulary size is smaller than required_chars. 300 vs 380. I). The line names
    the size the trainer needs, and that size works."""
    chars = [chr(0x4E00 + i) for i in range(120)]  # 120 CJK characters: more than 300 - 260
    lines = ["".join(chars[(i * 7 + j * 13) % 120] for j in range(60)) for i in range(300)]
    (tmp_path / "t.txt").write_text("\n".join(lines))
    _the_size_it_names_trains(tmp_path, 300, "or more")


def _the_size_it_names_trains(tmp_path, asked: int, bound: str) -> None:
    """tokenizer.vocab_size=`asked` on tmp_path/t.txt is one line in corpusprep's words
    naming a size (`bound`: "or less", "or more"), and a run with that size works."""
    args = ["source=file", "source.path=t.txt", "tokenizer=sentencepiece", "out_dir=out"]
    done = run_cli(*args, f"tokenizer.vocab_size={asked}", cwd=tmp_path)
    assert_one_line_error(done, f"tokenizer.vocab_size={asked}", bound)
    assert "INTERNAL" not in done.stderr and "trainer_interface" not in done.stderr
    size = re.search(rf"tokenizer.vocab_size=(\d+) {bound}", done.stderr).group(1)
    done = run_cli(*args, f"tokenizer.vocab_size={size}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr


def _with_pieces(model: bytes, count: int) -> bytes:
    """`model` with `count` more pieces (ModelProto field 1), appended on the wire."""
    import struct

    def varint(n: int) -> bytes:
        out = b""
        while n > 0x7F:
            out, n = out + bytes([n & 0x7F | 0x80]), n >> 7
        return out + bytes([n])

    def piece(text: bytes) -> bytes:
        message = b"\x0a" + varint(len(text)) + text + b"\x15" + struct.pack("<f", -1.0)
        return b"\x0a" + varint(len(message)) + message

    return model + b"".join(piece(b"zq%x" % i) for i in range(count))


# an attack: sentencepiece takes about 11 times a .model's size to load, and nothing
# bounded it (a 1 GB read): a 47 MB file of 3M pieces took 1.6 GB and 10 s before its
# meta.pkl was refused; now one line at once, for a given model and a reused folder's
@pytest.mark.parametrize("how", ["pieces", "bytes", "reused"])
def test_a_model_too_big_for_a_vocabulary_is_one_line_at_once(made, tmp_path, how):
    (tmp_path / "in.txt").write_text("hello world\n" * 10)
    model = (made["one"] / "tokenizer.model").read_bytes()
    if how == "bytes":  # sparse: read_regular refuses it by its size, unread
        (tmp_path / "x.model").write_bytes(model)
        os.truncate(tmp_path / "x.model", 65 << 20)
    else:
        (tmp_path / "x.model").write_bytes(_with_pieces(model, (1 << 21) + 1 - 1024))
    where = ["tokenizer=sentencepiece", "tokenizer.model=x.model"]
    if how == "reused":
        folder = shutil.copytree(made["one"], tmp_path / "a")
        shutil.copy(tmp_path / "x.model", folder / "tokenizer.model")
        manifest = json.loads((folder / "manifest.json").read_text())
        data = (folder / "tokenizer.model").read_bytes()
        manifest["tokenizer"]["sha256"] = __import__("hashlib").sha256(data).hexdigest()
        (folder / "manifest.json").write_text(json.dumps(manifest))
        where = ["tokenizer=reuse", "tokenizer.dir=a"]
    done = run_cli("source=file", "source.path=in.txt", *where, "out_dir=o", cwd=tmp_path,
                   timeout=60)  # fmt: skip
    says = "not a regular file of at most 64 MB" if how == "bytes" else "2,097,153 pieces"
    assert_one_line_error(done, "tokenizer.model", says)
    assert not (tmp_path / "o").exists()
