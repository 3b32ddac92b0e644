"""The neuron view in a real browser: a click on a cell of a single head's heatmap opens, beside it, the vectors
behind that row's weights; stepping moves it with the step; on a phone it fits the screen's width."""

import pytest

from tests.pages import heatmap_cell
from tests.test_browser import LONG, choose, translate, wait_for_step

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


def click_cell(page, row: int, column: int) -> None:
    page.mouse.click(*heatmap_cell(page, row, column))


def neuron_at(page, row: int, query: str) -> dict:
    """The neuron view once it shows the row whose query reads `query`, with the heatmap's `row`."""
    page.wait_for_function(f"(row) => ({NEURON})(row)?.title.includes({query!r})", arg=row, timeout=30000)
    return page.evaluate(NEURON, row)


def test_a_click_on_a_cell_opens_that_rows_vectors_and_the_step_moves_it(page, services):
    translate(page, services, LONG)
    choose(page, "head", "Head 2")
    click_cell(page, 2, 3)
    tokens = services.translators["toy-en-de"].trace(LONG)
    reads = lambda t: f"{tokens.decoder_input_tokens[t]} → {tokens.target_tokens[t]}"  # noqa: E731
    shown = neuron_at(page, 2, reads(2))
    wait_for_step(page, 3)  # the step moved to the row clicked
    assert shown["weights"] == pytest.approx(shown["row"], abs=1e-4)
    assert "cross.2.2" in shown["title"] and "W_Q" in shown["note"]
    page.keyboard.press("ArrowRight")  # the panel moves with the step
    wait_for_step(page, 4)
    moved = neuron_at(page, 3, reads(3))
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
    finally:
        phone.close()
