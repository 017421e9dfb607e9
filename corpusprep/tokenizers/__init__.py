"""Tokenizers turn text into arrays of ids. Each one is a class in its own module here,
with a config file of the same name in conf/tokenizer/. A tokenizer never opens files."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

if TYPE_CHECKING:
    from corpusprep.sample import SampleRule

ANYWHERE: Optional[bytes] = None
NOWHERE = b""
NO_IDS = np.zeros(0, dtype=np.uint32)


MAX_KEPT_BYTES = 1 << 30  # a tokenizer's file bigger than this is not one we wrote
TRAINED = (
    "trainer",
    "trainer_version",
    "sample_chars",
    "sample_units",
    "corpus_chars_offered",
    "train_seconds",
)  # what a trained tokenizer's description says of its training


# A long piece (a JSON line, a Parquet row, a document between separators: up to
# source.max_uncut_bytes) is encoded this many characters at a time by the tokenizers that
# may cut anywhere (char, byte): the same ids, without arrays as long as the whole text.
# (BPE slices it too, in_blocks with its own sizes, before it looks for its cuts.)
BLOCK_CHARS = 1 << 18


def in_blocks(pieces: Iterable[str], size: int = BLOCK_CHARS,
              longer: Optional[int] = None) -> Iterator[str]:  # fmt: skip
    """The pieces, each longer than `longer` (else `size`) characters in slices of `size`."""
    for text in pieces:
        if len(text) <= (size if longer is None else longer):
            yield text
            continue
        for start in range(0, len(text), size):
            yield text[start : start + size]


def read_kept(folder: Optional[Path], name: str, sha256: Optional[str],
              limit: int = MAX_KEPT_BYTES) -> bytes:  # fmt: skip
    """A file a tokenizer keeps in an output folder (which may come from a stranger): a
    regular file of at most `limit` bytes (never a device or a FIFO), whose sha256
    is the one the manifest records."""
    import hashlib

    from corpusprep._paths import read_regular
    from corpusprep.errors import UserError

    if folder is None:
        raise UserError(f"{name}: a tokenizer kept in a folder; give the output folder")
    path = Path(folder) / name
    try:
        data = read_regular(path, limit)
    except FileNotFoundError:
        raise UserError(f"{path}: missing; prepare the folder again") from None
    except OSError as e:
        why = f"a tokenizer's file here is a regular file of at most {limit >> 20:,} MB"
        raise UserError(f"{path}: {e.strerror} ({why}); prepare the folder again") from None
    if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
        raise UserError(f"{path}: not the file the manifest records (sha256 differs); "
                        "prepare the folder again")  # fmt: skip
    return data


def sample_stoi(itos: dict[int, str], encode: Callable[[str], Sequence[int]]) -> dict[str, int]:
    """meta.pkl's stoi for a vocabulary of many-character tokens. nanoGPT's sample.py
    encodes a prompt one character at a time (`[stoi[c] for c in s]`), so what matters is
    each character's entry: the token that spells that character alone, the one the
    tokenizer gives for it when that is such a token, else the lowest such id. Then the
    prompt's ids decode back to the prompt (they are not the tokenizer's own, merged ids:
    no character-by-character lookup can give those); a character no token spells alone
    (one the vocabulary holds only as several byte tokens) is not there: KeyError.
    Longer token texts map to their first id, as a table; a text with U+FFFD (a token
    holding part of a character) is left out, unless the tokenizer gives that very token
    for U+FFFD itself."""
    stoi: dict[str, int] = {}
    spelled: dict[str, list[int]] = {}
    for i, text in itos.items():
        if len(text) == 1:
            spelled.setdefault(text, []).append(i)
        elif "\ufffd" not in text:
            stoi.setdefault(text, i)
    for char, ids in spelled.items():
        own = list(encode(char))
        if len(own) == 1 and own[0] in ids:
            stoi[char] = int(own[0])
        elif char != "\ufffd":
            stoi[char] = min(ids)
    return stoi


class Tokenizer(ABC):
    """What the pipeline needs from a tokenizer (the same contract for plugins).

    Instances are sent to worker processes, so they must pickle cheaply: keep big
    tables out of the pickled state and rebuild them lazily (see CharTokenizer).
    """

    # A subclass may set these attributes, or compute them in properties (which type
    # checkers call an override of a writable attribute: hence those `type: ignore`s)

    #: Where a text may be cut so that encoding the pieces gives the ids of encoding it
    #: whole: a regex over UTF-8 bytes (ASCII only, so it works on str too) whose matches
    #: end at the cuts. ANYWHERE (None) for char and byte; NOWHERE (b"") when no rule is
    #: known: the text is then encoded whole.
    cut_at: Optional[bytes] = None

    #: Encoding costs about what reading and decompressing the text does (char, byte): a
    #: compressed file is then not cut into pieces, each of which decompresses the text
    #: before its own to reach it.
    fast: bool = False

    #: The id that separates documents (eot=append|prepend), or None if there is none.
    eot_id: Optional[int] = None

    #: restore() needs the output folder: what it learned is a file there (see files())
    keeps_files: bool = False

    def fit(self, charset: str, eot: bool = False) -> None:  # noqa: B027 - optional hook
        """Learn from the corpus before encoding; given every distinct character in it.
        `eot`: documents will be separated, so an end-of-text id is needed (char adds one).
        A tokenizer with a sample_rule() is also given `sample=`, the Sample it asked for."""

    def load(self) -> None:  # noqa: B027 - optional hook
        """Build what encode() uses now, in the driver, before the workers fork: forked
        workers then share it (its memory once, not once per worker) instead of each
        building its own. Called only for a run that encodes, and never before fit()."""

    def sample_rule(self, single: bool) -> Optional[SampleRule]:
        """The training sample the scan should gather for fit() (tokenizer=bpe), or None.
        `single`: the corpus is one plain text, not documents."""
        return None

    def identity(self) -> dict[str, Any]:
        """What the ids depend on, for a run's fingerprint, before anything is encoded:
        describe() for a ready-made tokenizer; for one that learns, what it learns with."""
        return {} if self.needs_fit else self.describe()

    def files(self) -> dict[str, bytes]:
        """Files to keep in out_dir beside the ids (a trained vocabulary), by name."""
        return {}

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

    def encode_documents(self, texts: list[str]) -> list[np.ndarray]:
        """Each of several short whole documents encoded as encode_pieces([text]) would,
        each in an array of its own (never a buffer reused for the next): the shard loop
        gathers small documents and writes them a batch at a time. A tokenizer whose calls
        cost more than their text (tiktoken's) overrides it to skip the generators."""
        return [np.concatenate([*self.encode_pieces([text]), NO_IDS]) for text in texts]

    def encode_continued(self, pieces: Iterable[str]) -> Iterator[np.ndarray]:
        """encode_pieces for a text's pieces from a cut inside it (cut_at) on, as the
        second shard of a long text gets them: the ids the whole text has there. The same
        as encode_pieces but for a tokenizer that marks where each text begins
        (sentencepiece's dummy prefix)."""
        return self.encode_pieces(pieces)

    def tokens_about(self, nbytes: int) -> int:
        """About how many tokens `nbytes` of text make, never far too few (the space a run
        needs): BPE, one per three bytes (English prose has four; code and other languages
        fewer)."""
        return nbytes // 3

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

    def restore(self, description: dict[str, Any], folder: Optional[Path] = None) -> None:  # noqa: B027
        """Take back what fit() learned, from describe()'s output (corpusprep.load uses it);
        `folder`: the output folder, for a tokenizer that keeps_files."""

    def document_specials(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids before, ids after) each document: special tokens the tokenizer itself puts
        around a text (tokenizer=hf: its post-processor's template, a BOS/EOS). The
        pipeline writes them once per document, at its start and its end, never between
        the pieces of a document cut into several; none by default (and none from a
        tokenizer whose tokens_for() is known: shards then write at computed places)."""
        return NO_IDS, NO_IDS

    def ids_used(self) -> Optional[int]:
        """How many distinct ids the corpus it was fitted on uses, when that is known
        without counting (char: all of them); None: counted from the output."""
        return None

    def special_ids(self) -> set[int]:
        """Ids of special tokens (no text of the corpus): the end-of-text id by default."""
        return set() if self.eot_id is None else {self.eot_id}

    def token_bytes(self) -> np.ndarray:
        """Each id's length in UTF-8 bytes, 0 for special tokens (nanochat's token_bytes):
        what bits per byte divide a loss by, to compare models across tokenizers. Its raw
        bytes, decode_bytes([id]) (nanochat: decode_single_token_bytes), never its decoded
        text's: a token holding part of a character counts that part, not U+FFFD's 3."""
        specials = self.special_ids()
        out = np.zeros(self.vocab_size, dtype=np.int32)
        for i in range(self.vocab_size):
            # an id no text gives (a plugin's surrogate code point) stays 0
            with contextlib.suppress(UnicodeError, ValueError, KeyError, IndexError):
                if i not in specials:
                    out[i] = len(self.decode_bytes([i]))
        return out

    @abstractmethod
    def meta(self) -> Optional[dict[str, Any]]:
        """The meta.pkl dict: nanoGPT's train.py reads vocab_size, sample.py stoi/itos.
        None: write no meta.pkl (the GPT-2 vocabulary, nanoGPT's default without one)."""

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """A JSON-able description for the manifest, enough to rebuild the tokenizer."""


# Limits every tokenizer's vocabulary keeps to. The tables made per id (token_bytes.npy,
# the decoder's bytes, meta.pkl's itos) run from 0 to the largest id: a stranger's 27 KB
# file with one added token at id 10^8 or 2^32-1 would cost minutes and gigabytes. Real
# vocabularies are dense (Gemma's 262,144 ids are the most in use); a reserved range may
# leave a gap, not one far beyond the tokens.
MAX_ID = (1 << 24) - 1
MAX_GAP = 1 << 17  # ids allowed beyond twice the number of tokens
# meta.pkl holds each token's text twice (itos, stoi): about 27 bytes a token, and load()
# reads at most 64 MB (dataset.MAX_META_BYTES); refused before the run, not after it
MAX_TOKENS = 1 << 21


def restore_recorded(tokenizer: Tokenizer, described: dict[str, Any], folder: Optional[Path],
                     manifest: Path | str) -> None:  # fmt: skip
    """tokenizer.restore() from a folder's manifest, which may come from anyone: a record of
    the wrong shape (a key missing, a value of another type) is one line naming the
    manifest, not a traceback from inside restore()."""
    from corpusprep.errors import UserError

    try:
        if tokenizer.keeps_files:
            tokenizer.restore(described, folder=folder)
        else:
            tokenizer.restore(described)
    except UserError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        raise UserError(f"{manifest}: its tokenizer record is of the wrong shape "
                        f"({type(e).__name__}: {str(e)[:80]}): damaged, or not corpusprep's; "
                        "prepare that folder again") from None  # fmt: skip


def read_tokenizer_file(path: Path, key: str, limit: int, what: str) -> bytes:
    """A tokenizer's file (a .tiktoken ranks file, a tokenizer.json) whole: a regular file (a
    FIFO would block, a device never end) of at most `limit` bytes, checked on the open file
    before reading (_paths.read_regular). `key` names the setting ("tokenizer.path=x");
    `what`: what to give instead."""
    import errno

    from corpusprep._paths import read_regular
    from corpusprep.errors import UserError

    try:
        return read_regular(path, limit)
    except FileNotFoundError:
        raise UserError(f"{key}: no such file; give the path of {what}") from None
    except OSError as e:
        if e.errno in (errno.EINVAL, errno.EFBIG):
            why = f"not a regular file of at most {limit >> 20} MB; give {what}"
        else:
            why = f"cannot be read ({e.strerror})"
        raise UserError(f"{key}: {why}") from None


_sink: dict[str, Any] = {}  # this process's scratch file for fd 2 (per pid: workers fork)
_sink_lock = threading.RLock()


@contextlib.contextmanager
def native_panics(error: Callable[[str], Exception]) -> Iterator[None]:
    """Around a call into a Rust tokenizer whose regex engine may panic on a user's or a
    stranger's regex (Oniguruma's or fancy-regex's backtrack limit, tiktoken on an empty
    match). pyo3 raises the panic as PanicException, a BaseException that would get past
    every `except Exception` as a long traceback: it becomes `error(its first line)` (a
    UserError). Rust's panic hook writes its own report to stderr (fd 2) first, so fd 2
    goes to a scratch file during the call: what the call wrote is passed on unless it
    panicked (the report is then the only thing there)."""
    with _sink_lock:
        if _sink.get("depth"):  # already inside one: the outer one redirects and catches
            _sink["depth"] += 1
            try:
                yield
            finally:
                _sink["depth"] -= 1
            return
        if _sink.get("pid") != os.getpid():
            _sink.update(pid=os.getpid(), file=tempfile.TemporaryFile())  # noqa: SIM115 - kept
        fd = _sink["file"].fileno()
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(fd, 2)
        _sink["depth"] = 1
        panic: Optional[BaseException] = None
        try:
            yield
        except BaseException as e:
            if type(e).__name__ != "PanicException":
                raise
            panic = e
        finally:
            _sink["depth"] = 0
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            if os.lseek(fd, 0, os.SEEK_CUR):
                if panic is None:  # not a panic's report: the user's to see
                    os.lseek(fd, 0, os.SEEK_SET)
                    while chunk := os.read(fd, 1 << 16):
                        os.write(2, chunk)
                os.ftruncate(fd, 0)
                os.lseek(fd, 0, os.SEEK_SET)
    if panic is not None:
        raise error((str(panic).splitlines() or ["a panic"])[0][:200]) from None
