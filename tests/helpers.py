"""Helpers for tests that run the real command line."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run_cli(*args: str, cwd: Path, env: dict | None = None, timeout: float = 300,
            wrap: list[str] | None = None):  # fmt: skip
    """`python -m corpusprep ARGS` in a fresh process, as a user runs it (`wrap`: a command
    prefix, e.g. to enter a test network namespace). The process is forked from a server
    that has done Python's imports once (tests/cli_server.py): the suite runs the CLI
    hundreds of times, and start-up was half of each run."""
    full_env = {**os.environ, **(env or {})}
    # a bare checkout (not installed) still runs: put the repo first on the path
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), full_env.get("PYTHONPATH")]))
    command = [*(wrap or []), sys.executable, "-m", "corpusprep", *args]
    if wrap or not _server_lock.acquire(blocking=False):  # a prefix, or a run in parallel
        return subprocess.run(command, cwd=cwd, env=full_env, capture_output=True, text=True,
                              timeout=timeout)  # fmt: skip
    try:
        return _forked(command, args, cwd, full_env, timeout)
    finally:
        _server_lock.release()


_server_lock = threading.Lock()
_server: subprocess.Popen | None = None
_replies = bytearray()  # what the server said and was not yet read


def _forked(command: list[str], args: tuple, cwd: Path, env: dict, timeout: float):
    global _server
    if _server is None or _server.poll() is not None:
        _server = subprocess.Popen([sys.executable, str(REPO / "tests" / "cli_server.py")],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                   cwd=REPO, bufsize=0)  # fmt: skip
        _replies.clear()
    with tempfile.TemporaryDirectory() as folder:
        streams = {name: os.path.join(folder, name) for name in ("stdout", "stderr")}
        request = {"args": list(args), "cwd": str(cwd), "env": env, **streams}
        _server.stdin.write(json.dumps(request).encode() + b"\n")
        pid = _reply(None)["pid"]
        try:
            code = _reply(timeout)["returncode"]
        except TimeoutError:  # as subprocess.run does: kill the child, say it timed out
            os.kill(pid, signal.SIGKILL)
            _reply(None)
            raise subprocess.TimeoutExpired(command, timeout) from None
        out, err = (Path(streams[n]).read_text(errors="replace") for n in ("stdout", "stderr"))
    return subprocess.CompletedProcess(command, code, out, err)


def _reply(timeout: float | None) -> dict:
    """The server's next JSON line, within `timeout` seconds (None: however long)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while b"\n" not in _replies:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and (left <= 0 or not select.select([_server.stdout], [], [], left)[0]):
            raise TimeoutError
        data = os.read(_server.stdout.fileno(), 4096)
        if not data:
            raise RuntimeError("the CLI server (tests/cli_server.py) exited")
        _replies.extend(data)
    line, _, rest = bytes(_replies).partition(b"\n")
    _replies[:] = rest
    return json.loads(line)


def stop_cli_server() -> None:
    """Stop this test process's CLI server, by its pid (conftest, at the session's end)."""
    global _server
    if _server is not None:
        _server.stdin.close()
        try:
            _server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(_server.pid, signal.SIGKILL)
            _server.wait()
        _server = None


def assert_one_line_error(result, *fragments: str) -> None:
    """A user mistake: exit code 1, one line on stderr naming what is wrong, no traceback."""
    assert result.returncode != 0, result.stdout
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("corpusprep: error: "), result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def compose(*overrides: str):
    """The config `python -m corpusprep OVERRIDES` would run, via Hydra's compose API."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir, initialize_config_module

    from corpusprep._paths import config_path

    cp = config_path()
    init = (
        initialize_config_module(config_module=cp[len("pkg://") :], version_base="1.3")
        if cp.startswith("pkg://")
        else initialize_config_dir(config_dir=cp, version_base="1.3")
    )
    with init:
        return hydra_compose(config_name="config", overrides=list(overrides))


def same_files(a: Path, b: Path, names=("train.bin", "val.bin", "meta.pkl")) -> None:
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


class LocalHTTPServer:
    """An HTTP server on 127.0.0.1 in a thread of the test process: its root URL, how often
    each path was asked for (count), and stop(), which shuts it down and joins the thread.
    `handler_for(server)` returns the request handler class; `host` another loopback
    address (127.0.0.2) plays a second host."""

    def __init__(self, handler_for, host: str = "127.0.0.1") -> None:
        import threading
        from collections import Counter
        from http.server import ThreadingHTTPServer

        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self.host = host
        self._httpd = ThreadingHTTPServer((host, 0), handler_for(self))
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        # poll for shutdown every 50 ms (the default 0.5 s slows every teardown)
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()
        self._stopped = False

    @property
    def root(self) -> str:
        return f"http://{self.host}:{self.port}"

    def count(self, path: str) -> int:
        with self._lock:
            return self.counts[path]

    def hit(self, path: str) -> int:
        """Count a request for path; returns how many there have been, this one included."""
        with self._lock:
            self.counts[path] += 1
            return self.counts[path]

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)
        assert not self._thread.is_alive()
