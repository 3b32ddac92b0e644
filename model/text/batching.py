"""Padded id tensors and token-bucketed batches, shared by training, evaluation and translation."""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from attention_inspector.model.text.vocab import EOS_ID, PAD_ID, SOS_ID


@dataclass
class Batch:
    """Padded id tensors of one batch: `tgt_in` starts with <sos>, `tgt_out` ends with <eos>."""

    src: torch.Tensor  # (B, S)
    tgt_in: torch.Tensor  # (B, T)
    tgt_out: torch.Tensor  # (B, T)

    @property
    def n_target_tokens(self) -> int:
        return int((self.tgt_out != PAD_ID).sum())

    def to(self, device: torch.device) -> Batch:
        return Batch(self.src.to(device), self.tgt_in.to(device), self.tgt_out.to(device))


def pad(sequences: list[list[int]], device: torch.device | str = "cpu") -> torch.Tensor:
    """Right-pad id lists with <pad> into a (B, max length) tensor on `device` (one copy there)."""
    longest = max(map(len, sequences))
    return torch.tensor([ids + [PAD_ID] * (longest - len(ids)) for ids in sequences], dtype=torch.long, device=device)


def make_batch(src_ids: list[list[int]], tgt_ids: list[list[int]]) -> Batch:
    """Add <sos>/<eos> around target ids and pad everything."""
    return Batch(pad(src_ids), pad([[SOS_ID] + t for t in tgt_ids]), pad([t + [EOS_ID] for t in tgt_ids]))


def token_batches(src_lengths: list[int], tgt_lengths: list[int], max_tokens: int,
                  seed: int | None = None) -> list[list[int]]:
    """Group example indices into batches of similar length, each at most `max_tokens` (padded, per side).

    With a `seed`, lengths are bucketed with random tie-breaking and the batch order is shuffled,
    deterministically for that seed; without one, the order is fixed (for evaluation).
    """
    rng = random.Random(seed)
    tie = [rng.random() for _ in src_lengths] if seed is not None else [0.0] * len(src_lengths)
    order = sorted(range(len(src_lengths)), key=lambda i: (tgt_lengths[i], src_lengths[i], tie[i]))
    batches, current, longest = [], [], 0
    for i in order:
        candidate = max(longest, src_lengths[i] + 1, tgt_lengths[i] + 1)
        if current and candidate * (len(current) + 1) > max_tokens:
            batches.append(current)
            current, candidate = [], max(src_lengths[i] + 1, tgt_lengths[i] + 1)
        current.append(i)
        longest = candidate
    if current:
        batches.append(current)
    if seed is not None:
        rng.shuffle(batches)
    return batches
