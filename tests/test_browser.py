"""A real headless browser (Debian's chromium driven by Playwright) uses the app like a person would.

Stepping happens in the browser (ui/static/figures.js); these tests check that what it draws at every step is
exactly the figure viz/views.py builds for that step, and that every way of stepping lands where it should.
"""

import dataclasses
import json
import os
import re
from pathlib import Path

import pytest

from attention_inspector.model.keys import ALL_HEADS, CROSS, DECODER, ENCODER, HEAD_LABELS, KIND_LABELS, MEAN
from attention_inspector.ui.demo import TABS
from attention_inspector.ui.operations import FIRST_STEP
from attention_inspector.ui.session import to_arrays
from attention_inspector.viz.views import attention_figure, candidates_figure, translation_figure
from tests.pages import candidate_bar, open_tab, step_button_lines

pytestmark = pytest.mark.slow  # drives a real browser
SCREENSHOT = Path(os.environ.get("SCREENSHOT", Path(__file__).parent / "artifacts" / "app.png"))
MODEL = "toy-en-de"
LONG = "A red dog runs in the park with a man and a woman and a child."  # 11 steps for the toy translator


def shown(page) -> dict:
    """What the attention plot shows now, and the step the slider's number box says."""
    return page.evaluate("""() => {
        const plot = document.querySelector('#attention .js-plotly-plot');
        const box = document.querySelector('#step input[type=number]');
        if (!plot || !plot.data) return null;
        return {z: plot.data.map(trace => trace.z), y: plot.data.map(trace => trace.y), title: plot.layout.title.text,
                shapes: (plot.layout.shapes || []).map(s => [s.x0, s.x1, s.y0, s.y1]),
                ticktext: plot.layout.yaxis.ticktext, step: Number(box.value),
                keys: Object.keys(plot.layout).filter(name => name.startsWith('xaxis')).sort()
                    .map(name => plot.layout[name].ticktext)};
    }""")


def wait_for_step(page, step: int) -> dict:
    page.wait_for_function("""(step) => {
        const plot = document.querySelector('#attention .js-plotly-plot');
        return plot && plot.layout && plot.layout.title.text.includes(`step ${step} of`)
            && Number(document.querySelector('#step input[type=number]')?.value) === step;
    }""", arg=step, timeout=15000)
    return shown(page)


def translate(page, services, text: str) -> None:
    """Translate `text` on the page and wait until its translation is on screen at the step a translation opens on
    (the page already shows a translated example when it opens, so "Translated" in the status alone says nothing)."""
    page.wait_for_function("() => document.querySelector('#translation textarea')?.value.length > 0",
                           timeout=60000)  # the first visit's example is in: it cannot replace this translation
    page.fill("#source textarea", text)
    page.click("#translate")
    traced = services.translators[MODEL].trace(text)
    page.wait_for_function("(text) => document.querySelector('#status textarea')?.value.startsWith('Translated')"
                           " && document.querySelector('#translation textarea')?.value === text"
                           " && document.querySelector('#attention .js-plotly-plot')", arg=traced.text, timeout=30000)
    wait_for_step(page, min(FIRST_STEP, len(traced.target_tokens)))


def python_figure(services, text, kind, layer, head, step) -> dict:
    """The figure viz/views.py builds for this step, as the browser would receive it."""
    trace = to_arrays(services.translators[MODEL].trace(text))
    figure = json.loads(attention_figure(trace, kind, layer, head, step).to_json())
    return {"z": [t["z"] for t in figure["data"]], "y": [t["y"] for t in figure["data"]],
            "title": figure["layout"]["title"]["text"], "ticktext": figure["layout"]["yaxis"]["ticktext"],
            "keys": [axis["ticktext"] for name, axis in sorted(figure["layout"].items()) if name.startswith("xaxis")],
            "shapes": [[s["x0"], s["x1"], s["y0"], s["y1"]] for s in figure["layout"].get("shapes", [])]}


def bars_shown(page, elem_id: str, step: int) -> dict:
    """The bars a chart shows once it has been redrawn for `step` (after the heatmap: see ui/static/figures.js)."""
    page.wait_for_function("""(step) => {
        const plot = document.querySelector('#candidates .js-plotly-plot');
        const colors = document.querySelector('#probabilities .js-plotly-plot')?.data[0].marker.color;
        return plot?.layout.title.text.endsWith(`at step ${step}`) && colors?.indexOf('#d62728') === step - 1;
    }""", arg=step, timeout=15000)
    return page.evaluate("""(id) => {
        const plot = document.querySelector(`#${id} .js-plotly-plot`);
        const [bars] = plot.data;
        return {x: bars.x, y: Array.from(bars.y), text: bars.text, colors: bars.marker.color,
                ticktext: plot.layout.xaxis.ticktext, title: plot.layout.title.text};
    }""", elem_id)


def python_bars(figure) -> dict:
    figure = json.loads(figure.to_json())
    [bars] = figure["data"]
    return {"x": bars["x"], "y": bars["y"], "text": bars["text"], "colors": bars["marker"]["color"],
            "ticktext": figure["layout"]["xaxis"]["ticktext"], "title": figure["layout"]["title"]["text"]}


def choose(page, elem_id: str, option: str) -> None:
    page.click(f"#{elem_id} input")
    page.get_by_role("option", name=option, exact=True).click()
    menus_closed(page)


def menus_closed(page) -> None:
    """Wait until the menu chosen from has closed (a user cannot open another one meanwhile)."""
    page.wait_for_function("() => !document.querySelector('[role=listbox]')", timeout=15000)


def test_a_first_visit_shows_a_translated_example(page, services):
    page.wait_for_function("() => document.querySelector('#translation textarea')?.value.length > 0", timeout=30000)
    example = page.locator("#source textarea").input_value()  # the example it translated
    steps = len(services.translators[MODEL].trace(example).target_tokens)
    step = min(FIRST_STEP, steps)
    assert f"step {step} of {steps}" in wait_for_step(page, step)["title"]
    assert page.locator("#detachment .detachment-plain").inner_text()  # scored as every decoding is


@pytest.mark.parametrize("kind,head", [(CROSS, MEAN), (DECODER, 2), (ENCODER, 0), (CROSS, ALL_HEADS),
                                       (DECODER, ALL_HEADS)])
def test_every_step_drawn_in_the_browser_is_the_figure_python_builds(page, services, kind, head):
    translate(page, services, LONG)
    choose(page, "kind", KIND_LABELS[kind])
    choose(page, "layer", "Layer 2")
    choose(page, "head", HEAD_LABELS[head] if head in (MEAN, ALL_HEADS) else f"Head {head + 1}")
    steps = steps_of(services, LONG)
    for step in (1, 2, 7, steps):
        page.fill("#step input[type=number]", str(step))
        page.press("#step input[type=number]", "Enter")
        drawn = wait_for_step(page, step)
        expected = python_figure(services, LONG, kind, 1, head, step - 1)
        assert drawn["title"] == expected["title"] and drawn["ticktext"] == expected["ticktext"]
        assert drawn["keys"] == expected["keys"]  # a grid's panels label the keys shown as Python does
        assert drawn["y"] == expected["y"] and drawn["shapes"] == expected["shapes"]
        assert drawn["z"] == expected["z"]  # the same numbers, bit for bit through JSON
        trace = to_arrays(services.translators[MODEL].trace(LONG))
        assert bars_shown(page, "candidates", step) == python_bars(candidates_figure(trace, step - 1))
        assert bars_shown(page, "probabilities", step) == python_bars(translation_figure(trace, step - 1))
    choose(page, "kind", KIND_LABELS[CROSS])
    choose(page, "head", HEAD_LABELS[MEAN])


def steps_of(services, text: str) -> int:
    return len(services.translators[MODEL].trace(text).target_tokens)


def slider_range(page) -> list:
    """The step slider's range and number box: [max of the range, max of the box, whether the range is enabled]."""
    return page.evaluate("""() => { const range = document.querySelector('#step input[type=range]');
        return [Number(range.max), Number(document.querySelector('#step input[type=number]').max), !range.disabled];
    }""")


def test_the_slider_spans_the_steps_of_each_translation(page, services):
    """The page sets the slider's range from the steps' lines of each decoding (ui/static/range.js): a longer
    translation, a shorter one, and a longer one again."""
    for text in (LONG, "A dog.", LONG):
        translate(page, services, text)
        steps = steps_of(services, text)
        page.wait_for_function("(steps) => Number(document.querySelector('#step input[type=range]').max) === steps",
                               arg=max(steps, 2), timeout=15000)
        assert slider_range(page) == [max(steps, 2), max(steps, 2), steps > 1]
        page.click("#last")
        assert f"step {steps} of {steps}" in wait_for_step(page, steps)["title"]


def test_buttons_keys_slider_and_number_box_agree_with_the_view(page, services):
    steps = steps_of(services, LONG)
    assert steps >= 10
    translate(page, services, LONG)
    page.click("#first")
    wait_for_step(page, 1)
    page.click("#next")
    assert wait_for_step(page, 2)["step"] == 2
    page.click("#last")
    last = wait_for_step(page, steps)
    page.click("#first")
    wait_for_step(page, 1)
    # Presses faster than the slider takes each value (two in one task): each counts.
    page.evaluate("() => { document.querySelector('#next').click(); document.querySelector('#next').click(); }")
    wait_for_step(page, 3)
    page.evaluate("() => { for (const b of ['#next', '#next', '#previous']) document.querySelector(b).click(); }")
    wait_for_step(page, 4)
    page.click("#first")
    wait_for_step(page, 1)
    # ←/→ (and Home/End) step when the focus is outside a text field...
    page.click("#step-text")  # a read-only box: focus leaves the source field
    page.locator("body").focus()
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    wait_for_step(page, 3)
    page.keyboard.press("ArrowLeft")
    wait_for_step(page, 2)
    page.keyboard.press("End")
    assert wait_for_step(page, steps) == last
    page.keyboard.press("Home")
    wait_for_step(page, 1)
    # A run of presses, each before the last has been drawn: every one counts, none undoes a later one.
    for key, times, step in (("ArrowRight", 6, 7), ("ArrowLeft", 4, 3)):
        for _ in range(times):
            page.keyboard.press(key)
        wait_for_step(page, step)
    page.keyboard.press("Home")
    wait_for_step(page, 1)
    # ...but not while typing: an arrow in the text field, then Next and Prev, end where they began.
    page.click("#source textarea")
    page.keyboard.press("ArrowRight")
    page.click("#next")
    wait_for_step(page, 2)
    page.click("#previous")
    wait_for_step(page, 1)
    # The slider's own keys and its number box redraw the view too.
    page.focus("#step input[type=range]")
    page.keyboard.press("ArrowRight")
    wait_for_step(page, 2)
    page.fill("#step input[type=number]", "9")
    page.press("#step input[type=number]", "Enter")
    wait_for_step(page, 9)
    for typed, clamped in (("99", steps), ("0", 1)):  # out of range: the box and the view at the nearest step
        page.fill("#step input[type=number]", typed)
        page.press("#step input[type=number]", "Enter")
        assert f"step {clamped} of {steps}" in wait_for_step(page, clamped)["title"]


def test_a_step_button_draws_its_step_in_its_own_click_and_the_server_reads_that_step(page, services):
    """A press of a step button redraws the heatmap before the click returns (ui/static/page.js), not after a
    Gradio event of its own; quick presses each draw their own step, and none draws an earlier one back when the
    slider's values catch up; the slider then holds the step, and the server reads it (the link it makes)."""
    translate(page, services, LONG)
    page.click("#first")
    wait_for_step(page, 1)
    title = page.evaluate("""() => { document.querySelector('#next').click();
        return document.querySelector('#attention .js-plotly-plot').layout.title.text; }""")
    assert "step 2 of" in title
    drawn = page.evaluate("""async () => {
        const drawn = [];
        const log = () => drawn.push(window.attentionInspector.step);
        document.addEventListener('attention-inspector-step', log);
        for (const button of ['#next', '#next', '#next', '#previous', '#next', '#next']) {
            document.querySelector(button).click();
            await new Promise((resolve) => setTimeout(resolve, 2));
        }
        await new Promise((resolve) => setTimeout(resolve, 1000)); // the slider's values have caught up
        document.removeEventListener('attention-inspector-step', log);
        return drawn;
    }""")
    assert drawn == [3, 4, 5, 4, 5, 6]
    assert wait_for_step(page, 6)["step"] == 6
    open_tab(page, "Share and export")
    page.click("#copy-link")
    page.wait_for_function("() => document.querySelector('#link textarea, #link input')?.value.includes('step=6')",
                           timeout=15000)


def test_steps_that_come_before_the_paint_redraw_each_bar_chart_once_at_the_last_of_them(page, services):
    """Eight presses of Next in one task (→ held down): the heatmap is redrawn at each, the candidates and the
    translation's probabilities once each, after the paint, at the last step (ui/static/figures.js `redrawn`)."""
    translate(page, services, LONG)
    page.click("#first")
    wait_for_step(page, 1)
    bars_shown(page, "candidates", 1)
    page.evaluate("""() => {
        window.barDraws = 0;
        const figures = window.attentionInspector.figures, draw = figures.draw;
        figures.draw = (target, json) => {
            if (target.closest('#candidates, #probabilities')) window.barDraws += 1;
            return draw(target, json);
        };
        for (let i = 0; i < 8; i++) document.querySelector('#next').click();
    }""")
    trace = to_arrays(services.translators[MODEL].trace(LONG))
    assert bars_shown(page, "candidates", 9) == python_bars(candidates_figure(trace, 8))
    assert bars_shown(page, "probabilities", 9) == python_bars(translation_figure(trace, 8))
    page.wait_for_timeout(500)
    assert page.evaluate("() => window.barDraws") == 2


def test_a_step_pressed_right_after_the_paint_is_drawn_before_the_bar_charts_waiting_for_it(page, services):
    """Next, and Next again right after the paint (the next task): the second step's heatmap is drawn before the
    bar charts catch up with the first, which wait for the browser to be idle (ui/static/figures.js `whenIdle`), and
    they are then drawn once, at the second step."""
    translate(page, services, LONG)
    page.click("#first")
    wait_for_step(page, 1)
    bars_shown(page, "candidates", 1)
    order = page.evaluate("""async () => {
        await new Promise((resolve) => requestIdleCallback(resolve, { timeout: 2000 })); // nothing left waiting
        const order = [];
        const figures = window.attentionInspector.figures, draw = figures.draw;
        figures.draw = (target, json) => {
            const id = target.closest('#attention, #candidates, #probabilities')?.id;
            if (id) order.push(`${id} ${window.attentionInspector.step}`);
            return draw(target, json);
        };
        document.querySelector('#next').click();
        await new Promise((resolve) => requestAnimationFrame(() => setTimeout(() => {
            document.querySelector('#next').click();
            resolve();
        })));
        await new Promise((resolve) => setTimeout(resolve, 1000));
        figures.draw = draw;
        return order;
    }""")
    assert order[:2] == ["attention 2", "attention 3"], order
    assert sorted(order[2:]) == ["candidates 3", "probabilities 3"], order


@pytest.mark.parametrize("kind", [CROSS, DECODER])
def test_a_growing_heatmap_keeps_the_margins_of_its_last_step_at_every_step(page, services, kind):
    """Rows (and, in decoder self-attention, key columns) come one per step, their labels longer or shorter: each
    step is drawn with the margins the last step's labels need (ui/static/figures.js `measureMargins`), so the plot
    keeps its place and Plotly never draws a step a second time to widen a margin."""
    translate(page, services, LONG)
    choose(page, "kind", KIND_LABELS[kind])
    steps = steps_of(services, LONG)
    page.click("#first")
    wait_for_step(page, 1)
    page.wait_for_function("() => document.querySelector('#attention .js-plotly-plot').layout.margin.l > 10",
                           timeout=15000)  # the last step's margins, measured after the paint
    margins = page.evaluate("""async (steps) => {
        const plot = document.querySelector('#attention .js-plotly-plot');
        const margins = [];
        for (let step = 1; step <= steps; step++) {
            if (step > 1) document.querySelector('#next').click();
            const { l, r, t, b } = plot._fullLayout._size;
            margins.push({ step: window.attentionInspector.step, l, r, t, b });
            await new Promise((resolve) => setTimeout(resolve, 10));
        }
        return margins;
    }""", steps)
    assert [m["step"] for m in margins] == list(range(1, steps + 1))
    assert all({**m, "step": 0} == {**margins[-1], "step": 0} for m in margins), margins


def test_the_model_view_follows_the_step(page, services):
    translate(page, services, LONG)
    page.click("#first")
    page.click("#next")
    page.click("#next")
    wait_for_step(page, 3)
    page.get_by_text("Model view: every layer x head").click()
    page.click("#model-view input")
    overview = "() => document.querySelector('#overview .js-plotly-plot')?.layout?.title.text ?? ''"
    page.wait_for_function(f"() => ({overview})().includes('step 3 of')", timeout=30000)
    assert len(page.evaluate("() => document.querySelector('#overview .js-plotly-plot').data")) == 2 * 4
    page.click("#next")
    page.wait_for_function(f"() => ({overview})().includes('step 4 of')", timeout=15000)
    page.click("#model-view input")
    page.get_by_text("Model view: every layer x head").click()


def test_clicks_at_ten_per_second_are_never_lost(page, services):
    """Nine clicks, since the toy translator gives this sentence 11 steps (benchmarks/browser_latency.py clicks
    ten times on a 20-token sentence of en-de)."""
    assert steps_of(services, LONG) >= 10
    translate(page, services, LONG)
    page.click("#first")
    wait_for_step(page, 1)
    for _ in range(9):
        page.click("#next", delay=0)
        page.wait_for_timeout(100)
    assert wait_for_step(page, 10)["step"] == 10


def test_switching_the_model_translates_again(page, services):
    translate(page, services, "A dog runs in the park.")
    page.click("#model input")
    page.get_by_role("option", name=re.compile("^toy-rnn")).click()
    expected = services.translators["toy-rnn"].trace("A dog runs in the park.").text
    page.wait_for_function("(text) => document.querySelector('#translation textarea')?.value === text",
                           arg=expected, timeout=30000)
    assert "no self-attention" in page.locator("#status textarea").input_value()
    menus_closed(page)
    page.click("#kind input")
    assert [text.split("\n")[-1] for text in page.get_by_role("option").all_inner_texts()] == [KIND_LABELS[CROSS]]
    page.keyboard.press("Escape")
    page.click("#model input")
    page.get_by_role("option", name=re.compile(f"^{MODEL}")).click()
    page.wait_for_function("() => document.querySelector('#translation textarea')?.value.startsWith('Ein Hund')",
                           timeout=30000)


def test_picking_an_example_translates_it(page, services):
    translate(page, services, "A dog runs.")
    sentence = services.examples(MODEL)[1]
    choose(page, "example", sentence)
    expected = services.translators[MODEL].trace(sentence).text
    page.wait_for_function("(text) => document.querySelector('#translation textarea')?.value === text",
                           arg=expected, timeout=30000)
    assert page.locator("#source textarea").input_value() == sentence
    page.locator("#source textarea").press_sequentially(" And more.")  # typing a sentence of one's own
    page.wait_for_function("() => document.querySelector('#example input')?.value === ''", timeout=5000)
    choose(page, "example", sentence)
    page.wait_for_function("(text) => document.querySelector('#translation textarea')?.value === text",
                           arg=expected, timeout=30000)
    translate(page, services, "Two dogs run.")  # pasted (filled at once), not typed: the menu follows too
    assert page.locator("#example input").input_value() == ""


def status_starts(page, prefix: str) -> str:
    page.wait_for_function("(prefix) => document.querySelector('#status textarea')?.value.startsWith(prefix)",
                           arg=prefix, timeout=30000)
    return page.locator("#status textarea").input_value()


def test_click_a_candidate_to_branch_and_switch_a_head_off(page, services):
    translator = services.translators[MODEL]
    text = "A man plays with a red ball in the park."
    page.wait_for_function("() => document.querySelector('#translation textarea')?.value.length > 0",
                           timeout=30000)  # the first visit's translation is in, so it cannot replace this one
    translate(page, services, text)  # waits for this sentence's translation
    page.click("#first")
    page.click("#next")
    page.click("#next")
    wait_for_step(page, 3)
    bars_shown(page, "candidates", 3)
    word = translator.trace(text).top_tokens[2][1]
    page.mouse.move(*candidate_bar(page, 1, above=20))  # above a short bar counts too
    page.mouse.down()
    page.mouse.up()
    assert f'step 3 chooses "{word}"' in status_starts(page, "Branch")
    expected = translator.trace(text, force=translator.trace(text).target_tokens[:2] + [word])
    assert page.locator("#translation textarea").input_value() == expected.text
    assert wait_for_step(page, 3)["title"].endswith(f"→ \"{word}\" (p = {expected.trace.probabilities[2]:.2f})")
    assert page.get_by_label("greedy translation").count() == 1  # the breadcrumb goes back
    open_tab(page, "Switch heads off")
    page.locator("#mask-cross label").first.click()
    status_starts(page, "1 head off")
    masked = translator.trace(text, force=expected.target_tokens[:3], mask=["cross.1.1"])
    assert page.locator("#translation textarea").input_value() == masked.text
    page.wait_for_function("() => document.querySelector('#mask-effect .js-plotly-plot')")
    assert " ".join(masked.target_tokens) in " ".join(page.locator("#masked-translation").inner_text().split())
    page.get_by_label("greedy translation").check()
    status_starts(page, "Showing the greedy translation")
    assert page.locator("#translation textarea").input_value() == translator.trace(text).text


def test_with_the_sources_tab_open_a_candidate_click_asks_why_not_that_one(page, services):
    """The same click that branches asks for a contrastive attribution while "Where each word came from" is open,
    and the attribution is the one the server computes for that step and candidate."""
    translator = services.translators[MODEL]
    text = "A man plays with a red ball in the park."
    translate(page, services, text)
    page.click("#first")
    page.click("#next")
    wait_for_step(page, 2)
    bars_shown(page, "candidates", 2)
    traced = translator.trace(text)
    other = traced.top_tokens[1][1]
    open_tab(page, "Where each word came from")
    page.mouse.move(*candidate_bar(page, 1, above=20))
    page.mouse.down()
    page.mouse.up()
    status = status_starts(page, "integrated gradients")
    assert f'why step 2 wrote "{traced.target_tokens[1]}" and not "{other}"' in status
    assert page.locator("#translation textarea").input_value() == traced.text  # no branch was made
    page.wait_for_function("""() => !document.querySelector('#attribution').classList.contains('empty')
        && document.querySelector('#attribution .js-plotly-plot')""")
    page.wait_for_function("""() => { // where the user looks: the window scrolled to show the chart whole
        const box = document.querySelector('#attribution').getBoundingClientRect();
        return box.top >= 0 && box.bottom <= innerHeight + 1; }""", timeout=5000)
    bars = page.evaluate("() => Array.from(document.querySelector('#attribution .js-plotly-plot').data[0].y)")
    [expected] = translator.attributions(text, traced.target_tokens, "integrated_gradients", 1, other)
    assert bars == pytest.approx([*expected.source, *expected.target], abs=1e-3)
    # The word picked is a candidate of step 2: the box keeps it at step 2 only; a word typed stays.
    assert page.locator("#attribution-contrast textarea").input_value() == other
    page.click("#next")
    wait_for_step(page, 3)
    page.wait_for_function("() => document.querySelector('#attribution-contrast textarea').value === ''",
                           timeout=5000)
    # The chart of step 2 stays, faded under a note, while the view shows step 3.
    note = page.locator("#attribution-answers .answers-note")
    assert note.is_visible() and note.text_content().startswith("About step 2; the view shows step 3")
    page.click("#attribute")
    page.wait_for_function("() => document.querySelector('#status textarea').value.includes('why step 3 wrote')",
                           timeout=30000)
    assert ' and not "' not in page.locator("#status textarea").input_value()
    page.wait_for_function("() => document.querySelector('#attribution-answers .answers-note').hidden", timeout=5000)
    page.fill("#attribution-contrast textarea", "rot")
    page.click("#next")
    wait_for_step(page, 4)
    page.wait_for_timeout(300)
    assert page.locator("#attribution-contrast textarea").input_value() == "rot"
    page.fill("#attribution-contrast textarea", "")


def test_markup_stays_text_and_a_failed_translation_keeps_the_last_one(page, services):
    dialogs = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    translate(page, services, 'A dog <img src=x onerror="alert(1)"> runs in the park.')
    page.click("#first")
    page.click("#next")
    drawn = wait_for_step(page, 2)
    assert page.locator("img[src='x']").count() == 0 and not dialogs
    assert any("&lt;" in tick for tick in page.evaluate(
        "() => document.querySelector('#attention .js-plotly-plot').layout.xaxis.ticktext"))
    translation = page.locator("#translation textarea").input_value()
    page.fill("#source textarea", "")
    page.click("#translate")
    page.wait_for_function("() => document.querySelector('#status textarea')?.value.includes('input is empty')",
                           timeout=30000)
    assert page.locator("#translation textarea").input_value() == translation and shown(page) == drawn

    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOT), full_page=True)
    assert SCREENSHOT.stat().st_size > 10_000


def test_under_the_translation_a_line_says_whether_it_rests_on_its_source(page, services):
    text = "A dog runs in the park."
    translate(page, services, text)
    page.locator("#detachment .detachment-plain").wait_for(state="visible", timeout=30000)
    verdict = page.locator("#detachment .detachment-verdict")
    assert verdict.is_hidden()  # the numbers are behind "why?"
    page.click("#detachment .detachment-why")
    said = verdict.inner_text()
    assert "Score" in said and "not calibrated for this model" in said  # the toy has no thresholds of its own
    words = page.locator("#detachment .detachment-words span")
    assert words.all_inner_texts() == services.translators[MODEL].trace(text).target_tokens
    assert all("from the source" in title for title in words.evaluate_all("spans => spans.map(s => s.title)"))


def attention_title(page) -> str:
    return page.evaluate("() => document.querySelector('#attention .js-plotly-plot')?.layout?.title.text || ''")


def test_translations_and_view_changes_skip_the_queue(page, services):
    """The page's busiest requests are Gradio events with queue=False: one plain request each, in its session."""
    with page.expect_response(lambda response: response.url.endswith("/run/predict")) as answer:
        translate(page, services, "A dog runs in the park.")
    assert answer.value.status == 200
    before = attention_title(page)
    with page.expect_response(lambda response: response.url.endswith("/run/predict")) as answer:
        choose(page, "head", "Head 2")
    assert answer.value.status == 200
    page.wait_for_function("(before) => document.querySelector('#attention .js-plotly-plot')?.layout.title.text"
                           " !== before", arg=before, timeout=15000)
    assert ", head 2" in attention_title(page)


def test_a_shared_link_opens_its_view_and_copy_link_gives_it_back(page, server):
    from urllib.parse import parse_qs, urlencode, urlsplit

    query = {"model": MODEL, "text": LONG, "step": 3, "kind": "decoder", "layer": 2, "head": 2}
    page.goto(f"{server}?{urlencode(query)}")
    page.wait_for_function("() => document.querySelector('#status textarea')?.value.startsWith('Opened the link')",
                           timeout=60000)
    view = wait_for_step(page, 3)
    assert view["title"].startswith("Decoder self-attention, layer 2, head 2")
    assert page.input_value("#source textarea") == LONG
    open_tab(page, "Share and export")
    page.click("#copy-link")
    page.wait_for_function("() => document.querySelector('#link textarea, #link input')?.value.includes('step=3')")
    link = page.locator("#link textarea, #link input").first.input_value()
    assert {key: values[0] for key, values in parse_qs(urlsplit(link).query).items()} == {
        **{key: str(value) for key, value in query.items()}, "measure": "weights"}


def test_a_link_with_nonsense_shows_the_default_view_and_a_note(page, server):
    page.goto(f"{server}?model=nope&kind=sideways&step=99&head=%3Cb%3E1%3C%2Fb%3E")
    page.wait_for_function("() => document.querySelector('#status textarea')?.value.includes('could not be used')",
                           timeout=60000)
    status = page.input_value("#status textarea")
    assert "no model 'nope'" in status and "kind 'sideways'" in status and "step 99" in status
    assert page.evaluate("""() => { const box = document.querySelector('#status textarea');
        return box.scrollHeight <= box.clientHeight + 2; }""")  # every line of a long status shows
    view = wait_for_step(page, int(page.input_value("#step input[type=number]")))
    assert view["title"].startswith("Cross-attention, layer 2, mean of heads")  # the last layer, as a first visit
    assert page.locator("#attention b").count() == 0  # the link's markup stays text


def test_a_link_that_compares_opens_on_compare_models_and_says_so(page, server):
    from urllib.parse import urlencode

    page.goto(f"{server}?{urlencode({'model': MODEL, 'text': LONG, 'compare': 'toy-rnn'})}")
    status_starts(page, "Opened the link.")
    assert "Compared with toy-rnn" in page.input_value("#status textarea")
    page.wait_for_function("() => document.querySelector('#compare-plot .js-plotly-plot')?.data?.length >= 2",
                           timeout=15000)
    assert page.get_by_role("tab", name="Compare models").get_attribute("aria-selected") == "true"
    assert page.locator("#compare-plot").is_visible()


def test_compare_steps_both_models_and_every_plot_downloads_svg(page, server, services):
    page.goto(server)
    page.wait_for_function("() => document.querySelector('#status textarea')?.value.startsWith('Translated')",
                           timeout=60000)
    translate(page, services, LONG)
    page.click("#first")
    wait_for_step(page, 1)
    open_tab(page, "Compare models")
    page.click("#compare-model input")
    assert page.get_by_role("option", name=re.compile(f"^{MODEL} ")).count() == 0  # not the model itself
    page.get_by_role("option", name=re.compile("^toy-rnn ")).click()
    page.click("#compare")
    page.wait_for_function("() => document.querySelector('#compare-plot .js-plotly-plot')?.data?.length >= 2",
                           timeout=60000)
    for step in (2, 3):
        page.click("#next")
        page.wait_for_function("(step) => document.querySelector('#compare-plot .js-plotly-plot').layout.title.text"
                               ".includes(`step ${step} of`)", arg=step, timeout=15000)
        rows = page.evaluate("() => document.querySelector('#compare-plot .js-plotly-plot').data.map(t => t.z.length)")
        assert rows[0] == step  # the first model's rows, at the step
    page.hover("#attention .js-plotly-plot")
    svg = page.locator("#attention .modebar-btn[data-title='Download as SVG']")
    assert page.locator("#attention .modebar-btn[data-title='Download as PNG']").count() == 1
    with page.expect_download() as download:
        svg.click()
    name = download.value.suggested_filename
    assert name.startswith(f"{MODEL}_a-red-dog-runs-in-the_cross_L2_mean_step3") and name.endswith(".svg")


def test_the_view_controls_sit_right_above_the_heatmap(page, services):
    translate(page, services, "A dog runs in the park.")
    boxes = page.evaluate("""() => Object.fromEntries(['layer', 'head', 'kind', 'measure', 'attention', 'step-bar'].map(
        id => [id, document.querySelector('#' + id).getBoundingClientRect().toJSON()]))""")
    assert all(boxes[c]["bottom"] <= boxes["attention"]["top"] for c in ("layer", "head", "kind", "measure"))
    assert boxes["attention"]["top"] - boxes["layer"]["bottom"] < 60  # nothing between them
    assert boxes["attention"]["top"] < 900 - 250  # at 1400x900 the heatmap starts on the first screen


# Resolves once the page has been idle a few times over: a heatmap just drawn is measured when the page is idle, then
# redrawn to its margins when it is idle again (ui/static/figures.js `measureMargins`); on a busy machine that comes
# after the drawing a test waited for.
SETTLED = """async () => {
    for (let idle = 0; idle < 5; idle++) await new Promise((resolve) => requestIdleCallback(resolve));
}"""


# Logs which plot Plotly draws in which animation frame (`window.drawnIn`), counting frames from now.
def log_draws(*plots: str) -> str:
    """A page function that logs each `Plotly.react` into one of `plots` (their ids) as [id, frame], the frame
    counted by animation frames from then on (`window.plotlyReact` puts Plotly back); from once the page is idle,
    the redraws it had waiting for that (ui/static/figures.js `whenIdle`, `SETTLED`) done."""
    return """async () => {
    await (%s)();
    window.frame = 0;
    const tick = () => { window.frame++; requestAnimationFrame(tick); };
    requestAnimationFrame(tick);
    window.drawnIn = [];
    window.plotlyReact = window.plotlyReact || Plotly.react;
    Plotly.react = function (gd, ...rest) {
        window.drawnIn.push([gd.closest('%s')?.id, window.frame]);
        return window.plotlyReact.call(this, gd, ...rest);
    };
}""" % (SETTLED, ", ".join(f"#{plot}" for plot in plots))


LOG_DRAWS = log_draws("attention", "probabilities", "comparison-plot", "mask-effect")


def test_a_plot_out_of_sight_is_drawn_once_the_heatmap_is_painted(page, services):
    """On a laptop's screen the translation's probability chart is below the first screen: it is drawn after the
    browser has painted the heatmap, which it would otherwise delay by its own drawing (about a third of a
    translation's time on the page). On a tall screen, in sight, it comes second to the heatmap all the same."""
    page.set_viewport_size({"width": 1400, "height": 900})
    try:
        page.wait_for_function("() => window.Plotly", timeout=60000)
        for text, height, below in (("A man in a blue shirt is standing on a ladder.", 900, True),
                                    ("Two dogs run on the beach.", 2200, False)):
            page.set_viewport_size({"width": 1400, "height": height})
            page.evaluate(LOG_DRAWS)
            translate(page, services, text)
            page.wait_for_function("() => window.drawnIn.some(([id]) => id === 'probabilities')", timeout=15000)
            drawn = dict(reversed(page.evaluate("() => window.drawnIn")))  # each plot's first drawing
            top = page.evaluate("() => document.querySelector('#probabilities').getBoundingClientRect().top")
            assert (top > height) == below
            assert drawn["probabilities"] > drawn["attention"]
    finally:
        page.evaluate("() => { Plotly.react = window.plotlyReact; }")
        page.set_viewport_size({"width": 1400, "height": 2200})


def test_what_heads_off_change_is_drawn_where_the_user_ticked_them_with_the_heatmap(page, services, monkeypatch):
    """On a laptop's screen scrolled to the cross-attention heads, a head ticked: the chart of each token's change
    sits right below the grids, in sight, and is drawn in the frame the heatmap is, the first time too (empty, the
    plot is not displayed, but the tab around it is in sight), and before the translation's probabilities scrolled
    out of sight far above, which wait for the paint."""
    # No word flagged as left out: the words each decoding left out, looked for after it is drawn, would otherwise
    # redraw the heatmap's keys (✗) at a time of their own, among the drawings counted here.
    monkeypatch.setitem(services.translators[MODEL].metrics, "omissions", {"threshold": 1e9, "split": "a test"})
    page.set_viewport_size({"width": 1400, "height": 500})
    translate(page, services, "A man in a blue shirt is standing on a ladder.")
    open_tab(page, "Switch heads off")
    page.wait_for_function("() => window.Plotly", timeout=60000)
    page.evaluate("() => document.querySelector('#mask-cross').scrollIntoView()")
    page.evaluate(LOG_DRAWS)
    try:
        page.locator("#mask-cross label").nth(2).click()
        status_starts(page, "1 head off")
        page.wait_for_function("""() => ['mask-effect', 'probabilities'].every(
            plot => window.drawnIn.some(([id]) => id === plot))""", timeout=15000)
        drawn = dict(reversed(page.evaluate("() => window.drawnIn")))  # each plot's first drawing's frame
        assert drawn["mask-effect"] == drawn["attention"] < drawn["probabilities"]
        page.set_viewport_size({"width": 1400, "height": 900})
        page.evaluate("() => document.querySelector('#mask-cross').scrollIntoView()")
        for heads in ("2 heads off", "1 head off"):
            page.wait_for_function("() => window.drawnIn.some(([id]) => id === 'mask-effect')", timeout=15000)
            page.evaluate(SETTLED)  # the heatmap redrawn to its measured margins, when idle, before the next click
            page.evaluate("() => { window.drawnIn = []; }")
            page.locator("#mask-cross label").nth(3).click()
            status_starts(page, heads)
            page.wait_for_function("() => window.drawnIn.some(([id]) => id === 'mask-effect')", timeout=15000)
            drawn = dict(reversed(page.evaluate("() => window.drawnIn")))  # each plot's first drawing
            assert drawn["mask-effect"] == drawn["attention"]
            assert page.evaluate("() => document.querySelector('#mask-effect').getBoundingClientRect().top") < 800
        page.click("#mask-reset")
        status_starts(page, "All heads")
    finally:
        page.evaluate("() => { Plotly.react = window.plotlyReact; }")
        page.set_viewport_size({"width": 1400, "height": 2200})


def test_an_emptied_plot_is_hidden_and_the_next_figure_drawn_over_it(page, services):
    """Every head back on empties the chart of what heads off change: hidden, not taken apart, so the next head
    off, of another sentence, redraws the same plot (a first drawing takes about twice as long), with that
    sentence's tokens."""
    translate(page, services, "A man plays with a red ball in the park.")
    open_tab(page, "Switch heads off")
    page.locator("#mask-cross label").first.click()
    status_starts(page, "1 head off")
    page.wait_for_function("() => document.querySelector('#mask-effect .js-plotly-plot')", timeout=15000)
    page.evaluate("() => { window.firstPlot = document.querySelector('#mask-effect .js-plotly-plot');"
                  "window.firstSvg = window.firstPlot.querySelector('.main-svg'); }")
    page.click("#mask-reset")
    status_starts(page, "All heads")
    empty = "() => document.querySelector('#mask-effect .inspector-plot').classList.contains('empty')"
    page.wait_for_function(empty, timeout=15000)
    assert page.evaluate("() => document.querySelector('#mask-effect .plot').getBoundingClientRect().height") == 0
    translate(page, services, "Two dogs run on the beach.")
    open_tab(page, "Switch heads off")
    page.locator("#mask-cross label").first.click()
    status_starts(page, "1 head off")
    page.wait_for_function(f"() => !({empty})()", timeout=15000)
    assert page.evaluate("() => document.querySelector('#mask-effect .main-svg') === window.firstSvg")
    ticks = page.evaluate("() => window.firstPlot.layout.xaxis.ticktext || window.firstPlot.data[0].x")
    assert any("hund" in str(tick).lower() for tick in ticks), ticks
    page.click("#mask-reset")
    status_starts(page, "All heads")


def test_a_plot_in_a_closed_tab_is_drawn_when_the_tab_opens_and_fills_its_box(page, services):
    """The comparison chart changes with every head switched off, in a tab the user is not looking at: it is drawn
    when that tab opens (drawn at once, it cost a fifth of the action's time on the page), fitted to its box."""
    translate(page, services, "A man plays with a red ball in the park.")
    open_tab(page, "Switch heads off")
    page.wait_for_function("() => window.Plotly", timeout=60000)
    page.evaluate(LOG_DRAWS)
    try:
        page.locator("#mask-cross label").first.click()
        status_starts(page, "1 head off")
        page.wait_for_function("() => document.querySelector('#mask-effect .js-plotly-plot')", timeout=15000)
        page.wait_for_timeout(300)
        assert "comparison-plot" not in [plot for plot, _ in page.evaluate("() => window.drawnIn")]
        open_tab(page, "Branch and compare")
        page.wait_for_function("() => window.drawnIn.some(([plot]) => plot === 'comparison-plot')", timeout=15000)
    finally:
        page.evaluate("() => { Plotly.react = window.plotlyReact; }")
    page.wait_for_function("""() => {
        const plot = document.querySelector('#comparison-plot .js-plotly-plot');
        const box = document.querySelector('#comparison-plot');
        return plot && box.getBoundingClientRect().width > 0
            && Math.abs(plot.getBoundingClientRect().width - box.getBoundingClientRect().width) < 30; }""",
                           timeout=15000)
    open_tab(page, "Switch heads off")
    page.click("#mask-reset")
    status_starts(page, "All heads")


def test_a_model_switch_after_a_comparison_shows_no_error(page, services):
    errors = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    translate(page, services, "A dog runs in the park.")
    choose(page, "layer", "Layer 2")
    open_tab(page, "Compare models")
    page.click("#compare-model input")
    page.get_by_role("option", name=re.compile("^toy-rnn ")).click()
    page.click("#compare")
    status_starts(page, "Compared with toy-rnn")
    menus_closed(page)
    page.click("#model input")
    page.get_by_role("option", name=re.compile("^toy-rnn")).click()
    status_starts(page, "Translated")
    choose(page, "head", "Head 2")
    page.wait_for_function("() => (document.querySelector('#attention .js-plotly-plot')?.layout?.title.text || '')"
                           ".includes('head 2')", timeout=15000)
    assert page.locator(".toast-body, .toast-wrap .error").count() == 0 and not [e for e in errors if "Value" in e]
    page.click("#model input")
    page.get_by_role("option", name=re.compile(f"^{MODEL}")).click()
    status_starts(page, "Translated")


def test_every_row_and_column_of_a_long_sentences_heatmap_is_named(page, services):
    """Every source token names a column and every step a row, drawn (not thinned), at a laptop's width and on a
    phone, where the heatmap is widened to fit its labels and scrolls sideways."""
    text = " ".join([LONG] * 3)
    traced = services.translators[MODEL].trace(text)
    translate(page, services, text)
    page.click("#last")
    wait_for_step(page, len(traced.target_tokens))
    count = """() => ['xtick', 'ytick'].map((axis) => Array.from(document.querySelectorAll(
        `#attention .${axis} text`)).filter((label) => label.textContent.trim()).length)"""
    assert len(traced.source_tokens) > 40
    assert page.evaluate(count) == [len(traced.source_tokens), len(traced.target_tokens)]
    page.set_viewport_size({"width": 390, "height": 844})
    page.wait_for_function("""() => {
        const box = document.querySelector('#attention');
        return box.scrollWidth > box.clientWidth; }""", timeout=15000)  # wider than a phone: it scrolls
    assert page.evaluate(count) == [len(traced.source_tokens), len(traced.target_tokens)]


def test_on_a_phone_the_step_bar_and_the_heatmap_share_the_screen_and_the_heatmap_fits_its_width(page, server,
                                                                                                services):
    """Issue: on a 390x844 phone the step bar and the top of the heatmap were never on screen together, and the
    heatmap's right side and colour bar were off to the right. Scrolled so that the step bar is at the top, the
    heatmap starts on the screen, and it fits the width, colour bar and all; each step button is one line."""
    phone = page.context.browser.new_page(viewport={"width": 390, "height": 844}, is_mobile=True,
                                          device_scale_factor=2)
    try:
        phone.goto(server)
        translate(phone, services, LONG)
        phone.evaluate("() => window.scrollBy(0, document.querySelector('#step-bar').getBoundingClientRect().top)")
        phone.wait_for_timeout(300)
        top, bottom = phone.evaluate("() => { const box = document.querySelector('#attention')"
                                     ".getBoundingClientRect(); return [box.top, box.bottom]; }")
        assert 0 <= top and (min(bottom, 844) - top) / (bottom - top) > 0.75, (top, bottom)  # most of it in sight
        right = phone.evaluate("""() => Math.max(...Array.from(document.querySelectorAll(
            '#attention .main-svg, #attention .colorbar')).map((part) => part.getBoundingClientRect().right))""")
        assert phone.locator("#attention .colorbar").count() == 1 and right <= 390, right
        lines = step_button_lines(phone)
        assert all(ratio < 1.6 for ratio in lines), lines
    finally:
        phone.close()


# The entries of a menu wider than its text's room: from the input's left to the arrow drawn over its right end.
MENU_FITS = """([selector, labels]) => {
    const input = document.querySelector(`${selector} input`);
    const arrow = document.querySelector(`${selector} .icon-wrap`).getBoundingClientRect();
    const room = arrow.left - input.getBoundingClientRect().left;
    const context = document.createElement('canvas').getContext('2d');
    context.font = getComputedStyle(input).font;
    return labels.filter((label) => context.measureText(label).width > room); }"""


def test_every_menu_shows_its_longest_entry_whole(page, services):
    """The view's menus at 1400 px, and the model menu on a phone, are wide enough for their longest entries."""
    from attention_inspector.model.keys import KIND_LABELS, MEASURE_LABELS
    from attention_inspector.ui.operations import EVERY_HEAD, WHOLE_MODEL

    translate(page, services, "A dog runs.")
    models = [label for label, _ in services.model_choices()]
    menus = {"#kind": list(KIND_LABELS.values()), "#layer": [WHOLE_MODEL, "Layer 12"],
             "#head": [EVERY_HEAD, "Mean of heads"], "#measure": list(MEASURE_LABELS.values()), "#model": models}
    assert {menu: page.evaluate(MENU_FITS, [menu, labels]) for menu, labels in menus.items()} == \
        {menu: [] for menu in menus}
    page.set_viewport_size({"width": 390, "height": 844})
    page.wait_for_timeout(300)
    assert page.evaluate(MENU_FITS, ["#model", models]) == []


def test_on_a_phone_every_tab_head_switch_and_model_view_label_is_readable(page, services):
    page.set_viewport_size({"width": 390, "height": 844})
    translate(page, services, LONG)
    names = page.evaluate("""() => Array.from(document.querySelectorAll(
        '#what-if [role=tablist] button, #what-if .overflow-dropdown button')).filter((b) => b.checkVisibility())
        .map((b) => b.textContent.trim())""")
    assert len(names) == len(TABS) and page.locator("#what-if .overflow-menu > button").is_hidden()  # no "⋯" to find
    open_tab(page, "Switch heads off")  # in the tab bar or among the buttons Gradio moves out of it
    cut = page.evaluate("""() => Array.from(document.querySelectorAll('.head-grid label')).filter((label) =>
        label.checkVisibility()).filter((label) => { const text = label.querySelector('span');
        return text.getBoundingClientRect().right > label.getBoundingClientRect().right + 1; }).length""")
    assert page.locator(".head-grid label").first.is_visible() and cut == 0
    page.get_by_text("Model view: every layer").click()
    page.click("#model-view input")
    page.wait_for_function("() => document.querySelector('#overview .js-plotly-plot')", timeout=20000)
    assert page.evaluate("() => document.querySelector('#overview .plot').offsetWidth") >= 720  # scrolls sideways
    page.click("#model-view input")
    # The comparison's text wraps between words: no line of it starts inside a word (Gradio's own style breaks
    # anywhere, "a can / didate").
    open_tab(page, "Branch and compare")
    starts = page.evaluate("""() => { const node = document.querySelector('#comparison .textfield');
        const walker = document.createTreeWalker(node, NodeFilter.SHOW_TEXT), splits = [];
        for (let text = walker.nextNode(); text; text = walker.nextNode()) {
            let top = null;
            for (let i = 0; i < text.length; i++) {
                const range = document.createRange(); range.setStart(text, i); range.setEnd(text, i + 1);
                const box = range.getBoundingClientRect();
                if (!box.height) continue;
                if (top !== null && box.top > top + 2) splits.push(text.data.slice(i - 1, i + 1));
                top = box.top;
            }
        }
        return splits; }""")
    assert starts and all(pair[0] == " " or pair[1] == " " for pair in starts), starts


# ---- issue 79: the page as a new user opened it, on the shipped en-de ----

@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    """The app on the shipped en-de alone (its long name in the model menu, its byte-pair pieces): (URL, services)."""
    from attention_inspector.model.api.services import load_services
    from attention_inspector.ui import build_demo, launch_options
    from tests.conftest import SHIPPED

    folder = tmp_path_factory.mktemp("shipped")
    (folder / "en-de").symlink_to(SHIPPED / "en-de")
    services = load_services(folder, workers=0)
    demo = build_demo(services)
    demo.launch(server_name="127.0.0.1", server_port=None, prevent_thread_lock=True, quiet=True,
                **launch_options(services))
    yield demo.local_url, services
    demo.close()
    services.close()


def shipped_translate(page, services, text: str) -> list[str]:
    """`text` translated on the shipped en-de's page, its heatmap and candidates drawn; its target tokens."""
    page.wait_for_function("() => document.querySelector('#translation textarea')?.value.length > 0",
                           timeout=60000)  # the first visit's example is in
    page.fill("#source textarea", text)
    page.locator("#translate").scroll_into_view_if_needed()
    page.click("#translate")
    traced = services.translators["en-de"].trace(text)
    page.wait_for_function("""(text) => document.querySelector('#translation textarea')?.value === text
        && document.querySelector('#attention .js-plotly-plot')?.layout?.title.text.includes(' of ')
        && document.querySelector('#candidates .js-plotly-plot')""", arg=traced.text, timeout=60000)
    return traced.target_tokens


# What a new user saw go wrong, measured on the page: the heatmap's box scrolling sideways (its content wider than
# it), the mode bar of the heatmap or of the candidates over its plot's title, and the model menu's text running
# under its arrow (the input's content box, where the text is drawn, past the arrow's left edge).
LAYOUT = """() => {
    const box = (selector) => document.querySelector(selector)?.getBoundingClientRect();
    const meet = (a, b) => !!(a && b) && a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
    const heatmap = document.querySelector('#attention');
    const input = document.querySelector('#model input'), style = getComputedStyle(input);
    return {scrolls: heatmap.scrollWidth > heatmap.clientWidth, widths: [heatmap.scrollWidth, heatmap.clientWidth],
            covered: ['attention', 'candidates'].filter((id) => meet(box(`#${id} .modebar`), box(`#${id} .g-gtitle`))),
            menu: [input.getBoundingClientRect().right - parseFloat(style.paddingRight)
                   - parseFloat(style.borderRightWidth), box('#model .icon-wrap').left]};
}"""


def laid_out(page) -> dict:
    """`LAYOUT` once the page has fitted its plots to the screen (they are redrawn on a resize, when the browser
    is idle), or as it is after 15 s."""
    fine = lambda shown: not shown["scrolls"] and not shown["covered"] and shown["menu"][0] <= shown["menu"][1]
    from playwright.sync_api import TimeoutError as Unsettled

    try:
        page.wait_for_function(f"() => {{ const shown = ({LAYOUT})(); return !shown.scrolls && !shown.covered.length"
                               " && shown.menu[0] <= shown.menu[1]; }", timeout=15000)
    except Unsettled:  # what it shows then is asserted by the test
        pass
    shown = page.evaluate(LAYOUT)
    shown["fine"] = fine(shown)
    return shown


def test_on_a_tablet_a_laptop_and_a_phone_the_heatmap_fits_and_no_toolbar_or_arrow_covers_text(page, shipped):
    """Issue 79: at 768-1024 px a 24-word sentence's heatmap overflowed its column behind a scrollbar; at 768 px the
    candidates' toolbar, grown to two rows in their narrow column, covered "top-5 candidates"; on a phone the
    heatmap's toolbar covered its title (Plotly lifts the title over a colour bar laid above the plot), and the
    model's name ran under the model menu's arrow."""
    url, services = shipped
    wide = page.context.browser.new_page(viewport={"width": 768, "height": 1000})
    try:
        wide.goto(url)
        shipped_translate(wide, services, "A young girl in a pink dress is climbing up the ladder of a wooden "
                                          "playground slide next to her older brother.")
        shown = {}
        for width in (768, 900, 1024):
            wide.set_viewport_size({"width": width, "height": 1000})
            shown[width] = laid_out(wide)
    finally:
        wide.close()
    phone = page.context.browser.new_page(viewport={"width": 390, "height": 844}, is_mobile=True,
                                          device_scale_factor=2)
    try:
        phone.goto(url)
        shipped_translate(phone, services, "The nurse is talking to a patient.")
        shown[390] = laid_out(phone)
    finally:
        phone.close()
    assert all(shown[width]["fine"] for width in shown), shown


# Each trace's cells, categories and labels of a plot on the page (`#id`), as drawn.
DRAWN = """(id) => {
    const plot = document.querySelector(`#${id} .js-plotly-plot`);
    const axes = Object.keys(plot.layout).filter((name) => /^[xy]axis/.test(name)).sort();
    return {data: plot.data.map((trace) => [trace.z, trace.x, trace.y]), title: plot.layout.title.text,
            labels: axes.map((name) => [name, plot.layout[name].ticktext]),
            shapes: (plot.layout.shapes || []).map((s) => [s.x0, s.x1, s.y0, s.y1])};
}"""


def built(figure) -> dict:
    """What `DRAWN` reads, of a figure viz/ builds, as the browser receives it."""
    figure = json.loads(figure.to_json())
    axes = sorted(name for name in figure["layout"] if name.startswith(("xaxis", "yaxis")))
    return {"data": [[trace["z"], trace["x"], trace["y"]] for trace in figure["data"]],
            "title": figure["layout"]["title"]["text"],
            "labels": [[name, figure["layout"][name]["ticktext"]] for name in axes],
            "shapes": [[s["x0"], s["x1"], s["y0"], s["y1"]] for s in figure["layout"].get("shapes", [])]}


def test_in_words_the_title_and_this_step_count_words_and_each_step_is_the_figure_python_builds(page, shipped):
    """Issue 79: in words, the title and *This step* said "step 3 of 9" and quoted pieces beside word rows. On the
    page, stepped by its step box, they count the translation's words, the word being written until its last
    piece. Each step drawn, of one head and of the model view, in cross- and decoder self-attention, is the figure
    viz/views.py builds for it (a step sends what differs from the last step's figure)."""
    from attention_inspector.model.text.words import BPE, word_spans
    from attention_inspector.viz.views import overview_figure

    url, services = shipped
    text = "The nurse is talking to a patient."
    trace = dataclasses.replace(to_arrays(services.translators["en-de"].trace(text)), units="words")
    wide = page.context.browser.new_page(viewport={"width": 1400, "height": 900})
    try:
        wide.goto(url)
        tokens = shipped_translate(wide, services, text)
        words = len(word_spans(tokens, BPE))  # die | krankenschwe@@ ster | spricht | mit | einem | patienten | . | <eos>
        assert tokens[1:3] == ["krankenschwe@@", "ster"] and words == len(tokens) - 1
        choose(wide, "layer", "Layer 2")
        choose(wide, "head", "Head 3")
        wide.locator("#units").scroll_into_view_if_needed()
        wide.locator("#units label", has_text="Words").click()
        wide.get_by_text("Model view: every layer").click()
        wide.locator("#model-view input").scroll_into_view_if_needed()
        wide.locator("#model-view input").check()
        for kind in (CROSS, DECODER):
            if kind == DECODER:
                wide.locator("#kind").scroll_into_view_if_needed()
                choose(wide, "kind", KIND_LABELS[DECODER])
            for step, said in ((2, f'word 2 of {words}: "die" → "krankenschwe…"'),
                               (3, f'word 2 of {words}: "die" → "krankenschwester"'),
                               (len(tokens), f'word {words} of {words}: "." → "&lt;eos&gt;"')):
                wide.locator("#step input[type=number]").scroll_into_view_if_needed()
                wide.fill("#step input[type=number]", str(step))
                wide.press("#step input[type=number]", "Enter")
                wide.wait_for_function("""([said, step, kind]) => ['attention', 'overview'].every((id) => {
                    const title = document.querySelector(`#${id} .js-plotly-plot`)?.layout?.title.text || '';
                    return title.includes(said) && title.includes(`step ${step} of`) && title.includes(kind); })""",
                                       arg=[said, step, KIND_LABELS[kind]], timeout=15000)
                line = wide.locator("#step-text .step-text").inner_text()
                assert line.startswith(said.split(":")[0] + ": reads "), line
                assert wide.evaluate(DRAWN, "attention") == built(attention_figure(trace, kind, 1, 2, step - 1))
                assert wide.evaluate(DRAWN, "overview") == built(overview_figure(trace, kind, step - 1))
    finally:
        wide.close()
