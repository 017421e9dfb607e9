"""Shards run as a Slurm job array, submitted with submitit from the machine where
corpusprep runs (a login node). An optional extra: pip install 'corpusprep[slurm]'.

Every compute node must see the same Python environment and out_dir at the same paths
(a shared file system): shards write their parts there, and submitit its logs and
results (in out_dir/.corpusprep-work/.../slurm/<a random name>/<job id>: job ids are
guessable and come again, and submitit unpickles whatever result file it finds under its
job's id). Slurm does not rerun a task that failed:
corpusprep submits the failed shards again (retries), and a re-run of the whole command
after a crash, a timeout or a cancelled job redoes only the shards with no completion
marker. A driver killed outright leaves its array running: the next run in its out_dir
cancels it before submitting its own (SlurmExecutor._take_over).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import redirect_stderr, suppress
from pathlib import Path
from typing import Any, Callable, Optional, Union

from corpusprep._paths import read_regular
from corpusprep.errors import UserError, checked_number, escape_controls
from corpusprep.executors import Executor, R, T, checked_retries

# what sbatch says where no controller answers (beside a `fatal:` line, as for no slurm.conf)
NO_CLUSTER = "Unable to contact slurm controller"
# a task Slurm no longer holds may still have its result file on its way (a shared file
# system's cache): submitit waits this long for one
RESULT_GRACE_SECONDS = 15


class SlurmTaskFailed(RuntimeError):
    """A task that failed on Slurm, said in a line (submitit's errors hold its whole log)."""


def _short(error: Exception, job: Any) -> Exception:
    """submitit's error for a failed task in one line: the exception the task raised (the
    last line of the traceback between submitit's rules of dashes), and where its log is."""
    lines = [line.strip() for line in str(error).splitlines()]
    rules = [k for k, line in enumerate(lines) if line.startswith("-----")]
    shown = lines[rules[0] + 1 : rules[1]] if len(rules) > 1 else lines
    shown = [line for line in shown if line] or [type(error).__name__]
    what = shown[-1] if len(rules) > 1 else shown[0]
    return SlurmTaskFailed(f"{what[:300]}; its log: {job.paths.stderr}")


# in out_dir/.corpusprep-work while a driver's arrays may run: the secret its comment is made of
RECORD = "slurm-arrays.json"


def _comment(secret: str, record: Path) -> str:
    """The comment on every array a driver submits, made of the secret it records and of its
    out_dir: squeue shows comments to every user, never the secret; and a record copied from
    another out_dir makes another comment, so none of that out_dir's jobs match it."""
    where = os.path.realpath(record.parent)
    return "corpusprep-" + hashlib.sha256(f"{secret}\0{where}".encode()).hexdigest()[:32]


def _recorded(record: Path) -> Optional[str]:
    """The secret an earlier driver recorded, if the file is one corpusprep writes: the work
    folder may come from a stranger (a FIFO would block, a huge file fill the memory)."""
    try:
        data = json.loads(read_regular(record, 200))
    except (OSError, ValueError):
        return None
    secret = data.get("secret") if isinstance(data, dict) else None
    return secret if isinstance(secret, str) and re.fullmatch("[0-9a-f]{32}", secret) else None


def _cancel_commented(comment: str) -> Optional[str]:
    """Cancel the jobs of this user that Slurm holds with `comment` among their comment's
    words; the line that says so, if there were any (or that squeue could not tell)."""
    uid = str(os.getuid())
    try:
        r = subprocess.run(["squeue", "--noheader", f"--user={uid}", "--format=%F|%U|%k"],
                           capture_output=True, text=True, timeout=60)  # fmt: skip
        said = r.stderr.strip().splitlines()[0] if r.stderr.strip() else f"exit {r.returncode}"
        failed = said if r.returncode else ""
    except (OSError, subprocess.SubprocessError) as e:
        failed = str(e)
    if failed:  # nothing can be cancelled: the array may still be writing beside this run
        find = f"squeue --me --format='%i %k' | grep {comment}"
        return (f"corpusprep: warning: squeue failed ({failed[:200]}), so the Slurm jobs an "
                "earlier run in this out_dir may have left running were not cancelled; find "
                f"them with: {find}, and scancel them")  # fmt: skip
    ids = set()
    for line in r.stdout.splitlines():
        job, user, said = (line.split("|", 2) + ["", ""])[:3]
        if job.isdigit() and user == uid and comment in said.split():
            ids.add(job)
    if not ids:
        return None
    named = ", ".join(sorted(ids, key=int))
    try:  # --user too: root (or a Slurm operator) may cancel anyone's jobs
        r = subprocess.run(["scancel", f"--user={uid}", *sorted(ids)], capture_output=True,
                           text=True, timeout=60)  # fmt: skip
        why = r.stderr.strip().splitlines()[0] if r.returncode and r.stderr.strip() else ""
    except (OSError, subprocess.SubprocessError) as e:
        why = str(e)
    if why:
        return (f"corpusprep: warning: an earlier run in this out_dir left Slurm job {named} "
                f"running; scancel failed ({why[:200]})")  # fmt: skip
    return (f"corpusprep: cancelled Slurm job {named}, left running by an earlier run in this "
            "out_dir (its driver was killed or lost)")  # fmt: skip


def _cancel_recorded(record: Path, own: str) -> None:
    """Cancel the arrays of the driver that `record` names, unless it is this one (`own`
    secret), and say so, even with quiet=true: jobs on the cluster were stopped."""
    old = _recorded(record)
    if old is not None and old != own:
        said = _cancel_commented(_comment(old, record))
        if said:
            print(said, file=sys.stderr)


def _has_result(job: Any) -> bool:
    """Whether a task's result file is there, asked of the file system alone. job.done() also
    runs sacct every few seconds, and where accounting is off sacct said "Slurm accounting
    storage is disabled" on the driver's stderr each time (quiet or not); a task that ended
    without a result is found with squeue instead (_held), which every cluster answers."""
    folder = job.paths.folder
    with suppress(OSError):  # as submitit does: a network file system's cache is refreshed
        folder.chmod(folder.stat().st_mode)
    return job.paths.result_pickle.exists()


def _held(jobs: Any) -> Optional[set[str]]:
    """The ids of the array tasks among `jobs` that Slurm still holds (pending, running,
    completing); None if squeue did not answer."""
    arrays = sorted({str(job.job_id).split("_")[0] for job in jobs})
    try:
        r = subprocess.run(["squeue", "--noheader", "--array", "--format=%i",
                            f"--jobs={','.join(arrays)}"], capture_output=True, text=True,
                           timeout=60)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    if r.returncode != 0:  # no such job: every one ended (and was forgotten)
        return set() if "Invalid job id" in r.stderr else None
    return set(r.stdout.split())


class SlurmExecutor(Executor):
    def __init__(
        self,
        partition: Optional[str] = None,
        max_parallel: int = 64,
        timeout_min: int = 240,
        cpus_per_task: int = 1,
        mem_gb: float = 4,
        retries: int = 2,
        poll_seconds: float = 2.0,
        slurm: Optional[dict[str, Any]] = None,
    ) -> None:
        self.partition = partition
        self.max_parallel = int(checked_number(max_parallel, "executor.max_parallel", least=1))
        self.timeout_min = int(checked_number(timeout_min, "executor.timeout_min", least=1))
        self.cpus_per_task = int(checked_number(cpus_per_task, "executor.cpus_per_task", least=1))
        self.mem_gb = checked_number(mem_gb, "executor.mem_gb", whole=False, above=True)
        self.retries = checked_retries(retries)
        self.poll_seconds = checked_number(poll_seconds, "executor.poll_seconds", whole=False,
                                           above=True)  # fmt: skip
        self.extra = dict(slurm or {})  # any other submitit slurm_* parameter
        self.folder: Optional[Path] = None
        self.record = Path(RECORD)  # in out_dir's work folder, once attached
        self.secret = secrets.token_hex(16)

    def attach(self, work: Path) -> None:
        self.folder = work / "slurm"
        self.record = work.parent / RECORD  # the same for every run in out_dir

    def parallelism(self) -> int:
        """The array's tasks that run at once, at most (as submitted: see _executor)."""
        given = {k.removeprefix("slurm_"): v for k, v in self.extra.items()}
        return int(given.get("array_parallelism", self.max_parallel))

    def describe(self) -> dict[str, Any]:
        return {"kind": "slurm", "partition": self.partition, "max_parallel": self.max_parallel}

    def _executor(self) -> Any:
        try:
            import submitit
        except ImportError:
            raise UserError(
                "executor=slurm needs submitit: pip install 'corpusprep[slurm]'"
            ) from None
        if self.folder is None:
            raise RuntimeError("SlurmExecutor.attach() was not called")
        # a new folder for each array: submitit takes a result pickle it finds under the
        # job's id as the job's result, and the work folder outlives a failed run (an
        # earlier cluster's jobs had the same ids) or may come from a stranger
        folder = self.folder / secrets.token_hex(12)
        try:
            executor = submitit.AutoExecutor(folder=folder / "%j", cluster="slurm")
        except KeyError as e:  # submitit 1.5.4 on Python 3.9 (facebookincubator/submitit#1807)
            version = getattr(submitit, "__version__", "?")
            raise UserError(
                f"executor=slurm: submitit {version} cannot load its plugins here (KeyError "
                f"{e}); pip install 'submitit!=1.5.4'"
            ) from None
        except Exception as e:
            raise UserError(
                f"executor=slurm: no Slurm cluster here ({e}); run on a login node"
            ) from None
        params: dict[str, Any] = {
            "slurm_array_parallelism": self.max_parallel,
            "timeout_min": self.timeout_min,
            "cpus_per_task": self.cpus_per_task,
            "mem_gb": self.mem_gb,
            "name": "corpusprep",
            **{k if k.startswith("slurm_") else f"slurm_{k}": v for k, v in self.extra.items()},
        }
        comment = _comment(self.secret, self.record)
        if params.get("slurm_comment"):  # +executor.slurm.comment=x: ours goes after it
            comment = f"{params['slurm_comment']} {comment}"
        params["slurm_comment"] = comment
        if self.partition:
            params["slurm_partition"] = self.partition
        try:
            executor.update_parameters(**params)
        except (NameError, ValueError, TypeError) as e:  # a parameter submitit does not know
            said = str(e).strip().splitlines()[0] if str(e).strip() else repr(e)
            said = said.split(" Valid arguments")[0]  # a long list, in no order
            named = re.search(r"parameter '(?:slurm_)?(\w+)'", said)
            key = f"executor.slurm.{named.group(1)}" if named else "executor.slurm"
            raise UserError(
                f"{key}: submitit refuses it ({said[:200]}); remove it, or name one of "
                "submitit's slurm_* parameters (+executor.slurm.account=x)"
            ) from None
        return executor

    def leaving(self, work_root: Path) -> None:
        """An up-to-date re-run removes the work folder, and the record in it: the arrays
        it names (a dead driver's, of a run since superseded) are cancelled first."""
        _cancel_recorded(Path(work_root) / RECORD, self.secret)

    def _take_over(self) -> None:
        """Before this driver submits: cancel the arrays an earlier driver in this out_dir
        left running (killed, or its login node lost: a live one would hold out_dir's lock),
        which carry the comment its record makes; then record this driver's own secret."""
        from corpusprep.writer import remove_planted, write_atomic

        _cancel_recorded(self.record, self.secret)
        if self.record.is_symlink() or (self.record.exists() and not self.record.is_file()):
            remove_planted(self.record, "its record of the Slurm arrays running")
        write_atomic(self.record, json.dumps({"secret": self.secret}).encode(),
                      secrets.token_hex(8))  # fmt: skip

    def run(
        self, fn: Callable[[T], R], tasks: Sequence[T]
    ) -> Iterator[tuple[int, Union[R, BaseException]]]:
        executor = self._executor()
        self._take_over()
        try:
            yield from self._run(executor, fn, tasks)
        finally:  # every array of this driver has ended, or was cancelled
            with suppress(OSError):
                self.record.unlink()

    def _run(
        self, executor: Any, fn: Callable[[T], R], tasks: Sequence[T]
    ) -> Iterator[tuple[int, Union[R, BaseException]]]:
        from submitit.core.utils import FailedJobError

        printed = io.StringIO()  # submitit prints sbatch's stderr when it fails: said below
        try:
            with redirect_stderr(printed):
                jobs = executor.map_array(fn, list(tasks))
            sys.stderr.write(printed.getvalue())  # it went well: whatever else was printed
        except (subprocess.CalledProcessError, FailedJobError) as e:  # submitit wraps the first
            said = [line for line in str(e).splitlines() if line.strip()]
            fatal = next((line for line in said if "sbatch: fatal:" in line), None)
            if fatal or any(NO_CLUSTER in line for line in said):  # no slurm.conf, no slurmctld
                words = (fatal or next(line for line in said if NO_CLUSTER in line)).split(": ", 2)
                raise UserError(
                    f"executor=slurm: no Slurm cluster answers here (sbatch: {words[-1][:200]}); "
                    "run on a login node of the cluster"
                ) from None
            why = next((line for line in said if "sbatch: error:" in line), said[0] if said else "")
            why = why.replace("sbatch: error:", "").strip()[:200]
            raise UserError(
                f"executor=slurm: sbatch refused the job array ({why}); check "
                "executor.partition, executor.mem_gb, executor.cpus_per_task, "
                "executor.timeout_min and executor.slurm"
            ) from None
        pending = dict(enumerate(jobs))
        gone: dict[int, float] = {}  # tasks Slurm no longer holds: since when
        asked = time.monotonic()
        try:
            while pending:
                for i, job in list(pending.items()):
                    if _has_result(job):  # (job.result() then waits for nothing)
                        del pending[i]
                        try:
                            yield i, job.result()
                        except Exception as e:  # failed, timed out, cancelled, node lost
                            yield i, _short(e, job)
                    elif time.monotonic() - gone.get(i, float("inf")) > RESULT_GRACE_SECONDS:
                        del pending[i]  # no result file came: it never will
                        yield (
                            i,
                            SlurmTaskFailed(
                                f"Slurm job {job.job_id} ended without a result (cancelled, "
                                "out of its time or memory, or its node lost?); its log: "
                                f"{job.paths.stderr}"
                            ),
                        )
                if pending and time.monotonic() - asked >= max(self.poll_seconds, 5):
                    # a task that ended without a result file (cancelled, out of time or
                    # memory, its node lost): submitit would learn it only from sacct, which
                    # a cluster without accounting lacks (the run waited for ever)
                    asked = time.monotonic()
                    held = _held(pending.values())
                    for i, job in pending.items():
                        if held is not None and job.job_id not in held:
                            gone.setdefault(i, asked)
                if pending:
                    time.sleep(self.poll_seconds)
        finally:
            for job in pending.values():  # interrupted: leave nothing queued behind
                job.cancel(check=False)

    def on_retry(self, what: str, error: BaseException) -> None:
        first = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
        print(f"corpusprep: {what} failed on Slurm ({escape_controls(first)}); submitting it "
              "again", file=sys.stderr)  # fmt: skip
