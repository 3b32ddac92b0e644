"""Hostile and odd input, one table, through every path a user reaches: the translator, the UI callbacks
(and every figure they draw), the HTTP API, and a real browser for markup. Each case ends in a clear
message or a translation, never an exception, and the next normal request still works."""

import json
import re
import unicodedata

import numpy as np
import pytest
from gradio_client import Client

from attention_inspector.model.keys import ALL_HEADS, CROSS, KINDS, MEAN, WEIGHTS
from attention_inspector.model.nets.decoding import output_limit
from attention_inspector.model.serving.translator import InputError
from attention_inspector.viz.attention import INVISIBLE_CATEGORIES, MAX_LABEL_CHARS

MODEL = "toy-en-de"

CASES = {  # name: (text, a phrase of the expected message, or how many of its tokens the toy model does not know)
    "empty": ("", "input is empty"),
    "whitespace only": (" \n\t \u3000 ", "input is empty"),
    "12,000 characters": ("A dog runs. " * 1000, "limit is 2000"),
    "200 tokens": ("dog " * 200, "reads at most 127"),
    "one 1,999-character token": ("x" * 1999, 1),
    "emoji": ("A dog 🐶 runs 🐕‍🦺 in the park 👍🏽.", 6),
    "CJK": ("一只狗在公园里跑。", 2),
    "Arabic (right to left)": ("كلب يجري في الحديقة", 4),
    "combining characters": ("A dog runs̈ in the pa̷r̷k̷, café\u0301.", 5),
    "zero-width characters": ("A\u200bdog\u200d runs\ufeff in the park.", 3),
    "bidirectional override": ("A dog \u202eruns in\u202c the park.", 3),
    "control characters": ("A dog\x07 runs\x1b[31m in the park.", 4),
    "NUL": ("A dog\x00 runs in the park.", 2),
    "only NUL": ("\x00", 1),
    "script tag": ("<script>alert(1)</script>", 5),
    "img onerror": ('<img src=x onerror="alert(1)"> A dog.', 9),
    "javascript link": ('<a href="javascript:alert(1)">a dog</a>', 6),
    "wrong language": ("Le chien court dans le parc.", 6),
}
IDS = list(CASES)
MARKUP = ["script tag", "img onerror", "javascript link"]
# The only markup our figures may contain is the hover template's own.
OWN_TAGS = re.compile(r"<(br|/?extra)>")


def strings(value):
    """Every string inside a nested figure dict that a figure can display: not `customdata`, the bare tokens a
    click reads, which no hover template of ours shows (checked in `assert_inert`)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            if key != "customdata":
                yield from strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from strings(item)


def assert_inert(figure: dict) -> None:
    """No user markup, no invisible characters, no overlong labels in anything the figure (Plotly JSON) shows."""
    assert "customdata" not in json.dumps([trace.get("hovertemplate", "") for trace in figure["data"]])
    for text in strings(figure):
        assert "<" not in OWN_TAGS.sub("", text), text
        assert not any(unicodedata.category(c) in INVISIBLE_CATEGORIES for c in text), ascii(text)


@pytest.mark.parametrize("name", IDS)
def test_translator(services, name):
    text, expected = CASES[name]
    translator = services.translators[MODEL]
    if isinstance(expected, str):
        with pytest.raises(InputError, match=expected):
            translator.trace(text)
        return
    traced = translator.trace(text)
    trace = traced.trace
    assert sum(traced.unknown) == expected
    # Every unknown token reads as <unk>: the same sentence with each one replaced by another unknown word
    # translates to the very same tokens, with the very same weights.
    stand_in = " ".join("zzqx" if unknown else token for token, unknown in zip(traced.source_tokens, traced.unknown)
                        if token != "<eos>")
    replaced = translator.trace(stand_in)
    assert replaced.source_tokens[:-1] == ["zzqx" if u else t for t, u in zip(traced.source_tokens, traced.unknown)
                                           ][:-1]
    assert replaced.target_tokens == traced.target_tokens
    np.testing.assert_array_equal(replaced.trace.cross_attention, trace.cross_attention)
    assert 0 < len(traced.target_tokens) <= output_limit(translator.model, len(traced.source_tokens))
    for maps in (trace.encoder_attention, trace.decoder_attention, trace.cross_attention):
        np.testing.assert_allclose(maps.sum(-1), 1, atol=1e-4)


@pytest.mark.parametrize("name", IDS)
def test_ui_events_and_every_figure(events, name):
    text, expected = CASES[name]
    last = events.translate("A dog runs.")["session"]
    out = events.translate(text, session=last, view=(CROSS, 0, MEAN, WEIGHTS, 1, True))
    status = out["status"]
    for said in (status, out.get("translation") or ""):  # the text boxes spell invisible characters out too
        assert not any(unicodedata.category(c) in INVISIBLE_CATEGORIES for c in said.replace("\n", "")), said
    if isinstance(expected, str):
        assert expected in status and out["session"].current is last.current  # the last translation stays
    else:
        assert status.startswith("Translated.") and "Unknown words (read as <unk>)" in status
        session = out["session"]
        figures = [json.loads(out["candidates"]), json.loads(out["probabilities"])]
        for kind in KINDS:
            for head in (MEAN, ALL_HEADS, 1):
                view = events.view(session, kind, 1, head, WEIGHTS, 1, True)
                figures += [json.loads(view["attention"]), json.loads(view["overview"])]
        for figure in figures:
            assert_inert(figure)
        for shown in json.loads(out["step_text"]):  # plain text in a text box, never markup: only invisibles matter
            assert not any(unicodedata.category(c) in INVISIBLE_CATEGORIES for c in shown.replace("\n", ""))
        for shown, _ in out["source_tokens"]:
            assert not any(unicodedata.category(c) in INVISIBLE_CATEGORIES for c in shown)
        assert sum(mark == "unknown" for _, mark in out["source_tokens"]) == expected
        ticks = figures[-2]["layout"]["xaxis"]["ticktext"]
        assert all(len(t) <= MAX_LABEL_CHARS + 20 for t in ticks)  # cut labels (+ room for &lt; escapes)
    assert events.translate("A dog runs.")["translation"]  # the next works


@pytest.fixture(scope="module")
def client(server):
    return Client(server, verbose=False)


@pytest.mark.parametrize("name", IDS)
def test_http_api(client, services, name):
    text, expected = CASES[name]
    if isinstance(expected, str):
        with pytest.raises(Exception, match=expected):
            client.predict(MODEL, text, api_name="/trace")
    else:
        result = client.predict(MODEL, text, api_name="/trace")
        assert result["translation"] == services.translators[MODEL].trace(text).text
        assert sum(result["unknown"]) == expected
    assert client.predict(MODEL, "A dog runs.", api_name="/trace")["translation"]


@pytest.mark.slow
@pytest.mark.parametrize("name", MARKUP)
def test_markup_is_never_rendered_in_the_browser(page, name):
    text = CASES[name][0]
    dialogs = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    before = page.locator("#source-tokens").inner_text()
    page.fill("#source textarea", text)
    page.click("#translate")
    page.wait_for_function("(before) => document.querySelector('#source-tokens').innerText !== before"
                           " && document.querySelector('#status textarea').value.startsWith('Translated')",
                           arg=before, timeout=30000)
    page.wait_for_selector("#attention .js-plotly-plot")
    injected = page.evaluate("""() => ({
        img: document.querySelectorAll('img[src="x"]').length,
        link: document.querySelectorAll('a[href^="javascript"]').length,
        script: Array.from(document.scripts).filter(s => s.textContent.includes('alert(1)')).length,
    })""")
    assert injected == {"img": 0, "link": 0, "script": 0}
    assert not dialogs
    assert "<" in page.locator("#source-tokens").inner_text()  # shown as a literal character


def test_the_status_names_each_unknown_word_once_and_whole():
    """A byte-pair model reads markup and emoji as pieces it does not know: the status names the words they are
    in, each once, not the pieces ("<@@", "/@@", ...)."""
    from pathlib import Path

    from attention_inspector.model.serving.checkpoint import load_checkpoint
    from attention_inspector.ui.operations import translate_status

    translator = load_checkpoint(Path(__file__).resolve().parent.parent / "checkpoints" / "en-de")
    traced = translator.trace("A man <b>waves</b> 😀 and 😀.")
    assert sum(traced.unknown) > 4 and any(token.endswith("@@") for token, unknown in
                                           zip(traced.source_tokens, traced.unknown) if unknown)
    said = translate_status(traced, list(KINDS))
    assert 'Unknown words (read as <unk>): "<", ">", "waves</b", "😀".' in said
    # An emoji's variation selector, split off on its own, is spelled out, not an empty name.
    said = translate_status(translator.trace("I like sunshine ☀️ !"), list(KINDS))
    assert '"⟨U+FE0F⟩"' in said and '""' not in said
