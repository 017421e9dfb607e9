"""Reading an output folder back: the token arrays, the tokenizer and the manifest.

    >>> ds = corpusprep.load("data/shakespeare_char")
    >>> ds.train[:10], ds.tokenizer.decode(ds.val[:50]), ds.manifest["tokens"]

The arrays are memory-mapped (nothing is read until used). load() checks that the files
agree with the manifest (sizes, dtype, vocabulary) and says clearly when they don't.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import OmegaConf

from corpusprep.errors import UserError
from corpusprep.tokenizers import Tokenizer


@dataclass
class PreparedDataset:
    path: Path
    train: np.ndarray  # memory-mapped, read-only
    val: np.ndarray
    tokenizer: Tokenizer
    manifest: dict[str, Any]
    meta: dict[str, Any]

    @property
    def dtype(self) -> np.dtype:
        return self.train.dtype

    def splits(self) -> Iterator[tuple[str, np.ndarray]]:
        yield "train", self.train
        yield "val", self.val


def load(path: str | Path) -> PreparedDataset:
    """Open an output folder made by corpusprep."""
    folder = Path(path)
    manifest_path = folder / "manifest.json"
    if not manifest_path.is_file():
        raise UserError(
            f"{folder}: not a corpusprep output folder (no manifest.json); "
            "give the out_dir of a finished run"
        )
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    dtype = np.dtype(manifest["dtype"])
    arrays = {}
    for side in ("train", "val"):
        file = folder / f"{side}.bin"
        tokens = manifest["tokens"][side]
        expected = tokens * dtype.itemsize
        size = file.stat().st_size if file.is_file() else None
        if size != expected:
            found = "missing" if size is None else f"{size:,} bytes"
            raise UserError(
                f"{file}: {found}, but the manifest says {tokens:,} {dtype.name} tokens "
                f"({expected:,} bytes); the folder is damaged or mixed with another run: "
                "prepare it again"
            )
        arrays[side] = np.memmap(file, dtype=dtype, mode="r") if tokens else np.zeros(0, dtype)
    with open(folder / "meta.pkl", "rb") as f:
        meta = pickle.load(f)
    if meta.get("vocab_size") != manifest["vocab_size"]:
        raise UserError(
            f"{folder / 'meta.pkl'}: vocab_size {meta.get('vocab_size')} but the manifest says "
            f"{manifest['vocab_size']}; prepare the folder again"
        )
    return PreparedDataset(
        folder, arrays["train"], arrays["val"], rebuild_tokenizer(manifest), manifest, meta
    )


def rebuild_tokenizer(manifest: dict[str, Any]) -> Tokenizer:
    """The tokenizer that made the files: built from the recorded config, then given back
    what it learned from the corpus (the char vocabulary)."""
    from corpusprep.config import build

    tokenizer = build(OmegaConf.create(manifest["config"]["tokenizer"]), "tokenizer")
    tokenizer.restore(manifest["tokenizer"])
    if tokenizer.vocab_size != manifest["vocab_size"]:
        raise UserError(
            f"the rebuilt tokenizer has {tokenizer.vocab_size:,} ids but the files were made "
            f"with {manifest['vocab_size']:,}; its files changed since (see the manifest)"
        )
    return tokenizer
