"""The neuron view in a real browser: a click on a cell of a single head's heatmap opens, beside it, the vectors
behind that row's weights; stepping moves it with the step; on a phone it fits the screen's width; its labels are
inside its figure; a tap never shows another row's vectors, and the heatmap's hover names the row clicked."""

import html

import pytest

from attention_inspector.model.keys import CROSS, DECODER, KIND_LABELS
from tests.pages import heatmap_cell
from tests.test_browser import LONG, SETTLED, choose, translate, wait_for_step

pytestmark = pytest.mark.slow  # drives a real browser

# What the neuron view shows: its weights (the last bar chart's), its title, and the heatmap's row it explains.
NEURON = """(row) => {
    const plot = document.querySelector('#neuron .js-plotly-plot');
    const heatmap = document.querySelector('#attention .js-plotly-plot');
    if (!plot?.data || document.querySelector('#neuron').classList.contains('empty')) return null;
    const weights = plot.data.find((trace) => trace.xaxis === 'x4');
    return {weights: weights.x, title: plot.layout.title.text, row: heatmap.data[0].z[row],
            note: document.querySelector('#neuron .neuron-note').textContent,
            right: Math.max(...Array.from(document.querySelectorAll('#neuron .main-svg'))
                .map((part) => part.getBoundingClientRect().right))};
}"""


# The texts of the neuron view's figure that reach past its box, where the browser cuts them off: the weights' labels,
# the panels' names, the keys, the title.
CLIPPED = """() => {
    const svgs = Array.from(document.querySelectorAll('#neuron .main-svg'));
    const box = svgs[0].getBoundingClientRect();
    return svgs.flatMap((svg) => Array.from(svg.querySelectorAll('text'))).filter((text) => text.textContent.trim())
        .filter((text) => {
            const drawn = text.getBoundingClientRect();
            return drawn.left < box.left || drawn.right > box.right || drawn.top < box.top || drawn.bottom > box.bottom;
        })
        .map((text) => text.textContent);
}"""
WEIGHT_LABELS = "() => Array.from(document.querySelectorAll('#neuron .bartext')).map((text) => text.textContent)"


def click_cell(page, row: int, column: int) -> None:
    page.mouse.click(*heatmap_cell(page, row, column))


def neuron_at(page, row: int, query: str) -> dict:
    """The neuron view once it shows the row whose query reads `query`, with the heatmap's `row`."""
    page.wait_for_function(f"(row) => ({NEURON})(row)?.title.includes({html.escape(query)!r})", arg=row,
                           timeout=30000)
    return page.evaluate(NEURON, row)


def test_a_click_on_a_cell_opens_that_rows_vectors_and_the_step_moves_it(page, services):
    translate(page, services, LONG)
    choose(page, "head", "Head 2")
    click_cell(page, 2, 3)
    shown = neuron_at(page, 2, reads(services, 2))
    wait_for_step(page, 3)  # the step moved to the row clicked
    assert shown["weights"] == pytest.approx(shown["row"], abs=1e-4)
    assert "cross.2.2" in shown["title"] and "W_Q" in shown["note"]
    page.keyboard.press("ArrowRight")  # the panel moves with the step
    wait_for_step(page, 4)
    moved = neuron_at(page, 3, reads(services, 3))
    assert moved["weights"] == pytest.approx(moved["row"], abs=1e-4) and moved["weights"] != shown["weights"]
    page.click("#neuron .neuron-close")
    page.wait_for_function("() => document.querySelector('#neuron').classList.contains('empty')", timeout=15000)


def test_on_a_phone_the_neuron_view_fits_the_screen(page, server, services):
    phone = page.context.browser.new_page(viewport={"width": 390, "height": 844}, is_mobile=True,
                                          device_scale_factor=2)
    try:
        phone.goto(server)
        translate(phone, services, LONG)
        choose(phone, "head", "Head 1")
        phone.evaluate("() => window.scrollTo(0, 0)")  # the page's top: the heatmap is below the fold
        click_cell(phone, 2, 1)
        tokens = services.translators["toy-en-de"].trace(LONG)
        shown = neuron_at(phone, 2, tokens.target_tokens[2])
        assert shown["right"] <= 390, shown["right"]
        assert shown["weights"] == pytest.approx(shown["row"], abs=1e-4)
        assert phone.evaluate(CLIPPED) == []  # "weight" was cut to "weigh"
        first_step_alone(phone, services)
    finally:
        phone.close()


def reads(services, t: int) -> str:
    """Step t's row as the neuron view's title and the heatmap's hover name it: the token read → the token written."""
    tokens = services.translators["toy-en-de"].trace(LONG)
    return f"{tokens.decoder_input_tokens[t]} → {tokens.target_tokens[t]}"


def first_step_alone(page, services) -> None:
    """Decoder self-attention's first row: it sees its first key alone, of weight 1, whose label is the widest a weight
    has ("1.00"); the later keys, not yet written, are not listed."""
    choose(page, "kind", KIND_LABELS[DECODER])
    click_cell(page, 0, 0)
    shown = neuron_at(page, 0, reads(services, 0))
    assert "1.00" in page.evaluate(WEIGHT_LABELS)
    assert page.evaluate(CLIPPED) == []  # "0.9" for 0.92 at 1400 px
    first = services.translators["toy-en-de"].trace(LONG).decoder_input_tokens[0]
    assert page.evaluate("() => document.querySelector('#neuron .js-plotly-plot').layout.yaxis2.categoryarray") \
        == [html.escape(f"1: {first}")]
    assert shown["weights"] == [pytest.approx(1.0, abs=1e-6)]


def test_the_weights_labels_and_every_name_are_inside_the_figure(page, services):
    translate(page, services, LONG)
    choose(page, "head", "Head 1")
    first_step_alone(page, services)
    choose(page, "kind", KIND_LABELS[CROSS])


# The heatmap's hover labels: what each says, and the screen's y of the point it names (Plotly draws a label's
# group from that point).
HOVER = """() => Array.from(document.querySelectorAll('#attention .hovertext'))
    .map((label) => ({ text: label.textContent, y: label.getScreenCTM().f }))"""
# A heatmap row's span on the screen, [top, bottom].
ROW_SPAN = """(row) => {
    const plot = document.querySelector('#attention .js-plotly-plot'), yaxis = plot._fullLayout.yaxis;
    const top = plot.getBoundingClientRect().top + yaxis._offset;
    return [top + yaxis.l2p(row - 0.5), top + yaxis.l2p(row + 0.5)].sort((a, b) => a - b);
}"""


def test_after_a_click_the_heatmaps_hover_names_the_row_the_panel_shows(page, services):
    """At the last step the heatmap shows all 14 rows; a click on row 2 moves the step to it, and the heatmap's 3 rows
    left grow taller: the pointer, where row 2 was, is over row 0 now. Until the pointer moves, the hover names the
    cell clicked, where it now is, as the panel does (also when the browser reports the pointer where it rests, as
    after a scroll); moved, it names the cell under it."""
    translate(page, services, LONG)
    choose(page, "kind", KIND_LABELS[CROSS])
    choose(page, "head", "Head 2")
    page.click("#last")
    x, y = heatmap_cell(page, 2, 3)
    page.mouse.move(x, y)
    hovered(page, reads(services, 2))  # the pointer rests on the cell, its hover shown
    page.mouse.click(x, y)
    neuron_at(page, 2, reads(services, 2))
    wait_for_step(page, 3)
    for _ in range(2):
        page.evaluate(SETTLED)
        page.wait_for_function(f"""() => {{
            const [top, bottom] = ({ROW_SPAN})(2), labels = ({HOVER})();
            return labels.length === 1 && labels[0].text.includes({reads(services, 2)!r})
                && top <= labels[0].y && labels[0].y <= bottom;
        }}""", timeout=15000)
        page.mouse.move(x, y)  # where it rests
    page.mouse.move(*heatmap_cell(page, 1, 3))
    hovered(page, reads(services, 1))


def hovered(page, row: str) -> None:
    """Wait until the heatmap's hover names the row that reads `row`."""
    page.wait_for_function(f"() => ({HOVER})().some((label) => label.text.includes({row!r}))", timeout=15000)


# From the next release of a mouse button (a tap's end, where Plotly tells of the click), logs the title of the neuron
# view's figure in every animation frame in which it can be seen (`window.neuronSeen`).
LOG_SEEN = """() => {
    window.neuronSeen = null;
    const log = () => {
        if (!window.neuronSeen) return;
        const box = document.querySelector('#neuron'), plot = box.querySelector('.plot');
        if (plot.checkVisibility({ visibilityProperty: true, opacityProperty: true })) {
            window.neuronSeen.push(box.querySelector('.gtitle')?.textContent || '');
        }
        requestAnimationFrame(log);
    };
    document.addEventListener('mouseup', () => {
        window.neuronSeen = [];
        requestAnimationFrame(log);
    }, { capture: true, once: true });
}"""


def test_a_tap_never_shows_another_rows_vectors(page, services):
    """From a tap on another row until that row's vectors are drawn, the panel shows no row at all."""
    translate(page, services, LONG)
    choose(page, "kind", KIND_LABELS[CROSS])
    choose(page, "head", "Head 2")
    page.click("#last")
    click_cell(page, 9, 1)
    neuron_at(page, 9, reads(services, 9))
    wait_for_step(page, 10)
    page.evaluate(SETTLED)
    page.evaluate(LOG_SEEN)
    click_cell(page, 5, 1)
    neuron_at(page, 5, reads(services, 5))
    wait_for_step(page, 6)
    page.evaluate(SETTLED)
    seen = page.evaluate("() => { const seen = window.neuronSeen; window.neuronSeen = null; return seen; }")
    assert seen and all(reads(services, 5) in title for title in seen), sorted(set(seen))
