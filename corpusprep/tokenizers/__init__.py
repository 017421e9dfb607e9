"""Tokenizers turn text into arrays of ids. Each one is a class in its own module here,
with a config file of the same name in conf/tokenizer/. A tokenizer never opens files."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from typing import Any, Optional

import numpy as np

ANYWHERE: Optional[bytes] = None
NOWHERE = b""


class Tokenizer(ABC):
    """What the pipeline needs from a tokenizer (the same contract for plugins).

    Instances are sent to worker processes, so they must pickle cheaply: keep big
    tables out of the pickled state and rebuild them lazily (see CharTokenizer).
    """

    #: Where a text may be cut so that encoding the pieces gives the ids of encoding it
    #: whole: a regex over UTF-8 bytes (ASCII only, so it works on str too) whose matches
    #: end at the cuts. ANYWHERE (None) for char and byte; NOWHERE (b"") when no rule is
    #: known: the text is then encoded whole.
    cut_at: Optional[bytes] = None

    #: The id that separates documents (eot=append|prepend), or None if there is none.
    eot_id: Optional[int] = None

    def fit(self, charset: str, eot: bool = False) -> None:  # noqa: B027 - optional hook
        """Learn from the corpus before encoding; given every distinct character in it.
        `eot`: documents will be separated, so an end-of-text id is needed (char adds one)."""

    @property
    def needs_fit(self) -> bool:
        return False

    @property
    @abstractmethod
    def vocab_size(self) -> int:
        """Number of ids; nanoGPT's train.py sizes the model's embedding with it."""

    @property
    def max_id(self) -> int:
        """The largest id encode() can return: picks the output dtype."""
        return self.vocab_size - 1

    @abstractmethod
    def encode(self, text: str) -> np.ndarray:
        """The ids of `text`, as an unsigned integer array."""

    def encode_pieces(self, pieces: Iterable[str]) -> Iterator[np.ndarray]:
        """Encode a text that arrives in pieces, with the same ids as encoding it whole.
        Correct as is for tokenizers where a cut anywhere is harmless (char, byte);
        a BPE tokenizer overrides it to cut only where its pre-tokenizer can't join text."""
        for piece in pieces:
            yield self.encode(piece)

    def tokens_for(self, chars: int) -> Optional[int]:
        """The exact number of tokens for a text of `chars` characters, if it follows from
        the length alone (char: one per character), else None. Lets shards write in place."""
        return None

    @abstractmethod
    def decode(self, ids: Iterable[int]) -> str: ...

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        """The UTF-8 bytes of the ids; decodes of consecutive runs of ids concatenate exactly
        (decode() may not, when a token holds part of a character)."""
        return self.decode(ids).encode("utf-8")

    def restore(self, description: dict[str, Any]) -> None:  # noqa: B027 - optional hook
        """Take back what fit() learned, from describe()'s output (corpusprep.load uses it)."""

    @abstractmethod
    def meta(self) -> dict[str, Any]:
        """The meta.pkl dict: nanoGPT's train.py reads vocab_size, sample.py stoi/itos."""

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """A JSON-able description for the manifest, enough to rebuild the tokenizer."""
