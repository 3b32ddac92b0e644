"""What a translation left out: the source words it never translated, from the model's own scores.

- CONTRASTIVE, contrastive conditioning (Vamvas & Sennrich, 2022, "As Little as Possible, as Much as Necessary:
  Detecting Over- and Undertranslations with Contrastive Conditioning"): a source span is likely untranslated when
  the translation is at least as probable given the source without that span as given the whole source. For each
  span (a word, a run of up to `WINDOW` words, or a longer window: `deletions`), Δ = log p(y | x without the span)
  − log p(y | x), the translation's log-probability teacher-forced and summed over its tokens: a span the
  translation rests on lowers it when deleted (Δ < 0); one it left out does not. A word's score is the largest Δ of
  the spans that hold it. One teacher-forced pass per span, in batches; it needs only scores, so every model has it.
- CONTRIBUTION: each source word's total ALTI+ contribution over the translation (the sum, over its tokens, of the
  word's share of each prediction; model/explain/contributions.py): low where little of it reached the
  translation. A Transformer's only (a GRU has no residual stream to decompose).

A word is flagged where its contrastive score reaches the model's threshold (calibrated on its own translations:
model/analysis/detachment.py `--omissions --calibrate`, else `DEFAULT_THRESHOLD`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from attention_inspector.model.nets.decoding import NEVER_EMITTED
from attention_inspector.model.nets.seq2seq import HeadGates, Seq2Seq, device_of
from attention_inspector.model.text.vocab import PAD_ID, SOS_ID
from attention_inspector.model.text.words import word_spans, words

CONTRASTIVE, CONTRIBUTION = "contrastive", "contribution"
SIGNALS = (CONTRASTIVE, CONTRIBUTION)
WINDOW = 3  # every run of up to this many words is deleted
# and runs of these many words, each starting half its length after the last: a clause left out whole (a man on a
# bicycle carrying bread) scores where each of its words alone does not, the rest of the clause still standing
LONGER = (5, 8, 13)
# Where nothing was calibrated for a model: Vamvas & Sennrich's rule, Δ ≥ 0, flags most of a model's own faithful
# translations here (80% of en-de's), so the default asks for a clearer gain (see docs/explanations.md).
DEFAULT_THRESHOLD = 1.0
CALIBRATED_SHARE = 0.1  # `--calibrate`: the threshold above which 10% of the model's own translations have a word
LOGITS_BUDGET = 40_000_000  # floats of logits one batch of passes may hold (a 256k vocabulary: ~5 passes of 30 steps)


@dataclass
class Omissions:
    """Which words of a source a translation left out: per source word (a language code, a prompt and <eos> left
    out), each signal and whether it is flagged."""

    words: list[str]
    spans: list[range]  # each word's pieces, as indices of the source tokens
    contrastive: np.ndarray  # (W,) the largest Δ log p of a span holding the word; NaN: not scored (punctuation)
    contributions: np.ndarray | None  # (W,) the word's total ALTI+ contribution, or None (a GRU)
    threshold: float  # the contrastive score from which a word is flagged
    threshold_meaning: str

    @property
    def flagged(self) -> np.ndarray:
        """(W,) whether each word is judged left out (never a word that is not scored)."""
        return np.nan_to_num(self.contrastive, nan=-np.inf) >= self.threshold

    @property
    def omitted(self) -> list[str]:
        """The flagged words, in order."""
        return [word for word, flag in zip(self.words, self.flagged) if flag]


def source_words(source_tokens: list[str], scheme: str, prefix: int) -> tuple[list[str], list[range]]:
    """The words of a source (its tokens with <eos> last) after its `prefix` tokens (a language code, T5's prompt),
    each with its pieces as indices of the tokens."""
    labels, spans = words(source_tokens[prefix:-1], scheme)
    return labels, [range(span.start + prefix, span.stop + prefix) for span in spans]


def worded(word: str) -> bool:
    """Whether a word can be left out of a translation: it has a letter or a digit (punctuation is not scored)."""
    return any(character.isalnum() for character in word)


def deletions(labels: list[str], window: int = WINDOW, longer: tuple[int, ...] = LONGER) -> list[tuple[int, int]]:
    """The runs of words deleted, as (first, end), none of them the whole source and each starting and ending with a
    word of letters or digits (`worded`): every run of 1 to `window` words, then of each of the `longer` sizes
    every half its length (the last reaching the source's end), punctuation at its ends left standing."""
    count = len(labels)
    runs = [(first, first + size) for size in range(1, window + 1) for first in range(count - size + 1)
            if size < count and worded(labels[first]) and worded(labels[first + size - 1])]
    for size in longer:
        starts = range(0, count - size + 1, size // 2)
        for first in sorted({*starts, count - size} if size < count else ()):
            run = trimmed(labels, first, first + size)
            if run is not None and run[1] - run[0] > window and run not in runs:
                runs.append(run)
    return runs


def trimmed(labels: list[str], first: int, end: int) -> tuple[int, int] | None:
    """The run of words from `first` to `end` without the punctuation at its ends, or None if none is left."""
    while first < end and not worded(labels[first]):
        first += 1
    while end > first and not worded(labels[end - 1]):
        end -= 1
    return (first, end) if first < end else None


@torch.inference_mode()
def contrastive_changes(model: Seq2Seq, src_ids: list[int], tgt_ids: list[int], deleted: list[range],
                        scored_from: int = 0, gates: HeadGates | None = None) -> np.ndarray:
    """(D,) Δ log p of `tgt_ids` (summed from position `scored_from`: a given language code is not scored) when each
    of `deleted` (runs of source positions) is taken out of `src_ids`, against the whole source; teacher-forced,
    the passes batched."""
    device = device_of(model)
    sources = [src_ids] + [[i for position, i in enumerate(src_ids) if position not in span] for span in deleted]
    length = max(map(len, sources))
    src = torch.tensor([ids + [PAD_ID] * (length - len(ids)) for ids in sources], device=device)
    tgt_in = torch.tensor([[SOS_ID] + tgt_ids[:-1]], device=device)
    chosen = torch.tensor(tgt_ids, device=device)[scored_from:]
    ruled_out = torch.tensor(NEVER_EMITTED, device=device)
    size = max(1, LOGITS_BUDGET // (len(tgt_ids) * model.config.tgt_vocab_size))
    totals = []
    for start in range(0, len(sources), size):
        part = src[start:start + size]
        logits, _ = model(part, tgt_in.expand(len(part), -1), gates=gates)
        log_probs = logits[:, scored_from:].float().index_fill(-1, ruled_out, float("-inf")).log_softmax(-1)
        totals.append(log_probs.gather(-1, chosen.expand(len(part), -1)[..., None])[..., 0].sum(-1))
    totals = torch.cat(totals).double().cpu().numpy()
    return totals[1:] - totals[0]


def word_scores(changes: np.ndarray, runs: list[tuple[int, int]], labels: list[str]) -> np.ndarray:
    """(W,) each word's largest Δ over the runs of words (`runs`, as (first, end)) that hold it; NaN for a word that
    is not scored (punctuation)."""
    scores = np.full(len(labels), -np.inf)
    for change, (first, end) in zip(changes, runs):
        scores[first:end] = np.maximum(scores[first:end], change)
    scores[[not worded(label) for label in labels]] = np.nan
    return scores


def threshold_of(metrics: dict) -> tuple[float, str]:
    """The contrastive threshold a model's words are flagged from, and what it means: the one `--omissions
    --calibrate` wrote into its metrics.json, else the default."""
    calibrated = metrics.get("omissions", {})
    if "threshold" in calibrated:
        return calibrated["threshold"], (f"calibrated: {CALIBRATED_SHARE:.0%} of this model's own translations of "
                                         f"{calibrated.get('split', 'a corpus')} have a word above it")
    return DEFAULT_THRESHOLD, "a default, not calibrated for this model"


def omissions(model: Seq2Seq, source_tokens: list[str], scheme: str, prefix: int, src_ids: list[int],
              tgt_ids: list[int], scored_from: int, metrics: dict, gates: HeadGates | None = None,
              decoder_shares: np.ndarray | None = None, only: set[int] | None = None,
              share: tuple[int, int] | None = None) -> Omissions:
    """The `Omissions` of the translation `tgt_ids` (scored from `scored_from`) of the source `source_tokens` (<eos>
    last; its first `prefix` tokens a language code or prompt; `src_ids` their ids), with the heads of `gates` off;
    `decoder_shares`: ALTI+'s decoder map of the same translation, where the model has one; `only`: the words to
    score (the runs holding them deleted, their scores exact), the others NaN (None: every word); `share` (k, n):
    only every n-th run from the k-th (a word's score is the largest over the shares', -inf where a share has no
    run holding it), for n processes to split the passes. A ValueError for a source of one word, whose only span is
    the whole source."""
    labels, spans = source_words(source_tokens, scheme, prefix)
    runs = deletions(labels)
    if not runs:
        raise ValueError("The source has no word that could be left out but the whole source (one word, or "
                         "punctuation alone): nothing can be said about words left out.")
    if only is not None:
        runs = [(first, end) for first, end in runs if any(first <= i < end for i in only)]
    if share is not None:
        runs = runs[share[0]::share[1]]
    changes = contrastive_changes(model, src_ids, tgt_ids, [range(spans[first].start, spans[end - 1].stop)
                                                            for first, end in runs], scored_from, gates) \
        if runs else np.zeros(0)
    scores = word_scores(changes, runs, labels)
    if only is not None:
        scores[[i not in only for i in range(len(labels))]] = np.nan
    return Omissions(labels, spans, scores,
                     None if decoder_shares is None else word_contributions(decoder_shares, spans),
                     *threshold_of(metrics))


def word_contributions(decoder_shares: np.ndarray, spans: list[range]) -> np.ndarray:
    """(W,) each word's total ALTI+ contribution: its pieces' shares (decoder (T, S + T) of `Contributions`) summed
    over the translation's tokens and the word's pieces."""
    totals = decoder_shares.sum(0)
    return np.array([totals[span.start:span.stop].sum() for span in spans])
