"""The config Hydra composed for a plain run, kept so that the same command skips Hydra.

Importing Hydra and composing the config from a dozen YAML files takes about 0.3 s of every
run: as long as encoding 10 MB of text. For one command line, Python and set of config
files, Hydra composes the same config every time. So a plain run (no -m, no --flag, no
hydra.* override) keeps its composed config, unresolved, in
~/.cache/corpusprep/compose/KEY.json ($XDG_CACHE_HOME/corpusprep/compose), and the next run
of the same command reads it instead of importing Hydra at all. Interpolations such as
${oc.env:...} are kept as written: they still resolve when the run reads them.

An entry is used only while nothing Hydra composed it from has changed. It records the size
and modification time of every config file and folder Hydra searched and of corpusprep's
own code (which checks the overrides while Hydra composes), and what is installed: the
package metadata, .pth files and Hydra plugins in every folder on sys.path. Any
difference, and Hydra composes as before. Never kept: a command line holding a secret (a
URL's password, ?token=), and a run for which Hydra does more than call corpusprep (a
callback, an environment, a log file of its own).

The file is JSON: reading it runs nothing, and the `_target_`s in it are checked like any
config's (config.build). But whoever can write an entry decides what the run does, so it is
read only if it and its folder are the user's own and nobody else may write them; that is
also why entries are not kept in CORPUSPREP_CACHE_DIR, which may be a shared folder.
CORPUSPREP_COMPOSE_CACHE=0 turns the cache off; CORPUSPREP_COMPOSE_CACHE=DIR moves it.

A new out_dir or input path (a fresh folder for each experiment) sets nothing but itself:
where its value is a plain string as Hydra reads it (free_value), the entry is kept for the
command line with that value left out, and a run with another value takes the entry and
sets the value itself, as Hydra would have.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf

from corpusprep._paths import open_regular_fd, user_cache_dir

FORMAT = 2  # of an entry; an entry of another format is not read
MAX_ENTRIES = 256  # the oldest beyond this are removed when one is written
SETTING = "CORPUSPREP_COMPOSE_CACHE"  # 0: off; a folder: the entries go there
PACKAGE = Path(__file__).resolve().parent


def eligible(argv: list[str]) -> bool:
    """Whether Hydra's composition for this command line may be kept and reused: overrides
    only, none of Hydra's own settings, no secret in it."""
    from corpusprep.redact import redact_override

    if os.environ.get(SETTING) == "0":
        return False
    for arg in argv:
        key = arg.lstrip("+~").split("=", 1)[0]
        if arg.startswith("-") or ("=" not in arg and not arg.startswith("~")):
            return False  # a flag (-m, --cfg, --config-dir ...), or not an override
        if key.startswith("hydra"):
            return False  # Hydra's own settings: hydra.run.dir, hydra/launcher=...
        if redact_override(arg) != arg:
            return False  # a password or token would be written to the cache
        if "${" in arg:  # resolved into Hydra's overrides (an env var's value), or a
            return False  # resolver only Hydra registers (${now:...}, ${hydra:...})
    return True


FREE_KEYS = ("out_dir", "source.path")  # set only themselves: one entry serves every value
_PLAIN = re.compile(r"[A-Za-z0-9_./][A-Za-z0-9_./-]*")  # no leading -: -1, -inf
# what Hydra's grammar reads as a number (1_000, 1e3, .5), or may: such values are not free
_NUMBERISH = re.compile(r"[0-9_.]*(?:[eE][+-]?[0-9_]*)?")
_WORDS = ("true", "false", "null", "nan", "inf")  # any case


def free_value(value: str) -> bool:
    """Whether Hydra reads `key=value` as that very string: path characters only, and not a
    number, bool, null, list, quoted string or interpolation."""
    return bool(
        _PLAIN.fullmatch(value) and not _NUMBERISH.fullmatch(value) and value.lower() not in _WORDS
    )


def _template(argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """argv with each free key's value left out, and those values."""
    template, free = [], {}
    named = [arg.lstrip("+~").partition("=")[0] for arg in argv]
    for arg in argv:
        key, _, value = arg.partition("=")
        # free only if given once, as key=value: of two values Hydra takes the last, and
        # +key, ++key and ~key mean more than setting it
        if key in FREE_KEYS and named.count(key) == 1 and free_value(value):
            free[key] = value
            arg = f"{key}=\0"  # no argument holds a NUL: never a command line's own
        template.append(arg)
    return template, free


def cache_folder() -> Path:
    """Where entries are kept: $CORPUSPREP_COMPOSE_CACHE, else the user's own cache folder."""
    if os.environ.get(SETTING):
        return Path(os.environ[SETTING]).expanduser()
    return user_cache_dir() / "compose"


def _entry_path(argv: list[str]) -> Path:
    who = [FORMAT, sys.executable, sys.version, sys.path, str(PACKAGE), argv]
    key = hashlib.sha256(json.dumps(who).encode()).hexdigest()[:32]
    return cache_folder() / f"{key}.json"


def _read_own(path: Path) -> str:
    """The entry's text, if the file and its folder are this user's and nobody else's to
    write; else OSError."""
    with os.fdopen(open_regular_fd(path), encoding="utf-8") as f:  # a FIFO: never waited on
        for st in (os.fstat(f.fileno()), os.stat(path.parent)):
            if st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                raise PermissionError(f"{path}: another user may write it")
        return f.read()


def load(argv: list[str]) -> Optional[tuple[DictConfig, list[str]]]:
    """(the composed config, the task overrides) Hydra gave this command line last time,
    if nothing it was composed from has changed since; else None."""
    if not eligible(argv):
        return None
    template, free = _template(argv)
    entry = _entry(template) if free else None
    if entry is None:
        free, entry = {}, _entry(argv)
    if entry is None or entry["free"].keys() != free.keys():
        return None
    cfg = OmegaConf.create(entry["config"])
    overrides = list(entry["overrides"])
    for key, value in free.items():  # this run's own values, where the entry's were
        OmegaConf.update(cfg, key, value, merge=False)
        overrides[overrides.index(f"{key}={entry['free'][key]}")] = f"{key}={value}"
    OmegaConf.set_struct(cfg, True)  # as Hydra gives it: a key nothing defines is an error
    global _kept_by
    _kept_by = entry["hydra"]
    return cfg, overrides


def _entry(argv: list[str]) -> Optional[dict[str, Any]]:
    """The entry kept for argv, if it is whole and nothing it was composed from changed."""
    try:
        entry = json.loads(_read_own(_entry_path(argv)))
        if not _valid(entry, argv) or _stamp(entry["stamped"]) != entry["stamp"]:
            return None
    except (OSError, ValueError, TypeError, KeyError):
        return None  # absent, unreadable, half-written by a killed run: Hydra composes
    return entry


_kept_by = ""  # the version of the Hydra that composed the config load() gave


def hydra_version() -> str:
    """The version of the Hydra that composed this run's config: the one imported, or the
    one that composed a kept config (its install is stamped: the same one is installed),
    without importing Hydra or reading package metadata (0.04 s of a run)."""
    hydra = sys.modules.get("hydra")
    if hydra is not None:
        return str(hydra.__version__)
    if _kept_by:
        return _kept_by
    from importlib.metadata import version

    return version("hydra-core")


def _valid(entry: Any, argv: list[str]) -> bool:
    return (
        isinstance(entry, dict)
        and entry.get("format") == FORMAT
        and entry.get("argv") == argv
        and isinstance(entry.get("config"), dict)
        and isinstance(entry.get("overrides"), list)
        and all(isinstance(o, str) for o in entry["overrides"])
        and isinstance(entry.get("stamped"), list)
        and all(isinstance(p, str) for p in entry["stamped"])
        and isinstance(entry.get("stamp"), dict)
        and isinstance(entry.get("hydra"), str)
        and isinstance(entry.get("free"), dict)
        and set(entry["free"]) <= set(FREE_KEYS)
        and all(
            isinstance(v, str) and free_value(v) and f"{k}={v}" in entry["overrides"]
            for k, v in entry["free"].items()
        )  # fmt: skip
    )


def save(argv: list[str], cfg: DictConfig, hydra: DictConfig, overrides: list[str]) -> None:
    """Keep what Hydra composed for argv: the task's config (before anything changes it)
    and its overrides, if hydra (HydraConfig's node) does nothing a kept config leaves out.
    Best effort: a cache that cannot be written (read-only, full) is no error."""
    if not eligible(argv) or not _plain_hydra(hydra):
        return
    stamped = _sources(hydra)
    if stamped is None:
        return
    stamp = _stamp(stamped)
    if _changed_lately(stamp):
        return
    task = OmegaConf.to_container(cfg, resolve=False)
    template, free = _template(argv)
    if not all(_set_to(task, key, value) and f"{key}={value}" in overrides
               for key, value in free.items()):  # fmt: skip
        template, free = argv, {}  # Hydra did not just set them: kept for this argv only
    entry = {"format": FORMAT, "argv": template, "free": free, "config": task,
             "overrides": list(overrides), "hydra": hydra_version(), "stamped": stamped,
             "stamp": stamp}  # fmt: skip
    path = _entry_path(template)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        text = json.dumps(entry)
        if json.loads(text)["config"] != task:  # an int key, a tuple: JSON would change it
            return
        if _HYDRA_RESOLVER.search(text) or _has_secret(entry):
            return
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # whatever the umask
        with open(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)  # a reader sees the old entry or the new one, never half
        _prune(path.parent)
    except (OSError, TypeError, ValueError):  # TypeError/ValueError: a value JSON cannot hold
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def _set_to(config: dict, key: str, value: str) -> bool:
    """Whether the composed config holds value at key (a dotted path), as a string."""
    node: Any = config
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return type(node) is str and node == value


STARTED_NS = time.time_ns()  # when this process started to compose (imported just before)
RACY_NS = 2_000_000_000  # a file system's coarsest timestamps: 1-2 s


def _changed_lately(stamp: dict[str, list]) -> bool:
    """Whether a stamped file changed while Hydra composed, or so shortly before that a
    second change might leave the same time: the stamp would not tell the content Hydra
    read from the content on disk, so the entry is not kept (the next run keeps one)."""
    times = [t for _, t in stamp["files"]] + [t for _, (_, t) in stamp["installed"]]
    return any(t > STARTED_NS - RACY_NS for t in times)


# resolvers Hydra registers when it is imported: a kept config is resolved without Hydra
_HYDRA_RESOLVER = re.compile(r"\$\{\s*(now|hydra|python_version)\s*:")


def _has_secret(entry: dict) -> bool:
    """Whether a URL's user:password or ?token= is anywhere in the entry: in the config as
    Hydra composed it too (an escaped `http\\://user:pw@h` on the command line, a preset)."""
    from corpusprep.redact import redact_values

    return redact_values(entry) != entry


def _plain_hydra(hydra: DictConfig) -> bool:
    """Hydra does nothing for this run but call corpusprep: what a cache hit leaves out."""
    choices = hydra.runtime.choices
    callbacks = OmegaConf.to_container(hydra.callbacks, resolve=False)
    return (
        choices.get("hydra/job_logging") == "none"
        and choices.get("hydra/hydra_logging") == "none"
        and callbacks == {"sweep": {"_target_": "corpusprep.sweep.SweepCallback"}}
        and not hydra.job.env_set
        and hydra.job.chdir is False
        and hydra.output_subdir is None
        and str(hydra.mode) == "RunMode.RUN"
        and not hydra.verbose
    )


def _sources(hydra: DictConfig) -> Optional[list[str]]:
    """Every file and folder whose change could change what Hydra composes or lets through,
    or None if a config source is not a folder on disk (a zip, a plugin's own scheme)."""
    from importlib.resources import files

    folders = [PACKAGE]
    for source in hydra.runtime.config_sources:
        scheme, where = str(source.schema), str(source.path)
        if scheme == "structured":
            continue  # dataclasses in code: installed packages, stamped by _installed
        if scheme not in ("pkg", "file"):
            return None
        try:
            folder = Path(str(files(where))) if scheme == "pkg" else Path(where)
        except (ModuleNotFoundError, TypeError, ValueError):
            return None
        if not folder.is_dir():
            return None  # in a zip, or several folders of a namespace package
        folders.append(folder)
    stamped = [path for folder in folders for path in _tree(folder)]
    if any(_interpolated_default(p) for p in stamped if p.endswith((".yaml", ".yml"))):
        return None
    return stamped


def _interpolated_default(path: str) -> bool:
    """Whether a config file has an interpolation in its defaults list, which Hydra
    resolves while composing (${oc.env:...} there would make the composition depend on the
    environment); a file that cannot be read or parsed counts as one."""
    import yaml

    from corpusprep.config import yaml_loader

    try:
        text = Path(path).read_text("utf-8")
        if "defaults" not in text or "${" not in text:
            return False
        data = yaml.load(text, Loader=yaml_loader())
    except (OSError, ValueError, yaml.YAMLError):
        return True
    return isinstance(data, dict) and "${" in json.dumps(data.get("defaults"), default=str)


def _tree(folder: str | Path) -> Iterator[str]:
    """The folder, its files and its folders, in a fixed order; no compiled bytecode. A
    linked folder is followed, as Hydra follows it (each real folder once: no loop)."""
    seen: set[str] = set()
    for root, dirs, names in os.walk(folder, followlinks=True):
        real = os.path.realpath(root)
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        yield root
        yield from (os.path.join(root, n) for n in sorted(names) if not n.endswith(".pyc"))


def _stamp(paths: list[str]) -> dict[str, list]:
    """Size and modification time of each path (a folder's changes when an entry is added,
    removed or renamed in it; [-1, -1] for one that is gone), and what is installed."""
    return {"files": [_stat(p) for p in paths], "installed": _installed()}


def _stat(path: str) -> list[int]:
    try:
        st = os.stat(path)
    except OSError:
        return [-1, -1]
    return [st.st_size, st.st_mtime_ns]


INSTALLED = (".dist-info", ".egg-info", ".egg-link", ".pth")


def _installed() -> list[list]:
    """What decides the installed packages' entry points (corpusprep's plugins) and Hydra's
    plugins, in each folder on sys.path: its package metadata, .pth files and hydra_plugins
    (a listing, not a folder's time, so that files written to the working folder, which is
    on sys.path under `python -m`, do not count)."""
    out = []
    for folder in sys.path:
        try:
            with os.scandir(folder or ".") as it:
                found = sorted(e.name for e in it if e.name.endswith(INSTALLED)
                               or e.name == "hydra_plugins")  # fmt: skip
        except OSError:
            continue
        for name in found:
            where = os.path.join(folder or ".", name)
            # Hydra imports every plugin in hydra_plugins: their code counts
            paths = _tree(where) if name == "hydra_plugins" else [where]
            out.extend([path, _stat(path)] for path in paths)
    return out


_ENTRY = re.compile(r"[0-9a-f]{32}\.json")
_TEMPORARY = re.compile(r"\.[0-9a-f]{32}\.json\.\d+\.tmp")


def _prune(folder: Path) -> None:
    """The oldest entries beyond MAX_ENTRIES, and what killed runs left (an hour old):
    nothing else in the folder (it may be one the user chose, holding other files)."""
    found = [(p.stat().st_mtime_ns, p) for p in folder.iterdir()]
    entries = sorted((t, p) for t, p in found if _ENTRY.fullmatch(p.name))
    hour_ago = time.time_ns() - 3600 * 10**9
    left = [(t, p) for t, p in found if _TEMPORARY.fullmatch(p.name) and t < hour_ago]
    for _, old in entries[:-MAX_ENTRIES] + left:
        old.unlink(missing_ok=True)
