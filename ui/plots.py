"""Plots that the page owns: a `gr.HTML` whose value is a figure's JSON (as viz/ builds it) and whose own script
draws it with plotly.js (ui/static/plot.js, with the page's shared ui/static/figures.js), loaded once from the plotly
package; the core view (`core_view`), one component drawn from one value by ui/static/core.js; and a tab's answers
(`answers_view`), one component per tab drawn by ui/static/answers.js.

A figure built for stepping (its `layout.meta` holds every step's titles or bars) is drawn at the page's step and
redrawn in the browser when the step changes; any other figure is drawn as it is. The plot fits its box whenever
the box changes size (a tab or accordion opened), and an empty plot takes no room.
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass
from pathlib import Path

import gradio as gr
import plotly
import plotly.io

from attention_inspector.viz.attention import PlainFigure

PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
STATIC = Path(__file__).parent / "static"
FIGURES_JS = STATIC / "figures.js"
PLOT_JS = (STATIC / "plot.js").read_text()
CORE_JS = (STATIC / "core.js").read_text()
ANSWERS_JS = (STATIC / "answers.js").read_text()
# Relative to the page, so the app works under any root path (a Space's, a proxy's); loaded once, in this order.
HEAD = f'<script src="gradio_api/file={PLOTLY_JS}"></script><script src="gradio_api/file={FIGURES_JS}"></script>'
# The core view's skeleton, drawn by ui/static/core.js; the view's controls go where `@children` is. It holds no
# value, so a new value never rebuilds it (Gradio re-renders an HTML component's template when its value changes).
CORE_TEMPLATE = """<div class="core-texts">
<label id="translation" class="core-text"><span>Translation</span><textarea readonly rows="1"></textarea></label>
<label id="status" class="core-text"><span>Status</span><textarea readonly rows="2"></textarea></label>
<div id="detachment" class="core-text empty"><p class="detachment-line"><span class="detachment-label">Does the
translation rest on its source?</span> <span class="detachment-plain"></span> <button type="button"
class="detachment-why" aria-expanded="false">why?</button></p><p class="detachment-verdict" hidden></p>
<p class="detachment-words"></p><p class="detachment-source"></p></div>
</div>@children<div class="core-body">
<div id="attention" class="inspector-plot core-plot empty"><div class="plot"></div></div>
<div class="core-side"><div id="neuron" class="inspector-plot core-plot empty"><div class="neuron-bar">
<p class="neuron-note"></p><button type="button" class="neuron-close">Close</button></div><div class="plot"></div></div>
<div id="step-text"><div class="step-label">This step</div><pre class="step-text"></pre></div>
<div id="candidates" class="inspector-plot core-plot empty"><div class="plot"></div></div></div>
</div>"""


def serve_plotly() -> None:
    """Let the page load plotly.js from the plotly package and the page's figures script (before the demo is
    built)."""
    gr.set_static_paths([PLOTLY_JS.parent, FIGURES_JS])


def plot(elem_id: str, after_paint: bool = False, **options) -> gr.HTML:
    """An empty plot the page draws into. `after_paint`: a chart that comes second to the rest of the answers it is
    part of (the translation's probabilities, after the heatmap and the chart of the tab where the user asked):
    each new value is drawn once the browser has painted the rest, even in sight."""
    return gr.HTML(None, html_template='<div class="plot"></div>', js_on_load=PLOT_JS, head=HEAD, elem_id=elem_id,
                   elem_classes=["inspector-plot", *["after-paint"] * after_paint], **options)


def core_view(status: str) -> gr.HTML:
    """The core view, one component drawn from one value (`ui/static/core.js`): translation, status, the heatmap,
    the step's line and its candidates; the components built inside its `with` block (the step bar and the view's
    controls) sit between the status and the heatmap."""
    return gr.HTML(core_value(0, {"status": status}), html_template=CORE_TEMPLATE, js_on_load=CORE_JS, head=HEAD,
                   elem_id="core", padding=False)


def core_value(revision: int, parts: dict) -> str:
    """The core view's value: the revision it belongs to and the parts that changed (figures as their JSON)."""
    return json.dumps({"revision": revision, **parts})


@dataclass(frozen=True)
class Answer:
    """One of a tab's answers, drawn in its place among the tab's answers (`answers_view`): a `figure` (its JSON),
    a `table` ({"headers": [...], "rows": [[...], ...]}, sortable by a click on a header) or a `text` (with a copy
    button). `name` is its element id."""

    name: str
    kind: str
    label: str = ""


ANSWER_BODIES = {"figure": '<div class="plot"></div>', "table": '<div class="answer-table"></div>',
                 "text": '<pre class="answer-text"></pre><button class="copy" type="button">Copy</button>'}


def answers_view(elem_id: str, *answers: Answer) -> gr.HTML:
    """A tab's answers, one component drawn from one value by ui/static/answers.js. Each answer takes no room until
    it has a value, and is emptied by the page when another decoding is drawn (an answer about the decoding on
    screen).

    The questions it answers show their progress right above it, on an element of its own that holds nothing
    (`.progress`): at each status of each event, Gradio's frontend copies the state of every component any event
    has shown progress on, and of every component inside them. Shown on the answers, whose values are whole
    figures, that made every translation after the tabs had been used slower (docs/performance.md)."""
    progress = gr.HTML("", elem_id=f"{elem_id}-progress", elem_classes=["answers-progress"], padding=False)
    template = "".join(
        f'<div id="{answer.name}" class="answer {answer.kind} inspector-plot empty">'
        + (f'<div class="answer-label">{html.escape(answer.label)}</div>' if answer.label else "")
        + f"{ANSWER_BODIES[answer.kind]}</div>" for answer in answers)
    view = gr.HTML(None, html_template=template, js_on_load=ANSWERS_JS, head=HEAD, elem_id=elem_id,
                   elem_classes=["answers"], padding=False)
    view.progress = progress
    return view


def answers_value(revision: int, answers: dict[str, object], step: int | None = None, aside: str | None = None
                  ) -> str:
    """A tab's answers' value: the revision of the state they answer, and the answers an event gave by name (a
    figure's JSON, a table, a text; None empties one); the answers it leaves out stay as they are. A number that is
    not finite in a table is an empty cell. `step`: the step they are about, where they are about one (the page
    marks them while it shows another). `aside`: the answers on screen are not about what was last asked (it was
    refused): they are faded under this note until the next answer."""
    def cell(value):
        return None if isinstance(value, float) and not math.isfinite(value) else value
    answers = {name: {**value, "rows": [[cell(v) for v in row] for row in value["rows"]]}
               if isinstance(value, dict) and "rows" in value else value for name, value in answers.items()}
    return json.dumps({"revision": revision, "answers": answers, **({"step": step} if step is not None else {}),
                       **({"aside": aside} if aside else {})})


def figure_json(figure) -> str | None:
    """A figure as a plot's value: its JSON (None stays None, an empty plot)."""
    if figure is None or isinstance(figure, str):
        return figure
    if isinstance(figure, PlainFigure):
        return figure.to_json()
    return plotly.io.to_json(figure, validate=False)
