"""Benchmark corpusprep on a corpus of documents against llm.c's and nanoGPT's methods.

    python bench/bench_corpus.py [--mb 200] [--repeat 1] [--workdir DIR] [--keep]
                                 [--doc-bytes N] [--parquet [--parquet-rows N]]

1. builds a corpus of about --mb megabytes (10**6 bytes) of JSON Lines, one document per
   standard-library .py file ({"text": ...}), repeated, in 2 zstd files
   corpus_0000.jsonl.zst ..., or reuses the one already in --workdir; with --parquet the
   same documents (each one once: a line of its number first) in 2 Parquet files
   corpus_0000.parquet ..., written as Hugging Face `datasets` writes a dataset
   (Dataset.to_parquet: pyarrow's ParquetWriter, a row group per 1,000 rows, snappy), the
   form FineWeb and the Hub's datasets come in (--parquet-rows 1048576: as pyarrow's
   write_table and pandas' to_parquet write a file, one row group);
2. runs, each in its own process on the same files, as a user would:
   corpusprep   python -m corpusprep source=files ... tokenizer=tiktoken eot=prepend
   llm.c        bench/peer_llmc.py: dev/data/fineweb.py's method (a Pool, one document
                per task, [eot] + encode_ordinary, uint16)
   nanoGPT      bench/peer_nanogpt_owt.py: data/openwebtext/prepare.py (Hugging Face
                datasets, .map(num_proc), eot appended); skipped if `datasets` is missing
3. checks that every method made the same tokens: each output is cut into documents at
   the end-of-text tokens (corpusprep's also by doc_index/train.docs.bin / val.docs.bin), and the
   sorted sha1 digests of the documents' ids, the document and token counts must agree
   (exit 1 if not): the methods order and split the documents differently;
4. prints a table, the throughput ratios corpusprep/peer and whether corpusprep meets its
   targets (informational: a missed target does not change the exit status).

All methods load tiktoken's gpt2 files: offline, set TIKTOKEN_CACHE_DIR to a folder that
holds them; the children inherit this process's environment.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import shutil
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from common import (
    MB,
    Ceilings,
    Run,
    clean_up,
    corpus_documents,
    corpusprep_origin,
    corpusprep_phases,
    open_workdir,
    paired,
    parse_args,
    print_memory_notes,
    print_table,
    read_document,
    report_ceiling,
    report_ratio,
    run_measured,
    verdict,
)

BENCH = Path(__file__).resolve().parent
FILES = 2  # corpus files: as few as the workers, the usual case (each a ~1 GB file in real corpora)
ZSTD_LEVEL = 3
PARQUET_ROWS = 1000  # rows per row group: datasets' writer_batch_size (Dataset.to_parquet)
CORPUS_RECORD = "corpus.json"  # what was built: reused only if it still matches
EOT = 50256  # gpt2's <|endoftext|>; encode_ordinary never makes it, so it only separates
TARGET_MEMORY = 300 * MB  # corpusprep's peak memory (PSS of the process tree), below
CHUNK_TOKENS = 1 << 20  # the check reads the outputs this many tokens at a time


# --- the corpus ------------------------------------------------------------------------------


def json_lines(target: int, kind: str, doc_bytes: int = 0) -> Iterator[bytes]:
    """One JSON line per document of the corpus (common.corpus_documents), repeated until
    `target` bytes: whole documents, so the last line crosses it. The text is the file's
    own (no newline translation: two files hold "\\r"), non-ASCII kept as UTF-8.
    doc_bytes: each file cut into documents of about that many characters, at line ends
    (web corpora: FineWeb's documents average about 3 KB)."""
    files = corpus_documents(kind)
    written = 0
    while True:
        for item in files:
            for text in _cut(read_document(item).decode("utf-8"), doc_bytes):
                line = json.dumps({"text": text}, ensure_ascii=False).encode("utf-8") + b"\n"
                yield line
                written += len(line)
                if written >= target:
                    return


def _cut(text: str, size: int) -> Iterator[str]:
    """`text` in pieces of at least `size` characters, each ending at a line end (the last
    one takes what is left, under 2 * size unless no line ends); all of it for size 0."""
    start = 0
    while size and len(text) - start > 2 * size:
        end = text.find("\n", start + size) + 1
        if not end:
            break
        yield text[start:end]
        start = end
    yield text[start:]


def ensure_corpus(workdir: Path, mb: int, kind: str = "uneven", files: int = FILES,
                  doc_bytes: int = 0, parquet: bool = False, parquet_rows: int = 1000,
                  ) -> tuple[list[Path], dict, bool]:  # fmt: skip
    """Write the corpus files unless the record says they are there, of the right size.
    One document at a time through a streaming compressor (Parquet: a row group at a
    time): this process stays small (its peak RSS is the floor of the children's
    ru_maxrss, see common.run_measured)."""
    import zstandard

    record_path = workdir / CORPUS_RECORD
    paths = [workdir / f"corpus_{i:04d}{suffix(parquet)}" for i in range(files)]
    wanted = {"mb": mb, "files": files, "zstd_level": ZSTD_LEVEL, "python": sys.version,
              "corpus": kind, "doc_bytes": doc_bytes, "parquet": parquet,
              "parquet_rows": parquet_rows if parquet else None}  # fmt: skip
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
        sizes = record["sizes"]
        if {k: record.get(k) for k in wanted} == wanted and all(
            p.stat().st_size == sizes[p.name] for p in paths
        ):
            return paths, record, True
    except (OSError, ValueError, KeyError):
        pass
    record_path.unlink(missing_ok=True)
    for old in workdir.glob("corpus_*"):  # the glob must match only this corpus
        old.unlink()
    target = mb * MB
    docs = size = 0
    lines = json_lines(target, kind, doc_bytes)
    if parquet:  # each document once (each row a text of its own, as in a real dataset)
        lines = (json.dumps({"text": f"# document {k}\n{json.loads(line)['text']}"},
                            ensure_ascii=False).encode("utf-8") + b"\n"
                 for k, line in enumerate(lines))  # fmt: skip
    line: Optional[bytes] = next(lines)
    compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    for i, path in enumerate(paths):
        partial = path.with_name(path.name + ".partial")
        with _corpus_writer(partial, parquet and parquet_rows, compressor) as write:
            # file i takes the documents that start before (i + 1) / files of the target
            while line is not None and (size < target * (i + 1) // files or i == files - 1):
                write(line)
                docs += 1
                size += len(line)
                line = next(lines, None)
        partial.replace(path)
    record = {**wanted, "documents": docs, "json_bytes": size,
              "sizes": {p.name: p.stat().st_size for p in paths}}  # fmt: skip
    record_path.write_text(json.dumps(record, indent=1), encoding="utf-8")
    return paths, record, False


def suffix(parquet: bool) -> str:
    return ".parquet" if parquet else ".jsonl.zst"


@contextmanager
def _corpus_writer(path: Path, parquet_rows: int, compressor) -> Iterator[Callable[[bytes], None]]:
    """write(json_line) into a corpus file: the line itself into a zstd stream (0), or its
    text into a Parquet file, a row group per `parquet_rows` rows."""
    if not parquet_rows:
        with open(path, "wb") as raw, compressor.stream_writer(raw) as f:
            yield f.write
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows: list[str] = []
    with pq.ParquetWriter(path, pa.schema([("text", pa.string())])) as writer:

        def write(line: bytes) -> None:
            rows.append(json.loads(line)["text"])
            if len(rows) == parquet_rows:
                writer.write_table(pa.table({"text": rows}))
                rows.clear()

        yield write
        if rows:
            writer.write_table(pa.table({"text": rows}))


# --- the check: the same documents, whatever the order and the split ------------------------


@dataclass
class Documents:
    """What one method made: a digest per document (its ids without the end-of-text token),
    the number of documents and of tokens (end-of-text tokens included)."""

    digests: Counter
    docs: int
    tokens: int


def split_at_eot(path: Path) -> tuple[list[bytes], list[int], int]:
    """sha1 of the uint16 ids between end-of-text tokens (k tokens give k + 1 pieces, the
    first before the first token, the last after the last), the tokens' positions and the
    file's token count. Read in chunks: the benchmark stays small."""
    import numpy as np

    digests, positions, offset = [], [], 0
    h = hashlib.sha1()
    with open(path, "rb") as f:
        while chunk := f.read(2 * CHUNK_TOKENS):
            ids = np.frombuffer(chunk, dtype="<u2")
            start = 0
            for i in np.flatnonzero(ids == EOT).tolist():
                h.update(ids[start:i].tobytes())
                digests.append(h.digest())
                h = hashlib.sha1()
                positions.append(offset + i)
                start = i + 1
            h.update(ids[start:].tobytes())
            offset += len(ids)
    digests.append(h.digest())
    return digests, positions, offset


def documents_of(paths: list[Path], eot: str, indexes: Optional[list[Path]] = None) -> Documents:
    """The documents of .bin files whose documents carry one end-of-text token each:
    before them (eot="prepend") or after them ("append"). `indexes`: the files of
    document starts (uint64 token offsets) that must agree with the tokens."""
    import numpy as np

    empty = hashlib.sha1().digest()
    found = Documents(Counter(), 0, 0)
    for k, path in enumerate(paths):
        digests, positions, tokens = split_at_eot(path)
        found.tokens += tokens
        if tokens == 0:
            continue
        # prepend: the file starts with the token, the piece before it is empty
        # append: the file ends with it, the piece after it is empty
        edge, docs = (0, digests[1:]) if eot == "prepend" else (-1, digests[:-1])
        expected_at = 0 if eot == "prepend" else tokens - 1
        if positions[edge] != expected_at or digests[edge] != empty:
            sys.exit(f"SAME TOKENS: {path}: does not {'start' if edge == 0 else 'end'} "
                     "with the end-of-text token")  # fmt: skip
        if indexes is not None:
            starts = np.fromfile(indexes[k], dtype="<u8")
            if not np.array_equal(starts, np.array(positions, dtype=np.uint64)):
                sys.exit(f"SAME TOKENS: {indexes[k]}: the document starts are not where "
                         f"the end-of-text tokens are in {path.name}")  # fmt: skip
        found.digests.update(docs)
        found.docs += len(docs)
    return found


def check_same_tokens(made: dict[str, Documents], corpus_docs: int) -> Optional[str]:
    """None if every method made the same documents as the first, else what differs."""
    (reference, ref), *others = made.items()
    if ref.docs != corpus_docs:
        return f"{reference}: {ref.docs:,} documents, the corpus has {corpus_docs:,}"
    for name, other in others:
        if (other.docs, other.tokens) != (ref.docs, ref.tokens):
            return (f"{name}: {other.docs:,} documents, {other.tokens:,} tokens; {reference}: "
                    f"{ref.docs:,} documents, {ref.tokens:,} tokens")  # fmt: skip
        if other.digests != ref.digests:
            missing = sum((ref.digests - other.digests).values())
            extra = sum((other.digests - ref.digests).values())
            return (
                f"{name}: {missing:,} of {reference}'s documents are not among its "
                f"documents, and {extra:,} of its documents are not among {reference}'s"
            )
    return None


# --- the run -----------------------------------------------------------------------------------


def report_targets(best: dict[str, float], runs: dict[str, list[Run]], label: str,
                   ceilings: Ceilings) -> None:  # fmt: skip
    """One line per target: ahead of llm.c by 1.2x with its own encoder and 2x with the
    faster one, >= 85% of each encoder's ceiling, faster than every peer, and memory judged
    on the tree's PSS (the RSS sum, which counts pages shared with forked workers twice,
    beside it)."""
    backend = ceilings.encoders["corpusprep"]
    report_ratio(f"{label}, tiktoken, corpusprep/llm.c", best["llm.c"] / best["cp-tiktoken"],
                 1.2, (best["llm.c"], ceilings.seconds("cp-tiktoken")),
                 paired(runs["llm.c"], runs["cp-tiktoken"]))  # fmt: skip
    if backend != "tiktoken":
        report_ratio(f"{label}, {backend}, corpusprep/llm.c", best["llm.c"] / best["corpusprep"],
                     2.0, (best["llm.c"], ceilings.seconds("corpusprep")),
                     paired(runs["llm.c"], runs["corpusprep"]))  # fmt: skip
    for name in ("cp-tiktoken", "corpusprep"):
        report_ceiling(f"{label}, {ceilings.encoders[name]}", best[name], ceilings, name)
    peers = [name for name in best if name != "corpusprep"]
    slowest = max(best["corpusprep"] / best[p] for p in peers) if peers else 0.0
    print(f"target: faster than every peer ({', '.join(peers)}): "
          f"{verdict(slowest < 1)}")  # fmt: skip
    pss = max(r.peak_tree_pss for r in runs["corpusprep"])
    rss = max(r.peak_tree_rss for r in runs["corpusprep"])
    print(
        f"target: corpusprep peak memory < {TARGET_MEMORY / MB:.0f} MB: PSS, tree {pss / MB:,.0f} "
        f"MB, {verdict(pss < TARGET_MEMORY)} (RSS, tree sum {rss / MB:,.0f} MB, "
        f"{verdict(rss < TARGET_MEMORY)})"
    )


def main(argv: Optional[list[str]] = None) -> int:
    def doc_bytes(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--doc-bytes", type=int, default=0, metavar="N",
                            help="cut each file into documents of about N characters at line "
                            "ends (0, the default: a whole file per document)")  # fmt: skip
        parser.add_argument("--parquet", action="store_true",
                            help="the documents in Parquet files, as datasets writes them "
                            "(FineWeb's and the Hub's form), not JSON Lines in zstd")  # fmt: skip
        parser.add_argument("--parquet-rows", type=int, default=PARQUET_ROWS, metavar="N",
                            help="rows per Parquet row group (default 1000, as datasets "
                            "writes; 1048576: as pyarrow's write_table)")  # fmt: skip

    args = parse_args(__doc__.split("\n\n")[0], default_mb=200, argv=argv, more=doc_bytes)
    workdir, temporary = open_workdir(args.workdir)
    t = time.perf_counter()
    paths, corpus, reused = ensure_corpus(workdir, args.mb, args.corpus, doc_bytes=args.doc_bytes,
                                          parquet=args.parquet,
                                          parquet_rows=args.parquet_rows)  # fmt: skip
    how = "reused" if reused else f"built in {time.perf_counter() - t:.1f} s"
    size = corpus["json_bytes"]
    have_datasets = importlib.util.find_spec("datasets") is not None
    hf_cache = workdir / "hf-cache"
    # nanoGPT's method caches Arrow files under ~/.cache/huggingface: into the workdir instead
    # (deleted after each run); offline, so that it never waits on the network
    os.environ["HF_DATASETS_CACHE"] = str(hf_cache)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    print(f"python     {sys.executable} ({sys.version.split()[0]})")
    print(f"corpusprep {corpusprep_origin(workdir)}")
    print(f"machine    {os.cpu_count()} cores")
    print(f"corpus     {workdir}/corpus_*{suffix(args.parquet)}: {len(paths)} files, "
          f"{corpus['documents']:,} documents, {size:,} bytes of JSON, "
          f"{sum(corpus['sizes'].values()):,} compressed ({how})")  # fmt: skip
    print(f"repeat     {args.repeat} (the median time counts)")
    print(f"tiktoken   {os.environ.get('TIKTOKEN_CACHE_DIR', '(unset: tiktoken downloads)')}")
    if not have_datasets:
        print("nanoGPT    SKIPPED: the `datasets` package is not installed (pip install datasets)")
    print()

    outs = {"corpusprep": workdir / "out-corpusprep-corpus", "llm.c": workdir / "out-llmc"}
    files = [str(p) for p in paths]
    commands = {  # the reference first: the others are compared against it
        "corpusprep": [
            sys.executable,
            "-m",
            "corpusprep",
            "source=files",
            f"source.glob={workdir}/corpus_*{suffix(args.parquet)}",
            "tokenizer=tiktoken",
            "eot=prepend",
            "split_by=document",
            f"out_dir={outs['corpusprep']}",
            "quiet=true",
        ],
        "llm.c": [sys.executable, str(BENCH / "peer_llmc.py"), str(outs["llm.c"]), *files],
    }
    # corpusprep with llm.c's own encoder (tokenizer.backend=auto picks the fastest installed)
    outs["cp-tiktoken"] = workdir / "out-corpusprep-tiktoken"
    commands["cp-tiktoken"] = [*commands["corpusprep"][:-2], "tokenizer.backend=tiktoken",
                               f"out_dir={outs['cp-tiktoken']}", "quiet=true"]  # fmt: skip
    if have_datasets:
        outs["nanoGPT"] = workdir / "out-nanogpt-owt"
        commands["nanoGPT"] = [
            sys.executable, str(BENCH / "peer_nanogpt_owt.py"), str(outs["nanoGPT"]), *files
        ]  # fmt: skip

    runs: dict[str, list[Run]] = {name: [] for name in commands}
    # each corpusprep method's encoder alone, after each of its timed runs
    ceilings = Ceilings(
        paths, True, {name: (outs[name], None) for name in ("cp-tiktoken", "corpusprep")}
    )
    # timed runs, then one run with the memory sampled (it slows a run: not timed)
    for i in range(1, args.repeat + 2):
        sample = i == args.repeat + 1
        # alternate the methods, so slow drift (page cache, thermals) hits all alike
        for name, cmd in commands.items():
            # start empty: stale files from an earlier run must not pass the check
            shutil.rmtree(outs[name], ignore_errors=True)
            shutil.rmtree(hf_cache, ignore_errors=True)  # a first run, as users run it
            run = run_measured(cmd, workdir, workdir / f"{name}.log", sample)
            shutil.rmtree(hf_cache, ignore_errors=True)
            runs[name].append(run)
            what = (
                f"memory run (time not counted): PSS {run.peak_tree_pss / MB:,.0f} MB, tree "
                f"{run.peak_tree_rss / MB:,.0f} MB"
                if sample
                else f"{run.seconds:6.2f} s"
            )
            print(f"run {min(i, args.repeat)}/{args.repeat}  {name:<11} {what}  single "
                  f"{run.max_single_rss / MB:6,.0f} MB")  # fmt: skip
            if not sample:  # its encoder alone, right after it (see common.Ceilings)
                ceilings.after(name, run, i)
        cp = outs["corpusprep"]
        made = {
            "corpusprep": documents_of(
                [cp / "train.bin", cp / "val.bin"],
                "prepend",
                [cp / "doc_index" / "train.docs.bin", cp / "doc_index" / "val.docs.bin"],
            ),
            "llm.c": documents_of([outs["llm.c"] / "tokens.bin"], "prepend"),
        }
        if "nanoGPT" in outs:
            made["nanoGPT"] = documents_of(
                [outs["nanoGPT"] / "train.bin", outs["nanoGPT"] / "val.bin"], "append"
            )
        problem = check_same_tokens(made, corpus["documents"])
        if problem is not None:
            print(f"\nSAME TOKENS: NO (outputs kept in {workdir}): {problem}", file=sys.stderr)
            return 1
    ref = made["corpusprep"]
    print(
        f"\nsame tokens: yes, {', '.join(made)}: {ref.docs:,} documents "
        f"({len(ref.digests):,} distinct), {ref.tokens:,} tokens with one end-of-text token "
        "each (prepended by corpusprep and llm.c, appended by nanoGPT)\n"
    )

    best = print_table(size, runs)
    print()
    for peer in best:
        if peer != "corpusprep":
            ratio = best[peer] / best["corpusprep"]
            print(f"corpusprep/{peer} throughput: {ratio:.2f}x")
    print(f"corpusprep's own phases (last run): {corpusprep_phases(outs['corpusprep'])}")
    layout = " (parquet)" if args.parquet else ""
    if args.parquet and args.parquet_rows != PARQUET_ROWS:
        layout = f" (parquet, {args.parquet_rows:,} rows a row group)"
    report_targets(best, runs, f"documents{layout} {args.mb} MB", ceilings)
    print_memory_notes()

    clean_up(workdir, temporary, args.keep, outs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
