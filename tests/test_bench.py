"""The benchmarks in bench/: their ceilings are measured right after each timed run of the
method they are compared with, and the median counts (bench/common.Ceilings, a unit test);
each script runs end to end on a tiny corpus, the peers' methods and corpusprep making the
same files, with the lines its targets print consistent with the figures beside them
(slow: a few seconds a script). Their speed is never judged here: the benchmarks print it."""

from __future__ import annotations

import importlib.util
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO


def _bench_common():
    """bench/common.py, which the bench scripts import as `common` (their own folder is on
    their sys.path): loaded under a name of its own here."""
    spec = importlib.util.spec_from_file_location("bench_common", REPO / "bench" / "common.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # before running it: its dataclasses look it up
    spec.loader.exec_module(module)
    return module


common = _bench_common()

REPEAT = 2
READING = re.compile(
    r"^  .+: reading the documents \(decompressing and parsing, as corpusprep's "
    r"reader does\) takes [\d.]+ s of a core, [\d.]+ s of \d+ cores, .*(reach "
    r"\d+%|bound nothing here)(: 85% is out of reach)?$"
)
RUN = re.compile(r"^run (\d+)/\d+  (\S+)\s+(.*)$")
CEILING = re.compile(r"^ceiling    (\S+)\s+([\d.]+) s  \(the encoder alone, \d+ workers\)$")
TARGET = re.compile(
    r"^target: (.*?): >= 85% of the encoder's in-process ceiling \(([\d.]+) s for the encoder "
    r"alone, ([\d.]+) s whole process\)"
)
REACH = re.compile(
    r"^  (.*): ([\d.]+) s outside corpusprep's own clock .* so the ceiling is (\d+)% of the "
    r"time inside; the sha256 of the input and outputs takes ([\d.]+) s of a core, ([\d.]+) "
    r"s of (\d+) cores; (?:with nothing but the encoder, start-up and sha256, the whole "
    r"process would reach (\d+)%(: 85% is out of reach without a faster start-up or "
    r"sha256)?|(together they come to more than the run took: they bound nothing here))$"
)


# --- Ceilings, on its own ---------------------------------------------------------------------


def _manifest(folder: Path, backend: str, total: float) -> None:
    folder.mkdir(exist_ok=True)
    manifest = {"tokenizer": {"backend": backend}, "executor": {"workers": 2},
                "seconds": {"total": total}}  # fmt: skip
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")


def _run(seconds: float) -> common.Run:
    return common.Run(seconds, 0, 0, 0, 1)


def test_ceilings_take_the_median_of_the_rounds_and_measure_a_shared_encoder_once_a_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    measured = iter([3.0, 1.0, 2.0])  # one per round: the encoder both methods use
    calls = []

    def fake(encoder: str, workers: int, inputs, documents: bool) -> float:
        calls.append(encoder)
        return next(measured)

    monkeypatch.setattr(common, "measure_ceiling", fake)
    a, b = tmp_path / "a", tmp_path / "b"
    ceilings = common.Ceilings([], False, {"a": (a, None), "b": (b, None)})
    for round_number, (wall, total) in enumerate([(1.5, 1.0), (1.4, 1.2), (1.1, 1.0)], 1):
        _manifest(a, "splintr", total)
        _manifest(b, "splintr", total)
        ceilings.after("a", _run(wall), round_number)
        ceilings.after("b", _run(wall), round_number)
        ceilings.after("peer", _run(9.0), round_number)  # no ceiling: nothing measured
    assert calls == ["splintr"] * 3  # b's shares a's, in each round
    assert ceilings.seconds("a") == ceilings.seconds("b") == 2.0  # median, not last or mean
    assert ceilings.outside_seconds("a") == pytest.approx(0.2)  # of 0.5, 0.2, 0.1
    assert ceilings.encoders == {"a": "splintr", "b": "splintr"}
    assert capsys.readouterr().out.count("ceiling    splintr") == 3


def test_ceilings_time_the_sha256_of_the_input_and_the_outputs_the_manifest_lists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What corpusprep must hash inside its clock (the manifest records the input's sha256
    and every output's): one core's time on those files, right after each run, median."""
    hashed: list[list[Path]] = []

    def fake_sha256(paths) -> float:
        hashed.append(list(paths))
        return [0.4, 0.1, 0.3][len(hashed) - 1]

    monkeypatch.setattr(common, "measure_ceiling", _returning([1.0, 1.0, 1.0]))
    monkeypatch.setattr(common, "measure_sha256", fake_sha256)
    corpus, out = tmp_path / "corpus.txt", tmp_path / "out"
    ceilings = common.Ceilings([corpus], False, {"a": (out, None)})
    for round_number in (1, 2, 3):
        _manifest(out, "splintr", 1.0)
        manifest = json.loads((out / "manifest.json").read_text())
        manifest["files"] = {"train.bin": 8, "val.bin": 4}
        (out / "manifest.json").write_text(json.dumps(manifest))
        ceilings.after("a", _run(1.2), round_number)
    assert hashed == [[corpus, out / "train.bin", out / "val.bin"]] * 3
    assert ceilings.sha256_seconds("a") == 0.3
    assert ceilings.workers["a"] == 2


def _reported(ceiling: float, wall: float, total: float, sha256: float, capsys) -> str:
    ceilings = common.Ceilings([], False, {"a": (Path("."), "splintr")})
    ceilings.times["a"], ceilings.outside["a"] = [ceiling], [wall - total]
    ceilings.hashing["a"], ceilings.workers["a"] = [sha256], 2
    common.report_ceiling("x", wall, ceilings, "a")
    return capsys.readouterr().out.splitlines()[1]


def test_the_reach_counts_start_up_and_the_sha256_share_and_says_when_they_bound_nothing(
    capsys: pytest.CaptureFixture,
) -> None:
    # 2.0 s of encoder, 0.3 s outside the clock, 0.4 s of sha256 over 2 cores: 2.0 / 2.5
    line = _reported(2.0, 2.8, 2.5, 0.4, capsys)
    assert "0.40 s of a core, 0.20 s of 2 cores" in line
    assert line.endswith("would reach 80%: 85% is out of reach without a faster start-up or sha256")
    # a run quicker than the three together (a ceiling taken in a slow moment): no reach
    line = _reported(2.0, 2.2, 1.9, 0.4, capsys)
    assert line.endswith("together they come to more than the run took: they bound nothing here")


def test_documents_reading_is_measured_once_a_round_and_added_to_a_reach_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Decompressing and parsing the documents is work the encoder's ceiling leaves out
    (it starts from texts in memory) and that every method must do: its share of the
    cores goes into a second reach, on a line of its own; one text has no such line."""
    read: list[list[Path]] = []

    def fake_reading(paths) -> float:
        read.append(list(paths))
        return [0.6, 0.2, 0.4][len(read) - 1]

    monkeypatch.setattr(common, "measure_ceiling", _returning([2.0] * 7))
    monkeypatch.setattr(common, "measure_sha256", _returning([0.4] * 7))
    monkeypatch.setattr(common, "measure_reading", fake_reading)
    corpus, a, b = tmp_path / "c.jsonl.zst", tmp_path / "a", tmp_path / "b"
    ceilings = common.Ceilings([corpus], True, {"a": (a, None), "b": (b, "tiktoken")})
    for round_number in (1, 2, 3):
        for name, folder in (("a", a), ("b", b)):
            _manifest(folder, "splintr", 2.7)
            ceilings.after(name, _run(3.0), round_number)
    assert read == [[corpus]] * 3  # once a round, whatever the methods
    assert ceilings.reading_seconds() == 0.4  # the median
    capsys.readouterr()
    common.report_ceiling("x", 3.0, ceilings, "a")
    lines = capsys.readouterr().out.splitlines()
    # 2.0 s of encoder, 0.3 s outside, (0.4 + 0.4) / 2 cores: 2.0 / 2.7
    assert lines[2] == (
        "  x: reading the documents (decompressing and parsing, as corpusprep's reader does) "
        "takes 0.40 s of a core, 0.20 s of 2 cores, which the encoder's ceiling leaves out; "
        "with nothing but the encoder, start-up, sha256 and reading, the whole process would "
        "reach 74%: 85% is out of reach"
    )
    one_text = common.Ceilings([corpus], False, {"a": (a, None)})
    one_text.after("a", _run(3.0), 1)
    assert one_text.reading_seconds() is None and len(read) == 3
    capsys.readouterr()
    common.report_ceiling("x", 3.0, one_text, "a")
    assert len(capsys.readouterr().out.splitlines()) == 2


def test_reading_takes_the_documents_as_the_reader_does(tmp_path: Path) -> None:
    """measure_reading really reads: every document of a .jsonl.zst file (a line without
    its "text" fails, as it would in corpusprep), and every .txt file of a folder."""
    zstandard = pytest.importorskip("zstandard")
    lines = b"".join(json.dumps({"text": f"doc {i}"}).encode() + b"\n" for i in range(100))
    good = tmp_path / "good.jsonl.zst"
    good.write_bytes(zstandard.ZstdCompressor().compress(lines + b"\n"))
    assert common.measure_reading([good]) >= 0
    bad = tmp_path / "bad.jsonl.zst"
    bad.write_bytes(zstandard.ZstdCompressor().compress(lines + b'{"body": "x"}\n'))
    with pytest.raises(KeyError):
        common.measure_reading([bad])
    folder = tmp_path / "files"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "a.txt").write_bytes(b"\xff")  # not UTF-8: it was decoded
    with pytest.raises(UnicodeDecodeError):
        common.measure_reading([folder])


def test_a_ratio_is_also_given_round_by_round(capsys: pytest.CaptureFixture) -> None:
    """Each timed run against the peer's run of the same round: on a machine that drifts by a
    third within minutes, the pairs tell a slow spell from a slower method. Informational:
    the verdict stays the ratio of the medians."""
    peer = [_run(6.0), _run(8.6), _run(6.6), common.Run(30.0, 0, 0, 0, 1, timed=False)]
    ours = [_run(5.0), _run(5.9), _run(5.5), common.Run(1.0, 0, 0, 0, 1, timed=False)]
    assert common.paired(peer, ours) == pytest.approx([1.2, 8.6 / 5.9, 1.2])
    common.report_ratio("x", 6.6 / 5.5, 1.2, pairs=common.paired(peer, ours))
    target, pairs = capsys.readouterr().out.splitlines()
    assert target.startswith("target: x: >= 1.2x: 1.20x, met")
    assert pairs == "  x: round by round (each run against the peer's run of its round): " \
                    "1.20x, 1.46x, 1.20x; median 1.20x"  # fmt: skip


def _returning(values: list[float]):
    it = iter(values)
    return lambda *args, **kwargs: next(it)


def test_a_failed_round_makes_the_ceiling_unknown_whatever_its_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for failed in range(3):
        times = [1.0, 2.0, 3.0]
        times[failed] = float("nan")
        monkeypatch.setattr(common, "measure_ceiling", _returning(times))
        ceilings = common.Ceilings([], False, {"a": (tmp_path, "char")})
        _manifest(tmp_path, "char", 1.0)
        for round_number in (1, 2, 3):
            ceilings.after("a", _run(1.2), round_number)
        assert math.isnan(ceilings.seconds("a"))


# --- each script, end to end ------------------------------------------------------------------

# the methods each script measures a ceiling for: their output folder (its manifest names
# the backend auto chose), or the encoder the script fixes
SCRIPTS = {
    "bench_char.py": {"corpusprep": "char"},
    "bench_bpe.py": {"corpusprep": "out-corpusprep-bpe", "corpusprep+fast": "out-corpusprep-fast"},
    "bench_corpus.py": {
        "cp-tiktoken": "out-corpusprep-tiktoken",
        "corpusprep": "out-corpusprep-corpus",
    },  # fmt: skip
    "bench_train.py": {"sp": "sentencepiece"},
    "bench_files.py": {"corpusprep": "out-corpusprep"},
}
NEEDS = {"bench_corpus.py": ["zstandard"], "bench_train.py": ["rustbpe", "sentencepiece"]}
MORE = {"bench_train.py": ["--vocab", "512", "--sp-train-chars", "200000"],
        "bench_files.py": ["--files", "300"]}  # fmt: skip


def _encoders(script: str, workdir: Path) -> dict[str, str]:
    """Each method's encoder: fixed by the script, or the backend its run's manifest names."""
    found = {}
    for method, where in SCRIPTS[script].items():
        manifest = workdir / where / "manifest.json"
        if not where.startswith("out-"):
            found[method] = where
        elif manifest.is_file():  # corpusprep+fast: only where a faster backend is installed
            found[method] = json.loads(manifest.read_text())["tokenizer"]["backend"]
    return found


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS)
def test_a_benchmark_measures_each_ceiling_right_after_its_method(
    tmp_path: Path, tiktoken_cache: Path, script: str
) -> None:
    for module in NEEDS.get(script, []):
        pytest.importorskip(module)
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / script), "--mb", "1", "--repeat", str(REPEAT),
         "--workdir", str(tmp_path), "--keep", *MORE.get(script, [])],
        capture_output=True, text=True, timeout=600, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    shown = "\n".join(lines)
    assert any(line.startswith(("outputs identical", "same tokens: yes")) for line in lines)
    encoders = _encoders(script, tmp_path)
    # a ceiling line follows a timed run of a method it is for; once a round per encoder
    ceilings: dict[str, list[float]] = {}
    per_round: dict[int, list[str]] = {}
    for before, line in zip(lines, lines[1:]):
        ceiling = CEILING.match(line)
        if not ceiling:
            continue
        run = RUN.match(before)
        assert run and "memory run" not in before, f"{line!r} after {before!r}:\n{shown}"
        encoder = ceiling.group(1)
        assert encoders.get(run.group(2), "").split("=")[0] == encoder, shown
        ceilings.setdefault(encoder, []).append(float(ceiling.group(2)))
        per_round.setdefault(int(run.group(1)), []).append(encoder)
    distinct = {e.split("=")[0] for e in encoders.values()}
    assert set(ceilings) == distinct, shown
    for round_number in range(1, REPEAT + 1):
        assert sorted(per_round[round_number]) == sorted(distinct), shown
    # each fraction compares with its encoder's ceiling (printed to 0.01 s), and the line
    # under it gives the most the process could reach: ceiling / (ceiling + outside + the
    # sha256's share of the cores)
    targets = {m.group(1): float(m.group(2)) for line in lines if (m := TARGET.match(line))}
    seconds = {m.group(1): float(m.group(3)) for line in lines if (m := TARGET.match(line))}
    reach = {m.group(1): m for line in lines if (m := REACH.match(line))}
    assert targets and set(reach) == set(targets), shown
    for label, ceiling in targets.items():
        encoder = label.split(", ")[-1] if ", " in label else label.split()[0]
        encoder = "sentencepiece" if label.startswith("sentencepiece") else encoder
        # the rounds' median (the unit test above pins it): between their least and most
        assert min(ceilings[encoder]) - 0.01 <= ceiling <= max(ceilings[encoder]) + 0.01, label
        line = reach[label]
        outside = float(line.group(2))
        sha256, share, cores = (float(line.group(k)) for k in (4, 5, 6))
        assert abs(share - sha256 / cores) <= 0.01, line.group(0)
        if line.group(9):  # ceiling, start-up and sha256 add up to more than the run took
            assert ceiling + outside + share >= seconds[label] - 0.02, line.group(0)
            continue
        said = int(line.group(7))
        low = (ceiling - 0.005) / (ceiling - 0.005 + outside + 0.005 + share + 0.005)
        high = (ceiling + 0.005) / (ceiling + 0.005 + max(outside + share - 0.01, 0))
        assert low - 0.005 <= said / 100 <= high + 0.005, line.group(0)
        out_of_reach = line.group(8) is not None  # 84.6% prints as 85%
        assert said <= 85 if out_of_reach else said >= 85, line.group(0)
    # documents: a second reach that adds reading them, under each fraction; one text: none
    reading = [line for line in lines if READING.match(line)]
    documents = script in ("bench_corpus.py", "bench_files.py")
    assert len(reading) == (len(targets) if documents else 0), shown


def test_the_words_corpus_has_text8s_shape() -> None:
    """--corpus words: lowercase a-z words, one space after each, no newline (enwik8
    cleaned, as text8 is), read lazily like the files it comes from."""
    documents = common.corpus_documents("words")
    text = b"".join(common.read_document(d) for d in documents[:50])
    assert len(text) > 100_000 and re.fullmatch(rb"([a-z]+ )+", text)


def _bench_bpe(tmp_path: Path, *more: str) -> subprocess.CompletedProcess:
    """bench_bpe.py on 3 MB, once, with `more` options; it must succeed."""
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "bench_bpe.py"), "--mb", "3", "--repeat", "1",
         *more, "--workdir", str(tmp_path), "--keep"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


@pytest.mark.slow
def test_bench_bpe_on_the_words_corpus_gives_nanogpts_files(
    tmp_path: Path, tiktoken_cache: Path
) -> None:
    """One line of words (no newline) through bench_bpe.py: corpusprep's files are
    nanoGPT's byte for byte, cut into shards between words."""
    done = _bench_bpe(tmp_path, "--corpus", "words")
    assert "outputs identical: train.bin, val.bin" in done.stdout
    assert "target: BPE one text 3 MB (words), tiktoken" in done.stdout
    manifest = json.loads((tmp_path / "out-corpusprep-bpe" / "manifest.json").read_text())
    assert manifest["shards"]["count"] > 1


@pytest.mark.slow
def test_bench_bpe_on_a_gzipped_text_cuts_it_into_pieces(tmp_path: Path, tiktoken_cache) -> None:
    """--gzip: corpusprep reads the .txt.gz as it is (in pieces, on every worker), nanoGPT's
    method gunzips it first; the same files."""
    done = _bench_bpe(tmp_path, "--gzip")
    assert "outputs identical: train.bin, val.bin" in done.stdout
    assert "target: BPE one text 3 MB (gzip), tiktoken" in done.stdout
    manifest = json.loads((tmp_path / "out-corpusprep-bpe" / "manifest.json").read_text())
    assert manifest["source"]["path"].endswith(".txt.gz") and manifest["shards"]["count"] > 1


@pytest.mark.slow
def test_bench_corpus_on_parquet_files_as_datasets_writes_them(
    tmp_path: Path, tiktoken_cache: Path
) -> None:
    """--parquet: the documents in Parquet files of 1,000-row row groups, as Hugging Face
    datasets writes a dataset; corpusprep, llm.c's method (pyarrow's batches) and
    nanoGPT's (datasets' parquet builder) make the same documents (of about 3 KB, as
    FineWeb's: several row groups a file)."""
    pytest.importorskip("pyarrow")
    pytest.importorskip("zstandard")
    import pyarrow.parquet as pq

    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "bench_corpus.py"), "--mb", "8", "--repeat", "1",
         "--parquet", "--doc-bytes", "3000", "--workdir", str(tmp_path), "--keep"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "same tokens: yes" in done.stdout
    assert "target: documents (parquet) 8 MB, tiktoken" in done.stdout
    files = sorted(tmp_path.glob("corpus_*.parquet"))
    assert len(files) == 2 and not list(tmp_path.glob("corpus_*.jsonl.zst"))
    meta = pq.ParquetFile(files[0]).metadata
    assert meta.num_row_groups > 1 and meta.row_group(0).num_rows == 1000
    manifest = json.loads((tmp_path / "out-corpusprep-corpus" / "manifest.json").read_text())
    assert (
        manifest["documents"]["total"]
        == json.loads((tmp_path / "corpus.json").read_text())["documents"]
    )


def test_bench_corpus_writes_parquet_as_write_table_does_with_parquet_rows(
    tmp_path: Path, monkeypatch
) -> None:
    """--parquet-rows 1048576: each Parquet file one row group, as pyarrow's write_table
    (and pandas' to_parquet) writes a file of fewer rows: pyarrow puts texts in the
    dictionary page 1,024 rows at a time until it holds 1 MB, the rest in plain pages,
    which corpusprep cuts into pieces by rows (datasets' 1,000-row row groups keep all
    their text in their dictionary page instead). The record tells the layouts apart."""
    pytest.importorskip("pyarrow")
    pytest.importorskip("zstandard")
    import pyarrow.parquet as pq

    from corpusprep.formats import InputFile
    from corpusprep.formats.parquet import FORMAT

    monkeypatch.syspath_prepend(str(REPO / "bench"))
    from bench_corpus import ensure_corpus

    paths, record, reused = ensure_corpus(
        tmp_path, 6, doc_bytes=1000, parquet=True, parquet_rows=1 << 20
    )
    assert not reused and record["parquet_rows"] == 1 << 20
    for path in paths:
        meta = pq.ParquetFile(path).metadata
        assert meta.num_row_groups == 1 and meta.row_group(0).num_rows > 2000
        file = InputFile(path=str(path), format="parquet", size=path.stat().st_size)
        assert len(FORMAT.plan(file, 100_000, None, pieces=True)) > 2
    assert ensure_corpus(tmp_path, 6, doc_bytes=1000, parquet=True, parquet_rows=1 << 20)[
        2
    ]  # reused
    paths, record, reused = ensure_corpus(
        tmp_path, 6, doc_bytes=1000, parquet=True
    )  # datasets' layout
    assert not reused and pq.ParquetFile(paths[0]).metadata.row_group(0).num_rows == 1000
