"""Word alignments read from cross-attention, and their alignment error rate against a gold standard.

    python -m model.analysis.align --checkpoint checkpoints/reverse --data reverse --split test
    python -m model.analysis.align --checkpoint checkpoints/en-de --split test --gold gold.txt

Each target token is aligned to the source token its cross-attention weighs most (source <eos> excluded), in
two readings: at the step that *outputs* the token ("output", Garg et al., 2019) and at the step where it is
the decoder's *input*, one step later ("input", shift-att, Chen et al., 2020). Every head and every layer's
mean of heads is read on the reference translation (teacher-forced), so a gold alignment of the reference
applies. AER (Och & Ney, 2003) with sure links S ⊆ possible links P and predicted links A:
1 − (|A ∩ S| + |A ∩ P|) / (|A| + |S|). Pharaoh format: per sentence a line of `i-j` pairs (source index i,
target index j, 0-based, over the model's tokens without <eos>); a possible link is written `i?j` or `ipj`.
With `--data reverse` the gold is the exact one of the task: target j ↔ source n − 1 − j. Multi30k has no gold
alignments: without `--gold`, a statistical word aligner trained on the training split and the split itself (IBM
Model 2 with fast_align's diagonal prior, Dyer et al., 2013, run in both directions) gives a silver standard,
its links found in both directions sure and in either direction possible. The last printed line reads
`best AER <value> at <kind.layer.head> (<reading>)`.

Needs the `studies` extra (pip install "attention-inspector[studies]"): datasets reads the split.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np
from tqdm import tqdm

from attention_inspector.model.extras import DATA, require
from attention_inspector.model.keys import OUTPUT, READINGS, head_name  # noqa: F401  (READINGS re-exported)
from attention_inspector.model.serving.checkpoint import load_checkpoint
from attention_inspector.model.serving.translator import Translator
from attention_inspector.model.training import distributed

Links = set[tuple[int, int]]


def read_links(cross: np.ndarray, reading: str) -> Links:
    """Links (source i, target j) from one map of cross-attention (T + 1 steps incl. <eos>, S + 1 keys incl. <eos>)
    over T target tokens and S source tokens: each target token to its most attended source token."""
    steps, keys = cross.shape
    targets, sources = steps - 1, keys - 1
    rows = cross[:targets] if reading == OUTPUT else cross[1:targets + 1]  # input: the step that reads token j
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


def fast_align(sources: list[list[str]], targets: list[list[str]], iterations: int = 5, diagonal: float = 4.0,
               null: float = 0.08) -> list[Links]:
    """Each target word's most probable source word (source index i, target index j) under IBM Model 2 with
    fast_align's diagonal prior (Dyer et al., 2013): p(i | j) ∝ exp(−diagonal · |i/n − j/m|), a `null` share for no
    source word, and translation probabilities t(target word | source word) from EM. Every sentence pair is
    trained on and aligned; a target word best explained by the null word has no link."""
    src_vocab, tgt_vocab = {}, {}
    src_ids = [np.array([src_vocab.setdefault(w, len(src_vocab)) for w in s], dtype=np.int64) for s in sources]
    tgt_ids = [np.array([tgt_vocab.setdefault(w, len(tgt_vocab)) for w in t], dtype=np.int64) for t in targets]
    null_id = len(src_vocab)
    # One entry per (target word, candidate source word incl. the null word), sentence by sentence, flattened:
    # EM is then a few whole-corpus array operations per iteration.
    pair_keys, priors, groups, offsets = [], [], [], [0]
    group = 0
    for src, tgt in zip(src_ids, tgt_ids):
        n, m = len(src), len(tgt)
        if m == 0:
            offsets.append(offsets[-1])
            continue
        candidates = np.append(src, null_id)  # (n + 1,)
        closeness = np.exp(-diagonal * np.abs((np.arange(n)[None] + 0.5) / max(n, 1)
                                             - (np.arange(m)[:, None] + 0.5) / m))  # (m, n)
        prior = np.concatenate([(1 - null) * closeness / closeness.sum(1, keepdims=True).clip(1e-12),
                                np.full((m, 1), null)], axis=1)  # (m, n + 1)
        pair_keys.append((candidates[None] * len(tgt_vocab) + tgt[:, None]).ravel())
        priors.append(prior.ravel())
        groups.append(np.repeat(np.arange(group, group + m), n + 1))
        group += m
        offsets.append(offsets[-1] + m * (n + 1))
    if not pair_keys:
        return [set() for _ in sources]
    keys, prior, group_of = np.concatenate(pair_keys), np.concatenate(priors), np.concatenate(groups)
    unique, pair_of = np.unique(keys, return_inverse=True)
    source_of_pair = unique // len(tgt_vocab)
    t = np.ones(len(unique))  # t(f | e), uniform to start
    for _ in range(iterations):
        score = t[pair_of] * prior
        posterior = score / np.bincount(group_of, score, minlength=group)[group_of]
        counts = np.bincount(pair_of, posterior, minlength=len(unique))
        t = counts / np.bincount(source_of_pair, counts)[source_of_pair]
    score = t[pair_of] * prior
    links = []
    for k, (src, tgt) in enumerate(zip(src_ids, tgt_ids)):
        best = score[offsets[k]:offsets[k + 1]].reshape(len(tgt), len(src) + 1).argmax(1) if len(tgt) else []
        links.append({(int(i), j) for j, i in enumerate(best) if i < len(src)})
    return links


def silver_alignments(sources: list[list[str]], targets: list[list[str]]) -> tuple[list[Links], list[Links]]:
    """(sure, possible) links of a statistical aligner run both ways: sure where both directions agree, possible
    where either finds the link."""
    forward = fast_align(sources, targets)
    backward = [{(i, j) for j, i in links} for links in fast_align(targets, sources)]
    return [f & b for f, b in zip(forward, backward)], [f | b for f, b in zip(forward, backward)]


def reference_alignments(translator: Translator, data: str | None, split: str, sources: list[list[str]],
                         targets: list[list[str]], gold: str | None = None) -> tuple[list[Links], list[Links], str]:
    """(sure, possible) links of a split's sentences to measure cross-attention against, and what they are: the
    `gold` file's (Pharaoh format), the reversal task's exact alignment, or else a statistical aligner's (trained
    on the training split of `data` and this split's sentences, as unsupervised aligners are; on these sentences
    alone where `data` is None: a user's own); ValueError if unusable."""
    # datasets: for the commands only, not for the app
    from attention_inspector.model.training.data import REVERSE, load_pairs

    if gold:
        lines = Path(gold).read_text(encoding="utf-8").splitlines()[:len(sources)]
        if len(lines) < len(sources):
            raise ValueError(f"{gold} has {len(lines)} lines for {len(sources)} sentences")
        sure, possible = zip(*(parse_pharaoh(line) for line in lines))
        return list(sure), list(possible), f"the gold alignments of {gold}"
    if data == REVERSE:
        exact = reversal_gold([len(t) for t in targets])
        return exact, exact, "the reversal task's exact alignment"
    train = {"src": [], "tgt": []} if data is None else \
        load_pairs(data, "train", translator.src_tokenizer.lang, translator.tgt_tokenizer.lang)
    corpus_sources = sources + translator.src_tokenizer.tokenize_all(train["src"])
    corpus_targets = targets + translator.tgt_tokenizer.tokenize_all(train["tgt"])
    sure, possible = silver_alignments(corpus_sources, corpus_targets)
    trained_on = "these sentences alone" if data is None else "train + this split"
    return (sure[:len(sources)], possible[:len(sources)],
            "a statistical aligner's alignments (no gold: IBM Model 2 with fast_align's diagonal prior, both "
            f"directions, trained on {trained_on}; sure where both agree, possible where either links)")


def cross_attention(translator: Translator, source: list[str], target: list[str]) -> np.ndarray:
    """Every cross-attention map (L, H, T + 1, S + 1) of the reference `target` read teacher-forced."""
    return translator.reference_attention(source, target).cross[:, 0].float().cpu().numpy()


def pharaoh_lines(cross: np.ndarray, reading: str) -> dict[str, str]:
    """One sentence's alignments in Pharaoh format for every head and layer mean of its cross-attention
    (L, H, T + 1, S + 1), read one way."""
    return {name: pharaoh(links[0]) for (name, how), links in head_alignments([cross]).items() if how == reading}


def head_alignments(maps: list[np.ndarray], shape: tuple[int, int] | None = None) -> dict[tuple[str, str], list[Links]]:
    """For every head (kind.layer.head) and layer mean (cross.layer.mean) and both readings, each sentence's links
    (`shape`: the cross-attention's layers and heads, when `maps` may be empty)."""
    layers, heads = shape or maps[0].shape[:2]
    readers = {**{head_name("cross", layer, head): (lambda m, l=layer, h=head: m[l, h])
                  for layer in range(layers) for head in range(heads)},
               **{f"cross.{layer + 1}.mean": (lambda m, l=layer: m[l].mean(0)) for layer in range(layers)}}
    return {(name, reading): [read_links(read(m), reading) for m in maps]
            for name, read in readers.items() for reading in READINGS}


def main(argv: list[str] | None = None) -> None:
    # datasets: for the command only, not for the app's readings
    from attention_inspector.model.training.data import REVERSE, load_pairs
    from attention_inspector.model.training.evaluate import DEFAULT_DATA

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--data", default=DEFAULT_DATA, help=f"Multi30k folder or hub id, or {REVERSE}")
    parser.add_argument("--split", default="test", choices=("train", "val", "test"))
    parser.add_argument("--gold", help="gold alignments in Pharaoh format, a line per sentence of the split")
    parser.add_argument("--limit", type=int, help="only the first N sentences")
    parser.add_argument("--out", help="write the best reading's alignments here, in Pharaoh format")
    args = parser.parse_args(argv)
    require(*DATA)  # the `studies` extra, asked before any work
    translator = load_checkpoint(args.checkpoint)
    pairs = load_pairs(args.data, args.split, translator.src_tokenizer.lang, translator.tgt_tokenizer.lang)
    if args.limit:
        pairs = pairs.select(range(min(args.limit, len(pairs))))
    sources = translator.src_tokenizer.tokenize_all(pairs["src"])
    targets = translator.tgt_tokenizer.tokenize_all(pairs["tgt"])
    try:
        sure, possible, reference = reference_alignments(translator, args.data, args.split, sources, targets, args.gold)
    except ValueError as error:
        sys.exit(str(error))
    print(f"reference: {reference}", file=sys.stderr)
    # Under torchrun each process reads a block of the split; the links are gathered in the split's order.
    ranks = distributed.start()
    maps = [cross_attention(translator, sources[i], targets[i]) for i in tqdm(
        ranks.block(len(sources)), desc="attention", file=sys.stderr, disable=not ranks.main)]
    alignments = {key: ranks.gather(links)
                  for key, links in head_alignments(maps, translator.model.heads()["cross"]).items()}
    distributed.stop(ranks)
    if not ranks.main:
        return
    scores = {key: alignment_error_rate(links, list(sure), list(possible)) for key, links in alignments.items()}
    print(f"{len(sources)} sentences of {args.split}; AER per head and layer mean against {reference} (lower is "
          "better)")
    print(f"{'head':<14} " + " ".join(f"{reading:>8}" for reading in READINGS))
    for name in dict.fromkeys(name for name, _ in scores):
        print(f"{name:<14} " + " ".join(f"{scores[name, reading]:>8.3f}" for reading in READINGS))
    (name, reading), best = min(scores.items(), key=lambda item: item[1])
    if args.out:
        Path(args.out).write_text("\n".join(pharaoh(links) for links in alignments[name, reading]) + "\n")
    print(f"best AER {best:.3f} at {name} ({reading})")


if __name__ == "__main__":
    main()
