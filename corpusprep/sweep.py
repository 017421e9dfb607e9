"""Sweeps (Hydra multirun): a folder per job, a clash check before any work, and a table
comparing the jobs at the end.

Each job leaves a small record (corpusprep_job.json) in its Hydra job folder: ok, skipped
(up to date), estimate (dry_run) or failed with its one-line reason. The table is built
from those records and the manifests they point to, on disk, in the parent process: so
it works with any launcher (basic, joblib, submitit, ray), where jobs run elsewhere.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Optional

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from corpusprep.redact import redact_override, redact_text, redact_values

RECORD = "corpusprep_job.json"
# the jobs of the sweep that last began in the folder, written before any of them runs:
# a folder given again keeps an earlier sweep's job folders, which inspect leaves out
JOBS = "corpusprep_sweep.json"
# val_bytes, bytes_per_token (val) and vocab_use (distinct ids used / vocab) compare
# tokenizers fairly: a model's val loss per token becomes bits per byte with val_bytes
COLUMNS = ["job", "corpus", "tokenizer", "split", "dtype", "vocab", "train_tokens", "val_tokens",
           "val_bytes", "bytes_per_token", "vocab_use", "bytes_on_disk", "chars_per_token",
           "seconds", "status", "reason"]  # fmt: skip
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
        from corpusprep.launchers import JOBLIB, JOBLIB_CORE, guard_launchers
        from corpusprep.writer import lock_sweep

        check_clashes(config)
        if str(config.hydra.launcher.get("_target_", "")).startswith(JOBLIB):
            import importlib  # (its launcher imports it only when it launches)

            importlib.import_module(JOBLIB_CORE)
        guard_launchers()  # Hydra's run_job, and the launchers' own references to it
        # held until the process ends (a kill lets it go): one sweep in a folder at a time
        # (an exception here Hydra would only warn of, and go on)
        try:
            self._lock = lock_sweep(_folder(config))
        except UserError as e:
            print(f"corpusprep: error: {escape_controls(str(e))}", file=sys.stderr)
            sys.exit(1)
        except OSError as e:  # its errno alone named neither the key nor a fix
            where = escape_controls(str(config.hydra.sweep.dir))
            print(f"corpusprep: error: hydra.sweep.dir={where}: cannot make it or write in it "
                  f"({e.strerror}); choose another hydra.sweep.dir", file=sys.stderr)  # fmt: skip
            sys.exit(1)
        try:
            write_jobs(_folder(config), _known_jobs(config))
        except OSError as e:
            from corpusprep.writer import SWEEP_LOCK, release_lock, room_for

            if self._lock is not None:  # nothing ran: the folder is as the sweep found it
                release_lock(_folder(config) / SWEEP_LOCK, self._lock)
                self._lock = None
            where = escape_controls(str(Path(config.hydra.sweep.dir, JOBS)))
            print(f"corpusprep: error: {where}: cannot write the sweep's list of jobs "
                  f"({e.strerror}); {room_for(e.errno)} or give the sweep another "
                  "hydra.sweep.dir", file=sys.stderr)  # fmt: skip
            sys.exit(1)

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        # Hydra saves multirun.yaml just before the first job: hide its secrets at once
        # from the command's folder: hydra.job.chdir=true runs this in the job's own
        if job_dir() is not None:
            redact_file(_folder(config) / "multirun.yaml")

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from corpusprep.writer import SWEEP_LOCK, release_lock

        try:
            self._end(config)
        finally:  # the sweep is over: its lock goes, file and all (a kill leaves the file)
            lock = getattr(self, "_lock", None)
            if lock is not None:
                self._lock = None
                release_lock(_folder(config) / SWEEP_LOCK, lock)

    def _end(self, config: DictConfig) -> None:
        from corpusprep.errors import escape_controls
        from corpusprep.launchers import UNMADE

        sweep = Path(config.hydra.sweep.dir)
        redact_file(sweep / "multirun.yaml")
        jobs = _known_jobs(config)
        records = this_sweeps(_read_records(sweep), jobs)
        records.sort(key=lambda r: r["job"])
        rows = [row(r) for r in records]
        launched = len(jobs) if jobs is not None else 0  # else: count what was recorded
        for missing in sorted(set(range(launched)) - {r["job"] for r in records}):
            reason = UNMADE.get(missing, "the job left no record (it crashed or was killed)")
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


def _folder(config: DictConfig) -> Path:
    """The sweep's folder, from the folder the command ran in (hydra.job.chdir=true runs
    the callbacks of a job in the job's own)."""
    return Path(config.hydra.runtime.cwd, config.hydra.sweep.dir)


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


# what the run's name already tells apart: a preset, an input
NAMED_BY = (
    "dataset",
    "name",
    "source",
    "source.path",
    "source.glob",
    "source.url",
    "source.dataset",
)


def _differing(one: list[str], other: list[str]) -> list[str]:
    """The keys two jobs' overrides set to different values (group choices included)."""
    a, b = (dict(o.lstrip("+~").partition("=")[::2] for o in job) for job in (one, other))
    return [k for k in dict.fromkeys([*a, *b]) if a.get(k) != b.get(k)]


def _clash(first: int, number: int, cfg: DictConfig, config: DictConfig, out_dir: bool,
           swept: Optional[list[str]] = None) -> None:  # fmt: skip
    if out_dir:
        from corpusprep.config import PLUGIN_GROUPS

        # the values that tell the two jobs apart: a group's option by its name (else by
        # the choice, as an executor: it names itself nowhere), a preset or an input by the
        # name it gives (a path holds "/"); never Hydra's own settings
        parts = ["${name}"]
        for key in swept or ["split"]:
            if key in NAMED_BY or "/" in key or key.startswith("hydra"):
                continue
            if key not in PLUGIN_GROUPS:
                parts.append(f"${{{key}}}")
            elif OmegaConf.select(cfg, f"{key}.name", throw_on_resolution_failure=False):
                parts.append(f"${{{key}.name}}")
            else:
                parts.append(f"${{hydra:runtime.choices.{key}}}")
        example = "data/" + "-".join(dict.fromkeys(parts))
        print(
            f"corpusprep: error: jobs {first} and {number} of this sweep would both "
            f"write to out_dir={redact_text(cfg.out_dir)}; put a swept value in it, e.g. "
            f"'out_dir={example}', or leave out_dir to get a folder per job",
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


def write_jobs(sweep: Path, jobs: Optional[list[list[str]]]) -> None:
    """The sweep's jobs' overrides (JOBS), or no such file where they are not known in
    advance (inspect then shows every job folder's record)."""
    from corpusprep.writer import write_atomic

    if jobs is None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(sweep / JOBS)
        return
    write_atomic(sweep / JOBS, (json.dumps({"jobs": jobs}) + "\n").encode(), str(os.getpid()))


def read_jobs(sweep: Path) -> Optional[list[list[str]]]:
    """The jobs write_jobs wrote, or None: none written (an older sweep, an optimizer's),
    or a file that does not read as a list of jobs (a stranger's folder: nothing is left
    out on its say)."""
    from corpusprep.dataset import read_json
    from corpusprep.errors import UserError

    try:
        kept = read_json(sweep / JOBS, MAX_JOBS_BYTES, AGAIN)
    except UserError:  # absent, too long, not JSON: every record shows
        return None
    jobs = kept.get("jobs") if isinstance(kept, dict) else None
    # no sweep has no jobs; and inspect makes a row of each listed job (some 1 KB): 20
    # million of them ([] each) fit in MAX_JOBS_BYTES
    if (
        isinstance(jobs, list)
        and 0 < len(jobs) <= MAX_JOBS
        and all(isinstance(job, list) and all(isinstance(o, str) for o in job) for job in jobs)
    ):
        return jobs
    return None


MAX_JOBS_BYTES = 64 << 20  # a sweep of 100,000 jobs with long overrides
MAX_JOBS = 1_000_000


def this_sweeps(records: list[tuple[int, dict[str, Any]]],
                jobs: Optional[list[list[str]]]) -> list[dict[str, Any]]:  # fmt: skip
    """The records of this sweep's jobs, given with their files' modification times: a
    sweep folder given again (hydra.sweep.dir=multirun/cmp, as the docs show) still holds
    the folders of an earlier sweep's jobs, and their records are not this sweep's (an old
    failure would fail it). A record is this sweep's when its job number has these
    overrides here; of several, the newest (a job writes its record as it ends: one left
    in another folder before, by an earlier sweep or by someone else, is no second row).
    For a sweeper whose jobs are not known in advance (`jobs` None), every record."""
    if jobs is None:
        return [record for _, record in records]
    newest: dict[int, tuple[int, dict[str, Any]]] = {}
    for written, record in records:
        job = record.get("job", 0)  # (a record inspect reads may lack both: job 0, no
        if not 0 <= job < len(jobs) or record.get("overrides") != jobs[job]:  # overrides)
            continue
        if job not in newest or written > newest[job][0]:
            newest[job] = (written, record)
    return [record for _, record in newest.values()]


def _read_records(sweep: Path) -> list[tuple[int, dict[str, Any]]]:
    """The job records in the sweep folder that read as records, with their modification
    times: one half written (a job killed, or a disk full, as it wrote it) or not a record
    is no job's, as a record of another sweep is not this one's (this sweep's job it was
    then left no record)."""
    records = []
    for path in sweep.glob(f"*/{RECORD}"):
        try:
            written = path.stat().st_mtime_ns
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        kinds = (("job", int), ("overrides", list), ("status", str), ("out_dir", str))
        if (isinstance(record, dict) and all(isinstance(record.get(k), t) for k, t in kinds)
                and not isinstance(record["job"], bool)):  # fmt: skip
            records.append((written, record))
    return records


def _real_path(path: str) -> str:
    """The folder a path names, links followed: a folder and a link to it are one."""
    try:
        return str(Path(path).expanduser().resolve())  # ~: as run_job reads it (expand_home)
    except (OSError, RuntimeError):  # a symlink loop: the job's own run says so
        return str(Path(path).expanduser().absolute())


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
                _clash(written[out_dir], number, cfg, config, out_dir=True,
                       swept=_differing(jobs[written[out_dir]], overrides))  # fmt: skip
            if folder in recorded:  # its record (corpusprep_job.json) too, whatever its out_dir
                _clash(recorded[folder], number, cfg, config, out_dir=False)
            written[out_dir or folder] = recorded[folder] = number
    finally:
        HydraConfig.instance().cfg = hydra_cfg
    if lacking and lacking[0] is not None and set(lacking) == {lacking[0]}:  # every job: once,
        # as a run says it
        print(f"corpusprep: error: {escape_controls(lacking[0])}", file=sys.stderr)
        sys.exit(1)
