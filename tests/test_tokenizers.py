"""tiktoken BPE and byte level, end to end: nanoGPT-exact, dtype-safe, offline-clear."""

from __future__ import annotations

import json
import pickle
import random

import numpy as np
import pytest
from helpers import assert_one_line_error, compose, run_cli, same_files
from nanogpt_reference import prepare_bpe
from test_bpe_cuts import adversarial

from corpusprep.prepare import prepare

R50K_FILE = "0ea1e91bbb3a60f729a8dc8f777fd2fc07cd8df4"  # r50k_base.tiktoken in ../shared/data


def run(src, out, *overrides):
    return prepare(
        compose("source=file", f"source.path={src}", f"out_dir={out}", "quiet=true", *overrides)
    )


def test_dataset_shakespeare_is_nanogpt_exact(tmp_path, seeded_cache, tiktoken_cache, shakespeare):
    cwd = tmp_path / "work"
    cwd.mkdir()
    r = run_cli("dataset=shakespeare", cwd=cwd)
    assert r.returncode == 0, r.stderr
    out = cwd / "data" / "shakespeare"
    ref = tmp_path / "ref"
    ref.mkdir()
    prepare_bpe(str(shakespeare), str(ref))
    same_files(out, ref, ("train.bin", "val.bin"))
    m = json.loads((out / "manifest.json").read_text())
    assert m["tokens"] == {"train": 301_966, "val": 36_059}
    assert m["dtype"] == "uint16" and m["vocab_size"] == 50_257
    # nanoGPT's data/shakespeare has no meta.pkl: train.py and sample.py assume GPT-2
    # (tests/test_peer_loaders.py runs their logic on it)
    assert not (out / "meta.pkl").exists() and "meta.pkl" not in m["files"]
    assert m["tokenizer"]["special_tokens"] == {"<|endoftext|>": 50256}


@pytest.mark.parametrize("encoding", ["gpt2", "cl100k_base"])
@pytest.mark.parametrize("workers", [1, 2])
def test_sharded_bpe_equals_encoding_each_part_whole(tmp_path, tiktoken_cache, encoding, workers):
    import tiktoken

    rng = random.Random(encoding)
    text = "".join(adversarial(rng, 400) + "\nA line.\nAnother one\n" for _ in range(300))
    src = tmp_path / "adv.txt"
    src.write_bytes(text.encode("utf-8"))
    out = tmp_path / "out"
    m = run(src, out, "tokenizer=tiktoken", f"tokenizer.encoding={encoding}",
            "shard_bytes=2000", f"executor.workers={workers}")  # fmt: skip
    assert m["shards"]["count"] > 20
    data = src.read_text(encoding="utf-8")  # universal newlines, as nanoGPT reads
    n = len(data)
    enc = tiktoken.get_encoding(encoding)
    dtype = np.dtype(m["dtype"])
    for side, part in (("train", data[: int(n * 0.9)]), ("val", data[int(n * 0.9) :])):
        assert np.fromfile(out / f"{side}.bin", dtype).tolist() == enc.encode_ordinary(part)


def test_special_token_text_is_ordinary_text(tmp_path, tiktoken_cache):
    src = tmp_path / "s.txt"
    src.write_text("before <|endoftext|> after\n" * 50)
    out = tmp_path / "out"
    run(src, out, "tokenizer=tiktoken")
    assert 50256 not in np.fromfile(out / "train.bin", np.uint16)


def test_cl100k_picks_uint32_and_refuses_uint16(tmp_path, tiktoken_cache, shakespeare):
    m = run(shakespeare, tmp_path / "a", "tokenizer=tiktoken", "tokenizer.encoding=cl100k_base")
    assert m["dtype"] == "uint32" and m["vocab_size"] == 100_277
    assert "uint16" in m["nanogpt_note"]
    args = ["tokenizer=tiktoken", "tokenizer.encoding=cl100k_base", "dtype=uint16", "out_dir=b"]
    r = run_cli("source=file", f"source.path={shakespeare}", *args, cwd=tmp_path)
    assert_one_line_error(r, "dtype=uint16", "100,276", "uint32")
    assert not (tmp_path / "b").exists()


def test_a_ranks_file_works_offline_and_matches_the_named_encoding(
    tmp_path, tiktoken_cache, shakespeare
):  # noqa: E501
    ranks = tiktoken_cache / R50K_FILE
    a = run(shakespeare, tmp_path / "a", "tokenizer=tiktoken", "tokenizer.encoding=r50k_base",
            f"tokenizer.ranks_file={ranks}")  # fmt: skip
    run(shakespeare, tmp_path / "b", "tokenizer=tiktoken", "tokenizer.encoding=gpt2")
    same_files(tmp_path / "a", tmp_path / "b", ("train.bin", "val.bin"))
    assert a["tokenizer"]["ranks_sha256"] == (
        "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
    )
    # r50k_base.tiktoken is GPT-2's vocabulary: no meta.pkl, as with encoding=gpt2
    assert not (tmp_path / "a" / "meta.pkl").exists() and a["vocab_size"] == 50_257


def test_offline_without_the_files_is_one_clear_line(tmp_path, tiktoken_cache, shakespeare):
    # p50k_base is not in the offline cache; a dead local proxy keeps traffic on 127.0.0.1
    env = {"HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9", "NO_PROXY": ""}
    r = run_cli("source=file", f"source.path={shakespeare}", "tokenizer=tiktoken",
                "tokenizer.encoding=p50k_base", "out_dir=o", cwd=tmp_path, env=env)  # fmt: skip
    assert_one_line_error(r, "p50k_base", "TIKTOKEN_CACHE_DIR", "tokenizer.ranks_file")
    assert not (tmp_path / "o").exists()


def test_unknown_encoding_and_bad_ranks_file(tmp_path, tiktoken_cache, shakespeare):
    r = run_cli("source=file", f"source.path={shakespeare}", "tokenizer=tiktoken",
                "tokenizer.encoding=nope", cwd=tmp_path)  # fmt: skip
    assert_one_line_error(r, "tokenizer.encoding=nope", "cl100k_base")
    (tmp_path / "bad.tiktoken").write_text("not a ranks file\n")
    r = run_cli("source=file", f"source.path={shakespeare}", "tokenizer=tiktoken",
                "tokenizer.ranks_file=bad.tiktoken", cwd=tmp_path)  # fmt: skip
    assert_one_line_error(r, "bad.tiktoken", "line 1")


def test_byte_tokenizer_is_lossless(tmp_path):
    text = "héllo wörld 😀\r\nzweite Zeile\n日本語\n" * 300
    src = tmp_path / "u.txt"
    src.write_bytes(text.encode("utf-8"))
    out = tmp_path / "out"
    r = run_cli("source=file", f"source.path={src}", "tokenizer=byte", f"out_dir={out}",
                "shard_bytes=1000", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    data = text.replace("\r\n", "\n")
    cut = int(len(data) * 0.9)
    assert (out / "train.bin").read_bytes() == np.frombuffer(data[:cut].encode(), np.uint8).astype(
        np.uint16
    ).tobytes()
    ids = np.concatenate([np.fromfile(out / f"{s}.bin", np.uint16) for s in ("train", "val")])
    assert bytes(ids.astype(np.uint8)).decode("utf-8") == data
    meta = pickle.loads((out / "meta.pkl").read_bytes())
    assert meta["vocab_size"] == 256 and meta["kind"] == "byte"


@pytest.mark.parametrize("tok", ["char", "byte", "tiktoken"])
def test_nanogpt_train_py_reads_every_uint16_output(tmp_path, tiktoken_cache, shakespeare, tok):
    """What train.py does: vocab_size from meta.pkl (none: GPT-2's 50,304), np.memmap(uint16),
    ids < vocab_size."""
    out = tmp_path / "out"
    run(shakespeare, out, f"tokenizer={tok}")
    meta = out / "meta.pkl"
    meta_vocab_size = pickle.loads(meta.read_bytes())["vocab_size"] if meta.exists() else 50304
    assert meta.exists() == (tok != "tiktoken")
    for split in ("train", "val"):
        data = np.memmap(out / f"{split}.bin", dtype=np.uint16, mode="r")
        block_size = 256
        ix = np.random.default_rng(0).integers(len(data) - block_size, size=12)
        x = np.stack([data[i : i + block_size].astype(np.int64) for i in ix])
        assert x.max() < meta_vocab_size


def _ranks(pairs) -> bytes:
    import base64

    return b"".join(base64.b64encode(t) + b" %d\n" % r for t, r in pairs)


BYTES = [(bytes([b]), b) for b in range(256)]


# found by an attack: a rank given twice and a missing byte were Rust panics (tracebacks,
# one in the middle of the run), one rank of 10^9 took 16 GB and 70 s (token_bytes.npy)
@pytest.mark.parametrize(
    ("pairs", "says"),
    [
        (BYTES + [(b"ab", 5)], "repeats the token or rank of line 6"),
        (BYTES + [(b"a", 300)], "repeats the token or rank of line 98"),
        (BYTES[:200], "no token for the byte 0xc8"),
        (BYTES + [(b"ab", 10**9)], "1,000,000,000"),
        (BYTES + [(b"ab", 2**32 + 5)], "not a real vocabulary"),
        (BYTES + [(b"ab", -3)], "from -3"),
        ([], "holds no tokens"),
    ],
)
def test_a_ranks_file_tiktoken_cannot_use_is_one_line(tmp_path, tiktoken_cache, pairs, says):
    (tmp_path / "in.txt").write_text("hello world\nh\u00e9llo \U0001f600 \u65e5\u672c\n")
    (tmp_path / "r.tiktoken").write_bytes(_ranks(pairs))
    r = run_cli("source=file", "source.path=in.txt", "tokenizer=tiktoken",
                "tokenizer.ranks_file=r.tiktoken", "out_dir=o", cwd=tmp_path)  # fmt: skip
    assert_one_line_error(r, "tokenizer.ranks_file=", "r.tiktoken", says)
    assert not (tmp_path / "o").exists()


def test_a_ranks_file_with_a_reserved_gap_is_taken(tmp_path, tiktoken_cache):
    (tmp_path / "in.txt").write_text("abab ab\n")
    (tmp_path / "r.tiktoken").write_bytes(_ranks(BYTES + [(b"ab", 70_000)]))
    r = run_cli("source=file", "source.path=in.txt", "tokenizer=tiktoken", "eot=none",
                "tokenizer.ranks_file=r.tiktoken", "out_dir=o", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert 70_000 in np.fromfile(tmp_path / "o" / "train.bin", np.uint32)


def test_a_ranks_file_of_too_many_tokens_is_one_line_before_it_is_read(tmp_path, tiktoken_cache):
    """Found by an attack: 3.3M short tokens (a 64 MB file, under its size limit) took 2 GB
    and 25 s before meta.pkl's size refused them, in a line that did not name the file."""
    from corpusprep.tokenizers.hf import MAX_TOKENS

    (tmp_path / "in.txt").write_text("hello world\n")
    (tmp_path / "r.tiktoken").write_bytes(_ranks(BYTES) + b"YWI= 256\n" * (MAX_TOKENS - 255))
    r = run_cli("source=file", "source.path=in.txt", "tokenizer=tiktoken",
                "tokenizer.ranks_file=r.tiktoken", "out_dir=o", cwd=tmp_path)  # fmt: skip
    assert_one_line_error(r, "tokenizer.ranks_file=", "r.tiktoken", f"{MAX_TOKENS + 1:,} lines")


def test_a_ranks_file_of_too_many_lines_ended_both_ways_is_one_line(tmp_path, tiktoken_cache):
    """Lines ended by \\r and by \\n in turn (bytes.splitlines takes both) were counted as
    the larger of the two counts, half of them: 2.5M tokens passed the check."""
    from corpusprep.tokenizers.hf import MAX_TOKENS

    (tmp_path / "in.txt").write_text("hello world\n")
    extra = b"YWI= 256\r" * ((MAX_TOKENS - 255) // 2) + b"YWI= 256\n" * ((MAX_TOKENS - 254) // 2)
    (tmp_path / "r.tiktoken").write_bytes(_ranks(BYTES) + extra)
    r = run_cli("source=file", "source.path=in.txt", "tokenizer=tiktoken",
                "tokenizer.ranks_file=r.tiktoken", "out_dir=o", cwd=tmp_path)  # fmt: skip
    assert_one_line_error(r, "tokenizer.ranks_file=", "r.tiktoken", f"{MAX_TOKENS + 1:,} lines")
