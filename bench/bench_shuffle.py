"""What the seeded global shuffle costs, and nanoGPT's OpenWebText files made exactly.

    python bench/bench_shuffle.py [--mb 200] [--repeat 3] [--workdir DIR] [--keep]

On bench_corpus.py's corpus (JSON Lines of documents in zstd files), each in its own
process, fresh output folders every time, alternating:
   source    corpusprep with nanoGPT's split (split_by=document val_size=0.0005), corpus order
   shuffle   the same with order=shuffle: nanoGPT's data/openwebtext/prepare.py rule
   nanoGPT   bench/peer_nanogpt_owt.py (HF datasets' train_test_split + map), if installed
then checks that `shuffle` and `nanoGPT` wrote the same train.bin and val.bin, byte for
byte, and prints the median times, the shuffle's cost over corpus order, and the ratios.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import statistics
import sys
from pathlib import Path
from typing import Optional

from bench_corpus import ensure_corpus
from common import MB, clean_up, corpusprep_origin, open_workdir, parse_args, run_measured

BENCH = Path(__file__).resolve().parent


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(__doc__.split("\n\n")[0], default_mb=200, argv=argv)
    workdir, temporary = open_workdir(args.workdir)
    paths, corpus, _ = ensure_corpus(workdir, args.mb)
    os.environ["HF_DATASETS_CACHE"] = str(workdir / "hf-cache")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    print(f"corpusprep {corpusprep_origin(workdir)}")
    print(f"corpus     {len(paths)} files, {corpus['documents']:,} documents, "
          f"{corpus['json_bytes']:,} bytes of JSON; {os.cpu_count()} cores\n")  # fmt: skip
    owt = ["source=files", f"source.glob={workdir}/corpus_*.jsonl.zst", "tokenizer=tiktoken",
           "split_by=document", "val_size=0.0005", "seed=2357", "eot=append",
           "quiet=true"]  # fmt: skip
    outs = {name: workdir / f"out-{name}" for name in ("source", "shuffle", "nanoGPT")}
    cp = [sys.executable, "-m", "corpusprep", *owt]
    commands = {
        "source": [*cp, "order=source", f"out_dir={outs['source']}"],
        "shuffle": [*cp, "order=shuffle", f"out_dir={outs['shuffle']}"],
    }
    if importlib.util.find_spec("datasets") is not None:
        files = [str(p) for p in paths]
        commands["nanoGPT"] = [sys.executable, str(BENCH / "peer_nanogpt_owt.py"),
                               str(outs["nanoGPT"]), *files]  # fmt: skip
    times: dict[str, list[float]] = {name: [] for name in commands}
    for i in range(1, args.repeat + 1):
        for name, cmd in commands.items():
            shutil.rmtree(outs[name], ignore_errors=True)  # never a skipped, up-to-date run
            shutil.rmtree(workdir / "hf-cache", ignore_errors=True)
            run = run_measured(cmd, workdir, workdir / f"{name}.log")
            times[name].append(run.seconds)
            print(f"run {i}/{args.repeat}  {name:<8} {run.seconds:6.2f} s  "
                  f"PSS {run.peak_tree_pss / MB:6,.0f} MB")  # fmt: skip
        if "nanoGPT" in commands:
            for side in ("train.bin", "val.bin"):
                a, b = outs["shuffle"] / side, outs["nanoGPT"] / side
                if a.read_bytes() != b.read_bytes():
                    print(f"\nNOT THE SAME: {a} and {b} differ", file=sys.stderr)
                    return 1
    median = {name: statistics.median(t) for name, t in times.items()}
    print()
    for name, seconds in median.items():
        print(
            f"median {name:<8} {seconds:6.2f} s  ({corpus['json_bytes'] / MB / seconds:5.1f} MB/s)"
        )
    cost = median["shuffle"] - median["source"]
    print(f"\nthe shuffle costs {cost:+.2f} s ({cost / median['source']:+.1%}) over corpus order")
    if "nanoGPT" in median:
        print("train.bin and val.bin: byte-identical to nanoGPT's data/openwebtext method")
        ratio = median["nanoGPT"] / median["shuffle"]
        print(f"corpusprep (shuffle) / nanoGPT throughput: {ratio:.2f}x")
    clean_up(workdir, temporary, args.keep, outs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
