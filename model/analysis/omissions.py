"""Which source words translations left out, over a corpus: pairs ranked by their worst omission, and the known-answer
evaluation of the signals (model/explain/omissions.py has them). Run through model/analysis/detachment.py:

    python -m model.analysis.detachment --checkpoint checkpoints/en-de --omissions --pairs SOURCES TRANSLATIONS \
        --out omissions.csv
    python -m model.analysis.detachment --checkpoint checkpoints/en-de --omissions --evaluate --sentences 400 \
        [--calibrate]

The evaluation builds omissions by construction: from each source of the split it deletes a span, a word (of three
letters or more) or a phrase of 2 to 5 words (neither starting nor ending with punctuation), translates the shortened
source with the model and pairs that translation with the full source: the deleted span is left out, and nothing
else is. The model's own translations of the full sources are the pairs with no omission. The thresholds are
calibrated on the first half of the sentences (10% of the own translations there have a flagged word) and the
figures read on the second half: each signal's word-level recall and precision, the share of deleted spans with a
word flagged, the share of own translations flagged, and the word-level ROC-AUC (omitted words against every word
of the own translations). `--calibrate` writes the contrastive threshold from all the sentences into the
checkpoint's metrics.json, which the page and `/detach` flag by.
"""

from __future__ import annotations

import random
import sys

import numpy as np
from tqdm import tqdm

from attention_inspector.model.explain.detachment import ranked
from attention_inspector.model.api.services import Services
from attention_inspector.model.explain.verdict import LEFT_OUT, MADE_UP, MISTRANSLATED
from attention_inspector.model.explain.omissions import (CALIBRATED_SHARE, CONTRASTIVE, CONTRIBUTION, Omissions,
                                                         source_words, worded)
from attention_inspector.model.serving.translator import InputError, Translator
from attention_inspector.model.text.words import scheme as word_scheme

PHRASE = (2, 5)  # the words of a deleted phrase, at least and at most
SHORTEST_WORD = 3  # letters of a word deleted alone


def deleted_span(labels: list[str], rng: random.Random) -> tuple[int, int] | None:
    """A span of words to delete, (first, end): half the time one word of `SHORTEST_WORD` letters or more, else a
    phrase of 2 to 5 words that starts and ends with a word (`worded`); None where the sentence has none, or where
    it would delete the whole sentence."""
    if rng.random() < 0.5:
        single = [i for i, label in enumerate(labels) if worded(label) and len(label) >= SHORTEST_WORD]
        first = rng.choice(single) if single else None
        return None if first is None or len(labels) < 2 else (first, first + 1)
    size = rng.randint(*PHRASE)
    starts = [i for i in range(len(labels) - size + 1) if worded(labels[i]) and worded(labels[i + size - 1])]
    if not starts or size >= sum(map(worded, labels)):
        return None
    first = rng.choice(starts)
    return first, first + size


def found(translator: Translator, text: str, tokens: list[str], direction: dict) -> Omissions | str:
    """The `Omissions` of the translation `tokens` (<eos> last) of `text`, or why it cannot be scored."""
    try:
        return translator.detachment(text, tokens, with_omissions=True, **direction).omissions
    except InputError as error:
        return str(error)


def evaluation(translator: Translator, texts: list[str], direction: dict, seed: int = 0) -> dict:
    """The known-answer evaluation (the module's docstring): each signal's figures, and the contrastive threshold
    calibrated on every sentence (`calibrated`)."""
    from attention_inspector.model.analysis.detachment import own_translations

    rng = random.Random(seed)
    scheme = word_scheme(translator.src_tokenizer)
    cases = []  # (full text, its words, the span deleted, the shortened text)
    for text in texts:
        try:
            tokens = translator.source_tokens(text, **direction)
        except InputError:
            continue
        prefix = translator.prefix_length(tokens)
        labels, _ = source_words(tokens + ["<eos>"], scheme, prefix)
        span = deleted_span(labels, rng)
        if span is not None:
            cases.append((" ".join(labels), labels, span, " ".join(labels[:span[0]] + labels[span[1]:])))
    own = own_translations(translator, [case[0] for case in cases], direction)
    shortened = own_translations(translator, [case[3] for case in cases], direction)
    scored = []  # (own pair's Omissions, omitted pair's Omissions, span)
    for (text, labels, span, _), mine, theirs in tqdm(list(zip(cases, own, shortened)), desc="omissions",
                                                       unit="sentence", file=sys.stderr):
        pair = found(translator, text, mine, direction), found(translator, text, theirs, direction)
        if not any(isinstance(result, str) or len(result.words) != len(labels) for result in pair):
            scored.append((*pair, span))
    half = len(scored) // 2
    report = {"sentences": len(texts), "scored": len(scored), "calibrated_on": half, "evaluated_on": len(scored) - half,
              "signals": {}}
    for signal in (CONTRASTIVE, CONTRIBUTION):
        if scored and signal == CONTRIBUTION and scored[0][0].contributions is None:
            continue
        report["signals"][signal] = figures(scored[:half], scored[half:], signal)
    report["threshold"] = threshold_from([mine for mine, _, _ in scored], CONTRASTIVE)
    return report


def values(found: Omissions, signal: str) -> np.ndarray:
    """(W,) a signal as "higher: more likely left out" (the contribution negated); NaN for punctuation."""
    if signal == CONTRASTIVE:
        return found.contrastive
    return np.where(np.isnan(found.contrastive), np.nan, -found.contributions)


def threshold_from(own: list[Omissions], signal: str) -> float:
    """The value from which `CALIBRATED_SHARE` of the own translations have a word (the share of sentences whose
    highest word reaches it)."""
    highest = [np.nanmax(values(found, signal)) for found in own]
    return round(float(np.quantile(highest, 1 - CALIBRATED_SHARE, method="inverted_cdf")), 4)


def figures(calibration: list, evaluated: list, signal: str) -> dict:
    """One signal's threshold (from `calibration`) and its figures on `evaluated`, each a list of (own pair's
    Omissions, omitted pair's, the span deleted)."""
    threshold = threshold_from([mine for mine, _, _ in calibration], signal)
    omitted_words, flagged, true, spans_found = [], 0, 0, 0
    for _, theirs, (first, end) in evaluated:
        scores = values(theirs, signal)
        marked = np.nan_to_num(scores, nan=-np.inf) >= threshold
        deleted = [worded(word) for word in theirs.words[first:end]]  # the deleted span's words, not its punctuation
        inside = marked[first:end][deleted]
        omitted_words += list(scores[first:end][deleted])
        flagged, true, spans_found = flagged + marked.sum(), true + inside.sum(), spans_found + inside.any()
    own_values = np.concatenate([values(mine, signal) for mine, _, _ in evaluated])
    own_values = own_values[~np.isnan(own_values)]
    omitted_words = np.array(omitted_words)
    auc, _ = ranked(list(-np.concatenate([omitted_words, own_values])),  # `ranked` flags low values
                    [True] * len(omitted_words) + [False] * len(own_values))
    highest = np.array([np.nanmax(values(mine, signal)) for mine, _, _ in evaluated])
    sign = 1 if signal == CONTRASTIVE else -1  # the contribution's threshold as a contribution again
    entry = {"threshold": round(sign * threshold, 4), "recall": round(float(np.mean(omitted_words >= threshold)), 4),
             "precision": round(float(true / max(flagged, 1)), 4),
             "spans_found": round(spans_found / max(len(evaluated), 1), 4),
             "own_flagged": round(float(np.mean(highest >= threshold)), 4), "auc": round(auc, 4)}
    if signal == CONTRASTIVE:  # Vamvas & Sennrich's own rule, Δ ≥ 0
        entry["own_flagged_at_zero"] = round(float(np.mean(highest >= 0)), 4)
        entry["recall_at_zero"] = round(float(np.mean(omitted_words >= 0)), 4)
    return entry


def print_evaluation(report: dict) -> None:
    print(f"{report['scored']} of {report['sentences']} sentences: thresholds from the first "
          f"{report['calibrated_on']}, figures on the other {report['evaluated_on']}")
    print(f"{'signal':14s}{'threshold':>11s}{'own flagged':>13s}{'word recall':>13s}{'precision':>11s}"
          f"{'spans found':>13s}{'ROC-AUC':>9s}")
    for signal, entry in report["signals"].items():
        print(f"{signal:14s}{entry['threshold']:>11.3f}{entry['own_flagged']:>13.1%}{entry['recall']:>13.1%}"
              f"{entry['precision']:>11.1%}{entry['spans_found']:>13.1%}{entry['auc']:>9.3f}")
    rule = report["signals"][CONTRASTIVE]
    print(f"Vamvas & Sennrich's rule (Δ ≥ 0): own flagged {rule['own_flagged_at_zero']:.1%}, word recall "
          f"{rule['recall_at_zero']:.1%}")
    print(f"contrastive threshold from all {report['scored']} sentences: {report['threshold']}")


def ranking(services: Services, model: str, texts: list[str], translations: list[list[str]],
            direction: dict) -> list[dict]:
    """Every pair with the verdict on it (model/explain/verdict.py: `model`'s own contrastive conditioning judged by
    its evaluator among `services`' models): its phrases left out, mistranslated and made up, each as it stands in
    the source or translation, its plain line, and its worst word by contrastive conditioning; pairs with a phrase
    left out first, then by that worst score (pairs that cannot be scored last, with the reason)."""
    translator = services.translators[model]
    rows = []
    for line, (text, tokens) in enumerate(tqdm(list(zip(texts, translations)), desc="omissions", unit="pair",
                                               file=sys.stderr), start=1):
        row = {"line": line, "source": text, "translation": translator.to_text([t for t in tokens if t != "<eos>"])}
        result = found(translator, text, tokens, direction)
        verdict = services.judge(model, text, tokens, result)
        if isinstance(verdict, str):
            rows.append(row | {"error": verdict})
            continue
        worst = int(np.nanargmax(result.contrastive))
        rows.append(row | {"worst": round(float(result.contrastive[worst]), 6), "worst_word": result.words[worst],
                           "left_out": "; ".join(verdict.phrases(LEFT_OUT)),
                           "mistranslated": "; ".join(verdict.phrases(MISTRANSLATED)),
                           "made_up": "; ".join(verdict.phrases(MADE_UP)), "verdict": verdict.plain(),
                           "judged_by": verdict.evaluator or "; ".join(verdict.lacking)})
    return sorted(rows, key=lambda row: ("error" in row, not row.get("left_out"), -row.get("worst", 0.0)))
