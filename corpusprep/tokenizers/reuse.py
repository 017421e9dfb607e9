"""Exactly the tokenizer an earlier corpusprep run made or used (tokenizer=reuse
tokenizer.dir=DIR): train a vocabulary on corpus A, then encode B and C with it.

Rebuilt from DIR's manifest.json (JSON; the class it names must be one corpusprep trusts,
as for every config) and the files it learned into (a trained BPE's tokenizer.tiktoken,
checked against the manifest's sha256); never from meta.pkl. Its files are copied into
the new out_dir and its description into the new manifest, so the new folder loads on
its own, wherever DIR goes later. The run's fingerprint holds the tokenizer's sha256.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional

import numpy as np

from corpusprep.errors import UserError
from corpusprep.tokenizers import Tokenizer, restore_recorded


class ReusedTokenizer(Tokenizer):
    def __init__(self, dir: str) -> None:  # noqa: A002 - the config key users write
        from corpusprep.dataset import MAX_MANIFEST_BYTES, check_records, read_json

        folder = Path(str(dir)).expanduser()
        path = folder / "manifest.json"
        missing = UserError(
            f"tokenizer.dir={dir}: not a finished corpusprep output folder (no readable "
            "manifest.json with its tokenizer); give the out_dir of an earlier run"
        )
        if not os.path.lexists(folder):  # run from another folder than the earlier run's
            here = "" if folder.is_absolute() else f" (from {Path.cwd()})"
            raise UserError(
                f"tokenizer.dir={dir}: no such folder{here}; give the out_dir of an earlier run, "
                "from the folder it was made in or in full"
            )
        if folder.is_file() and os.path.lexists(folder.parent / "manifest.json"):  # its train.bin
            raise UserError(f"tokenizer.dir={dir}: a file, not an output folder; give its folder, "
                            f"tokenizer.dir={folder.parent}")  # fmt: skip
        if not os.path.lexists(path):
            raise missing
        # a stranger's folder may hold a FIFO or a huge file there: read_json refuses them
        manifest = read_json(path, MAX_MANIFEST_BYTES)
        if isinstance(manifest, dict):
            check_records(manifest, path)  # a record nested deep: one line, not a traceback
        try:
            node, described = _recorded(manifest, folder)
        except (KeyError, TypeError):
            raise missing from None
        self.dir = str(folder.resolve())
        self.config = node
        self.reused = described
        self.inner = _rebuild(node, described, folder, str(dir))
        self._files = self.inner.files()
        digest = hashlib.sha256(json.dumps(described, sort_keys=True).encode())
        for name in sorted(self._files):
            digest.update(name.encode() + b"\0" + hashlib.sha256(self._files[name]).digest())
        self.sha256 = digest.hexdigest()

    # --- what the pipeline asks: the reused tokenizer's answers ---------------------------

    @property
    def cut_at(self) -> Optional[bytes]:  # type: ignore[override]
        return self.inner.cut_at

    @property
    def fast(self) -> bool:  # type: ignore[override]
        return self.inner.fast

    @property
    def eot_id(self) -> Optional[int]:  # type: ignore[override]
        return self.inner.eot_id

    @property
    def vocab_size(self) -> int:
        return self.inner.vocab_size

    @property
    def max_id(self) -> int:
        return self.inner.max_id

    def encode(self, text: str) -> np.ndarray:
        with self._covering():
            return self.inner.encode(text)

    def encode_pieces(self, pieces: Iterable[str]) -> Iterator[np.ndarray]:
        with self._covering():
            yield from self.inner.encode_pieces(pieces)

    def encode_continued(self, pieces: Iterable[str]) -> Iterator[np.ndarray]:
        with self._covering():
            yield from self.inner.encode_continued(pieces)

    @contextmanager
    def _covering(self) -> Iterator[None]:
        """A char vocabulary without some character of this corpus: one line saying so."""
        try:
            yield
        except KeyError as e:
            raise UserError(
                f"tokenizer.dir={self.dir}: its vocabulary cannot encode this corpus "
                f"({e.args[0] if e.args else e}); reuse a tokenizer that covers every "
                "character (a trained bpe, byte), or tokenizer=char"
            ) from None

    def tokens_for(self, chars: int) -> Optional[int]:
        return self.inner.tokens_for(chars)

    def tokens_about(self, nbytes: int) -> int:
        return self.inner.tokens_about(nbytes)

    def decode(self, ids: Iterable[int]) -> str:
        return self.inner.decode(ids)

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        return self.inner.decode_bytes(ids)

    def document_specials(self) -> tuple[np.ndarray, np.ndarray]:
        return self.inner.document_specials()

    def special_ids(self) -> set[int]:
        return self.inner.special_ids()

    def ids_used(self) -> Optional[int]:
        return None  # fitted on another corpus: counted

    def token_bytes(self) -> np.ndarray:
        return self.inner.token_bytes()

    def files(self) -> dict[str, bytes]:
        return dict(self._files)

    def meta(self) -> Optional[dict[str, Any]]:
        return self.inner.meta()

    def identity(self) -> dict[str, Any]:
        return {"kind": "reuse", "sha256": self.sha256}  # not where DIR is

    def describe(self) -> dict[str, Any]:
        return {"kind": "reuse", "dir": self.dir, "sha256": self.sha256,
                "vocab_size": self.vocab_size, "config": self.config,
                "reused": self.inner.describe()}  # fmt: skip


def kept_names() -> set[str]:
    """The files tokenizers keep in a folder (bpe, sentencepiece, hf, a tiktoken ranks
    file): the only names a manifest's tokenizer.file may give."""
    from corpusprep.tokenizers import bpe, hf, sentencepiece, tiktoken

    return {bpe.FILE, sentencepiece.FILE, hf.KEPT, tiktoken.KEPT}


def _recorded(manifest: dict[str, Any], folder: Optional[Path] = None
              ) -> tuple[dict[str, Any], dict[str, Any]]:  # fmt: skip
    """The tokenizer's config node and description in `folder`'s manifest; through any
    reuse (a folder made with tokenizer=reuse records the tokenizer it reused)."""
    node, described = manifest["config"]["tokenizer"], manifest["tokenizer"]
    while isinstance(described, dict) and described.get("kind") == "reuse":
        node, described = described["config"], described["reused"]
    if not isinstance(node, dict) or not isinstance(described, dict):
        raise TypeError("not a tokenizer record")
    # keys naming a file outside the folder (tokenizer.model=...): its copy in the folder
    # is what restore() reads, so the original need not exist any more
    external = described.get("external") or []
    node = {**node, **dict.fromkeys(k for k in external if isinstance(k, str))}
    # a file the tokenizer was made from: where it was when the folder was made (resolved
    # then), not as typed (relative to wherever load or reuse runs)
    for key in ("path", "ranks_file"):  # (as typed, if it is no longer there)
        recorded = described.get(key)
        if node.get(key) and isinstance(recorded, str) and os.path.exists(recorded):
            node[key] = recorded
    kept = described.get("file")  # the tokenizer's file, which the folder keeps
    if folder is not None and isinstance(kept, str):
        if kept not in kept_names():
            raise UserError(f"{folder / 'manifest.json'}: tokenizer.file={kept!r} is not a "
                            "file a tokenizer keeps; prepare the folder again")  # fmt: skip
        if not os.path.lexists(folder / kept):
            raise UserError(f"{folder / kept}: missing, but the manifest says the folder keeps "
                            "its tokenizer there; prepare the folder again")  # fmt: skip
        if described.get("kind") == "hf" and node.get("path"):
            node["path"] = str(folder / kept)  # restore() checks it against the sha256
    if folder is not None and node.get("ranks_file"):
        # tiktoken reads the file at once: its copy in the folder or the file named, and
        # only the one the folder was made with (its sha256)
        from corpusprep.tokenizers.tiktoken import recorded_ranks_file

        sha256 = described.get("ranks_sha256")
        node["ranks_file"] = recorded_ranks_file(node["ranks_file"], folder, sha256)
    return node, described


def _rebuild(node: dict[str, Any], described: dict[str, Any], folder: Path,
             given: str) -> Tokenizer:  # fmt: skip
    from corpusprep.config import build_recorded

    manifest = folder / "manifest.json"
    # a reuse is unwrapped to what it reused (_recorded): one left is a tampered record
    # (a folder reusing itself recursed until Python gave up)
    if str(node.get("_target_", "")).endswith(ReusedTokenizer.__name__):
        raise UserError(f"{manifest}: its tokenizer record is a reuse without the tokenizer "
                        "it reused; prepare that folder again")  # fmt: skip
    tokenizer = build_recorded(node, manifest)  # trusted classes only, plain values, no ${...}
    restore_recorded(tokenizer, described, folder, manifest)
    recorded = described.get("vocab_size", tokenizer.vocab_size)
    if tokenizer.vocab_size != recorded:
        raise UserError(f"tokenizer.dir={given}: the rebuilt tokenizer has "
                        f"{tokenizer.vocab_size:,} ids, not the {recorded!r} {manifest} "
                        "records; prepare that folder again")  # fmt: skip
    return tokenizer
