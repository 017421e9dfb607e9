"""Sweeps (Hydra multirun): a folder per job, a clash check before any work, and a table
comparing the jobs at the end.

Each job leaves a small record (corpusprep_job.json) in its Hydra job folder: ok, skipped
(up to date), estimate (dry_run) or failed with its one-line reason. The table is built
from those records and the manifests they point to, on disk, in the parent process: so
it works with any launcher (basic, joblib, submitit, ray), where jobs run elsewhere.
"""

from __future__ import annotations

import csv
import errno
import functools
import io
import json
import os
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from corpusprep.redact import redact_override, redact_text, redact_values

RECORD = "corpusprep_job.json"
# val_bytes, bytes_per_token (val) and vocab_use (distinct ids used / vocab) compare
# tokenizers fairly: a model's val loss per token becomes bits per byte with val_bytes
COLUMNS = ["job", "corpus", "tokenizer", "split", "dtype", "vocab", "train_tokens", "val_tokens",
           "val_bytes", "bytes_per_token", "vocab_use", "bytes_on_disk", "chars_per_token",
           "seconds", "status", "reason"]  # fmt: skip
# job number -> why its folder could not be made (the basic launcher runs jobs in this
# process; the joblib and submitit launchers' workers send it back as the job's return
# value, an _Unmade)
_UNMADE: dict[int, str] = {}
AGAIN = "run the sweep again (its jobs that finished are skipped)"


def job_dir() -> Optional[Path]:
    """This job's Hydra folder in a sweep; None outside one."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return None
    return Path(HydraConfig.get().runtime.output_dir)


def write_record(folder: Path, cfg: DictConfig, status: str, **fields: Any) -> None:
    from hydra.core.hydra_config import HydraConfig

    from corpusprep.writer import write_atomic

    hc = HydraConfig.get()
    overrides = [redact_override(o) for o in hc.overrides.task]  # a secret's whole value
    record = {"job": hc.job.num, "overrides": overrides, "status": status,
              **_labels(cfg), **fields}  # fmt: skip
    record = redact_values(json.loads(json.dumps(record, default=str)))  # no URL credentials
    folder.mkdir(parents=True, exist_ok=True)
    text = json.dumps(record, indent=2, default=str) + "\n"  # whole or not at all (a kill)
    write_atomic(folder / RECORD, text.encode(), str(os.getpid()))


def _labels(cfg: DictConfig) -> dict[str, Any]:
    """What the job was meant to make, even when its config cannot be fully resolved."""
    out = {}
    for key, path in (("corpus", "name"), ("tokenizer", "tokenizer.name"), ("split", "split"),
                      ("out_dir", "out_dir")):  # fmt: skip
        try:
            out[key] = OmegaConf.select(cfg, path)
        except Exception:
            out[key] = ""
    out["out_dir"] = str(Path(str(out["out_dir"] or "")).absolute())
    return out


def row(record: dict[str, Any]) -> dict[str, Any]:
    """One line of the table, from a job record and, when it made one, its manifest."""
    out = {c: record.get(c, "") for c in COLUMNS}
    manifest = record.get("manifest")
    if manifest is None and record["status"] in ("ok", "skipped"):
        path = Path(record["out_dir"]) / "manifest.json"
        manifest = json.loads(path.read_text()) if path.is_file() else None
    if manifest:
        tokens = manifest["tokens"]
        out.update(
            corpus=manifest.get("name"),
            tokenizer=_tokenizer_name(manifest["tokenizer"]),
            split=manifest["split"]["fraction"],
            dtype=manifest["dtype"],
            vocab=manifest["vocab_size"],
            train_tokens=tokens["train"],
            val_tokens=tokens["val"],
            bytes_on_disk=sum(manifest["files"].values()),
            chars_per_token=manifest["chars_per_token"],
            seconds=manifest["seconds"]["total"],
            val_bytes=manifest.get("val_bytes", ""),
            bytes_per_token=manifest.get("bytes_per_token", ""),
            vocab_use=round(manifest["vocab_used"] / manifest["vocab_size"], 4)
            if "vocab_used" in manifest
            else "",
        )
    estimate = record.get("estimate")
    if estimate:
        out.update({k: estimate.get(k, "") for k in COLUMNS if k in estimate})
    return out


def _tokenizer_name(desc: dict[str, Any]) -> str:
    if desc.get("kind") == "bpe":  # trained: its size tells the jobs of a sweep apart
        return f"bpe{desc.get('vocab_size', '')}"
    if desc.get("kind") == "reuse":
        return f"reuse:{_tokenizer_name(desc.get('reused') or {})}"
    return desc.get("encoding") or desc.get("kind", "?")


def markdown(rows: list[dict[str, Any]]) -> str:
    from corpusprep.errors import escape_controls

    def cell(v: Any) -> str:
        if isinstance(v, int) and not isinstance(v, bool):
            return f"{v:,}"
        return escape_controls(str(v))  # a row a line, whatever a failed job's reason names

    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cell(r[c]).replace("|", "\\|") for c in COLUMNS) + " |"
              for r in rows]  # fmt: skip
    return "\n".join(lines)


BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"


def expand(config: DictConfig) -> list[list[str]]:
    """The overrides of every job a basic-style sweep makes from the command line."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    if config.hydra.sweeper.get("_target_") != BASIC_SWEEPER:  # an optimizer picks its own
        raise ValueError("another sweeper: its jobs are not known in advance")
    # unresolved: "out_dir=o/${split}" must stay as the user wrote it, to resolve per job
    task = OmegaConf.to_container(config.hydra.overrides.task, resolve=False)
    # the sweep a config file gives (hydra.sweeper.params) first, as the sweeper reads it
    params = config.hydra.sweeper.get("params")
    if params:
        task = [f"{k}={v}" for k, v in OmegaConf.to_container(params, resolve=True).items()] + task
    overrides = OverridesParser.create().parse_overrides(task)
    return [job for batch in BasicSweeper.split_arguments(overrides, None) for job in batch]


def redact_file(path: Path) -> None:
    """Rewrite a file Hydra wrote (multirun.yaml: the whole sweep's config and overrides)
    with every URL's credentials hidden; nothing to do if it has none."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return
    redacted = redact_text(text)
    if redacted != text:
        part = path.with_name(f".{path.name}.{os.getpid()}.part")
        part.write_text(redacted, encoding="utf-8")
        os.replace(part, path)  # jobs running at once write the same text: no harm


class SweepCallback(Callback):
    """Registered in conf/config.yaml (hydra.callbacks)."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from corpusprep.errors import UserError, escape_controls
        from corpusprep.writer import lock_sweep

        check_clashes(config)
        if str(config.hydra.launcher.get("_target_", "")).startswith(JOBLIB):
            import importlib  # (its launcher imports it only when it launches)

            importlib.import_module(JOBLIB_CORE)
        guard_job_folders()  # Hydra's run_job, and the launcher's own reference to it
        # held until the process ends (a kill lets it go): one sweep in a folder at a time
        # (an exception here Hydra would only warn of, and go on)
        try:
            self._lock = lock_sweep(Path(config.hydra.runtime.cwd, config.hydra.sweep.dir))
        except UserError as e:
            print(f"corpusprep: error: {escape_controls(str(e))}", file=sys.stderr)
            sys.exit(1)
        except OSError as e:  # its errno alone named neither the key nor a fix
            where = escape_controls(str(config.hydra.sweep.dir))
            print(f"corpusprep: error: hydra.sweep.dir={where}: cannot make it or write in it "
                  f"({e.strerror}); choose another hydra.sweep.dir", file=sys.stderr)  # fmt: skip
            sys.exit(1)

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        # Hydra saves multirun.yaml just before the first job: hide its secrets at once
        # from the command's folder: hydra.job.chdir=true runs this in the job's own
        if job_dir() is not None:
            sweep = Path(config.hydra.runtime.cwd, config.hydra.sweep.dir)
            redact_file(sweep / "multirun.yaml")

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from corpusprep.writer import SWEEP_LOCK, release_lock

        try:
            self._end(config)
        finally:  # the sweep is over: its lock goes, file and all (a kill leaves the file)
            lock = getattr(self, "_lock", None)
            if lock is not None:
                self._lock = None
                release_lock(Path(config.hydra.runtime.cwd, config.hydra.sweep.dir, SWEEP_LOCK),
                             lock)  # fmt: skip

    def _end(self, config: DictConfig) -> None:
        from corpusprep.errors import escape_controls

        sweep = Path(config.hydra.sweep.dir)
        redact_file(sweep / "multirun.yaml")
        jobs = _known_jobs(config)
        records = _this_sweeps(_read_records(sweep), jobs)
        records.sort(key=lambda r: r["job"])
        rows = [row(r) for r in records]
        launched = len(jobs) if jobs is not None else 0  # else: count what was recorded
        for missing in sorted(set(range(launched)) - {r["job"] for r in records}):
            reason = _UNMADE.get(missing, "the job left no record (it crashed or was killed)")
            rows.append({**dict.fromkeys(COLUMNS, ""), "job": missing, "status": "failed",
                         "reason": reason})  # fmt: skip
        rows.sort(key=lambda r: r["job"])
        unsaved = _save_table(sweep, rows)
        counts = Counter(r["status"] for r in rows)
        tally = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
        jobs = f"{len(rows)} job{'s' if len(rows) != 1 else ''}"
        # a status as the records say it (a reused sweep folder holds others'): escaped
        line = escape_controls(f"corpusprep sweep: {jobs} ({tally}) -> {sweep}")
        if not _quiet(config):
            print(f"\n{line}")
            print(markdown(rows))
        elif counts.get("failed"):  # quiet: nothing on stdout, but say why the exit is 1
            print(line, file=sys.stderr)
        if unsaved:
            print(f"corpusprep: error: {escape_controls(unsaved)}", file=sys.stderr)
        if counts.get("failed") or unsaved:
            sys.exit(1)


def _save_table(sweep: Path, rows: list[dict[str, Any]]) -> Optional[str]:
    """summary.md and summary.csv, each whole or not at all (a kill, a full disk); what
    stopped them, or None. (An OSError here Hydra would only warn of, and exit 0.)"""
    from corpusprep.writer import room_for, write_atomic

    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, COLUMNS)
    writer.writeheader()
    writer.writerows(rows)
    # the text as it is, but a lone surrogate (a manifest's "\\ud800"): no file holds one
    files = {"summary.md": (markdown(rows) + "\n").encode(),
             "summary.csv": text.getvalue().encode(errors="backslashreplace")}  # fmt: skip
    for name, data in files.items():
        try:
            write_atomic(sweep / name, data, str(os.getpid()))
        except OSError as e:
            return (f"{sweep / name}: cannot write the sweep's table ({e.strerror}); "
                    f"{room_for(e.errno)} and {AGAIN}")  # fmt: skip
    return None


def _check_not_repeated(jobs: list[list[str]], number: int) -> None:
    """A job whose overrides an earlier job has (a value given twice) would only redo it, in
    its folder."""
    first = jobs.index(jobs[number])
    if first != number:
        shown = " ".join(redact_override(o) for o in jobs[number])
        print(f"corpusprep: error: jobs {first} and {number} of this sweep are the same job "
              f"({shown}); give each value once", file=sys.stderr)  # fmt: skip
        sys.exit(1)


def _job_folders(cfg: DictConfig, number: int, sweep: str) -> tuple[str, Optional[str]]:
    """The folders a job writes to: its sweep folder (its record, and by default its
    outputs) and its own out_dir, if one is given (else None)."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    with open_dict(cfg):
        cfg.hydra.job.num = cfg.hydra.job.id = number  # as the launcher numbers it
    HydraConfig.instance().set_config(cfg)  # what ${hydra:...} and cp.safe read
    try:
        subdir = str(cfg.hydra.sweep.subdir)
    except OmegaConfBaseException as e:  # (an error in this callback: Hydra warns, goes on)
        said = str(e).strip().splitlines()[0]
        print(f"corpusprep: error: hydra.sweep.subdir: {said}; fix the ${{...}} in its value",
              file=sys.stderr)  # fmt: skip
        sys.exit(1)
    folder = _real_path(os.path.join(sweep, subdir))
    if "cp.out_dir" in str(OmegaConf.to_container(cfg, resolve=False)["out_dir"]):
        return folder, None  # the default: the sweep folder
    return folder, _real_path(str(cfg.out_dir))


def _clash(first: int, number: int, cfg: DictConfig, config: DictConfig, out_dir: bool) -> None:
    if out_dir:
        print(
            f"corpusprep: error: jobs {first} and {number} of this sweep would both "
            f"write to out_dir={redact_text(cfg.out_dir)}; put a swept value in it, e.g. "
            "'out_dir=data/${name}-${split}', or leave out_dir to get a folder per job",
            file=sys.stderr,
        )
        sys.exit(1)
    subdir = OmegaConf.to_container(config.hydra.sweep, resolve=False)["subdir"]
    print(f"corpusprep: error: jobs {first} and {number} of this sweep would both write to "
          f"one folder, hydra.sweep.subdir={redact_text(str(subdir))}; put '${{hydra.job.num}}' "
          "or a swept value in it", file=sys.stderr)  # fmt: skip
    sys.exit(1)


def _quiet(config: DictConfig) -> bool:
    """quiet=true for the whole sweep (summary.csv / summary.md are written all the same)."""
    try:
        return bool(OmegaConf.select(config, "quiet", default=False))
    except Exception:  # a config that does not resolve: print, as without quiet
        return False


def _known_jobs(config: DictConfig) -> Optional[list[list[str]]]:
    """Each job's overrides as its record holds them (redacted), or None for a sweeper
    whose jobs are not known in advance (an optimizer)."""
    try:
        return [[redact_override(o) for o in job] for job in expand(config)]
    except Exception:
        return None


def _this_sweeps(records: list[dict[str, Any]],
                 jobs: Optional[list[list[str]]]) -> list[dict[str, Any]]:  # fmt: skip
    """The records of this sweep's jobs: a sweep folder given again (hydra.sweep.dir=
    multirun/cmp, as the docs show) still holds the folders of an earlier sweep's jobs, and
    their records are not this sweep's (an old failure would fail it). A record is this
    sweep's when its job number has these overrides here. For a sweeper whose jobs are not
    known in advance (`jobs` None), every record."""
    if jobs is None:
        return records
    return [r for r in records if r["job"] < len(jobs) and r["overrides"] == jobs[r["job"]]]


def _read_records(sweep: Path) -> list[dict[str, Any]]:
    """The job records in the sweep folder that read as records: one half written (a job
    killed, or a disk full, as it wrote it) or not a record is no job's, as a record of
    another sweep is not this one's (this sweep's job it was then left no record)."""
    records = []
    for path in sweep.glob(f"*/{RECORD}"):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        kinds = (("job", int), ("overrides", list), ("status", str), ("out_dir", str))
        if (isinstance(record, dict) and all(isinstance(record.get(k), t) for k, t in kinds)
                and not isinstance(record["job"], bool)):  # fmt: skip
            records.append(record)
    return records


def _real_path(path: str) -> str:
    """The folder a path names, links followed: a folder and a link to it are one."""
    try:
        return str(Path(path).expanduser().resolve())  # ~: as run_job reads it (expand_home)
    except (OSError, RuntimeError):  # a symlink loop: the job's own run says so
        return str(Path(path).expanduser().absolute())


def guard_job_folders() -> None:
    """The basic launcher makes each job's folder (Hydra's run_job) before the job runs,
    outside corpusprep's run: on a full disk that was Hydra's OSError traceback, which ended
    the sweep with no table. It is one line now, the job counts as failed, and the sweep
    goes on. (A job's own errors never get here: run_job keeps them in its JobReturn.)"""
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
            _UNMADE[unmade.job] = unmade.reason
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
    guard_job_folders()
    return _JOBLIB_EXECUTE[0](*args, **kw)


def _joblib_launch(*args: Any, **kw: Any) -> Any:
    """The joblib launcher's launch, in the driver. A worker process that dies (the OOM
    killer) breaks loky's pool, which raised TerminatedWorkerError out of the sweep: it is
    one line, and the jobs of this batch that left no record are failed rows."""
    import re

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

    plain, results = type(self), core.Job.results
    self.__class__ = _guarded_submitit(plain)
    core.Job.results = _results_or_say_why(results)  # type: ignore[method-assign]
    try:
        returns = _SUBMITIT_LAUNCH[0](self, *args, **kw)
    finally:
        self.__class__ = plain
        core.Job.results = results  # type: ignore[method-assign]
    return _kept_unmade(returns)


def _results_or_say_why(results: Callable[..., Any]) -> Callable[..., Any]:
    """submitit's Job.results, saying in one line why a job has none (its table row: that
    it left no record)."""
    import re

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
    guard_job_folders()
    return super(type(self), self).__call__(*args, **kw)


def _kept_unmade(returns: Any) -> Any:
    """The reason a worker gives for a job whose folder it could not make, kept for the
    table (_UNMADE): the jobs' returns, as they are."""
    for done in returns:
        unmade = getattr(done, "_return_value", None)
        if isinstance(unmade, _Unmade):
            _UNMADE[unmade.job] = unmade.reason
    return returns


def check_clashes(config: DictConfig) -> None:
    """Stop before any work if two jobs of the sweep would write to the same out_dir.
    A job's default out_dir is its own sweep folder, named by hydra.sweep.subdir: the same
    for two jobs given the same overrides (split=0.8,0.8) or a subdir naming no swept value."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    from corpusprep.app import check_required
    from corpusprep.errors import UserError, escape_controls

    written: dict[str, int] = {}  # a job's out_dir: the first job writing to it
    recorded: dict[str, int] = {}  # a job's sweep folder, where its record goes
    try:
        jobs = expand(config)
    except Exception:
        return  # another sweeper (e.g. an optimizer): its jobs are not known in advance
    lacking: list[Optional[str]] = []  # what each job lacks (nothing to prepare, a required key)
    loader, hydra_cfg = GlobalHydra.instance().config_loader(), HydraConfig.instance().cfg
    sweep = str(config.hydra.sweep.dir)  # read once: ${now:...} in a job's copy is read anew
    try:
        for number, overrides in enumerate(jobs):
            _check_not_repeated(jobs, number)
            cfg = loader.load_sweep_config(config, list(overrides))  # as the launcher makes it
            try:
                check_required(cfg)
                lacking.append(None)
            except UserError as e:
                lacking.append(str(e))
            folder, out_dir = _job_folders(cfg, number, sweep)
            if out_dir is not None and out_dir in written:
                _clash(written[out_dir], number, cfg, config, out_dir=True)
            if folder in recorded:  # its record (corpusprep_job.json) too, whatever its out_dir
                _clash(recorded[folder], number, cfg, config, out_dir=False)
            written[out_dir or folder] = recorded[folder] = number
    finally:
        HydraConfig.instance().cfg = hydra_cfg
    if lacking and lacking[0] is not None and set(lacking) == {lacking[0]}:  # every job: once,
        # as a run says it
        print(f"corpusprep: error: {escape_controls(lacking[0])}", file=sys.stderr)
        sys.exit(1)
