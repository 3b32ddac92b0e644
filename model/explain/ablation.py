"""Every head switched off alone, many heads in one batched pass: the teacher-forced loss of a batch of sentences
with each head's output set to zero (Michel et al., 2019, the head report's "one head off").

One loop over the heads runs the whole model once per head. Here a pass holds a copy of the batch per head, each
copy gated apart (`HeadGates` of shape (L, rows, H)), and starts where its heads first change anything: a decoder
head's copies share the sentences' encoding and their cross-attention keys and values, and go on from the decoder's
own stream entering the head's layer; an encoder head's copies go on from the encoder's stream entering its layer.
What comes before is computed once per batch (model/explain/patching.py does the same with one sentence and one
patched head per row). A GRU model has no layers to start from: its copies run the decoder whole. The heads are
taken in the order the model computes them, so that a pass's copies go on from its first head's place, the few
layers between it and the others' recomputed for them.

Each pass holds enough copies for its matrix products to reuse the weights they read (`PASS_ROWS`), and reads the
loss from the decoder's states through the output layer a chunk of the vocabulary at a time (`row_losses`), so that
a 256k-token vocabulary's logits are never held whole.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from attention_inspector.model.explain.patching import (Head, HeadHooks, first_patched, memory_cache,
                                                        memory_keys_values, recorded_streams)
from attention_inspector.model.keys import ENCODER
from attention_inspector.model.nets.seq2seq import HeadGates, Seq2Seq
from attention_inspector.model.text.batching import Batch
from attention_inspector.model.text.vocab import PAD_ID

# The logits one batch may hold, by device type: on a CPU, passes of 1,000 target tokens of en-de's 6,457-token
# vocabulary ran ~2x faster than passes of 4,000, whose logits and softmax left the cache (docs/performance.md);
# a GPU takes many copies of a batch per pass, as many as its memory comfortably holds.
LOGITS_BYTES = {"cpu": 32 * 2 ** 20, "cuda": 2 * 2 ** 30}
MAX_TOKENS = 4000  # target tokens per batch, at most (as the head report's other passes)
# Target positions a pass of copies holds at least, by device type: a pass of one 41-token sentence through
# NLLB-600M's sizes reads every weight for 41 rows; with 8 copies (328 rows) 8 encoder heads took 4.2-4.4 s against
# 6.9-7.6 s one copy per pass, and more rows gained nothing (docs/performance.md, "The head report").
PASS_ROWS = {"cpu": 320, "cuda": 16384}
# Output-layer columns per matrix product: a pass's logits are never held whole, their log-sum-exp gathered chunk
# by chunk (the same 8 heads: 5.4-6.8 s with the 256,206-token logits whole, 4.2-4.8 s in chunks of 4,096).
VOCAB_CHUNK = 4096


def pass_tokens(vocabulary: int, device: torch.device) -> int:
    """Target tokens per batch (padding included) whose float32 logits fit one batch's budget on `device`."""
    return max(1, min(MAX_TOKENS, LOGITS_BYTES[device.type] // (4 * vocabulary)))


def row_losses(states: torch.Tensor, generator: torch.nn.Linear, tgt_out: torch.Tensor,
               chunk: int = VOCAB_CHUNK) -> torch.Tensor:
    """Each row's summed negative log-likelihood of its reference tokens, padding left out: (rows,), from the
    decoder's `states` (rows, T, d) through the output layer `generator`, `chunk` of its tokens at a time (the
    log-sum-exp over the vocabulary gathered chunk by chunk; the logits never held whole)."""
    dtype = torch.promote_types(states.dtype, torch.float32)
    states, weight = states.to(dtype), generator.weight.to(dtype)
    bias = None if generator.bias is None else generator.bias.to(dtype)
    total = None
    for begin in range(0, weight.size(0), chunk):
        part = torch.logsumexp(F.linear(states, weight[begin:begin + chunk],
                                        None if bias is None else bias[begin:begin + chunk]), dim=-1)
        total = part if total is None else torch.logaddexp(total, part)
    gold = (states * weight[tgt_out]).sum(-1) + (0.0 if bias is None else bias[tgt_out])
    return ((total - gold) * (tgt_out != PAD_ID)).sum(-1)


def copies_per_pass(batch: Batch, rows: int | None = None) -> int:
    """How many copies of the batch one pass holds: as many as make `rows` target positions (default: its
    device's `PASS_ROWS`), at least one."""
    rows = PASS_ROWS[batch.src.device.type] if rows is None else rows
    return max(1, -(-rows // batch.tgt_in.numel()))


@dataclass
class BasePass:
    """A batch's pass with every head on: its loss, and what the gated copies go on from."""

    batch: Batch
    loss: float
    memory: torch.Tensor
    src_mask: torch.Tensor
    keys_values: list[tuple[torch.Tensor, torch.Tensor]]  # a Transformer's cross-attention keys and values per layer
    encoder_streams: dict[int, torch.Tensor]  # entering each encoder layer (a Transformer's)
    decoder_streams: dict[int, torch.Tensor]  # entering each decoder layer

    def heads_off(self, model: Seq2Seq, heads: list[Head], start: tuple[str, int]) -> list[float]:
        """The batch's loss with each of `heads` off alone, a copy of the batch per head in one pass that goes on
        from `start` (`first_patched` of them all: where the first of them changes anything)."""
        size, copies = self.batch.src.size(0), len(heads)

        def repeated(t: torch.Tensor) -> torch.Tensor:  # (B, ...) -> (copies × B, ...), copy by copy
            return t.repeat(copies, *[1] * (t.dim() - 1))
        gates = {kind: torch.ones(layers, copies * size, count, device=self.memory.device)
                 for kind, (layers, count) in model.heads().items() if kind in {kind for kind, _, _ in heads}}
        for copy, (kind, layer, head) in enumerate(heads):
            gates[kind][layer, copy * size:(copy + 1) * size, head] = 0.0
        gates, (side, layer) = HeadGates(**gates), start
        tgt_in = repeated(self.batch.tgt_in)
        if side == ENCODER:
            memory, src_mask, _ = model.encode(repeated(self.batch.src), gates=gates, fused=True,
                                               start=(layer, repeated(self.encoder_streams[layer])))
            states, _ = model.decode(tgt_in, memory, src_mask, gates=gates, fused=True, states=True)
        else:
            begun = {"start": (layer, repeated(self.decoder_streams[layer]))} if layer > 0 else {}  # 0: a GRU's too
            cache = memory_cache([(repeated(keys), repeated(values)) for keys, values in self.keys_values])
            states, _ = model.decode(tgt_in, repeated(self.memory), repeated(self.src_mask), cache, gates=gates,
                                     fused=True, states=True, **begun)
        return row_losses(states, model.generator, repeated(self.batch.tgt_out)).view(copies, size).sum(-1).tolist()


@torch.no_grad()
def base_pass(model: Seq2Seq, batch: Batch) -> BasePass:
    """The batch with every head on."""
    with recorded_streams(model) as (encoder, decoder):
        memory, src_mask, _ = model.encode(batch.src, gates=HeadHooks({}, encoder), fused=True)
        states, _ = model.decode(batch.tgt_in, memory, src_mask, fused=True, states=True)
    return BasePass(batch, float(row_losses(states, model.generator, batch.tgt_out).sum()), memory, src_mask,
                    memory_keys_values(model, memory), {i: kept.outputs[0] for i, kept in encoder.items()},
                    {i: kept.outputs[0] for i, kept in decoder.items()})


@torch.no_grad()
def heads_off_losses(model: Seq2Seq, batch: Batch, heads: list[Head], copies: int | None = None,
                     advance: Callable[[int], None] = lambda done: None) -> tuple[float, list[float]]:
    """The batch's summed teacher-forced loss with every head on, and with each of `heads` ((kind, 0-based layer,
    0-based head)) switched off alone, in that order. `copies`: heads per pass (default: as many as
    `copies_per_pass` allows); `advance(n)` is told the heads of each pass as it ends (it may raise to stop)."""
    base = base_pass(model, batch)
    copies = copies or copies_per_pass(batch)
    # In the order the model computes them (the encoder's layers, then the decoder's), so that a pass's copies go on
    # from nearly the same place: each from where the first of them changes anything.
    order = sorted(range(len(heads)), key=lambda i: computed_from(first_patched(model, [heads[i]])))
    losses = [0.0] * len(heads)
    for begin in range(0, len(order), copies):
        group = order[begin:begin + copies]
        start = first_patched(model, [heads[i] for i in group])
        for i, loss in zip(group, base.heads_off(model, [heads[i] for i in group], start)):
            losses[i] = loss
        advance(len(group))
    return base.loss, losses


def computed_from(start: tuple[str, int]) -> tuple[bool, int]:
    """A `first_patched` place as a sort key: the encoder's layers first, then the decoder's."""
    side, layer = start
    return side != ENCODER, layer
