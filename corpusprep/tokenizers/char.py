"""nanoGPT's character-level tokenizer (data/shakespeare_char/prepare.py).

The vocabulary is the sorted set of every character in the whole text, so the ids
depend on the corpus: fit() sees the corpus's characters before anything is encoded.
Encoding is vectorised: characters become code points (one byte each for ASCII text,
UTF-32 otherwise) and a lookup table indexed by code point gives the ids.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Optional

import numpy as np

from corpusprep.tokenizers import Tokenizer


class CharTokenizer(Tokenizer):
    def __init__(self, chars: Optional[str] = None) -> None:
        self.chars: Optional[list[str]] = None
        self._lut: Optional[np.ndarray] = None
        if chars is not None:
            self.fit(chars)

    @property
    def needs_fit(self) -> bool:
        return True

    def fit(self, charset: str) -> None:
        # sorted, as nanoGPT: the same text always gives the same ids
        self.chars = sorted(set(charset))
        self._lut = None

    def _fitted(self) -> list[str]:
        if self.chars is None:
            raise RuntimeError("CharTokenizer: call fit() before encoding")
        return self.chars

    def _table(self) -> np.ndarray:
        # lut[code point] = id; code points not in the vocabulary map to vocab_size (invalid)
        if self._lut is None:
            chars = self._fitted()
            codes = np.array([ord(c) for c in chars], dtype=np.int64)
            dtype = np.uint16 if len(chars) < 65535 else np.uint32
            self._lut = np.full(max(int(codes.max(initial=0)) + 1, 128), len(chars), dtype=dtype)
            self._lut[codes] = np.arange(len(chars), dtype=dtype)
        return self._lut

    @property
    def vocab_size(self) -> int:
        return len(self._fitted())

    def encode(self, text: str) -> np.ndarray:
        lut = self._table()
        if text.isascii():  # the common case: one byte per character, a 128-entry table
            codes = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
        else:
            codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
            if codes.size and int(codes.max()) >= lut.size:
                raise KeyError(self._unknown(text))
        ids = np.take(lut, codes)
        if ids.size and int(ids.max()) >= len(self.chars):
            raise KeyError(self._unknown(text))
        return ids

    def _unknown(self, text: str) -> str:
        missing = sorted(set(text) - set(self._fitted()))
        return f"characters not in the vocabulary: {''.join(missing)!r}"

    def tokens_for(self, chars: int) -> int:
        return chars

    def decode(self, ids: Iterable[int]) -> str:
        chars = self._fitted()
        return "".join([chars[i] for i in ids])

    def meta(self) -> dict[str, Any]:
        # Exactly nanoGPT's dict, built the same way, so meta.pkl is byte-identical: pickle
        # memoises the shared character objects, so even object identity matters here.
        chars = self._fitted()
        stoi = {ch: i for i, ch in enumerate(chars)}
        itos = {i: ch for i, ch in enumerate(chars)}
        return {"vocab_size": len(chars), "itos": itos, "stoi": stoi}

    def describe(self) -> dict[str, Any]:
        return {"kind": "char", "vocab_size": self.vocab_size, "chars": "".join(self._fitted())}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_lut": None}  # the table is rebuilt in each worker
