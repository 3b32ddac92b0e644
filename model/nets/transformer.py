"""The encoder-decoder Transformer of "Attention Is All You Need" (Vaswani et al., 2017).

Post-LN residual blocks as in the paper, pre-LN ("On Layer Normalization in the
Transformer Architecture", Xiong et al., 2020) as an option; sinusoidal positions
as in the paper, learned positions (as in Gehring et al., 2017 and the PyTorch
seq2seq tutorial) as an option. Switches that converted Hub models need (model/hub/convert_hf.py): other sinusoid
layouts, an embedding LayerNorm, other activations, and T5's relative position bias, RMSNorm, gated feed-forward
network and heads whose width is not d_model / heads.

Every attention map can be returned: `attention()` is a pure function that gives
`(output, weights)`, and the weights travel up the call chain into `Attention` (with, on request, each
key's value vectors per head and the residual stream around each sublayer). Interventions (head gates)
are arguments; nothing is stored on a module, so one loaded model can serve many users at once.
Training may use the fused `scaled_dot_product_attention` kernel (`fused=True`);
the inspection path computes the same numbers and a test proves they agree.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attention_inspector.model.nets.positions import POSITIONALS, relative_buckets
from attention_inspector.model.nets.seq2seq import CROSS, DECODER, ENCODER, Attention, HeadGates

ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu,
               "gelu_tanh": lambda x: F.gelu(x, approximate="tanh")}  # T5 v1.1's "gelu_new"
NORMALIZATIONS = ("layer", "rms")  # LayerNorm, or RMSNorm (Zhang & Sennrich, 2019: no mean, no bias; T5)


@dataclass(frozen=True)
class ModelConfig:
    """Hyper-parameters that rebuild a `Transformer`; saved as config.json beside the weights."""

    src_vocab_size: int
    tgt_vocab_size: int
    d_model: int = 512
    n_heads: int = 8
    n_encoder_layers: int = 6
    n_decoder_layers: int = 6
    d_ff: int = 2048
    dropout: float = 0.1  # on embeddings and on each sub-layer's output before the residual sum
    attention_dropout: float | None = None  # on attention weights; None: `dropout`, as the tutorials do
    activation_dropout: float | None = None  # inside the feed-forward network; None: `dropout`
    max_len: int = 256
    positional: str = "sinusoidal"  # or one of POSITIONALS' other keys
    norm: str = "post"  # or "pre"
    tie_embeddings: bool = True  # target embedding shared with the output projection
    pad_id: int = 0
    architecture: str = "transformer"
    # Switches that converted Hub models need (model/hub/convert_hf.py); the defaults are the paper's.
    activation: str = "relu"  # inside the feed-forward network: one of ACTIVATIONS
    scale_embeddings: bool = True  # token embeddings times sqrt(d_model)
    embedding_norm: bool = False  # a LayerNorm right after token + position embedding (mBART)
    share_embeddings: bool = False  # one token table for source and target (one vocabulary)
    d_head: int | None = None  # each head's width; None: d_model / n_heads (T5 may differ: flan-t5-small 64 x 6 heads)
    normalization: str = "layer"  # one of NORMALIZATIONS
    norm_eps: float = 1e-5
    gated_feed_forward: bool = False  # activation(x W_1) * (x W_gate), then W_2 (T5 v1.1's gated GELU)
    relative_buckets: int = 32  # with positional "relative": distance buckets of the bias (T5)
    relative_max_distance: int = 128  # distances from this on share the last bucket
    # A model that does not scale its scores (T5) has √d_head folded into W_Q at conversion, so that every model here
    # scales by 1/√d_head: this factor, which the neuron view (model/explain/neurons.py) divides out of the queries.
    folded_query_scale: float = 1.0

    def __post_init__(self):
        for name in ("attention_dropout", "activation_dropout"):
            if getattr(self, name) is None:  # one rate everywhere (configs saved before these fields existed)
                object.__setattr__(self, name, self.dropout)
        if self.d_head is None:
            if self.d_model % self.n_heads:
                raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
            object.__setattr__(self, "d_head", self.d_model // self.n_heads)
        if self.normalization not in NORMALIZATIONS:
            raise ValueError(f"normalization must be one of {', '.join(map(repr, NORMALIZATIONS))}, "
                             f"not {self.normalization!r}")
        if self.positional not in POSITIONALS:
            raise ValueError(f"positional must be one of {', '.join(map(repr, POSITIONALS))}, not {self.positional!r}")
        if self.norm not in ("post", "pre"):
            raise ValueError(f"norm must be 'post' or 'pre', not {self.norm!r}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {', '.join(map(repr, ACTIVATIONS))}, not {self.activation!r}")
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError("shared embeddings need one vocabulary: src_vocab_size and tgt_vocab_size differ")

    def to_dict(self) -> dict:
        """The config as a JSON-ready dict."""
        return asdict(self)

    def new_norm(self) -> nn.Module:
        """One normalisation layer of this config's kind."""
        if self.normalization == "rms":
            return nn.RMSNorm(self.d_model, eps=self.norm_eps)
        return nn.LayerNorm(self.d_model, eps=self.norm_eps)


@dataclass
class LayerCache:
    """Keys and values one decoder layer has already computed, so a step never recomputes the prefix."""

    self_keys: Tensor | None = None  # (B, H, t, d_head)
    self_values: Tensor | None = None
    cross_keys: Tensor | None = None  # (B, H, S, d_head), computed once from memory
    cross_values: Tensor | None = None

    def select(self, index: Tensor, memory: bool = True) -> LayerCache:
        """The cache of the batch rows `index` (beam search reorders hypotheses with it); `memory=False` keeps the
        cross-attention keys and values as they are (rows of the same sentence hold the same)."""
        cross = (self.cross_keys, self.cross_values)
        return LayerCache(*(None if t is None else t.index_select(0, index)
                            for t in (self.self_keys, self.self_values, *(cross if memory else ()))),
                          *(() if memory else cross))


def attention(query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None,
              dropout: float = 0.0, bias: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Scaled dot-product attention (eq. 1 of the paper); `mask` is True where attending is allowed, `bias` (a
    relative position bias, (1, H, T, S)) is added to the scores."""
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))  # (B, H, T, S)
    if bias is not None:
        scores = scores + bias
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)
    output = F.dropout(weights, dropout, training=dropout > 0) @ value
    return output, weights


class MultiHeadAttention(nn.Module):
    """Multi-head attention: h parallel heads of scaled dot-product attention, concatenated and projected.

    Without `projections`, queries, keys and values are the inputs themselves, split into heads, and the heads'
    outputs are concatenated as they are: no parameters at all (the GRU models' `dot` and `split` attention).
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float, d_head: int | None = None,
                 projections: bool = True):
        super().__init__()
        self.n_heads = n_heads
        self.d_head = d_head or d_model // n_heads
        self.dropout = dropout
        inner = n_heads * self.d_head
        if not projections and inner != d_model:
            raise ValueError(f"heads without projections must split d_model ({d_model}) exactly, not into {inner}")

        def linear(features_in: int, features_out: int) -> nn.Module:
            return nn.Linear(features_in, features_out) if projections else nn.Identity()

        self.w_q = linear(d_model, inner)
        self.w_k = linear(d_model, inner)
        self.w_v = linear(d_model, inner)
        self.w_o = linear(inner, d_model)

    def split_heads(self, x: Tensor) -> Tensor:
        """(B, T, d_model) -> (B, H, T, d_head)."""
        batch, length, _ = x.shape
        return x.view(batch, length, self.n_heads, self.d_head).transpose(1, 2)

    def forward(self, query: Tensor, keys: Tensor, values: Tensor, mask: Tensor | None,
                fused: bool = False, gate: Tensor | None = None, bias: Tensor | None = None
                ) -> tuple[Tensor, Tensor | None]:
        """Attend from `query` (B, T, d_model) to already split `keys`/`values` (B, H, S, d_head).

        `gate` (H,) or (B, H) scales each head's output before the output projection (0: head switched off), or,
        a function, maps the heads' outputs (B, H, T, d_head) to the ones used (model/explain/patching.py records and
        replaces them); `bias` (1, H, T, S) is added to the scores (T5's relative positions).
        """
        q = self.split_heads(self.w_q(query))
        dropout = self.dropout if self.training else 0.0
        if fused:
            if bias is not None:  # the kernel takes one additive mask: the bias, -inf where attending is not allowed
                mask = bias if mask is None else bias.masked_fill(~mask, float("-inf"))
            out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, dropout_p=dropout)
            weights = None
        else:
            out, weights = attention(q, keys, values, mask, dropout, bias)
        if callable(gate):
            out = gate(out)
        elif gate is not None:
            out = out * gate[..., None, None]  # (B, H, T, d_head) * (B or 1, H, 1, 1)
        batch, _, length, _ = out.shape
        out = out.transpose(1, 2).reshape(batch, length, self.n_heads * self.d_head)  # (B, T, d_model)
        return self.w_o(out), weights

    def project_keys_values(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values of `x`, split into heads: two tensors (B, H, S, d_head)."""
        return self.split_heads(self.w_k(x)), self.split_heads(self.w_v(x))

    def head_vectors(self, values: Tensor) -> Tensor:
        """Each key's vector after each head's value and output projections, W_O's bias excluded.

        (B, H, S, d_head) -> (B, H, S, d_model): the output is concat_h(Σ_j α_ij v_j) W_O^T, and head h's
        columns of W_O act on head h alone (Kobayashi et al., 2020).
        """
        inner = self.n_heads * self.d_head
        weight = self.w_o.weight if isinstance(self.w_o, nn.Linear) else torch.eye(inner, dtype=values.dtype,
                                                                                       device=values.device)
        per_head = weight.view(weight.size(0), self.n_heads, self.d_head)  # (d_model, H, d_head)
        return torch.einsum("bhsd,mhd->bhsm", values, per_head)


def new_attention(config: ModelConfig) -> MultiHeadAttention:
    return MultiHeadAttention(config.d_model, config.n_heads, config.attention_dropout, config.d_head)


class RelativePositionBias(nn.Module):
    """A learned bias per head and distance bucket, added to the self-attention scores of every layer of one stack
    (T5: learned in the stack's first layer, shared by all)."""

    def __init__(self, config: ModelConfig, bidirectional: bool):
        super().__init__()
        self.table = nn.Embedding(config.relative_buckets, config.n_heads)
        self.bidirectional = bidirectional
        self.buckets, self.max_distance = config.relative_buckets, config.relative_max_distance

    def forward(self, queries: Tensor, keys: Tensor) -> Tensor:
        """Positions of queries (..., Q) and keys (K,) -> the bias (..., H, Q, K)."""
        distance = keys[None, :] - queries[..., :, None]  # (..., Q, K)
        bias = self.table(relative_buckets(distance, self.bidirectional, self.buckets, self.max_distance))
        return bias.movedim(-1, -3)


class FeedForward(nn.Module):
    """Position-wise feed-forward network: Linear, ReLU (or the config's activation), Linear (eq. 2); gated, the
    activation's output is multiplied by a second linear map of the input (Shazeer, 2020, "GLU Variants Improve
    Transformer"; T5 v1.1)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.linear_in = nn.Linear(config.d_model, config.d_ff)
        self.linear_gate = nn.Linear(config.d_model, config.d_ff) if config.gated_feed_forward else None
        self.linear_out = nn.Linear(config.d_ff, config.d_model)
        self.dropout = nn.Dropout(config.activation_dropout)
        self.activation = ACTIVATIONS[config.activation]

    def forward(self, x: Tensor) -> Tensor:
        hidden = self.activation(self.linear_in(x))
        if self.linear_gate is not None:
            hidden = hidden * self.linear_gate(x)
        return self.linear_out(self.dropout(hidden))


class Residual(nn.Module):
    """Dropout, a residual connection and LayerNorm (or RMSNorm) around a sub-layer (post-LN or pre-LN)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.norm = config.new_norm()
        self.dropout = nn.Dropout(config.dropout)
        self.pre_norm = config.norm == "pre"

    def sublayer_input(self, x: Tensor) -> Tensor:
        """What the sub-layer reads: the stream itself (post-LN) or its normalisation (pre-LN)."""
        return self.norm(x) if self.pre_norm else x

    def forward(self, x: Tensor, sublayer_output: Tensor) -> Tensor:
        """The stream after the sub-layer: x + output, normalised after the sum in post-LN."""
        x = x + self.dropout(sublayer_output)
        return x if self.pre_norm else self.norm(x)


@dataclass
class LayerVectors:
    """What one layer recorded for value-aware measures: per attention sublayer, each key's vector after each
    head's value and output projections (B, H, keys, d_model), and the residual stream around its sublayers
    (B, points, T, d_model)."""

    values: list[Tensor]
    stream: Tensor


class EncoderLayer(nn.Module):
    """Self-attention then feed-forward."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.self_attention = new_attention(config)
        self.feed_forward = FeedForward(config)
        self.attention_block = Residual(config)
        self.feed_forward_block = Residual(config)

    def forward(self, x: Tensor, src_mask: Tensor, fused: bool, gate: Tensor | None = None,
                need_vectors: bool = False, position_bias: Tensor | None = None
                ) -> tuple[Tensor, Tensor | None, LayerVectors | None]:
        """-> the layer's output, its self-attention weights (None if fused), its `LayerVectors` if asked."""
        h = self.attention_block.sublayer_input(x)
        keys, values = self.self_attention.project_keys_values(h)
        out, weights = self.self_attention(h, keys, values, src_mask, fused, gate, position_bias)
        attended = self.attention_block(x, out)
        y = self.feed_forward_block(attended, self.feed_forward(self.feed_forward_block.sublayer_input(attended)))
        if not need_vectors:
            return y, weights, None
        return y, weights, LayerVectors([self.self_attention.head_vectors(values)], torch.stack([x, attended, y], 1))


class DecoderLayer(nn.Module):
    """Masked self-attention, attention over the encoder output (cross-attention), then feed-forward."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.self_attention = new_attention(config)
        self.cross_attention = new_attention(config)
        self.feed_forward = FeedForward(config)
        self.self_attention_block = Residual(config)
        self.cross_attention_block = Residual(config)
        self.feed_forward_block = Residual(config)

    def forward(self, x: Tensor, memory: Tensor, tgt_mask: Tensor | None, src_mask: Tensor,
                cache: LayerCache | None, fused: bool, self_gate: Tensor | None = None,
                cross_gate: Tensor | None = None, need_vectors: bool = False, position_bias: Tensor | None = None,
                queries: Tensor | None = None) -> tuple[Tensor, Tensor | None, Tensor | None, LayerVectors | None]:
        """-> output, self- and cross-attention weights, `LayerVectors` if asked.

        With a `cache`, `x` holds only the new positions: their keys and values are appended to the cache,
        and the cross-attention keys and values are computed from `memory` once per sentence. `queries` (B,): the
        one position of each sequence whose output is wanted (B, 1, d_model), reading every position's keys.
        """
        h = self.self_attention_block.sublayer_input(x)
        keys, values = self.self_attention.project_keys_values(h)
        if cache is not None:
            if cache.self_keys is not None:
                keys = torch.cat([cache.self_keys, keys], dim=2)  # (B, H, t, d_head)
                values = torch.cat([cache.self_values, values], dim=2)
            cache.self_keys, cache.self_values = keys, values
        if queries is not None:
            rows = torch.arange(x.size(0), device=x.device)
            tgt_mask = tgt_mask.expand(x.size(0), -1, -1, -1)[rows, :, queries][:, :, None]  # (B, 1, 1, T)
            x, h = x[rows, queries][:, None], h[rows, queries][:, None]
            if position_bias is not None:  # (1, H, T, T) -> (B, H, 1, T)
                position_bias = position_bias[0][:, queries].transpose(0, 1)[:, :, None]
        out, self_weights = self.self_attention(h, keys, values, tgt_mask, fused, self_gate, position_bias)
        attended = self.self_attention_block(x, out)

        if cache is not None and cache.cross_keys is not None:
            cross_keys, cross_values = cache.cross_keys, cache.cross_values
        else:
            cross_keys, cross_values = self.cross_attention.project_keys_values(memory)
            if cache is not None:
                cache.cross_keys, cache.cross_values = cross_keys, cross_values
        h = self.cross_attention_block.sublayer_input(attended)
        out, cross_weights = self.cross_attention(h, cross_keys, cross_values, src_mask, fused, cross_gate)
        informed = self.cross_attention_block(attended, out)

        y = self.feed_forward_block(informed, self.feed_forward(self.feed_forward_block.sublayer_input(informed)))
        if not need_vectors:
            return y, self_weights, cross_weights, None
        head_values = [self.self_attention.head_vectors(values), self.cross_attention.head_vectors(cross_values)]
        vectors = LayerVectors(head_values, torch.stack([x, attended, informed, y], 1))
        return y, self_weights, cross_weights, vectors


class Embedding(nn.Module):
    """Token embedding scaled by sqrt(d_model), plus sinusoidal or learned positions (none where positions are
    relative), (a LayerNorm if the config asks,) then dropout."""

    def __init__(self, vocab_size: int, config: ModelConfig):
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, config.d_model, padding_idx=config.pad_id)
        self.scale = math.sqrt(config.d_model) if config.scale_embeddings else 1.0
        self.dropout = nn.Dropout(config.dropout)
        self.norm = config.new_norm() if config.embedding_norm else None
        self.positions = nn.Embedding(config.max_len, config.d_model) if config.positional == "learned" else None
        table = POSITIONALS[config.positional]
        with torch.device("cpu"):  # computed, never stored: made even when the model is built on the meta device
            self.register_buffer("sinusoid", table(config.max_len, config.d_model) if table else None,
                                 persistent=False)

    def position_table(self) -> Tensor | None:
        """The vector added at each position, (max_len, d_model); None where positions are relative."""
        table = self.positions.weight if self.positions is not None else self.sinusoid
        return None if table is None else table.detach()

    def forward(self, ids: Tensor, offset: int = 0, tokens: Tensor | None = None) -> Tensor:
        """Embed ids (B, T) whose first position is `offset` (non-zero in cached decoding); `tokens` (B, T, d):
        the token vectors to use instead of the table's rows (gradient attributions)."""
        x = (self.tokens(ids) if tokens is None else tokens) * self.scale
        if self.positions is not None or self.sinusoid is not None:
            positions = torch.arange(offset, offset + ids.size(1), device=ids.device)
            x = x + (self.positions(positions) if self.positions is not None else self.sinusoid[positions])
        return self.dropout(x if self.norm is None else self.norm(x))


def padding_mask(ids: Tensor, pad_id: int) -> Tensor:
    """(B, 1, 1, S) mask, True at real tokens: every query may attend to every non-pad key."""
    return (ids != pad_id)[:, None, None, :]


class Transformer(nn.Module):
    """Encoder-decoder Transformer whose forward pass can return every attention map."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.src_embedding = Embedding(config.src_vocab_size, config)
        self.tgt_embedding = Embedding(config.tgt_vocab_size, config)
        self.encoder_layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.n_encoder_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.n_decoder_layers))
        # Pre-LN leaves the residual stream un-normalised, so each stack ends with a LayerNorm.
        pre = config.norm == "pre"
        self.encoder_norm = config.new_norm() if pre else nn.Identity()
        self.decoder_norm = config.new_norm() if pre else nn.Identity()
        relative = config.positional == "relative"
        self.encoder_position_bias = RelativePositionBias(config, bidirectional=True) if relative else None
        self.decoder_position_bias = RelativePositionBias(config, bidirectional=False) if relative else None
        self.generator = nn.Linear(config.d_model, config.tgt_vocab_size)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        if config.share_embeddings:
            self.src_embedding.tokens = self.tgt_embedding.tokens
        if config.tie_embeddings:
            self.generator.weight = self.tgt_embedding.tokens.weight

    def heads(self) -> dict[str, tuple[int, int]]:
        """(layers, heads) of each attention kind."""
        c = self.config
        return {ENCODER: (c.n_encoder_layers, c.n_heads), DECODER: (c.n_decoder_layers, c.n_heads),
                CROSS: (c.n_decoder_layers, c.n_heads)}

    def encode(self, src: Tensor, need_weights: bool = False, fused: bool = False, gates: HeadGates | None = None,
               need_vectors: bool = False, embedded: Tensor | None = None, start: tuple[int, Tensor] | None = None
               ) -> tuple[Tensor, Tensor, Attention | None]:
        """src (B, S) -> memory (B, S, d_model), src_mask (B, 1, 1, S) and, if asked, encoder `Attention`;
        `embedded` (B, S, d_model): token vectors to read instead of the table's. `start` (layer, stream (B, S,
        d_model)): continue from that layer with the stream entering it (patching reuses the layers below, which
        give what they gave the sentence); its `Attention` then holds the layers from there."""
        need_weights = need_weights or need_vectors
        src_mask = padding_mask(src, self.config.pad_id)
        position_bias = None
        if self.encoder_position_bias is not None:
            positions = torch.arange(src.size(1), device=src.device)
            position_bias = self.encoder_position_bias(positions, positions)[None]  # (1, H, S, S)
        maps, recorded = [], []
        if start is None:
            first, x = 0, self.src_embedding(src, tokens=embedded)
            x = x if gates is None else gates.stream(0, x)
        else:
            first, x = start
        for i, layer in enumerate(self.encoder_layers[first:], start=first):
            x, weights, vectors = layer(x, src_mask, fused and not need_weights,
                                        gates and gates.layer(ENCODER, i), need_vectors, position_bias)
            x = x if gates is None else gates.stream(i + 1, x)
            maps.append(weights)
            recorded.append(vectors)
        memory = self.encoder_norm(x)
        if not need_weights:
            return memory, src_mask, None
        attention = Attention(encoder=torch.stack(maps))
        if need_vectors:
            attention.encoder_values = torch.stack([v.values[0] for v in recorded])  # (L, B, H, S, d_model)
            attention.encoder_stream = torch.stack([v.stream for v in recorded])  # (L, B, 3, S, d_model)
        return memory, src_mask, attention

    def decode(self, tgt: Tensor, memory: Tensor, src_mask: Tensor, cache: list[LayerCache] | None = None,
               need_weights: bool = False, fused: bool = False, gates: HeadGates | None = None,
               need_vectors: bool = False, embedded: Tensor | None = None, positions: Tensor | None = None,
               start: tuple[int, Tensor] | None = None, states: bool = False) -> tuple[Tensor, Attention | None]:
        """Target ids (B, T) -> logits (B, T, V) and, if asked, decoder self- and cross-`Attention`.

        With `cache`, `tgt` holds only the new positions, which follow those already in the cache. `embedded`
        (B, T, d_model): token vectors to read instead of the table's. `positions` (B,): only the position of each
        sequence whose logits are wanted, (B, 1, V) then (gradient attributions: an output layer of 256k tokens at
        every position costs T times one). `start` (layer, stream (B, T, d_model)): continue from that layer with
        the stream entering it, as `encode`'s (without a cache). `states`: the normed last layer's output, which
        `generator` reads, in place of the logits.
        """
        need_weights = need_weights or need_vectors
        offset = 0 if cache is None or cache[0].self_keys is None else cache[0].self_keys.size(2)
        length = tgt.size(1)
        # A new position may attend to every cached one and causally among the new ones.
        tgt_mask = torch.ones(length, offset + length, dtype=torch.bool, device=tgt.device).tril(offset)[None, None]
        if cache is None:
            tgt_mask = tgt_mask & padding_mask(tgt, self.config.pad_id)  # (B, 1, T, T)
        first, x = (0, self.tgt_embedding(tgt, offset, embedded)) if start is None else start
        position_bias = None
        if self.decoder_position_bias is not None:
            keys = torch.arange(offset + length, device=tgt.device)
            position_bias = self.decoder_position_bias(keys[offset:], keys)[None]  # (1, H, T, offset + T)
        self_maps, cross_maps, recorded = [], [], []
        last_only = positions is not None and offset == 0 and not need_weights  # the last layer at `positions` alone
        for i, layer in enumerate(self.decoder_layers[first:], start=first):
            x, self_weights, cross_weights, vectors = layer(
                x, memory, tgt_mask, src_mask, None if cache is None else cache[i], fused and not need_weights,
                gates and gates.layer(DECODER, i), gates and gates.layer(CROSS, i), need_vectors, position_bias,
                positions if last_only and i == len(self.decoder_layers) - 1 else None)
            self_maps.append(self_weights)
            cross_maps.append(cross_weights)
            recorded.append(vectors)
        if positions is not None and not last_only:
            x = x[torch.arange(x.size(0), device=x.device), positions][:, None]
        logits = self.decoder_norm(x) if states else self.generator(self.decoder_norm(x))
        if not need_weights:
            return logits, None
        attention = Attention(decoder=torch.stack(self_maps), cross=torch.stack(cross_maps))
        if need_vectors:
            attention.decoder_values = torch.stack([v.values[0] for v in recorded])  # (L, B, H, t, d_model)
            attention.cross_values = torch.stack([v.values[1] for v in recorded])  # (L, B, H, S, d_model)
            attention.decoder_stream = torch.stack([v.stream for v in recorded])  # (L, B, 4, T, d_model)
        return logits, attention

    def forward(self, src: Tensor, tgt: Tensor, need_weights: bool = False, fused: bool = False,
                gates: HeadGates | None = None, need_vectors: bool = False) -> tuple[Tensor, Attention | None]:
        """Teacher-forced pass: logits (B, T, V) for next-token prediction and, if asked, every attention map."""
        memory, src_mask, encoded = self.encode(src, need_weights, fused, gates, need_vectors)
        logits, decoded = self.decode(tgt, memory, src_mask, need_weights=need_weights, fused=fused, gates=gates,
                                      need_vectors=need_vectors)
        return logits, (decoded.with_encoder(encoded) if decoded is not None else None)

    def new_cache(self) -> list[LayerCache]:
        """An empty key/value cache, one entry per decoder layer."""
        return [LayerCache() for _ in self.decoder_layers]
