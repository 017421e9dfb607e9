"""NumPy `.npy` shards, as karpathy/build-nanogpt's fineweb.py writes them (`np.save` of
each shard): `{name}_val_000000.npy`, `{name}_train_000001.npy`, ... one running index,
val first, `shard_tokens` tokens each (the last of a split holds the rest). The arrays are
1-D little-endian uint16, or uint32 when the vocabulary needs it (build-nanogpt's
train_gpt2.py `load_tokens` reads either: `np.load(f).astype(np.int32)`).

The .npy header is NumPy's own format 1.0 (numpy.lib.format), written once before the
tokens are streamed in: no shard is ever held in memory.
"""

from __future__ import annotations

from typing import BinaryIO

import numpy as np
from numpy.lib import format as npy_format

from corpusprep.exporters.llmc import ShardedExporter


class NpyExporter(ShardedExporter):
    kind = "npy"
    suffix = ".npy"

    def write_header(self, f: BinaryIO, count: int, dtype: np.dtype) -> None:
        header = {"descr": npy_format.dtype_to_descr(dtype), "fortran_order": False,
                  "shape": (count,)}  # fmt: skip
        npy_format.write_array_header_1_0(f, header)
