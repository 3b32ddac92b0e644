"""Where each word came from: the ALTI+ share of each generated word's prediction that came from the source, and
gradient attributions of the word at the step on screen (model/explain/attribution.py)."""

from __future__ import annotations

from collections.abc import Iterator

import gradio as gr

from attention_inspector.model.api.services import Services
from attention_inspector.model.explain.attribution import INPUT_X_GRADIENT, INTEGRATED_GRADIENTS, METHODS, SALIENCY
from attention_inspector.model.explain.detachment import ScoredDetachment
from attention_inspector.model.explain.faithfulness import (KS, METHOD_LABELS, Seen, StepFaithfulness, Told,
                                                            integrated_faithfulness, k_label, quick_faithfulness,
                                                            removable_count)
from attention_inspector.model.nets.seq2seq import Seq2Seq
from attention_inspector.model.text.words import WORDS, summed, words
from attention_inspector.ui.listeners import Stopped, on, tab_answer
from attention_inspector.ui.operations import large, operation, shown
from attention_inspector.ui.page import Page
from attention_inspector.ui.plots import Answer, answers_view, figure_json
from attention_inspector.ui.session import Session, clamp
from attention_inspector.viz.whatif import (attribution_figure, contribution_figure, faithfulness_figure,
                                            source_share_figure)

# What the page says at once where a large model's integrated gradients of a step come later (ui/static/page.js).
ATTRIBUTING = ("Computing attributions with {model}: integrated gradients of step {step}, in batches of its points. "
               "Their progress shows here; Stop, or a new sentence, stops them.")
# What the page says at once where a large model's explanations are compared later, with progress (the queued
# event that the page starts on reading this: `explanations_integrated`).
COMPARING = ("Comparing the explanations with {model}: every method but integrated gradients, then with them. Their "
             "progress shows here; Stop, or a new sentence, stops it.")
INTEGRATING = "faithfulness_integrated"  # the comparison's queued event (its API name, private)
# The end of a first answer without integrated gradients: the page, once it has drawn that answer, starts the queued
# event that adds them (ui/static/page.js), so they are not computed while it draws; a large model's come in the
# event that gave the first answer (`ON_THE_WAY`).
FOLLOW = " Integrated gradients, the slowest method, follow."
ON_THE_WAY = " Integrated gradients, the slowest method, are on their way."
ATTRIBUTION_LABELS = {SALIENCY: "saliency (gradient norm)", INPUT_X_GRADIENT: "input × gradient",
                      INTEGRATED_GRADIENTS: "integrated gradients (32 points)"}


def build(page: Page, services: Services) -> None:
    with gr.Tab("Where each word came from", elem_id="sources-tab"):
        gr.Markdown("How much of each word's prediction came from the source sentence and how much from the "
                    "translation so far (ALTI+, Ferrando et al. 2022): every layer's attention, residual "
                    "connections and layer norms decomposed token by token, not just attention weights. A word "
                    "that owes little to the source is a sign of hallucination (Dale et al. 2023).")
        page.contributions = gr.Button("Measure where each word came from", variant="primary",
                                       elem_id="contributions")
        page.contributions_answers = answers_view("contributions-answers", Answer("source-share", "figure"),
                                                  Answer("contribution-map", "figure"))
        gr.Markdown("Gradient attributions of the word chosen at the step on screen: how much each source token "
                    "and each word before it moved that word's log-probability (saliency: the gradient's norm; "
                    "input × gradient; integrated gradients from zero embeddings, Sundararajan et al. 2017, whose "
                    "bars sum to the change in log-probability). To ask why this word and not another (Yin & Neubig "
                    "2022), click a candidate in the top-5 chart while this tab is open, or type it. *Show* above "
                    "the heatmap draws each method at every step.")
        with gr.Row(equal_height=True):
            page.attribution_method = gr.Radio([(label, key) for key, label in ATTRIBUTION_LABELS.items()],
                                               value=INTEGRATED_GRADIENTS, label="Method",
                                               elem_id="attribution-method", scale=3)
            page.attribution_contrast = gr.Textbox(label="…and not (a candidate; optional)", placeholder="e.g. die",
                                                   elem_id="attribution-contrast", scale=2, min_width=140)
            page.attribute = gr.Button("Attribute this step", variant="primary", elem_id="attribute", scale=1,
                                       min_width=120)
            # Never seen: the page presses it when a large model's integrated gradients are said to be computing
            # (ui/static/page.js), which then come batch by batch with progress.
            page.attribute_queued = gr.Button("Attribute step by step", elem_id="attribute-queued",
                                              elem_classes=["hidden-trigger"], min_width=0)
        page.attribution_answers = answers_view("attribution-answers", Answer("attribution", "figure"))
        gr.Markdown("Which of these explanations is faithful to the model for this word? Each method ranks the "
                    "source tokens; removing its top k (replaced by `<unk>`) should cost the word much of its "
                    "log-probability (comprehensiveness), and keeping only them little (sufficiency: ERASER, "
                    "DeYoung et al. 2020). Attention, the best-aligning head, rollout, ALTI+ and the three gradient "
                    "methods, side by side, with a random ranking as the control any of them must beat, and how far "
                    "their rankings agree.")
        with gr.Row():
            page.faithfulness = gr.Button("Which explanation to trust for this word", elem_id="faithfulness",
                                          scale=3)
            page.stop_faithfulness = gr.Button("Stop", elem_id="stop-faithfulness", scale=1, min_width=80)
            # Never seen: the page presses it once it has drawn a first answer (FOLLOW), or on reading COMPARING.
            page.faithfulness_queued = gr.Button("Add integrated gradients", elem_id="faithfulness-queued",
                                                 elem_classes=["hidden-trigger"], min_width=0)
        page.faithfulness_answers = answers_view(
            "faithfulness-answers", Answer("faithfulness-curves", "figure"),
            Answer("faithfulness-table", "table", "Rank correlation (Spearman) of the methods' source rankings"))


@operation
def measure_sources(services: Services, session: Session) -> tuple[tuple, str]:
    """The ALTI+ source share of each word of the decoding on screen, and the full map."""
    decoding = session.current
    trace = decoding.trace
    measured = services.translators[session.model].contributions(session.source, trace.target_tokens,
                                                                 list(decoding.mask), **session.direction)
    if measured is None:
        return (None, None), ("This GRU model has no residual stream for ALTI+ to decompose: its cross-attention "
                              "(the Cross-attention view) is what shows where its words look in the source.")
    shares = measured.source_contribution
    return (figure_json(source_share_figure(trace.target_tokens, shares)),
            figure_json(contribution_figure(measured.decoder, trace.target_tokens, trace.source_tokens,
                                            trace.decoder_tokens))), (
        f"Contributions of {decoding.called}: {shares.mean():.0%} of each word's prediction came from the source on "
        f"average ({shares.min():.0%} to {shares.max():.0%}).")


@operation
def attribute_step(services: Services, session: Session, step: object, method: object, contrast: object,
                   told: Told | None = None) -> tuple[tuple, str]:
    """Gradient attributions of the word chosen at `step` of the decoding on screen, in the view's units. A large
    model's integrated gradients (seconds) come from the queued twin of this event, which the page starts on
    reading `ATTRIBUTING`, batch by batch told to `told(points, steps)`."""
    if method not in METHODS:
        return session, f"Unknown attribution method {shown(method)}; choose one of: {', '.join(METHODS)}."
    decoding, trace = session.current, session.current.trace
    step = clamp(step, 1, trace.steps, 1)
    contrast = contrast.strip() if isinstance(contrast, str) and contrast.strip() else None
    if told is None and method == INTEGRATED_GRADIENTS and large(services, session.model):
        return session, ATTRIBUTING.format(model=session.model, step=step)
    [result] = services.translators[session.model].attributions(
        session.source, trace.target_tokens, method, step - 1, contrast, list(decoding.mask), **session.direction,
        progress=told)
    source_tokens, prefix = trace.source_tokens, trace.decoder_tokens[:step]
    source, target = result.source, result.target
    if session.view.units == WORDS:  # attributions add up: a word's is the sum of its pieces'
        (source_tokens, source_spans), (prefix, prefix_spans) = words(source_tokens, trace.scheme), words(
            prefix, trace.scheme)
        source, target = summed(source, source_spans), summed(target, prefix_spans)
    chosen = trace.target_tokens[step - 1]
    asked = f'why step {step} wrote "{chosen}"' + (f' and not "{contrast}"' if contrast else "")
    total = float(source.sum() + target.sum())
    if result.delta is None:
        said = f"{ATTRIBUTION_LABELS[method]}: {asked}."
    else:
        said = (f"{ATTRIBUTION_LABELS[method]}: {asked}; the bars sum to {total:+.3f}, the change from the baseline "
                f"{result.score - result.baseline_score:+.3f} (completeness error {result.delta:+.1e}).")
    value_label = "gradient norm" if method == SALIENCY else "attribution"
    # The question on a line of its own: on a phone, one line with the method's name ran past the chart's box.
    title = [f"{ATTRIBUTION_LABELS[method]}:", asked, "source tokens, then the target prefix (tgt)"]
    figure = attribution_figure(source_tokens, prefix, source, target, title, value_label)
    return (figure_json(figure),), said


def k_axis(removable: int) -> tuple[list[str], list[int]]:
    """The deletion curves' points in tokens removed, fewest first, with the fractions of the sentence that come to
    as many tokens here ("2 (20%)"), and the index in `KS` of each point: on a short sentence a fraction is as few
    tokens as a whole number, measured alike, and drawn after it the curve went back."""
    counts = [removable_count(k, removable) for k in KS]
    shown = sorted(set(counts))
    named = [[k_label(k) for k, count in zip(KS, counts) if count == n and not isinstance(k, int)] for n in shown]
    return ([f"{n} ({', '.join(names)})" if names else str(n) for n, names in zip(shown, named)],
            [counts.index(n) for n in shown])


def faithfulness_answer(session: Session, step: int, measured: StepFaithfulness, coming: str = FOLLOW
                        ) -> tuple[tuple, str]:
    """Which explanation to trust for the word at `step` (1-based), as the tab shows it: the deletion curves of
    each method `measured`, the rank correlations between them, and what the status line says (ending with
    `coming` where integrated gradients are not measured yet)."""
    chosen = session.trace.target_tokens[step - 1]
    note = " (measured with every head on)" if session.current.mask else ""
    removable = len(next(iter(measured.scores.values()))) - 1  # the final <eos> stays
    ks, points = k_axis(removable)
    figure = faithfulness_figure({m: values[points] for m, values in measured.comprehensiveness.items()},
                                 {m: values[points] for m, values in measured.sufficiency.items()}, ks,
                                 f'which explanation to trust for step {step}, "{chosen}"', METHOD_LABELS)
    methods = list(measured.scores)
    rho = measured.rank_correlation()
    table = [[METHOD_LABELS[a]] + [1.0 if a == b else round(rho.get((a, b), rho.get((b, a), float("nan"))), 2)
                                   for b in methods] for a in methods]
    best = max(methods, key=lambda m: measured.comprehensiveness[m].mean() - measured.sufficiency[m].mean())
    later = "" if INTEGRATED_GRADIENTS in methods else coming
    return (figure_json(figure), {"headers": ["method", *(METHOD_LABELS[m] for m in methods)], "rows": table}), (
        f'Step {step}, "{chosen}": most faithful here by comprehensiveness minus sufficiency: '
        f'{METHOD_LABELS[best]}{note}.{later}')


def explained_word(services: Services, session: Session, step: object) -> tuple[Seq2Seq, list[int], list[int], int]:
    """The model, the sentence's and its translation's ids, and the step (1-based, within the translation) whose
    word the explanations are measured for, with every head on."""
    step = clamp(step, 1, session.trace.steps, 1)
    translator = services.translators[session.model]
    src_ids, tgt_ids = translator.given_translation(session.source, session.trace.target_tokens, **session.direction)
    return translator.model, src_ids, tgt_ids, step


def seen(session: Session) -> Seen | None:
    """What the decoding on screen holds for the explanations, read instead of a pass of their own (its attention
    maps, and the ALTI+ contributions its detachment was scored from), where it ran with every head on."""
    decoding = session.current
    if decoding.mask:
        return None
    scored = decoding.detachment  # or why it could not be scored
    return Seen(decoding.trace.cross, decoding.trace.encoder,
                scored.contributions if isinstance(scored, ScoredDetachment) else None)


@operation
def explanations_compared(services: Services, session: Session, step: object) -> tuple[tuple, str, Session]:
    """How faithful each explanation method but integrated gradients is for the word chosen at `step`: its deletion
    curves and the rank correlations between the methods, answered at once and kept with the decoding; integrated
    gradients, the slowest, follow (`explanations_integrated`). Asked again at the same step, what was kept. A large
    model's (seconds) come with progress in the event that follows: this says so."""
    model, src_ids, tgt_ids, step = explained_word(services, session, step)
    kept = session.current.faithful
    if kept and kept[0] == step:
        measured = kept[1]
    elif large(services, session.model):
        return session, COMPARING.format(model=session.model)
    else:
        measured = quick_faithfulness(model, src_ids, tgt_ids, step - 1, services.best_head(session.model),
                                      seen=seen(session))
    return *faithfulness_answer(session, step, measured), session.with_current(faithful=(step, measured))


@operation
def explanations_integrated(services: Services, session: Session, step: object, told: Told | None = None
                            ) -> tuple:
    """`explanations_compared`'s answer at `step` with integrated gradients too, kept. A large model's comes with
    progress (`told`): its points in batches, and, where the first answer was left to this event (`COMPARING`),
    that answer first, then the whole. Nothing where the first answer is not the decoding's (the user has moved
    on, or it was refused) or already has them."""
    model, src_ids, tgt_ids, step = explained_word(services, session, step)
    kept, stepwise = session.current.faithful, large(services, session.model)
    if kept and kept[0] == step and INTEGRATED_GRADIENTS not in kept[1].scores:
        measured = integrated_faithfulness(model, src_ids, tgt_ids, step - 1, kept[1],
                                           progress=told if stepwise else None)
        return *faithfulness_answer(session, step, measured), session.with_current(faithful=(step, measured))
    if kept and kept[0] == step or not stepwise:
        raise Stopped

    def stages() -> Iterator[tuple[tuple, str]]:
        first = quick_faithfulness(model, src_ids, tgt_ids, step - 1, services.best_head(session.model), told=told,
                                   seen=seen(session))
        yield faithfulness_answer(session, step, first, ON_THE_WAY)
        yield faithfulness_answer(session, step, integrated_faithfulness(model, src_ids, tgt_ids, step - 1, first,
                                                                         progress=told))
    return stages(), ""


def wire(page: Page, services: Services) -> None:
    tab_answer(page, services, measure_sources, [], ["source-share", "contribution-map"], "contributions_view",
               page.contributions.click, answers=page.contributions_answers, queue=False)
    attribution = [page.step, page.attribution_method, page.attribution_contrast]
    tab_answer(page, services, attribute_step, attribution, ["attribution"], "attribute_view", page.attribute.click,
               answers=page.attribution_answers, queue=False)
    tab_answer(page, services, attribute_step, attribution, ["attribution"], "attribute_queued",
               page.attribute_queued.click, answers=page.attribution_answers, progress="Integrated gradients",
               api_visibility="private", **services.trace_queue)
    # Seven methods' rankings, each measured, at once (outside the queue); then integrated gradients (a queued event
    # with progress, which the page starts once it has drawn the first answer), stopped by Stop or by any new state.
    curves = ["faithfulness-curves", "faithfulness-table"]
    tab_answer(page, services, explanations_compared, [page.step], curves, "faithfulness_view", page.faithfulness.click,
               answers=page.faithfulness_answers, queue=False)
    tab_answer(page, services, explanations_integrated, [page.step], curves, INTEGRATING,
               page.faithfulness_queued.click, answers=page.faithfulness_answers, progress="Comparing the explanations",
               api_visibility="private", trigger_mode="always_last", **services.trace_queue)
    on(page, services, [page.stop_faithfulness.click], stop_comparing, [], ["stop_faithfulness"],
       outputs=[page.session, page.revision, page.core], queued=False)


@operation
def stop_comparing(services: Services, session: Session) -> tuple[Session, str]:
    """Stop comparing the explanations (the event claims a new revision, which stops it at its next stage), saying
    what the tab keeps of the comparison: all of it, all but integrated gradients, or none."""
    kept = session.current.faithful
    if not kept:
        return session, ("Stopped: the explanations are not compared." if INTEGRATING in session.revisions.working
                         else "Nothing to stop: no comparison is running.")
    if INTEGRATED_GRADIENTS in kept[1].scores:
        return session, f"Nothing to stop: the comparison for step {kept[0]} is whole, integrated gradients included."
    return session, (f"Stopped: the comparison for step {kept[0]} shows every method but integrated gradients; ask "
                     "again for them.")
