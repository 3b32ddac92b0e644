"""Greedy traces: one sentence decoded greedily, recording every step's choice, its alternatives and every
attention map (`greedy_trace`), and many sentences traced together, a step at a time (`TraceBatch`, continuous
batching through model/nets/step_decoder.py), each recording on request the vectors ALTI+ decomposes.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from attention_inspector.model.nets.decoding import next_token_logits, output_limit
from attention_inspector.model.nets.seq2seq import CROSS, DECODER, Attention, HeadGates, Seq2Seq, device_of
from attention_inspector.model.nets.step_decoder import StepDecoder
from attention_inspector.model.nets.transformer import Transformer
from attention_inspector.model.text.vocab import EOS_ID, SOS_ID


@dataclass
class Trace:
    """One sentence decoded greedily, step by step: every choice, its alternatives and every attention map.

    Step t reads decoder input `decoder_input_ids[t]` (<sos> at t = 0, then the previous choice) and
    chooses `token_ids[t]`; the first `forced` choices were fixed by the caller, the rest are the model's
    best. Attention arrays are float32:
    encoder (L_enc, H, S, S); decoder (L_dec, H, T, T), lower-triangular; cross (L_dec, H, T, S).
    A model without self-attention (an RNN) leaves encoder and decoder attention None.
    """

    src_ids: list[int]
    token_ids: list[int]
    probabilities: np.ndarray  # (T,) probability of each chosen token
    top_ids: np.ndarray  # (T, k) the k most probable tokens at each step, best first
    top_probabilities: np.ndarray  # (T, k)
    encoder_attention: np.ndarray | None
    decoder_attention: np.ndarray | None
    cross_attention: np.ndarray
    forced: int = 0
    # With `TraceRequest.vectors`, what a teacher-forced pass of the same tokens records with `need_vectors` (batch
    # of one, torch): the decoding's own weights, value vectors and residual stream, which ALTI+ decomposes.
    vectors: Attention | None = field(default=None, repr=False, compare=False)

    @property
    def decoder_input_ids(self) -> list[int]:
        return [SOS_ID] + self.token_ids[:-1]

    def __len__(self) -> int:
        return len(self.token_ids)


@torch.inference_mode()  # cheaper than no_grad per call, and a trace's tensors leave as numpy anyway
def greedy_trace(model: Seq2Seq, src_ids: list[int], max_len: int | None = None, top_k: int = 5,
                 force: list[int] = (), gates: HeadGates | None = None) -> Trace:
    """Greedy decoding of one sentence with a key/value cache, recording a `Trace`; stops after <eos>.

    The first steps choose the tokens of `force` (a forced prefix), whatever the model prefers; `gates`
    switch heads off for the whole decoding.
    """
    device = device_of(model)
    src = torch.tensor([src_ids], dtype=torch.long, device=device)
    memory, src_mask, encoded = model.encode(src, need_weights=True, gates=gates)
    cache = model.new_cache()
    previous = torch.tensor([[SOS_ID]], device=device)
    token_ids, probabilities, top_ids, top_probabilities, self_rows, cross_rows = [], [], [], [], [], []
    for step in range(output_limit(model, len(src_ids), max_len)):
        logits, attention = model.decode(previous, memory, src_mask, cache, need_weights=True, gates=gates)
        distribution = next_token_logits(logits)[0].softmax(-1)  # (V,)
        best = distribution.topk(min(top_k, distribution.numel()))
        token = force[step] if step < len(force) else int(best.indices[0])
        token_ids.append(token)
        probabilities.append(float(distribution[token]))
        top_ids.append(best.indices.tolist())
        top_probabilities.append(best.values.tolist())
        if attention.decoder is not None:  # an RNN decoder has no self-attention
            self_rows.append(attention.decoder[:, 0, :, -1])  # (L, H, t + 1)
        cross_rows.append(attention.cross[:, 0, :, -1])  # (L, H, S)
        if token == EOS_ID:
            break
        previous = torch.tensor([[token]], device=device)
    return Trace(
        src_ids=list(src_ids), token_ids=token_ids,
        probabilities=np.array(probabilities, dtype=np.float32),
        top_ids=np.array(top_ids), top_probabilities=np.array(top_probabilities, dtype=np.float32),
        encoder_attention=None if encoded is None else encoded.encoder[:, 0].float().cpu().numpy(),
        decoder_attention=_lower_triangular(self_rows).float().cpu().numpy() if self_rows else None,
        cross_attention=torch.stack(cross_rows, dim=2).float().cpu().numpy(),
        forced=min(len(force), len(token_ids)),
    )


def _lower_triangular(rows: list[Tensor]) -> Tensor:
    """Stack per-step self-attention rows (L, H, t + 1) into (L, H, T, T), zero above the diagonal."""
    steps = len(rows)
    full = rows[0].new_zeros(*rows[0].shape[:2], steps, steps)
    for t, row in enumerate(rows):
        full[:, :, t, :t + 1] = row
    return full


@dataclass
class TraceRequest:
    """What one greedy trace needs: the source ids, how many candidates to keep per step, a forced prefix, head
    gates and a length limit (see `greedy_trace`)."""

    src_ids: list[int]
    top_k: int = 5
    force: list[int] = ()
    gates: HeadGates | None = None
    max_len: int | None = None
    vectors: bool = False  # record `Trace.vectors` (a Transformer's, in a `TraceBatch`)


@dataclass
class _Row:
    """A sentence in a `TraceBatch`: its request, what it has recorded so far and where it is."""

    ticket: int
    request: TraceRequest
    limit: int  # steps it may take
    encoded: Attention  # the encoder side, its vectors too where the request records them
    token_ids: list[int] = field(default_factory=list)
    probabilities: list[float] = field(default_factory=list)
    top_ids: list[list[int]] = field(default_factory=list)
    top_probabilities: list[list[float]] = field(default_factory=list)
    self_rows: list[Tensor] = field(default_factory=list)  # per step (L, H, t + 1)
    cross_rows: list[Tensor] = field(default_factory=list)  # per step (L, H, S)
    streams: list[Tensor] = field(default_factory=list)  # per step (L, 4, d_model), where the request records them

    def trace(self, head_values: tuple[Tensor, Tensor] | None = None) -> Trace:
        """What `greedy_trace` returns for this sentence; with `TraceRequest.vectors`, its `vectors`, given its
        self-attention's and its memory's `head_values` ((L, 1, H, T, d_model), (L, 1, H, S, d_model))."""
        decoder = _lower_triangular(self.self_rows)
        cross = torch.stack(self.cross_rows, dim=2)
        vectors = None if head_values is None else Attention(
            decoder=decoder[:, None], cross=cross[:, None], decoder_values=head_values[0], cross_values=head_values[1],
            decoder_stream=torch.stack(self.streams, dim=2)[:, None]).with_encoder(self.encoded)
        return Trace(src_ids=list(self.request.src_ids), token_ids=self.token_ids,
                     probabilities=np.array(self.probabilities, dtype=np.float32), top_ids=np.array(self.top_ids),
                     top_probabilities=np.array(self.top_probabilities, dtype=np.float32),
                     encoder_attention=self.encoded.encoder[:, 0].float().cpu().numpy(),
                     decoder_attention=decoder.float().cpu().numpy(), cross_attention=cross.float().cpu().numpy(),
                     forced=min(len(self.request.force), len(self.token_ids)), vectors=vectors)


class TraceBatch:
    """Greedy traces of many sentences decoded together, a step at a time (continuous batching).

    `add` queues a sentence, which joins the batch at the next `step`, whatever step the others are at; `step`
    advances every sentence by one token and returns the traces of those that just finished, which leave the
    batch. Each trace is the one `greedy_trace` records for its sentence alone, up to float rounding (the same
    tokens and candidates, numbers within 5e-6: tests/test_trace_batch.py). One batch serves one thread; the model
    and `decoder` are only read.
    """

    def __init__(self, model: Transformer, decoder: StepDecoder | None = None):
        self.model, self.device = model, device_of(model)
        self.decoder = decoder or StepDecoder(model)
        self.rows: list[_Row] = []
        self.waiting: list[tuple[_Row, list[tuple[Tensor, Tensor]]]] = []  # encoded, not yet in the batch
        self.tickets = itertools.count()
        layers = len(self.decoder.layers)
        self.self_keys: list[Tensor] = [None] * layers  # (B, H, capacity, d_head): every sentence's cached positions
        self.self_values: list[Tensor] = [None] * layers
        self.cross: list[tuple[Tensor, Tensor]] = []  # per layer (B, H, S, d_head), S the longest source
        self.cross_bias = self.previous = self.positions = self.self_gates = self.cross_gates = None

    def __len__(self) -> int:
        """Sentences being decoded or waiting to join."""
        return len(self.rows) + len(self.waiting)

    @torch.inference_mode()
    def add(self, request: TraceRequest) -> int:
        """Encode a sentence now; it joins the batch at the next step. Returns its ticket, which `step` gives back
        with its trace."""
        src = torch.tensor([request.src_ids], dtype=torch.long, device=self.device)
        memory, _, encoded = self.model.encode(src, need_weights=True, gates=request.gates,
                                               need_vectors=request.vectors)
        row = _Row(next(self.tickets), request, output_limit(self.model, len(request.src_ids), request.max_len),
                   encoded)
        self.waiting.append((row, self.decoder.memory_keys_values(memory)))
        return row.ticket

    @torch.inference_mode()
    def step(self) -> list[tuple[int, Trace]]:
        """One token for every sentence in the batch -> (ticket, trace) of each sentence that ended with it."""
        if self.waiting:
            self._join()
        if not self.rows:
            return []
        positions = [len(row.token_ids) for row in self.rows]
        width = max(positions) + 1
        # A sentence attends to its own positions so far: -inf past them (no bias when all are at the same one).
        self_bias = None if min(positions) == width - 1 else torch.zeros(
            len(self.rows), 1, 1, width, device=self.device).masked_fill(
            torch.arange(width, device=self.device) > self.positions[:, None, None, None], float("-inf"))
        logits, self_maps, cross_maps, streams = self.decoder.step(
            self.previous, self.positions, [keys[:, :, :width] for keys in self.self_keys],
            [values[:, :, :width] for values in self.self_values], self_bias, self.cross, self.cross_bias,
            self.self_gates, self.cross_gates, streams=any(row.request.vectors for row in self.rows))
        distribution = next_token_logits(logits[:, None]).softmax(-1)  # (B, V)
        top_k = min(max(row.request.top_k for row in self.rows), distribution.size(-1))
        best = distribution.topk(top_k)
        chosen = [row.request.force[t] if t < len(row.request.force) else int(best_id)
                  for row, t, best_id in zip(self.rows, positions, best.indices[:, 0].tolist())]
        chosen_ids = torch.tensor(chosen, device=self.device)
        probabilities = distribution.gather(1, chosen_ids[:, None])[:, 0].tolist()
        top_ids, top_probabilities = best.indices.tolist(), best.values.tolist()
        finished, done = [], set()
        for b, (row, t) in enumerate(zip(self.rows, positions)):
            k = row.request.top_k
            row.token_ids.append(chosen[b])
            row.probabilities.append(probabilities[b])
            row.top_ids.append(top_ids[b][:k])
            row.top_probabilities.append(top_probabilities[b][:k])
            row.self_rows.append(self_maps[:, b, :, :t + 1])
            row.cross_rows.append(cross_maps[:, b, :, :len(row.request.src_ids)])
            if row.request.vectors:
                row.streams.append(streams[:, :, b])
            if chosen[b] == EOS_ID or t + 1 == row.limit:
                finished.append((row.ticket, row.trace(self._head_values(b) if row.request.vectors else None)))
                done.add(b)
        self.previous, self.positions = chosen_ids, self.positions + 1
        if done:
            self._keep([b for b in range(len(self.rows)) if b not in done])
        return finished

    def _head_values(self, b: int) -> tuple[Tensor, Tensor]:
        """Batch row `b`'s value vectors after each head's output projection (`MultiHeadAttention.head_vectors`), of
        its self-attention's positions so far and of its memory, from the caches: (L, 1, H, T, d_model) and
        (L, 1, H, S, d_model)."""
        row = self.rows[b]
        steps, length = len(row.token_ids), len(row.request.src_ids)
        layers = self.model.decoder_layers
        return (torch.stack([layer.self_attention.head_vectors(values[b:b + 1, :, :steps])
                             for layer, values in zip(layers, self.self_values)]),
                torch.stack([layer.cross_attention.head_vectors(values[b:b + 1, :, :length])
                             for layer, (_, values) in zip(layers, self.cross)]))

    def run(self, told: Callable[[int, int], None] | None = None) -> dict[int, Trace]:
        """Step until every sentence has finished -> each one's trace by ticket; `told(steps, limit)` after each
        step (`limit`: the most steps a sentence may take; it may raise to stop)."""
        finished, steps = {}, 0
        limit = max([row.limit for row in self.rows] + [row.limit for row, _ in self.waiting], default=0)
        while self.rows or self.waiting:
            finished.update(self.step())
            steps += 1
            if told is not None:
                told(steps, limit)
        return finished

    def _join(self) -> None:
        """Put the waiting sentences into the batch: their memory's keys and values padded to the longest source,
        empty self-attention caches, gates of ones where a sentence switches nothing off."""
        rows = self.rows + [row for row, _ in self.waiting]
        longest = max(len(row.request.src_ids) for row in rows)
        joining = [keys_values for _, keys_values in self.waiting]
        parts = ([] if not self.rows else [self.cross]) + joining
        self.cross = [tuple(torch.cat([F.pad(part[i][j], (0, 0, 0, longest - part[i][j].size(2))) for part in parts])
                            for j in range(2)) for i in range(len(self.decoder.layers))]
        capacity = max(row.limit for row in rows)  # a sentence writes its step t's keys at position t < its limit
        empty = (len(joining), self.decoder.n_heads, capacity, self.decoder.d_head)
        for caches in (self.self_keys, self.self_values):
            for i, cache in enumerate(caches):
                kept = [] if not self.rows else [F.pad(cache, (0, 0, 0, capacity - cache.size(2)))]
                caches[i] = torch.cat(kept + [torch.zeros(empty, device=self.device)])
        new = len(self.waiting)
        none = torch.empty(0, dtype=torch.long, device=self.device)
        self.previous = torch.cat([self.previous if self.rows else none,
                                   torch.full((new,), SOS_ID, device=self.device)])
        self.positions = torch.cat([self.positions if self.rows else none,
                                    torch.zeros(new, dtype=torch.long, device=self.device)])
        self.rows, self.waiting = rows, []
        self._set_cross_bias()
        self._set_gates()

    def _keep(self, kept: list[int]) -> None:
        """Only the batch rows `kept` stay (the others finished)."""
        index = torch.tensor(kept, dtype=torch.long, device=self.device)
        self.rows = [self.rows[b] for b in kept]
        if not self.rows:
            layers = len(self.self_keys)
            self.cross, self.self_keys, self.self_values = [], [None] * layers, [None] * layers
            return
        self.cross = [(keys.index_select(0, index), values.index_select(0, index)) for keys, values in self.cross]
        self.self_keys = [keys.index_select(0, index) for keys in self.self_keys]
        self.self_values = [values.index_select(0, index) for values in self.self_values]
        self.previous, self.positions = self.previous.index_select(0, index), self.positions.index_select(0, index)
        self._set_cross_bias()
        self._set_gates()

    def _set_cross_bias(self) -> None:
        """-inf at the padding of each sentence's source (None when there is none)."""
        lengths = torch.tensor([len(row.request.src_ids) for row in self.rows], device=self.device)
        longest = self.cross[0][0].size(2)
        self.cross_bias = None if lengths.min() == longest else torch.zeros(
            len(self.rows), 1, 1, longest, device=self.device).masked_fill(
            torch.arange(longest, device=self.device) >= lengths[:, None, None, None], float("-inf"))

    def _set_gates(self) -> None:
        """(L, B, H) gates of the batch's decoder and cross-attention, or None where no sentence switches any off."""
        for kind, attribute in ((DECODER, "self_gates"), (CROSS, "cross_gates")):
            gates = [None if row.request.gates is None else getattr(row.request.gates, kind) for row in self.rows]
            if all(gate is None for gate in gates):
                setattr(self, attribute, None)
            else:
                shape = self.model.heads()[kind]
                setattr(self, attribute, torch.stack([torch.ones(shape, device=self.device) if gate is None else gate
                                                      for gate in gates], dim=1))
