"""A local file: a text file by default (nanoGPT's case), or JSONL / Parquet, compressed or not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from corpusprep.errors import UserError, check_path
from corpusprep.formats import InputFile
from corpusprep.sources import Source, check_text_file, input_files


class FileSource(Source):
    def __init__(self, path: str, **options: Any) -> None:
        super().__init__(**options)
        check_path("source.path", path)
        if not path:
            raise UserError("source.path is empty: give the text file, e.g. source.path=my.txt")
        self.path = Path(path).expanduser()

    def files(self, progress: bool = True) -> list[InputFile]:
        if self.path.is_dir():  # a folder of texts is source=files' job
            raise UserError(
                f"source.path={self.path}: is a folder; for the files in it use source=files "
                f"'source.glob={self.path}/**/*.txt' (or the pattern that matches them)"
            )
        check_text_file(self.path, "check source.path")
        return input_files([self.path], self.options)

    def describe(self) -> dict[str, Any]:
        return {"kind": "file", "path": str(self.path.resolve())}
