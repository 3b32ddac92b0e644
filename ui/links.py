"""Links that open a view: `?model=en-de&text=…&force=…&mask=…&step=3&kind=cross&layer=2&head=5&measure=rollout
&compare=de-en` (and `src_lang=…&tgt_lang=…` for a multilingual model; `units=words` merges pieces into words;
`counterfactual=…` opens the Counterfactual tab with that second source typed in).
Parsing is pure (`LinkSpec.parse`); `open_link` translates and applies what was parsed.

Whatever a link gets wrong falls back to the default, with a note in the status line.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from urllib.parse import urlencode

from attention_inspector.model.api.services import Services
from attention_inspector.model.hub.convert_hf import ConversionError
from attention_inspector.model.keys import ALL_HEADS, CROSS, KINDS, MEAN, MEASURES, WEIGHTS
from attention_inspector.model.serving.translator import InputError
from attention_inspector.model.text.words import PIECES, UNITS
from attention_inspector.ui.operations import (Told, compare_trace, large, plural, shown, translate, with_measures,
                                               with_view)
from attention_inspector.ui.session import Decoding, Session, View

PARAMETERS = ("model", "text", "force", "mask", "step", "kind", "layer", "head", "measure", "compare", "src_lang",
              "tgt_lang", "units", "counterfactual")
HEADS = {"mean": MEAN, "all": ALL_HEADS}


def query_values(query, name: str) -> list[str]:
    """Every value of a URL parameter (starlette's QueryParams, or a dict of lists)."""
    values = query.getlist(name) if hasattr(query, "getlist") else query.get(name, [])
    return [values] if isinstance(values, str) else list(values)


@dataclass(frozen=True)
class LinkSpec:
    """What a link asks for, as parsed: numbers 1-based as in the link (None where it names none)."""

    model: str | None = None
    text: str | None = None
    force: tuple[str, ...] = ()
    mask: tuple[str, ...] = ()
    step: int | None = None
    kind: str = CROSS
    layer: int | None = None
    head: int | str = MEAN  # 1-based head number, or MEAN / ALL_HEADS
    measure: str = WEIGHTS
    compare: str | None = None
    src_lang: str | None = None
    tgt_lang: str | None = None
    units: str = PIECES
    counterfactual: str | None = None  # the Counterfactual tab's second source
    given: frozenset[str] = field(default=frozenset())  # the parameters the link had

    @classmethod
    def parse(cls, query) -> tuple[LinkSpec, list[str]]:
        """The link's parameters, and a note for each that is malformed (it then takes its default)."""
        notes = []

        def one(name: str) -> str | None:
            values = query_values(query, name)
            return values[0] if values else None

        def number(name: str) -> int | None:
            value = one(name)
            if value is None:
                return None
            if value.strip().isdigit() and int(value) >= 1:
                return int(value)
            notes.append(f"{name} {shown(value)} is no number from 1 up")
            return None

        kind = (one("kind") or CROSS).lower()
        if kind not in KINDS:
            notes.append(f"kind {shown(one('kind'))} is none of {', '.join(KINDS)}")
            kind = CROSS
        head_value = (one("head") or "mean").lower()
        head = HEADS.get(head_value)
        if head is None:
            if head_value.isdigit() and int(head_value) >= 1:
                head = int(head_value)
            else:
                notes.append(f"head {shown(one('head'))} is no head number, mean or all")
                head = MEAN
        measure = one("measure") or WEIGHTS
        if measure not in MEASURES:
            notes.append(f"measure {shown(measure)} is none of {', '.join(MEASURES)}")
            measure = WEIGHTS
        units = one("units") or PIECES
        if units not in UNITS:
            notes.append(f"units {shown(units)} is none of {', '.join(UNITS)}")
            units = PIECES
        spec = cls(model=one("model"), text=one("text"), force=tuple(query_values(query, "force")),
                   mask=tuple(query_values(query, "mask")), step=number("step"), kind=kind, layer=number("layer"),
                   head=head, measure=measure, compare=one("compare"), src_lang=one("src_lang"),
                   tgt_lang=one("tgt_lang"), units=units, counterfactual=one("counterfactual"),
                   given=frozenset(name for name in PARAMETERS if query_values(query, name)))
        return spec, notes

    def url_query(self) -> str:
        """The link's query string (what `parse` reads back)."""
        pairs = [("model", self.model or ""), ("text", self.text or "")]
        pairs += [("force", token) for token in self.force] + [("mask", name) for name in self.mask]
        head = {MEAN: "mean", ALL_HEADS: "all"}.get(self.head, str(self.head))
        pairs += [("step", str(self.step or 1)), ("kind", self.kind), ("layer", str(self.layer or 1)),
                  ("head", head), ("measure", self.measure)]
        if self.compare:
            pairs.append(("compare", self.compare))
        pairs += [(name, value) for name, value in (("src_lang", self.src_lang), ("tgt_lang", self.tgt_lang)) if value]
        if self.units != PIECES:
            pairs.append(("units", self.units))
        if self.counterfactual:
            pairs.append(("counterfactual", self.counterfactual))
        return urlencode(pairs)


def link_of(session: Session, counterfactual: str | None = None) -> LinkSpec:
    """The link that opens `session`'s view as it is on screen (and `counterfactual` in its tab)."""
    view, decoding = session.view, session.current
    return LinkSpec(model=session.model, text=session.source, force=decoding.force, mask=decoding.mask,
                    step=view.step, kind=view.kind, layer=view.layer + 1,
                    head=view.head + 1 if isinstance(view.head, int) else view.head, measure=view.measure,
                    compare=session.compare.model if session.compare else None, src_lang=session.src_lang,
                    tgt_lang=session.tgt_lang, units=view.units, counterfactual=counterfactual or None)


def open_link(services: Services, spec: LinkSpec, notes: list[str], told: Told | None = None
              ) -> tuple[Session | None, str]:
    """Translate and open the view `spec` describes; what cannot be used falls back, with a note. `told(done,
    total)`: the steps of a large model's decodings and measures, computed in this process (`large`; a small
    model's go to the trace workers)."""
    notes = list(notes)
    model = spec.model or services.default_model
    if isinstance(model, str) and model.startswith("hf:"):  # a Hub model, converted on first use
        try:
            model = services.load_from_hub(model)
        except ConversionError as error:
            notes.append(f"{model} could not be loaded ({error})")
            model = services.default_model
    if model not in services.translators:
        notes.append(f"there is no model {shown(model)}, so {services.default_model} is used")
        model = services.default_model
    examples = services.examples(model)
    stepwise = told if large(services, model) else None
    session, message = translate(services, None, model, spec.text, src_lang=spec.src_lang,
                                 tgt_lang=spec.tgt_lang, told=stepwise) if spec.text else (None, "")
    if session is None:
        if spec.text:
            notes.append(f"its text could not be translated ({message})")
        elif "text" in spec.given:
            notes.append("its text is empty, so the first example is shown")
        if not examples:
            return None, "; ".join(notes) or services.load_status()
        session, message = translate(services, None, model, examples[0], told=stepwise)
    if spec.force or spec.mask:
        try:
            traced = services.trace(model, session.source, list(spec.force), list(spec.mask), **session.direction,
                                    told=stepwise, detach=True)
            name = "from the link" + (f": {plural(len(spec.force), 'forced token')}" if spec.force else "") + (
                f", {plural(len(spec.mask), 'head')} off" if spec.mask else "")
            session = session.followed_by(Decoding.of(name, traced, spec.force, tuple(sorted(set(spec.mask))),
                                                      chosen=len(spec.force) - 1 if spec.force else None))
        except InputError as error:
            notes.append(f"its forced tokens or heads could not be used ({error})")
    trace = session.trace
    kind = spec.kind if spec.kind in trace.available() else trace.available()[-1]
    # Out of range: the view a first visit shows for that part.
    layer, head, step = session.view.layer, session.view.head, session.view.step
    if spec.layer is not None:
        if spec.layer <= trace.layers(kind):
            layer = spec.layer - 1
        else:
            notes.append(f"layer {spec.layer} is beyond this attention's {trace.layers(kind)}")
    if isinstance(spec.head, int):
        if spec.head <= trace.heads(kind):
            head = spec.head - 1
        else:
            notes.append(f"head {spec.head} is beyond this attention's {trace.heads(kind)}")
    elif "head" in spec.given:
        head = spec.head
    if spec.step is not None:
        if spec.step <= trace.steps:
            step = spec.step
        else:
            notes.append(f"step {spec.step} is beyond this translation's {trace.steps}")
    if spec.compare is not None:
        compared = compare_trace(services, session, spec.compare, told if large(services, spec.compare) else None)
        if isinstance(compared, str):
            notes.append(compared)
        else:
            session = replace(session, compare=compared)
    session = session.with_view(View(kind, layer, head, WEIGHTS, step, units=spec.units))
    session, measure_note = with_view(session, replace(session.view, measure=spec.measure))
    session = with_measures(services, session, stepwise)
    if measure_note:
        notes.append(measure_note)
    said = "Opened the link." + (" Some of it could not be used: " + "; ".join(note.rstrip(".") for note in notes)
                                 + "." if notes else "")
    if session.compare is not None:
        said += f" Compared with {session.compare.model}: the two maps are side by side in the tab Compare models."
    return session, f"{said} {message}".strip()
