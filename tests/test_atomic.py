"""A run either completes or leaves the previous outputs byte-for-byte as they were."""

from __future__ import annotations

import os
import shutil
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


def _start_slow_run(tmp_path, workers=1, **popen):
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "corpusprep",
            "source=file",
            "source.path=new.txt",
            "out_dir=out",
            "tokenizer._target_=fault_tokenizers.SlowCharTokenizer",
            f"executor.workers={workers}",
            "shard_bytes=100000",
        ],
        cwd=tmp_path,
        env={**os.environ, **ENV},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )


def _wait_for_temp_files(tmp_path, proc, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = tmp_path / "out"
        if out.is_dir() and any(p.name.endswith(".tmp") for p in out.iterdir()):
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.01)
    raise AssertionError("the run never started writing")


# to_group: a terminal's Ctrl-C goes to the whole process group, the workers too; they
# leave it to the driver, which stops them and says so in one line (found by an attack:
# each worker printed a traceback)
@pytest.mark.parametrize(
    ("sig", "workers", "to_group"),
    [(signal.SIGINT, 1, False), (signal.SIGTERM, 1, False), (signal.SIGINT, 2, True)],
)
def test_an_interrupted_run_cleans_up_and_keeps_the_old_outputs(tmp_path, previous, sig,
                                                                workers, to_group):  # fmt: skip
    proc = _start_slow_run(tmp_path, workers=workers, start_new_session=to_group)
    try:
        _wait_for_temp_files(tmp_path, proc)
        if to_group:
            time.sleep(0.3)  # both workers busy with a shard
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + sig  # what the shell reports for a process the signal ended
    assert err.strip() == (
        "corpusprep: error: interrupted; the previous outputs in out_dir are untouched"
    )
    unchanged(tmp_path, previous)


# found by a newcomer: a first run stopped early said "the previous outputs ... are
# untouched" of a folder that never had any
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_first_run_says_out_dir_has_no_outputs_yet(tmp_path, sig):
    (tmp_path / "new.txt").write_text("a new and different corpus\n" * 20_000)
    proc = _start_slow_run(tmp_path)
    try:
        _wait_for_temp_files(tmp_path, proc)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + sig
    assert err.strip() == ("corpusprep: error: interrupted; out_dir has no outputs yet")
    out = tmp_path / "out"
    assert (
        not [p.name for p in out.iterdir() if not p.name.startswith(".")] if out.exists() else True
    )


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


# Ctrl-C at each step of the end of a run, through the real command line: a patched step
# of corpusprep.writer sends the run a SIGINT, then goes on. BPE (tiktoken) writes shard
# parts into a work folder, which must go too.
_INTERRUPTED_AT = """
import os, signal, sys
import corpusprep.writer as writer
def interrupting(step):
    def interrupted(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        return step(*args, **kwargs)
    return interrupted
for where in os.environ["INTERRUPT_AT"].split(","):  # a Ctrl-C as each of these starts
    owner = writer.OutputWriter if hasattr(writer.OutputWriter, where) else writer
    setattr(owner, where, interrupting(getattr(owner, where)))
from corpusprep.app import main
sys.argv = ["corpusprep", *sys.argv[1:]]
main()
"""

# a Ctrl-C or SIGTERM while Hydra composes the config, which its code turned into an error
# of its own (an attack saw "'NoneType' object has no attribute '_invalidate_flags_cache'"
# and Hydra's traceback as corpusprep's error line, exit 1): the patched loader is hit by
# the signal, then fails as that half-built state did
_INTERRUPTED_COMPOSING = """
import os, signal, sys, time
from hydra._internal.config_loader_impl import ConfigLoaderImpl
def load_configuration(self, *args, **kwargs):
    try:
        os.kill(os.getpid(), int(os.environ["SIGNAL"]))
        time.sleep(5)
    except KeyboardInterrupt:
        raise AttributeError("'NoneType' object has no attribute '_invalidate_flags_cache'")
ConfigLoaderImpl.load_configuration = load_configuration
from corpusprep.app import cli
sys.argv = ["corpusprep", *sys.argv[1:]]
cli()
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_hydra_turns_into_an_error_while_composing_is_said_as_one(tmp_path, sig):
    r = _script(tmp_path, _INTERRUPTED_COMPOSING, SIGNAL=str(int(sig)),
                CORPUSPREP_COMPOSE_CACHE="0")  # fmt: skip
    assert (r.returncode, r.stderr) == (128 + sig, "corpusprep: error: interrupted\n")
    assert not (tmp_path / "out").exists()


NEW_RUN = ("source=file", "source.path=new.txt", "out_dir=out", "tokenizer=tiktoken",
           "shard_bytes=100000")  # fmt: skip


def _script(tmp_path, code: str, *extra: str, **env: str) -> subprocess.CompletedProcess:
    """NEW_RUN (and `extra` arguments) through `code`, a script that patches corpusprep
    and then runs its command line, in a fresh interpreter."""
    return subprocess.run([sys.executable, "-c", code, *NEW_RUN, *extra], cwd=tmp_path,
                          env={**os.environ, **ENV, **env}, capture_output=True, text=True,
                          timeout=120)  # fmt: skip


def _interrupted_at(tmp_path, where: str) -> subprocess.CompletedProcess:
    return _script(tmp_path, _INTERRUPTED_AT, INTERRUPT_AT=where)


def _a_commit_that_failed(tmp_path) -> None:
    """A run whose renames failed (the disk) once its journal was written: its commit is
    left for the next run in the folder to finish."""
    r = _script(tmp_path, _RENAMES_FAIL)
    assert r.returncode != 0 and "Input/output error" in r.stderr
    assert (tmp_path / "out" / ".corpusprep-commit.json").exists()


def _complete_and_alone(out, previous) -> None:
    """out holds the new run's files, each as its manifest says, and nothing else."""
    import json

    from corpusprep.writer import changed_files

    manifest = json.loads((out / "manifest.json").read_text())
    assert changed_files(out, manifest) == []
    assert (out / "train.bin").read_bytes() != previous["train.bin"]
    assert sorted(p.name for p in out.iterdir()) == sorted([*manifest["files"], "manifest.json"])


# write_atomic: the journal; _apply: the renames (the signal arrives in whichever thread
# the kernel picks: a hashing thread is alive); remove_stale_work: the tidying after them
@pytest.mark.parametrize("where", ["write_atomic", "_apply", "remove_stale_work"])
def test_ctrl_c_from_the_journal_on_says_the_new_outputs_are_complete(tmp_path, previous,
                                                                      where):  # fmt: skip
    r = _interrupted_at(tmp_path, where)
    assert r.returncode == 130, r.stderr
    assert r.stderr.strip().splitlines()[-1] == (
        "corpusprep: error: interrupted after the commit; out_dir holds this run's complete outputs"
    )
    _complete_and_alone(tmp_path / "out", previous)
    again = run_cli(*NEW_RUN, cwd=tmp_path)
    assert again.returncode == 0 and "up to date" in again.stdout + again.stderr


# a second Ctrl-C while the first one's tidying runs (abort) waits for it
# (_acquire_lock: the lock file is made and held as one step, never left behind)
@pytest.mark.parametrize("where", ["_acquire_lock", "_seal", "_seal,abort"])
def test_ctrl_c_before_the_journal_leaves_the_previous_outputs(tmp_path, previous, where):
    r = _interrupted_at(tmp_path, where)
    assert r.returncode == 130
    assert r.stderr.strip().splitlines()[-1] == (
        "corpusprep: error: interrupted; the previous outputs in out_dir are untouched"
    )
    unchanged(tmp_path, previous)


_RENAMES_FAIL = """
import errno, os, sys
import corpusprep.writer as writer
def failing_apply(folder, journal):
    raise OSError(errno.EIO, "Input/output error")
writer._apply = failing_apply
from corpusprep.app import main
sys.argv = ["corpusprep", *sys.argv[1:]]
main()
"""


def test_a_commit_whose_renames_fail_is_finished_by_the_next_run(tmp_path, previous):
    """Once its journal is written, a commit's files belong to it: a failure then (the
    disk) keeps them, and the next run in the folder finishes that commit, rather than
    deleting the old files the journal makes obsolete while the old manifest lists them."""
    _a_commit_that_failed(tmp_path)
    again = run_cli(*NEW_RUN, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "up to date" in again.stdout + again.stderr  # the commit it finished is this run's
    _complete_and_alone(tmp_path / "out", previous)


_INTERRUPTED_SUMMARY = """
import os, signal, sys
import corpusprep.app as app
summary = app.summary
def interrupted(*args):
    os.kill(os.getpid(), signal.SIGINT)
    return summary(*args)
app.summary = interrupted
sys.argv = ["corpusprep", *sys.argv[1:]]
app.main()
"""


@pytest.mark.parametrize(
    ("before", "said"),
    [("", "interrupted after the commit; out_dir holds this run's complete outputs"),
     ("a run", "interrupted; out_dir was already up to date and is unchanged"),
     # the run finishes the failed one's commit, then finds the folder up to date
     ("a commit that failed", "interrupted; out_dir holds the complete outputs of an earlier "
      "run, whose commit this run finished")],
)  # fmt: skip
def test_ctrl_c_while_the_summary_prints_says_what_out_dir_holds(tmp_path, previous,
                                                                 before, said):  # fmt: skip
    if before == "a run":
        assert run_cli(*NEW_RUN, cwd=tmp_path).returncode == 0
    if before == "a commit that failed":
        _a_commit_that_failed(tmp_path)
    r = _script(tmp_path, _INTERRUPTED_SUMMARY)
    assert r.returncode == 130
    assert r.stderr.strip().splitlines()[-1] == f"corpusprep: error: {said}"
    _complete_and_alone(tmp_path / "out", previous)


_INTERRUPTED_WRITING_THE_MANIFEST = """
import glob, os, signal, sys
import corpusprep.writer as writer
text = writer.manifest_text
def interrupted(manifest):  # once its temporary file is open
    assert glob.glob(os.path.join(manifest["config"]["out_dir"], ".manifest.json.*.tmp"))
    os.kill(os.getpid(), signal.SIGINT)
    return text(manifest)
writer.manifest_text = interrupted
from corpusprep.app import main
sys.argv = ["corpusprep", *sys.argv[1:]]
main()
"""


def test_ctrl_c_while_the_manifest_is_written_leaves_no_temporary_file(tmp_path, previous):
    """The new manifest's temporary file is the writer's as soon as it exists: an
    interrupt while it is written removes it with the others (found by an attack)."""
    r = _script(tmp_path, _INTERRUPTED_WRITING_THE_MANIFEST)
    assert r.returncode == 130
    assert r.stderr.strip().splitlines()[-1] == (
        "corpusprep: error: interrupted; the previous outputs in out_dir are untouched"
    )
    unchanged(tmp_path, previous)


_INTERRUPTED_IN_C = """
import sys
import corpusprep.prepare as prepare
def merge_parts(*args, **kwargs):  # as Python reports a Ctrl-C handled inside a C call
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt as e:
        raise SystemError("<built-in function fromfile> returned a result with an exception "
                          "set") from e
prepare.merge_parts = merge_parts
from corpusprep.app import main
sys.argv = ["corpusprep", *sys.argv[1:]]
main()
"""


def test_ctrl_c_that_c_code_reports_as_a_system_error_is_an_interrupt(tmp_path, previous):
    """A Ctrl-C handled while C code (numpy's fromfile) called back into Python comes out
    as a SystemError caused by the KeyboardInterrupt: it is said as the interrupt it is,
    not as a bug's traceback (found by an attack, once in about 50 tries)."""
    r = _script(tmp_path, _INTERRUPTED_IN_C)
    assert r.returncode == 130, r.stderr
    assert r.stderr.strip().splitlines() == [
        "corpusprep: error: interrupted; the previous outputs in out_dir are untouched"
    ]
    unchanged(tmp_path, previous)


_INTERRUPTED_AS_WORKERS_FORK = """
import os, signal, sys
# a Ctrl-C that lands while the pool forks its workers: Python runs its handler inside
# os.fork's after-fork callbacks, where an exception is printed as ignored and lost
os.register_at_fork(after_in_parent=lambda: os.kill(os.getpid(), signal.SIGINT))
from corpusprep.app import main
sys.argv = ["corpusprep", *sys.argv[1:]]
main()
"""


def test_ctrl_c_while_the_workers_fork_is_not_lost(tmp_path, previous):
    r = _script(tmp_path, _INTERRUPTED_AS_WORKERS_FORK, "executor.workers=2")
    assert r.returncode == 130, r.stderr
    assert r.stderr.strip().splitlines()[-1] == (
        "corpusprep: error: interrupted; the previous outputs in out_dir are untouched"
    )
    assert "ignored" not in r.stderr
    unchanged(tmp_path, previous)


def test_ctrl_c_while_an_earlier_commit_is_finished_finishes_it_whole(tmp_path, previous):
    """A run first finishes the commit a killed (or failed) run began; a Ctrl-C then waits
    for it: the folder holds that run's outputs, whole, not half old, half new, and the
    message says so (not that the previous outputs are untouched)."""
    _a_commit_that_failed(tmp_path)
    r = _interrupted_at(tmp_path, "recover")
    assert r.returncode == 130
    assert r.stderr.strip().splitlines()[-1] == (
        "corpusprep: error: interrupted; out_dir holds the complete outputs of an earlier "
        "run, whose commit this run finished"
    )
    # the failed run's finished shards stay for a resume until a run commits (by design)
    shutil.rmtree(tmp_path / "out" / ".corpusprep-work")
    _complete_and_alone(tmp_path / "out", previous)
