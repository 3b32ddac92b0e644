"""What every translation network here offers (`Seq2Seq`), what it returns (`Attention`) and the interventions
it accepts (`HeadGates`).

Interventions are arguments of `encode` / `decode` / `forward`, never state on a module: one loaded model
serves many users at once. A head gate ξ_h multiplies head h's output before the output projection W_O
(Michel et al., 2019, "Are Sixteen Heads Really Better than One?"): 0 switches the head off, and ξ = 1
everywhere computes exactly what no gates compute.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Protocol

import torch
from torch import Tensor

# (re-exported: the model code's names)
from attention_inspector.model.keys import CROSS, DECODER, ENCODER, KINDS, head_name  # noqa: F401


@dataclass
class Attention:
    """Every attention map of one pass, stacked over layers (None where a model has no such map or none was asked).

    encoder (L_enc, B, H, S, S); decoder (L_dec, B, H, T, t); cross (L_dec, B, H, T, S), where a cached decode
    step has T new positions and t positions in all.

    With `need_vectors`, also what value-aware measures need (Kobayashi et al., 2020; Ferrando et al., 2022):
    - `*_values` (L, B, H, keys, d_model): each key's vector after head h's value and output projections,
      W_O's bias excluded, so head h adds Σ_j weights[..., i, j] · values[..., j, :] to query i;
    - `*_stream` (L, B, points, positions, d_model): the residual stream entering each layer and after each
      of its sublayers (encoder: 3 points, entering / after self-attention / after feed-forward; decoder: 4,
      with cross-attention third). A network without a residual stream (the GRU) leaves them None.
    """

    encoder: Tensor | None = None
    decoder: Tensor | None = None
    cross: Tensor | None = None
    encoder_values: Tensor | None = None
    decoder_values: Tensor | None = None
    cross_values: Tensor | None = None
    encoder_stream: Tensor | None = None
    decoder_stream: Tensor | None = None

    def with_encoder(self, encoded: Attention | None) -> Attention:
        """This decoder-side record completed with the encoder side of `encoded`."""
        if encoded is None:
            return self
        return replace(self, encoder=encoded.encoder, encoder_values=encoded.encoder_values,
                       encoder_stream=encoded.encoder_stream)


@dataclass(frozen=True)
class HeadGates:
    """A gate per head and attention kind: (L, H), or (L, B, H) for a gate per batch row; None leaves a kind open."""

    encoder: Tensor | None = None
    decoder: Tensor | None = None
    cross: Tensor | None = None

    def layer(self, kind: str, index: int) -> Tensor | None:
        """The gates of one layer of `kind`: (H,) or (B, H), or None."""
        gates = getattr(self, kind)
        return None if gates is None else gates[index]

    def stream(self, index: int, x: Tensor) -> Tensor:
        """The encoder's residual stream (B, S, d) after its `index`-th layer (0: the embeddings), as the next layer
        reads it: gates leave it as it is (model/explain/patching.py's hooks replace positions of it)."""
        return x


class Cache(Protocol):
    """One decoder layer's state between steps."""

    def select(self, index: Tensor, memory: bool = True) -> Cache:
        """The state of the batch rows `index` (beam search reorders hypotheses with it); `memory=False` keeps
        what was computed from the encoder's memory as it is (rows of the same sentence hold the same)."""


class Seq2Seq(Protocol):
    """An encoder-decoder that decoding, traces, checkpoints and the app can use: the Transformer or the GRU model."""

    config: object  # a frozen dataclass with at least max_len and pad_id
    generator: torch.nn.Linear  # the output layer: the decoder's states -> logits

    def heads(self) -> dict[str, tuple[int, int]]:
        """(layers, heads) of each attention kind the network has."""

    def encode(self, src: Tensor, need_weights: bool = False, fused: bool = False, gates: HeadGates | None = None,
               need_vectors: bool = False, embedded: Tensor | None = None) -> tuple[Tensor, Tensor, Attention | None]:
        """src (B, S) -> memory (B, S, d), src_mask (B, 1, 1, S) and, if asked, the encoder side of `Attention`;
        `embedded`: the source tokens' vectors to read instead of the token table's (gradient attributions)."""

    def decode(self, tgt: Tensor, memory: Tensor, src_mask: Tensor, cache: list[Cache] | None = None,
               need_weights: bool = False, fused: bool = False, gates: HeadGates | None = None,
               need_vectors: bool = False, embedded: Tensor | None = None, positions: Tensor | None = None,
               states: bool = False) -> tuple[Tensor, Attention | None]:
        """Target ids (B, T) -> logits (B, T, V) and, if asked, the decoder side of `Attention`.

        With `cache`, `tgt` holds only the new positions, and the cache is extended with them. `embedded`: the
        target tokens' vectors to read instead of the token table's. `positions` (B,): only the position of each
        sequence whose logits are wanted, (B, 1, V) then. `states`: the vectors the output layer `generator` reads
        in place of the logits, (B, T, d) (teacher-forced only).
        """

    def new_cache(self) -> list[Cache]:
        """An empty decoder state."""

    def __call__(self, src: Tensor, tgt: Tensor, need_weights: bool = False, fused: bool = False,
                 gates: HeadGates | None = None, need_vectors: bool = False) -> tuple[Tensor, Attention | None]:
        """Teacher-forced pass: logits (B, T, V) and, if asked, every attention map."""

    def parameters(self) -> Iterable[torch.nn.Parameter]: ...


def device_of(model: Seq2Seq) -> torch.device:
    """Where the model's weights are, so where every tensor it reads must be made (a command's `--device`)."""
    return next(iter(model.parameters())).device


def every_head(model: Seq2Seq) -> list[tuple[str, int, int]]:
    """Every head of the model as (kind, 0-based layer, 0-based head), in kind, layer, head order."""
    return [(kind, layer, head) for kind, (layers, count) in model.heads().items()
            for layer in range(layers) for head in range(count)]


def head_gates(model: Seq2Seq, names: Iterable[str]) -> HeadGates | None:
    """Gates that switch off the heads named `kind.layer.head` (1-based); None for no names.

    Raises ValueError naming the first name that is not a head of this model.
    """
    shapes = model.heads()
    gates: dict[str, Tensor] = {}
    for name in names:
        kind, layer, head = _parse_head(name, shapes)
        if kind not in gates:
            gates[kind] = torch.ones(shapes[kind], device=device_of(model))
        gates[kind][layer, head] = 0.0
    return HeadGates(**gates) if gates else None


def copies_gated(model: Seq2Seq, gate_sets: list[HeadGates | None], rows: int) -> HeadGates | None:
    """Gates (L, copies × rows, H) of a batch of `rows` rows repeated once per gates of `gate_sets`, copy c's rows
    (c·rows to (c + 1)·rows) gated by `gate_sets[c]` (None: every head on); None where none switches a head off."""
    shapes, device = model.heads(), device_of(model)
    stacked = {}
    for kind, shape in shapes.items():
        kind_gates = [None if gates is None else getattr(gates, kind) for gates in gate_sets]
        if any(gate is not None for gate in kind_gates):
            ones = torch.ones(shape, device=device)
            stacked[kind] = torch.cat([(ones if gate is None else gate)[:, None].expand(-1, rows, -1)
                                       for gate in kind_gates], dim=1)
    return HeadGates(**stacked) if stacked else None


def _parse_head(name: str, shapes: dict[str, tuple[int, int]]) -> tuple[str, int, int]:
    """"cross.2.5" -> ("cross", 1, 4), checked against the model's (layers, heads) per kind."""
    known = "; ".join(f"{kind}.1-{layers}.1-{heads}" for kind, (layers, heads) in shapes.items())
    parts = name.split(".") if isinstance(name, str) else []
    if len(parts) != 3 or not all(p.isdigit() for p in parts[1:]):
        raise ValueError(f"{name!r} is not a head name: write kind.layer.head, e.g. "
                         f"{head_name(next(iter(shapes)), 0, 0)!r} (this model has {known})")
    kind, layer, head = parts[0], int(parts[1]), int(parts[2])
    if kind not in shapes:
        raise ValueError(f"head {name!r}: this model has no {kind!r} attention (it has {known})")
    layers, heads = shapes[kind]
    if not (1 <= layer <= layers and 1 <= head <= heads):
        raise ValueError(f"head {name!r} does not exist: {kind} attention has layers 1-{layers} "
                         f"and heads 1-{heads}")
    return kind, layer - 1, head - 1
