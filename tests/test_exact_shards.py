"""Outputs and errors that must not depend on how the input is cut into shards (an attack on
exactness found these): a text file left out as invalid (source.skip_invalid) whatever its
size, and one document of a text of several (source.doc_separator, source.doc_end), a text
file's side under split_by=hash, and source.max_uncut_bytes, which judges the
longest stretch between two places the tokenizer may cut, not where 64 KiB reads fall."""

from __future__ import annotations

import random
import re

import pytest
from helpers import run_cli

from corpusprep.errors import UserError
from corpusprep.text import CARRY, LAST_CUT_STRETCH, _last_cut, guard_cuts
from corpusprep.tokenizers.tiktoken import CUT_AT, WORD_CUT_AT

SHARD_BYTES = ["1024", "4096", "1000003"]


def _run(tmp_path, out: str, *args: str):
    result = run_cli(*args, "executor.workers=2", f"out_dir={tmp_path / out}", "quiet=true",
                     cwd=tmp_path)  # fmt: skip
    return result


def _outputs(folder) -> dict[str, bytes]:
    names = ("train.bin", "val.bin", "meta.pkl")  # meta.pkl: char level only, as nanoGPT's
    return {n: (folder / n).read_bytes() for n in names if (folder / n).exists()}


def _texts(folder, rng: random.Random, bad: set[int] = frozenset()) -> None:
    folder.mkdir()
    for i in range(12):
        size = 9000 if i % 3 == 0 else 300
        text = "".join(rng.choice("abc de\n") for _ in range(size)).encode() + b"\nend\n"
        if i in bad:
            text = text[: size // 2] + b"\xff" + text[size // 2 :]
        (folder / f"doc{i:02d}.txt").write_bytes(text)


@pytest.mark.parametrize("tokenizer", ["tiktoken", "char"])
def test_an_invalid_text_file_is_left_out_whatever_the_shard_size(tokenizer, tmp_path):
    """Before: left out when the file was one shard, the run stopped when it was several."""
    _texts(tmp_path / "in", random.Random(5), bad={3, 7})
    made = {}
    for shard_bytes in SHARD_BYTES:
        result = _run(tmp_path, shard_bytes, "source=files", f"source.glob={tmp_path}/in/*.txt",
                      f"tokenizer={tokenizer}", "source.skip_invalid=true",
                      f"shard_bytes={shard_bytes}")  # fmt: skip
        assert result.returncode == 0, result.stderr
        made[shard_bytes] = _outputs(tmp_path / shard_bytes)
    assert all(m == made["1000003"] for m in made.values())


@pytest.mark.parametrize("skip_invalid", ["true", "false"])
def test_a_text_files_side_under_the_hash_split_is_the_same_whatever_the_shard_size(
    skip_invalid, tmp_path
):
    """A text file is keyed by its sha256 (docs/splits.md), also when source.skip_invalid
    checks it whole first: before, a file that fit one shard was keyed by its text's
    blake2b instead, and moved to the other side when a larger corpus cut it."""
    _texts(tmp_path / "in", random.Random(7))
    made = {}
    for shard_bytes in SHARD_BYTES:
        result = _run(tmp_path, shard_bytes, "source=files", f"source.glob={tmp_path}/in/*.txt",
                      "tokenizer=tiktoken", "split_by=hash", "split=0.5",
                      f"source.skip_invalid={skip_invalid}",
                      f"shard_bytes={shard_bytes}")  # fmt: skip
        assert result.returncode == 0, result.stderr
        made[shard_bytes] = _outputs(tmp_path / shard_bytes)
    assert all(m == made["1000003"] for m in made.values())
    if skip_invalid == "true":  # the same sides as a run that checks nothing
        other = _run(tmp_path, "unchecked", "source=files", f"source.glob={tmp_path}/in/*.txt",
                     "tokenizer=tiktoken", "split_by=hash", "split=0.5")  # fmt: skip
        assert other.returncode == 0, other.stderr
        assert _outputs(tmp_path / "unchecked") == made["1000003"]


def _longest_uncut(data: bytes) -> int:
    """The reference: the longest stretch between the text's ends and the places CUT_AT
    allows, found on the whole text at once."""
    cuts = [m.end() for m in re.finditer(CUT_AT, data)]
    edges = [0, *cuts, len(data)]
    return max(b - a for a, b in zip(edges, edges[1:]))


def _pieces(data: bytes, size: int):
    return [(i, data[i : i + size]) for i in range(0, len(data), size)]


def _passes(data: bytes, size: int, limit: int) -> bool:
    try:
        for _ in guard_cuts(_pieces(data, size), CUT_AT, limit, "t.txt"):
            pass
    except UserError:
        return False
    return True


def test_max_uncut_bytes_judges_the_text_not_where_its_reads_fall():
    """Random texts with few places to cut, read in pieces of any size: the guard fails
    exactly when the longest stretch without a cut is over the limit."""
    rng = random.Random(0)
    for round in range(300):
        data = bytearray()
        while len(data) < rng.randint(1000, 300_000):
            data += b"word " * rng.randint(1, 8000)
            data += rng.choice([b"a\nb", b" \nb", b"a\n ", b"\n", b"x"])  # a cut, or not
        data = bytes(data)
        longest = _longest_uncut(data)
        limit = max(longest + rng.choice([-3000, -1, 0, 1, 5000]), 1)
        # pieces of a few bytes on one text in six: a piece per byte is most of the time
        tiny = (1, 2, 3) if round % 6 == 0 else ()
        for size in (*tiny, 4096, 65536, 70001, len(data)):
            assert _passes(data, size, limit) == (longest <= limit), (size, limit, longest)


@pytest.mark.parametrize("cut_at", [CUT_AT, WORD_CUT_AT])
def test_last_cut_is_the_last_match_wherever_the_stretches_fall(cut_at):
    """_last_cut searches back from the end in stretches that double: it finds the last
    place the rule allows, as one search of the whole window does, with that place just
    inside, on or just past a stretch's edge, or nowhere."""
    rule, rng = re.compile(cut_at), random.Random(3)
    edges = [LAST_CUT_STRETCH * ((1 << k) - 1) for k in range(1, 8)]  # where stretches end
    for _ in range(2000):
        size = rng.choice([1, 5, 100, LAST_CUT_STRETCH, 3000, 70_000])
        window = bytearray(rng.choice([b"1", b" ", b"-"]) * size)
        for _ in range(rng.randint(0, 2)):  # a cut's bytes near an edge, or anywhere
            at = rng.choice([rng.randrange(size), *(size - e + rng.randint(-CARRY - 2, CARRY + 2)
                                                    for e in edges)])  # fmt: skip
            mark = rng.choice([b"a\nb", b"a b", b"x\n1", b" \nb", b"ab"])
            if 0 <= at <= size - len(mark):
                window[at : at + len(mark)] = mark
        window = bytes(window)
        ends = [m.end() for m in rule.finditer(window)]
        assert _last_cut(rule, window) == (ends[-1] if ends else None), (window, ends)


def test_max_uncut_bytes_through_the_cli_whatever_the_shard_size(tmp_path):
    """The attack's text: cuts at about bytes 100, 30,000 and 131,122; its longest stretch,
    101,122 bytes, is under the limit of 110,000 (before: refused with shard_bytes of a
    million, 'from byte 101 to byte 131,072', and taken with 20,000)."""
    filler = "1234 " * 30_000  # no letters: no cut of tiktoken's word rule either
    data = filler[:99] + "a\nb" + filler[:29_897] + "a\nb" + filler[:101_119] + "a\nb"
    data += filler[:20_000] + "\nend\n"
    (tmp_path / "in.txt").write_text(data)
    assert _longest_uncut(data.encode()) < 110_000
    for shard_bytes in ("1000000", "20000"):
        result = _run(tmp_path, shard_bytes, "source=file", "source.path=in.txt",
                      "tokenizer=tiktoken", "source.max_uncut_bytes=110000",
                      f"shard_bytes={shard_bytes}")  # fmt: skip
        assert result.returncode == 0, result.stderr
    assert _outputs(tmp_path / "1000000") == _outputs(tmp_path / "20000")


SEPARATOR, END = "source.doc_separator='<|endoftext|>'", "source.doc_end='The end.'"


def _stories(rng: random.Random, count: int, bad: set[int], cut: str = SEPARATOR):
    """Documents, those in `bad` holding a byte that is not UTF-8, each followed by a
    '<|endoftext|>' line (TinyStories' layout) or each ending in 'The end.' (the `cut`);
    and the same text without the bad ones."""
    docs = []
    for i in range(count):
        body = "".join(rng.choice("abc de\n\u00e9") for _ in range(rng.randint(50, 3000)))
        doc = f"Story {i}.\n{body}\r\nThe end.".encode()
        docs.append(doc[:20] + b"\xe9" + doc[20:] if i in bad else doc)
    after = b"\n<|endoftext|>\n" if cut == SEPARATOR else b""
    every = b"".join(d + after for d in docs)
    kept = b"".join(d + after for i, d in enumerate(docs) if i not in bad)
    return every, kept


@pytest.mark.parametrize("cut", [SEPARATOR, END])
def test_an_invalid_document_is_left_out_whatever_the_shard_size(cut, tmp_path):
    """With source.doc_separator or source.doc_end, source.skip_invalid leaves out the one
    document that is not UTF-8, as it does a JSON line (before: the whole run stopped): the
    outputs are those of the text without it, whatever the shard size, and the summary
    counts it."""
    every, kept = _stories(random.Random(11), 40, {0, 13, 39}, cut)
    (tmp_path / "every.txt").write_bytes(every)
    (tmp_path / "kept.txt").write_bytes(kept)
    common = ("source=file", cut, "tokenizer=tiktoken", "split_by=hash", "split=0.7")
    reference = _run(tmp_path, "kept", *common, f"source.path={tmp_path / 'kept.txt'}")
    assert reference.returncode == 0, reference.stderr
    strict = _run(tmp_path, "strict", *common, f"source.path={tmp_path / 'every.txt'}")
    assert strict.returncode != 0 and "not valid UTF-8" in strict.stderr
    for shard_bytes in SHARD_BYTES:
        result = run_cli(*common, f"source.path={tmp_path / 'every.txt'}", "executor.workers=2",
                         "source.skip_invalid=true", f"shard_bytes={shard_bytes}",
                         f"out_dir={tmp_path / shard_bytes}", cwd=tmp_path)  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert "3 invalid skipped" in result.stdout, result.stdout
        assert _outputs(tmp_path / shard_bytes) == _outputs(tmp_path / "kept")


def test_a_character_only_in_an_invalid_document_is_not_in_the_vocabulary(tmp_path):
    """tokenizer=char learns its vocabulary from the documents kept, not the ones left out."""
    every, kept = _stories(random.Random(3), 30, {2, 5})
    every = every.replace(b"Story 2.", "Story 2.\U0001f600".encode())  # only in a bad one
    (tmp_path / "every.txt").write_bytes(every)
    (tmp_path / "kept.txt").write_bytes(kept)
    for name, extra in (("every", ["source.skip_invalid=true"]), ("kept", [])):
        result = _run(tmp_path, name, "source=file", f"source.path={tmp_path / name}.txt",
                      SEPARATOR, "tokenizer=char", *extra)  # fmt: skip
        assert result.returncode == 0, result.stderr
    assert _outputs(tmp_path / "every") == _outputs(tmp_path / "kept")
