"""What the app shows at one decoding step: the right slice of the right attention map, as figures.

Inputs are plain numpy arrays and token lists taken from a decoding trace:
encoder (L_enc, H, S, S), decoder (L_dec, H, T, T), cross (L_dec, H, T, S); an array is None
when the model has no such attention (an RNN has no self-attention).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

from viz.attention import attention_heatmap, head_grid, probability_bars

ENCODER, DECODER, CROSS = "Encoder self-attention", "Decoder self-attention", "Cross-attention"
KINDS = (ENCODER, DECODER, CROSS)
MEAN, ALL_HEADS = "Mean of heads", "All heads"


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
    """'step 3 of 9: reads "hund", predicts "läuft" (p = 0.91)'."""
    return (f"step {step + 1} of {trace.steps}: reads \"{trace.decoder_tokens[step]}\", "
            f"predicts \"{trace.target_tokens[step]}\" (p = {trace.probabilities[step]:.2f})")


def attention_figure(trace: TraceArrays, kind: str, layer: int, head: int | str, step: int) -> go.Figure:
    """One layer's attention at `step`: a single head, the mean of its heads, or all heads side by side."""
    weights, queries, keys, highlight = trace.at_step(kind, step)
    layer = min(max(layer, 0), weights.shape[0] - 1)
    query_label = "source token" if kind == ENCODER else "decoder input (step)"
    key_label = "source token" if kind != DECODER else "decoder input"
    where = f"{kind}, layer {layer + 1}"
    if head == ALL_HEADS:
        heads = weights.shape[1]
        return head_grid(weights[layer][None], queries, keys, f"{where}, all {heads} heads — {step_title(trace, step)}",
                         row_labels=[""], col_labels=[f"head {h + 1}" for h in range(heads)],
                         highlight_row=highlight)
    if head == MEAN:
        return attention_heatmap(weights[layer].mean(axis=0), queries, keys,
                                 f"{where}, mean of heads — {step_title(trace, step)}", highlight,
                                 query_label, key_label)
    head = min(max(int(head), 0), weights.shape[1] - 1)
    return attention_heatmap(weights[layer, head], queries, keys,
                             f"{where}, head {head + 1} — {step_title(trace, step)}", highlight,
                             query_label, key_label)


def overview_figure(trace: TraceArrays, kind: str, step: int) -> go.Figure:
    """Every layer x head of one attention kind at `step`, as small multiples (a per-step model view)."""
    weights, queries, keys, highlight = trace.at_step(kind, step)
    layers, heads = weights.shape[:2]
    return head_grid(weights, queries, keys, f"{kind}: all layers x heads — {step_title(trace, step)}",
                     row_labels=[f"L{i + 1}" for i in range(layers)],
                     col_labels=[f"H{h + 1}" for h in range(heads)], highlight_row=highlight)


def translation_figure(trace: TraceArrays, step: int | None = None) -> go.Figure:
    """The probability of every chosen token; the current step in red."""
    return probability_bars(trace.target_tokens, trace.probabilities, "probability of each chosen token",
                            highlight=step)


def candidates_figure(trace: TraceArrays, step: int) -> go.Figure:
    """The top-k candidates at `step`, the chosen one in red."""
    return probability_bars(trace.top_tokens[step], trace.top_probabilities[step],
                            f"top-{len(trace.top_tokens[step])} candidates at step {step + 1}", highlight=0)
