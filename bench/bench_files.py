"""Benchmark corpusprep on a folder of many small text files against llm.c's method.

    python bench/bench_files.py [--mb 50] [--files 50000] [--repeat 3] [--workdir DIR] [--keep]

1. writes about --mb megabytes of the corpus's documents (common.corpus_documents, cut at
   line ends) as --files .txt files of a few KB in 100 folders (a code base, a folder of
   documents), or reuses them;
2. runs, each in its own process on the same folder, as a user would:
   corpusprep   python -m corpusprep source=files source.glob='ROOT/**/*.txt'
                tokenizer=tiktoken eot=prepend (split by document, as for any corpus of
                several documents)
   llm.c        bench/peer_files.py: llm.c's Pool method, file by file
3. checks that both made the same documents (bench_corpus's check: the sorted digests of
   the documents' ids, the document and token counts; exit 1 if not);
4. runs the encoder alone on the same texts after each corpusprep run (bench/ceiling.py
   --files) and prints a table, the ratio, the fraction of the ceiling and the targets
   (informational: a missed target does not change the exit status).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Optional

from bench_corpus import check_same_tokens, documents_of
from common import (
    MB,
    Ceilings,
    clean_up,
    corpus_documents,
    corpusprep_origin,
    open_workdir,
    paired,
    parse_args,
    print_memory_notes,
    print_table,
    read_document,
    report_ceiling,
    report_memory,
    report_ratio,
    run_all,
)

BENCH = Path(__file__).resolve().parent
FOLDERS = 100
RECORD = "files.json"  # what was written: reused only if it still matches
TARGET_RATIO = 1.2  # corpusprep's throughput over llm.c's, at least (the same encoder)
TARGET_MEMORY = 300 * MB


def small_texts(kind: str, target: int, count: int):
    """Texts of about target / count bytes, cut at line ends from the corpus's documents,
    repeated until `target` bytes."""
    size = max(target // count, 64)
    written = 0
    while True:
        for item in corpus_documents(kind):
            data = read_document(item)
            start = 0
            while start < len(data):
                end = data.find(b"\n", start + size) + 1 or len(data)
                piece = data[start:end]
                start = end
                try:
                    piece.decode("utf-8")
                except UnicodeDecodeError:  # a cut inside a character: not a text
                    continue
                yield piece
                written += len(piece)
                if written >= target:
                    return


def ensure_files(workdir: Path, mb: int, count: int, kind: str) -> tuple[Path, dict, bool]:
    root = workdir / "files"
    wanted = {"mb": mb, "files": count, "corpus": kind, "python": sys.version}
    try:
        record = json.loads((workdir / RECORD).read_text(encoding="utf-8"))
        if {k: record.get(k) for k in wanted} == wanted:
            return root, record, True
    except (OSError, ValueError):
        pass
    import shutil

    (workdir / RECORD).unlink(missing_ok=True)
    shutil.rmtree(root, ignore_errors=True)
    docs = size = 0
    for i, text in enumerate(small_texts(kind, mb * MB, count)):
        folder = root / f"d{i % FOLDERS:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{i:07d}.txt").write_bytes(text)
        docs, size = docs + 1, size + len(text)
    record = {**wanted, "documents": docs, "bytes": size}
    (workdir / RECORD).write_text(json.dumps(record, indent=1), encoding="utf-8")
    return root, record, False


def main(argv: Optional[list[str]] = None) -> int:
    def files(parser) -> None:
        parser.add_argument("--files", type=int, default=50_000, help="how many text files")

    args = parse_args(__doc__.split("\n\n")[0], default_mb=50, argv=argv, more=files)
    workdir, temporary = open_workdir(args.workdir)
    t = time.perf_counter()
    root, record, reused = ensure_files(workdir, args.mb, args.files, args.corpus)
    how = "reused" if reused else f"written in {time.perf_counter() - t:.1f} s"
    print(f"python     {sys.executable} ({sys.version.split()[0]})")
    print(f"corpusprep {corpusprep_origin(workdir)}")
    print(f"corpus     {root}: {record['documents']:,} files in {FOLDERS} folders, "
          f"{record['bytes']:,} bytes ({how})")  # fmt: skip
    print(f"repeat     {args.repeat} (the median time counts)\n")

    outs = {"corpusprep": workdir / "out-corpusprep", "llm.c": workdir / "out-llmc"}
    commands = {
        "corpusprep": [sys.executable, "-m", "corpusprep", "source=files",
                       f"source.glob={root}/**/*.txt", "tokenizer=tiktoken", "eot=prepend",
                       f"out_dir={outs['corpusprep']}", "quiet=true"],
        "llm.c": [sys.executable, str(BENCH / "peer_files.py"), str(outs["llm.c"]), str(root)],
    }  # fmt: skip
    ceilings = Ceilings([root], True, {"corpusprep": (outs["corpusprep"], None)})
    runs = run_all(commands, outs, workdir, args.repeat, (), ceilings)
    if runs is None:
        return 1
    cp = outs["corpusprep"]
    made = {
        "corpusprep": documents_of([cp / "train.bin", cp / "val.bin"], "prepend",
                                   [cp / "doc_index" / "train.docs.bin",
                                    cp / "doc_index" / "val.docs.bin"]),
        "llm.c": documents_of([outs["llm.c"] / "tokens.bin"], "prepend"),
    }  # fmt: skip
    problem = check_same_tokens(made, record["documents"])
    if problem is not None:
        print(f"\nSAME TOKENS: NO (outputs kept in {workdir}): {problem}", file=sys.stderr)
        return 1
    print(f"same tokens: yes: {made['corpusprep'].docs:,} documents, "
          f"{made['corpusprep'].tokens:,} tokens\n")  # fmt: skip
    best = print_table(record["bytes"], runs)
    ratio = best["llm.c"] / best["corpusprep"]
    print(f"\ncorpusprep/llm.c throughput: {ratio:.2f}x")
    label = f"{record['documents']:,} files, {args.mb} MB"
    report_ratio(f"{label}, corpusprep/llm.c", ratio, TARGET_RATIO,
                 (best["llm.c"], ceilings.seconds("corpusprep")),
                 paired(runs["llm.c"], runs["corpusprep"]))  # fmt: skip
    report_ceiling(f"{label}, {ceilings.encoders['corpusprep']}", best["corpusprep"], ceilings,
                   "corpusprep")  # fmt: skip
    report_memory(label, runs["corpusprep"], TARGET_MEMORY)
    print_memory_notes()
    clean_up(workdir, temporary, args.keep, outs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
