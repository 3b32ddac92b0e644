"""The head report (`python -m model.analysis.heads`) side by side: every head switched off alone as the loop over
heads did it (one greedy decoding of the split and one teacher-forced pass per head) and as the command does it
now (every head's likelihood change from passes that each hold many heads; BLEU per head, with `--bleu-per-head`,
from decodings that each hold several heads), in one run, on the same sentences.

    python benchmarks/heads_study.py [--checkpoint checkpoints/en-de] [--split val] [--limit N] [--threads 2]

Times what both ways share once (the heads' statistics, the BLEU with every head on, the gradient importance, the
pruning curve), then the part per head each way, and prints each way's whole and their ratio, with the largest
difference between the two ways' likelihood changes.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from load import cpu_model  # noqa: E402  (benchmarks/load.py, beside this script)

from attention_inspector.model.analysis import heads  # noqa: E402
from attention_inspector.model.analysis.align import reference_alignments  # noqa: E402
from attention_inspector.model.nets.seq2seq import head_gates  # noqa: E402
from attention_inspector.model.serving.checkpoint import load_checkpoint  # noqa: E402
from attention_inspector.model.training.evaluate import DEFAULT_DATA  # noqa: E402


def timed(work):
    began = time.perf_counter()
    result = work()
    return time.perf_counter() - began, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", default=str(ROOT / "checkpoints" / "en-de"))
    parser.add_argument("--data", default=DEFAULT_DATA)
    parser.add_argument("--split", default="val")
    parser.add_argument("--limit", type=int)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--heads-per-decoding", type=int, default=heads.HEADS_PER_DECODING)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    translator = load_checkpoint(args.checkpoint)
    texts, references = heads.sentence_pairs(translator, argparse.Namespace(pairs=None, data=args.data,
                                                                            split=args.split, limit=args.limit))
    sources = translator.src_tokenizer.tokenize_all(texts)
    targets = translator.tgt_tokenizer.tokenize_all(references)
    names = heads.every_head(translator)
    print(f"{cpu_model()}; torch threads {torch.get_num_threads()}; {Path(args.checkpoint).name}: {len(names)} heads; "
          f"{len(sources)} sentences of {args.split}")

    def shared() -> dict:
        alignments = reference_alignments(translator, args.data, args.split, sources, targets, None)[:2]
        statistics = heads.split_statistics(translator, sources, targets, alignments)
        batches = heads.teacher_forced_batches(translator, sources, targets)
        importance = heads.estimated_changes(translator, batches, "first", 1)[1]
        base_bleu = heads.greedy_bleu(translator, sources, references)
        order = sorted(names, key=lambda name: importance[name])
        pruning = [heads.greedy_bleu(translator, sources, references,
                                     head_gates(translator.model, order[:round(f * len(order))]))
                   for f in heads.PRUNED_FRACTIONS]
        return dict(statistics=statistics, batches=batches, base_bleu=base_bleu, pruning=pruning)
    shared_s, done = timed(shared)
    batches = done["batches"]

    spent = {"decoding": 0.0, "passes": 0.0}

    looped_bleus = {}

    def loop() -> dict[str, float]:  # as the command did before: a greedy decoding and a pass per head
        base = heads.log_likelihood(translator, batches)
        changes = {}
        for name in names:
            gates = head_gates(translator.model, [name])
            seconds, looped_bleus[name] = timed(lambda: heads.greedy_bleu(translator, sources, references, gates))
            spent["decoding"] += seconds
            seconds, likelihood = timed(lambda: heads.log_likelihood(translator, batches, gates))
            spent["passes"] += seconds
            changes[name] = likelihood - base
        return changes
    batched_s, (_, batched) = timed(lambda: heads.log_likelihood_changes(translator, sources, targets))
    loop_s, looped = timed(loop)
    worst = max(abs(batched[name] - looped[name]) for name in names)

    # --bleu-per-head now: several heads per decoding
    together_s, together = timed(lambda: heads.bleus_per_head(translator, sources, references, names,
                                                              args.heads_per_decoding))
    bleu_worst = max(abs(together[name] - looped_bleus[name]) for name in names)
    print("| part | seconds |")
    print("|---|---|")
    print(f"| shared: statistics, BLEU with every head on, importance, pruning (9 decodings) | {shared_s:.1f} |")
    print(f"| per head, the loop: a greedy decoding each / a teacher-forced pass each | {spent['decoding']:.1f} / "
          f"{spent['passes']:.1f} |")
    print(f"| per head, now: likelihood changes, many heads per pass | {batched_s:.1f} |")
    print(f"| per head, now: BLEU, {args.heads_per_decoding} heads per decoding (--bleu-per-head) | {together_s:.1f} |")
    before, now, with_bleu = shared_s + loop_s, shared_s + batched_s, shared_s + batched_s + together_s
    print(f"whole report: the loop {before:.1f} s, now {now:.1f} s: {before / now:.1f}x faster (with "
          f"--bleu-per-head {with_bleu:.1f} s: {before / with_bleu:.1f}x); the likelihood changes alone "
          f"{spent['passes'] / batched_s:.1f}x faster, BLEU per head {spent['decoding'] / together_s:.1f}x; the "
          f"largest difference between the two ways' likelihood changes {worst:.1e}, between their BLEUs "
          f"{bleu_worst:.2f}")


if __name__ == "__main__":
    main()
