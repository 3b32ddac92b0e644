"""The shipped models' own translations of real sentences, to be labelled by a reader for the errors the verdict
should find (docs/labelling.md says how), and the labels checked.

    python benchmarks/real_errors.py translate --model en-de --count 200   # writes real_errors/en-de.to-label.jsonl
    python benchmarks/real_errors.py keep --model en-de                    # the labelled parts into en-de.jsonl
    python benchmarks/real_errors.py check --model en-de                   # what real_errors/en-de.jsonl holds
    python benchmarks/real_errors.py signals --model en-de                 # the candidate signals on the tuning half

`translate` reads the first COUNT sentences of Multi30k test_2016_flickr in the model's languages and translates
them as the page does (greedy, detokenised and truecased), each source and translation also as spaCy's words
(rule-based, numbered from 0), the reference beside them. Half the sentences go to the tuning half, the rest to the
held-out half, on which nothing is ever tuned (`half`). The reader's labelled copies (real_errors/parts/MODEL.*.jsonl)
are kept by `keep` without Multi30k's own text (the project never holds a copy of the data): a label names its
sentence by line and its words by index, and `labelled` joins them to the data again.

`signals` measures how well each candidate signal ranks a source's content words (spaCy's stop words and words
without a letter or digit left out) for being left out, against the reader's labels of one half (the tuning half
unless --half says otherwise): ROC-AUC, the precision where recall first reaches 0.6, and the best F1. The signals:
the reverse model's surprisal of each source word given the translation (`{tgt}-{src}` reads the translation and
scores the source: the sum over the word's pieces, and its worst piece), that surprisal less the word's given a
translation of "." (how much the translation tells of the word), and the translating model's own contrastive
conditioning (the verdict's signal today). Nothing is calibrated here.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import numpy as np
import spacy
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from attention_inspector.model.training.data import load_pairs  # noqa: E402
from attention_inspector.model.training.evaluate import DEFAULT_DATA  # noqa: E402

import attention_inspector  # noqa: E402

FOLDER = ROOT / "benchmarks" / "real_errors"
HALVES = ("tune", "held-out")
SEVERITIES = ("none", "minor", "major", "critical")


def half(line: int) -> str:
    """The half sentence `line` belongs to. Multi30k's test captions alternate short and long (9.4 and 14.0 words
    on average over the first 200, even and odd lines), so each pair of lines 2k, 2k+1 is split between the halves,
    which of the two goes to tuning drawn at random (seed 0): both halves have the same mix."""
    draws = random.Random(0)
    flips = [draws.random() < 0.5 for _ in range(line // 2 + 1)]
    return HALVES[(line + flips[line // 2]) % 2]


def words(nlp, text: str) -> list[str]:
    """`text` as spaCy's rule-based tokenizer splits it into words (spaces dropped)."""
    return [token.text for token in nlp(text) if not token.is_space]


def translate(model: str, count: int, data: str) -> Path:
    """The first `count` test sentences and the model's greedy translations, to label; the file written."""
    translator = attention_inspector.load(model).translator
    src, tgt = translator.src_tokenizer.lang, translator.tgt_tokenizer.lang
    pairs = load_pairs(data, "test", src, tgt).select(range(count))
    sources, references = list(pairs["src"]), list(pairs["tgt"])
    hypotheses = translator.translate_tokens(translator.src_tokenizer.tokenize_all(sources), beam_size=1)
    source_nlp, target_nlp = spacy.blank(src), spacy.blank(tgt)
    out = FOLDER / f"{model}.to-label.jsonl"
    with out.open("w", encoding="utf-8") as file:
        for line, (source, hypothesis, reference) in enumerate(zip(sources, hypotheses, references)):
            translation = translator.to_text(hypothesis)
            file.write(json.dumps({
                "id": f"{model}/test/{line}", "half": half(line), "source": source,
                "source_words": words(source_nlp, source), "translation": translation,
                "translation_words": words(target_nlp, translation), "reference": reference,
            }, ensure_ascii=False) + "\n")
    return out


DATA_FIELDS = ("source", "source_words", "reference")  # Multi30k's own text, never kept in the project


def keep(model: str) -> Path:
    """The reader's labelled parts of `model`'s sentences, in order, kept as MODEL.jsonl without Multi30k's text (the
    source's word count kept, to check that `labelled` joins each label to the words it was made on)."""
    rows = [json.loads(line) for part in sorted((FOLDER / "parts").glob(f"{model}.*.jsonl"))
            for line in part.read_text(encoding="utf-8").splitlines()]
    ids = [row["id"] for row in rows]
    if ids != [f"{model}/test/{line}" for line in range(len(rows))]:
        sys.exit(f"the labelled parts of {model} are not its sentences 0-{len(rows) - 1}, each once, in order")
    out = FOLDER / f"{model}.jsonl"
    with out.open("w", encoding="utf-8") as file:
        for row in rows:
            line = int(row["id"].split("/")[-1])
            kept = {"source_word_count": len(row["source_words"])} | {
                key: value for key, value in row.items() if key not in DATA_FIELDS} | {"half": half(line)}
            file.write(json.dumps(kept, ensure_ascii=False) + "\n")
    return out


def labelled(model: str, data: str = DEFAULT_DATA) -> list[dict]:
    """MODEL.jsonl's labels, each with its sentence's source, source words and reference read from Multi30k."""
    rows = [json.loads(line) for line in (FOLDER / f"{model}.jsonl").read_text(encoding="utf-8").splitlines()]
    src, tgt = model.split("-")
    pairs = load_pairs(data, "test", src, tgt).select(range(len(rows)))
    nlp = spacy.blank(src)
    for row, source, reference in zip(rows, pairs["src"], pairs["tgt"]):
        row.update(source=source, source_words=words(nlp, source), reference=reference)
        if len(row["source_words"]) != row.pop("source_word_count"):
            sys.exit(f"{row['id']}: its source is not the one labelled ({data})")
    return rows


def check(model: str, data: str = DEFAULT_DATA) -> list[dict]:
    """The labels read and checked against docs/labelling.md's format; what they hold, printed per half."""
    rows = labelled(model, data)
    for row in rows:
        spans = [(error["words"], "source_words") for error in row["omitted"]] + \
            [(error["content_words"], "source_words") for error in row["omitted"]] + \
            [(error["source"], "source_words") for error in row["mistranslated"]] + \
            [(error["translation"], "translation_words") for error in row["mistranslated"]] + \
            [(error["words"], "translation_words") for error in row["added"]]
        for indices, side in spans:
            if not all(0 <= i < len(row[side]) for i in indices):
                sys.exit(f"{row['id']}: words {indices} are not all in {side}")
        if row["severity"] not in SEVERITIES:
            sys.exit(f"{row['id']}: severity {row['severity']!r} is none of {SEVERITIES}")
    for half in HALVES:
        part = [row for row in rows if row["half"] == half]
        lost = [row for row in part if any(error["content_words"] for error in row["omitted"])]
        print(f"{model} {half}: {len(part)} sentences; {len(lost)} lost content "
              f"({sum(len(e['content_words']) for r in part for e in r['omitted'])} content words omitted); "
              f"{sum(any(e['content'] for e in r['added']) for r in part)} with made-up words; "
              f"{sum(bool(r['mistranslated']) for r in part)} with mistranslations; severity "
              + ", ".join(f"{s} {sum(r['severity'] == s for r in part)}" for s in SEVERITIES))
    return rows


def content_words(model: str) -> set[str]:
    """The source language's stop words (spaCy's rule-based lists): the words not counted as content."""
    return spacy.blank(model.split("-")[0]).Defaults.stop_words


def word_signals(row: dict, translator, evaluator) -> dict[str, np.ndarray] | None:
    """Per source word of a labelled `row`, each signal (higher: more likely left out); None where the models'
    words are not the labels' words."""
    from attention_inspector.model.text.words import scheme
    from attention_inspector.model.text.words import words as joined

    pieces = evaluator.tgt_tokenizer(row["source"])
    given, empty = evaluator.score(row["translation"], pieces), evaluator.score(".", pieces)
    labels, spans = joined(given.target_tokens, scheme(evaluator.tgt_tokenizer))
    omissions = translator.detachment(row["source"], translator.trace(row["source"]).target_tokens,
                                      with_omissions=True).omissions
    if len(labels) != len(row["source_words"]) or len(omissions.words) != len(row["source_words"]):
        return None
    surprisal = np.array([-given.log_probabilities[list(span)].sum() for span in spans])
    return {"reverse surprisal": surprisal,
            "reverse worst piece": np.array([-given.log_probabilities[list(span)].min() for span in spans]),
            "reverse surprisal less empty": surprisal + np.array([empty.log_probabilities[list(span)].sum()
                                                                  for span in spans]),
            "own contrastive": np.nan_to_num(omissions.contrastive, nan=-np.inf)}


def ranked(labels: np.ndarray, scores: np.ndarray, recall: float = 0.6) -> dict[str, float]:
    """ROC-AUC (ties counted half), the precision where recall first reaches `recall`, and the best F1, of `scores`
    ranking the words labelled True first."""
    positive, negative = scores[labels], scores[~labels]
    auc = ((positive[:, None] > negative[None]).sum() + 0.5 * (positive[:, None] == negative[None]).sum()) / (
        len(positive) * len(negative))
    found = np.cumsum(labels[np.argsort(-scores, kind="stable")])
    precision, recalled = found / np.arange(1, len(scores) + 1), found / labels.sum()
    f1 = 2 * precision * recalled / np.maximum(precision + recalled, 1e-12)
    return {"auc": auc, f"precision_at_recall_{recall}": precision[np.argmax(recalled >= recall)],
            "best_f1": f1.max()}


def signals(model: str, half: str, data: str = DEFAULT_DATA) -> dict[str, dict[str, float]]:
    """Each signal's ranking of `half`'s source content words for being left out (`ranked`), printed."""
    src, tgt = model.split("-")
    translator, evaluator = (attention_inspector.load(name).translator for name in (model, f"{tgt}-{src}"))
    stop = content_words(model)
    labels, scores, unread = [], {}, 0
    for row in (row for row in labelled(model, data) if row["half"] == half):
        measured = word_signals(row, translator, evaluator)
        if measured is None:
            unread += 1
            continue
        left_out = {i for error in row["omitted"] for i in error["content_words"]}
        kept = [i for i, word in enumerate(row["source_words"])
                if any(c.isalnum() for c in word) and word.lower() not in stop]
        labels += [i in left_out for i in kept]
        for name, values in measured.items():
            scores.setdefault(name, []).extend(values[kept])
    labels = np.array(labels)
    print(f"{model} {half}: {len(labels)} content words, {labels.sum()} left out; {unread} sentences whose words "
          "the models split otherwise than the labels, not scored")
    results = {name: ranked(labels, np.array(values)) for name, values in scores.items()}
    for name, result in results.items():
        print(f"  {name:<30} " + "  ".join(f"{key} {value:.3f}" for key, value in result.items()))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("translate", "keep", "check", "signals"))
    parser.add_argument("--model", required=True, help="a shipped checkpoint's name (en-de, de-en)")
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--data", default=DEFAULT_DATA, help="Multi30k folder")
    parser.add_argument("--half", default="tune", choices=HALVES,
                        help="signals: the half measured (the held-out half only once a detector is fixed)")
    args = parser.parse_args()
    if args.command == "translate":
        print(f"written {translate(args.model, args.count, args.data)}")
    elif args.command == "keep":
        print(f"written {keep(args.model)}")
    elif args.command == "signals":
        torch.set_num_threads(1)
        signals(args.model, args.half, args.data)
    else:
        check(args.model, args.data)


if __name__ == "__main__":
    main()
