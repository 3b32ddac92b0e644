"""Converted Hub models in the app: every view, measure and intervention, the language menus of a multilingual
model, links and the JSON API (tiny random models of tests/hub_models.py, no server)."""

import gzip
import json
import sys
from functools import partial
from pathlib import Path

import pytest

from attention_inspector.model.hub.convert_hf import convert
from attention_inspector.model.keys import ALL_HEADS, CROSS, DECODER, ENCODER, GRADIENTS, MEAN, MEASURES
from attention_inspector.model.serving.checkpoint import load_checkpoint

sys.path.insert(0, str(Path(__file__).parent))
import hub_models  # noqa: E402

pytest.importorskip("transformers")
TEXT = "A man reads the newspaper in the park."


@pytest.fixture(scope="module")
def hub_events(tmp_path_factory):
    """The page for two converted Marian models (one English source, to compare), a converted NLLB model and a
    converted flan-t5-like model."""
    from conftest import Events

    from attention_inspector.model.api.services import Services
    from attention_inspector.ui import build_demo

    root = tmp_path_factory.mktemp("hub-app")
    models = (("opus-a", hub_models.marian, 0), ("nllb", hub_models.nllb, 1), ("opus-b", hub_models.marian, 5),
              ("flan", partial(hub_models.t5, gated=True), 4))
    translators = {name: load_checkpoint(convert(str(build(root / name, seed=seed)), root / "checkpoints" / name))
                   for name, build, seed in models}
    services = Services(translators, root=root / "checkpoints")
    return Events(build_demo(services), services)


def test_every_view_and_measure_draws_a_converted_model(hub_events):
    from attention_inspector.ui import operations

    answer = hub_events.translate(TEXT, model="nllb")
    session = answer["session"]
    assert session.trace.source_tokens[0] == "eng_Latn" and session.trace.target_tokens[0] == "deu_Latn"
    assert answer["src_lang"]["value"] == "eng_Latn" and answer["tgt_lang"]["value"] == "deu_Latn"
    assert answer["src_lang"]["visible"] and "fra_Latn" in answer["tgt_lang"]["choices"]
    for kind in (ENCODER, DECODER, CROSS):
        for head in (0, MEAN, ALL_HEADS):
            for measure in MEASURES:
                shown = hub_events.view(session, kind, 1, head, measure, 2, False)
                assert "Unknown" not in (shown.get("status") or ""), (kind, head, measure)
                # Gradients explain the decoder's predictions: the encoder's view shows them over the source.
                assert shown["session"].view.kind == (CROSS if kind == ENCODER and measure in GRADIENTS else kind)
    model_view = hub_events.view(session, CROSS, 0, MEAN, "weights", 2, True)
    assert model_view["attention"] is not None
    second = session.trace.top_tokens[1][1]  # the runner-up at step 2
    branched = hub_events.run(operations.branch, session, second, view=(CROSS, 0, MEAN, "weights", 2, False))
    assert branched["session"].current.trace.target_tokens[:2] == ["deu_Latn", second]
    masked = hub_events.run(operations.set_mask, session, ["cross.1.2", "encoder.2.1"])
    assert masked["session"].current.mask == ("cross.1.2", "encoder.2.1")
    beam = hub_events.run(operations.run_beam, session)
    assert all(tokens[0] == "deu_Latn" for tokens in beam["session"].beam.hypotheses)


def test_choosing_languages_translates_that_way_and_a_link_keeps_them(hub_events):
    from attention_inspector.ui import listeners
    from attention_inspector.ui.links import LinkSpec, link_of, open_link

    session = hub_events.translate(TEXT, model="nllb")["session"]
    answer = hub_events.run(listeners.change_languages, session, "nllb", TEXT, "fra_Latn", "spa_Latn")
    changed = answer["session"]
    assert (changed.src_lang, changed.tgt_lang) == ("fra_Latn", "spa_Latn")
    assert changed.trace.source_tokens[0] == "fra_Latn" and changed.trace.target_tokens[0] == "spa_Latn"
    assert answer["src_lang"] == "fra_Latn" and answer["tgt_lang"] == "spa_Latn"
    assert answer["source_tokens"][0][0].strip() == "fra_Latn"  # the tokens as the model reads them: not stale
    again = hub_events.translate("Zwei Hunde laufen.", model="nllb", session=changed)["session"]
    assert again.trace.target_tokens[0] == "spa_Latn"  # a new sentence keeps the languages chosen
    link = link_of(again).url_query()
    assert "src_lang=fra_Latn" in link and "tgt_lang=spa_Latn" in link
    reopened, message = open_link(hub_events.services, *LinkSpec.parse({k: [v] for k, v in
                                                                        [p.split("=") for p in link.split("&")]}))
    assert reopened.trace.target_tokens[0] == "spa_Latn", message
    refused = hub_events.run(listeners.change_languages, again, "nllb", TEXT, "fra_Latn", "xx_Yyyy")
    assert "no target language 'xx_Yyyy'" in refused["status"]
    assert refused["session"].tgt_lang == "spa_Latn" and refused["tgt_lang"] == "spa_Latn"  # the menu says so too


def test_a_one_way_model_hides_the_language_menus_and_compares_with_another(hub_events):
    from attention_inspector.ui import listeners, operations

    session = hub_events.translate(TEXT, model="nllb")["session"]
    answer = hub_events.run(listeners.translate_or_example, session, "opus-a", TEXT)
    assert not answer["src_lang"]["visible"] and not answer["tgt_lang"]["visible"]
    compared = hub_events.run(operations.compare, answer["session"], "opus-b")["session"]
    assert compared.compare.model == "opus-b"
    assert compared.compare.trace.target_tokens != compared.trace.target_tokens  # two different models


def test_the_api_takes_languages(hub_events):
    import gradio as gr

    from attention_inspector.ui.api import endpoints

    trace, detach, score, beam, attribute, patch, neuron = endpoints(hub_events.services)
    traced = trace("nllb", TEXT, src_lang="fra_Latn", tgt_lang="spa_Latn")
    assert traced["source_tokens"][0] == "fra_Latn" and traced["target_tokens"][0] == "spa_Latn"
    assert traced["forced"] == 1 and traced["source_contribution"] is not None
    scored = score("nllb", TEXT, traced["target_tokens"][1:], src_lang="fra_Latn", tgt_lang="spa_Latn")
    assert scored["target_tokens"] == traced["target_tokens"]
    detached = detach("nllb", TEXT, traced["target_tokens"], src_lang="fra_Latn", tgt_lang="spa_Latn")
    assert detached["target_tokens"] == traced["target_tokens"][1:]  # the given language code is not scored
    assert detached["scores"] == traced["detachment"]["scores"] and detached["scores"]["source_share"] is not None
    assert beam("nllb", TEXT, 2, tgt_lang="spa_Latn")["n_best"][0]["tokens"][0] == "spa_Latn"
    attributed = attribute("nllb", TEXT, "saliency", 2, src_lang="fra_Latn", tgt_lang="spa_Latn", units="words")
    assert attributed["source_words"][0] == "fra_Latn" and attributed["decoder_input_words"][:2] == ["<sos>",
                                                                                                   "spa_Latn"]
    assert len(attributed["steps"][0]["source"]) == len(attributed["source_words"])
    patched = patch("nllb", TEXT, TEXT.replace("man", "woman"), 2, src_lang="fra_Latn", tgt_lang="spa_Latn")
    assert patched["target_tokens"][0] == "spa_Latn" and set(patched["effects"]) == {"encoder", "decoder", "cross"}
    vectors = neuron("nllb", TEXT, "cross", 1, 1, 1, src_lang="fra_Latn", tgt_lang="spa_Latn")
    assert vectors["query_token"] == "spa_Latn" and vectors["key_tokens"][0] == "fra_Latn"  # the step after the code
    assert vectors["weights"] == pytest.approx(traced["cross_attention"][0][0][1], abs=1e-4)
    with pytest.raises(gr.Error, match="one direction only"):
        trace("opus-a", TEXT, tgt_lang="de")
    with pytest.raises(gr.Error, match="no source language"):
        trace("nllb", TEXT, src_lang=["eng_Latn"])


@pytest.mark.slow
def test_the_language_menus_in_the_browser(hub_events):
    """In Chromium: a link opens NLLB in the languages it names, the first step says the target code is given,
    and a model of one direction hides the menus."""
    import os
    import shutil

    from conftest import CHROMIUM, CHROMIUM_ARGS

    from attention_inspector.ui import launch_options

    if not shutil.which(CHROMIUM) and not os.environ.get("CI"):
        pytest.skip("Debian's chromium is not installed (.ci/run installs it)")
    from playwright.sync_api import sync_playwright

    demo = hub_events.page.demo
    demo.launch(server_name="127.0.0.1", server_port=None, prevent_thread_lock=True, quiet=True,
                **launch_options(hub_events.services))
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(f"{demo.local_url}?model=nllb&text=A%20man%20reads.&src_lang=fra_Latn&tgt_lang=spa_Latn")
            status = "document.querySelector('#status textarea')?.value"
            page.wait_for_function(f"{status}?.includes('Opened the link')", timeout=60000)
            assert page.locator("#src-lang input").input_value() == "fra_Latn"
            assert page.locator("#tgt-lang input").input_value() == "spa_Latn"
            page.click("#first")
            page.wait_for_function("document.querySelector('#step-text')?.innerText.includes('step 1 of')")
            assert 'is given "spa_Latn"' in page.locator("#step-text").inner_text()
            page.locator("#model input").click()
            page.get_by_role("option", name="opus-a").click()
            page.wait_for_function("!document.querySelector('#tgt-lang')?.checkVisibility()", timeout=60000)
            assert not page.locator("#src-lang").is_visible()
            browser.close()
    finally:
        demo.close()


@pytest.mark.slow
def test_a_view_in_words_steps_in_the_browser_as_python_builds_it(hub_events):
    """In Chromium: a link with units=words opens the flan-t5-like model's cross-attention in words (its
    sentencepiece pieces merged); every step the browser draws from the frames it holds is the figure Python builds
    for that step, word in the making included; and so is every step of integrated gradients chosen in *Show*."""
    import json
    import os
    import shutil
    from dataclasses import replace

    import numpy as np
    from conftest import CHROMIUM, CHROMIUM_ARGS

    from attention_inspector.model.keys import INTEGRATED_GRADIENTS
    from attention_inspector.ui import launch_options
    from attention_inspector.ui.operations import attribution_maps, gradient_trace
    from attention_inspector.ui.session import Decoding, to_arrays
    from attention_inspector.viz.views import attention_figure

    if not shutil.which(CHROMIUM) and not os.environ.get("CI"):
        pytest.skip("Debian's chromium is not installed (.ci/run installs it)")
    from playwright.sync_api import sync_playwright

    trace = replace(to_arrays(hub_events.services.translators["flan"].trace(TEXT)), units="words")
    assert any(len(word.pieces) > 1 for word in trace.at_step(CROSS, trace.steps - 1)[2])  # words of many pieces
    demo = hub_events.page.demo
    demo.launch(server_name="127.0.0.1", server_port=None, prevent_thread_lock=True, quiet=True,
                **launch_options(hub_events.services))
    drawn = """(step) => {
        const plot = document.querySelector('#attention .js-plotly-plot');
        if (!plot?.layout?.title.text.includes(`step ${step} of`)) return null;
        return {z: plot.data[0].z, y: plot.data[0].y, x: plot.data[0].x, title: plot.layout.title.text,
                shapes: (plot.layout.shapes || []).map(s => [s.x0, s.x1, s.y0, s.y1])};
    }"""
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(f"{demo.local_url}?model=flan&text={TEXT.replace(' ', '%20')}&units=words&kind=cross&layer=1&head=mean")
            page.wait_for_function("document.querySelector('#status textarea')?.value.includes('Opened the link')",
                                   timeout=60000)
            assert page.locator("#units input[value=words]").is_checked()
            for step in (1, 2, trace.steps // 2, trace.steps):
                page.fill("#step input[type=number]", str(step))
                page.press("#step input[type=number]", "Enter")
                page.wait_for_function(drawn, arg=step, timeout=15000)
                shown = page.evaluate(drawn, step)
                figure = json.loads(attention_figure(trace, CROSS, 0, MEAN, step - 1).to_json())
                heatmap = figure["data"][0]
                assert shown["title"] == figure["layout"]["title"]["text"]
                assert (shown["z"], shown["y"], shown["x"]) == (heatmap["z"], heatmap["y"], heatmap["x"])
                assert shown["shapes"] == [[s["x0"], s["x1"], s["y0"], s["y1"]] for s in figure["layout"]["shapes"]]
            # Show: integrated gradients at every step, in words, stepped in the browser as Python builds it.
            page.click("#measure input")
            page.get_by_role("option", name="integrated gradients", exact=True).click()
            page.wait_for_function("() => document.querySelector('#attention .js-plotly-plot')?.layout?.title.text"
                                   ".startsWith('Attribution of each step')", timeout=60000)
            results = hub_events.services.translators["flan"].attributions(TEXT, trace.target_tokens,
                                                                           INTEGRATED_GRADIENTS)
            decoding = Decoding("original", trace, "", measure_maps={INTEGRATED_GRADIENTS: attribution_maps(results)})
            attributed = replace(gradient_trace(decoding, INTEGRATED_GRADIENTS), units="words")
            for step in (2, trace.steps):
                page.fill("#step input[type=number]", str(step))
                page.press("#step input[type=number]", "Enter")
                page.wait_for_function(drawn, arg=step, timeout=15000)
                shown = page.evaluate(drawn, step)
                heatmap = json.loads(attention_figure(attributed, CROSS, 0, 0, step - 1).to_json())["data"][0]
                assert (shown["y"], shown["x"]) == (heatmap["y"], heatmap["x"])
                np.testing.assert_allclose(shown["z"], heatmap["z"], atol=1e-6)
            browser.close()
    finally:
        demo.close()


def test_a_t5_model_reads_its_prompt_and_every_view_and_measure_draws_it(hub_events):
    from attention_inspector.ui import listeners

    answer = hub_events.translate(TEXT, model="flan")
    session = answer["session"]
    source = "".join(session.trace.source_tokens).replace("▁", " ")
    assert source.startswith(" translate English to German: A man"), source  # the encoder reads the prompt
    assert answer["src_lang"]["choices"] == ["en"] and answer["tgt_lang"]["choices"] == ["de", "fr", "ro"]
    assert session.trace.forced == 0  # nothing is given in the target: T5 names the language in the prompt
    for kind in (ENCODER, DECODER, CROSS):
        for measure in MEASURES:
            shown = hub_events.view(session, kind, 1, MEAN, measure, 2, False)
            assert "Unknown" not in (shown.get("status") or ""), (kind, measure)
    changed = hub_events.run(listeners.change_languages, session, "flan", TEXT, "en", "ro")["session"]
    assert "Romanian:" in "".join(changed.trace.source_tokens).replace("▁", " ")
    refused = hub_events.run(listeners.change_languages, changed, "flan", TEXT, "de", "ro")
    assert "does not translate de→ro; it translates en→de, en→fr, en→ro" in refused["status"] and refused["session"].tgt_lang == "ro"


def test_a_branch_and_heads_off_compare_in_words(hub_events):
    """With *Words* on, the branch comparison, the effect of heads switched off, the probability chart and the
    source show words: a word's probability is its pieces' product, its change in log-probability their sum, and
    the word chosen is marked."""
    import json

    import numpy as np

    from attention_inspector.model.text.words import words
    from attention_inspector.ui import operations
    from attention_inspector.viz.whatif import FORCED

    in_pieces = (CROSS, 0, MEAN, "weights", 2, False, "pieces")
    session = hub_events.translate(TEXT, model="flan")["session"]
    second = session.trace.top_tokens[1][1]
    branched = hub_events.run(operations.branch, session, second, view=in_pieces)["session"]
    masked = hub_events.run(operations.set_mask, branched, ["cross.1.2"], view=in_pieces)["session"]
    shown = hub_events.view(masked, *in_pieces[:-1], "words")
    parent, child = masked.decodings[-2:]
    labels, spans = words(child.trace.target_tokens, child.trace.scheme)
    assert any(len(span) > 1 for span in spans)  # a word of several pieces, so words differ from pieces
    figure = json.loads(shown["comparison_plot"])
    np.testing.assert_allclose(figure["data"][1]["y"], [np.prod(child.trace.probabilities[s.start:s.stop])
                                                        for s in spans], rtol=1e-5)
    assert "each word's probability" in figure["layout"]["annotations"][0]["text"]
    chart = json.loads(shown["probabilities"])  # the chart of each chosen word's probability, and the source
    np.testing.assert_allclose(chart["data"][0]["y"], figure["data"][1]["y"], rtol=1e-5)
    source_words = words(child.trace.source_tokens, child.trace.scheme)[0]
    assert [text for text, _ in shown["source_tokens"]] == [f"{word} " for word in source_words]
    assert len(source_words) < len(child.trace.source_tokens)
    effect = child.effect
    base, base_spans = words(effect.base_tokens, child.trace.scheme)
    change = json.loads(shown["mask_effect_plot"])["data"][0]["y"]
    np.testing.assert_allclose(change, [effect.change[s.start:s.stop].sum() for s in base_spans], rtol=1e-5)
    new = words(effect.new_tokens, child.trace.scheme)[0]
    assert [text for text, _ in shown["masked_translation"]] == [f"{word} " for word in new]
    # The branch's comparison marks the word the user chose.
    back = hub_events.run(operations.go_to, masked, 1, view=in_pieces)["session"]  # the breadcrumb's branch
    branch_view = hub_events.view(back, *in_pieces[:-1], "words")
    chosen = [text for text, mark in branch_view["comparison"] if mark == FORCED]
    labels, spans = words(branched.trace.target_tokens, branched.trace.scheme)
    assert chosen == [labels[next(i for i, s in enumerate(spans) if 1 in s)] + " "]


def test_a_hub_model_is_scored_on_detokenized_text_in_its_directions(hub_events, tmp_path):
    """model.training.evaluate scores a converted model's detokenized output with sacreBLEU, and its word-level BLEU on
    spaCy words of that text (never on its sentencepiece pieces); a multilingual model on the Multi30k pair of the
    languages asked for."""
    import sacrebleu

    from attention_inspector.model.text.vocab import Tokenizer
    from attention_inspector.model.training.evaluate import evaluate, multi30k_language
    from tests.conftest import write_parallel

    data = write_parallel(tmp_path, sizes=(("test_2016_flickr", 6),))
    assert [multi30k_language(code) for code in ("eng_Latn", "de_DE", "fr", "ces_Latn")] == ["en", "de", "fr", "cs"]
    for name, languages in (("opus-a", (None, None)), ("nllb", ("eng_Latn", "deu_Latn"))):
        translator = hub_events.services.translators[name]
        metrics, translations = evaluate(translator, str(data), "test", 1, 1.0, *languages)
        references = [line.strip() for line in gzip.open(data / "test_2016_flickr.de.gz", "rt", encoding="utf-8")]
        assert metrics["bleu"] == round(sacrebleu.corpus_bleu(translations, [references]).score, 2)
        words = Tokenizer("de", lowercase=True).words_all(translations)
        assert metrics["hypothesis_words"] == sum(map(len, words)), name  # spaCy words of the text, not pieces


def test_a_hub_model_gets_a_head_report_and_opens_on_its_best_head(hub_events, tmp_path):
    """model.analysis.heads works on a converted model, over the Multi30k pair of its direction or over a user's own two
    files (a multilingual model too); until it has run, the page says the model has no head report; after, with no
    restart, it opens on the cross-attention head that aligns best (the app looks at heads.json once a second)."""
    import shutil
    import time

    from attention_inspector.model.analysis import heads
    from attention_inspector.model.serving.catalog import REPORT_LOOK_S, Catalog
    from tests.conftest import write_parallel
    from attention_inspector.model.api.services import Services
    from attention_inspector.ui import operations

    root = tmp_path / "checkpoints"
    for name in ("opus-a", "nllb"):
        shutil.copytree(hub_events.services.root / name, root / name)
    services = Services(Catalog(root), root=root)
    for name in ("opus-a", "nllb"):
        said = operations.translate(services, None, name, TEXT)[1]
        assert f"{name} has no head report yet" in said and services.best_head(name) is None
    data = write_parallel(tmp_path, sizes=(("train", 200), ("val", 10)))
    heads.main(["--checkpoint", str(root / "opus-a"), "--data", str(data), "--split", "val", "--threads", "1"])
    sources, targets = tmp_path / "mine.en", tmp_path / "mine.de"
    sources.write_text("A dog runs.\nTwo men read a book.\nA child plays in the park.\n", encoding="utf-8")
    targets.write_text("Ein Hund rennt.\nZwei Männer lesen ein Buch.\nEin Kind spielt im Park.\n", encoding="utf-8")
    heads.main(["--checkpoint", str(root / "nllb"), "--pairs", str(sources), str(targets), "--threads", "1"])
    report = json.loads((root / "nllb" / "heads.json").read_text())
    assert report["sentences"] == 3 and "mine.en" in report["split"] and "these sentences alone" in \
        report["statistics"]["alignments"]
    assert report["direction"] == {"src_lang": "eng_Latn", "tgt_lang": "deu_Latn"}  # its default, measured
    nllb = services.translators["nllb"]  # read as the app reads it: the language codes first
    src_ids, tgt_ids = nllb.reference_ids(["▁A"], ["▁Ein"], "fra_Latn", "eng_Latn")
    assert nllb.src_vocab.itos[src_ids[0]] == "fra_Latn" and nllb.tgt_vocab.itos[tgt_ids[0]] == "eng_Latn"
    heads.main(["--checkpoint", str(root / "nllb"), "--pairs", str(targets), str(sources), "--src-lang", "deu_Latn",
                "--tgt-lang", "eng_Latn", "--threads", "1", "--statistics-only"])
    with pytest.raises(SystemExit, match="no source language 'xx'"):
        heads.main(["--checkpoint", str(root / "nllb"), "--pairs", str(targets), str(sources), "--src-lang", "xx",
                    "--overwrite"])
    with pytest.raises(SystemExit, match="with --pairs"):
        heads.main(["--checkpoint", str(root / "nllb"), "--src-lang", "deu_Latn", "--overwrite"])
    time.sleep(REPORT_LOOK_S)
    for name in ("opus-a", "nllb"):
        best = services.best_head(name)
        session, said = operations.translate(services, None, name, TEXT)
        assert best is not None and (session.view.kind, session.view.layer, session.view.head) == (CROSS, *best)
        assert "no head report" not in said
    targets.write_text("Ein Hund rennt.\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="has 3 lines and .* 1"):
        heads.main(["--checkpoint", str(root / "nllb"), "--pairs", str(sources), str(targets), "--overwrite"])
