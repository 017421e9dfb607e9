"""Runs `python -m corpusprep ARGS` (or corpusprep.inspect) for the tests without paying
Python's start-up each time.

Started once per test process (tests/helpers.py), it imports what every run imports
(numpy, Hydra, OmegaConf, tiktoken, corpusprep's driver) and then, for each request, forks:
the child is a fresh process of its own (its own pid, cwd, environment, stdin, stdout and
stderr files, exit code, atexit handlers), which runs the corpusprep module as `-m` does and
exits as a process started from the shell would. The server itself never runs a job, so
nothing one run leaves in memory (caches, Hydra's global state) reaches the next.

What a fork cannot give: a str hash seed of its own (helpers.run_forked starts two
servers per environment, each with its own seed, and alternates them), and modules
already imported cannot be shadowed by files in the working directory. Tests about
start-up itself use a fresh interpreter (tests/test_safety.py's kills, test_install).

Protocol, one JSON line each way on stdin/stdout:
    request  {"module": "corpusprep", "args": [...], "cwd": DIR, "env": {...},
              "stdout": FILE, "stderr": FILE, "timeout": SECONDS}
    reply    {"returncode": CODE, "timed_out": BOOL} (CODE < 0: killed by that signal;
             a run over its timeout is killed by the server, its parent)
"""

from __future__ import annotations

import importlib
import io
import json
import os
import pkgutil
import runpy
import select
import signal
import sys
import time

# what `python -m corpusprep` imports on every run; nothing that reads the environment
# when it is imported (huggingface_hub does: it is left to the runs that need it)
import hydra._internal.config_loader_impl  # noqa: F401
import hydra._internal.core_plugins.basic_launcher  # noqa: F401
import hydra._internal.core_plugins.basic_sweeper  # noqa: F401
import hydra._internal.hydra  # noqa: F401
import numpy  # noqa: F401
import omegaconf  # noqa: F401
import tiktoken  # noqa: F401

import corpusprep

# and corpusprep's own modules, which import their optional libraries only when they run
for _module in pkgutil.walk_packages(corpusprep.__path__, "corpusprep."):
    if _module.name != "corpusprep.__main__":
        importlib.import_module(_module.name)


# the text streams a process gets for files or pipes, as this interpreter made its own
_STDIO = {fd: (stream.encoding, stream.errors) for fd, stream in
            ((0, sys.stdin), (1, sys.stdout), (2, sys.stderr))}  # fmt: skip


def _child(request: dict) -> None:
    """In the forked process: become `python -m MODULE ARGS` started in request's cwd."""
    # signal dispositions: the server's are those of a fresh interpreter (it sets none)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, key in ((1, "stdout"), (2, "stderr")):
        out = os.open(request[key], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(out, fd)
        os.close(out)
    os.close(null)
    # block-buffered stdout, line-buffered stderr, the encodings this interpreter chose
    sys.stdin, sys.stdout, sys.stderr = (
        io.TextIOWrapper(io.FileIO(fd, "r" if fd == 0 else "w", closefd=False),
                         encoding=_STDIO[fd][0], errors=_STDIO[fd][1],
                         line_buffering=fd == 2)
        for fd in (0, 1, 2)
    )  # fmt: skip
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
    sys.argv = [request["module"], *request["args"]]
    if not getattr(sys.flags, "safe_path", False):  # -P and PYTHONSAFEPATH: Python 3.11+
        sys.path[0] = os.getcwd()  # -m puts the working directory first
    sys.modules.pop(request["module"], None)  # -m runs it fresh, as __main__
    runpy.run_module(request["module"], run_name="__main__", alter_sys=True)


def _wait(pid: int, timeout: float) -> tuple[int, bool]:
    """The child's exit code, killing it (we are its parent: the pid is still ours) if it
    runs longer than `timeout` seconds; and whether it was killed."""
    if not hasattr(os, "pidfd_open"):  # before Linux 5.3: look every 10 ms
        deadline = time.monotonic() + timeout
        while not (done := os.waitpid(pid, os.WNOHANG))[0] and time.monotonic() < deadline:
            time.sleep(0.01)
        if not done[0]:
            os.kill(pid, signal.SIGKILL)  # not reaped yet: still our child's pid
            done = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(done[1]), time.monotonic() >= deadline
    pidfd = os.pidfd_open(pid)
    try:
        killed = not select.select([pidfd], [], [], timeout)[0]
        if killed:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), killed
    finally:
        os.close(pidfd)


def main() -> None:
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            sys.stdin.close()  # the requests are the server's, not the run's
            _child(request)
            return  # exit as a process does: atexit handlers, flushed streams, code 0
        code, killed = _wait(pid, request["timeout"])
        print(json.dumps({"returncode": code, "timed_out": killed}), flush=True)


if __name__ == "__main__":
    main()
