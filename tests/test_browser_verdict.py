"""The verdict under the translation in a real browser, at a desktop's and a phone's size: one plain line, the
numbers behind "why?", the source words the translation left out marked once they are looked for; on a phone the
line takes at most three lines and the step bar stays on the first screen."""

import pytest

from tests.test_browser import LONG, translate

pytestmark = pytest.mark.slow  # drives a real browser

# The verdict as the page shows it, once the source words were looked for (their line filled).
SHOWN = """() => {
    const box = document.querySelector('#detachment');
    const source = [...box.querySelectorAll('.detachment-source span')];
    if (!source.length) return null;
    const plain = box.querySelector('.detachment-plain');
    const lines = new Set([...plain.getClientRects()].map((rect) => Math.round(rect.top))).size;
    return {plain: plain.textContent, lines, source: source.map((word) => word.textContent),
            marked: source.filter((word) => word.classList.contains('left-out')).map((word) => word.textContent),
            stepBar: document.querySelector('#step-bar').getBoundingClientRect().bottom + window.scrollY};
}"""


def verdict(page, services, text: str, threshold: float, monkeypatch) -> dict:
    """The verdict of `text`'s translation with the toy's omissions flagged from `threshold`."""
    monkeypatch.setitem(services.translators["toy-en-de"].metrics, "omissions", {"threshold": threshold,
                                                                                  "split": "a test"})
    translate(page, services, text)
    words = services.translators["toy-en-de"].source_tokens(text)  # the toy's words are its tokens
    page.wait_for_function(f"(words) => ({SHOWN})()?.source.join(' ') === words", arg=" ".join(words),
                           timeout=30000)
    return page.evaluate(SHOWN)


@pytest.mark.parametrize("size", [{"width": 1400, "height": 900}, {"width": 390, "height": 844}])
def test_the_plain_line_names_the_words_left_out_and_marks_them_at_both_sizes(page, server, services, size,
                                                                              monkeypatch):
    screen = page.context.browser.new_page(viewport=size, is_mobile=size["width"] < 600)
    try:
        screen.goto(server)
        shown = verdict(screen, services, LONG, 1e9, monkeypatch)  # nothing flagged: the plain line says so
        assert shown["plain"] == "Looks faithful" and shown["marked"] == [] and shown["lines"] == 1
        shown = verdict(screen, services, "A red dog runs in a park.", -1e9, monkeypatch)  # every word flagged
        # No model here translates de into en: the toy's own contrastive conditioning, content words only.
        assert shown["plain"].startswith("May have left out: “red dog runs”, “park”")
        assert shown["marked"] == ["red", "dog", "runs", "park"]  # not "a", "in" (stop words) nor the full stop
        assert shown["lines"] <= 3 and shown["stepBar"] <= size["height"], shown  # the step bar on the first screen
        keys = screen.evaluate("() => document.querySelector('#attention .js-plotly-plot').layout.xaxis.ticktext")
        assert keys[:8] == ["a", "red ✗", "dog ✗", "runs ✗", "in", "a", "park ✗", "."]
        phrase = screen.locator("#detachment .detachment-plain span", has_text="“park”")
        assert phrase.get_attribute("title").startswith("park: left out? the translation is")  # its evidence
        numbers = screen.locator("#detachment .detachment-verdict")
        assert numbers.is_hidden()
        screen.click("#detachment .detachment-why")
        assert "Vamvas & Sennrich" in numbers.inner_text() and "by the translating model alone" in numbers.inner_text()
    finally:
        screen.close()
