"""The command line: `python -m corpusprep KEY=VALUE ...`, configured by Hydra.

User mistakes, and shards that failed more often than executor.retries allows, end with
one line on stderr ("corpusprep: error: ...") and exit code 1, never a traceback; bugs
still show theirs (with any credential hidden, as in every line corpusprep prints).
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import re
import signal
import sys
import threading
import traceback
from collections.abc import Iterator
from typing import Any, NoReturn, Optional

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import InterpolationResolutionError, OmegaConfBaseException

from corpusprep import __version__, compose_cache
from corpusprep._paths import config_path
from corpusprep.config import check_flags, drop_leftovers, expand_home, use_fast_yaml
from corpusprep.errors import (
    INTERRUPTED_AFTER_COMMIT,
    INTERRUPTED_AFTER_FINISHING,
    TaskFailed,
    UserError,
    escape_controls,
    is_interrupt,
)
from corpusprep.overrides import (
    available_options,
    check_overrides,
    completing,
    config_defaults,
    guard_key_overrides,
    hydra_prints,
    installing_completion,
)
from corpusprep.redact import RedactedLines, redact_override, redact_text


def fail(message: str, code: int = 1) -> NoReturn:
    print(f"corpusprep: error: {escape_controls(redact_text(message))}", file=sys.stderr)
    sys.exit(code)


def _hydra_job(cfg: DictConfig) -> Any:
    """The task Hydra runs with the config it composed."""
    from hydra.core.hydra_config import HydraConfig

    from corpusprep.sweep import job_dir

    overrides = _task_overrides() if HydraConfig.initialized() else []
    if _KEPT_ARGV is not None and HydraConfig.initialized():
        with contextlib.suppress(OmegaConfBaseException):  # ${oc.env:UNSET}: not kept, and
            compose_cache.save(_KEPT_ARGV, cfg, HydraConfig.get(), overrides)  # said below
    with _job_stderr(), _in_launch_folder():
        return run_job(cfg, overrides, job_dir())


@contextlib.contextmanager
def _in_launch_folder() -> Iterator[None]:
    """The job runs in the folder the command was run in: hydra.job.chdir=true moved it into
    its Hydra folder, where a relative source.path, out_dir or tokenizer.dir meant another
    file ('my.txt: no such file; check source.path', the file there). corpusprep writes
    only to out_dir, so the move gave nothing."""
    from hydra.core.hydra_config import HydraConfig

    launched = HydraConfig.get().runtime.cwd if HydraConfig.initialized() else None
    try:
        here: Optional[str] = os.getcwd()
    except FileNotFoundError:  # Hydra's folder, removed (empty) by another run that made it
        here = None
    if launched:
        os.chdir(launched)
    try:
        yield
    finally:
        if here is not None:  # (which that other run may also remove while this one runs)
            with contextlib.suppress(FileNotFoundError):
                os.chdir(here)


_KEPT_ARGV: Optional[list[str]] = None  # the command line whose composed config is kept


def _task_overrides() -> list[str]:
    """The job's overrides as Hydra resolved them (${oc.env:X} -> X's value); as typed where
    one cannot resolve (an unset variable: the job's one-line error says which)."""
    from hydra.core.hydra_config import HydraConfig

    task = HydraConfig.get().overrides.task
    try:
        return list(task)
    except OmegaConfBaseException:
        return [str(o) for o in OmegaConf.to_container(task, resolve=False)]


def run_job(cfg: DictConfig, overrides: list[str], folder: Optional[Any] = None) -> Any:
    """Prepare (or estimate) what cfg asks for; folder is the job's own in a sweep, where a
    failed job is recorded and the others go on."""
    commits, finished = _commits(), _commits("FINISHED")
    try:
        check_required(cfg)
        check_flags(cfg)  # dry_run and quiet are read before the rest
        expand_home(cfg)
        drop_leftovers(cfg, overrides)
        if cfg.get("dry_run"):
            from corpusprep.estimate import estimate

            result = estimate(cfg, overrides)
        else:
            from corpusprep.prepare import prepare

            result = prepare(cfg, overrides)
    except (UserError, OmegaConfBaseException, TaskFailed) as e:
        message = str(e) if isinstance(e, UserError) else _config_error(e, cfg)
        if isinstance(e, TaskFailed) and isinstance(e.__cause__, MemoryError):
            message = (f"{e}: out of memory; run with fewer workers (executor.workers=N) or a "
                       "smaller source.max_uncut_bytes, then again (it resumes from the "
                       "shards that finished)")  # fmt: skip
        elif isinstance(e, TaskFailed) and type(e.__cause__).__name__ == "BrokenProcessPool":
            # killed by the kernel's OOM killer, or a crash in native code (a Rust abort)
            message = (f"{e}: its worker process died (out of memory?); run with fewer "
                       "workers (executor.workers=N) or a smaller source.max_uncut_bytes, or "
                       "allow more tries with executor.retries=N, then again (it resumes "
                       "from the shards that finished)")  # fmt: skip
        elif isinstance(e, TaskFailed):
            message = (f"{e}; run the same command again (it resumes from the shards that "
                       "finished), or allow more tries with executor.retries=N")  # fmt: skip
        message = redact_text(message)  # a URL's user:password or ?token= never shown
        if folder is None:
            fail(message)
        print(f"corpusprep: error: {escape_controls(message)}", file=sys.stderr)
        _record(folder, cfg, "failed", reason=message)
        return None
    except KeyboardInterrupt:
        fail(_interrupted(commits, finished, _out_dir(cfg)), code=_interrupt_code())
    except Exception as e:
        if is_interrupt(e):  # one C code reported as a SystemError
            fail(_interrupted(commits, finished, _out_dir(cfg)), code=_interrupt_code())
        # a bug: its traceback is the useful report, printed here with any credential
        # hidden (Hydra's own report would show the overrides as they were typed)
        print(redact_text(traceback.format_exc()), end="", file=sys.stderr)
        if folder is None:
            sys.exit(1)
        _record(folder, cfg, "failed", reason=redact_text(f"{type(e).__name__}: {e}"))
        return None
    status = "estimate" if cfg.get("dry_run") else "skipped" if result.get("skipped") else "ok"
    try:
        if folder is not None:
            _record(folder, cfg, status, **({"estimate": result} if status == "estimate" else {}))
        if not cfg.get("quiet") or status == "skipped":
            print(escape_controls(summary(result, cfg.out_dir), keep_layout=True))
    except KeyboardInterrupt:
        said = (
            "interrupted"
            if status == "estimate"
            else _interrupted(commits, finished, _out_dir(cfg), status)
        )
        fail(said, code=_interrupt_code())
    return result


_NO_ENV = re.compile(r"Environment variable '([^']*)' not found")


def _config_error(e: BaseException, cfg: DictConfig) -> str:
    """OmegaConf's error as one line naming the key it was resolving (cfg.get leaves it
    out: the first key that fails to resolve); a missing environment variable with the fix
    (set it, or give ${oc.env:NAME,DEFAULT} a default)."""
    said = str(e).splitlines()[0] if str(e) else type(e).__name__
    missing = _NO_ENV.search(said)
    # the key whose own value reads the variable (name reads ${source.name}, which reads it)
    held = _holding(cfg, f"oc.env:{missing.group(1)}") if missing else None
    key = (held and held[0]) or getattr(e, "full_key", None) or _unresolved(cfg) or "config"
    if held and held[0].startswith("source."):  # refused anyway, default or not
        from corpusprep.config import env_error

        return str(env_error("source", held[0].split(".", 1)[1], held[1]))
    if missing:
        name = missing.group(1)
        return (f"{key}: the environment variable {name} is not set; set it (export "
                f"{name}=...) or give a default: '{key}=${{oc.env:{name},DEFAULT}}'")  # fmt: skip
    if isinstance(e, InterpolationResolutionError):
        return f"{key}: {said}; fix the ${{...}} in its value"
    return f"{key}: {said}"


def _holding(cfg: DictConfig, text: str) -> Optional[tuple[str, str]]:
    """The first key whose value as written holds `text`, and that value."""
    with contextlib.suppress(Exception):  # the config as written: it reads nothing
        flat = [("", OmegaConf.to_container(cfg, resolve=False))]
        while flat:
            prefix, node = flat.pop(0)
            for key, item in node.items() if isinstance(node, dict) else ():
                if isinstance(item, dict):
                    flat.append((f"{prefix}{key}.", item))
                elif isinstance(item, str) and text in item:
                    return f"{prefix}{key}", item
    return None


def _unresolved(node: DictConfig, prefix: str = "") -> Optional[str]:
    """The first key of `node` whose value fails to resolve (an interpolation), if any."""
    for key in node:
        if not prefix and key == "hydra":  # Hydra's own, resolved only inside Hydra
            continue
        try:
            value = node[key]
        except InterpolationResolutionError:
            return f"{prefix}{key}"
        except OmegaConfBaseException:  # ??? (said before: check_required)
            continue
        if isinstance(value, DictConfig):
            found = _unresolved(value, f"{prefix}{key}.")
            if found:
                return found
    return None


def _interrupted(commits: int, finished: int, out_dir: Optional[str], status: str = "") -> str:
    """What a Ctrl-C in a run says out_dir holds, wherever it was raised: `commits` and
    `finished` are the counts from before the run began (writer.COMMITS, FINISHED)."""
    if _commits() > commits:
        return INTERRUPTED_AFTER_COMMIT
    if _commits("FINISHED") > finished:  # it put an earlier run's outputs in place
        return INTERRUPTED_AFTER_FINISHING
    if status == "skipped":
        return "interrupted; out_dir was already up to date and is unchanged"
    if not _has_outputs(out_dir):  # a first run: nothing there to keep
        return "interrupted; out_dir has no outputs yet"
    return "interrupted; the previous outputs in out_dir are untouched"


def _out_dir(cfg: DictConfig) -> Optional[str]:
    with contextlib.suppress(Exception):  # an interpolation that fails
        return str(cfg.out_dir)
    return None


def _has_outputs(out_dir: Optional[str]) -> bool:
    """Whether out_dir holds anything but a run's hidden temporary and work files (which
    an interrupted run removes, or keeps to resume from)."""
    if out_dir is None:  # not known (a key that did not resolve): say the safe thing
        return True
    try:
        return any(not name.startswith(".") for name in os.listdir(out_dir))
    except OSError:  # no such folder
        return False


def _commits(kind: str = "COMMITS") -> int:
    """How many runs this process committed (corpusprep.writer, if a run imported it), or
    how many earlier runs' commits it finished (kind="FINISHED")."""
    writer = sys.modules.get("corpusprep.writer")
    return len(getattr(writer, kind)) if writer is not None else 0


def _record(folder: Any, cfg: DictConfig, status: str, **fields: Any) -> None:
    """The job's record in its sweep folder; one that cannot be written (a full or read-only
    disk) is one line, and the sweep goes on: its table says the job left no record."""
    from corpusprep.sweep import RECORD, write_record
    from corpusprep.writer import room_for

    try:
        write_record(folder, cfg, status, **fields)
    except OSError as e:
        print(f"corpusprep: error: {escape_controls(str(folder / RECORD))}: cannot write the "
              f"job's record ({e.strerror}); {room_for(e.errno)} or give the sweep another "
              "hydra.sweep.dir, then run it again", file=sys.stderr)  # fmt: skip


def main() -> None:
    """Console entry point (`corpusprep ...` and `python -m corpusprep ...`)."""
    # SIGTERM (kill, a scheduler's timeout) cleans up like Ctrl-C: no half-written files
    # (Ctrl-C: as Python's own handler, but noted in _stopped_by.) A signal the process was
    # started ignoring (`trap '' INT`, a script's `cmd &`) stays ignored.
    for stopping in (signal.SIGTERM, signal.SIGINT):
        if signal.getsignal(stopping) != signal.SIG_IGN:
            signal.signal(stopping, _interrupt)
    sys.unraisablehook = _not_lost(sys.unraisablehook)
    # `split=0.8,0.9 -m` as well as `-m split=0.8,0.9` (argparse wants flags first)
    flags = [a for a in sys.argv[1:] if a in ("-m", "--multirun")]
    sys.argv[1:] = flags + [a for a in sys.argv[1:] if a not in flags]
    argv = sys.argv[1:]
    if any(len(a) >= 3 and "--version".startswith(a) for a in argv):  # (argparse: --v)
        print(f"corpusprep {__version__} (Hydra {compose_cache.hydra_version()})")
        return
    kept = compose_cache.load(argv)
    if kept is not None:  # this command's config as Hydra composed it last time
        run_job(*kept)
        return
    check_overrides(argv)
    if hydra_prints(argv):  # --cfg, --info, --help: nothing runs, the config is printed
        sys.argv[1:] = argv = [redact_override(a) for a in argv]  # a secret's value: ***
        sys.stdout = RedactedLines(sys.stdout)  # and one a config file holds
    if not completing(argv):  # a half-typed key is no mistake to print into the shell
        guard_key_overrides()
    elif installing_completion(argv):
        _complete_the_command()
    _guard_hydra_targets()
    _leave_no_empty_run_dir()
    _skip_mode_probe(argv)
    use_fast_yaml()
    global _KEPT_ARGV
    _KEPT_ARGV = argv  # kept by compose_cache.save if it may be
    _compose_and_run()


def _complete_the_command() -> None:
    """Hydra's bash script completes `python FILE.py` or an installed command, never
    `python -m MODULE` (it looks for FILE): installed from `python -m corpusprep`, it
    would register for `python` and complete nothing. It names the `corpusprep` command
    instead (Hydra takes the name from argv[0]); where that is not on PATH, a warning."""
    import shutil
    import sysconfig

    if sys.argv[0].endswith(".py"):
        sys.argv[0] = "corpusprep"
    if shutil.which("corpusprep") is None:
        # the default scheme's (sysconfig.get_default_scheme() is Python 3.10+), the user's
        folders = [sysconfig.get_path("scripts"), sysconfig.get_path("scripts", f"{os.name}_user")]
        found = next((f for f in folders if os.path.exists(os.path.join(f, "corpusprep"))), None)
        fix = f"add {found} to PATH" if found else "pip install corpusprep installs it"
        print(f"corpusprep: warning: shell completion completes the corpusprep command, which "
              f"is not on PATH; {fix}", file=sys.stderr)  # fmt: skip


def _register_search_path_plugin() -> None:
    """corpusprep's search-path plugin (installed plugins' configs: tokenizer=acme_bpe),
    registered with Hydra by hand where Hydra's own scan missed it: an editable install
    (pip install -e .) maps hydra_plugins.corpusprep_searchpath with an import hook that
    the scan (pkgutil over the hydra_plugins folders) never sees, and a checkout run with
    PYTHONPATH has no hydra_plugins module at all."""
    from hydra.core.plugins import Plugins
    from hydra.plugins.search_path_plugin import SearchPathPlugin

    try:
        from hydra_plugins.corpusprep_searchpath import CorpusprepSearchPathPlugin
    except ImportError:
        from corpusprep._hydra_searchpath import CorpusprepSearchPathPlugin
    plugins = Plugins.instance()
    name = CorpusprepSearchPathPlugin.__name__
    if all(found.__name__ != name for found in plugins.discover(SearchPathPlugin)):
        plugins.register(CorpusprepSearchPathPlugin)


def _compose_and_run() -> None:
    import hydra  # only here: a command whose config is kept never imports Hydra

    _register_search_path_plugin()
    task = hydra.main(version_base="1.3", config_path=config_path(), config_name="config")
    stderr = sys.stderr
    hydra_stderr = sys.stderr = _HydraStderr(stderr)
    try:
        task(_hydra_job)()
    except OmegaConfBaseException as e:  # raised where Hydra reports nothing (its --help, or
        sys.stderr = stderr  # its own error report failing): the config's fault, in one line
        hydra_stderr.held = None
        missing = "Missing mandatory value" in str(e)  # --help --resolve with nothing chosen
        fix = ("choose dataset=NAME, or source=file source.path=FILE" if missing
               else "check the overrides' values and their ${...}")  # fmt: skip
        fail(f"{str(e).strip().splitlines()[0]}; {fix}")
    except SystemExit as e:  # Hydra's own error (argparse's usage errors exit with 2)
        if e.code == 1 and _stopped_by:  # a Ctrl-C that Hydra or OmegaConf turned into
            hydra_stderr.held = None  # an error of their own (or half-built state) while
            sys.stderr = stderr  # composing: what they said is not the story
            fail("interrupted", code=_interrupt_code())
        message = hydra_stderr.error() if e.code == 1 else None
        if message is None:
            raise
        sys.stderr = stderr
        fail(message)
    finally:
        hydra_stderr.release()
        sys.stderr = stderr


_WARNING = re.compile(r"^\S.*:\d+: \w*Warning: ")  # "path.py:28: UserWarning: ..."


class _HydraStderr(RedactedLines):
    """What Hydra prints itself, its credentials hidden line by line (an error quotes the
    overrides as they were typed; a sweep's log lists each job's). Held until the first
    job starts: a mistake Hydra finds while composing (several lines, then "Set the
    environment variable HYDRA_FULL_ERROR=1...") becomes corpusprep's one line."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self.held: Optional[list[str]] = []

    def write(self, text: str) -> int:
        if self.held is None:
            return super().write(text)
        self.held.append(text)
        return len(text)

    def release(self) -> None:
        """Print what was held, as it was, and from now on pass everything on."""
        held, self.held = self.held, None
        if held:
            super().write("".join(held))
        self.flush()

    def error(self) -> Optional[str]:
        """Hydra's error message in one line (what is held is then dropped), or None (an
        error of corpusprep's own, already one line, is then printed by release())."""
        lines, warned = [], False
        held = "".join(self.held or ())
        for line in held.splitlines():
            if _WARNING.match(line):  # a warning printed before the error, and its source
                warned = True  # line: not the message
            elif not (warned and line[:1].isspace()) and line.strip():
                lines.append(line.strip())
                warned = False
        lines = [line for line in lines if "HYDRA_FULL_ERROR" not in line]
        # corpusprep's own lines: an error, or a quiet sweep's count of its failed jobs (held
        # to the end where the jobs ran in other processes, joblib's, and none released it)
        if not lines or any(
            line.startswith(("corpusprep: ", "corpusprep sweep: ")) for line in lines
        ):
            return None
        if lines[0].startswith("Traceback"):  # a report of what Hydra or OmegaConf raised
            raised = _raised(held)
            if raised is not None:  # (else a bug: its whole traceback is printed)
                self.held = None
            return raised
        self.held = None
        if lines[0].startswith("Cannot find primary config"):
            return _no_primary_config(lines)
        unset = re.match(r"Could not delete from config\. '(\w+)' does not exist\.?$", lines[0])
        if unset and unset.group(1) in config_defaults():  # ~val_size: null, a key all
            key = unset.group(1)  # the same (Hydra deletes only a value)
            return f"~{key}: {key} is unset (null) already; drop ~{key}"
        missing = re.match(r"Additional config directory '(.*)' not found$", lines[0])
        if missing:  # --config-dir from another folder than the configs': Hydra names no fix
            return (f"--config-dir {missing.group(1)}: no such folder; give the folder that "
                    "holds your configs (tokenizer/NAME.yaml, ...)")  # fmt: skip
        if "Available options in" in "\n".join(lines):  # a group's options: name them
            at = next(i for i, line in enumerate(lines) if line.startswith("Available options"))
            options = [line for line in lines[at + 1 :] if ":" not in line and "=" not in line]
            return f"{lines[0].rstrip('.')}; {lines[at].rstrip(':')}: {', '.join(options)}"
        return "; ".join(line.rstrip(".") for line in lines[:2])


def _no_primary_config(lines: list[str]) -> str:
    """Hydra's "Cannot find primary config" and the search path it lists on lines of their
    own (the line stopped at "Config search path:"), with the fix."""
    searched = [line.split("path=", 1)[1] for line in lines if "path=" in line
                and not line.startswith(("provider=hydra,", "provider=schema,"))]  # fmt: skip
    said = lines[0].split(". Check", 1)[0]
    return (f"{said} in the config search path ({', '.join(searched)}); corpusprep's own is "
            "'config': leave out --config-name and --config-path (--config-dir DIR adds a "
            "folder of your own configs)")  # fmt: skip


_RAISED = re.compile(r"^((?:hydra|omegaconf)[\w.]*\.\w+|ValueError): (.*)")


def _raised(report: str) -> Optional[str]:
    """A traceback's exception, if Hydra's or OmegaConf's (or a ValueError they raise): its
    message, the first line of it (OmegaConf adds full_key and object_type lines, indented);
    None for anything else, a bug whose whole traceback is then printed."""
    raised = [line for line in report.splitlines() if line and not line[0].isspace()]
    full = _NO_SPACE.match(raised[-1]) if raised else None
    if full and int(full.group(1)) in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
        # Hydra's own files (multirun.yaml, a job's folder) in the sweep folder
        from corpusprep.writer import room_for

        room = room_for(int(full.group(1)))
        return (f"{full.group(3)}: cannot write it ({full.group(2)}); {room} or give the sweep "
                "another hydra.sweep.dir")  # fmt: skip
    found = _RAISED.match(raised[-1]) if raised else None
    return found.group(2).strip() if found else None


_NO_SPACE = re.compile(r"^OSError: \[Errno (\d+)\] ([^:]+): '(.*)'$")


@contextlib.contextmanager
def _job_stderr() -> Any:
    """The job writes to stderr itself, unbuffered (progress bars redraw a line in place);
    everything it prints is redacted already."""
    wrapped = sys.stderr
    if not isinstance(wrapped, _HydraStderr):
        yield
        return
    wrapped.release()
    sys.stderr = wrapped.stream
    try:
        yield
    finally:
        sys.stderr = wrapped


def cli() -> NoReturn:
    """The process's entry point (`corpusprep ...`, `python -m corpusprep ...`): main(),
    then the end Python gives a process, but without freeing every object of Hydra,
    OmegaConf and the encoder one by one (a quarter of a second of every run). A bug's
    traceback still ends the process the usual way."""
    from corpusprep.memory import lean_allocation

    quiet_blas()
    lean_allocation()  # (before pyarrow is imported)
    try:
        main()
    except SystemExit as e:
        code = e.code
    except (KeyboardInterrupt, SystemError) as e:  # before any run began (composing the
        # config) or after it ended: none is half done
        if not is_interrupt(e):  # a SystemError of its own: a bug's traceback
            raise
        single = not {"-m", "--multirun"} & set(sys.argv[1:])
        said = INTERRUPTED_AFTER_COMMIT if single and _commits() else "interrupted"
        print(f"corpusprep: error: {said}", file=sys.stderr)
        code = _interrupt_code()
    else:
        code = 0
    if not isinstance(code, int):  # sys.exit("message"): Python prints it, and exits 1
        if code is not None:
            print(code, file=sys.stderr)
        code = 0 if code is None else 1
    # all is said and done: a Ctrl-C or SIGTERM from here ends the process as the signal
    # does by default (a KeyboardInterrupt inside the exit's own steps was a traceback, or
    # an "ignored" one and lost)
    for held in (signal.SIGINT, signal.SIGTERM):
        signal.signal(held, signal.SIG_DFL)
    exit_now(code)


def quiet_blas() -> None:
    """No BLAS threads in this process or its workers: corpusprep does no linear algebra,
    but the OpenBLAS inside numpy's wheels starts a thread per core when numpy is imported,
    and they spin, waiting for work, while the workers encode (2-3% of a 2-core run's
    CPU; more cores, more threads). Read once, when numpy loads it: set before that."""
    if "numpy" not in sys.modules:
        os.environ["OPENBLAS_NUM_THREADS"] = "1"


def _watched() -> bool:
    """Whether a profiler, debugger or coverage tool watches this process: one set with
    sys.setprofile or sys.settrace, or one of sys.monitoring (Python 3.12+), which is how
    cProfile watches from 3.12 on (sys.getprofile() is then None)."""
    if sys.getprofile() is not None or sys.gettrace() is not None:
        return True
    monitoring = getattr(sys, "monitoring", None)
    return monitoring is not None and any(monitoring.get_tool(i) is not None for i in range(6))


def exit_now(code: int) -> NoReturn:
    """What the interpreter does at exit, in its order, and then nothing more: wait for
    threads that are not daemons, run the atexit handlers, flush the streams."""
    shutdown = getattr(threading, "_shutdown", None)  # Python's own first step at exit
    # another Python, or a profiler or debugger that writes its report after main returns
    # (python -m cProfile -m corpusprep ...): the usual exit
    if shutdown is None or _watched():
        sys.exit(code)
    local = sys.modules.get("corpusprep.executors.local")
    if code and local is not None:  # a pool no abort reached: its thread must not hold us
        with contextlib.suppress(Exception):
            local.kill_live_pools()
    # Python reports an error here and exits as it would have; so does this. (3.11's
    # process pool may write at exit to the wake-up pipe of a pool already aborted.)
    with contextlib.suppress(Exception):
        shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe (`| head`) or stream
            stream.flush()
    os._exit(code)


def _skip_mode_probe(argv: list[str]) -> None:
    """Hydra composes the whole config once only to read hydra.mode, then again to run:
    a quarter of a second of every run. corpusprep's own configs never set hydra.mode, so
    the probe's answer is known (none: -m decides) unless the command line sets it or
    brings configs of its own; then Hydra probes as usual."""
    own_configs = ("--config-dir", "-cd", "--config-path", "-cp", "--config-name", "-cn")
    if any(a.lstrip("+~").startswith("hydra.mode") or a.startswith(own_configs) for a in argv):
        return
    from hydra._internal.hydra import Hydra

    Hydra.get_mode = lambda self, config_name, overrides: None  # type: ignore[method-assign]


def _guard_hydra_targets() -> None:
    """Hydra builds whatever a config names under hydra.callbacks (and nested `_target_`s
    of its launcher and sweeper) before corpusprep sees the config: a downloaded preset or
    a --config-dir file could run code that way. The composed config passes through
    Callbacks first, so the check goes there: before anything is built, every `_target_`
    outside corpusprep's own groups (which config.build checks) must be a callback class of
    a trusted package or of Hydra, or the one launcher/sweeper class Hydra itself vets."""
    from hydra._internal import callbacks

    build_callbacks = callbacks.Callbacks.__init__
    if getattr(build_callbacks, "_corpusprep_guard", False):
        return

    def guarded(self: Any, config: Optional[DictConfig] = None, *args: Any, **kw: Any) -> None:
        if config is not None:
            try:
                _check_hydra_targets(config)
            except UserError as e:
                fail(str(e))
        build_callbacks(self, config, *args, **kw)

    guarded._corpusprep_guard = True  # type: ignore[attr-defined]
    callbacks.Callbacks.__init__ = guarded  # type: ignore[method-assign]


def _leave_no_empty_run_dir() -> None:
    """Hydra makes hydra.run.dir (and its parents) before a run, for its record and log
    files, which corpusprep's config turns off: `hydra.run.dir=foo` (a Hydra habit) left an
    empty foo behind, a failed run too, and one it could not make was a traceback. The
    folder is made here first, a failure one line; what was made and stays empty goes."""
    from hydra._internal import hydra as hydra_main

    run_job = hydra_main.run_job
    if getattr(run_job, "_corpusprep_guard", False):
        return

    def run_in_folder(*, config: DictConfig, job_dir_key: str, job_subdir_key: Optional[str],
                      **kw: Any) -> Any:  # fmt: skip
        folder = _run_dir(config, job_dir_key) if job_subdir_key is None else None
        made: list[str] = []
        if folder is not None:
            try:
                _make_run_dir(folder, made)
            except OSError as e:
                fail(f"{job_dir_key}={folder}: cannot make it ({e.strerror}); corpusprep "
                     "writes only to out_dir, so leave it out (or give a folder that can be "
                     "made)")  # fmt: skip
        try:
            return run_job(config=config, job_dir_key=job_dir_key,
                           job_subdir_key=job_subdir_key, **kw)  # fmt: skip
        finally:
            for path in made:  # deepest first; a folder with anything in it stays
                with contextlib.suppress(OSError):
                    os.rmdir(path)

    run_in_folder._corpusprep_guard = True  # type: ignore[attr-defined]
    hydra_main.run_job = run_in_folder


def _run_dir(config: DictConfig, key: str) -> Optional[str]:
    """The run's folder as Hydra reads it; None where that fails (Hydra's own error says why)."""
    from hydra.core.hydra_config import HydraConfig

    try:
        HydraConfig.instance().set_config(config)  # as run_job does first: ${hydra:job.name}
        return str(OmegaConf.select(config, key))
    except OmegaConfBaseException:
        return None


def _make_run_dir(folder: str, made: list[str]) -> None:
    """mkdir -p, noting in `made` each folder it created, deepest first."""
    missing, path = [], os.path.abspath(folder)
    while not os.path.lexists(path):
        missing.append(path)
        path = os.path.dirname(path)
    for path in reversed(missing):
        try:
            os.mkdir(path)
        except FileExistsError:  # another run made it meanwhile: its folder, not ours
            continue
        made.insert(0, path)
    if not os.path.isdir(os.path.abspath(folder)):  # "": the command's folder, as to Hydra
        raise NotADirectoryError(errno.ENOTDIR, "a file is there", folder)


def _check_hydra_targets(config: DictConfig) -> None:
    from corpusprep.config import trusted_packages

    plugin_groups = ("launcher", "sweeper")  # Hydra allows only its hydra_plugins classes
    trusted = (*trusted_packages(), "hydra")
    hydra_node = OmegaConf.to_container(config.get("hydra", {}), resolve=False)
    for key, target in _targets(hydra_node, "hydra"):
        parts = key.split(".")
        if len(parts) == 3 and parts[1] in plugin_groups:
            continue
        ok = len(parts) == 4 and parts[1] == "callbacks" and str(target).split(".")[0] in trusted
        if not ok:
            raise UserError(
                f"{key}={target}: a config may not name code to run here; only "
                f"hydra.callbacks.NAME._target_ of {', '.join(trusted)} (see docs/safety.md)"
            )


def _targets(node: Any, prefix: str) -> Any:
    """(dotted key, value) of every `_target_` under node."""
    if isinstance(node, dict):
        for k, v in node.items():
            key = f"{prefix}.{k}"
            if k == "_target_":
                yield key, v
            else:
                yield from _targets(v, key)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _targets(v, f"{prefix}.{i}")


def _interrupt(signum: int, frame: Any) -> NoReturn:
    global _stopped_by
    _stopped_by = signum
    raise KeyboardInterrupt


_stopped_by: Optional[int] = None  # the last signal _interrupt turned into a Ctrl-C


def _not_lost(hook: Any) -> Any:
    """sys.unraisablehook, but for _interrupt's KeyboardInterrupt: a handler runs at the
    main thread's next step, wherever that is, and inside a weakref's callback, a __del__
    or a fork's hook its exception can go nowhere: Python printed it as "Exception ignored"
    and the run went on, to commit and exit 0. The signal is sent again from a thread, so
    once the callback is over (a thread waits for the GIL: 5 ms at most; should the signal
    land in a callback again, the same again)."""

    def caught(unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt) and _stopped_by is not None:
            import _thread  # start_new_thread: not Thread.start(), which waits for it

            _thread.start_new_thread(_send_again, (_stopped_by,))
            return
        hook(unraisable)

    return caught


def _send_again(signum: int) -> None:
    os.kill(os.getpid(), signum)


def _interrupt_code() -> int:
    """The exit code of an interrupted run: 128 + the signal's number, as a shell reports a
    process that signal ended (130 for Ctrl-C, 143 for SIGTERM), so a scheduler or script
    can tell a timeout's kill from a user's Ctrl-C. None noted: Python's own Ctrl-C, from
    before main() set the handler."""
    return 128 + (_stopped_by or signal.SIGINT)


# what a required ("???") key takes, for its message; any other: KEY=VALUE
REQUIRED_EXAMPLES = {
    "source.path": "FILE",
    "source.glob": "PATTERN, quoted (e.g. 'source.glob=corpus/*.txt')",
    "source.dataset": "OWNER/NAME (e.g. source.dataset=Skylion007/openwebtext)",
    "tokenizer.path": "FILE (a tokenizer.json)",
    "tokenizer.dir": "DIR (the out_dir of an earlier run)",
}


def check_required(cfg: DictConfig) -> None:
    """No corpus chosen at all gets a hint, and a required key left unset names itself with
    an example, not OmegaConf's missing-value message (or "???" as a value)."""
    source = cfg.get("source")

    def missing(node: Any, key: str) -> bool:
        keys = node.keys() if isinstance(node, DictConfig) else ()  # `in`: False for "???"
        return key in keys and OmegaConf.is_missing(node, key)

    if missing(source, "url"):
        datasets = ", ".join(sorted(available_options()["dataset"]))
        raise UserError(
            f"nothing to prepare: choose a preset with dataset=NAME ({datasets}) or your own "
            "text with source=file source.path=FILE (or source.url=URL)"
        )
    for group in ("source", "tokenizer", "format", "executor"):
        node = cfg.get(group)
        for key in node.keys() if isinstance(node, DictConfig) else ():
            if missing(node, key):
                name = f"{group}.{key}"
                example = REQUIRED_EXAMPLES.get(name, "VALUE")
                raise UserError(f"{name} is required: set {name}={example}")


def summary(m: dict[str, Any], out_dir: str) -> str:
    if m.get("dry_run"):
        from corpusprep.estimate import describe

        return describe(m, out_dir)
    if m.get("skipped"):
        return (
            f"corpusprep: {out_dir} is up to date (same input sha256 and settings, made "
            f"{escape_controls(str(m['created']))}); skipped, force=true redoes it"
        )
    src = m["source"]
    inputs = src.get("files", [])
    where = redact_text(src.get("url") or src.get("path") or src["file"])
    if len(inputs) > 1 and "glob" in src:
        where = ", ".join(src["glob"])
    where = escape_controls(where)  # a globbed file's name: its line end is no row of its own
    detail = f"{src['bytes']:,} bytes, sha256 {src['sha256'][:12]}..."
    if len(inputs) > 1:
        detail = f"{plural(len(inputs), 'file')}, {detail}"
    source = f"  source     {where} ({detail})"
    if len(source) > WIDTH:  # a long URL or glob: the details on a line of their own
        source = f"  source     {_elide(where, WIDTH - 13)}\n             {detail}"
    docs = m.get("documents", {})
    files = list(m.get("files", {}))
    shown = ", ".join(files[:4]) + (f" and {len(files) - 4} more" if len(files) > 4 else "")
    lines = [
        f"corpusprep: {m['name']} -> {out_dir}",
        source,
        f"  tokenizer  {_kind(m['tokenizer'])}, vocab {m['vocab_size']:,}, dtype {m['dtype']}"
        + (f", backend {m['tokenizer']['backend']}" if m["tokenizer"].get("backend") else "")
        + (f"; {m['tokenizer']['per_document']}" if m["tokenizer"].get("per_document") else ""),
        f"  train      {plural(m['tokens']['train'], 'token')}",
        f"  val        {plural(m['tokens']['val'], 'token')}",
        f"  files      {shown} ({m.get('format', {}).get('kind', 'nanogpt')})",
    ]
    if docs.get("total", 1) > 1:
        dup = docs.get("exact_duplicates_across_splits")
        lines.append(
            f"  documents  {docs['train']:,} train / {docs['val']:,} val (split by "
            f"{m['split']['by']}, eot {m['eot']['mode']})"
            + (f", {dup:,} val duplicated in train" if dup else "")
            + (f", {docs['skipped_invalid']:,} invalid skipped" if docs["skipped_invalid"] else "")
        )
    lines.append(f"  {m['chars_per_token']:.3f} chars/token, {m['seconds']['total']:.2f} s")
    note = m.get("note") or m.get("nanogpt_note")  # nanogpt's, under its first key
    if note:
        lines.append(f"  note: {note}")
    return "\n".join(lines)


WIDTH = 100  # the summary's lines fit in this many columns


def _kind(described: dict) -> str:
    """The tokenizer's kind for the summary; a reused one names what it reuses."""
    if described.get("kind") == "reuse":
        return f"reuse of {_kind(described.get('reused') or {})} from {described.get('dir')}"
    return str(described.get("kind"))


def _elide(text: str, width: int) -> str:
    """A long URL or path cut in the middle: its start (the host) and its end (the file)."""
    if len(text) <= width:
        return text
    head = (width - 3) // 2
    return f"{text[:head]}...{text[len(text) - (width - 3 - head) :]}"


def plural(count: int, word: str) -> str:
    """'1 token', '1,003,854 tokens'."""
    return f"{count:,} {word}{'' if count == 1 else 's'}"
