"""Greedy traces in worker processes, decoded together: several users' translations share every step, each
scored for detachment from its source where asked (from its own pass); and a given translation's detachment score
(a teacher-forced pass and ALTI+), between the steps.

A trace is a loop of many small torch calls whose Python side holds the GIL, so traces run in threads of one
process take turns with each other and with the web server. Forked workers inherit the loaded translators
(copy-on-write, nothing is loaded twice). Each worker keeps one `TraceBatch` per Transformer checkpoint and
decodes every request it holds together (continuous batching): a request that arrives joins the batch at the
next step, and a finished one leaves it and is answered at once, so a short sentence never waits for a long
one. The GRU models are traced one request at a time between steps. An `InputError` raised in a worker
reaches the caller unchanged. If a worker dies, its requests are traced in this process and a new worker
takes its place. When the parent loads or unloads a model (model/serving/catalog.py), `refresh` forks new workers that
hold what it holds, and the old ones end once they have answered what they hold.

Workers run at a lower scheduling priority than the web server (`NICENESS`): a view change, a step's data or a
refusal is a few milliseconds of the server's CPU that a user waits for, and it comes first; decoding takes every
cycle the server leaves. So there can be a worker per core without the server's answers queueing behind their
steps.
"""

from __future__ import annotations

import atexit
import itertools
import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future
from multiprocessing.connection import Connection

import torch

from attention_inspector.model.explain.detachment import ScoredDetachment
from attention_inspector.model.nets.tracing import TraceRequest
from attention_inspector.model.serving.traced import TracedTranslation
from attention_inspector.model.serving.translator import Translator

log = logging.getLogger(__name__)

# A worker's niceness above the web server's: under load on 2 cores (benchmarks/load.py, two workers), view changes
# took p50 8-9 / p95 19-27 ms with it, against 41-52 / 108-120 ms at the server's own priority.
NICENESS = 10

# What a forked worker traces with: set in the parent just before the fork, read-only afterwards.
_translators: Mapping[str, Translator] = {}


class NotInWorker(LookupError):
    """A model the worker was forked without (loaded in the parent since): the parent traces it itself."""


def _held() -> Mapping[str, Translator]:
    """The models this process holds in memory (a catalog's loaded ones: a worker never loads one itself)."""
    return _translators.loaded() if hasattr(_translators, "loaded") else _translators


def _exit_with_parent(parent: int) -> None:
    """Worker start-up: end this worker when the app's process ends, however it ends (even killed)."""
    def watch():
        while os.getppid() == parent:
            time.sleep(1)
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()


def _serve(connection: Connection, parent: int) -> None:
    """A worker's loop: take every request that has arrived (waiting for one only when nothing is being decoded),
    then advance each checkpoint's batch by one step and answer the requests that finished.

    A worker computes on one thread: it has a core to itself (`load_services`), and a forked process inherits
    its parent's OpenMP thread pool without the threads, so its first parallel matrix product would wait for them
    for ever (as PyTorch's DataLoader workers do; a step of a batch is no faster on two threads here)."""
    torch.set_num_threads(1)
    _exit_with_parent(parent)
    held = _held()
    batches = {name: translator.trace_batch() for name, translator in held.items()
               if translator.step_decoder is not None}
    in_batch: dict[tuple[str, int], tuple[int, list[str], TraceRequest]] = {}  # (checkpoint, ticket) -> its request
    while True:
        busy = bool(in_batch)
        while connection.poll(0 if busy else None):
            message = connection.recv()
            if message is None:
                return
            request_id, name, method, text, options = message
            translator = held.get(name)
            try:
                if translator is None:
                    raise NotInWorker(name)
                if method == "trace" and name in batches:
                    tokens, request = translator.trace_request(text, **options)
                    in_batch[name, batches[name].add(request)] = request_id, tokens, request
                    busy = True
                else:  # a GRU model's trace, or a detachment score: one request at a time, between steps
                    connection.send((request_id, getattr(translator, method)(text, **options), None))
            except Exception as error:  # an InputError (or a bug) is the caller's answer, not this worker's end
                connection.send((request_id, None, error))
        for name, batch in batches.items():
            if len(batch):
                for ticket, trace in batch.step():
                    request_id, tokens, request = in_batch.pop((name, ticket))
                    connection.send((request_id, held[name].traced(tokens, trace, request.gates, request.vectors),
                                     None))


def can_fork() -> bool:
    """Workers are forked (they share the parent's loaded weights); where fork is missing, trace in-process."""
    return "fork" in multiprocessing.get_all_start_methods()


class WorkerDied(RuntimeError):
    """The worker holding a request ended before answering it."""


class _Worker:
    """One forked worker: its process, its end of the pipe, and the requests it has not answered yet."""

    def __init__(self, pool: TracePool):
        self.pool = pool
        self.connection, child = multiprocessing.Pipe()
        self.process = multiprocessing.get_context("fork").Process(target=_serve, args=(child, os.getpid()),
                                                                   daemon=True)
        self.process.start()
        # Set here, not by the worker itself, so that it holds from the worker's first step on.
        os.setpriority(os.PRIO_PROCESS, self.process.pid, min(os.getpriority(os.PRIO_PROCESS, 0) + NICENESS, 19))
        child.close()
        self.pending: dict[int, Future] = {}
        self.send_lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def submit(self, request_id: int, message: tuple) -> Future:
        future = Future()
        self.pending[request_id] = future
        try:
            with self.send_lock:
                self.connection.send(message)
        except OSError:  # the worker is gone; its reader fails this request
            pass
        return future

    def _read(self) -> None:
        """Hand each answer to its request; when the worker ends, fail what it still held and replace it."""
        try:
            while True:
                request_id, traced, error = self.connection.recv()
                future = self.pending.pop(request_id)
                if error is None:
                    future.set_result(traced)
                else:
                    future.set_exception(error)
        except (EOFError, OSError):
            pass
        self.pool._replace(self)
        while self.pending:
            self.pending.popitem()[1].set_exception(WorkerDied(f"trace worker {self.process.pid} ended"))

    def retire(self) -> None:
        """Stop once every request this worker holds is answered (in a thread of its own)."""
        def wait_then_stop():
            while self.pending:
                time.sleep(0.05)
            self.stop()
        threading.Thread(target=wait_then_stop, daemon=True).start()

    def stop(self) -> None:
        try:
            with self.send_lock:
                self.connection.send(None)
        except OSError:
            pass
        self.process.join(timeout=5)
        self.connection.close()


class TracePool:
    """`trace(name, text)` in one of `workers` forked processes, batched with the other requests it holds."""

    def __init__(self, translators: dict[str, Translator], workers: int):
        if workers < 1 or not can_fork():
            raise ValueError(f"a trace pool needs at least one worker and fork (got {workers} workers)")
        global _translators
        _translators = translators  # what these workers inherit, even if another pool was made since
        self.translators = translators
        self._lock = threading.Lock()
        self._request_ids = itertools.count()
        self._closed = False
        self._workers = [_Worker(self) for _ in range(workers)]
        # Before multiprocessing's own exit hook ends the workers (hooks run last-registered first), so that their
        # readers see a closed pool and fork no replacement while the interpreter shuts down.
        atexit.register(self.close)

    @property
    def workers(self) -> int:
        return len(self._workers)

    def worker_pids(self) -> list[int]:
        return [worker.process.pid for worker in self._workers]

    def trace(self, name: str, text: str, **options) -> TracedTranslation:
        """`Translator.trace(text, **options)` of translator `name`, in the worker holding the fewest requests."""
        return self._run(name, "trace", text, options)

    def detachment(self, name: str, text: str, **options) -> ScoredDetachment:
        """`Translator.detachment(text, **options)` of translator `name` in a worker: its teacher-forced pass and
        ALTI+ run on a core of their own, not on the web server's threads beside every other user's request."""
        return self._run(name, "detachment", text, options)

    def reconstruction(self, name: str, text: str, **options):
        """`Translator.reconstruction(text, **options)` of translator `name`, the evaluator of another's translation
        (model/explain/verdict.py), in a worker: a share of its passes, where the pool splits them."""
        return self._run(name, "reconstruction", text, options)

    def _run(self, name: str, method: str, text: str, options: dict):
        """`method` ("trace", "detachment" or "reconstruction") of translator `name`, in the worker holding the
        fewest requests."""
        request_id = next(self._request_ids)
        with self._lock:
            worker = min(self._workers, key=lambda w: len(w.pending))
            future = worker.submit(request_id, (request_id, name, method, text, options))
        try:
            return future.result()
        except WorkerDied:
            log.error("a trace worker died; running this request in-process")
        except NotInWorker:  # loaded after the workers were forked, and `refresh` has not run yet
            pass
        return getattr(self.translators[name], method)(text, **options)

    def refresh(self) -> None:
        """New workers forked from this process as it is now (holding the models it holds now); the old ones end
        once they have answered their requests."""
        with self._lock:
            if self._closed:
                return
            global _translators
            _translators = self.translators
            old, self._workers = self._workers, [_Worker(self) for _ in self._workers]
        for worker in old:
            worker.retire()

    def _replace(self, worker: _Worker) -> None:
        """A new worker in place of one that ended (unless the pool is closing)."""
        with self._lock:
            if not self._closed and worker in self._workers:
                global _translators
                _translators = self.translators
                self._workers[self._workers.index(worker)] = _Worker(self)

    def close(self) -> None:
        """Stop every worker (once; later calls do nothing)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        atexit.unregister(self.close)
        for worker in self._workers:
            worker.stop()
