"""Gradient attributions (model/attribution.py): the gradients are the model's, integrated gradients is complete
(its attributions sum to f(x) − f(baseline)) and gets more so with more steps, for the Transformer, a shared
vocabulary (as converted Hub models have) and the GRU models, plain and contrastive."""

import pytest
import torch

from model.attribution import INPUT_X_GRADIENT, INTEGRATED_GRADIENTS, SALIENCY, Prediction, attribute
from model.rnn import RNNConfig, RNNSeq2Seq
from model.transformer import Transformer
from model.vocab import EOS_ID
from tests.conftest import T5_LIKE, tiny_config

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
    for bad in (dict(method="lime"), dict(baseline="noise"), dict(step=len(TGT))):
        with pytest.raises(ValueError):
            attribute(model, SRC, TGT, **{"step": 0, **bad})
    assert model.training is False


def test_the_page_attributes_the_step_on_screen_for_both_architectures(events):
    import json

    from ui.tabs.sources import attribute_step

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
