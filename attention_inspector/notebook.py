"""Views in a notebook: the page's core view (translation, status, whether it rests on its source, the step bar,
the heatmap, the step's line and its candidates; kind, layer and head menus) inline in Jupyter, Colab or VS Code, or
saved as one HTML file that opens offline. No server: the page's own scripts (ui/static/core.js, figures.js,
step.js) draw it from one value, and ui/static/notebook.js stands in for Gradio.

    import attention_inspector as ai

    model = ai.load("en-de")
    ai.show(model, "A dog runs in the park.")                 # step with ←/→ or the slider; kind, layer, head
    ai.head_view(model, "A dog runs in the park.", layer=2)   # every head of a layer side by side
    ai.model_view(model, "A dog runs in the park.")           # every layer x head
    ai.neuron_view(model, "A dog runs.", "cross", 2, 3)       # the query and key vectors behind a head's row
    ai.show_trace("trace.json")                               # a trace file, or what model.trace(...) answers
    ai.show(model, "A dog runs.").write_html("view.html")     # one file, plotly.js inside

Layers and heads count from 1, as the page and the JSON API name them. A view holds the figures of every layer of
every kind (each head, their mean, all side by side, and every layer x head) up to `FIGURES` of them; a larger model's
holds the layer it opens on (`layers=[...]` chooses others), and its menus say which layers it holds. Its plain text
(`repr`, a REPL, a notebook's text/plain) is a few lines saying what it shows, not the figures.
"""

from __future__ import annotations

import base64
import gzip
import html
import json
import re
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import plotly

from attention_inspector.model.explain.detachment import Detachment, ScoredDetachment
from attention_inspector.model.keys import ALL_HEADS, CROSS, ENCODER, KIND_LABELS, MEAN, choices
from attention_inspector.model.serving.inspect import load_trace
from attention_inspector.model.text.words import BPE, PIECES, SENTENCEPIECE, WHOLE, WORDS
from attention_inspector.viz.views import TraceArrays, translation_frames, view_frames

with warnings.catch_warnings():
    # The page's parts import Gradio, which imports huggingface_hub's tqdm.auto: in a kernel without ipywidgets that
    # warns "IProgress not found" in a red box, about progress bars the views never draw.
    warnings.filterwarnings("ignore", message="IProgress not found")
    from attention_inspector.ui.operations import drawn, head_menu, set_mask, translate
    from attention_inspector.ui.plots import CORE_TEMPLATE, PLOTLY_JS, STATIC
    from attention_inspector.ui.neurons import neuron_part, with_neuron
    from attention_inspector.ui.omissions import find_omissions
    from attention_inspector.ui.render import detachment_part, file_stem, scored_part
    from attention_inspector.ui.session import Neuron, Session, View

FIGURES = 200  # the most figures a view holds of every layer; a larger model's holds its chosen layers
FRAME_PX = 760  # a view's height in a notebook before its page has drawn (then as tall as what it draws)
CONTROLS = """<div class="notebook-controls">
<div class="step-bar"><button id="first" type="button" title="First step (Home)">&#xAB;</button>
<button id="previous" type="button" title="Previous step (&#x2190;)">&#x2039; Prev</button>
<input id="step" type="range" min="1" step="1" aria-label="Step">
<button id="next" type="button" title="Next step (&#x2192;)">Next &#x203A;</button>
<button id="last" type="button" title="Last step (End)">&#xBB;</button><span id="step-number"></span></div>
<label>Attention <select id="kind"></select></label><label>Layer <select id="layer"></select></label>
<label>Head <select id="head"></select></label>
<label><input id="model-view" type="checkbox"> Every layer &#xD7; head</label>
<p id="notebook-note" class="notebook-note"></p></div>"""


@dataclass(frozen=True, repr=False)
class NotebookView:
    """One view, drawn inline by a notebook (`_repr_html_`) or written as a page (`to_html`, `write_html`); its
    plain text (`repr`, a REPL, a notebook's text/plain beside the HTML) is `summary`, a few lines saying what it
    shows, not its data.

    `value` is what the page draws (ui/static/notebook.js says its parts); `include_plotlyjs` True puts plotly.js
    inside the page (it opens offline), "cdn" loads it from plotly's CDN (a smaller file, online only)."""

    value: dict
    title: str
    include_plotlyjs: bool | str = True
    summary: str = "<attention_inspector view>"

    def __repr__(self) -> str:
        return self.summary

    def _repr_pretty_(self, printer, cycle: bool) -> None:
        """IPython's plain text of the view (a REPL's, and a notebook's text/plain): its summary."""
        printer.text(self.summary)

    def to_html(self) -> str:
        """The view as a whole HTML page."""
        static = {name: (STATIC / name).read_text() for name in ("style.css", "notebook.css", "figures.js",
                                                                  "core.js", "step.js", "notebook.js")}
        packed = base64.b64encode(gzip.compress(json.dumps(self.value).encode(), mtime=0)).decode()
        return "".join([
            '<!doctype html><html lang="en"><head><meta charset="utf-8">',
            f"<title>{html.escape(self.title)}</title>",
            f"<style>{static['style.css']}{static['notebook.css']}</style>", self._plotly(),
            f"<script>{static['figures.js']}</script></head><body>",
            f'<div id="core">{CORE_TEMPLATE.replace("@children", CONTROLS)}</div>',
            f'<script type="application/octet-stream" id="inspector-value">{packed}</script>',
            f"<script>const coreView = (element, props, watch) => {{\n{static['core.js']}\n}};\n",
            f"const stepTo = {static['step.js']};\n{static['notebook.js']}</script></body></html>"])

    def write_html(self, path: str | Path) -> Path:
        """The view as a page in the file `path`, which opens offline in any browser."""
        path = Path(path)
        path.write_text(self.to_html(), encoding="utf-8")
        return path

    def _repr_html_(self) -> str:
        """The view in a notebook: its page in a frame of its own (two views never share a step)."""
        return (f'<iframe srcdoc="{html.escape(self.to_html(), quote=True)}" title="{html.escape(self.title)}" '
                f'style="width: 100%; height: {FRAME_PX}px; border: 0;"></iframe>')

    def _plotly(self) -> str:
        if self.include_plotlyjs == "cdn":
            return f'<script src="https://cdn.plot.ly/plotly-{plotly.offline.get_plotlyjs_version()}.min.js"></script>'
        if self.include_plotlyjs is True:
            return f"<script>{PLOTLY_JS.read_text(encoding='utf-8')}</script>"
        raise ValueError(f"include_plotlyjs must be True or 'cdn', not {self.include_plotlyjs!r}")


def show(model, text: str, *, kind: str = CROSS, layer: int | None = None, head: int | str | None = None,
         step: int | None = None, units: str = PIECES, mask: list[str] | None = None, src_lang: str | None = None,
         tgt_lang: str | None = None, model_view: bool = False, layers: list[int] | None = None,
         include_plotlyjs: bool | str = True) -> NotebookView:
    """The greedy translation of `text` by `model` (what `attention_inspector.load` gives, or a name or folder it
    takes) in the page's core view, opened on `kind` ("encoder", "decoder", "cross"), `layer` and `head` (from 1,
    or "mean" or "all"; default: the head the page opens on), at `step` (from 1), in `units` ("pieces" or
    "words"), with the heads of `mask` switched off (["cross.2.5", ...]), every layer x head with `model_view`.
    A ValueError says what is wrong with an argument, as the page would."""
    from attention_inspector.api import Model, load

    model = model if isinstance(model, Model) else load(model)
    session, said = _session(model, text, kind, layer, head, step, units, mask, src_lang, tgt_lang)
    trace, _, _ = drawn(session)
    return _view(trace, session.current.text, said, detachment_part(session), session.view, model_view, layers,
                 file_stem(session), model.name, text, include_plotlyjs)


def neuron_view(model, text: str, kind: str = CROSS, layer: int = 1, head: int = 1, query: int | None = None, *,
                key: int | None = None, units: str = PIECES, mask: list[str] | None = None,
                src_lang: str | None = None, tgt_lang: str | None = None,
                include_plotlyjs: bool | str = True) -> NotebookView:
    """Why head `head` of `layer` of `kind` (from 1) weighs its keys as it does: the page's neuron view beside the
    head's heatmap (`show`), the query and key vectors behind the heatmap's row `query` (0-based, as `/neuron`: a
    source token for the encoder; a step for the decoder and cross-attention, which stepping then moves; default:
    the step the view opens on, the first source token), its dimensions sorted by key `key`'s score (0-based;
    default: the heaviest key). The panel stays on this head whatever the menus show. Arguments as `show`'s."""
    from attention_inspector.api import Model, load

    model = model if isinstance(model, Model) else load(model)
    if isinstance(head, str) or head is None:
        raise ValueError(f"head is one head, counted from 1, not {head!r}: the neuron view shows a single head")
    session, said = _session(model, text, kind, layer, head, None, units, mask, src_lang, tgt_lang)
    rows = len(session.trace.source_tokens) if kind == ENCODER else session.trace.steps
    query = (0 if kind == ENCODER else session.view.step - 1) if query is None else query
    if isinstance(query, bool) or not isinstance(query, int) or not 0 <= query < rows:
        raise ValueError(f"query is a row of the heatmap, from 0 to {rows - 1}, not {query!r}")
    if kind != ENCODER:
        session = session.with_view(replace(session.view, step=query + 1))
    session = with_neuron(model.services, replace(session, neuron=Neuron(query, key)))
    trace, _, _ = drawn(session)
    row = (trace.source_tokens if kind == ENCODER else trace.decoder_tokens)[query]
    shown = _view(trace, session.current.text, said, detachment_part(session), session.view, False, None,
                  file_stem(session), model.name, text, include_plotlyjs,
                  what=("neuron view", f"{kind}.{layer}.{head}, query {query} ({json.dumps(row, ensure_ascii=False)}) "
                                       "beside its heatmap"))
    shown.value["core"]["neuron"] = neuron_part(session)
    return shown


def _session(model, text: str, kind: str, layer: int | None, head: int | str | None, step: int | None, units: str,
             mask: list[str] | None, src_lang: str | None, tgt_lang: str | None) -> tuple[Session, str]:
    """The page's session of `text` translated by `model` (a `Model`) in the view asked for, and its status line; a
    ValueError says what is wrong with an argument, as the page would."""
    services = model.services
    session, said = translate(services, None, model.name, text, src_lang=src_lang, tgt_lang=tgt_lang)
    if session is None:
        raise ValueError(said)
    if mask:
        session, said = set_mask(services, session, list(mask))
        if not session.current.mask:
            raise ValueError(said)
    session, _ = find_omissions(services, session)  # the verdict, as the page asks for it once a decoding is drawn
    return session.with_view(_chosen(session.trace, session.view, kind, layer, head, step, units)), said


def head_view(model, text: str, *, layer: int | None = None, kind: str = CROSS, **options) -> NotebookView:
    """Every head of one layer side by side (`show` with head "all"), stepping through the decoding."""
    return show(model, text, kind=kind, layer=layer, head=ALL_HEADS, **options)


def model_view(model, text: str, *, kind: str = CROSS, **options) -> NotebookView:
    """Every layer x head of one kind of attention at once (`show` with `model_view`), stepping through the
    decoding."""
    return show(model, text, kind=kind, model_view=True, **options)


def show_trace(trace, *, kind: str = CROSS, layer: int | None = None, head: int | str | None = None, step: int = 1,
               units: str = PIECES, model_view: bool = False, layers: list[int] | None = None,
               include_plotlyjs: bool | str = True) -> NotebookView:
    """A trace in the core view: a trace file the page exported or model/serving/inspect.py wrote (its path, or
    what `load_trace` read from it), or what `Model.trace` (the JSON API's /trace) answered, in pieces. Opens on
    `kind`, `layer` (default the last), `head` and `step` as `show` does."""
    record = load_trace(trace) if isinstance(trace, (str, Path)) else trace
    if not isinstance(record, dict) or "cross_attention" not in record:
        raise ValueError("show_trace takes a trace file, what load_trace read from one, or what Model.trace "
                         f"answered, not {type(trace).__name__}")
    if record.get("units", PIECES) == WORDS and "words" not in record:
        raise ValueError("This trace's maps are merged into words: ask Model.trace without units and show it with "
                         "units='words'.")
    arrays = {name: None if record[name] is None else np.asarray(record[name], dtype=np.float32)
              for name in ("probabilities", "top_probabilities", "encoder_attention", "decoder_attention",
                           "cross_attention")}
    scheme = record["words"]["scheme"] if "words" in record else _scheme(record["source_tokens"])
    arrays_trace = TraceArrays(
        source_tokens=record["source_tokens"], decoder_tokens=record["decoder_input_tokens"],
        target_tokens=record["target_tokens"], probabilities=arrays["probabilities"], top_tokens=record["top_tokens"],
        top_probabilities=arrays["top_probabilities"], encoder=arrays["encoder_attention"],
        decoder=arrays["decoder_attention"], cross=arrays["cross_attention"],
        switched_off=frozenset(record.get("mask") or ()), forced=int(record.get("forced") or 0), scheme=scheme,
        units=PIECES)
    view = _chosen(arrays_trace, View(CROSS, arrays_trace.layers(CROSS) - 1), kind, layer, head, step, units)
    arrays_trace = replace(arrays_trace, units=view.units)
    name = record.get("checkpoint") or "trace"
    source = record.get("source") or " ".join(record["source_tokens"])
    said = (f"A trace{f' of {name}' if record.get('checkpoint') else ''}: {arrays_trace.steps} steps"
            + (f", heads off: {', '.join(sorted(record['mask']))}" if record.get("mask") else "") + ".")
    stem = f"{name}_{'-'.join(re.findall(r'[a-z0-9]+', source.lower())[:4]) or 'trace'}"
    detachment = _detachment(record.get("detachment"), record["source_tokens"], arrays_trace)
    shown = _view(arrays_trace, record.get("translation", ""), said, detachment, view, model_view, layers, stem,
                  record.get("checkpoint") or "model not recorded", source, include_plotlyjs, what=("trace view", None))
    return replace(shown, title=f"{name}: {source}")


def _detachment(answered: dict | None, source_tokens: list[str], trace: TraceArrays) -> dict | None:
    """The verdict line the page shows (ui/render.py `scored_part`) from the detachment /trace answered (None
    where the record has none, as a trace file): in the units `trace` is shown in where its tokens are pieces, in
    words where they are."""
    if not answered or not answered.get("tokens"):
        return None
    tokens = answered["tokens"]

    def signal(name: str) -> np.ndarray | None:  # None: the model has no such signal (a GRU's source share)
        return None if tokens[0].get(name) is None else np.array([token[name] for token in tokens], dtype=np.float64)

    measured = Detachment(log_probabilities=signal("log_probability"), attention_peaks=signal("attention_peak"),
                          source_shares=signal("source_share"), unavailable=answered.get("unavailable"))
    scored = ScoredDetachment(source_tokens=source_tokens, target_tokens=[token["token"] for token in tokens],
                              unknown=answered.get("unknown") or [], measured=measured, contributions=None,
                              thresholds=answered["thresholds"], threshold_meaning=answered["threshold_meaning"])
    if answered.get("units") == WORDS:
        return scored_part(scored, trace.scheme, False, unit="word")
    return scored_part(scored, trace.scheme, trace.in_words)


def _view(trace: TraceArrays, translation: str, status: str, detachment: dict | None, view, model_view: bool,
          layers: list[int] | None, stem: str, name: str, source: str, include_plotlyjs: bool | str,
          what: tuple[str, str | None] | None = None) -> NotebookView:
    """The value the page draws: the core view's parts as the page's answer gives them, and every view's figure
    the menus can open, built as the page builds them (viz/views.py `view_frames`); `name` the model's (or the
    trace's), `source` the sentence, `what` the view's name and what it shows (`_summary`)."""
    kinds = trace.available()
    heads = {k: head_menu(trace, k, 0) for k in kinds}  # the head menu's entries, (label, head)
    every = sum(trace.layers(k) * len(heads[k]) for k in kinds) <= FIGURES
    most = max(trace.layers(k) for k in kinds)
    chosen = None if layers is None else sorted({_counted(layer, "layer", most) for layer in layers})
    embedded = {k: list(range(trace.layers(k))) if chosen is None and every
                else [layer for layer in (chosen or [view.layer]) if layer < trace.layers(k)]
                or [trace.layers(k) - 1] for k in kinds}
    figures = {}
    for k in kinds:
        for layer in embedded[k]:
            for index, (_, head) in enumerate(heads[k]):
                frames = view_frames(trace, k, layer, head, model_view=index == 0 and layer == embedded[k][0],
                                     file_stem=stem)
                figures[f"{k}/{layer}/{head}"] = frames["attention"]
                if frames["overview"] is not None:
                    figures[f"{k}/model"] = frames["overview"]
    held = [f"{KIND_LABELS[k].lower()}: layer{'s' * (len(embedded[k]) > 1)} "
            f"{', '.join(str(layer + 1) for layer in embedded[k])}" for k in kinds
            if len(embedded[k]) < trace.layers(k)]
    note = ("This view holds " + "; ".join(held) + ". show(..., layers=[...]) holds others (a larger file)."
            if held else "")
    shown_layer = view.layer if view.layer in embedded[view.kind] else embedded[view.kind][-1]
    key = f"{view.kind}/model" if model_view else f"{view.kind}/{shown_layer}/{view.head}"
    frames = translation_frames(trace)
    core = {"revision": 1, "translation": translation, "status": status, "detachment": detachment,
            "steps": frames["description"], "candidates": frames["candidates"], "attention": figures[key]}
    value = {"core": core, "note": note, "figures": figures, "embedded": embedded,
             "view": {"kind": view.kind, "layer": shown_layer, "head": view.head, "step": view.step,
                      "model": bool(model_view)},
             "menus": {"kinds": choices(KIND_LABELS, kinds),
                       **{k: {"layers": [(f"Layer {i + 1}", i) for i in range(trace.layers(k))],
                              "heads": heads[k]} for k in kinds}}}
    summary = _summary(what, name, source, translation, status, detachment, value, trace.steps)
    return NotebookView(value, f"{name}: {source}", include_plotlyjs, summary)


TEXT_LINE = 150  # the most characters of a sentence (the status, the note) a view's summary quotes


def _summary(what: tuple[str, str | None] | None, name: str, source: str, translation: str, status: str,
             detachment: dict | None, value: dict, steps: int) -> str:
    """A view's plain text: which view (`what`: its name, and what it shows where not the kind, layer and head it
    opens on; default: named after its head) of which model, the step it opens on, the sentence, its translation,
    the status, the verdict, and what the view holds: a few lines, under 1 KB whatever the view."""
    shown = value["view"]
    kind = KIND_LABELS[shown["kind"]][0].lower() + KIND_LABELS[shown["kind"]][1:]
    if shown["model"]:
        opened = f"{kind}, every layer × head"
    else:
        head = {MEAN: "mean of heads", ALL_HEADS: "every head"}.get(shown["head"]) or f"head {shown['head'] + 1}"
        opened = f"{kind}, layer {shown['layer'] + 1}, {head}"
    label, shows = what or ("model view" if shown["model"] else "head view" if shown["head"] == ALL_HEADS else "view",
                            None)
    figures = len(value["figures"])
    holds = _quoted(value["note"] or f"This view holds every layer of each kind of attention ({figures} figures).")
    lines = [f"<attention_inspector {label}: {name}, {shows or opened}, step {shown['step']} of {steps}>",
             f"source:      {_quoted(source)}", f"translation: {_quoted(translation)}",
             f"status:      {_quoted(status)}"]
    if detachment:
        lines.append(f"verdict:     {_quoted(detachment['plain'])}")
    return "\n".join([*lines, holds, "A notebook draws it (its HTML); .write_html(path) saves it as a page that opens "
                                      "offline; .value holds its figures."])


def _quoted(text: str) -> str:
    """`text` on one line, cut to `TEXT_LINE` characters."""
    text = " ".join(str(text).split())
    return text if len(text) <= TEXT_LINE else text[:TEXT_LINE - 1] + "…"


def _chosen(trace: TraceArrays, view: View, kind: object, layer: object, head: object, step: object,
            units: object) -> View:
    """`view` with what was asked (layers, heads and steps from 1; None keeps the view's), or a ValueError saying
    what the trace has."""
    if kind not in trace.available():
        raise ValueError(f"kind is one of {', '.join(trace.available())} for this model, not {kind!r}")
    if units not in (PIECES, WORDS):
        raise ValueError(f"units is 'pieces' or 'words', not {units!r}")
    heads = [MEAN, ALL_HEADS] * (trace.heads(kind) > 1)
    if head is not None and head not in heads:
        head = _counted(head, "head", trace.heads(kind), f"; or one of {', '.join(heads)}" if heads else "")
    return replace(view, kind=kind, layer=view.layer if layer is None else _counted(layer, "layer",
                                                                                    trace.layers(kind)),
                   head=view.head if head is None else head, units=units,
                   step=view.step if step is None else _counted(step, "step", trace.steps) + 1).normalize(trace)


def _counted(number: object, what: str, count: int, besides: str = "") -> int:
    """A layer, head or step counted from 1 (of `count`), as an index."""
    if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= count:
        raise ValueError(f"{what} counts from 1 to {count} here{besides}, not {number!r}")
    return number - 1


def _scheme(tokens: list[str]) -> str:
    """How a trace's tokens make words, where it does not say (what /trace answers): sentencepiece pieces start a
    word with "▁", byte-pair pieces go on with "@@"."""
    if any(token.startswith("▁") for token in tokens):
        return SENTENCEPIECE
    return BPE if any(token.endswith("@@") for token in tokens) else WHOLE
