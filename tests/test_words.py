"""Words from pieces (model/text/words.py): grouping by each tokenizer's convention, and maps merged as Clark et al.
(2019) do, by hand."""

from dataclasses import replace

import numpy as np
import pytest

from attention_inspector.model.text.words import (BPE, CHARACTERS, PIECES, SENTENCEPIECE, WHOLE, merge, word_label,
                                                  word_spans)


def labels(tokens, how):
    return [word_label(tokens[span.start:span.stop], how) for span in word_spans(tokens, how)]


def test_pieces_group_into_words_by_each_convention():
    assert labels(["die", "zeitungs@@", "les@@", "erin", "liest", ".", "<eos>"], BPE) == \
        ["die", "zeitungsleserin", "liest", ".", "<eos>"]
    assert labels(["deu_Latn", "▁Die", "▁Zeitung", "s", "leser", "in", "▁liest", ".", "</s>"], SENTENCEPIECE) == \
        ["deu_Latn", "Die", "Zeitungsleserin", "liest.", "</s>"]
    assert labels([">>fra<<", "▁Un", "▁chien"], SENTENCEPIECE) == [">>fra<<", "Un", "chien"]
    assert labels(["g", "o", "d", "▁", "a", "<eos>"], CHARACTERS) == ["god", "▁", "a", "<eos>"]
    assert word_spans(["<sos>", "ein", "hund"], WHOLE) == [range(0, 1), range(1, 2), range(2, 3)]
    assert labels(["<sos>", "zeitungs@@"], BPE) == ["<sos>", "zeitungs"]  # a word still being written


def test_a_word_level_model_merges_to_the_same_maps():
    rng = np.random.default_rng(0)
    maps = rng.dirichlet(np.ones(5), size=(2, 3, 4))  # (L, H, Q=4, K=5), rows sum to 1
    tokens = ["ein", "hund", "läuft", ".", "<eos>"]
    spans = word_spans(tokens, WHOLE)
    np.testing.assert_allclose(merge(maps, spans[:4], spans), maps, rtol=1e-6)


def test_a_word_in_three_pieces_by_hand():
    # Queries: "zeitungs@@ les@@ erin" (3 pieces), "liest"; keys: "die", "zeitungs@@ les@@ erin", "liest".
    maps = np.array([[0.1, 0.2, 0.3, 0.3, 0.1],
                     [0.5, 0.1, 0.1, 0.1, 0.2],
                     [0.0, 0.6, 0.2, 0.2, 0.0],
                     [0.2, 0.2, 0.2, 0.2, 0.2]])
    keys = word_spans(["die", "zeitungs@@", "les@@", "erin", "liest"], BPE)
    queries = word_spans(["zeitungs@@", "les@@", "erin", "liest"], BPE)
    merged = merge(maps, queries, keys)
    # The word's row: the mean of its three rows of key sums (0.1, 0.8, 0.1), (0.5, 0.3, 0.2), (0.0, 1.0, 0.0).
    np.testing.assert_allclose(merged, [[0.2, 0.7, 0.1], [0.2, 0.6, 0.2]], atol=1e-6)
    np.testing.assert_allclose(merged.sum(-1), 1, atol=1e-6)


def test_merging_checks_that_the_words_cover_the_map():
    with pytest.raises(ValueError, match="cover 2 pieces, the map has 3"):
        merge(np.ones((3, 3)), None, [range(0, 2)])


# A trace of pieces (tests/test_viz.py's way): "die zeitungsleserin liest ." with the word in three pieces.
def piece_trace(units: str = "words", scheme: str = "bpe"):
    from attention_inspector.viz.views import TraceArrays

    rng = np.random.default_rng(1)
    target = ["die", "zeitungs@@", "les@@", "erin", "liest", ".", "<eos>"]
    source = ["the", "newspaper", "read@@", "er", "reads", ".", "<eos>"]

    def maps(*shape):
        weights = rng.random(shape)
        return weights / weights.sum(-1, keepdims=True)

    decoder = maps(2, 4, 7, 7) * np.tril(np.ones((7, 7)))
    return TraceArrays(
        source_tokens=source, decoder_tokens=["<sos>"] + target[:-1], target_tokens=target,
        probabilities=rng.random(7), top_tokens=[[t, "x"] for t in target], top_probabilities=rng.random((7, 2)),
        encoder=maps(2, 4, 7, 7), decoder=decoder / decoder.sum(-1, keepdims=True), cross=maps(2, 4, 7, 7),
        scheme=scheme, units=units)


def test_a_view_in_words_merges_the_pieces_and_the_step_says_which_word_is_being_built():
    from attention_inspector.viz.views import (CROSS, DECODER, ENCODER, attention_figure, query_labels,
                                               step_description, step_heading, step_title)

    trace = piece_trace()
    weights, _, keys, highlight = trace.at_step(CROSS, 2)  # step 3 outputs "les@@": "zeitungsles" so far
    assert keys == ["the", "newspaper", "reader", "reads", ".", "<eos>"]
    assert query_labels(trace, CROSS, 2) == ["<sos> → die", "die → zeitungsl…"] and highlight == 1  # cut to fit
    cross = trace.cross
    key_sums = np.concatenate([cross[..., :2], cross[..., 2:4].sum(-1, keepdims=True), cross[..., 4:]], -1)
    np.testing.assert_allclose(weights[:, :, 1], key_sums[:, :, 1:3].mean(2), rtol=1e-5)  # the two pieces so far
    np.testing.assert_allclose(weights.sum(-1), 1, rtol=1e-5)
    assert step_title(trace, 2).endswith(', building "zeitungsles…"')
    assert step_title(trace, 3).endswith(', writes "zeitungsleserin"') and step_title(trace, 4).endswith('"liest"')
    # A figure's title names the word as its row is named, and the step's piece on a line of its own at every step,
    # so each line fits a phone and stepping keeps the title's height.
    assert [step_heading(trace, t)[0] for t in (2, 3, 4)] == [
        'word 2 of 5: "die" → "zeitungsles…"', 'word 2 of 5: "die" → "zeitungsleserin"',
        'word 3 of 5: "zeitungsleserin" → "liest"']
    assert step_heading(replace(trace, units=PIECES), 2) == [
        f'step 3 of 7: "zeitungs@@" → "les@@" (p = {trace.probabilities[2]:.2f})']
    decoder, _, keys, _ = trace.at_step(DECODER, 4)  # "liest": keys are the words read, the rows those written
    assert keys == ["<sos>", "die", "zeitungsleserin"] and decoder.shape[-2:] == (3, 3)
    np.testing.assert_allclose(decoder.sum(-1), 1, rtol=1e-5)
    figure = attention_figure(trace, ENCODER, 0, 1, 0)
    assert figure.data[0]["x"][2] == "3: reader = read@@ er"  # the hover names the pieces
    assert figure.layout["xaxis"]["ticktext"][2] == "reader"
    # The step's line: the prefix in words, the candidates (pieces, each quoted) as the model chose among them.
    line = step_description(trace, 5).splitlines()
    assert line[2] == "prefix so far: die zeitungsleserin liest"
    assert line[3].startswith(f'candidates: "{trace.top_tokens[5][0]}" ')
    assert step_description(replace(trace, units=PIECES), 5).splitlines()[1] == (
        "prefix so far: die zeitungs@@ les@@ erin liest")


def test_whole_words_in_words_are_the_view_in_pieces():
    from attention_inspector.viz.views import CROSS, DECODER, ENCODER, attention_figure

    for kind in (ENCODER, DECODER, CROSS):
        words, pieces = piece_trace("words", "whole words"), piece_trace("pieces", "bpe")
        assert attention_figure(words, kind, 1, 2, 3).to_json() == attention_figure(pieces, kind, 1, 2, 3).to_json()


def test_stepping_a_view_in_words_sends_every_steps_figure():
    import json

    from attention_inspector.viz.views import CROSS, attention_figure, view_frames
    from tests.test_viz import rebuilt

    trace = piece_trace()
    sent = json.loads(view_frames(trace, CROSS, 1, 2, False)["attention"])
    frames = sent["layout"]["meta"]["frames"]
    assert len(frames) == trace.steps and sent["layout"]["meta"]["grows"] is None
    for step in (0, 2, 5):  # each as what differs from the last step's (tests/test_viz.py tests it in full)
        alone = json.loads(attention_figure(trace, CROSS, 1, 2, step).to_json())
        assert rebuilt(sent["data"][0]["z"], frames[step]["data"][0]["z"]) == alone["data"][0]["z"]
        assert rebuilt(sent["layout"]["yaxis"]["ticktext"], frames[step]["axes"]["yaxis"]["ticktext"]) == \
            alone["layout"]["yaxis"]["ticktext"]
        assert frames[step]["shapes"] == alone["layout"]["shapes"]


def test_the_probability_chart_in_words_gives_each_word_its_pieces_product_and_steps_along_the_word():
    import json

    from attention_inspector.viz.attention import HIGHLIGHT
    from attention_inspector.viz.views import probability_frames

    trace = piece_trace()
    sent = json.loads(probability_frames(trace))
    assert sent["layout"]["xaxis"]["ticktext"] == ["die", "zeitungsleserin", "liest", ".", "&lt;eos&gt;"]
    assert sent["data"][0]["x"][1] == "2: zeitungsleserin = zeitungs@@ les@@ erin"  # the hover names the pieces
    np.testing.assert_allclose(sent["data"][0]["y"][1], np.prod(trace.probabilities[1:4]), rtol=1e-6)
    # Steps 2, 3 and 4 write "zeitungsleserin": its bar is the red one at each.
    red = [step["colors"].index(HIGHLIGHT) for step in sent["layout"]["meta"]["bars"]]
    assert red == [0, 1, 1, 1, 2, 3, 4]
    pieces = json.loads(probability_frames(replace(trace, units=PIECES)))
    assert len(pieces["data"][0]["y"]) == trace.steps
    assert [step["colors"].index(HIGHLIGHT) for step in pieces["layout"]["meta"]["bars"]] == list(range(7))
