"""Shell completion (Hydra's -sc): what `eval "$(corpusprep -sc install=bash)"` installs
completes groups, options and keys in a real bash. Hydra's bash script completes
`python FILE.py` or an installed command, never `python -m MODULE`: installed from
`python -m corpusprep`, it must complete the `corpusprep` command, not `python`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO

BIN = Path(sys.executable).parent


def _env(tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    return env


def _install(tmp_path: Path, *command: str) -> subprocess.CompletedProcess:
    return subprocess.run([*command, "-sc", "install=bash"], cwd=tmp_path, env=_env(tmp_path),
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def _completions(tmp_path: Path, script: str, line: str) -> list[str]:
    """What bash offers after `line` (the cursor at its end), with `script` installed."""
    words = line.split(" ")
    code = (
        f"{script}\n"
        f"COMP_LINE={line!r}; COMP_POINT=${{#COMP_LINE}}; COMP_WORDS=({' '.join(words)}); "
        f"COMP_CWORD={len(words) - 1}; hydra_bash_completion; printf '%s\\n' \"${{COMPREPLY[@]}}\""
    )
    r = subprocess.run(["bash", "-c", code], cwd=tmp_path, env=_env(tmp_path),
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


@pytest.mark.skipif(not shutil.which("bash"), reason="no bash here")
@pytest.mark.skipif(not (BIN / "corpusprep").exists(), reason="corpusprep is not installed")
@pytest.mark.parametrize("how", ["python -m corpusprep", "corpusprep"])
def test_installed_completion_completes_the_corpusprep_command(tmp_path: Path, how: str) -> None:
    command = [sys.executable, "-m", "corpusprep"] if how.startswith("python") else [
        str(BIN / "corpusprep")]  # fmt: skip
    r = _install(tmp_path, *command)
    assert r.returncode == 0 and not r.stderr, r.stderr
    assert r.stdout.rstrip().endswith("hydra_bash_completion corpusprep"), r.stdout[-300:]
    assert _completions(tmp_path, r.stdout, "corpusprep tokenizer=ti") == ["tokenizer=tiktoken"]
    assert "source=files" in _completions(tmp_path, r.stdout, "corpusprep source=")


def test_without_the_command_on_path_installing_says_how_to_get_it(tmp_path: Path) -> None:
    """Installed from `python -m corpusprep` where the `corpusprep` command is not on PATH
    (a --user install whose bin folder is not on it): completion could never run; a
    warning says so, and the script still goes to stdout for eval."""
    env = _env(tmp_path)
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep)
                                  if not (Path(p) / "corpusprep").exists())  # fmt: skip
    r = subprocess.run([sys.executable, "-m", "corpusprep", "-sc", "install=bash"], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0
    assert "hydra_bash_completion corpusprep" in r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("corpusprep: warning: "), r.stderr
    assert "not on PATH" in lines[0]
