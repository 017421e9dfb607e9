"""SentencePiece (tokenizer=sentencepiece): a `.model` file (Llama 2 / Mistral v1 style,
byte fallback), or one trained on the corpus as llama2.c's `train_vocab` does.

pip install 'corpusprep[sentencepiece]'. The ids are sentencepiece's own: every document
is encoded whole by `SentencePieceProcessor.encode` (a text cut anywhere would get a
second dummy-prefix "▁"), with `<s>` before it as llama2.c's pretokenize does
(`tokenizer.add_bos`). Documents run in parallel; one long text is a single call.

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
import time
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

import numpy as np

from corpusprep.errors import UserError
from corpusprep.sample import Sample, SampleRule, sample_rule
from corpusprep.tokenizers import NOWHERE, TRAINED, Tokenizer, read_kept, sample_stoi

FILE = "tokenizer.model"
MISSING = "tokenizer=sentencepiece needs sentencepiece: pip install 'corpusprep[sentencepiece]'"
# llama2.c's train_vocab, but lossless (remove_extra_whitespaces=False, as Llama 2's own)
TRAINING = dict(model_type="bpe", self_test_sample_size=0, character_coverage=1.0,
                split_digits=True, allow_whitespace_only_pieces=True, byte_fallback=True,
                unk_surface=r" \342\201\207 ", normalization_rule_name="identity",
                remove_extra_whitespaces=False, max_sentence_length=1 << 16,
                minloglevel=2)  # fmt: skip
_cache: dict[str, Any] = {}  # one processor per process and model


class SentencePieceTokenizer(Tokenizer):
    cut_at = NOWHERE  # documents are encoded whole
    keeps_files = True

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
        self.rule = sample_rule(train_chars, max_doc_chars, seed)  # checked now
        self.add_bos = add_bos
        self.requested_size = vocab_size
        self.model: Optional[bytes] = None  # the serialized model
        self.given = str(Path(model).expanduser().resolve()) if model else None
        self.trained: dict[str, Any] = {}
        if self.given:
            if not Path(self.given).is_file():  # not a device or a FIFO either
                raise UserError(f"tokenizer.model={model}: no such file")
            self._set(read_kept(Path(self.given).parent, Path(self.given).name, None))

    def _set(self, model: bytes) -> None:
        self.model = model
        self.sha256 = hashlib.sha256(model).hexdigest()
        try:
            self._sp()
        except RuntimeError as e:  # not a model file
            self.model = None
            raise UserError(f"tokenizer.model={self.given or FILE}: not a SentencePiece model "
                            f"({str(e).splitlines()[0][:120]})") from None  # fmt: skip

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
        if self.needs_fit:
            return {"trainer": "sentencepiece", "version": _version()}
        return {"kind": "sentencepiece", "sha256": self.sha256, "add_bos": self.add_bos}

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
            raise UserError(f"tokenizer=sentencepiece: training failed: "
                            f"{str(e).splitlines()[0][:200]}; try another "
                            "tokenizer.vocab_size") from None  # fmt: skip
        self._set(written.getvalue())
        self.trained = {"trainer": "sentencepiece", "trainer_version": _version(),
                        "sample_chars": sum(map(len, lines)), "sample_units": len(lines),
                        "train_seconds": round(time.perf_counter() - started, 3)}  # fmt: skip

    # --- encoding -------------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        return self.requested_size if self.model is None else self._sp().get_piece_size()

    @property
    def eot_id(self) -> Optional[int]:
        return None  # documents are marked by <s> (document_specials), not separated

    def encode(self, text: str) -> np.ndarray:
        return np.array(self._sp().encode(text), dtype=np.uint32)

    def encode_pieces(self, pieces: Iterable[str]) -> Iterator[np.ndarray]:
        yield self.encode("".join(pieces))  # whole: a cut would add a dummy prefix

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
                       unk_id=sp.unk_id(), **self.trained)  # fmt: skip
            if self.given:  # rebuilt from out_dir's copy: the path need not exist then
                out.update(model=self.given, external=["model"])
        return out

    def restore(self, description: dict[str, Any], folder: Optional[Path] = None) -> None:
        data = read_kept(folder, FILE, str(description.get("sha256")))
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
