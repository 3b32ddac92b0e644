"""Which explanation to trust: for the word chosen at a step, rank the source tokens by each explanation method and
measure how faithful each ranking is to the model, with ERASER's comprehensiveness and sufficiency (DeYoung et
al., 2020).

Methods (those the model has):
- `attention`: the last decoder layer's cross-attention at the step, mean of its heads;
- `best_head`: the cross-attention head that aligns best on the val split (heads.json's AER), if known;
- `rollout`: cross-attention rollout through every layer (model/explain/contributions.py);
- `alti_plus`: the step's ALTI+ shares of the source tokens (Ferrando et al., 2022);
- `saliency`, `input_x_gradient`, `integrated_gradients` (model/explain/attribution.py; integrated gradients from zero
  embeddings, 32 points);
- `random`: a control, a random ranking (seeded by the sentence), which any method worth trusting must beat.
Rollout and ALTI+ need a residual stream: the GRU models have neither.

Removing a token replaces it by <unk>, keeping every position (the sentence's length and the positions of the rest
do not change); the final <eos> is never removed. For k source tokens ranked highest (k = 1, 2, 3, 20% and 50% of
the sentence, rounded up), with the target prefix the model wrote kept as it is:
- comprehensiveness = log p(word | source) − log p(word | source with the top k removed): how much the prediction
  falls without what the method ranks highest (higher: the method found what the prediction needs);
- sufficiency = log p(word | source) − log p(word | only the top k kept): how much it falls with only that (lower:
  the method's top tokens are enough).
Signed methods rank by their value (most positive first: what supports the word); saliency and the shares are
never negative.

Over a whole split: model/analysis/faithfulness.py.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from attention_inspector.model.explain.attribution import (INPUT_X_GRADIENT, INTEGRATED_GRADIENTS, SALIENCY, attribute,
                                                           attribute_steps, gradient_scores_at)
from attention_inspector.model.explain.contributions import Contributions, alti_plus, rollout
from attention_inspector.model.keys import ROLLOUT
from attention_inspector.model.nets.cores import parts, shared
from attention_inspector.model.nets.decoding import next_token_logits
from attention_inspector.model.nets.seq2seq import Seq2Seq, device_of
from attention_inspector.model.nets.transformer import Transformer
from attention_inspector.model.text.vocab import SOS_ID, UNK_ID

ATTENTION, BEST_HEAD, ALTI_PLUS, RANDOM = "attention", "best_head", "alti_plus", "random"
METHODS = (ATTENTION, BEST_HEAD, ROLLOUT, ALTI_PLUS, SALIENCY, INPUT_X_GRADIENT, INTEGRATED_GRADIENTS, RANDOM)
# The gradient methods in the order `method_scores` runs them: integrated gradients, the slowest by far, last.
GRADIENT_METHODS = (SALIENCY, INPUT_X_GRADIENT, INTEGRATED_GRADIENTS)
Told = Callable[[int, int], None]
# Each method as the page names it (the keys stay in the CLI's JSON).
METHOD_LABELS = {ATTENTION: "attention (last layer's mean)", BEST_HEAD: "best-aligning head", ROLLOUT: "rollout",
                 ALTI_PLUS: "ALTI+", SALIENCY: "saliency", INPUT_X_GRADIENT: "input × gradient",
                 INTEGRATED_GRADIENTS: "integrated gradients", RANDOM: "random ranking (control)"}
KS = (1, 2, 3, 0.2, 0.5)  # whole numbers of tokens, or fractions of the sentence


def k_label(k: int | float) -> str:
    return f"{k:.0%}" if isinstance(k, float) else str(k)


@dataclass
class StepFaithfulness:
    """One step's word: each method's source scores, and its comprehensiveness and sufficiency at each k."""

    step: int
    scores: dict[str, np.ndarray]  # method -> (S,) a score per source token
    comprehensiveness: dict[str, np.ndarray]  # method -> (len(KS),)
    sufficiency: dict[str, np.ndarray]

    def with_measured(self, other: StepFaithfulness) -> StepFaithfulness:
        """These methods and `other`'s (of the same word), in `METHODS`' order."""
        def merged(mine: dict, theirs: dict) -> dict:
            both = {**mine, **theirs}
            return {method: both[method] for method in METHODS if method in both}
        return StepFaithfulness(self.step, merged(self.scores, other.scores),
                                merged(self.comprehensiveness, other.comprehensiveness),
                                merged(self.sufficiency, other.sufficiency))

    def rank_correlation(self) -> dict[tuple[str, str], float]:
        """Spearman's ρ between every two methods' scores of the source tokens that can be removed."""
        names = list(self.scores)
        ranks = {name: np.argsort(np.argsort(-self.scores[name][:-1])).astype(float) for name in names}
        return {(a, b): float(np.corrcoef(ranks[a], ranks[b])[0, 1]) if len(ranks[a]) > 1 else 1.0
                for i, a in enumerate(names) for b in names[i + 1:]}


@dataclass(frozen=True)
class Seen:
    """What a decoding already holds of a pass over its translation with every head on, read instead of a pass of
    the methods' own: the cross- and encoder self-attention, (L, H, T, S) and (L, H, S, S) (None for a GRU), of
    its trace, and the ALTI+ contributions its detachment was scored from (None where it has none)."""

    cross: np.ndarray
    encoder: np.ndarray | None
    contributions: Contributions | None = None

    def fits(self, sources: int, targets: int) -> bool:
        """Whether it is of a sentence of `sources` tokens and a translation of `targets`."""
        return self.cross.shape[-2:] == (targets, sources) and (
            self.contributions is None or self.contributions.decoder.shape == (targets, sources + targets))


def removable_count(k: int | float, removable: int) -> int:
    return min(removable, k if isinstance(k, int) else max(1, math.ceil(k * removable)))


@torch.inference_mode()
def log_probabilities(model: Seq2Seq, sources: torch.Tensor, prefix: list[int], token: int) -> np.ndarray:
    """log p(token | each source row, <sos> + prefix): each distinct row once (methods often rank alike), in a
    batch per core, the output layer at the last position only. A Transformer's decoder takes the prefix, the same
    in every row, as one row: its first self-attention is computed once, and the rows part at the cross-attention."""
    distinct, row = torch.unique(sources, dim=0, return_inverse=True)

    def batch(rows: torch.Tensor) -> torch.Tensor:
        width = 1 if isinstance(model, Transformer) else rows.size(0)
        tgt = torch.tensor([[SOS_ID] + prefix], device=rows.device).expand(width, -1)
        memory, src_mask, _ = model.encode(rows, fused=True)
        logits, _ = model.decode(tgt, memory, src_mask, fused=True,
                                 positions=torch.full((width,), len(prefix), device=rows.device))
        return next_token_logits(logits).log_softmax(-1)[:, token]
    return torch.cat(shared([functools.partial(batch, rows) for rows in distinct.chunk(parts())]))[row].cpu().numpy()


def method_scores(model: Seq2Seq, src_ids: list[int], tgt_ids: list[int], best_head: tuple[int, int] | None,
                  steps: int = 32, only: int | None = None, gradients: tuple[str, ...] = GRADIENT_METHODS,
                  told: Told = lambda done, total: None, seen: Seen | None = None) -> dict[str, list[np.ndarray]]:
    """Every method's score of every source token, for every step of the translation `tgt_ids` (`only`: the
    gradients of that step alone, the other steps' left empty; `gradients`: the gradient methods to run; `seen`:
    what the decoding holds already, where it fits). `told(done, total)` hears of each stage as it is done:
    attention, rollout and ALTI+ together (and saliency and input × gradient, from one gradient computed beside
    them, where `only` asks for both), then each gradient method (it may raise to stop)."""
    stages = 1 + len(gradients)
    if seen is None or not seen.fits(len(src_ids), len(tgt_ids)):
        seen = None

    def attended() -> dict[str, list[np.ndarray]]:  # what the attention weights give, and ALTI+
        if seen is not None:
            cross, encoder = seen.cross, seen.encoder
        else:
            device = device_of(model)
            src = torch.tensor([src_ids], device=device)
            tgt_in = torch.tensor([[SOS_ID] + tgt_ids[:-1]], device=device)
            with torch.inference_mode():
                _, attention = model(src, tgt_in, need_weights=True)
            cross = attention.cross[:, 0].float().cpu().numpy()  # (L, H, T, S)
            encoder = None if attention.encoder is None else attention.encoder[:, 0].float().cpu().numpy()
        scores = {ATTENTION: list(cross[-1].mean(0))}
        if best_head is not None:
            layer, head = best_head
            scores[BEST_HEAD] = list(cross[layer, head])
        if isinstance(model, Transformer):  # through every layer, as the views' last layer shows them: (T, S)
            scores[ROLLOUT] = list(cross[-1].mean(0) @ rollout(torch.from_numpy(encoder)).numpy())
            contributions = seen.contributions if seen is not None else None
            if contributions is None:
                contributions = alti_plus(model, src_ids, tgt_ids)
            scores[ALTI_PLUS] = list(contributions.decoder[:, :len(src_ids)])
        return scores

    pending = list(gradients)
    if only is not None and SALIENCY in pending and INPUT_X_GRADIENT in pending:  # one gradient gives both, beside
        scores, both = shared([attended, functools.partial(gradient_scores_at, model, src_ids, tgt_ids, only)])
        for method in (SALIENCY, INPUT_X_GRADIENT):
            scores[method] = [both[method] if t == only else None for t in range(len(tgt_ids))]
            pending.remove(method)
    else:
        scores = attended()
    done = 1 + len(gradients) - len(pending)
    told(done, stages)
    for method in pending:
        scores[method] = gradient_scores(model, src_ids, tgt_ids, method, steps, only)
        done += 1
        told(done, stages)
    generator = np.random.default_rng(src_ids)
    scores[RANDOM] = [generator.random(len(src_ids)) for _ in tgt_ids]
    return scores


def gradient_scores(model: Seq2Seq, src_ids: list[int], tgt_ids: list[int], method: str, steps: int,
                    only: int | None) -> list[np.ndarray | None]:
    """A gradient method's source scores at every step (saliency and input × gradient in one batch), or at step
    `only` alone (the others None)."""
    if only is None:
        return [result.source for result in attribute_steps(model, src_ids, tgt_ids, method, steps=steps)]
    return [attribute(model, src_ids, tgt_ids, t, method, steps=steps).source if t == only else None
            for t in range(len(tgt_ids))]


def quick_faithfulness(model: Seq2Seq, src_ids: list[int], tgt_ids: list[int], step: int,
                       best_head: tuple[int, int] | None = None, told: Told = lambda done, total: None,
                       seen: Seen | None = None) -> StepFaithfulness:
    """The faithfulness of every method but integrated gradients (the slowest by far: `integrated_faithfulness`)
    for the word at `step` alone: the app's first answer, asked live, reading what the decoding holds (`seen`).
    `told(done, total)` hears of each stage (the methods' scores, then the deletion curves) as it is done."""
    quick = GRADIENT_METHODS[:-1]
    total = len(quick) + 2
    scores = method_scores(model, src_ids, tgt_ids, best_head, only=step, gradients=quick,
                           told=lambda done, _: told(done, total), seen=seen)
    measured = step_faithfulness(model, src_ids, tgt_ids, step, {m: v[step] for m, v in scores.items()})
    told(total, total)
    return measured


def integrated_faithfulness(model: Seq2Seq, src_ids: list[int], tgt_ids: list[int], step: int,
                            first: StepFaithfulness, steps: int = 32,
                            progress: Callable[[int, int], None] | None = None) -> StepFaithfulness:
    """`first` (`quick_faithfulness` of the same word) with integrated gradients measured too (`steps` points; with
    `progress`, in batches, told the points done as `attribute` tells them)."""
    integrated = attribute(model, src_ids, tgt_ids, step, INTEGRATED_GRADIENTS, steps=steps, progress=progress)
    return first.with_measured(step_faithfulness(model, src_ids, tgt_ids, step,
                                                 {INTEGRATED_GRADIENTS: integrated.source}))


def step_faithfulness(model: Seq2Seq, src_ids: list[int], tgt_ids: list[int], step: int,
                      scores: dict[str, np.ndarray]) -> StepFaithfulness:
    """ERASER's measures of every method's ranking for the word at `step`, all perturbations in one batch."""
    removable = len(src_ids) - 1  # the final <eos> stays
    counts = [removable_count(k, removable) for k in KS]
    rows = [src_ids]
    for method, values in scores.items():
        order = np.argsort(-np.asarray(values[:removable]), kind="stable")
        for count in counts:
            top = set(order[:count].tolist())
            rows.append([UNK_ID if i in top else t for i, t in enumerate(src_ids)])  # without the top k
            rows.append([t if i in top or i == removable else UNK_ID for i, t in enumerate(src_ids)])  # only them
    logp = log_probabilities(model, torch.tensor(rows, device=device_of(model)), tgt_ids[:step], tgt_ids[step])
    full, perturbed = logp[0], logp[1:].reshape(len(scores), len(KS), 2)
    return StepFaithfulness(step, {m: np.asarray(v, dtype=float) for m, v in scores.items()},
                            {m: full - perturbed[i, :, 0] for i, m in enumerate(scores)},
                            {m: full - perturbed[i, :, 1] for i, m in enumerate(scores)})


def sentence_faithfulness(model: Seq2Seq, src_ids: list[int], tgt_ids: list[int],
                          best_head: tuple[int, int] | None = None, steps: int = 32) -> list[StepFaithfulness]:
    """Every step's faithfulness for one sentence and its translation (the generated tokens)."""
    scores = method_scores(model, src_ids, tgt_ids, best_head, steps)
    return [step_faithfulness(model, src_ids, tgt_ids, t, {m: v[t] for m, v in scores.items()})
            for t in range(len(tgt_ids))]
