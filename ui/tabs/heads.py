"""Switch heads off: tick heads (or use a preset) and the sentence is translated again without them, beside the
decoding it came from; the checkpoint's head-importance heatmap says which heads matter (a click opens one)."""

from __future__ import annotations

from functools import partial

import gradio as gr

from attention_inspector.model.api.services import Services
from attention_inspector.model.keys import KIND_LABELS, KINDS
from attention_inspector.ui import operations
from attention_inspector.ui.listeners import on, tab_answer
from attention_inspector.ui.page import Page
from attention_inspector.ui.plots import figure_json, plot
from attention_inspector.ui.render import IMPORTANCE_KEYS, importance_plot
from attention_inspector.ui.session import Session
from attention_inspector.viz.whatif import DIFFERS


def build(page: Page, services: Services) -> None:
    with gr.Tab("Switch heads off", elem_id="heads-tab"):
        page.mask_note = gr.Markdown("Tick heads to switch them off.")
        page.mask_grids = [gr.CheckboxGroup([], label=f"{KIND_LABELS[kind]}: heads off", elem_id=f"mask-{kind}",
                                            elem_classes=["head-grid"]) for kind in KINDS]
        with gr.Row():
            page.mask_layer = gr.Button("Switch off the layer in view", size="sm", elem_id="mask-layer")
            page.mask_all_but = gr.Button("Of this attention, only the head in view on", size="sm",
                                          elem_id="mask-all-but")
            page.mask_reset = gr.Button("All heads on", size="sm", elem_id="mask-reset")
        # What the heads off change, right below the grids the user ticks in.
        page.masked_translation = gr.HighlightedText(label="Translated with those heads off (words that differ in "
                                                     "red)", color_map={DIFFERS: "red"}, show_inline_category=False,
                                                     elem_id="masked-translation", visible=False)
        page.mask_effect_plot = plot("mask-effect")
        # The importance heatmap (a grid of every kind's heads, side by side) takes the tab's whole width.
        page.importance_measure = gr.Radio([(label, key) for key, label in IMPORTANCE_KEYS.items()],
                                           value=next(iter(IMPORTANCE_KEYS)),
                                           label="Which heads matter and what they do (model/analysis/heads.py, val "
                                           "split); click a head to open it", elem_id="importance-measure")
        page.importance_plot = plot("importance")


def from_grids(services: Services, session: Session | None, encoder, decoder, cross, told=None):
    """A head ticked or unticked in a grid: the heads ticked in all three."""
    lists = [names if isinstance(names, list) else [] for names in (encoder, decoder, cross)]
    return operations.set_mask(services, session, [name for names in lists for name in names], told=told)


@operations.operation
def show_importance(services: Services, session: Session, key: object) -> tuple[tuple, str]:
    """The importance heatmap of another measure."""
    return (figure_json(importance_plot(services, session, key)),), ""


def wire(page: Page, services: Services) -> None:
    for grid in page.mask_grids:
        on(page, services, [grid.input], operations.deferred(from_grids, "the translation with those heads off"),
           page.mask_grids, [grid.elem_id.replace("-", "_")], queued=False)
    for button, preset in ((page.mask_layer, "layer"), (page.mask_all_but, "all but one"),
                           (page.mask_reset, "none")):
        on(page, services, [button.click], operations.deferred(partial(operations.mask_preset, preset=preset),
                                                                "the translation with those heads off"),
           [], [button.elem_id.replace("-", "_")], queued=False)
    tab_answer(page, services, show_importance, [page.importance_measure], [page.importance_plot],
               "importance_measure", page.importance_measure.input)
