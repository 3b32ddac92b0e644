"""The load benchmark runs end to end against a real server: concurrent sessions, no errors, no cross-talk
(on one core, so the option that pins it is exercised too), as the page sends requests (outside Gradio's queue) and
through Gradio's queue."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # starts the app as a server and loads it with clients

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "load.py"


@pytest.mark.parametrize("via", ["page", "gradio"])
def test_concurrent_users_get_their_own_answers(toy_checkpoints, via, tmp_path):
    root, data = toy_checkpoints
    records = tmp_path / "records.json"
    run = subprocess.run([sys.executable, str(SCRIPT), "--checkpoints", str(root), "--model", "toy-en-de",
                          "--data", str(data), "--clients", "4", "--requests", "2", "--waves", "2",
                          "--tokens", "6", "--session-capacity", "4", "--cores", "1", "--via", via,
                          "--records", str(records)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"requests {via}" in run.stdout
    assert "requests: 16 translations" in run.stdout and "on the same 1 cores" in run.stdout
    assert "errors: 0; cross-talk: 0" in run.stdout and "page loads failed: 0" in run.stdout
    assert "page load latency (its load event, 8 pages opened 4 at once): p50 " in run.stdout
    # Every request's timings, by user (wave.user) and request number, as the summary counted them, and every
    # user's page load.
    timed = json.loads(records.read_text())
    users = [f"{wave}.{user}" for wave in (1, 2) for user in range(1, 5)]
    assert sorted((r["user"], r["request"]) for r in timed["requests"]) == sorted(
        (user, request) for user in users for request in (0, 1))
    assert all(r["error"] is None and 0 < r["translate_s"] and 0 < r["view_s"] and 0 <= r["sent_at_s"]
               for r in timed["requests"])
    assert sorted(p["user"] for p in timed["pages"]) == users
    assert all(p["error"] is None and 0 < p["page_s"] for p in timed["pages"])
