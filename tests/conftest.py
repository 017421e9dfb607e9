"""Shared fixtures: the offline data folder, a seeded download cache, and the real CLI."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

# CLI tests name tests/fault_tokenizers.py's classes in tokenizer._target_: this suite's own
# code, trusted as a plugin would be (corpusprep refuses classes of any other package)
os.environ.setdefault("CORPUSPREP_PLUGIN_PACKAGES", "fault_tokenizers")
_COMPOSE_FOLDER = pytest.StashKey[str]()  # the compose cache folder this process made

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = REPO.parent / "shared" / "data"
SHAKESPEARE_URL = (
    "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
)


def pytest_configure(config: pytest.Config) -> None:
    """The configs CLI runs keep (corpusprep.compose_cache) go to a folder of this test
    session, not the user's ~/.cache (a test that needs an empty one takes the compose_dir
    fixture). Made by the process that starts the session; xdist's workers inherit it."""
    if "CORPUSPREP_COMPOSE_CACHE" not in os.environ:
        folder = tempfile.mkdtemp(prefix="corpusprep-test-compose-")
        config.stash[_COMPOSE_FOLDER] = folder
        os.environ["CORPUSPREP_COMPOSE_CACHE"] = folder


def pytest_unconfigure(config: pytest.Config) -> None:
    """The session's compose folder is removed by the process that made it (also after
    --collect-only, where no session fixture runs)."""
    folder = config.stash.get(_COMPOSE_FOLDER, None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
        del os.environ["CORPUSPREP_COMPOSE_CACHE"]


@pytest.fixture(autouse=True)
def _clear_hydra():
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    yield
    GlobalHydra.instance().clear()


def shared_data_dir() -> Path:
    """../shared/data (byte-identical copies of what users download); skip if absent.
    A function too, for helpers that are not fixtures."""
    if not (SHARED_DATA / "tinyshakespeare" / "input.txt").is_file():
        pytest.skip(f"offline data folder {SHARED_DATA} is absent")
    return SHARED_DATA


@pytest.fixture(scope="session")
def shared_data() -> Path:
    return shared_data_dir()


@pytest.fixture(scope="session")
def shakespeare(shared_data: Path) -> Path:
    return shared_data / "tinyshakespeare" / "input.txt"


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty download cache, used by in-process code and by CLI subprocesses."""
    path = tmp_path / "cache"
    path.mkdir()
    monkeypatch.setenv("CORPUSPREP_CACHE_DIR", str(path))
    return path


@pytest.fixture
def compose_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty folder for the configs runs keep, used in-process and by CLI subprocesses."""
    path = tmp_path / "compose"
    monkeypatch.setenv("CORPUSPREP_COMPOSE_CACHE", str(path))
    return path


@pytest.fixture
def seeded_cache(cache_dir: Path, shakespeare: Path) -> Path:
    """The cache as a first run would leave it: tiny shakespeare under its URL's key."""
    from corpusprep.sources.url import UrlSource

    dest = UrlSource(SHAKESPEARE_URL, cache_dir=str(cache_dir)).cache_path()
    shutil.copyfile(shakespeare, dest)
    return cache_dir


@pytest.fixture
def tiktoken_cache(shared_data: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = shared_data / "tiktoken"
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(path))
    return path


@pytest.fixture
def loopback_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy between the tests and their servers on 127.0.0.1/127.0.0.2; no Hub
    settings from the developer's shell."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                 "HF_TOKEN", "HF_ENDPOINT"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,127.0.0.2,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,127.0.0.2,localhost")


def pytest_addoption(parser):
    parser.addoption(
        "--runslow", action="store_true", help="also run the tests marked slow (as CI does)"
    )


def pytest_collection_modifyitems(config, items):
    """Without --runslow, the slow tests are skipped (the everyday suite stays quick);
    with it, they run first: the workers (pytest-xdist) then share the rest around them,
    instead of one of them finishing a slow test alone at the end."""
    if not config.getoption("--runslow"):
        skip = pytest.mark.skip(reason="slow: run with --runslow (as the README's test command)")
        for item in items:
            if item.get_closest_marker("slow"):
                item.add_marker(skip)
        return
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable


@pytest.fixture(scope="session", autouse=True)
def _cli_server():
    """The servers run_cli forks the CLI from: stopped, by their pids, when the session ends."""
    from helpers import stop_cli_servers

    yield
    stop_cli_servers()


@pytest.fixture
def tmpfs(tmp_path: Path):
    """mount(options): a tmpfs at tmp_path/disk, unmounted at the end (root only)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    where = tmp_path / "disk"
    where.mkdir()
    mounted = []

    def mount(options: str) -> Path:
        verb = ["-o", f"remount,{options}"] if mounted else ["-t", "tmpfs", "-o", options, "tmpfs"]
        r = subprocess.run(["mount", *verb, str(where)], capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
        mounted.append(options)
        return where

    try:
        yield mount
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(where)], check=False)
