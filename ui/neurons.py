"""The neuron view on the page: a click on a cell of a single head's heatmap opens, beside it, how that row's weights
came about (viz/neurons.py draws it, model/explain/neurons.py computes it).

`open_neuron` is the click's operation (or the panel's Close); `with_neuron` computes the head's vectors for the
decoding on screen where the panel shows (`ui/listeners.py` calls it after every operation, as it does the measures);
`neuron_part` is what the core view draws. For decoder and cross-attention, whose rows are steps, the panel shows the
page's step and moves with it in the browser; for encoder self-attention it shows the source token clicked.
"""

from __future__ import annotations

from dataclasses import replace

from attention_inspector.model.api.services import Services
from attention_inspector.model.keys import DECODER, ENCODER, KIND_LABELS, VALUE_NORM, WEIGHTS, head_name
from attention_inspector.ui.operations import operation
from attention_inspector.ui.session import Neuron, Session
from attention_inspector.viz.attention import step_labels
from attention_inspector.viz.neurons import neuron_frames
from attention_inspector.viz.views import TraceArrays

CLOSE = "close"  # the panel's Close button sends this in place of a cell
ONE_HEAD = ("Choose one head in the Head menu (and the weights in Show), then click a cell: the neuron view shows the "
            "query and key vectors of a single head.")
IN_PIECES = " The vectors belong to the model's pieces: the panel shows pieces, whatever the units."
CAUSAL = " A step sees only the tokens read up to it: the later keys, not yet written, are masked and not listed."


def single_head(session: Session) -> bool:
    """Whether the view shows one head of one layer (its weights, or their value norms), which has query and key
    vectors to show; a measure of a whole layer or of the whole model has none."""
    view = session.view
    return isinstance(view.head, int) and not isinstance(view.head, bool) and view.measure in (WEIGHTS, VALUE_NORM)


@operation
def open_neuron(services: Services, session: Session, cell: object) -> tuple[Session, str | None]:
    """A click on the heatmap's cell `cell` ("row,column", as the heatmap shows them) opens the neuron view of that
    row, its dimensions sorted by that key's score; "close" closes it."""
    if cell == CLOSE:
        return replace(session, neuron=None), None
    if not single_head(session):
        return session, ONE_HEAD
    try:
        row, column = (int(part) for part in str(cell).split(","))
    except ValueError:
        return session, f"The neuron view opens at a cell of the heatmap (row,column), not {str(cell)[:40]!r}."
    view, trace = session.view, shown_trace(session)
    rows, keys = trace.word_spans(view.kind, view.step - 1) if trace.in_words else (None, None)
    if rows is not None:  # a word: its first piece as a key, as a row its first piece (a source word) or last (a step)
        if not (0 <= row < len(rows) and 0 <= column < len(keys)):
            return session, "That cell is not in the heatmap: click one of its cells."
        row = rows[row].start if view.kind == ENCODER else rows[row].stop - 1
        column = keys[column].start
    rows = len(trace.source_tokens) if view.kind == ENCODER else trace.steps
    keys = trace.steps if view.kind == DECODER else len(trace.source_tokens)
    if not (0 <= row < rows and 0 <= column < keys):
        return session, "That cell is not in the heatmap: click one of its cells."
    session = replace(session, neuron=Neuron(row, column))
    if view.kind != ENCODER:  # the panel shows the step's row: the step moves to the row clicked
        session = session.with_view(replace(view, step=row + 1))
    return session, (f"Why {head_name(view.kind, view.layer, view.head)} weighs its keys so: the query and key vectors "
                     "beside the heatmap" + (", at the step shown (←/→ move it)." if view.kind != ENCODER else "."))


def shown_trace(session: Session) -> TraceArrays:
    """The decoding's trace in the view's units (pieces or words), as the heatmap shows it."""
    return replace(session.trace, units=session.view.units)


def shown_head(session: Session | None) -> tuple | None:
    """The head whose vectors the neuron view shows, (kind, layer, head), or None where it shows none."""
    if session is None or session.neuron is None or not single_head(session):
        return None
    view = session.view
    return view.kind, view.layer, view.head


def with_neuron(services: Services, session: Session) -> Session:
    """The session with the vectors of the head the neuron view shows computed for the decoding on screen and kept
    with it (one teacher-forced pass per head)."""
    head = shown_head(session)
    decoding = session.current
    if head is None or head in (decoding.neurons or {}):
        return session
    kind, layer, index = head
    vectors = services.translators[session.model].neuron(session.source, decoding.trace.target_tokens, kind,
                                                         layer + 1, index + 1, list(decoding.mask),
                                                         **session.direction)
    return session.with_current(neurons={**(decoding.neurons or {}), head: vectors})


def neuron_due(session: Session | None) -> bool:
    """Whether drawing `session` needs the neuron view's model work (its head's vectors not yet computed)."""
    head = shown_head(session)
    return head is not None and head not in (session.current.neurons or {})


def neuron_identity(session: Session | None) -> tuple | None:
    """What the neuron view's figure depends on: the decoding, the head, the row and key clicked, the units."""
    head = shown_head(session)
    if head is None:
        return None
    return id(session.current.trace), *head, session.neuron, session.view.units


def neuron_part(session: Session) -> dict | None:
    """The core view's neuron part: the figure (its JSON), what q and k are and, where its rows are steps, the step it
    shows (a click moves the page there: ui/static/core.js draws it there at once); None closes the panel."""
    head = shown_head(session)
    vectors = None if head is None else (session.current.neurons or {}).get(head)
    if vectors is None:
        return None
    trace, kind = shown_trace(session), head[0]
    query = min(session.neuron.query, vectors.rows - 1)
    query_labels = trace.source_tokens if kind == ENCODER else step_labels(trace.decoder_tokens, trace.target_tokens)
    key_labels = trace.decoder_tokens if kind == DECODER else trace.source_tokens
    heading = f"{head_name(*head)} ({KIND_LABELS[kind].lower()})"
    figure = neuron_frames(vectors, query, session.neuron.key, query_labels, key_labels, heading,
                           stepped=kind != ENCODER)
    note = vectors.note + (CAUSAL if kind == DECODER else "") + (IN_PIECES if trace.in_words else "")
    part = {"figure": figure, "note": note}
    return part if kind == ENCODER else {**part, "step": session.view.step}
