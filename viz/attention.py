"""Plotly figures of attention maps and token probabilities: numpy arrays + tokens in, `PlainFigure` out.

Pure functions (no gradio, no torch). Every label is HTML-escaped, because Plotly renders a subset of
HTML in tick labels, titles and hover text, and tokens come from whatever a user typed. Each axis is
a category axis whose values are "position: token", counted from 1 like the steps (unique, so two identical
tokens stay two separate rows or columns, and the hover names both the position and the token) and whose tick
labels show the bare token; a crowded axis labels every k-th position only, so labels never run into each other.
Weights (and shares) have a fixed 0-1 colour scale, so heads and layers can be compared by eye; a measure with no
fixed top (weight x value norm) is scaled to what its figure shows, and the colour bar names that maximum.

Sizes are in pixels and fixed per view: every title gets its own room below Plotly's mode bar (which a phone
shows over the top of the figure), and grids place their panel names below the title.

Figures are plain dicts (`PlainFigure`), never passed through Plotly's figure classes on the way to the page:
Plotly's per-property validation costs ~10x the rest on a step change, and even an unvalidated `go.Figure`
deep-copies its dicts twice on the way to JSON (~2 ms of the web server's CPU per figure). A test checks every
figure kind against the full validator. They carry a compact template (see `TEMPLATE`) instead of plotly.py's
whole default one.
"""

from __future__ import annotations

import functools
import html
import unicodedata
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
from plotly.colors import sequential

# White for 0, dark blue for 1, as explicit [position, colour] pairs: unvalidated figures reach plotly.js
# as they are, and plotly.js's own "Blues" runs the other way.
COLORSCALE = [[i / (len(sequential.Blues) - 1), colour] for i, colour in enumerate(sequential.Blues)]
HIGHLIGHT = "#d62728"
DIVERGING = [[0.0, "#b2182b"], [0.5, "#f7f7f7"], [1.0, "#2166ac"]]  # red below zero, blue above
# Control, format (zero-width, bidirectional overrides), private-use, surrogate, unassigned and line/paragraph
# separator characters: invisible or able to reorder and break the text around them.
INVISIBLE_CATEGORIES = {"Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp"}
MAX_LABEL_CHARS = 24
STEP_SIDE_CHARS = 10  # each side of a decoder row's "input → output" label, so the whole fits MAX_LABEL_CHARS
HOVER = "query %{y}<br>key %{x}<br>weight %{z:.3f}<extra></extra>"
HOVER_NAMED = "%{meta}<br>" + HOVER  # in a grid of heads, the hover also names the head
# Pixel sizes of a figure's parts. Plotly draws its mode bar (toolbar) over the top right corner; on a phone the
# title runs under it, so every title starts below it.
MODEBAR_ROOM = 30  # the mode bar: 2 px from the top, 26 px high
TITLE_LINE = 17  # one line of a 13 px title
TITLE_GAP = 8  # between the title and what follows it
NAME_ROOM = 16  # one line of a grid panel's name (10 px)
# plotly.js draws a title's letters up to TITLE_ASCENT above where it is placed (yanchor "top"), and a title of several
# lines TITLE_LIFT higher: each is placed that much lower, so that its letters start MODEBAR_ROOM from the top.
TITLE_ASCENT = 4
TITLE_LIFT = 12
TICK_FONT = dict(size=10)
TICK_SPACING = 13  # the least distance between two shown tick labels of TICK_FONT
# A heatmap of one map, a bar chart and two models compared name every key: the page draws them at least KEY_PX a
# key wide (ui/static/figures.js; their box scrolls sideways where the screen is narrower). A grid of maps (the
# model view, all heads) is drawn at least GRID_PX wide, of which its row labels and colour bar take about
# GRID_SIDES: its panels share the rest, and name as many keys as fit them.
KEY_PX = 12
GRID_PX, GRID_SIDES = 720, 190
# A heatmap's rows: ROW_PX each up to MAX_PLOT_PX (with the step bar above, it fits 900 px high), then taller, so that
# every row is named (TICK_SPACING each).
ROW_PX, MIN_PLOT_PX, MAX_PLOT_PX = 22, 190, 280
X_LABEL_ROOM = 100  # below a heatmap: its key labels (turned upright when crowded) and axis title
LABEL_CHAR_PX = 6  # about the width of a character of TICK_FONT: an upright label's height


def _compact_template() -> dict:
    """The part of plotly.py's default template that styles 2-D heatmaps and bars.

    Plotly copies its whole default template into every figure: about 7 KB of styles for 3-D, polar, map
    and 40 trace types, 80% of each figure's JSON, rebuilt on every step change. This keeps the same look.
    """
    default = pio.templates["plotly"].to_plotly_json()
    layout = {key: default["layout"][key] for key in ("font", "title", "hoverlabel", "hovermode", "paper_bgcolor",
                                                      "xaxis", "yaxis", "coloraxis", "shapedefaults",
                                                      "annotationdefaults")}
    heatmap = {"type": "heatmap", "colorbar": default["data"]["heatmap"][0]["colorbar"]}  # figures set the colours
    return dict(layout=layout, data=dict(heatmap=[heatmap], bar=default["data"]["bar"]))


TEMPLATE = _compact_template()


def escape_text(text: str) -> str:
    """Text shown literally by Plotly, which renders a subset of HTML in labels and titles.

    Escaping <, > and & is enough: without "<" no tag can start (and Plotly does not decode &quot;).
    """
    return html.escape(text, quote=False)


def visible(text: str, keep: str = "") -> str:
    """Invisible characters spelled as code points (⟨U+200B⟩), so a label shows everything the model read (`keep`:
    those to leave as they are, such as a text's line breaks); so is a text of marks alone, with nothing to sit on
    (an emoji's variation selector split off as a token of its own)."""
    alone = bool(text) and all(unicodedata.category(c).startswith("M") for c in text)
    return "".join(f"⟨U+{ord(c):04X}⟩" if (alone or unicodedata.category(c) in INVISIBLE_CATEGORIES) and c not in keep
                   else c for c in text)


def label(token: str, limit: int = MAX_LABEL_CHARS) -> str:
    """A token as an axis label: invisible characters spelled out, cut to `limit` characters."""
    shown = visible(token)
    return shown if len(shown) <= limit else shown[:limit - 1] + "…"


def step_labels(inputs: list[str], outputs: list[str]) -> list[str]:
    """Decoder rows as the step each one is: the token it reads → the token it outputs ("mann → liest"), each side
    cut to STEP_SIDE_CHARS (unescaped: they are labels like any token, see `escape`)."""
    return [f"{label(read, STEP_SIDE_CHARS)} → {label(wrote, STEP_SIDE_CHARS)}"
            for read, wrote in zip(inputs, outputs)]


@functools.lru_cache(maxsize=1 << 16)
def escaped_label(token: str) -> str:
    """One token as literal text for a Plotly label (see `label`). Kept: a translation's figures label the same
    tokens hundreds of times (every axis, every step's candidates)."""
    return escape_text(label(token))


def escape(tokens: list[str]) -> list[str]:
    """Tokens as literal text for Plotly labels (see `label`)."""
    return [escaped_label(t) for t in tokens]


class Word(str):
    """A word merged from a model's pieces (model/text/words.py): its text, carrying the pieces behind it."""

    pieces: tuple[str, ...]

    def __new__(cls, text: str, pieces: list[str] | tuple[str, ...] = ()) -> Word:
        word = super().__new__(cls, text)
        word.pieces = tuple(pieces)
        return word


def positions(tokens: list[str]) -> list[str]:
    """Unique category values "i: token" (escaped), one per position, counted from 1 as the steps are; a word of
    several pieces names them ("3: zeitungsleserin = zeitungs@@ les@@ erin"), which the hover shows."""
    return [f"{i}: {shown}" + (f" = {escape_text(label(' '.join(t.pieces), 2 * MAX_LABEL_CHARS))}"
                               if len(getattr(t, "pieces", ())) > 1 else "")
            for i, (t, shown) in enumerate(zip(tokens, escape(tokens)), start=1)]


def label_every(count: int, fit: float) -> int:
    """k such that labelling every k-th of `count` positions shows no more than `fit` labels (at least one)."""
    return max(1, -(-count // max(int(fit), 1)))


def thinned(labels: list[str], every: int) -> list[str]:
    """Every `every`-th label (from the first), the others blank: an axis that has no room for all of them."""
    return [text if i % every == 0 else "" for i, text in enumerate(labels)]


@dataclass(frozen=True)
class PlainFigure:
    """A Plotly figure as the plain dicts it is made of: `data` (the traces) and `layout`.

    gr.Plot sends whatever its value's `to_json` gives; `figure()` is the `go.Figure` for anything else."""

    data: list[dict]
    layout: dict

    def to_dict(self) -> dict:
        return {"data": self.data, "layout": self.layout}

    def to_json(self, meta: dict | None = None) -> str:
        """The figure as plotly.py encodes it (NaN as null; <, > and / escaped, so no text can close a <script>),
        `meta` (if any: what ui/static/figures.js needs to show every step) added to its layout's."""
        content = self.to_dict() if meta is None else {
            "data": self.data, "layout": {**self.layout, "meta": {**self.layout.get("meta", {}), **meta}}}
        try:
            return pio.to_json(content, validate=False, engine="orjson")
        except TypeError:  # text holding a lone surrogate, which orjson refuses
            return pio.to_json(content, validate=False, engine="json")

    def figure(self) -> go.Figure:
        """The same figure as a `go.Figure` (unvalidated)."""
        return go.Figure(self.to_dict(), _validate=False)


def plain_figure(data: list[dict], layout: dict) -> PlainFigure:
    """A figure from plain dicts, with the compact template."""
    return PlainFigure(data, dict(layout, template=TEMPLATE))


def token_axis(tokens: list[str], every: int = 1, **extra) -> dict:
    """A category axis of tokens: unique "i: token" values, the bare tokens as tick labels (every `every`-th).

    Labels are thinned, never dropped from the arrays: the browser keeps the first t + 1 when stepping. Crowded
    labels turn upright (90 degrees), not slanted, where TICK_SPACING keeps them apart."""
    values = positions(tokens)
    return dict(type="category", categoryorder="array", categoryarray=values, tickmode="array", tickvals=values,
                ticktext=thinned(escape(tokens), every), autotickangles=[0, 90], **extra)


def _row_outline(row: int, n_keys: int, xref: str = "x", yref: str = "y", width: float = 3) -> dict:
    """A rectangle around one query row (the current decoding step)."""
    return dict(type="rect", xref=xref, yref=yref, x0=-0.5, x1=n_keys - 0.5, y0=row - 0.5, y1=row + 0.5,
                line=dict(color=HIGHLIGHT, width=width), fillcolor="rgba(0,0,0,0)")


def colorbar_title(value_label: str, zmax: float) -> str:
    """A colour bar's title: what the cells hold, and the scale's top unless it is 1 ("‖α f‖ (max 3.95)")."""
    return escape_text(value_label if zmax == 1.0 else f"{value_label} (max {zmax:.3g})")


def _heatmap(weights: np.ndarray, query_tokens: list[str], key_tokens: list[str], label: str = "", zmax: float = 1.0,
             value_label: str = "weight", raw: np.ndarray | None = None, zmin: float = 0.0, **extra) -> dict:
    """A heatmap trace; with `raw` (the attention weights behind a measure, same shape), the hover shows both."""
    hover = (HOVER_NAMED if label else HOVER).replace("weight", escape_text(value_label))
    if raw is not None:
        hover = hover.replace("<extra>", "<br>attention weight %{customdata:.3f}<extra>")
        extra["customdata"] = np.round(np.asarray(raw, dtype=float), 4).tolist()
    named = dict(meta=escape_text(label)) if label else {}
    # z as nested lists, not plotly's base64 arrays, so the browser can slice rows when stepping.
    return dict(type="heatmap", z=np.asarray(weights, dtype=float).tolist(), x=positions(key_tokens),
                y=positions(query_tokens), zmin=zmin, zmax=zmax, hovertemplate=hover, **named, **extra)


def title_text(lines: list[str]) -> str:
    """Lines of a title as Plotly text: each escaped, joined by Plotly's own line break."""
    return "<br>".join(escape_text(line) for line in lines)


def title_layout(lines: list[str]) -> dict:
    """A title of one or more lines at the top left, below the mode bar; its figure's top margin is `title_room`."""
    return dict(text=title_text(lines), yref="container", y=1, yanchor="top",
                pad=dict(t=MODEBAR_ROOM + (TITLE_LIFT if len(lines) > 1 else TITLE_ASCENT)), x=0.01, xanchor="left",
                xref="container", font=dict(size=13))


def title_room(lines: list[str]) -> int:
    """The pixels from a figure's top to the end of its title (see `title_layout`) and a gap: its top margin."""
    return MODEBAR_ROOM + TITLE_LINE * len(lines) + TITLE_GAP


def plot_height(rows: int) -> int:
    """A heatmap's plot area: ROW_PX per row within MIN_PLOT_PX..MAX_PLOT_PX, and never too short to name every row."""
    return max(min(MAX_PLOT_PX, max(MIN_PLOT_PX, ROW_PX * rows)), TICK_SPACING * rows)


def heatmap_height(rows: int, title: list[str]) -> int:
    """A heatmap's height: its title, its plot area (`plot_height`), its key labels."""
    return title_room(title) + plot_height(rows) + X_LABEL_ROOM


def attention_heatmap(weights: np.ndarray, query_tokens: list[str], key_tokens: list[str], title: str | list[str],
                      highlight_row: int | None = None, query_label: str = "query", key_label: str = "key",
                      height: int | None = None, note: str | None = None, value_label: str = "weight",
                      zmax: float = 1.0, raw: np.ndarray | None = None,
                      view_shape: tuple[int, int] | None = None, signed: bool = False) -> PlainFigure:
    """One attention map (Q, K) as a heatmap; `highlight_row` outlines the current step's row.

    `title` may be several lines; `height` defaults to `heatmap_height`. `note` is written across the map (for a
    switched-off head, whose weights are NaN: no colour at all). `value_label` names what the cells hold (a weight,
    a share) in the colour bar and the hover; `zmax` tops its colour scale (named in the colour bar unless 1), which
    `signed` makes red below zero and blue above, from −zmax; `raw`:
    the attention weights behind a measure, shown beside it on hover. `view_shape`: (rows, keys) of the whole view
    when this map is one step of it (default: this map's); the height and which labels show depend on it alone, so
    every step of a view is drawn alike. Every row and key is named (the page widens a map whose keys need it)."""
    weights = np.asarray(weights)
    if weights.shape != (len(query_tokens), len(key_tokens)):
        raise ValueError(f"weights {weights.shape} do not match {len(query_tokens)} queries x {len(key_tokens)} keys")
    lines = [title] if isinstance(title, str) else title
    rows, _ = view_shape or weights.shape
    height = height or heatmap_height(rows, lines)
    top = title_room(lines)
    colorscale, zmin = _colour_range(zmax, signed)
    heatmap = _heatmap(weights, query_tokens, key_tokens, zmax=zmax, value_label=value_label, raw=raw,
                       colorscale=colorscale, colorbar=_colorbar(value_label, zmax), zmin=zmin)
    return plain_figure([heatmap], dict(
        title=title_layout(lines), margin=dict(l=10, r=10, t=top, b=10), height=height, plot_bgcolor="white",
        xaxis=token_axis(key_tokens, title=dict(text=key_label), automargin=True, tickfont=TICK_FONT),
        yaxis=token_axis(query_tokens, label_every(rows, (height - top - X_LABEL_ROOM) / TICK_SPACING),
                         title=dict(text=query_label), autorange="reversed", automargin=True, tickfont=TICK_FONT),
        shapes=[] if highlight_row is None else [_row_outline(highlight_row, len(key_tokens))],
        annotations=[] if note is None else [_note(note, 0.5, 0.5)],
    ))


def _colorbar(value_label: str, zmax: float, **extra) -> dict:
    """A colour bar titled along its side (a named maximum is long: on top it would take a phone's plot width)."""
    return dict(title=dict(text=colorbar_title(value_label, zmax), side="right"), thickness=14, **extra)


def _colour_range(zmax: float, signed: bool) -> tuple[list, float]:
    """A colour scale and its bottom: 0..zmax in blues, or, `signed`, −zmax..zmax red below zero and blue above."""
    return (DIVERGING, -zmax) if signed else (COLORSCALE, 0.0)


def _note(text: str, x: float, y: float) -> dict:
    """Grey text over a plot area, in paper coordinates."""
    return dict(text=escape_text(text), x=x, y=y, xref="paper", yref="paper", showarrow=False,
                font=dict(size=13, color="#777"))


GRIDLESS = dict(showgrid=False, zeroline=False)


def head_grid(weights: np.ndarray, query_tokens: list[str], key_tokens: list[str], title: str | list[str],
              row_labels: list[str], col_labels: list[str], highlight_row: int | None = None,
              panel_height: int | None = None, off: np.ndarray | None = None, value_label: str = "weight",
              zmax: float = 1.0, raw: np.ndarray | None = None,
              view_shape: tuple[int, int] | None = None, signed: bool = False) -> PlainFigure:
    """Small multiples: weights (R, C, Q, K) as an R x C grid, e.g. all heads of a layer (R = 1) or layers x heads.

    Each column's label names its panels above them (the first row's below the title), each row's label stands beside
    the row; the first column labels the queries, the bottom row the keys, each as many as its panel has room for.
    `off` (R, C): panels of switched-off heads, drawn empty with a note instead of their unused weights.
    `view_shape` and `signed`: as for `attention_heatmap`."""
    weights = np.asarray(weights, dtype=float)
    rows, cols = weights.shape[:2]
    queries, keys = view_shape or weights.shape[2:]
    if off is not None and off.any():
        weights = weights.copy()
        weights[off] = np.nan
    lines = [title] if isinstance(title, str) else title
    panel = panel_height or max(150, 14 * queries)
    gap_px = NAME_ROOM + 8  # between rows of panels: the next row's names
    paper = rows * panel + (rows - 1) * gap_px
    gap_x = 0.012
    width = (1 - gap_x * (cols - 1)) / cols
    query_every = label_every(queries, panel / TICK_SPACING)
    # As many key labels as a panel has room for, of the keys shown now: a stepped figure of decoder self-attention
    # labels its first keys more densely at an early step (ui/static/figures.js thins `keyLabels` alike).
    key_fit = max(2, int((GRID_PX - GRID_SIDES) * width / TICK_SPACING))
    key_every = label_every(len(key_tokens), key_fit)
    data, layout, annotations, shapes = [], {}, [], []
    for r in range(rows):
        for c in range(cols):
            n = r * cols + c + 1
            suffix = "" if n == 1 else str(n)
            name = f"{row_labels[r]} {col_labels[c]}".strip()
            switched_off = off is not None and bool(off[r, c])
            data.append(_heatmap(weights[r, c], query_tokens, key_tokens, name, zmax=zmax, value_label=value_label,
                                 raw=None if raw is None else raw[r, c], coloraxis="coloraxis", xaxis=f"x{suffix}",
                                 yaxis=f"y{suffix}"))
            x0, y1 = c * (width + gap_x), 1 - r * (panel + gap_px) / paper
            # Upright: a level label wider than its key would run into the next panel's first ("<eos>people").
            # Each panel has room for every row (and key) of the view, at every step: a row keeps its height as
            # the rows come with the steps (one row stretched over the whole panel at the first step). No grid
            # lines: hidden under the cells, they were most of the model view's drawing (a line per key and row).
            layout[f"xaxis{suffix}"] = token_axis(key_tokens, key_every, domain=[x0, x0 + width], anchor=f"y{suffix}",
                                                   showticklabels=r == rows - 1, tickfont=TICK_FONT,
                                                   range=[-0.5, keys - 0.5], **GRIDLESS,
                                                   **({"tickangle": 90} if cols > 1 else {}))
            layout[f"yaxis{suffix}"] = token_axis(query_tokens, query_every, domain=[max(0.0, y1 - panel / paper), y1],
                                                   anchor=f"x{suffix}", range=[queries - 0.5, -0.5],  # reversed
                                                   showticklabels=c == 0, tickfont=TICK_FONT, **GRIDLESS,
                                                   title=dict(text=escape_text(row_labels[r]) if c == 0 else ""))
            # Short names (a phone gives a panel of 8 ~20 px): the row's label is beside it, "off" across it.
            annotations.append(dict(text=escape_text(col_labels[c]), x=x0 + width / 2, y=y1, xref="paper",
                                    yref="paper", xanchor="center", yanchor="bottom", showarrow=False,
                                    font=dict(size=10)))
            if switched_off:
                annotations.append(_note("off", x0 + width / 2, y1 - panel / paper / 2))
            if highlight_row is not None:
                shapes.append(_row_outline(highlight_row, len(key_tokens), f"x{suffix}", f"y{suffix}", 1.5))
    top = title_room(lines) + NAME_ROOM  # the first row's panel names sit between the title and the panels
    bottom = X_LABEL_ROOM - 25  # the bottom row's key labels (no axis title)
    if cols > 1:  # upright (below): as tall as the longest label shown
        bottom = max(bottom, LABEL_CHAR_PX * max((len(label(t)) for t in key_tokens), default=0) + 12)
    colorscale, cmin = _colour_range(zmax, signed)
    layout.update(
        title=title_layout(lines),
        coloraxis=dict(colorscale=colorscale, cmin=cmin, cmax=zmax, colorbar=_colorbar(value_label, zmax)),
        height=top + paper + bottom, margin=dict(l=10, r=10, t=top, b=bottom),
        plot_bgcolor="white", showlegend=False, annotations=annotations, shapes=shapes,
        meta=dict(keyLabels=escape(key_tokens), keyFit=key_fit),
    )
    return plain_figure(data, layout)


def bar_step(tokens: list[str], probabilities: np.ndarray, title: str, highlight: int | None = None) -> dict:
    """What a probability bar chart shows: one bar per token (the `highlight` one in red), labels and title.

    `probability_bars` draws it; a stepping figure carries one per step (`layout.meta.bars`, see
    `PlainFigure.to_json`), which ui/static/figures.js puts in place of the figure's own."""
    probabilities = np.asarray(probabilities, dtype=float)
    return {"x": positions(tokens), "y": probabilities.tolist(), "text": [f"{p:.2f}" for p in probabilities],
            "colors": bar_colors(len(tokens), highlight),
            "ticktext": escape(tokens), "title": title_text([title]),
            "customdata": list(tokens)}  # the bare tokens, for a click (never displayed: no template shows them)


def bar_colors(count: int, highlight: int | None) -> list[str]:
    return [HIGHLIGHT if i == highlight else "#1f77b4" for i in range(count)]


def probability_bars(tokens: list[str], probabilities: np.ndarray, title: str,
                     highlight: int | None = None) -> PlainFigure:
    """Bar chart of one probability per token (a translation's tokens, or a step's top-k candidates); labels and
    the numbers above the bars that have no room are left out."""
    shown = bar_step(tokens, probabilities, title, highlight)
    bars = dict(type="bar", x=shown["x"], y=shown["y"], marker=dict(color=shown["colors"]), text=shown["text"],
                customdata=shown["customdata"],
                hovertemplate="%{x}<br>probability %{y:.3f}<extra></extra>", textposition="outside")
    return plain_figure([bars], dict(
        title=title_layout([title]), height=260 + MODEBAR_ROOM, margin=dict(l=10, r=10, t=title_room([title]), b=10),
        hovermode="x",  # anywhere in a bar's column hovers (and clicks) it, however short the bar
        xaxis=token_axis(tokens, automargin=True, tickfont=TICK_FONT),
        yaxis=dict(range=[0, 1.15], title=dict(text="probability")), plot_bgcolor="white",
        uniformtext=dict(minsize=8, mode="hide"),
    ))


def standalone_html(figure: PlainFigure, title: str, file: str) -> str:
    """A self-contained interactive page of `figure`: plotly.js embedded (nothing is fetched, so it opens offline),
    its toolbar downloading PNG as `file`.png."""
    page = pio.to_html(figure.to_dict(), include_plotlyjs=True, full_html=True, validate=False, default_width="100%",
                       config={"displaylogo": False, "toImageButtonOptions": {"filename": file, "scale": 2}})
    return page.replace("<head>", f"<head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>", 1)
