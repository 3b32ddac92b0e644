"""What-if, with known answers: branches, switched-off heads, head importance and the beam, from the model code
through the app's callbacks and its HTTP API."""

import json

import httpx
import numpy as np
import pytest
import torch

from attention_inspector.model.keys import ALL_HEADS, ALTI, CROSS, DECODER, ENCODER, MEAN, WEIGHTS
from attention_inspector.model.nets.decoding import beam_search, beam_trace, greedy_decode
from attention_inspector.model.nets.seq2seq import head_gates
from attention_inspector.model.nets.step_decoder import StepDecoder
from attention_inspector.model.serving.checkpoint import load_checkpoint
from attention_inspector.model.serving.translator import InputError
from attention_inspector.model.text.vocab import EOS_ID
from attention_inspector.model.training.data import DataError
from attention_inspector.ui import operations
from attention_inspector.ui.listeners import translate_or_example, use_example
from attention_inspector.ui.session import ORIGINAL, Revisions, to_arrays
from attention_inspector.ui.tabs.heads import from_grids
from attention_inspector.viz.views import TraceArrays
from attention_inspector.viz.whatif import DIFFERS, FORCED, token_differences
from tests.conftest import SHIPPED
from tests.test_http_api import call
from tests.test_interventions import MODELS, SRC_IDS

MODEL = "toy-en-de"
SENTENCE = "A man plays with a red ball in the park."


def at(step: int, kind: str = CROSS, layer: int = 0, head=MEAN, model_view: bool = False) -> tuple:
    """The page's view settings (kind, layer, head, measure, step, model view) at `step`."""
    return (kind, layer, head, WEIGHTS, step, model_view)


@pytest.fixture(scope="module")
def en_de():
    return load_checkpoint(SHIPPED / "en-de")


def translated(events, text=SENTENCE, model=MODEL):
    """The session a translation leaves in the user's state."""
    return events.translate(text, model=model)["session"]


# ---- the beam ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["post-LN sinusoidal", "GRU 4 heads"])
@pytest.mark.parametrize("beam_size", [1, 3, 5])
def test_the_beams_best_hypothesis_is_what_batched_beam_search_returns(name, beam_size):
    model = MODELS[name]()
    traced = beam_trace(model, SRC_IDS, beam_size, max_len=12)
    assert traced.n_best[0].token_ids == beam_search(model, torch.tensor([SRC_IDS]), beam_size, max_len=12)[0]
    scores = [h.score for h in traced.n_best]
    assert scores == sorted(scores, reverse=True) and len(traced.n_best) <= beam_size
    for h in traced.n_best:  # a score is the log-probability over the length (<eos> counted)
        assert h.finished and h.score == pytest.approx(h.log_probability / (len(h.token_ids) + 1))
    for step, hypotheses in enumerate(traced.steps[:-1], start=1):
        live = [h for h in hypotheses if not h.finished]
        assert live and all(len(h.token_ids) == step for h in live)
        assert [h.log_probability for h in live] == sorted((h.log_probability for h in live), reverse=True)


@pytest.mark.parametrize("name", ["post-LN sinusoidal", "pre-LN learned"])
@pytest.mark.parametrize("mask", [[], ["decoder.1.1", "cross.2.2", "encoder.1.3"]])
def test_the_beam_stepped_by_the_step_decoder_is_the_module_trees(name, mask):
    """The app's beam steps through the model's `StepDecoder`: every step's beam is the one the module tree keeps."""
    model = MODELS[name]()
    gates = head_gates(model, mask)
    tree = beam_trace(model, SRC_IDS, 4, max_len=12, gates=gates)
    flat = beam_trace(model, SRC_IDS, 4, max_len=12, gates=gates, decoder=StepDecoder(model))
    assert len(flat.steps) == len(tree.steps) > 3
    for ours, theirs in zip([*flat.steps, flat.n_best], [*tree.steps, tree.n_best]):
        assert [h.token_ids for h in ours] == [h.token_ids for h in theirs]
        assert [h.log_probability for h in ours] == pytest.approx([h.log_probability for h in theirs], abs=1e-5)


@pytest.mark.parametrize("mask", [[], ["cross.1.2"]])
def test_the_greedy_decoding_made_with_the_beam_is_greedy_decodes_and_leaves_the_beam_as_it_is(mask):
    """The beam view's greedy path rides along the beam as one more row of its steps: the same ids as a greedy
    decoding alone, whether it goes on after the beam has ended or not, through the module tree and the step
    decoder."""
    beyond = []
    for name, eos_bias in [("post-LN sinusoidal", 0.0), ("post-LN sinusoidal", 0.5), ("GRU 4 heads", 0.0)]:
        model = MODELS[name]()
        with torch.no_grad():  # <eos> likelier: some hypotheses end before the limit
            model.generator.bias[EOS_ID] += eos_bias
        gates = head_gates(model, mask)
        decoders = [None] if name == "GRU 4 heads" else [None, StepDecoder(model)]
        for source, prefix in [(SRC_IDS, []), (SRC_IDS[:3], []), (SRC_IDS[::-1], [7])]:
            greedy = greedy_decode(model, torch.tensor([source]), 12, gates, prefix)[0]
            for decoder in decoders:
                alone = beam_trace(model, source, 3, 12, gates=gates, prefix=prefix, decoder=decoder)
                along = beam_trace(model, source, 3, 12, gates=gates, prefix=prefix, decoder=decoder, greedy=True)
                assert along.greedy == greedy and alone.greedy is None
                assert [[h.token_ids for h in hs] for hs in along.steps] == \
                    [[h.token_ids for h in hs] for hs in alone.steps]
                assert [h.score for h in along.n_best] == pytest.approx([h.score for h in alone.n_best], abs=1e-5)
                beyond.append(len(greedy) > len(alone.steps))
    assert any(beyond) and not all(beyond)  # a greedy decoding that went on after the beam had ended, and others


def test_the_beam_on_the_shipped_model_is_what_evaluation_translates(en_de):
    """`model.training.evaluate` translates with Translator.translate_tokens (beam 5): the beam view's best is that
    output."""
    for text in ("A man in a blue shirt is standing on a ladder cleaning windows.", "Two dogs play in the snow.",
                 "A little girl climbing into a wooden playhouse."):
        traced = en_de.beam(text)
        assert traced.beam.beam_size == en_de.metrics["decoding"]["beam_size"] == 5
        best = traced.tokens(traced.beam.n_best[0])
        assert best[-1] == "<eos>"
        assert best[:-1] == en_de.translate_tokens([en_de.source_tokens(text)], beam_size=5)[0]
        greedy = en_de.trace(text).target_tokens
        assert traced.greedy_tokens == greedy
        # The hypotheses marked as on the greedy path are the greedy output's prefixes, step by step.
        for step, hypotheses in enumerate(traced.beam.steps[:len(greedy) - 1], start=1):
            assert greedy[:step] in [traced.tokens(h) for h in hypotheses]


def test_a_beam_size_must_be_a_small_whole_number(en_de):
    for bad in (0, 17, 2.5, "5", True):
        with pytest.raises(InputError, match="beam size"):
            en_de.beam("A dog.", bad)


# ---- branches ----------------------------------------------------------------------------------------------

def test_branching_with_the_greedy_token_reproduces_the_original(events, services):
    session = translated(events)
    original = session.trace
    for step in (1, 3, original.steps):
        # What a branch decodes (the prefix up to step t forced, then greedy) is the original, array for array.
        force = original.target_tokens[:step]
        branch = to_arrays(services.trace(MODEL, SENTENCE, force))
        for field in ("target_tokens", "decoder_tokens", "top_tokens"):
            assert getattr(branch, field) == getattr(original, field)
        for field in ("probabilities", "top_probabilities", "encoder", "decoder", "cross"):
            np.testing.assert_array_equal(getattr(branch, field), getattr(original, field))
        assert branch.forced == step
        # On the page, that click changes nothing and says so.
        out = events.run(operations.branch, session, original.target_tokens[step - 1], view=at(step))
        assert "already chooses" in out["status"] and "translation" not in out


def test_a_branch_shown_with_a_measure_says_the_view_is_back_to_the_weights(events):
    """A measure is computed per decoding, when asked for: a branch opens on the weights, and says so."""
    session = translated(events)
    word = session.trace.top_tokens[2][1]
    kind, layer, head, _, step, model_view = at(3)
    out = events.run(operations.branch, session, word, view=(kind, layer, head, ALTI, step, model_view))
    assert out["session"].view.measure == WEIGHTS
    assert out["status"].endswith("Show is back to the attention weights: choose contributions (ALTI+) again to "
                                  "compute it for this decoding.")
    assert "Show is back" not in events.run(operations.branch, session, word, view=at(3))["status"]


def test_a_branch_chooses_the_word_then_decodes_greedily_and_shows_beside_its_origin(events, services, monkeypatch):
    session = translated(events)
    original = session.trace
    step = 3
    word = next(t for t in original.top_tokens[step - 1][1:] if t != "<eos>")  # the second-best candidate, say
    out = events.run(operations.branch, session, word, view=at(step))
    session, branch = out["session"], out["session"].current
    assert list(branch.force) == original.target_tokens[:step - 1] + [word]
    assert branch.trace.target_tokens[:step] == list(branch.force) and branch.trace.forced == step  # the prefix
    expected = services.translators[MODEL].trace(SENTENCE, force=list(branch.force))
    assert branch.trace.target_tokens == expected.target_tokens and out["translation"] == expected.text
    assert [d.name for d in session.decodings] == [ORIGINAL, f'"{word}" at step {step}'] and session.shown == 1
    assert out["breadcrumb"]["visible"]
    marks = out["comparison"]
    assert (f"{word} ", FORCED) in marks and out["comparison_plot"] is not None
    assert f'chooses "{word}" instead of "{original.target_tokens[step - 1]}"' in out["status"]
    # a difference of log-probabilities, said as one
    assert "differs from that of the greedy translation by" in out["status"]
    # The slider anew where its length changed; its value alone is not sent back where it is the step the page
    # sent (the branched one): the view stays there.
    slider = out.get("step", step)
    assert (slider["value"] if isinstance(slider, dict) else slider) == step
    # The chosen candidate is the red bar at that step, and the step says it was given, not predicted.
    bars = json.loads(out["candidates"])["layout"]["meta"]["bars"][step - 1]
    assert bars["colors"][branch.trace.top_tokens[step - 1].index(word)] == "#d62728"
    assert f'is given "{word}"' in json.loads(out["step_text"])[step - 1]
    # A branch of the branch, then back along the breadcrumb: the decodings after the one shown stay until a new one.
    again = events.run(operations.branch, session, branch.trace.top_tokens[0][1], view=at(1))["session"]
    assert len(again.decodings) == 3 and again.decodings[1] is branch
    back = events.run(operations.go_to, again, 0, view=at(1))
    assert back["session"].shown == 0 and back["translation"] == session.decodings[0].text
    assert len(back["session"].decodings) == 3
    forked = events.run(operations.branch, back["session"], original.top_tokens[1][1], view=at(2))
    assert len(forked["session"].decodings) == 2 and forked["session"].current.chosen == 1
    assert "replaces the 2 decodings that followed the greedy translation" in forked["status"]
    assert "far from any word" not in out["status"]  # a candidate: likely enough to say nothing of it
    # A word the model can write but all but never would: the status says how unlikely it is.
    translator = services.translators[MODEL]
    prefix = original.target_tokens[:step - 1]
    word, chosen = min(((token, float(translator.trace(SENTENCE, force=prefix + [token]).trace.probabilities[step - 1]))
                        for token in translator.tgt_vocab.itos[4:]), key=lambda pair: pair[1])
    unlikely = f'The model gives "{word}" p = {chosen:.1e} here: far from any word it would write.'
    assert (unlikely in events.run(operations.branch, session, word, view=at(step))["status"]) == (chosen < 1e-3)
    monkeypatch.setattr(operations, "UNLIKELY", 2 * chosen)  # the toy model spreads its probabilities: as if lower
    assert unlikely in events.run(operations.branch, session, word, view=at(step))["status"]


def test_a_branch_needs_a_word_the_model_can_emit(events):
    session = translated(events)
    for word, message in (("", "Click a candidate"), ("Zzyzx☃", "not in the target vocabulary"),
                          ("<sos>", "never emitted")):
        out = events.run(operations.branch, session, word, view=at(2))
        assert message in out["status"] and out["session"].decodings == session.decodings
    assert "Translate a sentence first" in events.run(operations.branch, None, "Hund", view=at(1))["status"]


def test_differences_are_a_word_level_diff():
    assert token_differences(["a", "b", "c"], ["a", "x", "b", "c"], chosen=1) == [
        ("a ", None), ("x ", FORCED), ("b ", None), ("c ", None)]
    assert token_differences(["a", "b"], ["a", "c"]) == [("a ", None), ("c ", DIFFERS)]


# ---- switched-off heads ------------------------------------------------------------------------------------

def test_switching_heads_off_translates_again_and_scores_the_original_without_them(events, services):
    session = translated(events)
    original = session.trace
    mask = ["cross.1.1", "cross.1.2", "decoder.1.3"]
    out = events.run(from_grids, session, [], ["decoder.1.3"], ["cross.1.1", "cross.1.2"], view=at(2))
    session, masked = out["session"], out["session"].current
    translator = services.translators[MODEL]
    expected = translator.trace(SENTENCE, mask=mask)
    assert masked.trace.target_tokens == expected.target_tokens and masked.trace.switched_off == frozenset(mask)
    assert [d.name for d in session.decodings] == [ORIGINAL, "3 heads off"]
    assert out["mask_grids[2]"] == ["cross.1.1", "cross.1.2"]
    # Each original token's log-probability without the heads minus with them, as /score gives it.
    change = json.loads(out["mask_effect_plot"])["data"][0]["y"]
    scored = translator.score(SENTENCE, original.target_tokens, mask).log_probabilities
    np.testing.assert_allclose(change, scored - np.log(original.probabilities), atol=1e-5)
    # One more head: it replaces the masked decoding (not a child of it); all heads on again: back to the original.
    more = events.run(from_grids, session, [], [], ["cross.1.1"], view=at(2))["session"]
    assert [d.name for d in more.decodings] == [ORIGINAL, "1 head off"]
    reset = events.run(operations.mask_preset, more, "none", view=at(2))
    assert reset["session"].decodings == (session.decodings[0],)
    assert reset["mask_effect_plot"] is None


def test_a_switched_off_head_is_drawn_as_off_not_as_attention(events):
    session = translated(events)
    session = events.run(from_grids, session, [], [], ["cross.2.1"], view=at(1))["session"]
    trace = session.trace
    last = trace.steps - 1

    def attention(head):
        out = events.view(session, CROSS, 1, head, WEIGHTS, 1, True)
        return json.loads(out["attention"]), json.loads(out["overview"])

    single, overview = attention(0)
    assert all(value is None for row in single["data"][0]["z"] for value in row)
    assert "switched off" in single["layout"]["title"]["text"]
    assert any(note["text"] == "switched off" for note in single["layout"]["annotations"])
    mean, _ = attention(MEAN)  # the mean of the heads that were on
    np.testing.assert_allclose(mean["data"][0]["z"], trace.cross[1, 1:, :last + 1].mean(axis=0), atol=1e-6)
    assert "mean of the 3 heads on" in mean["layout"]["title"]["text"]
    grid, _ = attention(ALL_HEADS)
    assert all(v is None for row in grid["data"][0]["z"] for v in row)
    assert all(v is not None for row in grid["data"][1]["z"] for v in row)
    offs = [panel for panel in overview["data"] if all(v is None for row in panel["z"] for v in row)]
    assert len(offs) == 1 and offs[0]["meta"] == "L2 H1"


def test_mask_presets_work_on_the_head_in_view(events):
    session = translated(events)
    layer = events.run(operations.mask_preset, session, "layer", view=at(1, DECODER, 1, MEAN))["session"]
    assert layer.current.mask == ("decoder.2.1", "decoder.2.2", "decoder.2.3", "decoder.2.4")
    only = events.run(operations.mask_preset, layer, "all but one", view=at(1, ENCODER, 0, 2))["session"]
    encoder_off = [name for name in only.current.mask if name.startswith("encoder.")]
    assert len(encoder_off) == 2 * 4 - 1 and "encoder.1.3" not in encoder_off
    assert set(layer.current.mask) <= set(only.current.mask)  # the other kinds' switches stay
    out = events.run(operations.mask_preset, session, "all but one", view=at(1, ENCODER, 0, MEAN))
    assert "Choose one head" in out["status"]


def test_the_gru_model_offers_only_cross_attention_heads(events, services):
    out = events.translate("a dog runs .", model="toy-rnn")
    encoder, decoder, cross = (out[f"mask_grids[{i}]"] for i in range(3))
    assert not encoder["visible"] and not decoder["visible"] and cross["visible"]
    heads = services.translators["toy-rnn"].model.config.n_heads
    assert [value for _, value in cross["choices"]] == [f"cross.1.{h}" for h in range(1, heads + 1)]
    assert "GRU" in out["mask_note"] and "only its cross-attention" in out["mask_note"]


def test_a_model_switch_shows_nothing_of_the_last_models_results(events, services):
    """Results of the last model (the link, the importance heatmap and head switches) never stay beside another
    model's translation (the tabs' answers are emptied by the page on a new translation: test_browser_answers.py);
    a sentence the new model cannot translate stays in the box, nothing translated, and says so."""
    session = translated(events)
    long = "a " * 200
    out = events.run(translate_or_example, session, "toy-rnn", long)
    assert isinstance(out["session"], Revisions) and out["translation"] == "" and out["attention"] is None
    assert "source" not in out  # the user's sentence stays in the box
    assert out["status"].startswith("Model toy-rnn chosen: it cannot translate the sentence in the box.")
    assert "tokens" in out["status"] and "The sentence is kept" in out["status"]
    assert out["link_box"] == "" and out["importance_plot"] is None
    assert [out[f"mask_grids[{i}]"]["visible"] for i in range(3)] == [False, False, False]
    back = events.run(translate_or_example, out["session"], "toy-en-de", "A dog runs.")  # the next model reads it
    assert back["session"].source == "A dog runs." and back["translation"]
    nothing = events.run(translate_or_example, session, "no-such-model", "A dog.")
    assert isinstance(nothing["session"], Revisions) and nothing["translation"] == "" and nothing["attention"] is None


def test_an_example_already_on_screen_is_not_translated_again(events, services):
    sentence = services.examples(MODEL)[0]
    session = translated(events, sentence)
    same = events.run(use_example, session, sentence, MODEL)
    assert same["session"].current is session.current and "translation" not in same
    assert "status" not in same  # the status line keeps what it said about the translation
    assert events.run(use_example, session, None, MODEL)["session"].current is session.current
    picked = events.run(use_example, translated(events, "Two dogs."), sentence, MODEL)
    assert picked["source"] == sentence and picked["session"].source == sentence


def test_opening_a_head_by_name(events):
    session = translated(events)
    out = events.run(operations.open_head, session, "decoder.2.3")
    assert out["kind"] == DECODER  # a value: the menu already holds every kind
    assert (out["layer"], out["head"]) == (1, 2)
    assert "layer 2, head 3" in json.loads(out["attention"])["layout"]["title"]["text"]
    for bad in ("cross.9.1", "cross.1", "<b>x</b>", None, "mlp.1.1"):
        assert "No head" in events.run(operations.open_head, session, bad)["status"]


def test_the_importance_heatmap_names_every_head_of_the_shipped_model(en_de):
    from attention_inspector.viz.whatif import IMPORTANCE_MEASURES, importance_figure

    report = en_de.head_report
    trace = TraceArrays(["a"], ["<sos>"], ["b"], np.ones(1), [["b"]], np.ones((1, 1)), np.zeros((3, 8, 1, 1)),
                        np.zeros((3, 8, 1, 1)), np.zeros((3, 8, 1, 1)))
    shapes = {kind: (trace.layers(kind), trace.heads(kind)) for kind in trace.available()}
    for measure, (key, _) in IMPORTANCE_MEASURES.items():
        figure = json.loads(importance_figure(report["heads"], shapes, measure).to_json())
        names = [name for panel in figure["data"] for row in panel["customdata"] for name in row]
        assert sorted(names) == sorted(report["heads"])
        cross = figure["data"][2]
        assert cross["z"][1][4] == report["heads"]["cross.2.5"].get(key)  # null: offset is self-attention's
    # A report made without --bleu-per-head has no BLEU changes: the heatmap is blank and says how to measure them.
    without = {name: {k: v for k, v in head.items() if k != "bleu_change"} for name, head in report["heads"].items()}
    title = json.loads(importance_figure(without, shapes, "BLEU change with the head off").to_json())["layout"]["title"]
    assert "not in this model's head report" in title["text"] and "--bleu-per-head" in title["text"]


# ---- the beam in the app and the API -----------------------------------------------------------------------

def test_the_beam_view_lists_hypotheses_and_opens_one_as_a_trace(events, services):
    session = translated(events)
    out = events.run(operations.run_beam, session)
    rows, beam = out["n_best"], out["session"].beam
    hypotheses = beam.hypotheses
    translator = services.translators[MODEL]
    best = translator.translate_tokens([translator.source_tokens(SENTENCE)], beam_size=5)[0]
    assert hypotheses[0] == best + ["<eos>"] and rows[0][1] == translator.to_text(best)
    assert [row[0] for row in rows] == list(range(1, len(rows) + 1))
    assert out["beam_steps"] and "Beam search (beam 5" in out["status"]
    assert [value for _, value in out["beam_open"]["choices"]] == list(range(len(hypotheses)))
    opened = events.run(operations.open_hypothesis, out["session"], len(hypotheses) - 1)
    decoding = opened["session"].current
    assert decoding.trace.target_tokens == hypotheses[-1] and decoding.name == f"beam #{len(hypotheses)}"
    # Another hypothesis replaces it: each is compared with the decoding the beam ran from.
    again = events.run(operations.open_hypothesis, opened["session"], 1)["session"]
    assert [d.name for d in again.decodings] == [ORIGINAL, "beam #2"]
    assert "Run the beam search first" in events.run(operations.open_hypothesis, session, 0)["status"]


@pytest.mark.slow
def test_beam_and_branch_through_raw_http(server, services):
    translator = services.translators[MODEL]
    event, answer = call(server, "beam", json.dumps({"data": [MODEL, SENTENCE, 3, None, None, None]}))
    assert event == "complete"
    beam = answer[0]
    best = translator.translate_tokens([translator.source_tokens(SENTENCE)], beam_size=3)[0]
    assert beam["beam_size"] == 3 and beam["n_best"][0]["tokens"] == best + ["<eos>"]
    assert all(any(h["on_greedy_path"] for h in step) for step in beam["steps"][:len(beam["greedy_tokens"]) - 1])
    event, answer = call(server, "beam", json.dumps({"data": [MODEL, SENTENCE, "five", None, None, None]}))
    assert event == "error" and "beam size" in answer
    # A branch through /trace: force a prefix, the rest is greedy.
    greedy = translator.trace(SENTENCE)
    data = [MODEL, SENTENCE, greedy.target_tokens[:2], None, None, None, None, None]
    event, answer = call(server, "trace", json.dumps({"data": data}))
    assert event == "complete" and answer[0]["target_tokens"] == greedy.target_tokens and answer[0]["forced"] == 2
    assert httpx.get(f"{server.rstrip('/')}/gradio_api/info", timeout=30).json()["named_endpoints"]["/beam"]


# ---- which heads matter, on the real model and data --------------------------------------------------------

@pytest.mark.slow
def test_the_least_important_head_matters_less_for_val_bleu_than_the_most_important(en_de):
    from attention_inspector.model.analysis.heads import greedy_bleu
    from attention_inspector.model.nets.seq2seq import head_gates
    from attention_inspector.model.training.data import load_pairs
    from attention_inspector.model.training.evaluate import DEFAULT_DATA

    try:
        pairs = load_pairs(DEFAULT_DATA, "val", "en", "de")
    except DataError as error:
        pytest.skip(f"Multi30k is not beside the project: {error}")
    ranked = sorted(en_de.head_report["heads"], key=lambda name: en_de.head_report["heads"][name]["importance"])
    sources, references = en_de.src_tokenizer.tokenize_all(pairs["src"]), list(pairs["tgt"])
    base = greedy_bleu(en_de, sources, references)
    least, most = (abs(greedy_bleu(en_de, sources, references, head_gates(en_de.model, [name])) - base)
                   for name in (ranked[0], ranked[-1]))
    assert least < most, (ranked[0], least, ranked[-1], most)
