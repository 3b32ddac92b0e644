"""The cores one request's work may spread over: the thread that runs it and this process's spare threads.

The server runs each request on one torch thread (app.py), so that users asking at once do not oversubscribe the
cores. A measure that runs one large batch (the deletion curves' perturbed sources, integrated gradients' points)
would then leave the machine's other cores idle while its user waits: `shared` splits it into calls that spare
threads take while the calling thread runs its own. A call no spare thread has started by the time the caller
is done with its own (the spare threads busy with other users' work) is run by the caller, so sharing never
makes a request wait behind another's.
"""

from __future__ import annotations

import contextvars
import functools
import math
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import torch

T = TypeVar("T")
_spare: ThreadPoolExecutor | None = None  # started at first use, so a process forked before then has none
_starting = threading.Lock()


def available_cores(cgroup_cpu_max: Path = Path("/sys/fs/cgroup/cpu.max")) -> int:
    """Cores this process may run on: its CPU affinity, capped by a container's CPU quota.

    `os.cpu_count()` counts the host's cores; a container (a Hugging Face Space, say) may get a share of
    them through its cgroup quota, and one trace worker per host core would only queue for that share.
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        quota, period = cgroup_cpu_max.read_text().split()
        if quota != "max":
            cores = min(cores, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):  # no cgroup v2 CPU controller here, or a format this does not know
        pass
    return max(cores, 1)


@functools.cache
def parts() -> int:
    """How many calls a request's batch is split into: one per core this process may run on."""
    return available_cores()


def spare_threads() -> ThreadPoolExecutor:
    global _spare
    with _starting:
        if _spare is None:
            _spare = ThreadPoolExecutor(parts() - 1, thread_name_prefix="spare-core")
        return _spare


def _forgotten_in_child() -> None:  # a forked process has none of its parent's threads
    global _spare, _starting
    _spare, _starting = None, threading.Lock()


os.register_at_fork(after_in_child=_forgotten_in_child)


def shared(calls: Sequence[Callable[[], T]]) -> list[T]:
    """Each call's result, in order: the calling thread runs the first, spare threads the others, each in the
    caller's context and grad mode; the caller runs any that no spare thread has started once its own is done."""
    if len(calls) < 2 or parts() < 2:
        return [call() for call in calls]
    grad, inference = torch.is_grad_enabled(), torch.is_inference_mode_enabled()

    def as_caller(call: Callable[[], T]) -> Callable[[], T]:
        def run() -> T:
            with torch.inference_mode(inference), torch.set_grad_enabled(grad):
                return call()
        return functools.partial(contextvars.copy_context().run, run)

    futures = [spare_threads().submit(as_caller(call)) for call in calls[1:]]
    try:
        results = [calls[0]()]
        return results + [call() if future.cancel() else future.result() for future, call in zip(futures, calls[1:])]
    finally:
        for future in futures:  # where the caller's own call failed (a user's Stop, say), the rest is not wanted
            future.cancel()
