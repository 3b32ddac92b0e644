"""Plots that the page owns: a `gr.HTML` whose value is a figure's JSON (as viz/ builds it) and whose own script
draws it with plotly.js (ui/static/plot.js), loaded once from the plotly package.

A figure built for stepping (its `layout.meta` holds every step's titles or bars) is drawn at the page's step and
redrawn in the browser when the step changes; any other figure is drawn as it is. The plot fits its box whenever
the box changes size (a tab or accordion opened), and an empty plot takes no room.
"""

from __future__ import annotations

from pathlib import Path

import gradio as gr
import plotly
import plotly.io

from viz.attention import PlainFigure

PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
STATIC = Path(__file__).parent / "static"
PLOT_JS = (STATIC / "plot.js").read_text()
STEP_TEXT_JS = (STATIC / "step_text.js").read_text()
# Relative to the page, so the app works under any root path (a Space's, a proxy's).
HEAD = f'<script src="gradio_api/file={PLOTLY_JS}"></script>'


def serve_plotly() -> None:
    """Let the page load plotly.js from the plotly package (called before the demo is built)."""
    gr.set_static_paths([PLOTLY_JS.parent])


def plot(elem_id: str, **options) -> gr.HTML:
    """An empty plot the page draws into."""
    return gr.HTML(None, html_template='<div class="plot"></div>', js_on_load=PLOT_JS, head=HEAD, elem_id=elem_id,
                   elem_classes=["inspector-plot"], **options)


def step_text(elem_id: str, label: str) -> gr.HTML:
    """A text box that shows the step's description (its value: every step's, as JSON)."""
    return gr.HTML(None, html_template=f'<div class="step-label">{label}</div><pre class="step-text"></pre>',
                   js_on_load=STEP_TEXT_JS, elem_id=elem_id)


def figure_json(figure) -> str | None:
    """A figure as a plot's value: its JSON (None stays None, an empty plot)."""
    if figure is None or isinstance(figure, str):
        return figure
    if isinstance(figure, PlainFigure):
        return figure.to_json()
    return plotly.io.to_json(figure, validate=False)
