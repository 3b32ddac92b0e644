"""Which translations are detached from their source: a corpus of pairs ranked, most detached first, and the
detectors' known-answer evaluation (model/explain/detachment.py has the signals).

    python -m model.analysis.detachment --checkpoint checkpoints/en-de --pairs SOURCES TRANSLATIONS --out ranked.csv
    python -m model.analysis.detachment --checkpoint checkpoints/en-de --split val --out ranked.json
    python -m model.analysis.detachment --checkpoint checkpoints/en-de --evaluate --sentences 500 [--calibrate]
    python -m model.analysis.detachment --checkpoint checkpoints/en-de --omissions [--evaluate [--calibrate]] ...

`--pairs`: two files, a sentence and its translation (made anywhere) on the same line of each. `--split`: the
model's own greedy translations of a Multi30k split. Each pair is scored teacher-forced; the output (CSV or JSON,
by `--out`'s ending) lists every pair from most to least detached by the combined score (the page's: the ALTI+
source share with the tokens' probability; the probability alone for a GRU model), each detector's score beside
it, and whether it falls under the model's thresholds.

`--evaluate` builds detached pairs by construction from the split's first `--sentences` sources and the model's own
translations of them, and reports each detector's ROC-AUC and precision at 90% recall against the model's own
pairs:
- fully detached: a source with the translation of another source (half the split away);
- partially detached: the same, its first three tokens the source's own translation's;
- second half replaced: the source's own translation, its second half another's;
- perturbed sources (Lee et al., 2019, "Hallucinations in Neural Machine Translation"): a word inserted before
  each source, translated by the model; detached where that translation shares almost nothing with the
  translation of the unperturbed source (sentence BLEU under 10), against the perturbed ones that stayed close.
`--calibrate` also writes the thresholds the page marks by into the checkpoint's metrics.json: the combined score
of a sentence, and of a token, under which 5% of the model's own translations of the split (and of their tokens)
fall.

`--omissions` looks for the source words each translation left out (model/explain/omissions.py) instead: the pairs
ranked by their worst omission, with the words named, or, with `--evaluate`, the known-answer evaluation of
model/analysis/omissions.py (`--calibrate` writes its threshold into metrics.json).

Without --pairs it needs the `studies` extra (pip install "attention-inspector[studies]"): datasets reads the split;
and so does --evaluate without --omissions: sacrebleu scores the perturbed sources.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import random
import shlex
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from attention_inspector.model.api.services import Services
from attention_inspector.model.explain.detachment import (CALIBRATED_SHARE, COMBINED, DETECTOR_LABELS, DETECTORS,
                                                          Detachment, ranked, thresholds_of)
from attention_inspector.model.extras import BLEU, DATA, require
from attention_inspector.model.nets.devices import add_device_argument, chosen_device, refuse_missing_device
from attention_inspector.model.serving.checkpoint import (CONFIG, METRICS, judge_folder, load_checkpoint, own_folder,
                                                          read_json, write_json)
from attention_inspector.model.serving.translator import InputError, Translator
from attention_inspector.model.training.data import load_pairs
from attention_inspector.model.training.evaluate import DEFAULT_DATA

SHARED_START = 3  # tokens of the source's own translation that lead a partially detached one
INSERTED = ("the", "and", "of", "a", "in", "very", "red", "dog", "photo", "yesterday")  # before a source (Lee et al.)
PERTURBED_BLEU = 10.0  # a perturbed source's translation under this sentence BLEU to the original's is detached
OWN, FULLY, PARTIALLY, SECOND_HALF, PERTURBED = "own", "fully detached", "partially detached", "second half " \
    "replaced", "perturbed source"


def scored(translator: Translator, pairs: list[tuple[str, list[str]]], what: str,
           direction: dict | None = None) -> list[Detachment | str]:
    """Each pair's `Detachment` (source text, translation tokens), or the reason it cannot be scored."""
    results = []
    for text, tokens in tqdm(pairs, desc=what, unit="pair", file=sys.stderr):
        try:
            results.append(translator.detachment(text, tokens, **(direction or {})).measured)
        except InputError as error:
            results.append(str(error))
    return results


def own_translations(translator: Translator, texts: list[str], direction: dict | None = None) -> list[list[str]]:
    """The model's greedy translations of `texts`, as target tokens ending with <eos> (but one cut at the length
    limit of the model's positions)."""
    sentences = translator.src_tokenizer.tokenize_all(texts)
    room = translator.model.config.max_len - 1
    return [tokens + ["<eos>"] * (len(tokens) < room)
            for tokens in translator.translate_tokens(sentences, **(direction or {}))]


def constructed(texts: list[str], own: list[list[str]]) -> dict[str, list[tuple[str, list[str]]]]:
    """The known-answer pairs built from sources and the model's own translations of them (<eos> last)."""
    other = [own[(i + len(own) // 2) % len(own)] for i in range(len(own))]
    return {OWN: list(zip(texts, own)),
            FULLY: list(zip(texts, other)),
            PARTIALLY: [(text, mine[:SHARED_START] + theirs[SHARED_START:])
                        for text, mine, theirs in zip(texts, own, other)],
            SECOND_HALF: [(text, mine[:(len(mine) - 1) // 2] + theirs[(len(theirs) - 1) // 2:])
                          for text, mine, theirs in zip(texts, own, other)]}


def perturbed(translator: Translator, texts: list[str], own: list[list[str]], seed: int = 0,
              direction: dict | None = None) -> tuple[list[tuple[str, list[str]]], list[bool]]:
    """Lee et al.'s perturbation: a word of `INSERTED` before each source, the model's translation of it, and
    whether that translation is detached (sentence BLEU to the unperturbed translation under `PERTURBED_BLEU`)."""
    import sacrebleu

    rng = random.Random(seed)
    changed = [f"{rng.choice(INSERTED)} {text}" for text in texts]
    theirs = own_translations(translator, changed, direction)
    detached = [sacrebleu.sentence_bleu(" ".join(new[:-1]), [" ".join(old[:-1])]).score < PERTURBED_BLEU
                for new, old in zip(theirs, own)]
    return list(zip(changed, theirs)), detached


def evaluation(translator: Translator, texts: list[str], direction: dict | None = None) -> dict:
    """Every detector's ROC-AUC and precision at 90% recall on each constructed kind of detached pair, and what the
    model's own translations score (for `--calibrate`)."""
    own = own_translations(translator, texts, direction)
    results = {kind: scored(translator, pairs, kind, direction)
               for kind, pairs in constructed(texts, own).items()}
    perturbed_pairs, perturbed_detached = perturbed(translator, texts, own, direction=direction)
    results[PERTURBED] = scored(translator, perturbed_pairs, PERTURBED, direction)
    kept = [i for i in range(len(texts)) if all(not isinstance(results[kind][i], str) for kind in results)]
    reasons = Counter(result for kind in results for result in results[kind] if isinstance(result, str))
    report = {"sentences": len(texts), "scored": len(kept), "unscored": dict(reasons.most_common(3)), "kinds": {}}
    for kind in (FULLY, PARTIALLY, SECOND_HALF, PERTURBED):
        if kind == PERTURBED:
            positives = [results[kind][i] for i in kept if perturbed_detached[i]]
            negatives = [results[kind][i] for i in kept if not perturbed_detached[i]]
        else:
            positives, negatives = [results[kind][i] for i in kept], [results[OWN][i] for i in kept]
        entry = {"detached": len(positives), "attached": len(negatives), "detectors": {}}
        for detector in DETECTORS:
            values = [pair.score(detector) for pair in positives + negatives]
            if positives and negatives and None not in values:
                auc, precision = ranked(values, [True] * len(positives) + [False] * len(negatives))
                entry["detectors"][detector] = {"auc": round(auc, 4), "precision_at_90_recall": round(precision, 4)}
        report["kinds"][kind] = entry
    own_scored = [results[OWN][i] for i in kept]
    report["own"] = own_scored
    return report


def calibrated(own: list[Detachment]) -> dict:
    """The combined score of a sentence, and of a token, under which `CALIBRATED_SHARE` of the model's own
    translations (and of their tokens) fall: the thresholds the page marks by."""
    sentences = [pair.score(COMBINED) for pair in own]
    tokens = np.concatenate([pair.token_signal() for pair in own])
    return {"sentence": round(float(np.quantile(sentences, CALIBRATED_SHARE)), 4),
            "token": round(float(np.quantile(tokens, CALIBRATED_SHARE)), 4)}


def print_evaluation(report: dict) -> None:
    print(f"{report['scored']} of {report['sentences']} sentences scored; ROC-AUC / precision at 90% recall "
          "(detached pairs against the model's own)")
    for reason, count in report["unscored"].items():
        print(f"  {count} pairs not scored: {reason}")
    print(f"{'':28s}" + "".join(f"{DETECTOR_LABELS[d]:>28s}" for d in DETECTORS))
    for kind, entry in report["kinds"].items():
        cells = [f"{e['auc']:.3f} / {e['precision_at_90_recall']:.3f}" if (e := entry["detectors"].get(d)) else "-"
                 for d in DETECTORS]
        label = f"{kind} ({entry['detached']})"
        print(f"{label:28s}" + "".join(f"{cell:>28s}" for cell in cells))


def ranking(translator: Translator, texts: list[str], translations: list[list[str]], direction: dict) -> list[dict]:
    """Every pair with its scores, most detached first by the model's main detector (unscorable pairs last, with
    the reason)."""
    rows = []
    for line, (text, tokens, result) in enumerate(zip(texts, translations, scored(
            translator, list(zip(texts, translations)), "scoring", direction)), start=1):
        row = {"line": line, "source": text, "translation": translator.to_text([t for t in tokens if t != "<eos>"])}
        if isinstance(result, str):
            rows.append(row | {"error": result})
            continue
        sentence, words = result.flags(thresholds_of(translator.metrics)[0])
        rows.append(row | {**result.scores(), "flagged": bool(sentence), "flagged_tokens": int(words.sum())})
    return sorted(rows, key=lambda row: ("error" in row, row.get(COMBINED, 0.0)))


def write_rows(rows: list[dict], path: Path, columns: list[str]) -> None:
    """A ranking as CSV (a row per pair, `columns`) or JSON, by the file's ending."""
    if path.suffix.lower() == ".json":
        path.write_text(json.dumps(rows, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        return
    out = io.StringIO()
    table = csv.DictWriter(out, columns, extrasaction="ignore")
    table.writeheader()
    for rank, row in enumerate(rows, start=1):
        table.writerow({"rank": rank, **{key: (round(value, 6) if isinstance(value, float) else value)
                                         for key, value in row.items()}})
    path.write_text(out.getvalue(), encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True)
    given = parser.add_mutually_exclusive_group()
    given.add_argument("--pairs", nargs=2, metavar=("SOURCES", "TRANSLATIONS"),
                       help="two text files, a sentence and its translation on the same line of each")
    given.add_argument("--evaluate", action="store_true", help="the known-answer evaluation of the detectors")
    parser.add_argument("--data", default=DEFAULT_DATA, help="Multi30k folder or hub id (without --pairs)")
    parser.add_argument("--split", default="val", choices=("train", "val", "test"))
    parser.add_argument("--sentences", type=int, help="only the first N sentences")
    parser.add_argument("--src-lang", help="a multilingual model's source language code (default: its default)")
    parser.add_argument("--tgt-lang", help="a multilingual model's target language code (default: its default)")
    parser.add_argument("--out", help="where to write the ranking (.csv or .json) or the evaluation (.json)")
    parser.add_argument("--calibrate", action="store_true",
                        help="with --evaluate: write the page's thresholds into the checkpoint's metrics.json")
    parser.add_argument("--omissions", action="store_true",
                        help="the source words left out, mistranslated or made up (model/explain/verdict.py) "
                             "instead of detachment")
    parser.add_argument("--evaluator", help="with --omissions: the checkpoint that judges the translations (default: "
                                            "the one beside --checkpoint for the other direction)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    add_device_argument(parser)
    args = parser.parse_args(argv)
    if args.calibrate and not args.evaluate:
        sys.exit("--calibrate goes with --evaluate: the thresholds come from the model's own translations")
    if args.calibrate:
        own_folder(args.checkpoint, "--calibrate")
    # the `studies` extra, asked before any work: a Multi30k split, and the perturbation's sentence BLEU
    require(*(() if args.pairs else DATA), *(BLEU if args.evaluate and not args.omissions else ()))
    torch.set_num_threads(args.threads)
    refuse_missing_device(args.device)
    began = time.perf_counter()
    translator = load_checkpoint(args.checkpoint, chosen_device(args.device))
    direction = {"src_lang": args.src_lang, "tgt_lang": args.tgt_lang}
    try:
        translator.source_prefix(**direction)
    except InputError as error:
        sys.exit(str(error))
    if args.pairs:
        texts, translations = (Path(name).read_text(encoding="utf-8").splitlines() for name in args.pairs)
        if len(texts) != len(translations) or not texts:
            sys.exit(f"{args.pairs[0]} has {len(texts)} lines and {args.pairs[1]} {len(translations)}: give each "
                     "sentence's translation on the same line of the second file")
        texts, translations = texts[:args.sentences], translations[:args.sentences]
        tokens = [translator.tgt_tokenizer(translation) + ["<eos>"] for translation in translations]
    else:
        pairs = load_pairs(args.data, args.split, translator.src_tokenizer.lang, translator.tgt_tokenizer.lang)
        texts = list(pairs["src"])[:args.sentences]
    if args.omissions:
        return omissions_command(args, argv, translator, texts, None if not args.pairs else tokens, direction, began)
    if args.evaluate:
        report = evaluation(translator, texts, direction)
        own = report.pop("own")
        print_evaluation(report)
        report |= run_of(args, argv, began)
        if args.calibrate:
            thresholds = calibrated(own)
            metrics_path = written_into_metrics(args, "detachment", {"thresholds": thresholds}, report, "kinds")
            print(f"thresholds {thresholds} written into {metrics_path}")
        if args.out:
            Path(args.out).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        return
    if not args.pairs:
        tokens = own_translations(translator, texts, direction)
    rows = ranking(translator, texts, tokens, direction)
    if args.out:
        write_rows(rows, Path(args.out), ["rank", "line", "source", "translation", *DETECTORS, "flagged",
                                          "flagged_tokens", "error"])
    flagged = sum(row.get("flagged", False) for row in rows)
    print(f"{len(rows)} pairs scored in {time.perf_counter() - began:.1f} s; {flagged} flagged as detached"
          + (f"; {sum('error' in row for row in rows)} could not be scored" if any("error" in row for row in rows)
             else "") + (f"; ranked in {args.out}" if args.out else ""))
    for row in rows[:5]:
        if "error" not in row:
            print(f"  line {row['line']}: {COMBINED} {row[COMBINED]:.3f}  {row['source']!r} -> "
                  f"{row['translation']!r}")


def run_of(args, argv: list[str] | None, began: float) -> dict:
    """What an evaluation's report records of its run: the checkpoint, the split, its seconds and its command."""
    return {"checkpoint": args.checkpoint, "split": args.split, "seconds": round(time.perf_counter() - began),
            "command": "python -m model.analysis.detachment " + shlex.join(argv if argv is not None else sys.argv[1:])}


def written_into_metrics(args, key: str, calibrated: dict, report: dict, evaluated: str) -> Path:
    """The `calibrated` thresholds written into the checkpoint's metrics.json under `key`, with the split, the
    sentences, the evaluation (`report[evaluated]`) and the command they came from; the file's path."""
    metrics_path = own_folder(args.checkpoint, "--calibrate") / METRICS
    metrics = read_json(metrics_path) if metrics_path.is_file() else {}
    metrics[key] = calibrated | {"split": f"Multi30k {args.split}", "sentences": report["scored"],
                                 "evaluation": report[evaluated], "command": report["command"]}
    write_json(metrics_path, metrics)
    return metrics_path


def omissions_command(args, argv: list[str] | None, translator: Translator, texts: list[str],
                      tokens: list[list[str]] | None, direction: dict, began: float) -> None:
    """`--omissions`: the known-answer evaluation (`--evaluate`, `--calibrate`), or the pairs ranked by their worst
    omission."""
    from attention_inspector.model.analysis import omissions

    if args.evaluate:
        report = omissions.evaluation(translator, texts, direction)
        omissions.print_evaluation(report)
        report |= run_of(args, argv, began)
        if args.calibrate:
            metrics_path = written_into_metrics(args, "omissions", {"threshold": report["threshold"]}, report,
                                                "signals")
            print(f"threshold {report['threshold']} written into {metrics_path}")
        if args.out:
            Path(args.out).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        return
    services = judging(args, translator)
    rows = omissions.ranking(services, MODEL, texts, tokens or own_translations(translator, texts, direction),
                             direction)
    if args.out:
        write_rows(rows, Path(args.out), ["rank", "line", "source", "translation", "left_out", "mistranslated",
                                          "made_up", "verdict", "judged_by", "worst", "worst_word", "error"])
    flagged = sum(bool(row.get("left_out")) for row in rows)
    print(f"{len(rows)} pairs judged in {time.perf_counter() - began:.1f} s by "
          f"{services.evaluator_of(MODEL)[0] or 'the model alone (no model of the other direction)'}; {flagged} "
          "with a phrase left out" + (f"; ranked in {args.out}" if args.out else ""))
    for row in rows[:5]:
        if "error" not in row:
            print(f"  line {row['line']}: {row['verdict'] or 'Looks faithful'}  {row['source']!r} -> "
                  f"{row['translation']!r}")


MODEL = "checkpoint"  # the name the judged checkpoint goes by among `judging`'s models


def judging(args, translator: Translator) -> Services:
    """The checkpoint (as `MODEL`) and the model that judges its translations (model/explain/verdict.py): the
    folder --evaluator names, else the one beside it (`judge_folder`), where there is one."""
    evaluator = Path(args.evaluator) if args.evaluator else judge_folder(Path(args.checkpoint), translator)
    if evaluator is None:
        return Services({MODEL: translator})
    if not (evaluator / CONFIG).is_file():
        sys.exit(f"--evaluator {args.evaluator}: no checkpoint there")
    translator.metrics.setdefault("verdict", {})["evaluator"] = evaluator.name
    return Services({MODEL: translator, evaluator.name: load_checkpoint(evaluator, chosen_device(args.device))})


if __name__ == "__main__":
    main()
