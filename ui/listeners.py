"""How the page's events reach the session: every event that changes what is shown runs one operation of
ui/operations.py on the user's `Session` (one `gr.State`) and answers with `render`.

The core loop's events and every action a user waits on (translations, view changes, a branch, heads switched off,
the beam search and a hypothesis opened, a decoding chosen, a model compared, where each word came from) skip
Gradio's queue (`queue=False`, a plain request); those that make a new decoding or view also skip its processing of
each value (a thread hop per value; `on`). They are admitted up to `Services.admission`'s limit at the server's
door (ui/door.py) and refused beyond it with a "busy, try again", so a burst never waits unbounded. The other
events (the page's load, a measure computed with progress, the JSON API) go through the queue, which holds at most
`QUEUE_SIZE`.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from functools import partial
from pathlib import Path

import anyio
import gradio as gr

from attention_inspector.model.api.services import Services
from attention_inspector.model.keys import KINDS, MEASURE_LABELS, MEASURES, WEIGHTS
from attention_inspector.model.serving.translator import InputError
from attention_inspector.model.text.words import PIECES, UNITS
from attention_inspector.ui import operations
from attention_inspector.ui.links import PARAMETERS, LinkSpec, open_link, query_values
from attention_inspector.ui.neurons import neuron_due, open_neuron, with_neuron
from attention_inspector.ui.omissions import find_omissions
from attention_inspector.ui.page import Page
from attention_inspector.ui.plots import answers_value, core_value
from attention_inspector.ui.render import render
from attention_inspector.ui.session import Revisions, Session, View, clamp, packed, read_revision, unpacked
from attention_inspector.viz.attention import visible

STATIC = Path(__file__).parent / "static"
QUEUE_SIZE = 64
# The page's own events are not the API (ui/api.py is): callable, as the page calls them, but not listed for clients
# (Gradio's "Use via API" page, gradio_client's view_api), whose parameters would be the page's components.
PAGE_EVENT = "undocumented"
COMPARE_TAB = "compare"  # the id of the tab Compare models: a link that compares opens on it (`first_visit`)
COUNTERFACTUAL_TAB = "counterfactual"  # the Counterfactual tab's: a link with a counterfactual opens on it
COMPUTING = ("Computing {} at every step: the weights are shown meanwhile; stepping, the other views and the tabs "
             "work. Stop gives it up.")
# A new step: the core view and every plot redraw themselves in the browser (ui/static/core.js, plot.js).
STEP_JS = (STATIC / "step.js").read_text()
RANGE_JS = (STATIC / "range.js").read_text()
VIEW_SETTINGS = ("kind", "layer", "head", "measure", "step", "model_view", "units")


def settings(page: Page) -> list:
    """The view's controls, in the order `view_of` takes them, then the revision the page shows."""
    return [*(getattr(page, name) for name in VIEW_SETTINGS), page.revision]


def view_of(kind, layer, head, measure, step, model_view, units=PIECES, revision=None) -> tuple[View, int | None]:
    """The view a request's settings ask for (normalized against a trace later), and the revision of the state they
    were chosen on (None: any, as an API call asks). The busiest events skip Gradio's checks of their values (`on`),
    so a kind or a measure that is not a key (an old display label, say), or a step that is no number, is refused
    here with the keys; a layer or head the model lacks is left to `normalize`."""
    if kind not in KINDS:
        raise InputError(f"Unknown attention kind {operations.shown(kind)}; choose one of: {', '.join(KINDS)}.")
    measure = WEIGHTS if measure is None else measure
    if measure not in MEASURES:
        raise InputError(f"Unknown measure {operations.shown(measure)}; choose one of: {', '.join(MEASURES)}.")
    if isinstance(step, bool) or not isinstance(step, (int, float)):
        raise InputError(f"The step must be a number, not {operations.shown(step)}.")
    if units not in UNITS:
        raise InputError(f"Unknown units {operations.shown(units)}; choose one of: {', '.join(UNITS)}.")
    return View(kind, layer, head, measure, step, bool(model_view), units), clamp(revision, 0, 2 ** 62, None)


def session_outputs(page: Page) -> list:
    """Every component `render` may update: what a new decoding changes, and what belongs to the model."""
    return [*decoding_outputs(page), page.model, page.src_lang, page.tgt_lang, page.example, page.compare_model,
            page.mask_note, page.importance_measure, page.importance_plot]


def decoding_outputs(page: Page) -> list:
    """What a new decoding of the same model changes. (Gradio 6 rebuilds every output an answer leaves out, so each
    event lists what it updates, no more. The tabs' answers empty themselves: ui/static/answers.js.)"""
    return [page.session, page.revision, page.core, page.overview, page.compare_plot, page.probabilities, page.step,
            page.kind, page.measure, page.layer, page.head, page.model_view, page.units, page.breadcrumb, page.source,
            page.example, page.source_tokens, page.comparison, page.comparison_plot, *page.mask_grids,
            page.masked_translation, page.mask_effect_plot, page.n_best, page.beam_steps, page.beam_open,
            page.branch_word, page.link_box, page.export_file]


def view_outputs(page: Page, writes: bool = True, words: bool = True) -> list:
    """What a view change can update: with `writes`, the revision (an event that makes a new state); with `words`,
    the step, the source, the probability chart and the what-if views too (a change of units counts the steps in
    words or pieces and writes the views so). Each output an answer leaves out costs Gradio a rebuilt component
    (0.24 ms for the slider), so each event lists no more than it can change."""
    return [page.session, *[page.revision] * writes, page.core, page.overview, page.compare_plot,
            page.kind, page.measure, page.layer, page.head, page.model_view, page.units,
            *[page.step, page.source_tokens, page.probabilities, page.comparison, page.comparison_plot,
              page.masked_translation, page.mask_effect_plot] * words]


def answer(page: Page, services: Services, operation: Callable, outputs: list, extras: int,
           writes: bool = True, stepped_later: bool = False, latest_view: bool = False) -> Callable:
    """An event's function: `(state, *extras, *settings) -> updates`. The page's view settings are taken first
    (the step lives in the browser), then `operation(services, session, *extras)` runs, then `render`.

    An operation that `writes` (another model, sentence or decoding) claims the user's next revision as it starts,
    and its session is that revision (the page is told it); one that only reads (a view change, a measure) belongs
    to the revision of the session it reads. Either is answered only while its revision is still the latest: a
    slower answer to an older state is dropped (`stale`). The page's view settings apply only to the revision the
    page showed when it sent them: sent from an older one, they were chosen for another state.
    With `stepped_later`, a stepped measure's maps (integrated gradients) are left to `measure_event` (the weights
    drawn meanwhile); `progress` is told of a measure's steps. Work that stops (`Stopped`, raised by a `told` or
    `progress` once the user has moved on) answers as a stale one does. With `latest_view` (a measure computed for
    seconds), the answer is drawn in the view the page last asked for meanwhile, not the one it was asked in, and
    leaves the status line to a tab that has answered meanwhile."""
    def run(state, *values, progress: Callable[[int, int], None] | None = None) -> dict:
        began = time.monotonic()
        session, revisions = unpacked(state)
        try:
            arguments, (view, asked_of) = values[:extras], view_of(*values[extras:])
        except InputError as error:
            return folded(page, {page.status: str(error)}, revisions.latest)
        revision = revisions.claim() if writes else read_revision(session, revisions)
        before, note = session, ""
        if session is not None and asked_of in (None, session.revision):
            session, note = operations.with_view(session, view)
            revisions.view = (session.revision, view)
        try:  # work told step by step (`told`, `progress`) stops once the user has moved on
            after, message = operation(services, session, *arguments)
            measure = operations.pending(services, after) if writes and session is not None else None
            if measure and after.current is session.current:  # claiming a revision, this stopped the measure's event
                after = after.with_view(replace(after.view, measure=WEIGHTS))
                label = operations.capitalized(MEASURE_LABELS[measure])
                message = f"{message or ''} {label} at every step stopped (the weights are shown): choose it again."
            if after is not None:  # the measure's maps of the decoding drawn, not of one the operation replaced
                after = with_neuron(services, operations.with_measures(services, after, progress, stepped_later))
        except Stopped:
            return stale(page)
        if latest_view and after is not None and revisions.view and revisions.view[0] == after.revision:
            after, _ = operations.with_view(after, replace(revisions.view[1], step=after.view.step))
        if latest_view and revisions.told > began:
            message = None
        if not message and note:  # what the view could not show, where the operation itself says nothing
            message = note
        later = operations.pending(services, after) if stepped_later and after is not None else None
        if later:  # and what the view lacks
            message = COMPUTING.format(MEASURE_LABELS[later]) + (f" {note}" * bool(note))
        if revisions.latest != revision:
            return stale(page)
        if writes and after is not None:
            after = replace(after, revision=revision)
        updates = render(page, services, before, after, message)
        updates[page.session] = packed(after, revisions)
        if writes:
            updates[page.revision] = revision
        if updates.get(page.step) == view.step or latest_view:  # the step the page sent: sent back, it could only
            updates.pop(page.step, None)       # undo a step taken in the browser while this request ran (a measure)
        return folded(page, {component: value for component, value in updates.items()
                             if component in outputs or component in page.parts}, revision)
    run.__name__ = getattr(operation, "__name__", "run")  # as Gradio's messages name the event
    return run


def folded(page: Page, updates: dict, revision: int) -> dict:
    """`updates` with the core view's parts (`Page.parts`) sent as the core view's one value, which names the
    revision they belong to (the page drops an older one: ui/static/core.js), and the sentence they translate where
    it is new. The translation and the status line spell out invisible characters (a right-to-left override in a
    sentence echoed would turn the line around)."""
    parts = {part.name: updates.pop(part) for part in page.parts if part in updates}
    for name in ("translation", "status"):
        if isinstance(parts.get(name), str):
            parts[name] = visible(parts[name], keep="\n")
    if isinstance(updates.get(page.source), str):  # the sentence translated (the page tells an edited box apart)
        parts["sentence"] = updates[page.source]
    if parts:
        updates[page.core] = core_value(revision, parts)
    return updates


def stale(page: Page) -> dict:
    """The answer to a state the user has left: nothing on the page changes, and the stored session stays the
    newer one (Gradio leaves every output it is not given a value for as it is)."""
    return {page.session: gr.skip()}


def serialized(component, value):
    """A value as Gradio sends it to the browser, for the events that skip Gradio's postprocessing (`on`): the
    components with a data model (highlighted text, tables, files) postprocess their own value here; every other
    component's value (text, numbers, keys, a plot's JSON) and every property update is sent as it is. (The
    component's own copy does the postprocessing: no event changes those components' properties.)"""
    if getattr(component, "data_model", None) is None:
        return value
    if isinstance(value, dict):  # a property update: its value, if it has one, postprocessed the same way
        return {**value, "value": serialized(component, value["value"])} if "value" in value else value
    value = component.postprocess(value)
    return value.model_dump() if hasattr(value, "model_dump") else value


def light(services: Services, state, *values) -> bool:
    """Whether a view change can be answered without model work: the view shows weights, a stepped measure (whose
    maps come later, `measure_event`), or a measure whose maps are already computed for the decoding on screen."""
    try:
        view, _ = view_of(*values[-len(VIEW_SETTINGS) - 1:])
    except InputError:
        return True  # answered with the reason at once
    session, _ = unpacked(state)
    if session is not None and neuron_due(session.with_view(view)):  # the neuron view of another head
        return False
    return session is None or operations.stepped(services, session.model, view.measure) or \
        operations.measured(session.current, view.measure)


def admitted(page: Page, services: Services, function: Callable, inline: Callable | None = None) -> Callable:
    """`function` for an event outside Gradio's queue (admitted at the server's door, ui/door.py, which bounds
    them), its answer in the form Gradio sends. It runs in a worker thread, or in the event loop itself where
    `inline(*values)` says it needs no model work (a view change: a few ms of drawing, which under load would wait
    longer for a thread than it takes)."""
    def answered(*values) -> dict:  # these events skip Gradio's postprocessing (`on`)
        return {component: serialized(component, value) for component, value in function(*values).items()}

    async def answer_once(*values):
        if inline is not None and inline(*values):
            return answered(*values)
        return await anyio.to_thread.run_sync(lambda: answered(*values))

    # Gradio 6.31's menus send their `input` event twice for one click on an option (once for a key press), at
    # once: a request that arrives while the same one is being answered (the same session and values) shares its
    # answer. Sessions are immutable and operations pure, so sharing is exact, even between users.
    pending: dict[tuple, asyncio.Future] = {}

    async def run(*values):
        key = (id(values[0]), repr(values[1:]))
        if key in pending:
            return await asyncio.shield(pending[key])
        pending[key] = asyncio.ensure_future(answer_once(*values))
        try:
            return await asyncio.shield(pending[key])
        finally:
            pending.pop(key, None)
    run.__name__ = function.__name__
    return run


def on(page: Page, services: Services, triggers: list, operation: Callable, extras: list, api_names: list[str],
       outputs: list | None = None, queued: bool = True, view_change: bool = False, inline: bool = True,
       **options) -> list:
    """Wire each trigger to run `operation` with `extras` (components) after the session, then the view's
    settings; each trigger gets its api name. `outputs`: what the operation can change (default: a new decoding's
    outputs). Returns the events (to chain `.then`).

    An event outside the queue (`queued=False`: the page's busiest requests, and what-if actions a user waits on)
    also skips Gradio's pre- and postprocessing, a thread hop per value: its values are checked by `view_of`
    and the operations, and `serialized` puts its answers in Gradio's form. A `view_change` runs in the event loop
    when it needs no model work (`light`; never where not `inline`). Their progress shows on the translation or the
    heatmap only (shown on each of ~35 outputs, it lengthened the page's own work before each request).
    """
    outputs = outputs or decoding_outputs(page)
    run = answer(page, services, operation, outputs, len(extras), writes=not view_change,
                 stepped_later=view_change)
    if not queued:
        run = admitted(page, services, run, partial(light, services) if view_change and inline else None)
    if not queued:  # the progress shows where the answer will appear, not on each of its outputs (the page's work)
        options.setdefault("show_progress_on", [page.core])
    # A new state asked for while another is on its way is sent at once (only the latest is answered: `answer`);
    # a view chosen while another is drawn is sent once that is (Gradio's default would drop it).
    options.setdefault("trigger_mode", "always_last" if view_change else "multiple")
    options.setdefault("api_visibility", PAGE_EVENT)
    return [trigger(run, [page.session, *extras, *settings(page)], outputs, api_name=api_name,
                    queue=queued, preprocess=queued, postprocess=queued, **options)
            for trigger, api_name in zip(triggers, api_names)]


class Stopped(Exception):
    """A measure's computation given up: the user has moved on to another state (or pressed Stop)."""


def measure_event(page: Page, services: Services) -> Callable:
    """The function that computes the stepped measure a view change left pending (`answer`'s `stepped_later`),
    step by step with Gradio's progress, and draws it. It stops at the next step once the user has moved to another
    state (another model, sentence or decoding, or Stop), and does nothing where nothing is pending."""
    run = answer(page, services, measure_computed, view_outputs(page, writes=False, words=False), 0, writes=False,
                 latest_view=True)

    def computed(state, kind, layer, head, measure, step, model_view, units, revision=None,
                 progress=gr.Progress()) -> dict:
        session, revisions = unpacked(state)
        if operations.pending(services, session) is None:
            return stale(page)
        label = MEASURE_LABELS[session.view.measure]
        told = claimed_progress(revisions, progress, lambda done, total: f"{label}: step {done} of {total}",
                                read_revision(session, revisions))
        return run(state, kind, layer, head, measure, step, model_view, units, revision, progress=told)
    return computed


def translate_event(page: Page, services: Services) -> Callable:
    """The function that translates with a large model after the page's Translate said it would
    (`operations.translate_later`), step by step with Gradio's progress; it stops at the next step once the user has
    moved to another state (another sentence, Stop), and does nothing for a model that translated at once."""
    def translated(state, model, text, kind, layer, head, measure, step, model_view, units, revision=None,
                   progress=gr.Progress()) -> dict:
        if not operations.large(services, model):
            return stale(page)
        told = claimed_progress(unpacked(state)[1], progress,
                                lambda done, total: f"Translating with {model}: step {done} (at most {total})")
        run = answer(page, services, partial(operations.translate, told=told), decoding_outputs(page), 2)
        return run(state, model, text, kind, layer, head, measure, step, model_view, units, revision)
    return translated


def later_event(page: Page, services: Services) -> Callable:
    """The function that runs the what-if action a large model left pending (`operations.deferred`: a branch, heads
    off, the beam, a comparison) step by step with Gradio's progress, after the page read that it is computing; it
    stops at the next step once the user has moved to another state (Stop, another sentence), and does nothing where
    nothing is pending."""
    def computed(state, kind, layer, head, measure, step, model_view, units, revision=None,
                 progress=gr.Progress()) -> dict:
        session, revisions = unpacked(state)
        if session is None or session.pending is None:
            return stale(page)
        pending = session.pending
        told = claimed_progress(revisions, progress, lambda done, total: f"Step {done} (at most {total})")

        def resumed(services: Services, session: Session) -> tuple[Session, str]:
            return pending.operation(services, replace(session, pending=None), *pending.arguments, told=told)
        run = answer(page, services, resumed, session_outputs(page), 0)
        return run(state, kind, layer, head, measure, step, model_view, units, revision)
    return computed


def claimed_progress(revisions: Revisions, progress: Callable, describe: Callable[[int, int], str],
                     revision: int | None = None) -> operations.Told:
    """`told(done, total)` for work that belongs to `revision`: it shows Gradio's progress as `describe` says, and
    stops the work (`Stopped`) at a step once the user has claimed another revision (Stop, a new state). Without
    `revision`, the work is a queued event whose `answer` claims the user's next revision as it starts: the latest
    at its first step."""
    claimed = [] if revision is None else [revision]

    def told(done: int, total: int) -> None:
        if claimed and revisions.latest != claimed[0]:
            raise Stopped
        claimed[:] = [revisions.latest]
        progress((done, total), desc=describe(done, total))
    return told


@operations.operation
def measure_computed(services: Services, session: Session) -> tuple[Session, str]:
    """The measure a view change left pending, computed after this (`answer` computes the measure on screen)."""
    label = MEASURE_LABELS[session.view.measure]
    return session, f"{label[0].upper()}{label[1:]} at every step: computed."


def tab_answer(page: Page, services: Services, function: Callable, inputs: list, outputs: list, api_name: str,
               trigger: Callable, answers: gr.HTML | None = None, progress: str | None = None,
               steps_view: bool = False, aside: Callable[[Session], str | None] | None = None, **options):
    """Wire a tab's question: `function(services, session, *values)` is an `operations.operation` that returns
    (its outputs' values, message), dropped where the user has moved on to another state meanwhile (`answer`).
    With `answers` (a tab's answers about the decoding on screen, ui/plots.py `answers_view`), `outputs` are the
    names of the answers it gives, sent as that view's one value. With `progress` (what it computes, in words),
    it is a queued event that shows Gradio's progress above the answers as `function(..., told=told)` reports each
    stage to `told(done, total)`, and stops at its next stage once the user has moved on (or pressed Stop); its
    function may then answer in stages (an iterator of (values, message) in place of the values: each drawn as it
    comes, the last one whole). A function may return the session as a third value, with what it computed kept.
    With `steps_view`, that session's step is the step its answers are about, and the page steps there. With
    `aside`, a refused question leaves the answers on screen faded under what `aside(session)` says they are about
    (None: nothing)."""
    def answered(state, values: tuple, tracker: Callable | None) -> Iterator[dict]:
        session, revisions = unpacked(state)
        revision = read_revision(session, revisions)
        asked_at = (clamp(values[inputs.index(page.step)], 1, session.trace.steps, 1)  # answers about one step
                    if page.step in inputs and session is not None else None)
        if tracker is not None:  # a slow question computing: its Stop says whether there is anything to stop
            revisions.working[api_name] = revision
        try:
            # (Gradio's tracker is falsy: it has a length.)
            asked = {} if tracker is None else {"told": claimed_progress(
                revisions, tracker, lambda done, total: f"{progress}: {done} of {total}", revision)}
            results, message, *kept = function(services, session, *values, **asked)
            for results, message in (results if isinstance(results, Iterator) else [(results, message)]):
                if revisions.latest != revision:
                    break
                updates = {page.session: packed(kept[0], revisions)} if kept else {}
                if kept and steps_view:
                    asked_at = updates[page.step] = kept[0].view.step
                revisions.told = time.monotonic()  # a slow measure's "computed" leaves this in the status line
                if not isinstance(results, tuple):  # nothing translated yet, or a refused input
                    updates[page.status] = message
                    said = aside(session) if aside is not None and session is not None else None
                    if said and answers is not None:
                        updates[answers] = answers_value(revision, {}, aside=said)
                elif answers is not None:
                    updates.update({answers: answers_value(revision, dict(zip(outputs, results)), asked_at),
                                    page.status: message})
                else:
                    updates.update({**dict(zip(outputs, results)), page.status: message})
                yield folded(page, updates, revision)
            else:
                return
        except Stopped:
            pass
        finally:
            if revisions.working.get(api_name) == revision:
                del revisions.working[api_name]
        yield stale(page)

    if progress is None:
        def run(state, *values) -> dict:
            return next(answered(state, values, None))
    else:
        def run(state, *values) -> Iterator[dict]:  # Gradio's progress tracker comes last (the signature below)
            *values, tracker = values
            yield from answered(state, tuple(values), tracker)
        run.__signature__ = inspect.Signature(  # Gradio hands a progress tracker to the parameter whose default is one
            [inspect.Parameter(f"value{i}", inspect.Parameter.POSITIONAL_OR_KEYWORD) for i in range(len(inputs) + 1)]
            + [inspect.Parameter("progress", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=gr.Progress())])
    run.__name__ = getattr(function, "__name__", "run")
    shown = [answers] if answers is not None else outputs
    # A slow answer's progress shows above the answers, or beside Stop (`answers_view`: not on the answers
    # themselves); a quick answer's none.
    options.setdefault("show_progress_on", [answers.progress if answers is not None else page.progress])
    options.setdefault("show_progress", "hidden" if progress is None else "minimal")
    options.setdefault("api_visibility", PAGE_EVENT)
    return trigger(run, [page.session, *inputs], [page.session, *shown, page.core, *[page.step] * steps_view],
                   api_name=api_name, **options)


@operations.operation
def view_changed(services: Services, session: Session) -> tuple[Session, str | None]:
    """A view change: `answer` has already taken the page's settings into the session. The status line keeps what
    it said, unless the view has something to say (what it could not show)."""
    return session, None


def on_screen(session: Session | None, model: object, text: object) -> bool:
    """Whether `text` translated by `model` is what the page shows already."""
    return session is not None and (session.model, session.source) == (model, text)


def translate_or_example(services: Services, session: Session | None, model: object, text: object
                         ) -> tuple[Session | None, str]:
    """A new model chosen: the sentence on screen translated with it, in the view on screen where the model has it.
    A sentence it cannot read stays in the box (and nothing is shown) for the user to change; an empty box gets
    its first example; a large model's translation comes later, step by step (`translate_event`). (Nothing to do
    where it is already what is shown: a menu can send its choice twice.)"""
    if on_screen(session, model, text):
        return session, None  # the status line keeps what it said
    if operations.large(services, model) and isinstance(text, str) and text.strip():
        return operations.translate_later(services, session, model, text)  # step by step: `translate_event`
    translated, message = operations.translate(services, None, model, text, view=session and session.view)
    if translated is not None:
        return translated, message
    examples = services.examples(model)
    if model not in services.translators:
        return None, f"Model {operations.shown(model)} chosen. {message}"
    if isinstance(text, str) and text.strip() or not examples:
        return None, (f"Model {model} chosen: it cannot translate the sentence in the box. {message} The sentence "
                      "is kept: change it, or choose another model or an example.")
    translated, said = operations.translate(services, None, model, examples[0])
    return translated, f"Model {model} chosen; the box was empty, so its first example is shown. {said}"


def change_languages(services: Services, session: Session | None, model: object, text: object, src_lang: object,
                     tgt_lang: object) -> tuple[Session | None, str]:
    """Another source or target language chosen for a multilingual model: the sentence translated that way."""
    if session is not None and on_screen(session, model, text) and \
            (session.src_lang, session.tgt_lang) == (src_lang or None, tgt_lang or None):
        return session, None  # a menu can send its choice twice
    return operations.translate(services, session, model, session.source if session else text,
                                src_lang=src_lang, tgt_lang=tgt_lang)


def use_example(services: Services, session: Session | None, sentence: object, model: object
                ) -> tuple[Session | None, str]:
    """An example picked: translate it (nothing to do when it is already what is shown)."""
    if not sentence or on_screen(session, model, sentence):
        return session, "" if session is None else None  # shown already: the status line keeps what it said
    return operations.translate(services, session, model, sentence)


def first_visit(page: Page, services: Services, state=None, request: gr.Request | None = None,
                progress: Callable | None = None) -> dict:
    """On page load: the view of the page's link (`?model=…&text=…`, ui/links.py), or else the default model's first
    example, translated, so a visitor sees what the app does. A large model's decodings are told to `progress`
    (Gradio's) step by step, and stop at the next step once the user has pressed Stop or translated meanwhile."""
    query = request.query_params if request is not None else {}
    _, revisions = unpacked(state)
    revision = revisions.claim()
    told = None if progress is None else claimed_progress(
        revisions, progress, lambda done, total: f"Opening: step {done} (at most {total})", revision)
    spec = None
    try:
        if any(query_values(query, name) for name in PARAMETERS):
            spec, notes = LinkSpec.parse(query)
            session, message = open_link(services, spec, notes, told)
        else:
            examples = services.examples(services.default_model)
            if not examples:
                return folded(page, {page.status: services.load_status() or "Type a sentence and press Enter."},
                              revision)
            session, message = operations.translate(services, None, services.default_model, examples[0], told=(
                told if operations.large(services, services.default_model) else None))
            if session is not None:  # a newcomer's first view: why it is not at the first word
                message += (f" It opens at step {session.view.step}, where a row reads more than the start token: "
                            "Next, Previous and the slider go through every token the model wrote.")
    except Stopped:
        return stale(page)
    if revisions.latest != revision:  # the user translated (or pressed Stop) before the page's first answer came
        return stale(page)
    if session is not None:
        session = replace(session, revision=revision)
    updates = {**render(page, services, None, session, message), page.session: packed(session, revisions),
               page.revision: revision}
    if session is not None and session.compare is not None:  # a link that compares opens on Compare models
        updates[page.tabs] = gr.Tabs(selected=COMPARE_TAB)
    if session is not None and spec is not None and spec.counterfactual:  # and one with a counterfactual, on its tab
        updates[page.counterfactual] = spec.counterfactual
        updates[page.tabs] = gr.Tabs(selected=COUNTERFACTUAL_TAB)
    return folded(page, updates, revision)


def wire(page: Page, services: Services) -> None:
    """The core loop's events: translate, switch the model, use an example, open the page, change the view, step."""
    on(page, services, [page.translate.click, page.source.submit], operations.translate_later,
       [page.model, page.source], ["translate", "translate_enter"], outputs=decoding_outputs(page), queued=False)
    # A large model's translation (seconds): the page presses this hidden button when Translate says it is being
    # computed (ui/static/page.js), and it comes step by step with progress; a small model's costs no request more.
    page.translate_queued.click(translate_event(page, services), [page.session, page.model, page.source,
                                                                  *settings(page)],
                                decoding_outputs(page), api_visibility="private", show_progress="minimal",
                                show_progress_on=[page.progress], **services.trace_queue)
    # The same for a large model's what-if action (a branch, heads off, the beam, a comparison): the action said at
    # once that it is computing, and left itself pending in the session.
    page.later_queued.click(later_event(page, services), [page.session, *settings(page)], session_outputs(page),
                            api_visibility="private", show_progress="minimal", show_progress_on=[page.progress],
                            **services.trace_queue)
    on(page, services, [page.model.input], translate_or_example, [page.model, page.source], ["switch_model"],
       outputs=session_outputs(page), queued=False)
    on(page, services, [page.example.input], use_example, [page.example, page.model], ["use_example"],
       queued=False)
    on(page, services, [page.src_lang.input, page.tgt_lang.input], change_languages,
       [page.model, page.source, page.src_lang, page.tgt_lang], ["source_language", "target_language"],
       outputs=session_outputs(page), queued=False)
    # Typing a sentence of one's own leaves the examples (so closing their list never brings one back).
    page.source.input(None, None, page.example, js="() => null")

    def visit(state, request: gr.Request, progress=gr.Progress()) -> dict:  # Gradio hands both in
        return first_visit(page, services, state, request, progress)
    page.demo.load(visit, page.session, [*session_outputs(page), page.tabs, page.counterfactual],
                   api_name="first_visit", api_visibility=PAGE_EVENT, show_progress="minimal",
                   show_progress_on=[page.progress], **services.trace_queue)

    # A view change reads the user's stored trace (a few ms): the view's settings are the change. Integrated
    # gradients chosen are drawn with the weights at once, then computed step by step with progress, and can be
    # stopped.
    for control in (page.kind, page.layer, page.head, page.measure, page.model_view, page.units):
        [changed] = on(page, services, [control.input], view_changed, [], [control.elem_id.replace("-", "_")],
                       outputs=view_outputs(page, writes=False, words=control is page.units), queued=False,
                       view_change=True)
        if control is page.measure:
            changed.then(measure_event(page, services), [page.session, *settings(page)],
                         view_outputs(page, writes=False, words=False),
                         api_visibility="private", show_progress="minimal", show_progress_on=[page.progress],
                         **services.trace_queue)
    on(page, services, [page.stop_measure.click], operations.stop_measure, [], ["stop_measure"],
       outputs=view_outputs(page, words=False), queued=False)

    # Stepping: the buttons step in the page and move the slider (ui/static/page.js), and every change of the
    # slider (drag, keyboard, its number box, the server) redraws the step in the browser, the slider itself kept
    # within the steps.
    page.step.change(None, page.step, page.step, js=STEP_JS)
    for changed in (page.demo.load, page.core.change):  # the slider's range: from the page's load on
        changed(None, None, page.step, js=RANGE_JS)

    on(page, services, [page.breadcrumb.input], operations.go_to, [page.breadcrumb], ["breadcrumb"], queued=False)
    opened = on(page, services, [page.open_head.click, page.head_name.submit], operations.open_head,
                [page.head_name], ["open_head", "open_head_enter"],
                outputs=view_outputs(page, writes=False, words=False), queued=False, view_change=True)
    # The neuron view of a cell clicked (its model work in a thread, as a view change of another head's); the step
    # moves to the row clicked.
    on(page, services, [page.open_neuron.click], open_neuron, [page.neuron_cell], ["open_neuron"],
       outputs=[*view_outputs(page, writes=False, words=False), page.step], queued=False, view_change=True,
       inline=False)
    # The words a new decoding left out, looked for once it is drawn (the page presses the button: ui/static/page.js).
    on(page, services, [page.omissions_queued.click], find_omissions, [], ["find_omissions"],
       outputs=[*view_outputs(page, writes=False, words=False), page.source_tokens], queued=False, view_change=True,
       inline=False)
    for event in opened:  # the head may be opened from far down the page (the importance heatmap)
        event.then(None, js="() => document.querySelector('#attention')?.scrollIntoView({block: 'nearest'})")

