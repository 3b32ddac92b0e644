"""Word alignments read from cross-attention, and their alignment error rate against a gold standard.

    python -m model.align --checkpoint checkpoints/reverse --data reverse --split test
    python -m model.align --checkpoint checkpoints/en-de --split test --gold gold.txt

Each target token is aligned to the source token its cross-attention weighs most (source <eos> excluded), in
two readings: at the step that *outputs* the token ("output", Garg et al., 2019) and at the step where it is
the decoder's *input*, one step later ("input", shift-att, Chen et al., 2020). Every head and every layer's
mean of heads is read on the reference translation (teacher-forced), so a gold alignment of the reference
applies. AER (Och & Ney, 2003) with sure links S ⊆ possible links P and predicted links A:
1 − (|A ∩ S| + |A ∩ P|) / (|A| + |S|). Pharaoh format: per sentence a line of `i-j` pairs (source index i,
target index j, 0-based, over the model's tokens without <eos>); a possible link is written `i?j` or `ipj`.
With `--data reverse` the gold is the exact one of the task: target j ↔ source n − 1 − j. The last printed
line reads `best AER <value> at <kind.layer.head> (<reading>)`.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np
from tqdm import tqdm

from model.checkpoint import load_checkpoint
from model.seq2seq import head_name
from model.translator import Translator

READINGS = ("output", "input")
Links = set[tuple[int, int]]


def read_links(cross: np.ndarray, reading: str) -> Links:
    """Links (source i, target j) from one map of cross-attention (T + 1 steps incl. <eos>, S + 1 keys incl. <eos>)
    over T target tokens and S source tokens: each target token to its most attended source token."""
    steps, keys = cross.shape
    targets, sources = steps - 1, keys - 1
    rows = cross[:targets] if reading == "output" else cross[1:targets + 1]  # input: the step that reads token j
    return {(int(np.argmax(row[:sources])), j) for j, row in enumerate(rows)}


def pharaoh(links: Links) -> str:
    """Links as a Pharaoh line: `i-j` pairs, sorted by target then source."""
    return " ".join(f"{i}-{j}" for i, j in sorted(links, key=lambda link: (link[1], link[0])))


def parse_pharaoh(line: str) -> tuple[Links, Links]:
    """(sure, possible) links of a Pharaoh line; the possible links include the sure ones."""
    sure, possible = set(), set()
    for pair in line.split():
        match = re.fullmatch(r"(\d+)([-?p])(\d+)", pair)
        if match is None:
            raise ValueError(f"{pair!r} is not an alignment link (i-j, or i?j / ipj for a possible one)")
        link = (int(match.group(1)), int(match.group(3)))
        possible.add(link)
        if match.group(2) == "-":
            sure.add(link)
    return sure, possible


def alignment_error_rate(predicted: list[Links], sure: list[Links], possible: list[Links]) -> float:
    """AER over a corpus: 1 − (|A ∩ S| + |A ∩ P|) / (|A| + |S|), each count summed over sentences."""
    hits = sum(len(a & s) + len(a & p) for a, s, p in zip(predicted, sure, possible))
    total = sum(len(a) + len(s) for a, s in zip(predicted, sure))
    return 1.0 - hits / total if total else 0.0


def reversal_gold(lengths: list[int]) -> list[Links]:
    """The exact alignment of the reversal task: target j copies source n − 1 − j."""
    return [{(n - 1 - j, j) for j in range(n)} for n in lengths]


def cross_attention(translator: Translator, source: list[str], target: list[str]) -> np.ndarray:
    """Every cross-attention map (L, H, T + 1, S + 1) of the reference `target` read teacher-forced."""
    return translator.reference_attention(source, target).cross[:, 0].float().numpy()


def pharaoh_lines(cross: np.ndarray, reading: str) -> dict[str, str]:
    """One sentence's alignments in Pharaoh format for every head and layer mean of its cross-attention
    (L, H, T + 1, S + 1), read one way."""
    return {name: pharaoh(links[0]) for (name, how), links in head_alignments([cross]).items() if how == reading}


def head_alignments(maps: list[np.ndarray]) -> dict[tuple[str, str], list[Links]]:
    """For every head (kind.layer.head) and layer mean (cross.layer.mean) and both readings, each sentence's links."""
    layers, heads = maps[0].shape[:2]
    readers = {**{head_name("cross", layer, head): (lambda m, l=layer, h=head: m[l, h])
                  for layer in range(layers) for head in range(heads)},
               **{f"cross.{layer + 1}.mean": (lambda m, l=layer: m[l].mean(0)) for layer in range(layers)}}
    return {(name, reading): [read_links(read(m), reading) for m in maps]
            for name, read in readers.items() for reading in READINGS}


def main(argv: list[str] | None = None) -> None:
    from model.data import REVERSE, load_pairs  # datasets: for the command only, not for the app's readings
    from model.evaluate import DEFAULT_DATA

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--data", default=DEFAULT_DATA, help=f"Multi30k folder or hub id, or {REVERSE}")
    parser.add_argument("--split", default="test", choices=("train", "val", "test"))
    parser.add_argument("--gold", help="gold alignments in Pharaoh format, a line per sentence of the split")
    parser.add_argument("--limit", type=int, help="only the first N sentences")
    parser.add_argument("--out", help="write the best reading's alignments here, in Pharaoh format")
    args = parser.parse_args(argv)
    translator = load_checkpoint(args.checkpoint)
    pairs = load_pairs(args.data, args.split, translator.src_tokenizer.lang, translator.tgt_tokenizer.lang)
    if args.limit:
        pairs = pairs.select(range(min(args.limit, len(pairs))))
    sources = translator.src_tokenizer.tokenize_all(pairs["src"])
    targets = translator.tgt_tokenizer.tokenize_all(pairs["tgt"])
    if args.gold:
        lines = Path(args.gold).read_text(encoding="utf-8").splitlines()[:len(sources)]
        if len(lines) < len(sources):
            sys.exit(f"{args.gold} has {len(lines)} lines for {len(sources)} sentences")
        sure, possible = zip(*(parse_pharaoh(line) for line in lines))
    elif args.data == REVERSE:
        sure = possible = reversal_gold([len(t) for t in targets])
    else:
        sys.exit("give --gold (Multi30k has no gold alignments), or use --data reverse")
    maps = [cross_attention(translator, s, t) for s, t in tqdm(list(zip(sources, targets)), desc="attention",
                                                                file=sys.stderr)]
    scores = {key: alignment_error_rate(links, list(sure), list(possible))
              for key, links in head_alignments(maps).items()}
    print(f"{len(sources)} sentences of {args.split}; AER per head and layer mean (lower is better)")
    print(f"{'head':<14} " + " ".join(f"{reading:>8}" for reading in READINGS))
    for name in dict.fromkeys(name for name, _ in scores):
        print(f"{name:<14} " + " ".join(f"{scores[name, reading]:>8.3f}" for reading in READINGS))
    (name, reading), best = min(scores.items(), key=lambda item: item[1])
    if args.out:
        Path(args.out).write_text("\n".join(pharaoh(links) for links in head_alignments(maps)[name, reading]) + "\n")
    print(f"best AER {best:.3f} at {name} ({reading})")


if __name__ == "__main__":
    main()
