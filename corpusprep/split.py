"""Which text goes to train and which to val.

nanoGPT's rule for a single text: the first int(n * split) characters are train, the rest
val (`data[:int(n*0.9)]`, `data[int(n*0.9):]`). The cut is by characters of the
newline-translated text, before tokenizing, and each side is tokenized on its own.
"""

from __future__ import annotations

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
