"""nanoGPT's layout, as it is: train.bin, val.bin (and the document index, if any)."""

from __future__ import annotations

from typing import Any

from corpusprep.exporters import Exporter, Streams
from corpusprep.writer import OutputWriter


class NanoGPTExporter(Exporter):
    def export(self, streams: Streams, out: OutputWriter) -> dict[str, int]:
        files = {"train.bin": streams.train, "val.bin": streams.val,
                 "train.docs.bin": streams.train_docs,
                 "val.docs.bin": streams.val_docs}  # fmt: skip
        return {name: path.stat().st_size for name, path in files.items() if path is not None}

    def describe(self) -> dict[str, Any]:
        return {"kind": "nanogpt"}
