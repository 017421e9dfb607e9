"""Shards run in a pool of processes on this machine (all cores by default)."""

from __future__ import annotations

import multiprocessing
import os
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any, Callable, Optional

from corpusprep.errors import UserError
from corpusprep.executors import Executor, R, T


def available_cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


class LocalExecutor(Executor):
    def __init__(self, workers: Optional[int] = None, start_method: Optional[str] = None) -> None:
        if workers is not None and (isinstance(workers, bool) or int(workers) < 1):
            raise UserError(f"executor.workers={workers!r}: must be a positive number (or null)")
        methods = multiprocessing.get_all_start_methods()
        if start_method is not None and start_method not in methods:
            raise UserError(
                f"executor.start_method={start_method!r}: use one of {', '.join(methods)}"
            )
        self.workers = int(workers) if workers is not None else available_cores()
        self.start_method = start_method
        self._pool: Optional[ProcessPoolExecutor] = None

    def describe(self) -> dict[str, Any]:
        return {"kind": "local", "workers": self.workers, "start_method": self.start_method}

    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> Iterator[R]:
        if self.workers == 1 or len(tasks) <= 1:
            return (fn(task) for task in tasks)  # no process start-up for small jobs
        pool = self._get_pool()
        # At most 2 tasks per worker in flight: results wait in order, memory stays bounded.
        window = 2 * self.workers
        pending: deque[Future] = deque(pool.submit(fn, t) for t in tasks[:window])
        return self._drain(pool, fn, pending, iter(tasks[window:]))

    @staticmethod
    def _drain(pool, fn, pending: deque, rest: Iterator) -> Iterator:
        try:
            while pending:
                result = pending.popleft().result()
                nxt = next(rest, None)
                if nxt is not None:
                    pending.append(pool.submit(fn, nxt))
                yield result
        finally:
            for f in pending:
                f.cancel()

    def _get_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            context = multiprocessing.get_context(self.start_method)
            self._pool = ProcessPoolExecutor(self.workers, mp_context=context)
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
