"""Executors decide where shard tasks run. They know nothing about what a task does:
they take a function and a list of tasks and give the results back in task order."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from typing import Any, Callable, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class Executor(ABC):
    """Use as a context manager: workers may live across several map() calls."""

    @abstractmethod
    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> Iterator[R]:
        """Run fn on every task; yield the results in task order (never completion order)."""

    def describe(self) -> dict[str, Any]:
        return {"kind": type(self).__name__}

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:  # noqa: B027 - nothing to release by default
        """Release workers."""
