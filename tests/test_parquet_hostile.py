"""Parquet files from a stranger: a few hundred bytes that decode to hundreds of MB (one
long text repeated, stored once in a dictionary or as shared prefixes), invalid UTF-8 in a
string column, a damaged footer, a Parquet file under another name. Memory stays bounded,
source.max_bytes holds, and every mistake is one line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import REPO, assert_one_line_error, run_cli

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

LONG = ("lorem ipsum dolor sit amet " * 80_000)[:2_000_000] + "\n"  # 2 MB
COPIES = 128  # 256 MB of text in a file of a few hundred bytes

# reads every document of a Parquet file as corpusprep's workers do; prints the peak RSS
# (VmHWM: this program's own; ru_maxrss keeps the forking parent's across exec)
READ_ALL = """
import re, sys
from corpusprep.formats import InputFile, Segment
from corpusprep.formats.parquet import FORMAT
path, limit = sys.argv[1], int(sys.argv[2])
file = InputFile(path=path, format="parquet", compression="none", size=0,
                 max_uncut_bytes=limit)
chars = 0
for planned in FORMAT.plan(file, 1 << 26, None):
    for part in FORMAT.parts(Segment(file, *planned)):
        chars += sum(len(p) for p in part.pieces)
status = open("/proc/self/status").read()
print(chars, int(re.search(r"VmHWM:\\s*(\\d+) kB", status).group(1)) * 1024)
"""


def _bomb(path, dictionary_type: bool = False, **how) -> None:
    texts = pa.array([LONG] * COPIES)
    texts = texts.dictionary_encode() if dictionary_type else texts
    pq.write_table(pa.table({"text": texts}), path, compression="zstd", **how)
    assert path.stat().st_size < 10_000


def _read_all(path, limit: int) -> tuple[int, int]:
    done = subprocess.run([sys.executable, "-c", READ_ALL, str(path), str(limit)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    chars, peak = map(int, done.stdout.split())
    return chars, peak


BOMBS = {
    "dictionary": {},  # pyarrow's default: the text stored once, 128 indices
    "shared prefixes": {"use_dictionary": False, "column_encoding": {"text": "DELTA_BYTE_ARRAY"}},
    "dictionary-typed": {"dictionary_type": True},  # the arrow type kept in the file
}


@pytest.mark.parametrize("how", BOMBS, ids=list(BOMBS))
def test_a_small_file_that_decodes_to_much_text_is_read_in_bounded_memory(how, tmp_path):
    """The footer counts such a text once, not once per row: batches are sized by the
    largest page instead (no value is longer), so a few rows are held at a time."""
    path = tmp_path / "bomb.parquet"
    _bomb(path, **BOMBS[how])
    chars, peak = _read_all(path, 4 << 20)
    assert chars == COPIES * len(LONG)  # every document, whole
    assert peak < 250e6, f"{peak / 1e6:.0f} MB"  # 256 MB of text: before, about 800 MB


def test_long_texts_the_footers_average_hides_are_read_a_few_at_a_time(tmp_path):
    """Texts of 1 MiB before 15,000 of one letter, a page each: the footer's average says
    short texts, and a batch of 1024 rows held all of them. (A page pyarrow holds whole,
    however many texts it has: a writer that puts them all in one page costs that page.)"""
    path = tmp_path / "hidden.parquet"
    texts = pa.array([LONG[: 1 << 20]] * 300 + ["t"] * 15_400)  # noqa: RUF005
    pq.write_table(pa.table({"text": texts}), path, compression="zstd", use_dictionary=False,
                   write_batch_size=1, data_page_size=1 << 20)  # fmt: skip
    chars, peak = _read_all(path, 64 << 20)
    assert chars == 300 * (1 << 20) + 15_400
    assert peak < 700e6, f"{peak / 1e6:.0f} MB"  # before: 1.26 GB; pyarrow holds 7x a batch


# reads every document of a Parquet file as a worker does; prints the most memory pyarrow
# held at once (its pool's peak: the texts, pages and dictionaries it decoded)
POOL_PEAK = """
import sys
import pyarrow as pa
from corpusprep.formats import InputFile, Segment
from corpusprep.formats.parquet import FORMAT
file = InputFile(path=sys.argv[1], format="parquet", compression="none", size=0)
texts = [part.whole for planned in FORMAT.plan(file, 1, None)
         for part in FORMAT.parts(Segment(file, *planned))]
print(sum(map(len, texts)), max(pa.default_memory_pool().max_memory(),
                                pa.system_memory_pool().max_memory()))
"""


def test_a_row_group_written_as_datasets_writes_it_costs_its_dictionary_once(tmp_path):
    """datasets (Dataset.to_parquet) writes each 1,000 rows as a row group whose texts are
    all in its dictionary page, an entry per row. Read as indices into the dictionary
    (which is for texts many rows share), in batches as big as two of its pages, pyarrow
    held 5x the row group's text; read as texts a few MB at a time, 2.5x."""
    path = tmp_path / "datasets.parquet"
    with pq.ParquetWriter(path, pa.schema([("text", pa.string())])) as writer:
        for group in range(2):
            writer.write_table(pa.table({"text": [f"{group} {i} " + "word " * 4000
                                                  for i in range(1000)]}))  # fmt: skip
    meta = pq.ParquetFile(path).metadata
    assert "RLE_DICTIONARY" in meta.row_group(0).column(0).encodings
    text = meta.row_group(0).column(0).total_uncompressed_size  # about 20 MB
    done = subprocess.run([sys.executable, "-c", POOL_PEAK, str(path)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    chars, peak = map(int, done.stdout.split())
    assert chars == sum(len(t) for t in pq.read_table(path).column("text").to_pylist())
    assert peak < 3 * text, f"{peak / text:.1f}x"


def test_reading_leaves_the_callers_pyarrow_pool_as_it_was(tmp_path):
    """Segments are read with the C allocator's pool (what a row group frees goes back to
    the system); a program that reads through corpusprep keeps its own pool after."""
    from corpusprep.formats import InputFile, Segment
    from corpusprep.formats.parquet import FORMAT

    path = tmp_path / "d.parquet"
    pq.write_table(pa.table({"text": [f"text {i}" for i in range(3000)]}), path,
                   row_group_size=1000)  # fmt: skip
    file = InputFile(path=str(path), format="parquet", size=path.stat().st_size)
    before = pa.default_memory_pool().backend_name
    seen = set()
    for planned in FORMAT.plan(file, 1, None):
        for _ in FORMAT.parts(Segment(file, *planned)):
            seen.add(pa.default_memory_pool().backend_name)
    assert seen == {"system"} and pa.default_memory_pool().backend_name == before
    parts = FORMAT.parts(Segment(file, *FORMAT.plan(file, 1, None)[0]))
    next(parts)
    parts.close()  # a reader stopped halfway (an error in the shard) gives it back too
    assert pa.default_memory_pool().backend_name == before


def test_pages_tell_a_dictionary_of_shared_texts_from_one_of_a_text_a_row(tmp_path):
    from corpusprep.formats.parquet_pages import read_pages

    shared, own = tmp_path / "shared.parquet", tmp_path / "own.parquet"
    pq.write_table(pa.table({"text": ["same text"] * 5000 + ["other"] * 5000}), shared)
    pq.write_table(pa.table({"text": [f"text {i}" for i in range(10_000)]}), own)
    for path, expected in ((shared, True), (own, False)):
        meta = pq.ParquetFile(path).metadata.row_group(0)
        pages = read_pages(str(path), meta, 0)
        assert pages is not None and pages.dictionary_only
        assert pages.shared is expected


def test_a_dictionary_typed_column_gives_pyarrows_texts(tmp_path):
    """Its dictionary holds every text of the row group: rows are read as indices into it
    and expanded a few at a time, as pyarrow's own reading gives them."""
    path = tmp_path / "typed.parquet"
    texts = [f"document {i}: " + "some words " * (i % 50) for i in range(30_000)]
    texts[7] = texts[9]
    pq.write_table(pa.table({"text": pa.array(texts).dictionary_encode()}), path,
                   row_group_size=10_000)  # fmt: skip
    from corpusprep.formats import InputFile, Segment
    from corpusprep.formats.parquet import FORMAT

    file = InputFile(path=str(path), format="parquet", compression="none", size=0,
                     max_uncut_bytes=4096)  # fmt: skip
    read = [part.whole for planned in FORMAT.plan(file, 1 << 20, None)
            for part in FORMAT.parts(Segment(file, *planned))]  # fmt: skip
    assert read == pq.read_table(path).column("text").to_pylist() == texts


def test_max_bytes_caps_the_text_a_parquet_file_decodes_to(tmp_path):
    path = tmp_path / "bomb.parquet"
    _bomb(path)
    result = run_cli("source=file", f"source.path={path}", "source.max_bytes=10000000",
                     "tokenizer=char", f"out_dir={tmp_path}/out", "quiet=true",
                     cwd=tmp_path)  # fmt: skip
    assert_one_line_error(result, "bomb.parquet", "source.max_bytes=10000000")
    assert not (tmp_path / "out" / "train.bin").exists()


def _row_groups(path, groups: int, rows: int = 100, size: int = 10_000) -> int:
    """A Parquet file of `groups` row groups, each `rows` distinct texts of `size` bytes;
    returns the bytes of text the file holds."""
    texts = [(f"row {i} " + "text " * size)[:size] for i in range(groups * rows)]
    pq.write_table(pa.table({"text": texts}), path, row_group_size=rows)
    return groups * rows * size


@pytest.mark.parametrize("shard_bytes", ["1", "1000000", "100000000"])
@pytest.mark.parametrize("workers", ["1", "2"])
def test_max_bytes_caps_a_parquet_files_whole_text_however_it_is_sharded(
    tmp_path, shard_bytes, workers
):
    """source.max_bytes is the cap on the whole file's text, whatever the shards: a file
    of 10 row groups of 1 MB each used to pass a 3 MB cap, each of its shards (one per
    row group or two) holding less than that."""
    path = tmp_path / "groups.parquet"
    total = _row_groups(path, groups=10)
    common = ("source=file", f"source.path={path}", "tokenizer=char", "quiet=true",
              f"shard_bytes={shard_bytes}", f"executor.workers={workers}")  # fmt: skip
    result = run_cli(*common, f"source.max_bytes={total // 3}", f"out_dir={tmp_path}/out",
                     cwd=tmp_path)  # fmt: skip
    assert_one_line_error(result, "groups.parquet", f"source.max_bytes={total // 3}")
    assert not (tmp_path / "out" / "train.bin").exists()
    # at the cap exactly it passes, as an uncompressed file of that size does
    result = run_cli(*common, f"source.max_bytes={total}", f"out_dir={tmp_path}/ok",
                     cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "ok" / "train.bin").exists()


def test_a_resume_adds_up_the_text_its_finished_shards_read(tmp_path):
    """A re-run takes the finished shards' counts from their markers: a cap that the
    whole file passes only because most of it was read by an earlier run still fails.
    A marker written without the cap has no counts: its shard is read again. (The byte
    tokenizer: char's scan pass, which reads every shard again, stops such a run first.)"""
    import os

    path = tmp_path / "groups.parquet"
    total = _row_groups(path, groups=10)
    flag = tmp_path / "fail"
    env = {"PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")]),
           "CORPUSPREP_PLUGIN_PACKAGES": "fault_tokenizers"}  # fmt: skip
    args = ("source=file", f"source.path={path}", "shard_bytes=1", "executor.workers=1",
            "tokenizer._target_=fault_tokenizers.FailWhileFlagByteTokenizer",
            f"+tokenizer.flag={flag}", "+tokenizer.fail_after=800", "out_dir=out")  # fmt: skip

    def crash(*cap: str) -> None:
        flag.touch()
        result = run_cli(*args, *cap, cwd=tmp_path, env=env)
        assert result.returncode != 0 and "injected failure" in result.stderr
        flag.unlink()
        work = next((tmp_path / "out" / ".corpusprep-work").iterdir())
        assert len(list(work.glob("*.done"))) >= 5  # most of the file read

    for first in ((), (f"source.max_bytes={total}",)):  # uncapped, then capped
        crash(*first)
        result = run_cli(*args, f"source.max_bytes={total // 3}", cwd=tmp_path, env=env)
        resuming = [line for line in result.stderr.splitlines() if "resuming" in line]
        assert len(resuming) == bool(first), result.stderr
        result.stderr = result.stderr.replace("".join(f"{line}\n" for line in resuming), "")
        assert_one_line_error(result, "groups.parquet", f"source.max_bytes={total // 3}")
    crash(f"source.max_bytes={total}")  # at the cap exactly, resumed: it passes
    result = run_cli(*args, f"source.max_bytes={total}", cwd=tmp_path, env=env)
    assert result.returncode == 0 and "resuming" in result.stderr, result.stderr


@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("needs", ["split_by=hash", "split_by=position"])
def test_the_scan_pass_stops_once_a_parquet_files_shards_add_up_past_max_bytes(
    tmp_path, needs, workers
):
    """A run that counts first (split_by=hash or position, a tokenizer that trains) reads
    the file in its scan pass: that pass adds the shards' text up too, and stops the run
    there. It read the whole file (any multiple of the cap, a shard at a time under it)
    and only the encode pass stopped; here the encode pass fails at its first piece, so
    only the scan can give the cap's line."""
    import os

    path = tmp_path / "groups.parquet"
    total = _row_groups(path, groups=10)
    flag = tmp_path / "fail"
    flag.touch()
    env = {"PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")]),
           "CORPUSPREP_PLUGIN_PACKAGES": "fault_tokenizers"}  # fmt: skip
    result = run_cli("source=file", f"source.path={path}", "shard_bytes=1", needs,
                     f"executor.workers={workers}", "executor.retries=0",
                     "tokenizer._target_=fault_tokenizers.FailWhileFlagCharTokenizer",
                     f"+tokenizer.flag={flag}", "+tokenizer.fail_after=0", "quiet=true",
                     f"source.max_bytes={total // 3}", "out_dir=out", cwd=tmp_path,
                     env=env)  # fmt: skip
    assert_one_line_error(result, "groups.parquet", f"source.max_bytes={total // 3}")


def _with_invalid_utf8(path, row: int, rows: int = 3000) -> None:
    values = [b"good document %d" % i for i in range(rows)]
    values[row] = b"bad \xff text"
    pq.write_table(pa.table({"text": pa.array(values, pa.binary()).view(pa.string())}), path)


def test_invalid_utf8_names_its_row_and_says_how_to_skip_it(tmp_path):
    path = tmp_path / "bad.parquet"
    _with_invalid_utf8(path, row=1500)
    result = run_cli("source=file", f"source.path={path}", "tokenizer=char",
                     f"out_dir={tmp_path}/out", "quiet=true", cwd=tmp_path)  # fmt: skip
    assert_one_line_error(result, "bad.parquet: row 1500", "source.skip_invalid=true")


def test_skip_invalid_leaves_the_row_out_and_counts_it(tmp_path):
    path = tmp_path / "bad.parquet"
    _with_invalid_utf8(path, row=5)
    good = tmp_path / "good.jsonl"
    good.write_text("".join(json.dumps({"text": f"good document {i}"}) + "\n"
                            for i in range(3000) if i != 5))  # fmt: skip
    for name, src in (("p", path), ("j", good)):
        result = run_cli("source=file", f"source.path={src}", "source.skip_invalid=true",
                         "tokenizer=char",
                         f"out_dir={tmp_path}/{name}", "quiet=true", cwd=tmp_path)  # fmt: skip
        assert result.returncode == 0, result.stderr
    manifest = json.loads((tmp_path / "p" / "manifest.json").read_text())
    assert manifest["documents"]["skipped_invalid"] == 1
    for out in ("train.bin", "val.bin"):
        assert (tmp_path / "p" / out).read_bytes() == (tmp_path / "j" / out).read_bytes()


def test_a_damaged_footer_is_one_line(tmp_path):
    path = tmp_path / "f.parquet"
    pq.write_table(pa.table({"text": [f"document {i}" for i in range(60_000)]}), path,
                   row_group_size=700)  # fmt: skip
    data = bytearray(path.read_bytes())
    for i in range(1, 60):
        data[-8 - i * 37] ^= 0x55
    path.write_bytes(bytes(data))
    result = run_cli("source=file", f"source.path={path}", f"out_dir={tmp_path}/out",
                     "quiet=true", cwd=tmp_path)  # fmt: skip
    assert_one_line_error(result, "f.parquet", "not a readable Parquet file")


def test_a_damaged_page_is_one_line_that_says_to_fetch_the_file_again(tmp_path):
    """Bytes changed inside a compressed page (a bad disk, a download cut and patched):
    the row where reading stopped, what pyarrow said, and what to do."""
    path = tmp_path / "f.parquet"
    texts = [f"document {i} " + "words " * (i % 300) for i in range(20_000)]
    pq.write_table(pa.table({"text": texts}), path, compression="zstd", use_dictionary=False)
    data = bytearray(path.read_bytes())
    for i in range(len(data) // 3, len(data) // 3 + 2000, 97):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))
    result = run_cli("source=file", f"source.path={path}", f"out_dir={tmp_path}/out",
                     "quiet=true", "tokenizer=byte", cwd=tmp_path)  # fmt: skip
    assert_one_line_error(result, "f.parquet: cannot read row", "damaged", "again")


@pytest.mark.parametrize("name", ["docs.jsonl", "docs.txt", "docs"])
def test_a_parquet_file_under_another_name_is_read_as_parquet(name, tmp_path):
    """source.format=auto knows Parquet by its bytes (PAR1 at both ends), not only by name."""
    table = pa.table({"text": ["a document", "another one"] * 50})
    pq.write_table(table, tmp_path / name)
    pq.write_table(table, tmp_path / "docs.parquet")
    for src, out in ((name, "named"), ("docs.parquet", "parquet")):
        result = run_cli("source=file", f"source.path={src}", "tokenizer=char",
                         f"out_dir={out}", "quiet=true", cwd=tmp_path)  # fmt: skip
        assert result.returncode == 0, result.stderr
    for out in ("train.bin", "val.bin", "meta.pkl"):
        assert (tmp_path / "named" / out).read_bytes() == (tmp_path / "parquet" / out).read_bytes()


def test_texts_within_the_limit_are_never_refused(tmp_path):
    """The footer's size counts lengths, levels and a dictionary repeated in every row
    group: only what the pages surely hold refuses a row group unread."""
    from corpusprep.formats import InputFile, Segment
    from corpusprep.formats.parquet import FORMAT

    cases = {
        "exact.parquet": (["x" * 1000], {}, 1000),
        "typed.parquet": (
            [f"{i:03d}" + "y" * 497 for i in range(100)],
            {"row_group_size": 10},
            4000,
        ),
    }
    for name, (texts, how, limit) in cases.items():
        column = pa.array(texts)
        column = column.dictionary_encode() if name == "typed.parquet" else column
        pq.write_table(pa.table({"text": column}), tmp_path / name, **how)
        file = InputFile(path=str(tmp_path / name), format="parquet", compression="none",
                         size=0, max_uncut_bytes=limit)  # fmt: skip
        read = [part.whole for planned in FORMAT.plan(file, 1 << 20, None)
                for part in FORMAT.parts(Segment(file, *planned))]  # fmt: skip
        assert read == texts, name


def test_many_small_row_groups_of_dictionary_entries(tmp_path):
    """pyarrow's defaults with row groups of 20 rows: every chunk dictionary entries; the
    file is opened once for them, not once a row group (2,000 footers parsed: 60x slower)."""
    from corpusprep.formats import InputFile, Segment
    from corpusprep.formats.parquet import FORMAT

    texts = [f"doc {i % 97}" for i in range(4000)]
    path = tmp_path / "small-groups.parquet"
    pq.write_table(pa.table({"text": texts}), path, row_group_size=20)
    file = InputFile(path=str(path), format="parquet", compression="none", size=0)
    read = [part.whole for planned in FORMAT.plan(file, 1 << 20, None)
            for part in FORMAT.parts(Segment(file, *planned))]  # fmt: skip
    assert read == texts


def _most_by_brute_force(pages, k: int) -> int:
    """The most bytes any run of k rows holds, each start tried (all starts at once)."""
    import numpy as np

    starts = np.arange(sum(pages.rows))
    held = np.zeros(len(starts), dtype=np.int64)
    first = 0
    for n, each, together in zip(pages.rows, pages.each, pages.together):
        inside = np.clip(np.minimum(starts + k, first + n) - np.maximum(starts, first), 0, None)
        held += np.minimum(inside * each, together)  # (none inside: 0)
        first += n
    return int(held.max())


def test_a_batch_bound_is_never_below_what_a_run_of_rows_can_hold():
    """Checked against every start of every run, on random pages (the review found runs
    that start late in a long page of short rows and cross pages of one long row)."""
    import random

    from corpusprep.formats.parquet_pages import Pages

    rng = random.Random(1)
    for _ in range(2000):
        count = rng.randint(1, 7)
        rows = [rng.choice([1, 2, 3, 20, 1000]) for _ in range(count)]
        each = [rng.randint(1, 100) for _ in range(count)]
        together = [min(n * e, rng.randint(1, 300)) for n, e in zip(rows, each)]
        pages = Pages(rows, each, together, False, 0, 0)
        for k in (1, 2, 3, 5, 8, 30):
            assert pages._most_in_run(k) >= _most_by_brute_force(pages, k), (rows, k)


def test_a_dictionary_page_that_lies_about_its_entries_costs_no_more_than_its_bytes():
    """Its header's count of entries is the writer's word: the page's bytes end the walk."""
    import time

    from corpusprep.formats.parquet_pages import _entry_lengths

    page = (3).to_bytes(4, "little") + b"abc" + (1).to_bytes(4, "little") + b"d"
    start = time.perf_counter()
    assert _entry_lengths(page, len(page), {7: {1: 2}}, "UNCOMPRESSED") == (1, 3)
    assert _entry_lengths(page, len(page), {7: {1: 1 << 40}}, "UNCOMPRESSED") is None
    assert time.perf_counter() - start < 1  # not 2**40 steps


@pytest.mark.parametrize(
    "values",
    [list(range(3000)), [i / 7 for i in range(3000)], [i % 2 == 0 for i in range(3000)]],
    ids=["int", "float", "bool"],
)
def test_a_dictionary_encoded_column_that_is_not_text_says_which_column_to_set(values, tmp_path):
    """pyarrow writes numbers as dictionary indices too: such a column is named as not a
    string, with the key to set, not an AttributeError of pyarrow's (`no attribute
    'dictionary'`), as a plain (undictionaried) one is."""
    for name, how in (("dict", {}), ("plain", {"use_dictionary": False})):
        path = tmp_path / f"{name}.parquet"
        pq.write_table(pa.table({"text": values}), path, row_group_size=1000, **how)
        result = run_cli("source=file", f"source.path={path}", "tokenizer=char",
                         "executor.workers=1", f"out_dir={tmp_path}/{name}", "quiet=true",
                         cwd=tmp_path)  # fmt: skip
        kind = type(values[0]).__name__
        assert_one_line_error(result, f"{name}.parquet: row 0: 'text' is {kind}, not a string",
                              "set source.text_field")  # fmt: skip


# reads a Parquet file a row group per segment, as the workers of shard_bytes=1 do; prints
# the peak RSS (VmHWM)
READ_SEGMENTS = """
import re, sys
from corpusprep.formats import InputFile, Segment
from corpusprep.formats.parquet import FORMAT
path, count = sys.argv[1], int(sys.argv[2])
file = InputFile(path=path, format="parquet", compression="none", size=0)
for planned in FORMAT.plan(file, 1, None)[:count]:
    for part in FORMAT.parts(Segment(file, *planned)):
        pass
status = open("/proc/self/status").read()
print(int(re.search(r"VmHWM:\\s*(\\d+) kB", status).group(1)) * 1024)
"""


def test_the_shards_of_a_file_of_many_row_groups_do_not_pile_up_its_footer(tmp_path):
    """Each shard opens the file and reads its footer (megabytes, for thousands of row
    groups). pyarrow's ParquetFile.schema ties the footer to itself in a reference cycle,
    which only Python's rare full collections free: a worker held a footer per shard it
    read, 1.6 GB after 600 shards of a file of 5,000 row groups (an 870 KB file)."""
    path = tmp_path / "groups.parquet"
    pq.write_table(pa.table({"text": [f"d{i}" for i in range(5000)]}), path, row_group_size=1)
    done = subprocess.run([sys.executable, "-c", READ_SEGMENTS, str(path), "400"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    peak = int(done.stdout)
    assert peak < 250e6, f"{peak / 1e6:.0f} MB"


def _with_row_count(path, group: int, rows: int) -> None:
    """Three row groups of 1,000 rows, the footer saying `rows` for row group `group` (a
    num_rows written as a two-byte varint in place of 1,000's)."""
    texts = [f"document {i} " + "x" * (i % 50) for i in range(3000)]
    pq.write_table(pa.table({"text": texts}), path, row_group_size=1000,
                   use_dictionary=False, write_statistics=False)  # fmt: skip
    data = bytearray(path.read_bytes())
    footer = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
    # each row group: its column chunk's num_values, then its own num_rows (i64, field 3)
    found = [i for i in range(footer, len(data) - 2) if data[i : i + 3] == b"\x16\xd0\x0f"]
    assert len(found) == 6
    zigzag = (rows << 1) ^ (rows >> 63)
    data[found[2 * group + 1] + 1 : found[2 * group + 1] + 3] = bytes([0x80 | zigzag & 0x7F,
                                                                     zigzag >> 7])  # fmt: skip
    path.write_bytes(bytes(data))
    assert pq.ParquetFile(path).metadata.row_group(group).num_rows == rows


@pytest.mark.parametrize("tokenizer", ["byte", "tiktoken"])
def test_a_footer_that_gives_a_row_group_negative_rows_is_one_line(tokenizer, tmp_path):
    """pyarrow 26 refuses such a file ('Negative size'; pyarrow 21, the newest on Python 3.9,
    reads it whole); its rows counted from the footer put that row group's rows before the
    file's start, and the run left them out, 1,000 of 3,000 documents gone without a word."""
    path = tmp_path / "lie.parquet"
    _with_row_count(path, 0, -5)
    result = run_cli("source=file", f"source.path={path}", f"tokenizer={tokenizer}",
                     "shard_bytes=3000", f"out_dir={tmp_path}/out", "quiet=true",
                     cwd=tmp_path)  # fmt: skip
    assert_one_line_error(result, "lie.parquet", "row group 0", "damaged", "again")


def test_readers_open_at_once_leave_the_callers_pyarrow_pool_as_it_was(tmp_path):
    """Two segments read side by side in one process (a library zipping two files' texts),
    closed in the order they were opened: each reader gave back the pool it found, the
    second one the system pool the first had set, which then stayed the process's."""
    from corpusprep.formats import InputFile, Segment
    from corpusprep.formats.parquet import FORMAT

    path = tmp_path / "d.parquet"
    pq.write_table(pa.table({"text": [f"text {i}" for i in range(3000)]}), path,
                   row_group_size=1000)  # fmt: skip
    file = InputFile(path=str(path), format="parquet", size=path.stat().st_size)
    before = pa.default_memory_pool().backend_name
    first, second = (FORMAT.parts(Segment(file, *p)) for p in FORMAT.plan(file, 1, None)[:2])
    next(first), next(second)
    assert pa.default_memory_pool().backend_name == "system"
    list(first)
    assert pa.default_memory_pool().backend_name == "system"  # the second still reads
    list(second)
    assert pa.default_memory_pool().backend_name == before


def test_a_string_view_column_is_read_as_text(tmp_path):
    """pyarrow (15+) writes a string_view column with its type in the file, and reads it back
    so: its texts are documents, as pyarrow reads them, and one not UTF-8 is named by row
    (it was 'row 0: 'text' is NoneType, not a string', every text being one)."""
    if not hasattr(pa, "string_view"):
        pytest.skip("pyarrow without string_view")
    texts = [f"document {i} " + "word " * (i % 7) for i in range(3000)]
    path = tmp_path / "view.parquet"
    pq.write_table(pa.table({"text": pa.array(texts, pa.string_view())}), path,
                   row_group_size=1000)  # fmt: skip
    from corpusprep.formats import InputFile, Segment
    from corpusprep.formats.parquet import FORMAT

    file = InputFile(path=str(path), format="parquet", compression="none", size=0)
    read = [part.whole for planned in FORMAT.plan(file, 1 << 12, None)
            for part in FORMAT.parts(Segment(file, *planned))]  # fmt: skip
    assert read == pq.read_table(path).column("text").to_pylist() == texts

    values = [t.encode() for t in texts]
    values[1500] = b"bad \xff text"
    bad = tmp_path / "bad.parquet"
    view = pa.array(values, pa.binary()).view(pa.string()).cast(pa.string_view())
    pq.write_table(pa.table({"text": view}), bad)
    result = run_cli("source=file", f"source.path={bad}", "tokenizer=char",
                     f"out_dir={tmp_path}/out", "quiet=true", cwd=tmp_path)  # fmt: skip
    assert_one_line_error(result, "bad.parquet: row 1500", "source.skip_invalid=true")


# --- footers pyarrow aborts on ------------------------------------------------------------
# found by an attack: one byte of a footer changed, and pyarrow's RowGroupMetaData.column()
# let a C++ exception out (std::terminate: the run ended with exit 134 and C++'s message)


def _aborting_footer(path) -> bool:
    """Write a file whose footer pyarrow (as of 26) aborts on; whether this one does."""
    import os

    texts = [f"text {i} " + "w" * (i % 40) for i in range(600)] + ["same"] * 300
    pq.write_table(pa.table({"id": list(range(len(texts))), "text": texts}), path,
                   row_group_size=200, data_page_version="2.0", compression="zstd")  # fmt: skip
    data = bytearray(path.read_bytes())
    data[len(data) - 1463] = 4  # a field of the id column's size statistics
    path.write_bytes(bytes(data))
    pid = os.fork()
    if pid == 0:
        os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
        try:
            meta = pq.ParquetFile(path).metadata
            for i in range(meta.num_row_groups):
                for c in range(meta.row_group(i).num_columns):
                    meta.row_group(i).column(c)
        finally:
            os._exit(0)
    return os.WIFSIGNALED(os.waitpid(pid, 0)[1])


def test_a_footer_pyarrow_aborts_on_is_one_line(tmp_path):
    bad = tmp_path / "bad.parquet"
    if not _aborting_footer(bad):
        pytest.skip("this pyarrow reads that footer, or raises: nothing to take down")
    pq.write_table(pa.table({"text": ["a good one"] * 50}), tmp_path / "good.parquet")
    r = run_cli("source=files", "source.glob=*.parquet", "tokenizer=byte", "out_dir=out",
                cwd=tmp_path)  # fmt: skip
    assert_one_line_error(r, "bad.parquet: its footer is damaged", "copy the file again")
    assert not (tmp_path / "out").exists()


def test_the_footer_check_names_the_file_its_child_died_on(tmp_path, monkeypatch):
    """Whatever takes the child down (here an abort of its own, on the second file), the
    file it was at is named; the files' own errors are left to their reading."""
    import os

    from corpusprep.errors import UserError
    from corpusprep.formats import InputFile
    from corpusprep.formats import parquet as module

    files = []
    for name in ("a", "b", "c"):
        pq.write_table(pa.table({"text": [name] * 5}), tmp_path / f"{name}.parquet")
        files.append(InputFile(path=str(tmp_path / f"{name}.parquet"), format="parquet",
                               compression="none", size=1))  # fmt: skip
    module.FORMAT.check_files(files)  # all good: nothing said
    monkeypatch.setattr(module, "_ask_for_chunks",
                        lambda f: os.abort() if f.path.endswith("b.parquet") else None)  # fmt: skip
    with pytest.raises(UserError, match=r"b\.parquet: its footer is damaged"):
        module.FORMAT.check_files(files)
    monkeypatch.setattr(module, "_ask_for_chunks", lambda f: 1 / 0)  # raised: not the check's
    module.FORMAT.check_files(files)
