"""Activation patching per head (model/explain/patching.py): the known answers, on the shipped checkpoints, a GRU
model and tiny converted Hub models, the command line (model/analysis/patching.py), the page and links."""

import gzip
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from attention_inspector.model.analysis.patching import gender_pairs, main
from attention_inspector.model.explain.patching import (HeadHooks, Patching, Replace, patch_heads, patched_scores,
                                                        recorded_run, score)
from attention_inspector.model.keys import CROSS, DECODER, ENCODER
from attention_inspector.model.serving.checkpoint import load_checkpoint
from attention_inspector.model.serving.translator import InputError
from attention_inspector.model.text.vocab import SOS_ID

sys.path.insert(0, str(Path(__file__).parent))
import hub_models  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SENTENCE, COUNTERFACTUAL = "A man is riding a bicycle down the street.", "A woman is riding a bicycle down the street."


@pytest.fixture(scope="module")
def en_de():
    return load_checkpoint(ROOT / "checkpoints" / "en-de")


def runs(translator, text: str, counterfactual: str, step: int):
    """The ids, the prefix before `step` and the token chosen there, and both runs' scores and head outputs."""
    tgt_tokens = translator.trace(text).target_tokens
    src_ids, tgt_ids = translator.given_translation(text, tgt_tokens)
    counterfactual_ids = translator.encode_source(translator.source_tokens(counterfactual))
    prefix = torch.tensor([[SOS_ID] + tgt_ids[:step]])
    with torch.no_grad():
        original = recorded_run(translator.model, src_ids, prefix, tgt_ids[step], None)
        other = recorded_run(translator.model, counterfactual_ids, prefix, tgt_ids[step], None)
    return src_ids, counterfactual_ids, tgt_ids, prefix, original.score, other.score, other.outputs


def every_head(model, kinds) -> list:
    return [(kind, layer, head) for kind in kinds for layer in range(model.heads()[kind][0])
            for head in range(model.heads()[kind][1])]


def all_cross_heads_give_the_counterfactual(translator, text=SENTENCE, counterfactual=COUNTERFACTUAL, step=1):
    """The decoder reads the source only through cross-attention: every cross head patched is the counterfactual
    run; none patched, the original."""
    src_ids, _, tgt_ids, prefix, original, other, outputs = runs(translator, text, counterfactual, step)
    with torch.no_grad():
        patched, unpatched = patched_scores(translator.model, src_ids, prefix, tgt_ids[step], None, outputs,
                                            [every_head(translator.model, [CROSS]), []])
    assert abs(patched - other) < 1e-5 and abs(unpatched - original) < 1e-5
    assert abs(other - original) > 1e-2  # the two runs differ: the check can fail
    return translator


def test_patching_every_cross_head_gives_the_counterfactual_and_none_the_original(en_de):
    all_cross_heads_give_the_counterfactual(en_de)


def test_a_counterfactual_identical_to_the_sentence_changes_nothing(en_de):
    tokens = en_de.trace(SENTENCE).target_tokens
    result = en_de.patching(SENTENCE, SENTENCE, tokens, 1)
    assert result.original == pytest.approx(result.counterfactual, abs=1e-6)
    assert all(np.abs(grid).max() < 1e-5 for grid in result.effects.values())


def whole_run(model, src_ids, prefix, token, contrast, outputs, kind, layer, head) -> float:
    """The sentence's score with one head's output taken from `outputs`, by a plain pass of the whole model (every
    layer, every position, one row: none of `patched_scores`' shortcuts)."""
    keep = torch.ones(1, model.heads()[kind][1])
    keep[0, head] = 0.0
    hooks = HeadHooks({kind: {layer: Replace(keep, outputs[kind][layer])}})
    memory, src_mask, _ = model.encode(torch.tensor([src_ids]), gates=hooks)
    logits, _ = model.decode(prefix, memory, src_mask, gates=hooks)
    return float(score(logits[:, -1:], token, contrast))


def test_each_heads_effect_in_the_batch_is_that_of_a_whole_run_with_that_head_alone(en_de):
    """A row of the batch patches one head and nothing else: its effect is that of a plain run of the whole model
    with that head patched, wherever the row starts (each kind, each layer); the decoder's first self-attention
    layer reads only the target prefix, which both runs share, so patching its heads changes nothing."""
    tokens = en_de.trace(SENTENCE).target_tokens
    step = 3
    result = en_de.patching(SENTENCE, COUNTERFACTUAL, tokens, step, contrast="frau")
    assert result.skipped == {} and set(result.effects) == {ENCODER, DECODER, CROSS}
    src_ids, _, tgt_ids, prefix, _, _, outputs = runs(en_de, SENTENCE, COUNTERFACTUAL, step)
    contrast = en_de.tgt_vocab.stoi["frau"]
    with torch.no_grad():
        for kind, layer, head in [(kind, layer, (layer + 2) % 4) for kind in (ENCODER, DECODER, CROSS)
                                  for layer in range(3)]:
            whole = whole_run(en_de.model, src_ids, prefix, tgt_ids[step], contrast, outputs, kind, layer, head)
            assert result.effects[kind][layer, head] == pytest.approx(whole - result.original, abs=1e-5)
            assert (abs(whole - result.original) > 1e-4) == (kind != DECODER or layer > 0)  # the check can fail
    assert np.all(result.effects[DECODER][0] == 0.0)
    result = en_de.patching(SENTENCE, COUNTERFACTUAL, tokens, 1, contrast="frau")
    name, effect = result.ranked(1)[0]
    assert name.startswith("cross.") and effect < -0.5  # "Mann" over "Frau" is carried by cross heads


def test_the_encoder_stream_at_the_swapped_word_carries_the_whole_difference_at_the_embeddings(en_de):
    """Causal tracing's grid (Meng et al., 2022): the stream after the embeddings differs from the counterfactual's
    at the swapped word alone, so patching it there gives the counterfactual's score and anywhere else nothing."""
    tokens = en_de.trace(SENTENCE).target_tokens
    result = en_de.patching(SENTENCE, COUNTERFACTUAL, tokens, 1, contrast="frau")
    swapped = en_de.source_tokens(SENTENCE).index("man")
    layers = len(en_de.model.encoder_layers)
    assert result.stream.shape == (layers + 1, len(en_de.source_tokens(SENTENCE)) + 1)  # <eos> too
    assert result.stream[0, swapped] == pytest.approx(result.counterfactual - result.original, abs=1e-4)
    assert np.abs(np.delete(result.stream[0], swapped)).max() < 1e-5
    assert np.abs(result.stream[1:, swapped]).min() > 1.0  # and it stays there through the layers
    other = en_de.patching(SENTENCE, "A young woman is riding a bicycle down the street.", tokens, 1)
    assert other.stream is None


def test_sources_of_other_lengths_patch_the_decoder_side_only_and_say_so(en_de):
    tokens = en_de.trace(SENTENCE).target_tokens
    result = en_de.patching(SENTENCE, "A young woman is riding a bicycle down the street.", tokens, 1)
    assert np.isnan(result.effects[ENCODER]).all() and "encoder heads work at source positions" in \
        result.skipped[ENCODER]
    assert not np.isnan(result.effects[CROSS]).any() and not np.isnan(result.effects[DECODER]).any()


def test_bad_requests_are_refused_with_a_reason(en_de):
    tokens = en_de.trace(SENTENCE).target_tokens
    for arguments, message in (((SENTENCE, COUNTERFACTUAL, tokens, len(tokens)), "The step must be"),
                               ((SENTENCE, COUNTERFACTUAL, tokens, True), "The step must be"),
                               ((SENTENCE, "", tokens, 0), "empty|Type"),
                               ((SENTENCE, COUNTERFACTUAL, tokens, 0, None, "two words"), "The contrast must be")):
        with pytest.raises(InputError, match=message):
            en_de.patching(*arguments)


def test_on_reverse_the_four_anti_diagonal_heads_carry_the_character_together():
    """`reverse` has one layer of four cross heads, all drawing the anti-diagonal: with the last two characters
    swapped, the first output character changes; one head patched alone barely moves it (the other three outvote
    it), all four patched give the counterfactual's character."""
    translator = load_checkpoint(ROOT / "checkpoints" / "reverse")
    text, counterfactual = "hello world", "hello wordl"
    assert translator.trace(text).target_tokens[0] == "d" and translator.trace(counterfactual).target_tokens[0] == "l"
    result = translator.patching(text, counterfactual, translator.trace(text).target_tokens, 0)
    assert np.abs(result.effects[CROSS]).max() < 0.5 and result.counterfactual < -5
    src_ids, _, tgt_ids, prefix, _, _, outputs = runs(translator, text, counterfactual, 0)
    heads = translator.model.heads()[CROSS][1]
    hooks_all = [[(CROSS, 0, head) for head in range(heads)]]
    with torch.no_grad():
        [patched] = patched_scores(translator.model, src_ids, prefix, tgt_ids[0], None, outputs, hooks_all)
    assert patched == pytest.approx(result.counterfactual, abs=1e-5)


def test_a_gru_model_patches_its_one_attention_step_by_step():
    """The GRU decoder calls its attention once per step; the patch follows the steps. Its source reaches the decoder
    through the initial state as well (the bridge from the encoder's mean), so the known answer is the identity: a
    counterfactual equal to the sentence changes nothing, and a head patched alone in the batch is its own run."""
    translator = load_checkpoint(ROOT / "checkpoints" / "en-fr-rnn-multihead")
    tokens = translator.trace(SENTENCE).target_tokens
    same = translator.patching(SENTENCE, SENTENCE, tokens, 2)
    assert set(same.effects) == {CROSS} and np.abs(same.effects[CROSS]).max() < 1e-5
    result = translator.patching(SENTENCE, COUNTERFACTUAL, tokens, 2)
    src_ids, _, tgt_ids, prefix, original, _, outputs = runs(translator, SENTENCE, COUNTERFACTUAL, 2)
    assert outputs[CROSS][0].size(2) == prefix.size(1)  # one output a step, every step kept
    with torch.no_grad():
        [alone] = patched_scores(translator.model, src_ids, prefix, tgt_ids[2], None, outputs, [[(CROSS, 0, 1)]])
    assert result.effects[CROSS][0, 1] == pytest.approx(alone - original, abs=1e-5)
    assert np.abs(result.effects[CROSS]).max() > 1e-3


@pytest.mark.parametrize("family", ["marian", "t5"])
def test_converted_hub_models_patch_every_kind(tmp_path, family):
    from attention_inspector.model.hub.convert_hf import convert

    folder = hub_models.marian(tmp_path / "hub") if family == "marian" else hub_models.t5(tmp_path / "hub")
    translator = load_checkpoint(convert(str(folder), tmp_path / "converted"))
    all_cross_heads_give_the_counterfactual(translator, "A man reads the newspaper.", "A woman reads the newspaper.",
                                            step=0)
    result = translator.patching("A man reads.", "A dog reads.", translator.trace("A man reads.").target_tokens, 0)
    assert set(result.effects) == set(translator.model.heads())


def test_the_command_line_reports_the_mean_effect_per_head(tmp_path, capsys):
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text(f"# source\tcounterfactual\ttoken\tcontrast\n{SENTENCE}\t{COUNTERFACTUAL}\tmann\tfrau\n"
                     "A boy plays in the park.\tA girl plays in the park.\tjunge\tmädchen\n"
                     "A cat sleeps.\tA dog sleeps.\tzebra\tmann\n", encoding="utf-8")
    main(["--checkpoint", str(ROOT / "checkpoints" / "en-de"), "--pairs", str(pairs), "--top", "3"])
    out = capsys.readouterr()
    assert "2 of 3 pairs patched" in out.out and "its translation has no 'zebra'" in out.err
    lines = [line for line in out.out.splitlines() if line.startswith("  cross.") or line.startswith("  ")]
    assert len(lines) == 3 and all("±" in line for line in lines)
    pairs.write_text("only\ttwo\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="do not have four columns"):
        main(["--checkpoint", str(ROOT / "checkpoints" / "en-de"), "--pairs", str(pairs)])


def test_the_gender_pairs_swap_one_word_and_contrast_the_german_nouns(tmp_path, capsys):
    assert gender_pairs(["A man and a woman.", "A boy runs.", "Two men sit.", "A dog.", "A mansion."], 5) == [
        ("A boy runs.", "A girl runs.", "junge", "mädchen"), ("Two men sit.", "Two women sit.", "männer", "frauen")]
    data = tmp_path / "multi30k"
    data.mkdir()
    for lang, lines in (("en", ["A man is riding a bicycle.", "A girl plays in the park."]),
                        ("de", ["Ein Mann fährt Fahrrad.", "Ein Mädchen spielt im Park."])):
        with gzip.open(data / f"test_2016_flickr.{lang}.gz", "wt", encoding="utf-8") as file:
            file.write("\n".join(lines) + "\n")
    main(["--checkpoint", str(ROOT / "checkpoints" / "en-de"), "--gender", "2", "--data", str(data)])
    assert "2 of 2 pairs patched at the step that writes the token" in capsys.readouterr().out
    main(["--checkpoint", str(ROOT / "checkpoints" / "en-de"), "--gender", "2", "--data", str(data), "--article"])
    assert "2 of 2 pairs patched at the step that writes the article before the token" in capsys.readouterr().out


def test_patch_heads_refuses_a_step_past_the_translation(en_de):
    with pytest.raises(ValueError, match="is not a step"):
        patch_heads(en_de.model, [5, 6, 3], [5, 7, 3], [8, 3], 2)


def test_the_counterfactual_tab_shows_both_translations_and_each_heads_effect(events):
    import json

    from attention_inspector.ui.tabs.counterfactual import marked, patch_at_step, suggest

    services = events.services
    for model in ("toy-en-de", "toy-rnn"):
        session = events.translate("A man plays with a red ball.", model=model)["session"]
        assert suggest(services, session)[0] == ("A woman plays with a red ball.",)
        told = []
        (text, figure, stream), said, kept = patch_at_step(services, session, "A woman plays with a red ball.", 2,
                                                           "", told=lambda done, total: told.append((done, total)))
        theirs = services.translators[model].trace("A woman plays with a red ball.").target_tokens
        parted = next(i for i, (a, b) in enumerate(zip(session.trace.target_tokens, theirs)) if a != b) + 1
        assert kept.view.step == parted  # a counterfactual's first patching: where the translations part
        again = patch_at_step(services, kept, "A woman plays with a red ball.", 2, "")
        assert again[1].startswith("Step 2, ") and again[2].view.step == 2  # then the step on screen
        assert kept.current.patched["counterfactual"] == "A woman plays with a red ball."  # for its exports
        assert told and told[-1][0] == told[-1][1] and [done for done, _ in told] == sorted({d for d, _ in told})
        assert (stream is None) == (model == "toy-rnn")  # a GRU encoder has no residual stream between layers
        assert text.startswith("Sentence:       A man plays with a red ball.\n  → ")
        assert "Counterfactual: A woman plays with a red ball." in text
        grids = json.loads(figure)["data"]
        assert [grid["xaxis"] for grid in grids] == (["x", "x2", "x3"] if model == "toy-en-de" else ["x"])
        assert all(name.count(".") == 2 for grid in grids for row in grid["customdata"] for name in row)
        assert ("the head that moves it most alone is" in said or "barely moves" in said) and said.startswith(
            f"Patched at step {parted}, where the two translations part" if parted != 2 else "Step 2, ")
    refused, said = patch_at_step(services, session, "  ", 2, "")
    assert refused is session and "Type a counterfactual source first" in said
    refused, said = patch_at_step(services, session, "A woman plays.", 2, "two words")
    assert refused is session and "The contrast must be one token" in said
    refused, said = patch_at_step(services, session, f" {session.source} ", 2, "")  # nothing to patch in
    assert refused is session and said.startswith("The counterfactual is the sentence itself")
    refused, said = patch_at_step(services, kept, "A woman plays with a red ball.", 2, kept.trace.target_tokens[1])
    assert refused is kept and "it cannot be its own contrast" in said
    assert marked(["ein", "mann", "spielt"], ["ein", "frau", "spielt"]) == "ein [mann] spielt"
    assert marked(["<script>", "x"], ["x"]) == "[<script>] x"  # shown as text by the page, never as HTML


def test_an_exported_trace_keeps_the_patching_of_its_decoding(events):
    """After the Counterfactual tab has patched the decoding on screen, its trace file (both formats) holds that
    patching: the counterfactual and its translation, the step and token, both scores and every head's effect (null
    where a head was not patched: encoder heads between sources of other lengths)."""
    from attention_inspector.model.serving.inspect import load_trace
    from attention_inspector.ui.tabs.counterfactual import patch_at_step
    from attention_inspector.ui.tabs.share import export_trace

    services = events.services
    session = events.translate("A man plays with a red ball.")["session"]
    for counterfactual, encoder_patched in (("A woman plays with a red ball.", True), ("Two women play.", False)):
        _, _, kept = patch_at_step(services, session, counterfactual, 2, "")
        step = kept.view.step  # where the two translations part
        translator = services.translators["toy-en-de"]
        expected = translator.patching(session.source, counterfactual, session.trace.target_tokens, step - 1)
        for file_format in ("json", "npz"):
            (path,), said = export_trace(services, kept, file_format)
            assert f'with its patching against "{counterfactual}" at step {step}' in said
            patching = load_trace(path)["patching"]
            assert patching["counterfactual"] == counterfactual and patching["step"] == step
            assert patching["counterfactual_translation"] == translator.trace(counterfactual).text
            assert patching["token"] == session.trace.target_tokens[step - 1] and patching["contrast"] is None
            assert patching["original_score"] == pytest.approx(expected.original)
            for kind, grid in expected.effects.items():
                written = np.array(patching["effects"][kind], dtype=float)  # null read as NaN
                np.testing.assert_allclose(written, grid, rtol=1e-6, equal_nan=True)
            assert (patching["stream"] is not None) == encoder_patched == ("encoder" not in patching["skipped"])
    assert load_trace(export_trace(services, session, "json")[0][0])["patching"] is None  # never patched


def test_a_link_keeps_the_counterfactual_and_opens_its_tab(events):
    from types import SimpleNamespace
    from urllib.parse import parse_qs

    from attention_inspector.ui.links import LinkSpec
    from attention_inspector.ui.listeners import COUNTERFACTUAL_TAB, first_visit
    from attention_inspector.ui.tabs.share import link_query

    session = events.translate("A man plays with a red ball.")["session"]
    (query,), _ = link_query(events.services, session, 2, "A woman plays with a red ball.")
    spec, notes = LinkSpec.parse(parse_qs(query.removeprefix("?")))
    assert notes == [] and spec.counterfactual == "A woman plays with a red ball." and spec.step == 2
    request = SimpleNamespace(query_params=parse_qs(query.removeprefix("?")))
    out = first_visit(events.page, events.services, None, request)
    assert out[events.page.counterfactual] == "A woman plays with a red ball."
    assert out[events.page.tabs].selected == COUNTERFACTUAL_TAB
    (plain,), _ = link_query(events.services, session, 2, "  ")
    assert "counterfactual" not in plain


@pytest.mark.parametrize("original, counterfactual, effect, said", [
    (-1.0, -3.0, -1.0, "(-1.00, 50% of the whole)."),
    (-1.0, -2.0, -1.5, "(-1.50, 150% of the whole; more than the whole, as other heads move it back: heads that "
                       "cancel)."),
    (-1.0, -2.0, 0.5, "(+0.50, -50% of the whole; against the whole, which other heads outweigh: heads that cancel)."),
])
def test_a_heads_share_of_the_whole_says_why_it_is_above_100_or_below_0(original, counterfactual, effect, said):
    from attention_inspector.ui.tabs.counterfactual import patching_said

    result = Patching(0, 0, None, original, counterfactual, {CROSS: np.array([[effect, 0.0]])})
    assert patching_said(result, 3, "auf", 'log p("auf")', None).endswith(said)


def test_a_counterfactual_that_barely_moves_the_score_gets_no_share():
    """Issue 57: "-737% of the whole" of a change of -0.00, at a step where both translations write "auf"."""
    from attention_inspector.ui.tabs.counterfactual import patching_said

    result = Patching(3, 0, None, -0.51, -0.512, {CROSS: np.array([[0.02, -0.01]])})
    said = patching_said(result, 4, "auf", 'log p("auf")', "step 1: ein / eine")
    assert "barely moves" in said and "%" not in said and said.endswith("the translations part at step 1: ein / "
                                                                         "eine: step there and patch again.")
