"""ruff check, ruff format --check and mypy are part of the test command (and so of CI)."""

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


def test_mypy_on_the_public_api(tmp_path):
    """The modules users and plugins import (pyproject's [tool.mypy] files) type-check."""
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed: pip install '.[test]'")
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache")],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no issues found in" in r.stdout  # it read the files pyproject names


def test_ci_runs_exactly_the_readmes_test_command():
    """.ci/run ends with the README's test command, word for word (slow tests included)."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    command = next(line.strip() for line in readme.splitlines()
                   if line.strip().startswith("pip install '.[test]'"))  # fmt: skip
    assert "--runslow" in command
    ci = [line for line in (REPO / ".ci" / "run").read_text().splitlines() if line.strip()]
    assert ci[-1] == command
