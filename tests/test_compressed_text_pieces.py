"""One compressed text (a .txt.gz, .txt.zst, a zip's member: enwik8, text8 and most
downloads) was one shard, encoded by one worker whatever the machine. For a tokenizer that
costs more than decompressing (BPE), it is now cut into pieces by position in its text, as
compressed JSON Lines are: each piece runs from the first place the tokenizer may cut at or
after its start to the first at or after its end, so the pieces meet exactly. The files
are nanoGPT's, byte for byte, for any shard size and worker count."""

from __future__ import annotations

import bz2
import gzip
import json
import random
import zipfile
from pathlib import Path

import numpy as np
import pytest
from helpers import run_cli, same_files
from nanogpt_reference import prepare_bpe

WORDS = ["the", "of", "and", "one", "in", "a", "to", "zero", "nine", "two", "is", "term"]


def _text(rng: random.Random, size: int) -> str:
    """Prose with lines, stretches of words with no newline, and stretches with no place to
    cut at all (digits and spaces): pieces that start or end inside those, or hold none."""
    out, n = [], 0
    while n < size:
        kind = rng.random()
        if kind < 0.5:
            chunk = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 30))) + ".\n"
        elif kind < 0.8:
            chunk = " ".join(rng.choice(WORDS) for _ in range(rng.randint(100, 3000))) + " "
        elif kind < 0.9:
            chunk = "12 3.4 " * rng.randint(10, 6000)  # no cut for tiktoken's rules
        else:
            chunk = "Caf\u00e9 d\u00e9j\u00e0 \u65e5\u672c\r\nZ\r\n"  # non-ASCII, \r\n
        out.append(chunk)
        n += len(chunk)
    return "".join(out)


def _compress(path: Path, data: bytes, kind: str) -> Path:
    if kind == "gz":
        out = path.with_name(path.name + ".gz")
        packed = bytearray(gzip.compress(data, mtime=0))  # the same sha256 (keys) every run
        # and on every Python: the header's OS byte is 3 from gzip.compress on 3.11 and 3.12,
        # 255 on 3.9, 3.10 and 3.13, and the file's sha256 keys its documents' hash split
        packed[9] = 3
        out.write_bytes(bytes(packed))
    elif kind == "bz2":
        out = path.with_name(path.name + ".bz2")
        out.write_bytes(bz2.compress(data))
    elif kind == "zst":
        zstandard = pytest.importorskip("zstandard")
        out = path.with_name(path.name + ".zst")
        with open(out, "wb") as f, zstandard.ZstdCompressor().stream_writer(f) as w:
            w.write(data)  # streamed: no content size in the header (a guessed size)
    else:
        out = path.with_name(path.stem + ".zip")
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr(path.name, data)
    return out


@pytest.mark.parametrize("kind", ["gz", "zst", "zip", "bz2"])
def test_a_compressed_text_is_cut_into_pieces_and_gives_nanogpts_files(
    tmp_path: Path, tiktoken_cache: Path, kind: str
) -> None:
    rng = random.Random(kind)
    text = _text(rng, 2_500_000)
    plain = tmp_path / "corpus.txt"
    plain.write_bytes(text.encode())
    (tmp_path / "ref").mkdir()
    prepare_bpe(plain, tmp_path / "ref")
    packed = _compress(plain, plain.read_bytes(), kind)
    for workers, shard_bytes in (("2", "200000"), ("1", "70000"), ("2", "1000000")):
        out = f"out-{workers}-{shard_bytes}"
        r = run_cli("source=file", f"source.path={packed.name}", "tokenizer=tiktoken",
                    f"shard_bytes={shard_bytes}", f"executor.workers={workers}",
                    "source.max_uncut_bytes=1000000", f"out_dir={out}", "quiet=true",
                    cwd=tmp_path)  # fmt: skip
        assert r.returncode == 0, r.stderr
        same_files(tmp_path / "ref", tmp_path / out, names=("train.bin", "val.bin"))
        manifest = json.loads((tmp_path / out / "manifest.json").read_text())
        if shard_bytes != "1000000":  # (a size a stream does not record is a guess)
            assert manifest["shards"]["count"] > 2, (out, manifest["shards"])
        assert manifest["chars"] == len(text.replace("\r\n", "\n"))


def _runs_over_docs(tmp_path: Path, split_by: str, shard_bytes: str, *extra: str) -> list[Path]:
    """source=files over docs/*.txt.gz: one piece a file on one worker, then `shard_bytes`
    pieces on two workers and on one; the three output folders."""
    outs = []
    split = [] if split_by in ("head", "tail") else ["split=0.5"]  # val_size sizes val there
    for workers, size in (("1", "100000000"), ("2", shard_bytes), ("1", shard_bytes)):
        out = f"out-{workers}-{size}"
        r = run_cli("source=files", "source.glob=docs/*.txt.gz", "tokenizer=tiktoken",
                    f"split_by={split_by}", *split, f"shard_bytes={size}",
                    f"executor.workers={workers}", f"out_dir={out}", "quiet=true", *extra,
                    cwd=tmp_path)  # fmt: skip
        assert r.returncode == 0, r.stderr
        outs.append(tmp_path / out)
    return outs


@pytest.mark.parametrize("split_by", ["document", "hash"])
def test_compressed_text_documents_do_not_depend_on_the_pieces(
    tmp_path: Path, tiktoken_cache: Path, split_by: str
) -> None:
    """source=files over compressed texts, each file a document spread over pieces: the
    same files whatever the shard size and the workers (one piece each, or many)."""
    rng = random.Random(split_by)
    (tmp_path / "docs").mkdir()
    for i in range(4):
        data = _text(rng, rng.randint(50_000, 700_000)).encode()
        _compress(tmp_path / "docs" / f"d{i}.txt", data, "gz")
    outs = _runs_over_docs(tmp_path, split_by, "60000")
    assert json.loads((outs[1] / "manifest.json").read_text())["shards"]["count"] > 4
    for out in outs[1:]:
        same_files(outs[0], out, names=("train.bin", "val.bin"))


def test_a_truncated_compressed_text_is_one_line_naming_it(tmp_path: Path, tiktoken_cache) -> None:
    data = gzip.compress(_text(random.Random(3), 1_500_000).encode())
    (tmp_path / "cut.txt.gz").write_bytes(data[: len(data) * 2 // 3])
    r = run_cli("source=file", "source.path=cut.txt.gz", "tokenizer=tiktoken",
                "shard_bytes=100000", "out_dir=out", cwd=tmp_path)  # fmt: skip
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 1 and len(lines) == 1, r.stderr
    assert "cut.txt.gz" in lines[0] and "truncated" in lines[0]
    assert not (tmp_path / "out").exists()


def test_a_compressed_text_with_no_cut_for_too_long_is_refused(tmp_path: Path, tiktoken_cache):
    """source.max_uncut_bytes still bounds what a piece holds: a stretch with no cut that
    runs across pieces is refused, naming the file, whichever piece finds it."""
    data = ("a b\n" + "12 3.4 " * 100_000 + "x\nY").encode()
    (tmp_path / "flat.txt.gz").write_bytes(gzip.compress(data))
    r = run_cli("source=file", "source.path=flat.txt.gz", "tokenizer=tiktoken",
                "shard_bytes=50000", "source.max_uncut_bytes=200000", "out_dir=out",
                cwd=tmp_path)  # fmt: skip
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 1 and len(lines) == 1, r.stderr
    assert "flat.txt.gz" in lines[0] and "source.max_uncut_bytes=200000" in lines[0]


def test_an_empty_compressed_text_is_one_line(tmp_path: Path, tiktoken_cache: Path) -> None:
    (tmp_path / "empty.txt.gz").write_bytes(gzip.compress(b""))
    r = run_cli("source=file", "source.path=empty.txt.gz", "tokenizer=tiktoken",
                "out_dir=out", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 1 and "empty.txt.gz" in r.stderr and "Traceback" not in r.stderr


def _segments(path: Path, pieces: int):
    from corpusprep.formats import STREAM_END, InputFile, Segment
    from corpusprep.tokenizers.tiktoken import WORD_CUT_AT

    file = InputFile(str(path), "text", "gzip", path.stat().st_size)
    step = -(-file.whole()[2] // pieces)
    cuts = [i * step for i in range(pieces)] + [STREAM_END]
    return [Segment(file, a, b, b - a, WORD_CUT_AT) for a, b in zip(cuts, cuts[1:])]


@pytest.mark.parametrize("fresh", [False, True])
def test_pieces_inside_a_long_stretch_without_a_cut_are_empty_and_meet_exactly(
    tmp_path: Path, fresh: bool
) -> None:
    """A stretch with no cut longer than several pieces: the pieces whose start and end
    fall inside it are empty, whether a process reads on from the piece before (fresh
    False) or each piece is read on its own, as another worker would (True); together
    the pieces are the text, each byte once."""
    from corpusprep.compression import STREAMS
    from corpusprep.formats.text import FORMAT

    text = ("one two\n" * 3000 + "12 3.4 " * 8000 + "x\nYes and no " * 3000).encode()
    path = tmp_path / "t.txt.gz"
    path.write_bytes(gzip.compress(text))
    segments = _segments(path, 16)
    read = []
    for segment in segments:
        if fresh:
            STREAMS.close()
        read.append(b"".join(raw for _, raw in FORMAT.raw(segment)))
    STREAMS.close()
    assert b"".join(read) == text
    assert any(not r for r in read[1:-1])  # some pieces lie inside the stretch


def test_a_compressed_text_with_long_cutless_stretches_gives_nanogpts_files(
    tmp_path: Path, tiktoken_cache: Path
) -> None:
    """The CLI over pieces inside a stretch with no cut, on 1 and 2 workers: nanoGPT's
    files, not a stretch twice."""
    text = "ab cd " * 100 + "12 " * 3000 + "ef gh " * 100
    (tmp_path / "t.txt").write_text(text)
    (tmp_path / "ref").mkdir()
    prepare_bpe(tmp_path / "t.txt", tmp_path / "ref")
    (tmp_path / "t.txt.gz").write_bytes(gzip.compress(text.encode()))
    for workers in ("1", "2"):
        r = run_cli("source=file", "source.path=t.txt.gz", "tokenizer=tiktoken",
                    "shard_bytes=500", f"executor.workers={workers}", f"out_dir=o{workers}",
                    "quiet=true", cwd=tmp_path)  # fmt: skip
        assert r.returncode == 0, r.stderr
        same_files(tmp_path / "ref", tmp_path / f"o{workers}", names=("train.bin", "val.bin"))


@pytest.mark.parametrize("split_by", ["document", "hash", "position"])
def test_a_document_whose_last_piece_is_empty_still_ends_with_its_eot(
    tmp_path: Path, tiktoken_cache: Path, split_by: str
) -> None:
    """A compressed text whose last stretch holds no cut: its last pieces are empty (the
    piece before runs to the text's end). The empty last piece ends the document, and
    its end-of-text token was dropped with it: one eot short, other files than one piece
    each gives."""
    (tmp_path / "docs").mkdir()
    for i in range(6):
        text = "ab cd " * (2000 + 500 * i) + "1 2 " * (6000 + 1000 * i)  # no cut at the end
        data = gzip.compress(text.encode(), mtime=0)  # the same keys (sha256) every run
        (tmp_path / "docs" / f"d{i}.txt.gz").write_bytes(data)
    outs = _runs_over_docs(tmp_path, split_by, "3000")
    ids = [np.fromfile(outs[0] / name, dtype=np.uint16) for name in ("train.bin", "val.bin")]
    assert sum(int((a == 50256).sum()) for a in ids) == 6
    for out in outs[1:]:
        same_files(outs[0], out, names=("train.bin", "val.bin"))


@pytest.mark.parametrize("split_by", ["document", "hash", "head", "position"])
def test_a_compressed_empty_text_among_others_is_a_document_whatever_the_pieces(
    tmp_path: Path, tiktoken_cache: Path, split_by: str
) -> None:
    """A .txt.gz of no text among other files: a document of no tokens but its eot, as
    split_by=position already had it, whatever the pieces. Before: by document a traceback
    (a document without a key), by hash or head none on one piece and an eot on several."""
    (tmp_path / "docs").mkdir()
    for i in range(6):
        (tmp_path / "docs" / f"a{i}.txt.gz").write_bytes(gzip.compress(b"doc %d\n" % i, mtime=0))
    (tmp_path / "docs" / "b.txt.gz").write_bytes(gzip.compress(b"", mtime=0))
    outs = _runs_over_docs(tmp_path, split_by, "1", *(["val_size=3"] * (split_by == "head")))
    manifest = json.loads((outs[0] / "manifest.json").read_text())
    assert manifest["documents"]["total"] == 7
    ids = [np.fromfile(outs[0] / name, dtype=np.uint16) for name in ("train.bin", "val.bin")]
    assert sum(int((a == 50256).sum()) for a in ids) == 7
    for out in outs[1:]:
        same_files(outs[0], out, names=("train.bin", "val.bin"))


def _read_pieces(path: Path, bounds: list[int], order: list[int], fresh: bool) -> list[bytes]:
    """Each piece's bytes, read in `order` by one process (kept streams), or each from a
    fresh stream (`fresh`: as workers that never read the piece before)."""
    from corpusprep.compression import STREAMS
    from corpusprep.formats import InputFile, Segment
    from corpusprep.formats.text import FORMAT
    from corpusprep.tokenizers.tiktoken import WORD_CUT_AT

    file = InputFile(str(path), "text", "gzip", path.stat().st_size)
    segments = [Segment(file, a, b, b - a, WORD_CUT_AT) for a, b in zip(bounds, bounds[1:])]
    got: dict[int, bytes] = {}
    STREAMS.close()
    try:
        for i in order:
            if fresh:
                STREAMS.close()
            got[i] = b"".join(data for _, data in FORMAT.raw(segments[i]))
    finally:
        STREAMS.close()
    return [got[i] for i in range(len(segments))]


def test_pieces_meet_exactly_in_any_order_and_from_any_stream(tmp_path: Path) -> None:
    """Random texts and piece bounds (pieces inside a stretch with no cut, past the text's
    end, next to "\r\n" or a multibyte character), read in any order, by one process
    reading on or each from a fresh stream: together they are the text, each byte once."""
    from corpusprep.formats import STREAM_END

    path = tmp_path / "t.txt.gz"
    rng = random.Random(4)
    atoms = [
        "ab",
        " ",
        "  ",
        "cd",
        "\n",
        "\r",
        "\r\n",
        "x.",
        "\nA",
        "\u00e9",
        "\u65e5",
        "12",
        "a b",
    ]
    for _ in range(300):
        text = "".join(rng.choice(atoms) for _ in range(rng.randint(0, 60))).encode()
        path.write_bytes(gzip.compress(text, mtime=0))
        inner = sorted(rng.randint(1, len(text) + 5) for _ in range(rng.randint(0, 7)))
        order = list(range(len(inner) + 1))
        rng.shuffle(order)
        for fresh in (False, True):
            got = _read_pieces(path, [0, *inner, STREAM_END], order, fresh)
            assert b"".join(got) == text, (text, inner, order, fresh)


@pytest.mark.parametrize("kind", ["gz", "zst"])
def test_a_compressed_file_of_lines_is_cut_into_pieces_at_line_ends(
    tmp_path: Path, tiktoken_cache: Path, kind: str
) -> None:
    """source.format=lines (a document per line, as datasets reads a .txt file) over a
    compressed file: pieces that take the lines starting in them, whatever the tokenizer's
    own rule (tiktoken would cut between words, inside a line): the files of the same
    lines uncompressed, for any shard size and workers."""
    rng = random.Random(kind)
    lines = []
    for _ in range(40_000):
        n = rng.choice([0, 1, 3, 8, 30])
        lines.append(" ".join(rng.choice(WORDS) for _ in range(n)))
    ends = ["\n", "\r\n", "\r"]
    data = "".join(line + rng.choice(ends) for line in lines).encode()
    plain = tmp_path / "lines.txt"
    plain.write_bytes(data)
    packed = _compress(plain, data, kind)
    outs = []
    for path, workers, shard_bytes in ((plain, "1", "100000000"), (packed, "2", "30000"),
                                       (packed, "1", "30000")):  # fmt: skip
        out = f"out-{path.name}-{workers}"
        r = run_cli("source=file", f"source.path={path.name}", "source.format=lines",
                    "tokenizer=tiktoken", "split_by=hash", f"shard_bytes={shard_bytes}",
                    f"executor.workers={workers}", f"out_dir={out}", "quiet=true",
                    cwd=tmp_path)  # fmt: skip
        assert r.returncode == 0, r.stderr
        outs.append(tmp_path / out)
        manifest = json.loads((tmp_path / out / "manifest.json").read_text())
        # universal newlines: "\r" then "\n" is one line end (an empty line less)
        read = data.decode().replace("\r\n", "\n").replace("\r", "\n")
        assert manifest["documents"]["total"] == read.count("\n")
    assert json.loads((outs[1] / "manifest.json").read_text())["shards"]["count"] > 4
    for out in outs[1:]:
        same_files(outs[0], out, names=("train.bin", "val.bin"))
