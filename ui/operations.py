"""What a user can do to a session, as plain functions `(services, session, ...) -> (session, message)`.

Each returns a new `Session` (or the one it was given, when it fails) and the line the status box shows. None of
them touches Gradio: tests call them directly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import wraps

import numpy as np

from attention_inspector.model.api.answers import shown
from attention_inspector.model.api.services import Services
from attention_inspector.model.explain.attribution import step_shares
from attention_inspector.model.explain.contributions import VALUE_NORM_TOGETHER
from attention_inspector.model.keys import (ALL_HEADS, ALTI, CROSS, DECODER, ENCODER, GRADIENTS, HEAD_LABELS,
                                            INPUT_X_GRADIENT, INTEGRATED_GRADIENTS, KIND_LABELS, KINDS, MEAN,
                                            MEASURE_LABELS, RESIDUAL_MEASURES, ROLLOUT, SALIENCY, VALUE_NORM, WEIGHTS,
                                            head_name, parse_head_name)
from attention_inspector.model.serving.traced import TracedTranslation
from attention_inspector.model.serving.translator import InputError
from attention_inspector.model.text.hub_tokenizer import LANGUAGE_NAMES
from attention_inspector.model.text.words import words
from attention_inspector.ui.session import (NOTHING_YET, ORIGINAL, Beam, Comparison, Decoding, MaskEffect, Pending,
                                            Session, View, to_arrays)
from attention_inspector.viz.attention import visible
from attention_inspector.viz.views import TraceArrays
from attention_inspector.viz.whatif import beam_step_rows, n_best_rows

FIRST_STEP = 4  # a new translation opens a few tokens in, where a row shows more than <sos>'s attention
# What each measure's maps hold, for the view's title line and colour bar: (line, unit).
MEASURE_LINES = {  # each line fits the title of a phone's heatmap (tests/test_viz_readability.py)
    VALUE_NORM: ("weight × value norm ‖α·f(x)‖ (Kobayashi et al. 2020)", "‖α f‖"),
    ROLLOUT: ("rollout up to this layer (Abnar & Zuidema 2020)", "share"),
    ALTI: ("ALTI+ shares up to this layer (Ferrando et al. 2022)", "share"),
    SALIENCY: ("saliency ‖∂ log p / ∂x‖, each step's shares", "share"),
    INPUT_X_GRADIENT: ("input × gradient, each step's signed shares", "share"),
    INTEGRATED_GRADIENTS: ("integrated gradients, each step's signed shares", "share"),
}
COMPLETENESS = "32 points from zero; completeness error ≤ {:.1%}"  # integrated gradients' second line
# The one entry of the head menu (and the layer menu) for a measure of the whole layer or of the whole model.
WHOLE_MODEL, EVERY_HEAD = "Whole model", "Every head, combined"
GRU_MEASURES = ("The GRU models have no residual stream: value norms, rollout and contributions need a "
                "Transformer; the weights and the gradient attributions can be shown.")
# The measures computed later, step by step with progress (`stepped`, `pending`): integrated gradients at every step
# takes seconds; saliency and input × gradient take one batch of every step, a few times a translation, and come at
# once, but on a model of LARGE_MODEL parameters or more (4 s for 25 steps of NLLB-600M's size, one thread), later.
STEPPED_MEASURES = (INTEGRATED_GRADIENTS,)
LARGE_MODEL = 100_000_000
# What the page says while a large model's translation is computed (it starts with "Computing": the page then shows
# Stop under the heatmap).
TRANSLATING = ("Computing the translation with {model} ({parameters:,.0f}M parameters) step by step: its progress "
               "shows on the view; Stop, or a new sentence, stops it.")
# What the page says at once where a what-if action of a large model is computed later (`deferred`): the page then
# starts `listeners.later_event` (ui/static/page.js), which shows its progress.
LATER = ("Computing with {model} ({parameters:,.0f}M parameters), step by step: {what}. Its progress shows on the "
         "view; Stop, or a new sentence, stops it.")
# What Stop says when it stops the page's first translation (a link's, or the first example's: the page shows Stop
# when it takes over a second, and puts a link's sentence in the box at once, ui/static/page.js).
STOPPED_OPENING = ("Stopped before the first translation: the link's sentence, if it has one, is in the box; choose a "
                   "model and press Translate.")
Told = Callable[[int, int], None]  # told (steps done, at most) after each step of a decoding; it may raise to stop
GRADIENTS_OF_PREDICTIONS = ("Gradient attributions explain each step's prediction: they are shown over the source "
                            "tokens (Cross-attention) or the target prefix (Decoder self-attention), not in the "
                            "encoder's view; showing them over the source.")


def plural(count: int, noun: str) -> str:
    """'1 head', '3 heads'."""
    return f"{count} {noun}{'s' * (count != 1)}"


def operation(function):
    """An operation on a translated session: with none yet it says so, and a refused input (`InputError`) leaves
    the session as it was, the reason as the message."""
    @wraps(function)
    def run(services: Services, session: Session | None, *args, **kwargs) -> tuple[Session | None, str]:
        if session is None:
            return None, NOTHING_YET
        try:
            return function(services, session, *args, **kwargs)
        except InputError as error:
            return session, str(error)
    return run


def translate_status(traced: TracedTranslation, kinds: list[str], trained: list[int] | None = None,
                     reads: str | None = None) -> str:
    """What the status line says about a translation: unknown source words (where a quarter of the words or more
    are, that the model reads `reads`, its source language's code), unspellable target words, limits, and a
    source longer or shorter than any the model learned from (`trained`: the shortest and longest, in tokens)."""
    labels, spans = words(traced.source_tokens, traced.scheme)
    unknown = dict.fromkeys(label for label, span in zip(labels, spans)  # each word once, whole
                            if any(traced.unknown[i] for i in span))
    quoted = ", ".join(f'"{visible(word)}"' for word in unknown)  # a word may be a comma, or end in a full stop
    message = "Translated." + (f" Unknown words (read as <unk>): {quoted}." if unknown else "")
    if reads and len(unknown) >= max(3, (len(labels) - 1) / 4):  # a quarter of the words or more (<eos> left out)
        language = LANGUAGE_NAMES.get(reads, reads)
        message += f" So many unknown words: this model reads {language}. Is the sentence in {language}?"
    unspelled = traced.target_tokens.count("<unk>")
    if unspelled:
        message += (f" The model chose <unk> {plural(unspelled, 'time')}: a word its vocabulary cannot spell, shown "
                    "as <unk> in the translation.")
    if len(kinds) < len(KINDS):
        message += " This model has no self-attention: only its cross-attention exists to show."
    if traced.target_tokens[-1] != "<eos>":
        message += f" Stopped at the length limit of {len(traced.target_tokens)} tokens."
    length = len(traced.source_tokens) - 1  # <eos> left out
    if trained and not trained[0] <= length <= trained[1]:
        message += (f" Beware: this source has {plural(length, 'token')}, and the model learned from sources of "
                    f"{trained[0]} to {trained[1]}: outside that range it is often wrong.")
    return message


def first_view(services: Services, model: str, trace: TraceArrays) -> View:
    """The view a model opens on: cross-attention of the head that aligns best on the val split (heads.json), else
    the mean of the last layer's heads, a few steps in."""
    best = services.best_head(model)
    layer, head = best if best is not None else (trace.layers(CROSS) - 1, MEAN)
    return View(CROSS, layer, head, WEIGHTS, FIRST_STEP).normalize(trace)


def translate(services: Services, session: Session | None, model: object, text: object,
              view: View | None = None, src_lang: object = None, tgt_lang: object = None,
              told: Callable[[int, int], None] | None = None) -> tuple[Session | None, str]:
    """Trace a translation once: a new session (the view and a multilingual model's languages kept where the model
    is the same); a failure keeps the session as it was. `told(steps, limit)`: after each step (a large model's
    translation, `translate_later`)."""
    if not isinstance(model, str) or model not in services.translators:
        return session, f"Choose a model: {shown(model)} is not loaded. " + services.load_status()
    if session is not None and session.model == model:
        src_lang, tgt_lang = src_lang or session.src_lang, tgt_lang or session.tgt_lang
    try:
        traced = services.trace(model, text, src_lang=src_lang, tgt_lang=tgt_lang, told=told, detach=True)
    except InputError as error:
        kept = f" The translation on screen is still that of {shown(session.source)}." if session else ""
        return session, str(error) + kept
    original = Decoding.of(ORIGINAL, traced)
    trace = original.trace
    said = back_to_weights((view or session.view).measure if session is not None or view is not None else WEIGHTS,
                           "this translation")
    if session is not None and session.model == model:
        view = replace(view or session.view, measure=WEIGHTS, step=FIRST_STEP)
    elif view is not None:  # another model: the view it is shown in, where this model has it
        view, carried = carried_view(view, trace, model)
        said = carried + said
    else:
        view = first_view(services, model, trace)
        if not services.card(model).head_report.get("heads"):
            said = (f" {model} has no head report yet, so it opens on the mean of its last layer's heads; the Head "
                    "statistics tab measures its heads on this sentence (the server's head report, which finds its "
                    "best-aligning head over a corpus, is made as docs/what-if.md says).")
    new = Session(model, str(text), (original,), view=view.normalize(trace),
                  unknown=tuple(traced.unknown), src_lang=src_lang or None, tgt_lang=tgt_lang or None)
    card = services.card(model)
    trained = card.metrics.get("training", {}).get("source_tokens")
    return new, translate_status(traced, trace.available(), trained, None if card.languages else card.source_language
                                 ) + said


def head_words(head: int | str) -> str:
    """A head menu's choice in words: "head 3", "mean of heads"."""
    return HEAD_LABELS[head].lower() if head in HEAD_LABELS else f"head {head + 1}"


def carried_view(view: View, trace: TraceArrays, model: str) -> tuple[View, str]:
    """The view of another model's translation carried to `model`'s (its weights), and what of it `model` lacks."""
    carried = replace(view, measure=WEIGHTS).normalize(trace)
    changes = [f"{KIND_LABELS[view.kind].lower()} → {KIND_LABELS[carried.kind].lower()}"] * (carried.kind != view.kind)
    if carried.kind == view.kind and carried.layer != view.layer:
        changes.append(f"layer {view.layer + 1} → {carried.layer + 1}")
    if carried.kind == view.kind and carried.head != view.head:
        changes.append(f"{head_words(view.head)} → {head_words(carried.head)}")
    if carried.step != view.step:
        changes.append(f"step {view.step} → {carried.step}")
    if not changes:
        return carried, ""
    return carried, f" {model} shows the nearest view it has: {', '.join(changes)}."


def with_view(session: Session | None, view: View) -> tuple[Session | None, str]:
    """Another kind, layer, head, measure or step of the decoding on screen, and what of it cannot be shown. The
    measure's maps are computed where the view is drawn (`with_measures`), for the decoding that is drawn."""
    if session is None:
        return None, NOTHING_YET
    if view.measure not in MEASURE_LABELS:
        return session, f"Unknown measure {shown(view.measure)}; choose one of: {', '.join(MEASURE_LABELS)}."
    if view.measure in (ROLLOUT, ALTI, *GRADIENTS):  # one map for the heads: the head menu's choice stays
        view = replace(view, head=session.view.head)
    if view.measure in RESIDUAL_MEASURES and session.trace.encoder is None:
        return session.with_view(replace(view, measure=WEIGHTS)), GRU_MEASURES
    if view.measure in GRADIENTS and view.kind == ENCODER:
        return session.with_view(view), GRADIENTS_OF_PREDICTIONS
    return session.with_view(view), ""


def measured(decoding: Decoding, measure: str) -> bool:
    """Whether `decoding` can be drawn as `measure` without model work: the weights, or its maps already kept."""
    return measure == WEIGHTS or measure in (decoding.measure_maps or {})


def large(services: Services, model: object) -> bool:
    """Whether `model` is a loaded checkpoint of `LARGE_MODEL` parameters or more (NLLB-600M: 2-5 s a translation)."""
    return isinstance(model, str) and model in services.translators and services.card(model).parameters >= LARGE_MODEL


def deferred(operation: Callable, what: str, model_of: Callable = lambda session, *arguments: session.model
             ) -> Callable:
    """`operation` (an operation that takes `told`) run at once where the model it decodes with (`model_of`) is
    small; with a large one (`large`) the answer is at once that it is computing `what`, the session keeping it
    `Pending`, and the page starts the queued `listeners.later_event`, which runs it with progress."""
    @wraps(operation)
    def run(services: Services, session: Session | None, *arguments) -> tuple[Session | None, str]:
        model = None if session is None else model_of(session, *arguments)
        if not large(services, model):
            return operation(services, session, *arguments)
        return (replace(session, pending=Pending(operation, arguments)),
                LATER.format(model=model, parameters=services.card(model).parameters / 1e6, what=what))
    return run


def translate_later(services: Services, session: Session | None, model: object, text: object
                    ) -> tuple[Session | None, str]:
    """The page's Translate: `translate` now, or with a large model, later, step by step with progress (the queued
    event `listeners.translate_event`, which the page starts on reading `TRANSLATING`), the session kept and the
    page told so meanwhile."""
    if not large(services, model):
        return translate(services, session, model, text)
    return session, TRANSLATING.format(model=model, parameters=services.card(model).parameters / 1e6)


def stepped(services: Services, model: str, measure: str) -> bool:
    """Whether `model` computes `measure` later, step by step with progress: integrated gradients always, and every
    gradient method on a model of `LARGE_MODEL` parameters or more."""
    if measure in STEPPED_MEASURES:
        return True
    return measure in GRADIENTS and large(services, model)


def pending(services: Services, session: Session | None) -> str | None:
    """The stepped measure (`stepped`) the session shows but has not computed yet (its weights drawn meanwhile), if
    any."""
    if session is None or not stepped(services, session.model, session.view.measure) or \
            measured(session.current, session.view.measure):
        return None
    return session.view.measure


def stop_measure(services: Services, session: Session | None) -> tuple[Session | None, str]:
    """Stop computing a stepped measure, a large model's translation, a what-if action left `Pending` or the page's
    first translation (the event claims a new revision, which stops the computation at its next step): a measure's
    view goes back to the weights."""
    if session is None:  # the page's first answer (a link or the first example) not in yet
        return None, STOPPED_OPENING
    measure = pending(services, session)
    if measure is None:  # a translation or an action, stopped by the revision this claims
        return replace(session, pending=None), "Stopped: the page shows what it showed before."
    return session.with_view(replace(session.view, measure=WEIGHTS)), (
        f"Stopped computing {MEASURE_LABELS[measure]}: the weights are shown.")


def with_measures(services: Services, session: Session, progress: Callable[[int, int], None] | None = None,
                  stepped_later: bool = False) -> Session:
    """The session with the maps of the measure it shows computed for the decoding on screen and kept with it (once
    per decoding: one teacher-forced pass for every residual-stream measure, or one gradient method at every step,
    told to `progress(done, total)` step by step); a session that shows the weights as it is, and one that shows a
    stepped measure as it is where its maps come later (`stepped_later`, `pending`)."""
    decoding, measure = session.current, session.view.measure
    if measured(decoding, measure) or (stepped_later and stepped(services, session.model, measure)):
        return session
    translator = services.translators[session.model]
    arguments = (session.source, decoding.trace.target_tokens)
    if measure in GRADIENTS:
        maps = {measure: attribution_maps(translator.attributions(*arguments, measure, mask=list(decoding.mask),
                                                                  progress=progress, **session.direction))}
    else:
        maps = translator.measures(*arguments, list(decoding.mask), **session.direction)
    return session.with_current(measure_maps={**(decoding.measure_maps or {}), **maps})


def attribution_maps(results: list) -> dict:
    """Every step's gradient attributions (model/explain/attribution.py) as maps shaped like one head of one layer: to
    the source tokens (cross, (1, 1, T, S)) and to the decoder's inputs (decoder, (1, 1, T, T)), each step's a share of
    its total (`step_shares`); integrated gradients' largest completeness error relative to a step's change; and
    the attributions themselves (exports)."""
    source, target = step_shares(results)
    errors = [abs(r.delta) / max(abs(r.score - r.baseline_score), 1e-9) for r in results if r.delta is not None]
    return {CROSS: source[None, None], DECODER: target[None, None], "error": max(errors) if errors else None,
            "results": results}


def gradient_trace(decoding: Decoding, measure: str) -> TraceArrays:
    """The decoding's trace with its maps replaced by a gradient method's (`attribution_maps`): one map of the whole
    model per kind, signed but for saliency, coloured up to the largest share the view shows. A GRU model's trace
    has no decoder self-attention, so its attributions to the target prefix are not drawn."""
    maps, trace = decoding.measure_maps[measure], decoding.trace
    line, unit = MEASURE_LINES[measure]
    if maps["error"] is not None:
        line += "\n" + COMPLETENESS.format(maps["error"])
    decoder = maps[DECODER] if trace.decoder is not None else None
    return replace(trace, encoder=None, decoder=decoder, cross=maps[CROSS], measure=line, value_label=unit,
                   scale_max=max(float(np.abs(m).max(initial=0.0)) for m in (maps[CROSS], decoder) if m is not None),
                   signed=measure != SALIENCY, whole_model=True, together=None, raw=None, switched_off=frozenset())


def measured_trace(decoding: Decoding, measure: str) -> TraceArrays:
    """The decoding's trace with its attention maps replaced by `measure`'s (its weights where it has none)."""
    maps = decoding.measure_maps
    if measure == WEIGHTS or not maps or measure not in maps:
        return decoding.trace
    if measure in GRADIENTS:
        return gradient_trace(decoding, measure)
    arrays = maps[measure]
    per_head = measure == VALUE_NORM
    together = {kind: maps[VALUE_NORM_TOGETHER][kind] for kind in KINDS} if per_head else None
    # The weights behind each cell, for the hover: per head, or the heads' mean for a measure of the whole layer.
    raw = {kind: decoding.trace.maps(kind) if per_head else decoding.trace.maps(kind).mean(1, keepdims=True)
           for kind in KINDS}
    line, unit = MEASURE_LINES[measure]
    return replace(decoding.trace, encoder=arrays["encoder"], decoder=arrays["decoder"], cross=arrays["cross"],
                   measure=line, value_label=unit,
                   scale_max=max(float(a.max()) for a in [*arrays.values(), *(together or {}).values()])
                   if per_head else 1.0, together=together, raw=raw,
                   switched_off=decoding.trace.switched_off if per_head else frozenset())


def drawn(session: Session) -> tuple[TraceArrays, int, int | str]:
    """What the attention view draws: the decoding's trace (a measure's, if one is shown), the layer to draw, which
    is the one "layer" of a measure of the whole model (gradients), and the head, which is the one head of a
    measure of the heads together (rollout, ALTI+, gradients)."""
    view = session.view
    trace = replace(measured_trace(session.current, view.measure), units=view.units, left_out=session.current.left_out)
    return (trace, min(view.layer, trace.layers(view.kind) - 1),
            0 if trace.heads(view.kind) == 1 else view.head)


def back_to_weights(measure: str, made: str = "this decoding") -> str:
    """What the status adds where a new decoding opens on the attention weights while the view showed `measure`
    (a measure is computed per decoding, when asked for)."""
    if measure == WEIGHTS:
        return ""
    return (f" Show is back to the attention weights: choose {MEASURE_LABELS.get(measure, measure)} again to compute "
            f"it for {made}.")


@operation
def go_to(services: Services, session: Session, index: object) -> tuple[Session, str]:
    """Show another decoding of the session (the ones after it stay until a new one is made)."""
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(session.decodings):
        return session, f"There is no decoding {shown(index)} of this sentence."
    session = replace(session, shown=index)
    return session.with_view(session.view), f"Showing {session.current.called}."


UNLIKELY = 1e-3  # a branch's word below this probability is said to be far from any the model would write


@operation
def branch(services: Services, session: Session, word: object, told: Told | None = None) -> tuple[Session, str]:
    """Make the decoding on screen choose `word` at the step on screen and decode greedily from there (`told`: each
    step, `Services.trace`'s)."""
    decoding = session.current
    word = word.strip() if isinstance(word, str) else ""
    if not word:
        return session, "Click a candidate in the chart, or type a word to choose at this step, then Branch."
    t = session.view.step - 1
    was = decoding.trace.target_tokens[t]
    if word == was:
        return session, f"Step {t + 1} already chooses \"{word}\": click another candidate or type another word."
    force = tuple(decoding.trace.target_tokens[:t]) + (word,)
    traced = services.trace(session.model, session.source, list(force), list(decoding.mask), **session.direction,
                            told=told, detach=True)
    new = Decoding.of(f'"{word}" at step {t + 1}', traced, force, decoding.mask, chosen=t)
    replaced = len(session.decodings) - session.shown - 1
    change = float(np.log(new.trace.probabilities).sum() - np.log(decoding.trace.probabilities).sum())
    measure = session.view.measure
    session = session.followed_by(new).with_view(replace(session.view, step=t + 1, measure=WEIGHTS))
    chosen = float(new.trace.probabilities[t])
    unlikely = (f" The model gives \"{word}\" p = {chosen:.1e} here: far from any word it would write."
                if chosen < UNLIKELY else "")
    return session, (f"Branch: step {t + 1} chooses \"{word}\" instead of \"{was}\", then greedy decoding goes on. "
                     f"Its log-probability differs from that of {decoding.called} by {change:+.2f}.{unlikely}"
                     + (f" It replaces the {plural(replaced, 'decoding')} that followed {decoding.called}."
                        if replaced else "") + back_to_weights(measure))


@operation
def set_mask(services: Services, session: Session, mask: object, told: Told | None = None) -> tuple[Session, str]:
    """Translate the sentence again with the heads of `mask` switched off, beside the decoding it came from, and
    score that decoding's tokens without those heads (teacher-forced): which words depended on them (`told`: each
    step of the translation)."""
    if not isinstance(mask, (list, tuple)) or not all(isinstance(name, str) for name in mask):
        return session, f"Heads to switch off come as a list of names (kind.layer.head), not {shown(mask)}."
    base_index = session.shown - 1 if session.current.effect is not None else session.shown
    base = session.decodings[base_index]
    mask = tuple(sorted(set(mask)))
    if mask == base.mask:  # every head the base ran with is on again: back to it
        session = replace(session, decodings=session.decodings[:base_index + 1], shown=base_index)
        return session.with_view(session.view), f"All heads of {base.called} on again."
    traced = services.trace(session.model, session.source, list(base.force), list(mask), **session.direction,
                            told=told, detach=True)
    scored = services.translators[session.model].score(session.source, base.trace.target_tokens, list(mask),
                                                       **session.direction)
    change = scored.log_probabilities - np.log(base.trace.probabilities)
    off = len(set(mask) - set(base.mask))
    effect = MaskEffect(base.name, base.trace.target_tokens, traced.target_tokens, change, off)
    new = Decoding.of(f"{plural(len(mask), 'head')} off", traced, base.force, mask, effect=effect)
    measure = session.view.measure
    session = session.followed_by(new, after=base_index)
    session = session.with_view(replace(session.view, measure=WEIGHTS))
    same = new.trace.target_tokens == base.trace.target_tokens
    return session, (f"{plural(len(mask), 'head')} off: the translation " + ("does not change" if same else "changes")
                     + f"; the log-probability of the tokens of {base.called} changes by {change.sum():+.2f} in all "
                     "(the Switch heads off tab shows each token's change)." + back_to_weights(measure))


@operation
def mask_preset(services: Services, session: Session, preset: str, told: Told | None = None) -> tuple[Session, str]:
    """A preset mask over the heads of the kind in view: its layer in view off ("layer"), all but the head in view
    ("all but one"; the other kinds' switches stay as they are), or every head on ("none")."""
    trace, view = session.trace, session.view
    names = [head_name(view.kind, view.layer, h) for h in range(trace.heads(view.kind))]
    if preset == "layer":
        mask = sorted(set(session.current.mask) | set(names))
    elif preset == "all but one":
        if not isinstance(view.head, int):
            return session, "Choose one head in the Head list first: every other head of this attention goes off."
        others = [name for name in session.current.mask if not name.startswith(view.kind + ".")]
        mask = others + [head_name(view.kind, layer, h) for layer in range(trace.layers(view.kind))
                         for h in range(trace.heads(view.kind)) if (layer, h) != (view.layer, view.head)]
    else:
        mask = []
    return set_mask(services, session, mask, told=told)


@operation
def open_head(services: Services, session: Session, name: object) -> tuple[Session, str]:
    """Show one head, named kind.layer.head (a click on the importance heatmap, or typed), in the attention view."""
    trace = session.trace
    parsed = parse_head_name(name)
    if parsed is None or parsed[0] not in trace.available() or not (
            0 <= parsed[1] < trace.layers(parsed[0]) and 0 <= parsed[2] < trace.heads(parsed[0])):
        sizes = ", ".join(f"{k}: {trace.layers(k)} layers x {trace.heads(k)} heads" for k in trace.available())
        return session, (f"No head {shown(name)} in this model ({sizes}): name one as kind.layer.head, 1-based, "
                         "e.g. cross.2.5.")
    kind, layer, head = parsed
    session = session.with_view(replace(session.view, kind=kind, layer=layer, head=head, measure=WEIGHTS))
    return session, f"Showing {head_name(kind, layer, head)} ({KIND_LABELS[kind]}, layer {layer + 1}, head {head + 1})."


@operation
def run_beam(services: Services, session: Session, told: Told | None = None) -> tuple[Session, str]:
    """Beam search of the sentence as evaluation runs it, with the heads of the decoding on screen off (`told`: each
    step of the search)."""
    translator = services.translators[session.model]
    mask = session.current.mask
    greedy_tokens = next((d.trace.target_tokens for d in session.decodings if not d.force and d.mask == mask), None)
    traced = translator.beam(session.source, mask=list(mask), greedy_tokens=greedy_tokens, **session.direction,
                             told=told)
    beam = traced.beam
    greedy = translator.to_text([token for token in traced.greedy_tokens if token != "<eos>"])
    texts = [translator.to_text(traced.tokens(h)[:len(h.token_ids)]) for h in beam.n_best]
    rows = n_best_rows([(text, h.score, h.log_probability, len(h.token_ids) + h.finished)
                        for text, h in zip(texts, beam.n_best)], greedy)
    steps = beam_step_rows([[(traced.tokens(h), h.log_probability, h.finished) for h in hypotheses]
                            for hypotheses in beam.steps], traced.greedy_tokens)
    session = replace(session, beam=Beam(session.current.force, mask, [traced.tokens(h) for h in beam.n_best],
                                         texts, rows, steps))
    masked = f", {plural(len(mask), 'head')} off" if mask else ""
    return session, (f"Beam search (beam {beam.beam_size}, length penalty {beam.length_penalty}{masked}): "
                     f"{len(beam.n_best)} finished hypotheses in {len(beam.steps)} steps; "
                     + ("the best one is the greedy translation." if texts and texts[0] == greedy else
                        "the best one differs from the greedy translation."))


@operation
def open_hypothesis(services: Services, session: Session, index: object, told: Told | None = None
                    ) -> tuple[Session, str]:
    """Show a beam hypothesis like a trace: its tokens forced, so every step's attention is its teacher-forced one.
    It follows the decoding the beam ran from (replacing a hypothesis opened before), to compare with that (`told`:
    each step)."""
    beam = session.beam
    count = len(beam.hypotheses) if beam else 0
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
        return session, "Run the beam search first, then choose one of its hypotheses."
    tokens = beam.hypotheses[index]
    traced = services.trace(session.model, session.source, tokens, list(beam.mask), **session.direction, told=told,
                            detach=True)
    ran_from = next((i for i, d in enumerate(session.decodings) if (d.force, d.mask) == (beam.force, beam.mask)),
                    session.shown)
    new = Decoding.of(f"beam #{index + 1}", traced, tokens, beam.mask, hypothesis=index)
    measure = session.view.measure
    session = session.followed_by(new, after=ran_from)
    session = session.with_view(replace(session.view, step=1, measure=WEIGHTS))
    return session, (f"Showing beam hypothesis #{index + 1} step by step, its attention read with its own tokens."
                     + back_to_weights(measure))


def capitalized(text: str) -> str:
    """`text` with its first letter a capital (the rest as it is: model names keep their case)."""
    return text[:1].upper() + text[1:]


def no_comparison(services: Services, model: str) -> str:
    """Why `model` cannot be compared with any other model here (empty where it can)."""
    if services.comparable(model):
        return ""
    return f"no other model here reads {services.card(model).source_language}, so {model} has none to compare with"


def compare_trace(services: Services, session: Session, other: object, told: Told | None = None) -> Comparison | str:
    """Another model's greedy decoding of the session's sentence, or why there is none (`told`: each step)."""
    if other in (None, ""):
        return no_comparison(services, session.model) or "choose the second model first"
    if not isinstance(other, str) or other not in services.translators:
        return f"there is no model {shown(other)} to compare with"
    mine = services.card(session.model).source_language
    theirs = services.card(other).source_language
    if mine != theirs:
        return f"{other} reads {theirs}, not {mine}: only a model of the same source language can be compared"
    try:
        same_codes = services.card(other).languages is not None  # a multilingual model reads the same codes
        traced = services.trace(other, session.source, **(session.direction if same_codes else {}), told=told)
        return Comparison(other, to_arrays(traced), traced.text)
    except InputError as error:
        return f"{other} cannot translate this sentence: {error}"


@operation
def compare(services: Services, session: Session, other: object, told: Told | None = None) -> tuple[Session, str]:
    """Translate the sentence with a second checkpoint and show both attentions side by side (with their
    difference where both read the same tokens); stepping moves both."""
    compared = compare_trace(services, session, other, told)
    if isinstance(compared, str):
        return session, capitalized(compared) + "."
    same = compared.trace.target_tokens == session.trace.target_tokens
    return replace(session, compare=compared), (
        f"Compared with {other}: " + ("the same translation, so every map has a difference map." if same else
                                      f"a different translation, \"{compared.text}\"; the two maps are side by side "
                                      "below."))


def head_menu(trace: TraceArrays, kind: str, chosen: int | str) -> list[tuple[str, int | str]]:
    """Head menu entries for one attention kind: (label, value), the value a head index or MEAN / ALL_HEADS.
    A single-head model (dot-product attention) has nothing to average or lay side by side. A measure of the whole
    layer (rollout, ALTI+) or of the whole model (gradients) has one entry, whose value is the head `chosen` for the
    weights, so that going back to the weights shows that head again."""
    heads = [(f"Head {h + 1}", h) for h in range(trace.heads(kind))]
    if len(heads) == 1 and trace.measure:
        return [(WHOLE_MODEL if trace.whole_model else EVERY_HEAD, chosen)]
    return heads if len(heads) == 1 else [("Mean of heads", MEAN), ("All heads", ALL_HEADS)] + heads
