"""A user's session: one value, kept in one `gr.State`, that holds everything the page shows about a sentence.

A `Session` holds the sentence's decodings (the greedy original, branches, decodings with heads off, beam
hypotheses opened), which one is on screen, the view settings, the beam search and the comparison with a second
model. It is replaced, never changed in place, by the operations in ui/operations.py; ui/render.py turns it
into what the page shows.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from attention_inspector.model.explain.detachment import ScoredDetachment
from attention_inspector.model.explain.omissions import Omissions
from attention_inspector.model.explain.verdict import Verdict
from attention_inspector.model.keys import (ALL_HEADS, CROSS, ENCODER, GRADIENTS, MEAN, MEASURES, RESIDUAL_MEASURES,
                                            WEIGHTS)
from attention_inspector.model.serving.traced import TracedTranslation
from attention_inspector.model.text.words import PIECES, UNITS
from attention_inspector.viz.views import TraceArrays

NOTHING_YET = "Translate a sentence first: there is nothing to show or change yet."
ORIGINAL = "greedy translation"  # the first of a sentence's decodings, as the breadcrumb names it


def to_arrays(traced: TracedTranslation, mask: list[str] | None = None) -> TraceArrays:
    """A trace reduced to numpy arrays and token strings (`mask`: the heads it ran without)."""
    trace = traced.trace
    return TraceArrays(
        source_tokens=traced.source_tokens, decoder_tokens=traced.decoder_input_tokens,
        target_tokens=traced.target_tokens, probabilities=trace.probabilities, top_tokens=traced.top_tokens,
        top_probabilities=trace.top_probabilities, encoder=trace.encoder_attention,
        decoder=trace.decoder_attention, cross=trace.cross_attention, switched_off=frozenset(mask or ()),
        forced=trace.forced, scheme=traced.scheme)


def clamp(value: object, low: int, high: int, default: int) -> int:
    """`value` as an int within [low, high], or `default` when it is no number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return default
    return min(max(int(value), low), high)


@dataclass(frozen=True)
class View:
    """What the attention view shows: kind, layer and head (0-based, or MEAN / ALL_HEADS), measure, the step
    (1-based), whether the model view (every layer x head) is open, and pieces or words. Keys, never display
    labels."""

    kind: str = CROSS
    layer: int = 0
    head: int | str = MEAN
    measure: str = WEIGHTS
    step: int = 1
    model_view: bool = False
    units: str = PIECES

    def normalize(self, trace: TraceArrays) -> View:
        """The nearest view that `trace` has: a kind it lacks becomes its last, a layer or head out of range the last
        layer or the mean, a step out of range the nearest one; a GRU model shows no measure of the residual stream;
        gradient attributions explain the decoder's predictions, so the encoder's view becomes cross-attention's."""
        measure = self.measure if self.measure in MEASURES else WEIGHTS
        if measure in RESIDUAL_MEASURES and trace.encoder is None:
            measure = WEIGHTS
        kinds = [k for k in trace.available() if not (measure in GRADIENTS and k == ENCODER)]
        kind = self.kind if self.kind in kinds else kinds[-1]
        layers, heads = trace.layers(kind), trace.heads(kind)
        layer = clamp(self.layer, 0, layers - 1, layers - 1)
        if heads == 1:
            head = 0
        elif self.head in (MEAN, ALL_HEADS):
            head = self.head
        else:
            head = self.head if isinstance(self.head, int) and not isinstance(self.head, bool) \
                and 0 <= self.head < heads else MEAN
        return View(kind, layer, head, measure, clamp(self.step, 1, trace.steps, 1), bool(self.model_view),
                    self.units if self.units in UNITS else PIECES)


@dataclass(frozen=True)
class MaskEffect:
    """What switching heads off did to the decoding it was made from: its tokens, each one's log-probability
    change (scored teacher-forced without the heads) and which tokens of the new translation differ."""

    base: str  # the name of the decoding it was made from
    base_tokens: list[str]
    new_tokens: list[str]
    change: np.ndarray  # (T_base,)
    heads_off: int  # heads switched off beyond the base's own


@dataclass(frozen=True)
class Decoding:
    """One decoding of the sentence on screen: the greedy original, a branch, one with heads off, a beam hypothesis."""

    name: str  # as the breadcrumb shows it
    trace: TraceArrays
    text: str  # the translation as text
    force: tuple[str, ...] = ()  # the target tokens the user fixed
    mask: tuple[str, ...] = ()  # the heads switched off, kind.layer.head, sorted
    chosen: int | None = None  # a branch: the step (0-based) whose token the user chose
    effect: MaskEffect | None = None  # made by switching heads off: what that did (a new mask replaces it)
    hypothesis: int | None = None  # a beam hypothesis opened: its index in the n-best list
    # Each measure's maps, by key, computed the first time the measure is shown and kept with the decoding, so later
    # view changes reuse them: every residual-stream measure at once (model/explain/contributions.py `measure_maps`), a
    # gradient method alone (ui/operations.py `attribution_maps`). A cache of a pure function of the decoding.
    measure_maps: dict | None = field(default=None, repr=False, compare=False)
    # The Counterfactual tab's last patching of this decoding, for its exports (model/serving/inspect.py
    # `patching_record`).
    patched: dict | None = field(default=None, repr=False, compare=False)
    # Which explanation to trust's first answer for this decoding (the step, 1-based, and its measures), which the
    # answer with integrated gradients completes (ui/tabs/sources.py).
    faithful: tuple | None = field(default=None, repr=False, compare=False)
    # Whether the translation rests on its source (model/explain/detachment.py), scored from the decoding's own pass
    # (`of`), or why it cannot be.
    detachment: ScoredDetachment | str | None = field(default=None, repr=False, compare=False)
    # The query and key vectors of each head the neuron view has shown for this decoding (model/explain/neurons.py
    # `HeadVectors`, by (kind, layer, head)): a cache of a pure function of the decoding.
    neurons: dict | None = field(default=None, repr=False, compare=False)
    # The source words it left out (model/explain/omissions.py), looked for once it is drawn (ui/omissions.py), or
    # why they were not.
    omissions: Omissions | str | None = field(default=None, repr=False, compare=False)
    # The verdict on it (model/explain/verdict.py): what it left out, mistranslated or made up, judged by another
    # model from the omissions above; or why it was not judged.
    verdict: Verdict | str | None = field(default=None, repr=False, compare=False)

    @classmethod
    def of(cls, name: str, traced: TracedTranslation, force: tuple[str, ...] = (), mask: tuple[str, ...] = (),
           **fields) -> Decoding:
        """The decoding `traced` (traced with `detach`, so its detachment comes with it) named `name`."""
        return cls(name, to_arrays(traced, list(mask)), traced.text, tuple(force), tuple(mask),
                   detachment=traced.detachment, **fields)

    @property
    def left_out(self) -> frozenset[int]:
        """The source tokens (their indices) of the words it left out or mistranslated, where they were looked for."""
        if not isinstance(self.omissions, Omissions) or not isinstance(self.verdict, Verdict):
            return frozenset()
        return frozenset(i for word in self.verdict.left_out for i in self.omissions.spans[word])

    @property
    def called(self) -> str:
        """How a message names it: "the greedy translation", or "the decoding beam #2"."""
        return f"the {ORIGINAL}" if self.name == ORIGINAL else f"the decoding {self.name}"


@dataclass(frozen=True)
class Neuron:
    """The neuron view open beside a single head's heatmap (ui/neurons.py `open_neuron`): the row clicked (0-based,
    in pieces; for decoder and cross-attention, whose rows are steps, the view shows the page's step) and the key
    whose score sorts the dimensions."""

    query: int
    key: int | None = None


@dataclass(frozen=True)
class Pending:
    """A what-if action that a large model computes later, with progress (ui/operations.py `deferred`)."""

    operation: Callable  # (services, session, *arguments, told=...) -> (session, message)
    arguments: tuple


@dataclass(frozen=True)
class Beam:
    """A beam search of the sentence, run from one decoding (its forced tokens and heads off)."""

    force: tuple[str, ...]
    mask: tuple[str, ...]
    hypotheses: list[list[str]]  # the n-best, best first, as tokens
    texts: list[str]
    rows: list[list]  # the n-best table
    steps: list[list]  # the beam after every step, as table rows


@dataclass(frozen=True)
class Comparison:
    """Another model's greedy decoding of the same sentence, shown beside the view."""

    model: str
    trace: TraceArrays
    text: str  # its translation as text


class Revisions:
    """One user's count of the states they asked for: each event that makes a new state (another model, sentence or
    decoding) claims the next revision when it starts, and an answer is current only while no later one has been
    claimed. So a slow answer (a measure, a tab's result) that finishes after the user moved on is dropped, never
    drawn over the newer state. Shared by every `Session` of one user (it lives in their `gr.State`, which holds
    this alone before anything is translated); Gradio copies a state's first value for each new user.

    The count starts at the clock (microseconds): a count made later (the user's state expired, the server
    restarted) starts above any revision the page was shown before, so the page, which drops a value older than the
    one it shows (ui/static/core.js), never waits for a number it has passed."""

    def __init__(self):
        self.latest = time.time_ns() // 1000  # below 2 ** 53: exact in the page's numbers
        self._lock = threading.Lock()
        self.working: dict[str, int] = {}  # the slow questions computing now (by name), each with its revision
        self.view: tuple[int, object] | None = None  # the view the page last asked for, and the revision it was of
        self.told = 0.0  # when a tab's answer last spoke in the status line (time.monotonic)

    def claim(self) -> int:
        """The next revision, now the only current one."""
        with self._lock:
            self.latest += 1
            return self.latest

    def __deepcopy__(self, memo) -> Revisions:  # a new user's own count (a lock cannot be copied)
        return Revisions()


@dataclass(frozen=True)
class Session:
    """Everything one user has made of one sentence. Lives in a gr.State."""

    model: str
    source: str
    decodings: tuple[Decoding, ...]
    shown: int = 0
    view: View = View()
    compare: Comparison | None = None
    beam: Beam | None = None
    unknown: tuple[bool, ...] = ()  # per source token: unknown to the model (read as <unk>)
    src_lang: str | None = None  # a multilingual model's source and target languages (None: its default)
    tgt_lang: str | None = None
    revision: int = 0  # which of the user's revisions this state is (`Revisions`)
    neuron: Neuron | None = None  # the neuron view, where it is open
    pending: Pending | None = field(default=None, compare=False, repr=False)  # computed next, with progress
    revisions: Revisions = field(default_factory=Revisions, compare=False, repr=False)

    @property
    def direction(self) -> dict:
        """The languages a translator is handed with the sentence: `src_lang` and `tgt_lang`."""
        return {"src_lang": self.src_lang, "tgt_lang": self.tgt_lang}

    @property
    def current(self) -> Decoding:
        return self.decodings[self.shown]

    @property
    def trace(self) -> TraceArrays:
        return self.current.trace

    def followed_by(self, decoding: Decoding, after: int | None = None) -> Session:
        """The decodings up to `after` (default: the one shown), then `decoding`, shown."""
        after = self.shown if after is None else after
        return replace(self, decodings=self.decodings[:after + 1] + (decoding,), shown=after + 1)

    def with_current(self, **changes) -> Session:
        """The session with the decoding on screen changed as `changes` say (what was computed of it, kept); the
        same decoding, with the same trace (ui/render.py draws it again only where what it shows changed)."""
        decodings = list(self.decodings)
        decodings[self.shown] = replace(self.current, **changes)
        return replace(self, decodings=tuple(decodings))

    def with_view(self, view: View) -> Session:
        """The session showing `view`, normalized to what the decoding on screen has."""
        return replace(self, view=view.normalize(self.trace))


def unpacked(state: Session | Revisions | None) -> tuple[Session | None, Revisions]:
    """A `gr.State`'s value as the user's session (None before a translation) and their revisions (a new count for
    a state that has none: a test's or a script's None)."""
    if isinstance(state, Session):
        return state, state.revisions
    return None, state if isinstance(state, Revisions) else Revisions()


def read_revision(session: Session | None, revisions: Revisions) -> int:
    """The revision an answer that only reads the session belongs to: the session's own (the latest, before any)."""
    return session.revision if session is not None else revisions.latest


def packed(session: Session | None, revisions: Revisions) -> Session | Revisions:
    """What the user's `gr.State` keeps: the session, carrying their revisions, or the revisions alone."""
    if session is None:
        return revisions
    return session if session.revisions is revisions else replace(session, revisions=revisions)
