"""Which heads matter: every attention head switched off alone, and the gradient importance of Michel et al.,
2019 ("Are Sixteen Heads Really Better than One?"), over a whole split.

    python -m model.analysis.heads --checkpoint en-de --split val           # writes en-de-heads/heads.json
    python -m model.analysis.heads --checkpoint my-model --split val --overwrite   # into my-model/heads.json

For each head (named kind.layer.head): the change in the mean teacher-forced log-likelihood per target token
when that head alone is switched off (many heads per batched pass: model/explain/ablation.py), with
`--bleu-per-head` the change in greedy BLEU (tokenized, lower-cased) too (the split decoded again per head, several
heads per decoding, each in its own copy of the sentences), and its importance I_h = Σ_batches |∂L/∂ξ_h| at gates
ξ = 1 (L: the batch's summed teacher-forced loss), normalised per layer (ℓ2). Then BLEU as heads are switched off
in increasing importance (their Fig. 3). Writes heads.json, which the page reads for its importance map and the head
it opens on, and prints the heads ranked by importance: into the checkpoint folder given (an existing heads.json is
kept unless --overwrite), or --out DIR. A checkpoint given by name (en-de) is never changed: its report goes to
NAME-heads/ in the working directory unless --out says where.

Each head's statistics over the split (model/explain/head_stats.py: entropy, confidence, weight on <eos> and on
punctuation, offset of the most attended key) are recorded beside its importance, read teacher-forced on the
reference translations, and each cross-attention head's alignment error rate against word alignments
(model/analysis/align.py: a gold file, the reversal task's exact alignment, or a statistical aligner's).
`--statistics-only` adds them to an existing heads.json in under a minute.

Over a user's own sentences (any model, any languages): `--pairs SOURCES TARGETS`; a multilingual model is read in
its default direction, or in the one `--src-lang` and `--tgt-lang` name, its language codes leading what it reads
as in the app (heads.json records the direction measured).

Needs the `studies` extra for BLEU and a Multi30k split (pip install "attention-inspector[studies]").
"""

from __future__ import annotations

import argparse
import datetime
import random
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from attention_inspector.model.analysis.align import alignment_error_rate, head_alignments, reference_alignments
from attention_inspector.model.explain.ablation import heads_off_losses, pass_tokens
from attention_inspector.model.explain.estimates import ORDERS, PROBES, GateSums, agreement, gate_sums, named
from attention_inspector.model.explain.head_stats import head_statistics
from attention_inspector.model.extras import BLEU, DATA, require
from attention_inspector.model.nets.devices import add_device_argument, chosen_device, refuse_missing_device
from attention_inspector.model.nets.seq2seq import HeadGates, head_gates, head_name
# (kind, layer, head); `every_head` here: names
from attention_inspector.model.nets.seq2seq import every_head as every_head_of
from attention_inspector.model.serving.checkpoint import HEADS, found_by_name, load_checkpoint, read_json, write_json
from attention_inspector.model.serving.translator import InputError, Translator
from attention_inspector.model.text.batching import make_batch, token_batches
from attention_inspector.model.text.vocab import PAD_ID
from attention_inspector.model.training import distributed
from attention_inspector.model.training.data import load_pairs
from attention_inspector.model.training.distributed import Ranks
from attention_inspector.model.training.evaluate import DEFAULT_DATA, score
from attention_inspector.model.training.train import hardware

PRUNED_FRACTIONS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
# The heads measured exactly by default, and the random check among the rest: on en-de and de-en the second-order
# estimate ranked all of the exact top 10 within its top 20 (docs/explanations.md, "Estimates of every head").
EXACT, CHECK = 32, 8


def estimate_tokens(translator: Translator) -> int:
    """Target tokens per batch of the batched and the gradients' passes: as many as the device's logits budget
    holds (`pass_tokens`)."""
    return pass_tokens(len(translator.tgt_vocab), translator.device)


def every_head(translator: Translator) -> list[str]:
    """Every head of the model, by name, in kind, layer, head order."""
    return [head_name(*head) for head in every_head_of(translator.model)]


def teacher_forced_batches(translator: Translator, sources: list[list[str]], targets: list[list[str]],
                           max_tokens: int = 4000, direction: dict | None = None) -> list:
    """Padded batches of (source ids, target ids) for teacher-forced passes (`direction`: a multilingual model's
    src_lang and tgt_lang, whose codes lead the ids)."""
    ids = [translator.reference_ids(s, t, **(direction or {})) for s, t in zip(sources, targets)]
    src_ids, tgt_ids = [s for s, _ in ids], [t[:-1] for _, t in ids]  # make_batch ends each target with <eos>
    lengths = [len(s) for s in src_ids], [len(t) + 1 for t in tgt_ids]
    return [make_batch([src_ids[i] for i in batch], [tgt_ids[i] for i in batch]).to(translator.device)
            for batch in token_batches(*lengths, max_tokens)]


def batch_loss(translator: Translator, batch, gates: HeadGates | None) -> tuple[torch.Tensor, int]:
    """The batch's summed negative log-likelihood of its reference tokens (<eos> included), and their count."""
    logits, _ = translator.model(batch.src, batch.tgt_in, gates=gates)
    loss = F.cross_entropy(logits.flatten(0, 1).float(), batch.tgt_out.flatten(), ignore_index=PAD_ID,
                           reduction="sum")
    return loss, batch.n_target_tokens


@torch.no_grad()
def log_likelihood(translator: Translator, batches: list, gates: HeadGates | None = None,
                   ranks: Ranks = Ranks()) -> float:
    """Mean teacher-forced log-likelihood per reference token (`batches`: this rank's)."""
    total, count = 0.0, 0
    for batch in batches:
        loss, tokens = batch_loss(translator, batch, gates)
        total, count = total + float(loss), count + tokens
    total, count = ranks.sum([total, count])
    return -total / count


HOW_IT_RUNS = ("--device", "--threads", "--heads-per-decoding")  # arguments that change no figure of the report
HEADS_PER_DECODING = 8  # --bleu-per-head's heads per decoding (docs/performance.md, "The head report")


def measured_arguments(argv: list[str]) -> list[str]:
    """The arguments that decide what a head report measures: all but how it runs (--device, --threads,
    --heads-per-decoding)."""
    kept, skip = [], False
    for argument in argv:
        if skip:
            skip = False
        elif argument in HOW_IT_RUNS:
            skip = True
        elif not argument.startswith(tuple(f"{name}=" for name in HOW_IT_RUNS)):
            kept.append(argument)
    return kept


class Progress:
    """What a head report has done so far, kept beside heads.json until the report is written (a file per process),
    so that a run interrupted (Ctrl-C, a lost machine) and started again with the same arguments goes on from there:
    the likelihood sums of the batches done, and each head's BLEU. Another run's file (other arguments, another
    number of processes) is set aside."""

    def __init__(self, folder: Path, ranks: Ranks, arguments: list[str]):
        self.path = Path(folder) / f"heads.partial.{ranks.rank}.json"
        self.key = {"arguments": arguments, "processes": ranks.world_size, "work": "dealt_work"}
        saved = read_json(self.path) if self.path.is_file() else {}
        self.state = saved if saved.get("key") == self.key else {"key": self.key}
        self.resumed = len(self.state) > 1

    def get(self, part: str, default):
        return self.state.get(part, default)

    def put(self, part: str, value) -> None:
        self.state[part] = value
        written = self.path.with_suffix(".tmp")
        write_json(written, self.state)
        written.replace(self.path)  # whole or not at all, were the run cut off while writing

    def finish(self) -> None:
        self.path.unlink(missing_ok=True)


def dealt_work(batches: int, heads: int, ranks: Ranks) -> list[tuple[int, list[int]]]:
    """This rank's share of the head report's batched passes, as (batch index, indices of the heads it switches off
    in that batch): the batches dealt whole in turn (`Ranks.share`: sorted by length, each rank's alike), and those
    left over when they do not go evenly into the ranks (five batches on two processes: the fifth) shared head by
    head, every world_size-th head, so that no rank waits on another's last batch."""
    whole = batches - batches % ranks.world_size
    every_head, mine = list(range(heads)), ranks.share(list(range(heads)))  # (none where ranks outnumber heads)
    return [(index, every_head) for index in ranks.share(list(range(whole)))] + \
        [(index, mine) for index in range(whole, batches) if mine]


def log_likelihood_changes(translator: Translator, sources: list[list[str]], targets: list[list[str]],
                           ranks: Ranks = Ranks(), direction: dict | None = None, progress: Progress | None = None,
                           names: list[str] | None = None) -> tuple[float, dict[str, float]]:
    """The mean teacher-forced log-likelihood per reference token with every head on, and its change with each head
    of `names` (default: every head) switched off alone, by name: many heads per batched pass
    (model/explain/ablation.py), in batches sized for the device (`pass_tokens`), dealt to the ranks
    (`dealt_work`); with `progress`, the sums kept after each batch and taken up again from there."""
    heads = [head for head in every_head_of(translator.model) if names is None or head_name(*head) in set(names)]
    batches = teacher_forced_batches(translator, sources, targets, estimate_tokens(translator), direction)
    work = dealt_work(len(batches), len(heads), ranks)
    kept = progress.get("likelihood", {}) if progress else {}
    done, totals, tokens = kept.get("batches", 0), np.array(kept.get("totals", np.zeros(1 + len(heads)))), \
        kept.get("tokens", 0)
    with tqdm(total=sum(len(mine) for _, mine in work), initial=sum(len(mine) for _, mine in work[:done]),
              desc="one head off", unit="head", file=sys.stderr, disable=not ranks.main) as bar:
        for index in range(done, len(work)):
            batch, mine = batches[work[index][0]], work[index][1]
            base, losses = heads_off_losses(translator.model, batch, [heads[i] for i in mine], advance=bar.update)
            totals[[1 + i for i in mine]] += losses
            if mine[0] == 0:  # the batch's base and tokens are counted by the rank holding its first head
                totals[0], tokens = totals[0] + base, tokens + batch.n_target_tokens
            if progress:
                progress.put("likelihood", {"batches": index + 1, "totals": totals.tolist(), "tokens": tokens})
    *totals, tokens = ranks.sum(np.append(totals, tokens))
    base = -totals[0] / tokens
    return base, {head_name(*head): -loss / tokens - base for head, loss in zip(heads, totals[1:])}


def greedy_bleu(translator: Translator, sources: list[list[str]], references: list[str],
                gates: HeadGates | None = None, ranks: Ranks = Ranks(), direction: dict | None = None) -> float:
    """Tokenized lower-cased BLEU of greedy decoding (the app's decoding) with `gates`, each rank translating its
    block of the sentences (`direction`: a multilingual model's src_lang and tgt_lang)."""
    return greedy_bleus(translator, sources, references, [gates], ranks, direction)[0]


def greedy_bleus(translator: Translator, sources: list[list[str]], references: list[str],
                 gate_sets: list[HeadGates | None], ranks: Ranks = Ranks(), direction: dict | None = None
                 ) -> list[float]:
    """`greedy_bleu` with each gates of `gate_sets`, the decodings made together (`Translator.greedy_tokens`)."""
    mine = [sources[i] for i in ranks.block(len(sources))]
    translated = translator.greedy_tokens(mine, gate_sets, **(direction or {}))
    return [score(translator, ranks.gather(tokens), references)["bleu_tok_lc"] for tokens in translated]


def bleus_per_head(translator: Translator, sources: list[list[str]], references: list[str], names: list[str],
                   per_decoding: int = HEADS_PER_DECODING, ranks: Ranks = Ranks(), direction: dict | None = None,
                   advance: Callable[[dict[str, float]], None] = lambda measured: None) -> dict[str, float]:
    """`greedy_bleu` with each head of `names` switched off alone, `per_decoding` heads per decoding (each in its
    own copy of the sentences); `advance` told each decoding's heads' BLEUs as they come."""
    bleus = {}
    for first in range(0, len(names), per_decoding):
        group = names[first:first + per_decoding]
        gate_sets = [head_gates(translator.model, [name]) for name in group]
        measured = dict(zip(group, greedy_bleus(translator, sources, references, gate_sets, ranks, direction)))
        bleus |= measured
        advance(measured)
    return bleus


def gradient_importance(absolute: dict[str, torch.Tensor]) -> dict[str, float]:
    """Michel et al.'s importance from Σ_batches |∂L/∂ξ_h| at ξ = 1 per kind (`GateSums.absolute`), normalised to
    unit ℓ2 norm in each layer."""
    normalised = {kind: values / values.norm(dim=-1, keepdim=True).clamp(min=1e-12) for kind, values in
                  absolute.items()}  # (L, H): per layer
    return named(normalised)


def estimated_changes(translator: Translator, batches: list, order: str, probes: int, ranks: Ranks = Ranks(),
                      progress: Progress | None = None) -> tuple[dict[str, float], dict[str, float]]:
    """Every head's estimated change in the mean teacher-forced log-likelihood per reference token when it alone is
    switched off (model/explain/estimates.py, `order` "first" or "second", `probes` Hutchinson vectors per batch),
    and Michel et al.'s importance from the same gradients, by name; this rank's share of `batches` (the whole
    split's), the sums added up over the ranks; with `progress`, kept once made."""
    kept = progress.get("estimate", None) if progress else None
    if kept:
        return kept["changes"], kept["importance"]
    mine = ranks.share(list(range(len(batches))))
    with tqdm(total=len(mine), desc=f"estimate ({order} order)", unit="batch", file=sys.stderr,
              disable=not ranks.main) as bar:
        sums = gate_sums(translator.model, [batches[i] for i in mine], order, probes, numbers=mine,
                         advance=bar.update)
    summed = {part: {kind: torch.from_numpy(ranks.sum(values.cpu().numpy())).float() for kind, values in grids.items()}
              for part, grids in (("gradient", sums.gradient), ("absolute", sums.absolute),
                                  ("diagonal", sums.diagonal or {}))}
    tokens = ranks.sum([sums.tokens])[0]
    total = GateSums(summed["gradient"], summed["absolute"], summed["diagonal"] or None, int(tokens))
    changes = {name: value / total.tokens for name, value in total.estimate().items()}
    importance = gradient_importance(total.absolute)
    if progress:
        progress.put("estimate", {"changes": changes, "importance": importance})
    return changes, importance


def measured_heads(estimate: dict[str, float], exact: int | None, check: int, seed: int = 0
                   ) -> tuple[list[str], list[str]]:
    """The heads to measure exactly: the `exact` the estimate ranks most harmful when switched off (None: every
    head), and a random sample of `check` of the others, a check for heads the estimate missed."""
    ranked = sorted(estimate, key=lambda name: estimate[name])
    if exact is None:
        return ranked, []
    rest = ranked[exact:]
    return ranked[:exact], sorted(random.Random(seed).sample(rest, min(check, len(rest))))


def estimate_record(args: argparse.Namespace, estimate: dict[str, float], importance: dict[str, float],
                    changes: dict[str, float], top: list[str], check: list[str]) -> dict:
    """What heads.json says of the estimate: how it was made, the heads measured exactly (the top K and the random
    check, with the largest harm found in the check), and, where every head was measured, its agreement with the
    exact changes and Michel et al.'s importance's (`agreement`)."""
    record = {"order": args.estimate, "probes": args.probes if args.estimate == "second" else None,
              "exact": "all" if args.exact is None else args.exact, "check": check,
              "largest_harm_in_check": None}
    if check:
        worst = min(check, key=lambda name: changes[name])
        record["largest_harm_in_check"] = {"head": worst, "log_likelihood_change": round(changes[worst], 5)}
    if len(changes) == len(estimate):
        record["agreement"] = rounded(agreement(estimate, changes))
        # Michel et al. rank by importance, most important first: as an estimate of harm, its negative.
        record["importance_agreement"] = rounded(agreement({name: -value for name, value in importance.items()},
                                                           changes))
    return record


def rounded(measured: dict) -> dict:
    """`agreement`'s figures rounded for heads.json (the correlation to 4 places, the effects to 5)."""
    def five(value):
        return value if value is None else round(value, 5)
    return {**measured, "spearman": None if measured["spearman"] is None else round(measured["spearman"], 4),
            "largest_missed": {k: five(value) for k, value in measured["largest_missed"].items()}}


def estimate_summary(record: dict) -> str:
    """One paragraph on the estimate for the command's output."""
    made = f"estimate: {record['order']} order" + (f", {record['probes']} probes per batch" if record["probes"] else "")
    if "agreement" in record:
        measured = record["agreement"]
        within = ", ".join(f"{count} in its top {k}" for k, count in measured["exact_top10_within"].items())
        correlations = [agreed["spearman"] for agreed in (measured, record["importance_agreement"])]
        estimate, importance = ("undefined" if value is None else f"{value:.3f}" for value in correlations)
        return (f"{made}; against the exact change of all {measured['heads']} heads: Spearman {estimate}; of the "
                f"exact top 10, {within} (Michel et al.'s importance: Spearman {importance})")
    harm = record["largest_harm_in_check"]
    checked = "no heads outside the top" if harm is None else (
        f"{len(record['check'])} heads outside the top drawn at random, the largest harm among them "
        f"{harm['head']} {harm['log_likelihood_change']:+.4f}")
    return f"{made}; measured exactly: the top {record['exact']} and {checked}"


def exact_count(text: str) -> int | None:
    """--exact's value: "all" (None) or a positive count of heads."""
    if text == "all":
        return None
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"give a number of heads or 'all', not {text!r}") from None
    if count < 1:
        raise argparse.ArgumentTypeError(f"measure at least one head exactly (or 'all'), not {count}")
    return count


@torch.inference_mode()
def split_statistics(translator: Translator, sources: list[list[str]], targets: list[list[str]],
                     alignments: tuple[list, list] | None = None, ranks: Ranks = Ranks(),
                     direction: dict | None = None) -> dict[str, dict[str, float]]:
    """Every head's statistics (model/explain/head_stats.py), each the mean over the sentences of the split, read on the
    reference translations; a statistic that does not apply (offset of cross-attention) is left out.

    `alignments`: (sure, possible) word alignments of the split (model/analysis/align.py); each cross-attention head's
    alignment error rate against them is added, read at the output step (`alignment_aer`) and at the step where
    the word is the decoder's input (`shift_alignment_aer`, shift-att). Each rank reads its block of the split;
    their sums are added up and their alignments gathered. `direction`: a multilingual model's src_lang and
    tgt_lang, whose language codes lead what it reads (its maps' rows and columns of the codes are left out of the
    alignments)."""
    direction = direction or {}
    source_prefix = translator.source_prefix(**direction)
    target_prefix = translator.with_target_prefix([], direction.get("tgt_lang"))
    sums: dict[str, np.ndarray] = {}
    cross_maps = []
    mine = ranks.block(len(sources))
    for source, target in tqdm([(sources[i], targets[i]) for i in mine], desc="statistics", file=sys.stderr,
                               disable=not ranks.main):
        attention = translator.reference_attention(source, target, **direction)
        cross_maps.append(attention.cross[:, 0, :, len(target_prefix):, len(source_prefix):].float().cpu().numpy())
        source_tokens = (source_prefix + source)[:translator.max_src_tokens] + ["<eos>"]
        decoder_tokens = ["<sos>"] + (target_prefix + target)[:translator.max_src_tokens]
        for kind, keys in (("encoder", source_tokens), ("decoder", decoder_tokens), ("cross", source_tokens)):
            maps = getattr(attention, kind)
            if maps is None:
                continue
            for statistic, values in head_statistics(maps[:, 0].float().cpu().numpy(), keys, kind != "cross").items():
                sums.setdefault(f"{kind}|{statistic}", np.zeros(values.shape))
                sums[f"{kind}|{statistic}"] += values
    statistics: dict[str, dict[str, float]] = {}
    for key in sorted(sums):  # the same order on every rank
        total = ranks.sum(sums[key])
        kind, statistic = key.split("|")
        for layer, head in np.ndindex(total.shape):
            if np.isfinite(total[layer, head]):
                statistics.setdefault(head_name(kind, layer, head), {})[statistic] = round(
                    float(total[layer, head]) / len(sources), 5)
    if alignments is not None:
        sure, possible = alignments
        shape = translator.model.heads()["cross"]
        for (name, reading), links in head_alignments(cross_maps, shape).items():
            links = ranks.gather(links)
            if name in statistics:  # a head, not a layer mean
                key = "alignment_aer" if reading == "output" else "shift_alignment_aer"
                statistics[name][key] = round(alignment_error_rate(links, sure, possible), 5)
    return statistics


def sentence_pairs(translator: Translator, args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The sentences to measure over and their references: the user's two files (`--pairs`), or a Multi30k split
    in the checkpoint's languages; the first `--limit` of them."""
    if args.pairs:
        sources, targets = (Path(name).read_text(encoding="utf-8").splitlines() for name in args.pairs)
        if len(sources) != len(targets) or not sources:
            sys.exit(f"{args.pairs[0]} has {len(sources)} lines and {args.pairs[1]} {len(targets)}: give each "
                     "sentence's reference translation on the same line of the second file")
    else:
        pairs = load_pairs(args.data, args.split, translator.src_tokenizer.lang, translator.tgt_tokenizer.lang)
        sources, targets = list(pairs["src"]), list(pairs["tgt"])
    limit = args.limit or len(sources)
    return sources[:limit], targets[:limit]


def report_folder(checkpoint: str, out: str | None) -> Path:
    """Where the head report goes: `out` where given, else the checkpoint folder the user gave, else (a checkpoint
    found by name, which the studies never change) NAME-heads in the working directory."""
    if out is not None:
        return Path(out)
    return Path(f"{Path(checkpoint).name}-heads") if found_by_name(checkpoint) else Path(checkpoint)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True,
                        help="checkpoint folder, or the name of a shipped one (en-de), read only")
    parser.add_argument("--out", metavar="DIR",
                        help="folder to write heads.json into (default: the checkpoint folder given; for a checkpoint "
                             "given by name, NAME-heads in the working directory)")
    parser.add_argument("--overwrite", action="store_true", help="replace a heads.json already in that folder")
    parser.add_argument("--data", default=DEFAULT_DATA, help="Multi30k folder or hub id")
    parser.add_argument("--split", default="val", choices=("train", "val", "test"))
    parser.add_argument("--limit", type=int, help="only the first N sentences of the split")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    add_device_argument(parser)
    parser.add_argument("--gold", help="gold word alignments of the split in Pharaoh format, for each cross-attention "
                        "head's AER (default: the reversal task's exact ones, or a statistical aligner's)")
    parser.add_argument("--pairs", nargs=2, metavar=("SOURCES", "TARGETS"),
                        help="two line-aligned text files, sentences and their reference translations, to measure over "
                        "in place of a Multi30k split: any model, any languages")
    parser.add_argument("--src-lang", help="a multilingual model's source language code (default: its default), as "
                        "the page's menu names it; with --pairs")
    parser.add_argument("--tgt-lang", help="a multilingual model's target language code (default: its default)")
    parser.add_argument("--bleu-per-head", action="store_true",
                        help="also the greedy BLEU with each head off alone: the split decoded once per head (the "
                        "log-likelihood's change, many heads per batched pass, is measured either way)")
    parser.add_argument("--heads-per-decoding", type=int, default=HEADS_PER_DECODING, metavar="N",
                        help="with --bleu-per-head: heads switched off together in one decoding, each in its own "
                             f"copy of the sentences (default {HEADS_PER_DECODING})")
    parser.add_argument("--exact", type=exact_count, default=argparse.SUPPRESS, metavar="K|all",
                        help="measure exactly the K heads the estimate ranks most harmful when switched off, plus "
                             f"--check others at random (default {EXACT}, or every head of a model with fewer); "
                             "'all': every head, and the estimate's "
                             "agreement with it")
    parser.add_argument("--check", type=int, default=CHECK, metavar="N",
                        help=f"heads outside the top K measured exactly too, drawn at random (default {CHECK})")
    parser.add_argument("--estimate", choices=ORDERS, default="second",
                        help="the estimate's order: the gates' gradient, or with their Hessian's diagonal too "
                             "(default second)")
    parser.add_argument("--probes", type=int, default=PROBES, metavar="N",
                        help=f"Hutchinson's vectors per batch for the second order (default {PROBES})")
    parser.add_argument("--statistics-only", action="store_true",
                        help="only add the heads' statistics to an existing heads.json (that folder's, else the "
                             "checkpoint's own, written to that folder)")
    args = parser.parse_args(argv)
    if args.check < 0 or args.probes < 1:
        parser.error("--check takes 0 or more heads, --probes 1 or more vectors")
    out = report_folder(args.checkpoint, args.out)
    if (out / HEADS).is_file() and not (args.overwrite or args.statistics_only):
        sys.exit(f"{out / HEADS} exists (the page reads it for the importance map and the head it opens on): give "
                 "--overwrite to replace it, or --out DIR to write the report elsewhere")
    require(*(() if args.statistics_only else BLEU), *(() if args.pairs else DATA))  # said before any work
    torch.set_num_threads(args.threads)
    began = time.perf_counter()
    refuse_missing_device(args.device)
    translator = load_checkpoint(args.checkpoint)
    count = len(every_head(translator))
    args.exact = getattr(args, "exact", min(EXACT, count))  # not given: EXACT, or every head of a smaller model
    if args.exact is not None and args.exact > count:
        sys.exit(f"--exact {args.exact}: this model has {count} heads; give at most that many, or 'all'")
    direction = {"src_lang": args.src_lang, "tgt_lang": args.tgt_lang}
    if (args.src_lang or args.tgt_lang) and not args.pairs:
        sys.exit("--src-lang and --tgt-lang measure over your own sentences: give them with --pairs SOURCES TARGETS")
    try:  # languages the model has not, or a direction for a model of one
        translator.source_prefix(**direction)
        translator.with_target_prefix([], args.tgt_lang)
    except InputError as error:
        sys.exit(str(error))
    texts, references = sentence_pairs(translator, args)
    sources = translator.src_tokenizer.tokenize_all(texts)
    targets = translator.tgt_tokenizer.tokenize_all(references)
    data = None if args.pairs else args.data  # a user's files: the aligner learns from them alone
    sure, possible, reference = reference_alignments(translator, data, args.split, sources, targets, args.gold)
    if args.pairs:
        args.split = "the sentences of " + " and ".join(args.pairs)
    # Under torchrun each process reads a block of the split and the sums are added up; rank 0 writes.
    ranks = distributed.start()
    device = chosen_device(args.device, ranks)
    translator = translator.on(device)
    if len(sources) < ranks.world_size:
        sys.exit(f"{len(sources)} sentences cannot be shared by {ranks.world_size} processes")
    began_part = time.perf_counter()
    statistics = split_statistics(translator, sources, targets, (sure, possible), ranks, direction)
    timings = {"statistics": time.perf_counter() - began_part}
    if args.statistics_only:
        distributed.stop(ranks)
        if not ranks.main:
            return
        report = read_json(out / HEADS) if (out / HEADS).is_file() else translator.head_report
        if not report:
            sys.exit(f"no heads.json in {out} nor in the checkpoint to add statistics to: run the report first")
        for name, values in statistics.items():
            report["heads"].setdefault(name, {}).update(values)
        report["statistics"] = {"split": args.split, "sentences": len(sources), "alignments": reference,
                                "date": datetime.date.today().isoformat()}
        written(out, report, args.checkpoint)
        print(f"statistics of {len(statistics)} heads over {len(sources)} sentences of {args.split} added")
        return
    names = every_head(translator)
    out.mkdir(parents=True, exist_ok=True)  # the resume files' folder too
    progress = Progress(out, ranks, measured_arguments(argv if argv is not None else sys.argv[1:]))
    if progress.resumed and ranks.main:
        print(f"going on from {progress.path} (an interrupted run with the same arguments)", file=sys.stderr)

    began_part = time.perf_counter()
    base_bleu = greedy_bleu(translator, sources, references, ranks=ranks, direction=direction)
    timings["bleu"], began_part = time.perf_counter() - began_part, time.perf_counter()
    batches = teacher_forced_batches(translator, sources, targets, estimate_tokens(translator), direction)
    estimate, importance = estimated_changes(translator, batches, args.estimate, args.probes, ranks, progress)
    timings["estimate"], began_part = time.perf_counter() - began_part, time.perf_counter()
    top, check = measured_heads(estimate, args.exact, args.check)
    base_likelihood, changes = log_likelihood_changes(translator, sources, targets, ranks, direction, progress,
                                                      top + check)
    timings["exact"], began_part = time.perf_counter() - began_part, time.perf_counter()
    heads = {name: {**statistics.get(name, {}), "importance": round(importance[name], 6),
                    "log_likelihood_change_estimate": round(estimate[name], 5)} for name in names}
    for name, change in changes.items():
        heads[name]["log_likelihood_change"] = round(change, 5)
    bleus = progress.get("bleu", {})
    pending = [name for name in names if name not in bleus] if args.bleu_per_head else []
    with tqdm(total=len(pending), desc="BLEU, one head off", unit="head", file=sys.stderr,
              disable=not ranks.main or not pending) as bar:
        def kept(measured: dict[str, float]) -> None:  # each decoding's BLEUs into the resume file
            bleus.update(measured)
            progress.put("bleu", bleus)
            bar.update(len(measured))
        bleus_per_head(translator, sources, references, pending, args.heads_per_decoding, ranks, direction, kept)
    for name in names if args.bleu_per_head else []:
        heads[name]["bleu_change"] = round(bleus[name] - base_bleu, 2)
    timings["bleu_per_head"], began_part = time.perf_counter() - began_part, time.perf_counter()
    order = sorted(names, key=lambda name: importance[name])  # least important first
    pruning = [{"fraction": 0.0, "heads_off": 0, "bleu": base_bleu}]
    for fraction in tqdm(PRUNED_FRACTIONS, desc="pruning", file=sys.stderr, disable=not ranks.main):
        off = order[:round(fraction * len(order))]
        if len(off) == pruning[-1]["heads_off"]:  # a model with few heads: the same point again
            continue
        pruning.append({"fraction": fraction, "heads_off": len(off),
                        "bleu": greedy_bleu(translator, sources, references, head_gates(translator.model, off), ranks,
                                            direction)})
    timings["pruning"] = time.perf_counter() - began_part
    distributed.stop(ranks)
    progress.finish()
    if not ranks.main:
        return
    drop = next((point for point in pruning if point["bleu"] < base_bleu - 1), None)
    report = {
        "command": ("python" if ranks.backend is None else f"torchrun --nproc_per_node {ranks.world_size}")
                   + " -m model.analysis.heads " + shlex.join(argv if argv is not None else sys.argv[1:]),
        "split": args.split, "sentences": len(references), "date": datetime.date.today().isoformat(),
        "direction": None if translator.languages is None else {  # a multilingual model's, as measured
            "src_lang": args.src_lang or translator.languages.source,
            "tgt_lang": args.tgt_lang or translator.languages.target},
        "hardware": hardware(device),
        "seconds": round(time.perf_counter() - began),
        "bleu": base_bleu, "log_likelihood": round(base_likelihood, 5), "heads": heads,
        "statistics": {"split": args.split, "sentences": len(sources), "alignments": reference},
        "estimate": estimate_record(args, estimate, importance, changes, top, check),
        "seconds_per_part": {part: round(seconds, 1) for part, seconds in timings.items()},
        "pruning": pruning,
        # The first pruning point (fewest heads off) whose BLEU is more than 1 below all heads on.
        "bleu_drops_by_1_at": None if drop is None else {key: drop[key] for key in ("fraction", "heads_off")},
    }
    written(out, report, args.checkpoint)
    print(f"{len(references)} sentences of {args.split}: greedy BLEU {base_bleu}, log-likelihood "
          f"{base_likelihood:.4f} per token; {report['seconds']} s")
    print(estimate_summary(report["estimate"]))
    print(f"{'head':<12} {'importance':>10} {'BLEU change':>12} {'log-lik change':>15} {'estimated':>10}")
    for name in sorted(names, key=lambda name: estimate[name]):
        head = heads[name]
        bleu = f"{head['bleu_change']:>12.2f}" if "bleu_change" in head else f"{'-':>12}"  # --bleu-per-head
        exact = f"{head['log_likelihood_change']:>15.4f}" if "log_likelihood_change" in head else f"{'-':>15}"
        print(f"{name:<12} {head['importance']:>10.3f} {bleu} {exact} {head['log_likelihood_change_estimate']:>10.4f}")
    print("pruning in increasing importance: "
          + ", ".join(f"{p['heads_off']} off -> {p['bleu']}" for p in pruning))
    print("BLEU never drops by more than 1" if drop is None else
          f"BLEU drops by more than 1 with {drop['heads_off']} of {len(names)} heads off "
          f"({drop['heads_off'] / len(names):.0%})")


def written(out: Path, report: dict, checkpoint: str) -> None:
    """`report` written as `out`/heads.json, said with where; for a checkpoint given by name, how the page shows it."""
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / HEADS, report)
    print(f"the head report is in {out / HEADS}")
    if found_by_name(checkpoint):
        print(f"(the shipped {checkpoint} is left as it is; the page reads the heads.json in a checkpoint's folder: to "
              f"see this one there, copy {checkpoint}'s folder, put it in, and serve that folder's parent with "
              "--checkpoints DIR)")


if __name__ == "__main__":
    main()
