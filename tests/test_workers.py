"""Traces in forked worker processes: the same answers as in-process, errors passed on, dead workers replaced."""

import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from attention_inspector.model.serving.checkpoint import load_all
from attention_inspector.model.serving.translator import InputError
from attention_inspector.model.serving.workers import NICENESS, TracePool, can_fork
from tests.conftest import log_probability_rounding, model_rounding

pytestmark = pytest.mark.skipif(not can_fork(), reason="trace workers are forked")
MODEL = "toy-en-de"


@pytest.fixture(scope="module")
def pool(toy_checkpoints):
    translators, _ = load_all(toy_checkpoints[0])
    pool = TracePool(translators, workers=2)
    yield pool
    pool.close()


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_worker_trace_equals_the_in_process_trace(pool):
    for name in pool.translators:
        local = pool.translators[name].trace("A dog runs in the park.", top_k=3)
        remote = pool.trace(name, "A dog runs in the park.", top_k=3)
        assert (remote.text, remote.source_tokens, remote.target_tokens, remote.top_tokens) == \
            (local.text, local.source_tokens, local.target_tokens, local.top_tokens)
        for field in ("probabilities", "top_probabilities", "encoder_attention", "decoder_attention",
                      "cross_attention"):
            np.testing.assert_array_equal(getattr(remote.trace, field), getattr(local.trace, field))


@pytest.mark.parametrize("asked", ["given", "traced"])
def test_a_detachment_scored_in_a_worker_is_the_in_process_one_and_leaves_this_process_alone(pool, monkeypatch,
                                                                                             asked):
    """The detachment score of every model (a Transformer's ALTI+, a GRU's attention and log-probabilities) is
    computed in a worker, of a given translation or with a trace (`detach`, in the worker's batch): the same
    numbers, and this process's `Translator.detachment` and `traced`, failing here, are not run."""
    text = "A dog runs in the park."
    local = {name: translator.detachment(text, list(translator.trace(text).target_tokens))
             for name, translator in pool.translators.items()}
    # The decoding's own pass (a batch in the worker) or a teacher-forced one, its sums in other orders: equal to
    # their rounding (tests/conftest.py), a share's or a peak's (at most 1) and a log-probability's.
    roundings = {name: {"log_probabilities": log_probability_rounding(translator, text),
                        "attention_peaks": model_rounding(translator.model.config),
                        "source_shares": model_rounding(translator.model.config)}
                 for name, translator in pool.translators.items()}
    for translator in pool.translators.values():
        for method in ("detachment", "traced"):
            monkeypatch.setattr(translator, method, lambda *args, **kwargs: pytest.fail("scored in this process"))
    for name, expected in local.items():
        scored = (pool.detachment(name, text, translation=expected.target_tokens) if asked == "given"
                  else pool.trace(name, text, detach=True).detachment)
        assert scored.target_tokens == expected.target_tokens and scored.unknown == expected.unknown
        for field in ("log_probabilities", "attention_peaks", "source_shares"):
            mine, theirs = getattr(scored.measured, field), getattr(expected.measured, field)
            assert (mine is None) == (theirs is None)
            if mine is not None:
                np.testing.assert_allclose(mine, theirs, rtol=0, atol=roundings[name][field], err_msg=field)
    assert any(scored.contributions is not None for scored in local.values())  # a Transformer among them


def test_input_errors_reach_the_caller_with_their_message(pool):
    with pytest.raises(InputError, match="the input is empty"):
        pool.trace(MODEL, "   ")


def test_a_killed_worker_is_replaced_and_its_request_still_answered(pool):
    expected = pool.translators[MODEL].trace("A cat sleeps.").text
    before = pool.worker_pids()
    os.kill(before[0], signal.SIGKILL)
    time.sleep(0.5)
    assert pool.trace(MODEL, "A cat sleeps.").text == expected
    after = pool.worker_pids()
    assert before[0] not in after and before[1] in after and len(after) == 2  # the dead one was replaced
    assert alive(after[0])
    for _ in range(3):
        assert pool.trace(MODEL, "A cat sleeps.").text == expected  # by every worker


def test_workers_decode_at_a_lower_priority_than_the_web_server(pool):
    """The server's own answers (view changes, refusals) come before a worker's steps: every worker, the one that
    replaced the worker the test before killed too, runs NICENESS above this process."""
    own = os.getpriority(os.PRIO_PROCESS, 0)
    assert [os.getpriority(os.PRIO_PROCESS, pid) for pid in pool.worker_pids()] == \
        [min(own + NICENESS, 19)] * len(pool.worker_pids())


def test_workers_end_when_the_app_process_is_killed(toy_checkpoints):
    script = ("import sys, time; from attention_inspector.model.serving.checkpoint import load_all; "
              "from attention_inspector.model.serving.workers import TracePool; "
              f"pool = TracePool(load_all({str(toy_checkpoints[0])!r})[0], 2); "
              "print(*pool.worker_pids(), flush=True); time.sleep(120)")
    app = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                           cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    workers = [int(pid) for pid in app.stdout.readline().split()]
    assert len(workers) == 2 and all(alive(pid) for pid in workers)
    app.kill()
    app.wait()
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(alive(pid) for pid in workers)


def test_at_exit_the_workers_are_stopped_and_none_is_forked_to_replace_them(toy_checkpoints):
    """A pool left open stops its workers when the app's process exits normally, before multiprocessing's own exit
    hook kills them; killed, their readers used to fork replacements while the interpreter shut down."""
    script = ("import atexit, os, torch; from attention_inspector.model.serving.checkpoint import load_all; "
              "from attention_inspector.model.serving.workers import TracePool; "
              "report = lambda: print(pool.worker_pids() == pids, *map(alive, pids), flush=True); "
              "alive = lambda pid: os.path.exists(f'/proc/{pid}') and "
              "open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[0] != 'Z'; "
              "atexit.register(report); "  # registered first, so it runs after the pool's own hook
              f"pool = TracePool(load_all({str(toy_checkpoints[0])!r})[0], 2); pids = pool.worker_pids(); "
              "pool.trace('toy-en-de', 'A dog runs.')")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False", "False"]  # the same workers, both ended


def test_a_worker_forked_after_torch_has_run_its_threads_traces(toy_checkpoints):
    """Workers are forked again after the app has computed (a model loaded, a dead worker replaced). A forked child
    inherits the parent's OpenMP thread pool without its threads, and its first parallel matrix product waited for
    them for ever: the page's translations hung. A worker traces on one thread, as it has one core to itself."""
    script = ("import torch; from attention_inspector.model.serving.checkpoint import load_all; "
              "from attention_inspector.model.serving.workers import TracePool; "
              "torch.set_num_threads(2); torch.nn.Linear(512, 512)(torch.randn(512, 512)); "
              f"pool = TracePool(load_all({str(toy_checkpoints[0])!r})[0], 1); "
              "print(pool.trace('toy-en-de', 'A dog runs in the park with a red ball.').text, flush=True)")
    try:
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                              cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    except subprocess.TimeoutExpired:
        pytest.fail("a worker forked after torch had run its threads did not answer within 60 s: it hangs")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()


def test_concurrent_requests_decoded_together_get_their_own_traces(toy_checkpoints):
    """One worker, twelve requests at once for two checkpoints (a Transformer, batched, and the GRU, traced
    between steps), some of them unusable: every answer is its own sentence's."""
    translators, _ = load_all(toy_checkpoints[0])
    texts = ["A dog runs in the park.", "A man plays.", "A red ball.", "A woman plays with a child in the park.",
             "A child runs.", "", "A dog plays with a red ball in the park with a man."]
    jobs = [(name, text) for name in ("toy-en-de", "toy-rnn") for text in texts[:6]] + [(MODEL, texts[6])]
    pool = TracePool(translators, workers=1)
    try:
        with ThreadPoolExecutor(len(jobs)) as executor:
            answers = list(executor.map(lambda job: capture(pool.trace, *job), jobs))
    finally:
        pool.close()
    for (name, text), answer in zip(jobs, answers):
        if not text:
            assert isinstance(answer, InputError)
            continue
        alone = translators[name].trace(text)
        assert (answer.text, answer.target_tokens, answer.top_tokens) == (alone.text, alone.target_tokens,
                                                                           alone.top_tokens)
        for field in ("probabilities", "cross_attention"):  # at most 1, decoded in a batch or alone
            np.testing.assert_allclose(getattr(answer.trace, field), getattr(alone.trace, field), rtol=0,
                                       atol=model_rounding(translators[name].model.config), err_msg=field)


def capture(call, *args):
    """What `call(*args)` returns, or the exception it raises."""
    try:
        return call(*args)
    except Exception as error:
        return error


def test_the_app_forks_a_worker_per_core(services):
    """Decoding takes every core the server leaves (the workers' lower priority keeps the server's answers first)."""
    from attention_inspector.model.nets.cores import available_cores

    assert services.pool.workers == available_cores()
    assert all(os.getpriority(os.PRIO_PROCESS, pid) > os.getpriority(os.PRIO_PROCESS, 0)
               for pid in services.pool.worker_pids())
