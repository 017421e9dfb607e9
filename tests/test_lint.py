"""ruff check and ruff format --check are part of the test command (and so of CI)."""

import importlib.util
import subprocess
import sys

import pytest
from helpers import REPO


@pytest.mark.parametrize("args", [["check", "."], ["format", "--check", "."]])
def test_ruff(args):
    if importlib.util.find_spec("ruff") is None:
        pytest.skip("ruff is not installed: pip install '.[test]'")
    r = subprocess.run(
        [sys.executable, "-m", "ruff", *args], cwd=REPO, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stdout + r.stderr
