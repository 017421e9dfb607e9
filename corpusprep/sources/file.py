"""A local text file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from corpusprep.errors import UserError
from corpusprep.sources import Source, check_text_file


class FileSource(Source):
    def __init__(self, path: str) -> None:
        if not path:
            raise UserError("source.path is empty: give the text file, e.g. source.path=my.txt")
        self.path = Path(path).expanduser()

    def local_path(self, progress: bool = True) -> Path:
        check_text_file(self.path, "check source.path")
        return self.path

    def describe(self) -> dict[str, Any]:
        return {"kind": "file", "path": str(self.path.resolve())}
