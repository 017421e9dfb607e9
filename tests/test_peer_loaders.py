"""Folders the peers' own loaders read without surprises (issue 11).

Each peer's loader is reimplemented here from its published code, never from corpusprep's:
build-nanogpt's train_gpt2.py DataLoaderLite (every file of the folder whose name contains
the split, np.load), llm.c's dataloader.h (a glob, then each file's header checked), nanoGPT's
train.py (vocab_size from meta.pkl, else 50,304) and sample.py (stoi/itos from meta.pkl, else
tiktoken gpt2); and Hugging Face `tokenizers`' own Tokenizer.encode for tokenizer=hf.
"""

from __future__ import annotations

import glob
import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
from helpers import assert_one_line_error, compose, run_cli
from nanogpt_reference import prepare_bpe

import corpusprep
from corpusprep.prepare import prepare

# --- the peers' loaders, from their published code ------------------------------------------


def build_nanogpt_shards(data_root: Path, split: str) -> list[str]:
    """build-nanogpt train_gpt2.py, DataLoaderLite.__init__."""
    assert split in {"train", "val"}
    shards = os.listdir(data_root)
    shards = [s for s in shards if split in s]
    shards = sorted(shards)
    shards = [os.path.join(data_root, s) for s in shards]
    assert len(shards) > 0, f"no shards found for split {split}"
    return shards


def build_nanogpt_load_tokens(filename: str) -> np.ndarray:
    """build-nanogpt train_gpt2.py, load_tokens (torch.tensor left out)."""
    npt = np.load(filename)
    npt = npt.astype(np.int32)  # added after video
    return npt


def llmc_shards(pattern: str) -> list[np.ndarray]:
    """llm.c dataloader.h: glob(pattern), then dataloader_load_shard_ on every match (magic
    20240520, version 1, file size = 256 int32 + ntok uint16), its tokens."""
    matches = sorted(glob.glob(pattern))
    assert matches, f"Error: no files found matching the pattern: {pattern}"
    out = []
    for filename in matches:
        with open(filename, "rb") as f:
            header = np.frombuffer(f.read(256 * 4), dtype="<i4")
            assert header[0] == 20240520, f"{filename}: Bad magic in the data file"
            assert header[1] == 1, f"{filename}: Bad version in data file"
            ntok = int(header[2])
            assert ntok > 0
            assert os.path.getsize(filename) == 256 * 4 + ntok * 2, "file size is not as expected"
            out.append(np.frombuffer(f.read(), dtype="<u2"))
    return out


def nanogpt_train_vocab_size(data_dir: Path) -> int:
    """nanoGPT train.py: meta_vocab_size from meta.pkl, else GPT-2's 50304 (padded)."""
    meta_path = os.path.join(data_dir, "meta.pkl")
    meta_vocab_size = None
    if os.path.exists(meta_path):
        with open(meta_path, "rb") as f:
            meta = pickle.load(f)
        meta_vocab_size = meta["vocab_size"]
    return meta_vocab_size if meta_vocab_size is not None else 50304


def nanogpt_sample_codec(data_dir: Path):
    """nanoGPT sample.py: encode/decode from meta.pkl's stoi/itos, else tiktoken gpt2."""
    meta_path = os.path.join(data_dir, "meta.pkl")
    if os.path.exists(meta_path):
        with open(meta_path, "rb") as f:
            meta = pickle.load(f)
        stoi, itos = meta["stoi"], meta["itos"]
        return (lambda s: [stoi[c] for c in s]), (lambda ids: "".join([itos[i] for i in ids]))
    import tiktoken

    enc = tiktoken.get_encoding("gpt2")
    return (lambda s: enc.encode(s, allowed_special={"<|endoftext|>"})), enc.decode


# --- runs -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """A corpus of 30 documents, one file each."""
    folder = tmp_path_factory.mktemp("peers") / "corpus"
    folder.mkdir()
    for i in range(30):
        text = f"Document {i}: the king and the queen, {i * 7} times.\n" * (20 + 3 * i)
        (folder / f"d{i:02d}.txt").write_text(text, encoding="utf-8")
    return folder


def run(corpus: Path, out: Path, *extra: str) -> dict:
    return prepare(compose("source=files", f"source.glob={corpus}/*.txt", f"out_dir={out}",
                           "quiet=true", "tokenizer=byte", *extra))  # fmt: skip


def splits(out: Path) -> dict[str, np.ndarray]:
    ds = corpusprep.load(out)
    return {"train": np.asarray(ds.train[:]), "val": np.asarray(ds.val[:])}


# --- 1. the document index is where no loader finds it ---------------------------------------


@pytest.mark.parametrize("name", ["docs", "shakespeare", "Train_Val"])
def test_build_nanogpt_loader_reads_a_folder_of_documents(corpus, tmp_path, name):
    out = tmp_path / "out"
    run(corpus, out, "format=npy", "shard_tokens=3000", f"name={name}")
    want = splits(out)
    for split in ("train", "val"):
        files = build_nanogpt_shards(out, split)
        tokens = [build_nanogpt_load_tokens(f) for f in files]  # np.load of every file it picks
        assert len(files) > 1 or split == "val"
        assert np.array_equal(np.concatenate(tokens), want[split].astype(np.int32)), split
    assert corpusprep.load(out).docs("train") is not None  # the index is still there


@pytest.mark.parametrize("name", ["train", "my_train_set", "val", "interval", "train_val"])
def test_npy_refuses_a_name_that_would_mix_the_splits(corpus, tmp_path, name):
    r = run_cli("source=files", f"source.glob={corpus}/*.txt", "tokenizer=byte", "format=npy",
                f"name={name}", "out_dir=o", cwd=tmp_path)  # fmt: skip
    assert_one_line_error(r, f"name={name}:", "build-nanogpt", "give a name without", "e.g. name=")
    assert not (tmp_path / "o").exists()
    fix = r.stderr.strip().rsplit("e.g. name=", 1)[1]
    assert "train" not in fix and "val" not in fix


def test_npy_refuses_a_split_word_in_the_input_file_name(tmp_path):
    src = tmp_path / "train.txt"  # the name defaults to the input's stem
    src.write_text("some text\n" * 200)
    r = run_cli("source=file", f"source.path={src}", "format=npy", "out_dir=o", cwd=tmp_path)
    assert_one_line_error(r, "name=train:", "e.g. name=corpus")


def test_llmc_globs_read_a_folder_of_documents(corpus, tmp_path):
    # a split word in the name is fine here: llm.c's -i/-j globs never mix the splits
    for name in ("docs", "interval", "my_train_set"):
        out = tmp_path / name
        run(corpus, out, "format=llmc", "shard_tokens=3000", f"name={name}")
        want = splits(out)
        globs = {side: [f"{out}/{name}_{side}_*.bin"] for side in ("train", "val")}
        if "train" not in name and "val" not in name:  # looser globs, as users write them
            for side in globs:
                globs[side] += [f"{out}/*{side}*.bin", f"{out}/*_{side}_*.bin"]
        for side, patterns in globs.items():
            for pattern in patterns:
                assert np.array_equal(np.concatenate(llmc_shards(pattern)), want[side]), pattern


def test_every_format_keeps_the_index_in_doc_index(corpus, tmp_path):
    for fmt in ("nanogpt", "llmc", "npy"):
        out = tmp_path / fmt
        m = run(corpus, out, f"format={fmt}", "name=docs")
        assert {"doc_index/train.docs.bin", "doc_index/val.docs.bin"} <= set(m["files"])
        assert not [p for p in out.iterdir() if p.name.endswith(".docs.bin")]
        ds = corpusprep.load(out)
        for side in ("train", "val"):
            starts = np.fromfile(out / "doc_index" / f"{side}.docs.bin", np.uint64)
            assert np.array_equal(ds.docs(side), starts) and len(starts) == m["documents"][side]
    # a second run of the same settings is up to date: the subfolder is checked, not redone
    again = run(corpus, tmp_path / "npy", "format=npy", "name=docs")
    assert again.get("skipped")


def test_load_reads_a_folder_made_before_and_a_new_run_tidies_it(corpus, tmp_path):
    out = tmp_path / "out"
    run(corpus, out, "name=docs")
    before = {side: corpusprep.load(out).docs(side).copy() for side in ("train", "val")}
    # the old layout: the index next to train.bin, listed so in the manifest
    manifest = json.loads((out / "manifest.json").read_text())
    for side in ("train", "val"):
        (out / "doc_index" / f"{side}.docs.bin").rename(out / f"{side}.docs.bin")
        for key in ("files", "checksums"):
            manifest[key][f"{side}.docs.bin"] = manifest[key].pop(f"doc_index/{side}.docs.bin")
    (out / "doc_index").rmdir()
    (out / "manifest.json").write_text(json.dumps(manifest))
    for side in ("train", "val"):
        assert np.array_equal(corpusprep.load(out).docs(side), before[side])
    run(corpus, out, "name=docs", "force=true")  # the old files go; the new place is used
    assert not (out / "train.docs.bin").exists()
    assert (out / "doc_index" / "train.docs.bin").is_file()
    one = tmp_path / "one.txt"
    one.write_text("one text, no document index\n" * 300)
    prepare(compose("source=file", f"source.path={one}", f"out_dir={out}", "quiet=true"))
    assert not (out / "doc_index").exists()  # nothing in it any more: the folder goes too
    assert corpusprep.load(out).docs("train") is None


def test_a_symlink_where_the_index_goes_is_refused(corpus, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "doc_index").symlink_to(elsewhere)
    r = run_cli("source=files", f"source.glob={corpus}/*.txt", "tokenizer=byte", "out_dir=o",
                cwd=tmp_path)  # fmt: skip
    assert_one_line_error(r, "doc_index", "not a folder", "remove it")
    assert list(elsewhere.iterdir()) == []


# --- 2. nanoGPT's train.py and sample.py ------------------------------------------------------


def test_dataset_shakespeare_is_nanogpts_own_folder(tmp_path, seeded_cache, tiktoken_cache,
                                                    shakespeare):  # fmt: skip
    import tiktoken

    r = run_cli("dataset=shakespeare", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "data" / "shakespeare"
    ref = tmp_path / "ref"
    ref.mkdir()
    prepare_bpe(str(shakespeare), str(ref))  # data/shakespeare/prepare.py: no meta.pkl
    # nanoGPT's files, plus what corpusprep adds beside them (no loader reads these)
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "token_bytes.npy",
                                                     "train.bin", "val.bin"]  # fmt: skip
    for name in ("train.bin", "val.bin"):
        assert (out / name).read_bytes() == (ref / name).read_bytes()
    assert nanogpt_train_vocab_size(out) == nanogpt_train_vocab_size(ref) == 50304
    encode, decode = nanogpt_sample_codec(out)
    enc = tiktoken.get_encoding("gpt2")
    for prompt in ("\n", "ROMEO:", "Ça, naïve — 日本語 😀", "<|endoftext|>KING"):
        assert encode(prompt) == enc.encode(prompt, allowed_special={"<|endoftext|>"})
    assert encode("ROMEO:") == [33676, 4720, 25]
    text = shakespeare.read_text(encoding="utf-8")
    val = np.fromfile(out / "val.bin", np.uint16).tolist()
    assert decode(val) == text[int(len(text) * 0.9) :]
    ds = corpusprep.load(out)  # the manifest rebuilds the tokenizer: no meta.pkl needed
    assert ds.meta == {} and ds.tokenizer.encode("ROMEO:").tolist() == [33676, 4720, 25]
    r = run_cli("dataset=shakespeare", cwd=tmp_path)
    assert "up to date" in r.stdout  # a folder without meta.pkl is a finished one


PROMPTS = ("\n", "ROMEO:", "To be, or not to be", "naïve café")


def _check_sample_py(out: Path, own_ids, prompts=PROMPTS) -> None:
    """sample.py's meta path: each prompt decodes back to itself, and every character's
    entry is a token spelling it, the tokenizer's own id for it when that is one; U+FFFD
    only as the tokenizer's own (never a token holding part of a character)."""
    meta = pickle.loads((out / "meta.pkl").read_bytes())
    encode, decode = nanogpt_sample_codec(out)
    assert nanogpt_train_vocab_size(out) == meta["vocab_size"]
    for prompt in prompts:
        assert decode(encode(prompt)) == prompt, prompt
    for c, i in meta["stoi"].items():
        if len(c) == 1:
            assert meta["itos"][i] == c, c
            own = own_ids(c)
            if c == "\ufffd" or len(own) == 1 and meta["itos"][own[0]] == c:
                assert [i] == own, (c, i, own)


def test_sample_py_with_cl100k(tmp_path, tiktoken_cache, shakespeare):
    import tiktoken

    out = tmp_path / "out"
    prepare(compose("source=file", f"source.path={shakespeare}", f"out_dir={out}", "quiet=true",
                    "tokenizer=tiktoken", "tokenizer.encoding=cl100k_base"))  # fmt: skip
    enc = tiktoken.get_encoding("cl100k_base")
    _check_sample_py(out, enc.encode_ordinary)
    encode, _ = nanogpt_sample_codec(out)
    assert encode("\ufffd") == enc.encode_ordinary("\ufffd")  # the real U+FFFD, one token
    with pytest.raises(KeyError):
        encode("語")  # held only as several byte tokens: no entry (README)


def test_sample_py_with_an_hf_tokenizer(tmp_path, hf_files):
    lib = tokenizers_lib().Tokenizer.from_file(str(hf_files["plain"]))
    src = tmp_path / "t.txt"
    src.write_text("To be, or not to be: naïve café.\n" * 300, encoding="utf-8")
    out = tmp_path / "out"
    prepare(compose("source=file", f"source.path={src}", f"out_dir={out}", "quiet=true",
                    "tokenizer=hf", f"tokenizer.path={hf_files['plain']}"))  # fmt: skip
    own = lambda c: lib.encode(c, add_special_tokens=False).ids  # noqa: E731
    _check_sample_py(out, own, PROMPTS[:3])  # a small vocabulary: "ï" only inside tokens


# --- 3. tokenizer=hf: the tokenizer's own special tokens, per document ------------------------


def tokenizers_lib():
    return pytest.importorskip("tokenizers", reason="tokenizer=hf needs pip install '.[hf]'")


@pytest.fixture(scope="module")
def hf_files(tmp_path_factory) -> dict[str, Path]:
    """ByteLevel BPE tokenizer.json files: without a post-processor, and with Llama-style
    TemplateProcessing ("<s> $A") and BOS + EOS ("<s> $A </s>")."""
    lib = tokenizers_lib()
    from tokenizers import decoders, models, pre_tokenizers, processors, trainers

    tok = lib.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<unk>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)  # fmt: skip
    lines = [f"Document {i}: the king and the queen, naïve café.\n" for i in range(200)]
    tok.train_from_iterator(lines, trainer)
    d = tmp_path_factory.mktemp("hf")
    out = {"plain": d / "plain.json"}
    tok.save(str(out["plain"]))
    for key, single in (("bos", "<s> $A"), ("bos_eos", "<s> $A </s>")):
        tok.post_processor = processors.TemplateProcessing(
            single=single, special_tokens=[("<s>", 1), ("</s>", 2)]
        )
        out[key] = d / f"{key}.json"
        tok.save(str(out[key]))
    return out


def _documents(path: Path) -> list[str]:
    return [json.loads(line)["text"] for line in path.read_text(encoding="utf-8").splitlines()]


def _match_documents(out: Path, want: list[list[int]]) -> None:
    """Each document's ids, read through the document index, are `want`'s, in corpus order
    on each side (whichever side each went to)."""
    ds = corpusprep.load(out)
    slices = {}
    for side, ids in ds.splits():
        bounds = [*ds.docs(side).tolist(), len(ids)]
        slices[side] = [np.asarray(ids[a:b]).tolist() for a, b in zip(bounds, bounds[1:])]
    at = {"train": 0, "val": 0}
    for i, doc in enumerate(want):
        side = next((s for s in at if at[s] < len(slices[s]) and slices[s][at[s]] == doc), None)
        assert side is not None, f"document {i}: {doc[:8]}... is not next on either side"
        at[side] += 1
    assert at == {s: len(v) for s, v in slices.items()}


@pytest.mark.parametrize("key", ["bos", "bos_eos", "plain"])
def test_hf_documents_are_encoded_as_tokenizers_encode_does(tmp_path, hf_files, key):
    lib = tokenizers_lib().Tokenizer.from_file(str(hf_files[key]))
    src = tmp_path / "docs.jsonl"
    docs = [f"Document {i}: the king, {'and the queen ' * (i % 7)}naïve café." for i in range(60)]
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in docs), encoding="utf-8")
    args = ["source=file", f"source.path={src}", "tokenizer=hf", f"tokenizer.path={hf_files[key]}",
            "eot=none", "executor.workers=2", "shard_bytes=1000"]  # fmt: skip
    r = run_cli(*args, "out_dir=auto", cwd=tmp_path)  # the default: as tok.encode(doc)
    assert r.returncode == 0, r.stderr
    _match_documents(tmp_path / "auto", [lib.encode(t).ids for t in _documents(src)])
    line = next(x for x in r.stdout.splitlines() if x.strip().startswith("tokenizer"))
    said = {"bos": "<s> before each document", "bos_eos": "<s> before and </s> after each"}
    assert said[key] in line if key in said else line.endswith("dtype uint16"), line
    r = run_cli(*args, "tokenizer.add_special_tokens=false", "out_dir=none", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    plain = [lib.encode(t, add_special_tokens=False).ids for t in _documents(src)]
    _match_documents(tmp_path / "none", plain)
    if key != "plain":
        assert "adds nothing (tokenizer.add_special_tokens=false; encode() adds <s>" in r.stdout


def test_hf_specials_go_around_a_document_never_inside_it(tmp_path, hf_files):
    """One long text cut into many shards, split by position: <s> once at its start, </s>
    once at its end, none at any cut."""
    lib = tokenizers_lib().Tokenizer.from_file(str(hf_files["bos_eos"]))
    src = tmp_path / "long.txt"
    src.write_text("".join(f"Line {i}: the king and the queen.\n" for i in range(3000)))
    out = tmp_path / "out"
    m = prepare(compose("source=file", f"source.path={src}", f"out_dir={out}", "quiet=true",
                        "tokenizer=hf", f"tokenizer.path={hf_files['bos_eos']}",
                        "shard_bytes=4000", "executor.workers=2"))  # fmt: skip
    assert m["shards"]["count"] > 10
    text = src.read_text()
    cut = int(len(text) * 0.9)
    train = np.fromfile(out / "train.bin", np.uint16).tolist()
    val = np.fromfile(out / "val.bin", np.uint16).tolist()
    assert train == [1] + lib.encode(text[:cut], add_special_tokens=False).ids
    assert val == lib.encode(text[cut:], add_special_tokens=False).ids + [2]
    assert m["tokenizer"]["document_specials"] == {"before": [1], "after": [2]}


def test_hf_add_special_tokens_must_be_a_bool(tmp_path, hf_files):
    src = tmp_path / "t.txt"
    src.write_text("some text\n" * 50)
    r = run_cli("source=file", f"source.path={src}", "tokenizer=hf",
                f"tokenizer.path={hf_files['bos']}", "tokenizer.add_special_tokens=maybe",
                cwd=tmp_path)  # fmt: skip
    assert_one_line_error(r, "tokenizer.add_special_tokens=maybe", "true", "false")
