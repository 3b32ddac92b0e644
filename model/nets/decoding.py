"""Decoding with a key/value cache: batched greedy and beam search for evaluation,
and a single-sentence greedy trace that records every step's choice, alternatives and attention.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from model.nets.seq2seq import CROSS, DECODER, Attention, HeadGates, Seq2Seq, device_of
from model.nets.step_decoder import StepDecoder
from model.nets.transformer import Transformer
from model.text.vocab import EOS_ID, PAD_ID, SOS_ID

NEVER_EMITTED = (PAD_ID, SOS_ID)


def output_limit(model: Seq2Seq, src_length: int, max_len: int | None = None) -> int:
    """How many target tokens a sentence of `src_length` may produce: `max_len` or 2*S+10, within the model's positions."""
    limit = max_len if max_len is not None else 2 * src_length + 10
    return max(1, min(limit, model.config.max_len - 1))


def next_token_logits(logits: Tensor) -> Tensor:
    """The last position's logits (B, V) with <pad> and <sos> ruled out, as a new tensor (`logits` is left as it is)."""
    ruled_out = torch.tensor(NEVER_EMITTED, device=logits.device)
    return logits[:, -1].float().index_fill(1, ruled_out, float("-inf"))


def given(log_probs: Tensor, token: int) -> Tensor:
    """Log-probabilities (N, V) replaced by a given token's: 0 for it, -inf for the rest (a multilingual model's
    target-language code is given, not chosen: it adds nothing to a hypothesis's score, as in transformers'
    forced first token)."""
    return torch.full_like(log_probs, float("-inf")).index_fill(-1, torch.tensor([token], device=log_probs.device),
                                                                0.0)


@torch.no_grad()
def greedy_decode(model: Seq2Seq, src: Tensor, max_len: int | None = None,
                  gates: HeadGates | None = None, prefix: list[int] = ()) -> list[list[int]]:
    """Greedy decoding of a padded batch `src` (B, S); returns each sentence's ids without <sos>/<eos>, starting
    with the given `prefix`."""
    steps, greedy = _TreeSteps(model, src, 1, gates), _Greedy(src.size(0), src.device)
    for step in range(output_limit(model, src.size(1), max_len)):
        scores = next_token_logits(steps.logits(greedy.last))
        greedy.advance(given(scores, prefix[step]) if step < len(prefix) else scores)
        if greedy.done:
            break
    return greedy.ids


class _Greedy:
    """Greedy decodings of a batch, step by step: each step's scores (B, V) in, its choices out (`last`)."""

    def __init__(self, batch: int, device: torch.device):
        self.last = torch.full((batch, 1), SOS_ID, dtype=torch.long, device=device)  # each row's token to feed next
        self.finished = torch.zeros(batch, dtype=torch.bool, device=device)
        self.chosen: list[Tensor] = []

    def advance(self, scores: Tensor) -> None:
        """Every row's best token after `scores` (<pad> once its sentence has ended)."""
        next_ids = scores.argmax(-1).masked_fill(self.finished, PAD_ID)  # (B,)
        self.chosen.append(next_ids)
        self.finished |= next_ids == EOS_ID
        self.last = next_ids[:, None]

    @property
    def done(self) -> bool:
        return bool(self.finished.all())

    @property
    def ids(self) -> list[list[int]]:
        """Each sentence's ids so far (at least one step), without <eos>."""
        return [_strip(row) for row in torch.stack(self.chosen, dim=1).tolist()]


def _strip(ids: list[int]) -> list[int]:
    """Ids up to the first <eos>, without padding."""
    out = []
    for i in ids:
        if i == EOS_ID:
            break
        if i != PAD_ID:
            out.append(i)
    return out


@dataclass(frozen=True)
class Hypothesis:
    """A beam hypothesis: its tokens (no <sos>; a finished one without its <eos>), summed log-probability and
    ranking score (log-probability / length**length_penalty, the length counting <eos>; for a live one, None)."""

    token_ids: list[int]
    log_probability: float
    score: float | None = None
    finished: bool = False


@dataclass
class BeamTrace:
    """One sentence's beam search: the finished hypotheses best first, and the live beam after every step."""

    n_best: list[Hypothesis]
    steps: list[list[Hypothesis]]  # steps[t]: the beam after step t (finished ones that ended there included)
    beam_size: int
    length_penalty: float
    greedy: list[int] | None = None  # the greedy decoding's ids (without <eos>), where it was asked for


@torch.no_grad()
def beam_search(model: Seq2Seq, src: Tensor, beam_size: int = 5, max_len: int | None = None,
                length_penalty: float = 1.0, gates: HeadGates | None = None, prefix: list[int] = ()
                ) -> list[list[int]]:
    """Batched beam search; hypotheses are ranked by log-probability / length**length_penalty.

    A sentence is done once `beam_size` hypotheses have ended with <eos> (fairseq's rule). `gates` are the
    same for every sentence: (L, H) per kind. Every hypothesis starts with the given `prefix`.
    """
    if beam_size == 1:
        return greedy_decode(model, src, max_len, gates, prefix)
    finished, _ = _beam(model, src, beam_size, max_len, length_penalty, gates, prefix)
    return [max(f, key=lambda hypothesis: hypothesis.score).token_ids if f else [] for f in finished]


@torch.no_grad()
def beam_trace(model: Seq2Seq, src_ids: list[int], beam_size: int = 5, max_len: int | None = None,
               length_penalty: float = 1.0, gates: HeadGates | None = None, prefix: list[int] = (),
               told: Callable[[int, int], None] | None = None, decoder: StepDecoder | None = None,
               greedy: bool = False) -> BeamTrace:
    """Beam search of one sentence (the same search as `beam_search`), recording the beam at every step;
    `told(steps, limit)` after each (it may raise to stop). With `decoder` (the model's `StepDecoder`), each step
    is a flat run of tensor operations rather than a walk of the module tree. With `greedy`, the greedy decoding
    too (`greedy_decode`'s), made in the same steps."""
    src = torch.tensor([src_ids], dtype=torch.long, device=device_of(model))
    follower = _Greedy(1, src.device) if greedy else None
    finished, steps = _beam(model, src, max(beam_size, 1), max_len, length_penalty, gates, prefix, record=True,
                            told=told, decoder=decoder, greedy=follower)
    return BeamTrace(n_best=sorted(finished[0], key=lambda hypothesis: -hypothesis.score), steps=steps,
                     beam_size=beam_size, length_penalty=length_penalty,
                     greedy=follower.ids[0] if follower is not None else None)


class _TreeSteps:
    """Decoding steps through the model's modules (any `Seq2Seq`): K rows per sentence of `src` (B, S)."""

    def __init__(self, model: Seq2Seq, src: Tensor, k: int, gates: HeadGates | None):
        memory, src_mask, _ = model.encode(src, gates=gates)
        self.model, self.gates = model, gates
        self.memory = memory.repeat_interleave(k, dim=0)  # (B*K, S, d_model)
        self.src_mask = src_mask.repeat_interleave(k, dim=0)
        self.cache = model.new_cache()

    def logits(self, tokens: Tensor) -> Tensor:
        """Every row's next-token logits (B*K, 1, V) after `tokens` (B*K, 1)."""
        return self.model.decode(tokens, self.memory, self.src_mask, self.cache, gates=self.gates)[0]

    def keep(self, rows: Tensor) -> None:
        """Only the rows `rows` go on, in that order (each within its own sentence's K rows)."""
        self.cache = [layer.select(rows, memory=False) for layer in self.cache]


class _FlatSteps:
    """The beam's steps through a Transformer's `StepDecoder`: what `_TreeSteps` computes, up to float rounding."""

    def __init__(self, model: Transformer, decoder: StepDecoder, src: Tensor, k: int, gates: HeadGates | None,
                 limit: int):
        memory, src_mask, _ = model.encode(src, gates=gates)
        self.decoder, self.position = decoder, 0
        self.cross = [(keys.repeat_interleave(k, dim=0), values.repeat_interleave(k, dim=0))
                      for keys, values in decoder.memory_keys_values(memory)]  # per layer (B*K, H, S, d_head)
        padded = ~src_mask.repeat_interleave(k, dim=0)  # (B*K, 1, 1, S)
        self.cross_bias = torch.zeros(padded.shape, device=src.device).masked_fill(padded, float("-inf")) \
            if padded.any() else None
        rows = src.size(0) * k
        self.keys = [torch.zeros(rows, decoder.n_heads, limit, decoder.d_head, device=src.device)
                     for _ in decoder.layers]
        self.values = [torch.zeros_like(keys) for keys in self.keys]
        self.self_gates, self.cross_gates = (
            None if gates is None or getattr(gates, kind) is None
            else getattr(gates, kind)[:, None].expand(-1, rows, -1) for kind in (DECODER, CROSS))

    def logits(self, tokens: Tensor) -> Tensor:
        width = self.position + 1  # every row is at the same position: no bias needed
        logits, *_ = self.decoder.step(
            tokens[:, 0], torch.full((tokens.size(0),), self.position, device=tokens.device),
            [keys[:, :, :width] for keys in self.keys],
            [values[:, :, :width] for values in self.values], None, self.cross, self.cross_bias,
            self.self_gates, self.cross_gates)
        self.position = width
        return logits[:, None]

    def keep(self, rows: Tensor) -> None:
        self.keys = [keys.index_select(0, rows) for keys in self.keys]
        self.values = [values.index_select(0, rows) for values in self.values]


def _beam(model: Seq2Seq, src: Tensor, k: int, max_len: int | None, length_penalty: float,
          gates: HeadGates | None, prefix: list[int] = (), record: bool = False,
          told: Callable[[int, int], None] | None = None, decoder: StepDecoder | None = None,
          greedy: _Greedy | None = None) -> tuple[list[list[Hypothesis]], list[list[Hypothesis]]]:
    """The beam search behind `beam_search` and `beam_trace`: each sentence's finished hypotheses and, when
    `record` (one sentence), the beam after every step; `told(steps, limit)` after each step. `decoder`: the
    model's `StepDecoder`, to step through (else the module tree). `greedy`: each sentence's greedy decoding, made
    meanwhile as one more row of the same steps (a row costs far less than a step), and on after the beam where it
    is longer."""
    batch = src.size(0)
    limit = output_limit(model, src.size(1), max_len)
    width = k + (greedy is not None)  # rows per sentence: the beam's, then the greedy decoding's
    steps = _TreeSteps(model, src, width, gates) if decoder is None else \
        _FlatSteps(model, decoder, src, width, gates, limit)
    scores = torch.zeros(batch, k, device=src.device)
    scores[:, 1:] = float("-inf")  # all beams start identical: keep one alive
    sequences = torch.full((batch * k, 1), SOS_ID, dtype=torch.long, device=src.device)
    finished: list[list[Hypothesis]] = [[] for _ in range(batch)]
    history: list[list[Hypothesis]] = []
    sentences = torch.arange(batch, device=src.device)[:, None]  # (B, 1)
    greedy_rows = torch.full((batch, width - k), k, device=src.device)  # each sentence's greedy row, if any, stays

    def beam_log_probs(step: int) -> Tensor:
        """The beam rows' next-token log-probabilities (B*K, V); the greedy rows take their step meanwhile."""
        tokens = sequences[:, -1:].view(batch, k)
        if greedy is not None:
            tokens = torch.cat([tokens, greedy.last], dim=1)
        log_probs = next_token_logits(steps.logits(tokens.reshape(-1, 1))).log_softmax(-1)  # (B*width, V)
        if step < len(prefix):
            log_probs = given(log_probs, prefix[step])
        log_probs = log_probs.view(batch, width, -1)
        if greedy is not None and not greedy.done:
            greedy.advance(log_probs[:, k])
        return log_probs[:, :k].reshape(batch * k, -1)

    for step in range(limit):
        log_probs = beam_log_probs(step)
        vocab = log_probs.size(-1)
        candidates = (scores.view(-1, 1) + log_probs).view(batch, k * vocab)
        top_scores, top_index = candidates.topk(2 * k, dim=-1)  # (B, 2K)
        top_beam, top_token = top_index // vocab, top_index % vocab
        ends = (top_token == EOS_ID) | (step == limit - 1)
        ended_here = []
        # Hypotheses that end among the best K are finished; the rest of the beam continues without them.
        for b, rank in (ends[:, :k] & torch.isfinite(top_scores[:, :k])).nonzero().tolist():
            if len(finished[b]) < k:
                beam_row = b * k + top_beam[b, rank].item()
                ids = sequences[beam_row, 1:].tolist() + ([] if top_token[b, rank] == EOS_ID
                                                          else [top_token[b, rank].item()])
                log_probability = top_scores[b, rank].item()
                hypothesis = Hypothesis(ids, log_probability, log_probability / (len(ids) + 1) ** length_penalty,
                                        finished=True)
                finished[b].append(hypothesis)
                ended_here.append(hypothesis)
        if all(len(f) >= k for f in finished):
            if record:
                history.append(ended_here)
            break
        alive_scores = top_scores.masked_fill(ends, float("-inf"))
        alive_scores, alive_rank = alive_scores.topk(k, dim=-1)  # (B, K)
        beams = top_beam.gather(1, alive_rank)  # (B, K)
        scores = alive_scores
        sequences = torch.cat([sequences[(sentences * k + beams).view(-1)],
                               top_token.gather(1, alive_rank).view(-1, 1)], dim=1)
        # A hypothesis only ever moves within its own sentence's rows, whose memory is the same; a greedy row stays.
        steps.keep((sentences * width + torch.cat([beams, greedy_rows], dim=1)).view(-1))
        if record:
            history.append(ended_here + [Hypothesis(ids[1:], score) for ids, score
                                         in zip(sequences.tolist(), scores[0].tolist()) if score > float("-inf")])
        if told is not None:
            told(step + 1, limit)
    for step in range(step + 1, limit):  # a greedy decoding longer than the beam: its row goes on (the rest idle)
        if greedy is None or greedy.done:
            break
        beam_log_probs(step)
        if told is not None:
            told(step + 1, limit)
    return finished, history


def teacher_forced_log_probs(model: Seq2Seq, src_ids: list[int], tgt_ids: list[int],
                             gates: HeadGates | None = None) -> np.ndarray:
    """The log-probability the model gives each of `tgt_ids` after the ones before it (one teacher-forced pass),
    with <pad> and <sos> ruled out as decoding rules them out: for a greedy output, the log of its trace's
    probabilities."""
    return teacher_forced(model, src_ids, tgt_ids, gates)[0]


@torch.inference_mode()
def teacher_forced(model: Seq2Seq, src_ids: list[int], tgt_ids: list[int], gates: HeadGates | None = None,
                   need_weights: bool = False) -> tuple[np.ndarray, Attention | None]:
    """`teacher_forced_log_probs`, and with `need_weights` every attention map of the same pass (batch of one)."""
    device = device_of(model)
    src = torch.tensor([src_ids], dtype=torch.long, device=device)
    tgt_in = torch.tensor([[SOS_ID] + tgt_ids[:-1]], dtype=torch.long, device=device)
    logits, attention = model(src, tgt_in, gates=gates, need_weights=need_weights)
    return chosen_log_probs(logits, tgt_ids), attention


def chosen_log_probs(logits: Tensor, tgt_ids: list[int]) -> np.ndarray:
    """(T,) the log-probability of each of `tgt_ids` in a teacher-forced pass's logits (1, T, V), <pad> and <sos>
    ruled out as decoding rules them out."""
    device = logits.device
    ruled_out = torch.tensor(NEVER_EMITTED, device=device)
    log_probs = logits[0].float().index_fill(-1, ruled_out, float("-inf")).log_softmax(-1)  # (T, V)
    chosen = log_probs[torch.arange(len(tgt_ids), device=device), torch.tensor(tgt_ids, device=device)]
    return chosen.cpu().numpy()


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
            self.self_gates, self.cross_gates)
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
