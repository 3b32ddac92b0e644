"""Compare models: the sentence translated by a second checkpoint of the same source language, its attention
beside the first's at the same step (and their difference where both read the same tokens)."""

from __future__ import annotations

import gradio as gr

from attention_inspector.model.api.services import Services
from attention_inspector.ui import operations
from attention_inspector.ui.listeners import COMPARE_TAB, on, view_outputs
from attention_inspector.ui.page import Page
from attention_inspector.ui.plots import plot


def build(page: Page, services: Services) -> None:
    with gr.Tab("Compare models", id=COMPARE_TAB, elem_id="compare-tab"):
        gr.Markdown("Translate the sentence with a second checkpoint of the same source language and see both "
                    "attentions side by side at the same step (the kind, layer and head chosen above, where the "
                    "second has them), with their difference where both read the same tokens. Stepping moves "
                    "both.")
        with gr.Row(equal_height=True):
            page.compare_model = gr.Dropdown(services.comparable(services.default_model), value=None,
                                             label="Second model (those that read the same language)",
                                             elem_id="compare-model", scale=3)
            page.compare = gr.Button("Compare", variant="primary", elem_id="compare", scale=1, min_width=100)
        page.compare_plot = plot("compare-plot")


def wire(page: Page, services: Services) -> None:
    on(page, services, [page.compare.click],
       operations.deferred(operations.compare, "the comparison", model_of=lambda session, other: other),
       [page.compare_model], ["compare"],
       outputs=[*view_outputs(page, words=False), page.compare_model], queued=False)
