"""NumPy `.npy` shards, as karpathy/build-nanogpt's fineweb.py writes them (`np.save` of
each shard): `{name}_val_000000.npy`, `{name}_train_000001.npy`, ... one running index,
val first, `shard_tokens` tokens each (the last of a split holds the rest). The arrays are
1-D little-endian uint16, or uint32 when the vocabulary needs it (build-nanogpt's
train_gpt2.py `load_tokens` reads either: `np.load(f).astype(np.int32)`).

The .npy header is NumPy's own format 1.0 (numpy.lib.format), written once before the
tokens are streamed in: no shard is ever held in memory.

build-nanogpt's DataLoaderLite takes every file of the folder whose name contains the
split (`[s for s in os.listdir(data_root) if split in s]`): a run name holding "train"
would put the val shards in its train set ("val": the train shards in its val set), so
such a name is refused before any work.
"""

from __future__ import annotations

import re
from typing import BinaryIO

import numpy as np
from numpy.lib import format as npy_format

from corpusprep.errors import UserError
from corpusprep.exporters.llmc import ShardedExporter, file_stem

SPLIT_WORDS = ("train", "val")  # what build-nanogpt's `split in s` looks for


class NpyExporter(ShardedExporter):
    kind = "npy"
    suffix = ".npy"
    batch = 64 * 1024  # build-nanogpt's train_gpt2.py: B = 64, T = 1024
    needs = (
        "build-nanogpt's DataLoaderLite views B*T+1 tokens of a shard as (B, T) and fails on "
        "a shorter shard (65,537 tokens at its B=64, T=1024)"
    )

    def check(self, name: str) -> None:
        super().check(name)
        stem = file_stem(name)
        words = [w for w in SPLIT_WORDS if w in stem]
        if words:
            other = {"train": "val", "val": "train"}[words[0]]
            fix = re.sub(r"[_\-.]{2,}", "_", re.sub("|".join(SPLIT_WORDS), "", stem)).strip("_-.")
            raise UserError(
                f"name={name}: format=npy names its shards {stem}_train_*.npy and "
                f"{stem}_val_*.npy, and build-nanogpt's loader takes every file whose name "
                f"contains {words[0]!r}, so its {words[0]} set would hold the {other} shards; "
                f"give a name without 'train' or 'val', e.g. name={fix or 'corpus'}"
            )

    def reads(self, other: str, stem: str) -> bool:
        return any(word in other for word in SPLIT_WORDS)

    def reader(self, stem: str) -> str:
        return "build-nanogpt's loader (every name in the folder with 'train' or 'val' in it)"

    def write_header(self, f: BinaryIO, count: int, dtype: np.dtype) -> None:
        header = {"descr": npy_format.dtype_to_descr(dtype), "fortran_order": False,
                  "shape": (count,)}  # fmt: skip
        npy_format.write_array_header_1_0(f, header)
