"""Many local files: glob patterns (recursive `**` allowed) or paths, taken in sorted order
so the result never depends on the file system's listing order.

Each file is read once, however many paths lead to it: a `**` walk enters each folder
once (glob's own would follow a symlink loop 40 levels deep, and two loops 2**40 times),
and paths that resolve to a file already listed are dropped, with a note on stderr.
"""

from __future__ import annotations

import errno
import glob as globlib
import os
import re
import shlex
import stat
import sys
from collections import deque
from collections.abc import Iterator, Sequence
from fnmatch import fnmatch, translate
from functools import lru_cache
from typing import Any, Optional, Union

from corpusprep._paths import real_paths
from corpusprep.errors import UserError, check_path
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
        check_path("source.glob", glob)
        check_path("source.exclude", exclude)
        self.real: dict[str, str] = {}  # a path the last listing gave: its real path if other
        self.patterns = [glob] if isinstance(glob, str) else list(glob or [])
        self.exclude = [exclude] if isinstance(exclude, str) else list(exclude or [])
        if not self.patterns or not all(self.patterns):
            raise UserError("source.glob is empty: give a pattern, e.g. source.glob='corpus/*.txt'")

    def paths(self) -> list[str]:
        """The absolute paths of the files, sorted, one per file."""
        real: dict[str, Optional[str]] = {}  # each path found: its real path (None: not known)
        skipped = 0  # folders reached again through a symlink
        for pattern in self.patterns:
            pattern = os.path.expanduser(pattern)
            if "**" in pattern.split("/"):  # the walk: regular files, and what is neither
                listed, again, odd = _walk_glob(pattern)
                skipped += again
            else:
                listed, odd = [], []
                for m in globlib.glob(pattern):
                    if os.path.isfile(m):
                        listed.append((m, None))
                    elif not os.path.isdir(m):
                        odd.append(m)
            matches = [(m, r) for m, r in listed if not self._excluded(m)]
            self._refuse_odd([m for m in odd if not self._excluded(m)], pattern)
            folders = [] if listed else sorted(filter(os.path.isdir, globlib.glob(pattern)))
            if folders:
                folder = folders[0]
                wanted = pattern.rstrip("/")  # 'corpus/**' is folders: 'corpus/**/*' files
                wanted += "/*" if wanted.endswith("**") else "/**/*"
                raise UserError(
                    f"source.glob={pattern!r}: matches a folder ({folder}), not files; for "
                    f"the files in it use source.glob='{wanted}' (or the pattern that "
                    "matches them)"
                )
            if listed and not matches:  # the pattern is right: the exclusion took all
                n = len(listed)
                raise UserError(
                    f"source.glob={pattern!r}: matches {n:,} file{'s' if n > 1 else ''}, and "
                    f"source.exclude={self.exclude} leaves out every one; narrow "
                    "source.exclude (or drop it)"
                )
            if not matches:
                raise UserError(
                    f"source.glob={pattern!r}: matches no file (from {os.getcwd()}); "
                    "check the pattern, and quote it so the shell leaves it alone"
                )
            for m, r in matches:
                path = os.path.abspath(m)
                real[path] = real.get(path) or r
        unknown = [p for p, r in real.items() if r is None]
        resolved = dict(zip(unknown, real_paths(unknown)))
        real_of = {p: r if r is not None else resolved[p] for p, r in real.items()}
        # one path per file: its own path if listed, else the first in sorted order
        first: dict[str, str] = {}
        for path in sorted(real_of, key=lambda p: (real_of[p] != p, p)):
            first.setdefault(real_of[path], path)
        dropped = skipped + len(real) - len(first)
        if dropped:
            print(f"corpusprep: note: source.glob: {dropped} path{'s' if dropped > 1 else ''} "
                  "led to files or folders already listed (symlinks); each file is read once",
                  file=sys.stderr)  # fmt: skip
        self.real = {path: real for real, path in first.items() if real != path}  # (few)
        # sorted: the same files always give the same documents in the same order
        return sorted(first.values())

    def files(self, progress: bool = True) -> list[InputFile]:
        # empty files hold no document and are left out
        self.listed = {}
        files = input_files(self.paths(), self.options, skip_empty=True, listed=self.listed)
        if not files:
            raise UserError(f"source.glob={self.patterns}: every matching file is empty")
        return files

    def _refuse_odd(self, odd: list[str], pattern: str) -> None:
        """Matches that are neither files nor folders (a dangling link, a FIFO, a link
        loop): one line naming them, rather than documents missing without a word (a
        folder of links some of whose targets are gone), with a source.exclude that
        leaves them out as pasted in a shell (up to MAX_ADVISED; the exclusions given
        stay in it)."""
        if not odd:
            return
        odd = sorted(odd)
        named = ", ".join(f"{printable(m)} ({_what(m)})" for m in odd[:3])
        more = f" and {len(odd) - 3:,} more" if len(odd) > 3 else ""
        them = "it" if len(odd) == 1 else "them"
        if len(odd) > MAX_ADVISED:
            how = "with patterns in source.exclude"
        else:
            new = [globlib.escape(os.path.abspath(m)) for m in odd]
            how = f"with {exclude_override([*self.exclude, *new])}"
        raise UserError(f"source.glob={pattern!r} matches {named}{more}, not a file to read; "
                        f"remove {them}, or leave {them} out {how}")  # fmt: skip

    def _excluded(self, path: str) -> bool:
        """Whether a pattern of source.exclude matches the path as the glob gave it, without
        its ./ parts, or absolute ('./**/*' lists ./data/x/f: data/x/* and /home/u/data/x/*
        leave it out)."""
        if not self.exclude:
            return False
        forms = {path, os.path.normpath(path), os.path.abspath(path)}
        return any(fnmatch(form, x) for x in self.exclude for form in forms)

    def describe(self) -> dict[str, Any]:
        return {"kind": "files", "glob": self.patterns, "exclude": self.exclude}

    def real_paths(self, paths: Sequence[str]) -> list[str]:
        """As the listing found them (0.19 s for 50,311 files, looked up again): a path it
        gave is its own real path unless `real` says otherwise."""
        # (files() lists each path paths() gave but the empty ones)
        unknown = [p for p in paths if p not in self.listed and p not in self.real]
        found = dict(zip(unknown, super().real_paths(unknown)))
        return [self.real.get(p) or found.get(p) or p for p in paths]


MAX_ADVISED = 20  # paths an advised source.exclude lists; more: patterns are the way


def exclude_override(patterns: list[str]) -> str:
    """source.exclude=[...] holding these patterns, as typed in a shell, on one line: each
    in Hydra's double quotes (a quote, and backslashes before a quote or the end, escaped;
    ${, which OmegaConf would resolve, as [$]{, the same pattern), the whole quoted for the
    shell, control characters as ?."""

    def quoted(text: str) -> str:
        text = printable(text).replace("${", "[$]{")
        text = re.sub(r'(\\*)"', lambda m: m.group(1) * 2 + '\\"', text)
        return '"' + re.sub(r"(\\+)$", lambda m: m.group(1) * 2, text) + '"'

    return shlex.quote(f"source.exclude=[{','.join(map(quoted, patterns))}]")


def printable(path: str) -> str:
    """A path for one line, and a pattern that matches it: each character that is not
    printable (a newline, U+2028, a byte that is not UTF-8 as a lone surrogate) as ?."""
    return "".join(c if c.isprintable() else "?" for c in path)


def _walk_glob(pattern: str) -> tuple[list[tuple[str, Optional[str]]], int, list[str]]:
    """The paths a recursive glob matches (glob's rules: `**` is any run of folders, a
    wildcard skips names starting with "."), each with its real path (None where the
    walk cannot tell it: see `known`), entering each real folder once; how many times
    a folder was reached again (through a symlink) and left alone; and the matches that
    are neither files nor folders (a dangling link, a FIFO)."""
    parts = pattern.split("/")
    fixed = next(i for i, p in enumerate(parts) if globlib.has_magic(p))
    root = "/".join(parts[:fixed]) or ("/" if pattern.startswith("/") else "")
    pats: tuple[str, ...] = ()
    for p in parts[fixed:]:  # "**/**" is "**": one of them keeps the matching linear
        if p and not (p == "**" and pats[-1:] == ("**",)):
            pats += (p,)
    hidden = any(p.startswith(".") for p in pats)  # else hidden folders can match nothing
    paths, again, odd = [], 0, []
    top = root or "."
    seen = {os.path.realpath(top)}
    # a path is made absolute by dropping "name/.." (os.path.abspath): after a link to a
    # folder, not the folder the walk is in; its files' real paths are then the absolute
    # paths' (taken by the caller), not the walk's
    known = os.path.realpath(os.path.abspath(top)) in seen
    todo: deque[tuple[tuple[str, ...], str]] = deque([((), os.path.realpath(top))])
    while todo:  # breadth first: a folder is listed under its shortest path
        rel, real_folder = todo.popleft()
        for entry in _entries(os.path.join(top, *rel)):
            name = (*rel, entry.name)
            if _is_dir(entry):
                if entry.name.startswith(".") and not hidden:
                    continue
                real = os.path.realpath(entry.path)
                if real in seen:
                    again += 1
                    continue
                seen.add(real)
                todo.append((name, real))
            elif not _match(name, pats):
                continue
            elif not _is_file(entry):
                odd.append(os.path.join(root, *name))
            else:
                real = (os.path.realpath(entry.path) if entry.is_symlink()
                        else os.path.join(real_folder, entry.name))  # fmt: skip
                paths.append((os.path.join(root, *name), real if known else None))
    return paths, again, odd


def _entries(folder: str) -> Iterator[os.DirEntry]:
    try:
        with os.scandir(folder) as it:
            yield from sorted(it, key=lambda e: e.name)
    except OSError:  # unreadable: glob leaves it out too
        return


def _what(path: str) -> str:
    """What a path that is neither a file nor a folder is, in a few words."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "a link to nothing" if os.path.islink(path) else "gone"
    except OSError as e:
        return "a link loop" if e.errno == errno.ELOOP else (e.strerror or "unreadable").lower()
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _is_file(entry: os.DirEntry) -> bool:
    try:
        return entry.is_file()  # a regular file, or a link to one (no stat unless a link)
    except OSError:
        return False


def _is_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir()  # follows symlinks, as glob does
    except OSError:
        return False


def _match(names: tuple[str, ...], pats: tuple[str, ...]) -> bool:
    """Whether the path `names` (its parts) matches the pattern's parts `pats`."""
    if not pats:
        return not names
    if pats[0] == "**":  # no folder, or one more (not hidden)
        return _match(names, pats[1:]) or (
            bool(names) and not names[0].startswith(".") and _match(names[1:], pats)
        )
    if not names or not _part(pats[0]).match(names[0]):
        return False
    if names[0].startswith(".") and not pats[0].startswith(".") and globlib.has_magic(pats[0]):
        return False  # a wildcard never matches a hidden name
    return _match(names[1:], pats[1:])


@lru_cache(maxsize=256)
def _part(pat: str) -> re.Pattern:
    return re.compile(translate(pat))
