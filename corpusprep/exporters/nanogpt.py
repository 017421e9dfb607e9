"""nanoGPT's layout, as it is: train.bin, val.bin (and the document index, if any, in
doc_index/)."""

from __future__ import annotations

from typing import Any

from corpusprep.exporters import Exporter, Streams, keep_doc_index
from corpusprep.writer import OutputWriter


class NanoGPTExporter(Exporter):
    copies_ids = False  # its files are the merged ones, renamed

    def export(self, streams: Streams, out: OutputWriter) -> dict[str, int]:
        files = {"train.bin": streams.train, "val.bin": streams.val}
        return {name: path.stat().st_size for name, path in files.items()} | keep_doc_index(
            streams, out
        )

    def describe(self) -> dict[str, Any]:
        return {"kind": "nanogpt"}
