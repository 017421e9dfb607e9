"""Executors decide where shard tasks run: this machine's cores (local), a Ray cluster
(ray), or a Slurm cluster (slurm). Each is a class in its own module here, with a config
file of the same name in conf/executor/. They know nothing about what a task does.

An executor only implements run(): start the tasks, and report each one's result (or the
exception it raised) as it finishes. The base class turns that into map(): results in
task order, whatever the finishing order, and failed tasks tried again (up to `retries`
times) unless the failure is the user's (a UserError: trying again cannot help).
"""

from __future__ import annotations

import errno
import os
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Callable, Optional, TypeVar, Union

from corpusprep.errors import TaskFailed, UserError, checked_number
from corpusprep.memory import is_ours, lean_allocation, release_freed_memory
from corpusprep.writer import NO_SPACE

T = TypeVar("T")
R = TypeVar("R")


class NotRun(Exception):
    """A task an executor never started (its pool broke first): run again, but not counted
    as one of its failed attempts."""


@dataclass(frozen=True)
class _UserFailure:
    message: str


@dataclass(frozen=True)
class _NoSpace:
    """A full or read-only disk: never tried again, and the driver says how much is needed."""

    errno: int
    strerror: Optional[str]
    filename: str


@dataclass(frozen=True)
class _Vanished:
    """A file a task did not find. Gone for the driver too (an input removed, out_dir moved
    away): never tried again, and the driver says which (prepare.kept_in_place). There for
    the driver (a worker on another node that does not see it yet): tried again."""

    strerror: Optional[str]
    filename: Optional[str]


class _Guarded:
    """Runs the task; a UserError comes back as a value, so it keeps its meaning through
    any engine (some only report "the job failed" with a traceback string)."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn
        self.driver = os.getpid()
        # the command line's workers are set up as it is; a library caller's (its own Ray
        # workers too, which run its other tasks) keep their allocators
        self.lean = is_ours()

    def __call__(self, task: Any) -> Any:
        if self.lean and os.getpid() != self.driver:
            lean_allocation()
        try:
            return self.fn(task)
        except UserError as e:
            return _UserFailure(str(e))
        except FileNotFoundError as e:
            return _Vanished(e.strerror, None if e.filename is None else os.fsdecode(e.filename))
        except OSError as e:
            if e.errno is not None and e.errno in NO_SPACE:
                return _NoSpace(e.errno, e.strerror, str(e.filename))
            raise
        finally:
            release_freed_memory()


def checked_retries(value: Any, key: str = "executor.retries") -> int:
    """How many times a failed task is tried again: a whole number, 0 or more."""
    return int(checked_number(value, key, hint=" (2 by default)"))


def _settled(outcome: Any) -> Any:
    """A task's outcome: raised here if the input's fault (or the disk's), or interrupted;
    else its result, or the exception that may be tried again."""
    if isinstance(outcome, _UserFailure):
        raise UserError(outcome.message)
    if isinstance(outcome, _NoSpace):
        raise OSError(outcome.errno, outcome.strerror, outcome.filename)
    if isinstance(outcome, _Vanished):
        gone = FileNotFoundError(errno.ENOENT, outcome.strerror, outcome.filename)
        if outcome.filename is not None and not os.path.lexists(outcome.filename):
            raise gone
        return gone  # the driver sees it: the worker's view may catch up
    if isinstance(outcome, (UserError, KeyboardInterrupt)):
        raise outcome
    return outcome


def _settled_before(index: int, remaining: dict, done: dict, failed: dict, refused: dict,
                    rank: Sequence[int]) -> bool:  # fmt: skip
    """Whether every task ranked before `index` has ended (handed over, done, failed or
    refused)."""
    return all(rank[i] >= rank[index] or i in done or i in failed or i in refused
               for i in remaining)  # fmt: skip


class Executor(ABC):
    """Use as a context manager: workers (or a cluster connection) live across map() calls."""

    retries: int = 2

    @abstractmethod
    def run(
        self, fn: Callable[[T], R], tasks: Sequence[T]
    ) -> Iterator[tuple[int, Union[R, BaseException]]]:
        """Run fn on every task; yield (task index, result or exception) as each finishes."""

    def parallelism(self) -> Optional[int]:
        """How many tasks run at once, where known: runs of a file's consecutive pieces,
        which one worker reads on through, are sized by it (prepare._runs). None: each
        task goes alone."""
        return None

    def map(self, fn: Callable[[T], R], tasks: Sequence[T],
            ranks: Optional[Sequence[int]] = None) -> Iterator[R]:  # fmt: skip
        """fn on every task; results in task order (never finishing order). A task that
        fails more than `retries` times is run once more by itself where its failures may
        have been a neighbour's (run_alone) before the run gives up on it. Of the input's
        errors, the earliest task's is said, by `ranks` where given (the tasks' places in
        the input, when they are taken in another order), else by task order."""
        guarded = _Guarded(fn)
        rank = list(range(len(tasks))) if ranks is None else list(ranks)

        def earliest(refused: dict) -> int:
            return min(refused, key=rank.__getitem__)

        remaining = dict(enumerate(tasks))
        attempts = dict.fromkeys(remaining, 0)
        done: dict[int, R] = {}
        following = 0
        refused: dict[int, UserError] = {}  # the input's fault, by task: the earliest is said
        while remaining:
            order = sorted(remaining)
            failed: dict[int, BaseException] = {}
            not_run: list[int] = []
            for k, outcome in self.run(guarded, [remaining[i] for i in order]):
                index = order[k]
                if isinstance(outcome, NotRun):
                    not_run.append(index)
                elif isinstance(outcome, UserError):
                    refused[index] = outcome
                elif isinstance(outcome, _UserFailure):
                    refused[index] = UserError(outcome.message)
                elif isinstance(outcome := _settled(outcome), BaseException):
                    failed[index] = outcome
                else:
                    done[index] = outcome
                    del remaining[index]
                while following in done:  # hand results over in order, as soon as possible
                    yield done.pop(following)
                    following += 1
                # the error the earliest task raises, once every task before it has ended,
                # not the first to arrive: which is first depends on the workers
                if refused and _settled_before(earliest(refused), remaining, done, failed,
                                               refused, rank):  # fmt: skip
                    raise refused[earliest(refused)]
            if refused:
                raise refused[earliest(refused)]
            if not_run and not failed and len(not_run) == len(order):  # none could start:
                failed = dict.fromkeys(not_run, RuntimeError("the workers did not start"))
            for index, error in failed.items():
                attempts[index] += 1
                what = getattr(tasks[index], "label", None) or f"task {index}"
                if attempts[index] <= self.retries:
                    self.on_retry(what, error)
                    continue
                outcome, alone = self._alone(guarded, tasks[index], what, error)
                if isinstance(outcome, BaseException):
                    tries = attempts[index] + alone
                    times = "once" if tries == 1 else f"{tries} times"
                    raise TaskFailed(f"{what} failed {times}; last: {outcome!r}") from outcome
                done[index] = outcome  # the failures were a neighbour's
                del remaining[index]
            while following in done:
                yield done.pop(following)
                following += 1

    def _alone(
        self, fn: Callable[[T], R], task: T, what: str, error: BaseException
    ) -> tuple[Union[R, BaseException], int]:
        """A task past its retries, where its failures may have been a neighbour's: run by
        itself, where only its own count, up to `retries` + 1 of them. (Its result or its
        last exception, how many of its tries by itself failed.)"""
        for tries in range(self.retries + 1):
            outcome = self.run_alone(fn, task, error)
            if outcome is None:  # its failures were its own: no more tries
                return error, tries
            outcome = _settled(outcome)
            if not isinstance(outcome, BaseException):
                return outcome, tries
            error = outcome
            if tries < self.retries:
                self.on_retry(f"{what} (by itself)", error)
        return error, self.retries + 1

    def run_alone(self, fn: Callable[[T], R], task: T,
                  error: BaseException) -> Optional[Union[R, BaseException]]:  # fmt: skip
        """Run one task by itself, when its failures (`error` the last) may have been
        another task's: a pool whose worker died fails every task it holds. Its result or
        exception; None: this executor's failures are each task's own (never run)."""
        return None

    def attach(self, work: Any) -> None:  # noqa: B027 - optional hook
        """Given the run's work folder (in out_dir) before tasks start: engines keep logs there."""

    def leaving(self, work_root: Any) -> None:  # noqa: B027 - optional hook
        """Called before a run that has nothing to do (out_dir up to date) removes
        out_dir's work folders (`work_root`): an engine stops what a dead driver left
        running there."""

    def on_retry(self, what: str, error: BaseException) -> None:  # noqa: B027 - optional
        """Called before a failed task (`what`: its label, "shard 3") is tried again
        (executors may log or reconnect)."""

    def describe(self) -> dict[str, Any]:
        return {"kind": type(self).__name__}

    #: whether shards may write into one shared output file at their own offsets; engines
    #: whose workers may sit on other machines write part files instead
    shared_files: bool = False

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, exc_type: Any, *exc: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def close(self) -> None:  # noqa: B027 - nothing to release by default
        """Release workers."""

    def abort(self) -> None:
        """Stop at once (a failure or Ctrl-C): no task may write after this returns."""
        self.close()
