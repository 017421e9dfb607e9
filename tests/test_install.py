"""A newcomer's machine: a fresh virtualenv, no network, no caches, and the README's
set-up commands exactly as written. (The dependencies come already installed, see
_dependencies_view: the machine's package index lacks some of them.)

The project's files are copied to a scratch folder (what a fresh clone holds), a venv is
made there, and the README's first command (install, then prepare tiny shakespeare) runs in
it through bash, inside a network namespace of its own when the kernel allows one (pip
still reads the machine's local package index; nothing else is reachable) and with every
proxy a dead port on loopback otherwise. No TIKTOKEN_CACHE_DIR, empty caches, pip's cache
off. It must print nanoGPT's 1,003,854 / 111,540 tokens. The same venv (no extras) then
shows a launcher without its extra is one line with the pip command.

The README's second command installs the test extra the same way; running the whole suite
inside the suite would only repeat it, so after the install, pytest collects it (every
test module imports in the fresh install).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO, fresh_copy

# one worker (--dist loadgroup): one fresh venv, shared by the tests; first: minutes
pytestmark = [pytest.mark.xdist_group("install"), pytest.mark.slow]


# what a clean checkout holds (the tests read bench/ and docs/ too)
def _readme_commands() -> tuple[str, str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    found = re.findall(r"^ {4}(pip install .*)$|^(pip install .*)$", text, re.M)
    commands = [a or b for a, b in found]
    install = next(c for c in commands if "python -m corpusprep" in c)
    tests = next(c for c in commands if "[test]" in c)
    return install.strip(), tests.strip()


def _isolated() -> list[str]:
    """A network namespace with only loopback, if unprivileged user namespaces work."""
    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "-rn", "true"], capture_output=True).returncode == 0:
        return [unshare, "-rn"]
    return []


def _dependencies_view(dest: Path, leave_out: tuple[str, ...]) -> Path:
    """This environment's installed packages, as symlinks, without corpusprep (the fresh
    venv installs its own) and without `leave_out` (an extra a test needs missing). The
    machines have no internet and their package index holds only some of corpusprep's
    dependencies, so the fresh venv finds the rest here, already installed, as a user's
    pip would find them on PyPI; nothing of corpusprep comes from here."""
    import sysconfig

    site = Path(sysconfig.get_paths()["purelib"])
    skip = ("corpusprep", "__editable__", "_corpusprep", *leave_out)
    dest.mkdir()
    for entry in site.iterdir():
        if entry.name.startswith(skip) or entry.suffix == ".pth":
            continue
        if entry.name == "hydra_plugins":  # a namespace: leave out its plugins one by one
            (dest / entry.name).mkdir()
            for plugin in entry.iterdir():
                if not plugin.name.startswith(("corpusprep", *leave_out)):
                    (dest / entry.name / plugin.name).symlink_to(plugin)
            continue
        (dest / entry.name).symlink_to(entry)
    return dest


def _newcomer(root: Path, leave_out: tuple[str, ...] = ()) -> tuple[Path, dict]:
    src = root / "corpusprep"
    src.mkdir()
    fresh_copy(src)
    venv = root / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(venv)], check=True, capture_output=True)
    (site,) = venv.glob("lib/python*/site-packages")
    (site / "_dependencies.pth").write_text(f"{_dependencies_view(root / 'deps', leave_out)}\n")
    dead = "http://127.0.0.1:9"
    cleared = ("TIKTOKEN", "CORPUSPREP", "PYTHON", "VIRTUAL_ENV", "HF_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(cleared)}
    # HOME stays: the machine's pip configuration (its package index) is the newcomer's too;
    # every cache is new and empty (corpusprep's under XDG_CACHE_HOME, tiktoken's in TMPDIR)
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", VIRTUAL_ENV=str(venv),
               XDG_CACHE_HOME=str(root / "xdg"), TMPDIR=str(root / "tmp"), PIP_NO_CACHE_DIR="1",
               HTTP_PROXY=dead, HTTPS_PROXY=dead, NO_PROXY="", no_proxy="")  # fmt: skip
    (root / "tmp").mkdir()
    return src, env


@pytest.fixture(scope="module")
def newcomer(tmp_path_factory):
    """A fresh venv whose machine has corpusprep's dependencies but none of its extras'
    launcher plugins (hydra-joblib-launcher)."""
    return _newcomer(tmp_path_factory.mktemp("newcomer"), leave_out=("hydra_joblib_launcher",))


def _bash(command: str, cwd: Path, env: dict, timeout: float = 900):
    return subprocess.run([*_isolated(), "bash", "-c", command], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip


def test_the_readmes_first_command_works_offline_in_a_fresh_venv(newcomer):
    src, env = newcomer
    install, _ = _readme_commands()
    assert install == "pip install . && python -m corpusprep dataset=shakespeare_char"
    r = _bash(install, src, env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "train      1,003,854 tokens" in r.stdout, r.stdout
    assert "val        111,540 tokens" in r.stdout, r.stdout
    out = src / "data" / "shakespeare_char"
    assert (out / "train.bin").stat().st_size == 2 * 1_003_854
    assert (out / "val.bin").stat().st_size == 2 * 111_540
    assert (out / "meta.pkl").is_file()
    assert "Traceback" not in r.stderr
    # the installed package, not the copy's source folder, ran: from anywhere
    r = _bash(f"cd / && python -m corpusprep dataset=shakespeare out_dir={src}/sh quiet=true",
              src, env)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert (src / "sh" / "train.bin").stat().st_size == 2 * 301_966  # GPT-2: no download
    # --help names the reference pages where pip put them (a newcomer has no source folder)
    r = _bash("cd / && python -m corpusprep --help", src, env)
    (keys,) = re.findall(r"option: (\S+/keys\.md);", r.stdout)
    assert "site-packages" in keys and Path(keys).read_text().startswith("# ")


def test_a_launcher_without_its_extra_names_the_pip_command(newcomer):
    src, env = newcomer
    r = _bash("python -m corpusprep -m hydra/launcher=joblib dataset=shakespeare_char "
              "split=0.8,0.9", src, env)  # fmt: skip
    if "No module named corpusprep" in r.stderr:
        pytest.skip("the first command did not install corpusprep (see the test before)")
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 1 and len(lines) == 1, r.stderr
    assert lines[0] == (
        "corpusprep: error: hydra/launcher=joblib: Hydra's joblib launcher is not installed; "
        "pip install 'corpusprep[joblib]'"
    )
    assert not (src / "multirun").exists()


@pytest.mark.slow
def test_the_readmes_test_command_installs_and_collects_offline(tmp_path):
    src, env = _newcomer(tmp_path)
    _, tests = _readme_commands()
    assert tests == "pip install '.[test]' && python -m pytest --runslow"
    r = _bash(f"{tests} --collect-only -q -p no:cacheprovider", src, env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert re.search(r"\d+ tests collected", r.stdout), r.stdout[-2000:]
