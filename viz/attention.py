"""Plotly figures of attention maps and token probabilities: numpy arrays + tokens in, `PlainFigure` out.

Pure functions (no gradio, no torch). Every label is HTML-escaped, because Plotly renders a subset of
HTML in tick labels, titles and hover text, and tokens come from whatever a user typed. Each axis is
a category axis whose values are "position: token" (unique, so two identical tokens stay two separate
rows or columns, and the hover names both the position and the token) and whose tick labels show the
bare token. The colour scale is fixed to 0-1 so heads and layers can be compared by eye.

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
HOVER = "query %{y}<br>key %{x}<br>weight %{z:.3f}<extra></extra>"
HOVER_NAMED = "%{meta}<br>" + HOVER  # in a grid of heads, the hover also names the head


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


def visible(text: str) -> str:
    """Invisible characters spelled as code points (⟨U+200B⟩), so a label shows everything the model read."""
    return "".join(f"⟨U+{ord(c):04X}⟩" if unicodedata.category(c) in INVISIBLE_CATEGORIES else c for c in text)


def label(token: str) -> str:
    """A token as an axis label: invisible characters spelled out, cut to MAX_LABEL_CHARS."""
    shown = visible(token)
    return shown if len(shown) <= MAX_LABEL_CHARS else shown[:MAX_LABEL_CHARS - 1] + "…"


@functools.lru_cache(maxsize=1 << 16)
def escaped_label(token: str) -> str:
    """One token as literal text for a Plotly label (see `label`). Kept: a translation's figures label the same
    tokens hundreds of times (every axis, every step's candidates)."""
    return escape_text(label(token))


def escape(tokens: list[str]) -> list[str]:
    """Tokens as literal text for Plotly labels (see `label`)."""
    return [escaped_label(t) for t in tokens]


def positions(tokens: list[str]) -> list[str]:
    """Unique category values "i: token" (escaped), one per position."""
    return [f"{i}: {t}" for i, t in enumerate(escape(tokens))]


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
        `meta` (if any: what viz/stepping.js needs to show every step) put in its layout."""
        content = self.to_dict() if meta is None else {"data": self.data, "layout": {**self.layout, "meta": meta}}
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


def token_axis(tokens: list[str], **extra) -> dict:
    """A category axis of tokens: unique "i: token" values, the bare tokens as tick labels."""
    values = positions(tokens)
    return dict(type="category", categoryorder="array", categoryarray=values, tickmode="array", tickvals=values,
                ticktext=escape(tokens), **extra)


def _row_outline(row: int, n_keys: int, xref: str = "x", yref: str = "y", width: float = 3) -> dict:
    """A rectangle around one query row (the current decoding step)."""
    return dict(type="rect", xref=xref, yref=yref, x0=-0.5, x1=n_keys - 0.5, y0=row - 0.5, y1=row + 0.5,
                line=dict(color=HIGHLIGHT, width=width), fillcolor="rgba(0,0,0,0)")


def _heatmap(weights: np.ndarray, query_tokens: list[str], key_tokens: list[str], label: str = "", zmax: float = 1.0,
             value_label: str = "weight", raw: np.ndarray | None = None, **extra) -> dict:
    """A heatmap trace; with `raw` (the attention weights behind a measure, same shape), the hover shows both."""
    hover = (HOVER_NAMED if label else HOVER).replace("weight", escape_text(value_label))
    if raw is not None:
        hover = hover.replace("<extra>", "<br>attention weight %{customdata:.3f}<extra>")
        extra["customdata"] = np.round(np.asarray(raw, dtype=float), 4).tolist()
    named = dict(meta=escape_text(label)) if label else {}
    # z as nested lists, not plotly's base64 arrays, so the browser can slice rows when stepping.
    return dict(type="heatmap", z=np.asarray(weights, dtype=float).tolist(), x=positions(key_tokens),
                y=positions(query_tokens), zmin=0.0, zmax=zmax, hovertemplate=hover, **named, **extra)


def title_text(lines: list[str]) -> str:
    """Lines of a title as Plotly text: each escaped, joined by Plotly's own line break."""
    return "<br>".join(escape_text(line) for line in lines)


def title_layout(lines: list[str]) -> dict:
    """A title of one or more lines that reserves its own space above the plot."""
    return dict(text=title_text(lines), automargin=True, yref="paper", y=1, yanchor="bottom", pad=dict(b=8),
                x=0.01, xanchor="left", xref="container", font=dict(size=13))


def attention_heatmap(weights: np.ndarray, query_tokens: list[str], key_tokens: list[str], title: str | list[str],
                      highlight_row: int | None = None, query_label: str = "query", key_label: str = "key",
                      height: int | None = None, note: str | None = None, value_label: str = "weight",
                      zmax: float = 1.0, raw: np.ndarray | None = None) -> PlainFigure:
    """One attention map (Q, K) as a heatmap; `highlight_row` outlines the current step's row.

    `title` may be several lines; `height` defaults to one that grows with the number of queries. `note` is
    written across the map (for a switched-off head, whose weights are NaN: no colour at all). `value_label` names
    what the cells hold (a weight, a share) in the colour bar and the hover; `zmax` tops its colour scale; `raw`:
    the attention weights behind a measure, shown beside it on hover."""
    weights = np.asarray(weights)
    if weights.shape != (len(query_tokens), len(key_tokens)):
        raise ValueError(f"weights {weights.shape} do not match {len(query_tokens)} queries x {len(key_tokens)} keys")
    heatmap = _heatmap(weights, query_tokens, key_tokens, zmax=zmax, value_label=value_label, raw=raw,
                       colorscale=COLORSCALE, colorbar=dict(title=dict(text=escape_text(value_label)), thickness=14))
    return plain_figure([heatmap], dict(
        title=title_layout([title] if isinstance(title, str) else title), margin=dict(l=10, r=10, t=10, b=10),
        height=height or max(340, 150 + 26 * len(query_tokens)), plot_bgcolor="white",
        xaxis=token_axis(key_tokens, title=dict(text=key_label), automargin=True),  # Plotly turns crowded labels
        yaxis=token_axis(query_tokens, title=dict(text=query_label), autorange="reversed", automargin=True),
        shapes=[] if highlight_row is None else [_row_outline(highlight_row, len(key_tokens))],
        annotations=[] if note is None else [_note(note, 0.5, 0.5)],
    ))


def _note(text: str, x: float, y: float) -> dict:
    """Grey text over a plot area, in paper coordinates."""
    return dict(text=escape_text(text), x=x, y=y, xref="paper", yref="paper", showarrow=False,
                font=dict(size=13, color="#777"))


def head_grid(weights: np.ndarray, query_tokens: list[str], key_tokens: list[str], title: str | list[str],
              row_labels: list[str], col_labels: list[str], highlight_row: int | None = None,
              panel_height: int | None = None, off: np.ndarray | None = None, value_label: str = "weight",
              zmax: float = 1.0, raw: np.ndarray | None = None) -> PlainFigure:
    """Small multiples: weights (R, C, Q, K) as an R x C grid, e.g. all heads of a layer (R = 1) or layers x heads.

    `off` (R, C): panels of switched-off heads, drawn empty with a note instead of their unused weights."""
    weights = np.asarray(weights, dtype=float)
    rows, cols = weights.shape[:2]
    if off is not None and off.any():
        weights = weights.copy()
        weights[off] = np.nan
    gap_x, gap_y = 0.012, 0.25 / max(rows, 1) if rows > 1 else 0.0
    panel = panel_height or max(150, 14 * len(query_tokens))
    label_room = 16 / (rows * panel)  # the first row's panel names sit below the title, not on it
    width, height = (1 - gap_x * (cols - 1)) / cols, (1 - label_room - gap_y * (rows - 1)) / rows
    data, layout, annotations, shapes = [], {}, [], []
    show_x_labels = rows == 1 and len(key_tokens) * cols <= 80
    for r in range(rows):
        for c in range(cols):
            n = r * cols + c + 1
            suffix = "" if n == 1 else str(n)
            name = f"{row_labels[r]} {col_labels[c]}".strip()
            switched_off = off is not None and bool(off[r, c])
            data.append(_heatmap(weights[r, c], query_tokens, key_tokens, name, value_label=value_label,
                                 raw=None if raw is None else raw[r, c], coloraxis="coloraxis", xaxis=f"x{suffix}",
                                 yaxis=f"y{suffix}"))
            x0, y1 = c * (width + gap_x), 1 - label_room - r * (height + gap_y)
            layout[f"xaxis{suffix}"] = token_axis(key_tokens, domain=[x0, x0 + width], anchor=f"y{suffix}",
                                                   showticklabels=show_x_labels, tickangle=-45,
                                                   tickfont=dict(size=9))
            layout[f"yaxis{suffix}"] = token_axis(query_tokens, domain=[max(0.0, y1 - height), y1], anchor=f"x{suffix}",
                                                   autorange="reversed", showticklabels=c == 0,
                                                   tickfont=dict(size=9))
            annotations.append(dict(text=escape_text(name + " (off)" * switched_off), x=x0 + width / 2, y=y1,
                                    xref="paper", yref="paper", xanchor="center", yanchor="bottom", showarrow=False,
                                    font=dict(size=10)))
            if switched_off:
                annotations.append(_note("off", x0 + width / 2, y1 - height / 2))
            if highlight_row is not None:
                shapes.append(_row_outline(highlight_row, len(key_tokens), f"x{suffix}", f"y{suffix}", 1.5))
    lines = [title] if isinstance(title, str) else title
    top = 24 + 17 * len(lines)  # room for every title line: a measure's line must not sit on the panel names
    layout.update(
        title=title_layout(lines),
        coloraxis=dict(colorscale=COLORSCALE, cmin=0.0, cmax=zmax,
                       colorbar=dict(thickness=14, title=dict(text=escape_text(value_label)))),
        height=int(70 + top + rows * panel * (1 + gap_y)), margin=dict(l=10, r=10, t=top, b=10),
        plot_bgcolor="white", showlegend=False, annotations=annotations, shapes=shapes,
    )
    return plain_figure(data, layout)


def bar_step(tokens: list[str], probabilities: np.ndarray, title: str, highlight: int | None = None) -> dict:
    """What a probability bar chart shows: one bar per token (the `highlight` one in red), labels and title.

    `probability_bars` draws it; a stepping figure carries one per step (`layout.meta.bars`, see
    `PlainFigure.to_json`), which viz/stepping.js puts in place of the figure's own."""
    probabilities = np.asarray(probabilities, dtype=float)
    return {"x": positions(tokens), "y": probabilities.tolist(), "text": [f"{p:.2f}" for p in probabilities],
            "colors": bar_colors(len(tokens), highlight), "ticktext": escape(tokens), "title": title_text([title]),
            "customdata": list(tokens)}  # the bare tokens, for a click (never displayed: no template shows them)


def bar_colors(count: int, highlight: int | None) -> list[str]:
    return [HIGHLIGHT if i == highlight else "#1f77b4" for i in range(count)]


def probability_bars(tokens: list[str], probabilities: np.ndarray, title: str,
                     highlight: int | None = None) -> PlainFigure:
    """Bar chart of one probability per token (a translation's tokens, or a step's top-k candidates)."""
    shown = bar_step(tokens, probabilities, title, highlight)
    bars = dict(type="bar", x=shown["x"], y=shown["y"], marker=dict(color=shown["colors"]), text=shown["text"],
                customdata=shown["customdata"],
                hovertemplate="%{x}<br>probability %{y:.3f}<extra></extra>", textposition="outside")
    return plain_figure([bars], dict(
        title=title_layout([title]), height=260, margin=dict(l=10, r=10, t=10, b=10),
        hovermode="x",  # anywhere in a bar's column hovers (and clicks) it, however short the bar
        xaxis=token_axis(tokens, tickangle=-45, automargin=True),
        yaxis=dict(range=[0, 1.15], title=dict(text="probability")), plot_bgcolor="white",
    ))


def standalone_html(figure: PlainFigure, title: str, file: str) -> str:
    """A self-contained interactive page of `figure`: plotly.js embedded (nothing is fetched, so it opens offline),
    its toolbar downloading PNG as `file`.png."""
    page = pio.to_html(figure.to_dict(), include_plotlyjs=True, full_html=True, validate=False, default_width="100%",
                       config={"displaylogo": False, "toImageButtonOptions": {"filename": file, "scale": 2}})
    return page.replace("<head>", f"<head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>", 1)
