"""A sweep's jobs as Hydra's launchers run them, guarded: a job whose folder cannot be made
(a full disk, a file in its way) or whose process is killed (the OOM killer) is one line
and a failed row of the sweep's table (corpusprep.sweep), and the sweep goes on, where it
was a traceback that ended the sweep with no table. Hydra gives no hook there, so the
launchers' own functions are wrapped, in the driver and in their workers: the basic
launcher's run_job, joblib's execute_job and launch, submitit's launch and its job."""

from __future__ import annotations

import errno
import functools
import os
import re
import sys
from dataclasses import dataclass
from typing import Any, Callable

from omegaconf import DictConfig

from corpusprep.sweep import AGAIN

# job number -> why its folder could not be made (the basic launcher runs jobs in this
# process; the joblib and submitit launchers' workers send it back as the job's return
# value, an _Unmade)
UNMADE: dict[int, str] = {}


def guard_launchers() -> None:
    """Guard this process's launchers (the driver's, or a worker's). Hydra's run_job makes
    each job's folder before the job runs, outside corpusprep's run: on a full disk that was
    Hydra's OSError traceback, which ended the sweep with no table. It is one line now, the
    job counts as failed, and the sweep goes on. (A job's own errors never get here: run_job
    keeps them in its JobReturn.)"""
    from hydra.core import utils
    from hydra.core.utils import JobReturn, JobStatus

    from corpusprep.errors import escape_controls
    from corpusprep.writer import room_for

    run_job = utils.run_job
    if getattr(run_job, "_corpusprep_guard", False):
        _guard_launchers(run_job)
        return

    def run_job_or_say_why(*, config: DictConfig, **kw: Any) -> JobReturn:
        try:
            return run_job(config=config, **kw)
        except OSError as e:
            sweep = os.path.abspath(str(config.hydra.sweep.dir))
            failed = os.path.abspath(os.fsdecode(e.filename)) if e.filename else ""
            if not (failed + os.sep).startswith(sweep + os.sep):  # not the job's folder made
                raise
            unmade = _Unmade(config.hydra.job.num, f"its folder could not be made ({e.strerror})")
            UNMADE[unmade.job] = unmade.reason
            if e.errno in (errno.EEXIST, errno.ENOTDIR):
                fix = "a file is in its way: move it, or choose another hydra.sweep.dir"
            elif e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
                fix = f"{room_for(e.errno)} and {AGAIN}"
            else:
                fix = "make the sweep folder writable, or choose another hydra.sweep.dir"
            where = escape_controls(os.fsdecode(e.filename))
            print(f"corpusprep: error: {where}: cannot make the job's folder ({e.strerror}); "
                  f"{fix}", file=sys.stderr)  # fmt: skip
            # COMPLETED: the sweeper reads each job's return value, which would raise the
            # error again; the sweep's table counts the job failed (it left no record)
            return JobReturn(overrides=list(config.hydra.overrides.task),
                             status=JobStatus.COMPLETED, _return_value=unmade)  # fmt: skip

    run_job_or_say_why._corpusprep_guard = True  # type: ignore[attr-defined]
    # the launcher's module holds its own reference, and Hydra's plugin scan runs that
    # module again (taking utils' one then): both are replaced
    utils.run_job = run_job_or_say_why
    _guard_launchers(run_job_or_say_why)


@dataclass(frozen=True)
class _Unmade:
    """The return value of a job whose folder could not be made: why, for the table."""

    job: int
    reason: str


JOBLIB = "hydra_plugins.hydra_joblib_launcher"
JOBLIB_CORE = f"{JOBLIB}._core"
SUBMITIT = "hydra_plugins.hydra_submitit_launcher.submitit_launcher"
# the joblib launcher's own execute_job (run in its workers) and launch (in the driver);
# the submitit launchers' launch (in the driver)
_JOBLIB_EXECUTE: list[Callable[..., Any]] = []
_JOBLIB_LAUNCH: list[Callable[..., Any]] = []
_SUBMITIT_LAUNCH: list[Callable[..., Any]] = []


def _guard_launchers(guarded: Callable[..., Any]) -> None:
    """The launchers' own references to run_job: the basic launcher's, and those of the
    joblib and submitit launchers, whose jobs run (and make their folders) in worker
    processes: the job each sends them is one that guards the worker's run_job first."""
    for name in ("hydra._internal.core_plugins.basic_launcher", JOBLIB_CORE, SUBMITIT):
        module = sys.modules.get(name)
        if module is not None:
            module.run_job = guarded  # type: ignore[attr-defined]
    core = sys.modules.get(JOBLIB_CORE)
    if core is not None and core.execute_job is not _joblib_job:  # type: ignore[attr-defined]
        _JOBLIB_EXECUTE[:] = [core.execute_job]  # type: ignore[attr-defined]
        core.execute_job = _joblib_job  # type: ignore[attr-defined]
    if core is not None and core.launch is not _joblib_launch:  # type: ignore[attr-defined]
        _JOBLIB_LAUNCH[:] = [core.launch]  # type: ignore[attr-defined]
        core.launch = _joblib_launch  # type: ignore[attr-defined]
    submitit = sys.modules.get(SUBMITIT)
    launcher = getattr(submitit, "BaseSubmititLauncher", None)
    if launcher is not None and launcher.launch is not _submitit_launch:
        _SUBMITIT_LAUNCH[:] = [launcher.launch]
        launcher.launch = _submitit_launch


def _joblib_job(*args: Any, **kw: Any) -> Any:
    """The joblib launcher's execute_job, in its worker (sent by name): run_job guarded."""
    import importlib

    importlib.import_module(JOBLIB_CORE)
    guard_launchers()
    return _JOBLIB_EXECUTE[0](*args, **kw)


def _joblib_launch(*args: Any, **kw: Any) -> Any:
    """The joblib launcher's launch, in the driver. A worker process that dies (the OOM
    killer) breaks loky's pool, which raised TerminatedWorkerError out of the sweep: it is
    one line, and the jobs of this batch that left no record are failed rows."""
    from joblib.externals.loky.process_executor import TerminatedWorkerError

    try:
        return _kept_unmade(_JOBLIB_LAUNCH[0](*args, **kw))
    except TerminatedWorkerError as e:
        codes = re.search(r"exit codes of the workers are \{([^}]*)\}", str(e))
        how = f"{codes.group(1)}; " if codes else ""
        print(f"corpusprep: error: a worker process of the sweep died ({how}out of memory?); "
              f"the jobs it ran are failed rows; {AGAIN}", file=sys.stderr)  # fmt: skip
        jobs = kw["job_overrides"] if "job_overrides" in kw else args[1]
        return _no_results(len(jobs))


def _submitit_launch(self: Any, *args: Any, **kw: Any) -> Any:
    """The submitit launchers' launch, in the driver. submitit pickles the launcher itself
    as each job: it goes as a subclass whose call guards the worker's run_job first. A job
    that ends without a result (killed, crashed) raised out of the sweep when the launch
    waited for it: it is one line and a failed row, and the launch waits for the others."""
    from submitit.core import core
    from submitit.local import local

    plain, results, subprocess = type(self), core.Job.results, local.subprocess
    self.__class__ = _guarded_submitit(plain)
    core.Job.results = _results_or_say_why(results)  # type: ignore[method-assign]
    local.subprocess = _QuietControllers()  # type: ignore[assignment]
    try:
        returns = _SUBMITIT_LAUNCH[0](self, *args, **kw)
    finally:
        self.__class__ = plain
        core.Job.results = results  # type: ignore[method-assign]
        local.subprocess = subprocess
    return _kept_unmade(returns)


class _QuietControllers:
    """The subprocess module as submitit's local executor sees it while a sweep launches:
    each job's controller starts as corpusprep._submitit_controller, which is submitit's
    own but says nothing of a Ctrl-C (corpusprep's one line does)."""

    CONTROLLER = "submitit.local._local"

    def __getattr__(self, name: str) -> Any:
        import subprocess

        return getattr(subprocess, name)

    def Popen(self, command: Any, *args: Any, **kw: Any) -> Any:  # noqa: N802 (its name)
        import subprocess

        quiet = "corpusprep._submitit_controller"
        if isinstance(command, list) and command[1:3] == ["-m", self.CONTROLLER]:
            command = [command[0], "-m", quiet, *command[3:]]
        elif isinstance(command, str):  # (after the launcher's setup commands, in a shell)
            command = command.replace(f" -m {self.CONTROLLER} ", f" -m {quiet} ")
        return subprocess.Popen(command, *args, **kw)


def _results_or_say_why(results: Callable[..., Any]) -> Callable[..., Any]:
    """submitit's Job.results, saying in one line why a job has none (its table row: that
    it left no record)."""
    from submitit.core.utils import FailedJobError, UncompletedJobError

    from corpusprep.errors import escape_controls

    def results_or_say_why(job: Any) -> Any:
        try:
            return results(job)
        except FailedJobError as e:  # an error outside the run (which keeps its own): the
            # last line of the worker's traceback, which submitit puts between ---- lines
            trace = str(e).split("-" * 22)
            said = [line.strip() for line in trace[1 if len(trace) > 1 else 0].splitlines()]
            why = f"failed: {[line for line in said if line][-1][:200]}" if any(said) else "failed"
        except UncompletedJobError as e:  # (FailedJobError's base) no result at all
            state = re.search(r"\(state: ([^)]*)\)", str(e))
            why = (
                f"killed or crashed, submitit's state {state.group(1) if state else 'unknown'}"
                "; out of memory?"
            )
        log = escape_controls(str(job.paths.stderr))
        print(f"corpusprep: error: a job of the sweep ended without a result ({why}); its log "
              f"is {log}; {AGAIN}", file=sys.stderr)  # fmt: skip
        return _no_results(1)

    return results_or_say_why


def _no_results(n: int) -> list[Any]:
    """Returns for jobs that gave none: the sweeper reads each one; the table, built from
    the jobs' records, says which failed."""
    from hydra.core.utils import JobReturn, JobStatus

    return [JobReturn(status=JobStatus.COMPLETED) for _ in range(n)]


@functools.cache
def _guarded_submitit(plain: type) -> type:
    # made here, not importable: cloudpickle sends it by value (its __call__ by name)
    return type(f"Guarded{plain.__name__}", (plain,), {"__call__": _submitit_job})


def _submitit_job(self: Any, *args: Any, **kw: Any) -> Any:
    """A submitit launcher's job, in its worker: run_job guarded, then the job."""
    guard_launchers()
    return super(type(self), self).__call__(*args, **kw)


def _kept_unmade(returns: Any) -> Any:
    """The reason a worker gives for a job whose folder it could not make, kept for the
    table (UNMADE): the jobs' returns, as they are."""
    for done in returns:
        unmade = getattr(done, "_return_value", None)
        if isinstance(unmade, _Unmade):
            UNMADE[unmade.job] = unmade.reason
    return returns
