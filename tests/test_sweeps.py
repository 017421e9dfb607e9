"""Sweeps through the real CLI: a folder per job, clash check, the comparison table from
any launcher, failed jobs as rows, idempotent re-runs, and dry runs."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import subprocess
import sys
import time

import pytest
from helpers import FAULTS, REPO, assert_one_line_error, run_cli


@pytest.fixture
def work(tmp_path):
    (tmp_path / "a.txt").write_text("hello world, this is a.\n" * 300)
    (tmp_path / "b.txt").write_text("and here is b, another text!\n" * 300)
    return tmp_path


def sweep_dir(root):
    (d,) = [p for p in (root / "multirun").glob("*/*") if p.is_dir()]
    return d


def table(folder):
    with open(folder / "summary.csv") as f:
        return list(csv.DictReader(f))


def test_a_folder_per_job_and_a_table(work):
    r = run_cli("-m", "source=file", "source.path=a.txt,b.txt", "split=0.8,0.9", cwd=work)
    assert r.returncode == 0, r.stderr
    folder = sweep_dir(work)
    rows = table(folder)
    assert len(rows) == 4 and {row["status"] for row in rows} == {"ok"}
    assert {row["split"] for row in rows} == {"0.8", "0.9"}
    assert {row["corpus"] for row in rows} == {"a", "b"}
    jobs = sorted(p.name for p in folder.iterdir() if p.is_dir())
    assert "source.path=a.txt,source=file,split=0.8" in jobs  # named after the overrides
    for job in jobs:
        assert (folder / job / "train.bin").is_file()
    assert "| job | corpus | tokenizer |" in (folder / "summary.md").read_text()
    assert "corpusprep sweep: 4 jobs (4 ok)" in r.stdout
    assert not (work / "data").exists()  # nothing outside the sweep folder
    # the sweep's folder read as an output folder: its jobs' are named
    import corpusprep
    from corpusprep.errors import UserError

    with pytest.raises(UserError, match=r"a sweep's folder; give one of its jobs' folders \("):
        corpusprep.load(folder)


def test_the_issue_example_over_presets(work, seeded_cache, tiktoken_cache):
    r = run_cli("-m", "dataset=shakespeare_char,shakespeare", "split=0.8,0.9", cwd=work)
    assert r.returncode == 0, r.stderr
    rows = table(sweep_dir(work))
    assert [(row["corpus"], row["tokenizer"], row["split"]) for row in rows] == [
        ("shakespeare_char", "char", "0.8"), ("shakespeare_char", "char", "0.9"),
        ("shakespeare", "gpt2", "0.8"), ("shakespeare", "gpt2", "0.9"),
    ]  # fmt: skip
    assert rows[1]["train_tokens"] == "1003854" and rows[3]["train_tokens"] == "301966"


def test_paths_and_encodings_sweep(work, tiktoken_cache):
    r = run_cli("-m", f"source.path={work}/a.txt,{work}/b.txt", "source=file", "tokenizer=tiktoken",
                "tokenizer.encoding=gpt2,cl100k_base", cwd=work)  # fmt: skip
    assert r.returncode == 0, r.stderr
    rows = table(sweep_dir(work))
    assert len(rows) == 4 and {row["dtype"] for row in rows} == {"uint16", "uint32"}
    assert all("/" not in p.name for p in sweep_dir(work).iterdir())  # paths made safe


def test_jobs_that_would_share_a_folder_stop_the_sweep_first(work):
    r = run_cli("-m", "source=file", "source.path=a.txt", "split=0.8,0.9", "out_dir=data/x",
                cwd=work)  # fmt: skip
    assert_one_line_error(r, "jobs 0 and 1", "out_dir=data/x")
    assert not (work / "data").exists()


@pytest.mark.parametrize("args", [["-m"], ["-m", "split=0.8,0.9"], ["-m", "source=files"]])
def test_a_sweep_with_nothing_to_prepare_stops_first(work, args):
    """`-m` with no corpus made a sweep folder holding a failed job per job and a table
    ("1 jobs"): when every job misses the same setting, it is said once, before any
    folder, as a plain run says it."""
    r = run_cli(*args, cwd=work)
    fragment = "source.glob is required" if "source=files" in args else "nothing to prepare"
    assert_one_line_error(r, fragment)
    assert not (work / "multirun").exists()


def test_a_sweep_of_one_job_says_one_job(work):
    r = run_cli("-m", "source=file", "source.path=a.txt", cwd=work)
    assert r.returncode == 0, r.stderr
    assert "corpusprep sweep: 1 job (1 ok)" in r.stdout


@pytest.mark.parametrize("args, advice", [
    (["tokenizer.vocab_size=300,400"], "add tokenizer=bpe before tokenizer.vocab_size=300,400"),
    (["source.pth=a.txt,b.txt"], "add source=file before source.path=a.txt,b.txt"),
])  # fmt: skip
def test_a_swept_key_of_another_choice_is_advised_with_all_its_values(work, args, advice):
    """Found by a newcomer's attack: the advice quoted the first job's value only
    ('add tokenizer=bpe before tokenizer.vocab_size=300'): copied, it dropped the sweep."""
    r = run_cli("-m", *args, "hydra.sweep.dir=sw", cwd=work)
    assert_one_line_error(r, advice)


def test_a_swept_key_is_advised_with_all_its_values_with_a_config_dir_too(work):
    """Found by an attack: with --config-dir (whose overrides are left to Hydra before it
    runs) the advice still quoted the first job's value."""
    (work / "cd").mkdir()
    r = run_cli("-m", "--config-dir", "cd", "tokenizer.vocab_size=300,400", "hydra.sweep.dir=sw",
                cwd=work)  # fmt: skip
    assert_one_line_error(r, "add tokenizer=bpe before tokenizer.vocab_size=300,400")


def test_a_swept_keys_typed_line_is_this_command_lines_only(monkeypatch):
    """Found by an attack: the swept keys' lines were kept from one command line to the
    next in one process (main() run again, as a test or a notebook does)."""
    from types import SimpleNamespace

    from corpusprep import overrides

    job = SimpleNamespace(
        key_or_group="tokenizer.vocab_size", input_line="tokenizer.vocab_size=300"
    )
    monkeypatch.setattr(sys, "argv", ["corpusprep", "-m", "tokenizer.vocab_size=300,400"])
    assert overrides._as_typed(job) == "tokenizer.vocab_size=300,400"
    monkeypatch.setattr(sys, "argv", ["corpusprep", "-m", "split=0.8,0.9"])
    assert overrides._as_typed(job) == "tokenizer.vocab_size=300"


# found by an attack: a folder named twice, once through a symlink to it, got past the check
# (and one job then failed on the other's lock, after work)
def test_jobs_that_share_a_folder_through_a_symlink_stop_the_sweep_first(work):
    (work / "real").mkdir()
    (work / "link").symlink_to("real")
    r = run_cli("-m", "source=file", "source.path=a.txt", "out_dir=real,link", cwd=work)
    assert_one_line_error(r, "jobs 0 and 1", "out_dir=link")
    assert list((work / "real").iterdir()) == []


# found by an attack: a value given twice (split=0.8,0.8), or a hydra.sweep.subdir naming
# no swept value, gave two jobs one folder: the second replaced (or skipped on) the first's
# outputs and record, and the table said job 0 "crashed or was killed"
@pytest.mark.parametrize("args, fragments", [
    (["source.path=a.txt", "split=0.8,0.8"],
     ["jobs 0 and 1 of this sweep are the same job", "give each value once"]),
    (["source.path=a.txt,b.txt,a.txt"], ["jobs 0 and 2", "the same job"]),
    (["source.path=a.txt", "split=0.8,0.9", "hydra.sweep.subdir=same"],
     ["jobs 0 and 1", "hydra.sweep.subdir=same", "${hydra.job.num}"]),
    # read for that check: one it cannot read is its line (Hydra wrote multirun.yaml first)
    (["source.path=a.txt", "split=0.8,0.9", "hydra.sweep.subdir=${nope}"],
     ["hydra.sweep.subdir: Interpolation key 'nope' not found"]),
])  # fmt: skip
def test_jobs_that_would_share_their_own_folder_stop_the_sweep_first(work, args, fragments):
    r = run_cli("-m", "source=file", *args, cwd=work)
    assert_one_line_error(r, *fragments)
    assert not (work / "multirun").exists()


# found by an attack: range(3,1) made a sweep of no jobs (a folder, a table of nothing, exit
# 0); interval() left a folder holding a lock and said only that the sweeper does not take it
@pytest.mark.parametrize("sweep, fragments", [
    ("seed=range(3,1)", ["seed=range(3,1): makes no values", "seed=range(1,3)"]),
    ("seed=shuffle(range(0,5,-1))", ["makes no values"]),
    ("split=interval(0.1,0.9)", ["split=interval(0.1,0.9)", "optimizing sweeper",
                                 "e.g. split=0.1,0.9"]),
    ("tokenizer=glob(nope*)", ["tokenizer=glob(nope*): matches no tokenizer", "char"]),
])  # fmt: skip
def test_a_sweep_of_values_it_cannot_run_stops_first(work, sweep, fragments):
    r = run_cli("-m", "source=file", "source.path=a.txt", sweep, cwd=work)
    assert_one_line_error(r, *fragments)
    assert not (work / "multirun").exists()


def test_a_glob_over_a_groups_options_sweeps_them(work):
    """Found by an attack: Hydra's glob() of a group's options was refused as
    'tokenizer=Glob(include=[...], exclude=[]): no such tokenizer'."""
    r = run_cli("-m", "source=file", "source.path=a.txt", "tokenizer=glob([ch*,by*])",
                "quiet=true", cwd=work)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert sorted(row["tokenizer"] for row in table(sweep_dir(work))) == ["byte", "char"]
    r = run_cli("source=file", "source.path=a.txt", "tokenizer=glob(ch*)", cwd=work)
    assert_one_line_error(r, "several values make a sweep; add -m")
    assert "quote" not in r.stderr  # tokenizer="glob(ch*)" is no tokenizer either


def test_jobs_with_their_own_out_dirs_but_one_sweep_folder_stop_the_sweep_first(work):
    """Each job's record goes to its sweep folder, whatever its out_dir: two jobs of one
    hydra.sweep.subdir replaced each other's record, and a sweep of two ok jobs said
    '2 jobs (1 failed, 1 ok)', exit 1."""
    r = run_cli("-m", "source=file", "source.path=a.txt", "split=0.8,0.9", "out_dir=o/${split}",
                "hydra.sweep.subdir=same", cwd=work)  # fmt: skip
    assert_one_line_error(r, "jobs 0 and 1", "hydra.sweep.subdir=same", "${hydra.job.num}")
    assert not (work / "multirun").exists() and not (work / "o").exists()


def test_a_sweep_of_hydra_sweeper_params_reports_its_jobs(work):
    """hydra.sweeper.params (a sweep written in a config file, Hydra's way) makes the jobs
    as the command line's values do: its two ok jobs were '1 job (1 failed)', exit 1."""
    (work / "cd").mkdir()
    (work / "cd" / "exp.yaml").write_text(
        "defaults:\n  - config\n  - _self_\nhydra:\n  sweeper:\n    params:\n      split: 0.8,0.9\n"
    )
    r = run_cli("-m", "--config-dir", "cd", "--config-name", "exp", "source=file",
                "source.path=a.txt", "hydra.sweep.dir=sw", "quiet=true", cwd=work)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert [(row["job"], row["split"], row["status"]) for row in table(work / "sw")] == [
        ("0", "0.8", "ok"), ("1", "0.9", "ok")]  # fmt: skip
    # and its jobs are checked for clashes before any work, as the command line's are
    r = run_cli("-m", "--config-dir", "cd", "--config-name", "exp", "source=file",
                "source.path=a.txt", "out_dir=o", cwd=work)  # fmt: skip
    assert_one_line_error(r, "jobs 0 and 1 of this sweep would both write to out_dir=o")


@pytest.mark.parametrize("swept, meant", [
    (["tokenizer=char,byte"], "${tokenizer.name}"),
    (["seed=1,2"], "${seed}"),
    (["split=0.8,0.9"], "${split}"),
    # an option that names itself nowhere in its config (executors have no name): its choice
    (["executor=local,ray", "dry_run=true"], "${hydra:runtime.choices.executor}"),
])  # fmt: skip
def test_the_out_dir_a_clash_advises_keeps_the_jobs_apart(work, swept, meant):
    """Found by a newcomer's attack: two jobs writing one out_dir were advised
    'out_dir=data/${name}-${split}' whatever the sweep was over; over a tokenizer, that out_dir
    clashed again, with the same advice."""
    import re

    args = ["-m", "source=file", "source.path=a.txt", *swept]
    r = run_cli(*args, "out_dir=data/same", cwd=work)
    assert_one_line_error(r, "would both write to out_dir=data/same", meant)
    advised = re.search(r"'(out_dir=[^']+)'", r.stderr).group(1)
    r = run_cli(*args, advised, "quiet=true", cwd=work)
    assert r.returncode == 0, r.stderr


TRIAL_SWEEPER = """
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.plugins.sweeper import Sweeper


class TrialSweeper(Sweeper):
    def __init__(self, params: Any = None) -> None:
        self.params = params or {}

    def setup(self, *, hydra_context, task_function, config) -> None:
        from hydra.core.plugins import Plugins

        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config)

    def sweep(self, arguments):  # an optimizer's trials: values of its own choosing
        return self.launcher.launch([[*arguments, "seed=1"], [*arguments, "seed=2"]], 0)


@dataclass
class TrialSweeperConf:
    _target_: str = "hydra_plugins.trials.TrialSweeper"
    params: Any = field(default_factory=dict)


ConfigStore.instance().store(group="hydra/sweeper", name="trials", node=TrialSweeperConf)
"""


def test_a_sweeper_that_chooses_its_jobs_reports_them_all(work):
    """An optimizing sweeper (Optuna's, ...) picks its jobs' values itself: its two ok jobs
    were '1 job (1 failed)', exit 1, the command line's one job standing for them."""
    plugin = work / "site" / "hydra_plugins" / "trials"
    plugin.mkdir(parents=True)
    (plugin / "__init__.py").write_text(TRIAL_SWEEPER)
    r = run_cli("-m", "hydra/sweeper=trials", "source=file", "source.path=a.txt",
                "hydra.sweep.dir=sw", "quiet=true", cwd=work,
                env={"PYTHONPATH": str(work / "site")})  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert [(row["job"], row["status"]) for row in table(work / "sw")] == [("0", "ok"), ("1", "ok")]


def test_an_out_dir_naming_the_job_number_is_no_clash(work):
    """out_dir=o/${hydra:job.num} was read for the clash check before the job's Hydra config
    was set: 'HydraConfig was not set', which Hydra only warned of, and the sweep ran
    without its lock."""
    r = run_cli("-m", "source=file", "source.path=a.txt", "split=0.8,0.9", "quiet=true",
                "out_dir=o/${hydra:job.num}", cwd=work)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "Warning" not in r.stderr and "HydraConfig" not in r.stderr
    assert sorted(p.name for p in (work / "o").iterdir()) == ["0", "1"]


def test_a_sweep_subdir_naming_the_job_number_is_no_clash(work):
    r = run_cli("-m", "source=file", "source.path=a.txt", "split=0.8,0.9", "quiet=true",
                "hydra.sweep.subdir=${hydra.job.num}", cwd=work)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in sweep_dir(work).iterdir() if p.is_dir()) == ["0", "1"]


def test_hydra_job_chdir_keeps_paths_relative_to_the_command_folder(work):
    """hydra.job.chdir=true (a habit of Hydra users) moved each job into its Hydra folder,
    and every job failed with 'a.txt: no such file; check source.path', the file there."""
    r = run_cli("-m", "source=file", "source.path=a.txt", "split=0.8,0.9",
                "hydra.job.chdir=true", cwd=work)  # fmt: skip
    assert r.returncode == 0, r.stderr
    rows = table(sweep_dir(work))
    assert [row["status"] for row in rows] == ["ok", "ok"], rows
    r = run_cli("source=file", "source.path=a.txt", "out_dir=data/chdir", "hydra.run.dir=elsewhere",
                "hydra.job.chdir=true", cwd=work)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert (work / "data" / "chdir" / "train.bin").is_file()


def test_hydra_job_chdir_still_hides_a_secret_from_multirun_yaml_at_once(work):
    """Each job hides the sweep's secrets in multirun.yaml as it starts, so a sweep killed
    midway leaves none: with hydra.job.chdir=true the job's callback looked for the
    (relative) sweep folder inside the job's own folder, and the password stayed."""
    import socket

    silent = socket.create_server(("127.0.0.1", 0))  # takes the download, never answers
    url = f"http://user:s3cret@127.0.0.1:{silent.getsockname()[1]}"
    env = {**os.environ, "PYTHONPATH": str(REPO), "CORPUSPREP_CACHE_DIR": str(work / "cache")}
    cli = subprocess.Popen([sys.executable, "-m", "corpusprep", "-m", "source=url",
                            f"source.url={url}/a.txt,{url}/b.txt", "hydra.job.chdir=true"],
                           cwd=work, env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        silent.settimeout(60)
        silent.accept()  # the first job is running
        (saved,) = (work / "multirun").glob("*/*/multirun.yaml")
        assert "s3cret" not in saved.read_text()
    finally:
        cli.kill()
        cli.wait()
        silent.close()


def test_a_sweep_folder_another_sweep_is_writing_to_is_one_line(work):
    """Found by an attack: two sweeps given one hydra.sweep.dir wrote their jobs' records
    over each other's, and one whose jobs failed on the other's locks exited 0."""
    from corpusprep.writer import lock_sweep

    args = ("-m", "source=file", "source.path=a.txt", "split=0.8,0.9", "hydra.sweep.dir=sw",
            "quiet=true")  # fmt: skip
    held = lock_sweep(work / "sw")  # as the other sweep holds it
    try:
        r = run_cli(*args, cwd=work)
        assert_one_line_error(
            r, "hydra.sweep.dir=", "another corpusprep sweep", f"pid {os.getpid()}"
        )
        assert sorted(p.name for p in (work / "sw").iterdir()) == [".corpusprep-sweep.lock"]
    finally:
        os.close(held)
    r = run_cli(*args, cwd=work)  # once the other sweep is done
    assert r.returncode == 0, r.stderr
    assert len(table(work / "sw")) == 2
    # and a finished sweep leaves no lock file behind (found by an attack: it stayed)
    assert not [p.name for p in (work / "sw").iterdir() if p.name.startswith(".")]


def test_a_sweep_folder_that_cannot_be_made_is_one_line_naming_it(work):
    """Found by an attack: '[Errno 17] File exists: .../a.txt' named neither the key nor a fix."""
    r = run_cli("-m", "source=file", "source.path=a.txt", "hydra.sweep.dir=a.txt/sw", cwd=work)
    assert_one_line_error(r, "hydra.sweep.dir=a.txt/sw: cannot make it", "another hydra.sweep.dir")


def test_a_failed_job_is_a_row_and_the_others_are_kept(work):
    r = run_cli("-m", "source=file", "source.path=a.txt,missing.txt,b.txt", cwd=work)
    assert r.returncode == 1
    rows = table(sweep_dir(work))
    assert [row["status"] for row in rows] == ["ok", "failed", "ok"]
    assert "missing.txt: no such file" in rows[1]["reason"]
    assert "Traceback" not in r.stderr


def test_a_failed_jobs_reason_naming_a_strangers_file_is_one_escaped_row(work):
    """A job's error line shows a file name's control characters escaped; the sweep's
    table (stdout, summary.md) printed them as they were: a downloaded file's name set the
    terminal's title, and its line end split the row in two (a row could be faked)."""
    (work / "d").mkdir()
    (work / "d" / "evil\x1b]0;pwned\x07\n| 9 | fake row.txt").write_bytes(b"\xff\xfe\x00bad")
    r = run_cli("-m", "source=files", "source.glob=d/*", "split=0.8,0.9", "hydra.sweep.dir=sw",
                cwd=work)  # fmt: skip
    assert r.returncode == 1
    for text in (r.stdout, (work / "sw" / "summary.md").read_text()):
        assert "\x1b" not in text and "\x07" not in text
        rows = [line for line in text.splitlines() if line.startswith("| ")]
        assert len(rows) == 3, text  # the header and jobs 0 and 1
        assert "evil\\x1b]0;pwned\\x07\\n| 9 | fake row.txt" in text.replace("\\|", "|")
    assert "\n" in table(work / "sw")[0]["reason"]  # the CSV keeps the name, quoted


def test_a_strangers_job_record_in_the_sweep_folder_cannot_fake_a_line_of_the_count(work):
    """Found by an attack: the line that counts the jobs by status (2 ok, 1 failed) took
    the statuses of the job records in the sweep folder (a reused or shared one holds
    others') as they were: an escape sequence set the terminal's title, and a line end
    began a line of its own. It is escaped, as the table's cells are."""
    (work / "sw" / "planted").mkdir(parents=True)
    status = "x\x1b]0;pwned\x07\ncorpusprep sweep: fake"
    record = {"job": 0, "overrides": ["source=file", "source.path=a.txt", "split=0.8"],
              "status": status, "out_dir": str(work / "nowhere")}  # fmt: skip
    planted = work / "sw" / "planted" / "corpusprep_job.json"
    planted.write_text(json.dumps(record))
    os.utime(planted, (time.time() + 3600,) * 2)  # newer than job 0's own: it counts
    r = run_cli("-m", "source=file", "source.path=a.txt", "split=0.8,0.9", "hydra.sweep.dir=sw",
                cwd=work)  # fmt: skip
    assert "\x1b" not in r.stdout and "\x07" not in r.stdout, r.stdout
    assert [line for line in r.stdout.splitlines() if line.startswith("corpusprep sweep:")] == [
        "corpusprep sweep: 2 jobs (1 ok, 1 x\\x1b]0;pwned\\x07\\ncorpusprep sweep: fake) -> sw"
    ]


@pytest.mark.parametrize("name, what", [("corpusprep_sweep.json", "the sweep's list of jobs"),
                                        ("summary.md", "the sweep's table")])  # fmt: skip
def test_a_folder_in_the_way_of_a_sweeps_file_is_advised_as_such(work, name, what):
    """Found by an attack: a folder where a sweep's own file goes (IsADirectoryError) was
    advised 'free some space'."""
    (work / "sw" / name).mkdir(parents=True)
    r = run_cli("-m", "source=file", "source.path=a.txt", "split=0.8,0.9", "hydra.sweep.dir=sw",
                "quiet=true", cwd=work)  # fmt: skip
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    (error,) = [line for line in r.stderr.splitlines() if line.startswith("corpusprep: error")]
    assert f"sw/{name}: cannot write {what} (Is a directory); move what is in its way" in error


def test_a_record_left_in_another_folder_is_no_second_row_of_its_job(work):
    """Found by an attack: a record of job 0 with job 0's overrides, left in another folder
    of the sweep folder (by someone else, or by an earlier sweep whose hydra.sweep.subdir
    named its folders otherwise), was a second row of job 0: a 'failed' one failed the
    sweep, and inspect listed it. The job's own record, written as it ends, is newer."""
    (work / "sw" / "planted").mkdir(parents=True)
    overrides = ["source=file", "source.path=a.txt", "split=0.8", "quiet=True"]
    record = {"job": 0, "overrides": overrides, "status": "failed", "reason": "planted",
              "out_dir": str(work / "nowhere")}  # fmt: skip
    (work / "sw" / "planted" / "corpusprep_job.json").write_text(json.dumps(record))
    r = run_cli("-m", "source=file", "source.path=a.txt", "split=0.8,0.9", "hydra.sweep.dir=sw",
                "quiet=true", cwd=work)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert [(row["job"], row["status"]) for row in table(work / "sw")] == [("0", "ok"), ("1", "ok")]
    assert [(job, status) for job, status, _ in _inspected(work / "sw")] == [(0, "ok"), (1, "ok")]


@pytest.mark.parametrize(
    "text", ['{"job": 0, "overr', "", "[]", '{"status": "ok"}', '{"job": "0"}']
)
def test_a_job_record_that_cannot_be_read_in_the_sweep_folder_is_not_this_sweeps(work, text):
    """Found by an attack: a record half-written (a job killed or a disk full as it wrote
    it) or not a record at all, in a reused sweep folder, was a JSONDecodeError or KeyError
    that Hydra only warned of: no table, no summary.md or summary.csv, and exit 0 for a
    sweep whose job failed."""
    (work / "sw" / "old").mkdir(parents=True)
    (work / "sw" / "old" / "corpusprep_job.json").write_text(text)
    r = run_cli("-m", "source=file", "source.path=a.txt,missing.txt", "hydra.sweep.dir=sw",
                cwd=work)  # fmt: skip
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr and "Warning" not in r.stderr, r.stderr
    assert "corpusprep sweep: 2 jobs (1 failed, 1 ok)" in r.stdout
    assert [row["status"] for row in table(work / "sw")] == ["ok", "failed"]


def test_a_sweep_into_an_earlier_sweeps_folder_reports_its_own_jobs(work):
    """Found by the newcomer attack: the docs name a sweep's folder (hydra.sweep.dir=
    multirun/cmp), so fixing a failed job and sweeping again goes to the same folder. The
    earlier sweep's job records were counted as this sweep's: 'corpusprep sweep: 4 jobs
    (1 failed, 3 ok)' and exit code 1 for a sweep whose two jobs were both ok."""
    args = ["-m", "source=file", "hydra.sweep.dir=sw"]
    r = run_cli(*args, "source.path=a.txt,missing.txt", cwd=work)
    assert r.returncode == 1
    r = run_cli(*args, "source.path=a.txt,b.txt", cwd=work)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "corpusprep sweep: 2 jobs (1 ok, 1 skipped)" in r.stdout  # a: up to date
    rows = [(row["corpus"], row["status"]) for row in table(work / "sw")]
    assert rows == [("a", "skipped"), ("b", "ok")]
    # and inspect shows the jobs of the sweep that ran last, as its table does: the earlier
    # sweep's failed job 1 (missing.txt) was listed beside this one's job 1
    shown = subprocess.run([sys.executable, "-m", "corpusprep.inspect", "sw"], cwd=work,
                           capture_output=True, text=True, check=False)  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("sw: 2 jobs\n"), shown.stdout
    assert "missing" not in shown.stdout and "b.txt" in shown.stdout, shown.stdout


def _inspected(folder):
    from corpusprep.plot import sweep_data

    data = sweep_data(folder)
    return list(zip(data["jobs"], data["status"], data["labels"]))


@pytest.mark.parametrize(
    "kept", [None, "", "{", "[]", '{"jobs": [["a=1"], [2]]}', '{"jobs": 1}', '{"jobs": []}']
)
def test_without_a_list_of_jobs_every_record_shows(tmp_path, kept):
    """An older sweep's folder (no list), or a list that does not read as one: nothing is
    left out on its say."""
    from corpusprep.sweep import JOBS, RECORD

    for job, value in enumerate(["x", "y", "z"]):
        (tmp_path / value).mkdir()
        record = {"job": job % 2, "overrides": [f"k={value}"], "status": "failed"}
        (tmp_path / value / RECORD).write_text(json.dumps(record))
    if kept is not None:
        (tmp_path / JOBS).write_text(kept)
    assert _inspected(tmp_path) == [(0, "failed", "k=x"), (0, "failed", "k=z"),
                                    (1, "failed", "k=y")]  # fmt: skip


def test_a_listed_job_without_a_record_shows_as_such(tmp_path):
    """The sweep's own list leaves out the earlier sweep's job 0 (other overrides) and
    names its job 1, still running or killed before its record."""
    from corpusprep.sweep import JOBS, RECORD, write_jobs

    for job, value in ((0, "old"), (0, "new")):
        (tmp_path / value).mkdir()
        record = {"job": job, "overrides": [f"k={value}"], "status": "failed"}
        (tmp_path / value / RECORD).write_text(json.dumps(record))
    write_jobs(tmp_path, [["k=new"], ["k=next"]])
    assert _inspected(tmp_path) == [(0, "failed", "k=new"), (1, "no record", "k=next")]
    write_jobs(tmp_path, None)  # a sweeper whose jobs are not known in advance
    assert not (tmp_path / JOBS).exists()
    assert len(_inspected(tmp_path)) == 2


def test_a_stranger_s_record_without_job_or_overrides_beside_a_list_is_no_traceback(tmp_path):
    """Found by an attack: inspect reads a record without "job" as job 0, one without
    "overrides" as none; beside a list of jobs that was a KeyError traceback."""
    from corpusprep.sweep import RECORD, write_jobs

    for value, record in (("a", {"overrides": ["k=a"], "status": "failed"}),
                          ("b", {"job": 1, "status": "failed"})):  # fmt: skip
        (tmp_path / value).mkdir()
        (tmp_path / value / RECORD).write_text(json.dumps(record))
    write_jobs(tmp_path, [["k=a"], ["k=b"]])
    assert _inspected(tmp_path) == [(0, "failed", "k=a"), (1, "no record", "k=b")]


def test_a_list_of_more_jobs_than_inspect_holds_is_not_read(tmp_path, monkeypatch):
    """Found by an attack: a list of 20 million jobs ([] each) fits the file's bound, and
    inspect made a row of each (a million took 830 MB); every record shows instead."""
    from corpusprep import sweep
    from corpusprep.sweep import RECORD, write_jobs

    monkeypatch.setattr(sweep, "MAX_JOBS", 2)
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / RECORD).write_text(json.dumps({"job": 0, "overrides": ["k=a"],
                                                     "status": "failed"}))  # fmt: skip
    write_jobs(tmp_path, [["k=a"], ["k=b"]])
    assert len(_inspected(tmp_path)) == 2
    write_jobs(tmp_path, [["k=a"], ["k=b"], ["k=c"]])
    assert _inspected(tmp_path) == [(0, "failed", "k=a")]


@pytest.mark.parametrize("launcher", ["joblib", "submitit_local"])
def test_launchers(work, launcher):
    plugin = {"joblib": "joblib", "submitit_local": "submitit"}[launcher]
    pytest.importorskip(f"hydra_plugins.hydra_{plugin}_launcher")
    extra = ["hydra.launcher.n_jobs=2"] if launcher == "joblib" else []
    r = run_cli("-m", f"hydra/launcher={launcher}", *extra, "source=file",
                "source.path=a.txt,b.txt,missing.txt", cwd=work)  # fmt: skip
    assert r.returncode == 1, r.stdout + r.stderr
    rows = table(sweep_dir(work))
    assert [row["status"] for row in rows] == ["ok", "ok", "failed"]
    assert rows[0]["train_tokens"] and "no such file" in rows[2]["reason"]


# found by an attack: inside a joblib job, multiprocessing's default context is loky's, whose
# processes have no kill(): a shard's error became a traceback ending in AttributeError
def test_a_failed_shard_under_joblib_is_a_row_with_its_own_error(work):
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    text = b"hello world, this is a text.\n" * 2000
    (work / "bad.txt").write_bytes(text[:30000] + b"\xff" + text[30000:])
    r = run_cli("-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "source=file",
                "source.path=a.txt,bad.txt", "shard_bytes=4096", "executor.workers=2",
                cwd=work)  # fmt: skip
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and "AttributeError" not in r.stderr, r.stderr
    rows = table(sweep_dir(work))
    assert [row["status"] for row in rows] == ["ok", "failed"]
    assert "not valid UTF-8 at byte 30000" in rows[1]["reason"], rows[1]["reason"]


# found by an attack: spawned workers of a joblib job looked for loky's start method
# (multiprocessing's default there) and died; the table blamed memory
@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_workers_of_any_start_method_run_under_joblib(work, method):
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    r = run_cli("-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "source=file",
                "source.path=a.txt,b.txt", "shard_bytes=4096", "executor.workers=2",
                f"executor.start_method={method}", cwd=work)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert [row["status"] for row in table(sweep_dir(work))] == ["ok", "ok"]


def test_two_sweeps_in_the_same_second_get_two_folders(work):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "corpusprep", "-m", "source=file", "source.path=a.txt,b.txt"]
    procs = [subprocess.Popen(cmd, cwd=work, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for _ in range(2)]  # fmt: skip
    assert all(p.wait(timeout=120) == 0 for p in procs)
    folders = [p for p in (work / "multirun").glob("*/*") if p.is_dir()]
    assert len(folders) == 2
    assert all(len(table(f)) == 2 for f in folders)


def test_an_up_to_date_run_is_skipped(work):
    assert run_cli("source=file", "source.path=a.txt", "out_dir=out", cwd=work).returncode == 0
    stamp = (work / "out" / "train.bin").stat().st_mtime_ns
    time.sleep(0.01)
    r = run_cli("source=file", "source.path=a.txt", "out_dir=out", "quiet=true", cwd=work)
    assert r.returncode == 0 and "is up to date" in r.stdout and "force=true" in r.stdout
    assert len(r.stdout.strip().splitlines()) == 1
    assert (work / "out" / "train.bin").stat().st_mtime_ns == stamp
    # a run that does not change the output (more workers) is still up to date
    r = run_cli("source=file", "source.path=a.txt", "out_dir=out", "executor.workers=1", cwd=work)
    assert "is up to date" in r.stdout
    for change in (["force=true"], ["split=0.8"], ["dtype=uint32"]):
        r = run_cli("source=file", "source.path=a.txt", "out_dir=out", *change, cwd=work)
        assert r.returncode == 0 and "up to date" not in r.stdout, change
    (work / "a.txt").write_text("changed text\n" * 100)
    r = run_cli("source=file", "source.path=a.txt", "out_dir=out", "dtype=uint32", cwd=work)
    assert "up to date" not in r.stdout
    m = json.loads((work / "out" / "manifest.json").read_text())
    assert m["tokens"]["train"] + m["tokens"]["val"] == 1300


def test_a_damaged_output_is_not_up_to_date(work):
    assert run_cli("source=file", "source.path=a.txt", "out_dir=out", cwd=work).returncode == 0
    with open(work / "out" / "val.bin", "ab") as f:
        f.write(b"xx")
    r = run_cli("source=file", "source.path=a.txt", "out_dir=out", cwd=work)
    assert r.returncode == 0 and "up to date" not in r.stdout
    assert (work / "out" / "val.bin").stat().st_size == 2 * 720


def test_skipped_jobs_in_a_sweep(work):
    args = ["-m", "source=file", "source.path=a.txt", "split=0.8,0.9", "out_dir=o/${split}"]
    assert run_cli(*args, cwd=work).returncode == 0
    r = run_cli(*args, cwd=work)
    assert r.returncode == 0
    latest = max((p for p in (work / "multirun").glob("*/*") if p.is_dir()), key=lambda p: p.name)
    assert [row["status"] for row in table(latest)] == ["skipped", "skipped"]


def test_a_lone_surrogate_in_a_skipped_jobs_manifest_is_shown_escaped(work):
    """Found by an attack: a skipped job's row comes from its out_dir's manifest (another
    run's, a stranger's in a shared folder), where JSON may spell a lone surrogate, which no
    text file or stdout can encode: the job's up-to-date line was a traceback, and the
    table, summary.md and summary.csv were never written (exit 0). The table shows it
    escaped; the CSV keeps the rest of the text as it is."""
    args = ["-m", "source=file", "source.path=a.txt", "split=0.8,0.9", "out_dir=o/${split}",
            "hydra.sweep.dir=sw"]  # fmt: skip
    assert run_cli(*args, cwd=work).returncode == 0
    path = work / "o" / "0.8" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest.update(name="x\ud800\x1b]0;y\x07", created="2020\ud800")
    path.write_text(json.dumps(manifest))
    r = run_cli(*args, cwd=work)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    for text in (r.stdout, (work / "sw" / "summary.md").read_text()):
        assert "| x\\ud800\\x1b]0;y\\x07 |" in text and "\x1b" not in text, text
    assert [row["corpus"] for row in table(work / "sw")] == ["x\\ud800\x1b]0;y\x07", "a"]


def test_dry_run_estimates_and_writes_nothing(work, shakespeare):
    r = run_cli("source=file", f"source.path={shakespeare}", "dry_run=true", "out_dir=o",
                cwd=work)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "dry run" in r.stdout and "tokens" in r.stdout and "dtype uint16" in r.stdout
    assert "tokens     1,115,394 " in r.stdout  # tiny shakespeare is one sample: exact
    assert not (work / "o").exists()
    r = run_cli("-m", "source=file", f"source.path={shakespeare}", "dry_run=true",
                "tokenizer=char,byte", cwd=work)  # fmt: skip
    assert r.returncode == 0, r.stderr
    rows = table(sweep_dir(work))
    assert [row["status"] for row in rows] == ["estimate", "estimate"]
    assert not list(sweep_dir(work).glob("*/train.bin"))


def test_values_that_differ_only_in_a_slash_get_their_own_folders(work):
    """An attack: d/x.txt and d_x.txt made the same job folder name; the second job replaced
    the first's files, and the sweep said the first left no record."""
    (work / "d").mkdir()
    (work / "d" / "x.txt").write_text("one text here\n" * 300)
    (work / "d_x.txt").write_text("another text, longer\n" * 300)
    r = run_cli("-m", "source=file", "source.path=d/x.txt,d_x.txt", "quiet=true", cwd=work)
    assert r.returncode == 0, r.stderr
    folder = sweep_dir(work)
    jobs = sorted(p for p in folder.iterdir() if p.is_dir())
    assert len(jobs) == 2 and all((job / "train.bin").is_file() for job in jobs)
    assert [row["status"] for row in table(folder)] == ["ok", "ok"]


def test_a_sweeps_clash_check_reads_out_dir_under_home_as_the_run_does(tmp_path, monkeypatch):
    """Two jobs with out_dir "~/a" and $HOME/a write to one folder (run_job expands ~): the
    clash check compares them as that folder."""
    from corpusprep.sweep import _real_path

    monkeypatch.setenv("HOME", str(tmp_path))
    assert _real_path("~/a") == _real_path(str(tmp_path / "a")) == str((tmp_path / "a").resolve())


# found by an attack: without psutil, loky stops a joblib sweep's workers with `pgrep -P`;
# a Ctrl-C that reaches that pgrep too (the terminal's process group) ends loky's manager
# thread in an AttributeError (its fallback calls a kill() its processes lack) and the
# sweep waits for its idle workers for ever (2 of 8 Ctrl-Cs here). With psutil: no pgrep
def test_the_joblib_launcher_without_psutil_is_one_line(monkeypatch):
    import importlib.util

    from corpusprep import overrides
    from corpusprep.errors import UserError

    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "psutil" else real(name, *a))  # fmt: skip
    parsed, _ = overrides._parse(["hydra/launcher=joblib", "source=file", "source.path=a.txt"])
    with pytest.raises(UserError, match=r"^hydra/launcher=joblib: .*psutil.*; "
                                        r"pip install 'corpusprep\[joblib\]'$"):  # fmt: skip
        overrides._check_launchers(parsed)


def test_a_held_sweep_folder_with_braces_in_its_name_is_one_line(tmp_path):
    """The line is built around the folder's name, never formatted from it ({ and } in a
    folder name, which a str.format of the message raised on)."""
    from corpusprep.errors import UserError
    from corpusprep.writer import lock_sweep

    folder = tmp_path / "sweep {x} }{"
    held = lock_sweep(folder)
    try:
        with pytest.raises(UserError, match=r"sweep \{x\} \}\{: another corpusprep sweep"):
            lock_sweep(folder)
    finally:
        os.close(held)


def test_a_file_where_a_jobs_folder_goes_is_one_line_and_the_sweep_goes_on(work):
    """Hydra makes each job's folder before the job runs: a file in its place was Hydra's
    FileExistsError traceback, which ended the sweep with no table."""
    common = ("-m", "source=file", "source.path=a.txt", "split=0.8,0.9",
              "hydra.sweep.dir=sw", "hydra.sweep.subdir=j${hydra.job.num}", "out_dir=o_${split}",
              "quiet=true")  # fmt: skip
    (work / "sw").mkdir()
    (work / "sw" / "j1").write_text("mine")
    r = run_cli(*common, cwd=work)
    assert r.returncode == 1, r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("corpusprep: error")]
    assert errors == [
        "corpusprep: error: sw/j1: cannot make the job's folder (File exists); "
        "a file is in its way: move it, or choose another hydra.sweep.dir"
    ], r.stderr
    assert "corpusprep sweep: 2 jobs (1 failed, 1 ok)" in r.stderr
    assert (work / "sw" / "j1").read_text() == "mine"
    assert "its folder could not be made (File exists)" in (work / "sw" / "summary.md").read_text()


@pytest.mark.parametrize("launcher", ["joblib", "submitit_local"])
def test_a_file_where_a_jobs_folder_goes_under_another_launcher_is_one_line_too(work, launcher):
    """hydra/launcher=joblib (and submitit_local) runs each job (and makes its folder) in a
    worker process, where Hydra's run_job was not guarded: the file in the way ended the
    sweep with a garbled remote traceback (submitit's FailedJobError) and no table, job 0's
    result unsaid; then, under joblib, the table said the job left no record."""
    plugin = {"joblib": "joblib", "submitit_local": "submitit"}[launcher]
    pytest.importorskip(f"hydra_plugins.hydra_{plugin}_launcher")
    extra = ["hydra.launcher.n_jobs=2"] if launcher == "joblib" else []
    (work / "sw").mkdir()
    (work / "sw" / "j1").write_text("mine")
    r = run_cli("-m", "source=file", "source.path=a.txt", "split=0.8,0.9", "hydra.sweep.dir=sw",
                "hydra.sweep.subdir=j${hydra.job.num}", "out_dir=o_${split}", "quiet=true",
                f"hydra/launcher={launcher}", *extra, cwd=work)  # fmt: skip
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    assert "corpusprep sweep: 2 jobs (1 failed, 1 ok)" in r.stderr
    assert (work / "sw" / "j1").read_text() == "mine"
    assert (work / "o_0.8" / "manifest.json").is_file()
    # the table says why, as under the basic launcher (the worker's reason reaches the
    # driver), not that the job left no record
    assert "its folder could not be made (File exists)" in (work / "sw" / "summary.md").read_text()
    said = "".join(p.read_text() for p in work.glob("sw/.submitit/*/*.err")) + r.stderr
    assert (  # said by the job's worker: submitit keeps a worker's stderr in its log
        "corpusprep: error: sw/j1: cannot make the job's folder (File exists); "
        "a file is in its way: move it, or choose another hydra.sweep.dir\n"
    ) in said, said


@pytest.mark.parametrize("launcher", ["joblib", "submitit_local"])
def test_a_job_killed_under_another_launcher_is_one_line_and_a_failed_row(work, launcher):
    """A job's process killed (the OOM killer, on a big corpus) under joblib was loky's
    TerminatedWorkerError traceback, under submitit_local its UncompletedJobError: the
    sweep ended there, with no table, the other job's result unsaid."""
    from corpusprep.sweep import AGAIN

    plugin = {"joblib": "joblib", "submitit_local": "submitit"}[launcher]
    pytest.importorskip(f"hydra_plugins.hydra_{plugin}_launcher")
    extra = ["hydra.launcher.n_jobs=2"] if launcher == "joblib" else []
    r = run_cli("-m", "source=file", "source.path=a.txt", "split=0.8,0.9", "hydra.sweep.dir=sw",
                "out_dir=o_${split}", "quiet=true", f"hydra/launcher={launcher}", *extra,
                "tokenizer._target_=fault_tokenizers.KilledInFitCharTokenizer",
                "+tokenizer.split=${split}", "+tokenizer.kill_at=0.9",
                "hydra.sweep.subdir=j${hydra.job.num}",  # job 0's record, once it is done:
                f"+tokenizer.wait_for={work / 'sw' / 'j0' / 'corpusprep_job.json'}", cwd=work,
                env=FAULTS)  # fmt: skip
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("corpusprep: error")]
    assert len(errors) == 1 and AGAIN in errors[0], r.stderr
    # joblib knows the signal; submitit, only that the job ended with no result: its log
    assert ("SIGKILL" if launcher == "joblib" else "_0_log.err; ") in errors[0], errors[0]
    assert "corpusprep sweep: 2 jobs (1 failed, 1 ok)" in r.stderr
    assert (work / "o_0.8" / "manifest.json").is_file()
    rows = table(work / "sw")
    assert [row["status"] for row in rows] == ["ok", "failed"]
    assert "killed" in rows[1]["reason"], rows[1]["reason"]


@pytest.mark.parametrize("launcher", ["joblib", "submitit_local"])
def test_ctrl_c_in_a_sweep_under_another_launcher_is_one_line(work, launcher):
    """A terminal's Ctrl-C reaches every process of its group: under submitit_local each
    job's controller (submitit's own process) printed its KeyboardInterrupt traceback below
    corpusprep's one line. Every process of the sweep ends."""
    import signal

    plugin = {"joblib": "joblib", "submitit_local": "submitit"}[launcher]
    pytest.importorskip(f"hydra_plugins.hydra_{plugin}_launcher")
    (work / "long.txt").write_text("a line of text to encode slowly\n" * 20_000)
    extra = ["hydra.launcher.n_jobs=2"] if launcher == "joblib" else []
    proc = subprocess.Popen(
        [sys.executable, "-m", "corpusprep", "-m", "source=file", "source.path=long.txt",
         "split=0.8,0.9", "hydra.sweep.dir=sw", "out_dir=o_${split}", "shard_bytes=100000",
         f"hydra/launcher={launcher}", *extra,
         "tokenizer._target_=fault_tokenizers.SlowCharTokenizer", "+tokenizer.delay=0.5"],
        cwd=work, env={**os.environ, **FAULTS}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while len(list(work.glob("o_0.*/.corpusprep.lock"))) < 2:  # both jobs at work
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 128 + signal.SIGINT, err
        # (a joblib worker's job may say so too, of its own out_dir, before it is stopped)
        *jobs, last = err.splitlines()
        assert last == "corpusprep: error: interrupted", err
        assert all(line == "corpusprep: error: interrupted; out_dir has no outputs yet"
                   for line in jobs), err  # fmt: skip
        deadline = time.monotonic() + 10  # (a controller may take a moment to stop its task)
        while _group_alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _group_alive(proc.pid)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def test_a_ctrl_c_while_a_submitit_controller_starts_is_no_traceback(tmp_path):
    """Found by an attack: a Ctrl-C while a job's controller still imported submitit (some
    0.2 s, as a submitit_local sweep's jobs start) was its traceback on the terminal."""
    pytest.importorskip("submitit")
    code = (
        "import builtins, runpy, sys\n"
        "real = builtins.__import__\n"
        "def stopped(name, *args, **kw):\n"  # the Ctrl-C, as submitit is imported
        "    if name.startswith('submitit'):\n"
        "        raise KeyboardInterrupt\n"
        "    return real(name, *args, **kw)\n"
        "builtins.__import__ = stopped\n"
        "sys.argv[1:] = [sys.argv[-1]]\n"
        "runpy.run_module('corpusprep._submitit_controller', run_name='__main__')\n"
    )
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                       text=True, check=False)  # fmt: skip
    assert (r.returncode, r.stderr) == (130, ""), r.stderr


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def test_a_submitit_job_that_failed_outside_its_run_is_one_line(capsys, tmp_path):
    """An error in a submitit worker outside the run (Hydra's own, before the job's run
    keeps its errors) is its FailedJobError: one line, with the worker's last words."""
    pytest.importorskip("submitit")
    from types import SimpleNamespace

    from submitit.core.utils import FailedJobError

    from corpusprep.launchers import _results_or_say_why
    from corpusprep.sweep import AGAIN

    log = tmp_path / "sw" / ".submitit" / "7" / "7_0_log.err"
    trace = ("Job (task=0) failed during processing with trace:\n" + "-" * 22 + "\n"
             "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
             "RuntimeError: boom\n\n" + "-" * 22 + "\nYou can check full logs with "
             f"'job.stderr(0)' and 'job.stdout(0)'or at paths:\n  - {log}\n")  # fmt: skip

    def results(job):
        raise FailedJobError(trace)

    returns = _results_or_say_why(results)(SimpleNamespace(paths=SimpleNamespace(stderr=log)))
    assert len(returns) == 1 and returns[0].return_value is None
    assert capsys.readouterr().err == (
        "corpusprep: error: a job of the sweep ended without a result (failed: RuntimeError: "
        f"boom); its log is {log}; {AGAIN}\n"
    )


def test_a_quiet_joblib_sweeps_count_line_is_not_called_an_error(work):
    """Under joblib the jobs start in worker processes, so Hydra's stderr stayed held to
    the end, and the quiet sweep's count line (why it exits 1) was taken for Hydra's own
    error: `corpusprep: error: corpusprep sweep: 2 jobs (2 failed)`."""
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    r = run_cli("-m", "hydra/launcher=joblib", "source=file", "source.path=nope.txt",
                "split=0.8,0.9", "hydra.sweep.dir=sw", "quiet=true", cwd=work)  # fmt: skip
    assert r.returncode == 1, r.stderr
    lines = r.stderr.splitlines()
    assert lines[-1] == "corpusprep sweep: 2 jobs (2 failed) -> sw", r.stderr
    assert lines.count("corpusprep: error: nope.txt: no such file; check source.path") == 2
