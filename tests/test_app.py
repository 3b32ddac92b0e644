"""The app's callbacks and its API, called directly and through a launched server with gradio_client."""

import dataclasses
import json

import numpy as np
import pytest
from gradio_client import Client

from viz.views import ALL_HEADS, CROSS, DECODER, ENCODER, MEAN

MODEL = "toy-en-de"
# Short names for the output components, as the callbacks return them (by component).
OUTPUTS = {"trace": "trace_state", "translation": "translation", "status": "status", "source": "source_view",
           "step": "step", "kind": "kind_choice", "layer": "layer_choice", "head": "head_choice",
           "frames": "translation_state", "view": "view_state", "example": "example", "text": "source"}


def by_name(app_module, outputs: dict) -> dict:
    """A callback's outputs keyed by short names; components it left alone are absent."""
    return {name: outputs[getattr(app_module, attribute)] for name, attribute in OUTPUTS.items()
            if getattr(app_module, attribute) in outputs}


def translate(app_module, text, kind=CROSS, layer=1, head=MEAN, model=MODEL, model_view=False):
    outputs = app_module.translate(model, text, kind, layer, head, model_view)
    named = by_name(app_module, outputs)
    if app_module.following in outputs:
        named["step_buttons_enabled"] = all(outputs[b].interactive for b in app_module.step_buttons)
    return named


def figure(frames: dict, which: str = "attention") -> dict:
    """A view's figure (Plotly JSON) as the browser receives it."""
    return json.loads(frames[which])


def test_app_lists_good_checkpoints_and_reports_broken_ones(app_module):
    assert [value for _, value in app_module.model_choices()] == [MODEL, "toy-rnn"]
    assert "broken" in app_module.load_status() and "config.json" in app_module.load_status()
    assert app_module.DEFAULT_MODEL == MODEL


def test_translate_traces_once_and_sends_everything_stepping_needs(app_module):
    out = translate(app_module, "A dog runs in the park.")
    trace = out["trace"]
    traced = app_module.TRANSLATORS[MODEL].trace("A dog runs in the park.")
    assert out["translation"] == traced.text and out["translation"].startswith("Ein Hund")
    assert trace.target_tokens == traced.target_tokens and out["step"].maximum == max(trace.steps, 2)
    np.testing.assert_allclose(trace.cross, traced.trace.cross_attention)
    frames = out["frames"]
    assert frames["steps"] == trace.steps
    assert len(frames["description"]) == trace.steps
    for chart in ("candidates", "probabilities"):  # one chart, with every step's bars
        assert len(figure(frames, chart)["layout"]["meta"]["bars"]) == trace.steps
    candidates = figure(frames, "candidates")["layout"]["meta"]["bars"]
    np.testing.assert_allclose(candidates[2]["y"], trace.top_probabilities[2], rtol=1e-6)
    assert candidates[2]["title"] == "top-5 candidates at step 3" and candidates[2]["colors"][0] == "#d62728"
    assert frames["description"][0].startswith("step 1 of") and "prefix so far: (empty)" in frames["description"][0]
    # The view's figure is built at the last step, and says how to show every other step.
    shown = figure(out["view"])
    np.testing.assert_allclose(np.array(shown["data"][0]["z"]), trace.cross[1].mean(0))
    meta = shown["layout"]["meta"]
    assert meta["grows"] == "rows" and len(meta["titles"]) == trace.steps
    assert f"step 2 of {trace.steps}" in meta["titles"][1] and meta["titles"][-1] == shown["layout"]["title"]["text"]
    assert out["step_buttons_enabled"]


def test_view_changes_read_the_stored_trace(app_module, monkeypatch):
    trace = translate(app_module, "A man plays with a red ball.")["trace"]
    monkeypatch.setattr(app_module.TRANSLATORS[MODEL], "model", None)  # any model call would now fail

    def view(kind, layer, head, model_view=False):
        return by_name(app_module, app_module.change_view(trace, kind, layer, head, model_view))

    out = view(ENCODER, 1, 2)
    np.testing.assert_allclose(np.array(figure(out["view"])["data"][0]["z"]), trace.encoder[1, 2])
    assert out["layer"].value == 1 and out["head"].value == 2 and figure(out["view"])["layout"]["meta"]["grows"] is None
    decoder = figure(view(DECODER, 0, 3)["view"])
    np.testing.assert_allclose(np.array(decoder["data"][0]["z"]), trace.decoder[0, 3])
    assert decoder["layout"]["meta"]["grows"] == "square"
    assert len(figure(view(CROSS, 1, ALL_HEADS)["view"])["data"]) == 4
    out = view(CROSS, 1, MEAN, model_view=True)
    overview = figure(out["view"], "overview")
    assert len(overview["data"]) == 2 * 4 and overview["layout"]["meta"]["grows"] == "rows"
    np.testing.assert_allclose(np.array(overview["data"][5]["z"]), trace.cross[1, 1])
    assert view(CROSS, 1, MEAN)["view"]["overview"] is None  # drawn only when the model view is open
    assert view(CROSS, 7, 99)["layer"].value == 1  # a layer this kind does not have falls back to the last


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


@pytest.mark.parametrize("text", ["🐶 🐕‍🦺", "一只狗在跑", "كلب يجري", "<script>alert(1)</script>",
                                  "Le chien court."])
def test_any_script_or_markup_translates_with_unknown_words_marked(app_module, text):
    out = translate(app_module, text)
    assert out["trace"] is not None and "Unknown words" in out["status"]
    # The link's text is data for a URL parameter (URLSearchParams encodes it), never markup: everything else of
    # the frames is drawn, and holds no markup.
    drawn = {key: value for key, value in out["frames"].items() if key != "link"}
    assert "<script" not in out["view"]["attention"] and "<script" not in json.dumps(drawn)
    assert out["frames"]["link"]["text"] == text
    assert any(label == "unknown" for _, label in out["source"])


def test_a_generated_unk_is_shown_and_said(app_module):
    traced = app_module.TRANSLATORS[MODEL].trace("A dog.", force=["<unk>"])
    assert "<unk>" in traced.text
    assert "chose <unk> 1 time" in app_module.translate_status(traced, list(app_module.KINDS))


def test_an_rnn_offers_only_cross_attention(app_module):
    out = translate(app_module, "A dog runs.", ENCODER, 2, 3, model="toy-rnn")
    assert out["kind"].choices == [(CROSS, CROSS)] and out["kind"].value == CROSS
    assert "no self-attention" in out["status"]
    assert out["layer"].value == 0 and out["head"].value == MEAN
    np.testing.assert_allclose(np.array(figure(out["view"])["data"][0]["z"]), out["trace"].cross[0].mean(0))
    stale = by_name(app_module, app_module.change_view(out["trace"], DECODER, 0, 1))  # a stale kind falls back
    np.testing.assert_allclose(np.array(figure(stale["view"])["data"][0]["z"]), out["trace"].cross[0, 1])


def test_a_single_head_model_offers_just_that_head(app_module):
    trace = translate(app_module, "A dog.")["trace"]
    assert [value for _, value in app_module.head_choices(trace, CROSS)] == [MEAN, ALL_HEADS, 0, 1, 2, 3]
    single = dataclasses.replace(trace, cross=trace.cross[:, :1])
    assert app_module.head_choices(single, CROSS) == [("Head 1", 0)]


def test_views_without_a_trace_say_so(app_module):
    out = by_name(app_module, app_module.change_view(None, ENCODER, 0, MEAN))
    assert out == {"status": "Translate a sentence first: there is nothing to show yet."}


def test_switching_the_model_translates_the_sentence_again_or_clears_the_views(app_module):
    out = by_name(app_module, app_module.switch_model("toy-rnn", "A dog runs.", CROSS, 0, MEAN))
    assert out["translation"] == app_module.TRANSLATORS["toy-rnn"].trace("A dog runs.").text
    assert [value for _, value in out["example"].choices] == app_module.examples_for("toy-rnn")
    assert out["trace"].encoder is None
    cleared = by_name(app_module, app_module.switch_model(MODEL, "  ", CROSS, 0, MEAN))
    assert cleared["trace"] is None and cleared["frames"] is None and cleared["translation"] == ""
    assert "type or pick a sentence" in cleared["status"]


def test_a_first_visit_shows_a_translated_example(app_module, monkeypatch):
    monkeypatch.setattr(app_module, "examples_for", lambda name: ["A dog runs.", "A man plays."])
    out = by_name(app_module, app_module.first_visit(CROSS, 0, MEAN))
    assert out["text"] == out["example"] == "A dog runs." and out["translation"].startswith("Ein Hund")
    assert out["frames"]["steps"] == out["trace"].steps


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
    ui = client.predict(MODEL, "A dog.", CROSS, 0, MEAN, False, api_name="/translate")
    assert ui[0] == translator.trace("A dog.").text


def test_menus_get_their_choices_only_when_they_change(app_module):
    """Gradio rebuilds a component for each property update, so a menu's choices go to the page once and then only
    its value, until another model (or a measure of whole layers) changes them."""
    first = app_module.translate(MODEL, "A dog runs.", CROSS, 0, MEAN)
    trail = first[app_module.trail_state]
    menus = (app_module.kind_choice, app_module.layer_choice, app_module.head_choice, app_module.measure_choice)
    assert all(isinstance(first[menu], app_module.gr.components.Component) for menu in menus)
    again = app_module.translate(MODEL, "A man plays.", CROSS, 1, 2, False, trail)
    assert [again[menu] for menu in menus] == [CROSS, 1, 2, app_module.WEIGHTS]  # values alone
    assert not any(isinstance(again[button], app_module.gr.components.Component) for button in app_module.step_buttons)
    view = app_module.change_view(again[app_module.trace_state], ENCODER, 0, 3, False, None, again[app_module.trail_state])
    assert (view[app_module.layer_choice], view[app_module.head_choice]) == (0, 3)
    other = app_module.translate("toy-rnn", "A man plays.", CROSS, 0, MEAN, False, again[app_module.trail_state])
    assert other[app_module.kind_choice].choices == [(CROSS, CROSS)]  # another model: its own choices
    assert app_module.translate(MODEL, "A dog.", ENCODER, 0, MEAN, False, other[app_module.trail_state])[
        app_module.kind_choice].choices == [(kind, kind) for kind in (ENCODER, DECODER, CROSS)]


def test_the_step_slider_gets_a_new_length_only_when_the_length_changes(app_module):
    """The slider too is rebuilt only when a translation has a different number of steps from the one before."""
    first = app_module.translate(MODEL, "A man plays.", CROSS, 0, MEAN)
    assert first[app_module.step].maximum == max(first[app_module.trace_state].steps, 2)
    again = app_module.translate(MODEL, "A man plays.", CROSS, 0, MEAN, False, first[app_module.trail_state])
    assert again[app_module.step] == 1  # the same length: the step alone
    steps = again[app_module.trace_state].steps
    other = next(outputs for text in ("A dog.", "Two young men are playing football on the green grass of a park.")
                 if (outputs := app_module.translate(MODEL, text, CROSS, 0, MEAN, False, again[app_module.trail_state])
                     )[app_module.trace_state].steps != steps)
    assert other[app_module.step].maximum == max(other[app_module.trace_state].steps, 2)
    assert other[app_module.step].value == 1
    assert other[app_module.step].interactive == (other[app_module.trace_state].steps > 1)
