"""A run either completes or leaves the previous outputs byte-for-byte as they were."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from helpers import REPO, run_cli

TESTS = REPO / "tests"
ENV = {"PYTHONPATH": os.pathsep.join([str(REPO), str(TESTS)])}
OUTPUTS = ("train.bin", "val.bin", "meta.pkl", "manifest.json", "token_bytes.npy")


@pytest.fixture
def previous(tmp_path):
    """A finished run in out/, and a second, different corpus to run over it."""
    (tmp_path / "old.txt").write_text("the old corpus\n" * 200)
    (tmp_path / "new.txt").write_text("a new and different corpus\n" * 20_000)
    r = run_cli("source=file", "source.path=old.txt", "out_dir=out", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    return {name: (tmp_path / "out" / name).read_bytes() for name in OUTPUTS}


def unchanged(tmp_path, previous, temps_allowed=False):
    out = tmp_path / "out"
    assert {n: (out / n).read_bytes() for n in OUTPUTS} == previous
    leftovers = sorted(p.name for p in out.iterdir() if p.name not in OUTPUTS)
    if not temps_allowed:
        assert leftovers == []
    return leftovers


@pytest.mark.parametrize("workers", [1, 2])
def test_a_crash_while_encoding_keeps_the_old_outputs(tmp_path, previous, workers):
    r = run_cli(
        "source=file",
        "source.path=new.txt",
        "out_dir=out",
        "shard_bytes=50000",
        f"executor.workers={workers}",
        "tokenizer._target_=fault_tokenizers.FailingCharTokenizer",
        "+tokenizer.fail_after=2",
        cwd=tmp_path,
        env=ENV,
    )
    assert r.returncode != 0 and "injected failure" in r.stderr
    unchanged(tmp_path, previous)


def _start_slow_run(tmp_path):
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "corpusprep",
            "source=file",
            "source.path=new.txt",
            "out_dir=out",
            "tokenizer._target_=fault_tokenizers.SlowCharTokenizer",
            "executor.workers=1",
        ],
        cwd=tmp_path,
        env={**os.environ, **ENV},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_temp_files(tmp_path, proc, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(p.name.endswith(".tmp") for p in (tmp_path / "out").iterdir()):
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.01)
    raise AssertionError("the run never started writing")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_run_cleans_up_and_keeps_the_old_outputs(tmp_path, previous, sig):
    proc = _start_slow_run(tmp_path)
    try:
        _wait_for_temp_files(tmp_path, proc)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert err.strip() == (
        "corpusprep: error: interrupted; the previous outputs in out_dir are untouched"
    )
    unchanged(tmp_path, previous)


def test_a_killed_run_leaves_only_hidden_temp_files(tmp_path, previous):
    proc = _start_slow_run(tmp_path)
    try:
        _wait_for_temp_files(tmp_path, proc)
        proc.kill()  # SIGKILL: no cleanup possible, but nothing final was touched
        proc.wait(timeout=60)
    finally:
        proc.kill()
    leftovers = unchanged(tmp_path, previous, temps_allowed=True)
    leftovers.remove(".corpusprep.lock")  # a dead holder's: flock died with it
    assert leftovers and all(n.startswith(".") and n.endswith(".tmp") for n in leftovers)


def test_a_good_run_replaces_the_outputs(tmp_path, previous):
    r = run_cli("source=file", "source.path=new.txt", "out_dir=out", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out" / "train.bin").read_bytes() != previous["train.bin"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(OUTPUTS)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full")
@pytest.mark.parametrize("size", [10, 100_000])
def test_an_index_written_to_a_full_disk_is_the_disk_full_error(tmp_path, size):
    """numpy's tofile says only "N requested and M written" on a full disk (or nothing, for
    a small array), an error no one can tell from a bug (a worker's is retried, then a
    traceback); the document indexes and markers are written so that it is the one-line
    disk-full error."""
    import errno

    import numpy as np

    from corpusprep.errors import UserError
    from corpusprep.writer import disk_errors, save_array

    ids = np.arange(size, dtype=np.uint64)
    try:  # what numpy gives: a bare OSError, or for a small array (buffered) nothing at all
        ids.tofile("/dev/full")
    except OSError as bare:
        assert bare.errno is None
    with pytest.raises(OSError) as full:
        save_array(ids, "/dev/full")
    assert full.value.errno == errno.ENOSPC
    full_disk = open("/dev/full", "wb")  # noqa: SIM115 - closed by the with below
    with pytest.raises(UserError, match="disk"), disk_errors(tmp_path), full_disk as f:
        save_array(ids, f)
    save_array(ids, tmp_path / "a.bin")
    assert (tmp_path / "a.bin").read_bytes() == ids.tobytes()


# Ctrl-C pressed while the outputs are renamed into place: the signal waits (blocked) until
# the renames are done, then arrives. The run is complete by then, and must say so.
_INTERRUPT_DURING_COMMIT = """
import os, signal, sys
import corpusprep.writer as writer
apply = writer._apply
def interrupted_apply(*args):
    os.kill(os.getpid(), signal.SIGINT)  # blocked until the renames are done
    return apply(*args)
writer._apply = interrupted_apply
from corpusprep.app import main
sys.argv = ["corpusprep", *sys.argv[1:]]
main()
"""


def test_ctrl_c_during_the_commit_says_the_new_outputs_are_complete(tmp_path, previous):
    r = subprocess.run(
        [sys.executable, "-c", _INTERRUPT_DURING_COMMIT, "source=file", "source.path=new.txt",
         "out_dir=out", "executor.workers=1"],
        cwd=tmp_path, env={**os.environ, **ENV}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 130
    assert r.stderr.strip().splitlines()[-1] == (
        "corpusprep: error: interrupted after the commit; out_dir holds this run's complete outputs"
    )
    out = tmp_path / "out"
    assert (out / "train.bin").read_bytes() != previous["train.bin"]
    # nothing left behind: no temporary file, no work folder, no journal
    assert sorted(p.name for p in out.iterdir()) == sorted(OUTPUTS)
    again = run_cli("source=file", "source.path=new.txt", "out_dir=out", cwd=tmp_path)
    assert again.returncode == 0 and "up to date" in again.stdout + again.stderr
