"""Shards run in a pool of processes on this machine (all cores by default)."""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import os
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable, Optional, Union

from corpusprep.errors import UserError, checked_number
from corpusprep.executors import Executor, NotRun, R, T, checked_retries

# a dead worker's pool, with no result since for this long, is stuck: its thread fails the
# pool's futures within milliseconds of a death, unless it is reading a result cut short
STALLED_SECONDS = 2.0


def available_cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


class LocalExecutor(Executor):
    shared_files = True  # one machine, one file system

    def __init__(
        self, workers: Optional[int] = None, start_method: Optional[str] = None, retries: int = 2
    ) -> None:
        if workers is not None:
            checked_number(workers, "executor.workers", least=1, hint=" (or null: every core)")
        methods = multiprocessing.get_all_start_methods()
        if start_method is not None and start_method not in methods:
            raise UserError(
                f"executor.start_method={start_method!r}: use one of {', '.join(methods)}"
            )
        self.workers = int(workers) if workers is not None else available_cores()
        self.start_method = start_method
        self.retries = checked_retries(retries)
        self._pool: Optional[ProcessPoolExecutor] = None
        self._broke = False  # a worker died: tasks never run in this process from then on

    def parallelism(self) -> int:
        return self.workers

    def describe(self) -> dict[str, Any]:
        return {"kind": "local", "workers": self.workers, "start_method": self.start_method}

    def run(
        self, fn: Callable[[T], R], tasks: Sequence[T]
    ) -> Iterator[tuple[int, Union[R, BaseException]]]:
        # no process start-up for small jobs; but a task tried again after a worker died
        # may be what killed it: it must not take this process with it
        if self.workers == 1 or (len(tasks) <= 1 and not self._broke):
            for i, task in enumerate(tasks):
                try:
                    yield i, fn(task)
                except Exception as e:
                    yield i, e
            return
        pool = self._get_pool()
        # At most 2 tasks per worker in flight: memory stays bounded however many shards.
        todo = iter(enumerate(tasks))
        running: dict[Future, int] = {}
        unsent: list[int] = []  # refused by a pool that broke as they were submitted

        def submit_next() -> None:
            nxt = next(todo, None)
            if nxt is None:
                return
            try:
                with _forking(pool, self.workers):
                    running[pool.submit(fn, nxt[1])] = nxt[0]
            except BrokenProcessPool:  # a worker died since the last result came in
                unsent.append(nxt[0])
                self._broke = True
                self._discard_pool()

        for _ in range(2 * self.workers):
            if self._pool is pool:
                submit_next()
        try:
            stall = _Stall(pool)
            while running:
                finished, _ = wait(running, timeout=1, return_when=FIRST_COMPLETED)
                if stall.stuck(bool(finished)):
                    self._broke = True
                    self._discard_pool()
                    for index in running.values():
                        yield index, BrokenProcessPool(_STALLED)
                    running.clear()
                if not finished:
                    continue
                for future in finished:
                    index = running.pop(future)
                    error = future.exception()
                    yield index, future.result() if error is None else error
                    if isinstance(error, BrokenProcessPool):
                        self._broke = True
                        self._discard_pool()  # a worker died: the next attempt gets a new pool
                    elif self._pool is pool:
                        submit_next()
            # the pool broke: the rest never ran, and go again without a failed attempt
            for index in [*unsent, *(index for index, _ in todo)]:
                yield index, NotRun()
        finally:
            _cancel(pool, running)

    def on_retry(self, what: str, error: BaseException) -> None:
        print(f"corpusprep: {what} failed ({error!r}); trying again", file=sys.stderr)

    def run_alone(self, fn: Callable[[T], R], task: T,
                  error: BaseException) -> Optional[Union[R, BaseException]]:  # fmt: skip
        """A worker's death fails every task in the pool (the one on the other worker, the
        ones queued): a task charged with it once too often runs once more in a pool of
        its own, where a death is its own."""
        if not isinstance(error, BrokenProcessPool):
            return None
        pool = self._new_pool(1)
        try:
            future, stall = pool.submit(fn, task), _Stall(pool)
            while not wait([future], timeout=1).done:
                if stall.stuck(False):  # (as in run())
                    _kill(pool)
                    return BrokenProcessPool(_STALLED)
            return future.result()
        except Exception as e:
            return e
        except BaseException:  # interrupted (Ctrl-C, SIGTERM): its worker stops now
            _kill(pool)
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            _LIVE.discard(pool)

    def _get_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = self._new_pool(self.workers)
        return self._pool

    def _new_pool(self, workers: int) -> ProcessPoolExecutor:
        method = multiprocessing.get_start_method(allow_none=True)
        if method is not None and method not in multiprocessing.get_all_start_methods():
            # loky's, in a joblib job: its processes have no kill(), and a spawned worker
            # looks the default up by name and fails. The platform's, for the rest of this
            # process's life (joblib gives it further jobs: each is corpusprep's too)
            multiprocessing.set_start_method(None, force=True)
        context = multiprocessing.get_context(self.start_method)
        if context.get_start_method() == "fork":
            # forked workers inherit the driver's objects (the tokenizer's ranks, the
            # config, modules): frozen, their collections never walk them, and so never
            # copy the pages they share with the driver (3-4% of a run's CPU)
            gc.freeze()
        pool = ProcessPoolExecutor(
            workers, mp_context=context, initializer=die_with_parent,
            # a forkserver's workers are its children, not ours: they watch this process
            initargs=(os.getpid(), context.get_start_method() == "forkserver"),
        )  # fmt: skip
        _LIVE.add(pool)
        return pool

    def _discard_pool(self) -> None:
        """A pool a worker died in: its other workers killed too (their tasks go again), so
        its thread cannot wait for ever on a result one of them was halfway through."""
        if self._pool is not None:
            _kill(self._pool)
            self._pool = None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            _LIVE.discard(self._pool)
            self._pool = None
        gc.unfreeze()  # what the driver made before the pool is collectable again

    def abort(self) -> None:
        """Kill the workers (a task may be halfway through a shard) and wait for them."""
        pool, self._pool = self._pool, None
        gc.unfreeze()
        if pool is not None:
            _kill(pool)


_STALLED = "a worker died sending a result"


class _Stall:
    """Whether a pool is stuck: a worker killed halfway through sending a result leaves the
    pool's thread waiting for the rest of it forever, never looking at its workers again."""

    def __init__(self, pool: ProcessPoolExecutor) -> None:
        self.pool = pool
        self.died_at: Optional[float] = None  # when a worker was first seen dead, no result since

    def stuck(self, finished: bool) -> bool:
        """After a wait of the pool's futures: whether a worker is dead and none `finished`
        for STALLED_SECONDS since."""
        if finished or not _a_worker_died(self.pool):
            self.died_at = None
            return False
        self.died_at = self.died_at or time.monotonic()
        return time.monotonic() - self.died_at > STALLED_SECONDS


def _workers(pool: ProcessPoolExecutor) -> list:
    """The pool's worker processes started so far (none once shut down)."""
    return list((getattr(pool, "_processes", None) or {}).values())


def _a_worker_died(pool: ProcessPoolExecutor) -> bool:
    """Whether one of the pool's workers has ended (they end only at its shutdown)."""
    return any(process.exitcode is not None for process in _workers(pool))


def _forking(pool: ProcessPoolExecutor, workers: int) -> contextlib.AbstractContextManager:
    """Ctrl-C held while a submit may fork the workers: a KeyboardInterrupt raised in
    os.fork's after-fork handlers is printed as "ignored" and lost, and the run went on."""
    from corpusprep.writer import signals_held

    started = len(_workers(pool))
    return signals_held() if started < workers else contextlib.nullcontext()


class _Dropped(Future):
    """Stands in for the future of a task cancelled before a worker took it, in a pool
    being killed: Python < 3.12's pool fails every future it still holds when its workers
    die, a cancelled one too, and its thread then died with InvalidStateError, a traceback
    on stderr after the run's one line (CPython gh-107219). Never run, never failed."""

    def set_running_or_notify_cancel(self) -> bool:
        return False  # the pool drops the task, as it drops a cancelled one

    def set_exception(self, exception: Optional[BaseException]) -> None:
        pass


def _leave(pool: ProcessPoolExecutor, leaving: Callable[[Future], bool]) -> None:
    """On Python < 3.12, the futures `leaving` picks leave the pool: a _Dropped takes the
    place of each in the pool's work items."""
    if sys.version_info < (3, 12):
        for item in list((getattr(pool, "_pending_work_items", None) or {}).values()):
            if leaving(item.future):
                item.future = _Dropped()


def _cancel(pool: ProcessPoolExecutor, futures: Iterable[Future]) -> None:
    """Cancel the futures of tasks no worker took yet, each leaving the pool first (_leave):
    the pool's thread fails every future it holds when a worker dies, and one cancelled
    here just before, from this thread, raised InvalidStateError in it (a race _kill's own
    replacement could lose)."""
    futures = set(futures)
    _leave(pool, futures.__contains__)
    for future in futures:
        future.cancel()


_LIVE: set[ProcessPoolExecutor] = set()  # the pools made here and not yet shut down


def kill_live_pools() -> None:
    """Kill every pool made here and not shut down: at the exit of a run that failed or was
    interrupted, a pool no abort reached could hold its thread on a result a dead worker
    left half-sent, and the exit's join of that thread waited for ever (found by SIGTERM to
    a run's process group at random moments, 1 run in 200)."""
    for pool in list(_LIVE):
        _kill(pool)


def _kill(pool: ProcessPoolExecutor) -> None:
    """Kill a pool's workers and wait for them."""
    _LIVE.discard(pool)
    processes = _workers(pool)
    results = getattr(pool, "_result_queue", None)  # shutdown() forgets them
    tasks = getattr(pool, "_call_queue", None)
    _leave(pool, Future.cancelled)  # (cancelled by a caller of the pool's own)
    # Each pipe the workers use, at this process's end, let go of: a worker killed
    # halfway through sending a result left the pool's thread waiting for the rest of the
    # message (and the exit joining that thread, forever): with the write end gone, it
    # reads the pipe's end instead. And its feeder thread halfway through writing a task
    # bigger than the pipe (a trained tokenizer's ranks go with each) waited for a worker
    # to read the rest, the pool's thread joining it: with the read end gone, the write
    # fails (as CPython does for a pool it finds broken, gh-94777). Before the kill and the
    # shutdown: then the feeder closes its end itself (given its sentinel), and a number it
    # had just closed was taken by /dev/null for good, or a file opened meanwhile replaced.
    # Not for a pool found broken: its thread is past reading, and lets go of the task
    # pipe itself (maybe now; it marks the pool broken before it fails the futures)
    if not getattr(pool, "_broken", False):
        for end in (getattr(results, "_writer", None), getattr(tasks, "_reader", None)):
            with contextlib.suppress(AttributeError, OSError):
                if end is not None:
                    _let_go_of(end.fileno())
    for process in processes:
        process.kill()
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.join(5)


def _let_go_of(fd: int) -> None:
    """The pipe end `fd` closed, and the number taken by /dev/null: the pool's own threads
    close it later, at any time, and a close of the bare number could close a file opened
    since, which took it."""
    null = os.open(os.devnull, os.O_RDWR)
    try:
        os.dup2(null, fd)
    finally:
        os.close(null)


def die_with_parent(parent: int, served: bool = False) -> None:
    """A worker ends with the driver, even a SIGKILLed one: it would otherwise go on writing
    into out_dir and hold the driver's pipes open (Linux: PR_SET_PDEATHSIG; elsewhere the
    pool notices the dead parent at its next task). And it ends at once on SIGTERM, which
    is how a pool whose other worker died stops it: a forked worker has the driver's
    handler (a KeyboardInterrupt), which the pool catches as the task's outcome and then
    waits to send, forever when the result pipe is full, while the driver waits for it."""
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    # Ctrl-C in a terminal reaches the whole process group: the driver stops the workers
    # (and says so in one line); a worker's own KeyboardInterrupt would print a traceback
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if served:  # the forkserver's child, not the driver's (`parent`): it watches the driver
        _end_with(parent)
    elif os.getppid() != parent:  # it died before the signal was set
        os._exit(1)


def _end_with(driver: int) -> None:
    """A forkserver's worker ends when the driver does: the death signal comes only when
    the forkserver ends, which waits for its workers (they hold its pipe), and so none of
    them ever ended after a SIGKILLed driver (Python 3.14's default start method on Linux)."""
    import select
    import signal
    import threading

    try:
        pidfd = os.pidfd_open(driver)  # Linux 5.3+: readable once the driver has ended
    except ProcessLookupError:  # ended already
        os._exit(1)
    except (AttributeError, OSError):  # no pidfd here: look every second
        pidfd = None

    def watch() -> None:
        if pidfd is not None:
            select.select([pidfd], [], [])
        else:
            with contextlib.suppress(ProcessLookupError):
                while True:
                    os.kill(driver, 0)
                    time.sleep(1)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, daemon=True).start()
