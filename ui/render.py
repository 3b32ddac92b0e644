"""A session as what the page shows: `render(page, services, before, after, message)` -> component updates.

Every event that changes a session answers with `render`. It sends only what differs between the session the page
showed (`before`) and the new one (`after`): a figure is built again only when what it draws changed, and a menu
gets new choices only when they changed (Gradio rebuilds a component for every property update; a value alone is
cheap). Values that the user can change on the page (menus, the step) are always sent, so a choice the session
refused never stays on screen.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace

import gradio as gr
import numpy as np

from attention_inspector.model.api.services import Services
from attention_inspector.model.explain.detachment import COMBINED, LOG_PROBABILITY, SOURCE_SHARE, ScoredDetachment
from attention_inspector.model.explain.verdict import LEFT_OUT, MADE_UP, MISTRANSLATED, SAID, Verdict
from attention_inspector.model.keys import GRADIENTS, KIND_LABELS, KINDS, MEASURE_LABELS, WEIGHTS, choices
from attention_inspector.model.text.words import WHOLE, summed, words
from attention_inspector.ui.neurons import neuron_identity, neuron_part
from attention_inspector.ui.omissions import LEFT_OUT_MARK, phrase_said, source_said, translation_said
from attention_inspector.ui.operations import WHOLE_MODEL, capitalized, drawn, head_menu, no_comparison, plural
from attention_inspector.ui.plots import figure_json
from attention_inspector.ui.session import Session
from attention_inspector.viz.attention import visible
from attention_inspector.viz.views import (comparison_frames, probability_frames, step_descriptions, translation_frames,
                                           view_frames)
from attention_inspector.viz.whatif import (DIFFERS, FORCED, IMPORTANCE_MEASURES, comparison_figure, importance_figure,
                                            log_prob_change_figure, token_differences)

GREEDY = ("This is the greedy translation. Branch it (click a candidate or type a word) or switch heads off to "
          "compare.")
IMPORTANCE_KEYS = {key: label for label, (key, _) in IMPORTANCE_MEASURES.items()}


def file_stem(session: Session | None) -> str:
    """The start of a download's file name: the model and the sentence's first words ('en-de_a-dog-runs-in')."""
    if session is None:
        return "view"
    words = re.findall(r"\w+", session.source.lower())
    kept = [word for i, word in enumerate(words) if len("-".join(words[:i + 1])) <= 24] or words[:1]
    return f"{session.model}_{'-'.join(kept)[:24] or 'sentence'}"


def menu(after: list, before: list | None, value: object, **props) -> object:
    """A menu's update: its value, with its choices (and `props`) only where they changed."""
    return gr.update(choices=after, value=value, **props) if after != before else value


def view_identity(session: Session | None) -> tuple | None:
    """What the attention figures depend on: the decoding, the view (but the step) and the comparison."""
    if session is None:
        return None
    view = session.view
    return (id(session.current.trace), view.kind, view.layer, view.head, view.measure, view.model_view, view.units,
            session.compare and session.compare.model, view.measure in (session.current.measure_maps or {}),
            session.current.left_out)


def offered(trace) -> tuple[list, list]:
    """The attention kind and measure menus' entries for a decoding: the kinds its model has, and the measures (the
    GRU models have no residual stream: weights and gradients only)."""
    measures = list(MEASURE_LABELS) if trace.encoder is not None else [WEIGHTS, *GRADIENTS]
    return choices(KIND_LABELS, trace.available()), choices(MEASURE_LABELS, measures)


def view_menus(session: Session) -> dict:
    """The layer and head menus of the view on screen, the trace the view draws (a measure's, if shown) and the
    head it draws."""
    trace, layer, head = drawn(session)
    view = session.view
    # A map of the whole model has one entry, whose value is the layer chosen for the weights (as `head_menu` does).
    layers = ([(WHOLE_MODEL, view.layer)] if trace.whole_model else
              [(f"Layer {i + 1}", i) for i in range(trace.layers(view.kind))])
    return {"layers": layers, "heads": head_menu(trace, view.kind, view.head), "trace": trace, "layer": layer,
            "head": head}


def render(page, services: Services, before: Session | None, after: Session | None, message: str | None) -> dict:
    """The updates that take the page from showing `before` to showing `after`, with `message` in the status line
    (None: the status line keeps what it says)."""
    updates = {page.session: after} if message is None else {page.session: after, page.status: message}
    if after is None:
        if before is not None:
            updates.update(cleared(page))
        return updates
    decoding, view = after.current, after.view
    # Another decoding, not the same one with more computed of it (`Session.with_current` keeps its trace).
    new_decoding = before is None or before.current.trace is not decoding.trace
    new_model = before is None or before.model != after.model
    new_sentence = new_model or before.source != after.source
    menus = view_menus(after)
    shown_head = menus["heads"][0][1] if len(menus["heads"]) == 1 else view.head  # what the head menu says
    old_menus = view_menus(before) if before is not None else {"layers": None, "heads": None}
    kinds, measures = offered(decoding.trace)
    old_kinds, old_measures = offered(before.current.trace) if before is not None else (None, None)
    updates.update({
        page.kind: menu(kinds, old_kinds, view.kind),
        page.measure: menu(measures, old_measures, view.measure),
        page.layer: menu(menus["layers"], old_menus["layers"], view.layer),
        page.head: menu(menus["heads"], old_menus["heads"], shown_head),
        page.model_view: view.model_view,
        page.units: view.units,
        page.step: view.step,  # its range is set by the page from the steps' lines (ui/static/range.js)
    })
    if view_identity(before) != view_identity(after):
        frames = view_frames(menus["trace"], view.kind, menus["layer"], menus["head"], view.model_view,
                             file_stem(after))
        updates.update({page.attention: frames["attention"], page.overview: frames["overview"],
                        page.compare_plot: None})
        if after.compare is not None:  # the weights of both, whatever measure the view shows
            updates[page.compare_plot] = comparison_frames(
                [(after.model, replace(decoding.trace, units=view.units)),
                 (after.compare.model, replace(after.compare.trace, units=view.units))],
                view.kind, view.layer, view.head, file_stem(after))
    if neuron_identity(before) != neuron_identity(after):
        updates[page.neuron] = neuron_part(after)
    if not new_decoding and before.current.omissions is not decoding.omissions:  # looked for since it was drawn
        updates.update({page.detachment: detachment_part(after), page.source_tokens: source_marks(after)})
    if not new_decoding and before.view.units != view.units:  # every step's line in the new units too
        updates.update(written_updates(page, after))
        updates[page.step_text] = step_descriptions(replace(decoding.trace, units=view.units))
    if new_decoding:
        updates.update(decoding_updates(page, after))
        shown_before = before is not None and before.current.effect is not None
        if shown_before != (decoding.effect is not None):  # the heads-off translation shows only when there is one
            updates[page.masked_translation] = gr.update(value=updates[page.masked_translation],
                                                         visible=decoding.effect is not None)
        names = [(d.name, i) for i, d in enumerate(after.decodings)]
        if before is None or names != [(d.name, i) for i, d in enumerate(before.decodings)]:
            updates[page.breadcrumb] = gr.update(choices=names, value=after.shown, visible=len(names) > 1)
        else:
            updates[page.breadcrumb] = after.shown
    if new_model:
        updates.update(model_updates(page, services, after))
    if new_sentence or before.trace.source_tokens != after.trace.source_tokens:  # a language token, say
        updates[page.source_tokens] = source_marks(after)
    if new_sentence:
        updates[page.source] = after.source
    if new_sentence and not new_model:  # an example menu never names another sentence than the one shown
        updates[page.example] = after.source if after.source in services.examples(after.model) else None
    if before is None or before.beam is not after.beam:
        updates.update(beam_updates(page, after))
    if before is not None and before.beam is None and after.beam is None:  # values alone: no rebuilt menu
        updates.update({page.n_best: None, page.beam_steps: None, page.beam_open: None})
    if new_decoding and after.beam is not None:  # the hypothesis on screen, if one is (a row clicked fills the menu)
        menu_update = updates.get(page.beam_open)
        updates[page.beam_open] = ({**menu_update, "value": decoding.hypothesis} if isinstance(menu_update, dict)
                                   else decoding.hypothesis)
    if not new_model and before.compare is not after.compare:
        updates[page.compare_model] = after.compare.model if after.compare else None
    if not new_model:  # values alone, always: a language the session refused never stays on screen
        updates.update(language_updates(page, services, after))
    return updates


def language_updates(page, services: Services, session: Session, props: bool = False) -> dict:
    """The language menus of a multilingual model: the languages chosen (or its defaults); with `props`, their
    choices too, and hidden for a model of one direction."""
    sources, targets = services.languages(session.model)
    languages = services.card(session.model).languages
    values = {page.src_lang: session.src_lang or (languages.source if languages else None),
              page.tgt_lang: session.tgt_lang or (languages.target if languages else None)}
    if not props:
        return values
    return {page.src_lang: gr.update(choices=sources, value=values[page.src_lang], visible=bool(sources)),
            page.tgt_lang: gr.update(choices=targets, value=values[page.tgt_lang], visible=bool(targets))}


def decoding_updates(page, session: Session) -> dict:
    """Everything that shows the decoding on screen: its translation and stepping data, its comparison with the
    decoding it came from, the heads it ran without and what that did; the tabs' answers about another decoding
    are emptied by the page (ui/static/answers.js)."""
    decoding = session.current
    trace = decoding.trace
    grids = {grid: sorted(name for name in decoding.mask if name.startswith(kind + "."))
             for grid, kind in zip(page.mask_grids, KINDS)}
    frames = translation_frames(replace(trace, units=session.view.units))
    return {page.translation: decoding.text, page.candidates: frames["candidates"],
            page.probabilities: frames["probabilities"], page.step_text: frames["description"],
            **grids, **written_updates(page, session, charted=False), page.branch_word: "", page.link_box: "",
            page.export_file: None}


def source_marks(session: Session) -> list[tuple[str, str | None]]:
    """The source as the model reads it, in the view's units (tokens or words), each one it does not know marked
    (a word, where any of its pieces is), and each one the translation left out (ui/omissions.py)."""
    trace = replace(session.trace, units=session.view.units)
    tokens, unknown = trace.source_tokens, list(session.unknown) or [False] * len(trace.source_tokens)
    shown, spans = words(tokens, trace.scheme if trace.in_words else WHOLE)
    left_out = session.current.left_out
    return [(visible(token) + " ", "unknown" if any(unknown[i] for i in span) else
             LEFT_OUT_MARK if any(i in left_out for i in span) else None) for token, span in zip(shown, spans)]


def detachment_part(session: Session) -> dict | None:
    """Whether the decoding on screen rests on its source (model/explain/detachment.py) and what it left out
    (ui/omissions.py), for the core view (ui/static/core.js): `scored_part` of its detachment in the view's units."""
    scored = session.current.detachment
    if scored is None:
        return None
    if isinstance(scored, str):
        return {"plain": f"Not scored: {scored}", "verdict": "", "detached": False, "words": [], "source": []}
    trace = replace(session.trace, units=session.view.units)
    return scored_part(scored, trace.scheme, trace.in_words, verdict=session.current.verdict)


def scored_part(scored: ScoredDetachment, scheme: str, in_words: bool, unit: str | None = None,
                verdict: Verdict | str | None = None) -> dict:
    """A scored detachment as the core view shows it: one plain line first ("Looks faithful", "May have made up
    words (underlined)", "May have left out: “bread”"), also as [text, hover] parts (`plain_parts`: each named
    phrase's hover its evidence), the numbers and the method behind it (`verdict`, under "why?"), the translation's
    tokens (or words, `in_words`, by `scheme`), each [text, marked, what it scored] marked where it falls under the
    token threshold or may be made up, and the source's words, each [text, left out or mistranslated, why], where
    the `verdict` (model/explain/verdict.py) was made. `unit` names what it scores where its tokens are already
    words."""
    labels, signals, marked = scored.in_units(scheme, in_words)
    detached, _ = scored.flags
    measured, thresholds, meaning = scored.measured, scored.thresholds, scored.threshold_meaning
    unit = unit or ("word" if in_words else "token")
    score, threshold = measured.score(COMBINED), thresholds["sentence"]
    digits = digits_apart(score, threshold)
    if measured.source_shares is not None:
        said = [f"score {value:.2f}: {share:.0%} from the source, probability {math.exp(log_p):.2f}"
                for value, share, log_p in zip(signals["combined"], signals["source_share"],
                                               signals["log_probability"])]
        why = (f"Score {score:.{digits}f}: the geometric mean of the share of each token's prediction that came from "
               f"the source ({measured.score(SOURCE_SHARE):.0%} on average; ALTI+, Dale et al., 2023) and of its "
               f"probability ({math.exp(measured.score(LOG_PROBABILITY)):.2f}).")
    else:
        said = [f"probability {value:.2f}" for value in signals["combined"]]
        why = f"Score {score:.{digits}f}: its tokens' mean probability ({measured.unavailable})."
    why += (f" A sentence under {threshold:.{digits}f} is flagged, a {unit} under {thresholds['token']:.2f} "
            f"underlined ({meaning}).")
    if scored.unknown:
        why += f" Read as <unk>: {', '.join(map(visible, scored.unknown))}."
    parts, source, marked = [["May have made up words (underlined)", ""]] * bool(detached), [], list(marked)
    if isinstance(verdict, Verdict):
        found = verdict_parts(verdict)
        parts += [["; ", ""]] * bool(parts and found) + found
        source = [[visible(word), kind in (LEFT_OUT, MISTRANSLATED), source_said(verdict, i)]
                  for i, (word, kind) in enumerate(zip(verdict.source_words, verdict.source_kinds))]
        marked, said = made_up_marks(verdict, scored.target_tokens, scheme, in_words, marked, said)
        why += " " + verdict_method(verdict)
    elif isinstance(verdict, str):
        why += f" Words left out: {verdict}."
    if parts:
        parts[0][0] = parts[0][0][:1].upper() + parts[0][0][1:]
    if parts and scored.domain:
        parts.append([f". This model knows {scored.domain} only: likely why.", ""])
    plain = "".join(text for text, _ in parts) or "Looks faithful"
    return {"plain": visible(plain), "plain_parts": [[visible(text), visible(hover)] for text, hover in parts],
            "verdict": visible(why), "detached": bool(parts),
            "words": [[visible(label), bool(flag), what] for label, flag, what in zip(labels, marked, said)],
            "source": source}


def verdict_parts(verdict: Verdict) -> list[list[str]]:
    """The verdict's plain line as [text, hover] parts: each named phrase hovering its words' evidence."""
    parts = []
    for kind, runs, more in verdict.named():
        parts.append([f"{SAID[kind]}: ", ""])
        for n, run in enumerate(runs):
            parts += [[", ", ""]] * bool(n) + [[verdict.shown(kind, run), phrase_said(verdict, kind, run)]]
        parts += [[" and " * bool(runs) + f"{more} more", ""]] * bool(more)
        parts.append(["; ", ""])
    if verdict.unjudged:
        parts.append([f"not judged ({verdict.evaluator} does not know them): " + ", ".join(verdict.unjudged), ""])
    else:
        parts = parts[:-1]
    return parts


def made_up_marks(verdict: Verdict, target_tokens: list[str], scheme: str, in_words: bool, marked: list[bool],
                  said: list[str]) -> tuple[list[bool], list[str]]:
    """The translation's units (tokens, or words) marked where they may be made up too, each hover with the
    evaluator's evidence: a word's every piece, in tokens."""
    pieces = [i for i, token in enumerate(target_tokens) if token != "<eos>" and i < len(marked)]
    _, spans = words([target_tokens[i] for i in pieces], scheme)
    marked, said = list(marked), list(said)
    for index, span in enumerate(spans[:len(verdict.translation_words)]):
        extra = translation_said(verdict, index)
        for unit in ([index] if in_words else [pieces[i] for i in span]):
            if unit < len(marked) and extra:
                marked[unit] = marked[unit] or verdict.translation_kinds[index] == MADE_UP
                said[unit] = f"{said[unit]}; {extra}"
    return marked, said


def verdict_method(verdict: Verdict) -> str:
    """How the verdict was reached, for "why?"."""
    if verdict.evaluator is None:
        return ("Words left out: a source word is marked where the translation is about as probable without it "
                "(contrastive conditioning, Vamvas & Sennrich, 2022), by the translating model alone: "
                + "; ".join(verdict.lacking) + ".")
    return (f"Words left out, mistranslated or made up are judged by {verdict.evaluator}, which reads the translation "
            "and writes the source back: a content word it finds too surprising is not carried by the translation "
            "(left out where the translating model's own translation is about as probable without it, else "
            "mistranslated), and a word it does not need to write the source is made up (Vamvas & Sennrich, 2022; "
            f"{verdict.calibration.meaning})." + "".join(f" {lack}." for lack in verdict.lacking))


def digits_apart(value: float, threshold: float, least: int = 2, most: int = 6) -> int:
    """Decimals enough, from `least`, that `value` and `threshold` read apart (a score just under its threshold
    shown equal to it reads as a wrong verdict), at most `most`."""
    return next((digits for digits in range(least, most) if round(value, digits) != round(threshold, digits)), most)


def written_updates(page, session: Session, charted: bool = True) -> dict:
    """The decoding on screen beside the one it came from, and what switching heads off did to it, in the view's
    units: tokens, or words, each word's probability that of its pieces together (their product) and its change
    in log-probability their sum. (In pieces, every token is a word of its own: `words` with WHOLE.) With
    `charted`, the source and the chart of each chosen token's probability too (a change of units)."""
    decoding = session.current
    written = replace(decoding.trace, units=session.view.units)
    scheme, unit = (decoding.trace.scheme, "word") if written.in_words else (WHOLE, "token")
    effect = decoding.effect
    updates = {page.masked_translation: None, page.mask_effect_plot: None, page.detachment: detachment_part(session)}
    if effect is not None:
        base, spans = words(effect.base_tokens, scheme)
        updates |= {page.masked_translation: token_differences(base, words(effect.new_tokens, scheme)[0]),
                   page.mask_effect_plot: figure_json(log_prob_change_figure(
                       base, summed(effect.change, spans), f"each {unit} of {effect.base}: log-probability with "
                       f"{plural(effect.heads_off, 'head')} off minus with them on"))}
    if charted:
        updates.update({page.probabilities: probability_frames(written), page.source_tokens: source_marks(session)})
    if session.shown == 0:
        return {**updates, page.comparison: [(GREEDY, None)], page.comparison_plot: None}
    parent, child = session.decodings[session.shown - 1], decoding
    (before, before_spans), (after, after_spans) = (words(d.trace.target_tokens, scheme) for d in (parent, child))
    chosen = next((i for i, span in enumerate(after_spans) if child.chosen in span), None)
    parent_marks = token_differences(after, before)
    child_marks = token_differences(before, after, chosen)
    differing = [{i for i, (_, mark) in enumerate(marks) if mark in (DIFFERS, FORCED)}
                 for marks in (parent_marks, child_marks)]
    probabilities = [np.exp(summed(np.log(np.clip(d.trace.probabilities, 1e-30, None)), spans))
                     for d, spans in ((parent, before_spans), (child, after_spans))]
    return {**updates, page.comparison: [(f"{parent.name}: ", None), *parent_marks, ("\n", None),
                                         (f"{child.name}: ", None), *child_marks],
            page.comparison_plot: figure_json(comparison_figure([(parent.name, before, probabilities[0]),
                                                                 (child.name, after, probabilities[1])],
                                                                differing, unit))}


def head_switches(trace, kind: str) -> list[tuple[str, str]]:
    """A kind's head switches, "L1 H1" ... as (label, head name)."""
    return [(f"L{layer + 1} H{head + 1}", f"{kind}.{layer + 1}.{head + 1}")
            for layer in range(trace.layers(kind)) for head in range(trace.heads(kind))]


def model_updates(page, services: Services, session: Session) -> dict:
    """What belongs to the model rather than the sentence: the head switches of its attention kinds (the GRU
    models have cross-attention only), its head-importance heatmap, its examples and the models to compare with."""
    trace = session.trace
    kinds = trace.available()
    grids = {grid: gr.update(choices=head_switches(trace, kind) if kind in kinds else [],
                             value=sorted(n for n in session.current.mask if n.startswith(kind + ".")),
                             visible=kind in kinds,
                             elem_classes=["head-grid", f"heads-{trace.heads(kind) if kind in kinds else 0}"])
             for grid, kind in zip(page.mask_grids, KINDS)}
    note = ("Tick heads to switch them off: the sentence is translated again without them at once."
            if len(kinds) == len(KINDS) else
            "This model's encoder and decoder are GRUs: they have no self-attention, so only its cross-attention "
            "heads can be switched off.")
    first_measure = next(iter(IMPORTANCE_KEYS))
    examples = services.examples(session.model)
    return {**grids, **language_updates(page, services, session, props=True), page.mask_note: note,
            page.importance_measure: first_measure,
            page.importance_plot: figure_json(importance_plot(services, session, first_measure)),
            page.model: session.model,
            page.example: gr.update(choices=examples, value=session.source if session.source in examples else None),
            page.compare_model: gr.update(choices=services.comparable(session.model),
                                          value=session.compare.model if session.compare else None,
                                          info=capitalized(no_comparison(services, session.model)))}


def importance_plot(services: Services, session: Session, key: str):
    """The heatmap of one measure from the checkpoint's heads.json, or None when it has none."""
    report = services.card(session.model).head_report
    if not report.get("heads") or key not in IMPORTANCE_KEYS:
        return None
    trace = session.trace
    shapes = {kind: (trace.layers(kind), trace.heads(kind)) for kind in trace.available()}
    return importance_figure(report["heads"], shapes, IMPORTANCE_KEYS[key], measure_note(report, key))


def measure_note(report: dict, key: str) -> str | None:
    """What a head report's estimates are worth, under their heatmap's title: the estimate's and Michel et al.'s
    importance's measured agreement with the exact change (where the report measured every head), and which heads
    the exact change covers."""
    record = report.get("estimate") or {}
    if key == "importance":
        agreed = record.get("importance_agreement")
        return "a ranking, not an effect" + (f": {agreement_said(agreed)}" if agreed else
                                             " (its agreement with the exact change is not in this report)")
    if key == "log_likelihood_change_estimate" and record:
        made = f"an estimate from gradients ({record['order']} order)"
        if "agreement" in record:
            return f"{made}: {agreement_said(record['agreement'])}"
        return (f"{made}; the exact change of the heads it ranks highest is under 'log-likelihood change with the "
                "head off'")
    if key == "log_likelihood_change" and record and "agreement" not in record:
        return (f"measured exactly for the {record['exact']} heads the estimate ranks most harmful and "
                f"{len(record['check'])} others drawn at random; blank: not measured")
    return None


def agreement_said(measured: dict) -> str:
    """A ranking's measured agreement with the exact change (heads.json's, its keys strings once read back)."""
    within = {str(k): count for k, count in measured["exact_top10_within"].items()}
    if measured["spearman"] is None:  # a model of one head
        return f"no ranking to compare over {measured['heads']} head"
    return (f"Spearman {measured['spearman']:.2f} with the exact change over all {measured['heads']} heads; "
            f"{within['10']} of the exact top 10 in its top 10, {within['20']} in its top 20")


def beam_updates(page, session: Session) -> dict:
    """The beam search's tables and the menu of its hypotheses (empty before one ran)."""
    beam = session.beam
    if beam is None:
        return {page.n_best: None, page.beam_steps: None, page.beam_open: gr.update(choices=[], value=None)}
    return {page.n_best: beam.rows, page.beam_steps: beam.steps,
            page.beam_open: gr.update(choices=[(f"#{r}: {text}", r - 1) for r, text in enumerate(beam.texts, 1)],
                                      value=None)}


def cleared(page) -> dict:
    """Every view of a translation emptied, and what-if with nothing to work on."""
    return {page.translation: "", page.detachment: None, page.attention: None, page.neuron: None,
            page.overview: None, page.compare_plot: None, page.candidates: None, page.probabilities: None,
            page.step_text: None, page.source_tokens: None, page.breadcrumb: gr.update(choices=[], value=None, visible=False), page.comparison: None,
            page.comparison_plot: None, page.importance_plot: None,
            page.masked_translation: gr.update(value=None, visible=False),
            page.mask_effect_plot: None, page.n_best: None, page.beam_steps: None, page.branch_word: "",
            page.beam_open: gr.update(choices=[], value=None), page.link_box: "", page.export_file: None,
            page.step: 1,
            page.mask_note: "Translate a sentence to switch heads off.",
            **{grid: gr.update(choices=[], value=[], visible=False) for grid in page.mask_grids}}
