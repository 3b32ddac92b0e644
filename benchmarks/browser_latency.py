"""What a user feels, in a real browser: page load, translate and step latency of the app on the shipped checkpoint.

    python benchmarks/browser_latency.py [--model en-de] [--steps 20] [--tokens 20] [--sentences 5] [--neuron-only]
    python benchmarks/browser_latency.py --tokens 30 --verdict-only

First, the floor: a minimal Gradio page whose button redraws one `gr.Plot` (a 20x21 heatmap) from the server,
click -> redrawn, p50/p95 over 20 clicks; a translation is then also given as a multiple of that round trip.

Starts `python app.py` on a free loopback port and drives Debian's Chromium (headless, through Playwright) at
1400x900. Prints the CPU, then: page load -> the first heatmap drawn; the neuron view against a view change (a cell
clicked -> its row's vectors drawn, against another head chosen -> its heatmap drawn: `neuron_latencies`;
`--neuron-only` stops there; `--verdict-only`: translate -> heatmap and then -> the verdict under it drawn,
`verdict_latencies`, and stops); translate (click) -> the new heatmap
drawn, over `--sentences` sentences (by the page's clock three times each); a shared link (a new tab opening
`?model=..&text=..&step=3&kind=decoder&layer=2&head=2`) -> that view drawn, over the same ones; Next (click) -> the
heatmap redrawn at the next step, p50/p95 over `--steps` steps of three sentences in the single-head and
all-heads views and of one in the model view (until its every-head figure is redrawn too); the same steps pressed
with the → key as a person presses it (150 ms after each step shows), timed from the key's input event, so that a
press waiting behind the page's other work counts that wait; and where ten clicks at ten per second land.
Times are taken inside the page, from the click (or the key's event) to the first animation frame after Plotly has
drawn the new step (what the user sees).

Then what-if and every tab's answer, on the same sentences, each against a plain translation of the same
sentence: a branch (Branch with the second candidate at the step on screen -> its heatmap drawn), a head switched
off (a tick in the cross-attention grid -> the masked translation and its per-token chart drawn), the beam view
(Run beam search -> the n-best table filled), head statistics (-> the table filled), word alignments (-> the
Pharaoh lines), where each word came from (-> its chart drawn), gradient attributions of the step on screen
(Attribute this step, integrated gradients -> its chart) and which explanation to trust (-> its first curves,
every method but integrated gradients; then -> integrated gradients in its table too), then a
measure (ALTI+ chosen -> its heatmap, computed on the server) and another layer of it (reusing the maps kept with
the decoding), saliency and integrated gradients chosen in *Show* (every step's attributions -> the heatmap), and
*Words* (-> the heatmap in words), each timed by the page's clock from its input event (the click, or the option
chosen in a menu) to the frame its result is drawn; each line gives p50 and p95 as multiples of a translation's by
the same clock. Last, the first translations again (three times each), after the what-if actions (14 per
sentence): the page must not get slower with use. Against the first translations, minutes before, and against a
new page opened then, the two pages taking turns at each sentence (what the goal is read from: a machine slower for
a while slows both alike).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from load import cpu_model, free_port, pick_sentences, start_server  # noqa: E402  (benchmarks/load.py)

from attention_inspector.model.serving.checkpoint import load_checkpoint  # noqa: E402
from attention_inspector.model.training.evaluate import DEFAULT_DATA  # noqa: E402
from attention_inspector.ui.session import to_arrays  # noqa: E402
from attention_inspector.viz.attention import escape_text  # noqa: E402
from tests.pages import heatmap_cell, open_tab  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
STEPPED = 3  # sentences whose steps Next is timed on, one head and all heads
KEY_PAUSE_MS = 150  # between a step shown and the next press of →, as a person reading it presses
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--no-first-run", "--disable-quic", "--disable-sync"]

# In the page: click `selector`, then wait (one animation frame at a time, from the frame after the click: a step
# drawn in the click's own task shows in that frame) until every plot in `plots` shows `step N of` in its title;
# resolves to the milliseconds that took.
CLICK_UNTIL_STEP = """async ([selector, step, plots]) => {
    const drawn = () => plots.every(id => {
        const plot = document.querySelector(`#${id} .js-plotly-plot`);
        return plot && plot.layout && plot.layout.title.text.includes(`step ${step} of`);
    });
    const began = performance.now();
    document.querySelector(selector).click();
    await new Promise(resolve => { const check = () => drawn() ? resolve() : requestAnimationFrame(check);
                                   requestAnimationFrame(check); });
    return performance.now() - began;
}"""


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


# In the page: click `selector`, then wait (one animation frame at a time) until the page function `condition` holds
# for `arg`; resolves to the milliseconds that took (the page's own clock, as for the minimal page).
CLICK_UNTIL = """async ([selector, condition, arg]) => {
    const done = new Function("arg", `return (${condition})(arg);`);
    const began = performance.now();
    document.querySelector(selector).click();
    await new Promise(resolve => { const check = () => done(arg) ? resolve() : requestAnimationFrame(check); check(); });
    return performance.now() - began;
}"""


def percentiles(values: list[float]) -> str:
    return (f"p50 {statistics.median(values):.0f} ms, p95 {p95(values):.0f} ms, max {max(values):.0f} ms "
            f"(n={len(values)})")


# A translation is on screen when its text is, and the heatmap shows the step the app opens on with its tokens.
TRANSLATED = """([translation, heading]) => document.querySelector('#translation textarea')?.value === translation
    && document.querySelector('#status textarea')?.value.startsWith('Translated')
    && (document.querySelector('#attention .js-plotly-plot')?.layout?.title.text || '').includes(heading)"""


def expected_view(translator, text: str) -> tuple[str, str]:
    """(translation, the heatmap title's step line) of `text` as the app opens it: at step 4 (ui/operations.py)."""
    from attention_inspector.ui.operations import FIRST_STEP
    from attention_inspector.viz.views import step_heading

    traced = translator.trace(text)
    trace = to_arrays(traced)
    return traced.text, escape_text(step_heading(trace, min(FIRST_STEP, trace.steps) - 1)[0])


def wait_translated(page, translator, text: str) -> None:
    page.wait_for_function(TRANSLATED, arg=list(expected_view(translator, text)), timeout=60000)


def page_translations(page, translator, sentences: list[str], rounds: int = 3) -> list[float]:
    """Translate -> heatmap by the page's clock, as for the minimal page: every sentence `rounds` times, each one
    differing from the last (five samples moved the ratio of two such series by ~0.2 from run to run)."""
    return in_turns([page], translator, sentences, rounds)[0]


def in_turns(pages: list, translator, sentences: list[str], rounds: int = 3) -> list[list[float]]:
    """`page_translations` of each page, the pages taking turns at each sentence, so that a machine slower for a
    while slows each of them alike."""
    times = [[] for _ in pages]
    for text in sentences * rounds:
        for page, taken in zip(pages, times):
            page.fill("#source textarea", text)
            taken.append(page.evaluate(CLICK_UNTIL, ["#translate", TRANSLATED, list(expected_view(translator, text))]))
    return times


def minimal_round_trip(browser, clicks: int = 20) -> list[float]:
    """Click -> redrawn on a minimal Gradio page (one button redrawing one gr.Plot from the server), in-page clock."""
    import gradio as gr
    import numpy as np
    import plotly.graph_objects as go

    def redraw(count: int):
        figure = go.Figure(go.Heatmap(z=np.random.default_rng(int(count)).random((20, 21))))
        figure.update_layout(title=f"click {int(count) + 1}")
        return figure, int(count) + 1

    with gr.Blocks() as demo:
        count = gr.Number(0, visible=False)
        button = gr.Button("Redraw", elem_id="redraw")
        plot = gr.Plot(elem_id="plot")
        button.click(redraw, count, [plot, count])
    demo.launch(server_name="127.0.0.1", server_port=free_port(), prevent_thread_lock=True, quiet=True)
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(demo.local_url)
        page.wait_for_selector("#redraw")
        times = []
        for click in range(1, clicks + 1):
            times.append(page.evaluate("""async (title) => {
                const drawn = () => document.querySelector('#plot .js-plotly-plot')?.layout?.title?.text === title;
                const began = performance.now();
                document.querySelector('#redraw').click();
                await new Promise(resolve => { const check = () => drawn() ? resolve() : requestAnimationFrame(check);
                                               check(); });
                return performance.now() - began;
            }""", f"click {click}"))
        page.close()
        return times[1:]  # the first loads plotly.js
    finally:
        demo.close()


def step_latencies(page, steps: int, plots: list[str]) -> list[float]:
    """Next, `steps - 1` times from step 1, each timed until `plots` show the new step."""
    page.evaluate(CLICK_UNTIL_STEP, ["#first", 1, plots])
    return [page.evaluate(CLICK_UNTIL_STEP, ["#next", step, plots]) for step in range(2, steps + 1)]


# In the page, from its start: each press of → timed from the key's input event (its timeStamp: when the browser
# received it, so a press that waits behind other work counts that wait) to the first animation frame whose heatmap
# shows the step it pressed to.
KEY_CLOCK = """() => {
    window.keyTimes = [];
    document.addEventListener('keydown', (event) => {
        if (event.key !== 'ArrowRight') return;
        const check = () => {
            const title = document.querySelector('#attention .js-plotly-plot')?.layout?.title.text || '';
            if (title.includes(`step ${window.attentionInspector.step} of`)) {
                window.keyTimes.push(performance.now() - event.timeStamp);
            } else requestAnimationFrame(check);
        };
        setTimeout(() => requestAnimationFrame(check)); // once the press has stepped (page.js)
    }, true);
}"""
KEY_TIMED = """(n) => new Promise(resolve => {
    const check = () => window.keyTimes.length >= n ? resolve(window.keyTimes[n - 1]) : requestAnimationFrame(check);
    check(); })"""


def key_latencies(page, steps: int, pause_ms: int) -> list[float]:
    """→ pressed `steps - 1` times from step 1 as a person presses it (real key events, `pause_ms` after each step
    shows), each timed by the page from the key's input event (KEY_CLOCK)."""
    page.evaluate(CLICK_UNTIL_STEP, ["#first", 1, ["attention"]])
    page.evaluate("() => document.activeElement?.blur()")  # ← and → step outside a text field
    times = []
    for _ in range(2, steps + 1):
        page.wait_for_timeout(pause_ms)
        pressed = page.evaluate("() => window.keyTimes.length") + 1
        page.keyboard.press("ArrowRight")
        times.append(page.evaluate(KEY_TIMED, pressed))
    return times


def open_links(browser, port: int, model: str, sentences: list[str]) -> list[float]:
    """Milliseconds from opening a link in a new tab to its view drawn (decoder self-attention, layer 2, head 2,
    step 3), one link per sentence."""
    times = []
    for text in sentences:
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        query = urlencode({"model": model, "text": text, "step": 3, "kind": "decoder", "layer": 2, "head": 2})
        began = time.perf_counter()
        page.goto(f"http://127.0.0.1:{port}/?{query}")
        page.wait_for_function("() => document.querySelector('#status textarea')?.value.startsWith('Opened the link')"
                               " && document.querySelector('#attention .js-plotly-plot')?.layout?.title.text"
                               ".includes('step 3 of')", timeout=120000)
        times.append((time.perf_counter() - began) * 1000)
        page.close()
    return times


def choose(page, elem_id: str, option: str) -> None:
    page.click(f"#{elem_id} input")
    page.get_by_role("option", name=option, exact=True).click()


# The page's clock for actions Playwright performs (a menu's option chosen, a tab's button clicked): the time of the
# last input event (pointer or key), kept by the page from its start.
INPUT_CLOCK = """() => { for (const type of ['pointerdown', 'keydown'])
    document.addEventListener(type, () => { window.inputAt = performance.now(); }, true); }"""


def since_input(done: str) -> str:
    """The page function that holds, once the page function `done` does after the last input event, the milliseconds
    since that event."""
    return f"(arg) => window.inputAt !== null && ({done})(arg) && performance.now() - window.inputAt"


def timed(page, action, done: str, arg=None) -> float:
    """Milliseconds, by the page's clock, from the last input event of `action()` (its click, or the option chosen
    in a menu) to the first animation frame where the page function `done` holds."""
    page.evaluate("() => { window.inputAt = null; }")
    action()
    return waited(page, done, arg)


def waited(page, done: str, arg=None) -> float:
    """Milliseconds, by the page's clock, from the last input event to the first animation frame where the page
    function `done` holds (a later answer to the same action)."""
    return page.wait_for_function(since_input(done), arg=arg, timeout=60000).json_value()


HEATMAP_OF = """(head) => (document.querySelector('#attention .js-plotly-plot')?.layout?.title.text || '')
    .includes(`, head ${head}<br>`)"""
NEURON_OF = """([name, step]) => (document.querySelector('#neuron .js-plotly-plot')?.layout?.title.text || '')
    .includes(name) && !document.querySelector('#neuron').classList.contains('empty')
    && (document.querySelector('#attention .js-plotly-plot')?.layout?.title.text || '').includes(`step ${step} of`)"""


def neuron_latencies(page, translator, sentences: list[str], cells: int = 4) -> tuple[list[float], list[float]]:
    """The neuron view against a view change, by the page's clock, on each sentence's cross-attention: a view change
    (Head 2, then Head 1 chosen -> the heatmap of that head drawn) and a click on a cell of Head 1's heatmap at the
    next step (-> the neuron view of that row drawn), `cells` of each per sentence, the panel closed before each
    click. Returns (view changes, neuron views) in ms."""
    from attention_inspector.ui.operations import FIRST_STEP

    changes, neurons = [], []
    for text in sentences:
        page.fill("#source textarea", text)
        page.click("#translate")
        wait_translated(page, translator, text)
        layer = int(page.evaluate("() => document.querySelector('#layer input').value").split()[-1])
        for step in range(FIRST_STEP + 1, FIRST_STEP + 1 + cells):
            page.evaluate(CLICK_UNTIL_STEP, ["#next", step, ["attention"]])
            for head in (2, 1):
                changes.append(timed(page, lambda: choose(page, "head", f"Head {head}"), HEATMAP_OF, head))
            page.evaluate("() => document.querySelector('#attention').scrollIntoView({block: 'center'})")
            page.wait_for_timeout(300)
            x, y = heatmap_cell(page, step - 1, step % 3)
            neurons.append(timed(page, lambda: page.mouse.click(x, y), NEURON_OF, [f"cross.{layer}.1", step]))
            page.click("#neuron .neuron-close")
            page.wait_for_function("() => document.querySelector('#neuron').classList.contains('empty')")
    return changes, neurons


JUDGED = f"""(arg) => ({TRANSLATED})(arg)
    && document.querySelectorAll('#detachment .detachment-source span').length > 0"""


def verdict_latencies(page, translator, sentences: list[str], rounds: int = 2) -> tuple[list[float], list[float]]:
    """Per sentence, `rounds` times, by the page's clock from the Translate click: the translation drawn, and the
    verdict after it (model/explain/verdict.py: the source line under the translation filled, which the page asks
    for once the translation is drawn). Returns (translations, verdicts after them) in ms."""
    translations, verdicts = [], []
    for text in sentences * rounds:
        page.fill("#source textarea", text)
        expected = list(expected_view(translator, text))
        translations.append(timed(page, lambda: page.click("#translate"), TRANSLATED, expected))
        verdicts.append(waited(page, JUDGED, expected) - translations[-1])
    return translations, verdicts


def what_if(page, translator, sentences: list[str]) -> None:
    """Per sentence: translate, branch at the step on screen, one cross-attention head off, the beam view, head
    statistics, alignments, where each word came from, a measure; prints each one's p50 and p95 and their ratios to
    translating's."""
    from attention_inspector.ui.operations import FIRST_STEP

    times = {"translate": [], "branch": [], "one head off": [], "beam view": [], "head statistics": [],
             "word alignments": [], "where each word came from": [], "attribute this step (integrated gradients)": [],
             "which explanation to trust for this word": [],
             "which explanation to trust, integrated gradients included": [], "show ALTI+ instead of weights": [],
             "ALTI+ of another layer": [], "show saliency at every step": [],
             "show integrated gradients at every step": [], "words instead of pieces": []}
    for text in sentences:
        page.fill("#source textarea", text)
        times["translate"].append(timed(page, lambda: page.click("#translate"), TRANSLATED,
                                        list(expected_view(translator, text))))
        page.wait_for_timeout(300)
        traced = translator.trace(text)
        word = traced.top_tokens[min(FIRST_STEP, len(traced.target_tokens)) - 1][1]
        open_tab(page, "Branch and compare")
        page.fill("#branch-word textarea", word)
        times["branch"].append(timed(page, lambda: page.click("#branch"), """(word) =>
            document.querySelector('#status textarea')?.value.startsWith('Branch')
            && document.querySelector('#attention .js-plotly-plot')?.layout?.title.text.includes(`→ "${word}"`)""",
                                     word))
        open_tab(page, "Switch heads off")
        times["one head off"].append(timed(page, lambda: page.locator("#mask-cross label").first.click(), """() =>
            document.querySelector('#status textarea')?.value.startsWith('1 head off')
            && document.querySelector('#mask-effect .js-plotly-plot')?.layout?.title.text.includes('1 head off')"""))
        open_tab(page, "Beam search")
        times["beam view"].append(timed(page, lambda: page.click("#beam"), """() =>
            document.querySelector('#status textarea')?.value.startsWith('Beam search')
            && document.querySelectorAll('#n-best tbody tr').length > 0"""))
        open_tab(page, "Head statistics")
        times["head statistics"].append(timed(page, lambda: page.click("#head-statistics"), """() =>
            document.querySelector('#status textarea')?.value.startsWith('Statistics of')
            && (document.querySelector('#head-table')?.innerText || '').includes('encoder.1.1')"""))
        times["word alignments"].append(timed(page, lambda: page.click("#alignments"), """() =>
            document.querySelector('#status textarea')?.value.startsWith('Alignments of')
            && (document.querySelector('#alignment-text .answer-text')?.textContent
                || document.querySelector('#alignment-text textarea')?.value || '').includes('cross.1.1')"""))
        open_tab(page, "Where each word came from")
        times["where each word came from"].append(timed(page, lambda: page.click("#contributions"), """() =>
            document.querySelector('#status textarea')?.value.startsWith('Contributions of')
            && !document.querySelector('#source-share').classList.contains('empty')
            && document.querySelector('#source-share .js-plotly-plot')"""))
        times["attribute this step (integrated gradients)"].append(timed(page, lambda: page.click("#attribute"),
                                                                         """() =>
            document.querySelector('#status textarea')?.value.startsWith('integrated gradients')
            && !document.querySelector('#attribution').classList.contains('empty')
            && document.querySelector('#attribution .js-plotly-plot')"""))
        times["which explanation to trust for this word"].append(timed(page, lambda: page.click("#faithfulness"), """() =>
            document.querySelector('#status textarea')?.value.startsWith('Step ')
            && !document.querySelector('#faithfulness-curves').classList.contains('empty')
            && document.querySelector('#faithfulness-curves .js-plotly-plot')"""))
        times["which explanation to trust, integrated gradients included"].append(waited(page, """() =>
            [...document.querySelectorAll('#faithfulness-table th')]
                .some(th => th.textContent === 'integrated gradients')
            && document.querySelector('#status textarea')?.value.startsWith('Step ')"""))
        # A measure: computed on the server the first time, then kept with the decoding for other views.
        times["show ALTI+ instead of weights"].append(timed(
            page, lambda: choose(page, "measure", "contributions (ALTI+)"), """() =>
            document.querySelector('#attention .js-plotly-plot')?.layout?.title.text.includes('ALTI+')"""))
        times["ALTI+ of another layer"].append(timed(page, lambda: choose(page, "layer", "Layer 2"), """() => {
            const title = document.querySelector('#attention .js-plotly-plot')?.layout?.title.text;
            return title && title.includes('ALTI+') && title.includes('layer 2,'); }"""))
        for method, label in (("saliency", "saliency (gradient)"), ("integrated gradients", "integrated gradients")):
            times[f"show {method} at every step"].append(timed(page, lambda label=label: choose(page, "measure", label),
                                                               """(method) => {
                const title = document.querySelector('#attention .js-plotly-plot')?.layout?.title.text;
                return title && title.startsWith('Attribution of each step') && title.includes(method); }""", method))
        choose(page, "measure", "weights")
        page.wait_for_timeout(300)
        times["words instead of pieces"].append(timed(page, lambda: page.click("#units input[value=words]"), """() => {
            const title = document.querySelector('#attention .js-plotly-plot')?.layout?.title.text || '';
            return /<br>(the word|building|ends the word) /.test(title); }"""))
        page.click("#units input[value=pieces]")  # back in pieces: the word line is gone
        page.wait_for_function("""() => !/<br>(the word|building|ends the word) /.test(
            document.querySelector('#attention .js-plotly-plot')?.layout?.title.text || '<br>the word ')""",
                               timeout=60000)
        page.wait_for_timeout(300)
    plain, plain_p95 = statistics.median(times["translate"]), p95(times["translate"])
    for name, values in times.items():
        print(f"what-if {name}: {percentiles(values)}; p50 {statistics.median(values) / plain:.2f}x, "
              f"p95 {p95(values) / plain_p95:.2f}x translate's")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoints", default=str(ROOT / "checkpoints"))
    parser.add_argument("--model", default="en-de")
    parser.add_argument("--data", default=DEFAULT_DATA)
    parser.add_argument("--tokens", type=int, default=20, help="source sentence length to pick")
    parser.add_argument("--steps", type=int, default=20, help="Next clicks to time per view (at most the steps)")
    parser.add_argument("--sentences", type=int, default=5, help="sentences to translate and ask what-if about "
                        "(ratios between actions move by ~0.15 from run to run with 5)")
    parser.add_argument("--neuron-only", action="store_true", help="only the neuron view against a view change")
    parser.add_argument("--verdict-only", action="store_true",
                        help="only the verdict against a translation (use with --tokens 30)")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    translator = load_checkpoint(Path(args.checkpoints) / args.model)
    candidates = pick_sentences(translator, args.data, 200, args.tokens)
    # Sentences whose translation has enough steps to time `--steps` of them (and ten rapid clicks).
    sentences = [s for s in candidates
                 if len(translator.trace(s).target_tokens) > max(args.steps, 11)][:args.sentences + 1]
    steps = min(min(len(translator.trace(text).target_tokens) for text in sentences[:STEPPED]), args.steps + 1)
    version = subprocess.run([CHROMIUM, "--version"], capture_output=True, text=True).stdout.strip()
    print(f"{cpu_model()}; {version}; model {args.model}; sentences of about {args.tokens} tokens")

    port = free_port()
    server = start_server(Path(args.checkpoints), port, 100, Path("/tmp") / f"browser-latency-{port}.log")
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            floor = minimal_round_trip(browser)
            print(f"minimal Gradio page, click -> its gr.Plot redrawn: {percentiles(floor)}")
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.add_init_script(f"({INPUT_CLOCK})()")
            page.add_init_script(f"({KEY_CLOCK})()")
            began = time.perf_counter()
            page.goto(f"http://127.0.0.1:{port}/")
            page.wait_for_function("() => document.querySelector('#attention .js-plotly-plot')?.layout?.title.text"
                                   ".includes('step ')", timeout=120000)
            print(f"page load -> first heatmap: {(time.perf_counter() - began) * 1000:.0f} ms")
            if args.verdict_only:
                translations, verdicts = verdict_latencies(page, translator, sentences)
                print(f"translate -> heatmap: {percentiles(translations)}")
                print(f"then -> the verdict drawn: {percentiles(verdicts)}; p50 "
                      f"{statistics.median(verdicts) / statistics.median(translations):.2f}x, p95 "
                      f"{p95(verdicts) / p95(translations):.2f}x a translation's")
                return
            changes, neurons = neuron_latencies(page, translator, sentences[1:])
            print(f"view change (another head) -> heatmap: {percentiles(changes)}")
            print(f"cell clicked -> neuron view: {percentiles(neurons)}; p50 "
                  f"{statistics.median(neurons) / statistics.median(changes):.2f}x, p95 "
                  f"{p95(neurons) / p95(changes):.2f}x a view change's")
            if args.neuron_only:
                return

            translate = []
            for text in sentences[1:]:  # Python's clock, as before
                page.fill("#source textarea", text)
                began = time.perf_counter()
                page.click("#translate")
                wait_translated(page, translator, text)
                translate.append((time.perf_counter() - began) * 1000)
            in_page = page_translations(page, translator, sentences[1:])
            print(f"translate -> heatmap: {percentiles(translate)}")
            print(f"translate -> heatmap, the page's clock: {percentiles(in_page)}; p50 "
                  f"{statistics.median(in_page) / statistics.median(floor):.2f}x, p95 {p95(in_page) / p95(floor):.2f}x "
                  "the minimal page's round trip")
            links = open_links(browser, port, args.model, sentences[1:])
            print(f"shared link opened in a new tab -> its view: {percentiles(links)}")

            one_head, all_heads = [], []  # three sentences' steps: a p95 of twenty moved by ~15 ms from run to run
            keyed = {"Head 1": [], "All heads": []}
            for text in sentences[:STEPPED]:
                page.fill("#source textarea", text)
                page.click("#translate")
                wait_translated(page, translator, text)
                choose(page, "head", "Head 1")
                page.wait_for_timeout(500)
                one_head += step_latencies(page, steps, ["attention"])
                keyed["Head 1"] += key_latencies(page, steps, KEY_PAUSE_MS)
                choose(page, "head", "All heads")
                page.wait_for_timeout(500)
                all_heads += step_latencies(page, steps, ["attention"])
                keyed["All heads"] += key_latencies(page, steps, KEY_PAUSE_MS)
                choose(page, "head", "Head 1")
            print(f"Next -> heatmap, single head: {percentiles(one_head)}")
            print(f"Next -> heatmap, all heads:   {percentiles(all_heads)}")
            print(f"-> key ({KEY_PAUSE_MS} ms after each step shows) -> heatmap, from the key's input event, single "
                  f"head: {percentiles(keyed['Head 1'])}; all heads: {percentiles(keyed['All heads'])}")
            page.get_by_text("Model view: every layer x head").click()
            page.click("#model-view input")
            page.wait_for_function("() => document.querySelector('#overview .js-plotly-plot')", timeout=30000)
            page.wait_for_timeout(500)
            timed = step_latencies(page, steps, ["attention", "overview"])
            print(f"Next -> heatmap and model view: {percentiles(timed)}")
            page.click("#model-view input")

            what_if(page, translator, sentences[1:])
            used = page_translations(page, translator, sentences[1:])  # as at first, after the what-if actions
            print(f"translate -> heatmap after the what-if actions, the page's clock: {percentiles(used)}; p50 "
                  f"{statistics.median(used) / statistics.median(in_page):.2f}x, p95 {p95(used) / p95(in_page):.2f}x "
                  "the first translations")
            # The same against a new page at the same time: the used page and the new one take turns (the first
            # translations were minutes before, and the machine's speed moves by a fifth over minutes).
            new = browser.new_page(viewport={"width": 1400, "height": 900})
            new.goto(f"http://127.0.0.1:{port}/")
            new.wait_for_function("() => document.querySelector('#attention .js-plotly-plot')?.layout?.title.text"
                                  ".includes('step ')", timeout=120000)
            shown = {page.evaluate("() => document.visibilityState"), new.evaluate("() => document.visibilityState")}
            used, fresh = in_turns([page, new], translator, sentences[1:])
            print(f"translate -> heatmap, the used page and a new one taking turns: used {percentiles(used)}, new "
                  f"{percentiles(fresh)}; p50 {statistics.median(used) / statistics.median(fresh):.2f}x, p95 "
                  f"{p95(used) / p95(fresh):.2f}x the new page's (pages {', '.join(sorted(shown))})")
            new.close()

            page.evaluate(CLICK_UNTIL_STEP, ["#first", 1, ["attention"]])
            for _ in range(10):
                page.click("#next", delay=0)
                page.wait_for_timeout(100)
            page.wait_for_timeout(1000)
            landed = int(page.locator("#step input[type=number]").input_value())
            title = page.evaluate("() => document.querySelector('#attention .js-plotly-plot').layout.title.text")
            print(f"ten clicks at 10/s from step 1: the slider says step {landed}, the heatmap "
                  f"{'agrees' if f'step {landed} of' in title else 'DISAGREES'}")
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
