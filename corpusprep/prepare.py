"""The driver: wires source -> shards -> tokenizer -> split -> executor -> writer.

1. resolve the source to a local file (a URL is downloaded into the cache once);
2. cut it into a fixed plan of shards (byte ranges ending after a newline);
3. scan pass: count characters and collect the distinct ones, in parallel;
   meanwhile hash the file for the manifest;
4. fit the tokenizer if it learns from the corpus (char), pick the dtype, find the
   train/val split (nanoGPT's first int(n*split) characters go to train);
5. encode pass: every shard encodes its text and writes its ids, in parallel;
6. write meta.pkl and manifest.json, then rename everything into place together.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import sys
import time
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

import numpy as np
from omegaconf import DictConfig, OmegaConf

import corpusprep
from corpusprep.config import Settings, build, read_settings
from corpusprep.errors import UserError
from corpusprep.executors import Executor
from corpusprep.shards import EncodeResult, EncodeTask, Shard, Target, encode_shard, scan_shard
from corpusprep.sources import Source
from corpusprep.sources.url import sha256_file
from corpusprep.split import split_point
from corpusprep.text import plan_shards
from corpusprep.tokenizers import NOWHERE, Tokenizer
from corpusprep.writer import OutputWriter, choose_dtype


def prepare(cfg: DictConfig, overrides: Optional[list[str]] = None) -> dict[str, Any]:
    """Run the whole job described by a composed config; returns the manifest."""
    settings = read_settings(cfg)
    source: Source = build(cfg.source, "source")
    tokenizer: Tokenizer = build(cfg.tokenizer, "tokenizer")
    executor: Executor = build(cfg.executor, "executor")
    # a tokenizer that does not learn knows its ids now: a too-small dtype fails before any work
    dtype = None if tokenizer.needs_fit else choose_dtype(settings.dtype, tokenizer.max_id)
    clock = _Clock()

    path = source.local_path(progress=not settings.quiet)
    clock.lap("source")
    before = os.stat(path)
    shards = [
        Shard(i, str(path), a, b)
        for i, (a, b) in enumerate(_plan(path, before.st_size, settings, tokenizer))
    ]

    with executor:
        scans = list(_progress(executor.map(scan_shard, shards), shards, "scan", settings.quiet))
        clock.lap("scan")

        chars = sum(s.chars for s in scans)
        split_char = split_point(chars, settings.split, path)
        if tokenizer.needs_fit:
            tokenizer.fit("".join(sorted(set("".join(s.charset for s in scans)))))
        dtype = dtype or choose_dtype(settings.dtype, tokenizer.max_id)
        itemsize = np.dtype(dtype).itemsize

        with OutputWriter(settings.out_dir) as out:
            firsts = np.cumsum([0] + [s.chars for s in scans[:-1]]).tolist()
            sides = [_side_chars(f, s.chars, split_char) for f, s in zip(firsts, scans)]
            tasks, parts = _encode_tasks(shards, firsts, sides, split_char, tokenizer, dtype, out)
            results = executor.map(encode_shard, tasks)
            sha256 = sha256_file(path)  # here, while the workers encode and wait on the disk
            results = list(_progress(results, shards, "encode", settings.quiet))
            train = sum(r.train_tokens for r in results)
            val = sum(r.val_tokens for r in results)
            _check_unchanged(path, before)
            if parts:
                _merge_parts(out, parts, results, itemsize)
            clock.lap("encode")

            manifest = _manifest(
                cfg,
                overrides,
                settings,
                source,
                tokenizer,
                executor,
                path,
                before.st_size,
                sha256,
                len(shards),
                chars,
                split_char,
                dtype,
                train,
                val,
                clock,
            )
            out.write_pickle("meta.pkl", tokenizer.meta())
            out.write_json("manifest.json", manifest)
            out.commit()
    return manifest


def _plan(path: Path, size: int, settings: Settings, tokenizer: Tokenizer) -> list[tuple[int, int]]:
    """Shards end where the tokenizer allows a cut (after any newline for char and byte)."""
    if tokenizer.cut_at == NOWHERE:
        return [(0, size)]
    boundary = re.compile(tokenizer.cut_at or rb"\n")
    return plan_shards(path, size, settings.shard_bytes, boundary)


def _side_chars(first: int, chars: int, split_char: int) -> tuple[int, int]:
    """How many of a shard's characters fall on the train side and on the val side."""
    train = min(max(split_char - first, 0), chars)
    return train, chars - train


def _encode_tasks(shards, firsts, sides, split_char, tokenizer, dtype, out: OutputWriter):
    """Where each shard writes. When the token count follows from the character count
    (char tokenizer), shards write straight into train.bin / val.bin at known positions;
    otherwise each writes its own part files, concatenated in plan order afterwards."""
    itemsize = np.dtype(dtype).itemsize
    counts = [(tokenizer.tokens_for(t), tokenizer.tokens_for(v)) for t, v in sides]
    in_place = all(t is not None and v is not None for t, v in counts)
    tasks, parts = [], []
    if in_place:
        totals = [sum(c[0] for c in counts), sum(c[1] for c in counts)]
        paths = [
            out.temp("train.bin", totals[0] * itemsize),
            out.temp("val.bin", totals[1] * itemsize),
        ]
        position = [0, 0]
    for shard, first, (tc, vc), count in zip(shards, firsts, sides, counts):
        targets = []
        for k, nchars in enumerate((tc, vc)):
            if not nchars:
                targets.append(None)
            elif in_place:
                targets.append(Target(str(paths[k]), position[k]))
                position[k] += count[k]
            else:
                side = ("train", "val")[k]
                part = out.scratch(f"{side}.{shard.index:06d}.part")
                targets.append(Target(str(part), 0))
                parts.append((shard.index, side, part))
        tasks.append(EncodeTask(shard, first, split_char, tokenizer, dtype, *targets))
    return tasks, parts


def _merge_parts(out: OutputWriter, parts, results: list[EncodeResult], itemsize: int) -> None:
    """Concatenate part files into train.bin / val.bin in plan order (never finish order)."""
    for side in ("train", "val"):
        total = sum(getattr(r, f"{side}_tokens") for r in results)
        with open(out.temp(f"{side}.bin"), "r+b") as dst:
            for _, s, part in sorted(parts):
                if s == side:
                    with open(part, "rb") as src:
                        shutil.copyfileobj(src, dst, 1 << 20)
                    part.unlink()
            if dst.tell() != total * itemsize:
                raise RuntimeError(
                    f"{side}.bin: merged {dst.tell()} bytes, expected {total * itemsize}"
                )


def _check_unchanged(path: Path, before: os.stat_result) -> None:
    after = os.stat(path)
    if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
        raise UserError(f"{path}: the file changed while it was being read; run again")


def _progress(results: Iterable, shards: list[Shard], what: str, quiet: bool) -> Iterator:
    """A progress bar in bytes of input on a terminal; nothing otherwise (not even tqdm)."""
    if quiet or not sys.stderr.isatty():
        yield from results
        return
    from tqdm import tqdm

    with tqdm(total=sum(s.nbytes for s in shards), unit="B", unit_scale=True, desc=what,
              leave=False) as bar:  # fmt: skip
        for shard, result in zip(shards, results):
            bar.update(shard.nbytes)
            yield result


class _Clock:
    def __init__(self) -> None:
        self.start = self.last = time.perf_counter()
        self.laps: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = round(now - self.last, 4)
        self.last = now

    def total(self) -> float:
        return round(time.perf_counter() - self.start, 4)


def _manifest(
    cfg,
    overrides,
    settings,
    source,
    tokenizer,
    executor,
    path,
    nbytes,
    sha256,
    nshards,
    chars,
    split_char,
    dtype,
    train,
    val,
    clock,
) -> dict[str, Any]:
    import hydra
    import tqdm

    tokens = train + val
    manifest: dict[str, Any] = {
        "corpusprep": corpusprep.__version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "name": cfg.get("name"),
        "source": {
            **source.describe(),
            "file": str(Path(path).resolve()),
            "bytes": nbytes,
            "sha256": sha256,
        },
        "tokenizer": tokenizer.describe(),
        "vocab_size": tokenizer.vocab_size,
        "dtype": dtype,
        "split": {
            "by": "position",
            "fraction": settings.split,
            "train_chars": split_char,
            "val_chars": chars - split_char,
        },
        "chars": chars,
        "tokens": {"train": train, "val": val},
        "chars_per_token": round(chars / tokens, 4),
        "files": {
            "train.bin": train * np.dtype(dtype).itemsize,
            "val.bin": val * np.dtype(dtype).itemsize,
        },
        "shards": {"count": nshards, "shard_bytes": settings.shard_bytes},
        "executor": executor.describe(),
        "seconds": {**clock.laps, "total": clock.total()},
        "config": OmegaConf.to_container(cfg, resolve=True),
        "overrides": list(overrides or []),
        "versions": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "hydra": hydra.__version__,
            "tqdm": tqdm.__version__,
        },
    }
    if dtype != "uint16":
        manifest["nanogpt_note"] = (
            f"ids are {dtype}; nanoGPT's stock train.py reads uint16: change "
            f"np.memmap(..., dtype=np.uint16, ...) in get_batch to dtype=np.{dtype}"
        )
    return manifest
