"""The composed config a plain run keeps (corpusprep.compose_cache): the next run of the
same command gets exactly what Hydra would compose, without importing Hydra; anything that
could change the composition makes it compose again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import REPO, assert_one_line_error, run_cli, same_files
from omegaconf import OmegaConf

from corpusprep import compose_cache


@pytest.fixture
def settled(monkeypatch):
    """corpusprep's code unchanged for as long as a kept config needs (a file changed just
    before a run is not trusted: test_a_file_changed_while_composing_is_not_trusted), as
    just after an install or an edit it may not be; and this process as if started now."""
    newest = max(p.stat().st_mtime_ns for p in compose_cache.PACKAGE.rglob("*"))
    newest = max([newest] + [t for _, (_, t) in compose_cache._installed()])  # an install
    wait = newest + compose_cache.RACY_NS - time.time_ns()
    if wait > 0:
        time.sleep(wait / 1e9 + 0.05)
    monkeypatch.setattr(compose_cache, "STARTED_NS", time.time_ns())


def _entries(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.json"))


def _fresh(args: list[str], cwd: Path, *flags: str) -> subprocess.CompletedProcess:
    """A fresh interpreter (the tests' CLI servers have imported Hydra already)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, *flags, "-m", "corpusprep", *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=300)  # fmt: skip


def _manifest(folder: Path) -> dict:
    m = json.loads((folder / "manifest.json").read_text())
    for key in ("created", "seconds"):
        m.pop(key)
    return m


def _imported(run: subprocess.CompletedProcess) -> list[str]:
    return [line.rsplit("|", 1)[-1].strip() for line in run.stderr.splitlines()
            if line.startswith("import time:")]  # fmt: skip


def test_second_run_skips_hydra_and_makes_the_same_files(
    tmp_path, shakespeare, compose_dir, settled, monkeypatch
):
    args = ["source=file", f"source.path={shakespeare}", "tokenizer=char", "quiet=true"]
    first = _fresh([*args, "split=0.8", f"out_dir={tmp_path / 'a'}"], tmp_path)
    assert first.returncode == 0, first.stderr
    assert len(_entries(compose_dir)) == 1
    again = [*args, "split=0.8", f"out_dir={tmp_path / 'b'}"]
    hit = _fresh(again, tmp_path, "-X", "importtime")
    assert hit.returncode == 0, hit.stderr
    imported = _imported(hit)
    assert "omegaconf" in imported and not [m for m in imported if m.startswith("hydra")]
    (tmp_path / "b").rename(tmp_path / "b_kept")
    monkeypatch.setenv("CORPUSPREP_COMPOSE_CACHE", "0")
    by_hydra = _fresh(again, tmp_path, "-X", "importtime")
    assert [m for m in _imported(by_hydra) if m.startswith("hydra")]  # the cache is off
    assert by_hydra.returncode == 0, by_hydra.stderr
    same_files(tmp_path / "b", tmp_path / "b_kept")
    assert _manifest(tmp_path / "b") == _manifest(tmp_path / "b_kept")  # config, overrides


@pytest.mark.parametrize("key", compose_cache.FREE_KEYS)
def test_one_entry_serves_every_out_dir_and_path(key, tmp_path, shakespeare, compose_dir,
                                                 settled):  # fmt: skip
    """A new out_dir (a fresh folder for each experiment) or input path sets only itself:
    the entry kept for one value serves the next, as Hydra would compose it."""
    other = tmp_path / "copy of.txt"
    other.write_bytes(shakespeare.read_bytes()[:50_000])
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "b.txt").write_bytes(other.read_bytes())
    values = {
        "out_dir": ["runs/a", "runs/b-2.x", f"{tmp_path}/runs/c_3"],
        "source.path": [str(shakespeare), "in/b.txt", str(tmp_path / "in" / "b.txt")],
    }
    for i, value in enumerate(values[key]):
        args = ["source=file", "tokenizer=char", "quiet=true", f"{key}={value}"]
        args.append(f"out_dir=out{i}" if key == "source.path" else f"source.path={shakespeare}")
        run = _fresh(args, tmp_path, "-X", "importtime")
        assert run.returncode == 0, run.stderr
        assert bool([m for m in _imported(run) if m.startswith("hydra")]) == (i == 0), value
        assert len(_entries(compose_dir)) == 1
        made = _manifest(tmp_path / (value if key == "out_dir" else f"out{i}"))
        assert made["overrides"] == args
        assert made["config"][key.split(".")[0]] == (
            value if key == "out_dir" else {**made["config"]["source"], "path": value}
        )


@pytest.mark.parametrize(
    "argv",
    [["out_dir=o2", "out_dir=o1"], ["out_dir=o2", "++out_dir=o1"], ["~out_dir", "out_dir=o1"],
     ["source.path=b.txt", "source.path=a.txt"], ["+out_dir=o1"], ["++source.path=a.txt"]],
)  # fmt: skip
def test_a_key_given_twice_or_with_a_prefix_is_kept_as_given(argv):
    """Hydra takes the last of two values (or refuses them): such a key is not free."""
    assert compose_cache._template(["source=file", *argv]) == (["source=file", *argv], {})


@pytest.mark.parametrize(
    "value", ["1", "0.5", "1e3", "-1", "true", "False", "NULL", "nan", "-inf", "'quoted'",
              "a b", "x,y", "[a]", "${name}", "a=b", "", "-x", "~x", "\\x", "é", "a:b"],
)  # fmt: skip
def test_values_hydra_reads_otherwise_are_composed_each_time(value):
    assert not compose_cache.free_value(value)


def test_free_values_are_the_strings_hydra_reads(tmp_path):
    """Hydra's own override parser reads every value free_value accepts as that very string
    (none is a number, a bool, null, a list or an interpolation)."""
    import random

    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    rng = random.Random(0)
    alphabet = "aeEfinlrtuNT0123456789_./-+:~ "
    candidates = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 6)))
                  for _ in range(20_000)]  # fmt: skip
    candidates += ["inf", "nan", "1_000", "1e-3", ".5", "5.", "0x1", "true", "null", "e5"]
    accepted = 0
    for value in candidates:
        if compose_cache.free_value(value):
            accepted += 1
            (parsed,) = parser.parse_overrides([f"out_dir={value}"])
            assert parsed.value() == value and type(parsed.value()) is str, value
    assert accepted > 1000


COMMANDS = [
    ["dataset=shakespeare_char"],
    ["dataset=shakespeare", "split=0.8", "format=llmc"],
    ["dataset=openwebtext", "source=file", "source.path=owt.jsonl", "tokenizer=char",
     "split_by=hash", "val_size=0.01"],
    ["dataset=python_stdlib", "tokenizer=byte", "~source.skip_invalid", "dtype=uint32"],
    ["source=files", "source.glob=[a.txt,'b c.txt']", "tokenizer=tiktoken", "eot=prepend"],
    ["source=file", "source.path=x.jsonl", "source.doc_end='\\n\\n'", "tokenizer=char",
     'tokenizer.separator="<|end|>"', "executor.workers=3", "split=1"],
]  # fmt: skip


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: a[0])
def test_kept_config_is_what_hydra_composes(args, tmp_path, compose_dir, settled):
    """The entry holds the config Hydra gave the run, key for key, interpolations unresolved,
    and the task overrides (the manifest's); `--cfg job` prints what Hydra composes."""
    run_cli(*args, "dry_run=true", "quiet=true", cwd=tmp_path)  # fails or not: composed
    (entry,) = _entries(compose_dir)
    kept = json.loads(entry.read_text())
    shown = run_cli(*args, "dry_run=true", "quiet=true", "--cfg", "job", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    composed = OmegaConf.create(shown.stdout)
    assert OmegaConf.to_container(composed) == kept["config"]
    assert kept["overrides"] == [*args, "dry_run=true", "quiet=true"]


@pytest.fixture
def long_ago(monkeypatch):
    """As if this process had started composing long after the files these tests write
    (else each would be too new to trust its time: test_a_file_changed_while_composing)."""
    monkeypatch.setattr(compose_cache, "STARTED_NS", time.time_ns() + 10**12)


def _plain_hydra_node(sources: list[Path]):
    return OmegaConf.create({
        "runtime": {"choices": {"hydra/job_logging": "none", "hydra/hydra_logging": "none"},
                    "config_sources": [{"schema": "file", "path": str(p), "provider": "t"}
                                       for p in sources]},
        "callbacks": {"sweep": {"_target_": "corpusprep.sweep.SweepCallback"}},
        "job": {"env_set": {}, "chdir": False}, "output_subdir": None, "verbose": False,
        "mode": "RunMode.RUN",
    })  # fmt: skip


def test_a_file_changed_while_composing_is_not_trusted(tmp_path, compose_dir, settled):
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "config.yaml").write_text("split: 0.9\n")  # just now: Hydra may have read either
    hydra, cfg = _plain_hydra_node([conf]), OmegaConf.create({"split": 0.9})
    compose_cache.save(["split=0.9"], cfg, hydra, [])
    assert not _entries(compose_dir)
    past = time.time_ns() - 10 * 10**9
    for path in (conf / "config.yaml", conf):
        os.utime(path, ns=(past, past))
    compose_cache.save(["split=0.9"], cfg, hydra, [])
    assert compose_cache.load(["split=0.9"])


def test_a_config_json_would_change_is_not_kept(tmp_path, compose_dir, long_ago):
    hydra = _plain_hydra_node([])
    compose_cache.save(["a=1"], OmegaConf.create({"a": {1: "int key"}}), hydra, [])
    assert not _entries(compose_dir)


def test_a_kept_config_is_used_only_while_its_sources_are_unchanged(
    tmp_path, compose_dir, long_ago
):
    conf = tmp_path / "conf"
    (conf / "tokenizer").mkdir(parents=True)
    option = conf / "tokenizer" / "mine.yaml"
    option.write_text("_target_: corpusprep.tokenizers.char.CharTokenizer\n")
    hydra = _plain_hydra_node([conf])
    argv = ["tokenizer=mine", "split=0.5"]
    cfg = OmegaConf.create({"split": 0.5, "name": "${source.name}", "tokenizer": {"x": "???"}})

    def kept():
        found = compose_cache.load(argv)
        return found and (OmegaConf.to_container(found[0]), found[1])

    compose_cache.save(argv, cfg, hydra, argv)
    assert kept() == (OmegaConf.to_container(cfg), argv)
    assert OmegaConf.is_struct(compose_cache.load(argv)[0])
    assert compose_cache.load(["split=0.5", "tokenizer=mine"]) is None  # another command

    option.write_text("_target_: corpusprep.tokenizers.byte.ByteTokenizer\n")  # edited
    assert compose_cache.load(argv) is None
    compose_cache.save(argv, cfg, hydra, argv)
    assert kept()
    (conf / "tokenizer" / "new.yaml").write_text("{}\n")  # an option added
    assert compose_cache.load(argv) is None
    compose_cache.save(argv, cfg, hydra, argv)
    assert kept()

    site = tmp_path / "site"  # a package installed into a folder on sys.path
    site.mkdir()
    sys.path.append(str(site))
    try:
        compose_cache.save(argv, cfg, hydra, argv)
        assert kept()
        (site / "plugin-1.0.dist-info").mkdir()
        assert compose_cache.load(argv) is None
        compose_cache.save(argv, cfg, hydra, argv)
        (site / "hydra_plugins").mkdir()
        assert compose_cache.load(argv) is None
        compose_cache.save(argv, cfg, hydra, argv)
        (site / "hydra_plugins" / "launcher.py").write_text("")
        assert compose_cache.load(argv) is None
        compose_cache.save(argv, cfg, hydra, argv)
        (site / "hydra_plugins" / "mine").mkdir()
        plugin = site / "hydra_plugins" / "mine" / "__init__.py"
        plugin.write_text("A = 'file:///one'\n")
        assert compose_cache.load(argv) is None
        compose_cache.save(argv, cfg, hydra, argv)
        assert kept()
        plugin.write_text("A = 'file:///two'\n")  # a plugin's code edited in place
        assert compose_cache.load(argv) is None
        compose_cache.save(argv, cfg, hydra, argv)
        (site / "unrelated.txt").write_text("a file the run wrote in its folder")
        assert kept()
    finally:
        sys.path.remove(str(site))

    block = "defaults:\n  - tokenizer: ${oc.env:TOKENIZER}\n"
    flow = 'defaults: [{override /tokenizer: "${oc.env:T,char}"}]\nname: x\n'
    for defaults in (block, flow):
        (conf / "config.yaml").write_text(defaults)
        for entry in _entries(compose_dir):
            entry.unlink()
        compose_cache.save(argv, cfg, hydra, argv)  # composed from the environment: not kept
        assert not _entries(compose_dir)
    (conf / "config.yaml").write_text("defaults:\n  - tokenizer: char\nname: ${source.name}\n")
    compose_cache.save(argv, cfg, hydra, argv)
    assert kept()
    for value in ("${now:%Y}", "${hydra:runtime.cwd}/x", "${python_version:micro}",
                  "http://me:secret@127.0.0.1/x.txt"):  # fmt: skip
        for entry in _entries(compose_dir):
            entry.unlink()
        compose_cache.save(argv, OmegaConf.create({"name": value}), hydra, argv)
        assert not _entries(compose_dir), value  # needs Hydra's resolvers; a password

    hydra.callbacks.mine = {"_target_": "corpusprep.sweep.SweepCallback"}  # Hydra does more
    for entry in _entries(compose_dir):
        entry.unlink()
    compose_cache.save(argv, cfg, hydra, argv)
    assert not _entries(compose_dir)


@pytest.mark.parametrize(
    "argv",
    [["-m", "split=0.8,0.9"], ["dataset=shakespeare", "--cfg", "job"], ["hydra.run.dir=x"],
     ["hydra/launcher=joblib"], ["+hydra.job.env_set.A=1"], ["source.path=x", "--config-dir=c"],
     ["source=url", "source.url=https://me:secret@127.0.0.1/x.txt"],
     ["source=url", "source.url=http://127.0.0.1/x.txt?token=abc"],
     ["source=url", "source.url=http://me:${oc.env:PW}@127.0.0.1/x.txt"],
     ["name=${now:%Y}"], ["out_dir=${hydra:runtime.cwd}/o"], ["name=${oc.env:NAME}"]],
)  # fmt: skip
def test_what_is_never_kept(argv):
    assert not compose_cache.eligible(argv)


def test_off_switch(monkeypatch):
    assert compose_cache.eligible(["dataset=shakespeare"])
    monkeypatch.setenv("CORPUSPREP_COMPOSE_CACHE", "0")
    assert not compose_cache.eligible(["dataset=shakespeare"])


def test_a_broken_or_tampered_entry(tmp_path, shakespeare, compose_dir, settled):
    """Half-written or not an entry: Hydra composes again and the entry is rewritten. A
    `_target_` written into an entry is checked as any config's: nothing runs from it."""
    args = ["source=file", f"source.path={shakespeare}", "tokenizer=char", "quiet=true",
            f"out_dir={tmp_path / 'out'}"]  # fmt: skip
    assert run_cli(*args, cwd=tmp_path).returncode == 0
    (entry,) = _entries(compose_dir)
    good = entry.read_text()
    kept = json.loads(good)
    assert kept["free"] == {"source.path": str(shakespeare), "out_dir": str(tmp_path / "out")}
    free = ({"name": "x"}, {"out_dir": "${oc.env:HOME}"}, {"out_dir": "elsewhere"}, [])
    for broken in (good[: len(good) // 2], "[]", json.dumps({**kept, "stamp": 1}),
                   *(json.dumps({**kept, "free": f}) for f in free)):  # fmt: skip
        entry.write_text(broken)
        result = run_cli(*args, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert "up to date" in result.stdout
        assert entry.read_text() == good  # composed and kept again
    entry.write_text(good)
    tampered = json.loads(good)
    tampered["config"]["tokenizer"]["_target_"] = "os.system"
    entry.write_text(json.dumps(tampered))
    result = run_cli(*args, cwd=tmp_path)
    assert_one_line_error(result, "tokenizer._target_=os.system", "may only name classes")


def test_an_entry_others_may_write_is_not_read(tmp_path, shakespeare, compose_dir, settled):
    args = ["source=file", f"source.path={shakespeare}", "tokenizer=char", "quiet=true",
            f"out_dir={tmp_path / 'out'}"]  # fmt: skip
    umask = os.umask(0o002)  # one that lets the group write: the entry is 0600 all the same
    try:
        assert _fresh(args, tmp_path).returncode == 0
    finally:
        os.umask(umask)
    (entry,) = _entries(compose_dir)
    assert entry.stat().st_mode & 0o777 == 0o600
    tampered = json.loads(entry.read_text())
    tampered["config"]["tokenizer"]["_target_"] = "os.system"
    entry.write_text(json.dumps(tampered))
    for mode, folder_mode in ((0o620, 0o700), (0o600, 0o770), (0o602, 0o700)):
        entry.chmod(mode)
        compose_dir.chmod(folder_mode)
        result = run_cli(*args, cwd=tmp_path)  # Hydra composes: the entry is not read
        assert result.returncode == 0, result.stderr
        entry.write_text(json.dumps(tampered))
    compose_dir.chmod(0o700)


def test_the_default_folder_is_the_users_own(tmp_path, monkeypatch):
    monkeypatch.delenv("CORPUSPREP_COMPOSE_CACHE")
    monkeypatch.setenv("CORPUSPREP_CACHE_DIR", str(tmp_path / "shared"))  # downloads only
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert compose_cache.cache_folder() == tmp_path / "xdg" / "corpusprep" / "compose"


def test_user_errors_are_the_same_on_a_kept_config(tmp_path, compose_dir, settled):
    args = ["source=file", f"source.path={tmp_path / 'absent.txt'}", "tokenizer=char"]
    first, second = (run_cli(*args, cwd=tmp_path) for _ in range(2))
    assert len(_entries(compose_dir)) == 1
    assert_one_line_error(first, "absent.txt")
    assert (second.returncode, second.stderr) == (first.returncode, first.stderr)


def test_a_cache_that_cannot_be_written(tmp_path, shakespeare, monkeypatch):
    blocked = tmp_path / "file"  # the cache folder's place is taken by a file
    blocked.write_text("")
    monkeypatch.setenv("CORPUSPREP_COMPOSE_CACHE", str(blocked))
    args = ["source=file", f"source.path={shakespeare}", "tokenizer=char", "quiet=true"]
    for n in range(2):
        result = run_cli(*args, f"out_dir={tmp_path / str(n)}", cwd=tmp_path)
        assert result.returncode == 0, result.stderr


def test_entries_are_bounded(tmp_path, compose_dir, monkeypatch, long_ago):
    """The oldest entries beyond MAX_ENTRIES go, and what a killed run left an hour ago;
    nothing else of a folder the user chose."""
    monkeypatch.setattr(compose_cache, "MAX_ENTRIES", 3)
    compose_dir.mkdir()
    mine = [compose_dir / "notes.json", compose_dir / "a.json.1.tmp"]
    left = compose_dir / f".{'0' * 32}.json.77.tmp"
    for path in [*mine, left]:
        path.write_text("{}")
        os.utime(path, ns=(0, 0))
    hydra = _plain_hydra_node([])
    for n in range(5):
        compose_cache.save([f"seed={n}"], OmegaConf.create({"seed": n}), hydra, [])
    assert len(_entries(compose_dir)) == 4  # 3 and the user's notes.json
    assert compose_cache.load(["seed=4"]) and not compose_cache.load(["seed=0"])
    assert all(p.exists() for p in mine) and not left.exists()


def test_a_secret_hydra_unescapes_is_not_kept(tmp_path, compose_dir, settled, loopback_env):
    """`http\\://user:pw@h` reads as no URL on the command line; in the config it is one."""
    result = run_cli("source=url", r"source.url=http\://me:pw5ecret@127.0.0.1:9/in.txt",
                     "dry_run=true", cwd=tmp_path)  # fmt: skip
    assert result.returncode == 1
    assert not compose_dir.exists() or not any(compose_dir.iterdir())


def test_interpolations_on_the_command_line_are_composed_each_time(
    tmp_path, shakespeare, compose_dir, settled, monkeypatch
):
    args = ["source=file", f"source.path={shakespeare}", "name=${oc.env:NAME}_${now:%Y}",
            "quiet=true", "out_dir=${oc.env:NAME}"]  # fmt: skip
    for name in ("alpha", "beta"):
        monkeypatch.setenv("NAME", name)
        result = run_cli(*args, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        manifest = json.loads((tmp_path / name / "manifest.json").read_text())
        assert manifest["name"].startswith(f"{name}_")
    assert not compose_dir.exists() or not any(compose_dir.iterdir())


# an attack: a FIFO where the entry is (its key is the command line's) hung the run: the
# entry was opened, blocking, before its owner was checked
def test_a_fifo_for_an_entry_does_not_hang_the_run(tmp_path, shakespeare, compose_dir, settled):
    args = ["source=file", f"source.path={shakespeare}", "quiet=true", "dry_run=true"]
    assert run_cli(*args, cwd=tmp_path).returncode == 0
    (entry,) = _entries(compose_dir)
    entry.unlink()
    os.mkfifo(entry)
    r = run_cli(*args, cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stderr


def test_a_linked_config_folder_is_followed_as_hydra_follows_it(tmp_path, compose_dir, long_ago):
    """An attack: a plugin's conf/dataset that is a link to the user's presets folder; a
    preset edited there was not seen (os.walk does not follow links, Hydra does), and the
    kept config from before the edit was used."""
    presets = tmp_path / "presets"
    presets.mkdir()
    option = presets / "mine.yaml"
    option.write_text("_target_: corpusprep.tokenizers.char.CharTokenizer\n")
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "tokenizer").symlink_to(presets)
    (presets / "loop").symlink_to(presets)  # a link back: followed once, no loop
    hydra = _plain_hydra_node([conf])
    argv = ["tokenizer=mine"]
    cfg = OmegaConf.create({"split": 0.5, "name": "x"})
    compose_cache.save(argv, cfg, hydra, argv)
    assert compose_cache.load(argv) is not None
    os.utime(option, (1, 1))  # so that the edit below changes its time whatever the clock
    option.write_text("_target_: corpusprep.tokenizers.byte.ByteTokenizer\n")
    assert compose_cache.load(argv) is None
