"""Byte level: the UTF-8 bytes of the text are the ids. Vocabulary 256, nothing to learn,
lossless for any text, and a cut anywhere is harmless."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from corpusprep.tokenizers import Tokenizer, in_blocks


class ByteTokenizer(Tokenizer):
    fast = True

    @property
    def vocab_size(self) -> int:
        return 256

    def encode(self, text: str) -> np.ndarray:
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8)

    def encode_pieces(self, pieces: Iterable[str]) -> Iterator[np.ndarray]:
        # a long piece's UTF-8 (and the uint16 ids the writer widens it to) a block at a
        # time, not as long as the whole piece
        return map(self.encode, in_blocks(pieces))

    def tokens_about(self, nbytes: int) -> int:
        return nbytes  # one per byte of UTF-8

    def decode(self, ids: Iterable[int]) -> str:
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        return np.asarray(ids, dtype=np.uint8).tobytes()

    def token_bytes(self) -> np.ndarray:
        return np.ones(256, dtype=np.int32)

    def meta(self) -> dict[str, Any]:
        # itos/stoi let nanoGPT's sample.py run: exact for ASCII, "\ufffd" for the single
        # bytes of a multi-byte character (README: decode with corpusprep.load instead).
        itos = {i: bytes([i]).decode("utf-8", errors="replace") for i in range(256)}
        stoi = {chr(i): i for i in range(128)}
        return {"vocab_size": 256, **self.describe(), "itos": itos, "stoi": stoi}

    def describe(self) -> dict[str, Any]:
        return {"kind": "byte", "vocab_size": 256}
