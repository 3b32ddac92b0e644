"""Attention inspector: translate a sentence, step through greedy decoding, look at every layer and head.

    python app.py            # http://127.0.0.1:7860

Layout and event wiring only: model work is in `model/`, figures in `viz/`.
Loaded checkpoints are read-only module globals; each user's trace lives in a `gr.State`.
Translation and view changes (kind, layer, head) go to the server; stepping is a redraw in the browser
(viz/stepping.js) from figures the page already holds.
"""

from __future__ import annotations

import os
from pathlib import Path

import gradio as gr
import numpy as np
import torch
from gradio.components.api_component import Api

from model.checkpoint import load_all
from model.translator import InputError, TracedTranslation
from model.vocab import CHARS
from model.workers import TracePool, available_cores, can_fork
from viz.attention import label, visible
from viz.views import ALL_HEADS, CROSS, KINDS, MEAN, TraceArrays, translation_frames, view_frames

CHECKPOINT_ROOT = Path(os.environ.get("CHECKPOINTS", Path(__file__).parent / "checkpoints"))
TOP_K = 5
# Memory bounds for a public server: Gradio keeps per-session data for at most this many sessions
# (the least recently used are dropped first), and a trace is freed an hour after its last update.
SESSION_CAPACITY = int(os.environ.get("SESSION_CAPACITY", "1000"))
TRACE_TTL_S = 3600
# Gradio summarizes its last 10,000 events with pandas after every event, for a monitoring page this app
# does not enable: a sixth of the web server's CPU under load. Every 1,000 events is plenty.
os.environ.setdefault("GRADIO_ANALYTICS_CACHE_FREQUENCY", "1000")

# One torch thread per request (in a worker process or a request thread): two cores serve every user.
torch.set_num_threads(int(os.environ.get("TORCH_THREADS", "1")))
TRANSLATORS, LOAD_ERRORS = load_all(CHECKPOINT_ROOT)
# Traces run in this many forked worker processes (0: in the request's thread): one per core this process may use.
TRACE_WORKERS = int(os.environ.get("TRACE_WORKERS", str(available_cores()))) if can_fork() else 0
TRACE_POOL = TracePool(TRANSLATORS, TRACE_WORKERS) if TRANSLATORS and TRACE_WORKERS > 0 else None
# Requests handled at once: a translation per trace worker (two in-process), and two view changes.
TRACE_CONCURRENCY, VIEW_CONCURRENCY = max(TRACE_WORKERS, 2), 2
DEFAULT_MODEL = "en-de" if "en-de" in TRANSLATORS else next(iter(TRANSLATORS), None)
# The browser's step functions (step, translation frames, view frames) => the step's views: one that redraws
# the plots on the page (a step), one that hands Gradio new figures (a new translation or view).
STEPPING = (Path(__file__).parent / "viz" / "stepping.js").read_text()
STEP_JS, RENDER_JS = (f"(step, translation, view) => {{ const direct = {direct};\n{STEPPING}\n}}"
                      for direct in ("true", "false"))
# ←/→ step when the page has the focus outside a text field (Gradio's button click, as a mouse would).
KEYS_JS = """() => {
  document.addEventListener("keydown", (event) => {
    const target = event.target instanceof Element ? event.target : document.body;
    const typing = target.closest("input, textarea, select, [contenteditable]");
    if (typing || event.altKey || event.ctrlKey || event.metaKey) return;
    const button = {ArrowRight: "#next", ArrowLeft: "#previous", Home: "#first", End: "#last"}[event.key];
    if (button && document.querySelector(button)) { event.preventDefault(); document.querySelector(button).click(); }
  });
}"""


def model_choices() -> list[tuple[str, str]]:
    """Dropdown entries: every loaded checkpoint with its languages and test BLEU."""
    choices = []
    for name, translator in TRANSLATORS.items():
        test = translator.metrics.get("scores", {}).get("test", {})
        score = (f", test exact match {test['exact_match']}%" if translator.tgt_tokenizer.lang == CHARS
                 else f", test BLEU {test['bleu']}") if test else ""
        languages = f"{translator.src_tokenizer.lang}→{translator.tgt_tokenizer.lang}"
        choices.append((f"{name} ({languages}{score})", name))
    return choices


def load_status() -> str:
    """What went wrong while loading checkpoints, for the status box (empty when all loaded)."""
    lines = [f"Checkpoint {name} could not be loaded: {error}" for name, error in LOAD_ERRORS.items()]
    if not TRANSLATORS:
        lines.insert(0, f"No usable checkpoint in {CHECKPOINT_ROOT}: translation is unavailable.")
    return "\n".join(lines)


def examples_for(model_name: str | None) -> list[str]:
    """The example sentences a checkpoint ships in its metrics.json (real Multi30k test sentences)."""
    translator = TRANSLATORS.get(model_name)
    return list(translator.metrics.get("examples", [])) if translator else []


def trace_text(model_name: str, text: str, force: list[str] | None = None,
               mask: list[str] | None = None) -> TracedTranslation:
    """Greedy trace of `text` with a loaded checkpoint, in a worker process when there are workers."""
    options = dict(top_k=TOP_K, force=force, mask=mask)
    if TRACE_POOL is not None:
        return TRACE_POOL.trace(model_name, text, **options)
    return TRANSLATORS[model_name].trace(text, **options)


def to_arrays(traced: TracedTranslation) -> TraceArrays:
    """The per-user state: a trace reduced to numpy arrays and token strings."""
    trace = traced.trace
    return TraceArrays(
        source_tokens=traced.source_tokens, decoder_tokens=traced.decoder_input_tokens,
        target_tokens=traced.target_tokens, probabilities=trace.probabilities, top_tokens=traced.top_tokens,
        top_probabilities=trace.top_probabilities, encoder=trace.encoder_attention,
        decoder=trace.decoder_attention, cross=trace.cross_attention)


def head_choices(trace: TraceArrays, kind: str) -> list[tuple[str, int | str]]:
    """Head dropdown entries for one attention kind: (label, value), the value a head index or MEAN / ALL_HEADS.

    A single-head model (dot-product attention) has nothing to average or lay side by side."""
    heads = [(f"Head {h + 1}", h) for h in range(trace.heads(kind))]
    return heads if len(heads) == 1 else [(MEAN, MEAN), (ALL_HEADS, ALL_HEADS)] + heads


def layer_choices(trace: TraceArrays, kind: str) -> list[tuple[str, int]]:
    """Layer dropdown entries for one attention kind (encoder and decoder may differ in depth)."""
    return [(f"Layer {i + 1}", i) for i in range(trace.layers(kind))]


def source_highlights(traced: TracedTranslation) -> list[tuple[str, str | None]]:
    """Source tokens as the model read them, unknown ones marked."""
    return [(visible(token) + " ", "unknown" if unknown else None)
            for token, unknown in zip(traced.source_tokens, traced.unknown)]


def shown(value: object, limit: int = 60) -> str:
    """A value from a request, quoted for a message (repr spells out invisible and broken characters), cut short."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


# ---- callbacks: thin wrappers around model/ and viz/; each returns its outputs by component --------------

def translate(model_name: str, text: str, kind: str, layer: int, head: int | str, model_view: bool = False) -> dict:
    """Trace a translation once and send the browser everything stepping needs; a failure keeps what is shown."""
    if model_name not in TRANSLATORS:
        return {status: f"Choose a model: {shown(model_name)} is not loaded. " + load_status()}
    try:
        traced = trace_text(model_name, text)
    except InputError as error:
        return {status: str(error)}
    trace = to_arrays(traced)
    kinds = trace.available()
    kind = kind if kind in kinds else kinds[-1]
    return {trace_state: trace, translation: traced.text, status: translate_status(traced, kinds),
            source_view: source_highlights(traced), step: gr.Slider(maximum=max(trace.steps, 2), value=1,
                                                                    interactive=trace.steps > 1),
            kind_choice: gr.Radio(choices=kinds, value=kind), translation_state: translation_frames(trace),
            **{button: gr.Button(interactive=True) for button in step_buttons},
            **view_outputs(trace, kind, layer, head, model_view)}


def translate_status(traced: TracedTranslation, kinds: list[str]) -> str:
    """What the status line says about a translation: unknown source words, unspellable target words, limits."""
    unknown = [label(t) for t, u in zip(traced.source_tokens, traced.unknown) if u]
    message = "Translated." + (f" Unknown words (read as <unk>): {', '.join(unknown)}." if unknown else "")
    unspelled = traced.target_tokens.count("<unk>")
    if unspelled:
        message += (f" The model chose <unk> {unspelled} time{'s' * (unspelled > 1)}: a word its vocabulary "
                    "cannot spell, shown as <unk> in the translation.")
    if len(kinds) < len(KINDS):
        message += " This model has no self-attention: only its cross-attention exists to show."
    if traced.target_tokens[-1] != "<eos>":
        message += f" Stopped at the length limit of {len(traced.target_tokens)} tokens."
    return message


def view_outputs(trace: TraceArrays, kind: str, layer: int, head: int | str, model_view: bool) -> dict:
    """The layer/head lists of `kind` and the view's figures; a choice the kind does not have falls back."""
    layers, heads = layer_choices(trace, kind), head_choices(trace, kind)
    layer = layer if layer in [value for _, value in layers] else layers[-1][1]
    head = head if head in [value for _, value in heads] else heads[0][1]
    return {layer_choice: gr.Dropdown(choices=layers, value=layer), head_choice: gr.Dropdown(choices=heads, value=head),
            view_state: view_frames(trace, kind, layer, head, bool(model_view))}


def change_view(trace: TraceArrays | None, kind: str, layer: int, head: int | str, model_view: bool = False) -> dict:
    """A new attention kind, layer, head or model view of the stored trace (the step stays where it is)."""
    if trace is None:
        return {status: "Translate a sentence first: there is nothing to show yet."}
    kind = kind if kind in trace.available() else trace.available()[-1]
    return view_outputs(trace, kind, layer, head, model_view)


def switch_model(model_name: str, text: str, kind: str, layer: int, head: int | str, model_view: bool = False) -> dict:
    """A new model: its examples, and the sentence on screen translated again with it (or the views cleared)."""
    outputs = {example: gr.Dropdown(choices=examples_for(model_name), value=None)}
    if (text or "").strip():
        return {**outputs, **translate(model_name, text, kind, layer, head, model_view)}
    return {**outputs, trace_state: None, translation: "", translation_state: None, view_state: None,
            status: f"Model {shown(model_name)} chosen: type or pick a sentence to translate."}


def first_visit(kind: str, layer: int, head: int | str, model_view: bool = False) -> dict:
    """On page load: the default model's first example, translated, so a visitor sees what the app does."""
    sentences = examples_for(DEFAULT_MODEL)
    if not sentences:
        return {status: load_status() or "Type a sentence and press Enter."}
    return {source: sentences[0], example: sentences[0],
            **translate(DEFAULT_MODEL, sentences[0], kind, layer, head, model_view)}


def check_model(model: object) -> None:
    """An API request's model: a loaded checkpoint's name, or a gr.Error listing the loaded ones."""
    if not isinstance(model, str) or model not in TRANSLATORS:
        raise gr.Error(f"unknown model {shown(model)}; loaded: {', '.join(TRANSLATORS) or 'none'}")


def trace_api(model: str, text: str, force: list[str] | None = None, mask: list[str] | None = None) -> dict:
    """Translate `text` with checkpoint `model`; returns tokens, probabilities and every attention map as lists.

    `force`: target tokens that fix the first steps (spelled as in `target_tokens`); `mask`: heads to switch off,
    named kind.layer.head (kind encoder, decoder or cross; 1-based), e.g. "cross.2.5".
    """
    check_model(model)
    try:
        traced = trace_text(model, text, force, mask)
    except InputError as error:
        raise gr.Error(str(error)) from None
    trace = traced.trace

    def rounded(array: np.ndarray | None):
        return None if array is None else np.round(array.astype(np.float64), 4).tolist()

    return {"translation": traced.text, "source_tokens": traced.source_tokens, "unknown": traced.unknown,
            "target_tokens": traced.target_tokens, "decoder_input_tokens": traced.decoder_input_tokens,
            "forced": trace.forced, "mask": sorted(set(mask or [])),
            "probabilities": rounded(trace.probabilities), "top_tokens": traced.top_tokens,
            "top_probabilities": rounded(trace.top_probabilities),
            "encoder_attention": rounded(trace.encoder_attention),
            "decoder_attention": rounded(trace.decoder_attention), "cross_attention": rounded(trace.cross_attention)}


def score_api(model: str, text: str, target_tokens: list[str], mask: list[str] | None = None) -> dict:
    """The teacher-forced log-probability of each of `target_tokens` (spelled as `/trace` returns them) as the
    translation of `text` by checkpoint `model`, with the heads of `mask` switched off (kind.layer.head)."""
    check_model(model)
    try:
        scored = TRANSLATORS[model].score(text, target_tokens, mask)
    except InputError as error:
        raise gr.Error(str(error)) from None
    return {"source_tokens": scored.source_tokens, "target_tokens": scored.target_tokens,
            "log_probabilities": np.round(scored.log_probabilities.astype(np.float64), 6).tolist(),
            "total_log_probability": round(scored.total, 6), "mask": sorted(set(mask or []))}


# ---- layout -----------------------------------------------------------------------------------------

class Blocks(gr.Blocks):
    """gr.Blocks whose events answer a malformed request with a message, where Gradio's own answer is an empty error.

    Too few values: the trailing arguments of an API endpoint (its optional ones) arrive as None, which the
    endpoint checks; a UI event names what it takes. The hook is a Gradio internal of the pinned version;
    tests/test_http_api.py sends such requests as raw HTTP.
    """

    def validate_inputs(self, block_fn, inputs: list) -> None:
        missing = block_fn.inputs[len(inputs):]
        if missing and all(isinstance(block, Api) for block in missing):
            inputs.extend(None for _ in missing)
        elif missing:
            names = ", ".join(str(block.label or block.get_block_name()) for block in block_fn.inputs)
            raise gr.Error(f"This request sent {len(inputs)} values; this endpoint takes {len(block_fn.inputs)}: "
                           f"{names}.")


with Blocks(title="Transformer attention inspector") as demo:
    gr.Markdown("**Transformer attention inspector**: translate, then step through greedy decoding (buttons, "
                "slider or ←/→) and inspect every layer and head of every attention.")
    trace_state = gr.State(None, time_to_live=TRACE_TTL_S)
    # What the browser steps through without asking the server: per-step charts and the view's figures.
    translation_state = gr.JSON(None, visible=False, elem_id="translation-frames")
    view_state = gr.JSON(None, visible=False, elem_id="view-frames")
    with gr.Row(equal_height=True):
        model_name = gr.Dropdown(model_choices(), value=DEFAULT_MODEL, label="Model", elem_id="model", scale=2)
        example = gr.Dropdown(examples_for(DEFAULT_MODEL), value=None, label="Examples (from the test set)",
                              elem_id="example", scale=3)
    with gr.Row(equal_height=True):
        source = gr.Textbox(label="Source sentence", placeholder="Type a sentence and press Enter", show_label=False,
                            lines=1, max_lines=3, elem_id="source", scale=5, container=False)
        translate_button = gr.Button("Translate", variant="primary", elem_id="translate", scale=1, min_width=100)
    with gr.Row(equal_height=True):
        translation = gr.Textbox(label="Translation (greedy)", interactive=False, elem_id="translation", scale=3)
        status = gr.Textbox(value=load_status(), label="Status", interactive=False, lines=1, max_lines=3,
                            elem_id="status", scale=2)
    with gr.Row():
        with gr.Column(scale=3, min_width=340):
            with gr.Row(equal_height=True, elem_id="step-bar"):
                step_buttons = [gr.Button(text, elem_id=elem_id, size="sm", min_width=50, interactive=False)
                                for text, elem_id in (("«", "first"), ("‹ Prev", "previous"), ("Next ›", "next"),
                                                      ("»", "last"))]
                first, previous, following, last = step_buttons
                step = gr.Slider(1, 2, value=1, step=1, label="Step", interactive=False, elem_id="step", scale=4,
                                 min_width=160)
            attention_plot = gr.Plot(show_label=False, elem_id="attention")
        with gr.Column(scale=2, min_width=300):
            step_text = gr.Textbox(label="This step", lines=3, interactive=False, elem_id="step-text")
            candidates_plot = gr.Plot(show_label=False, elem_id="candidates")
            kind_choice = gr.Radio(list(KINDS), value=CROSS, label="Attention", elem_id="kind")
            with gr.Row():
                layer_choice = gr.Dropdown([("Layer 1", 0)], value=0, label="Layer", elem_id="layer", min_width=100)
                head_choice = gr.Dropdown([(MEAN, MEAN), (ALL_HEADS, ALL_HEADS), ("Head 1", 0)], value=MEAN,
                                          label="Head", elem_id="head", min_width=100)
    with gr.Accordion("Model view: every layer x head of this attention at this step", open=False) as model_view_panel:
        model_view = gr.Checkbox(False, label="Show the model view", elem_id="model-view")
        overview_plot = gr.Plot(show_label=False, elem_id="overview")
    with gr.Row():
        source_view = gr.HighlightedText(label="Source tokens as the model reads them", color_map={"unknown": "red"},
                                         elem_id="source-tokens", scale=2)
        probabilities_plot = gr.Plot(show_label=False, elem_id="probabilities", scale=3)

    views = [attention_plot, candidates_plot, probabilities_plot, step_text, overview_plot]
    settings = [kind_choice, layer_choice, head_choice, model_view]
    translate_outputs = [trace_state, translation, status, source_view, step, kind_choice, layer_choice, head_choice,
                         translation_state, view_state, *step_buttons]
    # Translations queue for the trace workers in their own group, so view changes (a few ms each) never wait
    # behind them.
    trace_queue = dict(concurrency_id="trace", concurrency_limit=TRACE_CONCURRENCY)
    translate_button.click(translate, [model_name, source, *settings], translate_outputs, api_name="translate",
                           **trace_queue)
    source.submit(translate, [model_name, source, *settings], translate_outputs, api_name="translate_enter",
                  **trace_queue)
    model_name.change(switch_model, [model_name, source, *settings], [example, *translate_outputs],
                      api_name="switch_model", **trace_queue)
    example.input(lambda text: text or "", example, source, api_name="use_example").then(
        translate, [model_name, source, *settings], translate_outputs, api_name="translate_example", **trace_queue)
    demo.load(first_visit, settings, [source, example, *translate_outputs], api_name="first_visit", **trace_queue)
    demo.load(None, js=KEYS_JS)

    # Stepping: the buttons move the slider, and every change of the slider (buttons, drag, keyboard, its number
    # box) redraws the step in the browser; new figures (a translation, a view change) are drawn by Gradio.
    for button, move in ((first, "() => 1"), (previous, "(s) => Math.max(1, s - 1)"),
                         (following, "(s, f) => (f ? Math.min(f.steps, s + 1) : s)"),
                         (last, "(s, f) => (f ? f.steps : s)")):
        button.click(None, [step, translation_state], step, js=move)
    step.change(None, [step, translation_state, view_state], step_text, js=STEP_JS)
    view_state.change(None, [step, translation_state, view_state], views, js=RENDER_JS)
    model_view_panel.expand(None, [step, translation_state, view_state], views, js=RENDER_JS)

    for control in settings:
        control.input(change_view, [trace_state, *settings], [layer_choice, head_choice, view_state, status],
                      api_name=control.elem_id.replace("-", "_"))
    gr.api(trace_api, api_name="trace", **trace_queue)
    gr.api(score_api, api_name="score", **trace_queue)  # one teacher-forced pass, in this process

demo.queue(default_concurrency_limit=VIEW_CONCURRENCY, max_size=64)

if __name__ == "__main__":
    # GRADIO_SERVER_NAME / GRADIO_SERVER_PORT choose the address (a Space sets them).
    demo.launch(state_session_capacity=SESSION_CAPACITY)
