"""The app's callbacks and its API, called directly and through a launched server with gradio_client."""

import dataclasses

import numpy as np
import pytest
from gradio_client import Client

from viz.views import ALL_HEADS, CROSS, DECODER, ENCODER, MEAN

MODEL = "toy-en-de"


def test_app_lists_good_checkpoints_and_reports_broken_ones(app_module):
    assert [value for _, value in app_module.model_choices()] == [MODEL, "toy-rnn"]
    assert "broken" in app_module.load_status() and "config.json" in app_module.load_status()
    assert app_module.DEFAULT_MODEL == MODEL


OUTPUTS = {"trace": "trace_state", "translation": "translation", "status": "status", "source": "source_view",
           "step": "step", "kind": "kind_choice", "layer": "layer_choice", "head": "head_choice",
           "attention": "attention_plot", "candidates": "candidates_plot", "probabilities": "probabilities_plot",
           "step_text": "step_text", "overview": "overview_plot"}


def by_name(app_module, outputs: dict) -> dict:
    """A callback's outputs (keyed by component) keyed by short names; components it left alone are absent."""
    return {name: outputs[getattr(app_module, attribute)] for name, attribute in OUTPUTS.items()
            if getattr(app_module, attribute) in outputs}


def translate(app_module, text, kind=CROSS, layer=1, head=MEAN, model=MODEL):
    return by_name(app_module, app_module.translate(model, text, kind, layer, head))


def test_translate_traces_once_and_draws_the_model_attention(app_module):
    out = translate(app_module, "A dog runs in the park.")
    trace = out["trace"]
    translator = app_module.TRANSLATORS[MODEL]
    traced = translator.trace("A dog runs in the park.")
    assert out["translation"] == traced.text and out["translation"].startswith("Ein Hund")
    assert trace.target_tokens == traced.target_tokens and trace.steps == len(trace.target_tokens)
    expected = traced.trace
    np.testing.assert_allclose(trace.cross, expected.cross_attention)
    np.testing.assert_allclose(np.array(out["attention"].data[0].z), expected.cross_attention[1].mean(0)[:1])
    assert "step 1 of" in out["step_text"]


def test_stepping_reads_the_stored_trace(app_module, monkeypatch):
    trace = translate(app_module, "A man plays with a red ball.")["trace"]
    monkeypatch.setattr(app_module.TRANSLATORS[MODEL], "model", None)  # any model call would now fail

    def move(where, current, kind=CROSS, layer=0, head=0, model_view=False):
        return by_name(app_module, app_module.move(trace, where, kind, layer, head, current, model_view))

    out = move("next", 1, DECODER, 0, 2)
    assert out["step"] == 2
    np.testing.assert_allclose(np.array(out["attention"].data[0].z), trace.decoder[0, 2, :2, :2])
    assert move("last", 2)["step"] == trace.steps
    assert move("next", trace.steps)["step"] == trace.steps
    assert move("previous", 1)["step"] == 1
    assert out["overview"] is None  # drawn only when the model view is switched on
    out = by_name(app_module, app_module.change_kind(trace, ENCODER, 1, 2, 2))
    np.testing.assert_allclose(np.array(out["attention"].data[0].z), trace.encoder[1, 2])
    assert out["layer"].value == 1 and out["head"].value == 2
    figure = by_name(app_module, app_module.render(trace, CROSS, 1, ALL_HEADS, 3))["attention"]
    assert len(figure.data) == 4
    overview = by_name(app_module, app_module.render(trace, CROSS, 1, MEAN, 3, model_view=True))["overview"]
    assert len(overview.data) == 2 * 4
    np.testing.assert_allclose(np.array(overview.data[5].z), trace.cross[1, 1, :3])


@pytest.mark.parametrize("text,message", [
    ("", "input is empty"),
    ("   \n\t ", "input is empty"),
    ("dog " * 300, "reads at most 127"),
    ("x" * 5000, "limit is 2000"),
])
def test_bad_input_gets_a_clear_message_and_keeps_the_last_translation(app_module, text, message):
    out = translate(app_module, text)
    assert message in out["status"]
    assert set(out) == {"status"}  # the previous translation and its views stay on screen
    assert translate(app_module, "A dog.")["translation"]  # and the next request works


@pytest.mark.parametrize("text", ["🐶 🐕‍🦺", "一只狗在跑", "كلب يجري", "<script>alert(1)</script>", "Le chien court."])
def test_any_script_or_markup_translates_with_unknown_words_marked(app_module, text):
    out = translate(app_module, text)
    assert out["trace"] is not None and "Unknown words" in out["status"]
    assert "<script" not in out["attention"].to_json()
    assert any(label == "unknown" for _, label in out["source"])


def test_an_rnn_offers_only_cross_attention(app_module):
    out = translate(app_module, "A dog runs.", ENCODER, 2, 3, model="toy-rnn")
    assert out["kind"].choices == [(CROSS, CROSS)] and out["kind"].value == CROSS
    assert "no self-attention" in out["status"]
    assert out["layer"].value == 0 and out["head"].value == MEAN
    np.testing.assert_allclose(np.array(out["attention"].data[0].z), out["trace"].cross[0].mean(0)[:1])
    stale = by_name(app_module, app_module.render(out["trace"], DECODER, 0, 1, 1))  # a stale kind falls back
    np.testing.assert_allclose(np.array(stale["attention"].data[0].z), out["trace"].cross[0, 1, :1])


def test_views_without_a_trace_say_so(app_module):
    for out in (app_module.render(None, CROSS, 0, MEAN, 1, True), app_module.move(None, "next", CROSS, 0, MEAN, 1),
                app_module.change_kind(None, ENCODER, 0, MEAN, 1)):
        assert by_name(app_module, out) == {"status": "Translate a sentence first: there is nothing to show yet."}


def test_a_single_head_model_offers_just_that_head(app_module):
    trace = translate(app_module, "A dog.")["trace"]
    assert [value for _, value in app_module.head_choices(trace, CROSS)] == [MEAN, ALL_HEADS, 0, 1, 2, 3]
    single = dataclasses.replace(trace, cross=trace.cross[:, :1])
    assert app_module.head_choices(single, CROSS) == [("Head 1", 0)]


def test_server_answers_gradio_client(server, app_module):
    translator = app_module.TRANSLATORS[MODEL]
    client = Client(server, verbose=False)
    result = client.predict(MODEL, "A woman plays with a child.", api_name="/trace")
    assert result["translation"] == translator.trace("A woman plays with a child.").text
    steps, sources = len(result["target_tokens"]), len(result["source_tokens"])
    cross = np.array(result["cross_attention"])
    assert cross.shape == (2, 4, steps, sources)
    np.testing.assert_allclose(cross.sum(-1), 1, atol=1e-3)
    assert np.array(result["decoder_attention"]).shape == (2, 4, steps, steps)
    assert np.array(result["encoder_attention"]).shape == (2, 4, sources, sources)
    with pytest.raises(Exception, match="empty"):
        client.predict(MODEL, "  ", api_name="/trace")
    ui = client.predict(MODEL, "A dog.", CROSS, 0, MEAN, api_name="/translate")
    assert ui[0] == translator.trace("A dog.").text
