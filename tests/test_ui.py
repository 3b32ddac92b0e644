"""The page's core loop, run as its events run (an operation on the session, then `render`), and its API through a
launched server with gradio_client."""

import dataclasses
import json
from functools import partial
from pathlib import Path

import numpy as np
import pytest
from gradio_client import Client

from attention_inspector.model.keys import ALL_HEADS, CROSS, DECODER, ENCODER, KIND_LABELS, MEAN, ROLLOUT, WEIGHTS
from attention_inspector.model.text.words import PIECES
from attention_inspector.ui import operations
from attention_inspector.ui.listeners import first_visit, translate_or_example
from attention_inspector.ui.session import NOTHING_YET, Revisions, View

MODEL = "toy-en-de"


def figure(value: str) -> dict:
    """A plot's figure (Plotly JSON) as the browser receives it."""
    return json.loads(value)


def test_the_page_lists_good_checkpoints_and_reports_broken_ones(services):
    assert [value for _, value in services.model_choices()] == [MODEL, "toy-rnn"]
    assert "broken" in services.load_status() and "config.json" in services.load_status()
    assert services.default_model == MODEL


def test_importing_the_ui_loads_no_checkpoint_and_forks_no_worker():
    import subprocess
    import sys

    code = ("import gc, multiprocessing, app, ui; from model.serving.translator import Translator; "
            "print(sum(isinstance(o, Translator) for o in gc.get_objects()), len(multiprocessing.active_children()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).parent.parent)
    assert out.stdout.split() == ["0", "0"]


def test_translate_traces_once_and_sends_everything_stepping_needs(events, services):
    out = events.translate("A dog runs in the park.")
    session = out["session"]
    trace = session.trace
    traced = services.translators[MODEL].trace("A dog runs in the park.")
    assert out["translation"] == traced.text and out["translation"].startswith("Ein Hund")
    assert trace.target_tokens == traced.target_tokens
    np.testing.assert_allclose(trace.cross, traced.trace.cross_attention)
    description = json.loads(out["step_text"])  # every step's, which the page shows at its step
    assert len(description) == trace.steps
    for chart in ("candidates", "probabilities"):  # one chart, with every step's bars
        assert len(figure(out[chart])["layout"]["meta"]["bars"]) == trace.steps
    candidates = figure(out["candidates"])["layout"]["meta"]["bars"]
    np.testing.assert_allclose(candidates[2]["y"], trace.top_probabilities[2], rtol=1e-6)
    assert candidates[2]["title"] == "top-5 candidates at step 3" and candidates[2]["colors"][0] == "#d62728"
    assert description[0].startswith("step 1 of") and "prefix so far: (empty)" in description[0]
    # The view's figure is built at the last step, and says how to show every other step.
    shown = figure(out["attention"])
    np.testing.assert_allclose(np.array(shown["data"][0]["z"]), trace.cross[1].mean(0))
    meta = shown["layout"]["meta"]
    assert meta["grows"] == "rows" and len(meta["titles"]) == trace.steps
    assert f"step 2 of {trace.steps}" in meta["titles"][1] and meta["titles"][-1] == shown["layout"]["title"]["text"]
    assert not any(name.startswith("step_buttons") for name in out)  # always enabled: never rebuilt


def test_view_changes_read_the_stored_session(events, services, monkeypatch):
    session = events.translate("A man plays with a red ball.")["session"]
    trace = session.trace
    monkeypatch.setattr(services.translators[MODEL], "model", None)  # any model call would now fail

    out = events.view(session, ENCODER, 1, 2, WEIGHTS, 1, False)
    np.testing.assert_allclose(np.array(figure(out["attention"])["data"][0]["z"]), trace.encoder[1, 2])
    assert (out["layer"], out["head"]) == (1, 2) and figure(out["attention"])["layout"]["meta"]["grows"] is None
    assert out["session"].view == View(ENCODER, 1, 2, WEIGHTS, 1, False)
    assert "status" not in out  # the status line keeps what the translation said: a view change has nothing to add
    decoder = figure(events.view(session, DECODER, 0, 3, WEIGHTS, 1, False)["attention"])
    np.testing.assert_allclose(np.array(decoder["data"][0]["z"]), trace.decoder[0, 3])
    assert decoder["layout"]["meta"]["grows"] == "square"
    assert len(figure(events.view(session, CROSS, 1, ALL_HEADS, WEIGHTS, 1, False)["attention"])["data"]) == 4
    out = events.view(session, CROSS, 1, MEAN, WEIGHTS, 1, True)
    overview = figure(out["overview"])
    assert len(overview["data"]) == 2 * 4 and overview["layout"]["meta"]["grows"] == "rows"
    np.testing.assert_allclose(np.array(overview["data"][5]["z"]), trace.cross[1, 1])
    closed = events.view(out["session"], CROSS, 1, MEAN, WEIGHTS, 1, False)
    assert closed["overview"] is None  # drawn only when the model view is open
    # A layer or head this kind does not have falls back to the last layer and the mean.
    assert events.view(session, CROSS, 7, 99, WEIGHTS, 1, False)["session"].view.layer == 1
    assert events.view(session, CROSS, 7, 99, WEIGHTS, 1, False)["head"] == MEAN


def test_a_view_change_that_changes_nothing_draws_nothing_again(events):
    session = events.translate("A man plays with a red ball.")["session"]
    again = events.view(session, session.view.kind, session.view.layer, session.view.head, WEIGHTS, 3, False)
    assert "attention" not in again and again["kind"] == session.view.kind  # the same figure: only the values
    assert "step" not in again  # the step the page sent is not sent back: it may have moved on meanwhile


@pytest.mark.parametrize("text,message", [
    ("", "input is empty"),
    ("   \n\t ", "input is empty"),
    ("dog " * 300, "reads at most 127"),
    ("x" * 5000, "limit is 2000"),
])
def test_bad_input_gets_a_clear_message_and_keeps_the_last_translation(events, text, message):
    session = events.translate("A dog.")["session"]
    out = events.translate(text, session=session)
    assert message in out["status"] and "still that of 'A dog.'" in out["status"]
    assert out["session"] is not None and out["session"].source == "A dog."
    assert "translation" not in out and "attention" not in out  # what is on screen stays
    assert events.translate("A dog.")["translation"]  # and the next request works


@pytest.mark.parametrize("text", ["🐶 🐕‍🦺", "一只狗在跑", "كلب يجري", "<script>alert(1)</script>",
                                  "Le chien court."])
def test_any_script_or_markup_translates_with_unknown_words_marked(events, text):
    out = events.translate(text)
    assert out["session"] is not None and "Unknown words" in out["status"]
    decoded = json.loads(out["attention"])  # the figure as the browser decodes it
    assert "<script" not in json.dumps(decoded, ensure_ascii=False).replace("\\u003c", "<").lower().replace(
        "&lt;script", "")
    assert any(label == "unknown" for _, label in out["source_tokens"])


def test_a_generated_unk_is_shown_and_said(services):
    traced = services.translators[MODEL].trace("A dog.", force=["<unk>"])
    assert "<unk>" in traced.text
    assert "chose <unk> 1 time" in operations.translate_status(traced, [ENCODER, DECODER, CROSS])


def test_an_rnn_offers_only_cross_attention(events):
    out = events.translate("A dog runs.", model="toy-rnn", view=(ENCODER, 2, 3, WEIGHTS, 1, False))
    session = out["session"]
    assert out["kind"]["choices"] == [(KIND_LABELS[CROSS], CROSS)] and out["kind"]["value"] == CROSS
    assert "no self-attention" in out["status"]
    assert session.view.layer == 0 and session.view.head in (MEAN, 0)
    stale = events.view(session, DECODER, 0, 1, WEIGHTS, 1, False)  # a stale kind falls back
    np.testing.assert_allclose(np.array(figure(stale["attention"])["data"][0]["z"]), session.trace.cross[0, 1])


def test_a_single_head_model_offers_just_that_head(events):
    trace = events.translate("A dog.")["session"].trace
    assert [value for _, value in operations.head_menu(trace, CROSS, MEAN)] == [MEAN, ALL_HEADS, 0, 1, 2, 3]
    single = dataclasses.replace(trace, cross=trace.cross[:, :1])
    assert operations.head_menu(single, CROSS, MEAN) == [("Head 1", 0)]


def test_views_without_a_translation_say_so(events):
    out = events.view(None, ENCODER, 0, MEAN, WEIGHTS, 1, False)
    assert isinstance(out.pop("session"), Revisions)  # nothing translated: the state keeps the user's revisions
    assert out == {"status": NOTHING_YET}


def test_switching_the_model_translates_the_sentence_again_or_its_first_example(events, services):
    session = events.translate("A dog runs.")["session"]
    out = events.run(translate_or_example, session, "toy-rnn", "A dog runs.")
    assert out["translation"] == services.translators["toy-rnn"].trace("A dog runs.").text
    assert out["example"]["choices"] == [(e, e) for e in services.examples("toy-rnn")] or \
        out["example"]["choices"] == services.examples("toy-rnn")
    assert out["session"].trace.encoder is None and out["session"].model == "toy-rnn"
    out = events.run(translate_or_example, session, "toy-rnn", "  ")  # nothing to translate: its first example
    assert out["session"].source == services.examples("toy-rnn")[0] and "first example" in out["status"]
    assert "the box was empty" in out["status"]
    assert out["source"] == services.examples("toy-rnn")[0]
    again = events.run(translate_or_example, out["session"], "toy-rnn", out["session"].source)  # sent twice
    assert again["session"].current is out["session"].current and "translation" not in again
    assert "status" not in again  # the status line keeps what it said about the translation


def test_switching_the_model_keeps_the_view_where_the_new_model_has_it_and_says_what_changed(events):
    """The view on screen is carried to the new model's translation: kind, layer, head and step where it has them,
    the nearest where it lacks them, and the status says what changed."""
    text = "A red dog runs in the park."
    session = events.translate(text)["session"]
    at = events.view(session, DECODER, 1, 2, WEIGHTS, 3, False)["session"]
    gru = events.run(translate_or_example, at, "toy-rnn", text, view=(DECODER, 1, 2, WEIGHTS, 3, False))
    view = gru["session"].view
    assert (view.kind, view.step) == (CROSS, 3)  # the GRU has cross-attention only
    assert "toy-rnn shows the nearest view it has: decoder self-attention → cross-attention." in gru["status"]
    at = events.view(gru["session"], CROSS, 0, 1, WEIGHTS, 4, False)["session"]
    back = events.run(translate_or_example, at, "toy-en-de", text, view=(CROSS, 0, 1, WEIGHTS, 4, False))
    view = back["session"].view
    assert (view.kind, view.layer, view.head, view.step) == (CROSS, 0, 1, 4)  # all of it kept
    assert "the nearest view it has" not in back["status"] and back["layer"]["value"] == 0


def test_a_first_visit_shows_a_translated_example_at_a_view_with_structure(events, services, monkeypatch):
    monkeypatch.setattr(services, "examples", lambda name: ["A dog runs in the park.", "A man plays."])
    out = events.named(first_visit(events.page, services))
    session = out["session"]
    assert out["source"] == "A dog runs in the park." and out["translation"].startswith("Ein Hund")
    assert len(json.loads(out["step_text"])) == session.trace.steps
    # The last layer (the toy has no heads.json to name the head that aligns best), a few steps in.
    assert session.view.layer == 1 and session.view.step == min(operations.FIRST_STEP, session.trace.steps) > 1
    # A newcomer is told why the view is not at the first word, and how to get there.
    assert f"It opens at step {session.view.step}, where a row reads more than the start token" in out["status"]


def test_the_first_view_is_the_head_that_aligns_best(services, monkeypatch):
    heads = {"cross.1.1": {"alignment_aer": 0.5}, "cross.2.3": {"alignment_aer": 0.2}, "encoder.1.1": {}}
    monkeypatch.setattr(services.translators[MODEL], "head_report", {"heads": heads})
    trace = operations.to_arrays(services.translators[MODEL].trace("A dog runs in the park."))
    assert operations.first_view(services, MODEL, trace) == View(CROSS, 1, 2, WEIGHTS, 4)


def test_server_answers_gradio_client(server, services):
    translator = services.translators[MODEL]
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
    # The page's own event: not listed for clients, so every value is given (the units, the revision on screen).
    answer = client.predict(MODEL, "A dog.", CROSS, 0, MEAN, WEIGHTS, 1, False, "pieces", None, api_name="/translate")
    assert json.loads(answer[1])["translation"] == translator.trace("A dog.").text  # the revision, the core view


def test_menus_get_their_choices_only_when_they_change(events):
    """Gradio rebuilds a component for each property update, so a menu's choices go to the page once and then only
    its value, until another model (or a measure of whole layers) changes them."""
    first = events.translate("A dog runs.")
    assert all(isinstance(first[menu], dict) and "choices" in first[menu]
               for menu in ("kind", "layer", "head", "measure"))
    again = events.translate("A man plays.", session=first["session"], view=(CROSS, 1, 2, WEIGHTS, 1, False))
    assert [again[menu] for menu in ("kind", "layer", "head", "measure")] == [CROSS, 1, 2, WEIGHTS]
    assert not any(f"step_buttons[{i}]" in again and "choices" in again[f"step_buttons[{i}]"] for i in range(4))
    other = events.translate("A man plays.", model="toy-rnn", session=again["session"])
    assert other["kind"]["choices"] == [(KIND_LABELS[CROSS], CROSS)]  # another model: its own choices
    back = events.translate("A dog.", session=other["session"])
    assert back["kind"]["choices"] == [(KIND_LABELS[k], k) for k in (ENCODER, DECODER, CROSS)]


def test_the_step_slider_gets_its_step_alone_and_the_page_its_length_from_the_steps_lines(events):
    """A property update of the slider costs Gradio a rebuilt component: the server sends the step alone, and the
    page sets the slider's range from the number of the steps' lines (ui/static/range.js; a browser test checks
    it)."""
    first = events.translate("A man plays.")
    other = events.translate("Two young men are playing football on the green grass of a park.",
                             session=first["session"])
    for out in (first, other):
        steps = out["session"].trace.steps
        assert out["step"] == min(operations.FIRST_STEP, steps) and len(json.loads(out["step_text"])) == steps


def test_a_source_outside_the_trained_lengths_is_said_to_be(services, monkeypatch):
    monkeypatch.setitem(services.translators[MODEL].metrics, "training", {"source_tokens": [2, 4]})
    _, said = operations.translate(services, None, MODEL, "A dog runs in the park.")
    assert "this source has 7 tokens, and the model learned from sources of 2 to 4" in said
    _, said = operations.translate(services, None, MODEL, "A dog.")
    assert "Beware" not in said


def test_the_shipped_reverser_warns_beyond_its_16_characters():
    from attention_inspector.model.serving.checkpoint import load_checkpoint

    reverser = load_checkpoint(Path(__file__).resolve().parent.parent / "checkpoints" / "reverse")
    assert reverser.metrics["training"]["source_tokens"] == [2, 16]
    traced = reverser.trace("abcdefghijklmnopqrstuvwxyzabcde")  # 31 characters: it reads at most 31
    said = operations.translate_status(traced, [ENCODER, DECODER, CROSS], [2, 16])
    assert "this source has 31 tokens, and the model learned from sources of 2 to 16" in said
    one = operations.translate_status(reverser.trace("a"), [ENCODER, DECODER, CROSS], [2, 16])
    assert "this source has 1 token, and" in one


def test_the_branch_legend_is_in_words_and_shows_only_with_a_branch(demo):
    comparison = demo.page.comparison
    assert not comparison.show_legend and "red: differs; orange: chosen by you" in comparison.label


def test_the_head_chosen_for_the_weights_comes_back_after_a_measure_of_the_whole_layer(events):
    """Head 3 -> rollout (one entry, "Every head, combined", whose value is head 3) -> weights: head 3 again."""
    session = events.view(events.translate("A man plays with a red ball.")["session"], CROSS, 1, 2, WEIGHTS, 1,
                          False)["session"]
    rolled = events.view(session, CROSS, 1, 0, "rollout", 1, False)  # a stale menu value: the session's head wins
    assert rolled["head"]["choices"] == [("Every head, combined", 2)] and rolled["head"]["value"] == 2
    back = events.view(rolled["session"], CROSS, 1, rolled["head"]["value"], WEIGHTS, 1, False)
    assert back["session"].view.head == 2 and back["head"]["value"] == 2
    assert "head 3" in figure(back["attention"])["layout"]["title"]["text"]


def test_a_model_switch_never_sends_a_menu_value_its_choices_lack(events):
    """Layer 2 of the Transformer, compared with a GRU, then the GRU as the model: every menu's value is one of the
    choices sent with it (Gradio would refuse the next request otherwise)."""
    from attention_inspector.ui import operations as ops
    from attention_inspector.ui.listeners import translate_or_example

    session = events.translate("A dog runs.", view=(CROSS, 1, 2, WEIGHTS, 1, False))["session"]
    compared = events.run(ops.compare, session, "toy-rnn", view=(CROSS, 1, 2, WEIGHTS, 1, False))["session"]
    out = events.run(translate_or_example, compared, "toy-rnn", "A dog runs.", view=(CROSS, 1, 2, WEIGHTS, 1, False))
    for menu in ("kind", "layer", "head", "measure"):
        update = out[menu]
        assert isinstance(update, dict) and update["value"] in [value for _, value in update["choices"]], menu
    again = events.view(out["session"], CROSS, 1, 2, WEIGHTS, 1, False)  # the old numbers, as a stale page sends
    assert again["session"].view.layer == 0 and again["layer"] == 0  # fitted to the model, not refused


def test_an_operation_measures_only_the_decoding_it_shows(events, services, monkeypatch):
    """A branch sent with a measure chosen on the page shows its new decoding's weights: no teacher-forced pass is
    spent on the decoding it replaces."""
    session = events.translate("A man plays with a red ball.")["session"]
    translator = services.translators[MODEL]
    passes = []
    original = type(translator).measures
    monkeypatch.setattr(type(translator), "measures",
                        lambda self, *args, **languages: passes.append(args) or original(self, *args, **languages))
    word = next(t for t in session.trace.top_tokens[1][1:] if t != "<eos>")
    branched = events.run(operations.branch, session, word, view=(CROSS, 1, 0, "alti", 2, False))["session"]
    assert branched.view.measure == WEIGHTS and passes == []
    measured = events.view(branched, CROSS, 1, 0, "alti", 2, False)["session"]
    assert len(passes) == 1 and passes[0][1] == branched.trace.target_tokens and measured.current.measure_maps


def test_the_heads_off_translation_shows_only_while_there_is_one(events):
    """Its frame is hidden before heads are switched off, shown with the new translation, hidden again for a new
    sentence; in between, only its value is sent."""
    first = events.translate("A man plays with a red ball.")
    assert first["masked_translation"] is None  # hidden from the start: no property update
    masked = events.run(operations.set_mask, first["session"], ["cross.1.1", "cross.1.2"])
    assert masked["masked_translation"]["visible"] is True and masked["masked_translation"]["value"]
    again = events.run(operations.set_mask, masked["session"], ["cross.1.1"])
    assert isinstance(again["masked_translation"], list)
    anew = events.translate("A dog runs.", session=again["session"])
    assert anew["masked_translation"] == {"__type__": "update", "value": None, "visible": False}


def test_the_busiest_events_answer_in_gradios_form_without_its_processing(demo, events):
    """Translations and view changes skip Gradio's pre- and postprocessing: what Gradio would have done to their
    values is done by `serialized` and `view_of`."""
    from attention_inspector.ui.listeners import serialized, view_of

    page = demo.page
    out = events.translate("A man plays with a red ball.")
    tokens = out["source_tokens"]
    assert serialized(page.source_tokens, tokens) == page.source_tokens.postprocess(tokens).model_dump()
    assert serialized(page.source_tokens, tokens)[0] == {"token": tokens[0][0], "class_or_confidence": None}
    assert serialized(page.n_best, None) == page.n_best.postprocess(None).model_dump()
    assert serialized(page.translation, "ein Hund") == "ein Hund"  # no data model: as it is
    update = serialized(page.masked_translation, {"__type__": "update", "value": tokens, "visible": True})
    assert update["visible"] and update["value"][0]["token"] == tokens[0][0]
    for settings, message in [(("Cross-attention", 0, MEAN, WEIGHTS, 1, False), "choose one of: encoder, decoder"),
                              ((CROSS, 0, MEAN, "contributions (ALTI+)", 1, False), "choose one of: weights, value"),
                              ((CROSS, 0, MEAN, WEIGHTS, "three", False), "The step must be a number"),
                              ((CROSS, 0, MEAN, WEIGHTS, True, False), "The step must be a number")]:
        with pytest.raises(operations.InputError, match=message):
            view_of(*settings)
    assert view_of(CROSS, 1, 2, None, 3.0, 0) == (View(CROSS, 1, 2, WEIGHTS, 3.0, False), None)
    assert view_of(CROSS, 1, 2, None, 3.0, 0, PIECES, 7)[1] == 7  # the revision the page shows


def test_a_view_change_runs_in_the_event_loop_only_when_it_needs_no_model_work(events):
    from attention_inspector.ui.listeners import light

    session = events.translate("A man plays with a red ball.")["session"]
    light = partial(light, events.services)
    assert light(session, CROSS, 1, 2, WEIGHTS, 1, False) and light(None, CROSS, 1, 2, "alti", 1, False)
    assert not light(session, CROSS, 1, 0, "alti", 1, False)  # a teacher-forced pass: in a worker thread
    measured = events.view(session, CROSS, 1, 0, "alti", 1, False)["session"]
    assert light(measured, CROSS, 0, 0, "rollout", 1, False)  # its maps are kept with the decoding
    assert light(session, "Cross-attention", 1, 2, WEIGHTS, 1, False)  # refused at once
    assert light(session, CROSS, 1, 0, "integrated_gradients", 1, False)  # drawn later, in a queued event
    assert not light(session, CROSS, 1, 0, "saliency", 1, False)  # on a model this small: at once, in a thread


def test_the_same_request_sent_twice_at_once_is_answered_once(demo, services):
    """Gradio's menus send one click's `input` event twice at once: the second request shares the first's answer
    (the same session and values), while any other request is answered on its own."""
    import asyncio
    import threading

    from attention_inspector.ui.listeners import admitted

    calls, release = [], threading.Event()

    def event(session, *values):
        calls.append(values)
        release.wait(10)
        return {demo.page.status: f"answered {values}"}

    run = admitted(demo.page, services, event)

    async def three_at_once():
        sent = [asyncio.ensure_future(run(None, MODEL, text)) for text in ("A dog.", "A dog.", "A cat.")]
        await asyncio.sleep(0.3)
        release.set()
        return await asyncio.wait_for(asyncio.gather(*sent), 30)  # a shared answer that never comes fails here

    first, twin, other = asyncio.run(three_at_once())
    assert sorted(calls) == [(MODEL, "A cat."), (MODEL, "A dog.")]
    assert first == twin == {demo.page.status: f"answered {(MODEL, 'A dog.')}"} and other != first
    assert asyncio.run(asyncio.wait_for(run(None, MODEL, "A dog."), 30)) == first and len(calls) == 3  # once answered, asked anew


def test_compare_says_why_there_is_no_second_model(events, services, monkeypatch):
    """Compare without a second model chosen says to choose one; a model no other reads the language of says so,
    beside the empty menu too."""
    session = events.translate("A dog runs.")["session"]
    assert events.run(operations.compare, session, None)["status"] == "Choose the second model first."
    monkeypatch.setattr(services, "comparable", lambda model: [])
    language = services.card("toy-en-de").source_language
    alone = f"No other model here reads {language}, so toy-en-de has none to compare with"
    assert events.run(operations.compare, session, None)["status"] == alone + "."
    switched = events.run(translate_or_example, None, "toy-en-de", "A cat sits.")  # the model opened
    assert switched["compare_model"]["choices"] == [] and switched["compare_model"]["info"] == alone


def test_a_new_sentence_says_that_show_went_back_to_the_weights(events):
    """A measure is computed per decoding when asked for: a new sentence is shown with the weights, and says so
    where another measure was shown."""
    session = events.translate("A man plays with a red ball.")["session"]
    shown = events.view(session, CROSS, 1, MEAN, ROLLOUT, 1, False)["session"]
    out = events.translate("A dog runs.", session=shown, view=(CROSS, 1, MEAN, ROLLOUT, 1, False, "pieces"))
    assert out["session"].view.measure == WEIGHTS and out["measure"] == WEIGHTS
    assert "Show is back to the attention weights: choose rollout again" in out["status"]
    assert "Show is back" not in events.translate("A child plays.", session=out["session"])["status"]


def test_a_sentence_in_another_language_than_the_model_reads_is_named_as_such():
    """English typed for the shipped de-en (the model menu switched, the sentence kept): so many unknown words that
    the status asks whether the sentence is in German; a German sentence with a rare name gets no such question."""
    from attention_inspector.model.serving.checkpoint import load_checkpoint

    model = load_checkpoint(Path(__file__).resolve().parent.parent / "checkpoints" / "de-en")
    english = model.trace("A woman in a blue shirt with an umbrella watches the children.")
    said = operations.translate_status(english, [ENCODER, DECODER, CROSS], None, "de")
    assert 'Unknown words (read as <unk>): "woman", "with", "umbrella", "watches".' in said
    assert said.endswith("this model reads German. Is the sentence in German?")
    german = model.trace("Eine Frau mit einem Regenschirm sieht Xaverius zu.")
    assert "Is the sentence in" not in operations.translate_status(german, [ENCODER, DECODER, CROSS], None, "de")


@pytest.fixture(scope="module")
def en_de_events():
    """The page's events on the shipped en-de alone, whose byte-pair pieces make words."""
    from attention_inspector.model.api.services import Services
    from attention_inspector.model.serving.checkpoint import load_checkpoint
    from attention_inspector.ui import build_demo
    from tests.conftest import SHIPPED, Events

    services = Services({"en-de": load_checkpoint(SHIPPED / "en-de")}, root=SHIPPED)
    return Events(build_demo(services), services)


def test_switching_to_words_says_every_step_in_words_and_back_in_pieces(en_de_events):
    """Issue 79: after *Units → Words*, *This step* still said "step 3 of 9: reads "krankenschwe@@" ...": the step's
    lines were sent with a decoding only, not with a change of units."""
    session = en_de_events.translate("The nurse is talking to a patient.", model="en-de")["session"]
    tokens = session.trace.target_tokens  # die krankenschwe@@ ster spricht mit einem patienten . <eos>
    assert tokens[1:3] == ["krankenschwe@@", "ster"]
    words = en_de_events.view(session, CROSS, 0, MEAN, WEIGHTS, 3, False, "words")
    lines = json.loads(words["step_text"])
    assert len(lines) == len(tokens)  # a line per step of the slider
    assert lines[1].splitlines()[:2] == ['word 2 of 8: reads "die", building "krankenschwe…"',
                                         f'step 2 of 9: piece 1 of 2, predicts "krankenschwe@@" '
                                         f'(p = {session.trace.probabilities[1]:.2f})']
    assert lines[2].startswith('word 2 of 8: reads "die", writes "krankenschwester"\n')
    pieces = en_de_events.view(words["session"], CROSS, 0, MEAN, WEIGHTS, 3, False, PIECES)
    assert json.loads(pieces["step_text"])[2].startswith('step 3 of 9: reads "krankenschwe@@", predicts "ster"')
