"""The notebook views (attention_inspector/notebook.py): the page's own figures and parts in one value, drawn by the
page's own scripts in Chromium from a file and from a notebook's output, stepping with → and the menus; the example
notebook executed as a user runs it; bad arguments refused with a reason."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import attention_inspector as ai
from attention_inspector import notebook
from attention_inspector.model.serving.inspect import encode, load_trace, trace_record
from attention_inspector.viz.views import OFF
from tests.conftest import CHROMIUM, CHROMIUM_ARGS, model_rounding
from tests.pages import step_button_lines

TEXT = "A dog runs in the park."
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def toy(toy_checkpoints):
    return ai.load(toy_checkpoints[0] / "toy-en-de")


@pytest.fixture(scope="module")
def browser():
    if not shutil.which(CHROMIUM) and not os.environ.get("CI"):
        pytest.skip("Debian's chromium is not installed (.ci/run installs it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


def expect(locator):
    from playwright.sync_api import expect as expected

    return expected(locator)


def opened(browser, path: Path):
    """A page of `path`, once its view has drawn; the script errors it met are in `page.errors`."""
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.errors = []
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    page.goto(path.as_uri())
    return page


def title(frame) -> str:
    return frame.locator("#attention .gtitle").first.text_content()


def test_the_view_is_the_pages_own_answer(toy, events):
    """The core view's parts and the heatmap are the page's answer for the same sentence and view, and every entry
    of the menus opens a figure the page would draw."""
    answer = events.translate(TEXT, view=("cross", 1, "mean", "weights", 2, False, "pieces"))
    view = toy.show(TEXT, kind="cross", layer=2, head="mean", step=2)
    core, value = view.value["core"], view.value
    assert core["translation"] == answer["translation"]
    assert core["attention"] == answer["attention"]
    assert core["candidates"] == answer["candidates"] and json.dumps(core["steps"]) == answer["step_text"]
    assert core["detachment"]["plain"].startswith(("Looks faithful", "May have"))
    assert value["view"] == {"kind": "cross", "layer": 1, "head": "mean", "step": 2, "model": False}
    trace, session = answer["session"].trace, answer["session"]
    for kind in trace.available():
        assert value["embedded"][kind] == list(range(trace.layers(kind)))  # a small model: every layer
        for layer in range(trace.layers(kind)):
            for _, head in value["menus"][kind]["heads"]:  # each figure: the page's own for its kind, layer, head
                shown = events.view(session, kind, layer, head, "weights", 2, False, "pieces")
                drawn = shown.get("attention", answer["attention"])  # the view on screen is not drawn again
                assert value["figures"][f"{kind}/{layer}/{head}"] == drawn, (kind, layer, head)
        every = events.view(session, kind, 0, "mean", "weights", 2, True, "pieces")
        assert value["figures"][f"{kind}/model"] == every["overview"], kind


def test_words_heads_off_and_the_views_of_every_head(toy):
    words = toy.show(TEXT, units="words", mask=["cross.1.1"], layer=1, head=1)
    assert words.value["core"]["status"].startswith("1 head off")
    assert OFF in words.value["core"]["attention"]  # the head switched off, as the page says it
    head_view = ai.head_view(toy, TEXT, layer=1)
    assert head_view.value["core"]["attention"] == head_view.value["figures"]["cross/0/all"]
    model_view = ai.model_view(toy, TEXT, kind="encoder")
    assert model_view.value["view"]["model"] and model_view.value["view"]["kind"] == "encoder"
    assert model_view.value["core"]["attention"] == model_view.value["figures"]["encoder/model"]


def test_a_large_model_holds_the_layer_it_opens_on_and_says_so(toy, monkeypatch):
    monkeypatch.setattr(notebook, "FIGURES", 10)
    view = toy.show(TEXT, layer=2)
    assert view.value["embedded"]["cross"] == [1] and set(view.value["embedded"]) == {"encoder", "decoder", "cross"}
    assert view.value["note"] == ("This view holds encoder self-attention: layer 2; decoder self-attention: layer 2; "
                                  "cross-attention: layer 2. show(..., layers=[...]) holds others (a larger file).")
    chosen = toy.show(TEXT, layers=[1, 2])
    assert chosen.value["embedded"]["cross"] == [0, 1] and "cross/0/mean" in chosen.value["figures"]


def unequal(toy, heads_of_cross: int | None = None) -> dict:
    """The toy's /trace answer made into a model of 4 encoder layers (its 2 twice), 1 decoder and 1 cross-attention
    layer (its first), cross-attention cut to its first `heads_of_cross` heads: a view's packing by hand."""
    record = toy.trace(TEXT)
    encoder = record["encoder_attention"]
    return {**record, "encoder_attention": encoder + encoder, "decoder_attention": record["decoder_attention"][:1],
            "cross_attention": [layer[:heads_of_cross] for layer in record["cross_attention"][:1]]}


EVERY_HEAD = [["Mean of heads", "mean"], ["All heads", "all"], ["Head 1", 0], ["Head 2", 1], ["Head 3", 2],
              ["Head 4", 3]]


def test_a_view_holds_every_layer_up_to_its_figures_and_else_the_ones_chosen_with_a_note_that_says_which(
        toy, monkeypatch):
    record = unequal(toy)
    whole = ai.show_trace(record, kind="encoder", layer=2).value
    assert whole["embedded"] == {"encoder": [0, 1, 2, 3], "decoder": [0], "cross": [0]} and whole["note"] == ""
    assert json.loads(json.dumps(whole["menus"])) == {
        "kinds": [["Encoder self-attention", "encoder"], ["Decoder self-attention", "decoder"],
                  ["Cross-attention", "cross"]],
        "encoder": {"layers": [["Layer 1", 0], ["Layer 2", 1], ["Layer 3", 2], ["Layer 4", 3]], "heads": EVERY_HEAD},
        "decoder": {"layers": [["Layer 1", 0]], "heads": EVERY_HEAD},
        "cross": {"layers": [["Layer 1", 0]], "heads": EVERY_HEAD}}
    assert {"encoder/model", "decoder/model", "cross/model"} <= set(whole["figures"])  # each kind's every layer x head
    assert len(whole["figures"]) == 6 * 6 + 3 and whole["core"]["revision"] >= 1  # a page's answer, not as built
    monkeypatch.setattr(notebook, "FIGURES", 36)  # (4 + 1 + 1) layers x 6 entries: all of them, still
    assert ai.show_trace(record).value["embedded"]["encoder"] == [0, 1, 2, 3]
    monkeypatch.setattr(notebook, "FIGURES", 35)
    one = ai.show_trace(record, kind="encoder", layers=[2]).value
    # The decoder has no layer 2: it holds its last; its one layer is all it has, so the note leaves it out.
    assert one["embedded"] == {"encoder": [1], "decoder": [0], "cross": [0]}
    assert one["note"] == ("This view holds encoder self-attention: layer 2. show(..., layers=[...]) holds others "
                           "(a larger file).")
    assert {"encoder/model", "decoder/model", "cross/model"} <= set(one["figures"])
    assert ai.show_trace(record, kind="encoder", layers=[1, 2]).value["note"].startswith(
        "This view holds encoder self-attention: layers 1, 2. show(")
    chosen = ai.show_trace(record, kind="encoder", layer=3, layers=[1, 2, 4]).value
    assert chosen["embedded"]["encoder"] == [0, 1, 3] and chosen["note"].startswith(
        "This view holds encoder self-attention: layers 1, 2, 4. show(")
    # Opened on a layer it does not hold, it shows the last it holds.
    assert chosen["view"]["layer"] == 3 and chosen["core"]["attention"] == chosen["figures"]["encoder/3/mean"]


def test_a_gru_models_view_offers_its_one_kind_of_attention(toy_checkpoints):
    value = ai.show(toy_checkpoints[0] / "toy-rnn", TEXT).value
    assert value["menus"]["kinds"] == [("Cross-attention", "cross")] and set(value["embedded"]) == {"cross"}


def test_a_kind_of_one_head_has_its_every_layer_x_head_figure_too(toy):
    value = ai.show_trace(unequal(toy, heads_of_cross=1), kind="cross").value
    assert value["menus"]["cross"]["heads"] == [("Head 1", 0)] and "cross/model" in value["figures"]
    assert json.loads(value["figures"]["cross/model"])["data"]


def test_a_trace_file_and_the_apis_trace_show_as_the_model_does(toy, tmp_path):
    shown = toy.show(TEXT, layer=2, head=1, step=3)
    asked = toy.trace(TEXT)
    from_api = ai.show_trace(asked, layer=2, head=1, step=3)
    translator = toy.translator
    traced = translator.trace(TEXT)
    record = trace_record("toy-en-de", translator.model.config.to_dict(), TEXT, traced.text,
                          source_tokens=traced.source_tokens, target_tokens=traced.target_tokens,
                          top_tokens=traced.top_tokens, probabilities=traced.trace.probabilities,
                          top_probabilities=traced.trace.top_probabilities,
                          encoder_attention=traced.trace.encoder_attention,
                          decoder_attention=traced.trace.decoder_attention,
                          cross_attention=traced.trace.cross_attention, scheme=traced.scheme)
    (tmp_path / "trace.npz").write_bytes(encode(record, "npz"))
    from_file = ai.show_trace(tmp_path / "trace.npz", layer=2, head=1, step=3)
    assert load_trace(tmp_path / "trace.npz")["translation"] == traced.text
    expected = json.loads(shown.value["core"]["attention"])
    for view in (from_api, from_file):
        assert view.value["core"]["translation"] == shown.value["core"]["translation"]
        figure = json.loads(view.value["core"]["attention"])
        assert figure["layout"]["meta"]["titles"] == expected["layout"]["meta"]["titles"]
        assert figure["data"][0]["x"] == expected["data"][0]["x"]
        np.testing.assert_allclose(figure["data"][0]["z"], expected["data"][0]["z"], atol=1e-4)  # /trace rounds


def test_the_examples_trace_opens_on_a_head_that_is_on_and_says_whether_it_rests_on_its_source():
    """docs/notebook.ipynb's show_trace: en-de's trace with cross.3.5 off, opened on head 4 of layer 3 in words, is
    drawn (not the "switched off" note) under the verdict line the page shows for that translation and mask."""
    cell = next("".join(cell["source"]) for cell in json.loads((ROOT / "docs" / "notebook.ipynb").read_text())["cells"]
                if "ai.show_trace(" in "".join(cell["source"]))
    mask = json.loads(re.search(r"mask=(\[[^]]*\])", cell).group(1))
    layer, head = map(int, re.search(r"show_trace\(.*layer=(\d+), head=(\d+)", cell).groups())
    assert f"cross.{layer}.{head}" not in mask  # the example opens on a head that is on
    model = ai.load("en-de")
    text = re.search(r'model\.trace\("([^"]+)"', cell).group(1)
    view = ai.show_trace(model.trace(text, mask=mask), units="words", layer=layer, head=head)
    titles = json.loads(view.value["core"]["attention"])["layout"]["meta"]["titles"]
    assert view.value["view"]["head"] == head - 1 and f"head {head}" in titles[0]
    assert OFF not in view.value["core"]["attention"]
    shown = ai.show(model, text, mask=mask, units="words", layer=layer, head=head)
    assert view.value["core"]["detachment"]["plain"].startswith(("Looks faithful", "May have"))
    # The page adds the judge's verdict (model/explain/verdict.py), which needs the models, to the same numbers.
    trace_part, page_part = view.value["core"]["detachment"], shown.value["core"]["detachment"]
    assert page_part["verdict"].startswith(trace_part["verdict"]) and "judged by de-en" in page_part["verdict"]
    assert len(page_part["words"]) == len(trace_part["words"]) and all(
        page[0] == trace[0] and page[2].startswith(trace[2])
        for page, trace in zip(page_part["words"], trace_part["words"]))


@pytest.mark.parametrize("arguments, said", [
    ({"kind": "self"}, "kind is one of encoder, decoder, cross"),
    ({"layer": 0}, "layer counts from 1 to 2"), ({"layer": 9}, "layer counts from 1 to 2"),
    ({"head": 99}, "head counts from 1 to"), ({"head": "every"}, "or one of mean, all"),
    ({"units": "letters"}, "units is 'pieces' or 'words'"), ({"step": 0}, "step counts from 1"),
    ({"layers": [7]}, "layer counts from 1 to 2"), ({"mask": ["cross.9.9"]}, "cross.9.9"),
])
def test_a_bad_argument_is_refused_with_its_reason(toy, arguments, said):
    with pytest.raises(ValueError, match=re.escape(said)):
        toy.show(TEXT, **arguments)


def test_bad_sentences_and_traces_are_refused_with_their_reason(toy, toy_checkpoints):
    with pytest.raises(ValueError, match="empty"):
        toy.show("   ")
    with pytest.raises(ValueError, match="show_trace takes a trace file"):
        ai.show_trace(42)
    with pytest.raises(ValueError, match="merged into words"):
        ai.show_trace(toy.trace(TEXT, units="words"))
    with pytest.raises(ValueError, match="kind is one of cross"):
        ai.show(toy_checkpoints[0] / "toy-rnn", TEXT, kind="encoder")  # a GRU has cross-attention only
    with pytest.raises(ValueError, match="include_plotlyjs"):
        toy.show(TEXT, include_plotlyjs="inline").to_html()


def test_a_views_text_form_is_a_short_summary_of_what_it_shows(toy):
    """Issue 79: a view's plain-text form (its repr, IPython's pretty print, the text/plain a notebook stores beside
    the HTML) was the whole value, 0.6-3.8 MB; a view shown in a plain REPL printed ~635 KB. It is a few lines under
    1 KB: which view, the model, the sentence and its translation, the view's kind, layer, head and step, what it
    holds and how to see it; the HTML form is the page as before."""
    from IPython.core.formatters import DisplayFormatter
    from IPython.lib.pretty import pretty

    translation = toy.trace(TEXT)["translation"]
    views = {"view": (toy.show(TEXT, layer=2, head=1, step=3), "cross-attention, layer 2, head 1, step 3 of"),
             "head view": (ai.head_view(toy, TEXT, layer=1), "cross-attention, layer 1, every head, step "),
             "model view": (ai.model_view(toy, TEXT, kind="encoder"), "encoder self-attention, every layer × head"),
             "neuron view": (ai.neuron_view(toy, TEXT, "cross", 2, 3, 1),
                             f'cross.2.3, query 1 ("{toy.trace(TEXT)["decoder_input_tokens"][1]}")'),
             "trace view": (ai.show_trace(toy.trace(TEXT), layer=2),
                            "cross-attention, layer 2, mean of heads, step 1 of")}
    for what, (view, says) in views.items():
        text = repr(view)
        assert len(text.encode()) < 1000 and text.count("\n") <= 8, (what, len(text), text)
        assert text.startswith(f"<attention_inspector {what}: "), text
        assert says in text, (what, text)
        assert translation in text and (f"toy-en-de, {says}" in text if what != "trace view" else
                                        "model not recorded, " in text and "a dog runs in the park ." in text), text
        assert TEXT in text or what == "trace view"  # /trace answers the source's tokens, not its text
        assert pretty(view) == text
        data, _ = DisplayFormatter().format(view)
        assert data["text/plain"] == text and data["text/html"] == view._repr_html_()
        assert len(data["text/html"]) > 1e6  # the page itself, plotly.js inside
    assert "holds" in repr(views["view"][0]) and ".write_html(" in repr(views["view"][0])
    long = " ".join(["A man plays with a red ball in the park."] * 5)
    text = repr(toy.show(long, mask=["cross.1.1", "cross.1.2", "cross.2.1"]))
    assert len(text.encode()) < 1000 and "source:      A man plays with a red ball" in text and "…" in text, text


def test_user_text_is_never_html(toy):
    page = toy.show("<script>alert(1)</script> A dog.").to_html()
    assert "<script>alert(1)</script>" not in page  # the title escaped, the value packed


@pytest.mark.slow
def test_the_page_draws_steps_and_switches_views_in_chromium(toy, browser, tmp_path):
    view = toy.show(TEXT, layer=2, head=1, step=2)
    page = opened(browser, view.write_html(tmp_path / "view.html"))
    page.wait_for_selector("body[data-ready=true]")
    page.wait_for_selector("#attention .main-svg")
    trace = toy.trace(TEXT)
    assert page.locator("#translation textarea").input_value() == trace["translation"]
    assert "layer 2, head 1" in title(page) and "step 2 of" in title(page)
    keys = page.locator("#attention .xtick text").all_text_contents()
    assert keys == [token for token in trace["source_tokens"]]
    page.keyboard.press("ArrowRight")
    expect(page.locator("#step-number")).to_have_text(re.compile("^Step 3 of"))
    expect(page.locator("#attention .gtitle").first).to_contain_text("step 3 of")
    expect(page.locator("#step-text .step-text")).to_have_text(re.compile("^step 3 of"))
    assert page.locator("#step").input_value() == "3"
    page.select_option("#kind", "encoder")
    expect(page.locator("#attention .gtitle").first).to_have_text(re.compile("^Encoder self-attention, layer 2"))
    page.check("#model-view")
    expect(page.locator("#attention .gtitle").first).to_contain_text("all layers x heads")
    assert page.locator("#head").is_disabled() and page.locator("#layer").is_disabled()
    assert page.errors == []


def test_the_neuron_view_answers_what_the_api_answers_and_moves_with_the_step_in_chromium(toy, browser, tmp_path):
    view = ai.neuron_view(toy, TEXT, "cross", 2, 3, 1)
    figure = json.loads(view.value["core"]["neuron"]["figure"])
    frames = figure["layout"]["meta"]["frames"]
    for step in (1, 2):
        shown = 5e-7 + model_rounding(toy.translator.model.config)  # the API's 6 decimals, and another pass
        assert frames[step]["data"][4]["x"] == pytest.approx(toy.neuron(TEXT, "cross", 2, 3, step)["weights"],
                                                             abs=shown)
    assert view.value["view"]["step"] == 2  # opened on the row asked
    page = opened(browser, view.write_html(tmp_path / "neuron.html"))
    page.wait_for_selector("#neuron .main-svg")
    expect(page.locator("#neuron .gtitle").first).to_contain_text("cross.2.3")
    page.keyboard.press("ArrowRight")
    read = toy.trace(TEXT)["decoder_input_tokens"][2]
    expect(page.locator("#neuron .gtitle").first).to_contain_text(f"query: {read}")
    page.click("#neuron .neuron-close")
    expect(page.locator("#neuron")).to_have_class(re.compile("empty"))
    assert page.errors == []


@pytest.mark.parametrize("arguments, said", [
    ({"head": "mean"}, "the neuron view shows a single head"), ({"query": 99}, "query is a row of the heatmap"),
    ({"kind": "encoder", "query": -1}, "query is a row of the heatmap"), ({"layer": 3}, "layer counts from 1 to 2"),
])
def test_a_neuron_view_of_what_the_model_lacks_is_refused(toy, arguments, said):
    with pytest.raises(ValueError, match=re.escape(said)):
        ai.neuron_view(toy, TEXT, **{"kind": "cross", "layer": 1, "head": 1, **arguments})


# Runs in the notebook's kernel's venv, from docs/: the example executed as Jupyter runs it, written where asked.
EXECUTE = """import sys, nbclient, nbformat
book = nbformat.read("notebook.ipynb", as_version=4)
nbclient.NotebookClient(book, timeout=600, kernel_name="python3", resources={"metadata": {"path": "."}}).execute()
nbformat.write(book, sys.argv[1])
"""


@pytest.mark.slow
def test_a_notebook_runs_the_example_and_its_view_draws_inline(browser, tmp_path):
    """docs/notebook.ipynb executed as its first cell says (nbclient, a fresh kernel): in a copy of the checkout
    where its install line was run in docs/, into a venv of its own, from docs/ with no PYTHONPATH. Every cell
    runs with no error and nothing on stderr (no warning box); its views are its outputs, each with a plain text of
    a few lines beside its HTML (issue 79: it was the view's whole value, 0.6-3.8 MB each, 34 MB in all), the neuron
    view's among them, and the first, put in a page as a notebook puts it, draws in its frame, grows to its height
    and steps with →; the neuron view draws its panel."""
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("nbclient")
    from tests.test_install import PACKAGED, fresh_venv

    checkout = tmp_path / "checkout"
    checkout.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, checkout / name)
    for folder in (*PACKAGED, "docs"):
        shutil.copytree(ROOT / folder, checkout / folder, ignore=shutil.ignore_patterns("__pycache__", "*.partial.*"))
    said = "".join(nbformat.read(ROOT / "docs" / "notebook.ipynb", as_version=4).cells[0].source)
    install = re.search(r"`(pip install [^`]+)`", said).group(1)
    assert install == "pip install .."  # one line, run in docs/ (offline here: no index, the venv's dependencies)
    python, _ = fresh_venv(tmp_path / "env")
    environment = {name: value for name, value in os.environ.items() if name not in ("PYTHONPATH", "CHECKPOINTS")}
    installed = subprocess.run([python, "-m", *install.split(), "--no-deps", "--no-build-isolation", "--no-index",
                                "-q"], cwd=checkout / "docs", capture_output=True, text=True, timeout=600,
                               env=environment)
    assert installed.returncode == 0, installed.stderr
    executed = subprocess.run([python, "-c", EXECUTE, str(tmp_path / "executed.ipynb")], cwd=checkout / "docs",
                              capture_output=True, text=True, timeout=900, env=environment)
    assert executed.returncode == 0, executed.stderr[-3000:]
    book = nbformat.read(tmp_path / "executed.ipynb", as_version=4)
    outputs = [output for cell in book.cells if cell.cell_type == "code" for output in cell.get("outputs", [])]
    assert [output for output in outputs if output.output_type == "error" or output.get("name") == "stderr"] == []
    views = [output["data"]["text/html"] for cell in book.cells if cell.cell_type == "code"
             for output in cell.get("outputs", []) if "text/html" in output.get("data", {})]
    assert len(views) >= 5 and all(view.startswith("<iframe srcdoc=") for view in views)
    texts = [output["data"]["text/plain"] for output in outputs if "text/plain" in output.get("data", {})]
    assert all(len(text.encode()) < 1000 for text in texts), max(texts, key=len)[:300]
    summaries = [text for text in texts if text.startswith("<attention_inspector ")]
    assert len(summaries) == len(views)  # each view's text says what it shows, not its data
    neuron = next(html for html, text in zip(views, summaries) if text.startswith("<attention_inspector neuron view: "))
    assert (checkout / "docs" / "view.html").stat().st_size > 1e6  # the example writes one, plotly.js inside
    host = tmp_path / "notebook-output.html"
    host.write_text(f"<!doctype html><html><body><h1>Out[3]</h1>{views[0]}</body></html>", encoding="utf-8")
    page = opened(browser, host)
    frame = page.frame_locator("iframe")
    frame.locator("body[data-ready=true]").wait_for()
    frame.locator("#attention .main-svg").first.wait_for()
    sentence = re.search(r'SENTENCE = "(.*)"', "".join(cell.source for cell in book.cells)).group(1)
    source = ai.load("en-de").trace(sentence)["source_tokens"]
    assert frame.locator("#attention .xtick text").all_text_contents() == source
    height = page.locator("iframe").evaluate("frame => frame.getBoundingClientRect().height")
    assert height >= frame.locator("#candidates").evaluate("box => box.getBoundingClientRect().bottom")
    step = int(frame.locator("#step-number").text_content().split()[1])
    frame.locator("#next").click()
    expect(frame.locator("#step-number")).to_have_text(re.compile(f"^Step {step + 1} of"))
    frame.locator("body").press("ArrowRight")
    expect(frame.locator("#step-text .step-text")).to_have_text(re.compile(f"^step {step + 2} of"))
    host.write_text(f"<!doctype html><html><body><h1>Out[9]</h1>{neuron}</body></html>", encoding="utf-8")
    page.goto(host.as_uri())
    page.frame_locator("iframe").locator("#neuron .main-svg").first.wait_for()
    expect(page.frame_locator("iframe").locator("#neuron .gtitle").first).to_contain_text("cross.3.5")
    assert page.errors == []


def test_a_converted_hub_model_shows_in_the_languages_asked(tmp_path):
    """A tiny random NLLB model converted into the project (tests/hub_models.py): its view in French, in words."""
    pytest.importorskip("transformers")
    sys.path.insert(0, str(Path(__file__).parent))
    import hub_models
    from attention_inspector.model.hub.convert_hf import convert

    folder = convert(str(hub_models.nllb(tmp_path / "nllb")), tmp_path / "checkpoints" / "nllb")
    view = ai.show(folder, TEXT, tgt_lang="fra_Latn", units="words", kind="decoder", head="all")
    assert view.value["core"]["steps"][0].startswith('word 1 of') and "fra_Latn" in view.value["core"]["steps"][0]
    assert view.value["view"]["kind"] == "decoder" and json.loads(view.value["core"]["attention"])["data"]
    with pytest.raises(ValueError, match="xx_Latn"):
        ai.show(folder, TEXT, tgt_lang="xx_Latn")


# Each head's name over its panel (H1 ...) in a view's heatmap: [name, left, right] on screen.
HEAD_NAMES = """() => Array.from(document.querySelectorAll('#attention .annotation-text'))
    .filter((text) => /^H\\d+$/.test(text.textContent.trim()))
    .map((text) => {
        const box = text.getBoundingClientRect();
        return [text.textContent.trim(), box.left, box.right]; })"""


@pytest.mark.slow
def test_every_head_of_head_view_and_model_view_is_in_sight_in_a_cells_width(browser, tmp_path):
    """In a notebook's cell (553 px) en-de's eight heads of a layer, and of every layer, are drawn within its width:
    none behind a sideways scroll."""
    model = ai.load("en-de")
    for name, view in (("head", ai.head_view(model, TEXT, layer=3)), ("model", ai.model_view(model, TEXT))):
        page = browser.new_page(viewport={"width": 553, "height": 900})
        page.goto(view.write_html(tmp_path / f"{name}.html").as_uri())
        page.wait_for_selector("body[data-ready=true]")
        page.wait_for_selector("#attention .main-svg")
        page.wait_for_timeout(300)
        names = page.evaluate(HEAD_NAMES)
        width = page.evaluate("() => document.documentElement.clientWidth")
        assert sorted({head for head, _, _ in names}) == sorted(f"H{h}" for h in range(1, 9)), name
        assert all(0 <= left and right <= width for _, left, right in names), (name, width, names)
        assert page.evaluate("""() => [document.documentElement, document.querySelector('#attention')].every(
            (box) => box.scrollWidth <= box.clientWidth)"""), name
        page.close()


@pytest.mark.slow
def test_on_a_phone_each_step_button_keeps_its_name_on_one_line(toy, browser, tmp_path):
    """At 390 px the notebook view's step buttons (‹ Prev, Next ›) are one line high, and the view is no wider."""
    page = browser.new_page(viewport={"width": 390, "height": 844})
    page.goto(toy.show(TEXT).write_html(tmp_path / "view.html").as_uri())
    page.wait_for_selector("body[data-ready=true]")
    lines = step_button_lines(page)
    assert all(ratio < 1.6 for ratio in lines), lines
    assert page.evaluate("() => document.documentElement.scrollWidth <= document.documentElement.clientWidth")
    page.close()
