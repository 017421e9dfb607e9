"""Benchmark corpusprep's char-level path against nanoGPT's method on the same input.

    python bench/bench_char.py [--mb 200] [--repeat 1] [--workdir DIR] [--keep]

1. builds a corpus of --mb megabytes (10**6 bytes) from this Python's standard library
   sources, repeated, or reuses one already in --workdir;
2. runs nanoGPT's data/shakespeare_char/prepare.py logic (tests/nanogpt_reference.py) and
   `python -m corpusprep source=file ...` on it, each in its own process, as a user would;
3. measures wall time and peak memory of each, and checks that train.bin, val.bin and
   meta.pkl are byte-identical (exit 1 if not);
4. runs the char encoder's in-process ceiling on the same text (bench/ceiling.py);
5. prints a table, the throughput ratio corpusprep/nanoGPT and the targets.
"""

from __future__ import annotations

import sys
from typing import Optional

from common import (
    MB,
    NANOGPT,
    Ceilings,
    clean_up,
    corpusprep_phases,
    open_workdir,
    paired,
    parse_args,
    prepare_corpus,
    print_memory_notes,
    print_table,
    report_ceiling,
    report_memory,
    report_ratio,
    run_all,
)

OUTPUTS = ("train.bin", "val.bin", "meta.pkl")  # all three must be byte-identical
TARGET_RATIO = 18  # corpusprep's throughput over nanoGPT's at 200 MB, at least
TARGET_MEMORY = 100 * MB


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(__doc__.split("\n\n")[0], default_mb=200, argv=argv)
    workdir, temporary = open_workdir(args.workdir)
    corpus, size = prepare_corpus(workdir, args.mb, args.repeat, kind=args.corpus)
    outs = {"nanoGPT": workdir / "out-nanogpt", "corpusprep": workdir / "out-corpusprep"}

    commands = {  # the reference first: the others are compared against it
        "nanoGPT": [sys.executable, str(NANOGPT), "char", str(corpus), str(outs["nanoGPT"])],
        "corpusprep": [
            sys.executable,
            "-m",
            "corpusprep",
            "source=file",
            f"source.path={corpus}",
            f"out_dir={outs['corpusprep']}",
            "quiet=true",
        ],
    }
    ceilings = Ceilings([corpus], False, {"corpusprep": (outs["corpusprep"], "char")})
    runs = run_all(commands, outs, workdir, args.repeat, OUTPUTS, ceilings)
    if runs is None:
        return 1  # the workdir is kept, to look at the outputs

    best = print_table(size, runs)
    ratio = best["nanoGPT"] / best["corpusprep"]
    print(f"\ncorpusprep/nanoGPT throughput: {ratio:.2f}x")
    print(f"corpusprep's own phases (last run): {corpusprep_phases(outs['corpusprep'])}")
    label = f"char {args.mb} MB"
    ceiling = ceilings.seconds("corpusprep")
    report_ratio(f"{label}, corpusprep/nanoGPT", ratio, TARGET_RATIO, (best["nanoGPT"], ceiling),
                 paired(runs["nanoGPT"], runs["corpusprep"]))  # fmt: skip
    report_ceiling(label, best["corpusprep"], ceilings, "corpusprep")
    report_memory(label, runs["corpusprep"], TARGET_MEMORY)
    print_memory_notes()
    clean_up(workdir, temporary, args.keep, outs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
