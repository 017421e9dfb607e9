"""Where Hydra finds corpusprep's configs: the installed package, or conf/ in a source checkout."""

from __future__ import annotations

import os
from contextlib import suppress
from functools import lru_cache
from importlib.util import find_spec
from pathlib import Path
from typing import Any

_REPO_CONF = Path(__file__).resolve().parent.parent / "conf"


def config_path() -> str:
    import corpusprep.config  # noqa: F401 - composing these configs needs their ${cp.*} resolvers

    # find_spec first: an installed (or editable) corpusprep ships conf/ as corpusprep.conf.
    try:
        if find_spec("corpusprep.conf") is not None:
            return "pkg://corpusprep.conf"
    except ModuleNotFoundError:
        pass
    if (_REPO_CONF / "config.yaml").is_file():  # a bare checkout run with PYTHONPATH
        return str(_REPO_CONF)
    raise RuntimeError("corpusprep: cannot find its conf/ directory; reinstall the package")


def user_cache_dir() -> Path:
    """The user's own cache folder for corpusprep: $XDG_CACHE_HOME/corpusprep, else
    ~/.cache/corpusprep."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "corpusprep"


def default_cache_dir() -> Path:
    """The download cache: $CORPUSPREP_CACHE_DIR (which may be shared), else user_cache_dir()."""
    if os.environ.get("CORPUSPREP_CACHE_DIR"):
        return Path(os.environ["CORPUSPREP_CACHE_DIR"]).expanduser()
    return user_cache_dir()


PLUGIN_GROUP = "corpusprep.conf"  # entry points: name -> a package of plugin configs


@lru_cache(maxsize=1)
def plugin_config_packages() -> list[tuple[str, str]]:
    """(name, config package) of every installed plugin, sorted by name (read once per
    process: a scan of every installed package's metadata, asked for a dozen times)."""
    from importlib.metadata import entry_points

    eps = entry_points()
    found = eps.select(group=PLUGIN_GROUP) if hasattr(eps, "select") else eps.get(PLUGIN_GROUP, [])
    return sorted((ep.name, ep.value) for ep in found)


def config_dirs(plugins: bool = True) -> list[Any]:
    """The folders Hydra composes from, as importlib.resources Traversables, corpusprep first,
    then (plugins=True) installed plugins' config packages."""
    from importlib.resources import files

    cp = config_path()
    dirs = [files(cp[len("pkg://") :])] if cp.startswith("pkg://") else [Path(cp)]
    for _, package in plugin_config_packages() if plugins else ():
        with suppress(ModuleNotFoundError, TypeError):  # a broken plugin: Hydra skips it too
            dirs.append(files(package))
    return dirs
