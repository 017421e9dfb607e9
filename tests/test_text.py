"""The reading stage gives exactly open(path).read(), in pieces, for any bytes and cuts."""

from __future__ import annotations

import random
import re

import pytest

from corpusprep.errors import UserError
from corpusprep.text import plan_shards, read_text

ALPHABET = [b"a", b"Z", b" ", b"\n", b"\r", b"\r\n", "é".encode(), "€".encode(), "😀".encode()]
ALPHABET += [b"\xef\xbb\xbf", "中".encode(), b"\t"]


def random_text(rng: random.Random, n: int) -> bytes:
    return b"".join(rng.choice(ALPHABET) for _ in range(n))


def whole(path) -> str:
    with open(path, encoding="utf-8") as f:  # nanoGPT's open(path, 'r') on a UTF-8 system
        return f.read()


@pytest.mark.parametrize("seed", range(150))
def test_pieces_join_to_open_read(tmp_path, seed):
    rng = random.Random(seed)
    raw = random_text(rng, rng.randint(1, 400))
    path = tmp_path / "t.txt"
    path.write_bytes(raw)
    block = rng.randint(1, 64)
    assert "".join(read_text(path, block=block)) == whole(path)


@pytest.mark.parametrize("seed", range(60))
def test_shards_join_to_open_read(tmp_path, seed):
    rng = random.Random(seed)
    raw = random_text(rng, rng.randint(1, 600))
    path = tmp_path / "t.txt"
    path.write_bytes(raw)
    shards = plan_shards(path, len(raw), rng.randint(1, 50))
    assert shards[0][0] == 0 and shards[-1][1] == len(raw)
    assert all(a < b for a, b in shards) and all(
        shards[i][1] == shards[i + 1][0] for i in range(len(shards) - 1)
    )
    text = "".join("".join(read_text(path, a, b, block=rng.randint(1, 32))) for a, b in shards)
    assert text == whole(path)


def test_plan_does_not_depend_on_anything_but_bytes_and_size(tmp_path):
    path = tmp_path / "t.txt"
    path.write_bytes(b"line\n" * 1000)
    assert plan_shards(path, 5000, 100) == plan_shards(path, 5000, 100)
    shards = plan_shards(path, 5000, 100)
    assert all(b % 5 == 0 for _, b in shards)  # every shard ends right after a newline
    assert all(100 <= b - a <= 105 for a, b in shards[:-1])
    assert plan_shards(path, 5000, 10**9) == [(0, 5000)]


def test_a_file_without_newlines_is_one_shard(tmp_path):
    path = tmp_path / "t.txt"
    path.write_bytes(b"x" * 10_000)
    assert plan_shards(path, 10_000, 100) == [(0, 10_000)]
    assert "".join(read_text(path, block=7)) == "x" * 10_000


def test_crlf_split_across_reads_is_one_newline(tmp_path):
    path = tmp_path / "t.txt"
    path.write_bytes(b"ab\r\ncd\r" + b"\r" * 20 + b"\n")
    for block in range(1, 12):
        assert "".join(read_text(path, block=block)) == whole(path)


@pytest.mark.parametrize("seed", range(80))
def test_invalid_utf8_reports_the_first_bad_byte(tmp_path, seed):
    rng = random.Random(seed)
    bad = rng.choice([b"\xff", b"\xc3", b"\xe2\x82", b"\x80\x80", b"\xed\xa0\x80", b"\xf8"])
    raw = random_text(rng, rng.randint(0, 100)) + bad + random_text(rng, rng.randint(0, 100))
    path = tmp_path / "t.txt"
    path.write_bytes(raw)
    with pytest.raises(UnicodeDecodeError) as expected:
        raw.decode("utf-8")
    shards = plan_shards(path, len(raw), rng.randint(1, 40))
    with pytest.raises(UserError) as got:
        for a, b in shards:
            for _ in read_text(path, a, b, block=rng.randint(1, 16)):
                pass
    assert f"at byte {expected.value.start} " in str(got.value)
    assert str(path) in str(got.value)


@pytest.mark.parametrize("seed", range(60))
def test_scan_counts_and_collects_like_open_read(tmp_path, seed):
    from corpusprep.formats import InputFile, Segment
    from corpusprep.formats.text import FORMAT
    from corpusprep.shards import Shard, scan_shard

    rng = random.Random(seed)
    raw = random_text(rng, rng.randint(1, 500))
    path = tmp_path / "t.txt"
    path.write_bytes(raw)
    file = InputFile(str(path), "text", size=len(raw))
    segments = FORMAT.plan(file, rng.randint(1, 60), re.compile(rb"\n"))
    results = [scan_shard(Shard(i, (Segment(file, *s),))) for i, s in enumerate(segments)]
    text = whole(path)
    assert sum(r.chars for r in results) == len(text)
    assert set("".join(r.charset for r in results)) == set(text)
    assert sum(r.docs for r in results) == 1


@pytest.mark.parametrize("seed", range(40))
def test_census_from_undecoded_bytes_counts_as_decoding(seed):
    """The scan counts and collects a text's characters from its bytes (the encode pass
    decodes them): the same characters and count as decoding each piece, whatever the
    mix, the pieces' sizes (past the first few KB learnt first) and the newlines."""
    from corpusprep.formats import LEARN_FIRST, Census
    from corpusprep.text import decode

    rng = random.Random(seed)
    fast, slow = Census(), Census()
    for _ in range(rng.randint(1, 5)):
        size = rng.choice([0, 1, 7, 300, LEARN_FIRST - 1, LEARN_FIRST + 3, 3 * LEARN_FIRST])
        raw = random_text(rng, size)
        fast.add_undecoded(raw)
        text = decode(raw, "t.txt", 0)
        slow.chars += len(text)
        slow.seen |= set(text)
    assert (fast.chars, fast.seen) == (slow.chars, slow.seen)


def test_scan_of_bytes_not_utf8_names_the_byte(tmp_path):
    """Not decoded in the scan, a text that is not UTF-8 still fails with the byte at fault,
    in the scan when what it decodes shows it, else in the encode pass (the CLI tests)."""
    from corpusprep.formats import InputFile, Segment
    from corpusprep.formats.text import FORMAT

    path = tmp_path / "latin1.txt"
    path.write_bytes(b"caf\xe9 au lait\n" * 3)
    file = InputFile(str(path), "text", size=path.stat().st_size)
    with pytest.raises(UserError, match=r"latin1.txt: not valid UTF-8 at byte 3 \(0xe9\)"):
        FORMAT.scan(Segment(file, 0, file.size, file.size))


@pytest.mark.parametrize("seed", range(30))
def test_characters_counted_from_bytes_as_decoding_counts_them(seed, monkeypatch):
    """count_chars (one text's split point, without decoding) counts what decoding gives,
    "\\r\\n" as one even across its blocks, whatever the blocks' size."""
    import io

    import corpusprep.text as text

    rng = random.Random(seed)
    raw = random_text(rng, rng.randint(0, 500))
    monkeypatch.setattr(text, "COUNT_BLOCK", rng.randint(1, 64))
    chars, left = text.count_chars(io.BytesIO(raw), len(raw))
    assert (chars, left) == (len(raw.decode().replace("\r\n", "\n").replace("\r", "\n")), 0)
    assert text.count_chars(io.BytesIO(raw), len(raw) + 5)[1] == 5  # the file got shorter


def test_scan_names_the_first_byte_not_utf8(tmp_path):
    """A bad byte the scan cannot see, then one it sees: the message names the first."""
    from corpusprep.formats import InputFile, Segment
    from corpusprep.formats.text import FORMAT

    path = tmp_path / "two.txt"
    path.write_bytes(b"oka\n" * 4000 + b"a\xc3a\xa9\n" + b"x" * 70000 + b"\xff\n")
    file = InputFile(str(path), "text", size=path.stat().st_size)
    with pytest.raises(UserError, match=r"not valid UTF-8 at byte 16001 \(0xc3\)"):
        FORMAT.scan(Segment(file, 0, file.size, file.size))


def test_census_learns_newline_of_crlf_text():
    from corpusprep.formats import Census

    census = Census()
    census.add_undecoded(b"ab\r\ncd\r\n" * 10)
    assert b"\n" in census._known and census.chars == 60 and census.seen == set("abcd\n")


def test_a_file_cut_short_while_read_is_the_changed_files_line_with_its_fix(tmp_path):
    """A file that got shorter between its listing and its read is said as any change
    while the run reads it (docs/safety.md), with what to do: run again."""
    import io

    import corpusprep.text as text

    path = tmp_path / "in.txt"
    path.write_bytes(b"hello\n" * 10)
    said = f"{path}: the file changed while it was being read (it got shorter); run again"
    with pytest.raises(UserError) as read:
        text.read_small(str(path), 100)
    assert str(read.value) == said
    with pytest.raises(UserError) as pieces:
        list(text.raw_pieces(io.BytesIO(b"hello\n" * 10), 0, 100, str(path)))
    assert str(pieces.value) == said
