"""Helpers for tests that run the real command line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run_cli(*args: str, cwd: Path, env: dict | None = None, timeout: float = 300,
            wrap: list[str] | None = None):  # fmt: skip
    """`python -m corpusprep ARGS` in a fresh process, as a user runs it (`wrap`: a command
    prefix, e.g. to enter a test network namespace)."""
    full_env = {**os.environ, **(env or {})}
    # a bare checkout (not installed) still runs: put the repo first on the path
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), full_env.get("PYTHONPATH")]))
    return subprocess.run(
        [*(wrap or []), sys.executable, "-m", "corpusprep", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


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
