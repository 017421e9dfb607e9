"""Which text goes to train and which to val.

split_by=position, nanoGPT's rule for a single text: the first int(n * split) characters
are train, the rest val (`data[:int(n*0.9)]`, `data[int(n*0.9):]`). The cut is by
characters of the newline-translated text, before tokenizing; each side is tokenized on
its own.

split_by=document, HF `datasets`' train_test_split (nanoGPT's OpenWebText): exactly
val_size documents go to val (a fraction: ceil(val_size * n); or a count), or, with no
val_size, all but floor(split * n) of them; which ones: the first of the seeded
permutation `numpy.random.default_rng(seed).permutation(n)`. order=shuffle then writes both
sides in that permutation's order (train_test_split(shuffle=True)); order=source keeps the
corpus order.

split_by=hash: each document goes to val with probability 1 - split, decided by a seeded
hash of its position and its content. The assignment of a document depends on nothing
else: not on the other documents, so the same document at the same place in a grown
corpus lands the same way.

split_by=head|tail: val is the first (llm.c's tinyshakespeare.py, fineweb's shard 0) or
the last (nanochat) val_size tokens of the whole stream, train the rest.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Optional, Union

import numpy as np

from corpusprep.errors import UserError


def split_point(chars: int, split: float, path: Path | str) -> int:
    """The number of characters that go to train; both sides must get some text."""
    train = int(chars * split)
    if train == 0 or train == chars:
        side = "train" if train == 0 else "val"
        raise UserError(
            f"{path}: split={split} of {chars:,} characters leaves {side} empty; "
            "use a longer text or a split closer to 0.5"
        )
    return train


def document_key(text: str) -> bytes:
    """A digest of a document's content (exact duplicates have the same key), from which
    split_by=hash draws its side: blake2b, as it always was, so no assignment changes."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


def duplicate_key(text: str) -> bytes:
    """A digest of a document's content only to count exact duplicates across the sides
    (split_by=document|stream): sha256, twice blake2b's speed where the CPU has SHA
    instructions (x86 since 2017, most ARM)."""
    return hashlib.sha256(text.encode("utf-8")).digest()


# how each split keys its documents; a shard resumed from an earlier run must have keyed
# them the same way (its keys are counted with the others')
KEY_HASHES = {"blake2b": document_key, "sha256": duplicate_key}


def key_hash_for(split_by: str) -> str:
    return "blake2b" if split_by == "hash" else "sha256"


def goes_to_train(seed: int, index: int, key: bytes, split: float) -> bool:
    """The document at `index` with content `key` goes to train with probability `split`."""
    h = hashlib.blake2b(key, digest_size=8, key=seed.to_bytes(8, "little", signed=True),
                        salt=index.to_bytes(8, "little")[:16])  # fmt: skip
    return int.from_bytes(h.digest(), "little") < split * 2**64


def val_document_count(n: int, split: float, val_size: Optional[Union[int, float]]) -> int:
    """How many of n documents go to val, as train_test_split counts them: test_size as
    given (a fraction, ceil(val_size * n), or a count), else n - floor(split * n); never
    derived as 1 - split (1 - 0.95 is 0.05000000000000004 in floating point)."""
    if n == 1:
        raise UserError(
            "1 document cannot be split by document; split it by position "
            "(split_by=position), or give more documents"
        )
    if val_size is None:
        val = n - math.floor(split * n)
    elif isinstance(val_size, float):
        val = math.ceil(val_size * n)
    else:
        val = int(val_size)
    if not 0 < val < n:
        side = "val" if val <= 0 else "train"
        asked = f"val_size={val_size}" if val_size is not None else f"split={split}"
        raise UserError(
            f"{asked} of {n:,} documents leaves {side} empty ({val:,} to val); "
            f"use more documents or another {asked.split('=')[0]}"
        )
    return val


def permutation(n: int, seed: int) -> np.ndarray:
    """The seeded order of n documents (train_test_split's: numpy's default_rng)."""
    return np.random.default_rng(seed).permutation(n)


def val_documents(n: int, val: int, seed: int) -> np.ndarray:
    """Which documents (by index) go to val: the first `val` of the permutation."""
    mask = np.zeros(n, dtype=bool)
    mask[permutation(n, seed)[:val]] = True
    return mask
