"""Benchmark corpusprep's GPT-2 BPE path against nanoGPT's method on the same input.

    python bench/bench_bpe.py [--mb 50] [--repeat 1] [--workdir DIR] [--keep] [--gzip]

1. builds a corpus of --mb megabytes (10**6 bytes) from this Python's standard library
   sources, repeated, or reuses one already in --workdir (the same corpus as bench_char.py);
2. runs nanoGPT's data/shakespeare/prepare.py logic (tests/nanogpt_reference.py: the whole
   text read, split by characters at int(n*0.9), tiktoken gpt2 encode_ordinary on each part)
   and `python -m corpusprep ... tokenizer=tiktoken` on it, each in its own process;
3. measures wall time and peak memory of each, and checks that train.bin and val.bin are
   byte-identical (exit 1 if not; nanoGPT writes no meta.pkl for BPE);
4. runs the same command with tokenizer.backend=auto (the fastest backend installed and
   proven: splintr, riptoken), then the encoder's in-process ceiling on the same text
   (bench/ceiling.py: tiktoken, and auto's backend, with as many workers as corpusprep);
5. prints a table, the throughput ratio corpusprep/nanoGPT, corpusprep's fraction of the
   ceiling and whether corpusprep meets its targets (informational: a missed target does
   not change the exit status).

Both methods load tiktoken's gpt2 files: offline, set TIKTOKEN_CACHE_DIR to a folder that
holds them; the children inherit this process's environment.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import os
import shlex
import shutil
import sys
from pathlib import Path
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

OUTPUTS = ("train.bin", "val.bin")  # nanoGPT's BPE prepare writes no meta.pkl
TARGET_MEMORY = 300 * MB  # corpusprep's peak memory, below


def target_ratio(mb: int) -> float:
    """corpusprep's throughput over nanoGPT's, at least: 1.8x at 50 MB, 2x from 200 MB."""
    return 2.0 if mb >= 200 else 1.8


def _gzip_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gzip", action="store_true",
                        help="the corpus as one .txt.gz file, as texts are downloaded: nanoGPT's "
                        "method gunzips it first, corpusprep reads it as it is")  # fmt: skip


def _gzipped(corpus: Path) -> Path:
    """The corpus gzipped (level 6, gzip's default), made once."""
    packed = corpus.with_name(corpus.name + ".gz")
    if not packed.is_file() or packed.stat().st_mtime < corpus.stat().st_mtime:
        partial = packed.with_name(packed.name + ".partial")
        with open(corpus, "rb") as src, gzip.open(partial, "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        partial.replace(packed)
    return packed


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(__doc__.split("\n\n")[0], default_mb=50, argv=argv, more=_gzip_option)
    workdir, temporary = open_workdir(args.workdir)
    cache = os.environ.get("TIKTOKEN_CACHE_DIR", "(unset: tiktoken downloads into a temp dir)")
    corpus, size = prepare_corpus(workdir, args.mb, args.repeat, [f"tiktoken   {cache}"],
                                  args.corpus)  # fmt: skip
    outs = {"nanoGPT": workdir / "out-nanogpt-bpe", "corpusprep": workdir / "out-corpusprep-bpe"}
    source = _gzipped(corpus) if args.gzip else corpus
    nanogpt = [sys.executable, str(NANOGPT), "bpe", str(corpus), str(outs["nanoGPT"])]
    if args.gzip:  # its prepare.py reads a plain file: gunzipped first, in the timed run
        plain = workdir / "nanogpt-input.txt"
        nanogpt[3] = str(plain)
        nanogpt = ["sh", "-c", f"gzip -dc {shlex.quote(str(source))} > "
                   f"{shlex.quote(str(plain))} && exec {shlex.join(nanogpt)}"]  # fmt: skip
    # an optional faster backend: auto picks the fastest installed
    fast = any(importlib.util.find_spec(m) is not None for m in ("splintr", "riptoken"))
    if fast:
        outs["corpusprep+fast"] = workdir / "out-corpusprep-fast"

    commands = {  # the reference first: the others are compared against it
        "nanoGPT": nanogpt,
        "corpusprep": [
            sys.executable,
            "-m",
            "corpusprep",
            "source=file",
            f"source.path={source}",
            "tokenizer=tiktoken",
            "tokenizer.encoding=gpt2",
            "tokenizer.backend=tiktoken",  # the same encoder as nanoGPT's; a faster one below
            f"out_dir={outs['corpusprep']}",
            "quiet=true",
        ],
    }
    if fast:  # the same command with tokenizer.backend=auto: the same bytes, faster
        commands["corpusprep+fast"] = [
            *commands["corpusprep"][:-3],
            "tokenizer.backend=auto",
            f"out_dir={outs['corpusprep+fast']}",
            "quiet=true",
        ]
    # the encoder each corpusprep run used (tiktoken; auto's choice), measured each round
    methods = {name: (outs[name], None) for name in commands if name != "nanoGPT"}
    ceilings = Ceilings([corpus], False, methods)
    runs = run_all(commands, outs, workdir, args.repeat, OUTPUTS, ceilings)
    if runs is None:
        return 1  # the workdir is kept, to look at the outputs

    best = print_table(size, runs)
    ratio = best["nanoGPT"] / best["corpusprep"]
    print(f"\ncorpusprep/nanoGPT throughput: {ratio:.2f}x")
    if fast:
        manifest = json.loads((outs["corpusprep+fast"] / "manifest.json").read_text())
        backend = manifest["tokenizer"]["backend"]
        quicker = best["nanoGPT"] / best["corpusprep+fast"]
        print(f"corpusprep (tokenizer.backend=auto: {backend})/nanoGPT throughput: {quicker:.2f}x")
    print(f"corpusprep's own phases (last run): {corpusprep_phases(outs['corpusprep'])}")
    kinds = ([args.corpus] if args.corpus != "uneven" else []) + (["gzip"] if args.gzip else [])
    label = f"BPE one text {args.mb} MB" + (f" ({', '.join(kinds)})" if kinds else "")
    report_ratio(f"{label}, tiktoken, corpusprep/nanoGPT", ratio, target_ratio(args.mb),
                 (best["nanoGPT"], ceilings.seconds("corpusprep")),
                 paired(runs["nanoGPT"], runs["corpusprep"]))  # fmt: skip
    for name in methods:
        report_ceiling(f"{label}, {ceilings.encoders[name]}", best[name], ceilings, name)
    report_memory(label, runs["corpusprep"], TARGET_MEMORY)
    print_memory_notes()
    clean_up(workdir, temporary, args.keep, outs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
