"""Branch: make the model choose another word at the step on screen, and compare with the decoding it came from."""

from __future__ import annotations

import gradio as gr

from attention_inspector.model.api.services import Services
from attention_inspector.ui import operations
from attention_inspector.ui.listeners import on
from attention_inspector.ui.page import Page
from attention_inspector.ui.plots import plot
from attention_inspector.viz.whatif import DIFFERS, FORCED


def build(page: Page, services: Services) -> None:
    with gr.Tab("Branch and compare", elem_id="branch-tab"):
        gr.Markdown("Make the model choose another word at the step on screen: **click a candidate** in the "
                    "chart above, or type a word. Greedy decoding goes on from there; the branch is stepped "
                    "and inspected like the original, and can be branched again.")
        with gr.Row(equal_height=True):
            page.branch_word = gr.Textbox(label="Word to choose at this step", placeholder="a word of the target "
                                          "vocabulary, then Enter", elem_id="branch-word", scale=3)
            page.branch = gr.Button("Branch here", elem_id="branch", scale=1, min_width=100)
        page.comparison = gr.HighlightedText(label=f"Compared with the decoding it came from (red: {DIFFERS}; "
                                             f"orange: {FORCED})", color_map={DIFFERS: "red", FORCED: "orange"},
                                             show_inline_category=False, elem_id="comparison")
        page.comparison_plot = plot("comparison-plot")


def wire(page: Page, services: Services) -> None:
    on(page, services, [page.branch.click, page.branch_word.submit],
       operations.deferred(operations.branch, "a branch"), [page.branch_word],
       ["branch", "branch_enter"], queued=False)
