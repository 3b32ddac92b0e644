"""RNN encoder-decoder with attention ("Neural Machine Translation by Jointly Learning to Align and
Translate", Bahdanau et al., 2015; the attentional decoder of "Effective Approaches to Attention-based
Neural Machine Translation", Luong et al., 2015).

A bidirectional GRU reads the source; a GRU decoder attends over the encoder states at every step, with one of
three attentions (`RNNConfig.attention`), all the `MultiHeadAttention` of `model.nets.transformer`:

- `dot`: Luong's dot score with no weights at all, as seed 001 section 3.1 writes it: score s·h/√hidden,
  weights softmax, output the weighted sum of h, which the decoder reads with s ([context; s] through `combine`);
- `split`: seed 001 section 3.2: s and every h cut into `n_heads` pieces, the same dot product per piece
  (scaled by √(hidden / heads)), no projections; the pieces' outputs are concatenated with s and go through one
  linear map, `combine` (the seed declares that `fc` Linear(hidden, hidden) but feeds it 2·hidden features: read
  as Linear(2·hidden, hidden)). One head is `dot`;
- `general`: learned W_Q, W_K, W_V per head and W_O (seed section 4.2, Vaswani et al.); with one head its score
  (W_q s + b)·(W_k h + b)/√hidden is Luong's "general" score.

It is a `Seq2Seq` (model/nets/seq2seq.py) like the Transformer, so decoding, traces, checkpoints and the app serve it
unchanged; it has one layer of cross-attention (whose heads can be gated) and no self-attention.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass

import torch
from torch import Tensor, nn

from attention_inspector.model.nets.seq2seq import CROSS, Attention, HeadGates
from attention_inspector.model.nets.transformer import MultiHeadAttention, padding_mask

# What the decoder's attention computes (see the module's docstring): no weights, heads without weights, or learned
# projections.
ATTENTIONS = ("dot", "split", "general")


@dataclass(frozen=True)
class RNNConfig:
    """Hyper-parameters that rebuild an `RNNSeq2Seq`; saved as config.json beside the weights."""

    src_vocab_size: int
    tgt_vocab_size: int
    embedding_dim: int = 256
    hidden_size: int = 512
    n_heads: int = 1
    dropout: float = 0.3
    max_len: int = 128
    pad_id: int = 0
    architecture: str = "rnn"
    attention: str = "general"  # one of ATTENTIONS (checkpoints saved before the choice existed: "general")

    def __post_init__(self):
        if self.hidden_size % self.n_heads:
            raise ValueError(f"hidden_size ({self.hidden_size}) must be divisible by n_heads ({self.n_heads})")
        if self.attention not in ATTENTIONS:
            raise ValueError(f"attention must be one of {', '.join(map(repr, ATTENTIONS))}, not {self.attention!r}")
        if self.attention == "dot" and self.n_heads != 1:
            raise ValueError("dot attention has one head; split attention cuts the states into several")

    def to_dict(self) -> dict:
        """The config as a JSON-ready dict."""
        return asdict(self)


@dataclass
class RNNCache:
    """The decoder's state between steps, and the attention keys/values computed once per sentence."""

    hidden: Tensor | None = None  # (B, 2 * hidden_size): the GRU state and the last attentional output
    cross_keys: Tensor | None = None  # (B, H, S, d_head)
    cross_values: Tensor | None = None

    def select(self, index: Tensor, memory: bool = True) -> RNNCache:
        """The state of the batch rows `index` (beam search reorders hypotheses with it); `memory=False` keeps the
        cross-attention keys and values as they are (rows of the same sentence hold the same)."""
        cross = (self.cross_keys, self.cross_values)
        return RNNCache(*(None if t is None else t.index_select(0, index)
                          for t in (self.hidden, *(cross if memory else ()))), *(() if memory else cross))


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
        self.cross_attention = MultiHeadAttention(hidden, config.n_heads, dropout=0.0,
                                                  projections=config.attention == "general")
        self.combine = nn.Linear(2 * hidden, hidden)
        self.generator = nn.Linear(hidden, config.tgt_vocab_size)

    def heads(self) -> dict[str, tuple[int, int]]:
        """One layer of cross-attention heads; no self-attention."""
        return {CROSS: (1, self.config.n_heads)}

    def encode(self, src: Tensor, need_weights: bool = False, fused: bool = False, gates: HeadGates | None = None,
               need_vectors: bool = False, embedded: Tensor | None = None) -> tuple[Tensor, Tensor, None]:
        """src (B, S) -> memory (B, S, hidden), src_mask (B, 1, 1, S), and no encoder attention; `embedded`
        (B, S, embedding_dim): token vectors to read instead of the table's."""
        src_mask = padding_mask(src, self.config.pad_id)
        lengths = (src != self.config.pad_id).sum(1).clamp(min=1).cpu()
        embedded = self.dropout(self.src_embedding(src) if embedded is None else embedded)
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
               need_weights: bool = False, fused: bool = False, gates: HeadGates | None = None,
               need_vectors: bool = False, teacher_forcing: float = 1.0, embedded: Tensor | None = None,
               positions: Tensor | None = None, states: bool = False) -> tuple[Tensor, Attention | None]:
        """Target ids (B, T) -> logits (B, T, V) and, if asked, the cross-`Attention` (1, B, H, T, S).

        With `cache`, decoding continues from the cached state. With `teacher_forcing` < 1 each step after the
        first reads the gold token with that probability, else the model's own best guess. `embedded`
        (B, T, embedding_dim): the gold tokens' vectors to read instead of the table's (teacher forcing only).
        `positions` (B,): only the position of each sequence whose logits are wanted, (B, 1, V) then. `states`:
        the vectors `generator` reads in place of the logits (teacher forcing only: a guess reads the logits).
        """
        if states and teacher_forcing < 1.0:
            raise ValueError("states are for teacher forcing: a step that reads its own guess needs the logits")
        need_weights = need_weights or need_vectors
        state = cache[0] if cache is not None else RNNCache()
        if state.hidden is None:
            hidden = self.initial_hidden(memory, src_mask)
            feed = memory.new_zeros(memory.size(0), self.config.hidden_size)
        else:
            hidden, feed = state.hidden.split(self.config.hidden_size, dim=-1)
        if state.cross_keys is None:
            state.cross_keys, state.cross_values = self.cross_attention.project_keys_values(memory)
        gate = None if gates is None else gates.layer(CROSS, 0)
        logits, maps = [], []
        token = tgt[:, 0]
        for t in range(tgt.size(1)):
            if t > 0:
                use_gold = teacher_forcing >= 1.0 or random.random() < teacher_forcing
                token = tgt[:, t] if use_gold else logits[-1].argmax(-1)
            vector = self.tgt_embedding(token) if embedded is None else embedded[:, t]
            step_input = torch.cat([self.dropout(vector), feed], dim=-1)
            hidden = self.decoder(step_input, hidden)
            context, weights = self.cross_attention(hidden[:, None], state.cross_keys, state.cross_values, src_mask,
                                                    fused and not need_weights, gate)
            feed = torch.tanh(self.combine(torch.cat([hidden, context[:, 0]], dim=-1)))  # (B, hidden)
            logits.append(self.dropout(feed) if states else self.generator(self.dropout(feed)))
            maps.append(weights)
        state.hidden = torch.cat([hidden, feed], dim=-1)
        logits = torch.stack(logits, dim=1)
        if positions is not None:
            logits = logits[torch.arange(logits.size(0), device=logits.device), positions][:, None]
        if not need_weights:
            return logits, None
        attention = Attention(cross=torch.cat(maps, dim=2)[None])  # (1, B, H, T, S)
        if need_vectors:
            attention.cross_values = self.cross_attention.head_vectors(state.cross_values)[None]  # (1, B, H, S, hidden)
        return logits, attention

    def forward(self, src: Tensor, tgt: Tensor, need_weights: bool = False, fused: bool = False,
                gates: HeadGates | None = None, need_vectors: bool = False,
                teacher_forcing: float = 1.0) -> tuple[Tensor, Attention | None]:
        """Logits (B, T, V) for next-token prediction and, if asked, the cross-attention maps."""
        memory, src_mask, _ = self.encode(src)
        return self.decode(tgt, memory, src_mask, need_weights=need_weights, fused=fused, gates=gates,
                           need_vectors=need_vectors, teacher_forcing=teacher_forcing)

    def new_cache(self) -> list[RNNCache]:
        """An empty decoder state."""
        return [RNNCache()]
