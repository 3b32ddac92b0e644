"""Head statistics and word alignments of the decoding on screen."""

from __future__ import annotations

from dataclasses import replace

import gradio as gr

from attention_inspector.model.analysis.align import pharaoh_lines
from attention_inspector.model.api.services import Services
from attention_inspector.model.explain.head_stats import STATISTICS, head_statistics
from attention_inspector.model.keys import CROSS, DECODER, ENCODER, READINGS
from attention_inspector.model.text.words import merge, word_spans
from attention_inspector.ui.listeners import tab_answer
from attention_inspector.ui.operations import operation, shown
from attention_inspector.ui.page import Page
from attention_inspector.ui.plots import Answer, answers_view
from attention_inspector.ui.session import Session
from attention_inspector.viz.whatif import head_statistics_rows


def build(page: Page, services: Services) -> None:
    with gr.Tab("Head statistics", elem_id="statistics-tab"):
        gr.Markdown("What each head does on the decoding on screen: the entropy of its weights, its confidence "
                    "(mean largest weight, Voita et al. 2019), the weight it parks on &lt;eos&gt; and on punctuation, "
                    "and for self-attention the mean offset of the key it attends most (−1: the previous "
                    "token). The same over the whole val split is in *Switch heads off*, as a heatmap.")
        page.head_statistics = gr.Button("Measure every head on this decoding", variant="primary",
                                         elem_id="head-statistics")
        page.statistics_answers = answers_view("head-statistics-answer", Answer("head-table", "table", "; ".join(
            f"{name.replace('_', ' ')}: {what}" for name, what in STATISTICS.items())))
        with gr.Row(equal_height=True):
            page.alignment_reading = gr.Radio(list(READINGS), value=READINGS[0], elem_id="alignment-reading",
                                              label="Word alignments from cross-attention, read at the step that "
                                              "outputs each word, or where it is the decoder's input (shift-att)",
                                              scale=3)
            page.alignments = gr.Button("Read word alignments", elem_id="alignments", scale=1)
        page.alignments_answers = answers_view("alignments-answer", Answer(
            "alignment-text", "text", "Pharaoh format: source index-target index, 0-based, per head and layer mean "
            "(their error rate against a gold alignment: docs/what-if.md)"))


@operation
def measure_heads(services: Services, session: Session) -> tuple[tuple, str]:
    """Every head's statistics on the decoding on screen, as a table (model/explain/head_stats.py)."""
    trace = session.trace
    keys = {ENCODER: trace.source_tokens, DECODER: trace.decoder_tokens, CROSS: trace.source_tokens}
    statistics = {kind: head_statistics(trace.maps(kind), keys[kind], kind != CROSS) for kind in trace.available()}
    shapes = {kind: (trace.layers(kind), trace.heads(kind)) for kind in trace.available()}
    table = {"headers": ["head", *(name.replace("_", " ") for name in STATISTICS)],
             "rows": head_statistics_rows(statistics, shapes)}
    return (table,), (
        f"Statistics of {sum(layers * heads for layers, heads in shapes.values())} heads on this decoding: sort the "
        "table by any column; type a head's name in \"Open a head by name\" to see it.")


@operation
def read_alignments(services: Services, session: Session, reading: object) -> tuple[tuple, str]:
    """Word alignments of the decoding on screen from every cross-attention head and layer mean, in Pharaoh format
    (source index - target index, 0-based, <eos> left out), read at the step that outputs each word or at the step
    where it is the decoder's input (shift-att)."""
    if reading not in READINGS:
        return session, f"Read alignments at the {' or '.join(READINGS)} step, not {shown(reading)}."
    trace = session.trace
    cross, targets = trace.cross, trace.target_tokens
    if targets[-1] != "<eos>":  # stopped at the length limit: its last word is read like an <eos>
        cross, targets = cross[:, :, :-1], targets[:-1]
    in_words = replace(trace, units=session.view.units).in_words
    if in_words:  # indices of words, each word's pieces merged as the views merge them
        cross = merge(cross, word_spans(targets, trace.scheme), word_spans(trace.source_tokens, trace.scheme))
    lines = pharaoh_lines(cross, reading)
    width = max(len(name) for name in lines)
    return ("\n".join(f"{name:<{width}}  {links}" for name, links in lines.items()),), (
        f"Alignments of {cross.shape[2] - 1} {'words' if in_words else 'tokens'}, read at the {reading} step, from "
        f"{len(lines)} heads and layer means" + (" (indices of words: pieces merged)." if in_words else "."))


def wire(page: Page, services: Services) -> None:
    tab_answer(page, services, measure_heads, [], ["head-table"], "head_statistics", page.head_statistics.click,
               answers=page.statistics_answers)
    tab_answer(page, services, read_alignments, [page.alignment_reading], ["alignment-text"], "alignments",
               page.alignments.click, answers=page.alignments_answers)
