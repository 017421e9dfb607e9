"""A byte-level BPE trained on the corpus itself (tokenizer=bpe tokenizer.vocab_size=N).

Training is nanochat's: rustbpe (pip install 'corpusprep[train]') learns merges from a
bounded, seeded sample of the corpus (corpusprep/sample.py) with a GPT-style split
pattern; its ranks are then a tiktoken vocabulary like GPT-2's, so the corpus is encoded
at tiktoken's speed (or riptoken's), cut where CUT_AT allows for the named patterns. The
ids are those of rustbpe's own encoder (tests/test_bpe_train.py proves it on mixed text).

The vocabulary: 256 byte tokens (id = the byte), then the merges in the order learned,
then "<|endoftext|>" when documents are separated (eot=append|prepend). It is saved in
out_dir as tokenizer.tiktoken (tiktoken's format: base64 token, rank), with its pattern
and special tokens in meta.pkl and the manifest.
"""

from __future__ import annotations

import base64
import hashlib
import re
import signal
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

import numpy as np

from corpusprep.errors import UserError
from corpusprep.sample import Sample, SampleRule, sample_rule
from corpusprep.tokenizers import NOWHERE, TRAINED, _bpe_training, native_panics, read_kept
from corpusprep.tokenizers.tiktoken import (
    CUT_AT,
    KEPT,
    MAX_RANKS_BYTES,
    MISSING,
    PROVEN_PATTERNS,
    TiktokenTokenizer,
    Vocabulary,
    _installed,
    ranks_file_bytes,
)

PATTERNS = {"gpt2": PROVEN_PATTERNS["r50k"], "cl100k": PROVEN_PATTERNS["cl100k"],
            "o200k": PROVEN_PATTERNS["o200k"]}  # fmt: skip
EOT = "<|endoftext|>"
MAX_VOCAB = (1 << 32) - 1  # rustbpe's vocab_size is a u32
FILE = KEPT  # tiktoken's format, so tiktoken's name (a given ranks file is kept so too)
# riptoken gave the same ids as tiktoken over trained ranks with these patterns
# (tests/test_bpe_train.py); a custom regex stays on tiktoken
RIPTOKEN_PATTERNS = {"gpt2", "cl100k", "o200k"}
TRAIN_MISSING = "tokenizer=bpe trains with rustbpe: pip install 'corpusprep[train]'"


class BpeTokenizer(TiktokenTokenizer):
    """Byte-level BPE learned from the corpus: fit() trains it on the scan's sample."""

    FINGERPRINT_AS = {"backend": "tiktoken"}
    keeps_files = True  # restore() reads tokenizer.tiktoken from the folder

    def __init__(
        self,
        vocab_size: int = 4096,
        pattern: str = "cl100k",
        train_chars: int = 1_000_000_000,
        max_doc_chars: Optional[int] = 10_000,
        seed: int = 0,
        backend: str = "tiktoken",
    ) -> None:
        if isinstance(vocab_size, float):  # 1e3: "give 257 or more" did not say what was wrong
            raise UserError(
                f"tokenizer.vocab_size={vocab_size}: must be a whole number of tokens, written "
                "without a point or an exponent (e.g. tokenizer.vocab_size=4096)"
            )
        if not isinstance(vocab_size, int) or isinstance(vocab_size, bool) or vocab_size < 257:
            raise UserError(
                f"tokenizer.vocab_size={vocab_size}: a byte-level BPE has 256 byte tokens and "
                "at least one merge; give 257 or more (e.g. 4096)"
            )
        if vocab_size > MAX_VOCAB:  # rustbpe takes a u32: it fails after the scan
            raise UserError(
                f"tokenizer.vocab_size={vocab_size}: more than rustbpe's trainer takes "
                f"({MAX_VOCAB:,}, a 32-bit id); give a smaller one (e.g. 4096)"
            )
        self.rule = sample_rule(train_chars, max_doc_chars, seed)  # checked now
        if backend not in ("auto", "tiktoken", "riptoken"):
            raise UserError(
                f"tokenizer.backend={backend}: unknown backend; use auto, tiktoken or riptoken"
            )
        self.requested_size = vocab_size
        self.pattern = str(pattern)
        # a word like gpt4 is a misspelt name, not a regex (it would match almost nothing)
        if self.pattern not in PATTERNS and re.fullmatch(r"[\w-]+", self.pattern, re.ASCII):
            raise UserError(
                f"tokenizer.pattern={self.pattern}: not a known pattern name; use "
                f"{', '.join(PATTERNS)}, or a regex that matches every character"
            )
        self.pat_str = PATTERNS.get(self.pattern, self.pattern)  # a name, or a regex itself
        self.origin = f"tokenizer.pattern={self.pattern!r}"  # a reused folder's: its own
        self.train_chars = train_chars
        fast = self.pattern in RIPTOKEN_PATTERNS
        if backend == "riptoken" and not fast:
            raise UserError(
                f"tokenizer.backend=riptoken: proven for the patterns "
                f"{', '.join(sorted(RIPTOKEN_PATTERNS))} only; use backend=auto or tiktoken"
            )
        if backend == "riptoken" and not _installed("riptoken"):
            raise UserError(MISSING["riptoken"])  # now, not after the scan and the training
        self.requested = backend
        self.backend = "riptoken" if backend == "riptoken" or (
            backend == "auto" and fast and _installed("riptoken")) else "tiktoken"  # fmt: skip
        self.encoding = "bpe"
        self.ranks_file = None
        self.eot = False
        self.ranks: Optional[list[bytes]] = None  # the trained tokens, by rank
        self.ranks_sha256: Optional[str] = None
        self.trained: dict[str, Any] = {}  # what the training saw and took, for the manifest

    # --- learning -------------------------------------------------------------------------

    @property
    def needs_fit(self) -> bool:
        return self.ranks is None

    def sample_rule(self, single: bool) -> SampleRule:
        """What the scan gathers to train on: one plain text is sampled uncapped."""
        _trainer()  # asked before the scan: without the trainer, fail before any work
        return replace(self.rule, max_doc_chars=None) if single else self.rule

    def fit(self, charset: str, eot: bool = False, sample: Optional[Sample] = None) -> None:
        _trainer()  # installed: else the error says what to install
        if sample is None or not sample.units:
            raise UserError(
                "tokenizer=bpe: the training sample is empty: the text has no piece of at most "
                f"tokenizer.train_chars={self.train_chars:,} characters (pieces end at a "
                "newline between ASCII text); raise tokenizer.train_chars"
            )
        self.eot = eot
        merged = self.requested_size - eot  # 256 bytes + merges; the special token after
        units = sample.units if sample is not None else []
        if self.pattern not in PATTERNS:  # the named patterns match every character
            self._check_covers(units)
        started = time.perf_counter()
        try:  # in a process of its own: a Ctrl-C or SIGTERM is acted on at once
            tokens = _bpe_training.train(units, merged, self.pat_str)
        except _bpe_training.Refused as e:
            if e.kind == "regex":  # the pattern does not compile
                raise self._bad_regex(ValueError(str(e))) from None
            raise self._panicked(str(e)) from None  # fancy-regex's backtrack limit
        except _bpe_training.Died as e:
            raise self._died(e) from None
        if len(set(tokens)) != len(tokens):  # two merges spelling the same bytes
            raise UserError(
                "tokenizer=bpe: the trained vocabulary holds one token twice, which tiktoken "
                "cannot encode with; try another tokenizer.vocab_size or seed"
            )
        self._set(tokens)
        self.trained = {
            "trainer": "rustbpe",
            "trainer_version": _version("rustbpe"),
            "sample_chars": sum(map(len, units)),
            "sample_units": len(units),
            "corpus_chars_offered": sample.seen_chars if sample is not None else 0,
            "train_seconds": round(time.perf_counter() - started, 3),
        }
        if len(tokens) < merged:
            print(f"corpusprep: warning: tokenizer.vocab_size={self.requested_size}: the "
                  f"sample has pairs for {len(tokens):,} tokens only, so the vocabulary has "
                  f"{self.vocab_size:,}; use a smaller vocab_size or a bigger corpus",
                  file=sys.stderr)  # fmt: skip

    def _check_covers(self, units: list[str]) -> None:
        """A regex of the user's own must match every character of the sample: the text
        between its matches would be dropped, silently, by the trainer and by tiktoken's
        encoder. Checked with tiktoken's regex engine over the 256 byte tokens: every
        character matched gives one id per byte."""
        import tiktoken

        fix = (f"end the regex with an alternative that matches the rest (e.g. "
               f"'{self.pattern}|\\s+|.'), or use {', '.join(PATTERNS)}")  # fmt: skip
        try:
            enc = tiktoken.Encoding("corpusprep-bpe-check", pat_str=self.pat_str,
                                    mergeable_ranks={bytes([b]): b for b in range(256)},
                                    special_tokens={})  # fmt: skip
        except ValueError as e:
            raise self._bad_regex(e) from None
        for unit in units:
            with native_panics(self._panicked):  # an empty match, a backtrack limit
                ids = enc.encode_ordinary(unit)
            if len(ids) != len(unit.encode()):
                dropped = Counter(unit) - Counter(enc.decode(ids))
                shown = ", ".join(repr(c) for c, _ in dropped.most_common(5))
                raise UserError(f"tokenizer.pattern={self.pattern!r}: does not match every "
                                f"character, and the text between its matches would be "
                                f"dropped (e.g. {shown}); {fix}")  # fmt: skip

    def _panicked(self, reason: str) -> UserError:
        """tiktoken's or rustbpe's regex engine panicked on the text with this pattern."""
        names = ", ".join(PATTERNS)
        if "backtrack" in reason.lower():  # fancy-regex gives up on a look-around that backtracks
            return UserError(
                f"{self.origin}: the regex engine gave up on the text ({reason}): the pattern "
                "backtracks too much (an ambiguous repetition such as (a|a)* before a "
                f"look-ahead); simplify it, or use {names}"
            )
        return UserError(
            f"{self.origin}: tiktoken's encoder failed with it ({reason}), as it does on a "
            "pattern that can match the empty string; make every alternative match at least "
            f"one character (e.g. x+ rather than x*), or use {names}"
        )

    def _tiktoken(self, text: str) -> np.ndarray:
        if self.pattern in PATTERNS:  # proven: no call overhead on the common path
            return super()._tiktoken(text)
        try:
            with native_panics(self._panicked):  # text the sample did not have, a reused folder's
                return super()._tiktoken(text)
        except ValueError as e:  # tiktoken's encode_to_numpy reports a backtrack limit so
            if "Regex error" not in str(e):
                raise
            raise self._panicked(str(e)) from None

    def _died(self, e: Exception) -> Exception:
        """The training process ended with no answer: killed (by the kernel, out of memory:
        the user's to fix), or failed (corpusprep's: its last words, as an error)."""
        if getattr(e, "signal", 0) == signal.SIGKILL:
            return UserError(
                f"tokenizer=bpe: the training was killed (SIGKILL; out of memory?) on a sample "
                f"of up to tokenizer.train_chars={self.train_chars:,} characters; give a "
                "smaller train_chars"
            )
        return RuntimeError(f"tokenizer=bpe: the training process failed: {e}")

    def _bad_regex(self, e: ValueError) -> UserError:
        return UserError(f"tokenizer.pattern={self.pattern!r}: {e}; give gpt2, cl100k, o200k "
                         "or a valid regex")  # fmt: skip

    def _set(self, tokens: list[bytes]) -> None:
        self.ranks = tokens
        self.ranks_sha256 = hashlib.sha256(ranks_file_bytes(tokens)).hexdigest()

    # --- the tiktoken vocabulary ----------------------------------------------------------

    def _key(self) -> tuple:
        return ("bpe", self.pat_str, self.ranks_sha256, self.eot)

    def _load_vocab(self) -> Vocabulary:
        ranks = self._fitted()
        assert self.ranks_sha256 is not None  # set with the ranks (_set)
        return Vocabulary(
            f"corpusprep-bpe-{self.ranks_sha256[:12]}",
            self.pat_str,
            {token: rank for rank, token in enumerate(ranks)},
            {EOT: len(ranks)} if self.eot else {},
        )

    def _vocab(self) -> Vocabulary:
        if self.ranks is None:
            raise RuntimeError("BpeTokenizer: call fit() before encoding")
        return super()._vocab()

    @property
    def cut_at(self) -> Optional[bytes]:  # type: ignore[override]
        return CUT_AT if self.pat_str in PROVEN_PATTERNS.values() else NOWHERE

    @property
    def vocab_size(self) -> int:
        return self.requested_size if self.ranks is None else len(self.ranks) + self.eot

    @property
    def max_id(self) -> int:
        return self.vocab_size - 1

    @property
    def eot_id(self) -> Optional[int]:  # type: ignore[override]
        if self.ranks is None:  # before fit: documents will get one (eot=auto asks this)
            return self.requested_size - 1
        return len(self.ranks) if self.eot else None

    @property
    def is_gpt2(self) -> bool:
        return False

    def identity(self) -> dict[str, Any]:
        return {"trainer": "rustbpe", "trainer_version": _version("rustbpe")}

    # --- what is kept ---------------------------------------------------------------------

    def files(self) -> dict[str, bytes]:
        return {FILE: ranks_file_bytes(self._fitted())}

    def _fitted(self) -> list[bytes]:
        if self.ranks is None:
            raise RuntimeError("BpeTokenizer: call fit() before encoding")
        return self.ranks

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": "bpe", "backend": self.backend, "pattern": self.pattern,
                               "pat_str": self.pat_str, "vocab_size": self.vocab_size}  # fmt: skip
        if self.ranks is not None:
            out.update(
                merges=len(self.ranks) - 256,
                eot_id=self.eot_id,
                special_tokens={EOT: self.eot_id} if self.eot else {},
                file=FILE,
                sha256=self.ranks_sha256,
                **self.trained,
            )
        return out

    def restore(self, description: dict[str, Any], folder: Optional[Path] = None) -> None:
        """The trained vocabulary back from `folder`'s tokenizer.tiktoken, checked against
        the sha256 the manifest recorded."""
        # docs/safety.md: at most 64 MB for a ranks file, as a given one (a stranger's 80 MB
        # file took 18 s and 2.6 GB to parse)
        data = read_kept(folder, FILE, str(description.get("sha256")), MAX_RANKS_BYTES)
        self.origin = f"{folder}: its tokenizer.pattern={self.pattern!r}"
        self.eot = description.get("eot_id") is not None
        self.trained = {k: description[k] for k in TRAINED if k in description}
        assert folder is not None  # (read_kept refuses None)
        self._set(read_tokens(data, Path(folder) / FILE))

    def meta(self) -> Optional[dict[str, Any]]:
        # the same bytes from every run of the same training: no timings in it
        meta = super().meta()
        if meta is not None:
            for key in ("train_seconds", "trainer_version", "backend"):
                meta.pop(key, None)
        return meta


def read_tokens(data: bytes, path: Path) -> list[bytes]:
    tokens = []
    for number, line in enumerate(data.splitlines(), 1):
        try:
            token, rank = line.split()
            if int(rank) != number - 1:
                raise ValueError
            tokens.append(base64.b64decode(token, validate=True))
        except ValueError:  # binascii.Error is one
            raise UserError(f"{path}: line {number} is not 'base64-token rank' in rank order; "
                            "prepare the folder again") from None  # fmt: skip
    # as training makes it: the 256 bytes first (every text encodes), no token twice (a
    # stranger's file could hold anything; tiktoken's core would panic on a missing byte)
    if tokens[:256] != [bytes([b]) for b in range(256)] or len(set(tokens)) != len(tokens):
        raise UserError(f"{path}: not a byte-level BPE vocabulary (the 256 bytes first, each "
                        "token once); prepare the folder again")  # fmt: skip
    return tokens


def _trainer():
    try:
        import rustbpe
    except ImportError:
        raise UserError(TRAIN_MISSING) from None
    return rustbpe


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "unknown"
