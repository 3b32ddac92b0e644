"""Which heads carry the difference between a sentence and its counterfactual: activation patching per head.

Causal mediation (Vig et al., 2020) and activation patching (Meng et al., 2022; Wang et al., 2023): run the
sentence and a counterfactual source (one word swapped, say) teacher-forced on the same target prefix, then run
the sentence again with one head's output (before W_O) taken from the counterfactual run, and measure how the
prediction at a step moves: the change in log p of the token (or in log p(token) − log p(contrast)), patched run
minus original run. One batch row per head: decoder-side heads share one encoding of the sentence, encoder heads
each encode it anew.

Decoder self-attention and cross-attention heads work at target positions, which both runs share, so they can be
patched whatever the counterfactual's length; an encoder head's output sits at source positions, and is patched
only where both sources have as many tokens. A Transformer's decoder reads the source only through
cross-attention, so patching every cross-attention head gives the counterfactual's own score (a test checks it); a
GRU decoder also reads it through its initial state, so there its one attention carries only part of it.

Over many pairs (a file, or the gender study on Multi30k): model/analysis/patching.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from model.keys import ENCODER, head_name
from model.nets.decoding import next_token_logits
from model.nets.seq2seq import Seq2Seq
from model.nets.transformer import LayerCache, Transformer
from model.text.vocab import SOS_ID

Head = tuple[str, int, int]  # (kind, 0-based layer, 0-based head)
Advance = Callable[[int], None]  # told the rows of each batch done
ROWS = 64  # patched runs per batch


class HeadHooks:
    """What `MultiHeadAttention` calls in place of a gate, per kind and layer, and what a Transformer's encoder
    passes its residual stream through after each layer (the `HeadGates` interface): each a function of the heads'
    outputs (B, H, T, d_head), or of the stream (B, S, d_model) after layer `index` (0: the embeddings)."""

    def __init__(self, hooks: dict[str, dict[int, Callable[[Tensor], Tensor]]],
                 streams: dict[int, Callable[[Tensor], Tensor]] | None = None):
        self.hooks, self.streams = hooks, streams or {}

    def layer(self, kind: str, index: int) -> Callable[[Tensor], Tensor] | None:
        return self.hooks.get(kind, {}).get(index)

    def stream(self, index: int, x: Tensor) -> Tensor:
        hook = self.streams.get(index)
        return x if hook is None else hook(x)


class Recorder:
    """Keeps every head's output of one layer as it passes (a GRU decoder calls it once per step)."""

    def __init__(self):
        self.outputs: list[Tensor] = []

    def __call__(self, out: Tensor) -> Tensor:
        self.outputs.append(out.detach())
        return out

    @property
    def output(self) -> Tensor:
        """(B, H, T, d_head): the whole run's."""
        return torch.cat(self.outputs, dim=2)


class Replace:
    """Heads' outputs replaced by another run's: row b's head h takes `values`' where `keep[b, h]` is 0, and keeps
    its own where 1. Positions follow the calls (a GRU decoder calls it once per step)."""

    def __init__(self, keep: Tensor, values: Tensor):
        self.keep, self.values, self.position = keep[..., None, None], values, 0

    def __call__(self, out: Tensor) -> Tensor:
        length = out.size(2)
        values = self.values[:, :, self.position:self.position + length]
        self.position += length
        return out * self.keep + values * (1 - self.keep)


@dataclass
class Patching:
    """Patching per head at one step: the effect of each head (patched score − original score; NaN where a head
    cannot be patched), the scores of both runs, and why a kind was left out."""

    step: int  # 0-based
    token: int
    contrast: int | None
    original: float  # log p(token) (− log p(contrast)) of the sentence
    counterfactual: float  # the same of the counterfactual source
    effects: dict[str, np.ndarray]  # kind -> (L, H)
    skipped: dict[str, str] = field(default_factory=dict)
    # The encoder's residual stream at each source position after each layer (row 0: the embeddings) taken from
    # the counterfactual: (L + 1, S); None where it cannot be (sources of other lengths, a GRU encoder).
    stream: np.ndarray | None = None

    def ranked(self, count: int = 10) -> list[tuple[str, float]]:
        """The heads that move the score most (either way), by name: [(\"cross.2.5\", effect), ...]."""
        named = [(head_name(kind, layer, head), float(value)) for kind, grid in self.effects.items()
                 for (layer, head), value in np.ndenumerate(grid) if not np.isnan(value)]
        return sorted(named, key=lambda item: -abs(item[1]))[:count]


def score(logits: Tensor, token: int, contrast: int | None) -> Tensor:
    """log p(token), or log p(token) − log p(contrast), of each row's logits (B, 1, V)."""
    log_probs = next_token_logits(logits).log_softmax(-1)
    value = log_probs[:, token]
    return value if contrast is None else value - log_probs[:, contrast]


def recorded_run(model: Seq2Seq, src_ids: list[int], prefix: Tensor, token: int, contrast: int | None
                 ) -> tuple[float, dict[str, list[Tensor]]]:
    """The score of one run and every head's output (1, H, T, d_head) per kind and layer."""
    recorders = {kind: {layer: Recorder() for layer in range(layers)} for kind, (layers, _) in model.heads().items()}
    hooks = HeadHooks(recorders)
    memory, src_mask, _ = model.encode(torch.tensor([src_ids]), gates=hooks)
    logits, _ = model.decode(prefix, memory, src_mask, gates=hooks, positions=torch.tensor([prefix.size(1) - 1]))
    outputs = {kind: [recorders[kind][layer].output for layer in sorted(recorders[kind])] for kind in recorders}
    return float(score(logits, token, contrast)), outputs


def shared_memory_cache(model: Seq2Seq, memory: Tensor, batch: int) -> list[LayerCache] | None:
    """A Transformer's decoder cache holding only the cross-attention keys and values of one sentence's `memory`
    (1, S, d), computed once and viewed by every row of a batch that decodes that sentence (None for a GRU)."""
    if not isinstance(model, Transformer):
        return None
    caches = []
    for layer in model.decoder_layers:
        keys, values = layer.cross_attention.project_keys_values(memory)
        caches.append(LayerCache(cross_keys=keys.expand(batch, -1, -1, -1),
                                 cross_values=values.expand(batch, -1, -1, -1)))
    return caches


def patched_scores(model: Seq2Seq, src_ids: list[int], prefix: Tensor, token: int, contrast: int | None,
                   outputs: dict[str, list[Tensor]], head_sets: list[list[Head]], advance: Advance = lambda rows: None
                   ) -> list[float]:
    """The sentence's score with each set of heads' outputs taken from `outputs` (another run's): one batch row per
    set, in batches of `ROWS` (`advance` told the rows of each, and may raise to stop). Sets without an encoder head
    share one encoding of the sentence."""
    heads = model.heads()
    src = torch.tensor([src_ids])
    streams = encoder_streams(model, src_ids)
    memory, src_mask, _ = model.encode(src)
    scores = [0.0] * len(head_sets)
    lowest = [min((layer for kind, layer, _ in heads_set if kind == ENCODER), default=None) for heads_set in head_sets]
    groups = [([i for i, first in enumerate(lowest) if first is None], None)]  # the decoder side: one encoding
    groups += [([i for i, first in enumerate(lowest) if first == layer], layer) for layer in sorted(
        {first for first in lowest if first is not None})]  # the encoder's: from their lowest layer up
    for indices, first in groups:
        for begin in range(0, len(indices), ROWS):
            rows = indices[begin:begin + ROWS]
            keep = {kind: torch.ones(layers, len(rows), count) for kind, (layers, count) in heads.items()}
            for row, index in enumerate(rows):
                for kind, layer, head in head_sets[index]:
                    keep[kind][layer, row, head] = 0.0
            hooks = HeadHooks({kind: {layer: Replace(keep[kind][layer], outputs[kind][layer])
                                      for layer in range(len(outputs[kind])) if (keep[kind][layer] < 1).any()}
                               for kind in keep})
            batch = len(rows)
            if first is not None:
                row_memory, row_mask, _ = model.encode(src.expand(batch, -1), gates=hooks, fused=True,
                                                       start=(first, streams[first].expand(batch, -1, -1)))
                cache = None
            else:
                row_memory, row_mask = memory.expand(batch, -1, -1), src_mask.expand(batch, -1, -1, -1)
                cache = shared_memory_cache(model, memory, batch)
            logits, _ = model.decode(prefix.expand(batch, -1), row_memory, row_mask, cache, gates=hooks, fused=True,
                                     positions=torch.full((batch,), prefix.size(1) - 1))
            for index, value in zip(rows, score(logits, token, contrast).tolist()):
                scores[index] = value
            advance(batch)
    return scores


def encoder_streams(model: Seq2Seq, src_ids: list[int]) -> dict[int, Tensor]:
    """A Transformer's encoder stream (1, S, d) entering each layer, and after the last (0: the embeddings); {} for a
    GRU, which has no layers to start from."""
    if not isinstance(model, Transformer):
        return {}
    recorders = {index: Recorder() for index in range(len(model.encoder_layers) + 1)}
    model.encode(torch.tensor([src_ids]), gates=HeadHooks({}, recorders))
    return {index: recorder.outputs[0] for index, recorder in recorders.items()}


def patched_stream(model: Seq2Seq, src_ids: list[int], counterfactual_ids: list[int], prefix: Tensor, token: int,
                   contrast: int | None, unpatched: float, advance: Advance = lambda rows: None) -> np.ndarray:
    """The sentence's score with the encoder's residual stream at one source position after one layer taken from
    the counterfactual's run, for every layer (0: the embeddings) and position: (L + 1, S), one batch row each
    (`unpatched`: the sentence's own score, that of every cell skipped; `advance` told the cells of each batch,
    and those skipped)."""
    layers, length = len(model.encoder_layers) + 1, len(src_ids)
    original, values = encoder_streams(model, src_ids), encoder_streams(model, counterfactual_ids)
    # A position whose stream the counterfactual leaves as it is (every one but the swapped word's, after the
    # embeddings) changes nothing when patched: its run is skipped.
    cells = [(index, position) for index in range(layers) for position in range(length)
             if not torch.equal(original[index][0, position], values[index][0, position])]
    scores = np.full((layers, length), unpatched)
    advance(layers * length - len(cells))
    for index in range(layers):  # the stream after layer `index` patched: the encoder goes on from the next
        positions = [position for cell_index, position in cells if cell_index == index]
        for begin in range(0, len(positions), ROWS):
            rows = positions[begin:begin + ROWS]
            batch = len(rows)
            stream = original[index].expand(batch, -1, -1).clone()
            stream[torch.arange(batch), rows] = values[index][0, rows]
            memory, src_mask, _ = model.encode(torch.tensor([src_ids]).expand(batch, -1), fused=True,
                                               start=(index, stream))
            logits, _ = model.decode(prefix.expand(batch, -1), memory, src_mask, fused=True,
                                     positions=torch.full((batch,), prefix.size(1) - 1))
            scores[index, rows] = score(logits, token, contrast).numpy()
            advance(batch)
    return scores


def patch_heads(model: Seq2Seq, src_ids: list[int], counterfactual_ids: list[int], tgt_ids: list[int], step: int,
                token: int | None = None, contrast: int | None = None, stream: bool = True,
                told: Callable[[int, int], None] = lambda done, total: None) -> Patching:
    """Patching per head at `step` (0-based) of the translation `tgt_ids` of `src_ids`: each head of each kind
    taken alone from the run of `counterfactual_ids` on the same target prefix; `token` (default: the one chosen
    there) scored, against `contrast` if given; with `stream`, the encoder stream's grid too (`patched_stream`).
    `told(done, total)`: the patched runs done, after each batch (it may raise to stop)."""
    if not 0 <= step < len(tgt_ids):
        raise ValueError(f"step {step} is not a step of this translation of {len(tgt_ids)} tokens")
    token = tgt_ids[step] if token is None else token
    prefix = torch.tensor([[SOS_ID] + tgt_ids[:step]])
    heads = model.heads()
    with torch.no_grad():
        original, _ = recorded_run(model, src_ids, prefix, token, contrast)
        counterfactual, outputs = recorded_run(model, counterfactual_ids, prefix, token, contrast)
        skipped = {}
        if ENCODER in heads and len(src_ids) != len(counterfactual_ids):
            skipped[ENCODER] = (f"The sentence has {len(src_ids)} tokens and the counterfactual "
                                f"{len(counterfactual_ids)}: encoder heads work at source positions, so they are "
                                "patched only between sources of as many tokens.")
        patched = [(kind, layer, head) for kind, (layers, count) in heads.items() if kind not in skipped
                   for layer in range(layers) for head in range(count)]
        stream = stream and hasattr(model, "encoder_layers") and len(src_ids) == len(counterfactual_ids)
        total = len(patched) + (len(model.encoder_layers) + 1) * len(src_ids) if stream else len(patched)
        done = 0

        def advance(rows: int) -> None:
            nonlocal done
            done += rows
            told(done, total)
        scores = patched_scores(model, src_ids, prefix, token, contrast, outputs, [[head] for head in patched],
                                advance)
        traced = None
        if stream:
            traced = patched_stream(model, src_ids, counterfactual_ids, prefix, token, contrast, original,
                                    advance) - original
    effects = {kind: np.full(shape, np.nan) for kind, shape in heads.items()}
    for (kind, layer, head), value in zip(patched, scores):
        effects[kind][layer, head] = value - original
    return Patching(step, token, contrast, original, counterfactual, effects, skipped, traced)


# Words the page suggests swapping, each way: gender first (Vig et al., 2020), then a few nouns and numbers.
SWAPS = dict(pair for a, b in [
    ("man", "woman"), ("men", "women"), ("boy", "girl"), ("boys", "girls"), ("he", "she"),
    ("father", "mother"), ("brother", "sister"), ("son", "daughter"), ("husband", "wife"), ("king", "queen"),
    ("gentleman", "lady"), ("dog", "cat"), ("dogs", "cats"), ("car", "bicycle"), ("two", "three"), ("red", "blue"),
    ("Mann", "Frau"), ("Junge", "Mädchen"), ("er", "sie"), ("Hund", "Katze"),
] for pair in ((a, b), (b, a)))


def suggested_swap(text: str) -> str | None:
    """`text` with its first word of `SWAPS` swapped (the first letter's case kept), or None where it has none."""
    pattern = re.compile(r"\b(" + "|".join(sorted(map(re.escape, SWAPS), key=len, reverse=True)) + r")\b",
                         flags=re.IGNORECASE)
    match = pattern.search(text)
    if match is None:
        return None
    word = match[0]
    other = SWAPS.get(word) or SWAPS.get(word.lower()) or SWAPS[word.capitalize()]
    other = other[0].upper() + other[1:] if word[0].isupper() else other[0].lower() + other[1:]
    return text[:match.start()] + other + text[match.end():]
