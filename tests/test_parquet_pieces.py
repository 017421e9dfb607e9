"""A Parquet row group holding more than a shard (pyarrow's write_table puts up to a
million rows in one) is cut into pieces by rows, so that every worker has work: the same
files for any shard size and worker count, each row read once, row numbers in messages
the file's own. A row group whose text is all in its dictionary page (as datasets writes
1,000 rows) stays whole: each piece would decode that page again."""

from __future__ import annotations

import hashlib
import json
import os
import random
from pathlib import Path

import pytest
from helpers import assert_one_line_error, run_cli

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from corpusprep.formats import MAX_PIECES, InputFile, Segment  # noqa: E402
from corpusprep.formats.parquet import FORMAT  # noqa: E402

OUTPUTS = ("train.bin", "val.bin", "doc_index/train.docs.bin", "doc_index/val.docs.bin")


def _as_datasets_writes(path: Path, texts: list, rows: int = 1000, **how) -> None:
    """A row group per `rows` rows, each written alone (pyarrow's ParquetWriter, as
    Dataset.to_parquet does)."""
    raw = any(isinstance(t, bytes) for t in texts)  # bytes: written as strings, unchecked
    with pq.ParquetWriter(path, pa.schema([("text", pa.string())]), **how) as writer:
        for start in range(0, len(texts), rows):
            chunk = texts[start : start + rows]
            values = pa.array(chunk, pa.binary()).view(pa.string()) if raw else pa.array(chunk)
            writer.write_table(pa.table({"text": values}))


def _texts(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [f"document {i}: " + "some words here " * rng.randint(0, 400) for i in range(n)]


def _read(file: InputFile, planned: list) -> list:
    return [part.whole for p in planned for part in FORMAT.parts(Segment(file, *p))]


def test_a_big_row_group_is_cut_into_pieces_by_rows_that_read_each_row_once(tmp_path):
    path = tmp_path / "d.parquet"
    texts = _texts(2500)
    _as_datasets_writes(path, texts, use_dictionary=False)
    file = InputFile(path=str(path), format="parquet", size=path.stat().st_size)
    whole = FORMAT.plan(file, 1 << 40, None, pieces=True)
    assert [(a, b) for a, b, _ in whole] == [(0, 2500)]
    cut = FORMAT.plan(file, 200_000, None, pieces=True)
    assert len(cut) > 3 and cut[0][0] == 0 and cut[-1][1] == 2500
    assert all(a < b for a, b, _ in cut) and all(x[1] == y[0] for x, y in zip(cut, cut[1:]))
    assert max(sum(1 for a, _, _ in cut if a < 1000 * (g + 1) and a >= 1000 * g)
               for g in range(3)) <= MAX_PIECES  # fmt: skip
    assert _read(file, cut) == texts == _read(file, whole)
    # a tokenizer as fast as reading (char, byte) keeps row groups whole
    groups = [(0, 1000), (1000, 2000), (2000, 2500)]
    assert [(a, b) for a, b, _ in FORMAT.plan(file, 200_000, None)] == groups

    # so does a row group whose texts are its dictionary's entries, as datasets writes it
    _as_datasets_writes(path, texts)
    file = InputFile(path=str(path), format="parquet", size=path.stat().st_size)
    assert [(a, b) for a, b, _ in FORMAT.plan(file, 200_000, None, pieces=True)] == groups
    assert _read(file, FORMAT.plan(file, 200_000, None, pieces=True)) == texts


def test_the_process_that_read_a_piece_reads_on_into_the_next(tmp_path, monkeypatch):
    """A piece's reader decodes its row group's pages from their start to skip to its rows;
    the process that read the piece before (the workers take a row group's pieces in runs,
    prepare._runs), or an earlier one of the row group, goes on where it ended instead: the
    pages are decoded once a row group, not once a piece. Pieces read out of order still
    give exactly their rows, and a piece left unfinished is never read on from."""
    path = tmp_path / "d.parquet"
    texts = _texts(2500)
    _as_datasets_writes(path, texts, use_dictionary=False)
    file = InputFile(path=str(path), format="parquet", size=path.stat().st_size)
    cut = FORMAT.plan(file, 200_000, None, pieces=True)
    assert len(cut) > 6 and all(x[1] == y[0] for x, y in zip(cut, cut[1:]))
    decoded = []
    real = pq.ParquetFile.iter_batches

    def counting(self, *args, **kwargs):  # a row group's pages read from their start
        decoded.append(kwargs["row_groups"])
        return real(self, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", counting)
    assert _read(file, cut) == texts
    assert decoded == [[0], [1], [2]]
    decoded.clear()
    assert [t for p in cut[::-1] for t in _read(file, [p])[::-1]] == texts[::-1]
    assert len(decoded) == len(cut)
    decoded.clear()  # a later piece of the row group: read on to, the rows between skipped
    first_group = [p for p in cut if p[1] <= 1000]
    assert len(first_group) >= 3
    assert _read(file, first_group[:1] + first_group[2:3]) == (
        texts[: first_group[0][1]] + texts[first_group[2][0] : first_group[2][1]]
    )
    assert decoded == [[0]]
    decoded.clear()  # a piece left unfinished is not read on from
    parts = FORMAT.parts(Segment(file, *cut[0]))
    assert next(parts).whole == texts[0]
    parts.close()
    assert _read(file, cut[1:2]) == texts[cut[1][0] : cut[1][1]] and len(decoded) == 2
    decoded.clear()  # nor is a file written again since
    _read(file, cut[:1])
    _as_datasets_writes(path, texts[::-1], use_dictionary=False)
    file = InputFile(path=str(path), format="parquet", size=path.stat().st_size)
    assert _read(file, cut[1:2]) == texts[::-1][cut[1][0] : cut[1][1]] and len(decoded) == 2


def test_any_rows_in_any_order_read_as_pyarrow_reads_them(tmp_path):
    """Random bounds over row groups of every size (none, one row, small, dictionary or
    plain pages), read in any order from one process: each range gives exactly its rows."""
    path = tmp_path / "d.parquet"
    texts = _texts(3000, seed=1)
    schema = pa.schema([("text", pa.string())])
    rng = random.Random(2)
    with pq.ParquetWriter(path, schema, use_dictionary=False) as writer:
        at = 0
        while at < len(texts):
            rows = rng.choice([0, 1, 7, 300, 900])
            writer.write_table(pa.table({"text": texts[at : at + rows]}, schema=schema))
            at += rows
    file = InputFile(path=str(path), format="parquet", size=path.stat().st_size)
    for _ in range(40):
        bounds = sorted({0, len(texts), *rng.sample(range(1, len(texts)), rng.randint(1, 12))})
        ranges = list(zip(bounds, bounds[1:]))
        rng.shuffle(ranges)
        for a, b in ranges:
            assert _read(file, [(a, b, 1)]) == texts[a:b], (a, b)


@pytest.mark.parametrize("tokenizer", ["tiktoken", "char"])
def test_the_files_are_the_same_for_any_shard_size_and_workers(tmp_path, tokenizer):
    path = tmp_path / "d.parquet"  # row groups of 1,500 and 700 rows, cut into pieces
    pq.write_table(pa.table({"text": _texts(2200, seed=3)}), path, row_group_size=1500,
                   use_dictionary=False)  # fmt: skip
    made = {}
    for shard_bytes in ("1", "150000", "100000000"):
        for workers in ("1", "2"):
            out = tmp_path / f"out-{shard_bytes}-{workers}"
            result = run_cli("source=file", f"source.path={path}", f"tokenizer={tokenizer}",
                             f"shard_bytes={shard_bytes}", f"executor.workers={workers}",
                             f"out_dir={out}", "quiet=true", cwd=tmp_path)  # fmt: skip
            assert result.returncode == 0, result.stderr
            made[(shard_bytes, workers)] = [(out / name).read_bytes() for name in OUTPUTS]
            shards = json.loads((out / "manifest.json").read_text())["shards"]["count"]
            assert shards > 2 if shard_bytes == "150000" and tokenizer == "tiktoken" else True
    first = next(iter(made.values()))
    assert all(files == first for files in made.values())


def test_errors_name_the_files_own_row_from_a_piece(tmp_path):
    """A piece in the middle of a row group counts rows from the file's start."""
    path = tmp_path / "bad.parquet"
    texts = [t.encode() for t in _texts(2000, seed=4)]
    texts[1733] = b"bad \xff text"
    _as_datasets_writes(path, texts, use_dictionary=False)
    result = run_cli("source=file", f"source.path={path}", "tokenizer=tiktoken",
                     "shard_bytes=100000", f"out_dir={tmp_path / 'out'}", "quiet=true",
                     cwd=tmp_path)  # fmt: skip
    assert_one_line_error(result, "bad.parquet: row 1733", "source.skip_invalid=true")
    skipped = run_cli("source=file", f"source.path={path}", "tokenizer=tiktoken",
                      "shard_bytes=100000", "source.skip_invalid=true", "quiet=true",
                      f"out_dir={tmp_path / 'skipped'}", cwd=tmp_path)  # fmt: skip
    assert skipped.returncode == 0, skipped.stderr
    manifest = json.loads((tmp_path / "skipped" / "manifest.json").read_text())
    assert manifest["documents"]["skipped_invalid"] == 1
    assert manifest["documents"]["total"] == 1999


def test_max_bytes_adds_up_the_pieces_of_a_row_group(tmp_path):
    path = tmp_path / "d.parquet"
    texts = _texts(1000, seed=5)
    _as_datasets_writes(path, texts, use_dictionary=False)
    total = sum(len(t.encode()) for t in texts)
    common = ("source=file", f"source.path={path}", "tokenizer=tiktoken", "quiet=true",
              "shard_bytes=50000")  # fmt: skip
    over = run_cli(*common, f"source.max_bytes={total - 1}", f"out_dir={tmp_path / 'a'}",
                   cwd=tmp_path)  # fmt: skip
    assert_one_line_error(over, "d.parquet", f"source.max_bytes={total - 1}")
    at = run_cli(*common, f"source.max_bytes={total}", f"out_dir={tmp_path / 'b'}",
                 cwd=tmp_path)  # fmt: skip
    assert at.returncode == 0, at.stderr


def test_a_plan_of_rows_never_digests_as_the_row_groups_plan_before_it(tmp_path):
    """0.2.2 before rows planned a Parquet file by row groups, under the same version: a
    file of two rows and an empty row group after them (a writer's last, empty chunk) was
    (0, 1), (1, 2) then (its row groups) and is (0, 1), (1, 2) now (its rows, cut into
    pieces). The work folder is named by the plan's digest: the same digest took a killed
    run's marker for row group 0 (both rows) as row 0's, and row 1 came out twice."""
    from corpusprep.prepare import plan_digest
    from corpusprep.shards import Shard

    path = tmp_path / "d.parquet"
    schema = pa.schema([("text", pa.string())])
    with pq.ParquetWriter(path, schema, use_dictionary=False) as writer:
        writer.write_table(pa.table({"text": ["one " * 50, "two " * 50]}, schema=schema))
        writer.write_table(pa.table({"text": []}, schema=schema))
    file = InputFile(path=str(path), format="parquet", size=path.stat().st_size)
    planned = FORMAT.plan(file, 100, None, pieces=True)
    assert [(a, b) for a, b, _ in planned] == [(0, 1), (1, 2)]  # row groups 0 and 1 before
    shards = [Shard(i, (Segment(file, a, b, n),)) for i, (a, b, n) in enumerate(planned)]
    as_row_groups = "\n".join(f"{i}:{file.name}@{a}-{b}" for i, (a, b, _) in enumerate(planned))
    assert plan_digest(shards) != hashlib.sha256(as_row_groups.encode()).hexdigest()


def test_a_file_written_again_in_place_is_not_read_by_its_old_row_groups(tmp_path):
    """A library's process reads a file, which is then written again in place at the same
    size with its mtime put back (cp -p, rsync -a --inplace, touch -r): the row groups'
    first rows, kept per file, must be its new footer's (the ctime changed), or a segment
    reads other rows than it names."""
    path = tmp_path / "d.parquet"
    texts = [f"text {i}" for i in range(4)]  # the same lengths: the same size either way

    def write(row_group_size: int) -> None:
        pq.write_table(pa.table({"text": texts}), path, row_group_size=row_group_size,
                       use_dictionary=False, write_statistics=False,
                       compression="none")  # fmt: skip

    write(2)
    stat = path.stat()
    file = InputFile(path=str(path), format="parquet", size=stat.st_size)
    assert _read(file, [(2, 4, 1)]) == texts[2:]
    write(3)  # row groups of 3 and 1 rows: the same bytes but for their row counts
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_ino) == (stat.st_size, stat.st_ino)
    assert _read(file, [(2, 4, 1)]) == texts[2:]  # row group 0 holds row 2 now


def test_a_null_text_in_a_piece_names_its_row_and_a_fix(tmp_path):
    """A null (datasets' None) in the middle of a row group cut into pieces: the file's
    own row, and what to do (it named the row only); source.skip_invalid does not skip it
    (it leaves out text that is not UTF-8: a null is no text at all)."""
    path = tmp_path / "n.parquet"
    texts = _texts(2000, seed=6)
    texts[1733] = None
    _as_datasets_writes(path, texts, use_dictionary=False)
    for skip in ("false", "true"):
        result = run_cli("source=file", f"source.path={path}", "tokenizer=tiktoken",
                         "shard_bytes=100000", f"source.skip_invalid={skip}", "quiet=true",
                         f"out_dir={tmp_path / skip}", cwd=tmp_path)  # fmt: skip
        assert_one_line_error(result, "n.parquet: row 1733", "null", "drop")


def test_a_files_footer_is_parsed_once_however_many_shards_read_it(tmp_path, monkeypatch):
    """pq.ParquetFile's parse of the footer was most of a shard's time for a file of
    thousands of row groups (5,000 shards of one: 18 s, 8 s now): the footer is parsed
    once per file and process, and the rows read are the same."""
    path = tmp_path / "many.parquet"
    texts = [f"document {i}" for i in range(3000)]
    pq.write_table(pa.table({"text": texts}), path, row_group_size=3)
    file = InputFile(path=str(path), format="parquet", size=path.stat().st_size)
    planned = FORMAT.plan(file, 1, None)
    assert len(planned) == 1000
    parsed = []
    real = pq.ParquetFile

    def counting(source, *args, **kwargs):
        parsed.append(kwargs.get("metadata") is None)
        return real(source, *args, **kwargs)

    monkeypatch.setattr(pq, "ParquetFile", counting)
    assert _read(file, planned) == texts
    assert sum(parsed) == 1 and len(parsed) == 1000


def test_a_row_groups_pieces_go_to_workers_in_runs_and_the_files_stay_the_same(
    tmp_path, monkeypatch
):
    """The workers take consecutive pieces of a row group in runs (prepare._runs), each
    reading on where the piece before ended; how long the runs are depends on the workers,
    the files, the shards and the manifest's counts do not."""
    from helpers import runs_for_each_worker_count

    _as_datasets_writes(tmp_path / "a.parquet", _texts(1500, seed=4), use_dictionary=False)
    _as_datasets_writes(tmp_path / "b.parquet", _texts(700, seed=5), rows=700,
                        use_dictionary=False)  # fmt: skip
    made = []
    for runs, files, manifest in runs_for_each_worker_count(
        monkeypatch, tmp_path, "source=files", f"source.glob={tmp_path}/*.parquet",
        "tokenizer=tiktoken", "shard_bytes=40000", "eot=prepend",
    ):  # fmt: skip
        assert max(runs["encode"]) > 1, runs
        made.append(([files[name] for name in OUTPUTS], manifest["shards"]["count"],
                     manifest["documents"]))  # fmt: skip
    assert made[0] == made[1] == made[2]
    assert made[0][1] > 2 * MAX_PIECES


def test_a_worker_reads_on_only_into_the_next_piece_of_the_same_row_group(tmp_path):
    """Runs (prepare._runs) join a row group's consecutive pieces, which a worker reads on
    through; not whole row groups, each decoded from its start anyway (a run of them would
    only keep other workers from sharing them), nor pieces of another file."""
    path, other = tmp_path / "d.parquet", tmp_path / "e.parquet"
    _as_datasets_writes(path, _texts(2500), use_dictionary=False)
    _as_datasets_writes(other, _texts(2500), use_dictionary=False)
    file, elsewhere = (InputFile(path=str(p), format="parquet", size=p.stat().st_size)
                       for p in (path, other))  # fmt: skip
    segments = [Segment(file, *p) for p in FORMAT.plan(file, 200_000, None, pieces=True)]
    follows = [FORMAT.reads_on(a, b) for a, b in zip(segments, segments[1:])]
    group_starts = {1000, 2000}
    assert follows == [b.start not in group_starts for b in segments[1:]]
    assert follows.count(False) == 2 and True in follows
    a, b = segments[0], segments[1]
    assert not FORMAT.reads_on(a, Segment(elsewhere, b.start, b.end, b.nbytes))
    assert not FORMAT.reads_on(a, segments[2])  # not the next one
    whole = [Segment(file, *p) for p in FORMAT.plan(file, 200_000, None)]  # row groups
    assert len(whole) == 3 and not any(map(FORMAT.reads_on, whole, whole[1:]))
    # a file gone or damaged since the plan: no run (its reader, in a worker, says so)
    path.write_bytes(b"PAR1 not any more")
    assert not FORMAT.reads_on(segments[0], segments[1])
    path.unlink()
    assert not FORMAT.reads_on(segments[0], segments[1])


def test_a_dry_run_keeps_no_reading_open(tmp_path, monkeypatch):
    """dry_run reads a sample of pieces in the driver: a piece that ends inside its row
    group left its reading kept (the file open, its rows decoded) after estimate returned,
    in a library's or a sweep's process, which no pass's end then let go of."""
    from helpers import compose

    import corpusprep.estimate as estimate_module
    from corpusprep.formats.parquet import _READ_ON

    path = tmp_path / "d.parquet"
    _as_datasets_writes(path, _texts(3000), rows=3000, use_dictionary=False)
    monkeypatch.setattr(estimate_module, "SAMPLE_BYTES", 300_000)
    read_on = []
    real = _READ_ON.keep
    monkeypatch.setattr(_READ_ON, "keep", lambda reading: read_on.append(1) or real(reading))
    done = estimate_module.estimate(compose("source=file", f"source.path={path}",
                                            "tokenizer=tiktoken", "shard_bytes=100000",
                                            "dry_run=true", f"out_dir={tmp_path / 'out'}",
                                            "quiet=true"))  # fmt: skip
    assert not done["exact"] and read_on
    assert _READ_ON.kept is None


def test_letting_go_while_another_thread_loads_a_format(monkeypatch):
    """A library's two runs in threads: one's pass ends (let_go_of_readers walks the
    formats loaded) while the other loads its first file of another format: the walk
    raised 'dictionary changed size during iteration'."""
    import threading

    import corpusprep.formats as formats

    formats.get_format("parquet")
    monkeypatch.delitem(formats._LOADED, "lines", raising=False)
    real = FORMAT.let_go

    def meanwhile() -> None:  # the other thread's run plans its first file of lines
        other = threading.Thread(target=formats.get_format, args=("lines",))
        other.start()
        other.join()
        real()

    monkeypatch.setattr(FORMAT, "let_go", meanwhile)
    formats.let_go_of_readers()
    assert "lines" in formats._LOADED
