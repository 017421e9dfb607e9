"""One corpus over many workers or machines gives the same bytes as one local worker:
retries, resume after a crash, a real 2-node Ray cluster (with a node killed mid-run) and
a real single-node Slurm. Every cluster is started and stopped here, by PID."""

from __future__ import annotations

import inspect
import json
import os
import random
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest
from clusters import cmdline, descendants, loopback_only, ray_cluster, slurm_cluster
from helpers import REPO, run_cli

from corpusprep.executors.local import LocalExecutor

TESTS = REPO / "tests"
ENV = {"PYTHONPATH": os.pathsep.join([str(REPO), str(TESTS)])}
OUTPUTS = ("train.bin", "val.bin", "doc_index/train.docs.bin", "doc_index/val.docs.bin", "meta.pkl")
ARGS = ["source=files", "source.glob=corpus/*.jsonl", "shard_bytes=6000", "quiet=true"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Four JSONL files of documents, and what one local worker makes of them."""
    root = tmp_path_factory.mktemp("dist")
    (root / "corpus").mkdir()
    rng = random.Random(6)
    words = [
        "the",
        "quick",
        "brown",
        "fox",
        "jumps",
        "over",
        "a",
        "lazy",
        "dog",
        "while",
        "bytes",
        "fly",
        "123",
        "é",
    ]
    for f in range(4):
        with open(root / "corpus" / f"part{f}.jsonl", "w") as out:
            for _ in range(80):
                text = " ".join(rng.choice(words) for _ in range(rng.randint(5, 80)))
                out.write(json.dumps({"text": text}) + "\n")
    r = run_cli(*ARGS, "executor.workers=1", "out_dir=reference", cwd=root, env=ENV)
    assert r.returncode == 0, r.stderr
    return root


# a Parquet file of row groups bigger than a shard: cut into pieces, read on through in runs
PIECES = ["source=file", "source.path=pieces.parquet", "shard_bytes=3000", "quiet=true",
          "tokenizer._target_=fault_tokenizers.CharInPiecesTokenizer"]  # fmt: skip


@pytest.fixture(scope="module")
def pieces(corpus):
    """The corpus's documents in Parquet, a row group per 100 rows in plain pages, and
    what one local worker makes of them."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    texts = [json.loads(line)["text"] for path in sorted((corpus / "corpus").glob("*.jsonl"))
             for line in path.read_text().splitlines()]  # fmt: skip
    schema = pa.schema([("text", pa.string())])
    with pq.ParquetWriter(corpus / "pieces.parquet", schema, use_dictionary=False) as w:
        for start in range(0, len(texts), 100):
            w.write_table(pa.table({"text": texts[start : start + 100]}))
    r = run_cli(*PIECES, "executor.workers=1", "out_dir=pieces_reference", cwd=corpus, env=ENV)
    assert r.returncode == 0, r.stderr
    shards = json.loads((corpus / "pieces_reference" / "manifest.json").read_text())["shards"]
    assert shards["count"] > 2 * len(texts) // 100  # the row groups are cut
    return corpus


def same_as_reference(root, out, reference="reference"):
    for name in OUTPUTS:
        assert (root / out / name).read_bytes() == (root / reference / name).read_bytes(), name
    assert not (root / out / ".corpusprep-work").exists()


def test_a_worker_that_dies_is_replaced_and_its_shard_redone(corpus):
    flag = corpus / "crashed.flag"
    r = run_cli(*ARGS, "executor.workers=2", "out_dir=crash",
                "tokenizer._target_=fault_tokenizers.CrashOnceCharTokenizer",
                f"+tokenizer.flag={flag}", cwd=corpus, env=ENV)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert flag.exists() and "trying again" in r.stderr
    same_as_reference(corpus, "crash")


def test_a_worker_that_dies_while_the_other_has_a_run_to_report(tmp_path):
    """A worker dies while the other still encodes a run of pieces (its result: a
    list of shards' counts, bigger than a pipe holds). The pool stops the survivor with
    SIGTERM: it must end at once (not run the driver's handler, whose KeyboardInterrupt
    the pool would then wait forever to send). The run is retried and ends whole."""
    import zstandard

    rng = random.Random(7)
    (tmp_path / "corpus").mkdir()
    for f in range(3):
        lines = [json.dumps({"text": " ".join(rng.choice(["a", "bb", "ccc", "dé"]) for _ in
                                              range(rng.randint(3, 30)))})
                 for _ in range(3000)]  # fmt: skip
        data = ("\n".join(lines) + "\n").encode()
        (tmp_path / "corpus" / f"p{f}.jsonl.zst").write_bytes(zstandard.compress(data))
    args = ["source=files", "source.glob=corpus/*.jsonl.zst", "tokenizer=tiktoken",
            "shard_bytes=5000", "quiet=true"]  # fmt: skip
    r = run_cli(*args, "executor.workers=1", "out_dir=reference", cwd=tmp_path, env=ENV)
    assert r.returncode == 0, r.stderr
    flag = tmp_path / "crashed.flag"
    r = run_cli(*args, "executor.workers=2", "out_dir=crash",
                "tokenizer._target_=fault_tokenizers.CrashLaterTiktokenTokenizer",
                f"+tokenizer.flag={flag}", cwd=tmp_path, env=ENV, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert flag.exists() and "shards " in r.stderr and "trying again" in r.stderr
    for name in OUTPUTS[:-1]:  # GPT-2: no meta.pkl
        assert (tmp_path / "crash" / name).read_bytes() == (
            tmp_path / "reference" / name).read_bytes(), name  # fmt: skip


class _PoolThatBreaksAfter(ThreadPoolExecutor):
    """A pool whose worker "dies" between one task's result and the next submit: the
    moment a real pool's submit raises BrokenProcessPool (CI saw it once in 1358 tests)."""

    def __init__(self, good_submits: int) -> None:
        super().__init__(2)
        self.left = good_submits

    def submit(self, fn, /, *args, **kwargs):
        if self.left == 0:
            raise BrokenProcessPool("A child process terminated abruptly")
        self.left -= 1
        return super().submit(fn, *args, **kwargs)


def test_a_pool_that_breaks_as_a_task_is_submitted_gets_its_tasks_retried(monkeypatch):
    executor = LocalExecutor(workers=2)
    pools = [_PoolThatBreaksAfter(5), ThreadPoolExecutor(2)]  # 4 in flight, 1 more, broken

    def get_pool():
        executor._pool = executor._pool or pools.pop(0)
        return executor._pool

    monkeypatch.setattr(executor, "_get_pool", get_pool)
    monkeypatch.setattr(executor, "_discard_pool", lambda: setattr(executor, "_pool", None))
    tries = []
    monkeypatch.setattr(executor, "on_retry", lambda what, error: tries.append(what))
    assert list(executor.map(abs, range(-9, 0))) == list(range(9, 0, -1))
    assert not pools  # the tasks that never ran went to a new pool...
    assert tries == []  # ... and did not count as failed attempts (no "trying again")


def test_tasks_that_never_ran_are_not_charged_a_failed_attempt(monkeypatch):
    """Each break of the pool fails the tasks in flight, not the ones never sent: with
    retries=1, four breaks in a row still finish, each task having failed at most once."""
    executor = LocalExecutor(workers=2, retries=1)
    pools = [_PoolThatBreaksAfter(n) for n in (4, 4, 4, 4)] + [ThreadPoolExecutor(2)]

    def get_pool():
        executor._pool = executor._pool or pools.pop(0)
        return executor._pool

    monkeypatch.setattr(executor, "_get_pool", get_pool)
    monkeypatch.setattr(executor, "_discard_pool", lambda: setattr(executor, "_pool", None))
    assert list(executor.map(abs, range(-30, 0))) == list(range(30, 0, -1))


@pytest.mark.parametrize("retries, said", [(2, "failed 3 times"), (0, "failed once")])
def test_a_pool_that_never_starts_a_task_fails_after_the_retries(monkeypatch, retries, said):
    from corpusprep.errors import TaskFailed

    executor = LocalExecutor(workers=2, retries=retries)

    def get_pool():  # each new pool breaks at its first task
        executor._pool = executor._pool or _PoolThatBreaksAfter(0)
        return executor._pool

    monkeypatch.setattr(executor, "_get_pool", get_pool)
    monkeypatch.setattr(executor, "_discard_pool", lambda: setattr(executor, "_pool", None))
    monkeypatch.setattr(executor, "on_retry", lambda what, error: None)
    with pytest.raises(TaskFailed, match=f"task 0 {said}"):
        list(executor.map(abs, range(-5, 0)))


def test_a_shard_that_kills_its_worker_every_time_is_one_line(tmp_path):
    """One shard takes its worker down at every try, its pool's other tasks with it: they
    finish (by themselves if need be), and it ends the run with one line naming it and
    the fix, no traceback, and not Hydra's report of a failed job (which prints the
    overrides as typed, a URL's password with them)."""
    (tmp_path / "corpus").mkdir()
    for f in range(3):
        rows = [json.dumps({"text": f"file {f} doc {i} " + "words " * 30}) for i in range(60)]
        rows[30] = json.dumps({"text": "POISON " * 10}) if f == 1 else rows[30]
        (tmp_path / "corpus" / f"part{f}.jsonl").write_text("\n".join(rows) + "\n")
    r = run_cli(*ARGS, "executor.workers=2", "executor.retries=1", "out_dir=failed",
                "tokenizer._target_=fault_tokenizers.CrashOnTextCharTokenizer",
                "+tokenizer.poison=POISON", cwd=tmp_path, env=ENV)  # fmt: skip
    assert r.returncode == 1, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("corpusprep: error: shard"), r.stderr
    assert "failed 4 times" in lines[-1] and "executor.retries=N" in lines[-1]
    assert "worker process died (out of memory?)" in lines[-1]  # the kernel's OOM killer
    assert "executor.workers=N" in lines[-1]
    assert all("trying again" in line for line in lines[:-1]), r.stderr
    assert "Traceback" not in r.stderr and "Error executing job" not in r.stderr


def test_a_last_shard_that_kills_its_worker_never_runs_in_the_driver(tmp_path):
    """Tried again alone (one task left), a shard whose worker died runs in a worker all
    the same: in the driver it took the whole run down (exit 3, the lock left behind)."""
    rows = [json.dumps({"text": f"doc {i} " + "words " * 30}) for i in range(40)]
    rows[-1] = json.dumps({"text": "POISON " * 10})
    (tmp_path / "p.jsonl").write_text("\n".join(rows) + "\n")
    r = run_cli("source=file", "source.path=p.jsonl", "shard_bytes=4096", "quiet=true",
                "executor.workers=2", "executor.retries=1", "out_dir=out",
                "tokenizer._target_=fault_tokenizers.CrashOnTextCharTokenizer",
                "+tokenizer.poison=POISON", cwd=tmp_path, env=ENV)  # fmt: skip
    assert r.returncode == 1, r.stderr
    assert r.stderr.splitlines()[-1].startswith("corpusprep: error: shard"), r.stderr
    assert not (tmp_path / "out" / ".corpusprep.lock").exists()


def _sleeps(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def test_an_interrupt_stops_a_task_run_by_itself_at_once():
    """Ctrl-C (or SIGTERM, which corpusprep turns into one) while a task runs by itself:
    its worker is killed, not waited for."""
    from concurrent.futures.process import BrokenProcessPool

    executor = LocalExecutor(workers=2)

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    signal.alarm(1)
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            executor.run_alone(_sleeps, 30, BrokenProcessPool("a worker died"))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert time.monotonic() - started < 10


def test_an_abort_with_cancelled_tasks_prints_no_thread_traceback(monkeypatch):
    """Ctrl-C cancels the tasks not yet sent to a worker, then abort() kills the workers:
    Python 3.11's pool then failed those cancelled futures too, and its manager thread died
    with InvalidStateError, a traceback on stderr after the one-line error (CPython
    gh-107219; found by SIGTERM at random moments of a run)."""
    import threading

    raised = []
    monkeypatch.setattr(threading, "excepthook", lambda args: raised.append(args.exc_value))
    executor = LocalExecutor(workers=1)
    pool = executor._get_pool()
    futures = [pool.submit(_sleeps, 30) for _ in range(8)]  # 1 running, some queued, some not
    deadline = time.monotonic() + 30
    while not futures[1].running() and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)  # the pool's thread has filled its queue: the rest wait in the pool
    assert [f.cancel() for f in futures].count(True) >= 1  # as run()'s finally cancels
    manager = pool._executor_manager_thread
    shutdown = pool.shutdown  # late, so the pool's thread sees the dead worker first
    monkeypatch.setattr(pool, "shutdown", lambda *a, **k: (time.sleep(0.5), shutdown(*a, **k)))
    executor.abort()
    manager.join(10)
    assert not manager.is_alive() and raised == []


def _half_sends_a_result(_: int) -> None:
    """Writes the start of a result message to the pool's result pipe, as a worker killed
    while sending a result of more than 64 KB leaves it, then waits to be killed."""
    import gc
    import struct
    from multiprocessing.queues import SimpleQueue

    queue = next(o for o in gc.get_objects() if isinstance(o, SimpleQueue))
    os.write(queue._writer.fileno(), struct.pack("!i", 1 << 20) + b"x" * 10)
    time.sleep(60)


@pytest.mark.skipif(sys.platform != "linux", reason="the worker finds the pipe it forked with")
@pytest.mark.parametrize("how", ["aborted", "discarded", "left at exit"])
def test_a_pool_whose_worker_half_sent_a_result_does_not_hold_the_exit(how):
    """SIGTERM to a run's process group (timeout, a scheduler) or the abort's own kill can
    end a worker halfway through sending a result: the pool's thread then waited for the
    rest of the message forever, and the process hung at exit, joining it (found by
    SIGTERM at random moments of a documents run: 1 in 25 aborted; 1 in 200 where no abort
    reached the pool). An aborted pool, one given up because a worker died, and one left
    at the exit of a failed run (app.exit_now) are killed whole."""
    from corpusprep.executors import local

    executor = LocalExecutor(workers=1, start_method="fork")
    pool = executor._get_pool()
    future = pool.submit(_half_sends_a_result, 0)
    deadline = time.monotonic() + 30
    while not future.running() and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.5)  # the pool's thread has read the header: it waits for the rest
    manager = pool._executor_manager_thread
    {"aborted": executor.abort, "discarded": executor._discard_pool,
     "left at exit": local.kill_live_pools}[how]()  # fmt: skip
    manager.join(10)
    assert not manager.is_alive()
    if how != "aborted":
        assert pool not in local._LIVE


def _sleeps_with(task: tuple[float, bytes]) -> int:
    time.sleep(task[0])
    return len(task[1])


@pytest.mark.parametrize("how", ["aborted", "discarded", "left at exit"])
def test_a_pool_whose_queue_was_being_fed_a_big_task_does_not_hold_the_exit(how):
    """Tasks bigger than a pipe's 64 KB (a trained tokenizer's 16,384 tokens go with each
    encode task): a pool killed while its feeder thread was halfway through writing one
    left the feeder blocked on a pipe no worker reads any more, the pool's thread joining
    it, and the exit joining that thread: a SIGTERM to a bpe run at the start of its
    encoding printed its line and then hung (found by CI, 1 run in 3 at the right moment)."""
    from corpusprep.executors import local

    executor = LocalExecutor(workers=2, start_method="fork")
    tasks = [(0.3 if i == 0 else 0.05, b"x" * 400_000) for i in range(12)]
    results = executor.map(_sleeps_with, tasks)
    next(results)  # the first result came: the feeder is writing a task no worker takes yet
    pool = executor._pool
    manager, feeder = pool._executor_manager_thread, pool._call_queue._thread
    results.close()  # the run stops (a KeyboardInterrupt here: run()'s finally)
    {"aborted": executor.abort, "discarded": executor._discard_pool,
     "left at exit": local.kill_live_pools}[how]()  # fmt: skip
    manager.join(10)
    feeder.join(1)
    assert not manager.is_alive() and not feeder.is_alive()


def _squares(x: int) -> int:
    time.sleep(0.01)
    return x * x


def test_a_pools_pipe_ends_are_let_go_of_before_its_feeder_may_close_them(monkeypatch):
    """An attack: _kill let go of the pool's pipe ends (their numbers taken by /dev/null)
    after it had killed the workers and begun the shutdown, by when the pool's feeder
    thread, given its sentinel, may be closing the task pipe's end itself: a number it had
    just closed was taken by /dev/null for good (1 to 3 files left open in 60 aborts), and
    a file another thread opened in that moment would have been replaced. Let go of while
    the queue is open, so no sentinel is on its way."""
    from corpusprep.executors import local

    open_then: list[bool] = []
    let_go_of = local._let_go_of

    def watched(fd: int) -> None:
        open_then.append(not executor_pool._call_queue._closed)
        let_go_of(fd)

    monkeypatch.setattr(local, "_let_go_of", watched)
    for _ in range(5):
        executor = LocalExecutor(workers=2, start_method="fork")
        results = executor.run(_squares, list(range(6)))
        next(results)
        executor_pool = executor._pool
        executor.abort()
        results.close()
    assert open_then and all(open_then)


def _dies_halfway_through_a_result_once(task: tuple[int, str]) -> int:
    """Task 3, the first time: its worker is killed (the kernel's OOM killer) halfway
    through sending a result bigger than the pipe had room for."""
    index, flags = task
    flag = os.path.join(flags, str(index))
    if index == 3 and not os.path.exists(flag):
        open(flag, "w").close()
        _half_sends_a_result_and_dies()
    time.sleep(0.05)
    return index


def _half_sends_a_result_and_dies() -> None:
    import gc
    import struct
    from multiprocessing.queues import SimpleQueue

    queue = next(o for o in gc.get_objects() if isinstance(o, SimpleQueue))
    os.write(queue._writer.fileno(), struct.pack("!i", 1 << 20) + b"x" * 10)
    os._exit(9)


@pytest.mark.skipif(sys.platform != "linux", reason="the worker finds the pipe it forked with")
def test_a_worker_killed_halfway_through_sending_a_result_does_not_hang_the_run(tmp_path):
    """The pool's thread waited for the rest of the message forever, never looking at its
    workers again, and so did the run: a worker that dies with no result for a while
    after is taken as a broken pool (its tasks go again)."""
    import threading

    executor = LocalExecutor(workers=2, start_method="fork")
    executor.on_retry = lambda what, error: None
    got: list[int] = []
    mapping = threading.Thread(target=lambda: got.extend(executor.map(
        _dies_halfway_through_a_result_once, [(i, str(tmp_path)) for i in range(8)])),
        daemon=True)  # fmt: skip
    mapping.start()
    mapping.join(60)
    stuck = mapping.is_alive()
    if stuck:
        executor.abort()
    assert not stuck and got == list(range(8))


def _always_dies_halfway_through_a_result(task: int) -> int:
    if task == 1:
        _half_sends_a_result_and_dies()
    return task


@pytest.mark.skipif(sys.platform != "linux", reason="the worker finds the pipe it forked with")
def test_a_task_by_itself_whose_worker_dies_halfway_through_a_result_does_not_hang():
    """An attack: a task past its retries runs once more in a pool of its own (run_alone),
    waited on with no eye on its worker: killed halfway through sending a result (the OOM
    killer, again, on the task that drew it each time), the run hung there for good."""
    import threading

    from corpusprep.errors import TaskFailed

    executor = LocalExecutor(workers=2, start_method="fork", retries=0)
    executor.on_retry = lambda what, error: None
    got: list[BaseException] = []

    def mapping() -> None:
        try:
            list(executor.map(_always_dies_halfway_through_a_result, [0, 1, 2]))
        except TaskFailed as e:
            got.append(e)

    thread = threading.Thread(target=mapping, daemon=True)
    thread.start()
    thread.join(60)
    stuck = thread.is_alive()
    if stuck:
        executor.abort()
        from corpusprep.executors.local import kill_live_pools

        kill_live_pools()
    assert not stuck and len(got) == 1 and "task 1 failed" in str(got[0])


def _exits(_: int) -> None:
    os._exit(3)


def test_a_pool_found_broken_is_killed_without_touching_its_pipes(monkeypatch):
    """A broken pool's own thread closes its task pipe's end (CPython gh-94777), maybe as
    _kill runs: a number it had just closed, replaced by /dev/null, stayed open for good
    (or a file opened meanwhile was replaced). It marks the pool broken before it fails
    the futures, so a discard after a BrokenProcessPool leaves the pipes to it."""
    from corpusprep.executors import local

    touched: list[int] = []
    monkeypatch.setattr(local, "_let_go_of", touched.append)
    executor = LocalExecutor(workers=2, start_method="fork")
    pool = executor._get_pool()
    with pytest.raises(BrokenProcessPool):
        pool.submit(_exits, 0).result(timeout=30)
    executor._discard_pool()
    assert touched == []


def _dies_once_at(task: tuple[int, str]) -> int:
    """Kills its worker the first time it runs tasks 5, 7, 9 and 11."""
    index, flags = task
    flag = os.path.join(flags, str(index))
    if index in (5, 7, 9, 11) and not os.path.exists(flag):
        open(flag, "w").close()
        os._exit(3)
    time.sleep(0.01)
    return index


def test_a_neighbours_death_never_fails_a_task(tmp_path):
    """A worker's death fails every task in the pool: a task charged with it more often
    than retries allows runs by itself, where only its own deaths count (here: one at
    most, within retries=1). It failed about 1 run in 5 when every death counted."""
    for attempt in range(4):
        flags = tmp_path / str(attempt)
        flags.mkdir()
        with LocalExecutor(workers=2, retries=1, start_method="fork") as executor:
            executor.on_retry = lambda what, error: None
            tasks = [(i, str(flags)) for i in range(16)]
            assert list(executor.map(_dies_once_at, tasks)) == list(range(16))


def test_a_failing_shard_is_retried_then_reported(corpus):
    flag = corpus / "failed.flag"
    r = run_cli(*ARGS, "executor.workers=2", "out_dir=fail",
                "tokenizer._target_=fault_tokenizers.FailOnceCharTokenizer",
                f"+tokenizer.flag={flag}", cwd=corpus, env=ENV)  # fmt: skip
    assert r.returncode == 0, r.stderr
    same_as_reference(corpus, "fail")
    flag.unlink()
    r = run_cli(*ARGS, "executor.workers=2", "executor.retries=0", "out_dir=fail0",
                "tokenizer._target_=fault_tokenizers.FailOnceCharTokenizer",
                f"+tokenizer.flag={flag}", cwd=corpus, env=ENV)  # fmt: skip
    assert r.returncode != 0 and "injected failure" in r.stderr
    assert not (corpus / "fail0" / "train.bin").exists()


def _slow(corpus, out, *extra, wrap=()):
    return subprocess.Popen(
        [*wrap, sys.executable, "-m", "corpusprep", *ARGS, f"out_dir={out}", *extra,
         "tokenizer._target_=fault_tokenizers.SlowCharTokenizer", "+tokenizer.delay=0.02"],
        cwd=corpus, env={**os.environ, **ENV, "RAY_AUTH_MODE": "disabled"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )  # fmt: skip


def _wait_for_markers(folder, proc, count=1, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(list(folder.glob(".corpusprep-work/*/*.done"))) >= count:
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError("no shard finished in time")


def test_a_rerun_after_a_crash_redoes_only_missing_shards(corpus):
    proc = _slow(corpus, "resume", "executor.workers=2")
    try:
        _wait_for_markers(corpus / "resume", proc, count=2)
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its workers, no cleanup
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert not (corpus / "resume" / "train.bin").exists()
    r = run_cli(*ARGS, "out_dir=resume", "tokenizer._target_=fault_tokenizers.SlowCharTokenizer",
                "+tokenizer.delay=0.02", cwd=corpus, env=ENV)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "resuming:" in r.stderr and "shards were done by an earlier run" in r.stderr
    same_as_reference(corpus, "resume")


def test_runs_of_pieces_are_sized_by_the_tasks_an_engine_runs_at_once(pieces):
    """Every engine that says how many tasks it runs at once gets a file's consecutive
    pieces in runs (prepare._runs): local its workers, Slurm its array's parallelism, Ray
    its cluster's CPUs (here from a stand-in for ray.cluster_resources; the Ray test below
    runs them); the bytes are one worker's."""
    from corpusprep.executors.ray import RayExecutor
    from corpusprep.executors.slurm import SlurmExecutor

    assert LocalExecutor(workers=3).parallelism() == 3
    assert SlurmExecutor(max_parallel=5).parallelism() == 5
    # as the array is submitted: a submitit parameter given beside it wins
    assert SlurmExecutor(max_parallel=5, slurm={"array_parallelism": 7}).parallelism() == 7
    assert SlurmExecutor(slurm={"slurm_array_parallelism": 3}).parallelism() == 3

    class Cluster:  # what ray.cluster_resources() says
        def __init__(self, cpus):
            self.cpus = cpus

        def cluster_resources(self):
            return {"CPU": self.cpus} if self.cpus is not None else {}

    for cpus, per_task, tasks in [(1.0, 0.1, 10), (8.0, 1, 8), (6.0, 4, 1), (None, 1, None)]:
        ray = RayExecutor(cpus_per_task=per_task)
        ray._connect = lambda cpus=cpus: Cluster(cpus)
        assert ray.parallelism() == tasks, (cpus, per_task)
    r = run_cli(*PIECES, "executor.workers=2", "out_dir=pieces_local", cwd=pieces, env=ENV)
    assert r.returncode == 0, r.stderr
    same_as_reference(pieces, "pieces_local", "pieces_reference")


@pytest.mark.slow
def test_ray_two_nodes_on_loopback_same_bytes(corpus, pieces):
    with loopback_only() as wrap, ray_cluster(ENV, wrap) as (address, _):
        r = run_cli(*ARGS, "executor=ray", f"executor.address={address}",
                    "executor.node_ip_address=127.0.0.2", "out_dir=ray", cwd=corpus,
                    env={**ENV, "RAY_AUTH_MODE": "disabled"}, wrap=wrap)  # fmt: skip
        assert r.returncode == 0, r.stderr
        # a row group's pieces in runs (sized by the cluster's CPUs), each read on through
        r = run_cli(*PIECES, "executor=ray", f"executor.address={address}",
                    "executor.node_ip_address=127.0.0.2", "out_dir=ray_pieces", cwd=corpus,
                    env={**ENV, "RAY_AUTH_MODE": "disabled"}, wrap=wrap)  # fmt: skip
        assert r.returncode == 0, r.stderr
        same_as_reference(corpus, "ray_pieces", "pieces_reference")
        # the seeded global shuffle too: the same bytes as one local worker
        shuffle = ["split_by=document", "val_size=0.1", "order=shuffle"]
        r = run_cli(*ARGS, *shuffle, "executor=ray", f"executor.address={address}",
                    "executor.node_ip_address=127.0.0.2", "out_dir=ray_shuffle", cwd=corpus,
                    env={**ENV, "RAY_AUTH_MODE": "disabled"}, wrap=wrap)  # fmt: skip
        assert r.returncode == 0, r.stderr
    same_as_reference(corpus, "ray")
    m = json.loads((corpus / "ray" / "manifest.json").read_text())
    assert m["executor"]["kind"] == "ray" and m["shards"]["count"] > 4
    r = run_cli(*ARGS, *shuffle, "executor.workers=1", "out_dir=local_shuffle", cwd=corpus, env=ENV)
    assert r.returncode == 0, r.stderr
    local = json.loads((corpus / "local_shuffle" / "manifest.json").read_text())
    assert local["order"]["kind"] == "shuffle"
    for name in local["files"]:
        assert (corpus / "ray_shuffle" / name).read_bytes() == (
            corpus / "local_shuffle" / name
        ).read_bytes(), name


@pytest.mark.slow
def test_ray_worker_node_killed_mid_run(corpus):
    with loopback_only() as wrap, ray_cluster(ENV, wrap) as (address, procs):
        proc = _slow(corpus, "raykill", "executor=ray", f"executor.address={address}",
                     "executor.node_ip_address=127.0.0.2", wrap=wrap)  # fmt: skip
        try:
            _wait_for_markers(corpus / "raykill", proc, count=1)
            raylets = [p for p in descendants(procs[1].pid) if "raylet" in cmdline(p)]
            assert raylets, "the worker node has no raylet"
            for pid in raylets:
                os.kill(pid, signal.SIGKILL)  # the worker node dies with tasks in flight
            _, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    same_as_reference(corpus, "raykill")


@pytest.mark.slow
def test_slurm_single_node_same_bytes_and_resubmits(corpus, pieces):
    # Slurm 22.05 cannot start its message engine in a loopback-only namespace, so it runs
    # on the host network: its daemons listen on 0.0.0.0 (no bind option), all traffic is
    # to 127.0.0.1
    wrap: list[str] = []
    with slurm_cluster(wrap) as env:
        r = run_cli(*ARGS, "executor=slurm", "executor.partition=debug", "executor.mem_gb=1",
                    "executor.poll_seconds=0.3", "out_dir=slurm", cwd=corpus,
                    env={**ENV, **env}, timeout=600, wrap=wrap)  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert r.stderr == "", r.stderr  # quiet: nothing from sacct either (no accounting here)
        same_as_reference(corpus, "slurm")
        r = run_cli(*PIECES, "executor=slurm", "executor.mem_gb=1", "executor.poll_seconds=0.3",
                    "executor.max_parallel=2", "out_dir=slurm_pieces", cwd=corpus,
                    env={**ENV, **env}, timeout=600, wrap=wrap)  # fmt: skip
        assert r.returncode == 0, r.stderr
        same_as_reference(corpus, "slurm_pieces", "pieces_reference")
        flag = corpus / "slurm-failed.flag"
        r = run_cli(*ARGS, "executor=slurm", "executor.mem_gb=1", "executor.poll_seconds=0.3",
                    "out_dir=slurm2",
                    "tokenizer._target_=fault_tokenizers.FailOnceCharTokenizer",
                    f"+tokenizer.flag={flag}", cwd=corpus, env={**ENV, **env},
                    timeout=600, wrap=wrap)  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert "submitting it again" in r.stderr
        assert all(line.startswith("corpusprep: ") for line in r.stderr.splitlines()), r.stderr
        # a sweep on hydra/launcher=submitit_slurm, a file where its job 1's folder goes:
        # submitit's FailedJobError traceback and no table, before the job was guarded
        (corpus / "sw").mkdir()
        (corpus / "sw" / "j1").write_text("mine")
        r = run_cli(*ARGS, "-m", "split=0.8,0.9", "hydra/launcher=submitit_slurm",
                    "hydra.launcher.partition=debug", "hydra.launcher.mem_gb=1",
                    "hydra.sweep.dir=sw", "hydra.sweep.subdir=j${hydra.job.num}",
                    "out_dir=sweep_${split}", cwd=corpus, env={**ENV, **env}, timeout=600,
                    wrap=wrap)  # fmt: skip
        assert r.returncode == 1, r.stderr
        assert "Traceback" not in r.stderr, r.stderr
        assert "corpusprep sweep: 2 jobs (1 failed, 1 ok)" in r.stderr
        summary = (corpus / "sw" / "summary.md").read_text()
        assert "its folder could not be made (File exists)" in summary, summary
        assert (corpus / "sweep_0.8" / "manifest.json").is_file()
    same_as_reference(corpus, "slurm2")


def test_ray_is_asked_for_warnings_only(monkeypatch):
    """A run's own summary says what it did: Ray's INFO lines ("Started a local Ray
    instance.", an attack found it printed with quiet=true) are not asked for. (Within the
    tests' loopback namespace Ray does not print that line, so its wiring is checked.)"""
    import logging
    from types import SimpleNamespace

    import corpusprep.executors.ray as ray_executor

    asked = {}
    fake = SimpleNamespace(is_initialized=lambda: False, init=lambda **kw: asked.update(kw))
    monkeypatch.setattr(ray_executor, "_ray", lambda: fake)
    ray_executor.RayExecutor()._connect()
    assert asked["logging_level"] == logging.WARNING and asked["log_to_driver"] is False


def test_rays_notice_that_it_turned_token_auth_on_is_left_out(monkeypatch):
    """Ray 2.5x turns token authentication on for a new local instance, with a WARNING line
    above every run's output (an attack saw it above a one-line error): that notice alone
    is left out; the warning that authentication is off stays."""
    import logging
    from types import SimpleNamespace

    import corpusprep.executors.ray as ray_executor

    name = "ray._private.authentication.authentication_token_setup"
    try:  # the logger this filters is Ray's own, where Ray is installed
        from ray._private.authentication import authentication_token_setup as setup
    except ImportError:
        pass
    else:
        assert setup.logger.name == name
        assert "Token authentication is enabled for this Ray cluster" in inspect.getsource(setup)

    def init(**kw):
        logging.getLogger(name).warning("Token authentication is enabled for this Ray cluster.")
        logging.getLogger(name).warning("Token authentication is disabled for this Ray cluster.")

    fake = SimpleNamespace(is_initialized=lambda: False, init=init)
    monkeypatch.setattr(ray_executor, "_ray", lambda: fake)
    said: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())
    logging.getLogger(name).addHandler(handler)  # (Ray's loggers need not propagate)
    try:
        ray_executor.RayExecutor()._connect()
    finally:
        logging.getLogger(name).removeHandler(handler)
    assert said == ["Token authentication is disabled for this Ray cluster."]
    assert not logging.getLogger(name).filters  # only while Ray starts


class _Planted:
    """A result pickle a stranger left in a work folder: unpickling it makes `flag`."""

    def __init__(self, flag: str) -> None:
        self.flag = flag

    def __reduce__(self):
        return (open, (self.flag, "w"))


def test_slurm_submits_each_array_into_a_new_folder_of_its_own(tmp_path, monkeypatch):
    """submitit reads a job's result from <folder>/<job id>_<task>/..._result.pkl (a pickle)
    as soon as it exists. Job ids are guessable and come again (a new cluster, a restored
    controller): a folder named by them alone, in a work folder that outlives a failed
    run, gave a re-run an earlier job's results, or a planted pickle's code."""
    submitit = pytest.importorskip("submitit")
    from corpusprep.executors.slurm import SlurmExecutor

    folders = []

    class Recording:
        def __init__(self, folder, cluster):
            folders.append(Path(folder))

        def update_parameters(self, **params):
            pass

    monkeypatch.setattr(submitit, "AutoExecutor", Recording)
    executor = SlurmExecutor()
    executor.attach(tmp_path / "work")
    executor._executor()
    executor._executor()
    first, second = folders
    assert first != second and first.name == second.name == "%j"
    for folder in (first, second):
        assert folder.parent.parent == tmp_path / "work" / "slurm"
        assert len(folder.parent.name) >= 16  # not guessable


def _fake_squeue(tmp_path, monkeypatch, listing):
    """squeue printing `listing` (lines of "%F|%U|%k": job, user id, comment), and scancel
    noting its arguments in tmp_path/scancel.log, first on PATH."""
    tools = tmp_path / "tools"
    tools.mkdir()
    (tmp_path / "listing").write_text("".join(f"{line}\n" for line in listing))
    for name, does in (("squeue", f"cat {tmp_path / 'listing'}"),
                       ("scancel", f'echo "$@" >> {tmp_path / "scancel.log"}')):  # fmt: skip
        (tools / name).write_text(f"#!/bin/sh\necho {name} >> {tmp_path / 'asked.log'}\n{does}\n")
        (tools / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")


def _driver(out_dir, monkeypatch):
    """A Slurm executor attached to out_dir's work folder, and the comment it submits with."""
    submitit = pytest.importorskip("submitit")
    from corpusprep.executors.slurm import SlurmExecutor

    asked = {}

    class Recording:
        def __init__(self, folder, cluster):
            pass

        def update_parameters(self, **params):
            asked.update(params)

    monkeypatch.setattr(submitit, "AutoExecutor", Recording)
    executor = SlurmExecutor()
    executor.attach(out_dir / ".corpusprep-work" / "key")
    executor._executor()
    return executor, asked["slurm_comment"]


def test_slurm_rerun_cancels_only_the_arrays_of_a_dead_driver_in_its_out_dir(
    tmp_path, monkeypatch, capsys
):
    """A driver records a secret in out_dir's work folder before it submits, and its arrays
    carry a comment made of it and of out_dir. A re-run cancels the jobs of this user that
    squeue shows with that comment, and no others: not another user's (root may cancel
    them), not those of the user's other out_dirs, whose record a stranger may copy here."""
    me, other = os.getuid(), os.getuid() + 1
    dead, mark = _driver(tmp_path / "out", monkeypatch)
    dead.record.parent.mkdir(parents=True)
    _fake_squeue(tmp_path, monkeypatch, [])
    dead._take_over()  # nothing recorded before it: squeue is not even asked
    assert not (tmp_path / "asked.log").exists()
    elsewhere, theirs = _driver(tmp_path / "elsewhere", monkeypatch)
    assert len({mark, theirs}) == 2 and mark.startswith("corpusprep-")
    assert dead.secret not in mark  # squeue shows comments to every user
    listing = [f"11|{me}|{mark}", f"12|{other}|{mark}", f"13|{me}|{theirs}", f"14|{me}|(null)",
               f"15|{me}|{mark}x", f"16|{me}|the user's own comment {mark}",
               f"{mark}|{me}|{mark}", f"17|{me}|corpusprep"]  # fmt: skip
    (tmp_path / "tools").rename(tmp_path / "tools0")
    _fake_squeue(tmp_path, monkeypatch, listing)
    rerun, _ = _driver(tmp_path / "out", monkeypatch)
    rerun._take_over()
    assert (tmp_path / "scancel.log").read_text().split() == [f"--user={me}", "11", "16"]
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("corpusprep: cancelled Slurm job 11, 16,"), err
    assert rerun.secret in rerun.record.read_text()  # for the run after it
    # a record copied from the user's other out_dir (job 13 runs there): nothing cancelled
    (tmp_path / "scancel.log").unlink()
    elsewhere.record.parent.mkdir(parents=True)
    elsewhere._take_over()
    rerun.record.write_bytes(elsewhere.record.read_bytes())
    again, _ = _driver(tmp_path / "out", monkeypatch)
    again._take_over()
    assert not (tmp_path / "scancel.log").exists() and capsys.readouterr().err == ""


def test_slurm_rerun_says_so_when_squeue_cannot_tell_what_still_runs(tmp_path, monkeypatch, capsys):
    """A dead driver's record is there but squeue fails (the controller down, a timeout):
    nothing can be cancelled, and the re-run says so in one line with what to do, instead
    of going on silently beside an array that may still be writing."""
    dead, _ = _driver(tmp_path / "out", monkeypatch)
    dead.record.parent.mkdir(parents=True)
    dead._take_over()
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "squeue").write_text("#!/bin/sh\necho 'slurm_load_jobs error: Socket timed out' >&2\n"
                                  "exit 1\n")  # fmt: skip
    (tools / "squeue").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    capsys.readouterr()
    rerun, mark = _driver(tmp_path / "out", monkeypatch)
    rerun._take_over()
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("corpusprep: warning: "), err
    assert "squeue" in err[0] and "Socket timed out" in err[0] and "scancel" in err[0], err
    assert rerun.secret in rerun.record.read_text()


def test_an_up_to_date_rerun_still_cancels_a_dead_drivers_array(tmp_path, monkeypatch, corpus):
    """A Slurm run killed in an out_dir whose finished files match the command: the re-run
    is up to date and removes the work folder, record included; it cancels the array that
    record names first (it was left running, writing into a folder about to go)."""
    out = tmp_path / "out"
    r = run_cli(*ARGS, f"out_dir={out}", cwd=corpus, env=ENV)
    assert r.returncode == 0, r.stderr
    dead, mark = _driver(out, monkeypatch)
    dead.record.parent.mkdir()
    dead._take_over()  # its record, as a driver killed after submitting leaves it
    _fake_squeue(tmp_path, monkeypatch, [f"21|{os.getuid()}|{mark}"])
    r = run_cli(*ARGS, f"out_dir={out}", "executor=slurm", "quiet=false", cwd=corpus,
                env={**ENV, "PATH": os.environ["PATH"]})  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "up to date" in r.stdout + r.stderr
    assert (tmp_path / "scancel.log").read_text().split() == [f"--user={os.getuid()}", "21"]
    assert "cancelled Slurm job 21" in r.stderr
    assert not (out / ".corpusprep-work").exists()


def test_slurm_record_planted_in_the_work_folder_is_never_trusted(tmp_path, monkeypatch, capsys):
    """The work folder may come from a stranger: a record that is not one corpusprep wrote
    (not JSON, another shape, too big, a FIFO that would block its reader, a folder) gets
    nothing cancelled, and the driver records its own."""
    import threading

    me = os.getuid()
    executor, mark = _driver(tmp_path / "out", monkeypatch)
    record = executor.record
    record.parent.mkdir(parents=True)
    _fake_squeue(tmp_path, monkeypatch, [f"11|{me}|{mark}", f"12|{me}|corpusprep"])
    secret = executor.secret  # what a record naming job 11 must hold: planted by others
    plants = [b"", b"not json", b"[]", b"[" * 150, b'"%s"' % secret.encode(), b'{"secret": 7}',
              b'{"secret": "%s"}' % secret.upper().encode(),
              b'{"secret": ["%s"]}' % secret.encode(),
              b'{"secret": "%s", "pad": "%s"}' % (secret.encode(), b"x" * 300),
              b'{"job": 11, "token": "corpusprep"}']  # fmt: skip
    for plant in [*plants, "fifo", "huge"]:
        rerun, _ = _driver(tmp_path / "out", monkeypatch)
        record.unlink(missing_ok=True)
        if plant == "fifo":
            os.mkfifo(record)
        elif plant == "huge":
            with open(record, "wb") as f:
                f.truncate(1 << 40)  # sparse: a terabyte that is never read
        else:
            record.write_bytes(plant)
        took = threading.Thread(target=rerun._take_over, daemon=True)
        took.start()
        took.join(timeout=30)
        assert not took.is_alive(), plant
        assert not (tmp_path / "asked.log").exists(), plant
        assert record.is_file() and rerun.secret in record.read_text(), plant
    assert capsys.readouterr().err == ""
    record.write_text(json.dumps({"secret": secret}))  # the record itself: job 11 goes
    _driver(tmp_path / "out", monkeypatch)[0]._take_over()
    assert (tmp_path / "scancel.log").read_text().split() == [f"--user={me}", "11"]
    record.unlink()
    record.mkdir()
    from corpusprep.errors import UserError

    with pytest.raises(UserError, match="is a folder where corpusprep keeps"):
        _driver(tmp_path / "out", monkeypatch)[0]._take_over()


@pytest.mark.slow
def test_slurm_never_reads_a_result_pickle_left_in_the_work_folder(corpus, tmp_path):
    """A work folder kept by a failed run (a resume needs it), with result pickles planted
    (or left by an earlier cluster) under the job ids Slurm hands out next: the run never
    unpickles them, and makes the reference bytes."""
    import pickle
    import shutil

    root = tmp_path / "planted"
    shutil.copytree(corpus / "corpus", root / "corpus")
    shutil.copytree(corpus / "reference", root / "reference")
    flag = root / "failing.flag"
    flag.touch()  # every shard fails while it exists: the work folder is kept
    failing = ["tokenizer._target_=fault_tokenizers.FailWhileFlagCharTokenizer",
               f"+tokenizer.flag={flag}", "out_dir=out"]  # fmt: skip
    r = run_cli(*ARGS, *failing, "executor.workers=1", "executor.retries=0", cwd=root, env=ENV)
    assert r.returncode != 0 and "injected failure" in r.stderr, r.stderr
    (work,) = (root / "out" / ".corpusprep-work").iterdir()
    flag.unlink()
    pwned = root / "unpickled.flag"
    data = pickle.dumps(("success", _Planted(str(pwned))))
    for job in range(1, 120):  # a fresh cluster's first job ids
        for task in range(16):
            folder = work / "slurm" / f"{job}_{task}"
            folder.mkdir(parents=True)
            (folder / f"{job}_{task}_0_result.pkl").write_bytes(data)
    with slurm_cluster([]) as env:
        r = run_cli(*ARGS, *failing, "executor=slurm", "executor.mem_gb=1",
                    "executor.poll_seconds=0.3", cwd=root, env={**ENV, **env},
                    timeout=600)  # fmt: skip
    assert not pwned.exists()
    assert r.returncode == 0, r.stderr
    same_as_reference(root, "out")


@pytest.mark.slow
def test_slurm_array_cancelled_mid_run_is_one_line_then_resumes(corpus, tmp_path):
    """scancel (or Slurm's own kill: a time or memory limit, a lost node) ends a task
    without a result. A cluster without accounting (no sacct) never says so: the run
    waited for it for ever, holding out_dir's lock. Now: one line naming the shard, and a
    re-run resumes from the shards that finished."""
    import shutil

    root = tmp_path / "cancel"
    shutil.copytree(corpus / "corpus", root / "corpus")
    shutil.copytree(corpus / "reference", root / "reference")
    slow = ["tokenizer._target_=fault_tokenizers.SlowCharTokenizer", "+tokenizer.delay=0.05",
            "executor=slurm", "executor.mem_gb=1", "executor.poll_seconds=0.3",
            "out_dir=out"]  # fmt: skip
    with slurm_cluster([]) as env:
        full = {**os.environ, **ENV, **env}
        proc = subprocess.Popen(
            [sys.executable, "-m", "corpusprep", *ARGS, *slow, "executor.max_parallel=1",
             "executor.retries=0"],
            cwd=root, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True)  # fmt: skip
        try:
            _wait_for_markers(root / "out", proc, count=1, timeout=300)
            subprocess.run(["scancel", "--name=corpusprep"], env=full, check=True)
            _, err = proc.communicate(timeout=180)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        lines = err.splitlines()
        assert proc.returncode == 1, err
        assert all(line.startswith("corpusprep: ") for line in lines), err
        assert lines[-1].startswith("corpusprep: error: shard") and "without a result" in lines[-1]
        assert len(lines[-1]) < 600 and "Traceback" not in err, err
        r = run_cli(*ARGS, *slow, cwd=root, env={**ENV, **env}, timeout=600)
        assert r.returncode == 0, r.stderr
        assert "resuming:" in r.stderr
    same_as_reference(root, "out")


def _squeue(env, *args):
    """squeue's lines (no header), for the jobs Slurm still holds (pending, running,
    completing)."""
    r = subprocess.run(["squeue", "--noheader", *args], env=env, capture_output=True, text=True,
                       timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return r.stdout.split("\n")[:-1]


def _gone(env, job, timeout=60):
    """Whether Slurm lets go of every task of array `job` within `timeout` (a cancelled
    task is COMPLETING for a few seconds)."""
    deadline = time.monotonic() + timeout
    while _squeue(env, "--array", f"--jobs={job}"):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


STALLING = ["tokenizer._target_=fault_tokenizers.StallCharTokenizer", "+tokenizer.delay=0.02",
            "executor=slurm", "executor.mem_gb=1", "executor.poll_seconds=0.3",
            "out_dir=out"]  # fmt: skip


@pytest.mark.slow
def test_slurm_rerun_cancels_the_array_of_a_killed_driver(corpus, tmp_path):
    """A driver killed with SIGKILL (or its login node lost) leaves its job array running:
    a re-run (the same command) submitted the missing shards again beside it, and the old
    tasks ran on, doing the same shards. Now the re-run cancels it first, in one line, and
    leaves alone another user's job that carries the same comment."""
    import shutil

    root = tmp_path / "killed"
    shutil.copytree(corpus / "corpus", root / "corpus")
    shutil.copytree(corpus / "reference", root / "reference")
    stall = root / "stall.flag"
    with slurm_cluster([]) as env:
        full = {**os.environ, **ENV, **env}
        proc = subprocess.Popen(
            [sys.executable, "-m", "corpusprep", *ARGS, *STALLING, "executor.max_parallel=1"],
            cwd=root, env={**full, "CP_TEST_STALL": str(stall)}, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
        try:
            _wait_for_markers(root / "out", proc, count=1, timeout=300)
            stall.touch()  # the array's tasks stall from here on: it would never end
            ((old, comment),) = {tuple(line.split("|", 1)) for line in
                                 _squeue(full, "--format=%F|%k")}  # fmt: skip
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        try:
            # another user's job with the same comment (squeue shows it to all): held, so
            # that it takes no CPU
            r = subprocess.run(["sbatch", "--parsable", "--hold", "--uid=nobody",
                                f"--comment={comment}", "--chdir=/tmp", "--output=/dev/null",
                                "--mem=10M", "--wrap=true"],
                               env=full, capture_output=True, text=True, check=True)  # fmt: skip
            theirs = r.stdout.strip().split(";")[0]
            assert _squeue(full, "--array", f"--jobs={old}"), "the old array already ended"
            r = run_cli(*ARGS, *STALLING, cwd=root, env={**ENV, **env}, timeout=600)
            assert r.returncode == 0, r.stderr
            lines = r.stderr.splitlines()
            assert all(line.startswith("corpusprep: ") for line in lines), r.stderr
            said = [line for line in lines if "cancelled" in line]
            assert len(said) == 1 and f"cancelled Slurm job {old}," in said[0], r.stderr
            assert "resuming:" in r.stderr
            assert _gone(full, old, timeout=30), "the killed driver's array still runs"
            assert _squeue(full, f"--jobs={theirs}"), "another user's job was cancelled"
        finally:
            subprocess.run(["scancel", "--user=nobody"], env=full, capture_output=True)
            subprocess.run(["scancel", old], env=full, capture_output=True)
    same_as_reference(root, "out")


@pytest.mark.slow
def test_slurm_interrupted_run_cancels_its_own_array(corpus, tmp_path):
    """Ctrl-C or SIGTERM: the driver cancels its array's tasks before it ends."""
    import shutil

    root = tmp_path / "interrupted"
    shutil.copytree(corpus / "corpus", root / "corpus")
    stall = root / "stall.flag"
    stall.touch()  # every task stalls: the array never ends by itself
    with slurm_cluster([]) as env:
        full = {**os.environ, **ENV, **env, "CP_TEST_STALL": str(stall)}
        for stop, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
            proc = subprocess.Popen(
                [sys.executable, "-m", "corpusprep", *ARGS, *STALLING], cwd=root, env=full,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                start_new_session=True)  # fmt: skip
            try:
                deadline = time.monotonic() + 300
                while not (running := _squeue(full, "--states=RUNNING", "--format=%F")):
                    assert proc.poll() is None, proc.communicate()
                    assert time.monotonic() < deadline, "the array never ran"
                    time.sleep(0.2)
                proc.send_signal(stop)
                _, err = proc.communicate(timeout=120)
            finally:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
            assert proc.returncode == code, err
            assert all(line.startswith("corpusprep: ") for line in err.splitlines()), err
            assert _gone(full, running[0]), f"{stop!r}: the array still runs"
    assert not (root / "out" / ".corpusprep-work").exists()


def test_a_slurm_task_error_is_said_in_a_line():
    """submitit's error for a task that raised holds the task's whole traceback: the run's
    one-line error said it all, escaped, in 2 KB. Now the exception and the log's path."""
    from types import SimpleNamespace

    from corpusprep.executors.slurm import _short

    submitit = pytest.importorskip("submitit")
    trace = ('Traceback (most recent call last):\n  File "x.py", line 1, in f\n    g()\n'
             "RuntimeError: injected failure while encoding\n")  # fmt: skip
    error = submitit.core.utils.FailedJobError(
        f"Job (task=0) failed during processing with trace:\n{'-' * 22}\n{trace}\n{'-' * 22}\n"
        "You can check full logs with 'job.stderr(0)' and 'job.stdout(0)'or at paths:\n"
        "  - /w/slurm/7_0/7_0_0_log.err\n  - /w/slurm/7_0/7_0_0_log.out"
    )
    job = SimpleNamespace(paths=SimpleNamespace(stderr="/w/slurm/7_0/7_0_0_log.err"))
    assert str(_short(error, job)) == (
        "RuntimeError: injected failure while encoding; its log: /w/slurm/7_0/7_0_0_log.err"
    )
    lost = submitit.core.utils.UncompletedJobError("Job 7_1 has not produced any output\nlog")
    assert str(_short(lost, job)).startswith("Job 7_1 has not produced any output; its log:")


@pytest.mark.slow
def test_slurm_settings_it_refuses_are_one_line(corpus):
    """A partition that does not exist, more memory than any node has, a submitit
    parameter that does not exist: one line naming the key, not submitit's traceback."""
    with slurm_cluster([]) as env:
        for setting, key in (("executor.partition=nope", "executor.partition"),
                             ("executor.mem_gb=100000", "executor.mem_gb"),
                             ("+executor.slurm.colour=blue", "executor.slurm.colour")):  # fmt: skip
            r = run_cli(*ARGS, "executor=slurm", setting, "out_dir=refused", cwd=corpus,
                        env={**ENV, **env}, timeout=300)  # fmt: skip
            assert r.returncode == 1, r.stderr
            assert "Traceback" not in r.stderr, r.stderr
            last = r.stderr.strip().splitlines()[-1]
            assert last.startswith("corpusprep: error: ") and key in last, r.stderr
            assert not (corpus / "refused").exists()


def test_the_error_that_ends_a_run_is_the_earliest_shards_whatever_the_workers(tmp_path):
    """Two bad lines, in two shards: the run names the one in the earlier shard, as one
    worker does, not whichever shard failed first (with 2 workers the later shard, whose
    bad line comes first, failed first and was the one named)."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    line = json.dumps({"text": "a document of some words " * 40}) + "\n"
    (corpus / "a.jsonl").write_text(line * 3000 + "{not json\n")
    (corpus / "b.jsonl").write_text("{not json either\n" + line * 1500)  # shards of its own
    said = set()
    for workers in ("1", "2", "2", "2"):
        r = run_cli("source=files", "source.glob=corpus/*.jsonl", "tokenizer=tiktoken",
                    "quiet=true", f"executor.workers={workers}", f"out_dir=out{workers}",
                    cwd=tmp_path)  # fmt: skip
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
        said.add(r.stderr.strip().splitlines()[-1])
    assert len(said) == 1 and "a.jsonl:3001" in said.pop()


def test_tasks_cancelled_as_a_run_stops_leave_the_pool_first():
    """The race left after the test above (found by a review): a worker dies at the moment
    run()'s finally cancels the tasks it did not take, and Python 3.11's pool thread fails
    a future cancelled a moment before. On 3.11, a task leaves the pool (a stand-in takes
    its future) before its future is cancelled, so the pool holds no cancelled future."""
    import sys

    from corpusprep.executors.local import _Dropped

    executor = LocalExecutor(workers=2)
    try:
        results = executor.run(_sleeps, [0.2, 30, 30, 30, 30, 30])
        assert next(results) == (0, 0.2)  # 5 sent by now: 1 done, 2 running, 2 waiting
        pool = executor._pool
        results.close()  # as when the caller stops reading (an error, Ctrl-C): its finally
        held = [item.future for item in pool._pending_work_items.values()]
        assert held and not any(f.cancelled() for f in held), held
        if sys.version_info < (3, 12):
            assert all(isinstance(f, _Dropped) for f in held)
    finally:
        executor.abort()


@pytest.mark.parametrize("kind", ["slurm", "ray", "local"])
def test_a_retry_line_shows_a_failures_control_characters_escaped(kind, capsys):
    """An attack on stranger's strings: the Slurm retry line printed the first line of the
    failure as it was (a file name holding an escape sequence in it reached the terminal);
    the local and Ray lines show repr, escaped. Each is one line, inert."""
    import importlib

    module = importlib.import_module(f"corpusprep.executors.{kind}")
    cls = next(v for k, v in vars(module).items() if k.lower() == f"{kind}executor")
    error = RuntimeError("dl/a\x1b]0;pwned\x07.jsonl\u2028: bad\nmore")
    cls.on_retry(None, "shard 3", error)  # (it reads nothing of the executor)
    said = capsys.readouterr().err
    assert said.count("\n") == 1 and "shard 3" in said, said
    assert not set("\x1b\x07\u2028") & set(said), repr(said)


def test_a_submitit_that_cannot_load_its_plugins_is_not_a_missing_cluster(tmp_path, monkeypatch):
    """submitit 1.5.4 on Python 3.9 raises KeyError('submitit') while it loads its plugins:
    that was `no Slurm cluster here ('submitit'); run on a login node`, on a login node."""
    submitit = pytest.importorskip("submitit")
    from corpusprep.errors import UserError
    from corpusprep.executors.slurm import SlurmExecutor

    def broken(**kw):
        raise KeyError("submitit")

    monkeypatch.setattr(submitit, "AutoExecutor", broken)
    executor = SlurmExecutor()
    executor.attach(tmp_path / "work")
    with pytest.raises(UserError) as e:
        executor._executor()
    said = str(e.value)
    assert "no Slurm cluster" not in said and "cannot load its plugins" in said, said
    assert "pip install 'submitit!=1.5.4'" in said, said


def test_sbatch_with_no_cluster_to_reach_is_one_line_saying_so(tmp_path):
    """Found by a newcomer's attack: executor=slurm where sbatch is installed but no cluster
    answers (no slurm.conf, no controller) printed sbatch's own four lines, then advised
    checking executor.partition, mem_gb, ... which cannot help."""
    pytest.importorskip("submitit")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sbatch = bin_dir / "sbatch"  # what slurm-wlm's sbatch says with no cluster configured
    sbatch.write_text(
        "#!/bin/sh\n"
        "echo 'sbatch: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host' >&2\n"
        "echo 'sbatch: error: fetch_config: DNS SRV lookup failed' >&2\n"
        "echo 'sbatch: error: _establish_config_source: failed to fetch config' >&2\n"
        "echo 'sbatch: fatal: Could not establish a configuration source' >&2\n"
        "exit 1\n"
    )
    sbatch.chmod(0o755)
    (tmp_path / "a.txt").write_text("some text to prepare\n" * 200)
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    r = run_cli("source=file", "source.path=a.txt", "executor=slurm", "out_dir=out", cwd=tmp_path,
                env=env)  # fmt: skip
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 1 and len(lines) == 1, r.stderr
    assert lines[0].startswith("corpusprep: error: executor=slurm: no Slurm cluster"), lines[0]
    assert "Could not establish a configuration source" in lines[0], lines[0]
    assert "executor.partition" not in lines[0], lines[0]
