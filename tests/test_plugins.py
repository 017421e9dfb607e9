"""A third-party package adds a tokenizer without touching corpusprep: installed here from
tests/example_plugin, then used through the real command line."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from helpers import REPO, run_cli

PLUGIN = REPO / "tests" / "example_plugin"


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """pip-installs the example plugin into a folder of its own (not the test environment)."""
    if importlib.util.find_spec("hydra_plugins.corpusprep_searchpath") is None:
        pytest.skip("corpusprep is not installed (pip install .): Hydra cannot see its plugin")
    target = tmp_path_factory.mktemp("site")
    # pip builds in the tree it is given, and each xdist worker runs this fixture: two builds in
    # tests/example_plugin at once collide on its build/ folder (CI failed so, "File exists")
    source = tmp_path_factory.mktemp("plugin") / "example_plugin"
    shutil.copytree(PLUGIN, source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    r = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
         str(source)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return {"PYTHONPATH": os.pathsep.join([str(REPO), str(target)])}


def test_the_plugin_tokenizer_runs_through_the_cli(tmp_path, installed):
    text = "plugins: ωμέγα 😀\n" * 100
    (tmp_path / "t.txt").write_text(text, encoding="utf-8")
    r = run_cli("source=file", "source.path=t.txt", "tokenizer=example_codepoint", "out_dir=out",
                cwd=tmp_path, env=installed)  # fmt: skip
    assert r.returncode == 0, r.stderr
    ids = np.fromfile(tmp_path / "out" / "train.bin", dtype=np.uint32)  # code points: uint32
    assert ids.tolist() == [ord(c) for c in text[: int(len(text) * 0.9)]]


def test_a_folder_of_a_plugin_not_installed_here_says_to_install_it(tmp_path, installed):
    """Found by a newcomer's attack: a folder a plugin's tokenizer made, read where that
    plugin is not installed (another machine, a fresh venv), was refused as a config naming
    an untrusted class, with 'choose one with tokenizer=NAME': no fix for a folder."""
    from helpers import assert_one_line_error

    (tmp_path / "t.txt").write_text("plugins: ωμέγα\n" * 100, encoding="utf-8")
    r = run_cli("source=file", "source.path=t.txt", "tokenizer=example_codepoint", "out_dir=out",
                cwd=tmp_path, env=installed)  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = run_cli("source=file", "source.path=t.txt", "tokenizer=reuse", "tokenizer.dir=out",
                "out_dir=again", cwd=tmp_path)  # fmt: skip
    assert_one_line_error(r, "corpusprep_example_plugin", "not installed here",
                          "install the plugin that made it, if you trust")  # fmt: skip
    assert "tokenizer=NAME" not in r.stderr, r.stderr
    inspect = subprocess.run([sys.executable, "-m", "corpusprep.inspect", "out"], cwd=tmp_path,
                             capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
    assert inspect.returncode == 1 and "not installed here" in inspect.stderr, inspect.stderr


def test_the_plugin_is_listed_and_typos_still_caught(tmp_path, installed):
    r = run_cli("--help", cwd=tmp_path, env=installed)
    assert "example_codepoint" in r.stdout
    r = run_cli("tokenizer=example_codepont", "source=file", "source.path=x", cwd=tmp_path,
                env=installed)  # fmt: skip
    assert r.returncode == 1 and "example_codepoint" in r.stderr  # offered as a choice


def test_other_hydra_apps_do_not_see_corpusprep_plugins(tmp_path, installed):
    (tmp_path / "app.py").write_text(
        "import hydra\n"
        "@hydra.main(version_base='1.3', config_path=None)\n"
        "def main(cfg):\n    pass\n"
        "main()\n"
    )
    r = subprocess.run([sys.executable, "app.py", "--info", "searchpath"], cwd=tmp_path,
                       capture_output=True, text=True, env={**os.environ, **installed})  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "corpusprep" not in r.stdout


def test_the_search_path_plugin_is_registered_where_hydras_scan_misses_it(monkeypatch):
    """An editable install (pip install -e .) maps hydra_plugins.corpusprep_searchpath with
    an import hook that Hydra's scan of the hydra_plugins folders never sees: installed
    plugins' configs went unfound (`Could not find 'tokenizer/example_codepoint'`). The
    command line registers it then, once."""
    from hydra.core.plugins import Plugins
    from hydra.plugins.search_path_plugin import SearchPathPlugin

    from corpusprep.app import _register_search_path_plugin

    plugins = Plugins.instance()
    scanned = [c for c in plugins.discover(SearchPathPlugin)
               if c.__name__ != "CorpusprepSearchPathPlugin"]  # fmt: skip
    monkeypatch.setitem(plugins.plugin_type_to_subclass_list, SearchPathPlugin, scanned)
    _register_search_path_plugin()
    _register_search_path_plugin()
    names = [c.__name__ for c in plugins.discover(SearchPathPlugin)]
    assert names.count("CorpusprepSearchPathPlugin") == 1


def test_the_private_config_of_the_plugins_page_encodes_as_tokenizer_tiktoken_does(tmp_path):
    """Found by a newcomer's attack: docs/plugins.md's `my_conf/tokenizer/mine.yaml` (GPT-2's
    vocabulary under a name of one's own) named the class without `backend`, whose default
    in the class is tiktoken (the reference the proofs compare with), not the `auto` that
    docs/keys.md calls the default: the run took tiktoken's core, 2-4x slower."""
    import json
    import re

    page = (REPO / "docs" / "plugins.md").read_text(encoding="utf-8")
    yaml = re.search(r"```yaml\n(# my_conf/tokenizer/mine.yaml\n.*?)```", page, re.S).group(1)
    (tmp_path / "my_conf" / "tokenizer").mkdir(parents=True)
    (tmp_path / "my_conf" / "tokenizer" / "mine.yaml").write_text(yaml)
    (tmp_path / "my.txt").write_text("some text to encode, of a few words.\n" * 300)
    backends = []
    for args, out in ((["--config-dir", "my_conf", "tokenizer=mine"], "a"),
                      (["tokenizer=tiktoken", "tokenizer.encoding=r50k_base"], "b")):  # fmt: skip
        r = run_cli(*args, "source=file", "source.path=my.txt", f"out_dir={out}", "quiet=true",
                    cwd=tmp_path)  # fmt: skip
        assert r.returncode == 0, r.stderr
        manifest = json.loads((tmp_path / out / "manifest.json").read_text())
        backends.append(manifest["tokenizer"]["backend"])
    assert backends[0] == backends[1], backends
