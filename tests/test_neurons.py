"""The neuron view's numbers (model/explain/neurons.py): the query and key vectors behind a head's weights, their
products, scores and weights, for every kind of attention of the Transformer, the GRU models (dot, split and
learned attention) and a converted T5; and the figure that shows them (viz/neurons.py)."""

import html
import json

import numpy as np
import pytest
import torch

from attention_inspector.model.explain.neurons import RECURRENT, head_vectors
from attention_inspector.model.nets.rnn import RNNConfig, RNNSeq2Seq
from attention_inspector.model.serving.translator import InputError
from attention_inspector.model.text.vocab import SOS_ID
from attention_inspector.viz.neurons import DIGITS, MAX_DIMENSIONS, neuron_figure, neuron_frames, shown_dimensions
from tests.conftest import model_rounding

TEXT = "A man and a woman run in the park."


def softmax_of(scores: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """The softmax of the scores a query may see, 0 elsewhere (computed apart from the code under test)."""
    weights = np.zeros_like(scores)
    seen = np.exp(scores[allowed] - scores[allowed].max())
    weights[allowed] = seen / seen.sum()
    return weights


def every_head(translator):
    """(kind, layer, head) of every head of the translator's model, 1-based as the API counts."""
    return [(kind, layer, head) for kind, (layers, heads) in translator.model.heads().items()
            for layer in range(1, layers + 1) for head in range(1, heads + 1)]


@pytest.mark.parametrize("kind", ["transformer", "rnn", "t5-like"])
def test_the_softmax_of_the_scores_is_the_weights_and_the_weights_are_the_decodings(translators_of_each_kind, kind):
    translator = translators_of_each_kind[kind]
    traced = translator.trace(TEXT)
    maps = {"encoder": traced.trace.encoder_attention, "decoder": traced.trace.decoder_attention,
            "cross": traced.trace.cross_attention}
    for name, layer, head in every_head(translator):
        vectors = translator.neuron(TEXT, traced.target_tokens, name, layer, head)
        assert vectors.rows == maps[name].shape[2]
        for query in range(vectors.rows):
            allowed = vectors.allowed[query]
            scores = vectors.scores(query)
            assert np.isnan(scores[~allowed]).all() and (vectors.weights[query][~allowed] == 0).all()
            # the model's float32 pass against numpy's float64 softmax of its scores, and against the decoding's
            rounding = model_rounding(translator.model.config)
            assert softmax_of(scores, allowed) == pytest.approx(vectors.weights[query], abs=rounding)
            assert vectors.weights[query] == pytest.approx(maps[name][layer - 1, head - 1, query], abs=rounding)
            products = vectors.products(query)[allowed]
            bias = 0 if vectors.bias is None else vectors.bias[query][allowed]
            assert products.sum(-1) + bias == pytest.approx(scores[allowed], abs=1e-9)  # each row sums to its term
        if name == "decoder":  # a later step is masked, an earlier one seen
            assert (vectors.allowed == np.tril(np.ones_like(vectors.allowed))).all()


def test_the_first_encoder_layers_vectors_are_w_q_and_w_k_of_the_embeddings(translators_of_each_kind):
    """Known answer: the first encoder layer of a post-LN Transformer reads the scaled embeddings plus positions."""
    translator = translators_of_each_kind["transformer"]
    model = translator.model
    src_ids = translator.encode_source(translator.source_tokens(TEXT))
    with torch.no_grad():
        embedded = model.src_embedding(torch.tensor([src_ids]))[0]
        attention = model.encoder_layers[0].self_attention
        head, width = 2, model.config.d_head
        queries = (embedded @ attention.w_q.weight.T + attention.w_q.bias)[:, head * width:(head + 1) * width]
        keys = (embedded @ attention.w_k.weight.T + attention.w_k.bias)[:, head * width:(head + 1) * width]
    vectors = head_vectors(model, src_ids, [SOS_ID], "encoder", 0, head)
    assert vectors.queries == pytest.approx(queries.numpy(), abs=1e-5)
    assert vectors.keys == pytest.approx(keys.numpy(), abs=1e-5)
    assert vectors.scale == pytest.approx(width ** -0.5) and vectors.bias is None
    scores = vectors.queries @ vectors.keys.T * width ** -0.5
    assert vectors.scores(4) == pytest.approx(scores[4], abs=1e-5)


@pytest.mark.parametrize("attention", ["dot", "split", "general"])
def test_a_gru_without_projections_shows_its_states_and_says_so(attention):
    """Dot and split attention have no projections: q is the decoder's state (a head's slice of it), k each encoder
    state; with learned ones q and k are projected. Each says which."""
    torch.manual_seed(0)
    heads = 1 if attention == "dot" else 2
    model = RNNSeq2Seq(RNNConfig(src_vocab_size=12, tgt_vocab_size=11, embedding_dim=8, hidden_size=16,
                                 n_heads=heads, dropout=0.0, attention=attention)).eval()
    src_ids, decoder_ids = [5, 6, 7, 3], [SOS_ID, 8, 9]
    vectors = head_vectors(model, src_ids, decoder_ids, "cross", 0, heads - 1)
    with torch.no_grad():
        memory, src_mask, _ = model.encode(torch.tensor([src_ids]))
        _, seen = model(torch.tensor([src_ids]), torch.tensor([decoder_ids]), need_weights=True)
    width = 16 // heads
    part = slice((heads - 1) * width, heads * width)
    if attention != "general":
        assert vectors.keys == pytest.approx(memory[0, :, part].numpy(), abs=1e-6)
    assert vectors.note == RECURRENT[attention].format(head=heads)
    assert vectors.scale == pytest.approx(width ** -0.5)
    assert vectors.weights == pytest.approx(seen.cross[0, 0, heads - 1].numpy(), abs=1e-6)
    for query in range(3):
        assert softmax_of(vectors.scores(query), vectors.allowed[query]) == pytest.approx(vectors.weights[query],
                                                                                         abs=1e-6)


def test_t5_shows_its_own_unscaled_scores_and_a_position_bias_in_self_attention(translators_of_each_kind):
    translator = translators_of_each_kind["t5-like"]
    target = translator.trace(TEXT).target_tokens
    for kind in ("encoder", "decoder"):
        vectors = translator.neuron(TEXT, target, kind, 1, 1)
        assert vectors.scale == 1.0 and vectors.bias is not None and "T5" in vectors.note
    cross = translator.neuron(TEXT, target, "cross", 1, 1)
    assert cross.scale == 1.0 and cross.bias is None
    folded = translator.model.config.folded_query_scale
    assert folded == pytest.approx(translator.model.config.d_head ** 0.5)


@pytest.mark.parametrize("kind,arguments,message", [
    ("rnn", ("encoder", 1, 1), "This model has no encoder self-attention: it has cross-attention."),
    ("transformer", ("cross", 0, 1), "The layer must be a whole number from 1 to 2 (cross-attention), not 0."),
    ("transformer", ("decoder", 1, 5), "The head must be a whole number from 1 to 4 (decoder self-attention), not 5."),
    ("transformer", ("cross", 1, True), "The head must be a whole number from 1 to 4 (cross-attention), not True."),
    ("transformer", ("keys", 1, 1), "Unknown attention kind 'keys'; this model has: encoder, decoder, cross."),
])
def test_a_head_the_model_lacks_is_refused_with_what_it_has(translators_of_each_kind, kind, arguments, message):
    translator = translators_of_each_kind[kind]
    with pytest.raises(InputError) as raised:
        translator.neuron("A dog.", ["ein", "hund", "<eos>"], *arguments)
    assert str(raised.value) == message


class Head:
    """A head of two dimensions and three keys, by hand."""

    queries = np.array([[1.0, 2.0], [0.5, -1.0]])
    keys = np.array([[1.0, 1.0], [-2.0, 0.5], [0.0, 3.0]])
    scale = 0.5
    bias = None
    allowed = np.array([[True, False, False], [True, True, True]])
    weights = np.array([[1.0, 0.0, 0.0], [0.3, 0.2, 0.5]])

    def products(self, query):
        products = self.scale * self.queries[query] * self.keys
        products[~self.allowed[query]] = np.nan
        return products


def test_the_figure_sorts_the_dimensions_by_the_keys_share_and_names_a_masked_key():
    head = Head()
    # Row 1, key 2: products 0.5·(0.5·0, −1·3) = (0, −1.5): d1 (0) before d2 (−1.5).
    assert shown_dimensions(head.products(1), 2).tolist() == [0, 1]
    figure = neuron_figure(head, 1, 2, ["a", "b"], ["x", "y", "z"], "cross.1.1")
    query, keys, products, scores, weights = figure.data
    assert query["x"] == ["d1", "d2"] and query["z"] == [[0.5, -1.0]]
    assert products["z"] == [[0.25, -0.5], [-0.5, -0.25], [0.0, -1.5]]
    assert scores["x"] == pytest.approx([-0.25, -0.75, -1.5])
    assert weights["x"] == [0.3, 0.2, 0.5] and weights["marker"]["color"][2] == "#d62728"
    # Row 0 sees key 1 alone: the keys it cannot see (words not yet written) are not listed, the title says how many
    # there are, and the dimensions follow the heaviest key seen.
    masked = neuron_figure(head, 0, 2, ["a", "b"], ["x", "y", "z"], "cross.1.1")
    assert [trace["y"] for trace in masked.data[1:]] == [["1: x"]] * 4
    assert masked.layout["yaxis2"]["categoryarray"] == ["1: x"]
    assert masked.data[3]["x"] == pytest.approx([1.5]) and masked.data[4]["x"] == [1.0]  # 0.5·(1·1 + 2·1)
    assert masked.data[1]["z"] == [[1.0, 1.0]] and masked.data[2]["z"] == [[1.0, 0.5]]
    assert masked.data[4]["text"] == ["1.00"] and masked.data[4]["marker"]["color"] == ["#d62728"]
    assert "2 keys masked" in masked.layout["title"]["text"] and "masked" not in figure.layout["title"]["text"]
    assert masked.layout["shapes"][0]["y0"] == -0.5  # the key outlined is the first listed
    assert masked.data[0]["x"] == ["d2", "d1"]  # key 1's shares: 0.5·(1, 2) → d2 first


def test_every_title_line_fits_a_phone_with_the_longest_labels_and_a_position_bias():
    """A phone shows ~48 characters of a 13 px title's line (tests/test_browser_neuron.py checks it is not cut)."""
    head = Head()
    head.bias = np.zeros((2, 3))
    head.allowed = np.tril(np.ones((2, 3), dtype=bool))
    long = "w" * 40
    figure = neuron_figure(head, 0, 1, [f"{long} → {long}"] * 2, [long] * 3,
                           "decoder.12.16 (decoder self-attention)")
    lines = html.unescape(figure.layout["title"]["text"]).split("<br>")
    assert len(lines) == 4 and "(2 keys masked)" in lines[1] and "position bias" in lines[2]
    assert max(len(line) for line in lines) <= 48, lines


def test_a_wide_head_shows_its_largest_shares_and_sums_the_rest():
    rng = np.random.default_rng(0)
    head = Head()
    head.queries, head.keys = rng.normal(size=(2, 64)), rng.normal(size=(3, 64))
    figure = neuron_figure(head, 1, 0, ["a", "b"], ["x", "y", "z"], "decoder.1.1")
    products = figure.data[2]
    assert len(products["x"]) == MAX_DIMENSIONS + 1 and products["x"][-1] == f"+{64 - MAX_DIMENSIONS}"
    # rows still sum to the term: the row's MAX_DIMENSIONS + 1 values and the term each shown to DIGITS decimals
    shown = (MAX_DIMENSIONS + 2) * 0.5 * 10 ** -DIGITS
    assert np.sum(products["z"], axis=1) == pytest.approx(figure.data[3]["x"], abs=shown)
    shares = head.products(1)[0]
    assert products["z"][0][:MAX_DIMENSIONS] == sorted(products["z"][0][:MAX_DIMENSIONS], reverse=True)
    assert min(abs(v) for v in products["z"][0][:MAX_DIMENSIONS]) >= np.sort(np.abs(shares))[-MAX_DIMENSIONS] - 1e-4


def test_a_stepped_figure_holds_every_rows_frame():
    head = Head()
    shown = json.loads(neuron_frames(head, 1, 2, ["a", "b"], ["x", "y", "z"], "cross.1.1", stepped=True))
    meta = shown["layout"]["meta"]
    assert len(meta["frames"]) == len(meta["titles"]) == 2 and meta["fits"]
    assert "query: a" in meta["titles"][0] and "query: b" in meta["titles"][1]
    assert meta["frames"][1]["data"][4]["x"] == [0.3, 0.2, 0.5]
    # Row 0 sees one key of the three: its frame lists that one, at the top of the room the three take, and the
    # panels' names stay where they are.
    first, last = meta["frames"]
    assert first["data"][4]["y"] == ["1: x"] and last["data"][4]["y"] == ["1: x", "2: y", "3: z"]
    assert first["axes"]["yaxis2"]["categoryarray"] == ["1: x"]
    top = last["axes"]["yaxis2"]["domain"][1]
    assert first["axes"]["yaxis2"]["domain"][1] == top and last["axes"]["yaxis2"]["domain"][0] == 0
    rows = first["axes"]["yaxis2"]["domain"]
    assert (rows[1] - rows[0]) == pytest.approx(top / 3)  # one key's row of three
    still = json.loads(neuron_frames(head, 1, 2, ["a", "b"], ["x", "y", "z"], "encoder.1.1", stepped=False))
    assert still["layout"]["meta"] == {"fits": True}  # a source token's row: it does not step


def test_the_neuron_figure_passes_plotlys_full_validation_with_a_bias_and_a_masked_key():
    import plotly.graph_objects as go

    head = Head()
    head.bias = np.array([[0.1, -0.2, 0.3], [-1.0, 0.0, 1.0]])
    for query in (0, 1):
        figure = neuron_figure(head, query, 1, ["<b>a</b>", "b"], ["x", "y", "z"], "encoder.1.1")
        assert len(figure.data) == 6 and figure.data[5]["x"][0] == head.bias[query][0]  # the bias, stacked
        assert query == 1 or "&lt;b&gt;a&lt;/b&gt;" in figure.layout["title"]["text"]  # a token is shown as text
        go.Figure(figure.to_dict())  # raises on any invalid property or value
