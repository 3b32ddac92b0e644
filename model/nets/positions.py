"""How positions enter a Transformer: fixed sinusoid tables added to the embeddings (the paper's, Marian's layout,
fairseq's), or, for T5, the buckets of relative distance that a learned bias per head reads."""

from __future__ import annotations

import math

import torch
from torch import Tensor


def sinusoidal_positions(max_len: int, d_model: int) -> Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...): a (max_len, d_model) table."""
    position = torch.arange(max_len).unsqueeze(1)
    frequency = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
    table = torch.zeros(max_len, d_model)
    table[:, 0::2] = torch.sin(position * frequency)
    table[:, 1::2] = torch.cos(position * frequency)
    return table


def sinusoidal_halves(max_len: int, d_model: int) -> Tensor:
    """The paper's frequencies with every sine first, then every cosine (Marian's layout)."""
    interleaved = sinusoidal_positions(max_len, d_model)
    return torch.cat([interleaved[:, 0::2], interleaved[:, 1::2]], dim=1)


def fairseq_positions(max_len: int, d_model: int) -> Tensor:
    """fairseq's sinusoid (M2M100, NLLB): frequencies exp(-i ln(10^4) / (d/2 - 1)), sines then cosines, token t
    reading row t + 2 (rows 0 and 1 belong to padding); the table here starts at that row."""
    half = d_model // 2
    frequency = torch.exp(torch.arange(half) * -(math.log(10000.0) / (half - 1)))
    angle = torch.arange(2, max_len + 2).unsqueeze(1) * frequency
    table = torch.cat([torch.sin(angle), torch.cos(angle)], dim=1)
    return torch.cat([table, torch.zeros(max_len, d_model - 2 * half)], dim=1)


# How positions enter: a fixed table added to the embedding (the paper's, Marian's or fairseq's sinusoid), learned
# rows added to it, or nothing added and a learned bias per head and relative distance in self-attention (T5).
POSITIONALS = {"sinusoidal": sinusoidal_positions, "sinusoidal_halves": sinusoidal_halves,
               "fairseq": fairseq_positions, "learned": None, "relative": None}


def relative_buckets(distance: Tensor, bidirectional: bool, buckets: int, max_distance: int) -> Tensor:
    """T5's bucket of each distance key - query (Raffel et al., 2020, after Mesh TensorFlow): bidirectional, half
    the buckets for keys after the query; of each half, the first half holds distances one by one, the rest grow
    logarithmically up to `max_distance`, past which all share the last. One-way (a decoder), keys after the query
    count as distance 0."""
    bucket = torch.zeros_like(distance)
    if bidirectional:
        buckets //= 2
        bucket = (distance > 0).long() * buckets
        distance = distance.abs()
    else:
        distance = (-distance).clamp(min=0)
    exact = buckets // 2
    far = exact + (torch.log(distance.float().clamp(min=1) / exact) / math.log(max_distance / exact)
                   * (buckets - exact)).long()
    return bucket + torch.where(distance < exact, distance, far.clamp(max=buckets - 1))
