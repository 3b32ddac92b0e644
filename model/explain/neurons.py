"""Why a head looks where it does: the query and key vectors behind one head's attention weights, for every kind of
attention of an encoder-decoder model (the neuron view of BertViz, Vig 2019, which shows them for encoders and
decoders alone).

Head h's weight of key j for query i is softmax_j(s_ij), with the score s_ij = scale · q_i·k_j + b_ij:
- q_i = W_Q x_i and k_j = W_K y_j (with the projections' biases), x the sublayer's input at the query's position
  and y at the key's (the encoder's output for cross-attention); the GRU models' `dot` and `split` attention have no
  projections: q is the decoder's state at the step, k each encoder state (cut into heads by `split`);
- scale 1/√d_head, but for T5, which does not scale its scores: its √d_head, folded into W_Q at conversion
  (`ModelConfig.folded_query_scale`), is divided out of q here, so q is T5's own and the scale 1;
- b a relative position bias (T5's self-attention), else none; a key the query may not see (a later step in decoder
  self-attention) is masked, its weight 0.

So each dimension d adds scale · q_i[d] · k_j[d] to the score: `HeadVectors.products` shows which dimensions carry
a weight. Every number comes from one teacher-forced pass of the decoding's tokens, whose weights equal the
decoding's own (a test checks both against the trace and against transformers' own q_proj/k_proj).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from attention_inspector.model.keys import CROSS, DECODER, ENCODER, KIND_LABELS
from attention_inspector.model.nets.rnn import RNNSeq2Seq
from attention_inspector.model.nets.seq2seq import HeadGates, Seq2Seq, device_of
from attention_inspector.model.nets.transformer import MultiHeadAttention

# What q and k are, by model: said with every answer.
PROJECTED = "q = W_Q·x (the sublayer's input at the query), k = W_K·y (at each key{keys}), biases included."
RECURRENT = {
    "dot": "This GRU's dot attention has no projections: q is the decoder's state at the step, k each encoder state.",
    "split": "This GRU's split attention has no projections: q is head {head}'s slice of the decoder's state at the "
             "step, k the same slice of each encoder state.",
    "general": "q = W_Q·s (s: the GRU decoder's state at the step), k = W_K·h (h: each encoder state), biases "
               "included.",
}
UNSCALED = " This model (T5) does not scale its scores: scale 1."
POSITION_BIAS = " The score adds a relative position bias, b (T5)."


@dataclass
class HeadVectors:
    """Every query and key vector of one head in one pass, and what its scores are made of. `kind`, `layer` and
    `head` 0-based; rows are queries (a source token for the encoder, a step for the decoder and cross-attention)."""

    kind: str
    layer: int
    head: int
    queries: np.ndarray  # (Q, d_head), as the model computes them (T5's √d_head divided out)
    keys: np.ndarray  # (K, d_head)
    scale: float  # what the model multiplies q·k by
    bias: np.ndarray | None  # (Q, K): added to the scores (a relative position bias), or None
    allowed: np.ndarray  # (Q, K) bool: False where the key is masked
    weights: np.ndarray  # (Q, K): the head's weights in the same pass
    note: str  # what q and k are in this model

    def products(self, query: int) -> np.ndarray:
        """(K, d_head): scale · q ⊙ k_j for each key j, each row summing to the score's q·k term; NaN where
        masked."""
        products = self.scale * self.queries[query].astype(np.float64) * self.keys.astype(np.float64)
        products[~self.allowed[query]] = np.nan
        return products

    def scores(self, query: int) -> np.ndarray:
        """(K,): the softmax's input, scale · q·k + b; NaN where masked (not a score of −inf: the key is not
        seen)."""
        scores = self.products(query).sum(-1)
        return scores if self.bias is None else scores + self.bias[query]

    @property
    def rows(self) -> int:
        return len(self.queries)


def checked_head(model: Seq2Seq, kind: object, layer: object, head: object) -> tuple[str, int, int]:
    """(kind, layer, head) 0-based from 1-based `layer` and `head`, or a ValueError naming what the model lacks."""
    heads = model.heads()
    if kind not in heads:
        if kind in KIND_LABELS:
            raise ValueError(f"This model has no {KIND_LABELS[kind].lower()}: it has "
                             f"{', '.join(KIND_LABELS[k].lower() for k in heads)}.")
        raise ValueError(f"Unknown attention kind {kind!r}; this model has: {', '.join(heads)}.")
    layers, count = heads[kind]
    for name, value, most in (("layer", layer, layers), ("head", head, count)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
            raise ValueError(f"The {name} must be a whole number from 1 to {most} ({KIND_LABELS[kind].lower()}), "
                             f"not {value!r}.")
    return kind, layer - 1, head - 1


@torch.inference_mode()
def head_vectors(model: Seq2Seq, src_ids: list[int], decoder_ids: list[int], kind: str, layer: int, head: int,
                 gates: HeadGates | None = None) -> HeadVectors:
    """The query and key vectors of head `head` of `layer` (0-based) of `kind` for the sentence `src_ids` read with
    the decoder inputs `decoder_ids` (<sos>, then each choice but the last), teacher-forced, with the heads of
    `gates` switched off."""
    device = device_of(model)
    src = torch.tensor([src_ids], device=device)
    tgt = torch.tensor([decoder_ids], device=device)
    if isinstance(model, RNNSeq2Seq):
        return _recurrent(model, src, tgt, layer, head, gates)
    memory, src_mask, encoded = model.encode(src, need_vectors=True, gates=gates)
    bias_table = None
    if kind == ENCODER:
        block = model.encoder_layers[layer]
        attention = block.self_attention
        queries_in = keys_in = block.attention_block.sublayer_input(encoded.encoder_stream[layer, :, 0])
        weights, bias_table, keys_said = encoded.encoder[layer, 0, head], model.encoder_position_bias, ""
    else:
        _, decoded = model.decode(tgt, memory, src_mask, need_vectors=True, gates=gates)
        block = model.decoder_layers[layer]
        if kind == DECODER:
            attention = block.self_attention
            queries_in = keys_in = block.self_attention_block.sublayer_input(decoded.decoder_stream[layer, :, 0])
            weights, bias_table, keys_said = decoded.decoder[layer, 0, head], model.decoder_position_bias, ""
        else:
            attention = block.cross_attention
            queries_in = block.cross_attention_block.sublayer_input(decoded.decoder_stream[layer, :, 1])
            keys_in, weights, keys_said = memory, decoded.cross[layer, 0, head], ": the encoder's output"
    folded = model.config.folded_query_scale
    queries, keys = _projected(attention, queries_in, keys_in, head)
    positions = torch.arange(keys.size(0), device=device)
    bias = None if bias_table is None else bias_table(positions, positions)[head]  # (Q, K)
    allowed = torch.ones_like(weights, dtype=torch.bool)
    if kind == DECODER:
        allowed = allowed.tril()
    note = PROJECTED.format(keys=keys_said) + (UNSCALED if folded != 1.0 else "") + \
        (POSITION_BIAS if bias is not None else "")
    return HeadVectors(kind, layer, head, _numpy(queries / folded), _numpy(keys), folded / math.sqrt(attention.d_head),
                       None if bias is None else _numpy(bias), allowed.cpu().numpy(), _numpy(weights), note)


def _recurrent(model: RNNSeq2Seq, src: Tensor, tgt: Tensor, layer: int, head: int, gates: HeadGates | None
               ) -> HeadVectors:
    """A GRU model's cross-attention head: its queries are the decoder's states, read step by step from the state it
    keeps between steps (teacher-forced, which is what decoding one step at a time computes)."""
    memory, src_mask, _ = model.encode(src)
    cache = model.new_cache()
    attention = model.cross_attention
    states, rows = [], []
    for t in range(tgt.size(1)):
        _, attended = model.decode(tgt[:, t:t + 1], memory, src_mask, cache, need_weights=True, gates=gates)
        states.append(cache[0].hidden[:, :model.config.hidden_size])  # the GRU's state at step t, (1, hidden)
        rows.append(attended.cross[layer, 0, head, 0])
    queries = attention.split_heads(attention.w_q(torch.stack(states, 1)))[0, head]  # (T, d_head)
    keys = cache[0].cross_keys[0, head]  # (S, d_head)
    weights = torch.stack(rows)
    note = RECURRENT[model.config.attention].format(head=head + 1)
    return HeadVectors(CROSS, layer, head, _numpy(queries), _numpy(keys), 1 / math.sqrt(attention.d_head), None,
                       np.ones(weights.shape, dtype=bool), _numpy(weights), note)


def _projected(attention: MultiHeadAttention, queries_in: Tensor, keys_in: Tensor, head: int) -> tuple[Tensor, Tensor]:
    """Head `head`'s queries (Q, d_head) of `queries_in` and keys (K, d_head) of `keys_in` (both (1, positions, d))."""
    queries = attention.split_heads(attention.w_q(queries_in))[0, head]
    keys = attention.split_heads(attention.w_k(keys_in))[0, head]
    return queries, keys


def _numpy(tensor: Tensor) -> np.ndarray:
    return tensor.float().cpu().numpy()
