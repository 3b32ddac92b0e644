"""Activation patching per head (model/explain/patching.py): the known answers, on the shipped checkpoints, a GRU
model and tiny converted Hub models, the command line (model/analysis/patching.py), the page and links."""

import gzip
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from attention_inspector.model.analysis.patching import gender_pairs, main
from attention_inspector.model.explain.patching import (HeadHooks, Patching, Replace, parting, patch_heads,
                                                        patched_scores, recorded_run, recorded_runs, score,
                                                        skipped_kinds, suggested_swap)
from attention_inspector.model.keys import CROSS, DECODER, ENCODER
from attention_inspector.model.serving.checkpoint import load_checkpoint
from attention_inspector.model.serving.translator import InputError
from attention_inspector.model.nets.transformer import Transformer
from attention_inspector.model.text.vocab import SOS_ID

sys.path.insert(0, str(Path(__file__).parent))
import hub_models  # noqa: E402
from tests.conftest import UNIT_ROUNDOFF, decoded_log_probabilities, largest_logit, tiny_config  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SENTENCE, COUNTERFACTUAL = "A man is riding a bicycle down the street.", "A woman is riding a bicycle down the street."


@pytest.fixture(scope="module")
def en_de():
    return load_checkpoint(ROOT / "checkpoints" / "en-de")


@pytest.fixture(scope="module")
def en_de64():
    """en-de computing in float64 (its traces, whose step decoder keeps float32 caches, made by `en_de`): where an
    effect of 1e-3 is compared, float32's rounding (tests/conftest.py: 5e-3 for a score of en-de's) would hide it."""
    translator = load_checkpoint(ROOT / "checkpoints" / "en-de")
    translator.model.double()
    return translator


def runs(translator, text: str, counterfactual: str, step: int, tgt_tokens: list[str] | None = None):
    """The ids, the prefix before `step` and the token chosen there (of `tgt_tokens`, default: its translation), and
    both runs' scores and head outputs."""
    tgt_tokens = tgt_tokens or translator.trace(text).target_tokens
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


def test_each_heads_effect_in_the_batch_is_that_of_a_whole_run_with_that_head_alone(en_de, en_de64):
    """A row of the batch patches one head and nothing else: its effect is that of a plain run of the whole model
    with that head patched, wherever the row starts (each kind, each layer); the decoder's first self-attention
    layer reads only the target prefix, which both runs share, so patching its heads changes nothing. In float64,
    as some of these effects are 1e-3."""
    tokens = en_de.trace(SENTENCE).target_tokens
    step = 3
    result = en_de64.patching(SENTENCE, COUNTERFACTUAL, tokens, step, contrast="frau")
    assert result.skipped == {} and set(result.effects) == {ENCODER, DECODER, CROSS}
    src_ids, _, tgt_ids, prefix, _, _, outputs = runs(en_de64, SENTENCE, COUNTERFACTUAL, step, tokens)
    contrast = en_de64.tgt_vocab.stoi["frau"]
    # A score from a batch's row and from a plain run: their float64 logits agree to ~1e-13 (float64's rounding of the
    # sums, tests/conftest.py), then the log-softmax runs in float32 row by row (next_token_logits), alike in a batch
    # of any size. A logit rounded to float32 on either side of a boundary differs by one spacing (2u·|z| at most),
    # a log-probability by twice that, and a score (two of them) by twice again.
    rounding = 4 * 2 * UNIT_ROUNDOFF * largest_logit(en_de, SENTENCE)
    with torch.no_grad():
        for kind, layer, head in [(kind, layer, (layer + 2) % 4) for kind in (ENCODER, DECODER, CROSS)
                                  for layer in range(3)]:
            whole = whole_run(en_de64.model, src_ids, prefix, tgt_ids[step], contrast, outputs, kind, layer, head)
            assert result.effects[kind][layer, head] == pytest.approx(whole - result.original, abs=rounding)
            assert (abs(whole - result.original) > 1e-4) == (kind != DECODER or layer > 0)  # the check can fail
    assert np.all(result.effects[DECODER][0] == 0.0)
    result = en_de.patching(SENTENCE, COUNTERFACTUAL, tokens, 1, contrast="frau")
    assert (result.step, result.token, result.contrast) == (1, tgt_ids[1], contrast)
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


def test_two_translations_part_at_their_first_different_token():
    assert parting(["ein", "Mann", "läuft", "."], ["ein", "Frau", "läuft", "."]) == 1
    assert parting(["ein", "Mann"], ["eine", "Mann"]) == 0
    assert parting(["ein", "Mann", "läuft"], ["ein", "Mann", "geht"]) == 2
    assert parting(["ein", "Mann"], ["ein", "Mann", "läuft"]) is None  # one begins the other
    assert parting([], ["ein"]) is None


def test_the_suggested_counterfactual_swaps_the_first_word_of_a_pair_in_the_case_it_had():
    assert suggested_swap("A man walks his dog.") == "A woman walks his dog."  # the first only
    assert suggested_swap("Man and dog.") == "Woman and dog."  # a capital kept
    assert suggested_swap("Women in a boat.") == "Men in a boat."
    assert suggested_swap("The Dog sleeps.") == "The Cat sleeps."  # found in any case, swapped in the word's own
    assert suggested_swap("Ein Mann läuft.") == "Ein Frau läuft."  # a German noun as written
    assert suggested_swap("A mannequin and a doghouse.") is None  # whole words only
    assert suggested_swap("Nothing to swap here.") is None


def test_a_stereotyped_occupation_is_swapped_for_one_of_the_other_stereotype_and_the_translations_part(en_de):
    """Issue 79: "The doctor is talking to a patient" had no word to swap. Occupations stereotyped male and female
    (WinoBias, Zhao et al. 2018; Vig et al. 2020 intervene on them) swap, and en-de's translations then part at the
    article: "Der Arzt" against "Die Krankenschwester", a difference to patch."""
    sentence = "The doctor is talking to a patient in the hospital."
    swapped = suggested_swap(sentence)
    assert swapped == "The nurse is talking to a patient in the hospital."
    assert suggested_swap(swapped) == sentence
    ours, theirs = (en_de.trace(text) for text in (sentence, swapped))
    assert ours.text.startswith("Der Arzt ") and theirs.text.startswith("Die Krankenschwester ")
    assert parting(ours.target_tokens, theirs.target_tokens) == 0


def test_a_runs_score_is_the_log_probability_of_its_token_less_that_of_the_contrast(en_de):
    src_ids, _, tgt_ids, prefix, original, _, _ = runs(en_de, SENTENCE, COUNTERFACTUAL, 1)
    contrast = en_de.tgt_vocab.stoi["frau"]
    with torch.no_grad():
        logits, _ = en_de.model(torch.tensor([src_ids]), prefix)
        log_probabilities = decoded_log_probabilities(logits[0, -1])
        contrasted = recorded_run(en_de.model, src_ids, prefix, tgt_ids[1], contrast).score
    assert original == pytest.approx(float(log_probabilities[tgt_ids[1]]), abs=1e-4)
    assert contrasted == pytest.approx(float(log_probabilities[tgt_ids[1]] - log_probabilities[contrast]), abs=1e-4)
    # Sources of other lengths are run one by one, each scored against the contrast all the same; and patched runs
    # scored without the sentence's run given record it, contrast and all.
    longer_ids = en_de.encode_source(en_de.source_tokens("A tall man is riding a bicycle down the street."))
    with torch.no_grad():
        both = recorded_runs(en_de.model, [src_ids, longer_ids], prefix, tgt_ids[1], contrast)
        longer_logits, _ = en_de.model(torch.tensor([longer_ids]), prefix)
        [unpatched] = patched_scores(en_de.model, src_ids, prefix, tgt_ids[1], contrast, both[0].outputs, [[]])
    longer = decoded_log_probabilities(longer_logits[0, -1])
    assert both[0].score == pytest.approx(contrasted, abs=1e-5) and unpatched == pytest.approx(contrasted, abs=1e-5)
    assert both[1].score == pytest.approx(float(longer[tgt_ids[1]] - longer[contrast]), abs=1e-4)
    # A token named, not the one chosen at the step: its log-probability is what is patched.
    named = en_de.patching(SENTENCE, COUNTERFACTUAL, en_de.trace(SENTENCE).target_tokens, 1, token="frau")
    assert named.token == contrast and named.original == pytest.approx(float(log_probabilities[contrast]), abs=1e-4)


def test_the_heads_ranked_are_the_ten_that_move_the_score_most_either_way():
    effects = {CROSS: np.array([[0.5, -2.0, np.nan], [0.1, 0.0, -0.3]]), ENCODER: np.arange(12.0).reshape(3, 4) / 10}
    patched = Patching(step=0, token=0, contrast=None, original=0.0, counterfactual=1.0, effects=effects)
    assert patched.ranked() == [("cross.1.2", -2.0), ("encoder.3.4", 1.1), ("encoder.3.3", 1.0),
                                ("encoder.3.2", 0.9), ("encoder.3.1", 0.8), ("encoder.2.4", 0.7),
                                ("encoder.2.3", 0.6), ("cross.1.1", 0.5), ("encoder.2.2", 0.5),
                                ("encoder.2.1", 0.4)]
    assert patched.ranked(2) == [("cross.1.2", -2.0), ("encoder.3.4", 1.1)]


def test_a_replaced_heads_output_follows_the_steps_of_a_decoder_called_once_a_step():
    values = torch.arange(2 * 3 * 2, dtype=torch.float32).view(1, 2, 3, 2)  # (B, H, T, d): another run's outputs
    replace = Replace(torch.tensor([[1.0, 0.0]]), values)  # head 1 kept, head 2 replaced
    own = torch.full((1, 2, 1, 2), -1.0)
    for step in range(3):
        out = replace(own)
        assert out[0, 0].tolist() == [[-1.0, -1.0]] and torch.equal(out[0, 1], values[0, 1, step:step + 1])
    replace = Replace(torch.tensor([[0.0, 1.0]]), values)  # a decoder called once with every position
    assert torch.equal(replace(torch.zeros(1, 2, 3, 2))[0, 0], values[0, 0])


def test_sets_of_heads_in_any_order_each_score_as_patched_alone():
    """`patched_scores` groups its sets by the layer they start at (the encoder's rows encoded from their own layer
    up, rows of a layer together): in a shuffled order of sets that start at every layer, each set's score is the
    one it has patched alone, in a batch of its own."""
    torch.manual_seed(0)
    model = Transformer(tiny_config(n_encoder_layers=3, n_decoder_layers=3)).eval()
    src_ids, counterfactual_ids = [5, 6, 7, 8, 2], [5, 9, 7, 8, 2]
    prefix, token = torch.tensor([[SOS_ID, 10, 11]]), 12
    sets = [[(ENCODER, 2, 1)], [(CROSS, 1, 0)], [(ENCODER, 0, 3)], [(DECODER, 2, 2)], [(ENCODER, 2, 0)],
            [(ENCODER, 1, 1), (CROSS, 2, 3)], [(ENCODER, 0, 0)], [(DECODER, 1, 1), (CROSS, 0, 2)], []]
    with torch.no_grad():
        outputs = recorded_run(model, counterfactual_ids, prefix, token, 14).outputs
        together = patched_scores(model, src_ids, prefix, token, 14, outputs, sets)
        alone = [patched_scores(model, src_ids, prefix, token, 14, outputs, [heads])[0] for heads in sets]
    assert together == pytest.approx(alone, abs=1e-5)
    assert len({round(value, 4) for value in alone}) > 5  # the sets move the score apart: the check can fail


def test_encoder_heads_are_skipped_between_sources_of_other_lengths_saying_why():
    model = Transformer(tiny_config()).eval()
    assert skipped_kinds(model, [5, 6, 2], [5, 7, 2]) == {}
    assert skipped_kinds(model, [5, 6, 2], [5, 2]) == {
        ENCODER: "The sentence has 3 tokens and the counterfactual 2: encoder heads work at source positions, so "
                 "they are patched only between sources of as many tokens."}
