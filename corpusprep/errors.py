"""The exceptions the CLI reports in one line, no traceback: user mistakes, and work that
failed more times than it may be tried."""

from __future__ import annotations

import math
import re
import sys
import threading
from typing import Any, Callable, Optional


class UserError(Exception):
    """A problem the user can fix: the message says what is wrong, where, and what to do."""


def escape_controls(text: str, keep_layout: bool = False) -> str:
    """`text` safe to print, whoever wrote the names in it (a downloaded file's, a Hub
    repo's): every character a terminal acts on (an escape sequence sets its title, fills
    the clipboard, rewrites lines) or that ends a line shown escaped (\\n, \\x1b, \\u2028),
    so an error stays one line; and a lone surrogate (\\ud800: JSON may spell one), which no
    stream can encode. keep_layout=True keeps line ends and tabs: a table's or a summary's
    own."""
    pattern = _CONTROLS_BUT_LAYOUT if keep_layout else _CONTROLS
    return pattern.sub(_escaped, text)


_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
_CONTROLS_BUT_LAYOUT = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def _escaped(match: re.Match) -> str:
    char = match.group()
    if char in _SHORT:
        return _SHORT[char]
    return f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"


_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}  # as Python's repr shows them


SHORTER = " (it got shorter)"  # changed_while_read's `how` for a file cut short


def changed_while_read(name: str, how: str = "") -> UserError:
    """An input written, cut or replaced while the run reads it (`how`: what was seen)."""
    return UserError(f"{name}: the file changed while it was being read{how}; run again")


def given_override(key: str) -> Optional[str]:
    """The command line's last argument that sets `key` (key=, +key=, ++key=), as typed:
    Hydra's parsed overrides hold a job's own value of a sweep (split=0.8 of
    split=0.8,0.9), and numbers as it read them."""
    found = None
    for arg in sys.argv[1:]:
        name, equals, _ = arg.lstrip("+").partition("=")
        if equals and name == key:
            found = arg
    return found


def as_typed(key: str, value: object) -> str:
    """A value Hydra read as a number or boolean, as the command line gave it (1e3, 1_0 and
    5. are read as 1000.0, 10 and 5.0: quoting those would name something else)."""
    typed = str(value).lower() if isinstance(value, bool) else str(value)
    given = (given_override(key) or "").partition("=")[2]
    if given and not set(given) & set("[,\"'"):
        typed = given
    return typed


def check_path(key: str, value: object) -> None:
    """A path (or pattern) setting must be text: Hydra reads source.path=2024 as a number
    and =true as a boolean, which Path() refused with Python's TypeError, naming no key."""
    for item in value if isinstance(value, (list, tuple)) else [value]:
        if isinstance(item, (bool, int, float)):
            typed = as_typed(key, item)
            kind = "boolean" if isinstance(item, bool) else "number"
            raise UserError(f"{key}={typed}: a path, and Hydra reads this as a {kind}; quote "
                            f"it: \"{key}='{typed}'\"")  # fmt: skip


def checked_number(value: object, key: str, whole: bool = True, least: float = 0,
                   above: bool = False, hint: str = "") -> float:  # fmt: skip
    """A number setting's value, or one line naming the key: `whole` numbers only, at
    least `least` (more than it, if `above`). A string that spells one is taken (what
    ${oc.env:...} gives). `hint`: what it means, for the message."""
    number = _as_number(value, whole)
    if number is not None and (number > least if above else number >= least):
        return number
    what = "a whole number" if whole else "a number"
    bound = f"more than {least:g}" if above else f"{least:g} or more"
    raise UserError(f"{key}={value!r}: must be {what}, {bound}{hint}")


def _as_number(value: object, whole: bool) -> float | None:
    if isinstance(value, str):
        try:
            value = int(value) if whole else float(value)
        except ValueError:
            return None
    if isinstance(value, bool) or not isinstance(value, (int,) if whole else (int, float)):
        return None
    if whole:
        return value
    try:
        number = float(value)
    except OverflowError:  # an int of 400 digits
        return None
    return number if math.isfinite(number) else None


class TaskFailed(RuntimeError):
    """A task (a shard) failed more than executor.retries times: a worker killed each time
    (memory, a lost node) rather than a mistake in the input. Reported in one line; the
    shards that finished are kept where a re-run can resume from them."""


# said for a Ctrl-C (or SIGTERM) once a run's outputs were in place (writer.COMMITS)
INTERRUPTED_AFTER_COMMIT = "interrupted after the commit; out_dir holds this run's complete outputs"


def is_interrupt(e: BaseException) -> bool:
    """A Ctrl-C (or SIGTERM), also one whose handler ran while C code called back into
    Python (numpy's fromfile did, once in about 50 interrupted runs): Python then reports
    the C function's result as a SystemError caused by the KeyboardInterrupt."""
    cause = e.__cause__ if isinstance(e, SystemError) else e
    return isinstance(cause, KeyboardInterrupt)


# ... once it finished the commit an earlier run began (writer.FINISHED)
INTERRUPTED_AFTER_FINISHING = (
    "interrupted; out_dir holds the complete outputs of an earlier run, whose commit this "
    "run finished"
)


class StillRunning(Exception):
    """interruptible(): the call had not returned when its time was up."""


def interruptible(call: Callable[[], Any], timeout: Optional[float] = None) -> Any:
    """call() in a daemon thread, waited on from this one. Python acts on a signal only
    between two of its own steps: a long call into a library that lets go of the GIL held
    a Ctrl-C or SIGTERM until it returned, and one whose own timeout restarts with every
    byte (huggingface_hub's download, a server's trickled headers) never ends. Waited on
    here, the signal is acted on at once, and StillRunning is raised after `timeout`
    seconds; the thread ends with the process."""
    answer: dict[str, Any] = {}

    def run() -> None:
        try:
            answer["value"] = call()
        except BaseException as e:  # raised in the caller's thread
            answer["error"] = e

    thread = threading.Thread(target=run, name="corpusprep-wait", daemon=True)
    thread.start()
    thread.join(None if timeout is None else min(timeout, threading.TIMEOUT_MAX))
    if thread.is_alive():
        raise StillRunning()
    if "error" in answer:
        raise answer["error"]
    return answer["value"]
