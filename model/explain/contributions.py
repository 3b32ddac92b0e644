"""Measures beyond raw attention weights, for one sentence and its translation.

- Value-weighted attention (Kobayashi et al., 2020, "Attention is Not Only a Weight"): ‖α_ij · f_h(x_j)‖, where
  f_h(x_j) is key j's vector after head h's value and output projections; per head, and for a layer's heads
  together ‖Σ_h α^h_ij f_h(x_j)‖.
- Attention rollout (Abnar & Zuidema, 2020): per layer 0.5 · (mean of heads) + 0.5 · I, rows re-normalised,
  multiplied through the layers.
- ALTI and ALTI+ (Ferrando et al., 2022, "Measuring the Mixing of Contextual Information in the Transformer" and
  "Towards Opening the Black Box of Neural Machine Translation"): an attention block's output, residual and
  LayerNorm included, written as a sum of one term per input, T_i(x_j); input j's contribution to output i
  is max(0, ‖y_i‖₁ − ‖y_i − T_i(x_j)‖₁), rows normalised to 1, and layers combined by rollout. Through the
  decoder, cross-attention splits a target position into encoder outputs (mapped back to source tokens by the
  encoder's ALTI rollout) and its own residual (the target prefix): per generated token, the share of every
  source token and every earlier target token, summing to 1. The feed-forward sublayers mix nothing across
  positions.

Transformer only: the GRU models have no residual stream to decompose.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from attention_inspector.model.keys import ALTI, CROSS, DECODER, ENCODER, ROLLOUT, VALUE_NORM
from attention_inspector.model.nets.seq2seq import Attention, HeadGates, device_of
from attention_inspector.model.nets.transformer import Transformer
from attention_inspector.model.text.vocab import SOS_ID


@dataclass
class Contributions:
    """ALTI+ for one sentence and its translation (S source tokens, T decoder positions, one per generated token).

    encoder (S, S): each encoder output's shares of the source tokens (ALTI rollout through the encoder);
    decoder (T, S + T): for the token generated at step t (predicted from decoder position t), the shares of
    every source token, then of every decoder input token (<sos>, then the tokens generated before; zero after t).
    """

    encoder: np.ndarray
    decoder: np.ndarray
    encoder_layers: np.ndarray | None = None  # (L_enc, S, S): `encoder` through each layer
    decoder_layers: np.ndarray | None = None  # (L_dec, T, S + T): `decoder` through each layer

    @property
    def source_contribution(self) -> np.ndarray:
        """(T,) the share of each generated token's prediction that came from the source sentence."""
        return self.decoder[:, :self.encoder.shape[0]].sum(-1)


def value_weighted(weights: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
    """Kobayashi et al.'s norms from weights (..., H, Q, K) and head vectors (..., H, K, d_model):
    per head ‖α_ij f_h(x_j)‖ (..., H, Q, K), and for the heads together ‖Σ_h α^h_ij f_h(x_j)‖ (..., Q, K)."""
    per_head = weights * values.norm(dim=-1).unsqueeze(-2)  # α ≥ 0, so ‖α f‖ = α ‖f‖
    together = torch.einsum("...hqk,...hkd->...qkd", weights, values).norm(dim=-1)
    return per_head, together


def rollout(weights: Tensor) -> Tensor:
    """Attention rollout of per-layer weights (L, H, Q, Q): the product of 0.5 · mean_h + 0.5 · I over the layers,
    rows re-normalised; row i gives each input position's share in position i's final representation."""
    identity = torch.eye(weights.size(-1), dtype=weights.dtype, device=weights.device)
    flow = identity
    for layer in weights:
        mixed = 0.5 * layer.mean(0) + 0.5 * identity
        flow = (mixed / mixed.sum(-1, keepdim=True)) @ flow
    return flow


def block_contributions(weights: Tensor, values: Tensor, residual: Tensor, bias: Tensor,
                        norm: torch.nn.LayerNorm | torch.nn.RMSNorm,
                        post_norm: bool, self_attention: bool) -> Tensor:
    """ALTI of one attention block: weights (H, Q, K), head vectors (H, K, d), the residual stream entering it
    (Q, d), the output projection's bias, the block's LayerNorm (applied after the sum when `post_norm`).

    Self-attention (K = Q): the residual joins its own position's term; returns (Q, K). Cross-attention: the
    residual is one more input, the last column; returns (Q, K + 1). Rows sum to 1.
    """
    return layers_contributions(weights[None], values[None], residual[None], bias[None], [norm], post_norm,
                                self_attention)[0]


@torch.no_grad()  # a measure, never differentiated (a norm's weight may ask for gradients)
def layers_contributions(weights: Tensor, values: Tensor, residual: Tensor, bias: Tensor,
                         norms: list[torch.nn.LayerNorm | torch.nn.RMSNorm], post_norm: bool,
                         self_attention: bool) -> Tensor:
    """`block_contributions` of L blocks of one kind at once (a model's layers: the small operations of one block
    each, a few hundred in all, done once): weights (L, H, Q, K), head vectors (L, H, K, d), residual streams
    (L, Q, d), biases (L, d), a norm per block. Returns (L, Q, K [+ 1])."""
    layers, heads, queries, keys = weights.shape
    width = residual.size(-1)
    # The block's input to its LayerNorm (post-LN), or its output (pre-LN): every key's term summed, one product.
    total = torch.bmm(weights.transpose(1, 2).reshape(layers, queries, heads * keys),
                      values.reshape(layers, heads * keys, width)).add_(residual).add_(bias[:, None])  # (L, Q, d)
    if post_norm:
        # LayerNorm (RMSNorm) is linear in each term once its scale is the whole sum's. A term's centring and the
        # norm's weight are applied to the head vectors, its query's scale to the attention weights, so that the
        # terms (the largest tensor here, L·K·Q·d) come out of their product normalised.
        weight = torch.stack([norm.weight for norm in norms])[:, None]  # (L, 1, d)
        if isinstance(norms[0], torch.nn.RMSNorm):
            scale = total.pow(2).mean(-1, keepdim=True).add_(norms[0].eps).sqrt_()  # (L, Q, 1)
            output = total / scale * weight
        else:
            centred = total - total.mean(-1, keepdim=True)
            scale = centred.pow(2).mean(-1, keepdim=True).add_(norms[0].eps).sqrt_()  # (torch's var is slow here)
            values = values - values.mean(-1, keepdim=True)
            residual = residual - residual.mean(-1, keepdim=True)
            output = centred.div_(scale).mul_(weight)
            if norms[0].bias is not None:
                output += torch.stack([norm.bias for norm in norms])[:, None]
        values = values * weight[:, None]
        weights = weights / scale[:, None]  # (L, H, Q, K), each query's row by its scale
        residual = residual * (weight / scale)
    else:
        output = total
    # Each key's term for every query, Σ_h α_hqk f_h(x_k), laid out (L, K, Q, d): one small product per key (inputs
    # made contiguous: CPU's bmm copies each batch's otherwise).
    terms = residual.new_empty(layers, keys, queries, width)
    torch.bmm(weights.permute(0, 3, 2, 1).reshape(layers * keys, queries, heads),
              values.transpose(1, 2).reshape(layers * keys, heads, width), out=terms.view(-1, queries, width))
    if self_attention:  # the residual joins its own position's term
        positions = torch.arange(queries, device=residual.device)
        terms[:, positions, positions] += residual
    reach = output.abs().sum(-1)  # ‖y_i‖₁: (L, Q)
    shares = (reach[:, None] - terms.sub_(output[:, None]).abs_().sum(-1)).clamp(min=0).transpose(1, 2)
    if not self_attention:  # the residual's share, last
        kept = (reach - (residual - output).abs().sum(-1)).clamp(min=0)
        shares = torch.cat([shares, kept[..., None]], dim=-1)
    return shares / shares.sum(-1, keepdim=True).clamp(min=1e-12)  # (L, Q, K [+ 1])


def gated_layers(gates: HeadGates | None, kind: str, weights: Tensor) -> Tensor:
    """Every layer's weights (L, H, Q, K) with switched-off heads' rows zeroed: what they add to the output."""
    gate = None if gates is None else getattr(gates, kind)
    return weights if gate is None else weights * gate.reshape(gate.size(0), -1, 1, 1)


# Each kind's attention blocks: the model's layers that hold them, the attention in a layer, its residual block.
BLOCKS = {ENCODER: ("encoder_layers", "self_attention", "attention_block"),
          DECODER: ("decoder_layers", "self_attention", "self_attention_block"),
          CROSS: ("decoder_layers", "cross_attention", "cross_attention_block")}


def alti_plus(model: Transformer, src_ids: list[int], tgt_ids: list[int], gates: HeadGates | None = None
              ) -> Contributions:
    """ALTI+ contributions for the translation `tgt_ids` (the generated tokens) of `src_ids`, with the heads of
    `gates` switched off (a switched-off head contributes nothing)."""
    return alti_plus_pass(model, src_ids, tgt_ids, gates)[0]


@torch.inference_mode()
def alti_plus_pass(model: Transformer, src_ids: list[int], tgt_ids: list[int], gates: HeadGates | None = None
                   ) -> tuple[Contributions, Tensor, Attention]:
    """`alti_plus`, with the logits (1, T, V) and the attention of the teacher-forced pass it decomposed."""
    device = device_of(model)
    src = torch.tensor([src_ids], device=device)
    tgt_in = torch.tensor([[SOS_ID] + tgt_ids[:-1]], device=device)
    logits, recorded = model(src, tgt_in, gates=gates, need_vectors=True)
    return decomposed(model, recorded, gates), logits, recorded


@torch.inference_mode()
def decomposed(model: Transformer, recorded: Attention, gates: HeadGates | None = None) -> Contributions:
    """ALTI+ of one pass of `model` (batch of one) that recorded its vectors (`need_vectors`, or a trace's
    `Trace.vectors`), with the heads of `gates` switched off."""
    device = recorded.encoder.device
    sources, targets = recorded.encoder.size(-1), recorded.cross.size(-2)
    post = model.config.norm == "post"

    def each_layer(kind: str, stream: Tensor) -> Tensor:  # every layer's blocks of `kind`: (L, Q, K [+ 1])
        held_by, attention, block = BLOCKS[kind]
        layers = getattr(model, held_by)
        return layers_contributions(gated_layers(gates, kind, getattr(recorded, kind)[:, 0]),
                                    getattr(recorded, f"{kind}_values")[:, 0], stream,
                                    torch.stack([getattr(layer, attention).w_o.bias for layer in layers]),
                                    [getattr(layer, block).norm for layer in layers], post, kind != CROSS)

    streams = recorded.decoder_stream[:, 0]  # (L, 4, T, d): entering, after self-, after cross-attention, output
    blocks = each_layer(ENCODER, recorded.encoder_stream[:, 0, 0])
    mixings, crosses = each_layer(DECODER, streams[:, 0]), each_layer(CROSS, streams[:, 1])  # (L, T, T), (L, T, S + 1)
    encoder, encoder_layers = torch.eye(sources, device=device), []
    for block in blocks:
        encoder = block @ encoder
        encoder_layers.append(encoder)
    # rows: source tokens (fixed), then decoder positions
    flow, decoder_layers = torch.eye(sources + targets, device=device), []
    for mixing, cross in zip(mixings, crosses):
        step = torch.eye(sources + targets, device=device)
        step[sources:, :sources] = cross[:, :sources] @ encoder  # encoder outputs, back to source tokens
        step[sources:, sources:] = cross[:, sources:] * mixing  # the residual: the target prefix, as mixed
        flow = step @ flow
        decoder_layers.append(flow[sources:])
    return Contributions(encoder=encoder.cpu().numpy(), decoder=flow[sources:].cpu().numpy(),
                         encoder_layers=torch.stack(encoder_layers).cpu().numpy(),
                         decoder_layers=torch.stack(decoder_layers).cpu().numpy())


VALUE_NORM_TOGETHER = "value_norm_together"  # the heads of a layer together, beside VALUE_NORM per head


@torch.inference_mode()
def measure_maps(model: Transformer, src_ids: list[int], tgt_ids: list[int], gates: HeadGates | None = None
                 ) -> dict[str, dict[str, np.ndarray]]:
    """Every measure as maps shaped like a trace's attention, per kind ("encoder" (L, ·, S, S), "decoder"
    (L, ·, T, T), "cross" (L, ·, T, S)), for the views to draw like weights:
    - VALUE_NORM: ‖α_ij f_h(x_j)‖ per head (L, H, ...), and VALUE_NORM_TOGETHER: ‖Σ_h α^h_ij f_h(x_j)‖ over the
      heads that are on (L, ...);
    - ROLLOUT: attention rollout through layer l (L, 1, ...): encoder and decoder self-attention over their own
      tokens; cross-attention's heads averaged and mapped back to source tokens by the encoder's rollout;
    - ALTI: ALTI / ALTI+ through layer l (L, 1, ...): the encoder's shares of source tokens; each decoder
      position's shares of source tokens (cross) and of the target prefix (decoder).
    """
    device = device_of(model)
    _, recorded = model(torch.tensor([src_ids], device=device), torch.tensor([[SOS_ID] + tgt_ids[:-1]], device=device),
                        gates=gates, need_vectors=True)
    weights = {kind: getattr(recorded, kind)[:, 0] for kind in (ENCODER, DECODER, CROSS)}  # (L, H, Q, K)
    values = {kind: getattr(recorded, f"{kind}_values")[:, 0] for kind in (ENCODER, DECODER, CROSS)}
    norms = {kind: value_weighted(weights[kind], values[kind])[0].cpu().numpy() for kind in weights}
    together = {kind: value_weighted(gated_layers(gates, kind, weights[kind]), values[kind])[1].cpu().numpy()
                for kind in weights}

    def cumulative(maps: Tensor) -> Tensor:  # rollout through each layer: (L, Q, Q)
        return torch.stack([rollout(maps[:layer + 1]) for layer in range(maps.size(0))])

    encoder_rollout = cumulative(weights[ENCODER])
    rollouts = {ENCODER: encoder_rollout, DECODER: cumulative(weights[DECODER]),
                CROSS: weights[CROSS].mean(1) @ encoder_rollout[-1]}
    shares = alti_plus(model, src_ids, tgt_ids, gates)
    sources = len(src_ids)
    alti = {ENCODER: shares.encoder_layers, DECODER: shares.decoder_layers[:, :, sources:],
            CROSS: shares.decoder_layers[:, :, :sources]}
    return {VALUE_NORM: norms, VALUE_NORM_TOGETHER: together,
            ROLLOUT: {kind: maps[:, None].cpu().numpy() for kind, maps in rollouts.items()},
            ALTI: {kind: maps[:, None] for kind, maps in alti.items()}}
