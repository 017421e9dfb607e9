"""Where Hydra finds corpusprep's configs: the installed package, or conf/ in a source checkout."""

from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path
from typing import Any

_REPO_CONF = Path(__file__).resolve().parent.parent / "conf"


def config_path() -> str:
    # find_spec first: an installed (or editable) corpusprep ships conf/ as corpusprep.conf.
    try:
        if find_spec("corpusprep.conf") is not None:
            return "pkg://corpusprep.conf"
    except ModuleNotFoundError:
        pass
    if (_REPO_CONF / "config.yaml").is_file():  # a bare checkout run with PYTHONPATH
        return str(_REPO_CONF)
    raise RuntimeError("corpusprep: cannot find its conf/ directory; reinstall the package")


def config_dirs() -> list[Any]:
    """The folders Hydra composes from, as importlib.resources Traversables, corpusprep first."""
    from importlib.resources import files

    cp = config_path()
    return [files(cp[len("pkg://") :])] if cp.startswith("pkg://") else [Path(cp)]
