"""llm.c's token files (karpathy/llm.c, dev/data/data_common.py `write_datafile`): each
`.bin` is a header of 256 int32 (little-endian) followed by the tokens:

    header[0] magic    20240520 (GPT-2, tokens uint16) | 20240801 (Llama 3, tokens uint32)
    header[1] version  1                               | 7
    header[2] the number of tokens that follow the 1,024-byte header

llm.c's GPT-2 trainers (train_gpt2cu and train_gpt2.c through llmc/dataloader.h,
train_gpt2.py) read only the uint16 kind; the uint32 kind only train_llama3.py reads (the
run's note says so: LlmcExporter.note).

llm.c asserts fewer than 2**31 tokens per file, so the output is cut into shards named as
dev/data/fineweb.py names them: one running index over the whole run, val first,
`{name}_val_000000.bin`, then `{name}_train_000001.bin`, `{name}_train_000002.bin`, ...
(llm.c's trainers take `-i '{name}_train_*.bin' -j '{name}_val_*.bin'`). The shards hold
`shard_tokens` tokens each (the last of a split holds the rest, warned when it is too short
for the peer's loader: ShardedExporter.warn_short_tails); like fineweb.py they are cut at
token counts, not at document boundaries.

This module also holds the sharding shared with `npy` (build-nanogpt copied llm.c's
fineweb.py, naming and all): a subclass only says how a shard file starts.
"""

from __future__ import annotations

import os
import re
import sys
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, BinaryIO, Optional

import numpy as np

from corpusprep.errors import UserError, escape_controls
from corpusprep.exporters import Exporter, Streams, keep_doc_index
from corpusprep.progress import Bar
from corpusprep.writer import OutputWriter, copy_range

MAX_SHARD_TOKENS = 2**31 - 1  # llm.c: assert len(toks) < 2**31
DEFAULT_SHARD_TOKENS = 10**8  # llm.c's fineweb.py and build-nanogpt's fineweb.py: 100M
SPLIT_ORDER = ("val", "train")  # fineweb.py's order: shard 0 is val

HEADERS = {  # data_common.py HEADERS_INFO: "gpt-2" and "llama-3"
    "uint16": {"magic": 20240520, "version": 1},
    "uint32": {"magic": 20240801, "version": 7},
}
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
# llmc/dataloader.h reads a batch with fseek(file, (int) offset): an offset of 2 GiB or more
# wraps negative and the seek fails. A uint16 shard of at most this many tokens is at most
# 2**31 bytes, so every offset it is read at fits an int.
SEEK_TOKENS = (2**31 - HEADER_BYTES) // 2


def check_shard_tokens(value: Any, limit: int = MAX_SHARD_TOKENS) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
        raise UserError(
            f"shard_tokens={value!r}: must be a whole number of tokens from 1 to {limit:,} "
            f"(e.g. shard_tokens={DEFAULT_SHARD_TOKENS})"
        )
    return value


def last_shard(total: int, shard_tokens: int) -> tuple[int, int]:
    """(shards, tokens of the last one) of a split of `total` tokens."""
    shards = -(-total // shard_tokens)
    return shards, total - (shards - 1) * shard_tokens


def short_limit(shard_tokens: int, batch: int) -> int:
    """The fewest tokens a split's last shard should hold: one batch of the peer's loader
    at its trainer's defaults and the one token more it reads (batch + 1); with shards of
    fewer than two such batches, whose user has a smaller batch, half a shard."""
    return min(batch + 1, shard_tokens // 2)


def short_tail(total: int, shard_tokens: int, batch: int) -> bool:
    """Whether a split of several shards ends in one shorter than short_limit."""
    shards, last = last_shard(total, shard_tokens)
    return shards > 1 and last < short_limit(shard_tokens, batch)


def even_shard_tokens(totals: list[int], shard_tokens: int, batch: int,
                      limit: int = MAX_SHARD_TOKENS) -> Optional[int]:  # fmt: skip
    """A shard_tokens near the given one that leaves no split of `totals` a short last
    shard: a split's tokens in as many shards (or one fewer) of about the same size."""
    for total in totals:
        shards, _ = last_shard(total, shard_tokens)
        if not short_tail(total, shard_tokens, batch):
            continue
        for candidate in (-(-total // shards), -(-total // (shards - 1))):
            if candidate <= limit and not any(short_tail(t, candidate, batch) for t in totals):
                return candidate
    return None


def index_width(shards: int) -> int:
    """The digits of a shard's index in its name: fineweb.py's 6, more when a run makes over
    a million shards, so that a sorted listing (llm.c's glob, build-nanogpt's sorted()) is
    still the shards' order (`_1000000` sorts before `_100001`)."""
    return max(6, len(str(max(shards - 1, 0))))


def file_stem(name: str) -> str:
    """The run's name, safe as the start of a file name, and as the start of a glob: llm.c
    takes its files by a pattern (`-i '{name}_train_*.bin'`), in which `*`, `?` and `[...]`
    are wildcards, so `name=corpus[v2]` gives `corpus_v2_train_000001.bin`."""
    return re.sub(r"[/\\:*?\"<>|\[\]\s]+", "_", name).strip("._") or "corpus"


# a file name is at most 255 bytes on Linux, macOS and Windows file systems; the longest
# part a format adds to the stem is megatron's "_train_text_document.idx" (24 bytes)
MAX_STEM_BYTES = 200


def check_stem(name: str) -> None:
    """Refuse a run name too long to begin the format's file names (a default name is the
    input file's stem, which can be long): the run would fail only as it writes them."""
    stem = file_stem(name)
    if len(stem.encode()) > MAX_STEM_BYTES:
        short = stem.encode()[:40].decode("utf-8", "ignore")
        raise UserError(
            f"name={name[:40]}...: {len(stem.encode())} bytes, too long to begin this "
            f"format's file names (at most {MAX_STEM_BYTES} bytes: a file name has 255); "
            f"set a shorter name, e.g. name={short}"
        )


class ShardedExporter(Exporter):
    """val shards then train shards, one running index, `shard_tokens` tokens each."""

    kind = "sharded"
    suffix = ".bin"
    # a split's last shard holds the rest, down to 1 token; the peer's loader takes B*T + 1
    # tokens of a shard at a time, so a shorter last shard is warned (short_limit): `batch`
    # is B*T at the peer trainer's defaults, `needs` says what its loader does with it
    batch = 4 * 1024
    needs = ""

    def __init__(self, shard_tokens: int = DEFAULT_SHARD_TOKENS) -> None:
        self.shard_tokens = check_shard_tokens(shard_tokens)
        self._shards: dict[str, list[dict[str, Any]]] = {}
        self._dtype: Optional[str] = None
        self._index = False

    def check(self, name: str) -> None:
        check_stem(name)

    def write_header(self, f: BinaryIO, count: int, dtype: np.dtype) -> None:
        raise NotImplementedError

    def export(self, streams: Streams, out: OutputWriter) -> dict[str, int]:
        self.check(streams.name)
        dtype = np.dtype(streams.dtype).newbyteorder("<")
        stem = file_stem(streams.name)
        produced: dict[str, int] = {}
        self._dtype, self._shards, index = dtype.name, {}, 0
        sizes = {side: Path(getattr(streams, side)).stat().st_size for side in SPLIT_ORDER}
        nbytes = sum(sizes.values())
        width = index_width(sum(last_shard(n // dtype.itemsize, self.shard_tokens)[0]
                                for n in sizes.values()))  # fmt: skip
        with Bar(f"write {self.kind}", nbytes, streams.show) as bar:
            for side in SPLIT_ORDER:
                src = Path(getattr(streams, side))
                total = src.stat().st_size // dtype.itemsize
                self._shards[side] = []
                with open(src, "rb") as f:
                    for start in range(0, total, self.shard_tokens):
                        count = min(self.shard_tokens, total - start)
                        name = f"{stem}_{side}_{index:0{width}d}{self.suffix}"
                        path = out.temp(name)
                        bar.describe(f"write {name}")
                        with open(path, "r+b") as dst:
                            self.write_header(dst, count, dtype)
                            copy_range(f, dst, start * dtype.itemsize, count * dtype.itemsize,
                                       bar.update)  # fmt: skip
                        produced[name] = path.stat().st_size
                        self._shards[side].append({"file": name, "tokens": count})
                        index += 1
                out.drop(f"{side}.bin")
        self.drop_other_shards(stem, produced, out)
        self.warn_short_tails(streams.name)
        # the document index stays, as in the nanogpt format (in doc_index/, where no
        # loader's glob finds it): offsets into the whole split (all its shards end to
        # end), so a sampler can keep windows inside documents
        self._index = streams.train_docs is not None
        return produced | keep_doc_index(streams, out)

    def drop_other_shards(self, stem: str, produced: dict[str, int], out: OutputWriter) -> None:
        """Files named as this run's shards that it does not make (the surplus shards of an
        earlier run whose manifest is damaged or gone, which alone says they were its) go
        at the commit: the peer's glob or listing would read them with this run's shards."""
        own = re.compile(rf"{re.escape(stem)}_(?:{'|'.join(SPLIT_ORDER)})_\d{{6,}}"
                         rf"{re.escape(self.suffix)}")  # fmt: skip
        for entry in os.scandir(out.out_dir):
            if own.fullmatch(entry.name) and entry.name not in produced:
                out.obsolete(entry.name)

    def warn_others(self, names: list[str], name: str) -> None:
        stem = file_stem(name)
        for other in sorted(names):
            if self.reads(other, stem):
                print(f"corpusprep: warning: {name}: out_dir holds {escape_controls(other)}, which "
                      f"{self.reader(stem)} would read as a shard; move it out of out_dir",
                      file=sys.stderr)  # fmt: skip

    def reads(self, other: str, stem: str) -> bool:
        """Whether the peer's loader takes the file `other` for a shard: llm.c takes its
        shards by a glob (`-i '{name}_train_*.bin'`)."""
        return any(fnmatchcase(other, f"{stem}_{side}_*{self.suffix}") for side in SPLIT_ORDER)

    def reader(self, stem: str) -> str:
        return f"llm.c's glob ({stem}_train_*{self.suffix})"

    def warn_short_tails(self, name: str) -> None:
        """One line for each split whose last shard is too short for the peer's loader (it
        holds what is left; fineweb.py cuts so too), with a shard_tokens that fixes it."""
        totals = {side: sum(s["tokens"] for s in shards) for side, shards in self._shards.items()}
        fix = even_shard_tokens(list(totals.values()), self.shard_tokens, self.batch)
        for side, total in totals.items():
            if not short_tail(total, self.shard_tokens, self.batch):
                continue
            last = self._shards[side][-1]
            limit = short_limit(self.shard_tokens, self.batch)
            count = f"{last['tokens']:,} token" + ("" if last["tokens"] == 1 else "s")
            how = (
                f"shard_tokens={fix} cuts {side} into {last_shard(total, fix)[0]} shards of "
                "about the same size"
                if fix is not None
                else f"choose a shard_tokens that leaves it at least {limit:,} tokens"
            )
            print(f"corpusprep: warning: {name}: the last {side} shard, {last['file']}, holds "
                  f"{count} (a full one {self.shard_tokens:,}); {self.needs}; {how}",
                  file=sys.stderr)  # fmt: skip

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "shard_tokens": self.shard_tokens}
        if self._dtype is not None:
            out.update(token_dtype=self._dtype, shards=self._shards, document_index=self._index)
        return out


class LlmcExporter(ShardedExporter):
    kind = "llmc"
    suffix = ".bin"
    batch = 4 * 1024  # train_gpt2cu's defaults: -b 4 -t 1024
    needs = (
        "llm.c's dataloader asserts every shard holds at least B*T*processes+1 tokens "
        "(4,097 at train_gpt2cu's default -b 4 -t 1024 on one GPU)"
    )

    def export(self, streams: Streams, out: OutputWriter) -> dict[str, int]:
        produced = super().export(streams, out)
        self.warn_seek(streams.name)
        return produced

    def warn_seek(self, name: str) -> None:
        """One line when a uint16 shard is too big for llm.c's C loader (dataloader.h casts
        its byte offset to int: past 2 GiB of a shard the seek fails); train_gpt2.py reads
        it whole, and the uint32 files are train_llama3.py's only."""
        if self._dtype != "uint16":
            return
        big = [s for shards in self._shards.values() for s in shards if s["tokens"] > SEEK_TOKENS]
        if big:
            print(f"corpusprep: warning: {name}: {len(big)} shard(s), the first "
                  f"{big[0]['file']}, hold more than {SEEK_TOKENS:,} tokens (2 GiB); llm.c's "
                  "dataloader.h (train_gpt2cu, train_gpt2.c) seeks in a shard with an int "
                  "offset and fails past 2 GiB; shard_tokens="
                  f"{min(SEEK_TOKENS, DEFAULT_SHARD_TOKENS)} keeps every shard under it",
                  file=sys.stderr)  # fmt: skip

    def write_header(self, f: BinaryIO, count: int, dtype: np.dtype) -> None:
        info = HEADERS[dtype.name]
        header = np.zeros(HEADER_INTS, dtype="<i4")
        header[0], header[1], header[2] = info["magic"], info["version"], count
        f.write(header.tobytes())

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        if self._dtype is not None:
            out.update(HEADERS[self._dtype], header_bytes=HEADER_BYTES)
        return out

    def note(self, dtype: str) -> Optional[str]:
        """llm.c's GPT-2 trainers (train_gpt2cu and train_gpt2.c through llmc/dataloader.h,
        and train_gpt2.py) accept only magic 20240520 / version 1 with uint16 tokens; only
        train_llama3.py reads the uint32 files (magic 20240801 / version 7)."""
        if dtype == "uint16":
            return None
        info = HEADERS[dtype]
        return (
            f"ids are {dtype}, so the files have llm.c's Llama 3 header (magic {info['magic']}, "
            f"version {info['version']}), which only its train_llama3.py reads; train_gpt2cu, "
            "train_gpt2.c and train_gpt2.py read only uint16 files (magic 20240520): for "
            "them the ids must fit uint16 (dtype=uint16, a vocabulary under 65,536 ids)"
        )
