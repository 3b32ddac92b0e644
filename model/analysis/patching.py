"""Which heads carry the difference between sentences and their counterfactuals, over many pairs: each pair
patched head by head (model/explain/patching.py) at the step that writes a word, and the mean effect per head.

    python -m model.analysis.patching --checkpoint checkpoints/en-de --pairs pairs.tsv
    python -m model.analysis.patching --checkpoint checkpoints/en-de --gender 100 [--article]

`--pairs`: a TSV of source, counterfactual, token, contrast (the two target words, spelled as the model writes
them); `--gender N`: pairs made from the first N Multi30k test sentences with a man↔woman, boy↔girl, men↔women
swap, the German nouns of the original and the swapped word as token and contrast; `--article`: at the step
before, the noun's article, against the article of the other gender. Prints the mean effect per head, with its
standard deviation over the pairs. Under torchrun each process patches a block of the pairs, and the first
prints the whole.

With --gender it needs the `studies` extra (pip install "attention-inspector[studies]"): datasets reads Multi30k
test. --pairs does not.
"""

from __future__ import annotations

import argparse
import csv
import re
import sys

import numpy as np
import torch

from attention_inspector.model.explain.patching import Patching
from attention_inspector.model.extras import DATA, require
from attention_inspector.model.keys import KINDS, head_name
from attention_inspector.model.nets.devices import add_device_argument, chosen_device, refuse_missing_device
from attention_inspector.model.serving.checkpoint import load_checkpoint
from attention_inspector.model.training import distributed
from attention_inspector.model.training.data import load_pairs
from attention_inspector.model.training.evaluate import DEFAULT_DATA

# Multi30k's English words of one gender and their swap, with the German article each takes in the nominative
# (what an en-de model writes first for "A man ..." / "The woman ..."): the token and the contrast of the study.
GENDER_SWAPS = {"man": ("woman", "mann", "frau"), "woman": ("man", "frau", "mann"),
                "boy": ("girl", "junge", "mädchen"), "girl": ("boy", "mädchen", "junge"),
                "men": ("women", "männer", "frauen"), "women": ("men", "frauen", "männer")}


def gender_pairs(sentences: list[str], count: int) -> list[tuple[str, str, str, str]]:
    """(source, counterfactual, token, contrast) from the first sentences with exactly one word of `GENDER_SWAPS`:
    that word swapped, and the German noun of each as the token and its contrast."""
    pattern = re.compile(r"\b(" + "|".join(GENDER_SWAPS) + r")\b", flags=re.IGNORECASE)
    pairs = []
    for sentence in sentences:
        found = pattern.findall(sentence)
        if len(found) != 1:
            continue
        other, token, contrast = GENDER_SWAPS[found[0].lower()]
        swapped = pattern.sub(lambda match: other.capitalize() if match[0][0].isupper() else other, sentence)
        pairs.append((sentence, swapped, token, contrast))
        if len(pairs) == count:
            break
    return pairs


# A German article and the one of the other gender in the same case (the article study's contrast).
ARTICLE_SWAPS = {"ein": "eine", "eine": "ein", "der": "die", "die": "der", "einen": "eine", "einem": "einer",
                 "einer": "einem", "dem": "der"}


def study(translator, pairs: list[tuple[str, str, str, str]], article: bool = False, estimate: bool = False
          ) -> tuple[list[Patching], list[str]]:
    """Each pair patched at the step where its greedy translation writes `token`, scored against `contrast`; with
    `article`, at the step before, where the translation writes that word's article, scored against the article of
    the other gender (`ARTICLE_SWAPS`). Pairs whose translation does not write them, or whose contrast is no single
    token of the model's, are left out, and said. With `estimate`, attribution patching's estimates in place of
    the patched runs. The results, and what was left out."""
    results, left_out = [], []
    for source, counterfactual, token, contrast in pairs:
        traced = translator.trace(source)
        written = [t.lower() for t in traced.target_tokens]
        step = written.index(token.lower()) if token.lower() in written else None
        if article and step:
            step, contrast = step - 1, ARTICLE_SWAPS.get(written[step - 1])
        if step is None or (article and contrast is None) or contrast not in translator.tgt_vocab.stoi:
            left_out.append(f"{source!r}: its translation has no {token!r}" if step is None else
                            f"{source!r}: no article before {token!r}" if contrast is None else
                            f"{contrast!r} is not one token of the model's")
            continue
        results.append(translator.patching(source, counterfactual, traced.target_tokens, step, contrast=contrast,
                                           estimate=estimate))
    return results, left_out


def read_pairs(path: str) -> list[tuple[str, str, str, str]]:
    """The rows of a TSV file: source, counterfactual, token, contrast."""
    with open(path, encoding="utf-8", newline="") as file:
        rows = [row for row in csv.reader(file, delimiter="\t") if row and not row[0].startswith("#")]
    bad = [i + 1 for i, row in enumerate(rows) if len(row) != 4]
    if bad:
        raise ValueError(f"{path}: rows {bad[:5]} do not have four columns (source, counterfactual, token, contrast)")
    return [tuple(row) for row in rows]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True)
    given = parser.add_mutually_exclusive_group(required=True)
    given.add_argument("--pairs", help="TSV: source, counterfactual, token, contrast")
    given.add_argument("--gender", type=int, metavar="N",
                       help="N pairs from Multi30k test with a man/woman, boy/girl, men/women swap (en-de)")
    parser.add_argument("--data", default=DEFAULT_DATA, help="Multi30k folder or hub id (--gender)")
    parser.add_argument("--top", type=int, default=10, help="heads to print")
    parser.add_argument("--article", action="store_true",
                        help="patch at the article before the token (German: ein/eine, der/die), scored against the "
                             "article of the other gender")
    parser.add_argument("--estimate", action="store_true",
                        help="attribution patching's estimates (two passes and a backward one per pair) in place of "
                             "a patched run per head (docs/explanations.md gives their measured error)")
    add_device_argument(parser)
    args = parser.parse_args(argv)
    require(*(() if args.pairs else DATA))  # the `studies` extra, asked before any work
    torch.set_num_threads(max(1, torch.get_num_threads()))
    refuse_missing_device(args.device)
    translator = load_checkpoint(args.checkpoint)
    try:
        if args.pairs:
            pairs = read_pairs(args.pairs)
        else:
            sentences = load_pairs(args.data, "test", translator.src_tokenizer.lang, translator.tgt_tokenizer.lang)
            pairs = gender_pairs(list(sentences["src"]), args.gender)
    except (OSError, ValueError) as error:
        sys.exit(f"error: {error}")
    ranks = distributed.start()
    translator = translator.on(chosen_device(args.device, ranks))
    results, left_out = study(translator, [pairs[i] for i in ranks.block(len(pairs))], args.article, args.estimate)
    results, left_out = ranks.gather(results), ranks.gather(left_out)
    distributed.stop(ranks)
    if not ranks.main:
        return
    for reason in left_out:
        print(f"left out: {reason}", file=sys.stderr)
    if not results:
        sys.exit("no pair could be patched")
    effects = {kind: np.stack([result.effects[kind] for result in results]) for kind in results[0].effects}
    original = np.array([result.original for result in results])
    counterfactual = np.array([result.counterfactual for result in results])
    where = "the article before the token" if args.article else "the token"
    print(f"{len(results)} of {len(pairs)} pairs patched at the step that writes {where}. log p(token) − "
          f"log p(contrast): {original.mean():+.3f} ± {original.std():.3f} for the sentences, "
          f"{counterfactual.mean():+.3f} ± {counterfactual.std():.3f} for the counterfactuals.")
    print(("Estimated by attribution patching (not patched runs): e" if args.estimate else "E") +
          "ach head alone from the counterfactual, the change in it, patched − original (mean ± standard "
          "deviation over the pairs):")
    named = [(head_name(kind, layer, head), stack[:, layer, head]) for kind, stack in effects.items()
             for layer in range(stack.shape[1]) for head in range(stack.shape[2])
             if not np.isnan(stack[:, layer, head]).any()]
    for name, values in sorted(named, key=lambda item: -abs(item[1].mean()))[:args.top]:
        print(f"  {name:<12} {values.mean():+8.3f} ± {values.std():.3f}")
    for kind in KINDS:
        if kind in effects:
            means = np.nanmean(effects[kind], axis=0)
            print(f"{kind}: mean effect per layer (heads summed): "
                  + ", ".join(f"{layer + 1}: {means[layer].sum():+.3f}" for layer in range(means.shape[0])))


if __name__ == "__main__":
    main()
