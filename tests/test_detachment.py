"""Is a translation detached from its source (issue 55): the detectors' known answers, the same scores from the
API, the page and the command, and a clear answer to what cannot be scored."""

import csv
import gzip
import itertools
import json
import random
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from attention_inspector.model.analysis import detachment as command
from attention_inspector.model.explain.contributions import alti_plus
from attention_inspector.model.explain.detachment import (ATTENTION, COMBINED, DEFAULT_THRESHOLDS, DETECTORS,
                                                          LOG_PROBABILITY, SOURCE_SHARE, Detachment, ScoredDetachment,
                                                          attention_peaks, ranked, thresholds_of)
from attention_inspector.model.serving.checkpoint import load_checkpoint
from attention_inspector.model.serving.translator import InputError
from attention_inspector.model.text.vocab import SOS_ID
from attention_inspector.model.text.words import SENTENCEPIECE
from attention_inspector.ui.render import detachment_part
from tests.conftest import decoded_log_probabilities, log_probability_rounding, model_rounding
from tests.test_http_api import call

CHECKPOINTS = Path(__file__).resolve().parent.parent / "checkpoints"
MODEL = "toy-en-de"


def test_roc_auc_and_precision_at_90_recall_have_their_known_answers():
    assert ranked([0.1, 0.2, 0.8, 0.9], [True, True, False, False]) == (1.0, 1.0)
    assert ranked([0.9, 0.8, 0.1, 0.2], [True, True, False, False]) == (0.0, 0.5)  # all four flagged for 90%
    auc, precision = ranked([0.5, 0.5], [True, False])
    assert auc == 0.5 and precision == 0.5
    # 10 detached at 0..9, 10 attached at 5..14: 9 of them must be flagged, so everything up to 8 (4 attached).
    auc, precision = ranked(list(range(10)) + list(range(5, 15)), [True] * 10 + [False] * 10)
    assert auc == pytest.approx(1 - 12.5 / 100) and precision == pytest.approx(9 / 13)
    # detached given as 0/1 flags, as a CSV column reads: flags, not indices
    assert ranked([0.1, 0.9, 0.2, 0.8], [1, 0, 1, 0]) == (1.0, 1.0)
    with pytest.raises(ValueError, match="^ROC-AUC needs detached and attached pairs both$"):
        ranked([0.1, 0.2], [True, True])


# A translation of two tokens, by hand: probabilities 1/2 and 1/4, source shares 1/2 and 1, so that each token's
# √(share × probability) is exactly 1/2 and the sentence's √(3/4 × √(1/8)) (its means: share 3/4, probability the
# geometric mean √(1/2 × 1/4)).
BY_HAND = Detachment(log_probabilities=np.log([0.5, 0.25]), attention_peaks=np.array([0.25, 0.75]),
                     source_shares=np.array([0.5, 1.0]))
BY_HAND_COMBINED = np.sqrt(0.75 * np.sqrt(0.125))


def test_a_translation_by_hand_has_its_known_scores():
    assert BY_HAND.score(SOURCE_SHARE) == 0.75 and BY_HAND.score(ATTENTION) == 0.5
    assert BY_HAND.score(LOG_PROBABILITY) == pytest.approx(np.log(np.sqrt(0.125)))
    assert BY_HAND.score(COMBINED) == pytest.approx(BY_HAND_COMBINED)  # the geometric mean, not (0.75 + 0.354) / 2
    np.testing.assert_allclose(BY_HAND.token_signal(), [0.5, 0.5])
    without = replace(BY_HAND, source_shares=None, unavailable="a GRU")
    assert without.score(SOURCE_SHARE) is None and without.score(COMBINED) == pytest.approx(np.sqrt(0.125))
    np.testing.assert_allclose(without.token_signal(), [0.5, 0.25])  # the probability alone
    negative = replace(BY_HAND, source_shares=np.array([-0.25, 1.0]))  # a share under 0 counts as none
    np.testing.assert_allclose(negative.token_signal(), [0.0, 0.5])
    with pytest.raises(ValueError, match="^detector must be one of source_share, log_probability, combined, "
                                         "attention, not 'nope'$"):
        BY_HAND.score("nope")


def test_a_sentence_is_flagged_by_the_sentence_threshold_and_a_token_by_the_token_one_strictly_under_each():
    just = BY_HAND.score(COMBINED)
    sentence, tokens = BY_HAND.flags({"sentence": just, "token": 0.5})  # at a threshold is not under it
    assert not sentence and tokens.tolist() == [False, False]
    sentence, tokens = BY_HAND.flags({"sentence": just + 1e-9, "token": 0.5 + 1e-9})
    assert sentence and tokens.tolist() == [True, True]
    sentence, tokens = BY_HAND.flags({"sentence": 0.6, "token": 0.1})  # the sentence under, no token under
    assert sentence and tokens.tolist() == [False, False]
    sentence, tokens = BY_HAND.flags({"sentence": 0.1, "token": 0.6})
    assert not sentence and tokens.tolist() == [True, True]


def test_in_words_a_words_share_and_peak_are_its_pieces_mean_and_its_log_probability_their_sum():
    pieces = Detachment(log_probabilities=np.log([0.5, 0.5, 0.25, 0.8]), attention_peaks=np.array([0.2, 0.4, 0.6, 0.1]),
                        source_shares=np.array([0.5, 0.25, 0.75, 0.4]))
    scored = ScoredDetachment(source_tokens=["▁A", "▁dog", "<eos>"], target_tokens=["▁ein", "▁Hu", "nd", "<eos>"],
                              unknown=[], measured=pieces, contributions=None,
                              thresholds={"sentence": 0.4, "token": 0.5}, threshold_meaning="by hand")
    tokens, signals, flagged = scored.in_units(SENTENCEPIECE, in_words=True)
    assert tokens == ["ein", "Hund", "<eos>"]
    np.testing.assert_allclose(signals["source_share"], [0.5, 0.5, 0.4])
    np.testing.assert_allclose(signals["log_probability"], np.log([0.5, 0.125, 0.8]))
    np.testing.assert_allclose(signals["attention_peak"], [0.2, 0.5, 0.1])
    np.testing.assert_allclose(signals["combined"], [0.5, 0.25, np.sqrt(0.32)])
    assert flagged.tolist() == [False, True, False]  # 0.5 is not under 0.5
    tokens, signals, flagged = scored.in_units(SENTENCEPIECE, in_words=False)
    assert tokens == scored.target_tokens and set(signals) == {"source_share", "log_probability", "attention_peak",
                                                               "combined"}
    np.testing.assert_allclose(signals["combined"], np.sqrt([0.25, 0.125, 0.1875, 0.32]))
    assert flagged.tolist() == [False, True, True, False]
    gru = replace(scored, measured=replace(pieces, source_shares=None))
    _, signals, _ = gru.in_units(SENTENCEPIECE, in_words=True)
    assert signals["source_share"] is None and np.allclose(signals["combined"], [0.5, 0.125, 0.8])


def test_calibrated_thresholds_say_what_they_were_calibrated_on_and_defaults_say_they_are_not():
    thresholds = {"sentence": 0.3, "token": 0.1}
    assert thresholds_of({"detachment": {"thresholds": thresholds, "split": "Multi30k val"}}) == \
        (thresholds, "in the lowest 5% of this model's own translations of Multi30k val")
    assert thresholds_of({"detachment": {"thresholds": thresholds}})[1] == \
        "in the lowest 5% of this model's own translations of a corpus"
    assert thresholds_of({}) == (DEFAULT_THRESHOLDS, "a default, not calibrated for this model")
    assert thresholds_of({})[0] is not DEFAULT_THRESHOLDS  # a copy: the defaults are never changed through it


def test_the_attention_peak_is_the_last_layers_head_mean_largest_weight_over_the_source():
    cross = np.zeros((2, 2, 2, 3))  # (L, H, T, S)
    cross[0] = 1 / 3  # the first layer is not read
    cross[1, 0] = [[0.5, 0.5, 0.0], [0.1, 0.1, 0.8]]
    cross[1, 1] = [[0.5, 0.3, 0.2], [0.1, 0.5, 0.4]]
    np.testing.assert_allclose(attention_peaks(cross), [0.5, 0.6])


def sentences(count: int, seed: int = 0) -> list[str]:
    """Made-up sentences of Multi30k's kind (the tests make their own data)."""
    subjects = ["A man", "A woman", "A little girl", "Two boys", "A dog", "An old man", "A young woman",
                "Three people", "A child", "A group of men"]
    verbs = ["is riding a bike", "is playing soccer", "is reading a book", "is walking", "is sitting on a bench",
             "is eating a sandwich", "is climbing a rock", "is swimming", "is holding a camera", "is running"]
    places = ["in the park.", "on the street.", "near the water.", "at the beach.", "in a city.", "in the snow.",
              "under a tree.", "in front of a building.", "on a stage.", "in a field."]
    made = [" ".join(words) for words in itertools.product(subjects, verbs, places)]
    random.Random(seed).shuffle(made)
    return made[:count]


@pytest.mark.slow
def test_on_en_de_a_source_paired_with_another_translation_scores_below_its_own():
    translator = load_checkpoint(CHECKPOINTS / "en-de")
    texts = sentences(200)
    own = command.own_translations(translator, texts)
    pairs = command.constructed(texts, own)
    scores = {kind: [translator.detachment(text, tokens).measured.scores() for text, tokens in pairs[kind]]
              for kind in (command.OWN, command.FULLY)}
    below = {detector: sum(detached[detector] < mine[detector] for mine, detached in
                           zip(scores[command.OWN], scores[command.FULLY])) for detector in DETECTORS}
    assert below[COMBINED] >= 190 and below[LOG_PROBABILITY] >= 190  # the page flags by the combination
    assert below[SOURCE_SHARE] >= 150  # ALTI+ alone ranks most of them, not 95% (docs/explanations.md)


@pytest.mark.parametrize("above", [0.0004, 0.003, 0.2])
def test_a_flagged_sentence_never_reads_its_score_equal_to_its_threshold(events, above):
    """The verdict's score and threshold are shown with the decimals that tell them apart (0.4966 under 0.4970, not
    0.50 under 0.50), and a sentence's score under its threshold reads as under it."""
    session = events.translate("A dog runs in the park.")["session"]
    scored = session.current.detachment
    score = scored.measured.score(COMBINED)
    session = session.with_current(detachment=replace(scored, thresholds={**scored.thresholds,
                                                                          "sentence": score + above}))
    part = detachment_part(session)
    verdict = part["verdict"]
    shown = re.search(r"Score (\d\.\d+)", verdict).group(1)
    threshold = re.search(r"A sentence under (\d\.\d+) is flagged", verdict).group(1)
    assert part["plain"].startswith("May have made up words") and len(shown) == len(threshold)
    assert float(shown) < float(threshold) and float(shown) == pytest.approx(score, abs=10 ** -(len(shown) - 2))
    digits = len(shown) - 2  # no more decimals than part them; 2 where 2 do
    assert digits == 2 or round(score, digits - 1) == round(score + above, digits - 1)
    assert digits == 2 or above < 0.01


def scored_by_hand(model, src_ids: list[int], tgt_ids: list[int]) -> dict:
    """Each detector's score of a translation, from one teacher-forced pass and ALTI+, not through Detachment: the
    mean source share (every source column, <eos> included), the mean log-probability (<pad> and <sos> ruled out,
    as decoding rules them out), their geometric mean, and the mean of the last layer's head-averaged
    cross-attention peak."""
    with torch.no_grad():
        logits, attention = model(torch.tensor([src_ids]), torch.tensor([[SOS_ID] + tgt_ids[:-1]]), need_weights=True)
    log_probabilities = decoded_log_probabilities(logits[0])[torch.arange(len(tgt_ids)), tgt_ids].double().numpy()
    share = alti_plus(model, src_ids, tgt_ids).decoder[:, :len(src_ids)].sum(-1).mean()
    peaks = attention.cross[-1, 0].mean(0).max(-1).values.double().numpy()
    return {SOURCE_SHARE: share, LOG_PROBABILITY: log_probabilities.mean(),
            COMBINED: np.sqrt(share * np.exp(log_probabilities.mean())), ATTENTION: peaks.mean()}


def test_every_score_is_the_same_from_the_api_the_page_and_the_command(server, events, services, tmp_path):
    text = "A dog runs in the park."
    out = events.translate(text)
    decoding = out["session"].current
    page = decoding.detachment.measured.scores()
    part = out["detachment"]
    assert part["verdict"] and len(part["words"]) == len(decoding.trace.target_tokens)
    event, answer = call(server, "v2/detach", json.dumps({"model": MODEL, "text": text,
                                                          "translation": decoding.trace.target_tokens}))
    assert event == "complete"
    api = answer[0]["scores"]
    event, traced = call(server, "v2/trace", json.dumps({"model": MODEL, "text": text}))
    traced = traced[0]["detachment"]["scores"]  # from the decoding's own pass, /detach's teacher-forced: both rounded
    translator = services.translators[MODEL]
    # Passes of their own (the decoding's, a teacher-forced one, by hand) add their sums in other orders: every score
    # within a log-probability's rounding (the largest: shares and peaks are at most 1, the combined score their
    # geometric mean), and the API's 6 decimals within 5e-7 more each.
    rounding, decimals = log_probability_rounding(translator, text), 5e-7
    assert traced == pytest.approx(api, abs=rounding + 2 * decimals)
    [row] = command.ranking(translator, [text], [decoding.trace.target_tokens], {})
    decoded = translator.trace(text)
    assert decoded.target_tokens == decoding.trace.target_tokens
    expected = scored_by_hand(translator.model, decoded.trace.src_ids, decoded.trace.token_ids)
    for detector in DETECTORS:
        assert page[detector] == pytest.approx(expected[detector], abs=rounding), detector
        assert api[detector] == pytest.approx(page[detector], abs=rounding + decimals)
        assert row[detector] == pytest.approx(page[detector], abs=rounding)
    assert answer[0]["detector"] == COMBINED and answer[0]["thresholds"] == DEFAULT_THRESHOLDS
    assert "not calibrated" in answer[0]["threshold_meaning"]
    assert [token["token"] for token in answer[0]["tokens"]] == decoding.trace.target_tokens


def test_the_api_scores_a_translation_made_elsewhere_word_by_word_and_marks_what_falls_under(server):
    body = {"model": MODEL, "text": "A dog runs.", "translation": "ein hund läuft .", "units": "words"}
    event, answer = call(server, "v2/detach", json.dumps(body))
    assert event == "complete"
    tokens = answer[0]["tokens"]
    assert [t["token"] for t in tokens][-1] == "<eos>" and answer[0]["units"] == "words"
    threshold = answer[0]["thresholds"]["token"]
    for token in tokens:
        value = np.sqrt(token["source_share"] * np.exp(token["log_probability"]))
        assert token["flagged"] == (value < threshold)
    attached = answer[0]["scores"][COMBINED]
    event, other = call(server, "v2/detach", json.dumps({**body, "translation": "ein kind spielt mit ball ."}))
    assert event == "complete" and other[0]["scores"][COMBINED] < attached
    event, unknown = call(server, "v2/detach", json.dumps({**body, "translation": "ein hund rennt ."}))
    assert event == "complete" and unknown[0]["unknown"] == ["rennt"]


@pytest.mark.parametrize("translation, says", [
    ("", "translation must be"),
    ("   ", "translation must be"),
    ("qqqxx zzzkw", "knows no word"),
    (" ".join(["hund"] * 400), "at most"),
    (17, "translation must be"),
    (["hund", 3], "list of strings"),
])
def test_what_cannot_be_scored_is_answered_with_the_reason(server, translation, says):
    event, answer = call(server, "v2/detach", json.dumps({"model": MODEL, "text": "A dog runs.",
                                                          "translation": translation}))
    assert event == "error" and says in answer


def test_a_source_past_the_limit_is_refused_with_the_limit(server):
    event, answer = call(server, "v2/detach", json.dumps({"model": MODEL, "text": "a dog runs . " * 80,
                                                          "translation": "ein hund läuft ."}))
    assert event == "error" and "reads at most" in answer


def test_a_gru_model_says_it_has_no_source_share_and_scores_by_probability(services):
    translator = services.translators["toy-rnn"]
    traced = translator.trace("A dog runs.")
    scored = translator.detachment("A dog runs.", traced.target_tokens)
    assert scored.measured.source_shares is None and "GRU" in scored.measured.unavailable
    scores = scored.measured.scores()
    assert scores[SOURCE_SHARE] is None
    assert scores[COMBINED] == pytest.approx(np.exp(scores[LOG_PROBABILITY]))
    with pytest.raises(InputError, match="empty"):
        translator.detachment("A dog runs.", ["<eos>"])
    with pytest.raises(InputError, match="empty"):
        translator.detachment("A dog runs.", [])


def assert_same_detachment(mine, theirs, translator, text: str):
    """The same tokens and thresholds, and numbers from passes of their own (sums in other orders) within their
    rounding (tests/conftest.py): a log-probability's, a share's or a peak's (at most 1)."""
    assert (mine.source_tokens, mine.target_tokens, mine.unknown, mine.thresholds) == \
        (theirs.source_tokens, theirs.target_tokens, theirs.unknown, theirs.thresholds)
    config = translator.model.config
    rounding = {"log_probabilities": log_probability_rounding(translator, text),
                "attention_peaks": model_rounding(config), "source_shares": model_rounding(config)}
    for field in ("log_probabilities", "attention_peaks", "source_shares"):
        ours, expected = getattr(mine.measured, field), getattr(theirs.measured, field)
        assert (ours is None) == (expected is None), field
        if ours is not None:
            np.testing.assert_allclose(ours, expected, rtol=0, atol=rounding[field], err_msg=field)
    assert (mine.contributions is None) == (theirs.contributions is None)
    if mine.contributions is not None:
        for field in ("encoder", "decoder", "encoder_layers", "decoder_layers"):
            np.testing.assert_allclose(getattr(mine.contributions, field), getattr(theirs.contributions, field),
                                       rtol=0, atol=model_rounding(config), err_msg=field)


@pytest.mark.parametrize("name", ["transformer", "rnn", "t5-like"])
def test_a_trace_scores_its_detachment_from_its_own_pass_as_a_second_pass_would(translators_of_each_kind, name,
                                                                                monkeypatch):
    """`trace(detach=True)`: the score `detachment` gives the translation, with a forced prefix and heads off
    too, from the decoding's own pass (no teacher-forced pass runs), and the trace it returns carries no vectors."""
    import attention_inspector.model.serving.translator as translator_module

    translator = translators_of_each_kind[name]
    text = "A dog runs in the park."
    heads = translator.model.heads()
    mask = [f"{kind}.{layers}.{min(2, count)}" for kind, (layers, count) in heads.items()]
    plain = translator.trace(text)
    asked = [dict(), dict(mask=mask), dict(force=plain.target_tokens[1:2])]
    expected = [translator.detachment(text, translator.trace(text, **options).target_tokens, options.get("mask"))
                for options in asked]
    for second_pass in ("alti_plus_pass", "teacher_forced"):
        monkeypatch.setattr(translator_module, second_pass, lambda *args, **kwargs: pytest.fail("a second pass"))
    for options, theirs in zip(asked, expected):
        traced = translator.trace(text, detach=True, **options)
        assert traced.trace.vectors is None and traced.target_tokens == theirs.target_tokens
        assert_same_detachment(traced.detachment, theirs, translator, text)
    assert translator.trace(text).detachment is None


def test_a_multilingual_trace_leaves_its_given_language_code_out_of_the_scores(tmp_path):
    pytest.importorskip("transformers")
    from attention_inspector.model.hub.convert_hf import convert
    from tests import hub_models

    translator = load_checkpoint(convert(str(hub_models.nllb(tmp_path / "nllb")), tmp_path / "converted"))
    traced = translator.trace("A dog runs.", tgt_lang="fra_Latn", detach=True)
    assert traced.target_tokens[0] == "fra_Latn" and traced.detachment.target_tokens == traced.target_tokens[1:]
    assert_same_detachment(traced.detachment, translator.detachment("A dog runs.", traced.target_tokens[1:],
                                                                   tgt_lang="fra_Latn"), translator, "A dog runs.")


def test_a_translation_of_no_word_is_not_scored_and_says_why(translators_of_each_kind):
    translator = translators_of_each_kind["transformer"]
    traced = translator.trace("A dog runs.", force=["<eos>"], detach=True)
    assert traced.target_tokens == ["<eos>"] and "no word" in traced.detachment


def test_the_page_marks_a_detached_translation_and_says_its_threshold(events):
    from attention_inspector.ui import operations

    out = events.translate("A dog runs in the park.")
    session = out["session"]
    assert out["detachment"]["plain"] == "Looks faithful" and "not calibrated" in out["detachment"]["verdict"]
    # Each decoding made from it (a branch, heads off) is scored in its turn, its line drawn beside the rest.
    branched = events.run(operations.branch, session, "kind")
    assert branched["session"].current.detachment is not None and branched["detachment"]["verdict"]
    masked = events.run(operations.set_mask, session, ["cross.1.1", "cross.2.3"])
    assert masked["session"].current.mask and masked["detachment"]["verdict"] and masked["mask_effect_plot"]
    # With every cross-attention head off nothing reaches the decoder from the source: a detached translation.
    deaf = events.run(operations.set_mask, session, [f"cross.{layer}.{head}" for layer in (1, 2)
                                                     for head in (1, 2, 3, 4)])
    part, scored = deaf["detachment"], deaf["session"].current.detachment
    assert scored.measured.score(SOURCE_SHARE) == pytest.approx(0, abs=1e-6) and scored.flags[0]
    assert part["detached"] and part["verdict"].startswith("Score 0.00")
    assert part["plain"] == "May have made up words (underlined). This model knows image captions only: likely why."
    assert [marked for _, marked, _ in part["words"]] == [True] * len(scored.target_tokens)


def test_the_command_ranks_pairs_most_detached_first_and_writes_csv_and_json(toy_checkpoints, tmp_path):
    root, _ = toy_checkpoints
    sources, translations = tmp_path / "src.txt", tmp_path / "tgt.txt"
    sources.write_text("A dog runs.\nA man walks.\nTwo women sing.\n", encoding="utf-8")
    translations.write_text("ein hund läuft .\nein kind spielt mit ball .\n\n", encoding="utf-8")
    out = tmp_path / "ranked.csv"
    command.main(["--checkpoint", str(root / "toy-en-de"), "--pairs", str(sources), str(translations),
                  "--out", str(out)])
    rows = list(csv.DictReader(out.read_text(encoding="utf-8").splitlines()))
    assert [row["line"] for row in rows] == ["2", "1", "3"]  # the mismatched pair first, the empty one last
    assert "empty" in rows[-1]["error"] and float(rows[0][COMBINED]) < float(rows[1][COMBINED])
    command.main(["--checkpoint", str(root / "toy-en-de"), "--pairs", str(sources), str(translations),
                  "--out", str(tmp_path / "ranked.json")])
    assert [row["line"] for row in json.loads((tmp_path / "ranked.json").read_text())] == [2, 1, 3]


def test_the_evaluation_reports_every_kind_and_calibration_writes_the_thresholds(toy_checkpoints, tmp_path):
    import shutil

    root, data = toy_checkpoints
    folder = tmp_path / "toy-en-de"
    shutil.copytree(root / "toy-en-de", folder)
    report = tmp_path / "report.json"
    command.main(["--checkpoint", str(folder), "--data", str(data), "--evaluate", "--calibrate",
                  "--out", str(report)])
    kinds = json.loads(report.read_text())["kinds"]
    assert set(kinds) == {command.FULLY, command.PARTIALLY, command.SECOND_HALF, command.PERTURBED}
    assert kinds[command.FULLY]["detectors"][COMBINED]["auc"] > 0.9
    metrics = json.loads((folder / "metrics.json").read_text())
    translator = load_checkpoint(folder)
    # The thresholds are the 5% quantiles of the combined scores of the model's own translations of val, and of
    # their tokens: computed here from each sentence's greedy translation, scored one by one.
    texts = gzip.open(data / "val.en.gz", "rt", encoding="utf-8").read().splitlines()
    assert json.loads(report.read_text())["scored"] == len(texts)
    own = [translator.detachment(text, translator.trace(text).target_tokens).measured for text in texts]
    sentence_scores = [scored.score(COMBINED) for scored in own]
    token_scores = np.concatenate([scored.token_signal() for scored in own])
    # The command decodes and scores in batches, here one sentence at a time (sums in other orders), and it writes 4
    # decimals: each threshold within 5e-5 of its quantile and a score's rounding (an interpolation between two).
    allowed = 5e-5 + log_probability_rounding(translator, texts[0])
    assert metrics["detachment"]["thresholds"] == {
        "sentence": pytest.approx(float(np.quantile(sentence_scores, 0.05)), abs=allowed),
        "token": pytest.approx(float(np.quantile(token_scores, 0.05)), abs=allowed)}
    assert metrics["detachment"]["thresholds"]["sentence"] < np.median(sentence_scores)
    scored = translator.detachment("A dog runs.", translator.trace("A dog runs.").target_tokens)
    assert scored.thresholds == metrics["detachment"]["thresholds"] and "own translations" in scored.threshold_meaning
