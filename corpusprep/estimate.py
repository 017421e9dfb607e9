"""dry_run=true: read a sample of the corpus and estimate what a run would make (tokens,
vocabulary, dtype, bytes on disk, time) without writing anything.

The sample is a few shards spread evenly over the plan (about SAMPLE_BYTES in all), each
scanned and encoded exactly as a run would; the totals are scaled by input bytes.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from omegaconf import DictConfig

from corpusprep.config import build, read_settings
from corpusprep.prepare import eot_mode, is_single_text, plan
from corpusprep.shards import scan_shard
from corpusprep.writer import choose_dtype

SAMPLE_BYTES = 8 << 20


def estimate(cfg: DictConfig) -> dict[str, Any]:
    settings = read_settings(cfg)
    source = build(cfg.source, "source")
    tokenizer = build(cfg.tokenizer, "tokenizer")
    executor = build(cfg.executor, "executor")
    files = source.files(progress=not settings.quiet)
    single = is_single_text(files)
    eot = eot_mode(settings.eot, single, tokenizer)
    shards = plan(files, settings.shard_bytes, tokenizer)
    total = sum(s.nbytes for s in shards) or 1
    count = max(1, min(len(shards), round(SAMPLE_BYTES / (total / len(shards)))))
    picked = [shards[i] for i in np.linspace(0, len(shards) - 1, count).round().astype(int)]
    picked = list({s.index: s for s in picked}.values())

    start = time.perf_counter()
    scans = [scan_shard(s) for s in picked]
    if tokenizer.needs_fit:
        tokenizer.fit("".join(sorted(set("".join(s.charset for s in scans)))), eot=eot != "none")
    tokens = docs = 0
    for shard in picked:
        for part in shard.parts():
            docs += part.starts
            tokens += sum(len(ids) for ids in tokenizer.encode_pieces(part.pieces))
            tokens += eot != "none" and part.starts
    seconds = time.perf_counter() - start
    sampled = sum(s.nbytes for s in picked) or 1
    scale = total / sampled
    est_tokens = round(tokens * scale)
    vocab = tokenizer.vocab_size
    dtype = choose_dtype(settings.dtype, tokenizer.max_id)
    workers = getattr(executor, "workers", 1)
    return {
        "dry_run": True,
        "corpus": cfg.get("name"),
        "tokenizer": cfg.tokenizer.get("name"),
        "split": settings.split,
        "input_bytes": total,
        "sampled_bytes": sampled,
        "files": len(files),
        "documents": 1 if single else round(docs * scale),
        "tokens": est_tokens,
        "train_tokens": est_tokens - _val_tokens(settings, est_tokens, round(docs * scale)),
        "val_tokens": _val_tokens(settings, est_tokens, round(docs * scale)),
        # a learned vocabulary only grows with more text: the sample gives a lower bound
        "vocab": f">= {vocab:,}" if tokenizer.needs_fit else vocab,
        "dtype": dtype,
        "bytes_on_disk": est_tokens * np.dtype(dtype).itemsize,
        "chars_per_token": round(sum(s.chars for s in scans) / max(tokens, 1), 4),
        "seconds": round(seconds * scale / max(1, min(workers, len(shards))), 1),
    }


def describe(e: dict[str, Any], out_dir: str) -> str:
    return "\n".join([
        f"corpusprep: dry run for {e['corpus']} -> {out_dir} (nothing written)",
        f"  sampled    {e['sampled_bytes']:,} of {e['input_bytes']:,} bytes ({e['files']:,} files)",
        f"  documents  ~{e['documents']:,}",
        f"  tokens     ~{e['tokens']:,} (train ~{e['train_tokens']:,}, val ~{e['val_tokens']:,})",
        f"  vocab      {e['vocab']}, dtype {e['dtype']}",
        f"  on disk    ~{e['bytes_on_disk']:,} bytes, {e['chars_per_token']} chars/token",
        f"  time       ~{e['seconds']} s of encoding",
    ])  # fmt: skip


def _val_tokens(settings, tokens: int, docs: int) -> int:
    """About how many tokens go to val: a count for head/tail, else the val documents' share
    (val_size as given) or the rest of split."""
    size = settings.val_size
    if settings.split_by in ("head", "tail"):
        return min(int(size), tokens)
    if isinstance(size, int) and docs:
        return round(tokens * min(size / docs, 1))
    return round(tokens * (size if size is not None else 1 - settings.split))
