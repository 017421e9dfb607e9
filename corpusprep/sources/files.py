"""Many local files: glob patterns (recursive `**` allowed) or paths, taken in sorted order
so the result never depends on the file system's listing order."""

from __future__ import annotations

import glob as globlib
import os
from fnmatch import fnmatch
from pathlib import Path
from typing import Any, Union

from corpusprep.errors import UserError
from corpusprep.formats import InputFile
from corpusprep.sources import Source, input_files


class FilesSource(Source):
    def __init__(
        self,
        glob: Union[str, list[str]],
        exclude: Union[str, list[str], None] = None,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        self.patterns = [glob] if isinstance(glob, str) else list(glob or [])
        self.exclude = [exclude] if isinstance(exclude, str) else list(exclude or [])
        if not self.patterns or not all(self.patterns):
            raise UserError("source.glob is empty: give a pattern, e.g. source.glob='corpus/*.txt'")

    def paths(self) -> list[Path]:
        found: set[str] = set()
        for pattern in self.patterns:
            matches = [
                m for m in globlib.glob(os.path.expanduser(pattern), recursive=True)
                if os.path.isfile(m) and not any(fnmatch(m, x) for x in self.exclude)
            ]  # fmt: skip
            if not matches:
                raise UserError(
                    f"source.glob={pattern!r}: matches no file (from {os.getcwd()}); "
                    "check the pattern, and quote it so the shell leaves it alone"
                )
            found.update(os.path.abspath(m) for m in matches)
        # sorted: the same files always give the same documents in the same order;
        # empty files hold no document and are left out
        return [Path(p) for p in sorted(found) if os.path.getsize(p) > 0]

    def files(self, progress: bool = True) -> list[InputFile]:
        paths = self.paths()
        if not paths:
            raise UserError(f"source.glob={self.patterns}: every matching file is empty")
        return input_files(paths, self.options)

    def describe(self) -> dict[str, Any]:
        return {"kind": "files", "glob": self.patterns, "exclude": self.exclude}
