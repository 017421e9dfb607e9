"""Memory flat and time linear from 50 MB to 1 GB: corpusprep alone, char and GPT-2 BPE.

    python bench/bench_scale.py [--sizes 50,1000] [--repeat 1] [--workdir DIR] [--keep]

For each size (MB, 10**6 bytes) builds the uneven corpus (common.corpus_documents) as one
text, runs `python -m corpusprep source=file` with tokenizer=char and with
tokenizer=tiktoken (backend=auto) in a fresh output folder, and prints the time, MB/s and
peak memory (PSS of the process tree). Targets: peak memory under 100 MB (char) and 300 MB
(BPE) at every size, the largest size's peak within 25% (+10 MB) of the smallest's, and
time per MB at the largest size no worse than at the smallest (+10%): linear or better.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
from pathlib import Path
from typing import Optional

from common import CORPORA, MB, clean_up, ensure_corpus, open_workdir, run_measured, verdict

LIMITS = {"char": 100 * MB, "tiktoken": 300 * MB}


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="50,1000", help="corpus sizes in MB, comma-separated")
    parser.add_argument("--repeat", type=int, default=1, help="runs per size; the median counts")
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--corpus", choices=CORPORA, default="uneven")
    args = parser.parse_args(argv)
    sizes = sorted(int(s) for s in args.sizes.split(","))
    workdir, temporary = open_workdir(args.workdir)
    outs, rows = {}, {}
    for mb in sizes:
        corpus = workdir / f"{args.corpus}-{mb}mb.txt"
        size, _ = ensure_corpus(corpus, mb * MB, args.corpus)
        for tokenizer in LIMITS:
            out = outs[(mb, tokenizer)] = workdir / f"out-{tokenizer}-{mb}"
            cmd = [sys.executable, "-m", "corpusprep", "source=file", f"source.path={corpus}",
                   f"tokenizer={tokenizer}", f"out_dir={out}", "quiet=true"]  # fmt: skip
            runs = []
            for i in range(args.repeat + 1):  # the last run samples memory, and is not timed
                shutil.rmtree(out, ignore_errors=True)  # a fresh folder: never a skipped re-run
                log = workdir / f"{tokenizer}-{mb}.log"
                runs.append(run_measured(cmd, workdir, log, sample=i == args.repeat))
            seconds = statistics.median(r.seconds for r in runs if r.timed)
            pss = max(r.peak_tree_pss for r in runs)
            rows[(mb, tokenizer)] = (seconds, pss)
            print(f"{tokenizer:<9} {mb:>6} MB  {seconds:7.2f} s  {size / MB / seconds:7.1f} MB/s  "
                  f"peak PSS, tree {pss / MB:6,.0f} MB")  # fmt: skip
        if mb != sizes[-1] and not args.keep:
            corpus.unlink()  # the disk holds one big corpus at a time
    small, big = sizes[0], sizes[-1]
    print()
    for tokenizer, limit in LIMITS.items():
        (t0, m0), (t1, m1) = rows[(small, tokenizer)], rows[(big, tokenizer)]
        worst = max(rows[(mb, tokenizer)][1] for mb in sizes)
        print(f"target: {tokenizer} {small}-{big} MB: peak memory < {limit / MB:,.0f} MB: "
              f"{worst / MB:,.0f} MB, {verdict(worst < limit)}")  # fmt: skip
        flat = m1 <= 1.25 * m0 + 10 * MB
        print(f"target: {tokenizer} {small}-{big} MB: memory flat: {m0 / MB:,.0f} -> "
              f"{m1 / MB:,.0f} MB, {verdict(flat)}")  # fmt: skip
        per_mb = (t1 / big) / (t0 / small)
        print(f"target: {tokenizer} {small}-{big} MB: time linear: {t0:.2f} s -> {t1:.2f} s "
              f"({per_mb:.2f}x the time per MB), {verdict(per_mb <= 1.1)}")  # fmt: skip
    clean_up(workdir, temporary, args.keep, outs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
