"""The verdict on a translation (model/explain/verdict.py): judged by the model of the other direction, each number
equal to that model's own teacher-forced scores, the thresholds applied as documented, the phrases as they stand."""

import numpy as np
import pytest

import attention_inspector
from attention_inspector.model.api.answers import AnswerError
from attention_inspector.model.api.services import Services
from attention_inspector.model.explain.omissions import Omissions
from attention_inspector.model.explain.verdict import (LEFT_OUT, MADE_UP, MISTRANSLATED, UNJUDGED, Calibration,
                                                       Reconstruction, judged, matched)
from tests.conftest import log_probability_rounding

SOURCE = "A man on a bicycle is carrying a large bag of bread for his family."
WITHOUT_BREAD = "Ein Mann auf einem Fahrrad trägt eine große Tasche für seine Familie."


@pytest.fixture(scope="module")
def en_de():
    """The shipped en-de, which de-en beside it judges (loaded on the first verdict)."""
    return attention_inspector.load("en-de")


def test_a_word_the_translation_left_out_is_named_and_its_scores_are_the_evaluators_own(en_de):
    """en-de's translation loses "of bread"; de-en reads it and cannot write "bread" back. Every number behind
    the verdict is de-en's own teacher-forced score (`Translator.score`, what /score answers)."""
    answer = en_de.detach(SOURCE, WITHOUT_BREAD)["verdict"]
    assert answer["evaluator"] == "de-en" and answer["phrases"][LEFT_OUT] == ["bread"]
    assert answer["plain"] == "May have left out: “bread”"
    evaluator = en_de.services.translators["de-en"]
    pieces = evaluator.tgt_tokenizer(SOURCE)
    scored = evaluator.score(WITHOUT_BREAD, pieces + ["<eos>"]).log_probabilities
    # Each source word here is one piece of de-en's: its surprisal is that piece's −log p.
    assert [word["word"] for word in answer["source"]] == pieces
    rounding = log_probability_rounding(evaluator, WITHOUT_BREAD) + 5e-7  # and the API's 6 decimals
    for word, log_probability in zip(answer["source"], scored):
        assert word["surprisal"] == pytest.approx(-log_probability, abs=rounding)
    bread = next(word for word in answer["source"] if word["word"] == "bread")
    assert bread["surprisal"] >= answer["thresholds"]["surprisal"] and bread["kind"] == LEFT_OUT
    # "needed": de-en's log-probability of the source without a translation word minus with it (its own passes).
    translation = evaluator.src_tokenizer(WITHOUT_BREAD)
    tasche = translation.index("tasche")
    shorter = " ".join(translation[:tasche] + translation[tasche + 1:])
    expected = evaluator.score(shorter, pieces + ["<eos>"]).total - scored.sum()
    needed = next(word for word in answer["translation"] if word["word"].lower() == "tasche")["needed"]
    assert needed >= expected - 2 * rounding * len(pieces)  # a word's Δ is the largest over the runs holding it


def test_a_translation_that_carries_every_word_looks_faithful(en_de):
    answer = en_de.detach("Two dogs play in the snow.", "Zwei Hunde spielen im Schnee.")["verdict"]
    assert answer["plain"] == "Looks faithful" and not any(answer["phrases"].values())
    assert [word["kind"] for word in answer["source"]] == [None] * 7


def hand_made(surprisals, contrastive, unknown=None, needed=(), translation=()) -> tuple:
    """Omissions and a Reconstruction of one source by hand: each word one piece."""
    words = ["a", "bag", "of", "bread", "and", "jam", "."][:len(surprisals)]
    omissions = Omissions(words, [range(i, i + 1) for i in range(len(words))], np.array(contrastive, dtype=float),
                          None, 1.0, "a test")
    reconstruction = Reconstruction("judge", words, np.array(surprisals, dtype=float),
                                    np.array(unknown or [False] * len(words)), list(translation),
                                    np.array(needed, dtype=float))
    return omissions, reconstruction


CALIBRATION = Calibration(surprisal=5.0, contrastive=-1.0, needed=3.0, repeated=0.0, meaning="a test")


def test_each_threshold_flags_a_score_at_it_and_not_below():
    """A word is not carried from a surprisal of `surprisal` on (at it: flagged); left out from a contrastive Δ of
    `contrastive` on, else mistranslated; a translation word made up from `needed`, or `repeated` for a repeat."""
    omissions, reconstruction = hand_made([0.1, 5.0, 9.0, 4.999, 0.1, 7.0, 0.0], [0, -1.0, 0, 3.0, 0, -1.001, np.nan],
                                          needed=[3.0, 2.999, 0.0, 0.0], translation=["brot", "und", "brot", "."])
    verdict = judged(omissions, reconstruction, CALIBRATION, {"a", "of", "and"}, ["Brot", "Tüte", "Brot", "."],
                     set())
    assert verdict.source_kinds == [None, LEFT_OUT, None, None, None, MISTRANSLATED, None]
    # "of" (a stop word) is not judged, so its surprisal of 9 flags nothing.
    assert verdict.translation_kinds == [MADE_UP, None, MADE_UP, None]  # the repeat from 0.0
    assert [said["repeats"] for said in verdict.translation_evidence] == [False, False, True, False]


def test_phrases_join_neighbours_only_and_the_line_names_three():
    omissions, reconstruction = hand_made([9, 9, 0, 9, 0, 9, 0], [0, 0, 0, 0, 0, -5, 0], unknown=None)
    stop = {"a", "of", "and"}
    verdict = judged(omissions, reconstruction, CALIBRATION, stop, [], set())
    # "a bag of bread": "of", a stop word between two words left out, joins them; "jam" stands apart.
    assert verdict.phrases(LEFT_OUT) == ["bag of bread"] and verdict.phrases(MISTRANSLATED) == ["jam"]
    assert verdict.plain() == "May have left out: “bag of bread”; may have mistranslated: “jam”"
    many, reconstruction = hand_made([9, 9, 0, 9, 0, 9, 0], [0, 0, 0, 0, 0, 0, 0])
    apart = judged(many, reconstruction, CALIBRATION, {"a", "of", "bread"}, [], set())
    assert apart.phrases(LEFT_OUT) == ["bag", "jam"]  # "of bread" between them is not left out: never joined
    unknown, reconstruction = hand_made([9, 9, 0, 9, 0, 9, 0], [0, 0, 0, 0, 0, 0, 0],
                                        unknown=[False, True, False, False, False, False, False])
    said = judged(unknown, reconstruction, CALIBRATION, stop, [], set())
    assert said.source_kinds[1] == UNJUDGED and said.phrases(LEFT_OUT) == ["bread and jam"]
    assert said.plain().endswith("not judged (judge does not know them): bag")


def test_the_line_names_at_most_three_phrases_and_counts_the_rest():
    words = ["a", ",", "b", ",", "c", ",", "d", ",", "e"]  # punctuation between them: never joined
    kinds_source = [LEFT_OUT, None, LEFT_OUT, None, LEFT_OUT, None, LEFT_OUT, None, MISTRANSLATED]
    omissions = Omissions(words, [range(i, i + 1) for i in range(9)], np.zeros(9), None, 1.0, "a test")
    verdict = judged(omissions, None, CALIBRATION, set(), [], set())
    verdict.source_kinds = kinds_source
    assert verdict.plain() == "May have left out: “a”, “b”, “c” and 1 more; may have mistranslated: 1 more"
    verdict.source_kinds = [LEFT_OUT] * 7 + [None, None]  # one phrase of seven words: the line shows three of them
    assert verdict.plain() == "May have left out: “a , b…”" and verdict.phrases(LEFT_OUT) == ["a , b , c , d"]


def test_words_of_two_tokenizers_are_matched_by_their_characters():
    assert matched(["zeitungsleserin", "liest", "."], ["zeitungs", "leserin", "liest."]) == [[0, 1], [2], [2]]
    assert matched(["Ein", "Mann"], ["ein", "mann"]) == [[0], [1]]


def test_a_model_without_a_reverse_direction_says_which_checks_it_lacks(toy_checkpoints):
    services = Services({"toy-en-de": attention_inspector.load(toy_checkpoints[0] / "toy-en-de").translator})
    evaluator, lacking = services.evaluator_of("toy-en-de")
    assert evaluator is None and "mistranslated or made up are not looked for" in lacking
    answer = attention_inspector.load(toy_checkpoints[0] / "toy-en-de").detach("a red dog runs .", "ein hund .")
    assert answer["verdict"]["evaluator"] is None and answer["verdict"]["lacking"] == [lacking]


def test_calibration_picks_the_thresholds_that_clear_the_goals_widest():
    """`best` on a hand-made tuning set: one word left out (surprisal 8, Δ 0), one mistranslated (surprisal 8,
    Δ −3) and one carried (surprisal 2). Surprisal thresholds over 2 and to 8 name both errors; a contrastive
    threshold over −3 and to 0 tells them apart; ties go to the highest."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from real_errors import OMISSION_GOALS, best

    words = ["bread", "jam", "tea"]
    omissions = Omissions(words, [range(i, i + 1) for i in range(3)], np.array([0.0, -3.0, 0.0]), None, 1.0, "t")
    reconstruction = Reconstruction("judge", words, np.array([8.0, 8.0, 2.0]), np.zeros(3, bool), [], np.array([]))
    verdict = judged(omissions, reconstruction, CALIBRATION, set(), [], set())
    row = {"omitted": [{"words": [0], "content_words": [0]}], "mistranslated": [{"source": [1], "translation": []}],
           "added": []}
    complete = {"omitted": [], "mistranslated": [], "added": []}
    carried = judged(omissions, Reconstruction("judge", words, np.array([1.0, 1.0, 1.0]), np.zeros(3, bool), [],
                                               np.array([])), CALIBRATION, set(), [], set())
    chosen = best([(row, verdict), (complete, carried)], {"surprisal": np.arange(1.0, 10.0, 1.0),
                                                          "contrastive": np.arange(-5.0, 2.0, 1.0)},
                  OMISSION_GOALS, CALIBRATION)
    assert (chosen.surprisal, chosen.contrastive) == (8.0, 0.0)


def test_a_translation_at_the_length_limit_given_back_as_text_is_judged():
    """de-en's translation of letters at random runs to its length limit (127 pieces, no <eos>). As text, a
    generated <unk> stays one token, and the word cut mid-way at the limit reads back whole: it is judged all the
    same, its pieces past the limit said; a text far beyond anything the model writes gets the limit."""
    model = attention_inspector.load("de-en")
    translator = model.translator
    limit = translator.model.config.max_len - 1
    text = ("hjfgäfb vipccvy üeßb cüwßärvmä qiqzhögü sänsiopv wßzlcktd sukögh xid hlzfknäb zeö hbäsußßr vcadugt "
            "sdmclädbt gfw")
    traced = translator.trace(text)
    assert len(traced.target_tokens) == limit and traced.target_tokens[-1] != "<eos>"
    assert len(translator.tgt_tokenizer(traced.text)) > limit  # read back as the tokenizer splits it: too long
    answer = model.detach(text, traced.text)
    assert len(answer["target_tokens"]) == limit and answer["target_tokens"][-1] != "<eos>"
    assert answer["verdict"]["unavailable"] is None and answer["verdict"]["evaluator"] == "en-de"
    unknown = "rßp käzzkd dwpnbj xvüeß usmz cczcgxhb admrqj ßpzswv"  # a translation of <unk> after <unk>
    shown = translator.trace(unknown)
    assert "<unk>" in shown.text
    pieces, cut = translator.translation_pieces(shown.text)
    assert cut == 0 and pieces.count("<unk>") == shown.target_tokens.count("<unk>")
    with pytest.raises(AnswerError, match=f"it takes at most {limit}"):
        model.detach(text, " ".join(["dog"] * (limit + limit // 4 + 1)))


def test_the_page_scores_only_the_words_the_evaluator_may_call_errors_and_shares_the_passes(en_de):
    """The page's cheaper path (ui/omissions.py) gives the /detach verdict: the model's contrastive conditioning of
    the candidate words alone equals theirs among every word's, and the evaluator's passes split in shares give the
    whole's largest changes (another batching: within float32 rounding)."""
    from attention_inspector.model.explain.omissions import source_words
    from attention_inspector.model.explain.verdict import candidates, stop_words
    from attention_inspector.model.text.words import scheme

    services, translator = en_de.services, en_de.translator
    traced = translator.trace(SOURCE)
    evaluator = services.translators["de-en"]
    whole = evaluator.reconstruction(traced.text, SOURCE, "de-en")
    shares = [evaluator.reconstruction(traced.text, SOURCE, "de-en", needed=(k, 3)) for k in range(3)]
    rounding = 2 * log_probability_rounding(evaluator, traced.text) * len(evaluator.tgt_tokenizer(SOURCE))
    assert np.allclose(np.fmax.reduce([share.needed for share in shares]), whole.needed, atol=rounding,
                       equal_nan=True)
    words = source_words(traced.source_tokens, scheme(translator.src_tokenizer), 0)[0]
    only = candidates(words, whole, Calibration.of(translator.metrics), stop_words("en"))
    assert only == {words.index("bread")}  # the one word de-en cannot write back from this translation
    every = translator.omissions(traced.source_tokens[:-1], traced.target_tokens)
    some = translator.omissions(traced.source_tokens[:-1], traced.target_tokens, only=only)
    assert np.isnan(some.contrastive[[i not in only for i in range(len(words))]]).all()
    rounding = 2 * log_probability_rounding(translator, SOURCE) * len(traced.target_tokens)
    assert np.allclose(some.contrastive[list(only)], every.contrastive[list(only)], atol=rounding)
    full = services.judge("en-de", SOURCE, traced.target_tokens, every, (whole, ""))
    page = services.judge("en-de", SOURCE, traced.target_tokens, some, (whole, ""))
    assert page.source_kinds == full.source_kinds and page.translation_kinds == full.translation_kinds


def test_the_page_judges_in_the_workers_as_detach_does(tmp_path):
    """The app's own services (ui/omissions.py's event, the evaluator's passes shared by two forked workers) name
    what /detach names, word by word."""
    from pathlib import Path

    from attention_inspector.api import Model
    from attention_inspector.model.api.services import load_services
    from attention_inspector.ui.omissions import find_omissions
    from attention_inspector.ui.operations import translate

    shipped = Path(__file__).resolve().parent.parent / "checkpoints"
    for name in ("en-de", "de-en"):
        (tmp_path / name).symlink_to(shipped / name)
    services = load_services(tmp_path, workers=2)
    try:
        assert services.pool is not None and services.pool.workers == 2
        session, _ = translate(services, None, "en-de", SOURCE)
        session, _ = find_omissions(services, session)
        verdict = session.current.verdict
        assert verdict.evaluator == "de-en" and verdict.phrases(LEFT_OUT) == ["bread"]
        answer = Model(services.translators["en-de"], "en-de", tmp_path / "de-en").detach(
            SOURCE, session.current.trace.target_tokens)["verdict"]
        assert [word["kind"] for word in answer["source"]] == verdict.source_kinds
        assert [word["kind"] for word in answer["translation"]] == verdict.translation_kinds
    finally:
        services.close()
