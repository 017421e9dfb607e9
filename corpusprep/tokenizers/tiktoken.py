"""OpenAI's BPE tokenizers through tiktoken: gpt2 (nanoGPT's), r50k_base, p50k_base,
cl100k_base, o200k_base, ... or a local `.tiktoken` ranks file.

Text is encoded as ordinary text, as nanoGPT does (`encode_ordinary`): a special-token
string such as "<|endoftext|>" inside the corpus is just text.

Long texts are encoded in segments, cut only where the encoding's pre-tokenizer cannot
join text across the cut, so the ids are exactly those of encoding the text whole. The
rule, CUT_AT: right after a "\\n" that follows a printable non-space ASCII character and
precedes an ASCII letter or digit. Every pre-token in these patterns that can hold a
newline is made of whitespace and newlines, or of punctuation followed by newlines (and
"/" in o200k); none can continue into a letter or digit, none can start before a
non-space character and include a newline after it, and no pattern looks behind. So a
pre-token always ends at the cut and the text after it is split the same way on its own.
tests/test_bpe_cuts.py checks this for each pattern below on adversarial texts; an
encoding with any other pattern is never cut (correct, but memory grows with the text).
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import os
import re
import threading
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from corpusprep.errors import UserError, check_path
from corpusprep.tokenizers import (
    MAX_GAP,
    MAX_ID,
    MAX_TOKENS,
    Tokenizer,
    in_blocks,
    read_tokenizer_file,
    sample_stoi,
)

# The "\n" first and the character before it looked at from there: the regex engine then
# skips to each "\n" at C speed (with the lookbehind first it tries every position: 10x
# slower on text with few cuts). The matches are the same: the "\n" alone.
CUT_AT = rb"\n(?<=[\x21-\x7e]\n)(?=[0-9A-Za-z])"
CUT_AT_TEXT = re.compile(CUT_AT.decode("ascii"))  # the same rule over decoded text
_PREV_OK = frozenset(chr(c) for c in range(0x21, 0x7F))
_NEXT_OK = frozenset("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
# tiktoken's own rule adds the word rule: right before a space between two ASCII letters
# ("of| the"). No pre-token of these patterns takes a space after a letter, so one ends
# there; and " the" starts one the same way with or without the text before it (after two
# spaces it would not: "\s+(?!\S)" takes the first). A text with no newline (text8, a
# one-line dump) is cut too. The other tokenizers that share CUT_AT keep it alone.
_WORD_RULE = rb"[A-Za-z](?= [A-Za-z])"
WORD_CUT_AT = CUT_AT + rb"|" + _WORD_RULE
# Rules whose every match is one byte: the first cut at or after a place then never comes
# before the first at or after an earlier place, which a compressed text's pieces need
# (formats/text.py); a plugin's rule may match more, and its compressed text stays whole.
ONE_BYTE_CUTS = (CUT_AT, WORD_CUT_AT)
# Faster Rust cores gave ids identical to tiktoken's on these encodings (without a ranks
# file), in tests/test_bpe_cuts.py; any other encoding stays on tiktoken. splintr (4x
# tiktoken's speed on one core, ids straight into a buffer) and riptoken (2x).
SPLINTR_PROVEN = {"gpt2", "r50k_base", "cl100k_base"}
RIPTOKEN_PROVEN = {"gpt2", "r50k_base", "cl100k_base"}
PROVEN = {"splintr": SPLINTR_PROVEN, "riptoken": RIPTOKEN_PROVEN}  # auto: the first installed
BACKENDS = ("auto", "tiktoken", *PROVEN)
MISSING = {name: f"tokenizer.backend={name} needs {name}: pip install 'corpusprep[fast]'"
           for name in PROVEN}  # fmt: skip
_U32 = next(code for code in "IL" if array(code).itemsize == 4)  # array's 32-bit unsigned
MIN_SEGMENT = 1 << 20  # encode at least this many characters at once: fewer calls into Rust
GPT2_ENCODINGS = ("gpt2", "r50k_base")  # one vocabulary under two names
R50K_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"  # tiktoken's pin

# Patterns the cut rule is proven for (tests/test_bpe_cuts.py), by the encodings using them.
PROVEN_PATTERNS = {
    "r50k": r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s""",
    "cl100k": r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",  # noqa: E501
    "o200k": "|".join(
        [
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",  # noqa: E501
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",  # noqa: E501
            r"""\p{N}{1,3}""",
            r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
            r"""\s*[\r\n]+""",
            r"""\s+(?!\S)""",
            r"""\s+""",
        ]
    ),
}

_lock = threading.Lock()
_cache: dict[tuple, Any] = {}  # one Encoding per process and spec: workers build it once


def base_spec(name: str) -> dict[str, Any]:
    """The split pattern and special tokens of a registered encoding, without its ranks.

    tiktoken's constructors load the ranks (a download the first time); here the loaders
    they call are swapped for stubs while the constructor runs, so no file is read."""
    import tiktoken_ext.openai_public as public

    constructors = _constructors()
    if name not in constructors:
        raise UserError(
            f"tokenizer.encoding={name}: unknown encoding; tiktoken knows {', '.join(constructors)}"
        )
    constructor = constructors[name]
    with _lock:
        saved = public.load_tiktoken_bpe, public.data_gym_to_mergeable_bpe_ranks
        public.load_tiktoken_bpe = lambda *a, **k: {}
        public.data_gym_to_mergeable_bpe_ranks = lambda *a, **k: {}
        try:
            spec = constructor()
        finally:
            public.load_tiktoken_bpe, public.data_gym_to_mergeable_bpe_ranks = saved
    return {"pat_str": spec["pat_str"], "special_tokens": spec["special_tokens"]}


def _constructors() -> dict[str, Callable[[], dict[str, Any]]]:
    """tiktoken's registry: each encoding's constructor, by name (list_encoding_names
    fills it the first time)."""
    import tiktoken
    import tiktoken.registry as registry

    tiktoken.list_encoding_names()
    return registry.ENCODING_CONSTRUCTORS or {}


# A .tiktoken file bigger than this is not a vocabulary: cl100k_base's is 1.7 MB, o200k_base's
# 3.6 MB (200k tokens); a million tokens would be under 20 MB
MAX_RANKS_BYTES = 64 << 20


def read_ranks_file(path: Path, given: str) -> bytes:
    """A ranks file's bytes, at a plausible size (read_tokenizer_file)."""
    what = "a .tiktoken ranks file (cl100k_base's is 1.7 MB, o200k_base's 3.6 MB)"
    return read_tokenizer_file(path, f"tokenizer.ranks_file={given}", MAX_RANKS_BYTES, what)


# a ranks file the run was given is kept in out_dir under this name (as tokenizer=bpe keeps
# the one it trains): the folder then loads where that file's path means nothing
KEPT = "tokenizer.tiktoken"


def recorded_ranks_file(given: Any, folder: Path, sha256: Any) -> str:
    """The ranks file a folder's manifest names (config.tokenizer.ranks_file): the copy
    the folder keeps (KEPT; or one of the file's own name, put there by hand for a folder
    made before corpusprep kept it) if there is one, else the file named. The folder may come
    from anyone and name any file on this machine: it is read only as a regular file of a
    plausible size, and used only if it is the one the folder was made with (the sha256
    its manifest records), so nothing of another file is ever taken in."""
    manifest = folder / "manifest.json"
    if not isinstance(given, str) or not isinstance(sha256, str):
        raise UserError(f"{manifest}: tokenizer.ranks_file or its sha256 (tokenizer."
                        "ranks_sha256) is not recorded; prepare it again")  # fmt: skip
    path = Path(given).expanduser()
    copies = [folder / KEPT] + ([folder / path.name] if path.name not in ("", ".", "..") else [])
    chosen = next((copy for copy in copies if os.path.lexists(copy)), path)
    data = read_ranks_file(chosen, str(chosen))
    if hashlib.sha256(data).hexdigest() != sha256:
        raise UserError(f"{chosen}: not the ranks file {folder} was made with (its sha256 "
                        f"differs from the manifest's); put that file in {folder}")  # fmt: skip
    return str(chosen)


def read_checked_ranks(path: Path, sha256: Optional[str]) -> bytes:
    """A ranks file's bytes; with `sha256`, only if it is still the file checked when the
    tokenizer was made."""
    data = read_ranks_file(path, str(path))
    if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
        raise UserError(f"tokenizer.ranks_file={path}: the file changed since the run began; "
                        "run again once it is settled")  # fmt: skip
    return data


def read_ranks(path: Path, sha256: Optional[str] = None) -> dict[bytes, int]:
    """A `.tiktoken` file: one "base64(token) rank" per line (tiktoken's own format); with
    `sha256`, only the file that has it (the one checked when the tokenizer was made: each
    worker reads it again)."""
    data = read_checked_ranks(path, sha256)
    # counted before any token is made: 3.3M of them (a 64 MB file) took 2 GB and 25 s
    # as bytes.splitlines() counts them: lines end at \n, \r or \r\n
    lines = data.count(b"\n") + data.count(b"\r") - data.count(b"\r\n")
    if lines > MAX_TOKENS:
        raise UserError(f"tokenizer.ranks_file={path}: {lines:,} lines, more than the "
                        f"{MAX_TOKENS:,} tokens corpusprep takes (as of a tokenizer.json); "
                        "give a .tiktoken ranks file of fewer tokens")  # fmt: skip
    pairs: list[tuple[bytes, int]] = []
    numbers: list[int] = []  # each pair's line
    for number, line in enumerate(data.splitlines(), 1):
        try:
            if line.strip():
                token, rank = line.split()
                pairs.append((base64.b64decode(token, validate=True), int(rank)))
                numbers.append(number)
        except (ValueError, binascii.Error):
            raise UserError(
                f"tokenizer.ranks_file={path}: line {number} is not 'base64-token rank'; "
                "give a .tiktoken ranks file"
            ) from None
    ranks = dict(pairs)
    # tiktoken's core panics on a rank given twice, and a token given twice would
    # silently lose its first rank (which line: looked for only then)
    if len(ranks) != len(pairs) or len(set(ranks.values())) != len(pairs):
        _refuse_repeated(path, pairs, numbers)
    check_ranks(ranks, f"tokenizer.ranks_file={path}")
    return ranks


def _refuse_repeated(path: Path, pairs: list[tuple[bytes, int]], numbers: list[int]) -> None:
    """One line naming the first line that repeats an earlier line's token or rank."""
    tokens: dict[bytes, int] = {}  # -> the line that gave it
    ranks: dict[int, int] = {}
    for (token, rank), number in zip(pairs, numbers):
        twice = tokens.get(token) or ranks.get(rank)
        if twice is not None:
            raise UserError(f"tokenizer.ranks_file={path}: line {number} repeats the token "
                            f"or rank of line {twice}; give a .tiktoken ranks file with each "
                            "token and each rank once")  # fmt: skip
        tokens[token], ranks[rank] = number, number


# Every byte UTF-8 text can hold: tiktoken's core panics on a text whose bytes no token
# spells ("no entry found for key"), in the middle of a run
UTF8_BYTES = [bytes([b]) for b in (*range(0xC0), *range(0xC2, 0xF5))]


def check_ranks(ranks: dict[bytes, int], key: str) -> None:
    """One line for ranks tiktoken cannot encode with, or that would make tables of
    billions of entries (token_bytes.npy runs over every id up to the largest rank: one
    rank of 10^9 took 16 GB and 70 s). The same bounds as a tokenizer.json's ids."""
    if not ranks:
        raise UserError(f"{key}: holds no tokens; give a .tiktoken ranks file")
    missing = [b for b in UTF8_BYTES if b not in ranks]
    if missing:
        raise UserError(f"{key}: no token for the byte {missing[0][0]:#04x} (and "
                        f"{len(missing) - 1} more), so text holding it cannot be encoded; "
                        "give a byte-level ranks file (every byte a token)")  # fmt: skip
    low, high = min(ranks.values()), max(ranks.values())
    if low < 0 or high > MAX_ID or high >= 2 * len(ranks) + MAX_GAP:
        raise UserError(f"{key}: its ranks run from {low:,} to {high:,} for {len(ranks):,} "
                        f"tokens (corpusprep takes ranks from 0 up to {MAX_ID:,}, at most "
                        f"{MAX_GAP:,} beyond twice the number of tokens): not a real "
                        "vocabulary; give ranks numbered from 0, next to each other")  # fmt: skip


# GPT-2's ranks ship inside corpusprep, so that nanoGPT's presets need no download: the
# public r50k_base.tiktoken, byte for byte (gzip-compressed: 4x faster to open than xz,
# 0.007 s against 0.03 s, paid by every GPT-2 run), which holds the same ranks as
# gpt2's vocab.bpe + encoder.json (tests/test_tokenizers.py compares them with tiktoken's).
BUNDLED_RANKS = (
    "r50k_base.tiktoken.gz",
    "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930",
)
BUNDLED_ENCODINGS = ("gpt2", "r50k_base")  # the sha256 is the one tiktoken pins for the file


def bundled_ranks(encoding: str) -> Optional[dict[bytes, int]]:
    """GPT-2's ranks from the copy shipped with corpusprep; None for other encodings, or
    when the copy is missing or damaged (tiktoken then loads them as usual)."""
    data = bundled_file(encoding)
    return None if data is None else parse_checked_ranks(data)


def bundled_file(encoding: str) -> Optional[bytes]:
    """The shipped r50k_base.tiktoken's bytes, checked by its sha256 (see bundled_ranks)."""
    if encoding not in BUNDLED_ENCODINGS:
        return None
    import gzip
    import zlib
    from importlib.resources import files

    name, sha256 = BUNDLED_RANKS
    try:
        data = gzip.decompress(files("corpusprep.data").joinpath(name).read_bytes())
    except (OSError, EOFError, zlib.error, ModuleNotFoundError):
        return None
    return data if hashlib.sha256(data).hexdigest() == sha256 else None


def parse_checked_ranks(data: bytes) -> dict[bytes, int]:
    """A .tiktoken file already checked by its sha256: one pass, 2x read_ranks' speed."""
    fields = data.split()  # "token rank" lines
    return dict(zip(map(binascii.a2b_base64, fields[0::2]), map(int, fields[1::2])))


@dataclass(frozen=True)
class Vocabulary:
    """An encoding's ranks, split pattern and special tokens, under tiktoken's Encoding's
    own attribute names: what every backend is built from, and what the manifest and
    meta.pkl describe (tiktoken's Encoding, 0.04 s to build, only where it encodes)."""

    name: str
    _pat_str: str
    _mergeable_ranks: dict[bytes, int]
    _special_tokens: dict[str, int]
    file: Optional[bytes] = None  # the ranks as a .tiktoken file holds them, if read from one

    @functools.cached_property
    def max_token_value(self) -> int:  # as tiktoken counts it
        ranks, specials = self._mergeable_ranks.values(), self._special_tokens.values()
        return max(max(ranks), max(specials, default=0))

    @property
    def n_vocab(self) -> int:
        return self.max_token_value + 1


class TiktokenTokenizer(Tokenizer):
    # describe()'s keys that never change the ids, and the one value a run's fingerprint
    # counts each as: the backend (tiktoken, the default before auto, so that folders made
    # then stay up to date, and installing riptoken redoes none)
    FINGERPRINT_AS = {"backend": "tiktoken"}

    # backend: the config's default is auto (conf/tokenizer/tiktoken.yaml); built in Python
    # it is tiktoken, the reference tests/test_bpe_cuts.py holds riptoken to
    def __init__(
        self, encoding: str = "gpt2", ranks_file: Optional[str] = None, backend: str = "tiktoken"
    ) -> None:
        if backend not in BACKENDS:
            raise UserError(
                f"tokenizer.backend={backend}: unknown backend; use auto (splintr or riptoken "
                "where installed and proven, else tiktoken), tiktoken, splintr or riptoken"
            )
        proven = [name for name, encodings in PROVEN.items()
                  if not ranks_file and str(encoding) in encodings]  # fmt: skip
        if backend in PROVEN and backend not in proven:
            raise UserError(
                f"tokenizer.backend={backend}: its ids are proven identical to tiktoken's only "
                f"for {', '.join(sorted(PROVEN[backend]))} (tests/test_bpe_cuts.py); "
                "use backend=auto or backend=tiktoken for this encoding"
            )
        # resolved once, here: the pickled copy each worker gets carries the choice
        self.requested = backend
        if backend == "auto":
            backend = next((name for name in proven if _installed(name)), "tiktoken")
        self.backend = backend
        self.encoding = str(encoding)
        check_path("tokenizer.ranks_file", ranks_file)
        self.ranks_file = str(Path(ranks_file).expanduser().resolve()) if ranks_file else None
        self.ranks_sha256: Optional[str] = None
        if self.ranks_file:
            data = read_ranks_file(Path(self.ranks_file), str(ranks_file))
            self.ranks_sha256 = hashlib.sha256(data).hexdigest()
        # fail now, before any work, if the encoding cannot be loaded; tiktoken's own
        # Encoding only where tiktoken encodes (a faster backend's core: load())
        if self.backend == "tiktoken":
            self._enc()
        else:
            self._vocab()

    def _key(self) -> tuple:
        return (self.encoding, self.ranks_file, self.ranks_sha256)

    def restore(self, description: dict[str, Any], folder: Optional[Path] = None) -> None:
        """Rebuilt for a folder: only the very ranks file it was made with will do."""
        recorded = description.get("ranks_sha256")
        if self.ranks_file and recorded != self.ranks_sha256:
            raise UserError(
                f"tokenizer.ranks_file={self.ranks_file}: not the ranks file the folder was "
                "made with (its sha256 differs from the manifest's); put that file back there"
            )

    def files(self) -> dict[str, bytes]:
        """A ranks file the run was given, kept beside the ids (KEPT)."""
        if not self.ranks_file:
            return {}  # a named encoding: tiktoken's own, found by name anywhere
        return {KEPT: read_checked_ranks(Path(self.ranks_file), self.ranks_sha256)}

    def _vocab(self) -> Vocabulary:
        """The ranks, pattern and special tokens, once per process."""
        return self._cached("vocabulary", self._load_vocab)

    def _enc(self):
        """tiktoken's Encoding over the vocabulary, once per process: made only where
        tiktoken encodes or decodes."""
        return self._cached("tiktoken", self._load)

    def _cached(self, kind: str, make: Callable[[], Any]) -> Any:
        key = (*self._key(), kind)
        with _lock:
            made = _cache.get(key)
        if made is None:
            made = make()
            with _lock:
                _cache[key] = made
        return made

    def _load(self):
        import tiktoken

        v = self._vocab()
        return tiktoken.Encoding(v.name, pat_str=v._pat_str, mergeable_ranks=v._mergeable_ranks,
                                 special_tokens=v._special_tokens)  # fmt: skip

    def _load_vocab(self) -> Vocabulary:
        import tiktoken

        if self.ranks_file:
            spec = base_spec(self.encoding)
            ranks = read_ranks(Path(self.ranks_file), self.ranks_sha256)
            specials = {s: i for s, i in spec["special_tokens"].items() if i not in ranks.values()}
            name = f"{self.encoding}+{Path(self.ranks_file).name}"
            return Vocabulary(name, spec["pat_str"], ranks, specials)
        if self.encoding not in tiktoken.list_encoding_names():
            base_spec(self.encoding)  # raises the unknown-encoding message
        data = bundled_file(self.encoding)
        if data is not None:  # GPT-2: no download, no cache needed
            spec = base_spec(self.encoding)
            return Vocabulary(self.encoding, spec["pat_str"], parse_checked_ranks(data),
                              spec["special_tokens"], file=data)  # fmt: skip
        try:  # what tiktoken.get_encoding builds its Encoding from (a download, cached)
            spec = _constructors()[self.encoding]()
        except Exception as e:
            raise UserError(
                f"tokenizer.encoding={self.encoding}: cannot load its ranks ({_reason(e)}); "
                "offline, point TIKTOKEN_CACHE_DIR at a folder with tiktoken's cached files, "
                "or give the file itself with tokenizer.ranks_file=FILE.tiktoken"
            ) from None
        return Vocabulary(spec["name"], spec["pat_str"], spec["mergeable_ranks"],
                          spec["special_tokens"])  # fmt: skip

    @property
    def cut_at(self) -> Optional[bytes]:  # type: ignore[override]
        return WORD_CUT_AT if self._vocab()._pat_str in PROVEN_PATTERNS.values() else b""

    @property
    def vocab_size(self) -> int:
        return self._vocab().n_vocab

    @property
    def max_id(self) -> int:
        return self._vocab().max_token_value

    @property
    def eot_id(self) -> Optional[int]:  # type: ignore[override]
        return self._vocab()._special_tokens.get("<|endoftext|>")

    def _fast(self):
        """The backend's core (splintr's or riptoken's) over the same ranks and pattern,
        per process; None where auto chose it but this worker (another machine) cannot
        import it, or the backend is tiktoken: tiktoken's ids are the same."""
        if self.backend not in _CORES:
            return None
        key = (*self._key(), self.backend)
        with _lock:
            fast = _cache.get(key)
        if fast is None:
            try:
                fast = _CORES[self.backend](self)
            except ImportError:
                fast = False
            with _lock:
                _cache[key] = fast
        if fast is False and self.requested != "auto":
            raise UserError(MISSING[self.backend])
        return fast or None

    def load(self) -> None:
        self._fast()  # the core (riptoken's: 11.5 MB for gpt2) built once, not per worker

    def encode(self, text: str) -> np.ndarray:
        fast = self._fast()
        if fast is None:
            return self._tiktoken(text)
        if self.backend == "splintr":
            return fast.encode(text) if splintr_safe(text) else self._tiktoken(text)
        if not may_hold_long_piece(text):
            return _rip(fast, text)
        # riptoken merges a pre-token of RIPTOKEN_LONG_PIECE bytes or more otherwise than
        # tiktoken ("." * 500): blocks that may hold one go to tiktoken, the rest to riptoken
        if not self.cut_at:
            return self._tiktoken(text)
        # cut where the tokenizer's own rule allows: the word rule too (a line of words has
        # no newline to cut at, and went to tiktoken whole)
        rule = (last_word_cut, WORD_CUT_TEXT) if self.cut_at == WORD_CUT_AT else ()
        parts = [self._tiktoken(block) if may_hold_long_piece(block) else _rip(fast, block)
                 for block in blocks_at_cuts(text, FALLBACK_BLOCK, *rule)]  # fmt: skip
        return np.concatenate(parts) if len(parts) != 1 else parts[0]

    def _tiktoken(self, text: str) -> np.ndarray:
        # encode_to_numpy with nothing allowed or disallowed == encode_ordinary, minus the list
        return self._enc().encode_to_numpy(text, disallowed_special=())

    def encode_pieces(self, pieces: Iterable[str]) -> Iterator[np.ndarray]:
        return encode_at_cuts(self.encode, pieces, bool(self.cut_at), MIN_SEGMENT, last_word_cut)

    def encode_documents(self, texts: list[str]) -> list[np.ndarray]:
        # a text shorter than MIN_SEGMENT is one encode(text) in encode_pieces, each a new
        # array: called straight, without the cut logic's generator (unless a subclass
        # encodes pieces its own way)
        if type(self).encode_pieces is TiktokenTokenizer.encode_pieces and all(
            len(text) < MIN_SEGMENT for text in texts
        ):
            return [self.encode(text) for text in texts]
        return super().encode_documents(texts)

    def decode(self, ids: Iterable[int]) -> str:
        return self._enc().decode([int(i) for i in ids])

    def special_ids(self) -> set[int]:
        return set(self._vocab()._special_tokens.values())

    def token_bytes(self) -> np.ndarray:
        ranks = self._vocab()._mergeable_ranks
        out = np.zeros(self.vocab_size, dtype=np.int32)  # an id neither rank nor special: 0
        # in two vectors, not item by item (3x faster: 5 ms for GPT-2, paid by every run)
        out[np.fromiter(ranks.values(), np.int64, len(ranks))] = np.fromiter(
            map(len, ranks), np.int32, len(ranks)
        )
        return out

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        return self._enc().decode_bytes([int(i) for i in ids])

    @property
    def is_gpt2(self) -> bool:
        """GPT-2's vocabulary exactly (gpt2 and r50k_base are the same ranks, pattern and
        special token; a ranks file only if it is r50k_base.tiktoken itself): the one that
        nanoGPT's train.py (vocab 50,304) and sample.py (tiktoken gpt2) assume without a
        meta.pkl."""
        base = self.encoding in GPT2_ENCODINGS
        return base and (self.ranks_file is None or self.ranks_sha256 == R50K_SHA256)

    def meta(self) -> Optional[dict[str, Any]]:
        if self.is_gpt2:
            return None  # nanoGPT's own data/shakespeare and openwebtext have no meta.pkl
        enc = self._vocab()
        # itos/stoi let nanoGPT's sample.py run unchanged: it decodes with itos (each
        # token's text) and encodes a prompt character by character with stoi (see
        # sample_stoi and the README)
        tokens = {rank: token for token, rank in enc._mergeable_ranks.items()}
        tokens.update({i: special.encode() for special, i in enc._special_tokens.items()})
        itos = {i: tokens[i].decode("utf-8", errors="replace") for i in sorted(tokens)}
        stoi = sample_stoi(itos, lambda c: self._enc().encode_ordinary(c))
        # the same meta.pkl whichever backend encoded (describe() names it, for the manifest)
        described = {k: v for k, v in self.describe().items() if k not in self.FINGERPRINT_AS}
        return {"vocab_size": enc.n_vocab, **described, "itos": itos, "stoi": stoi}

    def describe(self) -> dict[str, Any]:
        enc = self._vocab()
        out: dict[str, Any] = {"kind": "tiktoken", "encoding": self.encoding}
        out["backend"] = self.backend  # as resolved (never auto): the ids are the same from each
        if self.ranks_file:
            out.update(ranks_file=self.ranks_file, ranks_sha256=self.ranks_sha256, file=KEPT)
        out.update(
            vocab_size=enc.n_vocab,
            eot_id=enc._special_tokens.get("<|endoftext|>"),
            special_tokens=dict(enc._special_tokens),
            tiktoken_version=_tiktoken_version(),
        )
        return out

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__)  # no Encoding inside: each worker loads its own, once


def encode_at_cuts(
    encode: Callable[[str], np.ndarray], pieces: Iterable[str], cuttable: bool, min_segment: int,
    last: Optional[Callable[[str], int]] = None,
) -> Iterator[np.ndarray]:  # fmt: skip
    """Encode a text arriving in pieces, in segments of at least `min_segment` characters
    cut only where the rule allows (`last` finds a text's last cut, 0 if none: CUT_AT's,
    last_cut, unless given): the ids of encoding it whole. Not `cuttable`: it is."""
    last = last or last_cut
    if not cuttable:
        yield encode("".join(pieces))  # no proven cut: the text is encoded whole
        return
    # Pieces are held in a list and joined once per segment (adding each to one string
    # copied the segment again for every piece: ~8 copies of each character). The last
    # cut is looked for where no search has looked yet: a stretch with no cut (up to
    # source.max_uncut_bytes) is searched and copied once, not again with every piece.
    held: list[str] = []
    size = 0
    searched = 0  # the held text's first characters: no cut there (but in the last few)
    # a document that comes whole (a JSON line, a Parquet row: up to source.max_uncut_bytes)
    # is encoded in segments of about the minimum, as a text read in blocks is, not whole up
    # to its last cut (a 50 MB line of words went to splintr in one call: 574 MB)
    block = max(min_segment, SLICE)
    for piece in in_blocks(pieces, block, longer=2 * block):
        held.append(piece)
        size += len(piece)
        if size < min_segment:
            continue
        start = max(searched - _SEARCHED_AGAIN, 0)  # a cut's rule looks a character past it
        region = _last_chars(held, size - start)
        cut = last(region)
        if not cut:
            searched = size
            continue
        text = region if start == 0 else "".join(held)
        yield encode(text[: start + cut])
        rest = text[start + cut :]
        held, size, searched = [rest], len(rest), 0
    if size:
        yield encode("".join(held))


SLICE = 1 << 16  # characters: the least a long piece is sliced into


def _last_chars(held: list[str], n: int) -> str:
    """The last n characters of the text held in pieces, joined from the pieces they span."""
    k, spanned = len(held), 0
    while spanned < n:
        k -= 1
        spanned += len(held[k])
    joined = "".join(held[k:]) if k < len(held) - 1 else held[k]
    return joined[spanned - n :] if spanned > n else joined


_SEARCHED_AGAIN = 8  # characters before the end of a text searched again with what follows

# riptoken (0.2.4) encodes a pre-token of this many bytes or more with another merge order
# than tiktoken's (ids differ on "." * 500, " " * 500, "a" * 5002: tests/test_bpe_cuts.py).
# Every pre-token of the proven patterns is at most three runs of whitespace or of
# non-whitespace (a leading character, letters or punctuation, newlines), so one that long
# holds a run of LONG_RUN_BYTES bytes with no ASCII whitespace, or with no ASCII
# non-whitespace (Unicode spaces are not ASCII): text without such a run is safe.
RIPTOKEN_LONG_PIECE = 500
LONG_RUN_BYTES = (RIPTOKEN_LONG_PIECE - 4) // 2 - 8  # a margin below the bound
FALLBACK_BLOCK = 1 << 16  # text with such a run is looked at again in blocks this long


def may_hold_long_piece(text: str) -> bool:
    """Whether `text` may hold a pre-token of RIPTOKEN_LONG_PIECE bytes or more: it has a
    run of more than LONG_RUN_BYTES bytes without ASCII whitespace, or without other ASCII.
    Marks that surely end a run: " " and "\n" (whitespace), printable ASCII but "/" (not:
    o200k's punctuation pre-token ends in any mix of "\r", "\n" and "/"); fewer marks than
    the classes hold only make the test stricter. Each kind's marks become 1 and every other
    byte 0 (bytes.translate), and a run is LONG_RUN_BYTES + 1 zeros in a row (a substring
    search): two C passes per kind, with no per-call cost worth the name on short documents."""
    raw = text.encode("utf-8")
    if len(raw) <= LONG_RUN_BYTES:
        return False
    return _UNMARKED_RUN in raw.translate(_WHITE) or _UNMARKED_RUN in raw.translate(_OTHER)


def _marks(byte: int) -> tuple[bool, bool]:
    """Whether a byte ends a run: " " and "\n" (whitespace); printable ASCII but "/" (not)."""
    return byte in (32, 10), 33 <= byte <= 126 and byte != 47


_WHITE, _OTHER = (bytes(_marks(b)[kind] for b in range(256)) for kind in (0, 1))  # byte -> 1 or 0
_UNMARKED_RUN = bytes(LONG_RUN_BYTES + 1)  # that many bytes with no mark of one kind


def last_cut(text: str, after: int = 0) -> int:
    """The position right after the last "\\n" of `text` where CUT_AT allows a cut, or 0;
    only a "\\n" at or after `after` is looked at."""
    end = len(text) - 1  # the "\n" needs a next character
    while True:
        i = text.rfind("\n", max(1, after), end)
        if i < 1:
            return 0
        if text[i - 1] in _PREV_OK and text[i + 1] in _NEXT_OK:
            return i + 1
        end = i


def last_word_cut(text: str) -> int:
    """The last cut of WORD_CUT_AT in `text`, or 0: one before a space between two ASCII
    letters, looked for back from the end in stretches that double from WORD_WINDOW
    characters (the last is usually near the end; text of digits and spaces has many
    spaces and none of these), or the newline rule's, if later. A word cut further back
    counts too: were it missed, encode_at_cuts would hold all the text after it."""
    high, size, word = len(text), WORD_WINDOW, 0
    while high > 0 and not word:
        low = max(high - size, 0)
        # a letter before `high` is matched with the two characters after it in view
        for m in _WORD_RULE_TEXT.finditer(text, low, min(high + 2, len(text))):
            word = m.end()
        high, size = low, size * 2
    return max(word, last_cut(text, word))


WORD_WINDOW = 1 << 12  # words are never far apart in text that has them
_WORD_RULE_TEXT = re.compile(_WORD_RULE.decode("ascii"))  # the word rule over decoded text
WORD_CUT_TEXT = re.compile(WORD_CUT_AT.decode("ascii"))  # all of WORD_CUT_AT, over text


def blocks_at_cuts(text: str, size: int, last: Callable[[str], int] = last_cut,
                   rule: re.Pattern = CUT_AT_TEXT) -> list[str]:  # fmt: skip
    """`text` in blocks of about `size` characters, cut only where CUT_AT allows (or
    another rule: `last` finds the last cut in a window, 0 if none; `rule` matches end at
    cuts). The last block is what follows the last cut."""
    blocks, start = [], 0
    while len(text) - start > size:
        cut = last(text[start : start + size])
        if not cut:  # none in this window: the first one after it
            m = rule.search(text, start + size)
            if m is None:
                break
            cut = m.end() - start
        blocks.append(text[start : start + cut])
        start += cut
    blocks.append(text[start:])
    return blocks


def _riptoken_core(tokenizer: TiktokenTokenizer) -> Any:
    import riptoken

    enc = tokenizer._enc()  # riptoken's Encoding wraps it; the long pieces go to it
    return riptoken.Encoding(riptoken.CoreBPE(enc._mergeable_ranks, enc._special_tokens,
                                              enc._pat_str), enc)  # fmt: skip


# Where splintr (with PCRE2) splits text otherwise than tiktoken: U+180E, a space before
# Unicode 6.3 and not since, is whitespace to PCRE2 and not to tiktoken. A text holding it
# is encoded by tiktoken. tests/test_bpe_cuts.py finds no other code point, in any of a
# dozen contexts, and none in a million fuzzed texts without it.
SPLINTR_MISREADS = "\u180e"
SPLINTR_CACHE_CHARS = 1 << 23  # splintr's cache of pieces is emptied after this much text
# PCRE2 runs out of its match limit on a run of whitespace of about 5M characters (the
# patterns' \s+$ and \s*[\r\n] backtrack over it), and splintr then retries the same search
# for ever: a text longer than SPLINTR_LONG_TEXT (cut texts are 1-2M characters) that holds
# a run of SPLINTR_LONG_RUN bytes with no printable ASCII (spaces, or text of other
# scripts: a stricter test) is encoded by tiktoken
SPLINTR_LONG_TEXT = 1 << 21
SPLINTR_LONG_RUN = 1 << 20


def splintr_safe(text: str) -> bool:
    """Whether splintr (on PCRE2) gives `text` tiktoken's ids, and in bounded time."""
    if SPLINTR_MISREADS in text:
        return False
    return len(text) <= SPLINTR_LONG_TEXT or bytes(SPLINTR_LONG_RUN) not in text.encode(
        "utf-8", "surrogatepass"
    ).translate(_OTHER)


class _Splintr:
    """splintr's tokenizer over tiktoken's ranks (in tiktoken's file format) and pattern,
    with no special tokens (ordinary text only, as encode_ordinary), on PCRE2: its own
    regex engine reads the letters new in Unicode 17 as letters where tiktoken reads them
    as unassigned ("\ua7ce's" then gets other ids). Its cache of pieces counts entries,
    not bytes, so long pieces that never repeat (DNA, base64) grew it by 3 MB per MB of
    text: it is emptied after every SPLINTR_CACHE_CHARS characters (about 25 MB between
    calls; one call on an uncut text adds up to about 3 times that text's size)."""

    def __init__(self, tokenizer: TiktokenTokenizer) -> None:
        import splintr

        vocab = tokenizer._vocab()
        data = vocab.file  # GPT-2's shipped file as it is; else written out (ranks 0..n-1)
        if data is None:
            ranks = vocab._mergeable_ranks
            data = ranks_file_bytes(sorted(ranks, key=ranks.__getitem__))
        core = splintr.Tokenizer.from_bytes(data, splintr_pattern(vocab._pat_str), {})
        try:
            self.core = core.pcre2(True)
        except ValueError:  # a build without PCRE2: not proven, as if not installed
            raise ImportError("splintr without PCRE2") from None
        self.since_cleared = 0

    def encode(self, text: str) -> np.ndarray:
        self.since_cleared += len(text)
        if self.since_cleared > SPLINTR_CACHE_CHARS:
            self.core.clear_cache()
            self.since_cleared = len(text)
        return np.frombuffer(self.core.encode_flat(text), dtype="<u4")  # little-endian ids


def ranks_file_bytes(tokens: list[bytes]) -> bytes:
    """tiktoken's .tiktoken format: "base64(token) rank" per line, by rank."""
    return b"".join(base64.b64encode(t) + b" %d\n" % i for i, t in enumerate(tokens))


def splintr_pattern(pat_str: str) -> str:
    """tiktoken's pattern as splintr's regex engine takes it, its possessive quantifiers
    (++, ?+, *+, {1,3}+) made greedy: in these patterns nothing that follows one could match
    what backtracking would give back, so the pre-tokens are the same (proven on ids by
    tests/test_bpe_cuts.py for SPLINTR_PROVEN)."""
    return re.sub(r"([+*?]|\{\d+(?:,\d*)?\})\+", r"\1", pat_str)


_CORES = {"riptoken": _riptoken_core, "splintr": _Splintr}


def _rip(fast: Any, text: str) -> np.ndarray:
    # a list of ints: array.array reads it 3x faster than np.array
    return np.frombuffer(array(_U32, fast.encode_ordinary(text)), dtype=np.uint32)


def _installed(module: str) -> bool:
    from importlib import import_module

    try:
        import_module(module)
    except ImportError:
        return False
    return True


def _tiktoken_version() -> str:
    import tiktoken

    return getattr(tiktoken, "__version__", "unknown")


def _reason(e: Exception) -> str:
    """Why tiktoken could not fetch an encoding's files, in a few words: no network names
    the host, anything else its first line, cut at a word."""
    import requests

    if isinstance(e, requests.ConnectionError):
        host = getattr(getattr(e, "request", None), "url", None) or ""
        host = host.split("/")[2] if host.count("/") >= 2 else "its host"
        return f"cannot reach {host}: no network?"
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    return text if len(text) <= 120 else text[:120].rsplit(" ", 1)[0] + " ..."
