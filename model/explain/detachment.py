"""Is a translation detached from its source? The model's own signals, per token and per sentence.

A hallucination, a translation detached from its source, is the worst error of NMT (Guerreiro et al., 2023,
"Looking for a Needle in a Haystack"). Dale et al. (2023, "Detecting and Mitigating Hallucinations in Machine
Translation: Model Internal Workings Alone Do Well, Sentence Similarity Even Better") detect it from the model's
internals: the share of each target token's prediction that comes from the source (ALTI+, Ferrando et al., 2022;
model/explain/contributions.py), averaged over the translation, beats the sequence log-probability on fully
detached output. Beside them:

- SOURCE_SHARE: the mean ALTI+ source share of the translation's tokens (Dale et al.'s "source contribution");
  a Transformer's only (a GRU has no residual stream to decompose).
- LOG_PROBABILITY: the mean log-probability of its tokens, teacher-forced (Dale et al.'s Seq-Logprob).
- COMBINED: the geometric mean of the source share and the tokens' (geometric) mean probability, both in
  [0, 1]; the probability alone where the model has no source share. It is what the page flags by: told apart
  from en-de's own translations of 500 Multi30k val sources, the same sources paired with another's translation
  score ROC-AUC 0.75 by the source share alone, 1.00 by the log-probability and by the combination
  (`python benchmarks/detachment_table.py`, docs/explanations.md).
- ATTENTION: the mean, over target tokens, of the largest weight the last layer's cross-attention (its heads
  averaged) puts on one source token; low where attention spreads over the source rather than reading it.

Every score is higher for a translation that rests on its source: a detector flags low scores. Per token, the
combination is the geometric mean of the token's source share and its probability.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attention_inspector.model.explain.contributions import Contributions
from attention_inspector.model.explain.omissions import Omissions
from attention_inspector.model.text.words import summed, words

SOURCE_SHARE, LOG_PROBABILITY, COMBINED, ATTENTION = "source_share", "log_probability", "combined", "attention"
DETECTORS = (SOURCE_SHARE, LOG_PROBABILITY, COMBINED, ATTENTION)
DETECTOR_LABELS = {SOURCE_SHARE: "source share (ALTI+)", LOG_PROBABILITY: "mean log-probability",
                   COMBINED: "source share × probability", ATTENTION: "cross-attention's peak"}
NO_SOURCE_SHARE = ("this model is a GRU: it has no residual stream for ALTI+ to decompose, so no source share; its "
                   "mean log-probability and cross-attention's peak are given")

# Where nothing was calibrated for a model (`python -m model.analysis.detachment --calibrate` writes its own into
# metrics.json): the combined score of a sentence, and of a token, under which the page marks it.
DEFAULT_THRESHOLDS = {"sentence": 0.4, "token": 0.2}
CALIBRATED_SHARE = 0.05  # --calibrate's thresholds: in the lowest 5% of the model's own translations of the split


@dataclass
class Detachment:
    """One translation's signals, per target token (T: the generated tokens, <eos> included where generated)."""

    log_probabilities: np.ndarray  # (T,) teacher-forced
    attention_peaks: np.ndarray  # (T,) the largest last-layer cross-attention weight (heads averaged)
    source_shares: np.ndarray | None = None  # (T,) ALTI+; None for a model without (`unavailable` says why)
    unavailable: str | None = None

    def score(self, detector: str) -> float | None:
        """The sentence's score by `detector` (higher: more attached to the source); None where the model has none."""
        if detector == SOURCE_SHARE:
            return None if self.source_shares is None else float(self.source_shares.mean())
        if detector == LOG_PROBABILITY:
            return float(self.log_probabilities.mean())
        if detector == ATTENTION:
            return float(self.attention_peaks.mean())
        if detector == COMBINED:
            return float(combined(self.score(SOURCE_SHARE), self.score(LOG_PROBABILITY)))
        raise ValueError(f"detector must be one of {', '.join(DETECTORS)}, not {detector!r}")

    def scores(self) -> dict[str, float | None]:
        return {detector: self.score(detector) for detector in DETECTORS}

    def token_signal(self) -> np.ndarray:
        """Per token, the combined score: the geometric mean of its source share and its probability (the
        probability alone without a source share)."""
        return combined(self.source_shares, self.log_probabilities)

    def flags(self, thresholds: dict) -> tuple[bool, np.ndarray]:
        """Whether the sentence's combined score, and which tokens', fall below `thresholds` ({"sentence": …,
        "token": …})."""
        return self.score(COMBINED) < thresholds["sentence"], self.token_signal() < thresholds["token"]


@dataclass
class ScoredDetachment:
    """A translation's detachment from its source: what `Translator.detachment` returns."""

    source_tokens: list[str]
    target_tokens: list[str]  # as scored (a word the model cannot spell as <unk>)
    unknown: list[str]  # the translation's tokens the model cannot spell
    measured: Detachment
    contributions: Contributions | None  # the ALTI+ maps the source shares came from (a Transformer's)
    thresholds: dict  # {"sentence": …, "token": …} of the combined score, what the page marks by
    threshold_meaning: str  # calibrated on what, or a default
    # The source words the translation left out (model/explain/omissions.py), or why they were not looked for.
    omissions: Omissions | str | None = None
    domain: str | None = None  # what the model learned from, where that is narrow (`training_domain`)

    @property
    def flags(self) -> tuple[bool, np.ndarray]:
        """Whether the sentence, and which tokens, fall under the thresholds."""
        return self.measured.flags(self.thresholds)

    def in_units(self, scheme: str, in_words: bool) -> tuple[list[str], dict[str, np.ndarray | None], np.ndarray]:
        """The target tokens, or its words (`in_words`, by `scheme`), with each one's signals ("source_share",
        "log_probability", "attention_peak"; a word's share and peak the mean of its pieces', its log-probability
        their sum; "combined" of those) and which fall under the token threshold."""
        measured, tokens = self.measured, self.target_tokens
        signals = {"source_share": measured.source_shares, "log_probability": measured.log_probabilities,
                   "attention_peak": measured.attention_peaks}
        if in_words:
            tokens, spans = words(tokens, scheme)
            sizes = np.array([len(span) for span in spans])
            signals = {name: None if values is None else summed(values, spans) / (1 if name == "log_probability"
                                                                                 else sizes)
                       for name, values in signals.items()}
        signals["combined"] = combined(signals["source_share"], signals["log_probability"])
        return tokens, signals, signals["combined"] < self.thresholds["token"]


def combined(shares: np.ndarray | float | None, log_probabilities: np.ndarray | float) -> np.ndarray:
    """Per token (or word: its pieces' mean share and summed log-probability; or sentence: its means),
    √(share × probability)."""
    probability = np.exp(log_probabilities)
    return probability if shares is None else np.sqrt(np.clip(shares, 0.0, None) * probability)


def thresholds_of(metrics: dict) -> tuple[dict, str]:
    """The combined score's sentence and token thresholds for a model, and what they mean: the ones `--calibrate`
    wrote into its metrics.json, else the defaults."""
    detachment = metrics.get("detachment", {})
    if "thresholds" in detachment:
        return detachment["thresholds"], (f"in the lowest {CALIBRATED_SHARE:.0%} of this model's own translations of "
                                          f"{detachment.get('split', 'a corpus')}")
    return dict(DEFAULT_THRESHOLDS), "a default, not calibrated for this model"


def training_domain(metrics: dict) -> str | None:
    """What a model learned from, where that is narrow: image captions for a model trained on Multi30k (a flagged
    sentence of another kind is then the likely cause); None where its metrics do not say so."""
    data = metrics.get("training", {}).get("data", "") if isinstance(metrics.get("training"), dict) else ""
    return "image captions" if "multi30k" in str(data).lower() else None


def attention_peaks(cross_attention: np.ndarray) -> np.ndarray:
    """(T,) from cross-attention (L, H, T, S): the last layer's heads averaged, each target token's largest weight."""
    return cross_attention[-1].mean(0).max(-1)


def ranked(values: list[float], detached: list[bool]) -> tuple[float, float]:
    """ROC-AUC of flagging low `values` as detached, and the precision at the first threshold that finds 90% of
    the detached ones (the pairs flagged: every one at or below it)."""
    values, detached = np.asarray(values, dtype=float), np.asarray(detached, dtype=bool)
    positives, negatives = values[detached], values[~detached]
    if not len(positives) or not len(negatives):
        raise ValueError("ROC-AUC needs detached and attached pairs both")
    # AUC: the chance a detached pair scores below an attached one (ties count half), the Mann-Whitney U.
    below = (positives[:, None] < negatives[None, :]).sum() + 0.5 * (positives[:, None] == negatives[None, :]).sum()
    auc = float(below / (len(positives) * len(negatives)))
    threshold = np.quantile(positives, 0.9, method="inverted_cdf")  # 90% of the detached at or below it
    flagged = values <= threshold
    return auc, float((flagged & detached).sum() / flagged.sum())
