"""A crowd of real pages: many headless Chromium pages on the app at the same time, each a user of its own.

    python benchmarks/crowd.py [--pages 32] [--model en-de] [--steps 8] [--tokens 20] [--data DIR]

Starts `python app.py` on a free loopback port and opens one Chromium (headless, through Playwright) with a
browser context per page (its own cookies and connections, as separate people have). First one page alone, then
`--pages` pages at once, each with its own sentence (Multi30k val/test, about `--tokens` tokens), does what a user
does (`visit`): opens the app; translates its sentence, another page's, and its own again; steps with the keyboard
(Home, then → `--steps` times, then ← three times, each after a pause of `THINK_MS` as a person makes); switches
the head (head 2) and the kind (decoder self-attention); opens one what-if tab and asks its question (head
statistics, the beam search or where each word came from, in turn). Every time is the page's own clock, from the
input event (the click, the key) to the first animation frame that shows the result.

Prints the CPU, the Chromium version and the pages it held at once, then translate p50/p95 for the page alone and
for the crowd, Next (→) p95 on every page (goal: under 150 ms on each), the what-if answers, and the checks: every
page ends showing its own sentence's translation and its own steps at the step it stepped to, in the kind and head
it chose (no cross-talk, no stale model), and no page's console has an error; and where the machine's CPU went while
the pages ran at once: Chromium's processes, the app's (server and trace workers) and Playwright's. Exits with status
1 if a check fails.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from browser_latency import (CHROMIUM, CHROMIUM_ARGS, CLICK_UNTIL, INPUT_CLOCK, TRANSLATED, p95,  # noqa: E402
                             since_input)
from load import cpu_model, free_port, pick_sentences, process_cpu_seconds, process_tree, start_server  # noqa: E402

from attention_inspector.model.keys import DECODER, KIND_LABELS  # noqa: E402
from attention_inspector.model.nets.cores import available_cores  # noqa: E402
from attention_inspector.model.serving.checkpoint import load_checkpoint  # noqa: E402
from attention_inspector.model.training.evaluate import DEFAULT_DATA  # noqa: E402
from attention_inspector.ui.operations import FIRST_STEP  # noqa: E402
from attention_inspector.ui.session import to_arrays  # noqa: E402
from attention_inspector.viz.attention import escape_text  # noqa: E402
from attention_inspector.viz.views import step_heading  # noqa: E402
from tests.pages import tab_button  # noqa: E402

# The heatmap's title, or '' while there is none.
TITLE = "(document.querySelector('#attention .js-plotly-plot')?.layout?.title?.text || '')"
THINK_MS = 300  # a user's pause between reading an answer and pressing a key
# One what-if tab per page, in turn: (tab, button, the page function that holds once its answer is drawn).
QUESTIONS = (
    ("Head statistics", "#head-statistics", """() =>
        document.querySelector('#status textarea')?.value.startsWith('Statistics of')
        && (document.querySelector('#head-table')?.innerText || '').includes('encoder.1.1')"""),
    ("Beam search", "#beam", """() => document.querySelector('#status textarea')?.value.startsWith('Beam search')
        && document.querySelectorAll('#n-best tbody tr').length > 0"""),
    ("Where each word came from", "#contributions", """() =>
        document.querySelector('#status textarea')?.value.startsWith('Contributions of')
        && !document.querySelector('#source-share').classList.contains('empty')
        && document.querySelector('#source-share .js-plotly-plot')"""),
)


@dataclass
class Expected:
    """What a page must show for its sentence: the translation, and the heatmap title's step line at every step."""

    text: str
    translation: str
    steps: list[str]

    @classmethod
    def of(cls, translator, text: str) -> "Expected":
        traced = translator.trace(text)
        trace = to_arrays(traced)
        return cls(text, traced.text, [escape_text(step_heading(trace, t)[0]) for t in range(trace.steps)])


@dataclass
class Visit:
    """One page's timings (ms, the page's clock) and what went wrong on it."""

    translate: list[float] = field(default_factory=list)
    step: list[float] = field(default_factory=list)
    question: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)


async def timed(page, action, done: str, arg=None) -> float:
    """Milliseconds by the page's clock from the last input event of `action` to the first frame where `done`."""
    await page.evaluate("() => { window.inputAt = null; }")
    await action()
    handle = await page.wait_for_function(since_input(done), arg=arg, timeout=120000)
    return await handle.json_value()


async def at_step(page, expected: Expected, step: int, key: str) -> float:
    """After a user's pause, press `key` and wait until the heatmap shows `step` (1-based) of the page's own
    sentence."""
    await page.wait_for_timeout(THINK_MS)
    return await timed(page, lambda: page.keyboard.press(key), f"(line) => {TITLE}.includes(line)",
                       expected.steps[step - 1])


async def choose(page, elem_id: str, option: str) -> None:
    await page.click(f"#{elem_id} input")
    await page.get_by_role("option", name=option, exact=True).click()


async def visit(browser, url: str, expected: Expected, other: Expected, steps: int, question: int) -> Visit:
    """A user's visit on a page of its own: it translates its sentence, `other`, then its own again, and asks the
    `question`-th of `QUESTIONS`."""
    done = Visit()
    context = await browser.new_context(viewport={"width": 1400, "height": 900})
    # 32 pages on two cores: a page's load, or a click on a menu's option, may wait longer than Playwright's 30 s.
    context.set_default_timeout(300000)
    page = await context.new_page()
    page.on("console", lambda message: done.errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: done.errors.append(str(error)))
    await page.add_init_script(f"({INPUT_CLOCK})()")
    try:
        await page.goto(url)
        await page.wait_for_function(f"() => {TITLE}.includes('step ')", timeout=300000)
        for sentence in (expected, other, expected):
            view = [sentence.translation, sentence.steps[min(FIRST_STEP, len(sentence.steps)) - 1]]
            await page.fill("#source textarea", sentence.text)
            done.translate.append(await page.evaluate(CLICK_UNTIL, ["#translate", TRANSLATED, view]))
        await page.evaluate("() => document.activeElement?.blur()")  # the keys step where no field has the focus
        await at_step(page, expected, 1, "Home")
        last = min(steps + 1, len(expected.steps))
        for step in range(2, last + 1):
            done.step.append(await at_step(page, expected, step, "ArrowRight"))
        for step in range(last - 1, last - 4, -1):
            await at_step(page, expected, step, "ArrowLeft")
        step = last - 3
        await choose(page, "head", "Head 2")
        await page.wait_for_function(f"() => {TITLE}.includes('head 2')", timeout=120000)
        await choose(page, "kind", KIND_LABELS[DECODER])
        await page.wait_for_function(f"() => {TITLE}.startsWith('{KIND_LABELS[DECODER]}')", timeout=120000)
        tab, button, answered = QUESTIONS[question % len(QUESTIONS)]
        await tab_button(page, tab).click()
        done.question.append(await timed(page, lambda: page.click(button), answered))
        shown = await page.evaluate(f"""() => ({{translation: document.querySelector('#translation textarea').value,
            title: {TITLE}}})""")
        if shown["translation"] != expected.translation:
            done.wrong.append(f"translation {shown['translation']!r}, not {expected.translation!r}")
        for part in (expected.steps[step - 1], KIND_LABELS[DECODER], "head 2"):
            if part not in shown["title"]:
                done.wrong.append(f"heatmap {shown['title']!r} lacks {part!r}")
    except Exception as error:  # noqa: BLE001  (a page that fails is reported with the others, not alone)
        title = await page.evaluate(f"() => {TITLE}") if not page.is_closed() else None
        done.wrong.append(f"{type(error).__name__}: {str(error).splitlines()[0]} (the heatmap: {title!r})")
    finally:
        await context.close()
    return done


class CpuSampler(threading.Thread):
    """The CPU seconds (user + system, from /proc) that the app and the browser spend while it runs: every process
    under this one, sampled every `every` s, sorted into the app's (`app_pid` and its trace workers), Playwright's
    driver (node) and Chromium's. A process counts from its reading when sampling starts (0 if it starts later)
    to its last reading, so a renderer that exits between two samples loses at most one interval."""

    def __init__(self, app_pid: int, every: float = 0.25):
        super().__init__(daemon=True)
        self.app_pid, self.every, self.stopped = app_pid, every, threading.Event()
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self.part: dict[int, str] = {}
        self.began = self.ended = self.script = 0.0

    def sample(self, starting: bool = False) -> None:
        app = set(process_tree(self.app_pid))
        for pid in process_tree(os.getpid())[1:]:
            try:
                used = process_cpu_seconds(pid)
                name = Path(f"/proc/{pid}/comm").read_text().strip()
            except (FileNotFoundError, ProcessLookupError):  # it ended while being read
                continue
            self.first.setdefault(pid, used if starting else 0.0)
            self.last[pid] = used
            self.part.setdefault(pid, "app" if pid in app else "driver" if name == "node" else "Chromium")

    def run(self) -> None:
        self.began, script = time.perf_counter(), time.process_time()
        self.sample(starting=True)
        while not self.stopped.wait(self.every):
            self.sample()
        self.sample()
        self.ended, self.script = time.perf_counter(), time.process_time() - script

    def stop(self) -> None:
        self.stopped.set()
        self.join()

    def seconds(self) -> dict[str, float]:
        """CPU seconds by part ("app", "Chromium", "driver", and "script": this process), and "wall": the seconds
        sampled."""
        used = {"app": 0.0, "Chromium": 0.0, "driver": 0.0}
        for pid, last in self.last.items():
            used[self.part[pid]] += last - self.first[pid]
        return used | {"script": self.script, "wall": self.ended - self.began}


async def crowd(url: str, expected: list[Expected], steps: int,
                sampler: CpuSampler | None = None) -> tuple[Visit, list[Visit]]:
    """One page alone, then one page per sentence of `expected[1:]` at once (`sampler` running while they are)."""
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        alone = await visit(browser, url, expected[0], expected[1], steps, 0)
        crowded = expected[1:]
        if sampler is not None:
            sampler.start()
        visits = await asyncio.gather(*(visit(browser, url, sentence, crowded[number - 1], steps, number)
                                        for number, sentence in enumerate(crowded)))
        if sampler is not None:
            sampler.stop()
        await browser.close()
    return alone, list(visits)


def percentiles(values: list[float]) -> str:
    return f"p50 {statistics.median(values):.0f} ms, p95 {p95(values):.0f} ms (n={len(values)})" if values else "none"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoints", default=str(ROOT / "checkpoints"))
    parser.add_argument("--model", default="en-de")
    parser.add_argument("--data", default=DEFAULT_DATA)
    parser.add_argument("--pages", type=int, default=32)
    parser.add_argument("--steps", type=int, default=8, help="→ presses timed per page")
    parser.add_argument("--tokens", type=int, default=20)
    args = parser.parse_args()

    translator = load_checkpoint(Path(args.checkpoints) / args.model)
    candidates = pick_sentences(translator, args.data, 4 * (args.pages + 1), args.tokens)
    # Sentences whose translations have the steps to press through, each different.
    sentences = [s for s in candidates if len(translator.trace(s).target_tokens) > args.steps + 4][:args.pages + 1]
    expected = [Expected.of(translator, text) for text in sentences]
    version = subprocess.run([CHROMIUM, "--version"], capture_output=True, text=True).stdout.strip()
    print(f"{cpu_model()}; {version}; model {args.model}; {len(expected) - 1} pages at once")
    port = free_port()
    server = start_server(Path(args.checkpoints), port, 1000, Path("/tmp") / f"crowd-{port}.log")
    sampler = CpuSampler(server.pid)
    try:
        alone, visits = asyncio.run(crowd(f"http://127.0.0.1:{port}/", expected, args.steps, sampler))
    finally:
        server.terminate()
        server.wait(timeout=30)
    everyone = [alone, *visits]
    print(f"translate, one page alone: {percentiles(alone.translate)}")
    print(f"translate, {len(visits)} pages at once: {percentiles([t for v in visits for t in v.translate])}")
    print(f"Next (→), one page alone: {percentiles(alone.step)}")
    worst = [p95(v.step) for v in visits if v.step]
    if worst:
        print(f"Next (→), {len(visits)} pages at once: {percentiles([t for v in visits for t in v.step])}; each "
              f"page's p95 from {min(worst):.0f} to {max(worst):.0f} ms, {sum(w < 150 for w in worst)} of "
              f"{len(visits)} under 150 ms")
    for number, (tab, _, _) in enumerate(QUESTIONS):
        asked = [t for i, v in enumerate(visits) if i % len(QUESTIONS) == number for t in v.question]
        print(f"{tab}, pages at once: {percentiles(asked)}")
    used, cores = sampler.seconds(), available_cores()
    machine = used["wall"] * cores
    print(f"CPU while the {len(visits)} pages ran ({used['wall']:.0f} s on {cores} cores, {machine:.0f} core-s): "
          + ", ".join(f"{part} {used[part]:.0f} s ({used[part] / machine:.0%})"
                      for part in ("Chromium", "app", "driver", "script")) + " (app: the server and its trace "
          "workers; driver and script: Playwright's, driving the pages)")
    wrong = [(i, w) for i, v in enumerate(everyone) for w in v.wrong]
    errors = [(i, e) for i, v in enumerate(everyone) for e in v.errors]
    print(f"pages showing another sentence, view or a failure: {len({i for i, _ in wrong})}; console errors: "
          f"{len(errors)}")
    for number, problem in wrong + errors:
        print(f"  page {number}: {problem}")
    if wrong or errors:
        sys.exit(1)


if __name__ == "__main__":
    main()
