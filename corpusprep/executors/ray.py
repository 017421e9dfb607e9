"""Shards run as Ray tasks: on a laptop, a cloud cluster (`ray up`), Kubernetes (KubeRay)
or a Slurm allocation running `ray start`. An optional extra: pip install 'corpusprep[ray]'.

`executor.address` joins an existing cluster (`auto`: the one this machine belongs to;
`HOST:PORT`: a head node); null starts a private Ray instance for the run. Every node
must be able to import corpusprep (install it in the same environment on every node) and
see out_dir at the same path (a shared file system): shards write their parts there.

A task whose worker process or node dies is run again by Ray (max_retries); one that
raised is run again by corpusprep (retries), unless the error is the input's fault. Ray
may run a task twice: each shard writes its parts under its own names and a completion
marker last, so that is harmless, and the merge follows the plan, not finishing order.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import sys
from collections.abc import Iterator, Sequence
from typing import Any, Callable, Optional, Union

from corpusprep.errors import UserError, checked_number
from corpusprep.executors import Executor, R, T, checked_retries

CONNECT_SECONDS = 5  # a head node answers a TCP connect well within this


@contextlib.contextmanager
def _without_token_notice() -> Iterator[None]:
    """Ray 2.5x and later turn token authentication on for a new local instance and say so in a
    WARNING line above every run's output (an attack saw it above a one-line error): that
    notice alone is left out; its warning that authentication is off is not."""
    logger = logging.getLogger("ray._private.authentication.authentication_token_setup")

    def keep(record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Token authentication is enabled for this")

    logger.addFilter(keep)
    try:
        yield
    finally:
        logger.removeFilter(keep)


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UserError("executor=ray needs Ray: pip install 'corpusprep[ray]'") from None
    return ray


def _call(fn: Callable[[T], R], task: T) -> R:
    """What a Ray task runs (Ray wants a plain function, fn may be a callable object)."""
    return fn(task)


class RayExecutor(Executor):
    def __init__(
        self,
        address: Optional[str] = None,
        node_ip_address: Optional[str] = None,
        cpus_per_task: float = 1,
        retries: int = 2,
        node_retries: int = 3,
    ) -> None:
        self.address = address
        self.node_ip_address = node_ip_address
        self.cpus_per_task = checked_number(cpus_per_task, "executor.cpus_per_task", whole=False,
                                            above=True)  # fmt: skip
        self.retries = checked_retries(retries)
        self.node_retries = checked_retries(node_retries, "executor.node_retries")
        self._started = False

    def __enter__(self) -> RayExecutor:
        self._check_reachable()
        return self

    def _check_reachable(self) -> None:
        """A head address where nothing listens: one line now. ray.init would retry it for
        ever (still waiting after 11 minutes), holding out_dir's lock."""
        address = str(self.address or "")
        host, _, port = address.removeprefix("ray://").rpartition(":")
        if not host or not port.isdigit():  # null, auto, local: Ray finds or starts its own
            return
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_SECONDS).close()
        except OSError as e:
            why = "timed out" if isinstance(e, TimeoutError) else (e.strerror or str(e))
            raise UserError(
                f"executor.address={address}: nothing answers at {host}:{port} ({why}); "
                "start the cluster's head there (`ray start --head`), correct the address, "
                "or leave executor.address unset for a private Ray instance"
            ) from None

    def describe(self) -> dict[str, Any]:
        return {"kind": "ray", "address": self.address, "cpus_per_task": self.cpus_per_task}

    def _connect(self) -> Any:
        ray = _ray()
        if not ray.is_initialized():
            # its own INFO lines ("Started a local Ray instance.") say nothing a run needs
            kwargs: dict[str, Any] = {"address": self.address, "log_to_driver": False,
                                      "logging_level": logging.WARNING}  # fmt: skip
            if self.node_ip_address:
                kwargs["_node_ip_address"] = self.node_ip_address
            if self.address is None:
                kwargs.update(include_dashboard=False)
            try:
                with _without_token_notice():
                    ray.init(**kwargs)
            except ConnectionError as e:
                raise UserError(
                    f"executor.address={self.address}: cannot reach a Ray cluster ({e}); "
                    "start one with `ray start --head`, or leave executor.address unset"
                ) from None
            self._started = True
        return ray

    def parallelism(self) -> Optional[int]:
        """The tasks the cluster's CPUs hold at once (None if it says no CPUs)."""
        cpus = self._connect().cluster_resources().get("CPU", 0)
        return int(cpus / self.cpus_per_task + 1e-9) or None  # (1 // 0.1 is 9.0)

    def run(
        self, fn: Callable[[T], R], tasks: Sequence[T]
    ) -> Iterator[tuple[int, Union[R, BaseException]]]:
        ray = self._connect()
        # max_retries: Ray reruns a task whose worker or node died (not one that raised)
        remote = ray.remote(num_cpus=self.cpus_per_task, max_retries=self.node_retries)(_call)
        index = {remote.remote(fn, task): i for i, task in enumerate(tasks)}
        pending = list(index)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                try:
                    yield index[ref], ray.get(ref)
                except ray.exceptions.RayTaskError as e:
                    yield index[ref], e.cause if isinstance(e.cause, BaseException) else e
                except ray.exceptions.RayError as e:  # the worker or node is gone for good
                    yield index[ref], e

    def on_retry(self, what: str, error: BaseException) -> None:
        print(f"corpusprep: {what} failed on Ray ({error!r}); trying again", file=sys.stderr)

    def close(self) -> None:
        if self._started:
            _ray().shutdown()
            self._started = False
