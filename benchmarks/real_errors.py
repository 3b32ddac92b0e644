"""The shipped models' own translations of real sentences, to be labelled by a reader for the errors the verdict
should find (docs/labelling.md says how), and the labels checked.

    python benchmarks/real_errors.py translate --model en-de --count 200   # writes real_errors/en-de.to-label.jsonl
    python benchmarks/real_errors.py keep --model en-de                    # the labelled parts into en-de.jsonl
    python benchmarks/real_errors.py check --model en-de                   # what real_errors/en-de.jsonl holds

`translate` reads the first COUNT sentences of Multi30k test_2016_flickr in the model's languages and translates
them as the page does (greedy, detokenised and truecased), each source and translation also as spaCy's words
(rule-based, numbered from 0), the reference beside them. Half the sentences go to the tuning half, the rest to the
held-out half, on which nothing is ever tuned (`half`). The reader's labelled copies (real_errors/parts/MODEL.*.jsonl)
are kept by `keep` without Multi30k's own text (the project never holds a copy of the data): a label names its
sentence by line and its words by index, and `labelled` joins them to the data again.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import spacy

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import attention_inspector  # noqa: E402
from attention_inspector.model.training.data import load_pairs  # noqa: E402
from attention_inspector.model.training.evaluate import DEFAULT_DATA  # noqa: E402

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("translate", "keep", "check"))
    parser.add_argument("--model", required=True, help="a shipped checkpoint's name (en-de, de-en)")
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--data", default=DEFAULT_DATA, help="Multi30k folder")
    args = parser.parse_args()
    if args.command == "translate":
        print(f"written {translate(args.model, args.count, args.data)}")
    elif args.command == "keep":
        print(f"written {keep(args.model)}")
    else:
        check(args.model, args.data)


if __name__ == "__main__":
    main()
