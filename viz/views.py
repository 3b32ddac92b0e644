"""What the app shows at one decoding step: the right slice of the right attention map, as figures.

Inputs are plain numpy arrays and token lists taken from a decoding trace:
encoder (L_enc, H, S, S), decoder (L_dec, H, T, T), cross (L_dec, H, T, S); an array is None
when the model has no such attention (an RNN has no self-attention).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from viz.attention import (COLORSCALE, DIVERGING, PlainFigure, _heatmap, _row_outline, attention_heatmap,
                            bar_colors, bar_step, escape_text, head_grid, plain_figure, probability_bars,
                            title_layout, title_text, token_axis)

ENCODER, DECODER, CROSS = "Encoder self-attention", "Decoder self-attention", "Cross-attention"
KINDS = (ENCODER, DECODER, CROSS)
MEAN, ALL_HEADS = "Mean of heads", "All heads"
# How heads are named in masks and head tables (as the model names them): kind.layer.head, 1-based.
KIND_KEYS = {ENCODER: "encoder", DECODER: "decoder", CROSS: "cross"}
OFF = "switched off"


def head_key(kind: str, layer: int, head: int) -> str:
    """A head's name, "cross.2.5", from its kind (display name) and 0-based layer and head."""
    return f"{KIND_KEYS[kind]}.{layer + 1}.{head + 1}"


def parse_head_key(name: str) -> tuple[str, int, int] | None:
    """(kind display name, 0-based layer, 0-based head) of a head's name, or None if it is no such name."""
    parts = name.strip().lower().split(".") if isinstance(name, str) else []
    kinds = {key: kind for kind, key in KIND_KEYS.items()}
    if len(parts) != 3 or parts[0] not in kinds or not all(p.isdigit() for p in parts[1:]):
        return None
    return kinds[parts[0]], int(parts[1]) - 1, int(parts[2]) - 1


@dataclass(frozen=True)
class TraceArrays:
    """A decoding trace reduced to what the figures need."""

    source_tokens: list[str]
    decoder_tokens: list[str]  # decoder input at each step: <sos>, then the previous choice
    target_tokens: list[str]  # the token chosen at each step
    probabilities: np.ndarray  # (T,)
    top_tokens: list[list[str]]  # (T, k)
    top_probabilities: np.ndarray  # (T, k)
    encoder: np.ndarray | None
    decoder: np.ndarray | None
    cross: np.ndarray
    switched_off: frozenset[str] = frozenset()  # heads switched off while decoding, named as by `head_key`
    forced: int = 0  # how many first steps were chosen by the user, not the model
    # What the maps hold when they are a measure rather than attention weights (see MEASURES).
    measure: str = ""  # one line saying what it is
    value_label: str = "weight"
    scale_max: float = 1.0
    together: dict[str, np.ndarray] | None = None  # per kind, (L, Q, K): a measure of the heads together
    raw: dict[str, np.ndarray] | None = None  # per kind, the attention weights behind the measure (hover)

    @property
    def steps(self) -> int:
        return len(self.target_tokens)

    def available(self) -> list[str]:
        """The attention kinds this model has."""
        return [k for k, maps in zip(KINDS, (self.encoder, self.decoder, self.cross)) if maps is not None]

    def layers(self, kind: str) -> int:
        return self.maps(kind).shape[0]

    def heads(self, kind: str) -> int:
        return self.maps(kind).shape[1]

    def maps(self, kind: str) -> np.ndarray:
        maps = {ENCODER: self.encoder, DECODER: self.decoder, CROSS: self.cross}[kind]
        if maps is None:
            raise ValueError(f"this model has no {kind.lower()}")
        return maps

    def heads_off(self, kind: str) -> np.ndarray:
        """(L, H) True where the head was switched off."""
        layers, heads = self.maps(kind).shape[:2]
        return np.array([[head_key(kind, layer, head) in self.switched_off for head in range(heads)]
                         for layer in range(layers)], dtype=bool).reshape(layers, heads)

    def raw_at_step(self, kind: str, step: int) -> np.ndarray | None:
        """The attention weights behind a measure at `step`, sliced as `at_step` slices the measure."""
        if self.raw is None:
            return None
        step = min(max(step, 0), self.steps - 1)
        maps = self.raw[kind]
        return maps if kind == ENCODER else maps[:, :, :step + 1, :step + 1] if kind == DECODER else \
            maps[:, :, :step + 1]

    def at_step(self, kind: str, step: int) -> tuple[np.ndarray, list[str], list[str], int | None]:
        """(L, H, Q, K) weights, query tokens, key tokens and the row to highlight at `step`."""
        step = min(max(step, 0), self.steps - 1)
        prefix = self.decoder_tokens[:step + 1]
        if kind == ENCODER:
            return self.maps(kind), self.source_tokens, self.source_tokens, None
        if kind == DECODER:
            return self.maps(kind)[:, :, :step + 1, :step + 1], prefix, prefix, step
        return self.maps(kind)[:, :, :step + 1, :], prefix, self.source_tokens, step


def step_title(trace: TraceArrays, step: int) -> str:
    """'step 3 of 9: reads "hund", predicts "läuft" (p = 0.91)'; a forced step 'is given "läuft"'."""
    chooses = "is given" if step < trace.forced else "predicts"
    return (f"step {step + 1} of {trace.steps}: reads \"{trace.decoder_tokens[step]}\", "
            f"{chooses} \"{trace.target_tokens[step]}\" (p = {trace.probabilities[step]:.2f})")


def step_heading(trace: TraceArrays, step: int) -> str:
    """The step in a figure title, short enough for a phone: 'step 3 of 9: "hund" → "läuft" (p = 0.91)'."""
    return (f"step {step + 1} of {trace.steps}: \"{trace.decoder_tokens[step]}\" → \"{trace.target_tokens[step]}\" "
            f"(p = {trace.probabilities[step]:.2f})")


def step_description(trace: TraceArrays, step: int) -> str:
    """The step in words: what the decoder read and chose, the prefix so far and the top candidates."""
    prefix = " ".join(trace.target_tokens[:step]) or "(empty)"
    candidates = ", ".join(f"{t} {p:.2f}" for t, p in zip(trace.top_tokens[step], trace.top_probabilities[step]))
    return f"{step_title(trace, step)}\nprefix so far: {prefix}\ncandidates: {candidates}"


def query_rows(trace: TraceArrays, kind: str) -> int:
    """How many query rows a view of `kind` has at the last step: its figures keep that size at every step."""
    return len(trace.source_tokens) if kind == ENCODER else trace.steps


def attention_figure(trace: TraceArrays, kind: str, layer: int, head: int | str, step: int) -> PlainFigure:
    """One layer's attention at `step`: a single head, the mean of its heads, or all heads side by side.

    The figure's size depends on the view, not the step, so stepping redraws in place."""
    weights, queries, keys, highlight = trace.at_step(kind, step)
    layer = min(max(layer, 0), weights.shape[0] - 1)
    off = trace.heads_off(kind)[layer]  # (H,)
    query_label = "source token" if kind == ENCODER else "decoder input (step)"
    key_label = "source token" if kind != DECODER else "decoder input"
    rows = query_rows(trace, kind)
    scale = dict(value_label=trace.value_label, zmax=trace.scale_max)
    measured = [trace.measure] if trace.measure else []
    raw = trace.raw_at_step(kind, step)  # (L, H or 1, Q, K), behind a measure
    raw = None if raw is None else raw[layer]
    if head == ALL_HEADS:
        heads = weights.shape[1]
        return head_grid(weights[layer][None], queries, keys,
                         [f"{kind}, layer {layer + 1}, all {heads} heads", *measured, step_heading(trace, step)],
                         row_labels=[""], col_labels=[f"head {h + 1}" for h in range(heads)],
                         highlight_row=highlight, panel_height=max(150, 14 * rows), off=off[None],
                         raw=None if raw is None else raw[None], **scale)
    height = min(440, max(340, 150 + 22 * rows))  # with the step bar above it, fits a 900-pixel-high screen
    if head == MEAN and trace.together is not None:  # the heads together, not the mean of each head's measure
        together = trace.together[kind][layer]
        together = together if kind == ENCODER else together[:step + 1, :step + 1] if kind == DECODER else \
            together[:step + 1]
        return attention_heatmap(together, queries, keys,
                                 [f"{kind}, layer {layer + 1}, all heads together", *measured,
                                  step_heading(trace, step)], highlight, query_label, key_label, height,
                                 raw=None if raw is None else raw[~off].mean(0) if (~off).any() else None, **scale)
    if head == MEAN:
        # Switched-off heads added nothing to the layer's output: the mean is over the heads that were on.
        on = ~off
        mean = weights[layer][on].mean(axis=0) if on.any() else np.full(weights.shape[2:], np.nan)
        name = ("mean of heads" if on.all() else f"mean of the {on.sum()} heads on ({off.sum()} {OFF})" if on.any()
                else f"all {off.sum()} heads {OFF}")
        return attention_heatmap(mean, queries, keys,
                                 [f"{kind}, layer {layer + 1}, {name}", *measured, step_heading(trace, step)],
                                 highlight, query_label, key_label, height, note=None if on.any() else OFF, **scale)
    head = min(max(int(head), 0), weights.shape[1] - 1)
    named = "every head, combined" if trace.measure and weights.shape[1] == 1 else f"head {head + 1}"
    if off[head]:  # its weights were computed but never used: shown as no attention, not as attention
        return attention_heatmap(np.full(weights.shape[2:], np.nan), queries, keys,
                                 [f"{kind}, layer {layer + 1}, head {head + 1}: {OFF}", *measured,
                                  step_heading(trace, step)], highlight, query_label, key_label, height, note=OFF,
                                 **scale)
    return attention_heatmap(weights[layer, head], queries, keys,
                             [f"{kind}, layer {layer + 1}, {named}", *measured, step_heading(trace, step)],
                             highlight, query_label, key_label, height,
                             raw=None if raw is None else raw[min(head, raw.shape[0] - 1)], **scale)


def overview_figure(trace: TraceArrays, kind: str, step: int) -> PlainFigure:
    """Every layer x head of one attention kind at `step`, as small multiples (a per-step model view)."""
    weights, queries, keys, highlight = trace.at_step(kind, step)
    layers, heads = weights.shape[:2]
    return head_grid(weights, queries, keys,
                     [f"{kind}: all layers x heads", *([trace.measure] if trace.measure else []),
                      step_heading(trace, step)],
                     row_labels=[f"L{i + 1}" for i in range(layers)],
                     col_labels=[f"H{h + 1}" for h in range(heads)], highlight_row=highlight,
                     panel_height=max(150, 14 * query_rows(trace, kind)), off=trace.heads_off(kind),
                     value_label=trace.value_label, zmax=trace.scale_max, raw=trace.raw_at_step(kind, step))


def translation_figure(trace: TraceArrays, step: int | None = None) -> PlainFigure:
    """The probability of every chosen token; the current step in red."""
    return probability_bars(trace.target_tokens, trace.probabilities, "probability of each chosen token", step)


def candidates_title(trace: TraceArrays, step: int) -> str:
    return f"top-{len(trace.top_tokens[step])} candidates at step {step + 1}"


def chosen_rank(trace: TraceArrays, step: int) -> int | None:
    """Where the chosen token is among the step's candidates (0 unless the step was forced), or None."""
    candidates = trace.top_tokens[step]
    return candidates.index(trace.target_tokens[step]) if trace.target_tokens[step] in candidates else None


def candidates_figure(trace: TraceArrays, step: int) -> PlainFigure:
    """The top-k candidates at `step`, the chosen one in red."""
    return probability_bars(trace.top_tokens[step], trace.top_probabilities[step], candidates_title(trace, step),
                            chosen_rank(trace, step))


def translation_frames(trace: TraceArrays) -> dict:
    """What changes with the step whatever the view: the candidates and probability charts as gr.Plot JSON
    whose `layout.meta.bars` hold every step's bars (viz/stepping.js), and every step's description.

    A step's candidates differ in everything; the translation's probabilities only in the highlighted bar."""
    steps = range(trace.steps)
    candidates = [bar_step(trace.top_tokens[t], trace.top_probabilities[t], candidates_title(trace, t),
                           chosen_rank(trace, t)) for t in steps]
    probabilities = [{"colors": bar_colors(trace.steps, t)} for t in steps]
    return {"steps": trace.steps,
            "candidates": candidates_figure(trace, 0).to_json({"bars": candidates}),
            "probabilities": translation_figure(trace, 0).to_json({"bars": probabilities}),
            "description": [step_description(trace, t) for t in steps]}


def view_frames(trace: TraceArrays, kind: str, layer: int, head: int | str, model_view: bool,
                file_stem: str = "view") -> dict:
    """One view's attention figure (and model view, when asked) at the last step, as gr.Plot JSON whose
    `layout.meta` lets the browser show any earlier step (viz/stepping.js) and names the files it downloads as
    (`file_stem`, the view, the step)."""
    last = trace.steps - 1
    attention = attention_figure(trace, kind, layer, head, last)
    overview = overview_figure(trace, kind, last) if model_view else None
    return {"steps": trace.steps,
            "attention": _steppable(attention, trace, kind, f"{file_stem}_{view_name(kind, layer, head)}"),
            "overview": None if overview is None else _steppable(overview, trace, kind,
                                                                 f"{file_stem}_{KIND_KEYS[kind]}_model-view")}


def comparison_frames(decodings: list[tuple[str, TraceArrays]], kind: str, layer: int, head: int | str,
                      file_stem: str = "view") -> str:
    """Two models' decodings compared (`model_comparison_figure`) at the first one's last step, as gr.Plot JSON the
    browser steps like the view's own figure."""
    first = decodings[0][1]
    figure = model_comparison_figure(decodings, kind, layer, head, first.steps - 1)
    return _steppable(figure, first, kind, f"{file_stem}_{view_name(kind, layer, head)}_compared")


def view_name(kind: str, layer: int, head: int | str) -> str:
    """A view in a file name: 'cross_L2_H5', 'encoder_L1_mean', 'decoder_L3_all-heads'."""
    shown = {MEAN: "mean", ALL_HEADS: "all-heads"}.get(head, f"H{head + 1}" if isinstance(head, int) else "mean")
    return f"{KIND_KEYS[kind]}_L{layer + 1}_{shown}"


def _steppable(figure: PlainFigure, trace: TraceArrays, kind: str, file: str = "") -> str:
    """`figure` (built at the last step) as JSON, with how it grows per step, every step's title and the stem of
    the file names its downloads get."""
    heading = "<br>".join(figure.layout["title"]["text"].split("<br>")[:-1])  # all but the step's line
    return figure.to_json({"grows": {ENCODER: None, DECODER: "square", CROSS: "rows"}[kind],
                           "titles": [f"{heading}<br>{title_text([step_heading(trace, t)])}"
                                      for t in range(trace.steps)], "file": file})


def _layer_map(trace: TraceArrays, kind: str, layer: int, head: int | str, step: int
               ) -> tuple[np.ndarray, list[str], list[str], str]:
    """One (Q, K) map of `trace` at `step` for a comparison: the layer and head asked for where the model has them
    (else its last layer, the mean of its heads), with what was taken."""
    weights, queries, keys, _ = trace.at_step(kind, min(step, trace.steps - 1))
    layer = min(max(layer, 0), weights.shape[0] - 1)
    on = ~trace.heads_off(kind)[layer]
    if isinstance(head, int) and head < weights.shape[1]:
        taken = weights[layer, head] if on[head] else np.full(weights.shape[2:], np.nan)
        return taken, queries, keys, f"layer {layer + 1}, head {head + 1}" + (" (switched off)" * (not on[head]))
    mean = weights[layer][on].mean(0) if on.any() else np.full(weights.shape[2:], np.nan)
    if weights.shape[1] == 1:
        return mean, queries, keys, f"layer {layer + 1}, its one head"
    return mean, queries, keys, f"layer {layer + 1}, mean of {'its' if on.all() else 'the on'} {on.sum()} heads"


def model_comparison_figure(decodings: list[tuple[str, TraceArrays]], kind: str, layer: int, head: int | str,
                            step: int) -> PlainFigure:
    """The same attention (kind, layer, head) of two models' decodings side by side at `step`, and their difference
    (first minus second: red where the second attends more) where both read the same tokens; a model without that
    attention kind gets a note."""
    (first_name, first), (second_name, _) = decodings
    step = min(step, first.steps - 1)
    panels = []  # (name, map, queries, keys, is the difference)
    for name, trace in decodings:
        if kind in trace.available():
            weights, queries, keys, taken = _layer_map(trace, kind, layer, head, step)
            panels.append((f"{name}: {taken}", weights, queries, keys, False))
    notes = [f"{name} has no {kind.lower()}" for name, trace in decodings if kind not in trace.available()]
    if len(panels) == 2 and panels[0][2:4] == panels[1][2:4] and panels[0][1].shape == panels[1][1].shape:
        panels.append((f"{first_name} − {second_name}", panels[0][1] - panels[1][1], panels[0][2], panels[0][3], True))
    elif len(panels) == 2:
        notes.append("the two read different tokens here (their translations or tokenizers differ), so there is no "
                     "difference map")
    rows = max(len(queries) for _, _, queries, _, _ in panels) if panels else 1
    plot_height = max(220, 22 * rows) + 24
    top = 1 - 24 / plot_height  # the maps end below a strip that holds their names, under the title
    count = max(len(panels), 1)
    gap = 0.07
    width = (1 - gap * (count - 1)) / count
    data, layout, annotations, shapes = [], {}, [], []
    highlight = None if kind == ENCODER else step
    for i, (name, weights, queries, keys, difference) in enumerate(panels):
        suffix = "" if i == 0 else str(i + 1)
        x0 = i * (width + gap)
        data.append(_heatmap(weights, queries, keys, name, value_label="difference" if difference else "weight",
                             coloraxis="coloraxis2" if difference else "coloraxis", xaxis=f"x{suffix}",
                             yaxis=f"y{suffix}"))
        layout[f"xaxis{suffix}"] = token_axis(keys, domain=[x0, x0 + width], anchor=f"y{suffix}", tickangle=-45,
                                               tickfont=dict(size=9), automargin=True)
        layout[f"yaxis{suffix}"] = token_axis(queries, domain=[0, top], anchor=f"x{suffix}", autorange="reversed",
                                               tickfont=dict(size=9), automargin=True)
        annotations.append(dict(text=escape_text(name), x=x0 + width / 2, y=top, xref="paper", yref="paper",
                                xanchor="center", yanchor="bottom", showarrow=False, font=dict(size=11)))
        if highlight is not None:
            shapes.append(_row_outline(highlight, len(keys), f"x{suffix}", f"y{suffix}", 2))
    lines = [f"{kind}: {first_name} and {second_name} compared (weights)", *notes, step_heading(first, step)]
    layout.update(title=title_layout(lines), annotations=annotations, shapes=shapes, plot_bgcolor="white",
                  height=int(120 + 17 * len(lines) + plot_height), margin=dict(l=10, r=10, t=24 + 17 * len(lines), b=10),
                  coloraxis=dict(colorscale=COLORSCALE, cmin=0.0, cmax=1.0,
                                 colorbar=dict(thickness=12, len=0.45, y=0.78, title=dict(text="weight"))),
                  coloraxis2=dict(colorscale=DIVERGING, cmin=-1.0, cmax=1.0,
                                  colorbar=dict(thickness=12, len=0.45, y=0.22, title=dict(text="difference"))))
    return plain_figure(data, layout)
