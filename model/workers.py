"""Greedy traces in worker processes, so that several users' translations run on every core at once.

A trace is a loop of many small torch calls whose Python side holds the GIL, so traces run in threads of
one process take turns with each other and with the web server. Forked workers inherit the loaded
translators (copy-on-write, nothing is loaded twice) and return a `TracedTranslation`; an `InputError`
raised in a worker reaches the caller unchanged. If a worker dies, the request is traced in this process
and a fresh set of workers replaces the broken one.
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from model.translator import TracedTranslation, Translator

log = logging.getLogger(__name__)

# What a forked worker traces with: set in the parent just before the fork, read-only afterwards.
_translators: dict[str, Translator] = {}


def _exit_with_parent(parent: int) -> None:
    """Worker start-up: end this worker when the app's process ends, however it ends (even killed)."""
    def watch():
        while os.getppid() == parent:
            time.sleep(1)
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()


def _trace(name: str, text: str, options: dict) -> TracedTranslation:
    return _translators[name].trace(text, **options)


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


def can_fork() -> bool:
    """Workers are forked (they share the parent's loaded weights); where fork is missing, trace in-process."""
    return "fork" in multiprocessing.get_all_start_methods()


class TracePool:
    """`trace(name, text)` in one of `workers` forked processes."""

    def __init__(self, translators: dict[str, Translator], workers: int):
        if workers < 1 or not can_fork():
            raise ValueError(f"a trace pool needs at least one worker and fork (got {workers} workers)")
        self.translators, self.workers = translators, workers
        self._lock = threading.Lock()
        self._executor = self._start()

    def _start(self) -> ProcessPoolExecutor:
        """Fork every worker now (not lazily inside a request) and wait until each one answers."""
        global _translators
        _translators = self.translators  # what these workers inherit, even if another pool was made since
        executor = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("fork"),
                                       initializer=_exit_with_parent, initargs=(os.getpid(),))
        wait([executor.submit(os.getpid) for _ in range(self.workers)])
        return executor

    def worker_pids(self) -> list[int]:
        return [process.pid for process in self._executor._processes.values()]

    def trace(self, name: str, text: str, **options) -> TracedTranslation:
        """`Translator.trace(text, **options)` of translator `name`, in a worker."""
        executor = self._executor
        try:
            return executor.submit(_trace, name, text, options).result()
        except BrokenProcessPool:
            log.error("a trace worker died; tracing this request in-process and starting new workers")
            with self._lock:
                if self._executor is executor:
                    executor.shutdown(wait=False, cancel_futures=True)
                    self._executor = self._start()
            return self.translators[name].trace(text, **options)

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)
