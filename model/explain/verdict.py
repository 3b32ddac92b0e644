"""The verdict on a translation: the source words it left out or mistranslated and the words it made up, judged by a
model that knows both languages and did not make the translation.

The translating model cannot see what it failed to use: deleting a word it ignored barely changes its probability
of a translation that already ignored it. So the judge is the reverse direction (en-de's translations are judged by
de-en; Vamvas & Sennrich, 2022, judge with a separate model too), reading the translation and writing the source:

- RECONSTRUCTION: each source word's surprisal given the translation, −log p of its least probable piece when the
  evaluator writes the source teacher-forced. A word the translation carries is easy to write back; one it left
  out or mistranslated is not. A word with a piece the evaluator cannot write (read as <unk>) is not judged.
- CONTRASTIVE, the translating model's own contrastive conditioning (model/explain/omissions.py): Δ log p of the
  translation when the word is deleted from the source. It decides only what kind of error a word the evaluator
  could not write back is: left out where the translation is about as probable without it (the model did not use
  it), mistranslated where it is clearly less probable (the model used it, and wrote something else).
- NEEDED, contrastive conditioning of the evaluator with the roles swapped (Vamvas & Sennrich's additions): Δ log p
  of the source when a word (or run of words) is deleted from the translation. A word the evaluator does not need
  to write the source back was made up; a word that repeats an earlier content word of the translation is made up
  from a lower Δ (a repetition, the commonest made-up words of these models).

Only content words are judged (spaCy's rule-based stop words and punctuation are not), the units of the reader's
labels (benchmarks/real_errors.py, docs/labelling.md). The four thresholds are calibrated on the tuning half of a
model's labelled real errors (`python benchmarks/real_errors.py calibrate`, written into its metrics.json under
"verdict"); where nothing was calibrated, `DEFAULT` holds and says so.
"""

from __future__ import annotations

import difflib
import functools
from dataclasses import dataclass, field, replace

import numpy as np
import spacy

from attention_inspector.model.explain.omissions import Omissions, worded

LEFT_OUT, MISTRANSLATED, MADE_UP, UNJUDGED = "left out", "mistranslated", "made up", "unjudged"
MOST_NAMED = 3  # phrases the plain line names; the rest are counted (the source line marks every one)
MOST_WORDS = 3  # words of a phrase the plain line shows, for a phone's three lines ("a red dog…")


@dataclass(frozen=True)
class Calibration:
    """The thresholds the verdict judges by, and what they mean."""

    surprisal: float  # a source word whose worst piece is at least this surprising (nats) is not carried
    contrastive: float  # ... and is left out where its contrastive Δ log p is at least this, else mistranslated
    needed: float  # a translation word whose deletion changes the source's log-probability by at least this
    repeated: float  # ... or at least this where it repeats an earlier content word of the translation
    meaning: str

    @classmethod
    def of(cls, metrics: dict) -> Calibration:
        """The calibration `python benchmarks/real_errors.py calibrate` wrote into a model's metrics.json, else
        `DEFAULT`."""
        found = metrics.get("verdict", {}).get("thresholds")
        if not found:
            return DEFAULT
        return cls(found["surprisal"], found["contrastive"], found["needed"], found["repeated"],
                   f"calibrated on {metrics['verdict'].get('calibrated_on', 'labelled real errors')}")


# The mean of en-de's and de-en's calibrations (metrics.json), for a model none was calibrated for.
DEFAULT = Calibration(5.5, -3.25, 8.75, -2.25, "a default (en-de's and de-en's calibrations averaged), not "
                                                "calibrated for this model")


@dataclass
class Reconstruction:
    """What an evaluator (reading the translation, writing the source) makes of one translation."""

    evaluator: str  # its name
    source_words: list[str]  # the source as the evaluator writes it, in words
    surprisal: np.ndarray  # (W,) each word's worst piece's −log p given the translation, nats
    unknown: np.ndarray  # (W,) bool: a piece the evaluator cannot write, so the word is not judged
    translation_words: list[str]  # the translation as the evaluator reads it, in words
    needed: np.ndarray  # (V,) Δ log p of the source with the word deleted from the translation; NaN: not scored
    cut: int = 0  # the translation's pieces past the evaluator's length limit, not read


@dataclass
class Verdict:
    """A translation judged: per source word (the translating model's words) and per translation word, what kind of
    error it may be (None: none found) and the evidence."""

    source_words: list[str]
    source_kinds: list[str | None]  # LEFT_OUT, MISTRANSLATED, UNJUDGED or None
    source_evidence: list[dict]  # per word, whether it is judged and each signal's value (None: not measured)
    translation_words: list[str]
    translation_kinds: list[str | None]  # MADE_UP or None
    translation_evidence: list[dict]
    calibration: Calibration
    evaluator: str | None  # the model that judged; None: the translating model's own contrastive conditioning alone
    lacking: list[str] = field(default_factory=list)  # the checks it could not make, and why

    def under(self, calibration: Calibration) -> Verdict:
        """The same evidence judged by `calibration`'s thresholds."""
        return replace(self, calibration=calibration,
                       source_kinds=[source_kind(said, calibration) for said in self.source_evidence],
                       translation_kinds=[translation_kind(said, calibration) for said in self.translation_evidence])

    def runs(self, kind: str) -> list[list[int]]:
        """The words of `kind` as phrases, each a list of word indices: runs of neighbours in the source (or the
        translation, for MADE_UP), a word between two of them included where it is judged nothing else ("bag of
        bread"), never words that are not adjacent."""
        words, kinds = ((self.translation_words, self.translation_kinds) if kind == MADE_UP
                        else (self.source_words, self.source_kinds))
        marked = [k == kind for k in kinds]
        for i in range(1, len(words) - 1):
            if not marked[i] and marked[i - 1] and marked[i + 1] and kinds[i] is None and worded(words[i]):
                marked[i] = True
        runs, run = [], []
        for i, mark in enumerate(marked):
            if mark:
                run.append(i)
            elif run:
                runs, run = runs + [run], []
        return runs + [run] * bool(run)

    def phrases(self, kind: str) -> list[str]:
        """The phrases of `kind` (`runs`) as they stand, words joined by spaces."""
        words = self.translation_words if kind == MADE_UP else self.source_words
        return [" ".join(words[i] for i in run) for run in self.runs(kind)]

    def named(self) -> list[tuple[str, list[int], int]]:
        """What the plain line names, per kind in its order (left out, made up, mistranslated): the kind, its first
        phrases (their word indices; at most `MOST_NAMED` in all) and how many more it has."""
        named, count = [], 0
        for kind in (LEFT_OUT, MADE_UP, MISTRANSLATED):
            runs = self.runs(kind)
            if runs:
                shown = runs[:max(0, MOST_NAMED - count)]
                named.append((kind, shown, len(runs) - len(shown)))
                count += len(shown)
        return named

    def shown(self, kind: str, run: list[int]) -> str:
        """A phrase as the plain line names it: quoted, its first `MOST_WORDS` words (the rest marked below)."""
        words = self.translation_words if kind == MADE_UP else self.source_words
        return "“" + " ".join(words[i] for i in run[:MOST_WORDS]) + "…" * (len(run) > MOST_WORDS) + "”"

    @property
    def left_out(self) -> list[int]:
        """The source words judged left out or mistranslated (what the page marks on the source)."""
        return [i for i, kind in enumerate(self.source_kinds) if kind in (LEFT_OUT, MISTRANSLATED)]

    @property
    def unjudged(self) -> list[str]:
        """The source words the evaluator could not judge (a piece it cannot write)."""
        return [word for word, kind in zip(self.source_words, self.source_kinds) if kind == UNJUDGED]

    def plain(self) -> str:
        """The line under the translation: at most `MOST_NAMED` phrases (`shown`), left out first, then made up, then
        mistranslated, and the words not judged; "" where nothing was found."""
        parts = []
        for kind, runs, more in self.named():
            parts.append(f"{SAID[kind]}: " + ", ".join(self.shown(kind, run) for run in runs)
                         + (" and " * bool(runs) + f"{more} more" if more else ""))
        if self.unjudged:
            parts.append(f"not judged ({self.evaluator} does not know them): " + ", ".join(self.unjudged[:MOST_NAMED])
                         + (f" and {len(self.unjudged) - MOST_NAMED} more" if len(self.unjudged) > MOST_NAMED else ""))
        line = "; ".join(parts)
        return line[:1].upper() + line[1:]


SAID = {LEFT_OUT: "may have left out", MADE_UP: "may have made up", MISTRANSLATED: "may have mistranslated"}


@functools.cache
def stop_words(lang: str) -> frozenset[str]:
    """The stop words of a language (spaCy's rule-based lists; a Hub code such as "deu_Latn" or "de_DE" read by its
    language), or none where spaCy has no list for it."""
    for code in (lang, lang.split("_")[0][:2]):
        try:
            return frozenset(spacy.util.get_lang_class(code).Defaults.stop_words)
        except (ImportError, AttributeError):
            continue
    return frozenset()


def content(words: list[str], stop_words: set[str]) -> np.ndarray:
    """(W,) whether each word is judged: it has a letter or digit and is not a stop word of its language."""
    return np.array([worded(word) and word.lower() not in stop_words for word in words], dtype=bool)


def matched(words: list[str], others: list[str]) -> list[list[int]]:
    """For each of `words`, the indices of `others` (the same text split by another tokenizer) that share a character
    with it, spaces and case ignored."""
    text, other_text = ("".join(w.lower().replace(" ", "") for w in ws) for ws in (words, others))
    owner = np.repeat(np.arange(len(others)), [len(w.replace(" ", "")) for w in others])
    mapped = np.full(len(text), -1)
    for block in difflib.SequenceMatcher(None, text, other_text, autojunk=False).get_matching_blocks():
        mapped[block.a:block.a + block.size] = owner[block.b:block.b + block.size]
    starts = np.cumsum([0] + [len(w.replace(" ", "")) for w in words])
    return [sorted({int(j) for j in mapped[start:end] if j >= 0}) for start, end in zip(starts[:-1], starts[1:])]


def candidates(words: list[str], reconstruction: Reconstruction, calibration: Calibration,
               stop_words: set[str]) -> set[int]:
    """The source content words (by index) the evaluator may call errors: some piece it writes back at
    `calibration`'s surprisal or more. Only theirs need the translating model's contrastive conditioning."""
    judged_words = content(words, stop_words)
    return {i for i, overlapping in enumerate(matched(words, reconstruction.source_words))
            if judged_words[i] and any(reconstruction.surprisal[j] >= calibration.surprisal for j in overlapping)}


def judged(omissions: Omissions, reconstruction: Reconstruction | None, calibration: Calibration,
           source_stop: set[str], translation_words: list[str], translation_stop: set[str],
           lacking: list[str] | None = None) -> Verdict:
    """The verdict on a translation of the source words of `omissions` (the translating model's contrastive
    conditioning), judged by `reconstruction` (None: no evaluator, so the model's own contrastive conditioning alone
    finds words left out, by its own threshold, and nothing is said of words made up or mistranslated)."""
    words, lacking = omissions.words, list(lacking or [])
    evidence = [{"judged": bool(judge), "contrastive": None if np.isnan(score) else float(score)}
                for judge, score in zip(content(words, source_stop), omissions.contrastive)]
    translated = [{"judged": bool(judge)} for judge in content(translation_words, translation_stop)]
    if reconstruction is None:
        for said, flag in zip(evidence, omissions.flagged):
            said["flagged by its own threshold"] = bool(flag)
        return Verdict(words, [], evidence, translation_words, [], translated, calibration, None,
                       lacking).under(calibration)
    if reconstruction.cut:
        lacking.append(f"{reconstruction.evaluator} read the translation up to its length limit: its last "
                       f"{reconstruction.cut} pieces were not read, so their words are not judged")
    for said, overlapping in zip(evidence, matched(words, reconstruction.source_words)):
        said["surprisal"] = max((float(reconstruction.surprisal[j]) for j in overlapping), default=None)
        said["unknown"] = any(bool(reconstruction.unknown[j]) for j in overlapping)
    seen = set()
    for word, said, overlapping in zip(translation_words, translated,
                                       matched(translation_words, reconstruction.translation_words)):
        said["needed"] = max((float(reconstruction.needed[j]) for j in overlapping
                              if not np.isnan(reconstruction.needed[j])), default=None)
        said["repeats"] = said["judged"] and word.lower() in seen
        seen.update([word.lower()] * said["judged"])
    return Verdict(words, [], evidence, translation_words, [], translated, calibration, reconstruction.evaluator,
                   lacking).under(calibration)


def source_kind(said: dict, calibration: Calibration) -> str | None:
    """What a source word may be, from its evidence: LEFT_OUT, MISTRANSLATED, UNJUDGED or None."""
    if not said["judged"]:
        return None
    if "surprisal" not in said:  # no evaluator: the translating model's own threshold
        return LEFT_OUT if said["flagged by its own threshold"] else None
    if said["unknown"]:
        return UNJUDGED
    if said["surprisal"] is None or said["surprisal"] < calibration.surprisal:
        return None
    return LEFT_OUT if said["contrastive"] >= calibration.contrastive else MISTRANSLATED


def translation_kind(said: dict, calibration: Calibration) -> str | None:
    """MADE_UP where the evaluator does not need a translation word to write the source back, else None."""
    if not said["judged"] or said.get("needed") is None:
        return None
    return MADE_UP if said["needed"] >= (calibration.repeated if said["repeats"] else calibration.needed) else None
