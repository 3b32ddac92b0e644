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
translation of "." (how much the translation tells of the word), the translating model's own contrastive
conditioning and ALTI+ total contribution, and two alignments read from attention: the attention the translation's
steps pay each source word, and how sharply the reverse model attends to one word of the translation as it writes
each source word. Nothing is calibrated here.
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
HALVES = ("tune", "held-out", "fresh")
FRESH_FROM = 200  # lines from here were labelled after the verdict was first fixed: a second held-out set
SEVERITIES = ("none", "minor", "major", "critical")


def half(line: int) -> str:
    """The half sentence `line` belongs to. Multi30k's test captions alternate short and long (9.4 and 14.0 words
    on average over the first 200, even and odd lines), so each pair of lines 2k, 2k+1 is split between the halves,
    which of the two goes to tuning drawn at random (seed 0): both halves have the same mix. Lines from `FRESH_FROM`
    on are "fresh": labelled once the verdict had been calibrated and measured on the first 200, never tuned on."""
    if line >= FRESH_FROM:
        return HALVES[2]
    draws = random.Random(0)
    flips = [draws.random() < 0.5 for _ in range(line // 2 + 1)]
    return HALVES[(line + flips[line // 2]) % 2]


def words(nlp, text: str) -> list[str]:
    """`text` as spaCy's rule-based tokenizer splits it into words (spaces dropped)."""
    return [token.text for token in nlp(text) if not token.is_space]


def translate(model: str, count: int, data: str, start: int = 0) -> Path:
    """`count` test sentences from line `start` and the model's greedy translations, to label; the file written."""
    translator = attention_inspector.load(model).translator
    src, tgt = translator.src_tokenizer.lang, translator.tgt_tokenizer.lang
    pairs = load_pairs(data, "test", src, tgt).select(range(start, start + count))
    sources, references = list(pairs["src"]), list(pairs["tgt"])
    hypotheses = translator.translate_tokens(translator.src_tokenizer.tokenize_all(sources), beam_size=1)
    source_nlp, target_nlp = spacy.blank(src), spacy.blank(tgt)
    out = FOLDER / f"{model}{f'.{start}' * bool(start)}.to-label.jsonl"
    with out.open("w", encoding="utf-8") as file:
        for line, (source, hypothesis, reference) in enumerate(zip(sources, hypotheses, references), start):
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

    from attention_inspector.model.nets.decoding import teacher_forced

    pieces = evaluator.tgt_tokenizer(row["source"])
    given, empty = evaluator.score(row["translation"], pieces), evaluator.score(".", pieces)
    labels, spans = joined(given.target_tokens, scheme(evaluator.tgt_tokenizer))
    traced = translator.trace(row["source"])
    omissions = translator.detachment(row["source"], traced.target_tokens, with_omissions=True).omissions
    if len(labels) != len(row["source_words"]) or len(omissions.words) != len(row["source_words"]):
        return None
    surprisal = np.array([-given.log_probabilities[list(span)].sum() for span in spans])
    # Alignments: how much the translation's steps attend to each source word (the last layer's heads averaged, the
    # <eos> step left out), and how sharply the reverse model, writing each source word, attends to one word of
    # the translation (the mean over its pieces of the largest weight, <eos> left out); low where it was left out.
    covered = traced.trace.cross_attention[-1].mean(0)[:len(traced.target_tokens) - 1]  # (T - 1, S)
    _, reverse = teacher_forced(evaluator.model, evaluator.encode_source(evaluator.source_tokens(row["translation"])),
                                evaluator.tgt_vocab.encode(given.target_tokens), need_weights=True)
    peaks = reverse.cross[-1, 0].mean(0).float().cpu().numpy()[:, :-1].max(-1)  # (source pieces,)
    return {"reverse surprisal": surprisal,
            "reverse worst piece": np.array([-given.log_probabilities[list(span)].min() for span in spans]),
            "reverse surprisal less empty": surprisal + np.array([empty.log_probabilities[list(span)].sum()
                                                                  for span in spans]),
            "own contrastive": np.nan_to_num(omissions.contrastive, nan=-np.inf),
            "own ALTI+ contribution, low": -omissions.contributions,
            "own attention received, low": -np.array([covered[:, list(span)].sum() for span in omissions.spans]),
            "reverse attention peak, low": -np.array([peaks[list(span)].mean() for span in spans])}


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


def verdicts(model: str, half: str, data: str = DEFAULT_DATA, alone: bool = False) -> list[tuple[dict, object]]:
    """Each labelled sentence of `half` with the page's verdict on it (model/explain/verdict.py, its evaluator the
    shipped model of the other direction; `alone`: none, the model's own contrastive conditioning by its own
    threshold, as a model without a reverse direction is judged): the translation as the page makes it, its words as
    the page shows them; a sentence whose source the model splits into other words than the labels' is left out
    (counted)."""
    from attention_inspector.model.api.services import Services

    src, tgt = model.split("-")
    services = Services({name: attention_inspector.load(name).translator
                         for name in (model, *[f"{tgt}-{src}"] * (not alone))})
    translator, judged, unread = services.translators[model], [], 0
    for row in (row for row in labelled(model, data) if row["half"] == half):
        traced = translator.trace(row["source"])
        if "".join(traced.text.replace("<unk>", "").split()) != "".join(row["translation"].split()):
            # (labelled as translate_tokens writes it: a generated <unk> left out)
            sys.exit(f"{row['id']}: the model translates it otherwise than when it was labelled")
        omissions = translator.omissions(traced.source_tokens[:-1], traced.target_tokens)
        verdict = services.judge(model, row["source"], traced.target_tokens, omissions)
        if isinstance(verdict, str) or len(verdict.source_words) != len(row["source_words"]) \
                or len(verdict.translation_words) != len(row["translation_words"]):
            unread += 1
            continue
        judged.append((row, verdict))
    print(f"{model} {half}: {len(judged)} sentences judged, {unread} whose words the model splits otherwise than "
          "the labels (not counted)")
    return judged


def goals(judged: list[tuple[dict, object]]) -> dict[str, float]:
    """The verdict's figures against the labels: omitted content words (recall, precision), the sentences that lost
    content and the complete ones warned "May have left out", source words named as errors of either kind against
    the words labelled omitted or mistranslated, and sentences flagged for made-up words against those the reader
    found made-up content in."""
    from attention_inspector.model.explain.verdict import LEFT_OUT, MADE_UP, MISTRANSLATED

    found = omitted = flagged = errors_found = errors = named = 0
    lost, complete, added, made_up = [], [], [], []
    for row, verdict in judged:
        left_out = {i for error in row["omitted"] for i in error["content_words"]}
        wrong = left_out | {i for error in row["mistranslated"] for i in error["source"]}
        judged_words = [i for i, said in enumerate(verdict.source_evidence) if said["judged"]]
        said_left_out = {i for i in judged_words if verdict.source_kinds[i] == LEFT_OUT}
        said_wrong = said_left_out | {i for i in judged_words if verdict.source_kinds[i] == MISTRANSLATED}
        found, omitted, flagged = found + len(said_left_out & left_out), omitted + len(left_out), \
            flagged + len(said_left_out)
        errors_found, errors, named = errors_found + len(said_wrong & wrong), errors + len(wrong & set(judged_words)), \
            named + len(said_wrong)
        (lost if left_out else complete).append(bool(said_left_out))
        added.append(any(error["content"] for error in row["added"]))
        made_up.append(MADE_UP in verdict.translation_kinds)
    added, made_up = np.array(added), np.array(made_up)
    return {"omitted_recall": found / max(omitted, 1), "omitted_precision": found / max(flagged, 1),
            "lost_warned": float(np.mean(lost)) if lost else 0.0, "lost": len(lost),
            "complete_warned": float(np.mean(complete)) if complete else 0.0, "complete": len(complete),
            "errors_recall": errors_found / max(errors, 1), "errors_precision": errors_found / max(named, 1),
            "made_up_recall": float((made_up & added).sum() / max(added.sum(), 1)),
            "made_up_precision": float((made_up & added).sum() / max(made_up.sum(), 1)),
            "made_up_sentences": int(added.sum())}


# The goals (docs/explanations.md): a figure and the least (or, negative, the most) it may be.
OMISSION_GOALS = {"omitted_recall": 0.6, "omitted_precision": 0.6, "lost_warned": 0.75, "complete_warned": -0.15}
MADE_UP_GOALS = {"made_up_recall": 0.7, "made_up_precision": 0.7}


def margin(figures: dict[str, float], wanted: dict[str, float]) -> float:
    """How far the figures clear their goals, at the goal they clear least (negative: one is missed)."""
    return min(figures[key] - least if least >= 0 else -least - figures[key] for key, least in wanted.items())


def best(judged: list[tuple[dict, object]], grid: dict[str, np.ndarray], wanted: dict[str, float], base):
    """The thresholds of `grid` (name -> values, tried in every combination) under which the verdict's figures
    (`goals`) clear `wanted` by the widest `margin`; ties go to the highest thresholds (fewer flags)."""
    import itertools
    from dataclasses import replace

    scored = []
    for values in itertools.product(*grid.values()):
        calibration = replace(base, **dict(zip(grid, values)))
        figures = goals([(row, verdict.under(calibration)) for row, verdict in judged])
        scored.append((margin(figures, wanted), values, calibration))
    return max(scored, key=lambda item: (item[0], item[1]))[2]


GRID = {"surprisal": np.arange(4.0, 12.01, 0.25), "contrastive": np.arange(-6.0, 1.01, 0.25),
        "needed": np.arange(2.0, 12.01, 0.25), "repeated": np.arange(-4.0, 4.01, 0.25)}


def calibrate(model: str, out: Path, data: str = DEFAULT_DATA) -> dict:
    """The verdict's thresholds chosen on the tuning half (`best` on every point of `GRID`: the words left out for
    `OMISSION_GOALS`, the made-up words for `MADE_UP_GOALS`), written into `out`/metrics.json
    under "verdict" with the tuning half's figures; the held-out half is never read."""
    from dataclasses import asdict, replace

    from attention_inspector.model.explain.verdict import DEFAULT

    judged = verdicts(model, "tune", data)
    calibration = best(judged, {key: GRID[key] for key in ("surprisal", "contrastive")}, OMISSION_GOALS, DEFAULT)
    calibration = best(judged, {key: GRID[key] for key in ("needed", "repeated")}, MADE_UP_GOALS, calibration)
    src, tgt = model.split("-")
    thresholds = {key: round(float(value), 2) for key, value in asdict(calibration).items() if key != "meaning"}
    record = {"evaluator": f"{tgt}-{src}", "thresholds": thresholds,
              "calibrated_on": f"the tuning half of {len(judged)} labelled translations of test_2016_flickr "
                               f"(benchmarks/real_errors/{model}.jsonl)",
              "tune": {key: round(value, 4) for key, value in goals(
                  [(row, verdict.under(replace(calibration, meaning=""))) for row, verdict in judged]).items()},
              "command": f"python benchmarks/real_errors.py calibrate --model {model} --out {out}"}
    from attention_inspector.model.serving.checkpoint import read_json, write_json

    metrics_path = out / "metrics.json"
    write_json(metrics_path, (read_json(metrics_path) if metrics_path.is_file() else {}) | {"verdict": record})
    print(json.dumps(record, indent=2))
    return record


def evaluate(model: str, half: str, data: str = DEFAULT_DATA, alone: bool = False) -> dict:
    """The shipped verdict's figures (`goals`) on `half`, with the model's own calibration (`alone`: judged without
    the model of the other direction)."""
    figures = goals(verdicts(model, half, data, alone))
    for key, value in figures.items():
        print(f"  {key:<20} {value:.3f}" if isinstance(value, float) else f"  {key:<20} {value}")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("translate", "keep", "check", "signals", "calibrate", "evaluate"))
    parser.add_argument("--model", required=True, help="a shipped checkpoint's name (en-de, de-en)")
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--start", type=int, default=0, help="translate: the first test line")
    parser.add_argument("--data", default=DEFAULT_DATA, help="Multi30k folder")
    parser.add_argument("--half", default="tune", choices=HALVES,
                        help="signals, evaluate: the half measured (the held-out half only once a detector is "
                             "fixed)")
    parser.add_argument("--alone", action="store_true",
                        help="evaluate: judged by the model's own contrastive conditioning alone (the baseline)")
    parser.add_argument("--out", type=Path, help="calibrate: the checkpoint folder whose metrics.json it writes")
    args = parser.parse_args()
    if args.command == "translate":
        print(f"written {translate(args.model, args.count, args.data, args.start)}")
    elif args.command == "keep":
        print(f"written {keep(args.model)}")
    elif args.command == "calibrate":
        if args.out is None:
            parser.error("calibrate writes into a checkpoint folder: give it with --out")
        calibrate(args.model, args.out, args.data)
    elif args.command == "evaluate":
        evaluate(args.model, args.half, args.data, args.alone)
    elif args.command == "signals":
        torch.set_num_threads(1)
        signals(args.model, args.half, args.data)
    else:
        check(args.model, args.data)


if __name__ == "__main__":
    main()
