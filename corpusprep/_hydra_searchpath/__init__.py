"""Installed as hydra_plugins.corpusprep_searchpath (see pyproject.toml), where Hydra finds it.

Adds the config folders of installed corpusprep plugins to corpusprep's config search path:
a plugin package declares, in its pyproject.toml,

    [project.entry-points."corpusprep.conf"]
    acme = "acme_corpusprep.conf"     # a package holding tokenizer/*.yaml, dataset/*.yaml, ...

and its options appear next to corpusprep's own (`tokenizer=acme_bpe`). Hydra loads
search-path plugins for every Hydra app in the environment, so this one acts only when the
app is corpusprep, and imports nothing of a plugin until corpusprep composes its config.
"""

from __future__ import annotations

import sys

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin


def _is_corpusprep(search_path: ConfigSearchPath) -> bool:
    if "corpusprep.app" in sys.modules:  # the command line
        return True
    paths = sys.modules.get("corpusprep._paths")  # the compose API, after importing corpusprep
    return paths is not None and any(e.path == paths.config_path() for e in search_path.get_path())


class CorpusprepSearchPathPlugin(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        if not _is_corpusprep(search_path):
            return
        from corpusprep._paths import plugin_config_packages

        for name, package in plugin_config_packages():
            search_path.append(provider=f"corpusprep-plugin:{name}", path=f"pkg://{package}")
