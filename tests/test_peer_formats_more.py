"""More of what the peers' loaders need of the sharded formats (found by comparing our
outputs with their published loaders): file names their globs match, a note where a dtype
is one only some of a peer's trainers read, a warning where a split's last shard is too
short for their loaders, and default names taken from the input's real stem.

The loaders are those of tests/test_peer_loaders.py (written from the peers' code), or
checks written here from their documented behaviour: llm.c's dataloader.h globs its -i/-j
pattern, checks each file's header (magic 20240520, version 1: uint16 tokens) and asserts
every shard holds at least num_processes * B * T + 1 tokens; build-nanogpt's DataLoaderLite
takes every file whose name contains the split and views B*T + 1 tokens of a shard at a
time.
"""

from __future__ import annotations

import glob
import json
from pathlib import Path

import numpy as np
import pytest
from helpers import compose, run_cli
from test_peer_loaders import build_nanogpt_shards, llmc_shards

import corpusprep

# --- names the peers' globs match -----------------------------------------------------------


@pytest.fixture(scope="module")
def text(tmp_path_factory) -> Path:
    """100,000 ASCII characters in one text: with tokenizer=byte, 90,000 train and 10,000
    val tokens (split=0.9 by position)."""
    path = tmp_path_factory.mktemp("text") / "plain.txt"
    line = "the king and the queen walk in the garden.\n"  # 43 characters
    body = (line * (100_000 // len(line) + 1))[:100_000]
    path.write_text(body, encoding="ascii")
    return path


def run(cwd: Path, src: Path, *extra: str):
    r = run_cli("source=file", f"source.path={src}", "tokenizer=byte", *extra, cwd=cwd)
    assert r.returncode == 0, r.stderr
    return r


@pytest.mark.parametrize("name", ["corpus[v2]", "a[b", "x]y", "[v2]"])
def test_llmc_names_hold_no_glob_brackets(tmp_path, text, name):
    """llm.c's -i '{name}_train_*.bin' is a glob: `[v2]` in a file name is a character
    class there, and the pattern given for the run's own files matched none of them."""
    out = tmp_path / "out"
    run(tmp_path, text, f'name="{name}"', "format=llmc", "shard_tokens=40000", f"out_dir={out}")
    files = sorted(p.name for p in out.glob("*.bin"))
    assert files and not any(c in f for f in files for c in "[]"), files
    stem = files[0].split("_train_")[0]
    ds = corpusprep.load(out)
    for side, want in (("train", ds.train), ("val", ds.val)):
        got = llmc_shards(f"{glob.escape(str(out))}/{stem}_{side}_*.bin")
        assert np.array_equal(np.concatenate(got), np.asarray(want[:])), side


def test_npy_and_megatron_names_hold_no_glob_brackets(tmp_path, text):
    out = tmp_path / "npy"
    run(tmp_path, text, 'name="corpus[v2]"', "format=npy", "shard_tokens=40000", f"out_dir={out}")
    assert sorted(p.name for p in out.glob("*.npy"))[0] == "corpus_v2_train_000001.npy"
    ds = corpusprep.load(out)
    for side, want in (("train", ds.train), ("val", ds.val)):  # `split in filename` still
        got = [np.load(f) for f in build_nanogpt_shards(out, side)]
        assert np.array_equal(np.concatenate(got), np.asarray(want[:])), side
    out = tmp_path / "megatron"
    run(tmp_path, text, 'name="corpus[v2]"', "format=megatron", f"out_dir={out}")
    assert (out / "corpus_v2_train_text_document.idx").is_file()


# --- a note where a dtype is one only some of a peer's trainers read ------------------------


def llmc_header(path: Path) -> tuple[int, int, int]:
    magic, version, count = np.fromfile(path, dtype="<i4", count=3).tolist()
    return magic, version, count


def note_lines(output: str) -> list[str]:
    return [line.strip() for line in output.splitlines() if line.strip().startswith("note")]


def inspect_summary(out: Path) -> str:
    from corpusprep.inspect import summary

    return summary(corpusprep.load(out))


def test_llmc_with_uint32_ids_says_which_llmc_trainers_read_it(tmp_path, text):
    """uint32 ids: llm.c's Llama 3 header, which only train_llama3.py reads; train_gpt2cu
    (dataloader.h), train_gpt2.c and train_gpt2.py want magic 20240520 and uint16."""
    out = tmp_path / "out"
    r = run(tmp_path, text, "dtype=uint32", "format=llmc", "name=t", f"out_dir={out}")
    assert llmc_header(out / "t_train_000001.bin")[:2] == (20240801, 7)
    with pytest.raises(AssertionError, match="Bad magic"):
        llmc_shards(f"{out}/t_train_*.bin")  # dataloader.h's check
    note = json.loads((out / "manifest.json").read_text())["note"]
    for said in ("uint32", "20240801", "train_llama3.py", "train_gpt2cu", "train_gpt2.py",
                 "20240520", "uint16"):  # fmt: skip
        assert said in note, (said, note)
    assert "nanoGPT" not in note and "\n" not in note
    assert note_lines(r.stdout) == [f"note: {note}"]
    assert [line.split(None, 1)[1] for line in note_lines(inspect_summary(out))] == [note]


@pytest.mark.parametrize("fmt", ["llmc", "npy", "megatron"])
def test_a_format_whose_loaders_read_the_ids_has_no_note(tmp_path, text, fmt):
    out = tmp_path / "out"
    r = run(tmp_path, text, f"format={fmt}", f"out_dir={out}", "name=t",
            *(["dtype=uint32"] if fmt != "llmc" else []))  # fmt: skip
    m = json.loads((out / "manifest.json").read_text())
    assert "note" not in m and "nanogpt_note" not in m
    assert note_lines(r.stdout) == [] and note_lines(inspect_summary(out)) == []


def test_nanogpt_keeps_its_note_and_says_it_once(tmp_path, text):
    out = tmp_path / "out"
    r = run(tmp_path, text, "dtype=uint32", f"out_dir={out}")
    m = json.loads((out / "manifest.json").read_text())
    note = m["nanogpt_note"]  # the key manifests have always had, still there
    assert "np.memmap" in note and "uint32" in note
    assert note_lines(r.stdout) == [f"note: {note}"]
    assert [line.split(None, 1)[1] for line in note_lines(inspect_summary(out))] == [note]


# --- a split's last shard too short for the peers' loaders ----------------------------------


def llmc_dataloader_init(pattern: str, B: int, T: int, processes: int = 1) -> None:
    """llm.c's dataloader_init: every shard the glob finds must hold at least
    processes * B * T + 1 tokens (read from the header), else an assert stops the run."""
    files = sorted(glob.glob(pattern))
    assert files, pattern
    for f in files:
        count = llmc_header(Path(f))[2]
        assert count >= processes * B * T + 1, f"{f}: {count} tokens"


def build_nanogpt_batches(folder: Path, split: str, B: int, T: int) -> None:
    """build-nanogpt's DataLoaderLite: every shard it loads gives B*T + 1 tokens at its
    start, viewed as (B, T); one pass over all of the split's shards."""
    for f in build_nanogpt_shards(folder, split):
        tokens = np.load(f)
        buf = tokens[: B * T + 1]
        buf[:-1].reshape(B, T)  # a shorter shard cannot be viewed so: ValueError


def warnings(r) -> list[str]:
    return [line for line in r.stderr.splitlines() if line.startswith("corpusprep: warning:")]


def suggested(line: str) -> str:
    return line.split("shard_tokens=")[-1].split()[0]


@pytest.mark.parametrize("fmt", ["llmc", "npy"])
def test_a_short_last_shard_is_warned_with_a_shard_tokens_that_fixes_it(tmp_path, text, fmt):
    """90,000 train tokens in shards of 44,999: the last holds 2 tokens, which llm.c's
    dataloader_init refuses (and build-nanogpt cannot view as a batch) for any B*T over 1."""
    suffix = {"llmc": ".bin", "npy": ".npy"}[fmt]
    out = tmp_path / "out"
    r = run(tmp_path, text, f"format={fmt}", "shard_tokens=44999", "name=t", "quiet=true",
            f"out_dir={out}")  # fmt: skip
    m = json.loads((out / "manifest.json").read_text())
    assert m["tokens"] == {"train": 90_000, "val": 10_000}
    assert [s["tokens"] for s in m["format"]["shards"]["train"]] == [44_999, 44_999, 2]
    [line] = warnings(r)
    assert f"t: the last train shard, t_train_000003{suffix}, holds 2 tokens" in line, line
    assert {"llmc": "llm.c", "npy": "build-nanogpt"}[fmt] in line
    assert suggested(line) == "30000", line  # 3 train shards of 30,000; val's one stays
    if fmt == "llmc":
        with pytest.raises(AssertionError, match="t_train_000003.bin: 2 tokens"):
            llmc_dataloader_init(f"{out}/t_train_*.bin", B=1, T=2)
    else:
        with pytest.raises(ValueError):
            build_nanogpt_batches(out, "train", B=1, T=2)
    again = tmp_path / "again"
    r = run(tmp_path, text, f"format={fmt}", f"shard_tokens={suggested(line)}", "name=t",
            f"out_dir={again}")  # fmt: skip
    assert warnings(r) == [] and r.stderr == ""
    if fmt == "llmc":
        for side in ("train", "val"):  # train_gpt2cu's default batch: -b 4 -t 1024
            llmc_dataloader_init(f"{again}/t_{side}_*.bin", B=4, T=1024)
    else:
        for side in ("train", "val"):
            build_nanogpt_batches(again, side, B=4, T=1024)


def test_each_side_with_a_short_last_shard_is_named(tmp_path, text):
    out = tmp_path / "out"
    r = run(tmp_path, text, "format=llmc", "shard_tokens=4999", "name=t", f"out_dir={out}")
    lines = warnings(r)
    assert len(lines) == 2, r.stderr  # val: 4,999 + 4,999 + 2; train: 18 x 4,999 + 18
    assert "the last val shard, t_val_000002.bin, holds 2 tokens" in lines[0], lines
    assert "the last train shard, t_train_000021.bin, holds 18 tokens" in lines[1], lines
    assert suggested(lines[0]) == suggested(lines[1])
    fix = int(suggested(lines[0]))
    for total in (90_000, 10_000):  # the one value leaves neither side a short last shard
        n = -(-total // fix)
        assert n == 1 or total - (n - 1) * fix >= min(4097, fix // 2), (total, fix)


@pytest.mark.parametrize(
    "fmt, shard_tokens",
    [("llmc", 45000), ("llmc", 40000), ("npy", 45000), ("llmc", 10**8), ("npy", 10**8)],
)
def test_a_last_shard_that_holds_a_batch_says_nothing(tmp_path, text, fmt, shard_tokens):
    """45,000: two full shards; 40,000 with llmc: the last holds 10,000 tokens, over one
    batch of train_gpt2cu's default -b 4 -t 1024; 10^8: one shard per side."""
    r = run(tmp_path, text, f"format={fmt}", f"shard_tokens={shard_tokens}", "out_dir=o")
    assert r.stderr == ""


# --- the default name: the input file's own stem -------------------------------------------


def test_a_file_with_brackets_is_named_after_itself(tmp_path):
    """A file's path is no glob: `[v2]` in its name is part of it (the name was `in`, the
    folder's, as if the file's name were a pattern)."""
    src = tmp_path / "in" / "corpus[v2].txt"
    src.parent.mkdir()
    src.write_text("some text\n" * 50)
    cfg = compose("source=file", f"source.path='{src}'")
    assert cfg.name == "corpus[v2]" and cfg.out_dir == "data/corpus[v2]"
    cfg = compose("source=files", f"source.glob='{src}'")  # a glob naming that one file
    assert cfg.name == "corpus[v2]"
    cfg = compose("source=url", "source.url='https://h/in/corpus[v2].txt'")
    assert cfg.name == "corpus[v2]"


@pytest.mark.parametrize(
    "path, name",
    [
        ("v1.2.txt", "v1.2"),  # a dot between digits is part of a number
        ("data/corpus-v0.1.jsonl.zst", "corpus-v0.1"),
        ("3.14.txt", "3.14"),
        ("corpora/my.books.txt", "my"),  # elsewhere the name ends at the first dot, as before
        ("corpus/books.jsonl.gz", "books"),
        ("books.2024.txt", "books"),
    ],
)
def test_the_name_ends_at_the_first_dot_not_inside_a_number(path, name):
    assert compose("source=file", f"source.path={path}").name == name


@pytest.mark.parametrize(
    "pattern, name",
    [("web/*.jsonl.zst", "web"), ("data/shard[0-9].txt", "data"), ("a/b?/c*.txt", "a")],
)
def test_a_globs_wildcard_parts_are_still_skipped(pattern, name):
    assert compose("source=files", f"source.glob='{pattern}'").name == name


# --- a shard too big for llm.c's C loader ----------------------------------------------------


def llmc_last_offset(ntok: int, B: int, T: int, processes: int = 1) -> int:
    """llm.c dataloader.h: the byte offset dataloader_load_batch seeks to for the last
    sample of a shard (shard_num_samples from dataloader_load_shard_), before its (int)."""
    total_batch_size_bytes = processes * B * T * 2
    shard_num_samples = (ntok * 2 - 2) // total_batch_size_bytes
    return 256 * 4 + (shard_num_samples - 1) * total_batch_size_bytes


def test_llmc_shards_over_2_gib_are_warned(tmp_path, text, capsys, monkeypatch):
    """dataloader.h seeks with fseek(file, (int) current_offset): in a shard of more than
    2 GiB the offsets past it wrap negative and train_gpt2cu stops. corpusprep allows up to
    2**31 - 1 tokens a shard (llm.c's writer asserts fewer than 2**31): such a shard is
    warned, with a shard_tokens under the limit."""
    from corpusprep.exporters import llmc

    for B, T in ((1, 1), (4, 1024), (64, 1024)):
        assert llmc_last_offset(llmc.SEEK_TOKENS, B, T) < 2**31  # fits the C int
    assert llmc_last_offset(llmc.MAX_SHARD_TOKENS, 4, 1024) >= 2**31  # allowed, unreadable
    monkeypatch.setattr(llmc, "SEEK_TOKENS", 40_000)  # the same rule on a small run
    prepare_args = ["source=file", f"source.path={text}", "tokenizer=byte", "format=llmc",
                    "name=t", "quiet=true"]  # fmt: skip
    from corpusprep.prepare import prepare

    prepare(compose(*prepare_args, "shard_tokens=50000", f"out_dir={tmp_path / 'a'}"))
    [line] = [x for x in capsys.readouterr().err.splitlines() if "2 GiB" in x]
    assert "t: 1 shard(s), the first t_train_000001.bin, hold more than 40,000" in line, line
    assert line.endswith("shard_tokens=40000 keeps every shard under it"), line
    prepare(compose(*prepare_args, "shard_tokens=40000", f"out_dir={tmp_path / 'b'}"))
    prepare(compose(*prepare_args, "shard_tokens=50000", "dtype=uint32",
                    f"out_dir={tmp_path / 'c'}"))  # fmt: skip  # train_llama3.py: Python reads
    assert "2 GiB" not in capsys.readouterr().err
