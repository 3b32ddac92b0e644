"""Every answer belongs to the state it was asked of: an answer that comes after the user moved on to another model,
sentence or decoding is dropped, never drawn over the newer state (ui/session.py `Revisions`)."""

import json
import math

import gradio as gr
import numpy as np

from attention_inspector.model.keys import CROSS, INTEGRATED_GRADIENTS, MEAN, WEIGHTS
from attention_inspector.model.nets.cores import parts
from attention_inspector.ui import listeners, operations
from attention_inspector.ui.session import Revisions, Session
from tests.conftest import VIEW, model_rounding

GRADIENT_VIEW = (CROSS, 1, MEAN, INTEGRATED_GRADIENTS, 2, False, "pieces")
DROPPED = {"session": gr.skip()}


def translated(events, text="A dog runs in the park.") -> Session:
    return events.translate(text)["session"]


def meanwhile(operation, *then):
    """`operation`, during which the user does `then` (an event of the same user, finished before it)."""
    def slow(services, session, *args):
        then[0](*then[1:])
        return operation(services, session, *args)
    slow.__name__ = operation.__name__
    return slow


def test_a_view_change_answered_after_a_model_switch_is_dropped(events):
    session = translated(events)
    first = session.revisions.latest
    switch = (events.run, listeners.translate_or_example, session, "toy-rnn", session.source)
    reader = listeners.answer(events.page, events.services, meanwhile(listeners.view_changed, *switch),
                              listeners.view_outputs(events.page), 0, writes=False)
    assert events.named(reader(session, *VIEW)) == DROPPED
    assert session.revisions.latest == first + 1  # claimed by the switch; a view change claims none


def test_of_two_translations_only_the_later_one_is_answered(events):
    session = translated(events)
    later = (events.run, operations.translate, session, "toy-en-de", "A man plays.")
    slow = meanwhile(operations.translate, *later)
    assert events.run(slow, session, "toy-en-de", "A red ball.") == DROPPED
    again = events.run(operations.translate, session, "toy-en-de", "A red ball.")  # nothing in between: answered
    assert again["session"].source == "A red ball." and again["session"].revisions is session.revisions


def test_a_tab_answer_about_a_state_the_user_left_is_dropped(demo, events):
    session = translated(events)
    page = events.page
    switch = (events.run, operations.translate, session, "toy-en-de", "A man plays.")

    @operations.operation
    def statistics(services, session):
        return ("a table",), "Measured."
    answers = {}

    def trigger(function, inputs, outputs, **options):
        answers["run"] = function
    listeners.tab_answer(page, events.services, meanwhile(statistics, *switch), [], ["head-table"], "x", trigger,
                         answers=page.statistics_answers)
    assert events.named(answers["run"](session)) == DROPPED
    listeners.tab_answer(page, events.services, statistics, [], ["head-table"], "x", trigger,
                         answers=page.statistics_answers)
    assert events.named(answers["run"](session)) == DROPPED  # still about the state the user left
    latest = translated(events)
    answered = events.named(answers["run"](latest))
    assert answered["status"] == "Measured."  # the tab's answers name the revision they answer (the page drops older)
    assert json.loads(answered["statistics_answers"]) == {"revision": latest.revision,
                                                          "answers": {"head-table": "a table"}}


def test_before_any_translation_the_state_keeps_the_users_revisions(events):
    revisions = Revisions()
    start = revisions.latest
    out = events.translate("A dog.", session=revisions)
    assert out["session"].revisions is revisions and revisions.latest == out["session"].revision == start + 1
    refused = events.translate("", session=revisions)
    assert refused["session"] is revisions and revisions.latest == start + 2
    assert Revisions().latest > revisions.latest  # a user's state made anew counts on from above


def test_integrated_gradients_are_drawn_later_with_progress_and_can_be_stopped(events):
    session = translated(events)
    page, services = events.page, events.services
    chosen = events.named(listeners.answer(page, services, listeners.view_changed, listeners.view_outputs(page), 0,
                                           writes=False, stepped_later=True)(session, *GRADIENT_VIEW))
    pending = chosen["session"]
    assert operations.pending(services, pending) == INTEGRATED_GRADIENTS and "Computing integrated gradients" in \
        chosen["status"]
    assert "integrated" not in chosen["attention"]  # the weights, drawn at once

    told = []

    def progress(fraction, desc):
        told.append(fraction)
    drawn = events.named(listeners.measure_event(page, services)(pending, *GRADIENT_VIEW, progress=progress))
    steps = session.trace.steps
    assert told == [(done, steps) for done in range(1, steps + 1)]
    assert operations.pending(services, drawn["session"]) is None and "integrated gradients" in drawn["attention"]
    assert drawn["status"] == "Integrated gradients at every step: computed."

    def stopped_at_the_second_step(fraction, desc):  # the user presses Stop while step 2 is computed
        if fraction[0] == 2:
            events.run(operations.stop_measure, pending, view=GRADIENT_VIEW)
    assert events.named(listeners.measure_event(page, services)(pending, *GRADIENT_VIEW,
                                                                 progress=stopped_at_the_second_step)) == DROPPED
    stop = events.run(operations.stop_measure, pending, view=GRADIENT_VIEW)  # the page's menu says the method
    assert stop["session"].view.measure == WEIGHTS and stop["status"].startswith("Stopped computing")


def test_on_a_large_model_saliency_comes_later_in_a_few_passes_with_progress(events, monkeypatch):
    """Saliency at every step takes one batch, at once, on a small model; on one of LARGE_MODEL parameters or more
    (seconds at NLLB-600M's size) it is drawn later, in up to PASSES batches with progress after each, and gives
    what the one batch gives."""
    from attention_inspector.model.explain.attribution import PASSES
    from attention_inspector.model.keys import SALIENCY

    session = translated(events)
    page, services = events.page, events.services
    view = (CROSS, 1, MEAN, SALIENCY, 2, False, "pieces")
    change = listeners.answer(page, services, listeners.view_changed, listeners.view_outputs(page), 0, writes=False,
                              stepped_later=True)
    at_once = events.named(change(session, *view))["session"]
    assert operations.pending(services, at_once) is None and SALIENCY in at_once.current.measure_maps
    monkeypatch.setattr(operations, "LARGE_MODEL", 1)
    pending = events.named(change(session, *view))["session"]
    assert operations.pending(services, pending) == SALIENCY
    told = []
    drawn = events.named(listeners.measure_event(page, services)(
        pending, *view, progress=lambda fraction, desc: told.append(fraction)))
    steps = session.trace.steps
    assert 1 < len(told) <= PASSES and told[-1] == (steps, steps) and sorted(told) == told
    later = drawn["session"].current.measure_maps[SALIENCY]
    # Shares (at most 1) of gradients computed in other batches: within the model's rounding (tests/conftest.py)
    # twice over, forward and back.
    rounding = 2 * model_rounding(services.translators[session.model].model.config)
    for kind in (CROSS, "decoder"):
        assert abs(later[kind] - at_once.current.measure_maps[SALIENCY][kind]).max() < rounding


def test_a_large_models_translation_comes_step_by_step_with_progress_and_stops_when_asked(events, monkeypatch):
    """With a model of LARGE_MODEL parameters or more, Translate answers at once that it is computing (the page
    shows Stop) and the queued event that follows translates step by step with Gradio's progress; Stop, claiming a
    revision, stops it at its next step. A small model's Translate translates at once and the event does nothing."""
    page, services = events.page, events.services
    text = "A man plays with a red ball."
    follow = listeners.translate_event(page, services)
    small = events.run(operations.translate_later, None, "toy-en-de", text)
    assert small["translation"] and events.named(follow(small["session"], "toy-en-de", text, *VIEW, None)) == DROPPED
    monkeypatch.setattr(operations, "LARGE_MODEL", 1)
    said = events.run(operations.translate_later, small["session"], "toy-en-de", "A dog runs in the park.")
    assert said["status"].startswith("Computing the translation with toy-en-de") and "translation" not in said
    switched = events.run(listeners.translate_or_example, small["session"], "toy-en-de", "A dog runs in the park.")
    assert switched["status"] == said["status"] and "translation" not in switched  # the model chosen: the same
    told = []
    drawn = events.named(follow(said["session"], "toy-en-de", "A dog runs in the park.", *VIEW, None,
                                progress=lambda fraction, desc: told.append(fraction)))
    steps = drawn["session"].trace.steps
    assert drawn["session"].source == "A dog runs in the park." and drawn["translation"].startswith("Ein Hund")
    assert [done for done, _ in told] == list(range(1, steps + 1)) and told[0][1] >= steps

    def stopped_at_the_second_step(fraction, desc):  # the user presses Stop while step 2 is computed
        if fraction[0] == 2:
            events.run(operations.stop_measure, drawn["session"])
    assert events.named(follow(drawn["session"], "toy-en-de", "A child plays.", *VIEW, None,
                               progress=stopped_at_the_second_step)) == DROPPED


def test_a_large_models_what_if_actions_come_step_by_step_with_progress_and_stop_when_asked(events, monkeypatch):
    """With a model of LARGE_MODEL parameters or more, a branch, heads off, the beam search, a beam hypothesis and a
    comparison answer at once that they are computing, left pending in the session; the queued event that follows
    computes each step by step with Gradio's progress, to the same answer a small model gives at once. Stop stops
    one at its next step, and nothing is left pending. With nothing pending, the event does nothing."""
    from functools import partial

    page, services = events.page, events.services
    follow = listeners.later_event(page, services)
    session = translated(events, "A man plays with a red ball.")
    assert events.named(follow(session, *VIEW, None)) == DROPPED
    beamed = events.run(operations.run_beam, session)["session"]
    actions = [(operations.branch, "a branch", (session.trace.top_tokens[0][1],), session),
               (partial(operations.mask_preset, preset="layer"), "heads off", (), session),
               (operations.run_beam, "the beam search", (), session),
               (operations.open_hypothesis, "that hypothesis", (1,), beamed),
               (operations.compare, "the comparison", ("toy-rnn",), session)]
    at_once = [events.run(action, before, *arguments)["status"] for action, _, arguments, before in actions]
    monkeypatch.setattr(operations, "LARGE_MODEL", 1)
    for (action, what, arguments, before), expected in zip(actions, at_once):
        model_of = (lambda session, other: other) if action is operations.compare else \
            (lambda session, *arguments: session.model)
        said = events.run(operations.deferred(action, what, model_of), before, *arguments)
        assert said["status"].startswith("Computing with toy-") and what in said["status"]
        assert said["session"].pending is not None and said["session"].decodings == before.decodings
        told = []
        drawn = events.named(follow(said["session"], *VIEW, None,
                                    progress=lambda fraction, desc: told.append(fraction)))
        assert drawn["status"] == expected and drawn["session"].pending is None
        assert [done for done, _ in told] == list(range(1, len(told) + 1))
        assert bool(told) == (action is not operations.compare)  # toy-rnn, compared, is a GRU: no steps told
    said = events.run(operations.deferred(operations.branch, "a branch"), session, session.trace.top_tokens[0][1])

    def stopped_at_the_second_step(fraction, desc):  # the user presses Stop while step 2 is computed
        if fraction[0] == 2:
            stopped.update(events.run(operations.stop_measure, said["session"]))
    stopped = {}
    assert events.named(follow(said["session"], *VIEW, None, progress=stopped_at_the_second_step)) == DROPPED
    assert stopped["status"].startswith("Stopped") and stopped["session"].pending is None


def told_in_rounds(told: list, label: str | None = None) -> None:
    """`told` ((points done, 32), what it says, or the fractions alone) heard of integrated gradients' 32 points in
    8 batches of 4, a round of them (a batch per core) at a time, as `label` says."""
    fractions = [fraction for fraction, _ in told] if label else told
    points = [done for done, _ in fractions]
    assert len(points) == math.ceil(8 / parts()) and points == sorted(set(points)) and points[-1] == 32
    assert fractions == [(done, 32) for done in points]
    assert not label or [desc for _, desc in told] == [f"{label}: {done} of 32" for done in points]


def test_a_large_models_integrated_gradients_of_a_step_come_batch_by_batch_with_progress(events, monkeypatch):
    """Attribute this step with integrated gradients on a model of LARGE_MODEL parameters or more answers at once
    that it is computing; its queued twin (which the page starts on reading that) computes them in batches of the
    integral's points, each told to Gradio's progress, to the same attributions; Stop stops it at the next batch."""
    from attention_inspector.ui.tabs.sources import attribute_step

    session = translated(events)
    page = events.page
    wired = {}

    def trigger(function, inputs, outputs, **options):
        wired.update(run=function)
    listeners.tab_answer(page, events.services, attribute_step, [page.step, page.attribution_method,
                                                                 page.attribution_contrast], ["attribution"], "x",
                         trigger, answers=page.attribution_answers, progress="Integrated gradients")
    at_once = attribute_step(events.services, session, 2, "integrated_gradients", "")
    monkeypatch.setattr(operations, "LARGE_MODEL", 1)
    kept, said = attribute_step(events.services, session, 2, "integrated_gradients", "")
    assert kept is session and said.startswith("Computing attributions with toy-en-de: integrated gradients of step 2")
    assert attribute_step(events.services, session, 2, "saliency", "")[1].startswith("saliency")  # one pass: at once
    class Tracker(list):  # empty, it is false, as Gradio's progress tracker is (it has a length)
        def __call__(self, fraction, desc):
            self.append((fraction, desc))
    told = Tracker()
    [out] = wired["run"](session, 2, "integrated_gradients", "", told)
    drawn = events.named(out)
    told_in_rounds(told, "Integrated gradients")
    bars = [json.loads(figure)["data"][0] for figure in (json.loads(drawn["attribution_answers"])["answers"][
        "attribution"], at_once[0][0])]
    assert bars[0]["x"] == bars[1]["x"] and np.allclose(bars[0]["y"], bars[1]["y"], atol=1e-5)
    assert drawn["status"].split("; ")[0] == at_once[1].split("; ")[0]

    def stopped(fraction, desc):
        if fraction == (8, 32):
            events.run(operations.stop_measure, session)
    assert [events.named(out) for out in wired["run"](session, 2, "integrated_gradients", "", stopped)] == [DROPPED]


def test_a_link_that_opens_a_large_model_shows_its_steps_as_the_page_loads_and_stops_when_asked(events, monkeypatch):
    """A shared link's view is made in the page's load event: with a model of LARGE_MODEL parameters or more, each
    of its decodings (the sentence, then with the link's heads off) tells its steps to Gradio's progress; a small
    model's are traced by the workers, silently. Stop, pressed before the page's first answer (no session yet),
    stops it at its next step and says what to do."""
    from types import SimpleNamespace

    from attention_inspector.ui.listeners import first_visit

    request = SimpleNamespace(query_params={"model": ["toy-en-de"], "text": ["A dog runs in the park."],
                                            "mask": ["cross.1.1"]})
    for large in (False, True):
        monkeypatch.setattr(operations, "LARGE_MODEL", 1 if large else 10 ** 12)
        told = []
        out = events.named(first_visit(events.page, events.services, None, request,
                                       lambda fraction, desc: told.append(fraction[0])))
        assert out["session"].current.mask == ("cross.1.1",) and out["translation"].startswith("Ein Hund")
        steps = [decoding.trace.steps for decoding in out["session"].decodings]
        assert told == ([step for count in steps for step in range(1, count + 1)] if large else [])

    state, told, stops = Revisions(), [], []

    def stopped_at_the_second_step(fraction, desc):  # the page's Stop, pressed while step 2 is computed
        told.append(fraction[0])
        if fraction[0] == 2:
            stops.append(events.run(operations.stop_measure, state))
    assert events.named(first_visit(events.page, events.services, state, request,
                                    stopped_at_the_second_step)) == DROPPED
    assert told == [1, 2] and stops[0]["status"] == operations.STOPPED_OPENING and stops[0]["session"] is state


def test_which_explanation_to_trust_answers_at_once_then_adds_integrated_gradients_until_the_user_moves_on(
        events, monkeypatch):
    """Which explanation to trust answers at once with every method but integrated gradients, kept with the decoding
    (asked again at that step: what was kept); a queued event (the page's, once it has drawn that answer) adds
    integrated gradients, batch by batch
    with Gradio's progress on a large model, and is given up at the next batch once the user has moved on (another
    sentence here; Stop claims a revision the same way). With no first answer of the decoding to complete, or one
    already complete, it does nothing; a large model's first answer is the queued event's too."""
    import inspect

    from attention_inspector.ui.tabs.sources import explanations_compared, explanations_integrated

    page = events.page
    wired = []

    def trigger(function, inputs, outputs, **options):
        wired.append(function)
    for function, progress in ((explanations_compared, None), (explanations_integrated, "Comparing")):
        listeners.tab_answer(page, events.services, function, [page.step], ["faithfulness-curves",
                             "faithfulness-table"], "x", trigger, answers=page.faithfulness_answers, progress=progress)
    compared, integrated = wired
    assert isinstance(inspect.signature(integrated).parameters["progress"].default, gr.Progress)

    def methods(out: dict) -> list[str]:
        return [row[0] for row in json.loads(out["faithfulness_answers"])["answers"]["faithfulness-table"]["rows"]]
    session = translated(events)
    assert [events.named(out) for out in integrated(session, 2, lambda fraction, desc: None)] == [DROPPED]
    first = events.named(compared(session, 2))
    assert "Integrated gradients, the slowest method, follow." in first["status"]
    assert first["session"].current.faithful[0] == 2
    monkeypatch.setattr(operations, "LARGE_MODEL", 1)
    seen = []
    [whole] = [events.named(out) for out in integrated(first["session"], 2,
                                                       lambda fraction, desc: seen.append((fraction, desc)))]
    told_in_rounds(seen, "Comparing")
    assert methods(whole) == methods(first)[:-1] + ["integrated gradients"] + methods(first)[-1:]  # before random
    assert "follow" not in whole["status"]
    again = events.named(compared(whole["session"], 2))
    assert methods(again) == methods(whole) and again["status"] == whole["status"]  # kept, not computed again
    assert [events.named(out) for out in integrated(again["session"], 2, lambda fraction, desc: None)] == [DROPPED]

    # A large model's first answer, asked of a decoding with none yet, is left to the queued event: the button says
    # so at once, and the event answers twice with progress, the first answer then the whole.
    session = translated(events)
    said = events.named(compared(session, 2))
    assert said["status"].startswith("Comparing the explanations with toy-en-de") and "faithfulness_answers" not in said
    seen.clear()
    first, whole = (events.named(out) for out in integrated(session, 2, lambda fraction, desc: seen.append(fraction)))
    assert methods(first) == methods(again)[:-2] + methods(again)[-1:] and methods(whole) == methods(again)
    assert seen[:2] == [(3, 4), (4, 4)]  # its stages: attention, ALTI+ and one gradient together, then the curves
    told_in_rounds(seen[2:])  # then its points

    monkeypatch.setattr(operations, "LARGE_MODEL", 10 ** 12)  # a small model's first answer kept, then, in batches
    session = events.named(compared(translated(events), 2))["session"]

    def moved_on(fraction, desc):
        if fraction == (8, 32):
            events.run(operations.translate, session, "toy-en-de", "A man plays.")
    monkeypatch.setattr(operations, "LARGE_MODEL", 1)
    assert [events.named(out) for out in integrated(session, 2, moved_on)] == [DROPPED]


def test_stop_says_what_the_tab_keeps_of_the_comparison(events):
    """Stop on *Which explanation to trust*: nothing running (it said "not compared" all the same), nothing compared
    yet, the first answer alone (integrated gradients stopped), or the whole comparison already on screen (nothing
    left to stop)."""
    from attention_inspector.ui.tabs.sources import (INTEGRATING, explanations_compared, explanations_integrated,
                                                     stop_comparing)

    session = translated(events)
    assert events.run(stop_comparing, session)["status"] == "Nothing to stop: no comparison is running."
    session.revisions.working[INTEGRATING] = session.revision  # the comparison's queued event computing
    assert events.run(stop_comparing, session)["status"] == "Stopped: the explanations are not compared."
    del session.revisions.working[INTEGRATING]
    first = explanations_compared(events.services, session, 2)[2]
    assert events.run(stop_comparing, first)["status"].startswith(
        "Stopped: the comparison for step 2 shows every method but integrated gradients")
    whole = explanations_integrated(events.services, first, 2)[2]
    assert events.run(stop_comparing, whole)["status"] == (
        "Nothing to stop: the comparison for step 2 is whole, integrated gradients included.")
