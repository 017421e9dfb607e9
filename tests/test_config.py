"""Config resolution (Hydra's compose API), --help, the console script, and the wheel."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from helpers import REPO, compose, fresh_copy, run_cli

from corpusprep.config import build
from corpusprep.sources.file import FileSource
from corpusprep.sources.url import UrlSource
from corpusprep.tokenizers.char import CharTokenizer


def test_shakespeare_char_preset():
    cfg = compose("dataset=shakespeare_char")
    assert cfg.name == "shakespeare_char"
    assert cfg.out_dir == "data/shakespeare_char"
    assert cfg.split == 0.9 and cfg.dtype == "auto"
    assert cfg.source.url.endswith("/tinyshakespeare/input.txt")
    assert cfg.source.sha256.startswith("86c4e6aa")
    assert isinstance(build(cfg.source, "source"), UrlSource)
    assert isinstance(build(cfg.tokenizer, "tokenizer"), CharTokenizer)


def test_own_file_names_the_output_after_the_file():
    cfg = compose("source=file", "source.path=corpora/my.books.txt")
    assert cfg.name == "my" and cfg.out_dir == "data/my"
    assert isinstance(build(cfg.source, "source"), FileSource)


def test_url_source_is_named_after_the_url():
    cfg = compose("source=url", 'source.url="https://host/a/b/web.txt?x=1"')  # quoted: has =
    assert cfg.name == "web" and cfg.source.sha256 is None


def test_a_glob_in_the_home_folder_is_named_after_that_folder(monkeypatch, tmp_path):
    """'source.glob="~/*.txt"' reads the home folder's files: it named the run "~", and its
    outputs went to a folder named ~ (data/~), which `rm -r ~` in data/ would not mean."""
    monkeypatch.setenv("HOME", str(tmp_path / "alice"))
    cfg = compose("source=files", 'source.glob="~/*.txt"')
    assert cfg.name == "alice" and cfg.out_dir == "data/alice"


def test_any_key_overrides():
    cfg = compose("dataset=shakespeare_char", "split=0.8", "dtype=uint32", "out_dir=x", "name=n")
    assert (cfg.split, cfg.dtype, cfg.out_dir, cfg.name) == (0.8, "uint32", "x", "n")


def test_cache_dir_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("CORPUSPREP_CACHE_DIR", str(tmp_path))
    cfg = compose("dataset=shakespeare_char")
    assert build(cfg.source, "source").cache_path().parent == tmp_path
    cfg = compose("dataset=shakespeare_char", f"source.cache_dir={tmp_path}/c2")
    assert build(cfg.source, "source").cache_path().parent == tmp_path / "c2"


def test_help_lists_the_groups_and_options(tmp_path):
    r = run_cli("--help", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    for word in (
        "shakespeare, shakespeare_char",
        "source: file, files, hf, url",
        "executor: local",
    ):
        assert word in r.stdout, r.stdout


def test_console_script(tmp_path, seeded_cache):
    script = shutil.which("corpusprep", path=str(Path(sys.executable).parent))
    if script is None:
        pytest.skip("corpusprep is not installed in this environment (pip install .)")
    r = subprocess.run(
        [script, "dataset=shakespeare_char"], cwd=tmp_path, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "data" / "shakespeare_char" / "train.bin").stat().st_size == 2_007_708


def test_the_wheel_ships_the_configs_and_runs_from_anywhere(tmp_path):
    """conf/ ships as corpusprep.conf: the installed package works from any directory."""
    build_dir, source = tmp_path / "build", tmp_path / "source"
    fresh_copy(source)  # pip builds in the tree it is given: not in this checkout
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "-q",
            "-w",
            str(build_dir),
            str(source),
        ],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        pytest.skip(f"cannot build a wheel here: {r.stderr.strip()[-200:]}")
    (wheel,) = build_dir.glob("corpusprep-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for conf in Path(REPO, "conf").rglob("*"):
        if conf.suffix in (".yaml", ".py"):
            assert f"corpusprep/conf/{conf.relative_to(REPO / 'conf').as_posix()}" in names
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "t.txt").write_text("hello wheel\n" * 10)
    env = {**os.environ, "PYTHONPATH": str(site)}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "corpusprep",
            "source=file",
            "source.path=t.txt",
            "--info",
            "searchpath",
        ],
        cwd=tmp_path / "elsewhere",
        env=env,
        capture_output=True,
        text=True,
    )
    assert "pkg://corpusprep.conf" in r.stdout, r.stdout + r.stderr
    r = subprocess.run(
        [sys.executable, "-m", "corpusprep", "source=file", "source.path=t.txt"],
        cwd=tmp_path / "elsewhere",
        env=env,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "elsewhere" / "data" / "t" / "meta.pkl").is_file()
