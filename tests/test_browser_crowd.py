"""Several real pages at once (benchmarks/crowd.py, small): each user's page ends on its own sentence and view."""

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # drives a real browser

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

SENTENCES = ("A man runs in the park with a red ball and a dog.",  # 12 steps or more for the toy translator each
             "A woman plays with a child and a dog in the park.",
             "A red dog runs with a ball in the park with a man.",
             "A child plays in the park with a woman and a red ball.",
             "A dog plays with a man and a woman in a red park.")


def test_four_pages_at_once_each_end_on_their_own_translation_and_view_with_no_console_error(server, services):
    from crowd import Expected, crowd

    if not shutil.which("/usr/bin/chromium") and not os.environ.get("CI"):
        pytest.skip("Debian's chromium is not installed (.ci/run installs it)")
    translator = services.translators["toy-en-de"]
    expected = [Expected.of(translator, text) for text in SENTENCES]
    assert len({e.translation for e in expected}) == len(expected)  # a page showing another's would be seen
    alone, visits = asyncio.run(asyncio.wait_for(crowd(server, expected, steps=4), 300))
    assert len(visits) == 4
    for visit in (alone, *visits):
        assert not visit.wrong and not visit.errors, (visit.wrong, visit.errors)
        assert len(visit.translate) == 3 and len(visit.step) == 4 and len(visit.question) == 1


def test_the_cpu_a_crowd_takes_is_told_apart_by_process():
    from crowd import CpuSampler

    busy = "import time\nend = time.process_time() + {}\nwhile time.process_time() < end: pass"
    app = subprocess.Popen([sys.executable, "-c", busy.format(0.8)])
    sampler = CpuSampler(app.pid, every=0.05)
    sampler.start()
    subprocess.run([sys.executable, "-c", busy.format(0.4)], check=True)  # another process, ended while sampled
    app.wait()
    sampler.stop()
    used = sampler.seconds()
    # Each busy loop's CPU and its interpreter's start, less what the last interval or the first reading missed.
    assert 0.5 < used["app"] < 1.1 and 0.3 < used["Chromium"] < 0.7 and used["driver"] == 0, used
    assert used["wall"] >= 0.4 and 0 <= used["script"] < 0.5
