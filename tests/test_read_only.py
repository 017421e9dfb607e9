"""An out_dir on a read-only disk (a shared dataset volume, a read-only bind mount in a
container): a re-run that finds it up to date says so and exits 0, as anywhere else; one
that would have to write says, in one line, that it cannot."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from helpers import REPO, run_cli

COMMAND = ("source=file", "source.path=in.txt", "out_dir=out")


def _read_only_run(tmp_path, *overrides):
    """The CLI with tmp_path/out mounted read-only, in a mount namespace of its own (gone
    with the process: nothing to unmount); skipped where this user may not make one."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux)")
    out = tmp_path / "out"
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "true"],
                           capture_output=True)  # fmt: skip
    if probe.returncode != 0:
        pytest.skip("this user may not make a mount namespace")
    cli = " ".join([sys.executable, "-m", "corpusprep", *COMMAND, *overrides])
    script = f"mount --bind {out} {out} && mount -o remount,bind,ro {out} && cd {tmp_path} && {cli}"
    return subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )


@pytest.fixture
def finished(tmp_path):
    (tmp_path / "in.txt").write_text("a small corpus of text\n" * 2000)
    r = run_cli(*COMMAND, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    return {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()}


def test_an_up_to_date_folder_on_a_read_only_disk_is_found_up_to_date(tmp_path, finished):
    r = _read_only_run(tmp_path)
    assert r.returncode == 0, r.stderr
    assert "up to date" in r.stdout + r.stderr
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == finished


def test_a_read_only_folder_that_needs_a_new_run_says_so_in_one_line(tmp_path, finished):
    r = _read_only_run(tmp_path, "split=0.8")
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        "corpusprep: error: out_dir=out: not writable; choose another out_dir"
    ]
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == finished


def test_a_folder_with_no_outputs_on_a_read_only_disk_is_refused_before_any_work(tmp_path):
    (tmp_path / "in.txt").write_text("a small corpus of text\n" * 2000)
    (tmp_path / "out").mkdir()
    r = _read_only_run(tmp_path)
    assert r.returncode == 1
    assert (
        r.stderr.strip() == "corpusprep: error: out_dir=out: not writable; choose another out_dir"
    )
