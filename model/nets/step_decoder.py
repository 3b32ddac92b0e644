"""The decoder of a trained `Transformer` laid out for fast cached steps of many sentences at once
(`StepDecoder`): the weights read out once, the projections fused, and a step a flat run of tensor operations.
`model/nets/tracing.py`'s `TraceBatch` drives it; it computes what `Transformer.decode` computes (a test compares).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attention_inspector.model.nets.transformer import ACTIVATIONS, Transformer


@dataclass(frozen=True)
class NormWeights:
    """A LayerNorm's or an RMSNorm's parameters (`bias` None), applied without a module call."""

    weight: Tensor
    bias: Tensor | None
    eps: float

    @classmethod
    def of(cls, norm: nn.LayerNorm | nn.RMSNorm) -> NormWeights:
        bias = getattr(norm, "bias", None)
        return cls(norm.weight.detach(), None if bias is None else bias.detach(), norm.eps)

    def __call__(self, x: Tensor) -> Tensor:
        if self.bias is None:
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)


@dataclass(frozen=True)
class DecoderLayerWeights:
    """One decoder layer's weights as plain tensors, laid out for a cached step: self-attention's W_Q, W_K and
    W_V stacked into one (3 d_model, d_model) matrix, cross-attention's W_K and W_V into one."""

    self_qkv: tuple[Tensor, Tensor]  # (bias, weight (in, out)) of each linear map
    self_out: tuple[Tensor, Tensor]
    cross_query: tuple[Tensor, Tensor]
    cross_key_value: tuple[Tensor, Tensor]
    cross_out: tuple[Tensor, Tensor]
    feed_forward_in: tuple[Tensor, Tensor]  # gated: the activation's input and the gate side by side
    feed_forward_out: tuple[Tensor, Tensor]
    norms: tuple[NormWeights, ...]  # after (post-LN) or before (pre-LN) each of the three sublayers


def _fused(owners: dict[int, list[nn.Module]] | None, *linears: nn.Linear) -> tuple[Tensor, Tensor]:
    """Linear maps applied side by side, as one: (bias, weight), the weight stored (in, out) so that
    `torch.addmm(bias, x, weight)` reads it in order (measured ~40% faster than `F.linear` on the (out, in) layout
    for one to 16 rows). With `owners` (`_owners`), the model keeps one copy of its weights: each map's own weight
    and bias become views of these (its `F.linear` reads the same numbers), and the tensors they replace are freed
    (`_rebind`); without, these are a copy."""
    weight = torch.cat([linear.weight.detach().t() for linear in linears], dim=1).contiguous()
    bias = torch.cat([linear.bias.detach() if linear.bias is not None else weight.new_zeros(linear.out_features)
                      for linear in linears])
    start = 0
    for linear in linears if owners is not None else ():
        end = start + linear.out_features
        _rebind(owners, linear, "weight", weight[:, start:end].t())
        if linear.bias is not None:
            _rebind(owners, linear, "bias", bias[start:end])
        start = end
    return bias, weight


def _owners(model: nn.Module) -> dict[int, list[nn.Module]]:
    """Every parameter of `model` (by id) with the modules that hold it (two, for tied weights)."""
    owners: dict[int, list[nn.Module]] = {}
    for module in model.modules():
        for parameter in module._parameters.values():
            if parameter is not None:
                owners.setdefault(id(parameter), []).append(module)
    return owners


def _rebind(owners: dict[int, list[nn.Module]], module: nn.Module, name: str, data: Tensor) -> None:
    """`module.<name>` becomes a parameter viewing `data`, and so does every other module's reference to the same
    parameter (`owners`): tied weights, the output layer and the target embedding, stay tied."""
    old = getattr(module, name)
    new = nn.Parameter(data, requires_grad=old.requires_grad)
    holders = owners.pop(id(old), [module])
    for owner in holders:
        for key, parameter in owner._parameters.items():
            if parameter is old:
                owner._parameters[key] = new
    owners[id(new)] = holders


def _linear(x: Tensor, bias_weight: tuple[Tensor, Tensor]) -> Tensor:
    """x (B, in) through a linear map laid out by `_fused` -> (B, out)."""
    bias, weight = bias_weight
    return torch.addmm(bias, x, weight)


class StepDecoder:
    """The decoder of a trained `Transformer`, one cached step of many sentences at a time.

    A step through `Transformer.decode` walks the module tree (about a hundred module calls for three layers) and
    projects queries, keys and values separately; here the weights are read out once, the projections fused, and a
    step is a flat run of tensor operations. Each sentence of the batch has its own position, its own number of
    cached target positions and its own source length (keys past those carry -inf scores, so exactly zero
    weight): what `Transformer.decode` computes for each sentence alone, up to float rounding (a test compares).
    Read-only once built; the caches belong to the caller (`model.nets.tracing.TraceBatch`). With `share` (a model
    loaded to serve, never trained again), the model's decoder weights become views of the fused ones, so that the
    weights are held once; without (a model being trained: an optimizer and DDP hold its parameters), this holds a
    copy.
    """

    def __init__(self, model: Transformer, share: bool = False):
        config = model.config
        self.n_heads, self.d_head = config.n_heads, config.d_head
        self.pre_norm = config.norm == "pre"
        embedding = model.tgt_embedding
        self.scale = embedding.scale
        self.position_table = embedding.position_table()
        self.position_bias = model.decoder_position_bias  # T5's relative positions (None: absolute ones)
        self.embedding_norm = None if embedding.norm is None else NormWeights.of(embedding.norm)
        self.activation = ACTIVATIONS[config.activation]
        self.gated = config.gated_feed_forward
        # Queries are scaled by 1/sqrt(d_head), rather than every score after.
        self.query_scale = 1 / math.sqrt(self.d_head)
        fused = partial(_fused, _owners(model) if share else None)
        self.layers = [DecoderLayerWeights(
            self_qkv=fused(layer.self_attention.w_q, layer.self_attention.w_k, layer.self_attention.w_v),
            self_out=fused(layer.self_attention.w_o),
            cross_query=fused(layer.cross_attention.w_q),
            cross_key_value=fused(layer.cross_attention.w_k, layer.cross_attention.w_v),
            cross_out=fused(layer.cross_attention.w_o),
            feed_forward_in=fused(*filter(None, (layer.feed_forward.linear_in, layer.feed_forward.linear_gate))),
            feed_forward_out=fused(layer.feed_forward.linear_out),
            norms=tuple(NormWeights.of(block.norm) for block in (
                layer.self_attention_block, layer.cross_attention_block, layer.feed_forward_block)))
            for layer in model.decoder_layers]
        self.final_norm = NormWeights.of(model.decoder_norm) if self.pre_norm else None
        self.generator = fused(model.generator)
        self.token_table = embedding.tokens.weight.detach()  # tied to the output layer: a view of its weight

    def split_heads(self, x: Tensor) -> Tensor:
        """(B, S, d_model) -> (B, H, S, d_head)."""
        return x.view(x.size(0), x.size(1), self.n_heads, self.d_head).transpose(1, 2)

    def memory_keys_values(self, memory: Tensor) -> list[tuple[Tensor, Tensor]]:
        """Every layer's cross-attention keys and values of `memory` (B, S, d_model): (B, H, S, d_head) each."""
        batch, length, d_model = memory.shape
        inner = self.n_heads * self.d_head
        pairs = []
        for layer in self.layers:
            keys_values = _linear(memory.reshape(-1, d_model), layer.cross_key_value).view(batch, length, -1)
            pairs.append((self.split_heads(keys_values[..., :inner]), self.split_heads(keys_values[..., inner:])))
        return pairs

    def _feed_forward(self, h: Tensor, layer: DecoderLayerWeights) -> Tensor:
        hidden = _linear(h, layer.feed_forward_in)
        if self.gated:
            hidden, gate = hidden.chunk(2, dim=-1)
            return _linear(self.activation(hidden) * gate, layer.feed_forward_out)
        return _linear(self.activation(hidden), layer.feed_forward_out)

    def _attend(self, query: Tensor, keys: Tensor, values: Tensor, bias: Tensor | None, gate: Tensor | None
                ) -> tuple[Tensor, Tensor]:
        """One query per sentence (B, H, 1, d_head), scaled, against keys/values (B, H, S, d_head), `bias` (B, 1, 1, S)
        0 or -inf (None: every key counts) -> the heads' output (B, d_model) before W_O, and the weights (B, H, S)."""
        scores = query @ keys.transpose(-2, -1)  # (B, H, 1, S); the query is already scaled by 1/sqrt(d_head)
        weights = (scores if bias is None else scores + bias).softmax(dim=-1)
        out = weights @ values  # (B, H, 1, d_head)
        if gate is not None:
            out = out * gate[..., None, None]  # (B, H, 1, d_head) * (B, H, 1, 1)
        return out.reshape(out.size(0), -1), weights[:, :, 0]

    def _residual(self, x: Tensor, sublayer_output: Tensor, norm: NormWeights) -> Tensor:
        x = x + sublayer_output
        return x if self.pre_norm else norm(x)

    def step(self, tokens: Tensor, positions: Tensor, self_keys: list[Tensor], self_values: list[Tensor],
             self_bias: Tensor | None, cross: list[tuple[Tensor, Tensor]], cross_bias: Tensor | None,
             self_gates: Tensor | None = None, cross_gates: Tensor | None = None, streams: bool = False
             ) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        """One step of B sentences: each reads `tokens[b]` at position `positions[b]`.

        `self_keys`/`self_values` per layer (B, H, width, d_head): this step's keys and values are written at each
        sentence's position, and `self_bias` (B, 1, 1, width) is 0 up to it and -inf after. `cross` per layer: the
        memory's keys and values (B, H, S, d_head), `cross_bias` (B, 1, 1, S) -inf at padding. A bias is None where
        it would be all 0 (every sentence at the same position, sources of one length). Gates (L, B, H).
        -> logits (B, V), self-attention weights (L, B, H, width), cross-attention weights (L, B, H, S), and with
        `streams` the residual stream (L, 4, B, d_model) entering each layer and after each of its three sublayers
        (what `Attention.decoder_stream` holds of a teacher-forced pass, for ALTI+; else None).
        """
        rows = torch.arange(tokens.size(0), device=tokens.device)
        x = self.token_table[tokens] * self.scale  # (B, d_model)
        if self.position_table is not None:
            x = x + self.position_table[positions]
        if self.embedding_norm is not None:
            x = self.embedding_norm(x)
        if self.position_bias is not None:  # each sentence's query position against every cached key position
            keys = torch.arange(self_keys[0].size(2), device=tokens.device)
            relative = self.position_bias(positions[:, None], keys)  # (B, H, 1, width)
            self_bias = relative if self_bias is None else relative + self_bias
        self_maps, cross_maps, points = [], [], []
        record = points.append if streams else lambda x: None
        for i, layer in enumerate(self.layers):
            self_norm, cross_norm, feed_forward_norm = layer.norms
            record(x)
            h = self_norm(x) if self.pre_norm else x
            query, key, value = _linear(h, layer.self_qkv).view(-1, 3, self.n_heads, self.d_head).unbind(1)
            query = query * self.query_scale
            self_keys[i][rows, :, positions] = key  # each sentence's new position, (B, H, d_head)
            self_values[i][rows, :, positions] = value
            out, weights = self._attend(query[:, :, None], self_keys[i], self_values[i], self_bias,
                                        None if self_gates is None else self_gates[i])
            self_maps.append(weights)
            x = self._residual(x, _linear(out, layer.self_out), self_norm)
            record(x)

            h = cross_norm(x) if self.pre_norm else x
            query = _linear(h, layer.cross_query).view(-1, self.n_heads, 1, self.d_head) * self.query_scale
            out, weights = self._attend(query, *cross[i], cross_bias, None if cross_gates is None else cross_gates[i])
            cross_maps.append(weights)
            x = self._residual(x, _linear(out, layer.cross_out), cross_norm)
            record(x)

            h = feed_forward_norm(x) if self.pre_norm else x
            x = self._residual(x, self._feed_forward(h, layer), feed_forward_norm)
            record(x)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return (_linear(x, self.generator), torch.stack(self_maps), torch.stack(cross_maps),
                torch.stack(points).view(len(self.layers), 4, *x.shape) if streams else None)
