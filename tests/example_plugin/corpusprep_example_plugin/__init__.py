"""An example corpusprep tokenizer plugin: every character's id is its Unicode code point.

Nothing to learn, lossless, a cut anywhere is harmless; ids go up to 0x10FFFF, so
corpusprep's dtype=auto picks uint32. It implements the same interface as the built-in
tokenizers (corpusprep.tokenizers.Tokenizer)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from corpusprep.tokenizers import Tokenizer


class CodepointTokenizer(Tokenizer):
    def __init__(self, max_code_point: int = 0x10FFFF) -> None:
        self.max_code_point = max_code_point

    @property
    def vocab_size(self) -> int:
        return self.max_code_point + 1

    def encode(self, text: str) -> np.ndarray:
        ids = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
        if ids.size and int(ids.max()) > self.max_code_point:
            raise ValueError(f"a code point above {self.max_code_point:#x}")
        return ids

    def decode(self, ids: Iterable[int]) -> str:
        return "".join(map(chr, (int(i) for i in ids)))

    def meta(self) -> dict[str, Any]:
        return {"vocab_size": self.vocab_size, **self.describe()}

    def describe(self) -> dict[str, Any]:
        return {"kind": "example_codepoint", "vocab_size": self.vocab_size}
