"""The app's callbacks and its API, called directly and through a launched server with gradio_client."""

import numpy as np
import pytest
from gradio_client import Client

from viz.views import ALL_HEADS, CROSS, DECODER, ENCODER, MEAN

MODEL = "toy-en-de"


def test_app_lists_good_checkpoints_and_reports_broken_ones(app_module):
    assert [value for _, value in app_module.model_choices()] == [MODEL, "toy-rnn"]
    assert "broken" in app_module.load_status() and "config.json" in app_module.load_status()
    assert app_module.DEFAULT_MODEL == MODEL


def translate(app_module, text, kind=CROSS, layer="Layer 2", head=MEAN):
    return dict(zip(["trace", "translation", "status", "source", "step", "kind", "layer", "head",
                     "attention", "candidates", "probabilities", "step_text", "overview"],
                    app_module.translate(MODEL, text, kind, layer, head)))


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
    step, figure, candidates, probabilities, text, overview = app_module.move(trace, 1, "next", DECODER, "Layer 1",
                                                                              "Head 3")
    assert step == 2
    np.testing.assert_allclose(np.array(figure.data[0].z), trace.decoder[0, 2, :2, :2])
    assert app_module.move(trace, 2, "last", CROSS, "Layer 1", "Head 1")[0] == trace.steps
    assert app_module.move(trace, trace.steps, "next", CROSS, "Layer 1", "Head 1")[0] == trace.steps
    assert app_module.move(trace, 1, "previous", CROSS, "Layer 1", "Head 1")[0] == 1
    layers, heads, figure, *_ = app_module.change_kind(trace, ENCODER, "Layer 2", "Head 3", 2)
    np.testing.assert_allclose(np.array(figure.data[0].z), trace.encoder[1, 2])
    figure = app_module.render(trace, CROSS, "Layer 2", ALL_HEADS, 3)[0]
    assert len(figure.data) == 4
    assert overview is None  # drawn only when the model view is switched on
    overview = app_module.render(trace, CROSS, "Layer 2", MEAN, 3, model_view=True)[-1]
    assert len(overview.data) == 2 * 4
    np.testing.assert_allclose(np.array(overview.data[5].z), trace.cross[1, 1, :3])


@pytest.mark.parametrize("text,message", [
    ("", "input is empty"),
    ("   \n\t ", "input is empty"),
    ("dog " * 300, "reads at most 127"),
    ("x" * 5000, "limit is 2000"),
])
def test_bad_input_gets_a_clear_message(app_module, text, message):
    out = translate(app_module, text)
    assert message in out["status"] and out["trace"] is None and out["attention"] is None
    assert translate(app_module, "A dog.")["translation"]  # and the next request works


@pytest.mark.parametrize("text", ["🐶 🐕‍🦺", "一只狗在跑", "كلب يجري", "<script>alert(1)</script>", "Le chien court."])
def test_any_script_or_markup_translates_with_unknown_words_marked(app_module, text):
    out = translate(app_module, text)
    assert out["trace"] is not None and "Unknown words" in out["status"]
    assert "<script" not in out["attention"].to_json()
    assert any(label == "unknown" for _, label in out["source"])


def test_an_rnn_offers_only_cross_attention(app_module):
    out = dict(zip(["trace", "translation", "status", "source", "step", "kind", "layer", "head", "attention"],
                   app_module.translate("toy-rnn", "A dog runs.", ENCODER, "Layer 3", "Head 4")))
    assert out["kind"].choices == [(CROSS, CROSS)] and out["kind"].value == CROSS
    assert "no self-attention" in out["status"]
    assert out["layer"].value == "Layer 1" and out["head"].value == MEAN
    np.testing.assert_allclose(np.array(out["attention"].data[0].z), out["trace"].cross[0].mean(0)[:1])
    figure = app_module.render(out["trace"], DECODER, "Layer 1", "Head 2", 1)[0]  # a stale choice falls back
    np.testing.assert_allclose(np.array(figure.data[0].z), out["trace"].cross[0, 1, :1])


def test_gradio_summarizes_its_events_rarely(app_module):
    """Gradio's monitoring summary (pandas over its last 10,000 events) is kept off the per-event path."""
    assert app_module.demo._queue.ANAYLTICS_CACHE_FREQUENCY == 1000  # Gradio's own (misspelled) attribute


def test_views_without_a_trace_do_nothing(app_module):
    assert app_module.render(None, CROSS, "Layer 1", MEAN, 1, True) == (None, None, None, "", None)
    assert app_module.move(None, 1, "next", CROSS, "Layer 1", MEAN)[0] == 1


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
    ui = client.predict(MODEL, "A dog.", CROSS, "Layer 1", MEAN, api_name="/translate")
    assert ui[0] == translator.trace("A dog.").text
