"""Every workload of issue 13 in one run, and each target met or not.

    python bench/bench_all.py [--repeat 3] [--workdir DIR] [--quick]

Runs, one after the other, each in its own process (their full output is shown as it
comes): bench_bpe.py at 50 and 200 MB, bench_corpus.py at 100 and 200 MB (2 files of
JSONL.zst) and at 30 MB in documents of about 3 KB (web corpora's size: FineWeb averages
~3 KB) and at 100 MB in 2 Parquet files as datasets writes them (FineWeb's and the
Hub's form) and as pyarrow's write_table writes them (a row group a file), bench_bpe.py
at 50 MB of text8-shaped text (one line of words: BPE cuts it only between words) and at
50 MB gzipped (one compressed text, read in pieces), bench_char.py at 200 MB and
bench_scale.py (50 MB and 1 GB). Each compares the peer's method, corpusprep and the
encoder's in-process ceiling on the same input, with fresh output folders and the median
of --repeat runs. Then prints every "target:" line together. --quick: the smaller size of
each workload only, and no 1 GB run.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workdir", type=Path, help="default: a temporary folder per script")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    small_documents = ("bench_corpus.py", 30, "--doc-bytes", "3000")
    words = ("bench_bpe.py", 50, "--corpus", "words")  # text8's shape: one line of words
    gzipped = ("bench_bpe.py", 50, "--gzip")  # one text as it is downloaded
    parquet = ("bench_corpus.py", 100, "--parquet")  # as datasets writes it (FineWeb's form)
    # as pyarrow's write_table and pandas' to_parquet write it: one row group a file
    one_row_group = ("bench_corpus.py", 100, "--parquet", "--parquet-rows", "1048576")
    plan = [("bench_bpe.py", 50), ("bench_bpe.py", 200), ("bench_corpus.py", 100),
            ("bench_corpus.py", 200), small_documents, parquet, one_row_group, words, gzipped,
            ("bench_char.py", 200)]  # fmt: skip
    if args.quick:
        plan = [("bench_bpe.py", 50), ("bench_corpus.py", 100), small_documents,
                ("bench_char.py", 200)]  # fmt: skip
    targets, failed = [], []
    for script, mb, *more in plan + [("bench_scale.py", None)]:
        cmd = [sys.executable, str(BENCH / script), "--repeat", str(args.repeat)]
        if mb is None:
            cmd[-2:] = ["--sizes", "50,200" if args.quick else "50,1000"]
        else:
            cmd += ["--mb", str(mb), *more]
        if args.workdir:  # a folder per workload: each builds its own corpus there
            name = "-".join([script.removesuffix(".py"), *(m.strip("-") for m in more)])
            cmd += ["--workdir", str(args.workdir / name)]
        print(f"\n=== {' '.join(cmd[1:])}", flush=True)
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) as child:
            for line in child.stdout:
                print(line, end="", flush=True)
                if line.startswith("target: "):
                    targets.append(line[len("target: ") :].rstrip())
        if child.returncode != 0:
            failed.append(script)
    print("\n=== targets")
    for line in targets:
        print(("! " if "NOT MET" in line else "  ") + line)
    met = sum("NOT MET" not in line for line in targets)
    print(f"{met} of {len(targets)} targets met" + (f"; FAILED: {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
