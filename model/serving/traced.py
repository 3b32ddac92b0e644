"""What a `Translator` (model/serving/translator.py) returns: a greedy trace with its tokens as strings, a given
translation scored teacher-forced, and a sentence's beam search."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from attention_inspector.model.explain.detachment import ScoredDetachment
from attention_inspector.model.nets.decoding import BeamTrace, Hypothesis
from attention_inspector.model.nets.tracing import Trace
from attention_inspector.model.text.words import WHOLE


@dataclass
class TracedTranslation:
    """A greedy `Trace` with its tokens as strings, ready to display."""

    source_tokens: list[str]  # what the encoder saw: lower-cased words, then <eos>
    unknown: list[bool]  # per source token: not in the vocabulary, so read as <unk>
    target_tokens: list[str]  # the token chosen at each step (the last may be <eos>)
    top_tokens: list[list[str]]  # per step, the top-k candidates, best first
    text: str  # the translation, truecased and detokenized
    trace: Trace
    scheme: str = WHOLE  # how the tokens' pieces make words (model/text/words.py)
    # Asked with `detach`: how far the translation rests on its source, scored from the decoding's own pass (or
    # why it cannot be: a translation of no word).
    detachment: ScoredDetachment | str | None = field(default=None, repr=False)

    @property
    def decoder_input_tokens(self) -> list[str]:
        """What the decoder read at each step: <sos>, then the previous step's choice."""
        return ["<sos>"] + self.target_tokens[:-1]


@dataclass
class TracedScore:
    """A given translation scored by the model, teacher-forced: what `Translator.score` returns."""

    source_tokens: list[str]
    target_tokens: list[str]
    log_probabilities: np.ndarray  # (T,) log-probability of each target token after the ones before it

    @property
    def total(self) -> float:
        return float(self.log_probabilities.sum())


@dataclass
class TracedBeam:
    """One sentence's beam search with its tokens as strings: what `Translator.beam` returns."""

    source_tokens: list[str]
    greedy_tokens: list[str]  # the greedy translation (<eos> included unless it hit the length limit)
    beam: BeamTrace
    itos: list[str] = field(repr=False)  # the target vocabulary, id -> token

    def tokens(self, hypothesis: Hypothesis) -> list[str]:
        """A hypothesis's tokens, <eos> included when it finished."""
        return [self.itos[i] for i in hypothesis.token_ids] + ["<eos>"] * hypothesis.finished
