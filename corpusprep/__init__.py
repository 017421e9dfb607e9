"""corpusprep: turn any text corpus into the token files a GPT trains on.

The command line is `python -m corpusprep KEY=VALUE ...`; in Python, `corpusprep.load(dir)`
reads an output folder back (token arrays, tokenizer, manifest).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from corpusprep.dataset import PreparedDataset

__version__ = "0.2.5"
# no import of OmegaConf here (the ${cp.*} resolvers are registered by corpusprep.config,
# which whatever composes corpusprep's configs imports): `import corpusprep` takes a few
# ms, and a Ctrl-C while the command line imports the rest is one line (__main__.py)


def load(path: str | Path, tokenizer: bool = True, check_ids: bool = True) -> PreparedDataset:
    """Open an output folder: memory-mapped train/val ids, the tokenizer, the manifest
    (see corpusprep.dataset.load: check_ids=False skips reading every id once)."""
    from corpusprep.dataset import load as _load  # numpy and friends only when used

    return _load(path, tokenizer=tokenizer, check_ids=check_ids)
