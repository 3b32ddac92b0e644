"""What a translation left out (model/explain/omissions.py, model/analysis/omissions.py): contrastive conditioning's
scores against passes computed apart, ALTI+'s totals, the words flagged in a translation that left a phrase out by
construction, `/detach`'s omissions on every kind of model, bad input, and the command's ranking and evaluation."""

import json

import numpy as np
import pytest

from attention_inspector.api import Model, load
from attention_inspector.model.analysis import detachment as command
from attention_inspector.model.api.answers import AnswerError
from attention_inspector.model.explain.omissions import (DEFAULT_THRESHOLD, deletions, source_words, word_scores,
                                                         worded)
from attention_inspector.model.text.words import scheme as word_scheme
from tests.conftest import log_probability_rounding

SOURCE = "A man on a bicycle is carrying a large bag of bread for his family ."
LONG = ("In the old market , a group of people waiting for the bus stand next to a large child on the ice , while a "
        "woman in a red coat sells fresh fruit to two young girls and a man on a bicycle is carrying a large bag of "
        "bread for his family past a small dog that is sleeping in the shade of a tree near the fountain .")


def test_the_spans_deleted_are_runs_of_words_that_start_and_end_with_a_word():
    labels = ["a", "dog", ",", "runs", "."]
    assert deletions(labels, 2) == [(0, 1), (1, 2), (3, 4), (0, 2)]  # never a run at a comma or the full stop
    assert deletions(["hello", "."]) == [(0, 1)] and deletions(["hello"]) == []  # never the whole source
    eleven = [f"w{i}" for i in range(11)] + ["."]  # longer runs every half their length, the last at the end
    assert deletions(eleven)[-7:] == [(0, 5), (2, 7), (4, 9), (6, 11), (7, 11), (0, 8), (4, 11)]
    scores = word_scores(np.array([0.5, -1.0, 2.0, 1.0]), [(0, 1), (1, 2), (3, 4), (0, 2)], labels)
    assert scores[:2].tolist() == [1.0, 1.0] and scores[3] == 2.0 and np.isnan(scores[[2, 4]]).all()
    assert not worded("—") and worded("4") and worded("zeit@@")


@pytest.mark.parametrize("kind", ["transformer", "rnn", "t5-like"])
def test_each_words_score_is_the_change_in_log_probability_of_its_best_span(translators_of_each_kind, kind):
    """Known answer: a span's Δ is the translation's log-probability given the source without it (scored apart, as
    /score scores it) minus given the whole source; a word's score the largest of its spans'. The ALTI+ total of a
    word is its column of the decoder's shares, summed."""
    translator = translators_of_each_kind[kind]
    text = "A man and a woman run in the park ."
    target = translator.trace(text).target_tokens
    scored = translator.detachment(text, target, with_omissions=True)
    found = scored.omissions
    tokens = translator.source_tokens(text)
    prefix = translator.prefix_length(tokens)
    labels, spans = source_words(tokens + ["<eos>"], word_scheme(translator.src_tokenizer), prefix)
    assert found.words == labels and found.spans == spans and prefix == len(translator.source_prefix())
    whole = translator.score(text, target).total  # the prompt (T5) goes before the words, as ever
    best = [max(translator.score(" ".join(labels[:a] + labels[b:]), target).total - whole
                for a, b in deletions(labels) if a <= i < b) for i in range(len(labels)) if worded(labels[i])]
    # Each total adds len(target) log-probabilities from passes of their own (in a batch there, alone here): two
    # totals' difference within twice that many log-probabilities' rounding (tests/conftest.py).
    rounding = 2 * len(target) * log_probability_rounding(translator, text)
    assert found.contrastive[[worded(label) for label in labels]] == pytest.approx(best, abs=rounding)
    if kind == "rnn":
        assert found.contributions is None
    else:
        shares = scored.contributions.decoder[:, :len(tokens) + 1].sum(0)
        assert found.contributions == pytest.approx([shares[span.start:span.stop].sum() for span in spans])


def test_a_phrase_left_out_by_construction_is_flagged_and_the_own_translation_is_not():
    """The issue's long sentence, small: en-de's translation of the source without "of bread for his family" is
    paired with the whole source; the words of that phrase are flagged, and none in the model's own translation."""
    model = load("en-de")
    translator = model.translator
    shortened = translator.trace("A man on a bicycle is carrying a large bag .").target_tokens
    found = translator.detachment(SOURCE, shortened, with_omissions=True).omissions
    assert set(found.omitted) >= {"bread", "family"} and not set(found.omitted) & {"man", "bicycle", "bag"}
    own = translator.trace(SOURCE).target_tokens
    assert translator.detachment(SOURCE, own, with_omissions=True).omissions.omitted == []
    answer = model.detach(SOURCE, shortened)["omissions"]
    assert answer["omitted"] == found.omitted and answer["threshold"] == found.threshold
    assert [word["word"] for word in answer["words"] if word["flagged"]] == found.omitted
    assert answer["threshold_meaning"].startswith("calibrated")


def test_the_long_sentence_gets_a_word_of_each_phrase_it_drops_flagged_and_none_it_translates():
    """The issue's long sentence (70 words of its phrases, docs/explanations.md): en-de's own translation ("Auf dem
    alten Markt wartet eine Gruppe von Menschen, die neben einem großen Kind auf dem Eis und einer roten Tasche auf
    dem Eis liegen, während ein anderer Mädchen in einem roten Mantel auf dem Eis verkauft.") drops the bus, the
    fruit to two young girls, the bread for the family (a clause that only its longer runs find) and the dog in the
    shade; what it translates (the old market, the ice, the red coat) is not flagged."""
    model = load("en-de")
    answer = model.detach(LONG, model.trace(LONG)["target_tokens"])["omissions"]
    omitted = set(answer["omitted"])
    for dropped in ({"bus"}, {"fruit", "young"}, {"bread", "family"}, {"dog", "shade", "fountain"}):
        assert dropped <= omitted, (dropped, answer["omitted"])
    assert not omitted & {"old", "market", "group", "people", "child", "ice", "woman", "red", "coat"}


def test_detach_answers_omissions_on_a_converted_hub_model_and_bad_input_clearly(translators_of_each_kind):
    model = Model(translators_of_each_kind["t5-like"], "t5-like")
    answer = model.detach("A man and a woman run in the park .", "Ein Mann .")["omissions"]
    assert answer["unavailable"] is None and answer["threshold"] == DEFAULT_THRESHOLD
    assert answer["words"][0]["word"].lower() == "a" and answer["words"][-1]["contrastive"] is None  # the full stop
    assert answer["threshold_meaning"] == "a default, not calibrated for this model"
    one = model.detach("Hello", "Hallo")["omissions"]
    assert one["unavailable"].startswith("The source has no word that could be left out") and one["words"] == []
    with pytest.raises(AnswerError, match="input is empty"):
        model.detach("   ", "Hallo")
    with pytest.raises(AnswerError, match="it is empty"):
        model.detach("A dog runs .", ["<eos>"])


def test_the_command_ranks_pairs_by_their_worst_omission_and_evaluates_by_construction(toy_checkpoints, tmp_path,
                                                                                        capsys):
    root, data = toy_checkpoints
    checkpoint = root / "toy-en-de"
    sources, translations = tmp_path / "sources.txt", tmp_path / "translations.txt"
    sources.write_text("a red dog runs in the park .\na man and a woman run .\n", encoding="utf-8")
    translations.write_text("ein roter hund rennt im park .\nein mann .\n", encoding="utf-8")
    out = tmp_path / "ranked.json"
    command.main(["--checkpoint", str(checkpoint), "--omissions", "--pairs", str(sources), str(translations),
                  "--out", str(out)])
    rows = json.loads(out.read_text(encoding="utf-8"))
    assert sorted(row["line"] for row in rows) == [1, 2] and rows[0]["worst"] >= rows[1]["worst"]
    assert {"worst_word", "left_out", "mistranslated", "made_up", "verdict", "judged_by"} <= set(rows[0])
    metrics_before = (checkpoint / "metrics.json").read_text(encoding="utf-8")
    report_path = tmp_path / "evaluation.json"
    try:
        command.main(["--checkpoint", str(checkpoint), "--omissions", "--evaluate", "--calibrate", "--data",
                      str(data), "--sentences", "12", "--out", str(report_path)])
        report = json.loads(report_path.read_text(encoding="utf-8"))
        signals = report["signals"]
        assert set(signals) == {"contrastive", "contribution"} and report["calibrated_on"] + \
            report["evaluated_on"] == report["scored"]
        assert all(0 <= signals["contrastive"][name] <= 1 for name in ("recall", "precision", "own_flagged", "auc"))
        written = json.loads((checkpoint / "metrics.json").read_text(encoding="utf-8"))["omissions"]
        assert written["threshold"] == report["threshold"] and "--calibrate" in written["command"]
        assert "thresholds from the first" in capsys.readouterr().out
    finally:
        (checkpoint / "metrics.json").write_text(metrics_before, encoding="utf-8")


def test_the_page_looks_for_words_left_out_once_a_decoding_is_drawn_and_marks_them(events, services, monkeypatch):
    """The page's own event after a new decoding (ui/omissions.py): the verdict names the phrases left out, the
    source words under it and below the view are marked, and so are the heatmap's source keys; the translation is
    not drawn again."""
    from attention_inspector.ui import listeners
    from attention_inspector.ui.omissions import LEFT_OUT_MARK, find_omissions
    from attention_inspector.viz.views import LEFT_OUT

    translator = services.translators["toy-en-de"]
    session = events.translate("A red dog runs in a park .")["session"]
    assert not any(session.unknown)
    outputs = [*listeners.view_outputs(events.page, writes=False, words=False), events.page.source_tokens]
    view = ("cross", 1, 0, "weights", 2, False, "pieces")
    out = events.run(find_omissions, session, view=view, outputs=outputs, writes=False)
    found = out["session"].current.omissions
    assert [word for word, _, _ in out["detachment"]["source"]] == found.words and "translation" not in out
    # No model here translates de into en: the toy's own contrastive conditioning alone, content words only.
    content = [word not in ("a", "in", ".") for word in found.words]
    assert [flag for _, flag, _ in out["detachment"]["source"]] == (found.flagged & content).tolist()
    assert "log p without it" in out["detachment"]["source"][1][2]
    assert "not judged" in out["detachment"]["source"][0][2]  # "a", a stop word
    # Every word flagged (a threshold under every score): the content words named, marked below and as keys.
    monkeypatch.setitem(translator.metrics, "omissions", {"threshold": -1e9, "split": "a test"})
    flagged = events.run(find_omissions, session, view=view, outputs=outputs, writes=False)
    part = flagged["detachment"]
    assert part["plain"].startswith("May have left out: “red dog runs”, “park”")
    assert [mark for _, mark in flagged["source_tokens"]] == \
        [None, LEFT_OUT_MARK, LEFT_OUT_MARK, LEFT_OUT_MARK, None, None, LEFT_OUT_MARK, None, None]
    keys = json.loads(flagged["attention"])["layout"]["xaxis"]["ticktext"]
    assert keys[1].endswith(LEFT_OUT.strip()) and not keys[0].endswith(LEFT_OUT.strip())
    again = events.run(find_omissions, flagged["session"], view=view, outputs=outputs, writes=False)
    assert "detachment" not in again  # looked for once per decoding


def test_detach_over_http_looks_for_omissions_in_the_trace_workers(server, services):
    from tests.test_http_api import call

    text = "A red dog runs in a park ."
    target = services.translators["toy-en-de"].trace(text).target_tokens
    event, answer = call(server, "v2/detach", json.dumps({"model": "toy-en-de", "text": text, "translation": target}))
    assert event == "complete"
    expected = Model(services.translators["toy-en-de"], "toy-en-de").detach(text, target)["omissions"]
    assert answer[0]["omissions"] == expected and len(expected["words"]) == 8


def test_a_gru_looks_for_words_left_out_by_contrastive_conditioning_alone_and_says_so(events, services):
    from attention_inspector.ui import listeners
    from attention_inspector.ui.omissions import find_omissions

    session = events.translate("A red dog runs in a park .", model="toy-rnn")["session"]
    out = events.run(find_omissions, session, view=("cross", 0, 0, "weights", 2, False, "pieces"),
                     outputs=[*listeners.view_outputs(events.page, writes=False, words=False),
                              events.page.source_tokens], writes=False)
    assert out["session"].current.omissions.contributions is None
    said = out["detachment"]["verdict"]
    assert "this model is a GRU: it has no residual stream for ALTI+" in said
    assert "by the translating model alone: no model here translates de into en" in said
    assert "ALTI+" not in out["detachment"]["source"][1][2]  # a word's hover: its contrastive score alone
