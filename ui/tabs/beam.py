"""Beam search: the n-best list and the beam after every step; any hypothesis opens step by step like a trace."""

from __future__ import annotations

import gradio as gr

from attention_inspector.model.api.services import Services
from attention_inspector.ui import operations
from attention_inspector.ui.listeners import answer, decoding_outputs, on, settings
from attention_inspector.ui.page import Page
from attention_inspector.ui.session import Session


def build(page: Page, services: Services) -> None:
    with gr.Tab("Beam search", elem_id="beam-tab"):
        with gr.Row(equal_height=True):
            page.beam = gr.Button("Run beam search", variant="primary", elem_id="beam", scale=1, min_width=140)
            page.beam_open = gr.Dropdown([], value=None, label="Open a hypothesis step by step", elem_id="beam-open",
                                         scale=3)
        page.n_best = gr.Dataframe(headers=["rank", "translation", "score", "log-probability", "tokens", "greedy"],
                                   label="n-best list, best first (score: log-probability / length, as evaluation "
                                   "ranks them); click a row to open it", interactive=False, elem_id="n-best")
        page.beam_steps = gr.Dataframe(headers=["step", "rank", "hypothesis", "log-probability", "finished",
                                                "greedy path"], label="The beam after every step",
                                       interactive=False, max_height=420, elem_id="beam-steps")


def open_row(services: Services, session: Session | None, selected: gr.SelectData, told=None):
    """A click on a row of the n-best table opens that hypothesis."""
    index = selected.index[0] if isinstance(selected.index, (list, tuple)) else selected.index
    return operations.open_hypothesis(services, session, index, told=told)


def wire(page: Page, services: Services) -> None:
    beam_outputs = [page.session, page.revision, page.core, page.step, page.kind, page.measure, page.layer,
                    page.head, page.model_view, page.n_best, page.beam_steps, page.beam_open]
    on(page, services, [page.beam.click], operations.deferred(operations.run_beam, "the beam search"), [],
       ["beam_view"], outputs=beam_outputs, queued=False)
    on(page, services, [page.beam_open.input], operations.deferred(operations.open_hypothesis, "that hypothesis"),
       [page.beam_open], ["open_hypothesis"], queued=False)

    # A row click carries Gradio's own event data, which an API call cannot send: /open_hypothesis is the API's.
    run = answer(page, services, operations.deferred(open_row, "that hypothesis"), decoding_outputs(page), 1)

    def clicked(state, kind, layer, head, measure, step, model_view, units, revision, selected: gr.SelectData):
        return run(state, selected, kind, layer, head, measure, step, model_view, units, revision)
    page.n_best.select(clicked, [page.session, *settings(page)], decoding_outputs(page), api_visibility="private",
                       show_progress="minimal", show_progress_on=[page.progress], **services.trace_queue)
