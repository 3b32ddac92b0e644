"""The neuron view: how one row of a head's weights came about (model/explain/neurons.py computes the vectors).

For the row's query: the query vector q, each key's vector k_j, their elementwise products scaled as the model scales
(each row sums to the score's q·k term), each key's score (with a position bias as a term of its own) and the weights.
The dimensions are sorted by their share of one key's score (the key clicked, else the heaviest), largest first, and
the first few are outlined; a head wider than `MAX_DIMENSIONS` shows the dimensions of largest share and sums the
others in one column. Only the keys the query sees are listed (a later step in decoder self-attention is masked: a
word not yet written); the title says how many are masked.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from attention_inspector.viz.attention import (DIVERGING, HIGHLIGHT, TICK_FONT, PlainFigure, label, plain_figure,
                                               positions, title_layout, title_room)

MAX_DIMENSIONS = 32  # shown one by one; the rest summed
OUTLINED = 5  # the dimensions of largest share, outlined
ROW_PX, STRIP_PX, GAP_PX, BOTTOM_PX = 16, 22, 26, 44  # a key's row, q's strip, the gap under it, the dims' names
# The panels' shares of the width: the keys (q above them), the products, the scores, the weights.
COLUMNS = {"keys": (0.0, 0.38), "products": (0.42, 0.78), "scores": (0.81, 0.89), "weights": (0.92, 1.0)}
MASKED = "masked"
WEIGHT_FONT = 10  # px, of the weights' labels
# The labels' room beyond the weights' panel, whose bars reach its right edge at weight 1: "1.00" is 2.5 em wide in a
# font of digits 0.65 em wide, and Plotly leaves 3 px between a bar and its label.
WEIGHT_LABEL_PX = 30
MAX_LABEL = 16  # characters of a key's token in the title
MAX_QUERY = 24  # of the query's (a step reads "token → token")
DIGITS = 4  # of the vectors' and products' values (their hover shows 4)


class Head(Protocol):
    """One head's queries, keys and what its scores are made of (model/explain/neurons.py `HeadVectors`)."""

    queries: np.ndarray  # (Q, d_head)
    keys: np.ndarray  # (K, d_head)
    scale: float
    bias: np.ndarray | None  # (Q, K)
    allowed: np.ndarray  # (Q, K) bool
    weights: np.ndarray  # (Q, K)

    def products(self, query: int) -> np.ndarray:
        """(K, d_head): scale · q ⊙ k_j; NaN where masked."""


def shown_dimensions(products: np.ndarray, key: int) -> np.ndarray:
    """The dimensions shown, in order: by their share of key `key`'s score, largest first (of a wide head, those of
    the largest share, in that order)."""
    shares = products[key]
    kept = np.argsort(-np.abs(shares), kind="stable")[:MAX_DIMENSIONS]
    return kept[np.argsort(-shares[kept], kind="stable")]


def neuron_figure(rows: Head, query: int, key: int | None, query_labels: list[str], key_labels: list[str],
                  heading: str, room: int | None = None) -> PlainFigure:
    """Row `query` of a head's weights as the vectors behind it; `key`: the key whose score sorts the dimensions
    (None, or a masked one: the heaviest key); `heading`: the title's first line (the head); `room`: the keys' rows
    the figure has room for, at least the ones the query sees (default: those), theirs listed from the top."""
    allowed = rows.allowed[query]
    if key is None or not 0 <= key < len(allowed) or not allowed[key]:
        key = int(np.nanargmax(np.where(allowed, rows.weights[query], np.nan)))
    seen = np.flatnonzero(allowed)  # the keys listed: a key the query cannot see is a word not yet written
    clicked = int(np.searchsorted(seen, key))  # the key that sorts the dimensions, among those listed
    products = rows.products(query)[seen]
    dimensions = shown_dimensions(products, clicked)
    rest = np.setdiff1d(np.arange(products.shape[1]), dimensions)
    names = [f"d{d + 1}" for d in dimensions] + ([f"+{len(rest)}"] if len(rest) else [])
    shown = products[:, dimensions]
    if len(rest):  # the other dimensions, summed: the row still sums to the score's q·k term
        shown = np.concatenate([shown, products[:, rest].sum(1, keepdims=True)], axis=1)
    term = products.sum(1)  # each key's scale·q·k
    bias = None if rows.bias is None else rows.bias[query][seen]
    weights = rows.weights[query][seen]
    key_axis = np.array(positions(key_labels), dtype=object)[seen].tolist()
    count, room = len(seen), max(room or 0, len(seen))
    query_vector, keys = rows.queries[query, dimensions], rows.keys[seen][:, dimensions]
    vector_range = float(np.max(np.abs(np.concatenate([query_vector, keys.ravel()])))) or 1.0
    product_range = float(np.max(np.abs(shown))) or 1.0
    scale = f"{rows.scale:.4g}"
    formula = f"score = {scale}·q·k" + (" + b (position bias, orange)" if bias is not None else "")
    masked = f" ({len(allowed) - count} keys {MASKED})" if count < len(allowed) else ""
    # Lines of at most ~48 characters: a phone's width at 13 px.
    lines = [heading, f"query: {label(query_labels[query], MAX_QUERY)}{masked}", formula,
             f"dims by their share of “{label(key_labels[key], MAX_LABEL)}”"]
    top = title_room(lines)
    plot = STRIP_PX + GAP_PX + ROW_PX * room  # the plot area: q's strip, a gap, a row per key it has room for
    keys_top = (ROW_PX * room) / plot  # where the keys' panels end, as a share of the plot area
    keys_domain = [keys_top * (1 - count / room), keys_top]  # the keys listed, from the top
    vector = dict(type="heatmap", colorscale=DIVERGING, zmid=0, zmin=-vector_range, zmax=vector_range,
                  showscale=False)
    dims = names[:len(dimensions)]
    query_vector, keys, shown = (np.round(values, DIGITS) for values in (query_vector, keys, shown))
    data = [
        dict(vector, z=[query_vector.tolist()], x=dims, y=["q"], xaxis="x", yaxis="y",
             hovertemplate="q, %{x}: %{z:.4f}<extra></extra>"),
        dict(vector, z=keys.tolist(), x=dims, y=key_axis, xaxis="x", yaxis="y2",
             hovertemplate="k of %{y}, %{x}: %{z:.4f}<extra></extra>"),
        dict(type="heatmap", z=shown.tolist(), x=names, y=key_axis, xaxis="x2", yaxis="y2", colorscale=DIVERGING,
             zmid=0, zmin=-product_range, zmax=product_range, showscale=False,
             hovertemplate="%{y}, %{x}: scale·q·k %{z:.4f}<extra></extra>"),
        dict(type="bar", orientation="h", x=term.tolist(), y=key_axis, xaxis="x3", yaxis="y2",
             marker=dict(color="#6b7280"), hovertemplate="%{y}: scale·q·k %{x:.4f}<extra></extra>"),
        dict(type="bar", orientation="h", x=weights.tolist(), y=key_axis, xaxis="x4", yaxis="y2",
             marker=dict(color=[HIGHLIGHT if j == clicked else "#2563eb" for j in range(count)]),
             text=[f"{w:.2f}" for w in weights], textposition="outside", textfont=dict(size=WEIGHT_FONT),
             cliponaxis=False, hovertemplate="%{y}: weight %{x:.4f}<extra></extra>"),
    ]
    if bias is not None:  # a term of its own, stacked on the q·k term
        data.append(dict(type="bar", orientation="h", x=bias.tolist(), y=key_axis, xaxis="x3", yaxis="y2",
                         marker=dict(color="#f59e0b"), hovertemplate="%{y}: position bias %{x:.4f}<extra></extra>"))
    dimension_axis = dict(anchor="y2", tickfont=dict(size=8), tickangle=-90, fixedrange=True)
    # Each panel's name above its rows, in the gap under q; the narrow score's and weight's apart from each other,
    # however narrow the figure.
    named = [("k (each key)", sum(COLUMNS["keys"]) / 2, "center"),
             ("scale·q⊙k", sum(COLUMNS["products"]) / 2, "center"), ("score", COLUMNS["scores"][1], "right"),
             ("weight", COLUMNS["weights"][0], "left")]
    outline = min(OUTLINED, len(dimensions))
    layout = dict(
        title=title_layout(lines), height=top + plot + BOTTOM_PX, showlegend=False, barmode="relative", bargap=0.25,
        margin=dict(l=8, r=8 + WEIGHT_LABEL_PX, t=top, b=BOTTOM_PX),
        xaxis=dict(dimension_axis, domain=COLUMNS["keys"]),
        xaxis2=dict(dimension_axis, domain=COLUMNS["products"]),
        xaxis3=dict(domain=COLUMNS["scores"], anchor="y2", tickfont=dict(size=8), nticks=3, fixedrange=True),
        xaxis4=dict(domain=COLUMNS["weights"], anchor="y2", range=[0, 1], showticklabels=False, fixedrange=True),
        yaxis=dict(domain=[1 - STRIP_PX / plot, 1], anchor="x", tickfont=TICK_FONT, fixedrange=True),
        yaxis2=dict(type="category", categoryorder="array", categoryarray=key_axis, autorange="reversed",
                    domain=keys_domain, anchor="x", tickfont=TICK_FONT, automargin=True, fixedrange=True),
        annotations=[dict(text=text, x=x, xanchor=anchor, y=keys_top, xref="paper", yref="paper", yanchor="bottom",
                          showarrow=False, font=dict(size=10)) for text, x, anchor in named],
        # The key that sorts the dimensions, and the dimensions of its largest shares.
        shapes=[dict(type="rect", xref="x2", yref="y2", x0=-0.5, x1=outline - 0.5, y0=clicked - 0.5,
                     y1=clicked + 0.5, line=dict(color=HIGHLIGHT, width=2))],
        meta={"fits": True},  # drawn in its box's width, whatever it is (ui/static/figures.js)
    )
    return plain_figure(data, layout)


def neuron_frames(rows: Head, query: int, key: int | None, query_labels: list[str], key_labels: list[str],
                  heading: str, stepped: bool) -> str:
    """`neuron_figure` as a plot's JSON; `stepped` (decoder and cross-attention, whose rows are steps): every row's
    figure, so that the browser shows the row of the page's step (ui/static/figures.js), `key` sorting each row
    where that row sees it. Every row has room for the most keys a row sees: the panel keeps its size as it steps."""
    if not stepped:
        return neuron_figure(rows, query, key, query_labels, key_labels, heading).to_json()
    room = int(rows.allowed.sum(1).max())
    each = [neuron_figure(rows, t, key, query_labels, key_labels, heading, room) for t in range(rows.queries.shape[0])]
    figure = each[query]  # drawn as it is until the page's step picks its frame
    frames = [{"data": [{name: trace[name] for name in ("z", "x", "y", "text", "marker") if name in trace}
                        for trace in shown.data],
               "axes": {"yaxis2": {name: shown.layout["yaxis2"][name] for name in ("categoryarray", "domain")}},
               "shapes": shown.layout["shapes"]} for shown in each]
    return figure.to_json({"titles": [shown.layout["title"]["text"] for shown in each], "frames": frames})
