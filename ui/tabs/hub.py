"""Models from the Hub: a Hugging Face translation model (opus-mt, NLLB-200, M2M100, mBART-50, T5) converted into the
inspector's Transformer (model/hub/convert_hf.py), kept on disk and added to the model menu. A link does the same with
`?model=hf:Helsinki-NLP/opus-mt-en-de` (ui/links.py)."""

from __future__ import annotations

import gradio as gr

from attention_inspector.model.api.services import Services
from attention_inspector.model.hub.convert_hf import ConversionError
from attention_inspector.ui.listeners import PAGE_EVENT, folded, on, session_outputs, translate_or_example
from attention_inspector.ui.page import Page
from attention_inspector.ui.session import unpacked


def build(page: Page, services: Services) -> None:
    with gr.Tab("Models from the Hub", elem_id="hub-tab"):
        gr.Markdown("Inspect a translation model from the Hugging Face Hub: Marian (Helsinki-NLP/opus-mt-en-de), "
                    "NLLB-200 (facebook/nllb-200-distilled-600M), M2M100 (facebook/m2m100_418M), mBART-50 "
                    "(facebook/mbart-large-50-many-to-many-mmt) or T5 (google-t5/t5-small: English to German, French "
                    "or Romanian). It is checked (its family, its size), downloaded, converted into this "
                    "inspector's Transformer so that every view and intervention works on it, kept on this server's "
                    "disk and opened. Only where the server can reach the Hub.")
        with gr.Row(equal_height=True):
            page.hub_id = gr.Textbox(label="Hub model id", placeholder="Helsinki-NLP/opus-mt-en-de", elem_id="hub-id",
                                     scale=3)
            page.hub_load = gr.Button("Load from the Hub", variant="primary", elem_id="hub-load", scale=1,
                                      min_width=140)


def wire(page: Page, services: Services) -> None:
    def load(state, hub_id: str, progress=gr.Progress()) -> dict:
        revision = unpacked(state)[1].latest  # the status line belongs to what the page shows
        try:
            name = services.load_from_hub(hub_id, lambda stage: progress(None, desc=stage))
        except ConversionError as error:
            return folded(page, {page.status: str(error)}, revision)
        return folded(page, {page.status: f"{hub_id} is ready as {name}: translating with it.",
                             page.model: gr.update(choices=services.model_choices(), value=name)}, revision)

    # The button, or Enter in the id box.
    loaded = gr.on([page.hub_load.click, page.hub_id.submit], load, [page.session, page.hub_id],
                   [page.core, page.model], api_name="load_from_hub", api_visibility=PAGE_EVENT,
                   concurrency_id="hub", concurrency_limit=1)
    # Then the sentence on screen with the new model (nothing happens where the menu did not change).
    on(page, services, [loaded.then], translate_or_example, [page.model, page.source], ["load_from_hub_translate"],
       outputs=session_outputs(page), queued=False)
