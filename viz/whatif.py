"""What-if views: two decodings of one sentence compared, the effect of switched-off heads, head importance and
the beam; and where each generated word came from (ALTI+ contributions). Plain numbers and token lists in,
Plotly figures (or table rows) out.
"""

from __future__ import annotations

import difflib
import textwrap

import numpy as np

from attention_inspector.model.keys import KINDS, head_name
from attention_inspector.viz.attention import (COLORSCALE, DIVERGING, HIGHLIGHT, MIN_PLOT_PX, MODEBAR_ROOM, ROW_PX,
                                               TICK_FONT, X_LABEL_ROOM, PlainFigure, attention_heatmap, escape_text,
                                               plain_figure, positions, title_layout, title_room, title_text,
                                               token_axis, visible)

SAME, DIFFERS, FORCED = None, "differs", "chosen by you"
# What the heads heatmap can show, from a checkpoint's heads.json (model/analysis/heads.py): label -> (key, colour bar).
IMPORTANCE_MEASURES = {
    "importance (Michel et al.)": ("importance", "|∂L/∂ξ|, per layer"),
    "BLEU change with the head off": ("bleu_change", "Δ BLEU"),
    "log-likelihood change with the head off": ("log_likelihood_change", "Δ log-lik"),
    "log-likelihood change with the head off, estimated": ("log_likelihood_change_estimate", "Δ log-lik, est."),
    "entropy": ("entropy", "nats"),
    "confidence (Voita et al.)": ("confidence", "max weight"),
    "weight on <eos>": ("eos_weight", "weight"),
    "weight on punctuation": ("punctuation_weight", "weight"),
    "offset of the most attended key": ("offset", "positions"),
    "alignment error rate (output step)": ("alignment_aer", "AER"),
    "alignment error rate (shift-att)": ("shift_alignment_aer", "AER"),
}
# drawn on a red-white-blue scale around zero
SIGNED = {"bleu_change", "log_likelihood_change", "log_likelihood_change_estimate", "offset"}
# Why a measure may be missing from a report, and the command that measures it.
UNMEASURED = {"bleu_change": "measured with python -m model.analysis.heads --bleu-per-head "
                             "(the split decoded per head)",
              "log_likelihood_change_estimate": "made by python -m model.analysis.heads (every head, from gradients)"}


def token_differences(original: list[str], other: list[str], chosen: int | None = None) -> list[tuple[str, str | None]]:
    """`other`'s tokens for a gr.HighlightedText: the token at step `chosen` marked as chosen by the user, and the
    tokens that are not in `original` at the same place (a word-level diff) marked as differing."""
    matcher = difflib.SequenceMatcher(a=original, b=other, autojunk=False)
    same = {j for block in matcher.get_matching_blocks() for j in range(block.b, block.b + block.size)}
    return [(visible(token) + " ", FORCED if i == chosen else SAME if i in same else DIFFERS)
            for i, token in enumerate(other)]


def comparison_figure(rows: list[tuple[str, list[str], np.ndarray]], differing: list[set[int]],
                      unit: str = "token") -> PlainFigure:
    """Each decoding's per-token (or per-word: `unit`) probabilities, one bar chart per row (name, tokens,
    probabilities) above the next; tokens at the positions in `differing[row]` in red. Each chart's heading gives
    its total log-probability."""
    data, layout = [], {}
    gap, count = 0.3, len(rows)
    height = (1 - gap * (count - 1)) / count
    annotations = []
    for r, ((name, tokens, probabilities), marked) in enumerate(zip(rows, differing)):
        suffix = "" if r == 0 else str(r + 1)
        probabilities = np.asarray(probabilities, dtype=float)
        top = 1 - r * (height + gap)
        data.append(dict(type="bar", x=positions(tokens), y=probabilities.tolist(), xaxis=f"x{suffix}",
                         text=[f"{p:.2f}" for p in probabilities], textposition="outside", cliponaxis=False,
                         yaxis=f"y{suffix}", marker=dict(color=[HIGHLIGHT if i in marked else "#1f77b4"
                                                                for i in range(len(tokens))]),
                         hovertemplate="%{x}<br>probability %{y:.3f}<extra></extra>"))
        layout[f"xaxis{suffix}"] = token_axis(tokens, anchor=f"y{suffix}",
                                              tickfont=TICK_FONT)
        layout[f"yaxis{suffix}"] = dict(domain=[max(top - height, 0), top], range=[0, 1.2], anchor=f"x{suffix}",
                                        title=dict(text="p"))
        total = float(np.log(np.clip(probabilities, 1e-30, None)).sum())
        annotations.append(dict(text=title_text([f"{name}: log-probability {total:.2f}; each {unit}'s probability, "
                                                 "those that differ in red"]), x=0, y=top,
                                xref="paper", yref="paper", xanchor="left", yanchor="bottom", showarrow=False,
                                font=dict(size=12)))
    layout.update(annotations=annotations, height=220 * count + 36 + MODEBAR_ROOM,
                  margin=dict(l=10, r=10, t=MODEBAR_ROOM + 16, b=10),  # the first heading below the mode bar
                  showlegend=False, plot_bgcolor="white", uniformtext=dict(minsize=8, mode="hide"))
    return plain_figure(data, layout)


def log_prob_change_figure(tokens: list[str], change: np.ndarray, title: str) -> PlainFigure:
    """One bar per token: its log-probability with heads switched off minus with every head on (teacher-forced),
    red where the token lost probability."""
    change = np.asarray(change, dtype=float)
    bars = dict(type="bar", x=positions(tokens), y=change.tolist(), text=[f"{c:+.2f}" for c in change],
                textposition="outside", marker=dict(color=[HIGHLIGHT if c < 0 else "#1f77b4" for c in change]),
                hovertemplate="%{x}<br>Δ log-probability %{y:+.3f}<extra></extra>")
    span = max(0.5, float(np.abs(change).max(initial=0)) * 1.25)
    return plain_figure([bars], dict(
        title=title_layout([title]), height=280 + MODEBAR_ROOM, margin=dict(l=10, r=10, t=title_room([title]), b=10),
        plot_bgcolor="white", uniformtext=dict(minsize=8, mode="hide"),
        xaxis=token_axis(tokens, automargin=True, tickfont=TICK_FONT),
        yaxis=dict(range=[-span, span], title=dict(text="Δ log-probability"), zeroline=True),
    ))


def importance_figure(heads: dict[str, dict], shapes: dict[str, tuple[int, int]], measure: str,
                      note: str | None = None) -> PlainFigure:
    """A layers x heads heatmap per attention kind of one measure from heads.json (`shapes`: kind key ->
    (layers, heads)), `note` (what the measure is, e.g. an estimate and its measured error) under its title; a click
    opens a head (`head_grid_figure`)."""
    key, unit = IMPORTANCE_MEASURES[measure]
    values = {kind: np.array([[heads.get(head_name(kind, layer, head), {}).get(key, np.nan) for head in range(h)]
                              for layer in range(layers)], dtype=float) for kind, (layers, h) in shapes.items()}
    measured = any(np.isfinite(grid).any() for grid in values.values())
    title = [f"{measure}: click a head to open it"] + ([note] if note else []) if measured else [
        f"{measure}: not in this model's head report", UNMEASURED.get(key, "its command did not measure it")]
    return head_grid_figure(values, title, unit, signed=key in SIGNED)


def patching_figure(effects: dict[str, np.ndarray], title: list[str], unit: str,
                    skipped: dict[str, str] | None = None) -> PlainFigure:
    """Activation patching per head (model/explain/patching.py): each head's effect, patched − original, on a
    red-white-blue scale around zero; a kind that could not be patched is blank, with why (`skipped`) in its panel.
    A click opens a head."""
    return head_grid_figure(effects, title, unit, signed=True, notes=skipped)


def stream_figure(stream: np.ndarray, source_tokens: list[str], title: list[str], unit: str) -> PlainFigure:
    """Causal tracing's picture: the effect of the encoder's residual stream at each source position (columns) after
    each layer (rows; the first: the embeddings) taken from the counterfactual, red-white-blue around zero."""
    rows = ["embeddings"] + [f"after layer {layer}" for layer in range(1, stream.shape[0])]
    span = float(np.abs(stream).max(initial=0)) or 1.0
    below_title = 60 + 28 * len(rows) + X_LABEL_ROOM
    figure = attention_heatmap(stream, rows, source_tokens, title, query_label="encoder stream",
                               key_label="source position", value_label=unit, zmax=span, signed=True,
                               height=title_room(title) + below_title)
    figure.layout["meta"] = {"narrow": narrowed(title, below_title)}
    return figure


def head_grid_figure(values: dict[str, np.ndarray], title: list[str], unit: str, signed: bool,
                     notes: dict[str, str] | None = None) -> PlainFigure:
    """A layers x heads heatmap per attention kind (`values`: kind key -> (L, H), NaN blank), side by side on one
    colour scale (red-white-blue around zero where `signed`), a kind's `notes` written in its panel; each cell
    carries its head's name (customdata), so a click can open that head. Narrower than `NARROW_PX` (a phone), the
    panels are drawn one under another, the title's lines wrapped (`layout.meta.narrow`, ui/static/figures.js)."""
    kinds = [kind for kind in KINDS if kind in values]
    finite = np.concatenate([v[np.isfinite(v)] for v in values.values()] + [np.zeros(1)])
    span = float(np.abs(finite).max()) or 1.0
    scale = dict(colorscale=DIVERGING, cmin=-span, cmax=span) if signed else \
        dict(colorscale=COLORSCALE, cmin=0.0, cmax=span)
    gap = 0.06
    width = (1 - gap * (len(kinds) - 1)) / len(kinds)
    data, layout, annotations = [], {}, []
    for i, kind in enumerate(kinds):
        suffix = "" if i == 0 else str(i + 1)
        layers, count = values[kind].shape
        names = [[head_name(kind, layer, head) for head in range(count)] for layer in range(layers)]
        z = [[None if not np.isfinite(v) else float(v) for v in row] for row in values[kind]]
        data.append(dict(type="heatmap", z=z, x=[f"H{h + 1}" for h in range(count)],
                         y=[f"L{layer + 1}" for layer in range(layers)], customdata=names, coloraxis="coloraxis",
                         xaxis=f"x{suffix}", yaxis=f"y{suffix}", xgap=1, ygap=1,
                         hovertemplate="%{customdata}<br>" + escape_text(unit) + " %{z:.3f}<extra></extra>"))
        x0 = i * (width + gap)
        layout[f"xaxis{suffix}"] = dict(domain=[x0, x0 + width], anchor=f"y{suffix}", tickfont=dict(size=9),
                                        title=dict(text=kind, font=dict(size=11)))
        layout[f"yaxis{suffix}"] = dict(anchor=f"x{suffix}", autorange="reversed", tickfont=dict(size=9))
        if kind in (notes or {}):
            annotations.append(dict(text="<br>".join(map(escape_text, textwrap.wrap(notes[kind], 34))), x=0.5, y=0.5,
                                    xref=f"x{suffix} domain", yref=f"y{suffix} domain", showarrow=False,
                                    font=dict(size=11, color="#555")))
    layout.update(title=title_layout(title), annotations=annotations,
                  coloraxis=dict(**scale, colorbar=dict(thickness=12, title=dict(text=escape_text(unit)))),
                  height=260 + MODEBAR_ROOM, margin=dict(l=10, r=10, t=title_room(title), b=10), plot_bgcolor="white",
                  meta={"narrow": stacked(kinds, max(grid.shape[0] for grid in values.values()), title)})
    return plain_figure(data, layout)


NARROW_PX = 600  # a grid of panels drawn in a box narrower than this puts them one under another
NARROW_TITLE_CHARS = 46  # a title line's characters there


def narrowed(title: list[str], below_title: int, axes: dict | None = None) -> dict:
    """How a figure is drawn in a box narrower than `NARROW_PX` (a phone; ui/static/figures.js puts it in place):
    its title's lines wrapped, `below_title` pixels under them, its `axes` (name -> fields) changed."""
    lines = [part for line in title for part in textwrap.wrap(line, NARROW_TITLE_CHARS)]
    return {"below": NARROW_PX, "height": title_room(lines) + below_title, "top": title_room(lines),
            "title": title_text(lines), "axes": axes or {}}


def stacked(kinds: list[str], rows: int, title: list[str]) -> dict:
    """How a grid of panels side by side (`head_grid_figure`) is drawn in a narrow box: one panel under another,
    each as wide as the box, under the title with its lines wrapped."""
    panel, below = 40 + 16 * rows, 44  # a panel's plot area, and the room for its x axis and its name under it
    area = len(kinds) * (panel + below)
    axes = {}
    for i in range(len(kinds)):
        suffix = "" if i == 0 else str(i + 1)
        top = 1 - i * (panel + below) / area
        axes[f"xaxis{suffix}"] = {"domain": [0, 1]}
        axes[f"yaxis{suffix}"] = {"domain": [top - panel / area, top]}
    return narrowed(title, area + 10, axes)


def n_best_rows(hypotheses: list[tuple[str, float, float, int]], greedy: str) -> list[list]:
    """Table rows of a beam's finished hypotheses (translation, score, log-probability, tokens), best first:
    rank, translation, score, log-probability, tokens, and whether it is the greedy translation."""
    return [[rank, text, round(score, 4), round(log_probability, 4), length, "✓" if text == greedy else ""]
            for rank, (text, score, log_probability, length) in enumerate(hypotheses, start=1)]


def beam_step_rows(steps: list[list[tuple[list[str], float, bool]]], greedy_tokens: list[str]) -> list[list]:
    """Table rows of the beam at every step, from each step's hypotheses (tokens, log-probability, finished):
    step, rank, the hypothesis, its log-probability, whether it finished, whether it is on the greedy path."""
    rows = []
    for step, hypotheses in enumerate(steps, start=1):
        for rank, (tokens, log_probability, finished) in enumerate(hypotheses, start=1):
            on_greedy_path = tokens == greedy_tokens[:len(tokens)]
            rows.append([step, rank, " ".join(visible(t) for t in tokens), round(log_probability, 4),
                         "finished" if finished else "", "✓" if on_greedy_path else ""])
    return rows


LOW_SOURCE_SHARE = 0.5  # below it, a token came more from the target prefix than from the source


def source_share_figure(tokens: list[str], shares: np.ndarray) -> PlainFigure:
    """One bar per generated token: the share of its prediction that came from the source sentence (the rest came
    from the target prefix); tokens below LOW_SOURCE_SHARE in red, a possible sign of hallucination."""
    shares = np.asarray(shares, dtype=float)
    low = int((shares < LOW_SOURCE_SHARE).sum())
    bars = dict(type="bar", x=positions(tokens), y=shares.tolist(), text=[f"{s:.2f}" for s in shares],
                textposition="outside", marker=dict(color=[HIGHLIGHT if s < LOW_SOURCE_SHARE else "#1f77b4"
                                                           for s in shares]),
                hovertemplate="%{x}<br>from the source %{y:.3f}<extra></extra>")
    title = (f"share of each word's prediction that came from the source (ALTI+); {low} below "
             f"{LOW_SOURCE_SHARE:.0%}, in red" if low else
             "share of each word's prediction that came from the source (ALTI+); the rest came from the target prefix")
    return plain_figure([bars], dict(
        title=title_layout([title]), height=280 + MODEBAR_ROOM, margin=dict(l=10, r=10, t=title_room([title]), b=10),
        plot_bgcolor="white", uniformtext=dict(minsize=8, mode="hide"),
        xaxis=token_axis(tokens, automargin=True, tickfont=TICK_FONT),
        yaxis=dict(range=[0, 1.15], title=dict(text="source share")),
        shapes=[dict(type="line", xref="paper", x0=0, x1=1, y0=LOW_SOURCE_SHARE, y1=LOW_SOURCE_SHARE,
                     line=dict(color="#999", dash="dot", width=1))],
    ))


def contribution_figure(shares: np.ndarray, generated: list[str], source_tokens: list[str],
                        decoder_tokens: list[str]) -> PlainFigure:
    """The ALTI+ map: a row per generated token, its shares of every source token, then of every decoder input."""
    keys = [f"src {t}" for t in source_tokens] + [f"tgt {t}" for t in decoder_tokens]
    title = ["ALTI+ contributions: each generated word's shares of the source words (src) and of the target prefix "
             "(tgt)", "rows sum to 1; residuals and layer norms included"]
    return attention_heatmap(shares, [f"→ {t}" for t in generated], keys, title,
                             query_label="generated token", key_label="source tokens, then target prefix",
                             height=title_room(title) + min(470, max(MIN_PLOT_PX, ROW_PX * len(generated)))
                             + X_LABEL_ROOM, value_label="share")


def head_statistics_rows(statistics: dict[str, dict[str, np.ndarray]], shapes: dict[str, tuple[int, int]]
                         ) -> list[list]:
    """Table rows of every head's statistics (per kind key: statistic -> (L, H) array): the head's name,
    then each statistic rounded (an empty cell where one does not apply)."""
    rows = []
    for kind, (layers, heads) in shapes.items():
        for layer in range(layers):
            for head in range(heads):
                values = [statistics[kind][name][layer, head] for name in statistics[kind]]
                rows.append([head_name(kind, layer, head)] + [round(float(v), 3) if np.isfinite(v) else None
                                                            for v in values])
    return rows


def attribution_figure(source_tokens: list[str], target_tokens: list[str], source: np.ndarray, target: np.ndarray,
                       title: list[str], value_label: str) -> PlainFigure:
    """One bar per source token, then per decoder input before the step (marked "tgt"): how much each moved the
    step's log-probability (red where it lowered it; a saliency is a norm, never negative)."""
    values = np.concatenate([np.asarray(source, dtype=float), np.asarray(target, dtype=float)])
    tokens = [*source_tokens, *(f"tgt {t}" for t in target_tokens)]
    bars = dict(type="bar", x=positions(tokens), y=values.tolist(), text=[f"{v:+.2f}" for v in values],
                textposition="outside", marker=dict(color=[HIGHLIGHT if v < 0 else "#1f77b4" for v in values]),
                hovertemplate="%{x}<br>" + escape_text(value_label) + " %{y:+.4f}<extra></extra>")
    span = max(1e-3, float(np.abs(values).max(initial=0)) * 1.25)
    return plain_figure([bars], dict(
        title=title_layout(title), height=300 + MODEBAR_ROOM, margin=dict(l=10, r=10, t=title_room(title), b=10),
        plot_bgcolor="white", uniformtext=dict(minsize=8, mode="hide"),
        xaxis=token_axis(tokens, automargin=True, tickfont=TICK_FONT),
        yaxis=dict(range=[-span if (values < 0).any() else 0, span], title=dict(text=value_label), zeroline=True),
        shapes=[dict(type="line", xref="x", yref="paper", x0=len(source_tokens) - 0.5, x1=len(source_tokens) - 0.5,
                     y0=0, y1=1, line=dict(color="#999", dash="dot", width=1))],
    ))


FAITHFULNESS_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")
CONTROL = "random"  # model/explain/faithfulness.py's control ranking: drawn grey and dotted


MARKERS = ("circle-open", "square-open", "diamond-open", "triangle-up-open", "x", "cross", "star-open",
           "triangle-down-open")


def faithfulness_figure(comprehensiveness: dict[str, np.ndarray], sufficiency: dict[str, np.ndarray],
                        ks: list[str], title: str, labels: dict[str, str] | None = None) -> PlainFigure:
    """Each method's deletion curves side by side: comprehensiveness (the word's log-probability lost when the top
    k source tokens are removed: higher is more faithful) and sufficiency (lost when only they are kept: lower is
    more faithful), over k; each method named by `labels` (default: its key)."""
    data = []
    for index, key in enumerate(comprehensiveness):
        method = (labels or {}).get(key, key)
        line = dict(color="#7f7f7f", dash="dot") if key == CONTROL else \
            dict(color=FAITHFULNESS_COLOURS[index % len(FAITHFULNESS_COLOURS)])
        # Methods that rank alike draw the same curve: a marker of its own shows each one under the other.
        marker = dict(symbol=MARKERS[index % len(MARKERS)], size=9 - index % 3 * 2)
        for axis, values, shown in (("", comprehensiveness[key], True), ("2", sufficiency[key], False)):
            data.append(dict(type="scatter", mode="lines+markers", x=ks, y=np.round(values, 4).tolist(),
                             name=escape_text(method), legendgroup=method, showlegend=shown,
                             line=line, marker=marker, xaxis=f"x{axis}", yaxis=f"y{axis}",
                             hovertemplate=escape_text(method) + ": %{y:+.3f}<extra></extra>"))
    lines = [title, "left: comprehensiveness (higher: more faithful); right: sufficiency (lower: more faithful)"]
    return plain_figure(data, dict(
        title=title_layout(lines), height=360 + MODEBAR_ROOM, margin=dict(l=10, r=10, t=title_room(lines), b=10),
        plot_bgcolor="white", legend=dict(orientation="h", y=-0.2),
        hovermode="x unified",  # every method's value at a k in one box, those drawn under another's too
        xaxis=dict(domain=[0, 0.46], type="category", title=dict(text="top k source tokens removed")),
        xaxis2=dict(domain=[0.54, 1], type="category", title=dict(text="only the top k kept")),
        yaxis=dict(title=dict(text="log-probability lost"), zeroline=True, anchor="x"),
        yaxis2=dict(zeroline=True, anchor="x2"),
    ))
