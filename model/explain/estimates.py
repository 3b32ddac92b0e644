"""Every head's effect estimated from gradients, all heads of every kind at once, in place of a pass per head.

Switching a head off: its gate ξ_h (model/nets/seq2seq.py) goes from 1 to 0, so the loss L (a batch's summed
teacher-forced negative log-likelihood) changes by

    ΔL_h ≈ −∂L/∂ξ_h                        (first order, one forward and one backward pass for every head)
    ΔL_h ≈ −∂L/∂ξ_h + ½ ∂²L/∂ξ_h²          (second order)

the Hessian's diagonal estimated with Hutchinson's method, E[v ⊙ Hv] over Rademacher vectors v, each Hessian-vector
product a second backward pass through the first. Michel et al. (2019) rank heads by |∂L/∂ξ_h| per batch, which
discards the sign; here the gradient is summed over the tokens with its sign, as attribution patching does (Nanda
2023; Syed et al. 2023; Kramár et al. 2024, "AtP*").

Patching a head's output from a counterfactual run (model/explain/patching.py): attribution patching, the effect on
the score estimated as (a′ − a) · ∂score/∂a at the original run, for every head of every kind and every cell of the
encoder stream's grid, from the two recorded runs and one backward pass (`patching_estimate`).

How close each estimate comes to the exact effect is measured by benchmarks/head_estimates.py
(docs/explanations.md, "Estimates of every head").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import Tensor

from attention_inspector.model.explain.ablation import row_losses
from attention_inspector.model.explain.patching import (HeadHooks, Patching, Run, patched_scores, recorded_runs, score,
                                                        skipped_kinds, step_prefix)
from attention_inspector.model.keys import head_name
from attention_inspector.model.nets.seq2seq import HeadGates, Seq2Seq, device_of
from attention_inspector.model.nets.transformer import Transformer
from attention_inspector.model.text.batching import Batch

TOP_PATCHED, PER_STAGE = 32, 8  # heads `staged_patching` patches exactly after its estimate, and per stage
ORDERS = ("first", "second")  # the orders of `GateSums.estimate`
PROBES = 2  # Hutchinson's Rademacher vectors per batch (second order; docs/explanations.md: 2 and 8 compared)


def summed_loss(model: Seq2Seq, batch: Batch, gates: HeadGates, fused: bool = True) -> Tensor:
    """The batch's summed negative log-likelihood of its reference tokens (padding left out), with `gates`: read
    through the output layer a chunk of the vocabulary at a time, as the exact changes are (`row_losses`; at
    NLLB-600M's sizes, the second-order estimate of 3 sentences took 15-18 s so against 20-21 s)."""
    memory, src_mask, _ = model.encode(batch.src, gates=gates, fused=fused)
    states, _ = model.decode(batch.tgt_in, memory, src_mask, gates=gates, fused=fused, states=True)
    return row_losses(states, model.generator, batch.tgt_out).sum()


def gate_derivatives(model: Seq2Seq, batch: Batch, order: str = "first", probes: int = PROBES,
                     generator: torch.Generator | None = None) -> tuple[dict[str, Tensor], dict[str, Tensor] | None]:
    """∂L/∂ξ at ξ = 1 per kind (L, H), and with `order="second"` the Hessian's diagonal ∂²L/∂ξ²: Hutchinson's
    estimate from `probes` Rademacher vectors v, or exact (unit vectors, a product per head) where the model has no
    more heads than `probes`; None at first order. Each Hessian-vector product Hv is a backward pass through the
    gradient's own (a difference of gradients, (∂L/∂ξ at 1 + εv − at 1) / ε, was tried: on en-de its rounding
    swamped H at every ε where its truncation did not, docs/explanations.md)."""
    shapes = model.heads()
    gates = {kind: torch.ones(shape, device=device_of(model), requires_grad=True) for kind, shape in shapes.items()}
    second = order == "second"
    # A second derivative needs the attention's own softmax (the fused kernel has no double backward).
    loss = summed_loss(model, batch, HeadGates(**gates), fused=not second)
    gradients = torch.autograd.grad(loss, list(gates.values()), create_graph=second)
    first = {kind: gradient.detach() for kind, gradient in zip(gates, gradients)}
    if not second:
        return first, None
    sizes = [gradient.numel() for gradient in gradients]
    heads = sum(sizes)
    # The probes are drawn on the CPU, where the seeded generator is, so that a seed draws the same ones on any device.
    if heads <= probes:  # e_i · H e_i for each head i: the diagonal itself
        flat = list(torch.eye(heads, device="cpu").unbind())
    else:
        flat = [torch.randint(0, 2, (heads,), generator=generator, device="cpu").float() * 2 - 1
                for _ in range(probes)]
    diagonal = {kind: torch.zeros_like(values) for kind, values in first.items()}
    for index, vector in enumerate(flat):
        vectors = [part.view(gradient.shape).to(gradient) for part, gradient in zip(vector.split(sizes), gradients)]
        products = torch.autograd.grad(gradients, list(gates.values()), grad_outputs=vectors,
                                       retain_graph=index < len(flat) - 1)
        for kind, part, product in zip(gates, vectors, products):
            diagonal[kind] += part * product  # v ⊙ Hv: H's diagonal, plus off-diagonal terms that average out
    weight = 1.0 if heads <= probes else 1.0 / probes
    return first, {kind: values * weight for kind, values in diagonal.items()}


@dataclass
class GateSums:
    """Sums over batches at gates ξ = 1, per kind (L, H): ∂L/∂ξ, |∂L/∂ξ| (Michel et al.'s importance before its
    per-layer norm) and, at second order, the Hessian's diagonal; and the batches' reference tokens."""

    gradient: dict[str, Tensor]
    absolute: dict[str, Tensor]
    diagonal: dict[str, Tensor] | None
    tokens: int

    def estimate(self) -> dict[str, float]:
        """Each head's estimated change in the summed log-likelihood when it alone is switched off, by name:
        −ΔL_h with ΔL_h ≈ −∂L/∂ξ_h (+ ½ ∂²L/∂ξ_h² at second order), ξ_h going from 1 to 0."""
        return named({kind: gradient - (0.0 if self.diagonal is None else 0.5 * self.diagonal[kind])
                      for kind, gradient in self.gradient.items()})


def named(grids: dict[str, Tensor | np.ndarray]) -> dict[str, float]:
    """Per kind (L, H) grids -> {kind.layer.head: value}."""
    return {head_name(kind, layer, head): float(grid[layer, head]) for kind, grid in grids.items()
            for layer, head in np.ndindex(tuple(grid.shape))}


def gate_sums(model: Seq2Seq, batches: list[Batch], order: str = "first", probes: int = PROBES, seed: int = 0,
              numbers: list[int] | None = None, advance: Callable[[int], None] = lambda done: None) -> GateSums:
    """The gates' derivatives summed over `batches` (`gate_derivatives`, first or second order: `order`), for
    `GateSums.estimate` and Michel et al.'s importance alike. Each batch's probes are drawn from `seed` and its
    number (`numbers`: the batches' places in the whole, default 0, 1, ...), so that processes sharing the batches
    draw what one process draws. `advance` told after each batch."""
    if order not in ORDERS:
        raise ValueError(f"order must be one of {', '.join(ORDERS)}, not {order!r}")
    if probes < 1:
        raise ValueError(f"probes must be at least 1, not {probes}")
    shapes, device = model.heads(), device_of(model)

    def zeros() -> dict[str, Tensor]:
        return {kind: torch.zeros(shape, device=device) for kind, shape in shapes.items()}
    sums = GateSums(zeros(), zeros(), zeros() if order == "second" else None, 0)
    for number, batch in zip(range(len(batches)) if numbers is None else numbers, batches):
        generator = torch.Generator().manual_seed(seed * 1_000_003 + number)
        first, diagonal = gate_derivatives(model, batch, order, probes, generator)
        for kind in shapes:
            sums.gradient[kind] += first[kind]
            sums.absolute[kind] += first[kind].abs()
            if diagonal is not None:
                sums.diagonal[kind] += diagonal[kind]
        sums.tokens += batch.n_target_tokens
        advance(1)
    return sums


def agreement(estimate: dict[str, float], exact: dict[str, float], tops: tuple[int, ...] = (10, 20, 32),
              size: bool = False) -> dict:
    """How well `estimate` ranks heads by their exact effect (both: name -> effect): the Spearman correlation over
    the heads both have; how many of the exact top 10 fall within the estimate's top K, for each K of `tops`; and per
    K the largest exact effect of a head the estimate ranked outside its top K (None: none is). The top are the most
    negative (a head whose removal hurts the log-likelihood most), or with `size` the largest in absolute value
    (patching, which moves a score either way)."""
    names = [name for name in exact if name in estimate]

    def strength(values: dict[str, float], name: str) -> float:  # the larger, the higher ranked
        return abs(values[name]) if size else -values[name]
    by_exact = sorted(names, key=lambda name: -strength(exact, name))
    by_estimate = sorted(names, key=lambda name: -strength(estimate, name))
    top_exact = set(by_exact[:10])
    return {
        "heads": len(names),
        "spearman": spearman(np.array([estimate[name] for name in names]), np.array([exact[name] for name in names])),
        "exact_top10_within": {k: len(top_exact & set(by_estimate[:k])) for k in tops},
        "largest_missed": {k: float(exact[max(by_estimate[k:], key=lambda name: strength(exact, name))])
                           if by_estimate[k:] else None for k in tops},
    }


def spearman(a: np.ndarray, b: np.ndarray) -> float | None:
    """Spearman's rank correlation (ties given their mean rank); None where it is undefined: fewer than two values
    (a model of one head), or a constant one."""
    if len(a) < 2:
        return None
    ranked_a, ranked_b = ranks(np.asarray(a, dtype=float)), ranks(np.asarray(b, dtype=float))
    if ranked_a.std() == 0 or ranked_b.std() == 0:
        return None
    return float(np.corrcoef(ranked_a, ranked_b)[0, 1])


def ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks of `values`, ties sharing their mean rank."""
    order = np.argsort(values, kind="stable")
    ranked = np.empty(len(values))
    ranked[order] = np.arange(1, len(values) + 1)
    for value in np.unique(values):
        tied = values == value
        ranked[tied] = ranked[tied].mean()
    return ranked


class Shifted:
    """A hook that adds a zero tensor tracked by autograd to what passes (a head's outputs, the encoder's stream),
    so that the gradient of a score with respect to it, through every later layer, can be read; a GRU decoder
    calls it once per step."""

    def __init__(self):
        self.outputs: list[Tensor] = []
        self.shifts: list[Tensor] = []

    def __call__(self, out: Tensor) -> Tensor:
        shift = torch.zeros_like(out, requires_grad=True)
        self.outputs.append(out.detach())
        self.shifts.append(shift)
        return out + shift


def patching_estimate(model: Seq2Seq, src_ids: list[int], counterfactual_ids: list[int], tgt_ids: list[int],
                      step: int, token: int | None = None, contrast: int | None = None, stream: bool = True,
                      counterfactual: Run | None = None) -> Patching:
    """`patch_heads`' grids estimated by attribution patching: each head's effect (a′ − a) · ∂score/∂a, a its
    outputs (before W_O) at every target (or source) position in the sentence's run, a′ the counterfactual's, the
    gradient taken in the sentence's run through every later layer; and with `stream` the encoder stream's cells the
    same way. Two forward passes (the counterfactual's, recorded, unless given as `counterfactual`; the sentence's,
    tracked) and one backward pass for every head and cell at once."""
    token, prefix = step_prefix(model, tgt_ids, step, token)
    device, heads = device_of(model), model.heads()
    if counterfactual is None:
        with torch.no_grad():
            [counterfactual] = recorded_runs(model, [counterfactual_ids], prefix, token, contrast)
    transformer = isinstance(model, Transformer)
    hooks = {kind: {layer: Shifted() for layer in range(layers)} for kind, (layers, _) in heads.items()}
    streams = {index: Shifted() for index in range(len(model.encoder_layers) + 1)} if transformer else {}
    with torch.enable_grad():
        gates = HeadHooks(hooks, streams)
        memory, src_mask, _ = model.encode(torch.tensor([src_ids], device=device), gates=gates, fused=True)
        logits, _ = model.decode(prefix, memory, src_mask, gates=gates, fused=True,
                                 positions=torch.tensor([prefix.size(1) - 1], device=device))
        original = score(logits, token, contrast)
        shifts = [shift for hook in [*(h for kind in hooks.values() for h in kind.values()), *streams.values()]
                  for shift in hook.shifts]
        gradients = iter(torch.autograd.grad(original, shifts, allow_unused=True))
    same_length = len(src_ids) == len(counterfactual_ids)
    skipped = skipped_kinds(model, src_ids, counterfactual_ids)
    effects = {kind: np.full(shape, np.nan) for kind, shape in heads.items()}
    for kind, layers in hooks.items():
        for layer, hook in layers.items():
            grads = [torch.zeros_like(shift) if g is None else g for shift, g in
                     zip(hook.shifts, [next(gradients) for _ in hook.shifts])]
            if kind in skipped:
                continue
            difference = counterfactual.outputs[kind][layer] - torch.cat(hook.outputs, dim=2)  # (1, H, T, d_head)
            effects[kind][layer] = (difference * torch.cat(grads, dim=2)).sum((0, 2, 3)).cpu().numpy()
    grid = None
    stream_grads = [next(gradients) for hook in streams.values() for _ in hook.shifts]
    if stream and transformer and same_length:
        ours = torch.cat([hook.outputs[0] for hook in streams.values()])  # (L + 1, S, d)
        theirs = torch.cat([counterfactual.encoder_streams[index] for index in streams])
        grads = torch.cat([torch.zeros_like(ours[:1]) if g is None else g for g in stream_grads])
        grid = ((theirs - ours) * grads).sum(-1).cpu().numpy()
    return Patching(step, token, contrast, float(original.detach()), counterfactual.score, effects, skipped, grid,
                    estimated=True)


def staged_patching(model: Seq2Seq, src_ids: list[int], counterfactual_ids: list[int], tgt_ids: list[int], step: int,
                    token: int | None = None, contrast: int | None = None, top: int = TOP_PATCHED,
                    per_stage: int = PER_STAGE, told: Callable[[int, int], None] = lambda done, total: None
                    ) -> Iterator[Patching]:
    """Patching per head for a model where a patched run per head is slow: attribution patching's grids at once
    (`patching_estimate`), then the `top` heads they rank largest (either way) patched exactly, `per_stage` at a
    time, each stage's grids exact where measured (`Patching.measured`) and estimated elsewhere. `told(done,
    total)`: the heads patched (it may raise to stop)."""
    token, prefix = step_prefix(model, tgt_ids, step, token)
    with torch.no_grad():  # both runs once: the estimate's counterfactual, and what the patched runs go on from
        original, counterfactual = recorded_runs(model, [src_ids, counterfactual_ids], prefix, token, contrast)
    estimate = patching_estimate(model, src_ids, counterfactual_ids, tgt_ids, step, token, contrast,
                                 counterfactual=counterfactual)
    measured = {kind: np.zeros(grid.shape, dtype=bool) for kind, grid in estimate.effects.items()}
    yield replace(estimate, measured={kind: grid.copy() for kind, grid in measured.items()})
    ranked = sorted(((kind, layer, head) for kind, grid in estimate.effects.items()
                     for (layer, head), value in np.ndenumerate(grid) if np.isfinite(value)),
                    key=lambda head: -abs(estimate.effects[head[0]][head[1], head[2]]))[:top]
    with torch.no_grad():
        effects = {kind: grid.copy() for kind, grid in estimate.effects.items()}
        told(0, len(ranked))
        for first in range(0, len(ranked), per_stage):
            stage = ranked[first:first + per_stage]
            scores = patched_scores(model, src_ids, prefix, token, contrast, counterfactual.outputs,
                                    [[head] for head in stage], original=original)
            for (kind, layer, head), value in zip(stage, scores):
                effects[kind][layer, head] = value - original.score
                measured[kind][layer, head] = True
            told(first + len(stage), len(ranked))
            yield replace(estimate, effects={kind: grid.copy() for kind, grid in effects.items()},
                          measured={kind: grid.copy() for kind, grid in measured.items()})
