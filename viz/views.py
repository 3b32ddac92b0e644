"""What the app shows at one decoding step: the right slice of the right attention map, as figures.

Inputs are plain numpy arrays and token lists taken from a decoding trace:
encoder (L_enc, H, S, S), decoder (L_dec, H, T, T), cross (L_dec, H, T, S); an array is None
when the model has no such attention (an RNN has no self-attention).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from attention_inspector.model.keys import ALL_HEADS, CROSS, DECODER, ENCODER, KIND_LABELS, KINDS, MEAN, head_name
from attention_inspector.model.text.words import PIECES, WHOLE, WORDS, merge, word_label, word_spans
from attention_inspector.viz.attention import (COLORSCALE, DIVERGING, GRID_SIDES, KEY_PX, MAX_PLOT_PX, MIN_PLOT_PX,
                                               NAME_ROOM, ROW_PX, TICK_FONT, TICK_SPACING, X_LABEL_ROOM, PlainFigure,
                                               Word, _colorbar, _heatmap, _row_outline, attention_heatmap, bar_colors,
                                               bar_step, head_grid, label, label_every, plain_figure,
                                               probability_bars, step_labels, title_layout, title_room, title_text,
                                               token_axis)

OFF = "switched off"
# A map of the whole model (gradient attributions) in the view of a kind: what it holds instead of a layer's heads.
LEFT_OUT = " ✗"  # after a source key the translation left out (model/explain/omissions.py)
WHOLE_MODEL = {CROSS: "Attribution of each step's prediction to the source", DECODER: "Attribution of each step's "
               "prediction to the target prefix"}


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
    switched_off: frozenset[str] = frozenset()  # heads switched off while decoding, named as by `head_name`
    forced: int = 0  # how many first steps were chosen by the user, not the model
    # What the maps hold when they are a measure rather than attention weights (see MEASURES).
    measure: str = ""  # a line (or two, split by "\n") saying what it is
    value_label: str = "weight"
    # 1.0: the values have a fixed 0..1 colour scale (weights, shares). Anything else marks a measure with no fixed
    # top (weight x value norm): each figure is then scaled to the largest value its view shows (`view_scale`).
    scale_max: float = 1.0
    signed: bool = False  # the values have signs (gradient attributions): a red-white-blue scale around zero
    whole_model: bool = False  # one map per kind of the whole model, not of a layer (gradient attributions)
    together: dict[str, np.ndarray] | None = None  # per kind, (L, Q, K): a measure of the heads together
    raw: dict[str, np.ndarray] | None = None  # per kind, the attention weights behind the measure (hover)
    # Pieces or words (model/text/words.py): how the tokenizer's pieces make words, and which of the two the views show.
    scheme: str = WHOLE
    units: str = PIECES
    # The source tokens (indices) of the words the translation left out (model/explain/omissions.py): marked as keys.
    left_out: frozenset[int] = frozenset()

    @property
    def in_words(self) -> bool:
        """Whether the views merge pieces into words (a model of whole words has nothing to merge)."""
        return self.units == WORDS and self.scheme != WHOLE

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
            raise ValueError(f"this model has no {KIND_LABELS[kind].lower()}")
        return maps

    def heads_off(self, kind: str) -> np.ndarray:
        """(L, H) True where the head was switched off."""
        layers, heads = self.maps(kind).shape[:2]
        return np.array([[head_name(kind, layer, head) in self.switched_off for head in range(heads)]
                         for layer in range(layers)], dtype=bool).reshape(layers, heads)

    def sliced(self, kind: str, maps: np.ndarray, step: int) -> np.ndarray:
        """Maps (..., Q, K) of `kind` as the view shows them at `step`: the rows (and decoder keys) up to it, merged
        into words when the view shows words."""
        step = min(max(step, 0), self.steps - 1)
        if kind != ENCODER:
            maps = maps[..., :step + 1, :step + 1] if kind == DECODER else maps[..., :step + 1, :]
        if not self.in_words:
            return maps
        rows, keys = self.word_spans(kind, step)
        return merge(maps, rows, keys)

    def word_spans(self, kind: str, step: int) -> tuple[list[range], list[range]]:
        """The pieces of each word of a view's rows and keys at `step`: rows are source words (encoder) or the
        words the steps so far output, the last one perhaps still being written; keys source words or the words
        the decoder read."""
        source = word_spans(self.source_tokens, self.scheme)
        if kind == ENCODER:
            return source, source
        rows = word_spans(self.target_tokens[:step + 1], self.scheme)
        return rows, source if kind == CROSS else word_spans(self.decoder_tokens[:step + 1], self.scheme)

    def words(self, tokens: list[str], spans: list[range]) -> list[str]:
        """The word of each span of `tokens`, carrying its pieces (shown on hover)."""
        return [Word(word_label(tokens[span.start:span.stop], self.scheme), tokens[span.start:span.stop])
                for span in spans]

    def raw_at_step(self, kind: str, step: int) -> np.ndarray | None:
        """The attention weights behind a measure at `step`, sliced (and merged) as `at_step` does the measure."""
        return None if self.raw is None else self.sliced(kind, self.raw[kind], step)

    def together_at_step(self, kind: str, layer: int, step: int) -> np.ndarray:
        """A layer's measure of the heads together at `step`, as `at_step` shows maps."""
        return self.sliced(kind, self.together[kind][layer], step)

    def at_step(self, kind: str, step: int) -> tuple[np.ndarray, list[str], list[str], int | None]:
        """(L, H, Q, K) weights, query tokens, key tokens and the row to highlight at `step` (in words: the word
        the step's output belongs to)."""
        step = min(max(step, 0), self.steps - 1)
        weights = self.sliced(kind, self.maps(kind), step)
        prefix = self.decoder_tokens[:step + 1]
        if self.in_words:
            rows, keys = self.word_spans(kind, step)
            queries = self.source_tokens if kind == ENCODER else self.decoder_tokens
            key_words = self.words(self.decoder_tokens, keys) if kind == DECODER else \
                [Word(word + LEFT_OUT * any(i in self.left_out for i in span), word.pieces)
                 for word, span in zip(self.words(self.source_tokens, keys), keys)]
            return weights, self.words(queries, rows), key_words, None if kind == ENCODER else len(rows) - 1
        source = [token + LEFT_OUT * (i in self.left_out) for i, token in enumerate(self.source_tokens)]
        if kind == ENCODER:
            return weights, self.source_tokens, source, None
        return weights, prefix, prefix if kind == DECODER else source, step

    def written_word(self, step: int) -> WrittenWord:
        """The word step `step` writes a piece of (in words): where it is among the translation's words, the word
        before it, the word so far, and which of its pieces the step writes."""
        spans = word_spans(self.target_tokens, self.scheme)
        index = next(i for i, span in enumerate(spans) if step in span)
        span = spans[index]
        before = "<sos>" if index == 0 else word_label(self.target_tokens[spans[index - 1].start:spans[index - 1].stop],
                                                       self.scheme)
        return WrittenWord(index, len(spans), before, word_label(self.target_tokens[span.start:step + 1], self.scheme),
                           step == span.stop - 1, step - span.start, len(span))


@dataclass(frozen=True)
class WrittenWord:
    """A word of a translation as one of its steps writes it (`TraceArrays.written_word`)."""

    index: int  # among the translation's words, from 0
    count: int  # the translation's words
    before: str  # the word before it ("<sos>" for the first)
    text: str  # the word so far
    finished: bool  # the step writes its last piece
    piece: int  # the piece the step writes, from 0
    pieces: int


def query_labels(trace: TraceArrays, kind: str, step: int) -> list[str]:
    """A view's row labels at `step`: source tokens for the encoder; a decoder row is the step that reads one token
    and outputs the next, "mann → liest" (`step_labels`), so it is not taken for the word that attends. In words,
    a row is the steps that wrote one word, "der → zeitungsleserin": the word before it → the word."""
    step = min(max(step, 0), trace.steps - 1)
    if trace.in_words:
        rows, _ = trace.word_spans(kind, step)
        if kind == ENCODER:
            return trace.words(trace.source_tokens, rows)
        written = trace.words(trace.target_tokens, rows)
        return [Word(label, word.pieces) for label, word in zip(step_labels(["<sos>", *written[:-1]], written),
                                                                 written)]
    if kind == ENCODER:
        return trace.source_tokens
    return step_labels(trace.decoder_tokens[:step + 1], trace.target_tokens[:step + 1])


def view_shape(trace: TraceArrays, kind: str) -> tuple[int, int]:
    """(rows, keys) of a view of `kind` at the last step: its figures keep that size and labelling at every step."""
    if trace.in_words:
        rows, keys = trace.word_spans(kind, trace.steps - 1)
        return len(rows), len(keys)
    return query_rows(trace, kind), trace.steps if kind == DECODER else len(trace.source_tokens)


def view_scale(trace: TraceArrays, kind: str, layer: int | None, head: int | str) -> dict:
    """A view's colour scale (`value_label`, `zmax`, `signed`): 0..1 for weights and shares; for a measure with no
    fixed top, 0 (or, signed, −zmax) to the largest value (absolute value) the view shows at any step (`layer`
    None: every layer, the model view), so that stepping, which keeps the colour axis, keeps one scale."""
    if trace.scale_max == 1.0:
        return dict(value_label=trace.value_label, zmax=1.0, signed=trace.signed)
    last = trace.steps - 1  # every step: the last one shows every row
    maps, off = trace.sliced(kind, trace.maps(kind), last), trace.heads_off(kind)
    if layer is None:
        shown = maps[~off]
    elif head == MEAN and trace.together is not None:
        shown = trace.together_at_step(kind, layer, last)
    elif head in (MEAN, ALL_HEADS):  # the mean of the heads that were on, or each of them
        shown = maps[layer][~off[layer]]
    else:
        shown = maps[layer, head] if not off[layer, head] else np.empty(0)
    finite = np.asarray(shown, dtype=float)
    finite = finite[np.isfinite(finite)]
    top = float(np.abs(finite).max() if trace.signed else finite.max()) if finite.size else 0.0
    return dict(value_label=trace.value_label, zmax=top if top > 0 else 1.0, signed=trace.signed)


WORD_CHARS = 16  # a word in a title or the step's line, cut (words are long; a title's line must fit a phone)


def step_title(trace: TraceArrays, step: int) -> str:
    """'step 3 of 9: reads "hund", predicts "läuft" (p = 0.91)'; a forced step 'is given "läuft"'. In words, the word
    being written: 'word 2 of 5: reads "die", building "zeitungsles…"' (or 'writes "zeitungsleserin"' at its last
    piece)."""
    if trace.in_words:
        word = trace.written_word(step)
        return (f"word {word.index + 1} of {word.count}: reads \"{label(word.before, WORD_CHARS)}\", "
                + (f"writes \"{label(word.text, WORD_CHARS)}\"" if word.finished else
                   f"building \"{label(word.text, WORD_CHARS)}…\""))
    return (f"step {step + 1} of {trace.steps}: reads \"{trace.decoder_tokens[step]}\", {_chooses(trace, step)} "
            f"\"{trace.target_tokens[step]}\" (p = {trace.probabilities[step]:.2f})")


def _chooses(trace: TraceArrays, step: int) -> str:
    return "is given" if step < trace.forced else "predicts"


def piece_line(trace: TraceArrays, step: int, chooses: bool = False) -> str:
    """In words, which piece of its word a step writes: 'step 3 of 7: piece 2 of 3, "les@@" (p = 0.42)' ('one
    piece' for a word of one); `chooses`: '..., predicts "les@@" ...' (or 'is given')."""
    word = trace.written_word(step)
    which = f"piece {word.piece + 1} of {word.pieces}" if word.pieces > 1 else "one piece"
    return (f"step {step + 1} of {trace.steps}: {which}, {_chooses(trace, step) + ' ' if chooses else ''}"
            f"\"{trace.target_tokens[step]}\" (p = {trace.probabilities[step]:.2f})")


def step_heading(trace: TraceArrays, step: int) -> list[str]:
    """The step in a figure title, lines short enough for a phone: 'step 3 of 9: "hund" → "läuft" (p = 0.91)'. In
    words, the rows' word as its row is named, 'word 2 of 5: "die" → "zeitungsles…"' (… until its last piece), then
    the piece the step writes (`piece_line`): two lines at every step, so stepping keeps the title's height."""
    if trace.in_words:
        word = trace.written_word(step)
        return [f"word {word.index + 1} of {word.count}: \"{label(word.before, WORD_CHARS)}\" → "
                f"\"{label(word.text, WORD_CHARS)}{'' if word.finished else '…'}\"", piece_line(trace, step)]
    return [f"step {step + 1} of {trace.steps}: \"{trace.decoder_tokens[step]}\" → \"{trace.target_tokens[step]}\" "
            f"(p = {trace.probabilities[step]:.2f})"]


def step_description(trace: TraceArrays, step: int) -> str:
    """The step in words: what the decoder read and chose (in words, the word being written, then the piece the step
    chose), the prefix so far (in the view's units) and the top candidates, each quoted (a candidate may be a
    comma)."""
    written = trace.target_tokens[:step]
    lines = [step_title(trace, step)]
    if trace.in_words:
        written = [str(word) for word in trace.words(written, word_spans(written, trace.scheme))]
        lines.append(piece_line(trace, step, chooses=True))
    candidates = ", ".join(f'"{t}" {p:.2f}' for t, p in zip(trace.top_tokens[step], trace.top_probabilities[step]))
    return "\n".join([*lines, f"prefix so far: {' '.join(written) or '(empty)'}", f"candidates: {candidates}"])


def query_rows(trace: TraceArrays, kind: str) -> int:
    """How many query rows a view of `kind` has at the last step: its figures keep that size at every step."""
    if trace.in_words:
        return view_shape(trace, kind)[0]
    return len(trace.source_tokens) if kind == ENCODER else trace.steps


def attention_figure(trace: TraceArrays, kind: str, layer: int, head: int | str, step: int) -> PlainFigure:
    """One layer's attention at `step`: a single head, the mean of its heads, or all heads side by side.

    The figure's size, labelling and colour scale depend on the view, not the step, so stepping redraws in place."""
    weights, _, keys, highlight = trace.at_step(kind, step)
    queries = query_labels(trace, kind, step)
    layer = min(max(layer, 0), weights.shape[0] - 1)
    if head not in (MEAN, ALL_HEADS):
        head = min(max(int(head), 0), weights.shape[1] - 1)
    off = trace.heads_off(kind)[layer]  # (H,)
    query_label = "source token" if kind == ENCODER else "step: decoder input → output"
    key_label = "source token" if kind != DECODER else "decoder input"
    shape = view_shape(trace, kind)
    scale = dict(view_scale(trace, kind, layer, head), view_shape=shape)
    measured = trace.measure.splitlines()
    raw = trace.raw_at_step(kind, step)  # (L, H or 1, Q, K), behind a measure
    raw = None if raw is None else raw[layer]
    if head == ALL_HEADS:
        heads = weights.shape[1]
        return head_grid(weights[layer][None], queries, keys,
                         [f"{KIND_LABELS[kind]}, layer {layer + 1}, all {heads} heads", *measured,
                          *step_heading(trace, step)],
                         row_labels=[""], col_labels=[f"head {h + 1}" if heads <= 4 else f"H{h + 1}"
                                                      for h in range(heads)],
                         highlight_row=highlight, panel_height=max(150, 14 * shape[0]), off=off[None],
                         raw=None if raw is None else raw[None], **scale)
    if head == MEAN and trace.together is not None:  # the heads together, not the mean of each head's measure
        together = trace.together_at_step(kind, layer, step)
        return attention_heatmap(together, queries, keys,
                                 [f"{KIND_LABELS[kind]}, layer {layer + 1}, all heads together", *measured,
                                  *step_heading(trace, step)], highlight, query_label, key_label,
                                 raw=None if raw is None else raw[~off].mean(0) if (~off).any() else None, **scale)
    if head == MEAN:
        # Switched-off heads added nothing to the layer's output: the mean is over the heads that were on.
        on = ~off
        mean = weights[layer][on].mean(axis=0) if on.any() else np.full(weights.shape[2:], np.nan)
        name = ("mean of heads" if on.all() else f"mean of the {on.sum()} heads on ({off.sum()} {OFF})" if on.any()
                else f"all {off.sum()} heads {OFF}")
        return attention_heatmap(mean, queries, keys,
                                 [f"{KIND_LABELS[kind]}, layer {layer + 1}, {name}", *measured,
                                  *step_heading(trace, step)],
                                 highlight, query_label, key_label, note=None if on.any() else OFF, **scale)
    named = "every head, combined" if trace.measure and weights.shape[1] == 1 else f"head {head + 1}"
    if off[head]:  # its weights were computed but never used: shown as no attention, not as attention
        return attention_heatmap(np.full(weights.shape[2:], np.nan), queries, keys,
                                 [f"{KIND_LABELS[kind]}, layer {layer + 1}, head {head + 1}: {OFF}", *measured,
                                  *step_heading(trace, step)], highlight, query_label, key_label, note=OFF, **scale)
    heading = WHOLE_MODEL[kind] if trace.whole_model else f"{KIND_LABELS[kind]}, layer {layer + 1}, {named}"
    return attention_heatmap(weights[layer, head], queries, keys, [heading, *measured, *step_heading(trace, step)],
                             highlight, query_label, key_label,
                             raw=None if raw is None else raw[min(head, raw.shape[0] - 1)], **scale)


def overview_figure(trace: TraceArrays, kind: str, step: int) -> PlainFigure:
    """Every layer x head of one attention kind at `step`, as small multiples (a per-step model view)."""
    weights, _, keys, highlight = trace.at_step(kind, step)
    layers, heads = weights.shape[:2]
    return head_grid(weights, query_labels(trace, kind, step), keys,
                     [WHOLE_MODEL[kind] if trace.whole_model else f"{KIND_LABELS[kind]}: all layers x heads",
                      *trace.measure.splitlines(),
                      *step_heading(trace, step)],
                     row_labels=[f"L{i + 1}" for i in range(layers)],
                     col_labels=[f"H{h + 1}" for h in range(heads)], highlight_row=highlight,
                     panel_height=max(150, 14 * query_rows(trace, kind)), off=trace.heads_off(kind),
                     raw=trace.raw_at_step(kind, step), view_shape=view_shape(trace, kind),
                     **view_scale(trace, kind, None, ALL_HEADS))


def chosen_words(trace: TraceArrays) -> tuple[list[str], np.ndarray, list[int], str]:
    """The translation as the probability chart shows it: its tokens, or (where the view shows words) its words,
    each with the product of its pieces' probabilities; which bar each step writes; the chart's title."""
    if not trace.in_words:
        return trace.target_tokens, trace.probabilities, list(range(trace.steps)), "probability of each chosen token"
    spans = word_spans(trace.target_tokens, trace.scheme)
    writing = [index for index, span in enumerate(spans) for _ in span]
    return (trace.words(trace.target_tokens, spans),
            np.array([float(np.prod(trace.probabilities[span.start:span.stop])) for span in spans]), writing,
            "probability of each chosen word (the product of its pieces')")


def translation_figure(trace: TraceArrays, step: int | None = None) -> PlainFigure:
    """The probability of every chosen token (or word); the one the current step writes in red."""
    labels, values, writing, title = chosen_words(trace)
    return probability_bars(labels, values, title, None if step is None else writing[step])


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
    whose `layout.meta.bars` hold every step's bars (ui/static/figures.js), and every step's description.

    A step's candidates differ in everything; the translation's probabilities only in the highlighted bar."""
    steps = range(trace.steps)
    candidates = [bar_step(trace.top_tokens[t], trace.top_probabilities[t], candidates_title(trace, t),
                           chosen_rank(trace, t)) for t in steps]
    return {"steps": trace.steps, "candidates": candidates_figure(trace, 0).to_json({"bars": candidates}),
            "probabilities": probability_frames(trace), "description": step_descriptions(trace)}


def step_descriptions(trace: TraceArrays) -> list[str]:
    """Every step's line (`step_description`), in the trace's units."""
    return [step_description(trace, t) for t in range(trace.steps)]


def probability_frames(trace: TraceArrays) -> str:
    """The probability chart (`translation_figure`, in the view's units) as gr.Plot JSON whose `layout.meta.bars`
    hold every step's colours: the token chosen, or the word being written, in red."""
    labels, values, writing, title = chosen_words(trace)
    bars = [{"colors": bar_colors(len(labels), bar)} for bar in writing]
    return probability_bars(labels, values, title, writing[0]).to_json({"bars": bars})


def view_frames(trace: TraceArrays, kind: str, layer: int, head: int | str, model_view: bool,
                file_stem: str = "view") -> dict:
    """One view's attention figure (and model view, when asked) at the last step, as gr.Plot JSON whose
    `layout.meta` lets the browser show any earlier step (ui/static/figures.js) and names the files it downloads as
    (`file_stem`, the view, the step)."""
    last = trace.steps - 1
    attention = attention_figure(trace, kind, layer, head, last)
    overview = overview_figure(trace, kind, last) if model_view else None
    return {"steps": trace.steps,
            "attention": _steppable(attention, trace, kind, f"{file_stem}_{view_name(kind, layer, head)}",
                                    lambda t: attention_figure(trace, kind, layer, head, t)),
            "overview": None if overview is None else _steppable(overview, trace, kind,
                                                                 f"{file_stem}_{kind}_model-view",
                                                                 lambda t: overview_figure(trace, kind, t))}


def comparison_frames(decodings: list[tuple[str, TraceArrays]], kind: str, layer: int, head: int | str,
                      file_stem: str = "view") -> str:
    """Two models' decodings compared (`model_comparison_figure`) at the first one's last step, as gr.Plot JSON the
    browser steps like the view's own figure."""
    first = decodings[0][1]
    figure = model_comparison_figure(decodings, kind, layer, head, first.steps - 1)
    return _steppable(figure, first, kind, f"{file_stem}_{view_name(kind, layer, head)}_compared",
                      lambda t: model_comparison_figure(decodings, kind, layer, head, t))


def view_name(kind: str, layer: int, head: int | str) -> str:
    """A view in a file name: 'cross_L2_H5', 'encoder_L1_mean', 'decoder_L3_all-heads'."""
    shown = {MEAN: "mean", ALL_HEADS: "all-heads"}.get(head, f"H{head + 1}" if isinstance(head, int) else "mean")
    return f"{kind}_L{layer + 1}_{shown}"


def _steppable(figure: PlainFigure, trace: TraceArrays, kind: str, file: str = "",
               figure_at: Callable[[int], PlainFigure] | None = None) -> str:
    """`figure` (built at the last step) as JSON, with how it grows per step, every step's title and the stem of
    the file names its downloads get.

    In pieces, step t's figure is the last step's cut to its first t + 1 rows (and keys). In words it is not quite
    (the word being written is the mean of its pieces so far), so each step's cells, labels and outline are sent
    (`figure_at`, "frames"), each as what differs from the last step's (`_frame`)."""
    step_lines = len(step_heading(trace, 0))  # the same at every step
    heading = "<br>".join(figure.layout["title"]["text"].split("<br>")[:-step_lines])  # all but the step's lines
    meta = {"grows": {ENCODER: None, DECODER: "square", CROSS: "rows"}[kind],
            "titles": [f"{heading}<br>{title_text(step_heading(trace, t))}" for t in range(trace.steps)],
            "file": file}
    if trace.in_words and kind != ENCODER and figure_at is not None:
        meta.update(grows=None, frames=[_frame(figure_at(t), figure) for t in range(trace.steps)])
    return figure.to_json(meta)


FRAME_AXIS_FIELDS = ("categoryarray", "tickvals", "ticktext")


def _frame(figure: PlainFigure, last: PlainFigure) -> dict:
    """What a stepped figure shows at one step besides its title: each trace's cells and categories, each axis's
    categories and labels, the outlines; each list as what differs from `last`, the figure at the last step
    (`_changes`). A word's row, once the word is written, is the last step's at every step after (its pieces' mean,
    and in decoder self-attention its keys' sums, a key read later adding a weight of 0): a step sends the row of
    the word being written and its labels, not every cell (the model view of a 70-word sentence was 44.8 MB)."""
    return {"data": [{key: _changes(trace[key], drawn[key], two_d=key in ("z", "customdata"))
                      for key in ("z", "x", "y", "customdata") if key in trace}
                     for trace, drawn in zip(figure.data, last.data)],
            "axes": {name: {key: _changes(axis[key], last.layout[name][key]) for key in FRAME_AXIS_FIELDS
                            if key in axis}
                     for name, axis in figure.layout.items() if name.startswith(("xaxis", "yaxis"))},
            "shapes": figure.layout.get("shapes", [])}


def _changes(value: list, last: list, two_d: bool = False) -> list | dict:
    """`value` as what differs from `last`: {"fromLast": {"n": its length, "width": each row's (`two_d`), "changed":
    [[i, entry], ...]}}, where `last`'s first n entries (each cut to the width) are `value` but for those; a list of
    labels most of which differ (thinned anew) as it is (ui/static/figures.js puts either in place)."""
    width = len(value[0]) if two_d and value else None
    base = [row[:width] for row in last[:len(value)]] if two_d else last[:len(value)]
    if len(base) < len(value):
        return value
    changed = [[i, entry] for i, (entry, before) in enumerate(zip(value, base)) if entry != before]
    if not two_d and 2 * len(changed) > len(value):
        return value
    return {"fromLast": {"n": len(value), **({"width": width} if two_d else {}), "changed": changed}}


def _layer_map(trace: TraceArrays, kind: str, layer: int, head: int | str, step: int
               ) -> tuple[np.ndarray, list[str], list[str], str]:
    """One (Q, K) map of `trace` at `step` for a comparison: the layer and head asked for where the model has them
    (else its last layer, the mean of its heads), with the tokens its rows read, its keys and what was taken."""
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
    """The same attention (kind, layer, head) of two models' decodings at `step`: where both read the same tokens,
    side by side with their difference (first minus second: red where the second attends more), sharing one set of
    row labels; else one above the other, each with its own. A model without that attention kind gets a note. Panels
    are named below the title: by model, and by the layer and head taken where the two took different ones."""
    (first_name, first), (second_name, second) = decodings
    step = min(step, first.steps - 1)
    panels, read = [], []  # (name, what was taken, map, row labels, keys, is the difference); what the rows read
    for name, trace in decodings:
        if kind in trace.available():
            weights, queries, keys, taken = _layer_map(trace, kind, layer, head, step)
            panels.append((name, taken, weights, query_labels(trace, kind, step), keys, False))
            read.append((queries, keys))
    notes = [f"{name} has no {KIND_LABELS[kind].lower()}" for name, trace in decodings if kind not in trace.available()]
    side_by_side = len(panels) < 2
    if len(panels) == 2 and read[0] == read[1] and panels[0][2].shape == panels[1][2].shape:
        # The same inputs; only the last step's output can differ, and the shared row label then names both.
        if kind != ENCODER and not first.in_words:
            outputs = [a if a == b else f"{a} / {b}" for a, b in zip(first.target_tokens, second.target_tokens)]
            shared = step_labels(first.decoder_tokens[:step + 1], outputs[:step + 1])
            panels[0] = (*panels[0][:3], shared, *panels[0][4:])
        panels.append(("difference", f"{first_name} − {second_name}", panels[0][2] - panels[1][2], panels[0][3],
                       panels[0][4], True))
        side_by_side = True
    elif len(panels) == 2:
        notes += ["the two read different tokens here (their translations or tokenizers differ),",
                  "so there is no difference map"]  # two lines: one would run off a phone
    takens = {taken for _, taken, *_, difference in panels if not difference}
    same = takens.pop() if len(takens) == 1 else None  # named once, in the title, when both took the same
    lines = [KIND_LABELS[kind] + (f", {same}" if same else ""), f"{first_name} and {second_name} compared (weights)",
             *notes, *step_heading(first, step)]
    shape = max((view_shape(trace, kind) for _, trace in decodings if kind in trace.available()), default=(1, 1))
    plot_height = max(min(2 * MAX_PLOT_PX, max(MIN_PLOT_PX, ROW_PX * shape[0])), TICK_SPACING * shape[0])
    columns = max(len(panels), 1) if side_by_side else 1
    stacked = 1 if side_by_side else len(panels)
    name_lines = 1 if same else 2
    gap_x, gap_px = 0.07, X_LABEL_ROOM - 25 + name_lines * NAME_ROOM  # between stacked panels: key labels, names
    width = (1 - gap_x * (columns - 1)) / columns
    paper = stacked * plot_height + (stacked - 1) * gap_px
    data, layout, annotations, shapes = [], {}, [], []
    highlight = first.at_step(kind, step)[3]
    for i, (name, taken, weights, queries, keys, difference) in enumerate(panels):
        suffix = "" if i == 0 else str(i + 1)
        x0 = (i % columns) * (width + gap_x)
        y1 = 1 - (i // columns) * (plot_height + gap_px) / paper
        data.append(_heatmap(weights, queries, keys, f"{taken}: {name}" if difference else f"{name}: {taken}",
                             value_label="difference" if difference else "weight",
                             coloraxis="coloraxis2" if difference else "coloraxis", xaxis=f"x{suffix}",
                             yaxis=f"y{suffix}"))
        layout[f"xaxis{suffix}"] = token_axis(keys, domain=[x0, x0 + width], anchor=f"y{suffix}",
                                               tickfont=TICK_FONT, automargin=True)
        layout[f"yaxis{suffix}"] = token_axis(queries, label_every(shape[0], plot_height / TICK_SPACING),
                                               domain=[max(0.0, y1 - plot_height / paper), y1], anchor=f"x{suffix}",
                                               autorange="reversed", showticklabels=x0 == 0, tickfont=TICK_FONT,
                                               automargin=True)
        annotations.append(dict(text=title_text([name, taken][:name_lines]), x=x0 + width / 2, y=y1, xref="paper",
                                yref="paper", xanchor="center", yanchor="bottom", showarrow=False,
                                font=dict(size=10)))
        if highlight is not None:
            shapes.append(_row_outline(highlight, len(keys), f"x{suffix}", f"y{suffix}", 2))
    top = title_room(lines) + name_lines * NAME_ROOM  # the first panels' names sit between the title and the maps
    colour = dict(coloraxis=dict(colorscale=COLORSCALE, cmin=0.0, cmax=1.0, colorbar=_colorbar("weight", 1.0)))
    if len(panels) == 3:
        colour = dict(coloraxis=dict(colour["coloraxis"], colorbar=_colorbar("weight", 1.0, len=0.45, y=0.78)),
                      coloraxis2=dict(colorscale=DIVERGING, cmin=-1.0, cmax=1.0,
                                      colorbar=_colorbar("difference", 1.0, len=0.45, y=0.22)))
    # Every key is named in every panel: the page draws the figure at least `least` wide, KEY_PX a key in each of the
    # panels side by side (ui/static/figures.js; its box scrolls sideways where the screen is narrower).
    layout.update(title=title_layout(lines), annotations=annotations, shapes=shapes, plot_bgcolor="white",
                  height=top + paper + X_LABEL_ROOM, margin=dict(l=10, r=10, t=top, b=10),
                  meta=dict(least=round(KEY_PX * shape[1] / width) + GRID_SIDES), **colour)
    return plain_figure(data, layout)
