"""Gradient attributions of one prediction: how much each source token and each earlier target token moved the
log-probability of the token chosen at step t, by three methods that inseq offers, computed with Captum (every
step's at once, and integrated gradients' points split over the cores, by code of our own that tests check against
Captum's).

- saliency: the norm of the gradient with respect to the token's embedding, ‖∂f/∂e_i‖ (Simonyan et al., 2014);
- input × gradient: Σ_d e_i,d ∂f/∂e_i,d (Shrikumar et al., 2017), signed;
- integrated gradients (Sundararajan et al., 2017): Σ_d (e_i,d − b_i,d) ∫ ∂f/∂e_i,d(b + α(e − b)) dα, signed, whose
  sum over every token is f(e) − f(b) (completeness); the baseline b is zero embeddings or every token's
  embedding replaced by <pad>'s, the integral a Gauss-Legendre sum of `steps` points, as Captum's
  IntegratedGradients computes it (a test checks they agree), its points in batches shared out over the cores.

f is log p(token | source, target prefix) over the tokens the model may emit (<pad> and <sos> left out, as
decoding does), or, contrastive (Yin & Neubig, 2022), log p(token) − log p(alternative): why this token and not
that one.

The embeddings are those the model's token tables give (before the Transformer's √d_model and positions), handed
to `encode` and `decode` (their `embedded` argument) in place of the tables' rows: the same code serves the
Transformer, the GRU models and converted Hub models (one table for both sides), and the shared model is never
changed, so attributions run beside other users' requests. The model is in eval mode, as a loaded checkpoint is.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from attention_inspector.model.keys import GRADIENTS, INPUT_X_GRADIENT, INTEGRATED_GRADIENTS, SALIENCY
from attention_inspector.model.nets.cores import parts, shared
from attention_inspector.model.nets.decoding import next_token_logits
from attention_inspector.model.nets.seq2seq import HeadGates, Seq2Seq, device_of
from attention_inspector.model.text.vocab import PAD_ID, SOS_ID

METHODS = GRADIENTS
PASSES = 8  # batches that saliency and input × gradient at every step, or integrated gradients' points, are split
# into where progress is shown
BASELINES = ("zero", "pad")


@dataclass
class Attributions:
    """One prediction's attributions: to each source token (the encoder's input, <eos> included) and to each
    decoder input token before it (<sos>, then the tokens generated before step t)."""

    method: str
    step: int
    token: int  # the target id whose log-probability is explained
    contrast: int | None  # the alternative's id (contrastive), else None
    source: np.ndarray  # (S,)
    target: np.ndarray  # (step + 1,)
    score: float  # f at the real embeddings
    baseline_score: float | None = None  # f at the baseline (integrated gradients)
    delta: float | None = None  # integrated gradients' completeness error: Σ attributions − (score − baseline_score)


def token_tables(model: Seq2Seq) -> tuple[nn.Embedding, nn.Embedding]:
    """The source and target token tables (the same module where one vocabulary is shared)."""
    source, target = model.src_embedding, model.tgt_embedding
    return getattr(source, "tokens", source), getattr(target, "tokens", target)


class Prediction:
    """f(source embeddings, target embeddings) for one sentence and the target prefix before a step: a function of
    batched embeddings (B, S, d) and (B, step + 1, d), as Captum calls it."""

    def __init__(self, model: Seq2Seq, src_ids: list[int], prefix: list[int], token: int,
                 contrast: int | None = None, gates: HeadGates | None = None):
        self.model, self.token, self.contrast, self.gates = model, token, contrast, gates
        self.device = device_of(model)
        self.src = torch.tensor([src_ids], device=self.device)
        self.tgt = torch.tensor([[SOS_ID] + prefix], device=self.device)
        self.tables = token_tables(model)

    def embeddings(self, baseline: str | None = None) -> tuple[Tensor, Tensor]:
        """The real embeddings, or a baseline's: "zero", or "pad" (every token's row replaced by <pad>'s)."""
        source, target = self.tables
        if baseline is None:
            return source(self.src).detach(), target(self.tgt).detach()
        if baseline == "zero":
            return (source.weight.new_zeros(*self.src.shape, source.embedding_dim),
                    target.weight.new_zeros(*self.tgt.shape, target.embedding_dim))
        return source(torch.full_like(self.src, PAD_ID)).detach(), target(torch.full_like(self.tgt, PAD_ID)).detach()

    def __call__(self, source: Tensor, target: Tensor) -> Tensor:
        batch = source.size(0)
        src, tgt = self.src.expand(batch, -1), self.tgt.expand(batch, -1)
        memory, src_mask, _ = self.model.encode(src, gates=self.gates, embedded=source)
        # step t's prediction: the output layer there alone
        last = torch.full((batch,), tgt.size(1) - 1, device=self.device)
        logits, _ = self.model.decode(tgt, memory, src_mask, gates=self.gates, embedded=target, positions=last)
        log_probs = next_token_logits(logits).log_softmax(-1)
        score = log_probs[:, self.token]
        return score if self.contrast is None else score - log_probs[:, self.contrast]


class EveryStep(Prediction):
    """f at every step of a translation in one batch: row b explains the token chosen at step `rows[b]`, from a
    decoder that reads the whole translation (<sos> and every generated token but the last). The decoder is causal
    (masked self-attention, or a recurrence), so the tokens after a step do not move its prediction: their
    gradients are zero, and each row equals `Prediction` of its step. The decoder may be given the first positions
    only (`target` (B, T', d)), as long as they hold every row's step."""

    def __init__(self, model: Seq2Seq, src_ids: list[int], tgt_ids: list[int], contrast: int | None = None,
                 gates: HeadGates | None = None):
        super().__init__(model, src_ids, tgt_ids[:-1], tgt_ids[-1], contrast, gates)
        self.tokens = torch.tensor(tgt_ids, device=self.device)

    def __call__(self, source: Tensor, target: Tensor, rows: Tensor) -> Tensor:
        batch = source.size(0)
        src, tgt = self.src.expand(batch, -1), self.tgt[:, :target.size(1)].expand(batch, -1)  # a prefix, maybe
        memory, src_mask, _ = self.model.encode(src, gates=self.gates, embedded=source)
        logits, _ = self.model.decode(tgt, memory, src_mask, gates=self.gates, embedded=target, positions=rows)
        log_probs = next_token_logits(logits).log_softmax(-1)  # (B, V)
        score = log_probs.gather(1, self.tokens[rows, None])[:, 0]
        return score if self.contrast is None else score - log_probs[:, self.contrast]


def attribute_steps(model: Seq2Seq, src_ids: list[int], tgt_ids: list[int], method: str = SALIENCY,
                    contrast: int | None = None, steps: int = 32, baseline: str = "zero",
                    gates: HeadGates | None = None, progress: Callable[[int, int], None] | None = None
                    ) -> list[Attributions]:
    """`attribute` at every step of `tgt_ids`. Saliency and input × gradient take one batch, a row per step
    (`EveryStep`), its rows shared out over the cores, or with `progress` up to `PASSES` batches of a few rows each,
    it told after each; integrated gradients one batch of its points per step (one batch of every step's points is
    larger and slower on a CPU: 7.8 s against 4.9 s for 19 steps of en-de, one thread), `progress(done, total)`
    called after each (it may raise to stop)."""
    if method == INTEGRATED_GRADIENTS or len(tgt_ids) == 0:
        results = []
        for t in range(len(tgt_ids)):
            results.append(attribute(model, src_ids, tgt_ids, t, method, contrast=contrast, steps=steps,
                                     baseline=baseline, gates=gates))
            if progress is not None:
                progress(t + 1, len(tgt_ids))
        return results
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, not {method!r}")
    prediction = EveryStep(model, src_ids, tgt_ids, contrast, gates)
    count = len(tgt_ids)
    embeddings = prediction.embeddings()

    def rows_attributed(rows: Tensor) -> list[Attributions]:
        """These rows' attributions from one pass and its gradients (Captum's Saliency and InputXGradient: the
        gradient, or the embeddings times it; `attribute` runs them, and a test checks the two agree)."""
        source, target = embeddings[0], embeddings[1][:, :int(rows[-1]) + 1]  # the decoder up to the last row's step
        inputs = tuple(e.expand(len(rows), -1, -1).clone().requires_grad_() for e in (source, target))
        with torch.enable_grad():
            scores = prediction(*inputs, rows)
            gradients = torch.autograd.grad(scores.sum(), inputs)  # each row's own: the rows share no input
        source, target = (g.norm(dim=-1) if method == SALIENCY else (x * g).sum(-1)
                          for x, g in zip(inputs, gradients))
        source, target, scores = source.detach().cpu().numpy(), target.detach().cpu().numpy(), scores.detach().tolist()
        return [Attributions(method, t, tgt_ids[t], contrast, source[i], target[i, :t + 1], scores[i])
                for i, t in enumerate(rows.tolist())]

    results = []
    passes = torch.arange(count, device=prediction.device).chunk(PASSES if progress is not None else 1)
    for rows in passes:  # each pass's rows over the cores
        for attributed in shared([functools.partial(rows_attributed, part) for part in rows.chunk(parts())]):
            results += attributed
        if progress is not None:
            progress(len(results), count)
    return results


def step_shares(results: list[Attributions]) -> tuple[np.ndarray, np.ndarray]:
    """Every step's attributions as shares of its own total: each divided by the sum of the step's absolute
    attributions over the source and the target prefix, so that steps of larger and smaller log-probability
    changes read alike and a token's sign is kept. (T, S) to the source tokens, (T, T) to the decoder inputs, zero
    after each step's own."""
    count = len(results)
    source = np.stack([r.source for r in results]) if results else np.zeros((0, 0))
    target = np.zeros((count, count))
    for t, result in enumerate(results):
        target[t, :t + 1] = result.target
    total = np.abs(source).sum(1) + np.abs(target).sum(1)
    total = np.where(total > 0, total, 1.0)[:, None]
    return source / total, target / total


def gradient_scores_at(model: Seq2Seq, src_ids: list[int], tgt_ids: list[int], step: int) -> dict[str, np.ndarray]:
    """Saliency's and input × gradient's source scores of the token chosen at `step`, from one gradient (Captum's
    Saliency): input × gradient is the embeddings times that gradient, as Captum's InputXGradient computes it
    (`attribute` runs each method on its own, with the prediction's score)."""
    from captum.attr import Saliency

    prediction = Prediction(model, src_ids, tgt_ids[:step], tgt_ids[step])
    inputs = tuple(e.requires_grad_() for e in prediction.embeddings())
    with torch.enable_grad():
        source, _ = Saliency(prediction).attribute(inputs, abs=False)
    embedded = inputs[0].detach()
    return {SALIENCY: source.norm(dim=-1)[0].detach().cpu().numpy(),
            INPUT_X_GRADIENT: (embedded * source).sum(-1)[0].detach().cpu().numpy()}


def attribute(model: Seq2Seq, src_ids: list[int], tgt_ids: list[int], step: int, method: str = SALIENCY,
              token: int | None = None, contrast: int | None = None, steps: int = 32, baseline: str = "zero",
              gates: HeadGates | None = None, progress: Callable[[int, int], None] | None = None) -> Attributions:
    """Attributions of the prediction at `step` of the translation `tgt_ids` (the generated tokens; the decoder
    reads <sos> and `tgt_ids[:step]`) of `token` (default: `tgt_ids[step]`, the token chosen there), against
    `contrast` if given. Integrated gradients: `steps` points from `baseline` ("zero" or "pad"), with `progress`
    in `PASSES` batches, `progress(points, steps)` told as they are done (it may raise to stop)."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, not {method!r}")
    if baseline not in BASELINES:
        raise ValueError(f"baseline must be one of {', '.join(BASELINES)}, not {baseline!r}")
    if not 0 <= step < len(tgt_ids) + (token is not None):
        raise ValueError(f"step {step} is not a step of this translation of {len(tgt_ids)} tokens")
    token = tgt_ids[step] if token is None else token
    from captum.attr import InputXGradient, Saliency  # imports matplotlib: on first use only

    prediction = Prediction(model, src_ids, tgt_ids[:step], token, contrast, gates)
    inputs = tuple(e.requires_grad_() for e in prediction.embeddings())
    baseline_score = delta = None
    if method == INTEGRATED_GRADIENTS:
        baselines = prediction.embeddings(baseline)
        with torch.inference_mode():  # f at both ends of the path, in one batch
            score, baseline_score = prediction(*(torch.cat(ends) for ends in zip(inputs, baselines))).tolist()
        per_token = [a.sum(-1)[0] for a in integrated_gradients(prediction, inputs, baselines, steps, progress)]
        delta = float(sum(t.sum() for t in per_token)) - (score - baseline_score)
    else:
        with torch.enable_grad():
            score = float(prediction(*inputs).detach())
            if method == SALIENCY:
                per_token = [g.norm(dim=-1)[0] for g in Saliency(prediction).attribute(inputs, abs=False)]
            else:
                per_token = [a.sum(-1)[0] for a in InputXGradient(prediction).attribute(inputs)]
    source, target = (t.detach().cpu().numpy() for t in per_token)
    return Attributions(method, step, token, contrast, source, target, score, baseline_score, delta)


def integrated_gradients(f: Callable[..., Tensor], inputs: tuple[Tensor, ...], baselines: tuple[Tensor, ...],
                         steps: int, progress: Callable[[int, int], None] | None = None) -> tuple[Tensor, ...]:
    """(x − b) Σ_k w_k ∂f/∂x(b + α_k (x − b)) for each input x (1, n, d) and its baseline b, over `steps`
    Gauss-Legendre points α_k on [0, 1] with weights w_k: Captum's IntegratedGradients(method="gausslegendre"),
    its points split over the cores (model/nets/cores.py), or with `progress` in `PASSES` batches, a round of
    them at a time, `progress(points done, steps)` told after each round."""
    nodes, weights = np.polynomial.legendre.leggauss(steps)
    device = inputs[0].device
    alphas, weights = (torch.tensor(0.5 * values, dtype=inputs[0].dtype, device=device)[:, None, None]
                       for values in (nodes + 1, weights))

    def weighted_gradients(points: Tensor) -> tuple[Tensor, ...]:  # Σ w ∂f/∂x over these points: (1, n, d) each
        scaled = tuple((b + alphas[points] * (x - b)).detach().requires_grad_() for x, b in zip(inputs, baselines))
        with torch.enable_grad():
            gradients = torch.autograd.grad(f(*scaled).sum(), scaled)
        return tuple((weights[points] * g).sum(0, keepdim=True) for g in gradients)

    batches = torch.arange(steps, device=device).chunk(parts() if progress is None else min(steps, PASSES))
    summed, done = [torch.zeros_like(x) for x in inputs], 0
    for first in range(0, len(batches), parts()):  # a round: a batch for each core
        at_once = batches[first:first + parts()]
        for sums in shared([functools.partial(weighted_gradients, points) for points in at_once]):
            summed = [total + part for total, part in zip(summed, sums)]
        done += sum(len(points) for points in at_once)
        if progress is not None:
            progress(done, steps)
    return tuple(total * (x - b).detach() for total, x, b in zip(summed, inputs, baselines))
