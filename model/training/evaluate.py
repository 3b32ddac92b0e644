"""Evaluation CLI: sacreBLEU (cased, detokenized) and chrF, plus tokenized lower-cased BLEU for papers.

    python -m model.training.evaluate --checkpoint checkpoints/en-de --split test --beam 5

Needs the `studies` extra (pip install "attention-inspector[studies]"): datasets reads the split, sacrebleu
scores it.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from attention_inspector.model.extras import BLEU, DATA, require
from attention_inspector.model.nets.devices import add_device_argument, chosen_device, refuse_missing_device
from attention_inspector.model.serving.checkpoint import METRICS, load_checkpoint, own_folder, write_json
from attention_inspector.model.serving.translator import Translator
from attention_inspector.model.text.hub_tokenizer import HubTokenizer
from attention_inspector.model.text.vocab import Tokenizer
from attention_inspector.model.training import distributed
from attention_inspector.model.training.data import load_pairs
from attention_inspector.model.training.distributed import Ranks

DEFAULT_DATA = "../shared/data/multi30k"
# The ISO 639-3 codes that NLLB-200's languages start with, as Multi30k's two-letter names.
ISO_639_3 = {"eng": "en", "deu": "de", "fra": "fr", "ces": "cs"}


def score(translator: Translator, hypotheses: list[list[str]], references: list[str],
          target_language: str | None = None) -> dict:
    """BLEU/chrF of lower-cased hypothesis tokens against raw reference sentences.

    `bleu` and `chrf`: truecased, detokenized output against the raw references (sacreBLEU defaults).
    `bleu_tok_lc`: lower-cased spaCy tokens on both sides, `--tokenize none`, as Multi30k papers report (a Hub
    model's output is read as text by `target_language`'s spaCy tokenizer, never counted in its pieces).
    `exact_match`: percent of outputs identical to their reference (the measure for string reversal).
    """
    import sacrebleu  # the `studies` extra: imported here, so that the commands importing this module say --help

    detokenized = [translator.to_text(h) for h in hypotheses]
    bleu = sacrebleu.BLEU()
    chrf = sacrebleu.CHRF()
    bleu_score = bleu.corpus_score(detokenized, [references])
    chrf_score = chrf.corpus_score(detokenized, [references])
    # Word tokens on both sides (byte-pair pieces joined again), as papers score.
    if isinstance(translator.tgt_tokenizer, HubTokenizer):
        spacy_words = Tokenizer(target_language or multi30k_pair(translator)[1], lowercase=True)
        reference_tokens, hypothesis_tokens = ([" ".join(words) for words in spacy_words.words_all(texts)]
                                               for texts in (references, detokenized))
    else:
        reference_tokens = [" ".join(t.lower() for t in words)
                            for words in translator.tgt_tokenizer.words_all(references)]
        hypothesis_tokens = [" ".join(translator.tgt_tokenizer.words(h)).lower() for h in hypotheses]
    # force: these hypotheses are tokenized on purpose (sacreBLEU would warn about it).
    tok_lc = sacrebleu.BLEU(tokenize="none", lowercase=True, force=True)
    tok_lc_score = tok_lc.corpus_score(hypothesis_tokens, [reference_tokens])
    exact = sum(h == r.strip() for h, r in zip(detokenized, references)) / max(len(references), 1)
    return {
        "exact_match": round(100 * exact, 2),
        "bleu": round(bleu_score.score, 2), "bleu_signature": str(bleu.get_signature()),
        "chrf": round(chrf_score.score, 2), "chrf_signature": str(chrf.get_signature()),
        "bleu_tok_lc": round(tok_lc_score.score, 2),
        "bleu_tok_lc_signature": str(tok_lc.get_signature()) + " (spaCy tokens, lower-cased)",
        "hypothesis_words": sum(len(tokens.split()) for tokens in hypothesis_tokens),
    }


def multi30k_language(code: str) -> str:
    """A model's language code as Multi30k names it: "en" for en, eng_Latn (NLLB), en_XX (mBART-50); others
    (the reverser's chars) as they are."""
    head = code.split("_")[0]
    return ISO_639_3.get(head, head)


def multi30k_pair(translator: Translator, src_lang: str | None = None, tgt_lang: str | None = None
                  ) -> tuple[str, str]:
    """The Multi30k languages of the direction a model translates (a multilingual one's `src_lang`, `tgt_lang`,
    or its defaults)."""
    defaults = translator.languages
    codes = (src_lang or (defaults and defaults.source) or translator.src_tokenizer.lang,
             tgt_lang or (defaults and defaults.target) or translator.tgt_tokenizer.lang)
    return multi30k_language(codes[0]), multi30k_language(codes[1])


def evaluate(translator: Translator, data: str, split: str, beam_size: int, length_penalty: float = 1.0,
             src_lang: str | None = None, tgt_lang: str | None = None, ranks: Ranks = Ranks()
             ) -> tuple[dict, list[str]]:
    """Translate a split and score it; returns (metrics, detokenized hypotheses). A multilingual model translates
    from `src_lang` to `tgt_lang` (its codes; None: its defaults), scored on Multi30k's pair of those languages.
    Under torchrun each process translates a block of the split, and every process gets the whole."""
    source, target = multi30k_pair(translator, src_lang, tgt_lang)
    pairs = load_pairs(data, split, source, target)
    start = time.perf_counter()
    sources = translator.src_tokenizer.tokenize_all(pairs["src"])
    mine = [sources[i] for i in ranks.block(len(sources))]
    hypotheses = ranks.gather(translator.translate_tokens(mine, beam_size, length_penalty=length_penalty,
                                                          src_lang=src_lang, tgt_lang=tgt_lang))
    seconds = time.perf_counter() - start
    metrics = score(translator, hypotheses, pairs["tgt"], target)
    # A ceiling on any score: reference tokens outside the target vocabulary can never be written.
    references = translator.tgt_tokenizer.tokenize_all(pairs["tgt"])
    metrics.update(split=split, sentences=len(pairs), beam_size=beam_size, length_penalty=length_penalty,
                   decode_seconds=round(seconds, 1), reference_tokens=sum(map(len, references)),
                   unknown_reference_tokens=sum(t not in translator.tgt_vocab for tokens in references for t in tokens))
    return metrics, [translator.to_text(h) for h in hypotheses]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, help="checkpoint folder, e.g. checkpoints/en-de")
    parser.add_argument("--data", default=DEFAULT_DATA, help="folder of raw Multi30k files or a hub id")
    parser.add_argument("--split", default="test", choices=["val", "test"])
    parser.add_argument("--beam", type=int, default=None, help="beam size (default: the checkpoint's shipped setting)")
    parser.add_argument("--length-penalty", type=float, default=None)
    parser.add_argument("--src-lang", help="a multilingual model's source language, its code (eng_Latn, en_XX)")
    parser.add_argument("--tgt-lang", help="a multilingual model's target language, its code (deu_Latn, de_DE)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: all cores)")
    parser.add_argument("--output", help="write the detokenized translations here")
    parser.add_argument("--save-metrics", action="store_true",
                        help="record the scores in the checkpoint's metrics.json: under the split's name for the "
                             "shipped decoding, else under e.g. test_beam1")
    add_device_argument(parser)
    args = parser.parse_args(argv)
    recorded_in = own_folder(args.checkpoint, "--save-metrics") if args.save_metrics else None  # before any work
    require(*DATA, *BLEU)  # the `studies` extra, asked before any work
    if args.threads:
        torch.set_num_threads(args.threads)
    refuse_missing_device(args.device)
    ranks = distributed.start()  # under torchrun, each process translates a block of the split
    translator = load_checkpoint(args.checkpoint, chosen_device(args.device, ranks))
    decoding = translator.metrics.get("decoding", {})
    beam = args.beam if args.beam is not None else decoding.get("beam_size", 5)
    length_penalty = args.length_penalty if args.length_penalty is not None else decoding.get("length_penalty", 1.0)
    metrics, translations = evaluate(translator, args.data, args.split, beam, length_penalty, args.src_lang,
                                     args.tgt_lang, ranks)
    distributed.stop(ranks)
    if not ranks.main:
        return
    print(json.dumps(metrics, indent=1, ensure_ascii=False))
    print(f"BLEU {metrics['bleu']} ({metrics['bleu_signature']})")
    print(f"chrF {metrics['chrf']} ({metrics['chrf_signature']})")
    print(f"tokenized lower-cased BLEU {metrics['bleu_tok_lc']}")
    print(f"exact match {metrics['exact_match']}%")
    print(f"reference tokens not in the target vocabulary: {metrics['unknown_reference_tokens']:,} of "
          f"{metrics['reference_tokens']:,}")
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.writelines(t + "\n" for t in translations)
    if recorded_in is not None:
        shipped = (beam, length_penalty) == (decoding.get("beam_size", 5), decoding.get("length_penalty", 1.0))
        key = args.split if shipped else f"{args.split}_beam{beam}" + (
            f"_lp{length_penalty:g}" if length_penalty != 1.0 else "")
        translator.metrics.setdefault("scores", {})[key] = metrics
        write_json(recorded_in / METRICS, translator.metrics)


if __name__ == "__main__":
    main()
