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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from attention_inspector.model.keys import DECODER, ENCODER, head_name
from attention_inspector.model.nets.decoding import next_token_logits
from attention_inspector.model.nets.seq2seq import Seq2Seq, device_of, every_head
from attention_inspector.model.nets.transformer import LayerCache, Transformer
from attention_inspector.model.text.vocab import SOS_ID

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
    # True where the grids are attribution patching's estimates (model/explain/estimates.py), not patched runs; then
    # `measured` (per kind, (L, H)) marks the heads patched since, whose effects are the patched runs' own.
    estimated: bool = False
    measured: dict[str, np.ndarray] | None = None

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


@dataclass
class Run:
    """One run teacher-forced on a target prefix: its score, every head's output (1, H, T, d_head) per kind and
    layer, its encoding, and (a Transformer's) residual streams (1, ·, d_model): the encoder's entering each layer
    and after the last, the decoder's entering each layer ({} for a GRU)."""

    score: float
    outputs: dict[str, list[Tensor]]
    memory: Tensor
    src_mask: Tensor
    encoder_streams: dict[int, Tensor]
    decoder_streams: dict[int, Tensor]


def recorded_run(model: Seq2Seq, src_ids: list[int], prefix: Tensor, token: int, contrast: int | None) -> Run:
    """One run of `src_ids` on `prefix`, scored at its last position, with what patching takes from it."""
    return recorded_runs(model, [src_ids], prefix, token, contrast)[0]


def recorded_runs(model: Seq2Seq, sources: list[list[int]], prefix: Tensor, token: int, contrast: int | None
                  ) -> list[Run]:
    """`recorded_run` of each source: in one batch where they have as many tokens (a sentence and its
    counterfactual, one word swapped), else one by one."""
    if len({len(ids) for ids in sources}) > 1:
        return [run for ids in sources for run in recorded_runs(model, [ids], prefix, token, contrast)]
    recorders = {kind: {layer: Recorder() for layer in range(layers)} for kind, (layers, _) in model.heads().items()}
    batch = len(sources)
    with recorded_streams(model) as (encoder, decoder):
        hooks = HeadHooks(recorders, encoder)
        memory, src_mask, _ = model.encode(torch.tensor(sources, device=prefix.device), gates=hooks, fused=True)
        logits, _ = model.decode(prefix.expand(batch, -1), memory, src_mask, gates=hooks, fused=True,
                                 positions=torch.full((batch,), prefix.size(1) - 1, device=prefix.device))
    outputs = {kind: [recorders[kind][layer].output for layer in sorted(recorders[kind])] for kind in recorders}
    scores = score(logits, token, contrast).tolist()
    rows = [slice(row, row + 1) for row in range(batch)]
    return [Run(scores[row.start], {kind: [output[row] for output in layers] for kind, layers in outputs.items()},
                memory[row], src_mask[row], {index: kept.outputs[0][row] for index, kept in encoder.items()},
                {index: kept.outputs[0][row] for index, kept in decoder.items()}) for row in rows]


@contextmanager
def recorded_streams(model: Seq2Seq) -> Iterator[tuple[dict[int, Recorder], dict[int, Recorder]]]:
    """A Transformer's residual streams, recorded in the pass run inside: the encoder's entering each layer and
    after the last (its recorders, for `HeadHooks`' streams, which the encoder must be given as its gates), and the
    decoder's entering each layer (hooks on its layers, removed on leaving). A GRU has none: two empty dicts."""
    transformer = isinstance(model, Transformer)
    encoder = {index: Recorder() for index in range(len(model.encoder_layers) + 1)} if transformer else {}
    decoder = {index: Recorder() for index in range(len(model.decoder_layers))} if transformer else {}
    entering = [layer.register_forward_pre_hook(lambda _, args, kept=decoder[index].outputs: kept.append(args[0]))
                for index, layer in enumerate(model.decoder_layers)] if transformer else []
    try:
        yield encoder, decoder
    finally:
        for handle in entering:
            handle.remove()


def memory_keys_values(model: Seq2Seq, memory: Tensor) -> list[tuple[Tensor, Tensor]]:
    """A Transformer's cross-attention keys and values of one sentence's `memory` (1, S, d), per decoder layer
    ([] for a GRU)."""
    if not isinstance(model, Transformer):
        return []
    return [layer.cross_attention.project_keys_values(memory) for layer in model.decoder_layers]


def memory_cache(keys_values: list[tuple[Tensor, Tensor]]) -> list[LayerCache] | None:
    """A decoder cache holding only one sentence's cross-attention keys and values (`memory_keys_values`), for every
    row of a batch that decodes that sentence (None for a GRU)."""
    return [LayerCache(cross_keys=keys, cross_values=values) for keys, values in keys_values] or None


def first_patched(model: Seq2Seq, heads_set: list[Head]) -> tuple[str, int]:
    """Where a run with `heads_set` patched first differs from the sentence's: (ENCODER, its lowest encoder layer)
    where it patches the encoder, else (DECODER, its lowest decoder layer, self- or cross-attention). A GRU's
    decoder has no layers to start from: (DECODER, 0)."""
    encoder = [layer for kind, layer, _ in heads_set if kind == ENCODER]
    if encoder:
        return ENCODER, min(encoder)
    return DECODER, min(layer for _, layer, _ in heads_set) if isinstance(model, Transformer) else 0


def replacing(keep: dict[str, Tensor], outputs: dict[str, list[Tensor]], kinds: list[str], part: slice = slice(None)
              ) -> dict[str, dict[int, Replace]]:
    """`HeadHooks`' replacements of `kinds`' heads by `outputs` where `keep` (per kind, (L, B, H)) is 0, for the
    batch rows `part`; a layer with none to replace has none."""
    return {kind: {layer: Replace(keep[kind][layer][part], outputs[kind][layer]) for layer in range(len(outputs[kind]))
                   if (keep[kind][layer][part] < 1).any()} for kind in kinds}


def patched_scores(model: Seq2Seq, src_ids: list[int], prefix: Tensor, token: int, contrast: int | None,
                   outputs: dict[str, list[Tensor]], head_sets: list[list[Head]], advance: Advance = lambda rows: None,
                   original: Run | None = None) -> list[float]:
    """The sentence's score with each set of heads' outputs taken from `outputs` (another run's): one batch row per
    set, in batches of `ROWS` (`advance` told the rows of each, and may raise to stop). `original`: the sentence's
    `recorded_run`, if made already.

    A run goes on from the sentence's own stream entering the first layer it patches (the layers below give what
    they gave the sentence): the decoder side's rows share the sentence's encoding and its cross keys and values,
    the encoder's are encoded from their lowest layer up. In a Transformer the rows of a batch are one until the
    heads they patch (a `Replace` broadcasts them apart): what comes before, in the layer they start at, is computed
    once. A set whose outputs are the sentence's own (a decoder head of the first layer reads only the target
    prefix, which both runs share) is the sentence's score, unrun."""
    heads = model.heads()
    original = original or recorded_run(model, src_ids, prefix, token, contrast)
    src = torch.tensor([src_ids], device=prefix.device)
    scores = [original.score] * len(head_sets)
    changed = [i for i, heads_set in enumerate(head_sets) if any(
        not torch.equal(outputs[kind][layer][:, head], original.outputs[kind][layer][:, head])
        for kind, layer, head in heads_set)]
    advance(len(head_sets) - len(changed))
    starts = {i: first_patched(model, head_sets[i]) for i in changed}
    keys_values = memory_keys_values(model, original.memory) if DECODER in {side for side, _ in starts.values()} \
        else []
    # The decoder side in a batch per layer its rows start at; the encoder side in one batch, each row encoded from
    # its own layer up (rows of a layer together), then decoded together.
    for side, first in sorted({(side, first if side == DECODER else 0) for side, first in starts.values()}):
        indices = sorted((i for i in changed if starts[i][0] == side and (side == ENCODER or starts[i][1] == first)),
                         key=lambda i: starts[i][1])
        for begin in range(0, len(indices), ROWS):
            rows = indices[begin:begin + ROWS]
            keep = {kind: torch.ones(layers, len(rows), count, device=prefix.device)
                    for kind, (layers, count) in heads.items()}
            for row, index in enumerate(rows):
                for kind, layer, head in head_sets[index]:
                    keep[kind][layer, row, head] = 0.0
            hooks = HeadHooks(replacing(keep, outputs, [kind for kind in keep if kind != ENCODER]))
            width = 1 if isinstance(model, Transformer) else len(rows)  # the rows as one, until they part
            start = {}
            if side == ENCODER:
                firsts = [starts[i][1] for i in rows]
                encoded = []
                for layer in sorted(set(firsts)):
                    part = slice(firsts.index(layer), len(firsts) - firsts[::-1].index(layer))
                    memory, src_mask, _ = model.encode(
                        src, gates=HeadHooks(replacing(keep, outputs, [ENCODER], part)), fused=True,
                        start=(layer, original.encoder_streams[layer]))
                    encoded.append(memory)
                memory, cache = torch.cat(encoded), None
            else:
                memory, src_mask = original.memory.expand(width, -1, -1), original.src_mask
                cache = memory_cache(keys_values)
                if first > 0:
                    start = {"start": (first, original.decoder_streams[first])}
            logits, _ = model.decode(prefix.expand(width, -1), memory, src_mask, cache, gates=hooks, fused=True,
                                     positions=torch.full((width,), prefix.size(1) - 1, device=prefix.device),
                                     **start)
            for index, value in zip(rows, score(logits, token, contrast).tolist()):
                scores[index] = value
            advance(len(rows))
    return scores


def patched_stream(model: Seq2Seq, src_ids: list[int], original: Run, counterfactual: Run, prefix: Tensor,
                   token: int, contrast: int | None, advance: Advance = lambda rows: None) -> np.ndarray:
    """The sentence's score with the encoder's residual stream at one source position after one layer taken from
    the counterfactual's run, for every layer (0: the embeddings) and position: (L + 1, S), one batch row each
    (`original`, `counterfactual`: both runs, recorded; `advance` told the cells of each batch, and those
    skipped)."""
    layers, length = len(model.encoder_layers) + 1, len(src_ids)
    ours, theirs = original.encoder_streams, counterfactual.encoder_streams
    # A position whose stream the counterfactual leaves as it is (every one but the swapped word's, after the
    # embeddings) changes nothing when patched: its run is skipped.
    cells = [(index, position) for index in range(layers) for position in range(length)
             if not torch.equal(ours[index][0, position], theirs[index][0, position])]
    scores = np.full((layers, length), original.score)
    advance(layers * length - len(cells))
    for index in range(layers):  # the stream after layer `index` patched: the encoder goes on from the next
        positions = [position for cell_index, position in cells if cell_index == index]
        for begin in range(0, len(positions), ROWS):
            rows = positions[begin:begin + ROWS]
            batch = len(rows)
            stream = ours[index].expand(batch, -1, -1).clone()
            stream[torch.arange(batch, device=prefix.device), rows] = theirs[index][0, rows]
            memory, src_mask, _ = model.encode(torch.tensor([src_ids], device=prefix.device), fused=True,
                                               start=(index, stream))
            # (the target prefix, the same in every row, goes in once: the rows part at the cross-attention)
            logits, _ = model.decode(prefix, memory, src_mask, fused=True,
                                     positions=torch.tensor([prefix.size(1) - 1], device=prefix.device))
            scores[index, rows] = score(logits, token, contrast).cpu().numpy()
            advance(len(rows))
    return scores


def step_prefix(model: Seq2Seq, tgt_ids: list[int], step: int, token: int | None) -> tuple[int, Tensor]:
    """The token scored at `step` (0-based) of the translation `tgt_ids` (`token`, default the one chosen there)
    and the target prefix (1, step + 1) that both runs are teacher-forced on; ValueError for a step past it."""
    if not 0 <= step < len(tgt_ids):
        raise ValueError(f"step {step} is not a step of this translation of {len(tgt_ids)} tokens")
    token = tgt_ids[step] if token is None else token
    return token, torch.tensor([[SOS_ID] + tgt_ids[:step]], device=device_of(model))


def skipped_kinds(model: Seq2Seq, src_ids: list[int], counterfactual_ids: list[int]) -> dict[str, str]:
    """The kinds that cannot be patched between these sources, and why: encoder heads, between sources of other
    lengths."""
    if ENCODER not in model.heads() or len(src_ids) == len(counterfactual_ids):
        return {}
    return {ENCODER: (f"The sentence has {len(src_ids)} tokens and the counterfactual {len(counterfactual_ids)}: "
                      "encoder heads work at source positions, so they are patched only between sources of as many "
                      "tokens.")}


def patch_heads(model: Seq2Seq, src_ids: list[int], counterfactual_ids: list[int], tgt_ids: list[int], step: int,
                token: int | None = None, contrast: int | None = None, stream: bool = True,
                told: Callable[[int, int], None] = lambda done, total: None) -> Patching:
    """Patching per head at `step` (0-based) of the translation `tgt_ids` of `src_ids`: each head of each kind
    taken alone from the run of `counterfactual_ids` on the same target prefix; `token` (default: the one chosen
    there) scored, against `contrast` if given; with `stream`, the encoder stream's grid too (`patched_stream`).
    `told(done, total)`: the patched runs done, after each batch (it may raise to stop)."""
    token, prefix = step_prefix(model, tgt_ids, step, token)
    heads = model.heads()
    with torch.no_grad():
        original, counterfactual = recorded_runs(model, [src_ids, counterfactual_ids], prefix, token, contrast)
        skipped = skipped_kinds(model, src_ids, counterfactual_ids)
        patched = [head for head in every_head(model) if head[0] not in skipped]
        stream = stream and hasattr(model, "encoder_layers") and len(src_ids) == len(counterfactual_ids)
        total = len(patched) + (len(model.encoder_layers) + 1) * len(src_ids) if stream else len(patched)
        done = 0

        def advance(rows: int) -> None:
            nonlocal done
            done += rows
            told(done, total)
        scores = patched_scores(model, src_ids, prefix, token, contrast, counterfactual.outputs,
                                [[head] for head in patched], advance, original)
        traced = None
        if stream:
            traced = patched_stream(model, src_ids, original, counterfactual, prefix, token, contrast,
                                    advance) - original.score
    effects = {kind: np.full(shape, np.nan) for kind, shape in heads.items()}
    for (kind, layer, head), value in zip(patched, scores):
        effects[kind][layer, head] = value - original.score
    return Patching(step, token, contrast, original.score, counterfactual.score, effects, skipped, traced)


# Words the page suggests swapping, each way: gender first (Vig et al., 2020), then occupations stereotyped male and
# female (WinoBias, Zhao et al., 2018: "the doctor" against "the nurse", which en-de writes "der Arzt" and "die
# Krankenschwester"), then a few nouns and numbers.
SWAPS = dict(pair for a, b in [
    ("man", "woman"), ("men", "women"), ("boy", "girl"), ("boys", "girls"), ("he", "she"),
    ("father", "mother"), ("brother", "sister"), ("son", "daughter"), ("husband", "wife"), ("king", "queen"),
    ("gentleman", "lady"), ("grandfather", "grandmother"), ("groom", "bride"), ("waiter", "waitress"),
    ("businessman", "businesswoman"), ("doctor", "nurse"), ("doctors", "nurses"),
    ("dog", "cat"), ("dogs", "cats"), ("car", "bicycle"), ("two", "three"), ("red", "blue"),
    ("Mann", "Frau"), ("Junge", "Mädchen"), ("er", "sie"), ("Hund", "Katze"),
] for pair in ((a, b), (b, a)))


def parting(ours: list[str], theirs: list[str]) -> int | None:
    """The first step (0-based) where two translations' tokens differ; None where one begins the other."""
    return next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), None)


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
