"""Gradient attributions (model/explain/attribution.py): the gradients are the model's, integrated gradients is complete
(its attributions sum to f(x) − f(baseline)) and gets more so with more steps, for the Transformer, a shared
vocabulary (as converted Hub models have) and the GRU models, plain and contrastive."""

import numpy as np
import pytest
import torch

from attention_inspector.model.explain.attribution import (INPUT_X_GRADIENT, INTEGRATED_GRADIENTS, PASSES, SALIENCY,
                                                           Attributions, Prediction, attribute, attribute_steps,
                                                           gradient_scores_at, step_shares)
from attention_inspector.model.nets.seq2seq import head_gates
from attention_inspector.model.nets.rnn import RNNConfig, RNNSeq2Seq
from attention_inspector.model.nets.transformer import Transformer
from attention_inspector.model.text.vocab import EOS_ID, PAD_ID, SOS_ID
from tests.conftest import T5_LIKE, decoded_log_probabilities, model_rounding, reordered, tiny_config

pytest.importorskip("captum")
SRC = [5, 6, 7, 8, 9, EOS_ID]
TGT = [10, 11, 12, 13, EOS_ID]


def models() -> dict[str, torch.nn.Module]:
    torch.manual_seed(0)
    return {"transformer": Transformer(tiny_config()).eval(),
            "shared vocabulary, T5-like": Transformer(tiny_config(tgt_vocab_size=23, share_embeddings=True,
                                                                  **T5_LIKE)).eval(),
            "gru": RNNSeq2Seq(RNNConfig(src_vocab_size=23, tgt_vocab_size=29, embedding_dim=16, hidden_size=32,
                                        n_heads=2, dropout=0.0)).eval()}


@pytest.mark.parametrize("name", list(models()))
def test_integrated_gradients_is_complete_and_converges_as_steps_grow(name):
    model = models()[name]
    errors = []
    # RMSNorm makes f scale-invariant away from zero embeddings, so the T5-like model's integrand is a spike near
    # the baseline, which takes more points (measured: 6.1, 0.16 and 0.0000 relative error at 8, 32 and 128).
    for steps in (8, 32, 128):
        result = attribute(model, SRC, TGT, step=3, method=INTEGRATED_GRADIENTS, steps=steps)
        total = result.source.sum() + result.target.sum()
        change = result.score - result.baseline_score
        assert total - change == pytest.approx(result.delta, abs=1e-4)  # Captum's delta is what we check
        errors.append(abs(total - change) / abs(change))
    assert errors[-1] < 0.01, errors  # within 1% with enough steps
    assert errors[-1] <= max(errors[0], 1e-4), errors  # falling, unless already at float rounding (the GRU's)
    assert result.source.shape == (len(SRC),) and result.target.shape == (4,)  # <sos> and the 3 tokens before


@pytest.mark.parametrize("name", list(models()))
def test_integrated_gradients_are_captums_whether_shared_out_over_the_cores_or_told_batch_by_batch(name):
    from captum.attr import IntegratedGradients

    model = models()[name]
    prediction = Prediction(model, SRC, TGT[:3], token=TGT[3])
    inputs = tuple(e.requires_grad_() for e in prediction.embeddings())
    baselines = prediction.embeddings("pad")
    with torch.enable_grad():
        expected, delta = IntegratedGradients(prediction).attribute(
            inputs, baselines=baselines, n_steps=12, method="gausslegendre", return_convergence_delta=True)
    told = []
    for progress in (None, lambda done, total: told.append((done, total))):
        result = attribute(model, SRC, TGT, step=3, method=INTEGRATED_GRADIENTS, steps=12, baseline="pad",
                           progress=progress)
        torch.testing.assert_close(torch.from_numpy(result.source), expected[0].sum(-1)[0], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(torch.from_numpy(result.target), expected[1].sum(-1)[0], atol=1e-5, rtol=1e-4)
        assert result.delta == pytest.approx(float(delta[0]), abs=1e-4)
    assert told[-1] == (12, 12) and len(told) > 1 and sorted(told) == told


@pytest.mark.parametrize("name", list(models()))
def test_saliency_and_input_x_gradient_are_the_gradients_by_hand(name):
    model = models()[name]
    prediction = Prediction(model, SRC, TGT[:2], token=TGT[2])
    source, target = (e.clone().requires_grad_() for e in prediction.embeddings())
    with torch.enable_grad():
        prediction(source, target).sum().backward()
    saliency = attribute(model, SRC, TGT, step=2, method=SALIENCY)
    torch.testing.assert_close(torch.from_numpy(saliency.source), source.grad[0].norm(dim=-1))
    torch.testing.assert_close(torch.from_numpy(saliency.target), target.grad[0].norm(dim=-1))
    product = attribute(model, SRC, TGT, step=2, method=INPUT_X_GRADIENT)
    torch.testing.assert_close(torch.from_numpy(product.target), (target.grad[0] * target[0]).sum(-1).detach())
    assert saliency.score == pytest.approx(float(prediction(*prediction.embeddings()).detach()))
    both = gradient_scores_at(model, SRC, TGT, 2)  # one gradient for both (which explanation to trust)
    np.testing.assert_array_equal(both[SALIENCY], saliency.source)
    np.testing.assert_allclose(both[INPUT_X_GRADIENT], product.source, atol=1e-7)


LOGITS = 10  # |logits| of `models()` stay under this (checked below): the scale of a score's rounding


def test_the_models_logits_stay_under_the_scale_their_scores_tolerances_assume():
    for model in models().values():
        with torch.no_grad():
            logits, _ = model(torch.tensor([SRC]), torch.tensor([[SOS_ID] + TGT]))
        assert float(logits.abs().max()) < LOGITS


def gradient_rounding(model, *values: np.ndarray) -> float:
    """How far two float32 computations of gradients of the size of `values` may differ with their sums in other
    orders (a batch of steps, a step alone): the model's rounding (tests/conftest.py) twice over, forward and back."""
    return 2 * model_rounding(model.config, scale=max(float(np.abs(v).max()) for v in values),
                              length=len(SRC) + len(TGT))


@pytest.mark.parametrize("name", list(models()))
@pytest.mark.parametrize("contrast, off", [(None, False), (14, False), (None, True)])
def test_every_step_in_one_batch_equals_each_step_alone(name, contrast, off):
    model = models()[name]
    heads = ["cross.1.1"] if name == "gru" else ["encoder.1.1", "decoder.2.2", "cross.1.2"]
    gates = head_gates(model, heads) if off else None  # heads off: the batch reads through the same gates
    for method in (SALIENCY, INPUT_X_GRADIENT):
        every = attribute_steps(model, SRC, TGT, method, contrast=contrast, gates=gates)
        assert [r.step for r in every] == list(range(len(TGT)))
        told = []  # in passes of a few rows (a large model's, with progress), each pass's rows over the cores
        passes = attribute_steps(model, SRC, TGT, method, contrast=contrast, gates=gates,
                                 progress=lambda *done: told.append(done))
        assert told[-1] == (len(TGT), len(TGT)) and len(told) == min(PASSES, len(TGT))
        for ours, theirs in zip(passes, every, strict=True):
            rounding = gradient_rounding(model, theirs.source, theirs.target)
            np.testing.assert_allclose(ours.source, theirs.source, rtol=0, atol=rounding)
            np.testing.assert_allclose(ours.target, theirs.target, rtol=0, atol=rounding)
        for step, result in enumerate(every):
            alone = attribute(model, SRC, TGT, step, method, contrast=contrast, gates=gates)
            assert (result.method, result.step, result.token, result.contrast) == (method, step, TGT[step], contrast) \
                == (alone.method, alone.step, alone.token, alone.contrast)
            # A score: a log-probability (or two), each within twice its logits' rounding.
            assert result.score == pytest.approx(alone.score, abs=2 * 2 * model_rounding(model.config, scale=LOGITS))
            rounding = gradient_rounding(model, alone.source, alone.target)
            np.testing.assert_allclose(result.source, alone.source, rtol=0, atol=rounding)
            np.testing.assert_allclose(result.target, alone.target, rtol=0, atol=rounding)  # (step + 1,): none after


def test_step_shares_keep_each_sign_and_sum_to_one_in_absolute_value():
    model = models()["transformer"]
    results = attribute_steps(model, SRC, TGT, INTEGRATED_GRADIENTS, steps=8)
    source, target = step_shares(results)
    assert source.shape == (len(TGT), len(SRC)) and target.shape == (len(TGT), len(TGT))
    # A step's total adds its float32 source attributions (and float64 target ones) in an order of numpy's, by rows
    # of the stacked steps there and alone here: two orders of len(SRC) float32 terms (numpy's default 1e-7 is
    # below that: 0.69 of it was used on an emulated CPU).
    rounding = reordered(len(SRC))
    np.testing.assert_allclose(np.abs(source).sum(1) + np.abs(target).sum(1), 1.0, rtol=rounding)
    assert np.all(np.triu(target, 1) == 0)
    total = np.abs(results[2].source).sum() + np.abs(results[2].target).sum()
    np.testing.assert_allclose(source[2], results[2].source / total, rtol=rounding)
    np.testing.assert_allclose(target[2, :3], results[2].target / total, rtol=rounding)


def test_step_shares_by_hand():
    def step(number: int, source: list[float], target: list[float]) -> Attributions:
        return Attributions(SALIENCY, number, 0, None, np.array(source), np.array(target), 0.0)

    # Step 0: |0.1| + |-0.2| + |0.1| = 0.4 in all; step 1 attributes nothing (its shares stay 0, not NaN).
    source, target = step_shares([step(0, [0.1, -0.2], [0.1]), step(1, [0.0, 0.0], [0.0, 0.0])])
    np.testing.assert_allclose(source, [[0.25, -0.5], [0.0, 0.0]])
    np.testing.assert_allclose(target, [[0.25, 0.0], [0.0, 0.0]])
    source, target = step_shares([])
    assert source.shape == (0, 0) and target.shape == (0, 0)


@pytest.mark.parametrize("name", list(models()))
def test_a_predictions_score_is_the_models_log_probability_with_the_same_heads_off(name):
    model = models()[name]
    off = ["cross.1.1"] if name == "gru" else ["encoder.1.1", "decoder.2.2", "cross.1.3"]
    gates = head_gates(model, off)
    with torch.no_grad():
        logits, _ = model(torch.tensor([SRC]), torch.tensor([[SOS_ID] + TGT[:2]]), gates=gates)
    expected = decoded_log_probabilities(logits[0, -1])
    result = attribute(model, SRC, TGT, 2, INTEGRATED_GRADIENTS, steps=4, gates=gates)
    assert result.score == pytest.approx(float(expected[TGT[2]]), abs=1e-5)
    contrasted = attribute(model, SRC, TGT, 2, SALIENCY, contrast=14, gates=gates)
    assert contrasted.score == pytest.approx(float(expected[TGT[2]] - expected[14]), abs=1e-5)


def test_with_every_cross_attention_head_off_nothing_is_attributed_to_the_source():
    model = models()["transformer"]
    layers, heads = model.heads()["cross"]
    gates = head_gates(model, [f"cross.{layer}.{head}" for layer in range(1, layers + 1)
                               for head in range(1, heads + 1)])
    for method in (SALIENCY, INTEGRATED_GRADIENTS):
        assert not np.any(attribute(model, SRC, TGT, 2, method, steps=4, gates=gates).source)


def test_the_baselines_are_zero_and_every_token_as_pad():
    model = models()["shared vocabulary, T5-like"]
    prediction = Prediction(model, SRC, TGT[:2], TGT[2])
    source, target = prediction.embeddings("zero")
    assert source.shape == (1, len(SRC), 32) and target.shape == (1, 3, 32) and not source.any() and not target.any()
    source, target = prediction.embeddings("pad")
    pad = model.src_embedding(torch.tensor([PAD_ID]))[0]
    assert torch.equal(source, pad.expand(1, len(SRC), -1)) and torch.equal(target, pad.expand(1, 3, -1))
    np.testing.assert_allclose(attribute(model, SRC, TGT, 0, INTEGRATED_GRADIENTS).source,  # 32 points unless told
                               attribute(model, SRC, TGT, 0, INTEGRATED_GRADIENTS, steps=32).source, atol=1e-6)


def test_a_translation_longer_than_the_passes_is_told_pass_by_pass():
    long = TGT[:-1] * 3 + [EOS_ID]  # 13 steps: at most PASSES = 8 batches, so of ⌈13 / 8⌉ = 2 rows each
    told = []
    results = attribute_steps(models()["transformer"], SRC, long, SALIENCY, progress=lambda *done: told.append(done))
    assert PASSES == 8 and len(results) == len(long)
    assert told == [(2, 13), (4, 13), (6, 13), (8, 13), (10, 13), (12, 13), (13, 13)]


def test_integrated_gradients_at_every_step_are_each_steps_own_with_its_contrast_heads_off_and_32_points():
    model = models()["transformer"]
    gates = head_gates(model, ["cross.1.1", "decoder.2.3"])
    told = []
    every = attribute_steps(model, SRC, TGT[:3], INTEGRATED_GRADIENTS, contrast=14, steps=4, baseline="pad",
                            gates=gates, progress=lambda *done: told.append(done))
    assert told == [(1, 3), (2, 3), (3, 3)]  # a step at a time
    for step, result in enumerate(every):
        alone = attribute(model, SRC, TGT[:3], step, INTEGRATED_GRADIENTS, contrast=14, steps=4, baseline="pad",
                          gates=gates)
        assert result.score == pytest.approx(alone.score, abs=1e-6) and result.contrast == 14
        assert result.baseline_score == pytest.approx(alone.baseline_score, abs=1e-6)
        np.testing.assert_allclose(result.source, alone.source, atol=1e-6)
    [first] = attribute_steps(model, SRC, TGT[:1], INTEGRATED_GRADIENTS)  # 32 points unless told
    np.testing.assert_allclose(first.source, attribute(model, SRC, TGT[:1], 0, INTEGRATED_GRADIENTS, steps=32).source,
                               atol=1e-6)


def test_contrast_explains_the_difference_of_two_log_probabilities():
    model = models()["transformer"]
    plain = attribute(model, SRC, TGT, step=1, method=INTEGRATED_GRADIENTS, steps=128)
    other = attribute(model, SRC, TGT, step=1, method=INTEGRATED_GRADIENTS, steps=128, token=14)
    contrast = attribute(model, SRC, TGT, step=1, method=INTEGRATED_GRADIENTS, steps=128, contrast=14)
    assert contrast.score == pytest.approx(plain.score - other.score, abs=1e-5)
    assert contrast.source == pytest.approx(plain.source - other.source, abs=1e-4)  # attribution is linear in f
    assert contrast.delta == pytest.approx(plain.delta - other.delta, abs=1e-4)  # the same path, so the same error


def test_a_pad_baseline_and_bad_arguments():
    model = models()["transformer"]
    result = attribute(model, SRC, TGT, step=3, method=INTEGRATED_GRADIENTS, baseline="pad", steps=256)
    assert abs(result.delta) < 0.01 * abs(result.score - result.baseline_score)
    for bad, said in ((dict(method="lime"), "method must be one of saliency, input_x_gradient, integrated_gradients, "
                                            "not 'lime'"),
                      (dict(baseline="noise"), "baseline must be one of zero, pad, not 'noise'"),
                      (dict(step=len(TGT)), "step 5 is not a step of this translation of 5 tokens")):
        with pytest.raises(ValueError, match=f"^{said}$"):
            attribute(model, SRC, TGT, **{"step": 0, **bad})
    with pytest.raises(ValueError, match="^method must be one of saliency, input_x_gradient, integrated_gradients, "
                                         "not 'lime'$"):
        attribute_steps(model, SRC, TGT, "lime")
    # A token named past the translation's end: the step after its last (what it would say next) is a step too.
    assert attribute(model, SRC, TGT, len(TGT), SALIENCY, token=14).token == 14
    assert model.training is False


def test_the_page_attributes_the_step_on_screen_for_both_architectures(events):
    import json

    from attention_inspector.ui.tabs.sources import attribute_step

    services = events.services
    for model in ("toy-en-de", "toy-rnn"):
        session = events.translate("A dog runs in the park.", model=model)["session"]
        (figure,), said = attribute_step(services, session, 2, INTEGRATED_GRADIENTS, "")
        assert "completeness error" in said, said
        bars = json.loads(figure)["data"][0]
        assert len(bars["y"]) == len(session.trace.source_tokens) + 2  # the source, then <sos> and the first word
        chosen = session.trace.target_tokens[1]
        other = next(t for t in session.trace.top_tokens[1] if t != chosen)
        _, said = attribute_step(services, session, 2, SALIENCY, other)
        assert f'and not "{other}"' in said
    for method, contrast, message in (("lime", "", "Unknown attribution method"),
                                      (SALIENCY, "zebra☃", "The contrast must be one token")):
        refused, said = attribute_step(services, session, 2, method, contrast)
        assert message in said and refused is session


def test_every_gradient_method_is_a_choice_of_show_over_the_source_and_the_prefix(events, services, monkeypatch):
    """*Show* offers the three methods: the cross view holds every step's attributions to the source tokens, the
    decoder view to the target prefix, each step's shares of its total, computed once per decoding and method."""
    import json

    from attention_inspector.model.keys import CROSS, DECODER, ENCODER, GRADIENTS, MEAN, WEIGHTS
    from attention_inspector.ui.operations import GRADIENTS_OF_PREDICTIONS
    from attention_inspector.ui.render import view_menus

    session = events.translate("A man plays with a red ball.")["session"]
    trace = session.trace
    translator = services.translators["toy-en-de"]
    for method in GRADIENTS:
        expected = step_shares(translator.attributions(session.source, trace.target_tokens, method))
        for kind, shares in ((CROSS, expected[0]), (DECODER, expected[1])):
            shown = events.view(session, kind, 1, MEAN, method, 2, False)
            figure = json.loads(shown["attention"])
            heatmap = figure["data"][0]
            np.testing.assert_allclose(heatmap["z"], shares, atol=1e-5)
            assert "Attribution of each step's prediction to the " in figure["layout"]["title"]["text"]
            menus = view_menus(shown["session"])  # the layer and head chosen stay for the weights
            assert menus["layers"] == [("Whole model", 1)] and menus["heads"] == [("Whole model", MEAN)]
            top = float(np.abs(shares).max())
            assert heatmap["zmax"] == pytest.approx(top)
            assert heatmap["zmin"] == pytest.approx(0.0 if method == SALIENCY else -top)
            assert (heatmap["colorscale"][0][1] == "#b2182b") == (method != SALIENCY)  # red below zero
        session = shown["session"]
        assert method in session.current.measure_maps
    calls = []
    original = type(translator).attributions
    monkeypatch.setattr(type(translator), "attributions",
                        lambda self, *args, **kwargs: calls.append(args) or original(self, *args, **kwargs))
    events.view(session, CROSS, 0, MEAN, SALIENCY, 3, True)  # kept with the decoding: no model work
    assert calls == []
    encoder = events.view(session, ENCODER, 0, MEAN, SALIENCY, 2, False)
    assert encoder["session"].view.kind == CROSS and encoder["status"] == GRADIENTS_OF_PREDICTIONS
    weights = events.view(encoder["session"], CROSS, 1, MEAN, WEIGHTS, 2, False)
    assert weights["session"].view.layer == 1 and "layer 2" in json.loads(weights["attention"])["layout"]["title"]["text"]
    gru = events.translate("a dog runs .", model="toy-rnn")["session"]
    shown = events.view(gru, CROSS, 0, 0, INTEGRATED_GRADIENTS, 2, False)
    attributed = services.translators["toy-rnn"].attributions(gru.source, gru.trace.target_tokens,
                                                              INTEGRATED_GRADIENTS)
    np.testing.assert_allclose(json.loads(shown["attention"])["data"][0]["z"], step_shares(attributed)[0],
                               atol=1e-5)
    assert "completeness error ≤ " in json.loads(shown["attention"])["layout"]["title"]["text"]
