"""Runs `python -m corpusprep ARGS` (or corpusprep.inspect) for the tests without paying
Python's start-up each time.

Started once per test process (tests/helpers.py), it imports what every run imports
(numpy, Hydra, OmegaConf, tiktoken, corpusprep's driver) and then, for each request, forks:
the child is a fresh process of its own (its own pid, cwd, environment, stdin, stdout and
stderr files, exit code, atexit handlers), which runs the corpusprep module as `-m` does and
exits as a process started from the shell would. The server itself never runs a job, so
nothing one run leaves in memory (caches, Hydra's global state) reaches the next.

Protocol, one JSON line each way on stdin/stdout:
    request  {"module": "corpusprep", "args": [...], "cwd": DIR, "env": {...},
              "stdout": FILE, "stderr": FILE}
    replies  {"pid": PID}, then {"returncode": CODE} (negative: killed by that signal)
"""

from __future__ import annotations

import importlib
import io
import json
import os
import pkgutil
import runpy
import sys

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
    # the streams a process gets for files: block-buffered stdout, line-buffered stderr
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8")
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8",
                                  errors="backslashreplace", line_buffering=True)  # fmt: skip
    sys.__stdout__, sys.__stderr__, sys.__stdin__ = sys.stdout, sys.stderr, sys.stdin
    sys.argv = [request["module"], *request["args"]]
    sys.path[0] = os.getcwd()  # -m puts the working directory first
    runpy.run_module(request["module"], run_name="__main__", alter_sys=True)


def main() -> None:
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            sys.stdin.close()  # the requests are the server's, not the run's
            _child(request)
            return  # exit as a process does: atexit handlers, flushed streams, code 0
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}), flush=True)


if __name__ == "__main__":
    main()
