"""Sources say where the text comes from. Each one is a class in its own module here,
with a config file of the same name in conf/source/. A source never tokenizes."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from corpusprep.errors import UserError


class Source(ABC):
    @abstractmethod
    def local_path(self, progress: bool = True) -> Path:
        """A local file holding the corpus's bytes (a download lands in the cache first)."""

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """Where the text came from, for the manifest (path or URL; sha256 is added later)."""


def check_text_file(path: Path, how_to_fix: str) -> int:
    """The size of a readable, non-empty regular file, or a UserError saying what is wrong."""
    if not path.exists():
        raise UserError(f"{path}: no such file; {how_to_fix}")
    if path.is_dir():
        raise UserError(f"{path}: is a directory, not a text file; {how_to_fix}")
    if not os.access(path, os.R_OK):
        raise UserError(f"{path}: permission denied; make it readable or copy it elsewhere")
    size = path.stat().st_size
    if size == 0:
        raise UserError(f"{path}: the file is empty; there is nothing to tokenize")
    return size
