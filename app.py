"""Attention inspector: translate a sentence, step through greedy decoding, look at every layer and head.

    python app.py            # http://127.0.0.1:7860

Layout and event wiring only: model work is in `model/`, figures in `viz/`.
Loaded checkpoints are read-only module globals; each user's trace lives in a `gr.State`.
"""

from __future__ import annotations

import os
from pathlib import Path

import gradio as gr
from gradio.components.api_component import Api
from gradio.exceptions import ComponentProcessingError
import numpy as np
import torch

from model.checkpoint import load_all
from model.translator import InputError, TracedTranslation
from model.vocab import CHARS
from model.workers import TracePool, available_cores, can_fork
from viz.attention import label, visible
from viz.views import (ALL_HEADS, CROSS, KINDS, MEAN, TraceArrays, attention_figure, candidates_figure,
                       overview_figure, step_title, translation_figure)

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


def step_number(step: object, steps: int) -> int:
    """A 1-based step within 1..steps from whatever a request sent (a missing one is the first)."""
    try:
        return int(min(max(int(step), 1), steps))
    except (TypeError, ValueError, OverflowError):
        return 1


# ---- callbacks: thin wrappers around model/ and viz/; each returns its outputs by component --------------

def translate(model_name: str, text: str, kind: str, layer: int, head: int | str, model_view: bool = False) -> dict:
    """Trace a translation once; every later view of it reads the stored trace."""
    if model_name not in TRANSLATORS:
        return error_outputs(f"Choose a model: {shown(model_name)} is not loaded. " + load_status())
    try:
        traced = trace_text(model_name, text)
    except InputError as error:
        return error_outputs(str(error))
    trace = to_arrays(traced)
    kinds = trace.available()
    kind = kind if kind in kinds else kinds[-1]
    layers, heads = layer_choices(trace, kind), head_choices(trace, kind)
    layer = layer if layer in [value for _, value in layers] else layers[-1][1]
    head = head if head in [value for _, value in heads] else heads[0][1]
    unknown = [label(t) for t, u in zip(traced.source_tokens, traced.unknown) if u]
    message = "Translated." + (f" Unknown words (read as <unk>): {', '.join(unknown)}." if unknown else "")
    if len(kinds) < len(KINDS):
        message += " This model has no self-attention: only its cross-attention exists to show."
    if traced.target_tokens[-1] != "<eos>":
        message += f" Stopped at the length limit of {len(traced.target_tokens)} tokens."
    return {trace_state: trace, translation: traced.text, status: message, source_view: source_highlights(traced),
            step: step_slider(trace.steps, 1), kind_choice: gr.Radio(choices=kinds, value=kind),
            layer_choice: gr.Dropdown(choices=layers, value=layer), head_choice: gr.Dropdown(choices=heads, value=head),
            **render(trace, kind, layer, head, 1, model_view)}


def error_outputs(message: str) -> dict:
    """Say what went wrong and leave the previous results where they are; the app keeps serving."""
    return {status: message}


def step_slider(steps: int, value: int) -> gr.Slider:
    """A slider over steps 1..steps (Gradio needs minimum < maximum, so one step shows as 1..2, disabled)."""
    return gr.Slider(minimum=1, maximum=max(steps, 2), value=value, step=1, interactive=steps > 1)


def render(trace: TraceArrays | None, kind: str, layer: int, head: int | str, step: int,
           model_view: bool = False) -> dict:
    """Figures and text for one step (1-based, as the slider shows it); the model view only when asked."""
    if trace is None:
        return {status: "Translate a sentence first: there is nothing to show yet."}
    index = step_number(step, trace.steps) - 1
    if kind not in trace.available():
        kind = trace.available()[-1]
    layer = layer if isinstance(layer, int) else 0
    head = head if isinstance(head, int) or head in (MEAN, ALL_HEADS) else MEAN
    prefix = " ".join(trace.target_tokens[:index]) or "(empty)"
    candidates = ", ".join(f"{t} {p:.2f}" for t, p in zip(trace.top_tokens[index], trace.top_probabilities[index]))
    return {attention_plot: attention_figure(trace, kind, layer, head, index),
            candidates_plot: candidates_figure(trace, index),
            probabilities_plot: translation_figure(trace, index),
            step_text: f"{step_title(trace, index)}\nprefix so far: {prefix}\ncandidates: {candidates}",
            overview_plot: overview_figure(trace, kind, index) if model_view else None}


def change_kind(trace: TraceArrays | None, kind: str, layer: int, head: int | str, step: int,
                model_view: bool = False) -> dict:
    """Switching attention kind: the layer/head lists follow that kind's shape."""
    if trace is None:
        return render(None, kind, layer, head, step)
    kind = kind if kind in trace.available() else trace.available()[-1]
    layers, heads = layer_choices(trace, kind), head_choices(trace, kind)
    layer = layer if layer in [value for _, value in layers] else layers[-1][1]
    head = head if head in [value for _, value in heads] else heads[0][1]
    return {layer_choice: gr.Dropdown(choices=layers, value=layer), head_choice: gr.Dropdown(choices=heads, value=head),
            **render(trace, kind, layer, head, step, model_view)}


def move(trace: TraceArrays | None, where: str, kind: str, layer: int, head: int | str, current: int,
         model_view: bool = False) -> dict:
    """First / previous / next / last step, then the views of that step."""
    if trace is None:
        return render(None, kind, layer, head, current)
    current = step_number(current, trace.steps)
    target = {"first": 1, "previous": current - 1, "next": current + 1, "last": trace.steps}[where]
    target = step_number(target, trace.steps)
    return {step: target, **render(trace, kind, layer, head, target, model_view)}


def trace_api(model: str, text: str, force: list[str] | None = None, mask: list[str] | None = None) -> dict:
    """Translate `text` with checkpoint `model`; returns tokens, probabilities and every attention map as lists.

    `force`: target tokens that fix the first steps (spelled as in `target_tokens`); `mask`: heads to switch off,
    named kind.layer.head (kind encoder, decoder or cross; 1-based), e.g. "cross.2.5".
    """
    if not isinstance(model, str) or model not in TRANSLATORS:
        raise gr.Error(f"unknown model {shown(model)}; loaded: {', '.join(TRANSLATORS) or 'none'}")
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


# ---- layout -----------------------------------------------------------------------------------------

class Blocks(gr.Blocks):
    """gr.Blocks whose events answer a malformed request with a message, where Gradio's own answer is an empty error.

    Too few values: the trailing arguments of an API endpoint (its optional ones) arrive as None, which the
    endpoint checks; a UI event names what it takes. A value a component cannot read (a word for the step
    slider, say) is named together with the component. Both hooks are Gradio internals of the pinned version;
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

    @staticmethod
    def _format_processing_error(block_fn, index, block, value, is_input, original_error) -> str:
        expected = block.api_info().get("type", "different value")
        return f"{block.label or block.get_block_name()} takes a {expected}, not {shown(value)}."

    async def preprocess_data(self, block_fn, inputs, state, explicit_call=False):
        try:
            return await super().preprocess_data(block_fn, inputs, state, explicit_call)
        except ComponentProcessingError as error:
            raise gr.Error(str(error)) from None


with Blocks(title="Transformer attention inspector") as demo:
    gr.Markdown("# Transformer attention inspector\n"
                "Translate a sentence, then step through greedy decoding and inspect every layer and head of "
                "encoder self-attention, decoder self-attention and cross-attention.")
    trace_state = gr.State(None, time_to_live=TRACE_TTL_S)
    with gr.Row():
        model_name = gr.Dropdown(model_choices(), value=DEFAULT_MODEL, label="Model", elem_id="model", scale=1)
        example = gr.Dropdown(examples_for(DEFAULT_MODEL), value=None, label="Examples (from the test set)",
                              elem_id="example", scale=2)
    with gr.Row():
        source = gr.Textbox(label="Source sentence", placeholder="Type a sentence and press Enter",
                            lines=1, max_lines=4, elem_id="source", scale=4)
        translate_button = gr.Button("Translate", variant="primary", elem_id="translate", scale=1)
    status = gr.Textbox(value=load_status(), label="Status", interactive=False, elem_id="status")
    with gr.Row():
        translation = gr.Textbox(label="Translation (greedy)", interactive=False, elem_id="translation", scale=3)
        source_view = gr.HighlightedText(label="Source tokens as the model reads them",
                                         color_map={"unknown": "red"}, elem_id="source-tokens", scale=2)
    probabilities_plot = gr.Plot(label="Token probabilities", elem_id="probabilities")

    gr.Markdown("## Step through decoding")
    with gr.Row():
        first = gr.Button("« First", elem_id="first")
        previous = gr.Button("‹ Previous", elem_id="previous")
        following = gr.Button("Next ›", elem_id="next")
        last = gr.Button("Last »", elem_id="last")
    step = gr.Slider(1, 2, value=1, step=1, label="Step", interactive=False, elem_id="step")
    with gr.Row():
        step_text = gr.Textbox(label="This step", lines=3, interactive=False, elem_id="step-text", scale=3)
        candidates_plot = gr.Plot(label="Top candidates", elem_id="candidates", scale=2)

    gr.Markdown("## Attention")
    with gr.Row():
        kind_choice = gr.Radio(list(KINDS), value=CROSS, label="Attention", elem_id="kind")
        layer_choice = gr.Dropdown([("Layer 1", 0)], value=0, label="Layer", elem_id="layer")
        head_choice = gr.Dropdown([(MEAN, MEAN), (ALL_HEADS, ALL_HEADS), ("Head 1", 0)], value=MEAN, label="Head",
                                  elem_id="head")
    attention_plot = gr.Plot(label="Attention heatmap", elem_id="attention")
    model_view = gr.Checkbox(False, label="Model view: every layer x head of this attention at this step",
                             elem_id="model-view")
    overview_plot = gr.Plot(label="All layers x heads", elem_id="overview")

    views = [attention_plot, candidates_plot, probabilities_plot, step_text, overview_plot, status]
    settings = [kind_choice, layer_choice, head_choice, step, model_view]
    translate_inputs = [model_name, source, kind_choice, layer_choice, head_choice, model_view]
    translate_outputs = [trace_state, translation, source_view, step, kind_choice, layer_choice, head_choice, *views]
    # Translations queue for the trace workers in their own group, so step and view changes (a few ms each)
    # never wait behind them.
    trace_queue = dict(concurrency_id="trace", concurrency_limit=TRACE_CONCURRENCY)
    translate_button.click(translate, translate_inputs, translate_outputs, api_name="translate", **trace_queue)
    source.submit(translate, translate_inputs, translate_outputs, api_name="translate_enter", **trace_queue)
    model_name.change(lambda name: gr.Dropdown(choices=examples_for(name), value=None), model_name, example,
                      api_name="model_examples")
    example.input(lambda text: text or "", example, source, api_name="use_example")
    for button, where in ((first, "first"), (previous, "previous"), (following, "next"), (last, "last")):
        button.click(lambda trace, *settings, where=where: move(trace, where, *settings),
                     [trace_state, *settings], [step, *views], api_name=f"step_{where}")
    step.release(render, [trace_state, *settings], views, api_name="step")
    kind_choice.input(change_kind, [trace_state, *settings], [layer_choice, head_choice, *views], api_name="kind")
    for control in (layer_choice, head_choice, model_view):
        control.input(render, [trace_state, *settings], views, api_name=control.elem_id.replace("-", "_"))
    gr.api(trace_api, api_name="trace", **trace_queue)

demo.queue(default_concurrency_limit=VIEW_CONCURRENCY, max_size=64)

if __name__ == "__main__":
    # GRADIO_SERVER_NAME / GRADIO_SERVER_PORT choose the address (a Space sets them).
    demo.launch(state_session_capacity=SESSION_CAPACITY)
