"""In a real browser: a late answer never draws over a newer state (two models on one screen, an older sentence
after a newer one). The server is made slow where the race needs it, so each test fails without revisions."""

import re
import time

import pytest

from attention_inspector.model.keys import DECODER, ENCODER, INTEGRATED_GRADIENTS, KIND_LABELS, MEASURE_LABELS, WEIGHTS
from tests.pages import open_tab
from tests.test_browser import LONG, MODEL, choose, translate

pytestmark = pytest.mark.slow  # drives a real browser
OTHER = "toy-rnn"


def label_of(services, model: str) -> str:
    return next(label for label, name in services.model_choices() if name == model)


def title(page) -> str:
    return page.evaluate("() => document.querySelector('#attention .js-plotly-plot')?.layout?.title.text ?? ''")


def translation_is(page, text: str, timeout: int = 30000) -> None:
    page.wait_for_function("(text) => document.querySelector('#translation textarea')?.value === text", arg=text,
                           timeout=timeout)


def steps_in(page_title: str) -> int:
    """N of "step t of N: …" in a heatmap's title."""
    return int(re.search(r"step \d+ of (\d+):", page_title).group(1))


def slow_attributions(services, monkeypatch, ended=None):
    """The test model's attributions made slow, 0.3 s a step (as a large model's integrated gradients are); returns
    its translator. `ended` (a threading.Event) is set once a call has returned or stopped."""
    translator = services.translators[MODEL]
    computed = translator.attributions

    def slow(*args, progress=None, **options):
        def told(done, total):
            time.sleep(0.3)
            if progress is not None:
                progress(done, total)
        try:
            return computed(*args, progress=told, **options)
        finally:
            if ended is not None:
                ended.set()
    monkeypatch.setattr(translator, "attributions", slow)
    return translator


def test_a_slow_measure_never_draws_the_last_model_over_the_next(page, services, monkeypatch):
    """Show integrated gradients (made slow here: 0.3 s a step), switch the model at once: the page shows the new
    model only, whole, and stays so once the measure would have finished; back to the first model and its weights,
    everything is the first model's."""
    import threading

    ended = threading.Event()
    translator = slow_attributions(services, monkeypatch, ended)
    translate(page, services, LONG)
    choose(page, "measure", MEASURE_LABELS[INTEGRATED_GRADIENTS])
    page.wait_for_function("() => document.querySelector('#status textarea')?.value.startsWith('Computing')",
                           timeout=15000)
    choose(page, "model", label_of(services, OTHER))
    other = services.translators[OTHER].trace(LONG)
    translation_is(page, other.text)
    # The measure's computation has ended (stopped or done: waited for, however slow the machine), and its answer,
    # sent as it ended, has had time to reach the page and be drawn if it were going to be.
    assert ended.wait(60), "the measure's computation did not end within 60 s"
    page.wait_for_timeout(1500)
    assert page.locator("#translation textarea").input_value() == other.text
    assert steps_in(title(page)) == len(other.target_tokens) and "integrated" not in title(page)
    choose(page, "model", label_of(services, MODEL))
    mine = translator.trace(LONG)
    translation_is(page, mine.text)
    choose(page, "measure", MEASURE_LABELS[WEIGHTS])
    page.wait_for_timeout(500)
    assert page.locator("#translation textarea").input_value() == mine.text
    assert steps_in(title(page)) == len(mine.target_tokens)


def test_a_slow_measures_progress_shows_beside_stop_over_nothing(page, services, monkeypatch):
    """Integrated gradients at every step (made slow here): Gradio's progress bar shows in the row of Stop, above
    the heatmap; drawn over the core view, it covered the translation and the status line."""
    slow_attributions(services, monkeypatch)
    translate(page, services, LONG)
    choose(page, "measure", MEASURE_LABELS[INTEGRATED_GRADIENTS])
    page.wait_for_function(
        "() => /step \\d+ of/.test(document.querySelector('#progress .progress-level')?.textContent)", timeout=15000)
    boxes = page.evaluate("""() => Object.fromEntries(['#progress [data-testid=status-tracker]', '#progress',
        '#stop-measure', '#translation', '#status', '#attention'].map(
            selector => [selector, document.querySelector(selector).getBoundingClientRect().toJSON()]))""")
    bar, row = boxes["#progress [data-testid=status-tracker]"], boxes["#progress"]
    assert row["top"] <= bar["top"] and bar["bottom"] <= row["bottom"] + 1
    assert boxes["#translation"]["bottom"] < bar["top"] and boxes["#status"]["bottom"] < bar["top"]
    assert bar["bottom"] <= boxes["#attention"]["top"]
    assert abs(boxes["#stop-measure"]["top"] - row["top"]) < 20  # beside Stop
    page.click("#stop-measure")
    page.wait_for_function("() => document.querySelector('#status textarea')?.value.startsWith('Stopped')",
                           timeout=15000)


def test_a_tabs_answer_while_a_slow_measure_computes_leaves_stop_and_its_progress_in_sight(page, services,
                                                                                          monkeypatch):
    """Issue 57's walk: a tab's answer (the head statistics here) arriving while integrated gradients at every step
    computed hid Stop computing and the progress with it (the row showed only while the status said "Computing"),
    and the computation went on out of reach; once computed, its "computed." replaced the tab's line."""
    slow_attributions(services, monkeypatch)
    translate(page, services, LONG)
    choose(page, "measure", MEASURE_LABELS[INTEGRATED_GRADIENTS])
    page.wait_for_function(
        "() => /step \\d+ of/.test(document.querySelector('#progress .progress-level')?.textContent)", timeout=15000)
    open_tab(page, "Head statistics")
    page.click("#head-statistics")
    page.wait_for_function("() => !document.querySelector('#status textarea').value.startsWith('Computing')",
                           timeout=15000)
    assert page.locator("#stop-measure").is_visible() and page.locator("#progress .progress-level").is_visible()
    said = page.input_value("#status textarea")
    assert said.startswith("Statistics of ")
    page.locator("#stop-measure").wait_for(state="hidden", timeout=60000)  # computed: drawn, the tab's line kept
    assert page.input_value("#status textarea") == said and "integrated gradients" in title(page)


def test_on_a_phone_a_slow_measures_progress_has_a_line_of_its_own_above_stop(page, services, monkeypatch):
    """Issue 57's walk: at 390 px the progress's count and its timer were drawn over each other in a box of 126 px
    beside Stop."""
    slow_attributions(services, monkeypatch)
    page.set_viewport_size({"width": 390, "height": 844})
    try:
        translate(page, services, LONG)
        choose(page, "measure", MEASURE_LABELS[INTEGRATED_GRADIENTS])
        page.wait_for_function(
            "() => /step \\d+ of/.test(document.querySelector('#progress .progress-level')?.textContent)",
            timeout=15000)
        boxes = page.evaluate("""() => Object.fromEntries(['#progress', '#stop-measure'].map(
            selector => [selector, document.querySelector(selector).getBoundingClientRect().toJSON()]))""")
        assert boxes["#progress"]["width"] >= 300 and boxes["#stop-measure"]["top"] >= boxes["#progress"]["bottom"]
        assert not page.locator("#progress .meta-text").is_visible()  # the timer, drawn over the count
        page.click("#stop-measure")
        page.wait_for_function("() => document.querySelector('#status textarea')?.value.startsWith('Stopped')",
                               timeout=15000)
    finally:
        page.set_viewport_size({"width": 1400, "height": 2200})


def test_a_view_chosen_while_a_slow_measure_computes_is_the_one_it_is_drawn_in(page, services, monkeypatch):
    """Issue 57's walk: decoder self-attention chosen while integrated gradients at every step computed snapped back
    to cross-attention once they were computed (drawn in the view they were asked in); encoder self-attention
    chosen meanwhile became cross-attention without the reason the page gives at other times."""
    slow_attributions(services, monkeypatch)
    translate(page, services, LONG)
    choose(page, "measure", MEASURE_LABELS[INTEGRATED_GRADIENTS])
    page.wait_for_function("() => document.querySelector('#status textarea')?.value.startsWith('Computing')",
                           timeout=15000)
    choose(page, "kind", KIND_LABELS[ENCODER])  # gradients explain predictions: not in the encoder's view, and why
    page.wait_for_function("""() => document.querySelector('#status textarea')?.value.startsWith('Computing')
        && document.querySelector('#status textarea').value.includes("not in the encoder's view")""", timeout=15000)
    choose(page, "kind", KIND_LABELS[DECODER])
    page.wait_for_function("() => document.querySelector('#status textarea')?.value.endsWith('computed.')",
                           timeout=60000)
    # Drawn after the status (a frame or more later on a busy machine): waited for, then left a moment to snap back.
    page.wait_for_function("() => document.querySelector('#attention .js-plotly-plot')?.layout?.title.text"
                           ".startsWith(\"Attribution of each step's prediction to the target prefix\")", timeout=15000)
    page.wait_for_timeout(500)
    assert page.input_value("#kind input") == KIND_LABELS[DECODER]
    assert title(page).startswith("Attribution of each step's prediction to the target prefix")


def test_a_beam_search_run_while_a_slow_measure_computes_is_answered_and_says_the_measure_stopped(page, services,
                                                                                                   monkeypatch):
    """Issue 57's walk: Run beam search while integrated gradients at every step computed waited for them (its new
    state computed them again, the measure's own event stopped out of sight), and Stop computing then dropped the
    beam search without a word. The measure is held at its second step until the beam search has answered: an
    answer that waited for the measure's steps never comes (no time limit that a slower machine could outrun)."""
    import threading

    translator = services.translators[MODEL]
    computed, held = translator.attributions, threading.Event()

    def slow(*args, progress=None, **options):
        def told(done, total):
            if done >= 2:
                held.wait(60)  # until the beam search's answer is on the page
            if progress is not None:
                progress(done, total)
        return computed(*args, progress=told, **options)
    monkeypatch.setattr(translator, "attributions", slow)
    try:
        translate(page, services, LONG)
        choose(page, "measure", MEASURE_LABELS[INTEGRATED_GRADIENTS])
        page.wait_for_function("() => document.querySelector('#status textarea')?.value.startsWith('Computing')",
                               timeout=15000)
        open_tab(page, "Beam search")
        page.click("#beam")
        page.wait_for_function("() => document.querySelector('#status textarea').value"
                               ".includes('at every step stopped')", timeout=30000)  # the measure still held
        assert not held.is_set()
        assert page.locator("#n-best tbody tr").count() > 0
        assert page.input_value("#measure input") == MEASURE_LABELS[WEIGHTS]
    finally:
        held.set()
    page.locator("#stop-measure").wait_for(state="hidden")


def test_of_quick_translations_the_last_one_stays(page, services, monkeypatch):
    """Four sentences translated in quick succession, the first made slow (its answer comes last): the box and the
    translation are the fourth's."""
    import threading

    sentences = ["A man plays.", "A red ball.", "A woman runs in the park.", "A child plays with a dog."]
    traced, answered = services.trace, threading.Event()

    def trace(model, text, *args, **options):
        if text == sentences[0]:
            time.sleep(2)
            try:
                return traced(model, text, *args, **options)
            finally:
                answered.set()
        return traced(model, text, *args, **options)
    monkeypatch.setattr(services, "trace", trace)
    translate(page, services, LONG)
    for sentence in sentences:
        page.fill("#source textarea", sentence)
        page.click("#translate")
        page.wait_for_timeout(150)
    last = services.translators[MODEL].trace(sentences[-1]).text
    translation_is(page, last)
    # The first sentence's trace has returned (waited for, however slow the machine), and its answer has had time to
    # reach the page and be drawn if it were going to be.
    assert answered.wait(60), "the first sentence's trace did not return within 60 s"
    page.wait_for_timeout(1500)
    assert page.locator("#translation textarea").input_value() == last
    assert page.locator("#source textarea").input_value() == sentences[-1]


def test_the_page_keeps_nothing_of_its_events_in_the_browsers_storage(page, services):
    """Gradio's run history stored every event's inputs and outputs (whole figures) in localStorage and rewrote
    them after each event: the page got slower the longer it was used, and kept the user's sentences."""
    for text in ("A man plays.", "A red ball.", LONG):
        translate(page, services, text)
    stored = page.evaluate("() => JSON.stringify(Object.assign({}, localStorage)).length")
    assert stored < 2000 and "ball" not in page.evaluate("() => JSON.stringify(Object.assign({}, localStorage))")
    assert page.locator("footer").get_by_text("Runs").count() == 0


# Counts the values Svelte copies as it snapshots components' state (`window.copies`), and their characters as JSON
# (`window.copied`), from now on.
COUNT_COPIES = """() => {
    window.copies = 0;
    window.copied = 0;
    window.structuredCloneOwn = window.structuredCloneOwn || window.structuredClone;
    window.structuredClone = function (...values) {
        window.copies++;
        try { window.copied += JSON.stringify(values[0])?.length || 0; } catch (error) {}
        return window.structuredCloneOwn(...values);
    };
}"""
TAB_NAMES = ["Branch and compare", "Switch heads off", "Beam search", "Head statistics", "Compare models",
             "Counterfactual", "Share and export", "Where each word came from", "Models from the Hub"]


def test_a_translation_costs_the_page_no_more_once_every_tab_has_been_opened(page, services):
    """Gradio's frontend copies the state of every component an event has shown progress on, and of all inside it,
    at each event's every status. The page's load showed it on the tabs: once every tab had been opened (its
    components drawn), each translation copied all of them, and the page got slower with use."""
    translate(page, services, "A man plays.")
    page.evaluate(COUNT_COPIES)
    translate(page, services, "A dog runs in the park.")
    fresh = page.evaluate("() => window.copies")
    for name in TAB_NAMES:
        open_tab(page, name)
        page.wait_for_timeout(200)
    page.evaluate(COUNT_COPIES)
    translate(page, services, "A woman sings a song.")
    used = page.evaluate("() => window.copies")
    page.evaluate("() => { window.structuredClone = window.structuredCloneOwn; }")
    open_tab(page, "Branch and compare")
    assert used < 1.2 * fresh + 50, (fresh, used)


def test_a_translation_copies_none_of_the_tabs_answers_once_they_have_been_drawn(page, services):
    """The tabs' answers are whole figures and tables: shown progress on, they were copied at each status of every
    later event (each translation), so the page got slower the more answers the user had asked for. Their questions
    show their progress on an empty element above them (ui/plots.py `answers_view`)."""
    translate(page, services, "A man plays.")
    page.evaluate(COUNT_COPIES)
    translate(page, services, "A dog runs in the park.")
    fresh = page.evaluate("() => [window.copies, window.copied]")
    for tab, button, said in (("Head statistics", "#head-statistics", "Statistics of"),
                              ("Head statistics", "#alignments", "Alignments of"),
                              ("Where each word came from", "#contributions", "Contributions of"),
                              ("Where each word came from", "#faithfulness", "Step ")):
        open_tab(page, tab)
        page.click(button)
        page.wait_for_function("(said) => document.querySelector('#status textarea')?.value.startsWith(said)",
                               arg=said, timeout=30000)
    page.wait_for_timeout(500)
    page.evaluate(COUNT_COPIES)
    translate(page, services, "A woman sings a song.")
    used = page.evaluate("() => [window.copies, window.copied]")
    page.evaluate("() => { window.structuredClone = window.structuredCloneOwn; }")
    assert used[0] < 1.2 * fresh[0] + 50 and used[1] < 1.2 * fresh[1] + 5000, (fresh, used)


def test_a_tabs_slow_answer_shows_its_progress_in_the_tab_above_the_answers(page, services, monkeypatch):
    """Which explanation to trust, its integrated gradients made slow: Gradio's progress shows in the tab, right
    above the answers (over neither them nor the button), and takes room only while it runs."""
    from attention_inspector.ui.tabs import sources

    measured = sources.integrated_faithfulness

    def slow(*args, **options):
        time.sleep(2)
        return measured(*args, **options)
    monkeypatch.setattr(sources, "integrated_faithfulness", slow)
    translate(page, services, LONG)
    open_tab(page, "Where each word came from")
    page.click("#faithfulness")
    box, tracker = "#faithfulness-answers-progress", "#faithfulness-answers-progress [data-testid=status-tracker]"
    page.wait_for_function(f"""() => document.querySelector('{tracker}')?.matches('.minimal:not(.hide)')
        && !document.querySelector('#faithfulness-curves').classList.contains('empty')""", timeout=15000)
    boxes = page.evaluate(f"""() => Object.fromEntries(['{box}', '{tracker}', '#faithfulness-answers', '#faithfulness']
        .map(selector => [selector, document.querySelector(selector).getBoundingClientRect().toJSON()]))""")
    row, bar, answers = boxes[box], boxes[tracker], boxes["#faithfulness-answers"]
    assert boxes["#faithfulness"]["bottom"] <= row["top"] and row["bottom"] <= answers["top"] + 1
    assert row["top"] <= bar["top"] and bar["bottom"] <= row["bottom"] + 1 and row["height"] >= 50
    page.wait_for_function("() => [...document.querySelectorAll('#faithfulness-table th')]"
                           ".some(th => th.textContent === 'integrated gradients')", timeout=60000)
    page.wait_for_function(f"() => document.querySelector('{box}').getBoundingClientRect().height < 25",
                           timeout=5000)
