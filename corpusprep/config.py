"""Config helpers: OmegaConf resolvers, the one place plugins are instantiated, run settings."""

from __future__ import annotations

import copy
import functools
import importlib
import importlib.util
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union
from urllib.parse import urlsplit

from omegaconf import DictConfig, ListConfig, OmegaConf

from corpusprep.errors import UserError, escape_controls
from corpusprep.redact import redact_text

DTYPES = ("auto", "uint16", "uint32")
SPLIT_BY = ("auto", "position", "document", "hash", "head", "tail")
ORDERS = ("source", "shuffle")
EOT = ("auto", "append", "prepend", "none")


def _stem(path_or_url: Any) -> str:
    """A name for the output folder: 'https://h/a/input.txt?x=1' -> 'input',
    'corpus/books.jsonl.gz' -> 'books' (up to the first dot: all suffixes go),
    'v1.2.txt' -> 'v1.2' (a dot between digits is a number's), 'web/**/*.jsonl.zst' -> 'web'
    (a glob's parts with wildcards skipped). A file that is there, or a URL, is no glob:
    'in/corpus[v2].txt' -> 'corpus[v2]'."""
    text = str(path_or_url)
    url = "://" in text
    if not url:  # read as the sources read it: "~/*.txt" names the home folder, not "~"
        text = os.path.expanduser(text)
    path = urlsplit(text).path if url else text
    parts = [p for p in path.replace("\\", "/").split("/") if p and p not in (".", "..")]
    literal = url or os.path.lexists(text)
    for part in reversed(parts):
        if literal or not any(c in part for c in "*?["):
            return re.match(r"(?:[^.]|(?<=\d)\.(?=\d))*", part).group(0) or "corpus"
    return "corpus"


def _first(value: Any) -> Any:
    """The first of a list (or the value itself): names a run after its first glob."""
    return value[0] if isinstance(value, (list, tuple, ListConfig)) and len(value) else value


def _stdlib() -> str:
    """The running Python's standard library folder (the python_stdlib preset)."""
    import sysconfig

    return sysconfig.get_paths()["stdlib"]


def _out_dir(run_default: str) -> str:
    """out_dir's default: data/<name> in a plain run; in a sweep, the job's own folder."""
    if not _hydra_job_runs():
        return run_default
    from corpusprep.sweep import job_dir

    folder = job_dir()
    return run_default if folder is None else str(folder)


def _safe(name: str) -> str:
    """A folder name from a job's overrides: no "/" (paths, URLs), no credentials (a URL's
    user:password, ?token=...), bounded in length."""
    import hashlib

    shown = redact_text(name)
    if shown != str(name):  # two jobs may differ only in a secret: their folders must not
        shown += f"-job{_job_num()}"
    name = re.sub(r"[/\\:*?\"<>|]+", "_", shown) or "job"
    if name != shown:  # values that differ only there (d/x.txt, d_x.txt): their own folders
        name += f"-{hashlib.sha256(shown.encode()).hexdigest()[:8]}"
    if len(name) > 120:
        name = f"{name[:100]}-{hashlib.sha256(name.encode()).hexdigest()[:12]}"
    return name


def _hydra_job_runs() -> bool:
    """Whether Hydra may be running this job: not when the run's config was kept from an
    earlier run (corpusprep.compose_cache), which does not import Hydra at all."""
    return "hydra.core.hydra_config" in sys.modules


def _job_num() -> str:
    if not _hydra_job_runs():
        return ""
    from hydra.core.hydra_config import HydraConfig

    return str(HydraConfig.get().job.num) if HydraConfig.initialized() else ""


def _docs() -> str:
    """The folder of corpusprep's documentation pages, for --help: installed with it (the
    wheel holds docs/ as corpusprep/docs), or a checkout's docs/."""
    package = os.path.dirname(os.path.abspath(__file__))
    for folder in (os.path.join(package, "docs"), os.path.join(os.path.dirname(package), "docs")):
        if os.path.isfile(os.path.join(folder, "keys.md")):
            return folder
    return "docs/ in corpusprep's source"


def register_resolvers() -> None:
    """corpusprep's ${cp.*} resolvers, registered when this module is imported: by the
    command line, by Hydra's compose API (corpusprep.conf's __init__ and _paths.config_path
    import it), and by whatever builds a plugin."""
    resolvers = (("cp.stem", _stem), ("cp.first", _first), ("cp.stdlib", _stdlib),
                 ("cp.out_dir", _out_dir), ("cp.safe", _safe), ("cp.docs", _docs))  # fmt: skip
    for name, fn in resolvers:
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)


def build(node: DictConfig | dict, what: str) -> Any:
    """Make a plugin (source, tokenizer, executor, format) from its config node, or from a
    plain dict (a manifest's record: taken as written, no interpolation).

    Configs come from places that are not code (a downloaded preset, --config-dir, a
    manifest.json), so nothing they name runs unless it is safe: `_target_` must be a class
    of corpusprep or of a trusted plugin package (see trusted_packages), checked before its
    module is imported, and a subclass of the group's base (Tokenizer for tokenizer, ...).
    Its arguments are plain values: a nested `_target_` is a dict like any other, never
    built. Hydra's instantiate is not used: it imports and calls whatever a config names.
    """
    target = node.get("_target_") if isinstance(node, (DictConfig, dict)) else None
    if not target:
        raise UserError(f"{what} has no _target_: choose one with {what}=NAME")
    if what == "source" and isinstance(node, DictConfig):
        refuse_env(node, what)
    cls = locate(target, what)
    if isinstance(node, DictConfig):
        values = OmegaConf.to_container(node, resolve=True)
    else:
        values = copy.deepcopy(dict(node))
    # `name` labels the choice for folder names and tables; it is not a constructor argument.
    kwargs = {str(k): v for k, v in values.items() if k not in ("_target_", "name")}
    try:
        return cls(**kwargs)
    except UserError:
        raise
    except TypeError as e:  # an unknown or missing key in the plugin's config
        raise UserError(redact_text(f"{what}: {e}; check the {what}.* keys")) from None
    except Exception as e:
        raise UserError(redact_text(f"{what}: cannot create {target}: {e}")) from None


PLUGIN_GROUPS = ("source", "tokenizer", "executor", "format")
# the top-level keys of conf/config.yaml (tests/test_first_steps.py checks they are the same)
TOP_KEYS = ("name", "split", "split_by", "val_size", "order", "seed", "eot", "dtype", "out_dir",
            "shard_tokens", "shard_bytes", "quiet", "force", "dry_run")  # fmt: skip


def overridden_keys(overrides: list[str]) -> set[str]:
    """The keys the command line sets (`+key=`, `~key=` too), as written."""
    return {o.lstrip("+~").split("=", 1)[0] for o in overrides if "=" in o}


def drop_leftovers(cfg: DictConfig, overrides: list[str]) -> None:
    """Remove the keys a preset set for another choice of a group: `dataset=shakespeare
    tokenizer=char` keeps the preset's source and name but not its tokenizer.encoding,
    which CharTokenizer does not take. A key given on the command line is never dropped
    (one the class does not take was refused before Hydra ran: corpusprep.overrides)."""
    from omegaconf import open_dict

    from corpusprep.overrides import check_file_key, check_file_top_keys

    check_file_top_keys(cfg, [*TOP_KEYS, *PLUGIN_GROUPS])
    given = overridden_keys(overrides)
    for group in PLUGIN_GROUPS:
        node = cfg.get(group)
        target = node.get("_target_") if isinstance(node, DictConfig) else None
        if not target:
            continue
        taken = accepted_keys(locate(target, group))
        if taken is None:
            continue
        mine = {k.split(".")[1] for k in given if k.startswith(f"{group}.")}
        with open_dict(node):
            for key in [k for k in node if k not in taken | mine | {"_target_", "name"}]:
                check_file_key(group, node, key)  # another option's, or misspelt
                del node[key]


def accepted_keys(cls: type) -> Optional[set[str]]:
    """The keyword arguments cls takes (with a source's read options); None: any."""
    import dataclasses
    import inspect

    if cls.__init__ is object.__init__:  # no constructor of its own: takes nothing
        return set()
    params = inspect.signature(cls.__init__).parameters.values()
    names = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    if any(p.kind == p.VAR_KEYWORD for p in params):
        from corpusprep.sources import ReadOptions, Source

        if not issubclass(cls, Source):
            return None
        names |= {f.name for f in dataclasses.fields(ReadOptions)}
    return names - {"self"}


PLUGIN_PACKAGES_ENV = "CORPUSPREP_PLUGIN_PACKAGES"
BASES = {"source": ("corpusprep.sources", "Source"),
         "tokenizer": ("corpusprep.tokenizers", "Tokenizer"),
         "executor": ("corpusprep.executors", "Executor"),
         "format": ("corpusprep.exporters", "Exporter")}  # fmt: skip
_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")


def trusted_packages() -> list[str]:
    """The top-level packages whose classes a config may name: corpusprep, every installed
    plugin's (entry point group corpusprep.conf), and those listed, comma-separated, in
    $CORPUSPREP_PLUGIN_PACKAGES (your own code, not packaged as a plugin). The environment
    is the user's choice; a config file, a preset or a folder cannot extend this list."""
    from corpusprep._paths import plugin_config_packages

    names = {"corpusprep"} | {package.split(".")[0] for _, package in plugin_config_packages()}
    names |= {n.strip() for n in os.environ.get(PLUGIN_PACKAGES_ENV, "").split(",") if n.strip()}
    return sorted(names)


def build_recorded(node: dict[str, Any], manifest: Path | str) -> Any:
    """build() of the tokenizer a folder's manifest records: a plugin's class whose package
    is not installed here (the folder came from another machine or venv) is said so, with
    the fix, not refused as a config naming an untrusted class (whose fix is for configs)."""
    target = node.get("_target_") if isinstance(node, dict) else None
    top = str(target).split(".")[0]
    if (isinstance(target, str) and _DOTTED.fullmatch(target) and top != "corpusprep"
            and importlib.util.find_spec(top) is None):  # fmt: skip
        raise UserError(redact_text(  # (a stranger's folder may name any package: a caveat)
            f"{manifest}: its tokenizer is {target}, a class of {top}, which is not installed "
            f"here; to read or reuse the folder, install the plugin that made it, if you "
            "trust whoever made the folder"
        ))  # fmt: skip
    return build(node, "tokenizer")


def locate(target: Any, what: str) -> type:
    """The class `target` names, if it may be made for `what`: inside a trusted package
    (checked before anything is imported: importing runs code) and of the group's kind."""
    label = redact_text(f"{what}._target_={target}")
    how = f"choose one with {what}=NAME"
    if not isinstance(target, str) or not _DOTTED.fullmatch(target):
        raise UserError(f"{label}: not a dotted class path (package.module.Class); {how}")
    parts = target.split(".")
    # corpusprep's own classes need no list (whose entry points cost a run 0.05 s to read)
    trusted = ["corpusprep"] if parts[0] == "corpusprep" else trusted_packages()
    if parts[0] not in trusted:
        raise UserError(
            f"{label}: a config may only name classes of corpusprep or an installed plugin "
            f"package ({', '.join(trusted)}); {how}, or list your own package in "
            f"{PLUGIN_PACKAGES_ENV}"
        )
    obj: Any = None
    for n in range(len(parts) - 1, 0, -1):  # the longest module of the path, then attributes
        module = ".".join(parts[:n])
        try:
            obj = importlib.import_module(module)
            break
        except ModuleNotFoundError as e:
            if e.name and (module == e.name or module.startswith(f"{e.name}.")):
                continue  # no such module: a shorter path may be the module
            raise UserError(f"{label}: cannot import {module} ({e})") from None
        except ImportError as e:
            raise UserError(f"{label}: cannot import {module} ({e})") from None
    if obj is None:
        raise UserError(f"{label}: there is no module {parts[0]}; {how}")
    for attr in parts[n:]:
        if not hasattr(obj, attr):
            raise UserError(f"{label}: {'.'.join(parts[:n])} has no {attr}; {how}")
        obj, n = getattr(obj, attr), n + 1
    base = _base(what)
    if not isinstance(obj, type) or (base is not None and not issubclass(obj, base)):
        kind = f"a {base.__module__}.{base.__name__} class" if base else "a class"
        raise UserError(f"{label}: not {kind}; {how}")
    return obj


def _base(what: str) -> Optional[type]:
    if what not in BASES:
        return None
    module, name = BASES[what]
    return getattr(importlib.import_module(module), name)


_ENV = re.compile(r"\$\{\s*(oc\.env|env)\s*:")  # oc.env, and OmegaConf 2.0's legacy env


def refuse_env(node: DictConfig, what: str) -> None:
    """No value of a source may read the environment, directly or through another key: a
    downloaded preset could copy a secret into a URL (`url: https://h/?k=${oc.env:TOKEN}`)
    and send it away. Only the defaults corpusprep and its plugins ship are allowed
    (cache_dir: ${oc.env:CORPUSPREP_CACHE_DIR,null}, the Hub's endpoint)."""
    raw = OmegaConf.to_container(node, resolve=False)
    shipped: dict[bool, set[tuple[str, str]]] = {}  # by plugins: read once, if needed

    def is_shipped(key: str, value: Any) -> bool:
        if not isinstance(value, str):
            return False
        # corpusprep's own files first; the plugins' (a scan of every installed package's
        # entry points: 0.02-0.1 s) only for a value corpusprep does not ship
        for plugins in (False, True):
            if plugins not in shipped:
                shipped[plugins] = _shipped_interpolations(what, plugins)
            if (key, value) in shipped[plugins]:
                return True
        return False

    for key, value in _strings(raw):  # written in the value itself (oc.env, or legacy env)
        if _ENV.search(value) and not is_shipped(key, value):
            raise env_error(what, key, value)
    for key, value in raw.items():  # through other keys: resolve each one, watching oc.env
        if "${" in str(value) and _reads_env(node, key) and not is_shipped(key, value):
            raise env_error(what, key, value)


def env_error(what: str, key: str, value: Any) -> UserError:
    return UserError(redact_text(
        f"{what}.{key}={value}: a {what} value may not read the environment (oc.env): a "
        "config file could send a secret away in it; write the value itself, on the "
        "command line if it is a secret"
    ))  # fmt: skip


def _strings(value: Any, prefix: str = "") -> Iterator[tuple[str, str]]:
    """(dotted key, raw string) of every string in a nested dict/list."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _strings(v, f"{prefix}[{i}]")
    elif isinstance(value, str):
        yield prefix, value


@functools.lru_cache(maxsize=1)
def yaml_loader() -> type:
    """OmegaConf's YAML loader, parsing with libyaml's C parser where PyYAML has it: the
    same values (OmegaConf's rule for floats, no timestamps, its Path tags), a duplicate key
    still refused, and about 10x faster to parse. Hydra reads a dozen config files in every
    run, which took ~50 ms in the pure-Python parser."""
    import yaml
    from omegaconf import _utils

    base = _utils.get_yaml_loader()
    fast = getattr(yaml, "CSafeLoader", None)
    if fast is None:  # PyYAML built without libyaml
        return base

    class Loader(fast):  # type: ignore[misc, valid-type]
        yaml_implicit_resolvers = base.yaml_implicit_resolvers
        yaml_constructors = base.yaml_constructors

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            keys = set()
            for key_node, _ in node.value:
                if key_node.tag != yaml.resolver.BaseResolver.DEFAULT_SCALAR_TAG:
                    continue
                if key_node.value in keys:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark,
                        f"found duplicate key {key_node.value}", key_node.start_mark,
                    )  # fmt: skip
                keys.add(key_node.value)
            return super().construct_mapping(node, deep=deep)

        def get_single_data(self) -> Any:
            try:
                return super().get_single_data()
            except yaml.MarkedYAMLError as e:
                message = _bad_file(e)
                if message is None:
                    raise
            from corpusprep.app import fail  # Hydra would print a traceback through itself

            fail(message)

    return Loader


def _bad_file(error: Any) -> Optional[str]:
    """What is wrong with a config file that is not valid YAML (a --config-dir preset, a
    plugin's), in one line naming the file and the place; None for YAML not read from a
    file (OmegaConf.create of a string: its caller reports it)."""
    mark = error.problem_mark or error.context_mark
    name = str(getattr(mark, "name", "") or "")
    if not name or name.startswith("<"):
        return None
    where = f"line {mark.line + 1}, column {mark.column + 1}"
    return f"{name}: not valid YAML ({where}: {error.problem}); fix the file"


def use_fast_yaml() -> None:
    """Every YAML that OmegaConf (and so Hydra) reads goes through yaml_loader()."""
    from omegaconf import _utils, basecontainer

    loader = yaml_loader()
    _utils.get_yaml_loader = basecontainer.get_yaml_loader = lambda: loader


def _shipped_interpolations(group: str, plugins: bool) -> set[tuple[str, str]]:
    """(key, raw value) of every interpolation in the group's config files that corpusprep
    ships (plugins=False) or its installed plugins do (plugins=True); never a
    --config-dir's, which may shadow them."""
    import yaml  # the values as OmegaConf reads them (yaml_loader), parsed in C

    from corpusprep._paths import config_dirs

    pairs = set()
    roots = config_dirs()[1:] if plugins else config_dirs(plugins=False)  # [0]: corpusprep's
    for root in roots:
        folder = root / group
        if not folder.is_dir():
            continue
        for file in folder.iterdir():
            if file.name.endswith(".yaml"):
                data = yaml.load(file.read_text("utf-8"), Loader=yaml_loader())
                if isinstance(data, dict):
                    pairs |= {(k, v) for k, v in _strings(data) if "${" in v}
    return pairs


def _reads_env(node: DictConfig, key: str) -> bool:
    """Whether resolving node[key] (all of it) calls oc.env, through any chain of
    interpolations."""
    from omegaconf.errors import OmegaConfBaseException
    from omegaconf.resolvers import oc

    reads: list[str] = []

    def watched(name: str, *default: Any) -> Any:
        reads.append(name)
        return oc.env(name, *default)

    OmegaConf.clear_resolver("oc.env")
    OmegaConf.register_new_resolver("oc.env", watched)
    try:
        value = node[key]  # a key as it is: no dotted path to misread
        if isinstance(value, (DictConfig, ListConfig)):
            OmegaConf.to_container(value, resolve=True)
    except OmegaConfBaseException:
        pass  # resolved for real when the source is built: its own message then
    finally:
        OmegaConf.clear_resolver("oc.env")
        OmegaConf.register_new_resolver("oc.env", oc.env)
    return bool(reads)


@dataclass(frozen=True)
class Settings:
    """The run options every job has, checked once so the pipeline can trust them."""

    split: float
    dtype: str
    out_dir: str
    shard_bytes: int
    quiet: bool
    force: bool
    dry_run: bool
    split_by: str
    seed: int
    eot: str
    val_size: Optional[Union[int, float]] = None  # documents (document) or tokens (head|tail)
    order: str = "source"  # source | shuffle (seeded by seed)


FLAGS = ("quiet", "force", "dry_run")


def check_flags(cfg: DictConfig) -> None:
    """quiet, force and dry_run are true or false: a quoted 'false' is a string, and any
    string would read as true."""
    for key in FLAGS:
        value = cfg.get(key)
        if not isinstance(value, bool):
            raise UserError(f"{key}={value!r}: must be true or false, e.g. {key}=true")


def expand_home(cfg: DictConfig) -> None:
    """out_dir="~/x" (quoted: Hydra's grammar refuses a bare ~) is x in the home folder, as
    the shell and source.path read it, not a folder named ~ here (which a later rm -rf ~
    would take for home)."""
    out_dir = cfg.get("out_dir")
    if isinstance(out_dir, str) and out_dir.startswith("~"):
        cfg.out_dir = os.path.expanduser(out_dir)


def check_name(name: object) -> None:
    """`name` names the output folder (data/NAME) and files in it: a plain folder name."""
    text = str(name) if isinstance(name, (str, int, float)) and not isinstance(name, bool) else ""
    # a control character (a line end) makes a folder and messages no one can read right
    if (
        not text
        or text in (".", "..")
        or "/" in text
        or "\\" in text
        or escape_controls(text) != text
    ):
        raise UserError(f"name={name!r}: must be a folder name (no / or \\, not . or .., no "
                        "control characters), e.g. name=mycorpus")  # fmt: skip


def read_settings(cfg: DictConfig) -> Settings:
    check_flags(cfg)
    check_name(cfg.get("name"))
    split = cfg.get("split")
    if isinstance(split, bool) or not isinstance(split, (int, float)) or not 0 < split < 1:
        raise UserError(
            f"split={split!r}: must be a number strictly between 0 and 1 "
            "(the fraction of the text that goes to train), e.g. split=0.9"
        )
    dtype = str(cfg.get("dtype"))
    if dtype not in DTYPES:
        raise UserError(f"dtype={dtype}: unknown dtype; use one of {', '.join(DTYPES)}")
    shard_bytes = cfg.get("shard_bytes")
    if isinstance(shard_bytes, bool) or not isinstance(shard_bytes, int) or shard_bytes < 1:
        raise UserError(f"shard_bytes={shard_bytes!r}: must be a positive whole number of bytes")
    out_dir = cfg.get("out_dir")
    if not out_dir:
        raise UserError("out_dir is empty: set out_dir=PATH")
    if isinstance(out_dir, bool) or not isinstance(out_dir, (str, int, float)):  # 2024 is one
        raise UserError(f"out_dir={out_dir!r}: must be a path, e.g. out_dir=data/mycorpus")
    if isinstance(out_dir, str) and not out_dir.strip():  # a folder named with spaces
        raise UserError(f"out_dir={out_dir!r}: holds only spaces; set out_dir=PATH")
    split_by = str(cfg.get("split_by", "auto"))
    if split_by not in SPLIT_BY:
        raise UserError(f"split_by={split_by}: use one of {', '.join(SPLIT_BY)}")
    eot = str(cfg.get("eot", "auto"))
    if eot not in EOT:
        raise UserError(f"eot={eot}: use one of {', '.join(EOT)}")
    seed = cfg.get("seed", 2357)
    # numpy's default_rng takes no negative seed; the split hash takes 8 signed bytes
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise UserError(f"seed={seed!r}: must be a whole number from 0 to 2**63-1")
    val_size = cfg.get("val_size")
    counts = split_by in ("head", "tail")
    whole = isinstance(val_size, int) and not isinstance(val_size, bool) and val_size >= 1
    fraction = isinstance(val_size, float) and 0 < val_size < 1 and not counts
    if val_size is not None and not (whole or fraction):
        what = (
            "a whole number of tokens"
            if counts
            else "a fraction strictly between 0 and 1 or a whole number of documents"
        )
        raise UserError(
            f"val_size={val_size!r}: must be {what} (or null), "
            f"e.g. val_size={32768 if counts else 0.0005}"
        )
    if counts and val_size is None:
        raise UserError(
            f"split_by={split_by}: needs val_size=N, the number of tokens for val "
            "(e.g. val_size=32768)"
        )
    order = str(cfg.get("order", "source"))
    if order not in ORDERS:
        raise UserError(f"order={order}: use one of {', '.join(ORDERS)}")
    return Settings(
        val_size=val_size,
        order=order,
        split_by=split_by,
        seed=seed,
        eot=eot,
        split=float(split),
        dtype=dtype,
        out_dir=str(out_dir),
        shard_bytes=shard_bytes,
        quiet=cfg.get("quiet"),
        force=cfg.get("force"),
        dry_run=cfg.get("dry_run"),
    )


register_resolvers()
