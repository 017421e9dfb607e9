"""dry_run=true: read a sample of the corpus and estimate what a run would make (tokens,
vocabulary, dtype, bytes on disk, time) without writing anything.

The sample is a few shards spread evenly over the plan (about SAMPLE_BYTES in all), each
scanned and encoded exactly as a run would; the totals are scaled by input bytes, or
counted when the sample is the whole input (said "exact"). Documents are counted where each
file is one, else scaled by the bytes of the files that hold several; the output says how
sure each number is.
"""

from __future__ import annotations

import math
import time
from typing import Any, Optional

import numpy as np
from omegaconf import DictConfig

from corpusprep.config import Settings, build, read_settings
from corpusprep.formats import InputFile, Segment, get_format, let_go_of_readers
from corpusprep.prepare import (
    check_inputs,
    corpus_name,
    eot_mode,
    is_single_text,
    plan,
    split_rule,
)
from corpusprep.sample import merge_samples
from corpusprep.shards import scan_shard
from corpusprep.writer import choose_dtype

SAMPLE_BYTES = 8 << 20


def estimate(cfg: DictConfig, overrides: Optional[list[str]] = None) -> dict[str, Any]:
    try:
        return _estimate(cfg, overrides or [])
    finally:  # what reading its sample kept open (a piece's reading), in this process:
        let_go_of_readers()  # a library's or a sweep's, which runs on after it


def _estimate(cfg: DictConfig, overrides: list[str]) -> dict[str, Any]:
    settings = read_settings(cfg)
    source = build(cfg.source, "source")
    tokenizer = build(cfg.tokenizer, "tokenizer")
    executor = build(cfg.executor, "executor")
    files = source.files(progress=not settings.quiet)
    check_inputs(files, source, overrides)  # as the run checks them
    single = is_single_text(files)
    split_by = split_rule(settings, single, corpus_name(files, source))  # the run's own checks
    eot = eot_mode(settings.eot, single, tokenizer)
    shards = plan(files, settings.shard_bytes, tokenizer)
    total = sum(s.nbytes for s in shards) or 1
    count = max(1, min(len(shards), round(SAMPLE_BYTES / (total / len(shards)))))
    picked = [shards[i] for i in np.linspace(0, len(shards) - 1, count).round().astype(int)]
    picked = list({s.index: s for s in picked}.values())

    start = time.perf_counter()
    rule = tokenizer.sample_rule(single)  # a tokenizer that trains: on the sample's own sample
    scans = [scan_shard(s, rule) for s in picked]
    training = None
    if tokenizer.needs_fit:
        charset = "".join(sorted(set("".join(s.charset for s in scans))))
        if rule is not None:
            sample = merge_samples([s.sample for s in scans], rule.chars)
            began = time.perf_counter()
            tokenizer.fit(charset, eot=eot != "none", sample=sample)
            trained = time.perf_counter() - began
            start += trained  # timed on its own below
            # training counts its sample's pre-tokens: time grows with the sample's size
            corpus_chars = sum(s.chars for s in scans) * total / max(
                sum(x.nbytes for x in picked), 1)  # fmt: skip
            full = min(rule.chars, corpus_chars)
            training = (round(trained * full / max(sample.chars, 1), 1), round(full))
        else:
            tokenizer.fit(charset, eot=eot != "none")
    tokens = 0
    seen = _Seen()
    for shard in picked:
        for segment in shard.segments:
            one = _one_per_file(segment.file)
            for part in get_format(segment.file.format).parts(segment):
                seen.add(one, part.starts)
                encode = tokenizer.encode_pieces if part.starts else tokenizer.encode_continued
                tokens += sum(len(ids) for ids in encode(part.pieces))
                tokens += eot != "none" and part.starts
            seen.covered(one, segment)
    seconds = time.perf_counter() - start
    sampled = sum(s.nbytes for s in picked) or 1
    whole = len(picked) == len(shards)  # the sample is the input: every count is exact
    scale = total / sampled
    est_tokens = round(tokens * scale)
    docs, how = _documents(files, shards, picked, seen, whole)
    vocab = tokenizer.vocab_size
    dtype = choose_dtype(settings.dtype, tokenizer.max_id, build(cfg.format, "format").wide_from)
    workers = getattr(executor, "workers", 1)
    return {
        "dry_run": True,
        "corpus": cfg.get("name"),
        "tokenizer": cfg.tokenizer.get("name"),
        "split": settings.split,
        "input_bytes": total,
        "sampled_bytes": sampled,
        "files": len(files),
        "sampled_files": len({seg.file.name for s in picked for seg in s.segments}),
        "exact": whole,  # tokens and documents were counted, not extrapolated
        "documents": 1 if single else docs,
        "documents_how": "exact: one text" if single else how,
        "tokens": est_tokens,
        "train_tokens": est_tokens - _val_tokens(settings, split_by, est_tokens, docs),
        "val_tokens": _val_tokens(settings, split_by, est_tokens, docs),
        # a learned vocabulary only grows with more text: the sample gives a lower bound
        "vocab": f">= {vocab:,}" if tokenizer.needs_fit else vocab,
        "dtype": dtype,
        "bytes_on_disk": est_tokens * np.dtype(dtype).itemsize,
        "chars_per_token": round(sum(s.chars for s in scans) / max(tokens, 1), 4),
        "seconds": round(seconds * scale / max(1, min(workers, len(shards))), 1),
        **({"train_seconds": training[0], "train_chars": training[1]} if training else {}),
    }


def describe(e: dict[str, Any], out_dir: str) -> str:
    about = "" if e.get("exact") else "~"
    if e.get("exact"):
        files = f"{e['files']:,} file{'s' if e['files'] != 1 else ''}"
        sampled = f"all {e['input_bytes']:,} bytes ({files}): counts are exact"
    else:
        sampled = (
            f"{e['sampled_bytes']:,} of {e['input_bytes']:,} bytes "
            f"({_share(e['sampled_bytes'], e['input_bytes'])}), "
            f"{e['sampled_files']:,} of {e['files']:,} files"
        )
    how = e.get("documents_how", "")
    docs = f"{e['documents']:,}" if how.startswith("exact") else f"about {e['documents']:,}"
    return "\n".join([
        f"corpusprep: dry run for {e['corpus']} -> {out_dir} (nothing written)",
        f"  sampled    {sampled}",
        f"  documents  {docs}" + (f" ({how})" if how else ""),
        # train/val: from the split's share, even when the total is counted
        f"  tokens     {about}{e['tokens']:,} (train ~{e['train_tokens']:,}, "
        f"val ~{e['val_tokens']:,})",
        f"  vocab      {e['vocab']}, dtype {e['dtype']}",
        f"  on disk    ~{e['bytes_on_disk']:,} bytes, {e['chars_per_token']:.3f} chars/token",
        f"  time       ~{e['seconds']} s of encoding",
        *([f"  training   ~{e['train_seconds']} s on a sample of ~{e['train_chars']:,} chars"]
          if "train_seconds" in e else []),
    ])  # fmt: skip


class _Seen:
    """What the sample shows about documents: in files that are one document each (how
    many such files began in it, and their documents: fewer if invalid ones are skipped),
    and in the other files (their documents and bytes)."""

    def __init__(self) -> None:
        self.one_files = self.one_docs = self.docs = self.bytes = 0

    def add(self, one: bool, starts: bool) -> None:
        if one:
            self.one_docs += starts
        else:
            self.docs += starts

    def covered(self, one: bool, segment: Segment) -> None:
        if one:
            self.one_files += segment.start == 0
        else:
            self.bytes += segment.nbytes


def _one_per_file(file: InputFile) -> bool:
    """A plain text file (or zip member) with no separator: exactly one document."""
    return file.format == "text" and not (file.doc_separator or file.doc_end)


def _documents(files: list[InputFile], shards: list, picked: list, seen: _Seen,
               whole: bool) -> tuple[int, str]:  # fmt: skip
    """The documents a run would find, and how sure that is. Files that are one document
    each are counted (scaling by bytes made 2,638 of the standard library's 1,758: small
    files are not spread evenly); for the others, documents per byte of their sampled
    parts times their bytes."""
    if whole:
        return seen.one_docs + seen.docs, "exact: the sample is the whole input"
    ones = [f for f in files if _one_per_file(f)]
    one_docs = len(ones)
    skipping = any(f.skip_invalid for f in ones)
    if skipping and seen.one_files:  # invalid files are left out: as often as in the sample
        one_docs = round(len(ones) * seen.one_docs / seen.one_files)
    other = sum(seg.nbytes for s in shards for seg in s.segments if not _one_per_file(seg.file))
    docs = one_docs
    if other:
        sampled = sum(s.nbytes for s in picked) or 1
        rate = seen.docs / seen.bytes if seen.bytes else (seen.one_docs + seen.docs) / sampled
        docs += round(rate * other)
    if not skipping and (not other or seen.bytes == other):
        return docs, "exact: one per file" if ones and not other else "exact"
    share = _share(sum(s.nbytes for s in picked), sum(s.nbytes for s in shards))
    sampled_files = len({seg.file.name for s in picked for seg in s.segments})
    return docs, f"from a sample of {sampled_files:,} of {len(files):,} files, {share} of bytes"


def _share(part: int, total: int) -> str:
    return f"{100 * part / max(total, 1):.2g}%"


def _val_tokens(settings: Settings, split_by: str, tokens: int, docs: int) -> int:
    """About how many tokens go to val, by the run's rule for each split_by: the first
    int(n * split) characters to train (exact for a character-level text); val_size or
    n - floor(split * n) of the documents; a count for head/tail; 1 - split for hash."""
    size = settings.val_size
    if split_by in ("head", "tail"):
        return min(int(size), tokens)
    if split_by == "position":
        return tokens - math.floor(tokens * settings.split)
    if split_by == "document" and docs:
        if size is None:
            val_docs = docs - math.floor(settings.split * docs)
        else:
            val_docs = size if isinstance(size, int) else math.ceil(size * docs)
        return round(tokens * min(val_docs / docs, 1))
    return round(tokens * (1 - settings.split))
