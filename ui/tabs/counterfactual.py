"""Counterfactual: a second source beside the sentence on screen, both translations with the words that differ
marked and the first step where they part, and activation patching per head (which heads carry the difference,
model/explain/patching.py): first at the step where the two translations part, then at the step on screen."""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from dataclasses import replace

import gradio as gr

from attention_inspector.model.api.services import Services
from attention_inspector.model.explain.faithfulness import Told
from attention_inspector.model.explain.patching import Patching, parting, suggested_swap
from attention_inspector.model.keys import ENCODER, KIND_LABELS
from attention_inspector.model.serving.inspect import patching_record
from attention_inspector.ui.listeners import COUNTERFACTUAL_TAB, on, tab_answer
from attention_inspector.ui.operations import large, operation
from attention_inspector.ui.page import Page
from attention_inspector.ui.plots import Answer, answers_view, figure_json
from attention_inspector.ui.session import Session, clamp
from attention_inspector.viz.attention import visible
from attention_inspector.viz.whatif import patching_figure, stream_figure

PATCHING = "patch_view"  # the event's name (its API name, private)
BARELY = 0.05  # nats: a counterfactual that moves the score less than this leaves no difference to share out


def build(page: Page, services: Services) -> None:
    with gr.Tab("Counterfactual", id=COUNTERFACTUAL_TAB, elem_id="counterfactual-tab"):
        gr.Markdown("Why this word and not that one, by cause. Type a second source that differs from the sentence in "
                    "a word (or let the page suggest a swap: man↔woman, he↔she, doctor↔nurse, one noun for another), "
                    "then patch every head: first at the step where the two translations part (the view steps there), "
                    "then at the step on screen. The sentence is run again with one head's output taken from the "
                    "counterfactual's run, teacher-forced on the same translation so far, and the grid shows how far "
                    "that alone moves the word's log-probability (activation patching: Vig et al. 2020, Meng et al. "
                    "2022). Name a second word to score the choice between the two (e.g. *der* against *die*). Click "
                    "a head to open it.")
        with gr.Row(equal_height=True):
            page.counterfactual = gr.Textbox(label="Counterfactual source", elem_id="counterfactual", scale=4,
                                             placeholder="e.g. the sentence with one word swapped")
            page.suggest_swap = gr.Button("Suggest a swap", elem_id="suggest-swap", scale=1, min_width=120)
        with gr.Row(equal_height=True):
            page.patch_contrast = gr.Textbox(label="…and not (a second word; optional)", placeholder="e.g. frau",
                                             elem_id="patch-contrast", scale=2, min_width=140)
            page.patch = gr.Button("Patch every head", variant="primary", elem_id="patch", scale=2,
                                   min_width=160)
            page.stop_patch = gr.Button("Stop", elem_id="stop-patch", scale=1, min_width=80)
        page.counterfactual_answers = answers_view(
            "counterfactual-answers", Answer("counterfactual-text", "text", "Both translations ([words] that differ)"),
            Answer("patching-grid", "figure"), Answer("patching-stream", "figure"))


def marked(tokens: list[str], other: list[str]) -> str:
    """`tokens` as text, each one that `other` has not at its place (a token-level diff) in [brackets]."""
    matcher = difflib.SequenceMatcher(a=other, b=tokens, autojunk=False)
    same = {j for block in matcher.get_matching_blocks() for j in range(block.b, block.b + block.size)}
    return " ".join(visible(token) if i in same else f"[{visible(token)}]" for i, token in enumerate(tokens))


@operation
def patch_at_step(services: Services, session: Session, counterfactual: object, step: object, contrast: object,
                  told: Told = lambda done, total: None) -> tuple[tuple, str, Session]:
    """Both translations side by side, and patching per head (the patched runs told to `told(done, total)` batch by
    batch), kept with the decoding for its exports. A counterfactual's first patching is at the step where the two
    translations part, as `/patch`'s (the view steps there); the same counterfactual again, at `step`, the step on
    screen."""
    if not isinstance(counterfactual, str) or not counterfactual.strip():
        return session, "Type a counterfactual source first (or press Suggest a swap)."
    decoding, trace = session.current, session.current.trace
    on_screen = clamp(step, 1, trace.steps, 1)
    contrast = contrast.strip() if isinstance(contrast, str) and contrast.strip() else None
    if counterfactual.strip() == session.source.strip():
        return session, ("The counterfactual is the sentence itself: patching it in changes nothing. Change a word of "
                         "it (or press Suggest a swap).")
    translator = services.translators[session.model]
    other = services.trace(session.model, counterfactual, **session.direction)
    ours, theirs = trace.target_tokens, other.target_tokens
    parted = parting(ours, theirs)  # None: one begins the other
    first = decoding.patched is None or decoding.patched["counterfactual"].strip() != counterfactual.strip()
    step = parted + 1 if first and parted is not None else on_screen
    if contrast is not None and contrast == ours[step - 1]:
        return session, (f'"{visible(contrast)}" is the word step {step} writes: it cannot be its own contrast. Name '
                         'another word in "…and not", or leave it empty.')
    end = min(len(ours), len(theirs)) if parted is None else parted
    where = (f"step {end + 1}: {visible(ours[end]) if end < len(ours) else '(end)'} / "
             f"{visible(theirs[end]) if end < len(theirs) else '(end)'}")
    text = "\n".join([
        f"Sentence:       {session.source}", f"  → {marked(ours, theirs)}",
        f"Counterfactual: {counterfactual}", f"  → {marked(theirs, ours)}",
        f"They part at {where}." if ours != theirs else "The two translations are the same."])
    chosen = visible(ours[step - 1])
    asked = f'log p("{chosen}")' + (f' − log p("{visible(contrast)}")' if contrast else "")
    parting_note = where if parted is not None and parted + 1 != step else None
    moved = (f"Patched at step {step}, where the two translations part: the view steps there. Step elsewhere and "
             "press again to patch that step. " if step != on_screen else "")

    def drawn(result: Patching) -> tuple[tuple, str]:
        """One answer's values (both translations, the grids) and its status line."""
        title = [f"Patching each head at step {step}: the change in {asked}, patched − original",
                 f"original {result.original:+.2f}, counterfactual {result.counterfactual:+.2f}; red: that head alone "
                 "lowers it, blue: raises it"]
        if result.estimated:
            title.insert(1, estimated_line(result))
        notes = {kind: reason + (" Nor is the encoder's stream (causal tracing) patched." if kind == ENCODER else "")
                 for kind, reason in result.skipped.items()}
        figure = patching_figure(result.effects, title, "Δ score", notes)
        stream = None if result.stream is None else figure_json(stream_figure(
            result.stream, trace.source_tokens, [("Estimated (attribution patching): t" if result.estimated else "T")
                                                 + "he encoder's stream at one source position after one layer, from "
                                                 f"the counterfactual: the change in {asked}"], "Δ score"))
        said = moved + patching_said(result, step, chosen, asked, parting_note)
        if result.estimated:
            said += f" ({estimated_line(result)}.)"
        said += "".join(f" {KIND_LABELS[kind]}: {reason}" for kind, reason in result.skipped.items())
        if decoding.mask:
            said += " (Patched with every head on.)"
        return (text, figure_json(figure), stream), said

    session = session.with_view(replace(session.view, step=step))
    if not large(services, session.model):
        result = translator.patching(session.source, counterfactual, ours, step - 1, contrast=contrast, told=told,
                                     **session.direction)
        kept = patching_record(counterfactual, other.text, result, ours[step - 1], contrast)
        return *drawn(result), session.with_current(patched=kept)
    # A large model: a patched run per head takes minutes (576 heads at NLLB-600M's size), so the estimate first,
    # then the heads it ranks highest patched exactly, a few at a time, each stage drawn as it comes.
    stages = translator.staged_patching(session.source, counterfactual, ours, step - 1, contrast, told=told,
                                        **session.direction)
    estimate = next(stages)
    # The record the exports carry, brought up to each stage as it comes (the session is this user's own).
    kept = patching_record(counterfactual, other.text, estimate, ours[step - 1], contrast)

    def answers() -> Iterator[tuple[tuple, str]]:
        yield drawn(estimate)
        for result in stages:
            kept.update(patching_record(counterfactual, other.text, result, ours[step - 1], contrast))
            yield drawn(result)
    return answers(), "", session.with_current(patched=kept)


def estimated_line(result: Patching) -> str:
    """The grids' line saying they are estimates, and how many heads were patched exactly since."""
    done = sum(int(grid.sum()) for grid in (result.measured or {}).values())
    return (f"Estimated by attribution patching, (a′ − a)·gradient (its error: docs/explanations.md); {done} heads "
            "it ranks highest since patched exactly" if done else
            "Estimated by attribution patching, (a′ − a)·gradient (its error: docs/explanations.md); the heads it "
            "ranks highest are being patched exactly")


def patching_said(result: Patching, step: int, chosen: str, asked: str, parting: str | None) -> str:
    """What patching at `step` found, in a line: how far the counterfactual moves the score and the head that moves
    it most alone, with its share of the whole; where the whole is next to nothing (under `BARELY`), that there is
    nothing to share out, and where the translations part (`parting`, where that is another step)."""
    shift = result.counterfactual - result.original
    if abs(shift) < BARELY:
        return (f'Step {step}, "{chosen}": the counterfactual barely moves {asked} ({shift:+.2f}, under {BARELY} '
                "nats), so no head carries a difference here"
                + (f"; the translations part at {parting}: step there and patch again." if parting else "."))
    [(name, effect)] = result.ranked(1) or [("none", 0.0)]
    share = effect / shift
    why = ("; more than the whole, as other heads move it back: heads that cancel" if share > 1 else
           "; against the whole, which other heads outweigh: heads that cancel" if share < 0 else "")
    return (f'Step {step}, "{chosen}": the counterfactual moves {asked} by {shift:+.2f}; the head that moves it most '
            f"alone is {name} ({effect:+.2f}, {share:.0%} of the whole{why}).")


def patched_before(session: Session) -> str | None:
    """What the patching answers on screen are about (the note over them once a patching is refused)."""
    patched = session.current.patched
    if patched is None:
        return None
    return (f'These answers are about the counterfactual "{visible(patched["counterfactual"])}" patched at step '
            f'{patched["step"]}, not about what was asked now.')


@operation
def suggest(services: Services, session: Session) -> tuple[tuple, str] | tuple[Session, str]:
    """The sentence on screen with its first swappable word swapped, or why there is none."""
    swapped = suggested_swap(session.source)
    if swapped is None:
        return session, ("This sentence has no word the page knows a swap for (man↔woman, he↔she, doctor↔nurse, "
                         "one noun for another): type a counterfactual source yourself, the sentence with a word "
                         "changed.")
    return (swapped,), "A swap: patch every head to see which carry the difference."


def wire(page: Page, services: Services) -> None:
    tab_answer(page, services, suggest, [], [page.counterfactual], "suggest_swap", page.suggest_swap.click,
               queue=False)
    # One patched run per head (576 for NLLB-600M), in batches: with progress, stopped by Stop or by any new state.
    tab_answer(page, services, patch_at_step, [page.counterfactual, page.step, page.patch_contrast],
               ["counterfactual-text", "patching-grid", "patching-stream"], PATCHING, page.patch.click,
               answers=page.counterfactual_answers, progress="Patching each head", steps_view=True,
               aside=patched_before, **services.trace_queue)
    on(page, services, [page.stop_patch.click], stop_patching, [], ["stop_patch"],
       outputs=[page.session, page.revision, page.core], queued=False)


@operation
def stop_patching(services: Services, session: Session) -> tuple[Session, str]:
    """Stop patching (the event claims a new revision, which stops it after its batch), or say that none is
    running."""
    if PATCHING in session.revisions.working:
        return session, "Stopped: the heads are not patched."
    patched = session.current.patched
    return session, ("Nothing to stop: no patching is running." if patched is None else
                     f'Nothing to stop: the patching of "{visible(patched["counterfactual"])}" at step '
                     f'{patched["step"]} is whole.')

