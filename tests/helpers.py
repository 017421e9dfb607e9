"""Helpers for tests that run the real command line."""

from __future__ import annotations

import contextlib
import json
import locale
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FAULTS = {"PYTHONPATH": f"{REPO}:{REPO / 'tests'}"}  # tests/fault_tokenizers.py importable

SHIPPED = ("pyproject.toml", "README.md", "conf", "corpusprep", "tests", "bench", "docs", "LICENSE")


def fresh_copy(dest: Path) -> None:
    """The checkout's shipped files, without builds, caches or venvs: what a clean clone
    holds, so that a build or install writes nothing (build/, *.egg-info) into the checkout,
    where a run's compose cache would see an install change while other tests run."""
    dest.mkdir(parents=True, exist_ok=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", ".venv*", "data")
    for name in SHIPPED:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=ignore)
        elif src.is_file():
            shutil.copy2(src, dest / name)
    # corpusprep/data is package data (tiny shakespeare, GPT-2's ranks): copy it back
    shutil.copytree(REPO / "corpusprep" / "data", dest / "corpusprep" / "data",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip


def crash_after_documents(args: list[str], cwd: Path, documents: int = 150) -> list[str]:
    """Run `args` into out_dir=out (cwd/out) with a GPT-2 that kills its process after
    `documents` documents, once: the shards finished before stay, each with its marker.
    Returns the arguments that run it again (same tokenizer, its crash spent): a resume."""
    args = [*args, "tokenizer._target_=fault_tokenizers.CrashLaterTiktokenTokenizer",
            f"+tokenizer.flag={cwd / 'flag'}", f"+tokenizer.after={documents}"]  # fmt: skip
    crash = run_cli(*args, "out_dir=out", cwd=cwd, env=FAULTS)
    assert crash.returncode != 0
    return args


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
    if wrap:
        return _fresh(command, cwd, full_env, timeout)
    return run_forked(list(args), cwd, full_env, timeout)


def _fresh(command: list[str], cwd: Path, env: dict, timeout: float):
    """The command in a fresh interpreter, as a user's shell starts it."""
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


def run_forked(args: list[str], cwd: Path, env: dict, timeout: float = 300,
               module: str = "corpusprep"):  # fmt: skip
    """`python -m MODULE ARGS` with exactly `env`, forked from a CLI server started with
    what decides how an interpreter starts (PYTHON* variables: the import path; the
    locale; HOME: the user site). Two servers take turns for each such environment, each
    with its own str hash seed, so that two runs a test compares differ in it as fresh
    processes would. A relative PYTHONPATH entry gets a fresh interpreter."""
    command = [sys.executable, "-m", module, *args]
    paths = env.get("PYTHONPATH", "").split(os.pathsep)
    if any(p and not os.path.isabs(p) for p in paths):
        return _fresh(command, cwd, env, timeout)
    key = tuple(sorted((k, v) for k, v in env.items()
                       if k.startswith(("PYTHON", "LC_")) or k in ("LANG", "HOME")))  # fmt: skip
    with _servers_lock:
        for dead in [s for s in _servers if not s.busy and s.process.poll() is not None]:
            _servers.remove(dead)
        mine = [s for s in _servers if s.key == key]
        idle = [s for s in mine if not s.busy]
        if len(mine) < SERVERS_PER_KEY or not idle:
            while len(_servers) >= MAX_SERVERS and any(not s.busy for s in _servers):
                oldest = min((s for s in _servers if not s.busy), key=lambda s: s.used)
                _servers.remove(oldest)
                oldest.stop()
            server = _CliServer(key, env)
            _servers.append(server)
        else:
            server = min(idle, key=lambda s: s.used)  # the one that ran the longest ago
        server.busy, server.used = True, time.monotonic()
    try:
        return server.run(command, cwd, env, timeout)
    except BaseException:  # out of step with us, or dead: never used again
        with _servers_lock:
            _servers.remove(server)
        server.stop()
        raise
    finally:
        server.busy = False


SERVERS_PER_KEY = 2
MAX_SERVERS = 4  # kept, least recently used stopped first
_servers: list[_CliServer] = []
_servers_lock = threading.Lock()


class _CliServer:
    """One tests/cli_server.py process."""

    def __init__(self, key: tuple, env: dict) -> None:
        self.key, self.busy, self.used = key, False, 0.0
        seed = env.get("PYTHONHASHSEED") or str(random.randrange(1, 2**32))
        self.process = subprocess.Popen(
            [sys.executable, str(REPO / "tests" / "cli_server.py")], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, env={**env, "PYTHONHASHSEED": seed}, cwd=REPO, bufsize=0,
        )  # fmt: skip

    def run(self, command: list[str], cwd: Path, env: dict, timeout: float):
        with tempfile.TemporaryDirectory() as folder:
            streams = {name: os.path.join(folder, name) for name in ("stdout", "stderr")}
            request = {"module": command[2], "args": command[3:], "cwd": str(cwd), "env": env,
                       "timeout": timeout, **streams}  # fmt: skip
            self.process.stdin.write(json.dumps(request).encode() + b"\n")
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError("the CLI server (tests/cli_server.py) exited")
            reply = json.loads(line)
            # decoded as subprocess.run(text=True) decodes: the locale's encoding, strict
            encoding = locale.getpreferredencoding(False)
            out, err = (Path(streams[n]).read_text(encoding=encoding) for n in streams)
        if reply["timed_out"]:  # killed by the server, as subprocess.run kills
            raise subprocess.TimeoutExpired(command, timeout, output=out, stderr=err)
        return subprocess.CompletedProcess(command, reply["returncode"], out, err)

    def stop(self) -> None:
        """End the server (it exits when its input closes), or kill it by its pid."""
        try:
            self.process.stdin.close()
            self.process.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()


def stop_cli_servers() -> None:
    """Stop this test process's CLI servers (conftest, at the session's end)."""
    with _servers_lock:
        while _servers:
            _servers.pop().stop()


def assert_one_line_error(result, *fragments: str) -> None:
    """A user mistake: exit code 1, one line on stderr naming what is wrong, no traceback."""
    assert result.returncode != 0, result.stdout
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("corpusprep: error: "), result.stderr
    assert not re.search("[\x00-\x1f\x7f-\x9f]", lines[0]), lines[0]  # a terminal's commands
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


def runs_for_each_worker_count(monkeypatch, tmp_path: Path, *overrides: str,
                               workers=(1, 2, 3)) -> list[tuple[dict, dict, dict]]:  # fmt: skip
    """corpusprep.prepare(OVERRIDES) with each worker count, in-process: per count, the
    lengths of the runs the workers were given by pass ({"scan": [...], "encode": [...]},
    as prepare._in_runs made them), the *.bin files made and the manifest."""
    import corpusprep.prepare as prepare_module

    real, runs = prepare_module._in_runs, {"scan": [], "encode": []}

    def recorded(items, count, shard_of):
        made = real(items, count, shard_of)
        runs["scan" if shard_of is prepare_module._itself else "encode"].extend(map(len, made))
        return made

    monkeypatch.setattr(prepare_module, "_in_runs", recorded)
    results = []
    for count in workers:
        out = tmp_path / f"out{count}"
        manifest = prepare_module.prepare(compose(*overrides, f"executor.workers={count}",
                                                  f"out_dir={out}", "quiet=true"))  # fmt: skip
        files = {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*.bin")}
        results.append(({name: list(lengths) for name, lengths in runs.items()}, files, manifest))
        runs["scan"].clear()
        runs["encode"].clear()
    return results


@contextlib.contextmanager
def without_kept_copies(monkeypatch):
    """Tokenizers as they were before they kept a copy: a file given to tokenizer=hf or a tiktoken
    ranks_file is not kept in out_dir (files() is empty, describe() names no copy). For
    tests of the folders those runs made, which read the file where it was."""
    from corpusprep.tokenizers.hf import HfTokenizer
    from corpusprep.tokenizers.tiktoken import TiktokenTokenizer

    with monkeypatch.context() as old:
        for cls in (HfTokenizer, TiktokenTokenizer):
            describe = cls.describe
            old.setattr(cls, "files", lambda self: {})
            old.setattr(cls, "describe", lambda self, d=describe: {
                k: v for k, v in d(self).items() if k != "file"})  # fmt: skip
        yield


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
