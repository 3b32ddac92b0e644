"""Links: parsing is pure (`LinkSpec.parse`), opening translates and falls back, with a note, where a link is wrong."""

from urllib.parse import parse_qs

from attention_inspector.model.keys import ALL_HEADS, CROSS, DECODER, MEAN, ROLLOUT, WEIGHTS
from attention_inspector.ui.links import LinkSpec, link_of, open_link

MODEL = "toy-en-de"


def test_a_link_parses_to_its_keys_and_numbers():
    spec, notes = LinkSpec.parse({"model": ["m"], "text": ["A dog."], "force": ["ein", "hund"], "mask": ["cross.1.2"],
                                  "step": ["3"], "kind": ["Decoder"], "layer": ["2"], "head": ["all"],
                                  "measure": ["rollout"], "compare": ["n"]})
    assert notes == []
    assert spec == LinkSpec("m", "A dog.", ("ein", "hund"), ("cross.1.2",), 3, DECODER, 2, ALL_HEADS, ROLLOUT, "n",
                            given=spec.given)
    assert spec.given == {"model", "text", "force", "mask", "step", "kind", "layer", "head", "measure", "compare"}
    again, _ = LinkSpec.parse(parse_qs(spec.url_query()))
    assert again == spec


def test_malformed_parameters_take_their_default_with_a_note():
    spec, notes = LinkSpec.parse({"step": ["0"], "kind": ["sideways"], "layer": ["zero"], "head": ["<b>9</b>"],
                                  "measure": ["contributions (ALTI+)"]})  # an old display label is no key
    assert (spec.step, spec.kind, spec.layer, spec.head, spec.measure) == (None, CROSS, None, MEAN, WEIGHTS)
    assert notes == ["kind 'sideways' is none of encoder, decoder, cross",
                     "head '<b>9</b>' is no head number, mean or all",
                     "measure 'contributions (ALTI+)' is none of weights, value_norm, rollout, alti, saliency, "
                     "input_x_gradient, integrated_gradients",
                     "step '0' is no number from 1 up", "layer 'zero' is no number from 1 up"]


def test_numbers_beyond_the_model_fall_back_to_the_first_view_with_a_note(services):
    default, _ = open_link(services, *LinkSpec.parse({"text": ["A dog runs."]}))
    session, status = open_link(services, *LinkSpec.parse({"text": ["A dog runs."], "layer": ["9"], "head": ["9"],
                                                           "step": ["99"]}))
    assert "layer 9 is beyond this attention's 2" in status and "head 9 is beyond this attention's 4" in status
    assert f"step 99 is beyond this translation's {session.trace.steps}" in status
    assert (session.view.layer, session.view.head, session.view.step) == (
        default.view.layer, default.view.head, default.view.step)
    within, status = open_link(services, *LinkSpec.parse({"text": ["A dog runs."], "layer": ["1"], "head": ["4"],
                                                          "step": ["2"]}))
    assert (within.view.layer, within.view.head, within.view.step) == (0, 3, 2) and "beyond" not in status


def test_a_link_with_nonsense_opens_the_default_model_with_every_note(services):
    session, status = open_link(services, *LinkSpec.parse({
        "model": ["nope"], "text": ["A dog."], "step": ["99"], "kind": ["sideways"], "layer": ["zero"],
        "head": ["<b>9</b>"], "measure": ["magic"], "mask": ["cross.9.9"], "compare": ["broken"]}))
    assert status.startswith("Opened the link. Some of it could not be used")
    for said in ("no model 'nope'", "kind 'sideways'", "layer 'zero'", "head '<b>9</b>'", "measure 'magic'",
                 "step 99 is beyond", "cross.9.9", "no model 'broken' to compare"):
        assert said in status, said
    assert session.model == services.default_model and session.view.kind == CROSS
    assert session.view.measure == WEIGHTS and len(session.decodings) == 1  # the heads could not be switched off
    gru, status = open_link(services, *LinkSpec.parse({"model": ["toy-rnn"], "measure": ["rollout"]}))
    assert "no residual stream" in status and ".." not in status  # each note's own full stop dropped in the list
    # A link with an empty text, or one that cannot be translated, opens the first example, and says so.
    empty, status = open_link(services, *LinkSpec.parse({"text": [""]}))
    assert "its text is empty, so the first example is shown" in status
    assert empty.source == services.examples(MODEL)[0]
    broken, status = open_link(services, *LinkSpec.parse({"text": ["x" * 3000]}))
    assert "could not be translated" in status and broken.source == services.examples(MODEL)[0]


def test_a_rollout_link_keeps_its_head_for_the_weights(services):
    session, _ = open_link(services, *LinkSpec.parse({"text": ["A dog runs."], "head": ["3"],
                                                      "measure": ["rollout"]}))
    assert session.view.measure == ROLLOUT and session.view.head == 2


def test_a_link_opens_a_gradient_method_and_gives_it_back(services):
    from attention_inspector.model.keys import INTEGRATED_GRADIENTS

    session, status = open_link(services, *LinkSpec.parse({"text": ["A dog runs."], "kind": ["decoder"],
                                                           "layer": ["2"], "measure": [INTEGRATED_GRADIENTS]}))
    assert session.view.measure == INTEGRATED_GRADIENTS and session.view.kind == DECODER
    assert INTEGRATED_GRADIENTS in session.current.measure_maps and session.view.layer == 1
    assert f"measure={INTEGRATED_GRADIENTS}" in link_of(session).url_query()
