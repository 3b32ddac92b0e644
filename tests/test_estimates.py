"""Every head's effect estimated from gradients (model/explain/estimates.py) and the head report's exact top K
(`model.analysis.heads --exact`): known answers on small models, and the same exact values as the full study."""

import json
import shutil

import numpy as np
import pytest
import torch
from torch import nn

from conftest import tiny_config
from attention_inspector.model.analysis import heads
from attention_inspector.model.explain.estimates import (agreement, gate_sums, patching_estimate, spearman,
                                                         staged_patching, summed_loss)
from attention_inspector.model.explain.patching import patch_heads
from attention_inspector.model.nets.seq2seq import HeadGates
from attention_inspector.model.nets.transformer import Transformer
from attention_inspector.model.text.batching import make_batch


def small_case(**overrides):
    """A tiny random Transformer in float64 (finite differences stay far above rounding) and a batch of three."""
    torch.manual_seed(0)
    model = Transformer(tiny_config(**overrides)).double().eval()
    rng = np.random.default_rng(0)
    sources = [rng.integers(4, 23, size=n).tolist() for n in (5, 7, 4)]
    targets = [rng.integers(4, 29, size=n).tolist() for n in (6, 3, 5)]
    return model, make_batch(sources, targets)


def loss_at(model, batch, kind: str, layer: int, head: int, gate: float) -> float:
    """The batch's summed loss with one head's gate at `gate`, every other at 1."""
    gates = {name: torch.ones(shape, dtype=torch.float64) for name, shape in model.heads().items()}
    gates[kind][layer, head] = gate
    with torch.no_grad():
        return float(summed_loss(model, batch, HeadGates(**gates), fused=False))


@pytest.mark.parametrize("kind, layer, head", [("encoder", 0, 1), ("decoder", 1, 3), ("cross", 1, 0)])
def test_the_first_order_estimate_is_a_finite_difference_of_one_heads_gate(kind, layer, head):
    model, batch = small_case()
    sums = gate_sums(model, [batch], "first")
    step = 1e-5
    difference = (loss_at(model, batch, kind, layer, head, 1 + step) -
                  loss_at(model, batch, kind, layer, head, 1 - step)) / (2 * step)
    assert float(sums.gradient[kind][layer, head]) == pytest.approx(difference, abs=1e-4)
    # switching off moves the log-likelihood by about the gradient (ξ: 1 -> 0, the log-likelihood is −loss)
    assert sums.estimate()[f"{kind}.{layer + 1}.{head + 1}"] == pytest.approx(difference, abs=1e-4)
    assert sums.tokens == batch.n_target_tokens


def test_the_second_order_term_is_the_gates_second_derivative():
    """A model with no more heads than probes gets the Hessian's diagonal exactly (a product per head); the
    estimate then is the second-order Taylor polynomial of switching each head off."""
    model, batch = small_case(n_heads=2, n_encoder_layers=1, n_decoder_layers=1)  # 6 heads
    sums = gate_sums(model, [batch], "second", probes=8)
    step = 1e-4
    for kind, layer, head in [("encoder", 0, 1), ("decoder", 0, 0), ("cross", 0, 1)]:
        at = [loss_at(model, batch, kind, layer, head, 1 + d) for d in (-step, 0.0, step)]
        curvature = (at[0] - 2 * at[1] + at[2]) / step ** 2
        assert float(sums.diagonal[kind][layer, head]) == pytest.approx(curvature, rel=1e-4, abs=1e-4)
        slope = (at[2] - at[0]) / (2 * step)
        assert sums.estimate()[f"{kind}.1.{head + 1}"] == pytest.approx(slope - 0.5 * curvature, rel=1e-4, abs=1e-4)


def test_hutchinsons_diagonal_comes_to_the_exact_one_with_many_probes():
    model, batch = small_case()  # 24 heads: the exact diagonal needs 24 products, Hutchinson's draws probes
    exact = gate_sums(model, [batch], "second", probes=24).diagonal
    drawn = gate_sums(model, [batch], "second", probes=600).diagonal
    few = gate_sums(model, [batch], "second", probes=4).diagonal
    flat = [torch.cat([d[kind].flatten() for kind in sorted(d)]).numpy() for d in (exact, drawn, few)]
    error = [np.abs(values - flat[0]).mean() for values in flat[1:]]
    assert error[0] < 0.2 * np.abs(flat[0]).mean() and error[0] < error[1]


def test_the_same_probes_whichever_process_holds_a_batch():
    """Processes sharing the batches (torchrun) draw each batch's probes from its number: the sums are one
    process's."""
    model, batch = small_case()
    model2, other = small_case()
    together = gate_sums(model, [batch, other], "second", probes=3)
    apart = [gate_sums(model, [b], "second", probes=3, numbers=[n]) for n, b in enumerate([batch, other])]
    for kind in together.diagonal:
        assert torch.allclose(together.diagonal[kind], apart[0].diagonal[kind] + apart[1].diagonal[kind])


def test_agreement_counts_the_exact_top_within_the_estimates():
    exact = {f"h{i}": -float(i) for i in range(40)}  # h39 hurts most
    estimate = dict(exact) | {"h39": 0.0, "h38": -100.0}  # the worst head ranked last, the next first
    measured = agreement(estimate, exact, tops=(10, 39))
    assert measured["heads"] == 40 and measured["exact_top10_within"] == {10: 9, 39: 9}
    assert measured["largest_missed"] == {10: -39.0, 39: -39.0}
    assert spearman(np.arange(5.0), np.arange(5.0) ** 3) == pytest.approx(1.0)
    # a model of one head has no ranking: null in heads.json (JSON has no NaN), never a number
    assert spearman(np.ones(1), np.ones(1)) is None and agreement({"a": 1.0}, {"a": 2.0})["spearman"] is None
    assert agreement({"a": 1.0, "b": -3.0}, {"a": 2.0, "b": -1.0}, size=True)["exact_top10_within"][10] == 2


def test_the_patching_estimate_is_exact_where_the_score_is_linear_in_the_patched_heads():
    """With the last decoder layer's feed-forward silenced and no final norm, log p(token) − log p(contrast) is a
    linear function of that layer's cross-attention heads' outputs (W_O, the residual, the output layer): attribution
    patching gives exactly what patching them does. Elsewhere it is an estimate, near the exact one."""
    torch.manual_seed(1)
    model = Transformer(tiny_config(norm="pre")).double().eval()
    last = model.decoder_layers[-1].feed_forward.linear_out
    nn.init.zeros_(last.weight), nn.init.zeros_(last.bias)
    model.decoder_norm = nn.Identity()
    src, counterfactual, tgt = [5, 9, 11, 7, 6], [5, 12, 11, 7, 6], [8, 14, 20, 9]
    exact = patch_heads(model, src, counterfactual, tgt, step=2, token=20, contrast=9)
    estimate = patching_estimate(model, src, counterfactual, tgt, step=2, token=20, contrast=9)
    assert estimate.estimated and not exact.estimated
    assert estimate.original == pytest.approx(exact.original, abs=1e-5)
    assert estimate.counterfactual == pytest.approx(exact.counterfactual, abs=1e-5)
    assert np.abs(exact.effects["cross"][-1]).max() > 1e-3  # the heads do move the score
    # (to float32 rounding: the patched runs score in float32)
    np.testing.assert_allclose(estimate.effects["cross"][-1], exact.effects["cross"][-1], atol=1e-5)
    assert not np.allclose(estimate.effects["cross"][0], exact.effects["cross"][0], atol=1e-4)  # not linear there
    assert estimate.stream.shape == exact.stream.shape
    # The decoder's first self-attention heads read only the target prefix, which both runs share: no effect.
    assert np.all(estimate.effects["decoder"][0] == 0) and np.all(exact.effects["decoder"][0] == 0)


def test_the_patching_estimate_leaves_encoder_heads_out_between_sources_of_other_lengths(tiny_model):
    estimate = patching_estimate(tiny_model, [5, 9, 11], [5, 9, 11, 12], [8, 14, 20], step=1)
    assert np.isnan(estimate.effects["encoder"]).all() and "encoder" in estimate.skipped and estimate.stream is None
    assert np.isfinite(estimate.effects["cross"]).all()


def test_the_top_k_study_measures_the_same_exact_values_as_the_full_one(toy_checkpoints, tmp_path):
    root, data = toy_checkpoints
    reports = {}
    for name, exact in (("all", ["--exact", "all"]), ("top", ["--exact", "5", "--check", "3"])):
        folder = tmp_path / name
        shutil.copytree(root / "toy-en-de", folder)
        heads.main(["--checkpoint", str(folder), "--data", str(data), "--split", "val", "--limit", "12",
                    "--threads", "1", *exact])
        reports[name] = json.loads((folder / heads.HEADS).read_text())
    full, top = reports["all"], reports["top"]
    measured = [name for name, head in top["heads"].items() if "log_likelihood_change" in head]
    assert len(measured) == 8 and len(full["heads"]) == 24
    assert all("log_likelihood_change" in head and "log_likelihood_change_estimate" in head
               for head in full["heads"].values())
    for name in measured:
        assert top["heads"][name]["log_likelihood_change"] == pytest.approx(
            full["heads"][name]["log_likelihood_change"], abs=2e-5)
    # the top 5 are the estimate's most harmful, the check 3 of the others
    ranked = sorted(top["heads"], key=lambda name: top["heads"][name]["log_likelihood_change_estimate"])
    assert set(measured) == set(ranked[:5]) | set(top["estimate"]["check"])
    assert top["estimate"]["exact"] == 5 and len(top["estimate"]["check"]) == 3
    worst = min(top["estimate"]["check"], key=lambda name: top["heads"][name]["log_likelihood_change"])
    assert top["estimate"]["largest_harm_in_check"]["head"] == worst
    # the full study publishes the estimate's agreement with it, and Michel et al.'s importance's
    assert full["estimate"]["agreement"]["heads"] == 24 and "spearman" in full["estimate"]["importance_agreement"]
    assert "agreement" not in top["estimate"]


@pytest.mark.parametrize("value, message", [("0", "at least one head"), ("-3", "at least one head"),
                                            ("x", "a number of heads or 'all'"), ("25", "this model has 24 heads")])
def test_exact_refuses_what_is_not_a_count_of_the_models_heads(toy_checkpoints, tmp_path, capsys, value, message):
    root, data = toy_checkpoints
    with pytest.raises(SystemExit) as stopped:
        heads.main(["--checkpoint", str(root / "toy-en-de"), "--data", str(data), "--split", "val",
                    f"--exact={value}"])
    assert message in str(stopped.value.code) + capsys.readouterr().err


def test_staged_patching_measures_the_heads_the_estimate_ranks_highest(tiny_model):
    """The estimate first, then its top heads patched exactly a few at a time: each stage exact where measured
    (the patched runs' own effects), the estimate elsewhere."""
    src, counterfactual, tgt = [5, 9, 11, 7], [5, 12, 11, 7], [8, 14, 20]
    exact = patch_heads(tiny_model, src, counterfactual, tgt, step=2)
    told = []
    stages = list(staged_patching(tiny_model, src, counterfactual, tgt, step=2, top=5, per_stage=2,
                                  told=lambda done, total: told.append((done, total))))
    first, last = stages[0], stages[-1]
    assert len(stages) == 1 + 3 and all(stage.estimated for stage in stages)
    assert [sum(int(grid.sum()) for grid in stage.measured.values()) for stage in stages] == [0, 2, 4, 5]
    assert told == [(0, 5), (2, 5), (4, 5), (5, 5)]
    ranked = sorted(((kind, layer, head) for kind, grid in first.effects.items()
                     for (layer, head), value in np.ndenumerate(grid)), key=lambda h: -abs(first.effects[h[0]][h[1:]]))
    for kind, grid in last.effects.items():
        for (layer, head), value in np.ndenumerate(grid):
            if last.measured[kind][layer, head]:
                assert (kind, layer, head) in ranked[:5]
                assert value == pytest.approx(exact.effects[kind][layer, head], abs=1e-5)
            else:
                assert value == first.effects[kind][layer, head]


def test_the_counterfactual_tab_on_a_large_model_draws_the_estimate_then_fills_in_patched_heads(events, monkeypatch):
    """Where a patched run per head is slow (a model of 100 M parameters or more), the tab draws the estimate at once,
    marked as one, then the heads it ranks highest patched exactly, stage by stage; the toy's 24 heads all come to
    their patched runs' effects, and the exports keep the last stage."""
    import attention_inspector.ui.tabs.counterfactual as tab

    monkeypatch.setattr(tab, "large", lambda services, model: True)
    services = events.services
    session = events.translate("A man plays with a red ball.")["session"]
    stages, said, kept = tab.patch_at_step(services, session, "A woman plays with a red ball.", 2, "")
    drawn = list(stages)
    assert len(drawn) == 1 + 24 // 8
    (_, figure, _), said = drawn[0]
    assert "Estimated by attribution patching" in json.dumps(json.loads(figure)["layout"]["title"])
    assert "the heads it ranks highest are being patched exactly" in said
    assert "24 heads it ranks highest since patched exactly" in drawn[-1][1]
    step = kept.view.step
    exact = services.translators["toy-en-de"].patching(session.source, "A woman plays with a red ball.",
                                                      session.trace.target_tokens, step - 1)
    record = kept.current.patched
    assert record["estimated"] is True and all(all(map(all, grid)) for grid in record["measured"].values())
    for kind, grid in exact.effects.items():
        np.testing.assert_allclose(np.array(record["effects"][kind], dtype=float), grid, atol=1e-5)


def test_the_heads_heatmap_says_what_each_estimate_is_worth():
    """The estimate's heatmap carries its measured agreement, Michel et al.'s importance is called a ranking with
    its own, and a top-K report's exact change says which heads it left blank."""
    from attention_inspector.ui.render import measure_note

    agreed = {"heads": 72, "spearman": 0.95, "exact_top10_within": {"10": 8, "20": 10, "32": 10},
              "largest_missed": {"10": -0.006, "20": -0.005, "32": None}}
    full = {"estimate": {"order": "second", "probes": 2, "exact": "all", "check": [], "agreement": agreed,
                         "importance_agreement": {**agreed, "spearman": 0.13}}}
    assert measure_note(full, "log_likelihood_change_estimate") == (
        "an estimate from gradients (second order): Spearman 0.95 with the exact change over all 72 heads; 8 of the "
        "exact top 10 in its top 10, 10 in its top 20")
    assert measure_note(full, "importance").startswith("a ranking, not an effect: Spearman 0.13")
    assert measure_note(full, "log_likelihood_change") is None  # every head measured
    top = {"estimate": {"order": "second", "probes": 2, "exact": 32, "check": ["a.1.1"] * 8}}
    assert "for the 32 heads the estimate ranks most harmful and 8 others" in measure_note(top, "log_likelihood_change")
    assert "not in this report" in measure_note(top, "importance")
    assert measure_note({}, "entropy") is None and "not in this report" in measure_note({}, "importance")
    one = {**agreed, "heads": 1, "spearman": None}
    assert measure_note({"estimate": {**full["estimate"], "agreement": one, "importance_agreement": one}},
                        "importance") == "a ranking, not an effect: no ranking to compare over 1 head"


@pytest.mark.parametrize("name", ["en-fr-rnn-multihead", "en-de"])
def test_the_patching_estimate_is_the_derivative_of_patching_along_the_line_to_the_counterfactual(name, monkeypatch):
    """Patching a head with a + ε(a′ − a) moves the score by ε times the estimate, to first order: on a GRU model
    (whose heads' outputs are read once per step) and a Transformer alike. In float64 throughout (the scores'
    log-softmax too, which the app runs in float32), so that a difference quotient's error is its truncation, which
    the test measures: in float32 the scores' rounding over ε took a third to a half of the 1e-3 once allowed."""
    from pathlib import Path

    import attention_inspector.model.explain.patching as patching
    from attention_inspector.model.explain.patching import patched_scores, recorded_runs
    from attention_inspector.model.nets.decoding import NEVER_EMITTED
    from attention_inspector.model.serving.checkpoint import load_checkpoint
    from attention_inspector.model.text.vocab import SOS_ID

    translator = load_checkpoint(Path(__file__).resolve().parent.parent / "checkpoints" / name)
    text, counterfactual = "A man is riding a bicycle down the street.", "A woman is riding a bicycle down the street."
    tokens = translator.trace(text).target_tokens  # decoded in float32, as the app decodes
    translator.model.double()
    monkeypatch.setattr(patching, "next_token_logits", lambda logits: logits[:, -1].index_fill(
        1, torch.tensor(NEVER_EMITTED), float("-inf")))  # the scores (and the estimate's) in float64 too
    src, other, tgt = translator.patching_ids(text, counterfactual, tokens, 1, None, None)
    prefix = torch.tensor([[SOS_ID] + tgt[:1]])
    with torch.no_grad():
        original, theirs = recorded_runs(translator.model, [src, other], prefix, tgt[1], None)
    heads = [("cross", layer, head) for layer, head in np.ndindex(translator.model.heads()["cross"])]

    def central(step: float) -> np.ndarray:
        """(f(ε) − f(−ε)) / 2ε for each head, f(ε) its score patched with a + ε(a′ − a)."""
        scores = []
        for sign in (1, -1):
            nudged = {kind: [a + sign * step * (b - a) for a, b in zip(original.outputs[kind], theirs.outputs[kind])]
                      for kind in original.outputs}
            with torch.no_grad():
                scores.append(np.array(patched_scores(translator.model, src, prefix, tgt[1], None, nudged,
                                                      [[h] for h in heads], original=original)))
        return (scores[0] - scores[1]) / (2 * step)

    estimate = patching_estimate(translator.model, src, other, tgt, 1)
    expected = np.array([estimate.effects[k][layer, head] for k, layer, head in heads])
    step = 1e-3
    slopes, coarser = central(step), central(2 * step)
    # Taylor: a central difference C(ε) is f′ + ε²/6·f‴ + O(ε⁴), so C(2ε) − C(ε) = ε²/2·f‴ to that order and the
    # truncation at ε is a third of it (all of it allowed); float64's rounding of the scores (tests/conftest.py,
    # 2^29 times float32's: under 1e-11 here) over 2ε adds under 1e-8.
    allowed = np.abs(coarser - slopes) + 1e-8
    if name == "en-fr-rnn-multihead":
        # Not so for the GRU: its estimate misses the derivative by up to 5e-4 of it (2.2e-6 of 4.4e-3 for heads 2 to
        # 4, the same in float64 at any ε; head 1 to 1e-9), a difference of the method's, not of rounding: held to
        # that, as the first order this test was written for.
        allowed = allowed + 1e-3 * np.abs(expected)
    assert np.all(np.abs(slopes - expected) <= allowed), (slopes - expected, allowed)
    assert max(map(abs, slopes)) > 5e-3  # the heads do move the score
