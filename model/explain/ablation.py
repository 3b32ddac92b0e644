"""Every head switched off alone, many heads in one batched pass: the teacher-forced loss of a batch of sentences
with each head's output set to zero (Michel et al., 2019, the head report's "one head off").

One loop over the heads runs the whole model once per head. Here a pass holds a copy of the batch per head, each
copy gated apart (`HeadGates` of shape (L, rows, H)), and starts where its heads first change anything: a decoder
head's copies share the sentences' encoding and their cross-attention keys and values, and go on from the decoder's
own stream entering the head's layer; an encoder head's copies go on from the encoder's stream entering its layer.
What comes before is computed once per batch (model/explain/patching.py does the same with one sentence and one
patched head per row). A GRU model has no layers to start from: its copies run the decoder whole.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from model.explain.patching import (Head, HeadHooks, first_patched, memory_cache, memory_keys_values,
                                    recorded_streams)
from model.keys import ENCODER
from model.nets.seq2seq import HeadGates, Seq2Seq
from model.text.batching import Batch
from model.text.vocab import PAD_ID

# The logits one pass may hold, by device type: on a CPU, passes of 1,000 target tokens of en-de's 6,457-token
# vocabulary ran ~2x faster than passes of 4,000, whose logits and softmax left the cache (docs/performance.md);
# a GPU takes many copies of a batch per pass, as many as its memory comfortably holds.
LOGITS_BYTES = {"cpu": 32 * 2 ** 20, "cuda": 2 * 2 ** 30}
MAX_TOKENS = 4000  # target tokens per batch, at most (as the head report's other passes)


def pass_tokens(vocabulary: int, device: torch.device) -> int:
    """Target tokens per batch (padding included) whose float32 logits fit one pass's budget on `device`."""
    return max(1, min(MAX_TOKENS, LOGITS_BYTES[device.type] // (4 * vocabulary)))


def row_losses(logits: torch.Tensor, tgt_out: torch.Tensor) -> torch.Tensor:
    """Each row's summed negative log-likelihood of its reference tokens, padding left out: (rows,)."""
    losses = F.cross_entropy(logits.flatten(0, 1).float(), tgt_out.flatten(), ignore_index=PAD_ID, reduction="none")
    return losses.view(tgt_out.shape).sum(-1)


def copies_per_pass(batch: Batch, vocabulary: int, budget: int | None = None) -> int:
    """How many copies of the batch one pass holds: as many as keep its float32 logits within `budget` (default:
    its device's), at least one."""
    budget = LOGITS_BYTES[batch.src.device.type] if budget is None else budget
    return max(1, budget // (batch.tgt_in.numel() * vocabulary * 4))


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
        from `start` (`first_patched` of each of them: the same)."""
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
            logits, _ = model.decode(tgt_in, memory, src_mask, gates=gates, fused=True)
        else:
            begun = {"start": (layer, repeated(self.decoder_streams[layer]))} if layer > 0 else {}  # 0: a GRU's too
            cache = memory_cache([(repeated(keys), repeated(values)) for keys, values in self.keys_values])
            logits, _ = model.decode(tgt_in, repeated(self.memory), repeated(self.src_mask), cache, gates=gates,
                                     fused=True, **begun)
        return row_losses(logits, repeated(self.batch.tgt_out)).view(copies, size).sum(-1).tolist()


@torch.no_grad()
def base_pass(model: Seq2Seq, batch: Batch) -> tuple[BasePass, int]:
    """The batch with every head on, and the size of its logits' last dimension (the target vocabulary)."""
    with recorded_streams(model) as (encoder, decoder):
        memory, src_mask, _ = model.encode(batch.src, gates=HeadHooks({}, encoder), fused=True)
        logits, _ = model.decode(batch.tgt_in, memory, src_mask, fused=True)
    return BasePass(batch, float(row_losses(logits, batch.tgt_out).sum()), memory, src_mask,
                    memory_keys_values(model, memory), {i: kept.outputs[0] for i, kept in encoder.items()},
                    {i: kept.outputs[0] for i, kept in decoder.items()}), logits.size(-1)


@torch.no_grad()
def heads_off_losses(model: Seq2Seq, batch: Batch, heads: list[Head], copies: int | None = None,
                     advance: Callable[[int], None] = lambda done: None) -> tuple[float, list[float]]:
    """The batch's summed teacher-forced loss with every head on, and with each of `heads` ((kind, 0-based layer,
    0-based head)) switched off alone, in that order. `copies`: heads per pass (default: as many as
    `copies_per_pass` allows); `advance(n)` is told the heads of each pass as it ends (it may raise to stop)."""
    base, vocabulary = base_pass(model, batch)
    copies = copies or copies_per_pass(batch, vocabulary)
    starts = [first_patched(model, [head]) for head in heads]
    losses = [0.0] * len(heads)
    for start in sorted(set(starts)):
        indices = [i for i, s in enumerate(starts) if s == start]
        for begin in range(0, len(indices), copies):
            group = indices[begin:begin + copies]
            for i, loss in zip(group, base.heads_off(model, [heads[i] for i in group], start)):
                losses[i] = loss
            advance(len(group))
    return base.loss, losses
