"""nanoGPT's character-level tokenizer (data/shakespeare_char/prepare.py).

The vocabulary is the sorted set of every character in the whole text, so the ids
depend on the corpus: fit() sees the corpus's characters before anything is encoded.
Encoding is vectorised: characters become code points (one byte each for ASCII text,
UTF-32 otherwise) and a lookup table indexed by code point gives the ids.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterable, Iterator
from typing import Any, Optional

import numpy as np

from corpusprep.errors import UserError
from corpusprep.tokenizers import Tokenizer, in_blocks


class CharTokenizer(Tokenizer):
    fast = True

    def __init__(self, chars: Optional[str] = None, separator: str = "<|endoftext|>") -> None:
        if not isinstance(separator, str) or not separator:
            raise UserError(f"tokenizer.separator={separator!r}: must be a non-empty string, "
                            "e.g. '<|endoftext|>' (the default)")  # fmt: skip
        self.separator = separator  # the end-of-text "character" between documents, if used
        self.eot = False
        self.chars: Optional[list[str]] = None
        self._lut: Optional[np.ndarray] = None  # id of each code point (vocab_size: unknown)
        self._pairs: Optional[np.ndarray] = None  # ids of two ASCII characters at once
        if chars is not None:
            self.fit(chars)

    @property
    def needs_fit(self) -> bool:
        return True

    def fit(self, charset: str, eot: bool = False) -> None:
        # sorted, as nanoGPT: the same text always gives the same ids; a document separator,
        # when documents are separated, takes the next id after the characters
        self.chars = sorted(set(charset))
        self.eot = eot
        self._lut = self._pairs = None
        if eot and self.separator in self.chars:  # stoi[separator] would be the end-of-text id
            raise UserError(
                f"tokenizer.separator={self.separator!r} is a character of the corpus, so "
                "meta.pkl's stoi could not tell it from the end-of-text entry; pick a character "
                "the corpus does not contain (or a longer string, e.g. '<|endoftext|>')"
            )

    @property
    def eot_id(self) -> Optional[int]:  # type: ignore[override]
        return len(self._fitted()) if self.eot else None

    def _fitted(self) -> list[str]:
        if self.chars is None:
            raise RuntimeError("CharTokenizer: call fit() before encoding")
        return self.chars

    def _table(self) -> np.ndarray:
        if self._lut is None:  # this process's tables for these characters
            self._lut, self._pairs = _tables("".join(self._fitted()))
        return self._lut

    @property
    def vocab_size(self) -> int:
        return len(self._fitted()) + self.eot

    def encode(self, text: str) -> np.ndarray:
        lut = self._table()
        if text.isascii():  # the common case: one byte per character, a 128-entry table
            codes = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
        else:
            codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
            if codes.size and int(codes.max()) >= lut.size:
                raise KeyError(self._unknown(text))
        ids = np.take(lut, codes)
        if ids.size and int(ids.max()) >= len(self._fitted()):
            raise KeyError(self._unknown(text))
        return ids

    def encode_pieces(self, pieces: Iterable[str]) -> Iterator[np.ndarray]:
        """Like encode() on each piece, faster: ASCII text is looked up two characters at a
        time, and the ids land in one reused buffer (each array is valid until the next
        one is asked for: the pipeline writes it out at once)."""
        pairs, lut, known = self._pair_table(), self._table(), len(self._fitted())
        buf = np.empty(0, dtype=lut.dtype)
        # encode() makes a text's code points (4 bytes each) and numpy's indices for the
        # lookup (8 each) all at once: a 64 MB JSON line of non-ASCII text took 830 MB
        for text in in_blocks(pieces):
            if pairs is None or not text.isascii():
                yield self.encode(text)
                continue
            raw = text.encode("ascii")
            if len(buf) < len(raw):
                buf = np.empty(max(len(raw), 1 << 16), dtype=np.uint16)
            ids, even = buf[: len(raw)], len(raw) & ~1
            np.take(pairs, np.frombuffer(raw, np.uint16, even // 2), out=ids[:even].view(np.uint32))
            if even < len(raw):
                ids[-1] = lut[raw[-1]]
            if ids.size and int(ids.max()) >= known:
                raise KeyError(self._unknown(text))
            yield ids

    def _pair_table(self) -> Optional[np.ndarray]:
        self._table()
        return self._pairs

    def _unknown(self, text: str) -> str:
        missing = sorted(set(text) - set(self._fitted()))
        return f"characters not in the vocabulary: {''.join(missing)!r}"

    def tokens_for(self, chars: int) -> int:
        return chars

    def tokens_about(self, nbytes: int) -> int:
        return nbytes  # one per character: at most one per byte

    def decode(self, ids: Iterable[int]) -> str:
        chars = self._fitted() + ([self.separator] if self.eot else [])
        return "".join([chars[i] for i in ids])

    def ids_used(self) -> int:
        # every character is the corpus's own; the separator goes between its documents
        return self.vocab_size

    def token_bytes(self) -> np.ndarray:
        sizes = [len(c.encode("utf-8")) for c in self._fitted()] + [0] * self.eot  # separator: 0
        return np.array(sizes, dtype=np.int32)

    def meta(self) -> dict[str, Any]:
        # Exactly nanoGPT's dict, built the same way, so meta.pkl is byte-identical: pickle
        # memoises the shared character objects, so even object identity matters here.
        chars = self._fitted() + ([self.separator] if self.eot else [])
        stoi = {ch: i for i, ch in enumerate(chars)}
        itos = {i: ch for i, ch in enumerate(chars)}
        return {"vocab_size": len(chars), "itos": itos, "stoi": stoi}

    def describe(self) -> dict[str, Any]:
        out = {"kind": "char", "vocab_size": self.vocab_size, "chars": "".join(self._fitted())}
        if self.eot:
            out.update(separator=self.separator, eot_id=self.eot_id)
        return out

    def restore(self, description: dict[str, Any], folder: Any = None) -> None:
        chars = description["chars"]
        if not isinstance(chars, str):  # a list of numbers fitted, then failed to decode
            raise TypeError(f"chars is a {type(chars).__name__}, not text")
        chars.encode("utf-8")  # a lone surrogate, which no text holds: UnicodeEncodeError
        self.fit(chars, eot="separator" in description)

    # Each shard's task carries the tokenizer to its worker: the characters go as one string
    # (a list of thousands of 1-character strings pickles several times bigger and slower),
    # and the tables are built once per process (_tables), not once per task.
    def __getstate__(self) -> dict[str, Any]:
        chars = None if self.chars is None else "".join(self.chars)
        return {**self.__dict__, "chars": chars, "_lut": None, "_pairs": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self.chars is not None:
            self.chars = list(self.chars)


@functools.lru_cache(maxsize=2)
def _tables(chars: str) -> tuple[np.ndarray, Optional[np.ndarray]]:
    """lut[code point] = id (code points not in the vocabulary map to len(chars), invalid),
    and pairs[two ASCII bytes read as one uint16] = their two uint16 ids as one uint32
    (None when the ids need uint32)."""
    codes = np.array([ord(c) for c in chars], dtype=np.int64)
    dtype = np.uint16 if len(chars) < 65535 else np.uint32
    lut = np.full(max(int(codes.max(initial=0)) + 1, 128), len(chars), dtype=dtype)
    lut[codes] = np.arange(len(chars), dtype=dtype)
    lut.setflags(write=False)  # shared by every tokenizer of these characters
    if dtype != np.uint16:
        return lut, None
    i = np.arange(1 << 16, dtype=np.uint32)
    first, second = (i & 0xFF, i >> 8) if sys.byteorder == "little" else (i >> 8, i & 0xFF)
    lo, hi = lut[np.minimum(first, 127)], lut[np.minimum(second, 127)]
    if sys.byteorder != "little":
        lo, hi = hi, lo
    pairs = lo.astype(np.uint32) | (hi.astype(np.uint32) << 16)
    pairs.setflags(write=False)
    return lut, pairs
