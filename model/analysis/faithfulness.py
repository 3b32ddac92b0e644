"""Which explanation to trust over a whole split: every word of the first n sentences, each explanation method's
mean comprehensiveness and sufficiency at each k, and how far the methods' rankings agree (model/explain/
faithfulness.py has the measures).

    python -m model.analysis.faithfulness --checkpoint checkpoints/en-de --split val --sentences 500

Under torchrun each process measures a block of the sentences, and the first prints and writes the whole.

Needs the `studies` extra (pip install "attention-inspector[studies]"): datasets reads the split.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
from tqdm import tqdm

from attention_inspector.model.explain.faithfulness import KS, StepFaithfulness, k_label, sentence_faithfulness
from attention_inspector.model.explain.head_stats import best_aligning_head
from attention_inspector.model.extras import DATA, require
from attention_inspector.model.nets.devices import add_device_argument, chosen_device, refuse_missing_device
from attention_inspector.model.serving.checkpoint import load_checkpoint
from attention_inspector.model.serving.translator import InputError
from attention_inspector.model.training import distributed
from attention_inspector.model.training.data import load_pairs
from attention_inspector.model.training.evaluate import DEFAULT_DATA


def summary(results: list[StepFaithfulness]) -> dict:
    """Each method's mean comprehensiveness and sufficiency at each k, their means over k (ERASER's AOPC-style
    aggregate), and the mean rank correlation between every two methods."""
    methods = list(results[0].scores)
    table = {}
    for method in methods:
        comprehensive = np.mean([r.comprehensiveness[method] for r in results], axis=0)
        sufficient = np.mean([r.sufficiency[method] for r in results], axis=0)
        table[method] = {"comprehensiveness": dict(zip(map(k_label, KS), comprehensive.round(4).tolist())),
                         "sufficiency": dict(zip(map(k_label, KS), sufficient.round(4).tolist())),
                         "comprehensiveness_mean": round(float(comprehensive.mean()), 4),
                         "sufficiency_mean": round(float(sufficient.mean()), 4)}
    pairs = [r.rank_correlation() for r in results]
    correlation = {f"{a}/{b}": round(float(np.nanmean([p[(a, b)] for p in pairs])), 3) for a, b in pairs[0]}
    return {"words": len(results), "methods": table, "rank_correlation": correlation}


def print_table(result: dict) -> None:
    ks = list(map(k_label, KS))
    print(f"{result['words']:,} words; comprehensiveness (higher: more faithful) and sufficiency (lower: more "
          "faithful), mean change in the word's log-probability")
    header = f"{'method':22s}" + "".join(f"{'comp ' + k:>9s}" for k in ks) + f"{'mean':>8s}" + \
        "".join(f"{'suff ' + k:>9s}" for k in ks) + f"{'mean':>8s}"
    print(header)
    for method, values in result["methods"].items():
        print(f"{method:22s}" + "".join(f"{values['comprehensiveness'][k]:9.3f}" for k in ks)
              + f"{values['comprehensiveness_mean']:8.3f}"
              + "".join(f"{values['sufficiency'][k]:9.3f}" for k in ks) + f"{values['sufficiency_mean']:8.3f}")
    print("rank correlation (Spearman) between methods' source rankings, mean over words:")
    for pair, rho in result["rank_correlation"].items():
        print(f"  {pair:45s} {rho:+.3f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--data", default=DEFAULT_DATA, help="folder of raw Multi30k files or a hub id")
    parser.add_argument("--split", default="val", choices=["val", "test"])
    parser.add_argument("--sentences", "--n", dest="n", type=int, default=500, metavar="N",
                        help="the split's first N sentences (--n: the same; torchrun takes --n as one of its own)")
    parser.add_argument("--steps", type=int, default=32, help="integrated gradients' points")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", help="also write the summary as JSON here")
    add_device_argument(parser)
    args = parser.parse_args(argv)
    require(*DATA)  # the `studies` extra, asked before any work
    if args.threads:
        torch.set_num_threads(args.threads)
    refuse_missing_device(args.device)
    started = time.perf_counter()
    ranks = distributed.start()
    translator = load_checkpoint(args.checkpoint, chosen_device(args.device, ranks))
    model = translator.model
    best_head = best_aligning_head(translator.head_report)
    pairs = load_pairs(args.data, args.split, translator.src_tokenizer.lang, translator.tgt_tokenizer.lang)
    texts = list(pairs["src"])[:args.n]
    results = []
    for text in tqdm([texts[i] for i in ranks.block(len(texts))], desc="faithfulness", unit="sentence",
                     disable=not ranks.main):
        try:
            traced = translator.trace(text)
        except InputError:
            continue
        results += sentence_faithfulness(model, traced.trace.src_ids, traced.trace.token_ids, best_head, args.steps)
    results = ranks.gather(results)
    distributed.stop(ranks)
    if not ranks.main:
        return
    result = summary(results) | {"checkpoint": args.checkpoint, "split": args.split, "sentences": args.n,
                                 "removal": "<unk> in place; <eos> kept",
                                 "best_head": None if best_head is None else f"cross.{best_head[0] + 1}.{best_head[1] + 1}",
                                 "seconds": round(time.perf_counter() - started, 1)}
    print_table(result)
    print(f"{len(results):,} words of {args.n} sentences in {result['seconds']:.0f} s; best head by AER: "
          f"{result['best_head']}")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
