"""The neuron view on the page without a browser (ui/neurons.py): a cell clicked opens the row's vectors for the
head on screen, the step moves to that row, another head's view follows the head, and what cannot be shown says
why."""

import json

import pytest

from attention_inspector.model.keys import CROSS, DECODER, ENCODER, MEAN, WEIGHTS
from attention_inspector.model.text.words import WORDS
from attention_inspector.ui import listeners
from attention_inspector.ui.neurons import CAUSAL, CLOSE, IN_PIECES, ONE_HEAD, open_neuron

MODEL = "toy-en-de"
TEXT = "A red dog runs in the park with a man."


def clicked(events, session, cell, view):
    """The click's event as the page sends it: the cell, then the view's settings."""
    return events.run(open_neuron, session, cell, view=view,
                      outputs=[*listeners.view_outputs(events.page, writes=False, words=False), events.page.step],
                      writes=False)


def neuron_weights(part: dict, row: int) -> list[float]:
    """The weights the neuron figure shows at `row` (its frame of that step, or the figure itself)."""
    figure = json.loads(part["figure"])
    frames = figure["layout"]["meta"].get("frames")
    return frames[row]["data"][4]["x"] if frames else figure["data"][4]["x"]


def test_a_cell_of_one_head_opens_its_rows_vectors_and_moves_the_step(events, services):
    session = events.translate(TEXT)["session"]
    out = clicked(events, session, "2,1", (CROSS, 1, 2, WEIGHTS, 5, False, "pieces"))
    assert out["step"] == 3 and out["status"].startswith("Why cross.2.3 weighs its keys so")
    assert out["neuron"]["step"] == 3  # the page draws the panel there before its slider has moved (ui/static/core.js)
    trace = out["session"].trace
    assert neuron_weights(out["neuron"], 2) == pytest.approx(trace.cross[1, 2, 2], abs=1e-5)
    assert "W_Q" in out["neuron"]["note"]
    # Another head with the panel open: the view follows it, its vectors computed for that head.
    moved = events.view(out["session"], DECODER, 0, 1, WEIGHTS, 4, False)
    # Step 4's row sees its 4 first keys, no later one: the panel lists those, and its note says why.
    assert neuron_weights(moved["neuron"], 3) == pytest.approx(trace.decoder[0, 1, 3, :4], abs=1e-5)
    assert moved["neuron"]["note"].endswith(CAUSAL) and CAUSAL not in out["neuron"]["note"]
    # The mean of the heads has no vectors: the panel closes, and a click says why.
    mean = events.view(moved["session"], CROSS, 0, MEAN, WEIGHTS, 4, False)
    assert mean["neuron"] is None
    assert clicked(events, mean["session"], "1,1", (CROSS, 0, MEAN, WEIGHTS, 4, False, "pieces"))["status"] == ONE_HEAD
    closed = clicked(events, out["session"], CLOSE, (CROSS, 1, 2, WEIGHTS, 3, False, "pieces"))
    assert closed["neuron"] is None and closed["session"].neuron is None


def test_an_encoder_cell_shows_the_source_token_clicked(events):
    session = events.translate(TEXT)["session"]
    out = clicked(events, session, "3,0", (ENCODER, 0, 0, WEIGHTS, 2, False, "pieces"))
    assert out["session"].neuron.query == 3 and "step" not in out  # the step stays where it was
    assert "step" not in out["neuron"]  # a source token's row: the panel does not step
    trace = out["session"].trace
    assert neuron_weights(out["neuron"], 0) == pytest.approx(trace.encoder[0, 0, 3], abs=1e-5)


def test_in_words_a_click_opens_the_first_piece_of_the_word_and_says_the_view_is_in_pieces():
    """The shipped en-de writes "zeitungsleserin" in pieces: in words, its cell opens a piece's row."""
    from attention_inspector.api import load
    from attention_inspector.ui import operations
    from attention_inspector.ui.neurons import neuron_part, with_neuron

    model = load("en-de")
    session, _ = operations.translate(model.services, None, "en-de", "A newspaper reader sits on a bench.")
    session = session.with_view(session.view.__class__(ENCODER, 0, 1, units=WORDS))
    words, spans = operations.words(session.trace.source_tokens, session.trace.scheme)
    split = next(i for i, span in enumerate(spans) if len(span) > 1)  # a word of several pieces
    opened, _ = open_neuron(model.services, session, f"{split},{split}")
    assert opened.neuron.query == opened.neuron.key == spans[split].start
    assert neuron_part(with_neuron(model.services, opened))["note"].endswith(IN_PIECES)


@pytest.mark.parametrize("cell,message", [("9,99", "not in the heatmap"), ("a,b", "opens at a cell"),
                                          (None, "opens at a cell"), ("-1,0", "not in the heatmap")])
def test_a_cell_not_in_the_heatmap_is_refused_and_the_session_kept(events, cell, message):
    session = events.translate(TEXT)["session"]
    out = clicked(events, session, cell, (CROSS, 1, 2, WEIGHTS, 2, False, "pieces"))
    assert message in out["status"] and out["session"].neuron is None
