"""How close the estimates of every head's effect come to the exact effects (docs/explanations.md, "Estimates of
every head"): the table of agreement.

Switching a head off, over a split (val by default): each model's exact change in the teacher-forced log-likelihood
per token for every head (`log_likelihood_changes`, the full study), against each estimate: first order (the gates'
gradient), second order with 2 and 8 Hutchinson probes per batch, and Michel et al.'s importance (as a ranking).
Patching, over the gender study's pairs (model/analysis/patching.py, en-de, at the noun): each pair's exact grid
against attribution patching's, per pair and for the mean over pairs.

For each: the Spearman correlation, how many of the exact top 10 fall within the estimate's top 10, 20 and 32, the
largest exact effect the estimate ranked outside its top 10, 20 and 32, and the time taken.

    python benchmarks/head_estimates.py [--models en-de de-en en-fr-rnn-multihead] [--limit N] [--gender 100]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.load import cpu_model  # noqa: E402
from attention_inspector.model.analysis import heads  # noqa: E402
from attention_inspector.model.analysis.patching import gender_pairs, study  # noqa: E402
from attention_inspector.model.explain.estimates import agreement, gate_sums  # noqa: E402
from attention_inspector.model.keys import head_name  # noqa: E402
from attention_inspector.model.serving.checkpoint import load_checkpoint  # noqa: E402
from attention_inspector.model.training.data import load_pairs  # noqa: E402
from attention_inspector.model.training.evaluate import DEFAULT_DATA  # noqa: E402

TOPS = (10, 20, 32)
ESTIMATES = (("first order", "first", 1), ("second order, 2 probes", "second", 2),
             ("second order, 8 probes", "second", 8))


def row(model: str, estimator: str, measured: dict, seconds: float) -> str:
    within = " / ".join(str(measured["exact_top10_within"][k]) for k in TOPS)
    missed = " / ".join("-" if measured["largest_missed"][k] is None else f"{measured['largest_missed'][k]:+.4f}"
                        for k in TOPS)
    correlation = "-" if measured["spearman"] is None else f"{measured['spearman']:.3f}"
    return f"| {model} | {estimator} | {correlation} | {within} | {missed} | {seconds:.1f} |"


def ablation_rows(name: str, data: str, split: str, limit: int | None) -> list[str]:
    """The agreement of every estimate with the exact changes of one model's heads over the split."""
    translator = load_checkpoint(ROOT / "checkpoints" / name)
    pairs = load_pairs(data, split, translator.src_tokenizer.lang, translator.tgt_tokenizer.lang)
    sources = translator.src_tokenizer.tokenize_all(list(pairs["src"])[:limit])
    targets = translator.tgt_tokenizer.tokenize_all(list(pairs["tgt"])[:limit])
    began = time.perf_counter()
    _, exact = heads.log_likelihood_changes(translator, sources, targets)
    top = min(10, len(exact))
    rows = [f"| {name} | exact, every head ({len(exact)}) | 1 | {top} / {top} / {top} | - | "
            f"{time.perf_counter() - began:.1f} |"]
    batches = heads.teacher_forced_batches(translator, sources, targets, heads.estimate_tokens(translator))
    for label, order, probes in ESTIMATES:
        began = time.perf_counter()
        sums = gate_sums(translator.model, batches, order, probes)
        seconds = time.perf_counter() - began
        estimate = {head: value / sums.tokens for head, value in sums.estimate().items()}
        rows.append(row(name, label, agreement(estimate, exact, TOPS), seconds))
        if order == "first":  # Michel et al.'s importance comes from the same gradients
            importance = heads.gradient_importance(sums.absolute)
            rows.append(row(name, "Michel et al.'s importance (ranking)",
                            agreement({head: -value for head, value in importance.items()}, exact, TOPS), seconds))
    return rows


def patching_rows(count: int, data: str) -> list[str]:
    """The gender study on en-de at the noun: attribution patching against the patched runs."""
    translator = load_checkpoint(ROOT / "checkpoints" / "en-de")
    pairs = gender_pairs(list(load_pairs(data, "test", "en", "de")["src"]), count)
    timed = {}
    for estimate in (False, True):
        began = time.perf_counter()
        timed[estimate] = study(translator, pairs, estimate=estimate)[0], time.perf_counter() - began
    (exact, exact_s), (estimated, estimated_s) = timed[False], timed[True]

    def flat(result) -> dict[str, float]:
        return {head_name(kind, layer, head): float(value) for kind, grid in result.effects.items()
                for (layer, head), value in np.ndenumerate(grid) if np.isfinite(value)}
    per_pair = [agreement(flat(b), flat(a), TOPS, size=True) for a, b in zip(exact, estimated)]
    mean = {key: np.mean([flat(result)[key] for result in exact]) for key in flat(exact[0])}
    mean_estimate = {key: np.mean([flat(result)[key] for result in estimated]) for key in mean}
    streams = [np.corrcoef(a.stream.ravel(), b.stream.ravel())[0, 1] for a, b in zip(exact, estimated)
               if a.stream is not None and np.ptp(a.stream) > 0]
    label = f"en-de, gender study ({len(exact)} pairs)"
    spearmans = [measured["spearman"] for measured in per_pair]
    within = {k: np.mean([measured["exact_top10_within"][k] for measured in per_pair]) for k in TOPS}
    return [
        f"| {label} | exact patching, every head | 1 | 10 / 10 / 10 | - | {exact_s:.1f} |",
        row(label, "attribution patching, mean effect over the pairs", agreement(mean_estimate, mean, TOPS, size=True),
            estimated_s),
        f"| {label} | attribution patching, per pair (median; mean within) | {np.median(spearmans):.3f} "
        f"(min {min(spearmans):.3f}) | {' / '.join(f'{within[k]:.1f}' for k in TOPS)} | - | {estimated_s:.1f} |",
        f"| {label} | attribution patching, the stream grid per pair (Pearson, median) | "
        f"{np.median(streams):.3f} (min {min(streams):.3f}) | - | - | - |",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["en-de", "de-en", "en-fr-rnn-multihead"])
    parser.add_argument("--data", default=DEFAULT_DATA)
    parser.add_argument("--split", default="val", choices=("train", "val", "test"))
    parser.add_argument("--limit", type=int, help="only the first N sentences of the split")
    parser.add_argument("--gender", type=int, default=100, help="pairs of the gender patching study (0: none)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"{cpu_model()}; torch {torch.__version__}, {args.threads} threads; {args.split}"
          + (f", first {args.limit} sentences" if args.limit else ""))
    print("Effects are changes in log-likelihood per token (ablation) or in the score (patching); the top are the "
          "most harmful heads (ablation) or the largest in absolute value (patching).")
    print("| model | estimate | Spearman | exact top 10 within its top 10 / 20 / 32 | largest exact effect outside "
          "its top 10 / 20 / 32 | seconds |")
    print("|---|---|---|---|---|---|")
    for name in args.models:
        for line in ablation_rows(name, args.data, args.split, args.limit):
            print(line, flush=True)
    if args.gender:
        for line in patching_rows(args.gender, args.data):
            print(line, flush=True)


if __name__ == "__main__":
    main()
