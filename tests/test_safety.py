"""Interrupted runs, shared folders and full disks (issue 10): a folder looks finished only
when every file in it belongs to one run, one run at a time writes there, nothing of a
dead run lingers, and a full disk is one line with the old outputs untouched."""

from __future__ import annotations

import json
import os
import pickle
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import REPO, assert_one_line_error, run_cli

TESTS = REPO / "tests"
# the test tokenizers are a plugin package of their own, allowed by name
ENV = {"PYTHONPATH": os.pathsep.join([str(REPO), str(TESTS)]),
       "CORPUSPREP_PLUGIN_PACKAGES": "fault_tokenizers"}  # fmt: skip
SLOW = ["tokenizer._target_=fault_tokenizers.SlowCharTokenizer", "+tokenizer.delay=0.2"]


def _popen(*args: str, cwd: Path, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "corpusprep", *args],
        cwd=cwd,
        env={**os.environ, **ENV, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _processes_mentioning(text: str) -> list[int]:
    """Live processes (the driver and its pool workers share its command line) naming text."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
            state = (proc / "stat").read_text().split(") ", 1)[1][0]
        except OSError:
            continue
        if text in cmdline and state != "Z":
            found.append(int(proc.name))
    return found


def _wait_until(condition, timeout: float = 30, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _visible(folder: Path) -> dict[str, bytes]:
    """Every file a reader sees, by its name in the folder (doc_index/ holds some)."""
    files = {}
    for p in folder.iterdir():
        if p.name.startswith("."):
            continue
        inner = sorted(p.iterdir()) if p.is_dir() else [p]
        files.update({str(f.relative_to(folder)): f.read_bytes() for f in inner})
    return files


def _hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def _fingerprint(files: dict[str, bytes]) -> str:
    return json.loads(files["manifest.json"])["fingerprint"]


def _data(files: dict[str, bytes]) -> dict[str, bytes]:
    """Everything but the manifest (which holds times): the bytes a run is judged by."""
    return {n: b for n, b in files.items() if n != "manifest.json"}


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    rng = random.Random(0)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota"]
    lines = (" ".join(rng.choice(words) for _ in range(12)) for _ in range(40_000))
    (tmp_path / "corpus.txt").write_text("\n".join(lines) + "\n")
    return tmp_path / "corpus.txt"


# --- one run at a time ---------------------------------------------------------------------


def test_a_second_run_in_the_same_out_dir_is_refused_while_the_first_runs(tmp_path, corpus):
    first = _popen("source=file", "source.path=corpus.txt", "out_dir=out", "shard_bytes=200000",
                   "executor.workers=1", *SLOW, cwd=tmp_path)  # fmt: skip
    try:
        _wait_until(lambda: (tmp_path / "out" / ".corpusprep.lock").exists(), what="the lock")
        second = run_cli("source=file", "source.path=corpus.txt", "out_dir=out", "split=0.8",
                         cwd=tmp_path)  # fmt: skip
        assert_one_line_error(second, "out_dir=out", "another corpusprep run", f"pid {first.pid}")
        out, err = first.communicate(timeout=120)
        assert first.returncode == 0, err
    finally:
        first.kill()
    # the first run's folder, whole and alone; the lock is gone with it
    ref = run_cli("source=file", "source.path=corpus.txt", "out_dir=ref", cwd=tmp_path)
    assert ref.returncode == 0, ref.stderr
    assert _data(_visible(tmp_path / "out")) == _data(_visible(tmp_path / "ref"))
    assert _hidden(tmp_path / "out") == []


# --- a commit cut short -------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace to inject the kill")
def test_a_sigkill_between_two_renames_of_the_commit_never_looks_finished(tmp_path, corpus):
    import corpusprep
    from corpusprep.errors import UserError

    args = ["source=file", "source.path=corpus.txt", "executor.workers=1"]
    assert run_cli(*args, "out_dir=out", cwd=tmp_path).returncode == 0  # the old run
    assert run_cli(*args, "out_dir=new", "split=0.8", cwd=tmp_path).returncode == 0  # reference
    # the 3rd rename: after the journal and train.bin, before val.bin and the manifest
    killed = subprocess.run(
        ["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=rename",
         "-e", "inject=rename:signal=SIGKILL:when=3",
         sys.executable, "-m", "corpusprep", *args, "out_dir=out", "split=0.8"],
        cwd=tmp_path, env={**os.environ, **ENV}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert killed.returncode != 0
    out = tmp_path / "out"
    assert not (out / "manifest.json").exists(), sorted(os.listdir(out))  # not finished
    with pytest.raises(UserError, match="a killed run left one half done"):
        corpusprep.load(out)
    # the next run in the folder finishes that commit: exactly the new run's files
    again = run_cli(*args, "out_dir=out", "split=0.8", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "up to date" in again.stdout
    assert _data(_visible(out)) == _data(_visible(tmp_path / "new"))
    assert _fingerprint(_visible(out)) == _fingerprint(_visible(tmp_path / "new"))
    assert _hidden(out) == []
    corpusprep.load(out)


def test_an_edited_output_file_is_not_taken_as_up_to_date(tmp_path, corpus):
    args = ["source=file", "source.path=corpus.txt", "out_dir=out"]
    assert run_cli(*args, cwd=tmp_path).returncode == 0
    train = tmp_path / "out" / "train.bin"
    good = train.read_bytes()
    train.write_bytes(good[:-2] + b"\xff\xff")  # same size, other bytes
    again = run_cli(*args, cwd=tmp_path)
    assert again.returncode == 0 and "up to date" not in again.stdout
    assert train.read_bytes() == good


# the check hashes the outputs side by side, a thread per core, beside the input's: an edit
# in any one of many shards is still found, whichever thread reads it
@pytest.mark.parametrize("edited", [0, 3, -1])
def test_an_edited_shard_of_many_is_not_taken_as_up_to_date(tmp_path, corpus, edited):
    args = ["source=file", "source.path=corpus.txt", "out_dir=out", "format=llmc",
            "shard_tokens=20000"]  # fmt: skip
    assert run_cli(*args, cwd=tmp_path).returncode == 0
    shards = sorted((tmp_path / "out").glob("*.bin"))
    assert len(shards) >= 5
    good = shards[edited].read_bytes()
    shards[edited].write_bytes(good[:-2] + bytes([good[-2] ^ 1, good[-1]]))  # same size
    again = run_cli(*args, cwd=tmp_path)
    assert again.returncode == 0 and "up to date" not in again.stdout
    assert shards[edited].read_bytes() == good
    assert "up to date" in run_cli(*args, cwd=tmp_path).stdout


@pytest.mark.parametrize("threads", [1, 3, 64])
def test_changed_files_names_each_changed_file_in_the_manifests_order(tmp_path, threads):
    import hashlib

    from corpusprep.writer import changed_files

    files = {f"part{i}.bin": bytes([i]) * (1000 * i + 1) for i in range(12)}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    sums = {n: hashlib.sha256(d).hexdigest() for n, d in files.items()}
    manifest = {"files": {n: len(d) for n, d in files.items()}, "checksums": sums}
    assert changed_files(tmp_path, manifest, threads) == []
    (tmp_path / "part7.bin").write_bytes(b"\xff" * len(files["part7.bin"]))  # same size
    (tmp_path / "part2.bin").unlink()
    (tmp_path / "part11.bin").write_bytes(files["part11.bin"][:-1])
    (tmp_path / "part0.bin").unlink()
    (tmp_path / "part0.bin").mkdir()  # a folder where a file was: unreadable as one
    want = ["part0.bin", "part2.bin", "part7.bin", "part11.bin"]
    assert changed_files(tmp_path, manifest, threads) == want


# found by an attack: through a symlink to the folder, every file of the run before that
# this run does not make was kept (the commit took the folder's own link for a subfolder
# leading elsewhere), so the folder held two runs' files under one manifest
@pytest.mark.parametrize("second", [("tokenizer=byte",), ("format=llmc", "shard_tokens=50000")])
@pytest.mark.parametrize("through", ["link", "real"])
def test_a_run_through_a_symlinked_out_dir_removes_the_old_runs_files(tmp_path, corpus,
                                                                      second, through):  # fmt: skip
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to("real")
    first = run_cli("source=file", "source.path=corpus.txt", "out_dir=link", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    again = run_cli("source=file", "source.path=corpus.txt", f"out_dir={through}", *second,
                    cwd=tmp_path)  # fmt: skip
    assert again.returncode == 0, again.stderr
    alone = run_cli("source=file", "source.path=corpus.txt", "out_dir=alone", *second,
                    cwd=tmp_path)  # fmt: skip
    assert alone.returncode == 0, alone.stderr
    assert sorted(_data(_visible(tmp_path / "real"))) == sorted(_data(_visible(tmp_path / "alone")))
    assert _data(_visible(tmp_path / "real")) == _data(_visible(tmp_path / "alone"))
    assert (tmp_path / "link").is_symlink()  # the user's link stays as it was


def test_the_manifest_lists_every_file_with_its_size_and_sha256(tmp_path, corpus):
    import hashlib

    assert (
        run_cli("source=file", "source.path=corpus.txt", "out_dir=out", cwd=tmp_path).returncode
        == 0
    )
    out = tmp_path / "out"
    m = json.loads((out / "manifest.json").read_text())
    on_disk = {p.name for p in out.iterdir()} - {"manifest.json"}
    assert set(m["files"]) == set(m["checksums"]) == on_disk
    for name in on_disk:
        assert m["files"][name] == (out / name).stat().st_size
        assert m["checksums"][name] == hashlib.sha256((out / name).read_bytes()).hexdigest()


# --- dead runs leave nothing behind -------------------------------------------------------


def test_a_sigkilled_driver_takes_its_workers_with_it(tmp_path, corpus):
    # each piece takes a worker 5 s: without a death signal they would go on for a long time
    run = _popen("source=file", "source.path=corpus.txt", f"out_dir={tmp_path / 'out'}",
                 "shard_bytes=100000", "executor.workers=2", *SLOW, "tokenizer.delay=5",
                 cwd=tmp_path)  # fmt: skip
    marker = str(tmp_path / "out")
    try:
        _wait_until(lambda: len(_processes_mentioning(marker)) >= 3
                    and any(p.suffix == ".tmp" for p in (tmp_path / "out").iterdir()),
                    what="two pool workers writing")  # fmt: skip
        run.kill()
        run.wait(10)
        _wait_until(lambda: not _processes_mentioning(marker), timeout=2, what="workers to die")
    finally:
        run.kill()
        for pid in _processes_mentioning(marker):
            os.kill(pid, signal.SIGKILL)
    # the temporary files it left are removed by the next run, which succeeds
    assert any(p.name.endswith(".tmp") for p in (tmp_path / "out").iterdir())
    r = run_cli("source=file", "source.path=corpus.txt", f"out_dir={marker}", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert _hidden(tmp_path / "out") == []


def _descendants(pid: int) -> list[int]:
    """pid's live descendants, children's children too (a forkserver's workers are its own)."""
    children: dict[int, list[int]] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            state, ppid = (proc / "stat").read_text().split(") ", 1)[1].split()[:2]
        except (OSError, ValueError):
            continue
        if state != "Z":
            children.setdefault(int(ppid), []).append(int(proc.name))
    found, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def _alive(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            if (Path("/proc") / str(pid) / "stat").read_text().split(") ", 1)[1][0] != "Z":
                alive.append(pid)
        except OSError:
            pass
    return alive


# found by an attack: a forkserver's workers (Python 3.14's default start method on Linux)
# are its children, not the driver's, and keep it alive: a SIGKILLed driver left the
# forkserver, its workers and the resource tracker running for ever
def test_a_sigkilled_driver_takes_its_forkserver_workers_with_it(tmp_path, corpus):
    run = _popen("source=file", "source.path=corpus.txt", f"out_dir={tmp_path / 'out'}",
                 "shard_bytes=100000", "executor.workers=2", "executor.start_method=forkserver",
                 *SLOW, "tokenizer.delay=5", cwd=tmp_path)  # fmt: skip
    started: list[int] = []

    def writing() -> bool:  # the resource tracker, the forkserver and its two workers
        started[:] = _descendants(run.pid)
        return len(started) >= 4 and any(p.suffix == ".tmp" for p in (tmp_path / "out").iterdir())

    try:
        _wait_until(writing, what="two pool workers writing")
        run.kill()
        run.wait(10)
        _wait_until(lambda: not _alive(started), timeout=5, what="the forkserver's workers to die")
    finally:
        run.kill()
        for pid in _alive(started):
            os.kill(pid, signal.SIGKILL)


def test_temporary_files_of_dead_runs_are_removed_and_others_kept(tmp_path, corpus):
    out = tmp_path / "out"
    out.mkdir()
    dead = [".train.bin.4242-abcdef.tmp", ".corpusprep-commit.json.77-123456.tmp"]
    for name in dead:
        (out / name).write_bytes(b"\0" * 1000)
    (out / "notes.txt").write_text("mine")  # not ours: stays
    r = run_cli("source=file", "source.path=corpus.txt", "out_dir=out", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert _hidden(out) == [] and (out / "notes.txt").read_text() == "mine"


def _docs(tmp_path: Path, n: int = 3000) -> Path:
    rows = [json.dumps({"text": f"document {i}: " + "words and more words " * (i % 40)})
            for i in range(n)]  # fmt: skip
    (tmp_path / "docs.jsonl").write_text("\n".join(rows) + "\n")
    return tmp_path / "docs.jsonl"


def test_ctrl_c_leaves_no_work_folder(tmp_path):
    _docs(tmp_path)
    args = ["source=files", "source.glob=docs.jsonl", "out_dir=out", "shard_bytes=20000",
            "executor.workers=2", *SLOW]  # fmt: skip
    run = _popen(*args, cwd=tmp_path)
    try:
        _wait_until(lambda: any((tmp_path / "out").glob(".corpusprep-work/*/*.done")),
                    what="a finished shard")  # fmt: skip
        run.send_signal(signal.SIGINT)
        _, err = run.communicate(timeout=60)
    finally:
        run.kill()
    assert run.returncode == 130, err
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists() or _hidden(tmp_path / "out") == []
    assert not _processes_mentioning(str(tmp_path / "out"))


# --- resuming is keyed on content ----------------------------------------------------------


def _crash_leaving_shards(tmp_path: Path, args: list[str]) -> Path:
    """A run that fails halfway (not the user's fault: its finished shards stay), with the
    config a re-run uses too (the failure stops once the flag file is gone)."""
    flag = tmp_path / "fail"
    flag.touch()
    crash = run_cli(*args, cwd=tmp_path, env=ENV)
    assert crash.returncode != 0 and "injected failure" in crash.stderr
    flag.unlink()
    work = next((tmp_path / "out" / ".corpusprep-work").iterdir())
    assert list(work.glob("*.done")), "the crash should leave finished shards"
    return work


def _resumable(tmp_path: Path, out: str = "out") -> list[str]:
    return ["source=files", "source.glob=docs.jsonl", f"out_dir={out}", "shard_bytes=20000",
            "executor.workers=1", "tokenizer._target_=fault_tokenizers.FailWhileFlagCharTokenizer",
            f"+tokenizer.flag={tmp_path / 'fail'}", "+tokenizer.fail_after=200"]  # fmt: skip


def test_a_resume_after_a_same_size_same_mtime_change_redoes_the_shards(tmp_path):
    docs = _docs(tmp_path)
    args = _resumable(tmp_path)
    _crash_leaving_shards(tmp_path, args)
    # as `cp -p` / `rsync -a` would leave it: other bytes, the same size and mtime
    st = docs.stat()
    text = docs.read_bytes().replace(b"document", b"DOCUMENT")
    docs.write_bytes(text)
    os.utime(docs, ns=(st.st_atime_ns, st.st_mtime_ns))
    r = run_cli(*args, cwd=tmp_path, env=ENV)
    assert r.returncode == 0, r.stderr
    assert "resuming" not in r.stderr
    fresh = run_cli(*_resumable(tmp_path, "fresh"), cwd=tmp_path, env=ENV)
    assert fresh.returncode == 0
    assert _data(_visible(tmp_path / "out")) == _data(_visible(tmp_path / "fresh"))


def test_a_resume_with_the_same_content_reuses_the_shards(tmp_path):
    _docs(tmp_path)
    args = _resumable(tmp_path)
    _crash_leaving_shards(tmp_path, args)
    r = run_cli(*args, cwd=tmp_path, env=ENV)
    assert r.returncode == 0 and "resuming" in r.stderr, r.stderr
    run_cli(*_resumable(tmp_path, "fresh"), cwd=tmp_path, env=ENV)
    assert _data(_visible(tmp_path / "out")) == _data(_visible(tmp_path / "fresh"))


# found by an attack: a finished part damaged in place at the same size was reused, and the
# folder then counted as up to date (its manifest's sha256 taken over the bad bytes)
@pytest.mark.parametrize("damaged", ["train", "val", "index", "keys"])
def test_a_resume_redoes_a_finished_shard_whose_files_changed_at_the_same_size(tmp_path, damaged):
    _docs(tmp_path)
    args = [*_resumable(tmp_path), "split_by=hash"]  # (keys: the duplicate count's)
    work = _crash_leaving_shards(tmp_path, args)
    marker = sorted(work.glob("*.done"))[0]
    shard = marker.name.split(".")[0]
    if damaged == "val":  # a shard that wrote val
        marker = next(m for m in sorted(work.glob("*.done"))
                      if json.loads(m.read_text())["val_tokens"])  # fmt: skip
        shard = marker.name.split(".")[0]
    named = {"train": f"train.{shard}.part", "val": f"val.{shard}.part",
             "index": f"train.{shard}.docs", "keys": f"{shard}.done.keys"}[damaged]  # fmt: skip
    (part,) = [p for p in work.iterdir() if p.name.startswith(named)]
    data = bytearray(part.read_bytes())
    if damaged == "keys":  # every document of the shard keyed alike: counted as duplicates
        data = bytearray(len(data))
    else:
        data[4] ^= 1
    part.write_bytes(bytes(data))
    r = run_cli(*args, cwd=tmp_path, env=ENV)
    assert r.returncode == 0, r.stderr
    fresh = run_cli(*_resumable(tmp_path, "fresh"), "split_by=hash", cwd=tmp_path, env=ENV)
    assert fresh.returncode == 0
    assert _data(_visible(tmp_path / "out")) == _data(_visible(tmp_path / "fresh"))
    documents = [json.loads((tmp_path / o / "manifest.json").read_text())["documents"]
                 for o in ("out", "fresh")]  # fmt: skip
    assert documents[0] == documents[1]


class _Gadget:
    def __reduce__(self):
        return (Path.write_text, (Path(os.environ["GADGET_FILE"]), "pwned"))


def test_a_planted_pickle_marker_is_never_unpickled(tmp_path, monkeypatch):
    _docs(tmp_path)
    args = _resumable(tmp_path)
    work = _crash_leaving_shards(tmp_path, args)
    gadget = tmp_path / "gadget"
    monkeypatch.setenv("GADGET_FILE", str(gadget))
    for marker in work.glob("*.done"):
        marker.write_bytes(pickle.dumps(_Gadget()))
    r = run_cli(*args, cwd=tmp_path, env={**ENV, "GADGET_FILE": str(gadget)})
    assert r.returncode == 0, r.stderr
    assert not gadget.exists()
    assert "resuming" not in r.stderr  # not a marker it can read: those shards are redone


# --- full disks ---------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmpfs) -> Path:
    """A 3 MB tmpfs mounted by the test (root only)."""
    return tmpfs("size=3m")


@pytest.mark.parametrize("kind", ["char", "bpe-docs"])
def test_a_full_disk_is_one_line_and_keeps_the_old_outputs(tmp_path, small_disk, kind,
                                                           tiktoken_cache):  # fmt: skip
    (tmp_path / "old.txt").write_text("the old corpus\n" * 200)
    out = small_disk / "out"
    old = run_cli("source=file", "source.path=old.txt", f"out_dir={out}", cwd=tmp_path)
    assert old.returncode == 0, old.stderr
    before = _visible(out)
    if kind == "char":  # 2 MB of ids in place: fails before writing (known size)
        (tmp_path / "big.txt").write_text("abcdefghij\n" * 200_000)
        args = ["source=file", "source.path=big.txt"]
    else:  # documents through shard parts and a merge: fails while writing
        rows = [json.dumps({"text": f"doc {i} " + "lorem ipsum dolor sit amet " * 20})
                for i in range(20_000)]  # fmt: skip
        (tmp_path / "big.jsonl").write_text("\n".join(rows) + "\n")
        args = ["source=files", "source.glob=big.jsonl", "tokenizer=tiktoken",
                "shard_bytes=200000", "executor.workers=2"]  # fmt: skip
    r = run_cli(
        *args, f"out_dir={out}", cwd=tmp_path, env={"TIKTOKEN_CACHE_DIR": str(tiktoken_cache)}
    )
    assert_one_line_error(r, str(out), "space", "MB")
    assert "trying again" not in r.stderr
    assert _visible(out) == before
    assert _hidden(out) == []  # nothing of this run keeps the disk full


# --- kills at random moments --------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["char", "bpe"])
def test_kills_at_random_moments_leave_the_old_or_the_new_run(tmp_path, kind, tiktoken_cache):
    """SIGKILL and SIGINT at random moments of a run over a finished folder: each time, the
    folder holds exactly one run's files (or an unfinished commit, which does not look
    finished and which the next run completes), no process is left, and the next run
    leaves no temporary file."""
    if kind == "char":
        (tmp_path / "c.txt").write_text("the quick brown fox jumps over the lazy dog\n" * 60_000)
        base = ["source=file", "source.path=c.txt", "executor.workers=2", "shard_bytes=300000"]
    else:
        rows = [json.dumps({"text": f"doc {i} " + "lorem ipsum dolor sit amet " * (i % 30)})
                for i in range(15_000)]  # fmt: skip
        (tmp_path / "d.jsonl").write_text("\n".join(rows) + "\n")
        base = ["source=files", "source.glob=d.jsonl", "tokenizer=tiktoken",
                "executor.workers=2", "shard_bytes=200000"]  # fmt: skip
    env = {"TIKTOKEN_CACHE_DIR": str(tiktoken_cache)}
    settings = {"a": ["split=0.9"], "b": ["split=0.8"]}
    refs, took = {}, []
    for name, extra in settings.items():  # timed as the killed runs start: a fresh process
        start = time.monotonic()
        ref = _popen(*base, *extra, f"out_dir=ref_{name}", cwd=tmp_path, env=env)
        _, err = ref.communicate(timeout=300)
        took.append(time.monotonic() - start)
        assert ref.returncode == 0, err
        refs[name] = _visible(tmp_path / f"ref_{name}")
    out = tmp_path / "out"
    assert run_cli(*base, *settings["a"], f"out_dir={out}", cwd=tmp_path, env=env).returncode == 0
    rng = random.Random(f"kills-{kind}")
    current, kills, i = "a", 0, 0
    while kills < 11:  # 11 kills of each kind, 22 in all
        assert i < 40, f"only {kills} of {i} runs were still running when killed"
        target = "b" if current == "a" else "a"
        run = _popen(*base, *settings[target], f"out_dir={out}", cwd=tmp_path, env=env)
        time.sleep(rng.uniform(0.0, min(took) * 0.8))  # the faster reference: still running
        sig = signal.SIGKILL if kills % 2 == 0 else signal.SIGINT
        if run.poll() is None:
            run.send_signal(sig)
            kills += 1
        run.communicate(timeout=60)
        _wait_until(lambda: not _processes_mentioning(str(out)), timeout=10, what="no process")
        files = _visible(out)
        if "manifest.json" in files:  # finished: exactly one run's files
            owner = next(n for n, ref in refs.items() if _fingerprint(ref) == _fingerprint(files))
            assert _data(files) == _data(refs[owner]), f"kill {i}: mixed files"
        else:  # only a commit under way may lack the manifest, and the next run finishes it
            assert (out / ".corpusprep-commit.json").exists(), f"kill {i}: {sorted(files)}"
        r = run_cli(*base, *settings[target], f"out_dir={out}", cwd=tmp_path, env=env)
        assert r.returncode == 0, r.stderr
        assert _data(_visible(out)) == _data(refs[target]), f"after kill {i}"
        assert _hidden(out) == [], f"after kill {i}: temporary files outlived the next run"
        current, i = target, i + 1


def test_signals_held_delays_ctrl_c_until_the_block_is_done_even_with_threads():
    """pthread_sigmask masked only the main thread: with a hashing thread alive the kernel
    gave it the SIGINT, and Python interrupted the renames halfway all the same."""
    import threading

    from corpusprep.writer import signals_held

    stop = threading.Event()
    busy = threading.Thread(target=stop.wait)  # any thread that does not mask the signal
    busy.start()
    done = []
    try:
        with pytest.raises(KeyboardInterrupt), signals_held():
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(200_000):  # the handler would run at one of these steps
                pass
            done.append("renames")
        assert done == ["renames"]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        stop.set()
        busy.join()


def test_signals_held_hands_a_sigterm_to_its_own_handler_afterwards():
    from corpusprep.writer import signals_held

    seen = []

    def handler(signum, frame):
        seen.append(signum)

    before = signal.signal(signal.SIGTERM, handler)
    try:
        with signals_held():
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(200_000):
                pass
            assert seen == []
        assert seen == [signal.SIGTERM]
        assert signal.getsignal(signal.SIGTERM) is handler
    finally:
        signal.signal(signal.SIGTERM, before)


def test_signals_held_lets_the_blocks_own_error_through():
    """A block that fails (a rename on a failing disk) with a Ctrl-C held: the failure is
    what is said, not "interrupted", and the handlers are back."""
    from corpusprep.writer import signals_held

    with pytest.raises(OSError, match="the disk"), signals_held():
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(200_000):
            pass
        raise OSError("the disk")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_signals_held_puts_every_handler_back_when_one_runs_as_it_is_put_back(monkeypatch):
    """signal.signal runs a handler whose signal is waiting: a SIGTERM that arrives as its
    handler is put back raises there, and SIGINT's must still be put back too."""
    from corpusprep.writer import signals_held

    real = signal.signal
    calls = []

    def setting(signum, handler):
        calls.append(signum)
        if signum == signal.SIGINT and len(calls) == 3:  # SIGINT's put back, a SIGTERM waits
            real(signum, handler)
            raise KeyboardInterrupt
        return real(signum, handler)

    before = real(signal.SIGTERM, signal.SIG_DFL)
    monkeypatch.setattr(signal, "signal", setting)
    try:
        with pytest.raises(KeyboardInterrupt), signals_held():
            pass
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    finally:
        real(signal.SIGTERM, before)


# an attack's race: a run that made out_dir failed at once and removed it, empty, between
# another run's mkdir and its lock; the second run makes it again instead of a traceback
def test_the_lock_is_taken_in_a_folder_removed_just_before(tmp_path):
    import os

    from corpusprep.writer import _acquire_lock

    folder = tmp_path / "out"
    fd = _acquire_lock(folder, "out")
    try:
        assert (folder / ".corpusprep.lock").is_file()
    finally:
        os.close(fd)


# a review: a lock file another user's run made (0644, theirs) could not be opened for
# writing, a PermissionError traceback; a read-only descriptor takes the flock all the same
def test_a_lock_file_of_another_user_still_locks(tmp_path, monkeypatch):
    import fcntl
    import os

    from corpusprep import writer

    folder = tmp_path / "out"
    folder.mkdir()
    (folder / ".corpusprep.lock").write_text("pid 1 on elsewhere\n")
    real_open = os.open

    def theirs(path, flags, *mode):
        if str(path).endswith(".corpusprep.lock") and flags & os.O_RDWR:
            raise PermissionError(13, "Permission denied")
        return real_open(path, flags, *mode)

    monkeypatch.setattr(writer.os, "open", theirs)
    held = real_open(folder / ".corpusprep.lock", os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_EX)  # their run, alive
    try:
        with pytest.raises(
            writer.UserError, match=r"another corpusprep run \(pid 1 on elsewhere\)"
        ):
            writer._acquire_lock(folder, "out")
    finally:
        os.close(held)
    fd = writer._acquire_lock(folder, "out")  # theirs ended: this run takes it
    os.close(fd)


# stop 43's note: when another run removed out_dir (and the parent it had made) just
# before this run's lock, the lock retry made them again but did not count them as made
# by this run, so a user error then left them behind, empty
def test_folders_the_lock_retry_makes_again_are_tidied_away(tmp_path, monkeypatch):
    from corpusprep import writer

    parent, out = tmp_path / "theirs", tmp_path / "theirs" / "out"
    parent.mkdir()
    real_open = writer._open_lock
    removed = []

    def their_run_ends_first(path):
        if not removed:  # their run failed and removed both folders, empty
            out.rmdir()
            parent.rmdir()
            removed.append(True)
        return real_open(path)

    monkeypatch.setattr(writer, "_open_lock", their_run_ends_first)
    with pytest.raises(writer.UserError), writer.OutputWriter(out):
        assert out.is_dir()
        raise writer.UserError("a user error before anything is written")
    assert removed and not parent.exists()
