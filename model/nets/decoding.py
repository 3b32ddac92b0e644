"""Decoding with a key/value cache: batched greedy and beam search for evaluation, and teacher-forced scoring.
Greedy traces, which record every step's choice, alternatives and attention, are in model/nets/tracing.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from attention_inspector.model.nets.seq2seq import CROSS, DECODER, Attention, HeadGates, Seq2Seq, device_of
from attention_inspector.model.nets.step_decoder import StepDecoder
from attention_inspector.model.nets.transformer import Transformer
from attention_inspector.model.text.vocab import EOS_ID, PAD_ID, SOS_ID

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
