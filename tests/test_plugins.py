"""A third-party package adds a tokenizer without touching corpusprep: installed here from
tests/example_plugin, then used through the real command line."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest
from helpers import REPO, run_cli

PLUGIN = REPO / "tests" / "example_plugin"


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """pip-installs the example plugin into a folder of its own (not the test environment)."""
    if importlib.util.find_spec("hydra_plugins.corpusprep_searchpath") is None:
        pytest.skip("corpusprep is not installed (pip install .): Hydra cannot see its plugin")
    target = tmp_path_factory.mktemp("site")
    r = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
         str(PLUGIN)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return {"PYTHONPATH": os.pathsep.join([str(REPO), str(target)])}


def test_the_plugin_tokenizer_runs_through_the_cli(tmp_path, installed):
    text = "plugins: ωμέγα 😀\n" * 100
    (tmp_path / "t.txt").write_text(text, encoding="utf-8")
    r = run_cli("source=file", "source.path=t.txt", "tokenizer=example_codepoint", "out_dir=out",
                cwd=tmp_path, env=installed)  # fmt: skip
    assert r.returncode == 0, r.stderr
    ids = np.fromfile(tmp_path / "out" / "train.bin", dtype=np.uint32)  # code points: uint32
    assert ids.tolist() == [ord(c) for c in text[: int(len(text) * 0.9)]]


def test_the_plugin_is_listed_and_typos_still_caught(tmp_path, installed):
    r = run_cli("--help", cwd=tmp_path, env=installed)
    assert "example_codepoint" in r.stdout
    r = run_cli("tokenizer=example_codepont", "source=file", "source.path=x", cwd=tmp_path,
                env=installed)  # fmt: skip
    assert r.returncode == 1 and "example_codepoint" in r.stderr  # offered as a choice


def test_other_hydra_apps_do_not_see_corpusprep_plugins(tmp_path, installed):
    (tmp_path / "app.py").write_text(
        "import hydra\n"
        "@hydra.main(version_base='1.3', config_path=None)\n"
        "def main(cfg):\n    pass\n"
        "main()\n"
    )
    r = subprocess.run([sys.executable, "app.py", "--info", "searchpath"], cwd=tmp_path,
                       capture_output=True, text=True, env={**os.environ, **installed})  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "corpusprep" not in r.stdout
