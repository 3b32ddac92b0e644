"""The core loop on one screen: choose a model, translate, step through decoding and choose the view.

The core view (translation, status, heatmap, the step's line and its candidates) is one component drawn from one
value (ui/static/core.js); the step bar and the view's controls (attention kind, measure, layer, head) sit inside
it, right above the heatmap they change. Stepping (buttons, slider, ←/→) is drawn in the browser from figures the
page already holds.
"""

from __future__ import annotations

import gradio as gr

from attention_inspector.model.api.services import Services
from attention_inspector.model.keys import CROSS, HEAD_LABELS, KIND_LABELS, MEAN, MEASURE_LABELS, WEIGHTS, choices
from attention_inspector.model.text.words import PIECES, WORDS
from attention_inspector.ui.omissions import LEFT_OUT_MARK
from attention_inspector.ui.operations import EVERY_HEAD, WHOLE_MODEL
from attention_inspector.ui.page import Page
from attention_inspector.ui.plots import core_view, plot

# Steps a decoding can have at most, as far as Gradio's check of the step slider's value goes (`build`).
STEP_BOUND = 100_000


def fitting(*labels: str) -> int:
    """A menu's least width (px) that shows the longest of `labels` whole beside its arrow (at most 8 px a character
    of the page's 14 px font, and ~85 px of the menu's padding and arrow)."""
    return 8 * max(map(len, labels)) + 90


def build(page: Page, services: Services) -> None:
    """The model and sentence, the translation and status, the step bar, the view's controls and figures."""
    model = services.default_model
    with gr.Row(equal_height=True):
        page.model = gr.Dropdown(services.model_choices(), value=model, label="Model", elem_id="model", scale=2,
                                 min_width=fitting(*(label for label, _ in services.model_choices())))
        # A multilingual model's languages (NLLB, mBART-50, a multi-target opus-mt): shown only for such a model.
        sources, targets = services.languages(model)
        page.src_lang = gr.Dropdown(sources, value=None, label="From", elem_id="src-lang", visible=bool(sources),
                                    scale=1, min_width=120)
        page.tgt_lang = gr.Dropdown(targets, value=None, label="To", elem_id="tgt-lang", visible=bool(targets),
                                    scale=1, min_width=120)
        page.example = gr.Dropdown(services.examples(model), value=None, label="Examples (from the test set)",
                                   elem_id="example", scale=3, min_width=300)
    with gr.Row(equal_height=True):
        page.source = gr.Textbox(label="Source sentence", placeholder="Type a sentence and press Enter",
                                 show_label=False, lines=1, max_lines=3, elem_id="source", scale=5, container=False)
        page.translate = gr.Button("Translate", variant="primary", elem_id="translate", scale=1, min_width=100)
        # Never seen: the page presses it when Translate says a large model's translation is being computed
        # (ui/static/page.js), which then comes step by step with progress (listeners.translate_event).
        page.translate_queued = gr.Button("Translate step by step", elem_id="translate-queued",
                                          elem_classes=["hidden-trigger"], min_width=0)
        # And for a large model's what-if action (listeners.later_event).
        page.later_queued = gr.Button("Compute step by step", elem_id="later-queued", elem_classes=["hidden-trigger"],
                                      min_width=0)
        # And for the neuron view: a click on a cell of the heatmap (or the panel's Close) fills the cell and presses
        # the button (ui/static/page.js; ui/neurons.py `open_neuron`).
        page.neuron_cell = gr.Textbox(elem_id="neuron-cell", elem_classes=["hidden-trigger"], show_label=False,
                                      container=False, min_width=0)
        page.open_neuron = gr.Button("Open the neuron view", elem_id="neuron-open", elem_classes=["hidden-trigger"],
                                     min_width=0)
        # And once a decoding is drawn: the source words it left out looked for (ui/omissions.py).
        page.omissions_queued = gr.Button("Look for words left out", elem_id="omissions-queued",
                                          elem_classes=["hidden-trigger"], min_width=0)
    # The core view, drawn from one value: the translation and status, then the step bar and the view's
    # controls (its children), then the heatmap beside the step's line and its candidates.
    with core_view(services.load_status()) as page.core:
        with gr.Row(equal_height=False, elem_id="step-bar"):
            # Always enabled: with nothing translated, their step has nothing to show, and nothing happens.
            page.step_buttons = [gr.Button(text, elem_id=elem_id, size="sm", min_width=50)
                                 for text, elem_id in (("«", "first"), ("‹ Prev", "previous"),
                                                       ("Next ›", "next"), ("»", "last"))]
            # The range the user sees is set by the page (ui/static/range.js, from the page's load on); this one
            # is only the bound Gradio checks a queued event's step against, the app fitting it to the decoding.
            page.step = gr.Slider(1, STEP_BOUND, value=1, step=1, label="Step", interactive=False, elem_id="step",
                                  scale=4, min_width=160)
        with gr.Row(equal_height=True, elem_id="view-controls"):
            page.kind = gr.Dropdown(choices(KIND_LABELS), value=CROSS, label="Attention", elem_id="kind",
                                    scale=3, min_width=fitting(*KIND_LABELS.values()))
            # Any number is taken and then fitted to the model (ui/session.py `View.normalize`): a menu of
            # another model's layers never refuses a request.
            page.layer = gr.Dropdown([("Layer 1", 0)], value=0, label="Layer", elem_id="layer",
                                     min_width=fitting(WHOLE_MODEL), scale=1, allow_custom_value=True)
            page.head = gr.Dropdown([(HEAD_LABELS[MEAN], MEAN)], value=MEAN, label="Head", elem_id="head",
                                    min_width=fitting(EVERY_HEAD, *HEAD_LABELS.values()), scale=2,
                                    allow_custom_value=True)
            page.measure = gr.Dropdown(choices(MEASURE_LABELS), value=WEIGHTS, label="Show",
                                       elem_id="measure", scale=2, min_width=fitting(*MEASURE_LABELS.values()))
            # Words merge a word's pieces (model/text/words.py): summed as keys, averaged as queries.
            page.units = gr.Radio([("Pieces", PIECES), ("Words", WORDS)], value=PIECES, label="Units",
                                  elem_id="units", scale=1, min_width=150)
        # Integrated gradients at every step, and a large model's work, take seconds: their progress shows here,
        # above the heatmap and beside the button that gives them up, in a row shown only while they are computed
        # (ui/static/page.js, from the status line).
        with gr.Row(equal_height=True, elem_id="computing"):
            page.progress = gr.HTML("", elem_id="progress", scale=4, min_width=160, padding=False)
            page.stop_measure = gr.Button("Stop computing", size="sm", elem_id="stop-measure", scale=0, min_width=160)
    with gr.Row(equal_height=True):
        page.breadcrumb = gr.Radio([], label="Decodings of this sentence, each made from the one before it (choose "
                                   "one to show it)", elem_id="breadcrumb", visible=False, scale=3)
        page.head_name = gr.Textbox(label="Open a head by name", placeholder="kind.layer.head, e.g. cross.2.5",
                                    elem_id="open-head", scale=2, min_width=240)  # its placeholder whole
        page.open_head = gr.Button("Open", elem_id="open-head-button", scale=1, min_width=60)
    with gr.Accordion("Model view: every layer x head of this attention at this step", open=False) as accordion:
        page.model_view_panel = accordion
        page.model_view = gr.Checkbox(False, label="Show the model view", elem_id="model-view")
        page.overview = plot("overview")
    with gr.Row():  # columns of at least 300 px: on a phone, one above the other
        with gr.Column(scale=2, min_width=300):
            page.source_tokens = gr.HighlightedText(label="Source tokens as the model reads them",
                                                    color_map={"unknown": "red", LEFT_OUT_MARK: "orange"},
                                                    elem_id="source-tokens")
        with gr.Column(scale=3, min_width=300):
            page.probabilities = plot("probabilities", after_paint=True)
