"""Shards are packed by the work in them (issue 13): a compressed file counts as the text it
holds (zstd's frame content size, gzip's ISIZE, a zip member's size; else a guess), not
its size on disk, so a handful of compressed files gives a shard each, not one shard for
several of them that leaves the other workers idle. The output never depends on it."""

from __future__ import annotations

import gzip
import json
import lzma
import os
import zipfile
from pathlib import Path

import pytest
import zstandard
from helpers import assert_one_line_error, run_cli

from corpusprep.compression import GUESSED_RATIO, text_size
from corpusprep.formats import MAX_PIECES

TEXT = b"".join(b"line %d of some text to compress\n" % i for i in range(20_000))


def test_the_text_size_of_a_compressed_file(tmp_path: Path):
    files = {"a.gz": gzip.compress(TEXT), "a.zst": zstandard.compress(TEXT),
             "a.xz": lzma.compress(TEXT)}  # fmt: skip
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    with zipfile.ZipFile(tmp_path / "a.zip", "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("small.txt", TEXT[:1000])
        archive.writestr("big.txt", TEXT)
    size = {name: (tmp_path / name).stat().st_size for name in [*files, "a.zip"]}
    assert text_size(tmp_path / "a.gz", "gzip", None, size["a.gz"]) == len(TEXT)
    assert text_size(tmp_path / "a.zst", "zstd", None, size["a.zst"]) == len(TEXT)
    assert text_size(tmp_path / "a.xz", "xz", None, size["a.xz"]) == size["a.xz"] * GUESSED_RATIO
    assert text_size(tmp_path / "a.zip", "zip", "small.txt", size["a.zip"]) == 1000
    assert text_size(tmp_path / "a.zip", "zip", "big.txt", size["a.zip"]) == len(TEXT)
    # a cut or foreign file: a guess, never an error here (reading it reports the damage)
    (tmp_path / "cut.zst").write_bytes(b"\x28\xb5")
    assert text_size(tmp_path / "cut.zst", "zstd", None, 2) == 2 * GUESSED_RATIO
    stream = zstandard.ZstdCompressor().compressobj()  # streamed: no content size recorded
    (tmp_path / "s.zst").write_bytes(stream.compress(TEXT) + stream.flush())
    size = (tmp_path / "s.zst").stat().st_size
    assert text_size(tmp_path / "s.zst", "zstd", None, size) == size * GUESSED_RATIO


def test_compressed_files_get_a_shard_each_and_the_same_files(tmp_path: Path):
    rows = [json.dumps({"text": f"document {i}: " + "words of text " * (i % 40)}) for i in
            range(8000)]  # fmt: skip
    plain, packed = tmp_path / "plain", tmp_path / "packed"
    plain.mkdir()
    packed.mkdir()
    for k in range(4):
        data = ("\n".join(rows[k::4]) + "\n").encode()
        assert len(data) > 200_000 and len(zstandard.compress(data)) < 50_000
        (plain / f"part{k}.jsonl").write_bytes(data)
        (packed / f"part{k}.jsonl.zst").write_bytes(zstandard.compress(data))
    made = {}
    for name, glob, shard_bytes in (("plain", "plain/*.jsonl", 10**8),
                                    ("packed", "packed/*.jsonl.zst", 200_000)):  # fmt: skip
        r = run_cli("source=files", f"source.glob={glob}", f"shard_bytes={shard_bytes}",
                    "executor.workers=2", f"out_dir=out_{name}", "quiet=true",
                    cwd=tmp_path)  # fmt: skip
        assert r.returncode == 0, r.stderr
        made[name] = json.loads((tmp_path / f"out_{name}" / "manifest.json").read_text())
    assert made["packed"]["shards"]["count"] == 4  # by size on disk, all four were one shard
    for name in ("train.bin", "val.bin", "meta.pkl"):
        assert (tmp_path / "out_plain" / name).read_bytes() == (
            tmp_path / "out_packed" / name
        ).read_bytes()


# --- a big compressed file is cut into pieces by position in its text ------------------


def _rows(n: int) -> list[bytes]:
    """JSON lines of uneven length: short, long (a whole line of 20 KB), and blank ones."""
    rows = []
    for i in range(n):
        words = "word " * (i % 50) if i % 97 else "a long line of text " * 1000
        rows.append(b"" if i % 61 == 0 else json.dumps({"text": f"doc {i}: {words}"}).encode())
    return rows


def test_piece_lines_are_every_line_once(tmp_path: Path):
    """Whatever the piece starts (a line's first byte, its middle, its newline), the
    pieces' lines joined are the file's lines, each read by one piece."""
    from corpusprep.formats import STREAM_END, InputFile, Segment
    from corpusprep.formats.jsonl import FORMAT

    data = b"\n".join(_rows(700)) + b"\n"
    path = tmp_path / "a.jsonl.zst"
    path.write_bytes(zstandard.compress(data))
    file = InputFile(str(path), "jsonl", "zstd", path.stat().st_size)
    newline = data.index(b"\n", 5000)
    for cuts in ([newline, newline + 1, newline + 2], [1, 2, len(data) - 1], [len(data)],
                 [17, 40_000, 40_001, 90_000]):  # fmt: skip
        bounds = [0, *cuts, STREAM_END]
        lines = [line for a, b in zip(bounds, bounds[1:])
                 for line, _ in FORMAT._lines(Segment(file, a, b, 1))]  # fmt: skip
        assert b"".join(lines) == data, cuts


def test_a_compressed_jsonl_file_is_cut_into_pieces_with_the_same_files(tmp_path: Path):
    data = b"\n".join(_rows(3000)) + b"\n"
    stream = zstandard.ZstdCompressor().compressobj()  # no content size: a guessed size
    inputs = {"a.jsonl.zst": zstandard.compress(data), "a.jsonl.gz": gzip.compress(data),
              "s.jsonl.zst": stream.compress(data) + stream.flush()}  # fmt: skip
    reference = None
    for name, compressed in inputs.items():
        (tmp_path / name).write_bytes(compressed)
        for shard_bytes in (10**9, 4000):
            out = tmp_path / f"out-{name}-{shard_bytes}"
            r = run_cli(f"source.path={name}", "source=file", "tokenizer=tiktoken",
                        f"shard_bytes={shard_bytes}", "executor.workers=2", "eot=prepend",
                        f"out_dir={out}", "quiet=true", cwd=tmp_path)  # fmt: skip
            assert r.returncode == 0, r.stderr
            manifest = json.loads((out / "manifest.json").read_text())
            count = manifest["shards"]["count"]
            if shard_bytes == 10**9:
                assert count == 1
            else:  # MAX_PIECES, however small shard_bytes; a guessed size: some
                assert count == MAX_PIECES if name != "s.jsonl.zst" else 1 < count <= MAX_PIECES
            assert "scan" not in manifest["seconds"]  # documents: one pass over the input
            made = {n: (out / n).read_bytes() for n in
                    ("train.bin", "val.bin", "doc_index/train.docs.bin",
                     "doc_index/val.docs.bin")}  # fmt: skip
            reference = reference or made
            assert made == reference, (name, shard_bytes)
    assert manifest["documents"]["total"] == sum(1 for row in _rows(3000) if row)


def test_an_error_in_a_piece_names_its_line_in_the_file(tmp_path: Path):
    rows = _rows(3000)
    rows[2500] = b'{"text": "broken'
    (tmp_path / "a.jsonl.zst").write_bytes(zstandard.compress(b"\n".join(rows) + b"\n"))
    r = run_cli("source=file", "source.path=a.jsonl.zst", "tokenizer=tiktoken",
                "shard_bytes=40000", "out_dir=out", "quiet=true", cwd=tmp_path)  # fmt: skip
    assert_one_line_error(r, "a.jsonl.zst:2501", "not valid JSON")
    assert not (tmp_path / "out" / "train.bin").exists()


def test_one_pass_counts_what_the_scan_counted(tmp_path: Path):
    """Documents with a tokenizer that learns nothing: no scan pass, the same counts."""
    rows = [json.dumps({"text": f"document {i}"}).encode() for i in range(300)]
    rows[7] = b'{"text": "\\ud800 lone"}'  # left out with skip_invalid
    rows[9] = b'{"text": "bad \xff byte"}'
    (tmp_path / "a.jsonl").write_bytes(b"\n".join(rows) + b"\n")
    counts = {}
    for tokenizer in ("char", "byte"):  # char learns its characters: it needs the scan
        out = tmp_path / f"out-{tokenizer}"
        r = run_cli("source=file", "source.path=a.jsonl", f"tokenizer={tokenizer}",
                    "source.skip_invalid=true", f"out_dir={out}", "quiet=true",
                    cwd=tmp_path)  # fmt: skip
        assert r.returncode == 0, r.stderr
        manifest = json.loads((out / "manifest.json").read_text())
        assert ("scan" in manifest["seconds"]) == (tokenizer == "char")
        counts[tokenizer] = (manifest["chars"], manifest["documents"])
    assert counts["char"] == counts["byte"]
    assert counts["byte"][1]["skipped_invalid"] == 2 and counts["byte"][1]["total"] == 298


def test_documents_left_out_take_no_side_in_a_hash_split(tmp_path: Path):
    """skip_invalid with split_by=hash: a left-out document has no text to key its side by,
    so it takes none, and the rest land where they would with the bad rows deleted."""
    rows = [json.dumps({"text": f"document {i} " + "words " * (i % 17)}).encode()
            for i in range(2000)]  # fmt: skip
    bad = {7: b'{"text": "\\ud800 lone"}', 900: b'{"text": "bad \xff byte"}'}
    files = {"clean": rows, "mixed": [bad.get(i, r) for i, r in enumerate(rows)],
             "kept": [r for i, r in enumerate(rows) if i not in bad]}  # fmt: skip

    def hash_split(name: str) -> dict[str, bytes]:
        (tmp_path / f"{name}.jsonl").write_bytes(b"\n".join(files[name]) + b"\n")
        out = tmp_path / f"out-{name}"
        r = run_cli("source=file", f"source.path={name}.jsonl", "tokenizer=byte",
                    "split_by=hash", "source.skip_invalid=true", "shard_bytes=20000",
                    f"out_dir={out}", "quiet=true", cwd=tmp_path)  # fmt: skip
        assert r.returncode == 0, r.stderr
        return {f: (out / f).read_bytes() for f in ("train.bin", "val.bin")}

    mixed = hash_split("mixed")
    assert mixed != hash_split("clean")  # the bad rows' documents are missing
    assert mixed == hash_split("kept")
    assert mixed["val.bin"], "the hash split sent nothing to val"


def test_documents_go_to_their_side_the_same_by_copy_or_by_mask(tmp_path: Path, monkeypatch):
    """The merge copies long runs of one side's documents whole (in the kernel) and picks
    short ones out by a mask: the same bytes either way."""
    from helpers import compose

    import corpusprep.merge as merge
    from corpusprep.prepare import prepare

    rows = [json.dumps({"text": f"document {i}: " + "some words " * (i % 30)}) for i in
            range(3000)]  # fmt: skip
    (tmp_path / "a.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    made = []
    for long_run in (1, 10**9):  # every run copied, every run masked
        monkeypatch.setattr(merge, "LONG_RUN", long_run)
        out = tmp_path / f"out{long_run}"
        prepare(compose("source=file", f"source.path={tmp_path / 'a.jsonl'}", "tokenizer=byte",
                        "shard_bytes=20000", f"out_dir={out}", "quiet=true"))  # fmt: skip
        made.append({p.name: p.read_bytes() for p in out.rglob("*.bin")})
    assert made[0] == made[1] and len(made[0]) == 4


def test_the_last_pieces_run_first(tmp_path: Path):
    """A compressed file's last piece (its size a guess, it decompresses the whole file)
    starts first, so it is not left to run alone at the end; the rest in plan order."""
    from corpusprep.formats import STREAM_END, InputFile, Segment
    from corpusprep.prepare import _runs_long
    from corpusprep.shards import EncodeTask, Shard

    packed = InputFile("a.jsonl.zst", "jsonl", "zstd", 1000)
    plain = InputFile("b.jsonl", "jsonl", "none", 10**6)
    shards = [
        Shard(0, (Segment(packed, 0, 100, 100),)),
        Shard(1, (Segment(packed, 100, 200, 100),)),
        Shard(2, (Segment(packed, 200, STREAM_END, 100),)),
        Shard(3, (Segment(plain, 0, 500, 500),)),
        Shard(4, (Segment(packed, 0, STREAM_END, 100),)),
    ]  # a whole file: not a piece
    tasks = [EncodeTask(shard, None) for shard in shards]
    ranked = sorted(tasks, key=_runs_long, reverse=True)
    assert [t.shard.index for t in ranked] == [2, 0, 1, 3, 4]


def test_the_longest_shards_run_first_and_a_files_pieces_stay_together(tmp_path: Path):
    """Uneven shards (Parquet row groups held whole: 13, 15, 2, 18, 20, 9 and 19 MB in
    the benchmark's two files) are taken longest first, so the short ones even out the
    workers at the end: in plan order, one of 2 workers had 54 MB to encode, the other
    42. Shards of about the same size keep the plan order, and a file's consecutive
    pieces stay together (its last one shorter), for one worker to read on through."""
    from corpusprep.formats import InputFile, Segment
    from corpusprep.prepare import _taking_order
    from corpusprep.shards import EncodeTask, Shard

    sizes = [13, 15, 2, 18, 20, 9, 19]
    whole = [Shard(i, (Segment(InputFile(f"{i}.txt", "text", size=n), 0, n, n),))
             for i, n in enumerate(sizes)]  # fmt: skip
    tasks = [EncodeTask(shard, None) for shard in whole]
    order = [t.shard.index for t in _taking_order(tasks)]
    assert order == [3, 4, 6, 1, 0, 5, 2]  # (18, 20 and 19: within an eighth of 20)
    busy = [0, 0]  # each worker takes the next shard when it is free
    for i in order:
        busy[busy.index(min(busy))] += sizes[i]
    assert max(busy) == 48  # (of 96)

    from corpusprep.formats import STREAM_END

    data = b"".join(b'{"text": "%d"}\n' % i for i in range(20_000))
    packed = tmp_path / "a.jsonl.zst"
    packed.write_bytes(zstandard.compress(data))
    file = InputFile(str(packed), "jsonl", "zstd", packed.stat().st_size)
    pieces = [(0, 100_000, 100_000), (100_000, 200_000, 100_000), (200_000, STREAM_END, 9)]
    shards = [Shard(i, (Segment(file, a, b, n),)) for i, (a, b, n) in enumerate(pieces)]
    small = InputFile("b.txt", "text", size=50_000)
    shards.append(Shard(3, (Segment(small, 0, 50_000, 50_000),)))
    tasks = [EncodeTask(shard, None) for shard in shards]
    assert [t.shard.index for t in _taking_order(tasks)] == [0, 1, 2, 3]


def test_shards_within_an_eighth_of_the_largest_keep_the_plan_order():
    """One text's shards end at line ends, so they differ by a few bytes: the longest of
    them is of the same size as the others (within an eighth of it), not taken first."""
    from corpusprep.formats import InputFile, Segment
    from corpusprep.prepare import _taking_order
    from corpusprep.shards import EncodeTask, Shard

    text = InputFile("a.txt", "text", size=10**6)
    sizes, start, shards = [100_004, 100_024, 100_002, 88_000, 74_107], 0, []
    for i, n in enumerate(sizes):
        shards.append(Shard(i, (Segment(text, start, start + n, n),)))
        start += n
    order = [t.shard.index for t in _taking_order([EncodeTask(s, None) for s in shards])]
    assert order == [0, 1, 2, 3, 4]


def test_the_error_said_is_the_first_in_the_input_whatever_order_shards_are_taken(tmp_path):
    """Shards are taken longest first (and a guessed compressed file's last piece before
    them), but of two bad lines the run names the one earlier in the input, as a run in
    plan order did: here the second file's long shards are taken before the first file's
    short last one, where its bad line is."""
    from helpers import compose

    from corpusprep.errors import UserError
    from corpusprep.prepare import prepare

    line = json.dumps({"text": "a document of some words " * 4}) + "\n"
    (tmp_path / "a.jsonl").write_text(line * 250 + "{not json\n")  # 30 KB: 20 + 10 KB
    (tmp_path / "b.jsonl").write_text("{not json either\n" + line * 400)  # 2 x 20 KB
    for workers in (1, 2):
        with pytest.raises(UserError, match=r"a\.jsonl:251"):
            prepare(compose("source=files", f"source.glob={tmp_path}/*.jsonl", "tokenizer=byte",
                            "shard_bytes=20000", f"executor.workers={workers}",
                            f"out_dir={tmp_path / str(workers)}", "quiet=true"))  # fmt: skip


def test_a_small_corpus_is_still_cut_into_enough_shards(tmp_path: Path):
    """Under 64 shards of shard_bytes, shards shrink (to 1 MiB at least), so that uneven
    text still spreads over the workers; the size comes from the input alone."""
    from corpusprep.formats import InputFile
    from corpusprep.prepare import ENOUGH_SHARDS, MIN_SHARD_BYTES, balanced_shard_bytes

    def files(*sizes: int) -> list:
        return [InputFile(f"f{i}.txt", "text", size=size) for i, size in enumerate(sizes)]

    assert balanced_shard_bytes(files(50 * 10**6), 8 << 20) == MIN_SHARD_BYTES
    assert balanced_shard_bytes(files(100 * 10**6, 100 * 10**6), 8 << 20) == 200 * 10**6 // 64
    assert balanced_shard_bytes(files(10**10), 8 << 20) == 8 << 20
    assert balanced_shard_bytes(files(10**9), 4096) == 4096  # asked for smaller: kept
    assert ENOUGH_SHARDS == 64
    # under two of MIN_SHARD_BYTES: one shard, whatever shard_bytes allows above that
    assert balanced_shard_bytes(files(10**4), 8 << 20) == 10**4
    assert balanced_shard_bytes(files(2 * MIN_SHARD_BYTES - 1), 8 << 20) == 2 * MIN_SHARD_BYTES - 1
    assert balanced_shard_bytes(files(2 * MIN_SHARD_BYTES), 8 << 20) == MIN_SHARD_BYTES
    assert balanced_shard_bytes(files(10**6, 10**6), 100_000) == 100_000


def test_tiny_shakespeare_is_one_shard_encoded_without_workers(tmp_path, shakespeare, monkeypatch):
    """nanoGPT's 1.1 MB corpus is one shard: no worker is started for it (two shards of 1
    MiB and 67 KB cost more in process start-up than they saved); the files are the same."""
    import corpusprep.executors.local as local

    def no_pool(self, workers):
        raise AssertionError("a worker pool was started")

    monkeypatch.setattr(local.LocalExecutor, "_new_pool", no_pool)
    from helpers import compose

    from corpusprep.prepare import prepare

    one = prepare(compose("dataset=shakespeare_char", f"out_dir={tmp_path / 'one'}", "quiet=true"))
    assert one["shards"]["count"] == 1
    assert one["tokens"] == {"train": 1_003_854, "val": 111_540}
    monkeypatch.undo()
    more = prepare(compose("dataset=shakespeare_char", f"out_dir={tmp_path / 'more'}",
                           "shard_bytes=200000", "executor.workers=2", "quiet=true"))  # fmt: skip
    assert more["shards"]["count"] > 2
    for name in ("train.bin", "val.bin", "meta.pkl"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "more" / name).read_bytes()


def test_characters_counted_from_bytes_are_the_scans(tmp_path: Path, monkeypatch):
    """One plain text for BPE is not scanned: its bytes give the character count nanoGPT's
    split needs, "\\r\\n" as one character even across two blocks, multi-byte characters
    as one."""
    import random

    import corpusprep.text as text_module
    from corpusprep.formats import InputFile, Segment
    from corpusprep.shards import Shard, count_characters, scan_shard

    monkeypatch.setattr(text_module, "COUNT_BLOCK", 7)  # blocks end everywhere, "\r" | "\n" too
    rng = random.Random(5)
    for trial in range(40):
        text = "".join(rng.choice(["a", "\r\n", "\r", "\n", "é", "€", "𝄞", " x"])
                       for _ in range(rng.randint(1, 300)))  # fmt: skip
        path = tmp_path / f"t{trial}.txt"
        path.write_bytes(text.encode())
        shard = Shard(0, (Segment(InputFile(str(path), "text", size=path.stat().st_size), 0,
                                  path.stat().st_size, 1),))  # fmt: skip
        assert count_characters(shard).chars == scan_shard(shard).chars, text


def test_one_text_for_bpe_is_not_scanned(tmp_path: Path):
    (tmp_path / "t.txt").write_text("a text\r\nwith two lines é\n" * 5000, encoding="utf-8")
    (tmp_path / "bad.txt").write_bytes(b"fine text\n" * 1000 + b"\xff\n")
    r = run_cli("source=file", "source.path=t.txt", "tokenizer=tiktoken", "out_dir=out",
                "quiet=true", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["chars"] == len("a text\nwith two lines é\n") * 5000
    assert manifest["split"]["train_chars"] == int(manifest["chars"] * 0.9)
    r = run_cli("source=file", "source.path=bad.txt", "tokenizer=tiktoken", "out_dir=out2",
                "quiet=true", cwd=tmp_path)  # fmt: skip
    assert_one_line_error(r, "bad.txt: not valid UTF-8 at byte 10000")
    assert not (tmp_path / "out2" / "train.bin").exists()


def test_skipping_to_a_piece_finds_the_line_a_readline_each_finds(monkeypatch):
    """_skip_lines reads in blocks: the first line starting at or after the piece's start,
    and the lines before it, as reading the stream a line at a time finds them."""
    import io
    import random

    from corpusprep.formats import jsonl

    def by_lines(data: bytes, start: int) -> tuple[int, int]:
        offset = lines = 0
        for line in io.BytesIO(data):
            if offset >= start:
                break
            offset, lines = offset + len(line), lines + 1
        return offset, lines

    rng = random.Random(5)
    data = b"\n".join(_rows(400)) + b"\n"
    unterminated = data + b'{"text": "no newline at the end"}'
    starts = {1, 2, len(data) - 1, len(data), len(data) + 5, *rng.sample(range(len(data)), 300)}
    for text in (data, unterminated):
        for start in sorted(starts) + [data.index(b"\n", 9000) + k for k in (0, 1, 2)]:
            for block in (7, 1 << 20):
                monkeypatch.setattr(jsonl, "SKIP_BLOCK", block)
                got = jsonl._skip_lines(io.BufferedReader(io.BytesIO(text)), start, 100)
                assert got == by_lines(text, start), (start, block)


def test_pieces_read_in_turn_share_one_stream_in_any_order_the_same_lines(tmp_path, monkeypatch):
    """A process that reads a compressed file's pieces one after the other decompresses
    the file once (compression.Streams keeps its stream where a piece ended); in any other
    order each piece still gets exactly its lines, with its line numbers."""
    import random

    from corpusprep import compression
    from corpusprep.formats import STREAM_END, InputFile, Segment
    from corpusprep.formats.jsonl import FORMAT

    data = b"\n".join(_rows(900)) + b"\n"
    path = tmp_path / "a.jsonl.zst"
    path.write_bytes(zstandard.compress(data))
    file = InputFile(str(path), "jsonl", "zstd", path.stat().st_size)
    bounds = [0, 9_000, 9_001, 30_000, 70_000, 110_000, STREAM_END]
    segments = [Segment(file, a, b, 1) for a, b in zip(bounds, bounds[1:])]
    with monkeypatch.context() as m:  # each on a stream of its own, closed after its piece
        m.setattr(compression.STREAMS, "keep", lambda stream, *_: stream.f.close())
        expected = {s: list(FORMAT._lines(s)) for s in segments}
    opened = []
    real = compression.open_raw
    monkeypatch.setattr(compression, "open_raw", lambda *a: opened.append(a) or real(*a))
    compression.STREAMS.close()
    assert [line for s in segments for line in FORMAT._lines(s)] == [
        line for s in segments for line in expected[s]]  # fmt: skip
    assert len(opened) == 1  # in turn: one stream for the whole file
    rng = random.Random(3)
    for _ in range(5):
        order = rng.sample(segments, len(segments))
        for s in order:
            assert list(FORMAT._lines(s)) == expected[s], (s.start, s.end)
    # a piece read halfway (an error in it, a stop) leaves no stream behind to go on from
    next(FORMAT._lines(segments[2]))
    assert list(FORMAT._lines(segments[3])) == expected[segments[3]]
    # a changed file is opened again, not read on from the old text's stream
    list(FORMAT._lines(segments[0]))  # kept at byte 9,000 of the old text
    new = data.replace(b"doc 5", b"DOC 5")  # as long: only the time of change tells
    path.write_bytes(zstandard.compress(new))
    changed = InputFile(str(path), "jsonl", "zstd", path.stat().st_size)
    starts = [0, *(i + 1 for i, c in enumerate(new) if c == 10)][:-1]
    wanted = [(new[a : new.index(b"\n", a) + 1], n + 1) for n, a in enumerate(starts)
              if 9_000 <= a < 30_000]  # fmt: skip
    assert list(FORMAT._lines(Segment(changed, 9_000, 30_000, 1))) == wanted
    # a forked process starts with no stream: it would share the file offset with us
    list(FORMAT._lines(segments[0]))
    assert compression.STREAMS.kept is not None
    pid = os.fork()
    if pid == 0:
        os._exit(0 if compression.STREAMS.kept is None else 1)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    compression.STREAMS.close()
    assert compression.STREAMS.kept is None


def test_a_compressed_file_removed_between_pieces_is_one_line(tmp_path):
    from corpusprep.compression import STREAMS
    from corpusprep.errors import UserError
    from corpusprep.formats import STREAM_END, InputFile, Segment
    from corpusprep.formats.jsonl import FORMAT

    path = tmp_path / "a.jsonl.zst"
    path.write_bytes(zstandard.compress(b"\n".join(_rows(300)) + b"\n"))
    file = InputFile(str(path), "jsonl", "zstd", path.stat().st_size)
    list(FORMAT._lines(Segment(file, 0, 5000, 1)))
    path.unlink()
    with pytest.raises(UserError, match="a.jsonl.zst: cannot open as zstd"):
        list(FORMAT._lines(Segment(file, 5000, STREAM_END, 1)))
    STREAMS.close()


def test_runs_of_pieces_leave_the_files_as_they_were(tmp_path: Path, monkeypatch):
    """Workers take consecutive pieces of a compressed file in runs (prepare._runs), whose
    size depends on the workers: the files, the shards and the manifest's counts do not."""
    from helpers import runs_for_each_worker_count

    data = b"\n".join(_rows(3000)) + b"\n"
    stream = zstandard.ZstdCompressor().compressobj()  # no content size: a guessed size
    (tmp_path / "a.jsonl.zst").write_bytes(zstandard.compress(data))
    (tmp_path / "b.jsonl.zst").write_bytes(zstandard.compress(b"\n".join(_rows(3000)[::-1])))
    (tmp_path / "c.jsonl.zst").write_bytes(stream.compress(data) + stream.flush())
    made = []
    for runs, files, manifest in runs_for_each_worker_count(
        monkeypatch, tmp_path, "source=files", f"source.glob={tmp_path}/*.jsonl.zst",
        "tokenizer=tiktoken", "shard_bytes=4000", "eot=prepend",
    ):  # fmt: skip
        assert max(runs["encode"]) > 1 and min(runs["encode"]) == 1, runs
        made.append((files, manifest["shards"]["count"], manifest["documents"]))
    assert made[0] == made[1] == made[2]
    assert made[0][1] > 2 * MAX_PIECES


@pytest.mark.parametrize("split_by", ["hash", "position"])
def test_the_scan_takes_pieces_in_runs_too(tmp_path: Path, monkeypatch, split_by: str):
    """The scan pass (split_by=hash or position, a tokenizer that trains) reads every piece
    as the encode pass does, and takes a compressed file's consecutive pieces in runs too:
    with shards handed out one by one, each of many workers decompressed the whole file to
    skip to its own pieces. The files and counts are the same for any workers."""
    from helpers import runs_for_each_worker_count

    (tmp_path / "a.jsonl.zst").write_bytes(zstandard.compress(b"\n".join(_rows(3000)) + b"\n"))
    (tmp_path / "b.jsonl.zst").write_bytes(zstandard.compress(b"\n".join(_rows(2000)[::-1])))
    made = []
    for runs, files, manifest in runs_for_each_worker_count(
        monkeypatch, tmp_path, "source=files", f"source.glob={tmp_path}/*.jsonl.zst",
        "tokenizer=tiktoken", "shard_bytes=4000", "eot=prepend", f"split_by={split_by}",
    ):  # fmt: skip
        scanned = runs["scan"]
        assert max(scanned) > 1 and sum(scanned) == manifest["shards"]["count"], scanned
        made.append((files, manifest["shards"]["count"], manifest["documents"],
                     manifest["chars"]))  # fmt: skip
    assert made[0] == made[1] == made[2]
    assert made[0][1] > MAX_PIECES
