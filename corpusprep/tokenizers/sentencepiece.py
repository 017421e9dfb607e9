"""SentencePiece (tokenizer=sentencepiece): a `.model` file (Llama 2 / Mistral v1 style,
byte fallback), or one trained on the corpus as llama2.c's `train_vocab` does.

pip install 'corpusprep[sentencepiece]'. The ids are sentencepiece's own
`SentencePieceProcessor.encode` of each text, with `<s>` before each document as
llama2.c's pretokenize does (`tokenizer.add_bos`).

A long text is cut into shards where tokenizer=bpe cuts it (tiktoken.CUT_AT: right after
a "\n" between a printable ASCII character and a letter or digit), so shards end where
the training sample's units do; within a shard, each call into sentencepiece ends after
any "\n", about SEGMENT characters long. The text after a cut is encoded with a "\n"
before it, whose ids (with the dummy prefix's) are then taken off. That gives the ids the
whole text has there, after any "\n", when (cut_rule checks it on each model;
tests/test_sentencepiece_cuts.py on adversarial texts, for each kind of model):

* the model is a BPE whose normalizer is the identity (no character map) and which puts
  its "▁" before a text, not after it: normalizing is then local (with
  remove_extra_whitespaces, only spaces collapse or go, and a "\n" is not a space);
* no piece holds a "\n" with anything else: BPE only makes pieces, so no merge crosses a
  "\n", and each side of it merges as it does alone (in the order of the scores, then of
  positions, the same within a side);
* "▁" and "\n" are known (a piece, or bytes: byte fallback), so no run of unknown
  characters merges across the cut.

Training on lines (as sentencepiece's text input is read) makes no piece with a "\n",
and byte fallback knows every character: a model trained here is cut. A given model that
fails a check encodes each text in one call (correct, but one core per text; the
manifest's tokenizer.cuts says why).

Training (no `tokenizer.model`): llama2.c's settings (BPE, character_coverage 1.0,
split_digits, allow_whitespace_only_pieces, byte_fallback, identity normalisation), but
with remove_extra_whitespaces off as in Meta's Llama 2 model, so decoding gives the text
back exactly (llama2.c's default collapses runs of spaces). It trains on the same bounded,
seeded sample as tokenizer=bpe (corpusprep/sample.py), line by line, as its text input
reads a file. The model is saved in out_dir as tokenizer.model.
"""

from __future__ import annotations

import hashlib
import io
import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

import numpy as np

from corpusprep.errors import UserError, check_path
from corpusprep.sample import Sample, SampleRule, sample_rule
from corpusprep.tokenizers import (
    MAX_TOKENS,
    NOWHERE,
    TRAINED,
    Tokenizer,
    read_kept,
    read_tokenizer_file,
    sample_stoi,
)
from corpusprep.tokenizers.tiktoken import CUT_AT, blocks_at_cuts

MIN_SEGMENT = 1 << 16  # characters gathered before cutting them into calls
# characters per encode call, about: sentencepiece's BPE slows down on long calls (2.5 MB/s
# at 16K characters, 1.3 at 1M, 1.0 at 4M, on one core here)
SEGMENT = 1 << 14

FILE = "tokenizer.model"
MISSING = "tokenizer=sentencepiece needs sentencepiece: pip install 'corpusprep[sentencepiece]'"
# llama2.c's train_vocab, but lossless (remove_extra_whitespaces=False, as Llama 2's own)
TRAINING: dict[str, Any] = dict(model_type="bpe", self_test_sample_size=0, character_coverage=1.0,
                split_digits=True, allow_whitespace_only_pieces=True, byte_fallback=True,
                unk_surface=r" \342\201\207 ", normalization_rule_name="identity",
                remove_extra_whitespaces=False, max_sentence_length=1 << 16,
                minloglevel=2)  # fmt: skip
_cache: dict[Any, Any] = {}  # per process and model: its processor, its tables
# A .model bigger than this is not a vocabulary (Llama 2's is 0.5 MB, Gemma 3's 262,144
# pieces 4.7 MB): sentencepiece takes about 11 times the file's size to load it, and a
# stranger's 47 MB file of 3M pieces took 1.6 GB and 10 s before its meta.pkl was refused
MAX_MODEL_BYTES = 64 << 20


# the trainer's words when the sample gives fewer pieces than asked for
TOO_HIGH = re.compile(r"Vocabulary size too high \(\d+\)\. Please set it to a value <= (\d+)")
TOO_LOW = re.compile(r"Vocabulary size is smaller than required_chars\. \d+ vs (\d+)")


class SentencePieceTokenizer(Tokenizer):
    keeps_files = True
    # before training: what a model trained with TRAINING allows (fit() checks it)
    cut_at: Optional[bytes] = CUT_AT
    cuts = "after a newline between ASCII text and a letter or digit"

    def __init__(
        self,
        model: Optional[str] = None,
        vocab_size: int = 4096,
        train_chars: int = 1_000_000_000,
        max_doc_chars: Optional[int] = 10_000,
        seed: int = 0,
        add_bos: bool = True,
    ) -> None:
        _library()
        if not isinstance(add_bos, bool):
            raise UserError(f"tokenizer.add_bos={add_bos}: use true (<s> before each document, "
                            "as llama2.c) or false")  # fmt: skip
        if not isinstance(vocab_size, int) or isinstance(vocab_size, bool) or vocab_size < 260:
            raise UserError(
                f"tokenizer.vocab_size={vocab_size}: a byte-fallback model needs its 256 byte "
                "pieces and <unk>, <s>, </s>; give 260 or more"
            )
        if vocab_size > MAX_TOKENS:  # (a model of more is refused: before the scan, not after)
            raise UserError(
                f"tokenizer.vocab_size={vocab_size}: more than the {MAX_TOKENS:,} pieces "
                "corpusprep takes; give a smaller one (e.g. 32000)"
            )
        self.rule = sample_rule(train_chars, max_doc_chars, seed)  # checked now
        self.add_bos = add_bos
        self.requested_size = vocab_size
        self.model: Optional[bytes] = None  # the serialized model
        check_path("tokenizer.model", model)
        self.given = str(Path(model).expanduser().resolve()) if model else None
        self.trained: dict[str, Any] = {}
        if self.given:
            given = Path(self.given)
            if not given.exists():
                raise UserError(f"tokenizer.model={model}: no such file")
            if not given.is_file():  # a folder, a FIFO, a device: never read
                raise UserError(f"tokenizer.model={model}: not a regular file; give a .model "
                                "file (sentencepiece's, as spm_train writes it)")  # fmt: skip
            data = read_tokenizer_file(given, f"tokenizer.model={model}", MAX_MODEL_BYTES,
                                       "a .model file (Llama 2's is 0.5 MB)")  # fmt: skip
            if not data:
                raise UserError(f"tokenizer.model={model}: the file is empty; give a .model "
                                "file (sentencepiece's, as spm_train writes it)")  # fmt: skip
            self._set(data)

    def _set(self, model: bytes) -> None:
        self.model = model
        self.sha256 = hashlib.sha256(model).hexdigest()
        try:
            sp = self._sp()
        except RuntimeError:  # not a model file
            self.model = None
            raise UserError(f"tokenizer.model={self.given or FILE}: not a SentencePiece model "
                            "(the tokenizer.model file spm_train or a model's folder gives); "
                            "give one, or tokenizer.model=null to train one") from None  # fmt: skip
        if sp.get_piece_size() > MAX_TOKENS:  # before any table per piece (see MAX_MODEL_BYTES)
            self.model = None
            raise UserError(f"tokenizer.model={self.given or FILE}: {sp.get_piece_size():,} "
                            f"pieces, more than the {MAX_TOKENS:,} corpusprep takes (its "
                            "meta.pkl would be over the 64 MB load() and inspect read); give "
                            "a model with fewer pieces")  # fmt: skip
        pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
        self.cut_at, self.cuts = cut_rule(model_spec(model), pieces,
                                          sp.unk_id() in sp.encode("\n"))  # fmt: skip

    def _sp(self):
        if self.model is None:
            raise RuntimeError("SentencePieceTokenizer: call fit() before encoding")
        sp = _cache.get(self.sha256)
        if sp is None:
            spm = _library()
            sp = _cache[self.sha256] = spm.SentencePieceProcessor(model_proto=self.model)
        return sp

    # --- learning -------------------------------------------------------------------------

    @property
    def needs_fit(self) -> bool:
        return self.model is None

    def sample_rule(self, single: bool) -> Optional[SampleRule]:
        if not self.needs_fit:
            return None
        return replace(self.rule, max_doc_chars=None) if single else self.rule

    def identity(self) -> dict[str, Any]:
        # one that trains is what it trains with, before and after: the up-to-date check
        # asks before training, the manifest records it after
        if self.given is None:
            return {"trainer": "sentencepiece", "version": _version()}
        # the version too: the ids are its encoder's (the cut rule rests on its BPE)
        return {"kind": "sentencepiece", "sha256": self.sha256, "add_bos": self.add_bos,
                "version": _version()}  # fmt: skip

    def fit(self, charset: str, eot: bool = False, sample: Optional[Sample] = None) -> None:
        spm = _library()
        if eot:
            raise UserError(
                "tokenizer=sentencepiece marks each document with <s> (tokenizer.add_bos), "
                "not an end-of-text token; use eot=none"
            )
        # its text input is lines: the sample's pieces, cut at their newlines
        lines = [line for unit in (sample.units if sample else []) for line in unit.split("\n")
                 if line]  # fmt: skip
        if not lines:
            raise UserError("tokenizer=sentencepiece: no text to train on")
        written = io.BytesIO()
        started = time.perf_counter()
        try:
            spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=written,
                                           vocab_size=self.requested_size, num_threads=2,
                                           **TRAINING)  # fmt: skip
        except RuntimeError as e:  # e.g. "Vocabulary size is smaller than required_chars"
            limit = TRAINING["max_sentence_length"]
            # the trainer skips every line over its limit: none left
            if "sentences_.empty()" in str(e) and all(len(x.encode()) > limit for x in lines):
                raise UserError(
                    f"tokenizer=sentencepiece: training failed: every line of the training "
                    f"sample is over the trainer's {limit:,}-byte limit on a sentence, so it "
                    "had nothing to train on (no tokenizer.vocab_size helps); put newlines in "
                    "the text (a sentence or paragraph per line), or use tokenizer=bpe"
                ) from None
            most = TOO_HIGH.search(str(e))  # its words: "set it to a value <= 1742"
            if most:
                raise UserError(
                    f"tokenizer.vocab_size={self.requested_size}: the training sample gives "
                    f"sentencepiece at most {int(most.group(1)):,} pieces; set "
                    f"tokenizer.vocab_size={most.group(1)} or less, or train on more text"
                ) from None
            least = TOO_LOW.search(str(e))  # each character it keeps is a piece of its own
            if least:
                raise UserError(
                    f"tokenizer.vocab_size={self.requested_size}: the training sample has "
                    "more distinct characters than that, and sentencepiece keeps each as a "
                    f"piece; set tokenizer.vocab_size={least.group(1)} or more"
                ) from None
            raise UserError(f"tokenizer=sentencepiece: training failed: "
                            f"{str(e).splitlines()[0][:200]}; try another "
                            "tokenizer.vocab_size") from None  # fmt: skip
        planned = self.cut_at  # the plan cut the corpus before the model existed
        self._set(written.getvalue())
        if self.cut_at != planned:
            raise RuntimeError(f"the trained model is not cut as planned: {self.cuts}")
        self.trained = {"trainer": "sentencepiece", "trainer_version": _version(),
                        "sample_chars": sum(map(len, lines)), "sample_units": len(lines),
                        "train_seconds": round(time.perf_counter() - started, 3)}  # fmt: skip

    # --- encoding -------------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        return self.requested_size if self.model is None else self._sp().get_piece_size()

    @property
    def eot_id(self) -> Optional[int]:  # type: ignore[override]
        return None  # documents are marked by <s> (document_specials), not separated

    def encode(self, text: str) -> np.ndarray:
        return np.array(self._sp().encode(text), dtype=np.uint32)

    def encode_pieces(self, pieces: Iterable[str]) -> Iterator[np.ndarray]:
        return self._segments(pieces, continued=False)

    def encode_continued(self, pieces: Iterable[str]) -> Iterator[np.ndarray]:
        return self._segments(pieces, continued=True)

    def _segments(self, pieces: Iterable[str], continued: bool) -> Iterator[np.ndarray]:
        """The text's ids, in calls of about SEGMENT characters, each ending after a "\n"
        (any "\n": the argument above needs only that; the plan's cuts, CUT_AT, are the
        training sample's too)."""
        if not self.cut_at:
            yield self.encode("".join(pieces))  # no proven cut: the text is encoded whole
            return
        buf = ""
        for piece in pieces:
            buf += piece
            if len(buf) >= MIN_SEGMENT:
                *blocks, buf = _blocks(buf, SEGMENT)
                for block in blocks:
                    yield self._encode(block, continued)
                    continued = True
        for block in _blocks(buf, SEGMENT):
            if block or not continued:
                yield self._encode(block, continued)
                continued = True

    def _encode(self, text: str, continued: bool) -> np.ndarray:
        """The ids of `text`; `continued`: the ids it has after a "\n" in a longer text
        (without the dummy prefix): those of "\n" + text, less those of "\n" alone."""
        if not continued:
            return self.encode(text)
        sp, head = self._sp(), self._newline()
        ids = sp.encode("\n" + text)
        if ids[: len(head)] != head:
            raise RuntimeError("sentencepiece: a newline merged with the text after it")
        return np.array(ids[len(head) :], dtype=np.uint32)

    def _newline(self) -> list[int]:
        """The ids of "\n" alone (with the dummy prefix's), once per process and model."""
        head = _cache.get(("newline", self.sha256))
        if head is None:
            head = _cache[("newline", self.sha256)] = self._sp().encode("\n")
        return head

    def document_specials(self) -> tuple[np.ndarray, np.ndarray]:
        bos = self._sp().bos_id()
        before = [bos] if self.add_bos and bos >= 0 else []
        return np.array(before, dtype=np.uint32), np.zeros(0, dtype=np.uint32)

    @property
    def decoded_prefix(self) -> str:
        """What decode_bytes gives before each encoded text: the dummy prefix's space."""
        sp = self._sp()
        return " " if self.decode_bytes(sp.encode("a")) == b" a" else ""

    def _piece_bytes(self) -> list[bytes]:
        sp = self._sp()
        table = _cache.get(("bytes", self.sha256))
        if table is None:
            table = []
            for i in range(sp.get_piece_size()):
                piece = sp.id_to_piece(i)
                if sp.is_control(i):
                    table.append(b"")
                elif sp.is_byte(i):
                    table.append(bytes([int(piece[3:5], 16)]))
                elif sp.is_unknown(i):
                    table.append(sp.decode([i]).encode("utf-8"))
                else:
                    table.append(piece.replace("\u2581", " ").encode("utf-8"))
            _cache[("bytes", self.sha256)] = table
        return table

    def decode(self, ids: Iterable[int]) -> str:
        return self._sp().decode([int(i) for i in ids])

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        """Each piece's bytes ("▁" is a space; a document's first one is the dummy prefix,
        which decode() drops): runs of ids decode to bytes that concatenate exactly."""
        table = self._piece_bytes()
        return b"".join(table[int(i)] for i in ids)

    def special_ids(self) -> set[int]:
        sp = self._sp()
        return {i for i in range(sp.get_piece_size()) if sp.is_control(i) or sp.is_unknown(i)}

    def token_bytes(self) -> np.ndarray:
        specials = self.special_ids()
        return np.array([0 if i in specials else len(b) for i, b in enumerate(self._piece_bytes())],
                        dtype=np.int32)  # fmt: skip

    # --- what is kept ---------------------------------------------------------------------

    def files(self) -> dict[str, bytes]:
        if self.model is None:
            raise RuntimeError("SentencePieceTokenizer: call fit() first")
        return {FILE: self.model}

    def meta(self) -> dict[str, Any]:
        sp = self._sp()
        itos = {i: b.decode("utf-8", errors="replace") if not sp.is_control(i)
                else sp.id_to_piece(i) for i, b in enumerate(self._piece_bytes())}  # fmt: skip
        stoi = sample_stoi(itos, lambda c: sp.encode(c))
        left_out = ("train_seconds", "trainer_version", "model", "external")  # the same bytes
        described = {k: v for k, v in self.describe().items() if k not in left_out}
        return {**described, "vocab_size": self.vocab_size, "itos": itos, "stoi": stoi}

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": "sentencepiece", "vocab_size": self.vocab_size,
                               "add_bos": self.add_bos}  # fmt: skip
        if self.model is not None:
            sp = self._sp()
            out.update(file=FILE, sha256=self.sha256, bos_id=sp.bos_id(), eos_id=sp.eos_id(),
                       unk_id=sp.unk_id(), cuts=self.cuts, **self.trained)  # fmt: skip
            if self.given:  # rebuilt from out_dir's copy: the path need not exist then
                out.update(model=self.given, external=["model"])
        return out

    def restore(self, description: dict[str, Any], folder: Optional[Path] = None) -> None:
        data = read_kept(folder, FILE, str(description.get("sha256")), MAX_MODEL_BYTES)
        self.trained = {k: description[k] for k in TRAINED if k in description}
        self._set(data)

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__)  # the model's bytes; each worker builds its processor once


def _library():
    try:
        import sentencepiece
    except ImportError:
        raise UserError(MISSING) from None
    return sentencepiece


def _version() -> str:
    return getattr(_library(), "__version__", "unknown")


_NEWLINE = re.compile("\n")


def _blocks(text: str, size: int) -> list[str]:
    """`text` cut right after newlines (any) into blocks of about `size` characters; the
    last one is what follows the last cut (empty if the text ends with a newline)."""
    return blocks_at_cuts(text, size, lambda window: window.rfind("\n") + 1, _NEWLINE)


# --- what the model file says ---------------------------------------------------------
# The few fields of sentencepiece's ModelProto (sentencepiece_model.proto) the cut rule
# needs, read from the wire format: protobuf is not a dependency. Field numbers and the
# proto2 defaults, as the .proto gives them.
# field number -> (name, wire type: 0 varint, 2 length-delimited)
_SPECS = {
    2: {3: ("model_type", 0), 24: ("treat_whitespace_as_suffix", 0)},  # trainer_spec
    3: {2: ("precompiled_charsmap", 2), 6: ("normalization_rule_tsv", 2)},  # normalizer_spec
}
_DEFAULTS = {"model_type": 1, "treat_whitespace_as_suffix": 0, "precompiled_charsmap": b"",
             "normalization_rule_tsv": b""}  # fmt: skip
BPE = 2  # TrainerSpec.ModelType


def model_spec(model: bytes) -> dict[str, Any]:
    """The trainer and normalizer fields cut_rule reads ("malformed" where the wire format
    is not one, or a field comes with another wire type than its own, which protobuf would
    keep aside: then nothing is proven, and the model is never cut)."""
    spec = dict(_DEFAULTS)
    try:
        for field, wire, value in _fields(model):
            if field in _SPECS:
                if wire != 2:
                    raise ValueError(f"field {field} of wire type {wire}")
                for inner, inner_wire, v in _fields(value):
                    name, expected = _SPECS[field].get(inner, (None, inner_wire))
                    if inner_wire != expected:
                        raise ValueError(f"{name} of wire type {inner_wire}")
                    if name is not None:
                        spec[name] = v
    except (IndexError, ValueError):
        return {"malformed": True, **_DEFAULTS}
    return spec


def _fields(data: bytes) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value) of a protobuf message: an int (varint, fixed) or
    bytes (length-delimited)."""
    pos = 0
    value: Any
    while pos < len(data):
        key, pos = _varint(data, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 2:
            size, pos = _varint(data, pos)
            if pos + size > len(data):
                raise ValueError("cut short")
            value, pos = data[pos : pos + size], pos + size
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            if pos + width > len(data):
                raise ValueError("cut short")
            value, pos = int.from_bytes(data[pos : pos + width], "little"), pos + width
        else:
            raise ValueError(f"wire type {wire}")
        yield field, wire, value


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]  # IndexError when cut short
        value |= (byte & 0x7F) << shift
        pos += 1
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def cut_rule(spec: dict[str, Any], pieces: list[str], unknown_newline: bool) -> tuple[bytes, str]:
    """(cut_at, why) for a model: CUT_AT where the module docstring's argument holds.
    `unknown_newline`: "\n" (or the "▁" before it) encodes as the unknown piece."""
    if spec.get("malformed"):
        return NOWHERE, "never cut: its model file's fields could not be read"
    if spec["model_type"] != BPE:
        return NOWHERE, "never cut: not a BPE model"
    if spec["precompiled_charsmap"] or spec["normalization_rule_tsv"]:
        return NOWHERE, "never cut: its normalizer rewrites characters"
    if spec["treat_whitespace_as_suffix"]:
        return NOWHERE, "never cut: it puts its \u2581 after a text"
    if unknown_newline:
        return NOWHERE, "never cut: a newline is unknown to it"
    for piece in pieces:
        if "\n" in piece and piece != "\n":
            return NOWHERE, f"never cut: its piece {piece!r} holds a newline"
    return CUT_AT, "after a newline between ASCII text and a letter or digit"
