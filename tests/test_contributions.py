"""Measures beyond raw weights, with known answers: value-weighted attention, rollout, ALTI and ALTI+."""

import json
import math

import numpy as np
import pytest
import torch

from attention_inspector.model.explain.contributions import (BLOCKS, alti_plus, block_contributions, decomposed,
                                                             layers_contributions, rollout, value_weighted)
from attention_inspector.model.keys import CROSS, ENCODER
from attention_inspector.model.nets.seq2seq import head_gates
from attention_inspector.model.nets.transformer import Transformer
from attention_inspector.model.serving.checkpoint import load_checkpoint
from attention_inspector.model.text.vocab import EOS_ID, SOS_ID
from tests.conftest import SHIPPED, tiny_config

SRC_IDS = [5, 6, 7, 8, 9, EOS_ID]
TGT_IDS = [10, 11, 12, 13, EOS_ID]


def transformer(norm="post", layers=2):
    torch.manual_seed(0)
    return Transformer(tiny_config(norm=norm, n_encoder_layers=layers, n_decoder_layers=layers)).eval()


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_contributions_are_shares_that_sum_to_one(norm):
    contributions = alti_plus(transformer(norm), SRC_IDS, TGT_IDS)
    for shares in (contributions.encoder, contributions.decoder):
        assert (shares >= 0).all()
        np.testing.assert_allclose(shares.sum(-1), 1, atol=1e-5)
    sources = len(SRC_IDS)
    for t in range(len(TGT_IDS)):  # a prediction at step t sees the decoder inputs up to t, never after
        assert (contributions.decoder[t, sources + t + 1:] == 0).all()
    # The source share is the sum of every source column, its <eos> included, and with the target's it makes 1.
    shares = contributions.source_contribution
    np.testing.assert_allclose(shares, contributions.decoder[:, :sources].sum(-1), rtol=1e-6)
    np.testing.assert_allclose(shares + contributions.decoder[:, sources:].sum(-1), 1, atol=1e-5)
    assert ((shares > 0) & (shares < 1)).all()


def test_with_every_cross_attention_head_off_nothing_comes_from_the_source():
    model = transformer()
    layers, heads = model.heads()["cross"]
    off = head_gates(model, [f"cross.{layer}.{head}" for layer in range(1, layers + 1) for head in range(1, heads + 1)])
    np.testing.assert_allclose(alti_plus(model, SRC_IDS, TGT_IDS, off).source_contribution, 0, atol=1e-6)


def test_the_block_decomposition_adds_up_to_the_layers_own_output():
    """Each input's term, summed (with the bias), is what the block computes: ALTI decomposes the real output."""
    model = transformer()
    _, recorded = model(torch.tensor([SRC_IDS]), torch.tensor([[SOS_ID] + TGT_IDS[:-1]]), need_vectors=True)
    layer = model.decoder_layers[0]
    stream = recorded.decoder_stream[0, 0]
    mixed = torch.einsum("hqk,hkd->qd", recorded.cross[0, 0], recorded.cross_values[0, 0])
    torch.testing.assert_close(layer.cross_attention_block.norm(stream[1] + mixed + layer.cross_attention.w_o.bias),
                               stream[2], atol=1e-5, rtol=1e-5)


def test_value_weighted_attention_is_the_weights_when_every_value_has_the_same_norm():
    torch.manual_seed(0)
    weights = torch.rand(3, 2, 4, 5).softmax(-1)  # (L, H, Q, K)
    values = torch.randn(3, 2, 5, 8)
    values = values / values.norm(dim=-1, keepdim=True)  # every f_h(x_j) of norm 1
    per_head, together = value_weighted(weights, values)
    torch.testing.assert_close(per_head, weights)
    assert (together <= weights.sum(1) + 1e-6).all()  # the heads' vectors add up to at most their norms' sum
    scaled, _ = value_weighted(weights, values * torch.arange(1, 6)[:, None])  # key j's vector j+1 times longer
    torch.testing.assert_close(scaled, weights * torch.arange(1, 6))
    # One layer without a batch dimension (H, Q, K), square as self-attention's maps are: the same numbers.
    square, square_values = weights[..., :4], values[..., :4, :] * torch.arange(1, 5)[:, None]
    for one in range(3):
        per_head_alone, together_alone = value_weighted(square[one], square_values[one])
        torch.testing.assert_close(per_head_alone, square[one] * torch.arange(1, 5))
        torch.testing.assert_close(together_alone, value_weighted(square, square_values)[1][one])


def test_rollout_of_identity_attention_is_the_identity():
    identity = torch.eye(4).expand(3, 2, 4, 4)
    torch.testing.assert_close(rollout(identity), torch.eye(4))
    uniform = torch.full((1, 1, 4, 4), 0.25)
    torch.testing.assert_close(rollout(uniform), 0.5 * torch.eye(4) + 0.125)
    # Rows re-normalised: [[1, 0], [1, 1]] mixes to [[1, 0], [0.5, 1]], whose rows sum to 1 and 1.5.
    uneven = torch.tensor([[[[1.0, 0.0], [1.0, 1.0]]]])
    torch.testing.assert_close(rollout(uneven), torch.tensor([[1.0, 0.0], [1 / 3, 2 / 3]]))
    two_layers = torch.tensor([[[[0.5, 0.5], [0.0, 1.0]]], [[[1.0, 0.0], [0.5, 0.5]]]])  # (L, H, Q, Q)
    first = torch.tensor([[0.75, 0.25], [0.0, 1.0]])  # 0.5 · layer 1 + 0.5 · I
    second = torch.tensor([[1.0, 0.0], [0.25, 0.75]])
    torch.testing.assert_close(rollout(two_layers), second @ first)  # later layers on the left


def hand_alti(weights, values, residual, bias, gamma, beta, eps, self_attention):
    """ALTI of one post-LN block with plain loops: T_i(x_j) = γ ⊙ (t_ij − mean t_ij) / σ_i, where
    t_ij = Σ_h α^h_ij v^h_j (+ x_i when j = i, or as its own term), σ_i the std of the whole sum; the output y_i
    is the block's real one, biases included."""
    heads, queries, keys = weights.shape
    contributions = []
    for i in range(queries):
        terms = [sum(weights[h, i, j] * values[h, j] for h in range(heads)) for j in range(keys)]
        if self_attention:
            terms[i] = terms[i] + residual[i]
        else:
            terms.append(residual[i])
        total = sum(terms) + bias
        sigma = math.sqrt(np.var(total) + eps)
        normed = [gamma * (term - term.mean()) / sigma for term in terms]
        output = gamma * (total - total.mean()) / sigma + beta
        row = [max(0.0, np.abs(output).sum() - np.abs(output - term).sum()) for term in normed]
        contributions.append(np.array(row) / sum(row))
    return np.array(contributions)


def test_alti_plus_of_a_one_layer_model_is_the_hand_computation():
    model = transformer(layers=1)
    with torch.no_grad():  # a LayerNorm with its own scale and shift, so they are part of the check
        for norm in (model.encoder_layers[0].attention_block.norm, model.decoder_layers[0].self_attention_block.norm,
                     model.decoder_layers[0].cross_attention_block.norm):
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.uniform_(-0.5, 0.5)
    _, recorded = model(torch.tensor([SRC_IDS]), torch.tensor([[SOS_ID] + TGT_IDS[:-1]]), need_vectors=True)
    numpy = {name: getattr(recorded, name)[0, 0].detach().double().numpy()
             for name in ("encoder", "decoder", "cross", "encoder_values", "decoder_values", "cross_values",
                          "encoder_stream", "decoder_stream")}
    encoder_layer, decoder_layer = model.encoder_layers[0], model.decoder_layers[0]

    def block(kind, residual, layer_attention, residual_block, self_attention):
        return hand_alti(numpy[kind], numpy[f"{kind}_values"], residual,
                         layer_attention.w_o.bias.detach().double().numpy(),
                         residual_block.norm.weight.detach().double().numpy(),
                         residual_block.norm.bias.detach().double().numpy(), residual_block.norm.eps, self_attention)

    encoder = block("encoder", numpy["encoder_stream"][0], encoder_layer.self_attention, encoder_layer.attention_block,
                    True)
    mixing = block("decoder", numpy["decoder_stream"][0], decoder_layer.self_attention,
                   decoder_layer.self_attention_block, True)
    cross = block("cross", numpy["decoder_stream"][1], decoder_layer.cross_attention,
                  decoder_layer.cross_attention_block, False)
    sources = len(SRC_IDS)
    expected = np.concatenate([cross[:, :sources] @ encoder, cross[:, sources:] * mixing], axis=1)

    contributions = alti_plus(model, SRC_IDS, TGT_IDS)
    np.testing.assert_allclose(contributions.encoder, encoder, atol=1e-5)
    np.testing.assert_allclose(contributions.decoder, expected, atol=1e-5)


def test_block_contributions_of_a_block_that_only_copies_its_input():
    """Weights on a single key whose vector is zero: the output is the residual's, all of it."""
    weights = torch.zeros(2, 3, 3)
    weights[:, :, 0] = 1
    values = torch.zeros(2, 3, 4)
    residual = torch.randn(3, 4)
    shares = block_contributions(weights, values, residual, torch.zeros(4), torch.nn.LayerNorm(4), True, False)
    torch.testing.assert_close(shares, torch.tensor([[0.0, 0.0, 0.0, 1.0]] * 3))


@pytest.mark.parametrize("norm, normalization", [("post", "layer"), ("pre", "layer"), ("post", "rms")])
def test_a_models_layers_decomposed_together_are_each_layer_decomposed_alone(norm, normalization):
    """ALTI+ decomposes every layer's blocks of a kind in one batch: each with its own bias and norm, as the layer
    alone gives (the known answers above are one layer's); the vectors it reads are left as they were."""
    torch.manual_seed(0)
    model = Transformer(tiny_config(norm=norm, normalization=normalization, n_encoder_layers=3,
                                    n_decoder_layers=3)).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() == 1:  # every norm's scale (and shift) and every bias its own
                parameter.uniform_(0.5, 1.5)
        _, recorded = model(torch.tensor([SRC_IDS]), torch.tensor([[SOS_ID] + TGT_IDS[:-1]]), need_vectors=True)
    before = {name: value.clone() for name, value in vars(recorded).items() if value is not None}
    for kind, (held_by, attention, block) in BLOCKS.items():
        layers = getattr(model, held_by)
        weights, values = getattr(recorded, kind)[:, 0], getattr(recorded, f"{kind}_values")[:, 0]
        entering = recorded.encoder_stream[:, 0] if kind == ENCODER else recorded.decoder_stream[:, 0]
        streams = entering[:, int(kind == CROSS)]  # the residual stream entering the block
        biases = [getattr(layer, attention).w_o.bias for layer in layers]
        norms = [getattr(layer, block).norm for layer in layers]
        self_attention = kind != CROSS
        with torch.no_grad():  # as ALTI+ runs (inference mode): a batched product writes in place
            together = layers_contributions(weights, values, streams, torch.stack(biases), norms, norm == "post",
                                            self_attention)
            for i in range(len(layers)):
                alone = block_contributions(weights[i], values[i], streams[i], biases[i], norms[i], norm == "post",
                                            self_attention)
                torch.testing.assert_close(together[i], alone)
    assert np.isfinite(decomposed(model, recorded).decoder).all()
    for name, value in before.items():
        assert torch.equal(getattr(recorded, name), value), name


@pytest.mark.slow
def test_the_shipped_model_takes_most_of_each_word_from_the_source():
    translator = load_checkpoint(SHIPPED / "en-de")
    text = "A young woman in a red jacket is sitting on a wooden bench in the park."
    traced = translator.trace(text)
    shares = alti_plus(translator.model, traced.trace.src_ids, traced.trace.token_ids).source_contribution
    assert shares.shape == (len(traced.target_tokens),) and ((shares > 0.3) & (shares < 1)).all()


def test_the_app_measures_the_decoding_on_screen_on_request(events, services):
    from attention_inspector.ui.tabs.sources import measure_sources

    session = events.translate("A man plays with a red ball.")["session"]
    (shares, contributions), status = measure_sources(services, session)
    bars = json.loads(shares)["data"][0]
    trace = session.trace
    expected = services.translators["toy-en-de"].contributions(session.source, trace.target_tokens)
    np.testing.assert_allclose(bars["y"], expected.source_contribution, atol=1e-6)
    np.testing.assert_allclose(json.loads(contributions)["data"][0]["z"], expected.decoder, atol=1e-6)
    assert "came from the source on average" in status
    gru = events.translate("a dog runs .", model="toy-rnn")["session"]
    (shares, _), status = measure_sources(services, gru)
    assert shares is None and "GRU" in status


def test_head_statistics_of_known_maps():
    from attention_inspector.model.explain.head_stats import head_statistics

    tokens = ["a", "dog", ".", "<eos>"]
    previous = np.zeros((1, 2, 4, 4))
    previous[0, 0, 0, 0] = 1
    previous[0, 0, np.arange(1, 4), np.arange(0, 3)] = 1  # head 1: the previous token (the first: itself)
    previous[0, 1] = 0.25  # head 2: uniform
    stats = head_statistics(previous, tokens, self_attention=True)
    np.testing.assert_allclose(stats["offset"][0], [-0.75, np.mean([0 - 0, 0 - 1, 0 - 2, 0 - 3])])
    np.testing.assert_allclose(stats["entropy"][0], [0, np.log(4)], atol=1e-9)
    np.testing.assert_allclose(stats["confidence"][0], [1, 0.25])
    np.testing.assert_allclose(stats["eos_weight"][0], [0, 0.25])
    np.testing.assert_allclose(stats["punctuation_weight"][0], [0.25, 0.25])  # "." is read once, by "<eos>"
    assert np.isnan(head_statistics(previous, tokens, self_attention=False)["offset"]).all()


def test_the_app_tables_every_heads_statistics(events, services):
    from attention_inspector.model.keys import CROSS, DECODER
    from attention_inspector.ui.tabs.statistics import measure_heads

    session = events.translate("A dog runs.")["session"]
    trace = session.trace
    (table,), _ = measure_heads(services, session)
    rows = table["rows"]
    assert table["headers"] == ["head", "entropy", "confidence", "eos weight", "punctuation weight", "offset"]
    assert len(rows) == sum(trace.layers(k) * trace.heads(k) for k in trace.available())
    assert rows[0][0] == "encoder.1.1" and rows[-1][0].startswith("cross.") and rows[-1][-1] is None
    # A head's row holds its own map's numbers, computed here by hand: entropy, confidence, weight on <eos> (none:
    # the decoder reads <sos> and the words it wrote), weight on punctuation, offset of the most attended key.
    row = {row[0]: row[1:] for row in rows}
    weights = trace.maps(DECODER)[1, 2]  # decoder.2.3, (T, T)
    assert trace.decoder_tokens == ["<sos>", "ein", "hund", "läuft", "."]
    expected = [-(weights * np.log(np.clip(weights, 1e-12, None))).sum(-1).mean(), weights.max(-1).mean(), 0,
                weights[:, -1].mean(), (weights.argmax(-1) - np.arange(len(weights))).mean()]
    # The table shows 3 decimals (5e-4 of rounding); the rest of 1e-3 is far above float32's rounding of these means
    # of a few weights, recomputed here from the same maps.
    assert row["decoder.2.3"] == pytest.approx(expected, abs=1e-3)
    assert row["cross.1.2"][2] == pytest.approx(trace.maps(CROSS)[0, 1, :, -1].mean(), abs=1e-3)  # the source's <eos>


def test_every_view_can_show_a_measure_instead_of_the_weights(events, services):
    import json

    from attention_inspector.model.explain.contributions import measure_maps
    from attention_inspector.model.keys import (ALL_HEADS, ALTI, CROSS, DECODER, ENCODER, GRADIENTS, MEAN, ROLLOUT,
                                                VALUE_NORM, WEIGHTS)
    from attention_inspector.ui.operations import MEASURE_LINES

    session = events.translate("A man plays with a red ball.")["session"]
    trace = session.trace
    translator = services.translators["toy-en-de"]
    maps = measure_maps(translator.model, translator.encode_source(translator.source_tokens(session.source)),
                        [translator.tgt_vocab.stoi[t] for t in trace.target_tokens])
    last = trace.steps - 1
    for key in (VALUE_NORM, ROLLOUT, ALTI):
        line, unit = MEASURE_LINES[key]
        for kind in (ENCODER, DECODER, CROSS):
            view = events.view(session, kind, 1, 0, key, 1, True)
            figure = json.loads(view["attention"])
            expected = maps[key][kind][1, 0]
            rows = expected if kind == ENCODER else expected[:last + 1]
            np.testing.assert_allclose(figure["data"][0]["z"], rows, atol=1e-6)
            assert line.split(" (")[0] in figure["layout"]["title"]["text"]
            # The hover shows the attention weight behind each cell: the head's, or the heads' mean, to 4 decimals (5e-5
            # of rounding, and as much again for the mean of the heads taken in another order).
            raw = trace.maps(kind)[1, 0] if key == VALUE_NORM else trace.maps(kind)[1].mean(0)
            np.testing.assert_allclose(figure["data"][0]["customdata"], raw if kind == ENCODER else raw[:last + 1],
                                       atol=1e-4)
            assert "attention weight %{customdata:.3f}" in figure["data"][0]["hovertemplate"]
            assert figure["data"][0]["colorbar"]["title"]["text"].startswith(unit.replace("&", "&amp;"))
            if key != VALUE_NORM:  # a measure of the layer as a whole: one "head", shares in 0..1
                assert [label for label, _ in view["head"]["choices"]] == ["Every head, combined"]
        if key != VALUE_NORM:
            np.testing.assert_allclose(np.array(maps[key]["cross"]).sum(-1), 1 - (key == ALTI) * np.array(
                maps[key]["decoder"]).sum(-1), atol=1e-5)
        else:
            grid = json.loads(events.view(session, CROSS, 0, ALL_HEADS, key, 1, False)["attention"])
            assert grid["layout"]["coloraxis"]["cmax"] > 1
            # Mean of heads shows the heads together, ‖Σ_h α f‖, not the mean of each head's norm.
            mean = json.loads(events.view(session, ENCODER, 1, MEAN, key, 1, False)["attention"])
            np.testing.assert_allclose(mean["data"][0]["z"], maps["value_norm_together"]["encoder"][1], atol=1e-5)
            assert "all heads together" in mean["layout"]["title"]["text"]
    # A new decoding shows its weights again; the GRU model has no measures of the residual stream, only
    # its weights and gradients.
    measured = events.view(session, CROSS, 1, 0, ROLLOUT, 1, False)["session"]
    assert events.translate("A dog.", session=measured)["measure"] == WEIGHTS
    gru = events.translate("a dog runs .", model="toy-rnn")
    assert [key for _, key in gru["measure"]["choices"]] == [WEIGHTS, *GRADIENTS]
    answer = events.view(gru["session"], CROSS, 0, 0, ROLLOUT, 1, False)
    assert answer["session"].view.measure == WEIGHTS and answer["measure"] == WEIGHTS and "GRU" in answer["status"]


def test_a_decodings_measures_are_computed_once_and_kept_with_it(events, services, monkeypatch):
    """The first measure shown runs one teacher-forced pass; other kinds, layers, heads and measures of the same
    decoding reuse its maps; another decoding (a branch) gets its own."""
    import json

    from attention_inspector.model.keys import ALTI, CROSS, DECODER, ENCODER, MEAN, ROLLOUT, VALUE_NORM, WEIGHTS
    from attention_inspector.ui import operations

    session = events.translate("A man plays with a red ball.")["session"]
    trace = session.trace
    translator = services.translators["toy-en-de"]
    passes = []
    original = type(translator).measures
    monkeypatch.setattr(type(translator), "measures",
                        lambda self, *args, **languages: passes.append(args) or original(self, *args, **languages))
    first = events.view(session, CROSS, 1, 0, ROLLOUT, 1, False)
    session = first["session"]
    for kind, measure in ((ENCODER, ALTI), (DECODER, VALUE_NORM), (CROSS, ROLLOUT)):
        session = events.view(session, kind, 0, MEAN, measure, 1, False)["session"]
    again = events.view(session, CROSS, 1, 0, ROLLOUT, 1, False)
    assert len(passes) == 1 and json.loads(again["attention"]) == json.loads(first["attention"])
    assert session.current.measure_maps is not None
    word = next(t for t in trace.top_tokens[1][1:] if t != "<eos>")
    branched = events.run(operations.branch, session, word, view=(CROSS, 0, MEAN, WEIGHTS, 2, False))["session"]
    assert branched.current.measure_maps is None and branched.view.measure == WEIGHTS
    events.view(branched, CROSS, 1, 0, ROLLOUT, 1, False)
    assert len(passes) == 2 and passes[1][1] == branched.trace.target_tokens
