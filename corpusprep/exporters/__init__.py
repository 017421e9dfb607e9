"""Output formats: what the token streams become on disk. Each is a class in its own
module here, with a config file of the same name in conf/format/ (`format=nanogpt`, the
default). The pipeline always first makes nanoGPT's layout under temporary names in
out_dir: `train.bin` / `val.bin` (flat ids), `train.docs.bin` / `val.docs.bin` (uint64
offsets where documents start, when there are several documents); an exporter turns
those into its own files, written through the same OutputWriter (temporary names,
renamed into place only when the whole run succeeded)."""

from __future__ import annotations

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


class Exporter(ABC):
    @abstractmethod
    def export(self, streams: Streams, out: OutputWriter) -> dict[str, int]:
        """Write this format's files through `out` (out.temp(name) gives a temporary path
        that becomes out_dir/name on commit; out.drop(name) keeps a nanoGPT file out of the
        final folder). Returns {file name: bytes} of what the folder will hold."""

    def describe(self) -> dict[str, Any]:
        return {"kind": type(self).__name__}
