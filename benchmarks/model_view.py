"""What opening the model view costs on a long sentence: the figure's JSON, and its drawing in a real browser.

    python benchmarks/model_view.py [--url http://127.0.0.1:7860/] [--runs 3] [--units pieces words]

Without `--url`, starts `python app.py` on the shipped checkpoints on a free loopback port. Translates a 70-word
sentence with en-de (72 pieces in, 45 steps out: 3 layers x 8 heads of 45 x 72 cells in cross-attention) in a new
page, then, in each of `--units`, ticks *Model view* (`--runs` times, each in a new page: a user's first opening, a
figure drawn before being cached) and prints, by the page's clock from the click: when the model view is first drawn, and when the page has settled (no plot drawn for a second since: the
figures.js margin measuring and redrawing included), the milliseconds Plotly took over all draws, and how many it
made. First it prints, in Python, how long `view_frames` takes to build the view with its model view and the size
of the model view's JSON. Times are medians over the runs; nothing is asserted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from load import cpu_model, free_port, start_server  # noqa: E402  (benchmarks/load.py)

from attention_inspector.model.serving.checkpoint import load_checkpoint  # noqa: E402
from attention_inspector.ui.session import to_arrays  # noqa: E402
from attention_inspector.viz.views import view_frames  # noqa: E402
from tests.conftest import CHROMIUM, CHROMIUM_ARGS  # noqa: E402

TEXT = ("A man in a blue shirt and a woman in a red dress are walking down a busy street in the city while two "
        "children play with a small brown dog near a fountain , and an old man with a grey beard sells newspapers "
        "and flowers on the corner of the square next to a large church where many people are waiting for the bus "
        "to the beach .")

# Every Plotly drawing on the page, recorded: [where ("overview", "measuring" or another plot's id), start, end].
RECORD = """() => {
    const Plotly = window.Plotly, react = Plotly.react;
    window.drawings = [];
    Plotly.react = function (target, ...rest) {
        const began = performance.now();
        const where = target.closest('#overview') ? 'overview' : target.closest('[id]')?.id || 'measuring';
        const drawn = react.call(this, target, ...rest);
        Promise.resolve(drawn).then(() => window.drawings.push([where, began, performance.now()]));
        return drawn;
    };
}"""

# Tick the model view and resolve, once the page has drawn nothing for `quiet` ms, to [first drawn, settled, Plotly's
# ms over all drawings, drawings] (ms from the click, by the page's clock).
OPEN = """async (quiet) => {
    window.drawings = [];
    const began = performance.now();
    document.querySelector('#model-view input').click();
    await new Promise((resolve) => {
        const check = () => {
            const last = Math.max(0, ...window.drawings.map((d) => d[2]));
            if (window.drawings.some((d) => d[0] === 'overview') && performance.now() - last > quiet) resolve();
            else setTimeout(check, 50);
        };
        check();
    });
    const overview = window.drawings.filter((d) => d[0] === 'overview');
    return [overview[0][2] - began, Math.max(...window.drawings.map((d) => d[2])) - began,
            window.drawings.reduce((sum, d) => sum + d[2] - d[1], 0), window.drawings.length];
}"""


def python_side(units: str) -> None:
    translator = load_checkpoint(ROOT / "checkpoints" / "en-de")
    trace = replace(to_arrays(translator.trace(TEXT)), units=units)
    view_frames(trace, "cross", 0, 0, True)  # labels cached, as on a server that has run a while
    began = time.perf_counter()
    frames = view_frames(trace, "cross", 0, 0, True)
    took = time.perf_counter() - began
    print(f"{units}: {len(trace.source_tokens)} source pieces, {trace.steps} steps; view_frames with the model view "
          f"{took * 1000:.0f} ms, the model view's JSON {len(frames['overview']) / 1e6:.2f} MB")


def browser_side(url: str, runs: int, units: list[str]) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        for unit in units:
            results = []
            for _ in range(runs):  # each in a new page, as a user first opens it (a figure drawn before is cached)
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                page.goto(url)
                page.wait_for_function("() => document.querySelector('#attention .js-plotly-plot')", timeout=120000)
                page.fill("#source textarea", TEXT)
                page.click("#translate")
                page.wait_for_function("() => document.querySelector('#translation textarea')?.value.length > 100"
                                       " && document.querySelector('#status textarea')?.value"
                                       ".startsWith('Translated')", timeout=120000)
                page.locator(f"#units input[value={unit}]").check()
                page.wait_for_function("(unit) => document.querySelector('#attention .js-plotly-plot')?.layout"
                                       "?.title.text.includes(unit === 'words' ? 'word ' : 'step ')", arg=unit,
                                       timeout=120000)
                page.get_by_text("Model view: every layer").click()  # the accordion
                page.locator("#model-view input").scroll_into_view_if_needed()
                page.wait_for_timeout(2000)
                page.evaluate(RECORD)
                results.append(page.evaluate(OPEN, 1000))
                page.close()
            first, settled, plotly, drawings = (statistics.median(values) for values in zip(*results))
            print(f"{unit}: model view ticked -> drawn {first:.0f} ms, settled {settled:.0f} ms; Plotly {plotly:.0f} ms "
                  f"in {drawings:.0f} drawings (medians of {runs}: {[[round(v) for v in r] for r in results]})")
        browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="a running app (default: start one on the shipped checkpoints)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--units", nargs="+", default=["pieces", "words"], choices=["pieces", "words"])
    args = parser.parse_args()
    print(f"CPU: {cpu_model()}")
    for unit in args.units:
        python_side(unit)
    if args.url:
        browser_side(args.url, args.runs, args.units)
        return
    port = free_port()
    server = start_server(ROOT / "checkpoints", port, 100, Path("/tmp/model_view_app.log"))
    try:
        browser_side(f"http://127.0.0.1:{port}/", args.runs, args.units)
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
