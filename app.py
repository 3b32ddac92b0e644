"""Attention inspector: translate a sentence, step through greedy decoding, look at every layer and head.

    python app.py            # http://127.0.0.1:7860

Layout and event wiring only: model work is in `model/`, figures in `viz/`.
Loaded checkpoints are read-only module globals; each user's trace lives in a `gr.State`, with the decodings
of the sentence they made (branches, heads switched off, beam hypotheses: a `Trail`).
Translation, what-if and view changes (kind, layer, head) go to the server; stepping is a redraw in the
browser (viz/stepping.js) from figures the page already holds. The page sends translations and view changes, the
busiest requests, to direct routes (`POST /direct/<event>`) that skip Gradio's queue but run the same callbacks on
the same per-user state (see `Blocks.direct`).
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

import anyio
import gradio as gr
import numpy as np
import torch
from fastapi import Request, Response
from fastapi.routing import APIRoute
from gradio.blocks import postprocess_update_dict
from gradio.components.api_component import Api
from gradio.routes import ORJSONResponse
from gradio.state_holder import SessionState

from model.align import READINGS, pharaoh_lines
from model.checkpoint import load_all
from model.contributions import ALTI, ROLLOUT, VALUE_NORM, VALUE_NORM_TOGETHER
from model.head_stats import STATISTICS, head_statistics
from model.inspect import FORMATS, encode, trace_record
from model.translator import InputError, TracedTranslation
from model.vocab import CHARS
from model.workers import TracePool, available_cores, can_fork
from viz.attention import label, standalone_html, visible
from viz.views import (ALL_HEADS, CROSS, DECODER, ENCODER, KIND_KEYS, KINDS, MEAN, TraceArrays, attention_figure,
                       comparison_frames, head_key, parse_head_key, translation_frames, view_frames, view_name)
from viz.whatif import (DIFFERS, FORCED, IMPORTANCE_MEASURES, beam_step_rows, comparison_figure, contribution_figure,
                        head_statistics_rows, importance_figure, log_prob_change_figure, n_best_rows,
                        source_share_figure, token_differences)

CHECKPOINT_ROOT = Path(os.environ.get("CHECKPOINTS", Path(__file__).parent / "checkpoints"))
TOP_K = 5
WEIGHTS = "weights"
# What an attention view can show: label -> (key of model/contributions.py's maps, the view's line, unit).
MEASURES = {
    WEIGHTS: (None, "", "weight"),
    "weight × value norm": (VALUE_NORM, "‖α·f(x)‖: weight × value norm (Kobayashi et al. 2020)", "‖α f‖"),
    "rollout": (ROLLOUT, "attention rollout up to this layer (Abnar & Zuidema 2020)", "share"),
    "contributions (ALTI+)": (ALTI, "ALTI+ shares up to this layer, residuals and norms in (Ferrando et al. 2022)",
                              "share"),
}
IMPORTANCE_CHOICES = list(IMPORTANCE_MEASURES)  # what the head-importance heatmap can show
NOTHING_YET = "Translate a sentence first: there is nothing to change yet."
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
# Traces run in this many forked worker processes (0: in the request's thread), each decoding its requests together:
# one per two cores this process may use, as the web server needs the other (on 2 cores, 1 worker served 10.5
# translations/s under benchmarks/load.py, 2 workers 8.0).
TRACE_WORKERS = int(os.environ.get("TRACE_WORKERS", str(max(1, available_cores() // 2)))) if can_fork() else 0
TRACE_POOL = TracePool(TRANSLATORS, TRACE_WORKERS) if TRANSLATORS and TRACE_WORKERS > 0 else None
# Requests handled at once: with workers, enough translations for each worker's batch to fill (their steps are
# shared; TRACE_BATCH per worker), else two in-process; and two view changes.
TRACE_BATCH = int(os.environ.get("TRACE_BATCH", "16"))
TRACE_CONCURRENCY, VIEW_CONCURRENCY = max(TRACE_WORKERS * TRACE_BATCH, 2), 2
DEFAULT_MODEL = "en-de" if "en-de" in TRANSLATORS else next(iter(TRANSLATORS), None)
# The browser's step functions (step, translation frames, view frames) => the step's views: one that redraws
# the plots on the page (a step), one that hands Gradio new figures (a new translation or view).
STEPPING = (Path(__file__).parent / "viz" / "stepping.js").read_text()
STEP_JS, RENDER_JS = (f"(step, translation, view) => {{ const direct = {direct};\n{STEPPING}\n}}"
                      for direct in ("true", "false"))
LINK_PARAMETERS = ("model", "text", "force", "mask", "step", "kind", "layer", "head", "measure", "compare")
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

# A click on a candidate's bar branches there; a click on a head of the importance heatmap opens it. gr.Plot sends
# no clicks to Python: the click fills the text field beside the plot and presses its button, as a user would.
CLICKS_JS = """() => {
  const targets = {candidates: ["#branch-word", "#branch"], importance: ["#open-head", "#open-head-button"]};
  const bind = () => {
    for (const [id, [field, button]] of Object.entries(targets)) {
      const plot = document.querySelector(`#${id} .js-plotly-plot`);
      if (!plot || !plot.on || plot.dataset.clicks) continue;
      plot.dataset.clicks = "bound";
      plot.on("plotly_click", (event) => {
        const value = event.points && event.points[0] && event.points[0].customdata;
        const input = document.querySelector(`${field} textarea, ${field} input`);
        if (typeof value !== "string" || !input) return;
        input.value = value;
        input.dispatchEvent(new Event("input", {bubbles: true}));
        setTimeout(() => document.querySelector(button).click(), 50);
      });
    }
  };
  new MutationObserver(bind).observe(document.body, {childList: true, subtree: true});
}"""
# A browser-side event that sends its inputs to a direct route and returns what it answers. One request of the page
# at a time, in the order they were made, so the last one's answer is what stays on screen, as the user's state has
# it. A refusal shows in the status line, everything else kept.
DIRECT_JS = """async (...data) => {
  const kept = (message) => Array.from({length: %(count)d},
                                      (_, i) => (i === %(status)d ? message : {__type__: "update"}));
  const session = window.__gradio_session_hash__;
  if (!session) return kept("The page is not connected to the server yet: reload it.");
  const earlier = window.directRequests || Promise.resolve();
  let done;
  window.directRequests = new Promise((resolve) => { done = resolve; });
  await earlier;
  document.body.classList.add("direct-busy");
  try {
    const response = await fetch(new URL("direct/%(api_name)s", window.location.href), {
      method: "POST", headers: {"Content-Type": "application/json"},
      body: JSON.stringify({session_hash: session, data})});
    const answer = await response.json();
    return response.ok ? answer.data : kept(answer.error);
  } catch (error) {
    return kept(`The server did not answer (${error.message}). Try again.`);
  } finally {
    document.body.classList.remove("direct-busy");
    done();
  }
}"""


def page_outputs(outputs: list) -> list:
    """An event's outputs that the page holds (a gr.State is kept on the server)."""
    return [output for output in outputs if not output.stateful]


def direct_js(api_name: str, outputs: list) -> str:
    """The page's event for a direct route: `outputs` are the Gradio event's, gr.State included."""
    shown_outputs = page_outputs(outputs)
    return DIRECT_JS % {"count": len(shown_outputs), "status": shown_outputs.index(status), "api_name": api_name}


# The head switches as a layers x heads grid: one row of checkboxes per layer.
GRID = ".head-grid.heads-{n} .wrap {{ display: grid; grid-template-columns: repeat({n}, minmax(0, 1fr)); }}"
CSS = "\n".join([".head-grid .wrap label { padding: 2px 6px; font-size: 0.85em; }",
                 "body.direct-busy #translate { opacity: 0.6; cursor: progress; }"]
                + [GRID.format(n=n) for n in (1, 2, 4, 6, 8, 12, 16)])


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


def to_arrays(traced: TracedTranslation, mask: list[str] | None = None) -> TraceArrays:
    """The per-user state: a trace reduced to numpy arrays and token strings (`mask`: the heads it ran without)."""
    trace = traced.trace
    return TraceArrays(
        source_tokens=traced.source_tokens, decoder_tokens=traced.decoder_input_tokens,
        target_tokens=traced.target_tokens, probabilities=trace.probabilities, top_tokens=traced.top_tokens,
        top_probabilities=trace.top_probabilities, encoder=trace.encoder_attention,
        decoder=trace.decoder_attention, cross=trace.cross_attention, switched_off=frozenset(mask or ()),
        forced=trace.forced)


@dataclass
class Decoding:
    """One decoding of the sentence on screen: the greedy original, a branch, one with heads off, a beam hypothesis."""

    name: str  # as the breadcrumb shows it
    trace: TraceArrays
    text: str  # the translation as text
    force: list[str] = field(default_factory=list)  # the target tokens the user fixed
    mask: list[str] = field(default_factory=list)  # the heads switched off, kind.layer.head
    chosen: int | None = None  # a branch: the step (0-based) whose token the user chose
    by_mask: bool = False  # made by switching heads off: a new mask replaces it rather than following it
    # Every measure's maps (model/contributions.py `measure_maps`), computed the first time one is shown and kept
    # with the decoding in the user's state, so later kind, layer, head or measure changes reuse them.
    measure_maps: dict | None = field(default=None, repr=False)


@dataclass
class Trail:
    """A user's decodings of one sentence, each made from the one before it (original → branch → ...), and which
    one is on screen. Lives in a gr.State."""

    model: str
    source: str
    decodings: list[Decoding]
    shown: int = 0
    compare: tuple[str, TraceArrays] | None = None  # another model's greedy decoding of the sentence, shown beside
    page: dict = field(default_factory=dict)  # what the page's menus hold (see `once`), by component id

    @property
    def current(self) -> Decoding:
        return self.decodings[self.shown]

    def followed_by(self, decoding: Decoding, after: int | None = None) -> Trail:
        """The trail up to decoding `after` (default: the one shown), then `decoding`, shown."""
        after = self.shown if after is None else after
        return replace(self, decodings=self.decodings[:after + 1] + [decoding], shown=after + 1)


def once(trail: Trail | None, component: gr.components.Component, value: object, **props) -> object:
    """A component's new `value`, with its properties `props` (choices, visibility) only where the page does not
    hold them yet.

    Gradio rebuilds a component and its configuration for every property update (~0.5 ms of the web server's
    time each; a translation sent 14), while a value alone costs no such thing. What the page holds is kept with
    the user's trail."""
    if trail is not None and trail.page.get(component._id) == props:
        return value
    if trail is not None:
        trail.page[component._id] = props
    return type(component)(value=value, **props)


def merge(outputs: dict, later: dict) -> None:
    """Put a later callback's outputs into `outputs` (one event that draws twice): a value sent alone after an update
    with properties keeps those properties, which `once` sends only the first time."""
    for component, value in later.items():
        earlier = outputs.get(component)
        if isinstance(earlier, gr.components.Component) and not isinstance(value, gr.components.Component):
            value = type(earlier)(**{**earlier.constructor_args, "value": value})
        outputs[component] = value


def head_choices(trace: TraceArrays, kind: str) -> list[tuple[str, int | str]]:
    """Head dropdown entries for one attention kind: (label, value), the value a head index or MEAN / ALL_HEADS.

    A single-head model (dot-product attention) has nothing to average or lay side by side."""
    heads = [(f"Head {h + 1}", h) for h in range(trace.heads(kind))]
    if len(heads) == 1 and trace.measure:  # a measure of the whole layer (rollout, ALTI)
        return [("Every head, combined", 0)]
    return heads if len(heads) == 1 else [(MEAN, MEAN), (ALL_HEADS, ALL_HEADS)] + heads


def layer_choices(trace: TraceArrays, kind: str) -> list[tuple[str, int]]:
    """Layer dropdown entries for one attention kind (encoder and decoder may differ in depth)."""
    return [(f"Layer {i + 1}", i) for i in range(trace.layers(kind))]


def source_highlights(traced: TracedTranslation) -> list[tuple[str, str | None]]:
    """Source tokens as the model read them, unknown ones marked."""
    return [(visible(token) + " ", "unknown" if unknown else None)
            for token, unknown in zip(traced.source_tokens, traced.unknown)]


def plural(count: int, noun: str) -> str:
    """'1 head', '3 heads'."""
    return f"{count} {noun}{'s' * (count != 1)}"


def shown(value: object, limit: int = 60) -> str:
    """A value from a request, quoted for a message (repr spells out invisible and broken characters), cut short."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


# ---- callbacks: thin wrappers around model/ and viz/; each returns its outputs by component --------------

def translate(model_name: str, text: str, kind: str, layer: int, head: int | str, model_view: bool = False,
              previous: Trail | None = None) -> dict:
    """Trace a translation once and send the browser everything stepping needs; a failure keeps what is shown.

    The head switches and importance heatmap are sent only for a new model (`previous`: the last trail)."""
    if model_name not in TRANSLATORS:
        return {status: f"Choose a model: {shown(model_name)} is not loaded. " + load_status()}
    try:
        traced = trace_text(model_name, text)
    except InputError as error:
        kept = f" The translation on screen is still that of {shown(previous.source)}." if previous else ""
        return {status: str(error) + kept}
    trail = Trail(model_name, text, [Decoding("original", to_arrays(traced), traced.text)],
                  page={} if previous is None else previous.page)
    trace = trail.current.trace
    same_model = previous is not None and previous.model == model_name
    return {**show(trail, 1, kind, layer, head, model_view), **({} if same_model else head_panel(model_name, trace)),
            status: translate_status(traced, trace.available()), source_view: source_highlights(traced),
            masked_translation: None, mask_effect_plot: None, n_best: None, beam_steps: None,
            beam_open: once(trail, beam_open, None, choices=[]), beam_state: None, branch_word: ""}


def show(trail: Trail, at_step: int, kind: str, layer: int, head: int | str, model_view: bool) -> dict:
    """Put the trail's shown decoding on screen at step `at_step` (1-based): its translation, stepping figures and
    views, the breadcrumb, its comparison with the decoding it came from and the heads it ran without."""
    decoding = trail.current
    trace = decoding.trace
    kinds = trace.available()
    kind = kind if kind in kinds else kinds[-1]
    at_step = min(max(int(at_step or 1), 1), trace.steps)
    grids = {grid: sorted(name for name in decoding.mask if name.startswith(KIND_KEYS[grid_kind] + "."))
             for grid, grid_kind in zip(mask_grids, KINDS)}
    return {trail_state: trail, trace_state: trace,
            translation: decoding.text,
            step: once(trail, step, at_step, maximum=max(trace.steps, 2), interactive=trace.steps > 1),
            kind_choice: once(trail, kind_choice, kind, choices=kinds),
            translation_state: {**translation_frames(trace), "link": {"model": trail.model, "text": trail.source,
                                                                      "force": decoding.force, "mask": decoding.mask,
                                                                      "compare": trail.compare and trail.compare[0]}},
            **{button: once(trail, button, button.value, interactive=True) for button in step_buttons},
            breadcrumb: once(trail, breadcrumb, trail.shown,
                             choices=[(d.name, i) for i, d in enumerate(trail.decodings)],
                             visible=len(trail.decodings) > 1),
            source_share_plot: None, contribution_plot: None,  # measured for another decoding: asked for again
            # A new decoding shows its weights; the GRU models have no residual stream for the other measures.
            measure_choice: once(trail, measure_choice, WEIGHTS,
                                 choices=list(MEASURES) if trace.encoder is not None else [WEIGHTS]),
            **comparison_outputs(trail), **grids, **view_outputs(trace, kind, layer, head, model_view, trail)}


def comparison_outputs(trail: Trail) -> dict:
    """The shown decoding beside the one it came from: both token sequences with the differences marked, and
    both per-token probabilities."""
    if trail.shown == 0:
        return {comparison: [("This is the greedy translation. Branch it (click a candidate or type a word) or "
                              "switch heads off to compare.", None)], comparison_plot: None}
    parent, child = trail.decodings[trail.shown - 1], trail.current
    before, after = parent.trace.target_tokens, child.trace.target_tokens
    parent_marks = token_differences(after, before)
    child_marks = token_differences(before, after, child.chosen)
    differing = [{i for i, (_, mark) in enumerate(marks) if mark in (DIFFERS, FORCED)}
                 for marks in (parent_marks, child_marks)]
    return {comparison: [(f"{parent.name}: ", None), *parent_marks, ("\n", None), (f"{child.name}: ", None),
                         *child_marks],
            comparison_plot: comparison_figure([(parent.name, before, parent.trace.probabilities),
                                                (child.name, after, child.trace.probabilities)], differing)}


def head_panel(model_name: str, trace: TraceArrays) -> dict:
    """The head switches of a model's attention kinds (the GRU models have cross-attention only), and its
    head-importance heatmap."""
    kinds = trace.available()
    def switches(kind: str) -> list[tuple[str, str]]:
        return [(f"L{layer + 1} H{head + 1}", head_key(kind, layer, head))
                for layer in range(trace.layers(kind)) for head in range(trace.heads(kind))]

    grids = {grid: gr.CheckboxGroup(choices=switches(kind) if kind in kinds else [], value=[], visible=kind in kinds,
                                    elem_classes=["head-grid", f"heads-{trace.heads(kind) if kind in kinds else 0}"])
             for grid, kind in zip(mask_grids, KINDS)}
    note = ("Tick heads to switch them off: the sentence is translated again without them at once."
            if len(kinds) == len(KINDS) else
            "This model's encoder and decoder are GRUs: they have no self-attention, so only its cross-attention "
            "heads can be switched off.")
    return {**grids, mask_note: note, importance_plot: importance_plot_for(model_name, trace, IMPORTANCE_CHOICES[0]),
            importance_measure: IMPORTANCE_CHOICES[0]}


def importance_plot_for(model_name: str, trace: TraceArrays, measure: str):
    """The heatmap of one measure from the checkpoint's heads.json, or None when it has none."""
    report = TRANSLATORS[model_name].head_report if model_name in TRANSLATORS else {}
    if not report.get("heads") or measure not in IMPORTANCE_MEASURES:
        return None
    shapes = {kind: (trace.layers(kind), trace.heads(kind)) for kind in trace.available()}
    return importance_figure(report["heads"], shapes, measure)


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


def view_outputs(trace: TraceArrays, kind: str, layer: int, head: int | str, model_view: bool,
                 trail: Trail | None = None) -> dict:
    """The layer/head lists of `kind` and the view's figures (with the trail's comparison, if it has one); a choice
    the kind does not have falls back."""
    layers, heads = layer_choices(trace, kind), head_choices(trace, kind)
    layer = layer if layer in [value for _, value in layers] else layers[-1][1]
    head = head if head in [value for _, value in heads] else heads[0][1]
    frames = view_frames(trace, kind, layer, head, bool(model_view), file_stem(trail))
    if trail is not None and trail.compare is not None:  # the weights of both, whatever measure the view shows
        frames["compare"] = comparison_frames([(trail.model, trail.current.trace), trail.compare], kind, layer, head,
                                              file_stem(trail))
    return {layer_choice: once(trail, layer_choice, layer, choices=layers),
            head_choice: once(trail, head_choice, head, choices=heads), view_state: frames}


def file_stem(trail: Trail | None) -> str:
    """The start of a download's file name: the model and the sentence's first words ('en-de_a-dog-runs-in')."""
    if trail is None:
        return "view"
    words = re.findall(r"\w+", trail.source.lower())
    kept = [word for i, word in enumerate(words) if len("-".join(words[:i + 1])) <= 24] or words[:1]
    return f"{trail.model}_{'-'.join(kept)[:24] or 'sentence'}"


def change_view(trace: TraceArrays | None, kind: str, layer: int, head: int | str, model_view: bool = False,
                measure: str | None = None, trail: Trail | None = None) -> dict:
    """A new attention kind, layer, head, model view or measure of the stored trace (the step stays where it is).

    A measure other than the weights is computed when first shown, for the decoding on screen (one teacher-forced
    pass), and kept with it."""
    if trace is None:
        return {status: "Translate a sentence first: there is nothing to show yet."}
    if measure not in (None, WEIGHTS):
        if measure not in MEASURES:
            return {status: f"Unknown measure {shown(measure)}; choose one of: {', '.join(MEASURES)}."}
        if trail is None:
            return {status: NOTHING_YET}
        trace = measured(trail, measure)
        if trace is None:
            return {status: "The GRU models have no residual stream: value norms, rollout and contributions need "
                            "a Transformer; only the weights can be shown."}
    kind = kind if kind in trace.available() else trace.available()[-1]
    return view_outputs(trace, kind, layer, head, model_view, trail)


def view_change(trace: TraceArrays | None, trail: Trail | None, kind: str, layer: int, head: int | str,
                model_view: bool = False, measure: str | None = None) -> dict:
    """`change_view` in the order the view events send their inputs (the user's state first)."""
    return change_view(trace, kind, layer, head, model_view, measure, trail)


def measured(trail: Trail, measure: str) -> TraceArrays | None:
    """The decoding on screen with its attention maps replaced by `measure`'s (None for a GRU model)."""
    decoding = trail.current
    key, what, unit = MEASURES[measure]
    if decoding.measure_maps is None:
        decoding.measure_maps = TRANSLATORS[trail.model].measures(trail.source, decoding.trace.target_tokens,
                                                                  decoding.mask)
    maps = decoding.measure_maps
    if maps is None:
        return None
    arrays = maps[key]
    per_head = key == VALUE_NORM
    together = {kind: maps[VALUE_NORM_TOGETHER][KIND_KEYS[kind]] for kind in KINDS} if per_head else None
    # The weights behind each cell, for the hover: per head, or the heads' mean for a measure of the whole layer.
    raw = {kind: decoding.trace.maps(kind) if per_head else decoding.trace.maps(kind).mean(1, keepdims=True)
           for kind in KINDS}
    return replace(decoding.trace, encoder=arrays["encoder"], decoder=arrays["decoder"], cross=arrays["cross"],
                   measure=what, value_label=unit,
                   scale_max=max(float(a.max()) for a in [*arrays.values(), *(together or {}).values()])
                   if per_head else 1.0, together=together, raw=raw,
                   switched_off=decoding.trace.switched_off if per_head else frozenset())


def switch_model(model_name: str, text: str, kind: str, layer: int, head: int | str, model_view: bool = False) -> dict:
    """A new model: its examples, and the sentence on screen translated again with it. When there is none, or it
    cannot be translated with this model, the views are cleared: nothing of the last model stays usable."""
    outputs = {example: gr.Dropdown(choices=examples_for(model_name), value=None)}
    if (text or "").strip():
        translated = translate(model_name, text, kind, layer, head, model_view)
        if trail_state in translated:
            return {**outputs, **translated}
        return {**outputs, **cleared(), status: f"Model {shown(model_name)} chosen. {translated[status]}"}
    return {**outputs, **cleared(), status: f"Model {shown(model_name)} chosen: type or pick a sentence to translate."}


def cleared() -> dict:
    """Every view of a translation emptied, and what-if with nothing to work on."""
    return {trace_state: None, trail_state: None, translation: "", translation_state: None, view_state: None,
            source_view: None, breadcrumb: gr.Radio(choices=[], value=None, visible=False),
            comparison: None, comparison_plot: None, importance_plot: None, masked_translation: None,
            mask_effect_plot: None, n_best: None, beam_steps: None, beam_state: None, branch_word: "",
            beam_open: gr.Dropdown(choices=[], value=None), mask_note: "Translate a sentence to switch heads off.",
            **{grid: gr.CheckboxGroup(choices=[], value=[], visible=False) for grid in mask_grids}}


def use_example(sentence: str, model_name: str, text: str, kind: str, layer: int, head: int | str,
                model_view: bool = False, previous: Trail | None = None) -> dict:
    """An example picked: put it in the source box and translate it (nothing when it is already what is shown)."""
    if not sentence or (previous is not None and (previous.model, previous.source) == (model_name, sentence)
                        and text == sentence):
        return {source: text if isinstance(text, str) else ""}  # as it is (Gradio needs one output at least)
    return {source: sentence, **translate(model_name, sentence, kind, layer, head, model_view, previous)}


def first_visit(kind: str, layer: int, head: int | str, model_view: bool = False,
                request: gr.Request | None = None) -> dict:
    """On page load: the view of the page's link (`?model=…&text=…`, see `open_link`), or else the default model's
    first example, translated, so a visitor sees what the app does."""
    query = request.query_params if request is not None else {}
    if any(query_values(query, name) for name in LINK_PARAMETERS):
        return open_link(query, model_view)
    sentences = examples_for(DEFAULT_MODEL)
    if not sentences:
        return {status: load_status() or "Type a sentence and press Enter."}
    return {source: sentences[0], example: sentences[0],
            **translate(DEFAULT_MODEL, sentences[0], kind, layer, head, model_view)}


def go_to(trail: Trail | None, index: int, at_step: int, kind: str, layer: int, head: int | str,
          model_view: bool = False) -> dict:
    """The breadcrumb: show another decoding of the trail (the ones after it stay until a new one is made)."""
    if trail is None or not isinstance(index, int) or not 0 <= index < len(trail.decodings):
        return {status: NOTHING_YET}
    trail = replace(trail, shown=index)
    return {**show(trail, at_step, kind, layer, head, model_view), status: f"Showing {trail.current.name}."}


def branch(trail: Trail | None, at_step: int, word: str, kind: str, layer: int, head: int | str,
           model_view: bool = False) -> dict:
    """Make the shown decoding choose `word` at step `at_step` and decode greedily from there: a new branch."""
    if trail is None:
        return {status: NOTHING_YET}
    decoding = trail.current
    word = (word or "").strip() if isinstance(word, str) else ""
    if not word:
        return {status: "Click a candidate in the chart, or type a word to choose at this step, then Branch."}
    t = min(max(int(at_step or 1), 1), decoding.trace.steps) - 1
    if word == decoding.trace.target_tokens[t]:
        return {status: f"Step {t + 1} already chooses \"{word}\": click another candidate or type another word."}
    force = decoding.trace.target_tokens[:t] + [word]
    try:
        traced = trace_text(trail.model, trail.source, force, decoding.mask)
    except InputError as error:
        return {status: str(error)}
    was = decoding.trace.target_tokens[t]
    new = Decoding(f"{word} at step {t + 1}", to_arrays(traced, decoding.mask), traced.text, force, decoding.mask,
                   chosen=t)
    replaced = len(trail.decodings) - trail.shown - 1
    trail = trail.followed_by(new)
    change = float(np.log(new.trace.probabilities).sum() - np.log(decoding.trace.probabilities).sum())
    return {**show(trail, t + 1, kind, layer, head, model_view), branch_word: "",
            status: f"Branch: step {t + 1} chooses \"{word}\" instead of \"{was}\", then greedy decoding goes on. "
                    f"Log-probability {change:+.2f} against {decoding.name}."
                    + (f" It replaces the {plural(replaced, 'decoding')} that followed {decoding.name}." if replaced
                       else "")}


def set_mask(trail: Trail | None, mask: list[str], at_step: int, kind: str, layer: int, head: int | str,
             model_view: bool = False) -> dict:
    """Translate the sentence again with the heads of `mask` switched off, show it beside the decoding it came from,
    and score that decoding's tokens without those heads (teacher-forced): which words depended on them."""
    if trail is None:
        return {status: NOTHING_YET}
    base_index = trail.shown - 1 if trail.current.by_mask else trail.shown
    base = trail.decodings[base_index]
    mask = sorted(set(mask))
    if mask == sorted(base.mask):  # every head the base ran with is on again: back to it
        trail = replace(trail, decodings=trail.decodings[:base_index + 1], shown=base_index)
        return {**show(trail, at_step, kind, layer, head, model_view), masked_translation: None,
                mask_effect_plot: None, status: f"All heads of {base.name} on again."}
    try:
        traced = trace_text(trail.model, trail.source, base.force, mask)
        scored = TRANSLATORS[trail.model].score(trail.source, base.trace.target_tokens, mask)
    except InputError as error:
        return {status: str(error)}
    off = len(set(mask) - set(base.mask))
    new = Decoding(f"{plural(len(mask), 'head')} off", to_arrays(traced, mask), traced.text, base.force, mask,
                   by_mask=True)
    trail = trail.followed_by(new, after=base_index)
    change = scored.log_probabilities - np.log(base.trace.probabilities)
    same = new.trace.target_tokens == base.trace.target_tokens
    return {**show(trail, at_step, kind, layer, head, model_view),
            masked_translation: token_differences(base.trace.target_tokens, new.trace.target_tokens),
            mask_effect_plot: log_prob_change_figure(
                base.trace.target_tokens, change,
                f"each token of {base.name}: log-probability with {plural(off, 'head')} off minus with them on"),
            status: f"{plural(len(mask), 'head')} off: the translation " + ("does not change" if same else "changes")
                    + f"; the log-probability of {base.name}'s tokens changes by {change.sum():+.2f} in all (the "
                    "Switch heads off tab shows each token's change)."}


def mask_from_grids(trail: Trail | None, encoder: list[str], decoder: list[str], cross: list[str], at_step: int,
                    kind: str, layer: int, head: int | str, model_view: bool = False) -> dict:
    """A head ticked or unticked in a grid."""
    return set_mask(trail, [*(encoder or []), *(decoder or []), *(cross or [])], at_step, kind, layer, head,
                    model_view)


def mask_preset(preset: str, trail: Trail | None, at_step: int, kind: str, layer: int, head: int | str,
                model_view: bool = False) -> dict:
    """A preset mask over the heads of the kind in view: its layer in view off, all but the head in view (the other
    kinds' switches stay as they are), or every head on."""
    if trail is None:
        return {status: NOTHING_YET}
    trace = trail.current.trace
    kind = kind if kind in trace.available() else trace.available()[-1]
    layer = min(max(layer if isinstance(layer, int) else 0, 0), trace.layers(kind) - 1)
    names = [head_key(kind, layer, h) for h in range(trace.heads(kind))]
    if preset == "layer":
        mask = sorted(set(trail.current.mask) | set(names))
    elif preset == "all but one":
        if not isinstance(head, int):
            return {status: "Choose one head in the Head list first: every other head of this attention goes off."}
        others = [name for name in trail.current.mask if not name.startswith(KIND_KEYS[kind] + ".")]
        mask = others + [head_key(kind, other_layer, h) for other_layer in range(trace.layers(kind))
                         for h in range(trace.heads(kind)) if (other_layer, h) != (layer, head)]
    else:
        mask = []
    return set_mask(trail, mask, at_step, kind, layer, head, model_view)


def open_head(trace: TraceArrays | None, name: str, model_view: bool = False, trail: Trail | None = None) -> dict:
    """Show one head, named kind.layer.head (a click on the importance heatmap, or typed), in the attention view."""
    if trace is None:
        return {status: NOTHING_YET}
    parsed = parse_head_key(name)
    if parsed is None or parsed[0] not in trace.available() or not (
            0 <= parsed[1] < trace.layers(parsed[0]) and 0 <= parsed[2] < trace.heads(parsed[0])):
        sizes = ", ".join(f"{KIND_KEYS[k]}: {trace.layers(k)} layers x {trace.heads(k)} heads"
                          for k in trace.available())
        return {status: f"No head {shown(name)} in this model ({sizes}): name one as kind.layer.head, 1-based, "
                        "e.g. cross.2.5."}
    kind, layer, head = parsed
    return {kind_choice: kind, **view_outputs(trace, kind, layer, head, model_view, trail),
            status: f"Showing {head_key(kind, layer, head)}."}


def show_importance(trail: Trail | None, measure: str) -> dict:
    """The importance heatmap of another measure."""
    if trail is None:
        return {status: NOTHING_YET}
    return {importance_plot: importance_plot_for(trail.model, trail.current.trace, measure)}


def measure_contributions(trail: Trail | None) -> dict:
    """Where each word of the decoding on screen came from: its ALTI+ source share, and the full map."""
    if trail is None:
        return {status: NOTHING_YET}
    decoding = trail.current
    trace = decoding.trace
    measured = TRANSLATORS[trail.model].contributions(trail.source, trace.target_tokens, decoding.mask)
    if measured is None:
        return {source_share_plot: None, contribution_plot: None,
                status: "This GRU model has no residual stream for ALTI+ to decompose: its cross-attention "
                        "(the Cross-attention view) is what shows where its words look in the source."}
    shares = measured.source_contribution
    return {source_share_plot: source_share_figure(trace.target_tokens, shares),
            contribution_plot: contribution_figure(measured.decoder, trace.target_tokens, trace.source_tokens,
                                                   trace.decoder_tokens),
            status: f"Contributions of {decoding.name}: {shares.mean():.0%} of each word's prediction came from the "
                    f"source on average ({shares.min():.0%} to {shares.max():.0%})."}


def show_head_statistics(trace: TraceArrays | None) -> dict:
    """Every head's statistics on the decoding on screen, as a table (model/head_stats.py)."""
    if trace is None:
        return {status: NOTHING_YET}
    keys = {ENCODER: trace.source_tokens, DECODER: trace.decoder_tokens, CROSS: trace.source_tokens}
    statistics = {kind: head_statistics(trace.maps(kind), keys[kind], kind != CROSS) for kind in trace.available()}
    shapes = {kind: (trace.layers(kind), trace.heads(kind)) for kind in trace.available()}
    return {head_table: head_statistics_rows(statistics, shapes),
            status: f"Statistics of {sum(layers * heads for layers, heads in shapes.values())} heads on this "
                    "decoding: sort the table by any column; type a head's name in *Open a head by name* to see it."}


def read_alignments(trace: TraceArrays | None, reading: str) -> dict:
    """Word alignments of the decoding on screen from every cross-attention head and layer mean, in Pharaoh format
    (source index - target index, 0-based, <eos> left out), read at the step that outputs each word or at the step
    where it is the decoder's input (shift-att)."""
    if trace is None:
        return {status: NOTHING_YET}
    if reading not in READINGS:
        return {status: f"Read alignments at the {' or '.join(READINGS)} step, not {shown(reading)}."}
    cross = trace.cross
    if trace.target_tokens[-1] != "<eos>":  # stopped at the length limit: its last word is read like an <eos>
        cross = cross[:, :, :-1]
    lines = pharaoh_lines(cross, reading)
    width = max(len(name) for name in lines)
    return {alignment_text: "\n".join(f"{name:<{width}}  {links}" for name, links in lines.items()),
            status: f"Alignments of {len(trace.target_tokens) - 1} words, read at the {reading} step, from "
                    f"{len(lines)} heads and layer means."}


def run_beam(trail: Trail | None) -> dict:
    """Beam search of the sentence as evaluation runs it (with the heads of the shown decoding off): the n-best
    list and the beam at every step."""
    if trail is None:
        return {status: NOTHING_YET}
    translator = TRANSLATORS[trail.model]
    mask = trail.current.mask
    greedy_tokens = next((d.trace.target_tokens for d in trail.decodings
                          if not d.force and sorted(d.mask) == sorted(mask)), None)  # the trail's, if it has it
    try:
        traced = translator.beam(trail.source, mask=mask, greedy_tokens=greedy_tokens)
    except InputError as error:
        return {status: str(error)}
    beam = traced.beam
    greedy = translator.to_text([token for token in traced.greedy_tokens if token != "<eos>"])
    texts = [translator.to_text(traced.tokens(h)[:len(h.token_ids)]) for h in beam.n_best]
    rows = n_best_rows([(text, h.score, h.log_probability, len(h.token_ids) + h.finished)
                        for text, h in zip(texts, beam.n_best)], greedy)
    steps = beam_step_rows([[(traced.tokens(h), h.log_probability, h.finished) for h in hypotheses]
                            for hypotheses in beam.steps], traced.greedy_tokens)
    masked = f", {plural(len(mask), 'head')} off" if mask else ""
    ran_from = {"force": trail.current.force, "mask": mask}  # hypotheses open after this decoding
    return {n_best: rows, beam_steps: steps,
            beam_state: {"from": ran_from, "hypotheses": [traced.tokens(h) for h in beam.n_best]},
            beam_open: once(trail, beam_open, None,
                            choices=[(f"#{r}: {text}", r - 1) for r, text in enumerate(texts, start=1)]),
            status: f"Beam search (beam {beam.beam_size}, length penalty {beam.length_penalty}{masked}): "
                    f"{len(beam.n_best)} finished hypotheses in {len(beam.steps)} steps; "
                    + ("the best one is the greedy translation." if texts and texts[0] == greedy else
                       "the best one differs from the greedy translation.")}


def open_hypothesis(trail: Trail | None, beam: dict | None, index: int, kind: str, layer: int, head: int | str,
                    model_view: bool = False) -> dict:
    """Show a beam hypothesis like a trace: its tokens forced, so every step's attention is its teacher-forced one.

    It follows the decoding the beam ran from (replacing a hypothesis opened before), to compare with that."""
    hypotheses = beam["hypotheses"] if beam else []
    if trail is None or not isinstance(index, int) or not 0 <= index < len(hypotheses):
        return {status: "Run the beam search first, then choose one of its hypotheses."}
    mask = beam["from"]["mask"]
    try:
        traced = trace_text(trail.model, trail.source, hypotheses[index], mask)
    except InputError as error:
        return {status: str(error)}
    ran_from = next((i for i, d in enumerate(trail.decodings)
                     if (d.force, d.mask) == (beam["from"]["force"], mask)), trail.shown)
    new = Decoding(f"beam #{index + 1}", to_arrays(traced, mask), traced.text, hypotheses[index], mask)
    return {**show(trail.followed_by(new, after=ran_from), 1, kind, layer, head, model_view),
            beam_open: index,
            status: f"Showing beam hypothesis #{index + 1} step by step, its attention read with its own tokens."}


def select_hypothesis(trail: Trail | None, beam: dict | None, kind: str, layer: int, head: int | str,
                      model_view: bool, selected: gr.SelectData) -> dict:
    """A click on a row of the n-best table."""
    index = selected.index[0] if isinstance(selected.index, (list, tuple)) else selected.index
    return open_hypothesis(trail, beam, index, kind, layer, head, model_view)


# ---- share, export, compare ------------------------------------------------------------------------------

# A link's parameters: kinds and measures by short names.
LINK_KINDS = {key: kind for kind, key in KIND_KEYS.items()}
LINK_MEASURES = {key or WEIGHTS: measure for measure, (key, _, _) in MEASURES.items()}
# "Copy link": the view on screen as a URL (the decoding's model, text, forced tokens and heads off come with the
# translation frames), copied to the clipboard where the browser allows it, and shown to copy by hand.
LINK_JS = f"""(translation, step, kind, layer, head, measure) => {{
  const link = translation && translation.link;
  if (!link) return "Translate a sentence first: there is no view to link to.";
  const kinds = {json.dumps(KIND_KEYS)}, measures = {json.dumps({v: k for k, v in LINK_MEASURES.items()})};
  const heads = {json.dumps({MEAN: "mean", ALL_HEADS: "all"})};
  const params = new URLSearchParams({{model: link.model, text: link.text}});
  for (const token of link.force) params.append("force", token);
  for (const name of link.mask) params.append("mask", name);
  params.set("step", String(step));
  params.set("kind", kinds[kind] || "cross");
  params.set("layer", String(Number(layer) + 1));
  params.set("head", typeof head === "number" ? String(head + 1) : heads[head] || "mean");
  params.set("measure", measures[measure] || "weights");
  if (link.compare) params.set("compare", link.compare);
  const url = `${{window.location.origin}}${{window.location.pathname}}?${{params}}`;
  if (navigator.clipboard && window.isSecureContext) navigator.clipboard.writeText(url).catch(() => {{}});
  return url;
}}"""
# Every plot's toolbar downloads PNG and SVG, named after the view and step (layout.meta.file, set by viz/views.py)
# or else the plot's element id. Plotly is loaded by the first gr.Plot drawn; its defaults apply to every plot.
DOWNLOADS_JS = """() => {
  const name = (gd) => {
    const file = gd.layout && gd.layout.meta && gd.layout.meta.file;
    const step = document.querySelector("#step input[type=number]")?.value || "1";
    return file ? `${file}_step${step}` : (gd.closest("[id]")?.id || "figure");
  };
  const configure = () => {
    const Plotly = window.Plotly;
    if (!Plotly || !Plotly.setPlotConfig) return setTimeout(configure, 200);
    const button = (format, icon) => ({name: `download-${format}`, title: `Download as ${format.toUpperCase()}`,
      icon, click: (gd) => Plotly.downloadImage(gd, {format, filename: name(gd), scale: format === "png" ? 2 : 1})});
    Plotly.setPlotConfig({displaylogo: false, modeBarButtonsToRemove: ["toImage"],
                          modeBarButtonsToAdd: [button("png", Plotly.Icons.camera), button("svg", Plotly.Icons.disk)]});
    for (const gd of document.querySelectorAll(".js-plotly-plot")) Plotly.react(gd, gd.data, gd.layout, {responsive: true});
  };
  configure();
}"""


def query_values(query, name: str) -> list[str]:
    """Every value of a URL parameter (starlette's QueryParams, or a dict of lists in tests)."""
    values = query.getlist(name) if hasattr(query, "getlist") else query.get(name, [])
    return [values] if isinstance(values, str) else list(values)


def open_link(query, model_view: bool = False) -> dict:
    """The view a link describes (model, text, force, mask, step, kind, layer, head, measure, compare): translated
    and opened; whatever the link gets wrong falls back to the default, with a note in the status line."""
    notes = []

    def one(name: str) -> str | None:
        values = query_values(query, name)
        return values[0] if values else None

    def number(name: str) -> int | None:
        value = one(name)
        if value is None:
            return None
        if value.strip().isdigit() and int(value) >= 1:
            return int(value)
        notes.append(f"{name} {shown(value)} is no number from 1 up")
        return None

    model = one("model") or DEFAULT_MODEL
    if model not in TRANSLATORS:
        notes.append(f"there is no model {shown(model)}, so {DEFAULT_MODEL} is used")
        model = DEFAULT_MODEL
    text = one("text")
    kind = LINK_KINDS.get((one("kind") or "cross").lower())
    if kind is None:
        notes.append(f"kind {shown(one('kind'))} is none of {', '.join(LINK_KINDS)}")
        kind = CROSS
    layer, step = number("layer"), number("step")
    head_value = (one("head") or "mean").lower()
    head = {"mean": MEAN, "all": ALL_HEADS}.get(head_value)
    if head is None:
        head = int(head_value) - 1 if head_value.isdigit() and int(head_value) >= 1 else MEAN
        if head == MEAN:
            notes.append(f"head {shown(one('head'))} is no head number, mean or all")
    examples = examples_for(model)
    outputs = translate(model, text, kind, (layer or 1) - 1, head, model_view) if text else {}
    if trail_state not in outputs:
        if text:
            notes.append(f"its text could not be translated ({outputs[status]})")
        if not examples:
            return {status: "; ".join(notes) or load_status()}
        text = examples[0]
        outputs = translate(model, text, kind, (layer or 1) - 1, head, model_view)
    trail, trace = outputs[trail_state], outputs[trail_state].current.trace
    kind = kind if kind in trace.available() else trace.available()[-1]
    if layer is not None and layer > trace.layers(kind):
        notes.append(f"layer {layer} is beyond this attention's {trace.layers(kind)}")
    if isinstance(head, int) and head >= trace.heads(kind):
        notes.append(f"head {head + 1} is beyond this attention's {trace.heads(kind)}")
    force, mask = query_values(query, "force"), query_values(query, "mask")
    if force or mask:
        try:
            traced = trace_text(model, text, force, mask)
            name = "from the link" + (f": {plural(len(force), 'forced token')}" if force else "") + (
                f", {plural(len(mask), 'head')} off" if mask else "")
            trail = trail.followed_by(Decoding(name, to_arrays(traced, mask), traced.text, force, sorted(set(mask)),
                                               chosen=len(force) - 1 if force else None))
        except InputError as error:
            notes.append(f"its forced tokens or heads could not be used ({error})")
    steps = trail.current.trace.steps
    if step is not None and step > steps:
        notes.append(f"step {step} is beyond this translation's {steps}")
    other = one("compare")
    if other is not None:
        compared = compare_trace(trail, other)
        if isinstance(compared, str):
            notes.append(compared)
        else:
            trail = replace(trail, compare=compared)
            outputs[compare_model] = other
    # Out of range: the default view's (layer 1, step 1), as a first visit shows it.
    layer_index = layer - 1 if layer is not None and layer <= trace.layers(kind) else 0
    at_step = step if step is not None and step <= steps else 1
    head = head if not isinstance(head, int) or head < trace.heads(kind) else MEAN
    merge(outputs, show(trail, at_step, kind, layer_index, head, model_view))
    measure = LINK_MEASURES.get(one("measure") or WEIGHTS)
    if measure is None:
        notes.append(f"measure {shown(one('measure'))} is none of {', '.join(LINK_MEASURES)}")
    elif measure != WEIGHTS:
        viewed = change_view(trail.current.trace, kind, layer_index, head, model_view, measure, trail)
        if view_state in viewed:
            merge(outputs, {**viewed, measure_choice: measure})
        else:
            notes.append(viewed[status])
    outputs.update({source: text, example: gr.Dropdown(choices=examples, value=text if text in examples else None),
                    model_name: model})
    said = "Opened the link." + (" Some of it could not be used: " + "; ".join(notes) + "." if notes else "")
    outputs[status] = f"{said} {outputs.get(status, '')}".strip()
    return outputs


def compare_trace(trail: Trail, other: object) -> tuple[str, TraceArrays] | str:
    """Another model's greedy decoding of the trail's sentence, or why there is none."""
    if not isinstance(other, str) or other not in TRANSLATORS:
        return f"there is no model {shown(other)} to compare with"
    mine, theirs = TRANSLATORS[trail.model].src_tokenizer.lang, TRANSLATORS[other].src_tokenizer.lang
    if mine != theirs:
        return f"{other} reads {theirs}, not {mine}: only a model of the same source language can be compared"
    try:
        return other, to_arrays(trace_text(other, trail.source))
    except InputError as error:
        return f"{other} cannot translate this sentence: {error}"


def compare_models(trail: Trail | None, other: str, kind: str, layer: int, head: int | str, model_view: bool = False,
                   measure: str | None = None) -> dict:
    """Translate the sentence on screen with a second checkpoint and show both attentions side by side (with their
    difference where both read the same tokens); stepping moves both."""
    if trail is None:
        return {status: NOTHING_YET}
    compared = compare_trace(trail, other)
    if isinstance(compared, str):
        return {status: compared[0].upper() + compared[1:] + "."}
    trail = replace(trail, compare=compared)
    theirs = compared[1]
    viewed = change_view(trail.current.trace, kind, layer, head, model_view, measure, trail)
    same = theirs.target_tokens == trail.current.trace.target_tokens
    return {**viewed, trail_state: trail,
            status: f"Compared with {other}: " + ("the same translation, so every map has a difference map." if same
                                                  else "a different translation: "
                                                  + " ".join(theirs.target_tokens[:-1]) + ".")}


def export_trace(trail: Trail | None, file_format: str) -> dict:
    """The decoding on screen as a trace file (model/inspect.py's format: JSON or NPZ), with its measures if they
    were computed."""
    if trail is None:
        return {status: NOTHING_YET}
    if file_format not in FORMATS:
        return {status: f"Export as {' or '.join(FORMATS)}, not {shown(file_format)}."}
    decoding, translator = trail.current, TRANSLATORS[trail.model]
    trace = decoding.trace
    record = trace_record(trail.model, translator.model.config.to_dict(), trail.source, decoding.text,
                          source_tokens=trace.source_tokens, target_tokens=trace.target_tokens,
                          top_tokens=trace.top_tokens, probabilities=trace.probabilities,
                          top_probabilities=trace.top_probabilities, encoder_attention=trace.encoder,
                          decoder_attention=trace.decoder, cross_attention=trace.cross, forced=trace.forced,
                          force=decoding.force, mask=decoding.mask, measures=decoding.measure_maps)
    path = Path(tempfile.mkdtemp(prefix="trace-")) / f"{file_stem(trail)}.{file_format}"
    path.write_bytes(encode(record, file_format))
    return {export_file: str(path),
            status: f"Trace of {decoding.name} as {file_format.upper()}: {path.stat().st_size / 1000:,.0f} kB"
                    + ("" if decoding.measure_maps is None else ", with its measures") + "."}


def export_view(trail: Trail | None, at_step: int, kind: str, layer: int, head: int | str,
                measure: str | None = None) -> dict:
    """The attention view on screen, at the step on screen, as a self-contained interactive HTML file."""
    if trail is None:
        return {status: NOTHING_YET}
    trace = trail.current.trace
    if measure not in (None, WEIGHTS) and measure in MEASURES:
        trace = measured(trail, measure) or trace
    kind = kind if kind in trace.available() else trace.available()[-1]
    layer = min(max(layer if isinstance(layer, int) else 0, 0), trace.layers(kind) - 1)
    at_step = min(max(int(at_step or 1), 1), trace.steps)
    figure = attention_figure(trace, kind, layer, head, at_step - 1)
    name = f"{file_stem(trail)}_{view_name(kind, layer, head)}_step{at_step}"
    path = Path(tempfile.mkdtemp(prefix="view-")) / f"{name}.html"
    path.write_text(standalone_html(figure, f"{trail.model}: {trail.source}", name), encoding="utf-8")
    return {export_file: str(path),
            status: f"This view as an interactive HTML file that opens offline: {path.stat().st_size / 1e6:.1f} MB."}


def check_model(model: object) -> None:
    """An API request's model: a loaded checkpoint's name, or a gr.Error listing the loaded ones."""
    if not isinstance(model, str) or model not in TRANSLATORS:
        raise gr.Error(f"unknown model {shown(model)}; loaded: {', '.join(TRANSLATORS) or 'none'}")


def trace_api(model: str, text: str, force: list[str] | None = None, mask: list[str] | None = None,
              contributions: bool | None = None) -> dict:
    """Translate `text` with checkpoint `model`; returns tokens, probabilities and every attention map as lists.

    `force`: target tokens that fix the first steps (spelled as in `target_tokens`); `mask`: heads to switch off,
    named kind.layer.head (kind encoder, decoder or cross; 1-based), e.g. "cross.2.5". `source_contribution`:
    per generated token, the share of its prediction that came from the source (ALTI+; None for a GRU model);
    `contributions` true adds the full ALTI+ maps.
    """
    check_model(model)
    if contributions is not None and not isinstance(contributions, bool):
        raise gr.Error(f"contributions must be true or false, not {shown(contributions)}")
    try:
        traced = trace_text(model, text, force, mask)
        measured = TRANSLATORS[model].contributions(text, traced.target_tokens, mask)
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
            "decoder_attention": rounded(trace.decoder_attention), "cross_attention": rounded(trace.cross_attention),
            "source_contribution": None if measured is None else rounded(measured.source_contribution),
            **({"contributions": None if measured is None else {"encoder": rounded(measured.encoder),
                                                                "decoder": rounded(measured.decoder)}}
               if contributions else {})}


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


def beam_api(model: str, text: str, beam_size: int | None = None, mask: list[str] | None = None) -> dict:
    """Beam search of `text` with checkpoint `model` (its evaluation beam size unless `beam_size` is given; heads of
    `mask` switched off): the n-best list, best first, with length-normalised scores as evaluation ranks them,
    and the beam after every step; `on_greedy_path` marks the hypotheses that are a prefix of the greedy output."""
    check_model(model)
    translator = TRANSLATORS[model]
    try:
        traced = translator.beam(text, beam_size, mask)
    except InputError as error:
        raise gr.Error(str(error)) from None
    beam = traced.beam
    return {"source_tokens": traced.source_tokens, "beam_size": beam.beam_size,
            "length_penalty": beam.length_penalty, "greedy_tokens": traced.greedy_tokens,
            "n_best": [{"tokens": traced.tokens(h), "score": round(h.score, 6),
                        "log_probability": round(h.log_probability, 6),
                        "translation": translator.to_text(traced.tokens(h)[:len(h.token_ids)])} for h in beam.n_best],
            "steps": [[{"tokens": traced.tokens(h), "log_probability": round(h.log_probability, 6),
                        "finished": h.finished,
                        "on_greedy_path": traced.tokens(h) == traced.greedy_tokens[:len(traced.tokens(h))]}
                       for h in hypotheses] for hypotheses in beam.steps],
            "mask": sorted(set(mask or []))}


# ---- layout -----------------------------------------------------------------------------------------

def json_response(content: dict, status_code: int = 200) -> Response:
    """JSON as Gradio encodes it; text holding a lone surrogate (which orjson refuses) escaped as Python's json does."""
    try:
        body = ORJSONResponse._render(content)
    except TypeError:
        body = json.dumps(content, default=ORJSONResponse.default).encode()
    return Response(body, status_code, media_type="application/json")


def frontend_value(state: SessionState, block: gr.components.Component, value: object) -> object:
    """An output value as Gradio's postprocessing sends it to the page, the session's copy of the component updated
    as Gradio updates it (a new value, or new properties such as a menu's choices)."""
    block = state[block._id] if block._id in state else block
    if isinstance(value, gr.components.Component):  # new properties (`once`, a slider's new maximum)
        update = {**value.constructor_args, "__type__": "update"}
        properties = {**block.constructor_args, **update, "render": False}
        for name in ("value", "__type__"):
            properties.pop(name, None)
        state[block._id] = type(block)(**properties)
        state._update_config(block._id)
        sent = postprocess_update_dict(state[block._id], update, postprocess=True)
        if "value" in sent:
            state._update_value_in_config(block._id, sent["value"])
        return sent
    sent = block.postprocess(value)
    sent = sent.model_dump() if hasattr(sent, "model_dump") else sent
    if block._id not in state:
        state[block._id] = block
    state._update_value_in_config(block._id, sent)
    return sent


class Blocks(gr.Blocks):
    """gr.Blocks whose events answer a malformed request with a message, where Gradio's own answer is an empty error,
    and whose busiest events are answered by direct routes as well (below).

    Too few values: the trailing arguments of an API endpoint (its optional ones) arrive as None, which the
    endpoint checks; inputs added to an event after it was published get their `defaults_when_missing`; a UI
    event names what it takes. A slider's value that is no number, or a checkbox group's that is no list, is
    named too. The hook is a Gradio internal of the pinned version; tests/test_http_api.py sends such requests
    as raw HTTP.
    """

    # Inputs added after an endpoint was published, filled in with these values (by block id) when a client
    # sends the values it always sent.
    defaults_when_missing: dict[int, object] = {}

    def validate_inputs(self, block_fn, inputs: list) -> None:
        sent = [block for block in block_fn.inputs if not block.stateful]  # what a client sends values for
        if len(inputs) < len(sent) and all(block._id in self.defaults_when_missing for block in sent[len(inputs):]):
            # Complete the values, then put the user's state where it goes (Gradio fills it in itself).
            values = iter(inputs + [self.defaults_when_missing[block._id] for block in sent[len(inputs):]])
            inputs[:] = [None if block.stateful else next(values) for block in block_fn.inputs]
        missing = block_fn.inputs[len(inputs):]
        if missing and all(isinstance(block, Api) for block in missing):
            inputs.extend(None for _ in missing)
        elif missing:
            names = ", ".join(str(block.label or block.get_block_name()) for block in block_fn.inputs)
            raise gr.Error(f"This request sent {len(inputs)} values; this endpoint takes {len(block_fn.inputs)}: "
                           f"{names}.")
        for block, value in zip(block_fn.inputs, inputs):  # values Gradio itself fails on with no message
            if isinstance(block, gr.Slider) and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise gr.Error(f"{block.label} must be a number, not {shown(value)}.")
            if isinstance(block, gr.CheckboxGroup) and not isinstance(value, list):
                raise gr.Error(f"{block.label} must be a list, not {shown(value)}.")

    # ---- direct routes ----
    # A Gradio event costs the web server ~40 ms of CPU besides the callback itself (the queue and its event stream,
    # a thread hop per output, the request chain): with many users it, not the model, limited throughput. The
    # events named here are answered by `POST /direct/<api_name>` as well: the same callback and inputs, the
    # user's gr.State read from and written to the session's own store (so its ordinary events see it), outputs in
    # the form Gradio sends them. The page calls the route from a browser-side event (`direct_js`).
    direct_events: tuple[str, ...] = ()

    def launch(self, *args, app_kwargs: dict | None = None, **kwargs):
        """Gradio's launch, its web app given the direct route."""
        self.direct_fns = {fn.api_name: fn for fn in self.fns.values() if fn.api_name in self.direct_events}
        self.direct_limiters = {}
        app_kwargs = dict(app_kwargs or {})
        app_kwargs["routes"] = [*app_kwargs.get("routes", []),
                                APIRoute("/direct/{api_name}", self.direct, methods=["POST"], include_in_schema=False)]
        return super().launch(*args, app_kwargs=app_kwargs, **kwargs)

    async def direct(self, api_name: str, request: Request) -> Response:
        """`{"session_hash": ..., "data": [a value per input that is no gr.State]}` -> `{"data": [a value per
        output that is no gr.State]}`, or `{"error": message}` with status 400 (404 for an unknown event)."""
        block_fn = self.direct_fns.get(api_name)
        if block_fn is None:
            return json_response({"error": f"There is no direct route for {shown(api_name)}."}, 404)
        try:
            body = await request.json()
        except ValueError:
            body = None
        if not (isinstance(body, dict) and isinstance(body.get("session_hash"), str)
                and 0 < len(body["session_hash"]) <= 64 and isinstance(body.get("data"), list)):
            return json_response({"error": 'Send JSON: {"session_hash": "<the page\'s session>", "data": [...]}.'}, 400)
        # The event's concurrency group and limit, as its queued form has them (made here: a limiter belongs to the
        # running event loop).
        group = block_fn.concurrency_id
        if group not in self.direct_limiters:
            limit = block_fn.concurrency_limit
            limit = self._queue.default_concurrency_limit if limit == "default" else limit
            self.direct_limiters[group] = anyio.CapacityLimiter(limit or math.inf)
        # Gradio's own store, read in the event loop as Gradio reads it (a session that does not exist yet is made).
        state = self.state_holder[body["session_hash"]]
        try:
            outputs = await anyio.to_thread.run_sync(self.answer_directly, block_fn, state, body["data"],
                                                     limiter=self.direct_limiters[group])
        except gr.Error as error:
            return json_response({"error": error.message}, 400)
        return json_response({"data": outputs})

    def answer_directly(self, block_fn, state: SessionState, sent: list) -> list:
        """Gradio's preprocess, call and postprocess of one event, in this thread, on a session's state."""
        takes = [block for block in block_fn.inputs if not block.stateful]
        inputs = list(sent)
        if len(sent) == len(takes):  # the gr.State's places, as Gradio fills them in
            values = iter(sent)
            inputs = [None if block.stateful else next(values) for block in block_fn.inputs]
        self.validate_inputs(block_fn, inputs)  # completes what older clients leave out, or names what is missing
        if len(inputs) != len(block_fn.inputs):
            raise gr.Error(f"This request sent {len(sent)} values; this endpoint takes {len(takes)}: "
                           + ", ".join(str(block.label or block.get_block_name()) for block in takes) + ".")
        arguments = []
        for block, value in zip(block_fn.inputs, inputs):
            if block.stateful:
                arguments.append(state[block._id])
                continue
            block = state[block._id] if block._id in state else block  # the session's copy (its choices)
            try:
                arguments.append(block.preprocess(value))
            except gr.Error:
                raise
            except Exception:  # a value of the wrong type, which Gradio itself answers with an empty error
                raise gr.Error(f"{block.label or block.get_block_name()} cannot be {shown(value)}.") from None
        returned = block_fn.fn(*arguments)
        outputs = []
        for block in block_fn.outputs:
            if block.stateful:
                if block in returned:
                    state[block._id] = returned[block]
            else:
                outputs.append(frontend_value(state, block, returned[block]) if block in returned else gr.skip())
        return outputs


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
        translation = gr.Textbox(label="Translation", interactive=False, elem_id="translation", scale=3)
        status = gr.Textbox(value=load_status(), label="Status", interactive=False, lines=1, max_lines=3,
                            elem_id="status", scale=2)
    trail_state = gr.State(None, time_to_live=TRACE_TTL_S)
    breadcrumb = gr.Radio([], label="Decodings of this sentence: each made from the one before it (choose one to "
                          "show it)", elem_id="breadcrumb", visible=False)
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
            measure_choice = gr.Radio(list(MEASURES), value=WEIGHTS, label="Show", elem_id="measure")
            with gr.Row():
                layer_choice = gr.Dropdown([("Layer 1", 0)], value=0, label="Layer", elem_id="layer", min_width=100)
                head_choice = gr.Dropdown([(MEAN, MEAN), (ALL_HEADS, ALL_HEADS), ("Head 1", 0)], value=MEAN,
                                          label="Head", elem_id="head", min_width=100)
            with gr.Row(equal_height=True):
                head_name_box = gr.Textbox(label="Open a head by name", placeholder="kind.layer.head, e.g. cross.2.5",
                                           elem_id="open-head", scale=3, min_width=120)
                open_head_button = gr.Button("Open", elem_id="open-head-button", scale=1, min_width=60)
    with gr.Accordion("Model view: every layer x head of this attention at this step", open=False) as model_view_panel:
        model_view = gr.Checkbox(False, label="Show the model view", elem_id="model-view")
        overview_plot = gr.Plot(show_label=False, elem_id="overview")
    with gr.Row():
        source_view = gr.HighlightedText(label="Source tokens as the model reads them", color_map={"unknown": "red"},
                                         elem_id="source-tokens", scale=2)
        probabilities_plot = gr.Plot(show_label=False, elem_id="probabilities", scale=3)

    # What if: each tab changes the decoding and puts the result on the screen above, beside where it came from.
    with gr.Tabs(elem_id="what-if"):
        with gr.Tab("Branch and compare", elem_id="branch-tab"):
            gr.Markdown("Make the model choose another word at the step on screen: **click a candidate** in the "
                        "chart above, or type a word. Greedy decoding goes on from there; the branch is stepped "
                        "and inspected like the original, and can be branched again.")
            with gr.Row(equal_height=True):
                branch_word = gr.Textbox(label="Word to choose at this step", placeholder="a word of the target "
                                         "vocabulary, then Enter", elem_id="branch-word", scale=3)
                branch_button = gr.Button("Branch here", elem_id="branch", scale=1, min_width=100)
            comparison = gr.HighlightedText(label="Compared with the decoding it came from",
                                            color_map={DIFFERS: "red", FORCED: "orange"}, show_legend=True,
                                            show_inline_category=False, elem_id="comparison")
            comparison_plot = gr.Plot(show_label=False, elem_id="comparison-plot")
        with gr.Tab("Switch heads off", elem_id="heads-tab"):
            mask_note = gr.Markdown("Tick heads to switch them off.")
            with gr.Row():
                with gr.Column(scale=3, min_width=320):
                    mask_grids = [gr.CheckboxGroup([], label=f"{kind}: heads off", elem_id=f"mask-{KIND_KEYS[kind]}",
                                                   elem_classes=["head-grid"]) for kind in KINDS]
                    with gr.Row():
                        mask_layer = gr.Button("Switch off the layer in view", size="sm", elem_id="mask-layer")
                        mask_all_but = gr.Button("Of this attention, only the head in view on", size="sm",
                                                 elem_id="mask-all-but")
                        mask_reset = gr.Button("All heads on", size="sm", elem_id="mask-reset")
                with gr.Column(scale=2, min_width=300):
                    importance_measure = gr.Radio(IMPORTANCE_CHOICES, value=IMPORTANCE_CHOICES[0],
                                                  label="Which heads matter and what they do (model/heads.py, "
                                                  "val split)",
                                                  elem_id="importance-measure")
                    importance_plot = gr.Plot(show_label=False, elem_id="importance")
            masked_translation = gr.HighlightedText(label="Translated with those heads off (words that differ in red)",
                                                    color_map={DIFFERS: "red"}, show_inline_category=False,
                                                    elem_id="masked-translation")
            mask_effect_plot = gr.Plot(show_label=False, elem_id="mask-effect")
        with gr.Tab("Beam search", elem_id="beam-tab"):
            # The n-best hypotheses' tokens, and the force and mask of the decoding the beam ran from.
            beam_state = gr.State(None, time_to_live=TRACE_TTL_S)
            with gr.Row(equal_height=True):
                beam_button = gr.Button("Run beam search", variant="primary", elem_id="beam", scale=1, min_width=140)
                beam_open = gr.Dropdown([], value=None, label="Open a hypothesis step by step", elem_id="beam-open",
                                        scale=3)
            n_best = gr.Dataframe(headers=["rank", "translation", "score", "log-probability", "tokens", "greedy"],
                                  label="n-best list, best first (score: log-probability / length, as evaluation "
                                  "ranks them); click a row to open it", interactive=False, elem_id="n-best")
            beam_steps = gr.Dataframe(headers=["step", "rank", "hypothesis", "log-probability", "finished",
                                               "greedy path"], label="The beam after every step",
                                      interactive=False, max_height=420, elem_id="beam-steps")

        with gr.Tab("Head statistics", elem_id="statistics-tab"):
            gr.Markdown("What each head does on the decoding on screen: the entropy of its weights, its confidence "
                        "(mean largest weight, Voita et al. 2019), the weight it parks on `<eos>` and on punctuation, "
                        "and for self-attention the mean offset of the key it attends most (−1: the previous "
                        "token). The same over the whole val split is in *Switch heads off*, as a heatmap.")
            statistics_button = gr.Button("Measure every head on this decoding", variant="primary",
                                          elem_id="head-statistics")
            head_table = gr.Dataframe(headers=["head", *(name.replace("_", " ") for name in STATISTICS)],
                                      label="; ".join(f"{name.replace('_', ' ')}: {what}"
                                                      for name, what in STATISTICS.items()),
                                      interactive=False, max_height=480, elem_id="head-table")
            with gr.Row(equal_height=True):
                alignment_reading = gr.Radio(list(READINGS), value=READINGS[0], elem_id="alignment-reading",
                                             label="Word alignments from cross-attention, read at the step that "
                                             "outputs each word, or where it is the decoder's input (shift-att)",
                                             scale=3)
                alignment_button = gr.Button("Read word alignments", elem_id="alignments", scale=1)
            alignment_text = gr.Textbox(label="Pharaoh format: source index-target index, 0-based, per head and "
                                        "layer mean (python -m model.align computes their AER against a gold file)",
                                        lines=8, max_lines=30, interactive=False, buttons=["copy"],
                                        elem_id="alignment-text")
        with gr.Tab("Compare models", elem_id="compare-tab"):
            gr.Markdown("Translate the sentence with a second checkpoint of the same source language and see both "
                        "attentions side by side at the same step (the kind, layer and head chosen above, where the "
                        "second has them), with their difference where both read the same tokens. Stepping moves "
                        "both.")
            with gr.Row(equal_height=True):
                compare_model = gr.Dropdown(model_choices(), value=None, label="Second model", elem_id="compare-model",
                                            scale=3)
                compare_button = gr.Button("Compare", variant="primary", elem_id="compare", scale=1, min_width=100)
            compare_plot = gr.Plot(show_label=False, elem_id="compare-plot")
        with gr.Tab("Share and export", elem_id="export-tab"):
            gr.Markdown("A link opens exactly this view: model, sentence, branch, heads off, step, attention, layer, "
                        "head, measure and comparison. Every plot's toolbar (hover it) downloads PNG and SVG.")
            with gr.Row(equal_height=True):
                link_button = gr.Button("Copy link", elem_id="copy-link", scale=1, min_width=100)
                link_box = gr.Textbox(label="Link to this view", interactive=False, buttons=["copy"], elem_id="link",
                                      scale=5)
            with gr.Row():
                export_json = gr.Button("Download trace (JSON)", elem_id="export-json")
                export_npz = gr.Button("Download trace (NPZ)", elem_id="export-npz")
                export_html = gr.Button("Download view as HTML", elem_id="export-html")
            export_file = gr.File(label="Your file: the whole decoding on screen (tokens, probabilities, top-k, every "
                                  "attention map, measures once shown; model/inspect.py `load_trace` reads it back), "
                                  "or the view as an interactive page", interactive=False, elem_id="export-file")
        with gr.Tab("Where each word came from", elem_id="sources-tab"):
            gr.Markdown("How much of each word's prediction came from the source sentence and how much from the "
                        "translation so far (ALTI+, Ferrando et al. 2022): every layer's attention, residual "
                        "connections and layer norms decomposed token by token, not just attention weights. A word "
                        "that owes little to the source is a sign of hallucination (Dale et al. 2023).")
            contributions_button = gr.Button("Measure where each word came from", variant="primary",
                                             elem_id="contributions")
            source_share_plot = gr.Plot(show_label=False, elem_id="source-share")
            contribution_plot = gr.Plot(show_label=False, elem_id="contribution-map")

    views = [attention_plot, candidates_plot, probabilities_plot, step_text, overview_plot, compare_plot]
    settings = [kind_choice, layer_choice, head_choice, model_view]
    # Everything that shows one decoding (`show`), and what a new translation resets; the API's /translate
    # answers in this order (its first values as before the what-if outputs existed).
    decoding_outputs = [trace_state, translation, status, step, kind_choice, layer_choice, head_choice,
                        translation_state, view_state, *step_buttons, trail_state, breadcrumb, comparison,
                        comparison_plot, *mask_grids, source_share_plot, contribution_plot, measure_choice]
    translate_outputs = [*decoding_outputs[:3], source_view, *decoding_outputs[3:], mask_note, importance_measure,
                         importance_plot, masked_translation, mask_effect_plot, n_best, beam_steps, beam_open,
                         beam_state, branch_word]
    # Model work queues for the trace workers in its own group, so view changes (a few ms each) never wait
    # behind it.
    trace_queue = dict(concurrency_id="trace", concurrency_limit=TRACE_CONCURRENCY)
    # Translations and view changes, the page's busiest requests, go to the direct routes (`Blocks.direct`); their
    # Gradio endpoints, which the direct routes answer as, stay for API clients on a trigger the page never shows.
    api_only = gr.Button(visible=False, elem_id="api-only")
    for api_name in ("translate", "translate_enter"):
        api_only.click(translate, [model_name, source, *settings, trail_state], translate_outputs, api_name=api_name,
                       **trace_queue)
    for trigger in (translate_button.click, source.submit):
        trigger(None, [model_name, source, *settings], page_outputs(translate_outputs),
                js=direct_js("translate", translate_outputs))
    model_name.input(switch_model, [model_name, source, *settings], [example, *translate_outputs],
                      api_name="switch_model", **trace_queue)
    example.input(use_example, [example, model_name, source, *settings, trail_state], [source, *translate_outputs],
                  api_name="use_example", **trace_queue)
    # Typing a sentence of one's own leaves the examples (so closing their list never brings one back).
    source.input(None, None, example, js="() => null")
    # A link may open at a later step: once every output is in place, draw the views at the slider's step (the
    # view's own change event can run before the slider's new value has arrived).
    demo.load(first_visit, settings, [source, example, *translate_outputs, model_name, compare_model],
              api_name="first_visit",
              **trace_queue).then(None, [step, translation_state, view_state], views, js=RENDER_JS)
    demo.load(None, js=DOWNLOADS_JS)
    demo.load(None, js=KEYS_JS)
    demo.load(None, js=CLICKS_JS)

    # Stepping: the buttons move the slider, and every change of the slider (buttons, drag, keyboard, its number
    # box) redraws the step in the browser; new figures (a translation, a view change) are drawn by Gradio.
    for button, move in ((first, "() => 1"), (previous, "(s) => Math.max(1, s - 1)"),
                         (following, "(s, f) => (f ? Math.min(f.steps, s + 1) : s)"),
                         (last, "(s, f) => (f ? f.steps : s)")):
        button.click(None, [step, translation_state], step, js=move)
    step.change(None, [step, translation_state, view_state], step_text, js=STEP_JS)
    view_state.change(None, [step, translation_state, view_state], views, js=RENDER_JS)
    model_view_panel.expand(None, [step, translation_state, view_state], views, js=RENDER_JS)

    demo.defaults_when_missing[measure_choice._id] = WEIGHTS
    view_change_outputs = [layer_choice, head_choice, view_state, status]
    view_events = [control.elem_id.replace("-", "_") for control in [*settings, measure_choice]]
    for control, api_name in zip([*settings, measure_choice], view_events):
        # A view change reads the user's stored trace (a few ms); through the API, answered outside the queue.
        api_only.click(view_change, [trace_state, trail_state, *settings, measure_choice], view_change_outputs,
                       api_name=api_name, queue=False)
        control.input(None, [*settings, measure_choice], view_change_outputs,
                      js=direct_js(api_name, view_change_outputs))
    demo.direct_events = ("translate", *view_events)

    # What if: branch, switch heads off, open a head, beam search.
    for trigger in (branch_button.click, branch_word.submit):
        trigger(branch, [trail_state, step, branch_word, *settings], [*decoding_outputs, branch_word],
                api_name="branch" if trigger == branch_button.click else "branch_enter", **trace_queue)
    breadcrumb.input(go_to, [trail_state, breadcrumb, step, *settings], decoding_outputs, api_name="breadcrumb")
    mask_outputs = [*decoding_outputs, masked_translation, mask_effect_plot]
    for grid in mask_grids:
        grid.input(mask_from_grids, [trail_state, *mask_grids, step, *settings], mask_outputs,
                   api_name=grid.elem_id.replace("-", "_"), **trace_queue)
    for button, preset in ((mask_layer, "layer"), (mask_all_but, "all but one"), (mask_reset, "none")):
        button.click(partial(mask_preset, preset), [trail_state, step, *settings], mask_outputs,
                     api_name=button.elem_id.replace("-", "_"), **trace_queue)
    for trigger in (open_head_button.click, head_name_box.submit):
        trigger(open_head, [trace_state, head_name_box, model_view, trail_state],
                [kind_choice, layer_choice, head_choice, view_state, status],
                api_name="open_head" if trigger == open_head_button.click else "open_head_enter")
    importance_measure.input(show_importance, [trail_state, importance_measure], [importance_plot, status],
                             api_name="importance_measure")
    beam_button.click(run_beam, trail_state, [n_best, beam_steps, beam_state, beam_open, status], api_name="beam_view",
                      **trace_queue)
    beam_open.input(open_hypothesis, [trail_state, beam_state, beam_open, *settings], [*decoding_outputs, beam_open],
                    api_name="open_hypothesis", **trace_queue)
    # A row click carries Gradio's own event data, which an API call cannot send: /open_hypothesis is the API's.
    n_best.select(select_hypothesis, [trail_state, beam_state, *settings], [*decoding_outputs, beam_open],
                  api_visibility="private", **trace_queue)

    statistics_button.click(show_head_statistics, trace_state, [head_table, status], api_name="head_statistics")
    alignment_button.click(read_alignments, [trace_state, alignment_reading], [alignment_text, status],
                           api_name="alignments")
    contributions_button.click(measure_contributions, trail_state, [source_share_plot, contribution_plot, status],
                               api_name="contributions_view", **trace_queue)

    compare_button.click(compare_models, [trail_state, compare_model, *settings, measure_choice],
                         [layer_choice, head_choice, view_state, status, trail_state], api_name="compare", **trace_queue)
    link_button.click(None, [translation_state, step, kind_choice, layer_choice, head_choice, measure_choice], link_box,
                      js=LINK_JS)
    for button, file_format in ((export_json, "json"), (export_npz, "npz")):
        button.click(partial(export_trace, file_format=file_format), trail_state, [export_file, status],
                     api_name=button.elem_id.replace("-", "_"))
    export_html.click(export_view, [trail_state, step, kind_choice, layer_choice, head_choice, measure_choice],
                      [export_file, status], api_name="export_html")

    gr.api(trace_api, api_name="trace", **trace_queue)
    gr.api(score_api, api_name="score", **trace_queue)  # one teacher-forced pass, in this process
    gr.api(beam_api, api_name="beam", **trace_queue)

demo.queue(default_concurrency_limit=VIEW_CONCURRENCY, max_size=64)

if __name__ == "__main__":
    # GRADIO_SERVER_NAME / GRADIO_SERVER_PORT choose the address (a Space sets them).
    demo.launch(state_session_capacity=SESSION_CAPACITY, css=CSS)
