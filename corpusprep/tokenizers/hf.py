"""Any Hugging Face tokenizer saved as a local tokenizer.json, through the `tokenizers`
library (an optional extra: pip install 'corpusprep[hf]'; imported only when used).

Long texts are encoded in segments only when a cut is proven harmless for this
tokenizer.json, with tiktoken's rule (corpusprep.tokenizers.tiktoken.CUT_AT: right after
a "\\n" between a printable non-space ASCII character and an ASCII letter or digit).
Encoding runs: added tokens are matched in the text first, the rest is normalized,
pre-tokenized and each pre-token goes through the model on its own. So a cut is safe when

* no normalizer (it could rewrite or join text across the cut);
* the pre-tokenizer is ByteLevel (with GPT-2's split pattern, no prefix space), or a
  Sequence of ByteLevels (no prefix space) and Splits (Isolated, not inverted) whose regex
  is one of PROVEN_PATTERNS (GPT-2, Llama-3, Qwen2, Qwen3.5), the first step splitting
  the raw text: the cut is then a pre-token boundary and both sides split as they do in
  the whole text (the argument in tiktoken.py); later steps split each pre-token alone;
* a BPE model without dropout (dropout is random: the ids are not even reproducible);
* no added token can cover the cut: none contains a "\\n" and none has lstrip (which
  would take the "\\n" before a token that starts right after the cut).

tests/test_hf.py checks the patterns with the library's own regex engine, and the ids of
real tokenizers on adversarial texts. Any other tokenizer.json is never cut (cut_at is
NOWHERE): each side of the text is encoded whole, which is correct but needs memory for
the whole text and its encoding.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Optional

import numpy as np

from corpusprep.errors import UserError
from corpusprep.tokenizers import (
    MAX_GAP,
    MAX_ID,
    MAX_TOKENS,
    NOWHERE,
    Tokenizer,
    native_panics,
    read_tokenizer_file,
    sample_stoi,
)
from corpusprep.tokenizers.tiktoken import CUT_AT, encode_at_cuts

MIN_SEGMENT = 1 << 16  # encode at least this many characters at once: fewer calls into Rust

# Split regexes the cut rule is proven for (tests/test_hf.py), exactly as tokenizer.json
# files spell them. ByteLevel with use_regex=true applies GPT-2's pattern itself.
PROVEN_PATTERNS = {
    "gpt2": r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
    "llama3": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",  # noqa: E501
    "qwen2": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",  # noqa: E501
    "qwen35": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",  # noqa: E501
}

_lock = threading.Lock()
# a tokenizer.json bigger than this is not one (Llama 3's is 9 MB, Gemma's 33 MB): a folder's
# manifest may name any file, read whole
MAX_JSON_BYTES = 256 << 20
KEPT = "tokenizer.json"  # the given file's copy in out_dir
_cache: dict[tuple[str, str], Any] = {}  # (path, sha256) -> tokenizers.Tokenizer, per process

# A token the ByteFallback decoder turns into its byte, as the library reads it: 6 bytes,
# "<0x", then what Rust's u8::from_str_radix(_, 16) takes ("+" and a digit, or two digits)
BYTE_FALLBACK = re.compile(r"<0x(\+[0-9A-Fa-f]|[0-9A-Fa-f]{2})>")


def byte_of_char() -> dict[str, int]:
    """GPT-2's bytes_to_unicode, reversed: the character a ByteLevel pre-tokenizer writes
    for each byte -> that byte (the ByteLevel decoder's table)."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("\xa1"), ord("\xac") + 1),
          *range(ord("\xae"), ord("\xff") + 1)]  # fmt: skip
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def byte_level_bytes(token: str, table: dict[str, int]) -> bytes:
    """What the ByteLevel decoder makes of one token: the byte of each character, or, if
    one is not in the table (an added token such as "<|end of text|>"), its UTF-8."""
    try:
        return bytes(table[c] for c in token)
    except KeyError:
        return token.encode("utf-8")


def _library():
    try:
        import tokenizers
    except ImportError:
        raise UserError(
            "tokenizer=hf needs the Hugging Face tokenizers library: "
            "pip install 'corpusprep[hf]' (or pip install tokenizers)"
        ) from None
    return tokenizers


def _load(path: str, data: bytes):
    """A tokenizers.Tokenizer from the bytes of a tokenizer.json, set to encode text whole:
    a truncation or padding setting saved in the file would cut or pad every segment."""
    library = _library()
    try:
        tok = library.Tokenizer.from_str(data.decode("utf-8"))
    except Exception as e:  # the library raises a bare Exception with serde's message
        reason = (str(e).splitlines() or [type(e).__name__])[0][:160]
        raise UserError(
            f"tokenizer.path={path}: not a Hugging Face tokenizer.json ({reason}); "
            "give the tokenizer.json file saved by tokenizers or transformers"
        ) from None
    tok.no_truncation()
    tok.no_padding()
    return tok


def _check_dense(given: str, tok, max_id: int, count: int) -> None:
    """One line, before any work per id, for a tokenizer.json whose largest id is far
    beyond its number of tokens (or beyond MAX_ID)."""
    if count > MAX_TOKENS:
        raise UserError(
            f"tokenizer.path={given}: {count:,} tokens, more than the {MAX_TOKENS:,} "
            "corpusprep takes (its meta.pkl would be over the 64 MB load() and inspect read; "
            "Gemma's 262,144 are the most in use); give a tokenizer with fewer tokens"
        )
    if max_id <= MAX_ID and max_id < 2 * count + MAX_GAP:
        return
    token = tok.id_to_token(max_id)
    which = f" ({token[:40]!r})" if token is not None else ""
    raise UserError(
        f"tokenizer.path={given}: its largest id, {max_id:,}{which}, is far beyond its "
        f"{count:,} tokens (corpusprep takes ids up to {MAX_ID:,} and at most "
        f"{MAX_GAP:,} beyond twice the number of tokens): not a real vocabulary; give the "
        "model's own tokenizer.json, or that token an id next to the others' (in "
        "added_tokens and model.vocab)"
    )


PROBES = ("a", "Hello world", "0", " ")  # texts whose ids locate the template's own


def special_ids(tok) -> Optional[tuple[list[int], list[int]]]:
    """What `tok.encode(text)` (add_special_tokens=True, the library's default) puts
    before and after the ids of `text` itself: its post-processor's template for one
    sequence (TemplateProcessing, Bert, Roberta...), e.g. ([<s>], []) for Llama's
    "<s> $A". Found by encoding probes with and without, and checked on the others;
    None when the post-processor does more than that."""
    found = None
    for probe in PROBES:
        plain = tok.encode(probe, add_special_tokens=False).ids
        full = tok.encode(probe).ids
        if not plain:
            continue
        if found is None:
            at = next((k for k in range(len(full) - len(plain) + 1)
                       if full[k : k + len(plain)] == plain), None)  # fmt: skip
            if at is None:
                return None
            found = (full[:at], full[at + len(plain) :])
        elif full != found[0] + plain + found[1]:
            return None
    if found is None:  # no probe has ids of its own: it is known only if nothing is added
        return ([], []) if not tok.encode("").ids else None
    return found


def _proven_split(step: dict[str, Any]) -> bool:
    return (
        step.get("type") == "Split"
        and (step.get("pattern") or {}).get("Regex") in PROVEN_PATTERNS.values()
        and step.get("behavior") == "Isolated"
        and not step.get("invert")
    )


def cut_rule(spec: dict[str, Any]) -> tuple[Optional[bytes], str]:
    """(cut_at, why) for a tokenizer.json's content (as the library serialises it)."""
    if spec.get("normalizer") is not None:
        return NOWHERE, f"never cut: it has a normalizer ({spec['normalizer'].get('type')})"
    pre = spec.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers") if pre.get("type") == "Sequence" else [pre]
    if not steps or not any(s.get("type") == "ByteLevel" for s in steps):
        return NOWHERE, f"never cut: its pre-tokenizer is not ByteLevel ({pre.get('type')})"
    for step in steps:
        if step.get("type") == "ByteLevel":
            if step.get("add_prefix_space"):
                return NOWHERE, "never cut: its ByteLevel pre-tokenizer adds a prefix space"
        elif not _proven_split(step):
            return NOWHERE, f"never cut: its pre-tokenizer has a {step.get('type')} step"
    # The first step sees the raw text and must split it with a proven pattern: ByteLevel
    # without its regex splits nothing (BPE would run across the whole text), and a Split
    # after it sees byte-mapped text ("\n" is then "Ċ", a letter), where no proof holds.
    first = steps[0]
    if not (
        _proven_split(first) or first.get("type") == "ByteLevel" and first.get("use_regex", True)
    ):
        return NOWHERE, "never cut: its first pre-tokenizer step does not split the text"
    model = spec.get("model") or {}
    if model.get("type") != "BPE" or model.get("dropout"):
        return NOWHERE, "never cut: its model is not a BPE without dropout"
    for added in spec.get("added_tokens") or []:
        if "\n" in added.get("content", "") or added.get("lstrip"):
            return NOWHERE, f"never cut: added token {added.get('content')!r} may cover a cut"
    return CUT_AT, "after a newline between ASCII text and a letter or digit (ByteLevel BPE)"


class HfTokenizer(Tokenizer):
    """A tokenizer.json: each document's ids are `tok.encode(doc).ids`, the library's
    default (add_special_tokens=True), or `tok.encode(doc, add_special_tokens=False).ids`
    with `add_special_tokens=False`.

    Text is encoded in segments with add_special_tokens=False (the post-processor's
    template, a BOS/EOS around every encode call, would otherwise land at every segment
    boundary); what the template puts around one sequence is found once (special_ids)
    and written by the pipeline at each document's start and end (document_specials).
    Neither stops the library from matching added tokens in the text: a string such as
    "<|endoftext|>" or "</s>" written in the corpus becomes that token's single id (the
    library's behaviour, unlike tokenizer=tiktoken, where it is ordinary text). So a
    corpus can mark document ends with the eot string itself.

    `eot` names the end-of-text token's string (meta.pkl's eot / eot_id); it is never
    guessed, and must be in the vocabulary.
    """

    def __init__(self, path: str, eot: Optional[str] = None,
                 add_special_tokens: bool = True) -> None:  # fmt: skip
        _library()  # fail first, with the install hint, if the library is missing
        given = path
        if eot is not None and not isinstance(eot, str):
            raise UserError(
                f"tokenizer.eot={eot!r}: give the end-of-text token's text, not an id, "
                """e.g. 'tokenizer.eot="<|endoftext|>"'"""
            )
        if not isinstance(add_special_tokens, bool):
            raise UserError(
                f"tokenizer.add_special_tokens={add_special_tokens}: use true (each "
                "document as tok.encode(doc) gives it, the library's default) or false"
            )
        self.add_special_tokens = add_special_tokens
        file = Path(str(path)).expanduser().resolve()
        if file.is_dir():
            hint = " (it has a tokenizer.json)" if (file / "tokenizer.json").is_file() else ""
            raise UserError(
                f"tokenizer.path={given}: is a folder{hint}; give the tokenizer.json file itself"
            )
        if not file.exists():
            raise UserError(f"tokenizer.path={given}: no such file; give a local tokenizer.json")
        data = read_tokenizer_file(file, f"tokenizer.path={given}", MAX_JSON_BYTES,
                                   "a tokenizer.json (Llama 3's is 9 MB)")  # fmt: skip
        self.path = str(file)
        self.sha256 = hashlib.sha256(data).hexdigest()
        self.eot = eot
        tok = _load(given, data)
        ids = list(tok.get_vocab(with_added_tokens=True).values())
        ids += list(tok.get_added_tokens_decoder())
        self._max_id = max(ids, default=0)
        _check_dense(given, tok, self._max_id, len(set(ids)))
        with _lock:
            _cache[self._key()] = tok
        self._tok: Any = tok
        spec = json.loads(tok.to_str())
        self.cut_at, self.cuts = cut_rule(spec)
        template = special_ids(tok)  # what tok.encode(text) adds around a text
        # a template's ids are not checked by the library against the vocabulary: one
        # beyond it would be written past vocab_size (and its text is None)
        unknown = [i for i in sum(template or ([], []), []) if tok.id_to_token(i) is None]
        if unknown and add_special_tokens:
            raise UserError(
                f"tokenizer.path={given}: its post-processor adds the id {unknown[0]:,}, which "
                "is not in its vocabulary; fix the ids in its post_processor, or use "
                "tokenizer.add_special_tokens=false"
            )
        if unknown:
            template = ([], [])  # not added: nothing to describe
        if template is None and add_special_tokens:
            raise UserError(
                f"tokenizer.path={given}: its post-processor does more than put special "
                "tokens around a text, so they cannot be added per document; use "
                "tokenizer.add_special_tokens=false"
            )
        self.template = template or ([], [])
        before, after = (np.array(ids, dtype=np.uint32) for ids in self.template)
        self._specials = (before, after)
        decoder = spec.get("decoder") or {}
        self.decoder = decoder.get("type")
        steps = (decoder.get("decoders") or []) if self.decoder == "Sequence" else [decoder]
        # the decoder turns <0xNN> tokens into bytes (ByteFallback, alone or in a Sequence)
        self.byte_fallback = any(step.get("type") == "ByteFallback" for step in steps)
        self._raw: Optional[list[bytes]] = None  # ByteLevel decoder: each id's bytes
        self.eot_id: Optional[int] = None
        if eot is not None:
            self.eot_id = tok.token_to_id(eot)
            if self.eot_id is None:
                raise UserError(f"tokenizer.eot={eot!r}: not in the vocabulary of {given}; "
                                f"{self._added_hint(tok)}")  # fmt: skip

    @staticmethod
    def _added_hint(tok) -> str:
        added = sorted(
            tok.get_added_tokens_decoder().items(), key=lambda kv: (not kv[1].special, kv[0])
        )
        if not added:
            return "it has no special or added tokens (set tokenizer.eot=null)"
        names = ", ".join(repr(t.content) for _, t in added[:8])
        more = f" and {len(added) - 8} more" if len(added) > 8 else ""
        return f"its special/added tokens are {names}{more}"

    def _key(self) -> tuple[str, str]:
        return (self.path, self.sha256)

    def _hf(self):
        """The loaded tokenizer: once per process, kept out of the pickled state."""
        if self._tok is None:
            with _lock:
                self._tok = _cache.get(self._key())
            if self._tok is None:
                tok = _load(self.path, self._read_checked())
                with _lock:
                    self._tok = _cache.setdefault(self._key(), tok)
        return self._tok

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_tok": None, "_raw": None}  # each worker loads its own

    @property
    def max_id(self) -> int:
        # added tokens may sit beyond the model's vocabulary, and get_vocab_size() counts
        # tokens rather than giving the largest id: both can be wrong for the dtype
        return self._max_id

    @property
    def vocab_size(self) -> int:
        return self._max_id + 1

    def encode(self, text: str) -> np.ndarray:
        tok = self._hf()
        with native_panics(self._regex_failed):  # in a worker too: a UserError reaches the driver
            ids = tok.encode(text, add_special_tokens=False).ids
        return np.array(ids, dtype=np.uint32)

    def _regex_failed(self, reason: str) -> UserError:
        # Oniguruma gives up on a regex that backtracks too much ("retry-limit-in-match
        # over"), and the library panics instead of raising
        return UserError(
            f"tokenizer.path={self.path}: the tokenizer's regex failed on the text ({reason}); "
            "its pre-tokenizer's Split pattern backtracks too much on this corpus (nested "
            "repetition such as (a+)+): fix that regex in the file, or use another tokenizer"
        )

    def encode_pieces(self, pieces: Iterable[str]) -> Iterator[np.ndarray]:
        return encode_at_cuts(self.encode, pieces, bool(self.cut_at), MIN_SEGMENT)

    def document_specials(self) -> tuple[np.ndarray, np.ndarray]:
        return self._specials if self.add_special_tokens else super().document_specials()

    def per_document(self) -> Optional[str]:
        """For the summary: what is added around each document, when the template adds
        anything (None otherwise)."""
        tok = self._hf()
        before, after = ([tok.id_to_token(i) for i in ids] for ids in self.template)
        if not before and not after:
            return None
        what = " and ".join(
            f"{' '.join(t)} {where}" for t, where in ((before, "before"), (after, "after")) if t
        )
        if self.add_special_tokens:
            off = "tokenizer.add_special_tokens=false: none"
            return f"adds {what} each document, as its encode() does ({off})"
        return f"adds nothing (tokenizer.add_special_tokens=false; encode() adds {what})"

    def decode(self, ids: Iterable[int]) -> str:
        return self._hf().decode([int(i) for i in ids], skip_special_tokens=False)

    def _raw_bytes(self) -> list[bytes]:
        """For a ByteLevel decoder: each id's bytes, as the decoder joins them before it
        reads them as UTF-8 (b"" for an id with no token)."""
        if self._raw is None:
            tok, table = self._hf(), byte_of_char()
            tokens = (tok.id_to_token(i) for i in range(self.vocab_size))
            self._raw = [b"" if t is None else byte_level_bytes(t, table) for t in tokens]
        return self._raw

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        """A ByteLevel decoder's own bytes, before it reads them as UTF-8: runs of ids
        concatenate exactly (decode() makes a cut inside a character U+FFFD). Other
        decoders: decode()'s text, as UTF-8."""
        if self.decoder != "ByteLevel":
            return super().decode_bytes(ids)
        raw = self._raw_bytes()
        return b"".join([raw[int(i)] for i in ids])

    def token_bytes(self) -> np.ndarray:
        """Each id's raw bytes (nanochat's measure: len(decode_single_token_bytes(id))),
        0 for special tokens. A ByteLevel decoder: the bytes its characters stand for, so
        a token holding part of a character counts that part, and the ids of a text sum to
        its UTF-8 bytes. Any other decoder: the UTF-8 bytes it writes for the token between
        two others (decode([a, id, a]) less decode([a, a]), `a` a letter's token; so a
        "▁" a decoder drops at the start of a text counts its space), a <0xNN> token of a
        ByteFallback decoder its one byte; with no letter to put around it, the token
        decoded alone."""
        specials = self.special_ids()
        out = np.zeros(self.vocab_size, dtype=np.int32)
        if self.decoder == "ByteLevel":
            for i, b in enumerate(self._raw_bytes()):
                out[i] = 0 if i in specials else len(b)
            return out
        tok = self._hf()
        ids = [i for i in range(self.vocab_size)
               if i not in specials and tok.id_to_token(i) is not None]  # fmt: skip
        anchor = self._anchor()
        if anchor is None:
            texts, base = tok.decode_batch([[i] for i in ids], skip_special_tokens=False), 0
        else:
            texts = tok.decode_batch([[anchor, i, anchor] for i in ids], skip_special_tokens=False)
            base = len(tok.decode([anchor, anchor], skip_special_tokens=False).encode("utf-8"))
        for i, text in zip(ids, texts):
            if self.byte_fallback and BYTE_FALLBACK.fullmatch(tok.id_to_token(i)):
                out[i] = 1
            else:
                out[i] = max(len(text.encode("utf-8")) - base, 0)
        return out

    def _anchor(self) -> Optional[int]:
        """A letter's token that decodes to that letter alone (not an added token), to
        decode others after it (None: the vocabulary has none)."""
        tok = self._hf()
        added = tok.get_added_tokens_decoder()
        for letter in "aeoxAEOX":
            i = tok.token_to_id(letter)
            if i is not None and i not in added and tok.decode([i]) == letter:
                return i
        return None

    def special_ids(self) -> set[int]:
        return {i for i, t in self._hf().get_added_tokens_decoder().items() if t.special}

    def meta(self) -> dict[str, Any]:
        itos = self._itos()
        stoi = sample_stoi(itos, lambda c: self.encode(c).tolist())
        return {"vocab_size": self.vocab_size, **self.describe(), "itos": itos, "stoi": stoi}

    def _itos(self) -> dict[int, str]:
        """Each token's text, so that nanoGPT's sample.py (''.join(itos[i] for i in ids))
        reads right: a token is decoded after an anchor letter and the anchor's text is
        taken off, so a word's leading space survives decoders that drop it at the start
        (Metaspace). A token that is part of a UTF-8 character reads as "\\ufffd"."""
        tok = self._hf()
        added = {i: t.content for i, t in tok.get_added_tokens_decoder().items()}
        anchor = self._anchor()
        prefix = "" if anchor is None else tok.decode([anchor])
        itos = {}
        for i in range(self.vocab_size):
            if i in added:
                itos[i] = added[i]
            elif tok.id_to_token(i) is not None:
                text = tok.decode([anchor, i]) if anchor is not None else None
                if text is not None and text.startswith(prefix):
                    itos[i] = text[len(prefix) :]
                else:
                    itos[i] = tok.decode([i])
        return itos

    def files(self) -> dict[str, bytes]:
        """The tokenizer.json, kept beside the ids (KEPT): the folder then loads where its
        original's path means nothing."""
        return {KEPT: self._read_checked()}

    def _read_checked(self) -> bytes:
        """The file again (in a worker, at the commit): the very one checked at the start."""
        data = read_tokenizer_file(Path(self.path), f"tokenizer.path={self.path}",
                                   MAX_JSON_BYTES, "a tokenizer.json")  # fmt: skip
        if hashlib.sha256(data).hexdigest() != self.sha256:
            raise UserError(f"tokenizer.path={self.path}: the file changed during the run; "
                            "run again once it is settled")  # fmt: skip
        return data

    def restore(self, description: dict[str, Any], folder: Optional[Path] = None) -> None:
        """Rebuilt for a folder: only the very tokenizer.json it was made with will do."""
        if description.get("sha256") != self.sha256:
            raise UserError(
                f"tokenizer.path={self.path}: not the tokenizer.json the folder was made with "
                "(its sha256 differs from the manifest's); put that file back there"
            )

    def describe(self) -> dict[str, Any]:
        tok = self._hf()
        special = {
            t.content: i for i, t in sorted(tok.get_added_tokens_decoder().items()) if t.special
        }
        return {
            "kind": "hf",
            "path": self.path,
            "sha256": self.sha256,
            "file": KEPT,
            "eot": self.eot,
            "eot_id": self.eot_id,
            "vocab_size": self.vocab_size,
            "special_tokens": special,
            "cuts": self.cuts,
            "add_special_tokens": self.add_special_tokens,
            "document_specials": dict(zip(("before", "after"), self.template)),
            "per_document": self.per_document(),
            "tokenizers_version": _library().__version__,
        }
