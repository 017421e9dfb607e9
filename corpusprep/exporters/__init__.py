"""Output formats: what the token streams become on disk. Each is a class in its own
module here, with a config file of the same name in conf/format/ (`format=nanogpt`, the
default). The pipeline always first makes nanoGPT's layout under temporary names in
out_dir: `train.bin` / `val.bin` (flat ids), `train.docs.bin` / `val.docs.bin` (uint64
offsets where documents start, when there are several documents); an exporter turns
those into its own files, written through the same OutputWriter (temporary names,
renamed into place only when the whole run succeeded).

The document index never stays next to the token files: peers' loaders take files by
name (build-nanogpt: every file whose name contains "train" or "val"; llm.c: a glob), and
would read it as tokens. It goes to `doc_index/train.docs.bin` / `doc_index/val.docs.bin`:
a subfolder, whose name holds no split word, that no loader lists or globs into."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from corpusprep.writer import OutputWriter


@dataclass(frozen=True)
class Streams:
    """The finished token streams of a run, in nanoGPT's layout, under temporary names."""

    train: Path
    val: Path
    train_docs: Optional[Path]  # None when the input is one text (no document index)
    val_docs: Optional[Path]
    dtype: str  # uint16 | uint32
    vocab_size: int
    eot_id: Optional[int]
    name: str  # the run's name (for file names such as <name>_train.bin)
    show: bool = False  # progress bars while writing (on a terminal)


DOC_INDEX = "doc_index"  # the document index's subfolder: no split word in its name


def doc_index_name(side: str) -> str:
    """Where a split's document index goes in out_dir (folders made before: {side}.docs.bin)."""
    return f"{DOC_INDEX}/{side}.docs.bin"


def keep_doc_index(streams: Streams, out: OutputWriter) -> dict[str, int]:
    """Move the document index (if any) into doc_index/: {file name: bytes}."""
    produced = {}
    for side in ("train", "val"):
        docs = getattr(streams, f"{side}_docs")
        if docs is not None:
            name = doc_index_name(side)
            kept = out.temp(name)
            os.replace(docs, kept)
            out.drop(f"{side}.docs.bin")
            produced[name] = kept.stat().st_size
    return produced


class Exporter(ABC):
    # whether export() writes the ids again into files of its own (sharded formats), so that
    # for a while the disk holds them one more time (the run's space estimate counts it)
    copies_ids = True
    # the vocabulary size from which the format's own writer stores ids in 32 bits, though
    # they fit uint16: dtype=auto follows it (None: uint16 whenever every id fits)
    wide_from: Optional[int] = None

    def check(self, name: str) -> None:  # noqa: B027 - optional hook
        """Refuse, before any work, a run `name` that would make this format's files
        unreadable or mixed (a UserError naming `name` and a fix)."""

    @abstractmethod
    def export(self, streams: Streams, out: OutputWriter) -> dict[str, int]:
        """Write this format's files through `out` (out.temp(name) gives a temporary path
        that becomes out_dir/name on commit; out.drop(name) keeps a nanoGPT file out of the
        final folder). Returns {file name: bytes} of what the folder will hold."""

    def warn_others(self, names: list[str], name: str) -> None:  # noqa: B027 - optional hook
        """A warning for each of `names` (files in out_dir this run neither writes nor
        removes: the user's) that this format's loaders would read as its own."""

    def describe(self) -> dict[str, Any]:
        return {"kind": type(self).__name__}

    def note(self, dtype: str) -> Optional[str]:
        """One line for the user when the format's usual loaders need something of ids of
        `dtype` (uint16 | uint32) that they do not do as published: the manifest's `note`,
        which the run's summary and inspect print. None: they read these ids as they are."""
        return None
