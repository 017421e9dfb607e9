"""Benchmark tokenizer=bpe: training throughput, and encoding with the trained vocabulary
against GPT-2's on the same text.

    python bench/bench_train.py [--mb 50] [--vocab 4096] [--repeat 3] [--workdir DIR] [--keep]

1. builds a corpus of --mb megabytes (the uneven one: code, prose, data files), or reuses
   one already in --workdir;
2. runs `python -m corpusprep source=file ... tokenizer=bpe tokenizer.vocab_size=V`, with
   the default backend (riptoken where installed) and with backend=tiktoken, and checks
   both give the same files (the trained vocabulary included);
3. runs the same with tokenizer=tiktoken (GPT-2), both backends, the same check;
4. runs rustbpe alone, in-process, on the same pieces corpusprep trains on: the trainer's
   ceiling;
5. prints, from the manifests of the last runs: training MB/s of sample (corpusprep and
   rustbpe alone), encoding MB/s with the trained vocabulary and with GPT-2's, and each
   whole-process time;
6. tokenizer=sentencepiece: trains a model of the same size on a bounded sample
   (--sp-train-chars), then encodes the corpus with it, against the peer's method (one
   process, sentencepiece's encode of train and val text, as nanoGPT's prepare.py with
   llama2.c's tokenizer: the same files, checked) and sentencepiece's in-process ceiling
   on 1 MiB pieces with as many workers.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Optional

from common import (
    CORPORA,
    MB,
    REPO,
    Ceilings,
    clean_up,
    open_workdir,
    prepare_corpus,
    print_table,
    report_ceiling,
    run_all,
)

COMPARED = ("train.bin", "val.bin")
# the peer's method with sentencepiece: read the text, encode each side in one call
SP_ONE_CALL = """
import os, sys
import numpy as np, sentencepiece as spm
corpus, model, out = sys.argv[1:4]
text = open(corpus, encoding="utf-8").read()
n = int(len(text) * 0.9)
sp = spm.SentencePieceProcessor(model_file=model)
os.makedirs(out, exist_ok=True)
train, val = [sp.bos_id(), *sp.encode(text[:n])], sp.encode(text[n:])
np.array(train, dtype=np.uint16).tofile(os.path.join(out, "train.bin"))
np.array(val, dtype=np.uint16).tofile(os.path.join(out, "val.bin"))
"""
TRAINER_ALONE = """
import json, sys, time
sys.path.insert(0, {repo!r})
import rustbpe
from corpusprep.sample import Sampler, SampleRule
from corpusprep.tokenizers.bpe import PATTERNS
text = open({corpus!r}, encoding="utf-8").read()
sampler = Sampler(SampleRule(10**12, None))
for _ in sampler.document([text]):
    pass
units = sampler.result().units
start = time.perf_counter()
t = rustbpe.Tokenizer()
t.train_from_iterator(iter(units), {vocab}, pattern=PATTERNS["cl100k"])
print(json.dumps({{"seconds": time.perf_counter() - start, "chars": sum(map(len, units))}}))
"""


def parse(argv: Optional[list[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=50, help="corpus size in MB (10**6 bytes)")
    parser.add_argument("--vocab", type=int, default=4096, help="tokenizer.vocab_size")
    parser.add_argument("--repeat", type=int, default=3, help="runs per method; the median counts")
    parser.add_argument("--workdir", type=Path, help="where the corpus and outputs go")
    parser.add_argument("--keep", action="store_true", help="keep the corpus and the outputs")
    parser.add_argument("--corpus", choices=CORPORA, default="uneven")
    parser.add_argument("--sp-train-chars", type=int, default=5_000_000,
                        help="tokenizer.train_chars of the sentencepiece model")  # fmt: skip
    parser.add_argument("--no-sp", action="store_true", help="leave sentencepiece out")
    args = parser.parse_args(argv)
    if args.mb < 1 or args.repeat < 1 or args.vocab < 257:
        parser.error("--mb and --repeat must be at least 1, --vocab at least 257")
    return args


def _command(corpus: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "corpusprep", "source=file", f"source.path={corpus}",
            *extra, f"out_dir={out}", "quiet=true"]  # fmt: skip


def main(argv: Optional[list[str]] = None) -> int:
    args = parse(argv)
    workdir, temporary = open_workdir(args.workdir)
    corpus, size = prepare_corpus(workdir, args.mb, args.repeat, kind=args.corpus,
                                  extra=[f"vocab      {args.vocab:,} (tokenizer=bpe)"])  # fmt: skip
    bpe = ["tokenizer=bpe", f"tokenizer.vocab_size={args.vocab}"]
    pairs = {
        "trained": {"bpe": bpe, "bpe-tiktoken": [*bpe, "tokenizer.backend=tiktoken"]},
        "gpt2": {"gpt2": ["tokenizer=tiktoken"],
                 "gpt2-tiktoken": ["tokenizer=tiktoken", "tokenizer.backend=tiktoken"]},
    }  # fmt: skip
    outs, best, manifests = {}, {}, {}
    for group, methods in pairs.items():
        commands = {}
        for name, extra in methods.items():
            outs[name] = workdir / f"out-{name}"
            commands[name] = _command(corpus, outs[name], *extra)
        compared = (*COMPARED, "tokenizer.tiktoken") if group == "trained" else COMPARED
        runs = run_all(commands, {n: outs[n] for n in commands}, workdir, args.repeat, compared)
        if runs is None:
            return 1
        best.update(print_table(size, runs))
        print()
        for name in commands:
            manifests[name] = json.loads((outs[name] / "manifest.json").read_text())

    alone = []
    code = TRAINER_ALONE.format(repo=str(REPO), corpus=str(corpus), vocab=args.vocab)
    for _ in range(args.repeat):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              check=False)  # fmt: skip
        if done.returncode != 0:
            print(f"rustbpe alone: FAILED: {done.stderr.strip()[-300:]}")
            return 1
        alone.append(json.loads(done.stdout))
    alone_seconds = statistics.median(a["seconds"] for a in alone)

    trained = manifests["bpe"]
    sample = trained["tokenizer"]["sample_chars"]
    train_s = trained["seconds"]["train"]
    print(f"training sample: {sample:,} characters ({trained['tokenizer']['sample_units']:,} "
          f"pieces), vocabulary {trained['vocab_size']:,}")  # fmt: skip
    print(f"training, corpusprep (last run): {train_s:.2f} s, {sample / MB / train_s:.1f} MB/s "
          f"of sample; rustbpe alone (median): {alone_seconds:.2f} s, "
          f"{alone[0]['chars'] / MB / alone_seconds:.1f} MB/s")  # fmt: skip
    print("encoding (the encode phase of the last run, MB/s of corpus):")
    for name in ("bpe", "bpe-tiktoken", "gpt2", "gpt2-tiktoken"):
        m = manifests[name]
        encode = m["seconds"]["encode"]
        print(f"  {name:<14} {size / MB / encode:6.1f} MB/s  ({encode:.2f} s; whole process "
              f"{best[name]:.2f} s; {m['chars_per_token']} chars/token, backend "
              f"{m['tokenizer'].get('backend')})")  # fmt: skip
    ratio = manifests["gpt2"]["seconds"]["encode"] / manifests["bpe"]["seconds"]["encode"]
    print(f"trained vocabulary against GPT-2's, encode phase, default backends: {ratio:.2f}x")
    ratio = manifests["gpt2-tiktoken"]["seconds"]["encode"] / manifests["bpe-tiktoken"][
        "seconds"]["encode"]  # fmt: skip
    print(f"trained vocabulary against GPT-2's, encode phase, tiktoken both: {ratio:.2f}x")
    if not args.no_sp and not _sentencepiece(args, corpus, size, workdir, outs):
        return 1
    clean_up(workdir, temporary, args.keep, outs)
    return 0


def _sentencepiece(args, corpus: Path, size: int, workdir: Path, outs: dict[str, Path]) -> bool:
    print("\ntokenizer=sentencepiece")
    outs["sp-train"] = workdir / "out-sp-train"
    shutil.rmtree(outs["sp-train"], ignore_errors=True)
    done = subprocess.run(_command(corpus, outs["sp-train"], "tokenizer=sentencepiece",
                                   f"tokenizer.vocab_size={args.vocab}",
                                   f"tokenizer.train_chars={args.sp_train_chars}"),
                          capture_output=True, text=True, check=False)  # fmt: skip
    if done.returncode != 0:
        print(f"sentencepiece training: FAILED: {done.stderr.strip()[-300:]}")
        return False
    trained = json.loads((outs["sp-train"] / "manifest.json").read_text())["tokenizer"]
    model = workdir / "sp.model"
    shutil.copyfile(outs["sp-train"] / "tokenizer.model", model)
    chars, seconds = trained["sample_chars"], trained["train_seconds"]
    print(f"training sample: {chars:,} characters, {seconds:.2f} s, "
          f"{chars / MB / seconds:.2f} MB/s of sample")  # fmt: skip
    commands = {}
    for name in ("sp-one-call", "sp"):
        outs[name] = workdir / f"out-{name}"
    commands["sp-one-call"] = [sys.executable, "-c", SP_ONE_CALL, str(corpus), str(model),
                               str(outs["sp-one-call"])]  # fmt: skip
    commands["sp"] = _command(corpus, outs["sp"], "tokenizer=sentencepiece",
                              f"tokenizer.model={model}")  # fmt: skip
    ceilings = Ceilings([corpus], False, {"sp": (outs["sp"], f"sentencepiece={model}")})
    runs = run_all(commands, {n: outs[n] for n in commands}, workdir, args.repeat, COMPARED,
                   ceilings)  # fmt: skip
    if runs is None:
        return False
    best = print_table(size, runs)
    manifest = json.loads((outs["sp"] / "manifest.json").read_text())
    workers = manifest["executor"]["workers"]
    print(f"corpusprep: {manifest['shards']['count']} shards, {workers} workers, "
          f"cuts: {manifest['tokenizer']['cuts']}")  # fmt: skip
    ratio = best["sp-one-call"] / best["sp"]
    print(f"sentencepiece, corpusprep against one encode call (the peer's method): {ratio:.2f}x")
    report_ceiling("sentencepiece, one text", best["sp"], ceilings, "sp")
    return True


if __name__ == "__main__":
    sys.exit(main())
