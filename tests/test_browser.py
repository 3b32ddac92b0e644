"""A real headless browser (Debian's chromium driven by Playwright) uses the app like a person would."""

import json
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # drives a real browser

SCREENSHOT = Path(os.environ.get("SCREENSHOT", Path(__file__).parent / "artifacts" / "app.png"))


def heatmap(page) -> dict:
    """The data and title the browser is showing in the attention plot."""
    page.wait_for_selector("#attention .js-plotly-plot")
    return page.evaluate("""() => {
        const plot = document.querySelector('#attention .js-plotly-plot');
        // _fullData holds the decoded arrays (data may keep Plotly's base64 typed-array form).
        const z = plot._fullData.map(trace => Array.from(trace.z, row => Array.from(row)));
        return {z: z, title: plot.layout.title.text, ticks: Array.from(plot._fullLayout.xaxis.ticktext)};
    }""")


def wait_for_change(page, before: dict) -> dict:
    page.wait_for_function("""(before) => {
        const plot = document.querySelector('#attention .js-plotly-plot');
        if (!plot || !plot._fullData) return false;
        const z = plot._fullData.map(trace => Array.from(trace.z, row => Array.from(row)));
        return JSON.stringify(z) + plot.layout.title.text !== before;
    }""", arg=before_key(before), timeout=15000)
    return heatmap(page)


def before_key(shown: dict) -> str:
    """The same string the page computes, to notice when the plot has changed."""
    return json.dumps(shown["z"], separators=(",", ":")) + shown["title"]


def test_translate_step_and_switch_views(page):
    dialogs = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.fill("#source textarea", 'A dog <img src=x onerror="alert(1)"> runs in the park.')
    page.click("#translate")
    page.wait_for_function("() => document.querySelector('#translation textarea').value.length > 0", timeout=30000)
    first = heatmap(page)
    assert "step 1 of" in first["title"]

    page.click("#next")
    second = wait_for_change(page, first)
    assert "step 2 of" in second["title"]
    page.click("#next")
    third = wait_for_change(page, second)
    assert "step 3 of" in third["title"] and len(third["z"][0]) == 3  # cross-attention rows: the prefix

    page.get_by_label("Encoder self-attention").check()
    encoder = wait_for_change(page, third)
    assert encoder["title"].startswith("Encoder self-attention")
    assert len(encoder["z"][0]) == len(encoder["z"][0][0])  # source x source

    page.click("#head input")
    page.get_by_role("option", name="Head 2", exact=True).click()
    head_two = wait_for_change(page, encoder)
    assert "head 2" in head_two["title"] and head_two["z"] != encoder["z"]

    # The user's markup is shown as text, never parsed: no <img> element exists anywhere on the page.
    assert page.locator("img[src='x']").count() == 0
    assert "&lt;" in head_two["ticks"] and not any("<" in tick for tick in head_two["ticks"])
    assert page.locator("#attention .xtick text", has_text="<").count() >= 1  # drawn as a literal character
    assert not dialogs

    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOT), full_page=True)
    assert SCREENSHOT.stat().st_size > 10_000
