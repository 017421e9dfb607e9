"""ruff check, ruff format --check and mypy are part of the test command (and so of CI)."""

import importlib.util
import subprocess
import sys
import venv
import zipfile

import pytest
from helpers import REPO, fresh_copy


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


def test_a_plugin_is_type_checked_against_the_installed_package(tmp_path):
    """The wheel marks its types (PEP 561's py.typed): a plugin's own mypy reads them from
    the installed package, as it would from site-packages, and catches a misuse."""
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed: pip install '.[test]'")
    source, wheels, env = tmp_path / "source", tmp_path / "wheels", tmp_path / "env"
    fresh_copy(source)  # pip builds in the tree it is given: not in this checkout
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(source)],
        capture_output=True, text=True,
    )  # fmt: skip
    if r.returncode != 0:
        pytest.skip(f"cannot build a wheel here: {r.stderr.strip()[-200:]}")
    venv.create(env)  # an environment of its own, without pip: the wheel unpacked into it
    (site,) = env.glob("lib/python*/site-packages")
    (wheel,) = wheels.glob("corpusprep-*.whl")
    zipfile.ZipFile(wheel).extractall(site)
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        "import corpusprep\n\n"
        "folder: str = corpusprep.load('data/my')\n"  # a PreparedDataset, not a str
    )
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--follow-imports=silent",
         "--python-executable", str(env / "bin" / "python"), str(plugin)],
        cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    said = r.stdout + r.stderr
    assert "py.typed" not in said, said  # found, and read as typed
    assert 'expression has type "PreparedDataset", variable has type "str"' in said, said
    assert r.returncode == 1


def test_ci_runs_exactly_the_readmes_test_command():
    """.ci/run ends with the README's test command, word for word (slow tests included)."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    command = next(line.strip() for line in readme.splitlines()
                   if line.strip().startswith("pip install '.[test]'"))  # fmt: skip
    assert "--runslow" in command
    ci = [line for line in (REPO / ".ci" / "run").read_text().splitlines() if line.strip()]
    assert ci[-1] == command


def test_the_readme_says_the_docs_examples_are_among_the_slow_tests():
    """Found by a newcomer's attack: tests/test_docs.py (every example of the pages, over a
    hundred tests) is marked slow, but the README listed what `python -m pytest` skips
    without it, so an edit to the docs looked tested by the everyday suite."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    said = readme.split("Without `--runslow`", 1)[1].split("\n\n", 1)[0]
    assert "pytest.mark.slow" in (REPO / "tests" / "test_docs.py").read_text(encoding="utf-8")
    assert "tests/test_docs.py" in " ".join(said.split()), said
