"""Config helpers: OmegaConf resolvers, the one place plugins are instantiated, run settings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from omegaconf import DictConfig, ListConfig, OmegaConf

from corpusprep.errors import UserError

DTYPES = ("auto", "uint16", "uint32")
SPLIT_BY = ("auto", "position", "document")
EOT = ("auto", "append", "prepend", "none")


def _stem(path_or_url: Any) -> str:
    """A name for the output folder: 'https://h/a/input.txt?x=1' -> 'input',
    'corpus/books.jsonl.gz' -> 'books', 'web/**/*.jsonl.zst' -> 'web' (globs skipped)."""
    text = str(path_or_url)
    path = urlsplit(text).path if "://" in text else text
    parts = [p for p in path.replace("\\", "/").split("/") if p and p not in (".", "..")]
    for part in reversed(parts):
        if not any(c in part for c in "*?["):
            return part.split(".")[0] or "corpus"
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
    from corpusprep.sweep import job_dir

    folder = job_dir()
    return run_default if folder is None else str(folder)


def _safe(name: str) -> str:
    """A folder name from a job's overrides: no "/" (paths, URLs), bounded in length."""
    import hashlib
    import re

    name = re.sub(r"[/\\:*?\"<>|]+", "_", str(name)) or "job"
    if len(name) > 120:
        name = f"{name[:100]}-{hashlib.sha256(name.encode()).hexdigest()[:12]}"
    return name


def register_resolvers() -> None:
    resolvers = (("cp.stem", _stem), ("cp.first", _first), ("cp.stdlib", _stdlib),
                 ("cp.out_dir", _out_dir), ("cp.safe", _safe))  # fmt: skip
    for name, fn in resolvers:
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)


def build(node: DictConfig, what: str) -> Any:
    """Instantiate a plugin (source, tokenizer, executor) from its config node.

    Every plugin goes through here, so the day Hydra asks for an execution whitelist
    (Hydra 1.4+) there is one place to add it.
    """
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    target = node.get("_target_") if isinstance(node, DictConfig) else None
    if not target:
        raise UserError(f"{what} has no _target_: choose one with {what}=NAME")
    # `name` labels the choice for folder names and tables; it is not a constructor argument.
    kwargs = {k: v for k, v in node.items() if k not in ("_target_", "name")}
    try:
        return instantiate({"_target_": target, "_convert_": "all", **kwargs})
    except InstantiationException as e:
        cause = e.__cause__
        if isinstance(cause, UserError):
            raise cause from None
        if isinstance(cause, TypeError):  # an unknown or missing key in the plugin's config
            raise UserError(f"{what}: {cause}; check the {what}.* keys") from None
        raise UserError(f"{what}: cannot create {target}: {cause or e}") from None


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


def read_settings(cfg: DictConfig) -> Settings:
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
    split_by = str(cfg.get("split_by", "auto"))
    if split_by not in SPLIT_BY:
        raise UserError(f"split_by={split_by}: use one of {', '.join(SPLIT_BY)}")
    eot = str(cfg.get("eot", "auto"))
    if eot not in EOT:
        raise UserError(f"eot={eot}: use one of {', '.join(EOT)}")
    seed = cfg.get("seed", 2357)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise UserError(f"seed={seed!r}: must be a whole number")
    return Settings(
        split_by=split_by,
        seed=seed,
        eot=eot,
        split=float(split),
        dtype=dtype,
        out_dir=str(out_dir),
        shard_bytes=shard_bytes,
        quiet=bool(cfg.get("quiet")),
        force=bool(cfg.get("force")),
        dry_run=bool(cfg.get("dry_run")),
    )
