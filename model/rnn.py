"""RNN encoder-decoder with attention ("Neural Machine Translation by Jointly Learning to Align and
Translate", Bahdanau et al., 2015; the attentional decoder of "Effective Approaches to Attention-based
Neural Machine Translation", Luong et al., 2015).

A bidirectional GRU reads the source; a GRU decoder attends over the encoder states at every step,
with scaled dot-product attention (one head) or multi-head attention (`n_heads` > 1), both the
`MultiHeadAttention` of `model.transformer`. It has the same `encode` / `decode` / `new_cache`
interface as the Transformer, so decoding, traces, checkpoints and the app serve it unchanged; it has
one layer of cross-attention and no self-attention.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass

import torch
from torch import Tensor, nn

from model.transformer import Attention, MultiHeadAttention, padding_mask


@dataclass(frozen=True)
class RNNConfig:
    """Hyper-parameters that rebuild an `RNNSeq2Seq`; saved as config.json beside the weights."""

    src_vocab_size: int
    tgt_vocab_size: int
    embedding_dim: int = 256
    hidden_size: int = 512
    n_heads: int = 1  # 1: scaled dot-product attention; more: multi-head attention
    dropout: float = 0.3
    max_len: int = 128
    pad_id: int = 0
    architecture: str = "rnn"

    def __post_init__(self):
        if self.hidden_size % self.n_heads:
            raise ValueError(f"hidden_size ({self.hidden_size}) must be divisible by n_heads ({self.n_heads})")

    def to_dict(self) -> dict:
        """The config as a JSON-ready dict."""
        return asdict(self)


@dataclass
class RNNCache:
    """The decoder's hidden state between steps (the RNN's whole 'cache')."""

    hidden: Tensor | None = None  # (B, 2 * hidden_size): the GRU state and the last attentional output

    def select(self, index: Tensor) -> RNNCache:
        """The state of the batch rows `index` (beam search reorders hypotheses with it)."""
        return RNNCache(None if self.hidden is None else self.hidden.index_select(0, index))


class RNNSeq2Seq(nn.Module):
    """Bidirectional GRU encoder, GRU decoder with (multi-head) attention over the encoder states."""

    def __init__(self, config: RNNConfig):
        super().__init__()
        self.config = config
        hidden = config.hidden_size
        self.src_embedding = nn.Embedding(config.src_vocab_size, config.embedding_dim, padding_idx=config.pad_id)
        self.tgt_embedding = nn.Embedding(config.tgt_vocab_size, config.embedding_dim, padding_idx=config.pad_id)
        self.dropout = nn.Dropout(config.dropout)
        self.encoder = nn.GRU(config.embedding_dim, hidden // 2, batch_first=True, bidirectional=True)
        self.bridge = nn.Linear(hidden, hidden)  # mean encoder state -> first decoder state
        # The decoder reads the previous token and the previous attentional output (input feeding).
        self.decoder = nn.GRUCell(config.embedding_dim + hidden, hidden)
        self.cross_attention = MultiHeadAttention(hidden, config.n_heads, dropout=0.0)
        self.combine = nn.Linear(2 * hidden, hidden)
        self.generator = nn.Linear(hidden, config.tgt_vocab_size)

    def encode(self, src: Tensor, need_weights: bool = False,
               fused: bool = False) -> tuple[Tensor, Tensor, None]:
        """src (B, S) -> memory (B, S, hidden), src_mask (B, 1, 1, S), and no encoder attention."""
        src_mask = padding_mask(src, self.config.pad_id)
        lengths = (src != self.config.pad_id).sum(1).clamp(min=1).cpu()
        embedded = self.dropout(self.src_embedding(src))
        packed = nn.utils.rnn.pack_padded_sequence(embedded, lengths, batch_first=True, enforce_sorted=False)
        memory, _ = self.encoder(packed)
        memory, _ = nn.utils.rnn.pad_packed_sequence(memory, batch_first=True, total_length=src.size(1))
        return memory, src_mask, None

    def initial_hidden(self, memory: Tensor, src_mask: Tensor) -> Tensor:
        """tanh(W * mean of the real encoder states): (B, hidden)."""
        real = src_mask[:, 0, 0, :, None].float()  # (B, S, 1)
        mean = (memory * real).sum(1) / real.sum(1).clamp(min=1)
        return torch.tanh(self.bridge(mean))

    def decode(self, tgt: Tensor, memory: Tensor, src_mask: Tensor, cache: list[RNNCache] | None = None,
               need_weights: bool = False, fused: bool = False,
               teacher_forcing: float = 1.0) -> tuple[Tensor, None, Tensor | None]:
        """Target ids (B, T) -> logits (B, T, V), no self-attention, cross-attention (1, B, H, T, S).

        With `cache`, decoding continues from the cached hidden state. With `teacher_forcing` < 1 each
        step after the first reads the gold token with that probability, else the model's own best guess.
        """
        state = cache[0].hidden if cache is not None and cache[0].hidden is not None else None
        if state is None:
            state = self.initial_hidden(memory, src_mask)
            feed = memory.new_zeros(memory.size(0), self.config.hidden_size)
        else:
            state, feed = state.split(self.config.hidden_size, dim=-1)
        keys, values = self.cross_attention.project_keys_values(memory)
        logits, maps = [], []
        token = tgt[:, 0]
        for t in range(tgt.size(1)):
            if t > 0:
                use_gold = teacher_forcing >= 1.0 or random.random() < teacher_forcing
                token = tgt[:, t] if use_gold else logits[-1].argmax(-1)
            step_input = torch.cat([self.dropout(self.tgt_embedding(token)), feed], dim=-1)
            state = self.decoder(step_input, state)
            context, weights = self.cross_attention(state[:, None], keys, values, src_mask, fused and not need_weights)
            feed = torch.tanh(self.combine(torch.cat([state, context[:, 0]], dim=-1)))  # (B, hidden)
            logits.append(self.generator(self.dropout(feed)))
            maps.append(weights)
        if cache is not None:
            cache[0].hidden = torch.cat([state, feed], dim=-1)
        cross = torch.cat(maps, dim=2)[None] if need_weights else None  # (1, B, H, T, S)
        return torch.stack(logits, dim=1), None, cross

    def forward(self, src: Tensor, tgt: Tensor, need_weights: bool = False, fused: bool = False,
                teacher_forcing: float = 1.0) -> tuple[Tensor, Attention | None]:
        """Logits (B, T, V) for next-token prediction and, if asked, the cross-attention maps."""
        memory, src_mask, _ = self.encode(src)
        logits, _, cross = self.decode(tgt, memory, src_mask, need_weights=need_weights, fused=fused,
                                       teacher_forcing=teacher_forcing)
        return logits, (Attention(None, None, cross) if need_weights else None)

    def new_cache(self) -> list[RNNCache]:
        """An empty decoder state."""
        return [RNNCache()]
