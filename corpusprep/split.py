"""Which text goes to train and which to val.

split_by=position, nanoGPT's rule for a single text: the first int(n * split) characters
are train, the rest val (`data[:int(n*0.9)]`, `data[int(n*0.9):]`). The cut is by
characters of the newline-translated text, before tokenizing; each side is tokenized on
its own.

split_by=document, OpenWebText-style: each document goes to val with probability
1 - split, decided by a seeded hash of its position and its content. The assignment of a
document depends on nothing else: not on workers, shards or the other documents, so a
re-run, or the same document at the same place in a grown corpus, lands the same way.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

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
    """A digest of a document's content (exact duplicates have the same key)."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


def goes_to_train(seed: int, index: int, key: bytes, split: float) -> bool:
    """The document at `index` with content `key` goes to train with probability `split`."""
    h = hashlib.blake2b(key, digest_size=8, key=seed.to_bytes(8, "little", signed=True),
                        salt=index.to_bytes(8, "little")[:16])  # fmt: skip
    return int.from_bytes(h.digest(), "little") < split * 2**64
