"""One request's work shared out over the cores (model/nets/cores.py): each call's result in order, in the caller's
grad mode and context; a call that no spare thread has started by then is run by the caller; errors reach it."""

import contextvars
import os
import threading

import pytest
import torch

from attention_inspector.model.nets import cores
from attention_inspector.model.nets.cores import available_cores, shared

ASKED_BY = contextvars.ContextVar("asked_by", default=None)


@pytest.mark.parametrize("cpu_max,cap", [("max 100000", None), ("150000 100000", 2), ("50000 100000", 1),
                                         ("100000 100000", 1), ("garbled", None), (None, None)])
def test_available_cores_respects_a_container_cpu_quota(tmp_path, cpu_max, cap):
    cpu_max_file = tmp_path / "cpu.max"
    if cpu_max is not None:
        cpu_max_file.write_text(cpu_max + "\n")
    affinity = len(os.sched_getaffinity(0))
    assert available_cores(cpu_max_file) == (affinity if cap is None else min(affinity, cap))


@pytest.fixture
def two_cores(monkeypatch):
    """Two parts whatever this machine has, with a spare thread of its own (the process's may be busy)."""
    monkeypatch.setattr(cores, "parts", lambda: 2)
    monkeypatch.setattr(cores, "_spare", None)
    yield
    cores.spare_threads().shutdown(wait=True)


def seen() -> tuple[str, bool, bool, str | None]:
    return (threading.current_thread().name, torch.is_grad_enabled(), torch.is_inference_mode_enabled(),
            ASKED_BY.get())


def test_calls_run_beside_the_caller_in_its_grad_mode_and_context(two_cores):
    ASKED_BY.set("user 1")
    with torch.inference_mode():
        first, second = shared([seen, seen])
    assert first == (threading.current_thread().name, False, True, "user 1")
    assert second[0].startswith("spare-core") and second[1:] == (False, True, "user 1")
    with torch.enable_grad():
        assert [call[1:] for call in shared([seen, seen, seen])] == [(True, False, "user 1")] * 3
    assert shared([lambda: 1]) == [1] and shared([]) == []


def test_a_call_no_spare_thread_has_started_is_run_by_the_caller(two_cores):
    busy, free = threading.Event(), threading.Event()
    other_user = cores.spare_threads().submit(lambda: (busy.set(), free.wait(10)))
    busy.wait(10)
    names = shared([seen, seen, seen])  # the spare thread is busy: the caller runs all three, in order
    assert [name for name, *_ in names] == [threading.current_thread().name] * 3
    free.set()
    assert other_user.result(10)[1] is True


def test_errors_reach_the_caller_and_a_failed_callers_share_leaves_the_rest_unrun(two_cores):
    def fails():
        raise KeyError("spare")
    with pytest.raises(KeyError, match="spare"):
        shared([lambda: 1, fails])
    busy, free, ran = threading.Event(), threading.Event(), []
    cores.spare_threads().submit(lambda: (busy.set(), free.wait(10)))
    busy.wait(10)
    with pytest.raises(KeyError):
        shared([fails, lambda: ran.append(1)])  # a user's Stop, say: what is left is not wanted
    free.set()
    cores.spare_threads().shutdown(wait=True)
    assert ran == []
