"""Progress bars: on a terminal only (stderr a tty, quiet=false), never in a log or a pipe,
and never in what a run writes. tqdm is imported only when a bar is shown."""

from __future__ import annotations

import os
import sys
from typing import Any


def shown(quiet: bool) -> bool:
    """Whether bars are drawn: not quiet, and stderr is a terminal."""
    return not quiet and sys.stderr.isatty()


class Bar:
    """`with Bar("merge", total, show) as bar: bar.update(n)`: a bar in bytes (or `unit`)
    that clears itself when done (leave=False); nothing when `show` is false or total 0."""

    def __init__(self, desc: str, total: int, show: bool, unit: str = "B") -> None:
        self._bar: Any = None
        if show and total:  # nothing to count: no bar
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=desc, unit=unit, unit_scale=True, leave=False,
                             dynamic_ncols=True)  # fmt: skip

    def __enter__(self) -> Bar:
        return self

    def __exit__(self, exc_type: Any, *exc: object) -> None:
        if self._bar is not None:
            if exc_type is None:
                self._bar.refresh()  # the finished bar is drawn, however fast the work went
            self._bar.close()

    def update(self, n: int) -> None:
        if self._bar is not None:
            self._bar.update(n)

    def describe(self, desc: str) -> None:
        """Name what the bar counts now (the file being written)."""
        if self._bar is not None:
            self._bar.set_description_str(desc)  # once a file: drawn now

    def note(self, text: str) -> None:
        """Rates and counts after the bar, shown at its next refresh."""
        if self._bar is not None:
            self._bar.set_postfix_str(text, refresh=False)

    @property
    def elapsed(self) -> float:
        return self._bar.format_dict["elapsed"] if self._bar is not None else 0.0


class Clock:
    """`with Clock("train tokenizer", show):` a line that shows the time spent on work
    that reports no progress of its own (rustbpe's training), redrawn every half second."""

    def __init__(self, desc: str, show: bool, note: str = "") -> None:
        self._bar: Any = None
        self._stop: Any = None
        if show:
            import threading

            from tqdm import tqdm

            # its own copy of stderr: native_panics() points fd 2 elsewhere around a call
            # into Rust (a regex of the user's checked on the sample), and the line must go
            # on being redrawn meanwhile
            self._out = _own_stderr()
            self._bar = tqdm(desc=desc, total=None, leave=False, dynamic_ncols=True,
                             bar_format="{desc}: {elapsed}{postfix}", file=self._out)  # fmt: skip
            if note:
                self._bar.set_postfix_str(note, refresh=False)
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._tick, daemon=True)

    def _tick(self) -> None:
        while not self._stop.wait(0.5):
            self._bar.refresh()

    def __enter__(self) -> Clock:
        if self._bar is not None:
            self._bar.refresh()
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._stop.set()
            self._thread.join()
            self._bar.close()
            if self._out is not sys.stderr:
                self._out.close()


def _own_stderr() -> Any:
    """A text stream on a duplicate of stderr's descriptor (stderr itself where it has
    none: a test's captured stream)."""
    try:
        return os.fdopen(os.dup(sys.stderr.fileno()), "w", buffering=1, encoding="utf-8")
    except (AttributeError, OSError, ValueError):
        return sys.stderr
