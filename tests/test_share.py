"""Share a view by link, export it (trace JSON/NPZ, view HTML), compare two checkpoints, inspect in batch."""

import json
import re
from urllib.parse import parse_qs

import numpy as np
import pytest
import torch

from attention_inspector.model.api.services import Services
from attention_inspector.model.keys import ALL_HEADS, CROSS, DECODER, ENCODER, MEAN, ROLLOUT, VALUE_NORM, WEIGHTS
from attention_inspector.model.serving import inspect
from attention_inspector.model.serving.checkpoint import load_checkpoint
from attention_inspector.model.serving.inspect import load_trace
from attention_inspector.ui import operations
from attention_inspector.ui.links import LinkSpec, open_link
from attention_inspector.ui.render import render
from attention_inspector.ui.session import View
from attention_inspector.ui.tabs.share import export_trace, export_view, link_query
from attention_inspector.viz.views import comparison_frames

MODEL = "toy-en-de"
TEXT = "A man plays with a red ball."


def translated(events, text=TEXT, model=MODEL):
    return events.translate(text, model=model)["session"]


def at(step=1, kind=CROSS, layer=0, head=MEAN, measure=WEIGHTS):
    """The page's view settings (kind, layer, head, measure, step, model view)."""
    return (kind, layer, head, measure, step, False)


def test_a_link_opens_exactly_its_view(events):
    session = translated(events)
    other = next(t for t in session.trace.top_tokens[1] if t != session.trace.target_tokens[1])
    query = {"model": [MODEL], "text": [TEXT], "force": session.trace.target_tokens[:1] + [other],
             "mask": ["cross.1.2", "encoder.2.1"], "step": ["3"], "kind": ["decoder"], "layer": ["2"], "head": ["4"],
             "measure": ["value_norm"], "compare": [MODEL]}
    shown, status = open_link(events.services, *LinkSpec.parse(query))
    assert status.startswith(f"Opened the link. Compared with {MODEL}: the two maps are side by side in the tab "
                             "Compare models. Translated")
    assert list(shown.current.force) == query["force"] and list(shown.current.mask) == ["cross.1.2", "encoder.2.1"]
    assert shown.trace.target_tokens[1] == other and shown.compare.model == MODEL
    assert shown.view == View(DECODER, 1, 3, VALUE_NORM, 3, False) and shown.source == TEXT
    out = events.named(render(events.page, events.services, None, shown, status))
    assert out["step"] == 3 and out["kind"]["value"] == DECODER and out["measure"]["value"] == VALUE_NORM
    figure = json.loads(out["attention"])
    assert "value norm" in figure["layout"]["title"]["text"] and "layer 2, head 4" in figure["layout"]["title"]["text"]
    assert out["compare_plot"] is not None and out["compare_model"]["value"] == MODEL
    # What Copy link puts in the URL (the page sets the step it is on): the same view again.
    (link,), _ = link_query(events.services, shown, 3)
    again, notes = LinkSpec.parse(parse_qs(link.removeprefix("?")))
    assert notes == [] and again == LinkSpec.parse(query)[0]


def test_copy_link_keeps_the_comparison(events):
    session = translated(events)
    compared = events.run(operations.compare, session, MODEL, view=at())
    (query,), _ = link_query(events.services, compared["session"], 1)
    spec, _ = LinkSpec.parse(parse_qs(query.removeprefix("?")))
    assert spec.compare == MODEL and spec.text == TEXT


def test_the_downloaded_trace_round_trips_to_the_traces_arrays(events):
    session = events.view(translated(events), CROSS, 1, 0, ROLLOUT, 1, False)["session"]  # measures now kept
    trace = session.trace
    for file_format in ("json", "npz"):
        (path,), said = export_trace(events.services, session, file_format)
        assert path.endswith(f"{MODEL}_a-man-plays-with-a-red.{file_format}") and "with its measures" in said
        record = load_trace(path)
        assert record["schema_version"] == inspect.SCHEMA_VERSION and record["checkpoint"] == MODEL
        assert record["config"]["d_model"] == 64 and record["source"] == TEXT
        assert record["target_tokens"] == trace.target_tokens and record["top_tokens"] == trace.top_tokens
        for name, array in (("cross_attention", trace.cross), ("encoder_attention", trace.encoder),
                            ("decoder_attention", trace.decoder), ("probabilities", trace.probabilities),
                            ("top_probabilities", trace.top_probabilities)):
            np.testing.assert_array_equal(record[name], array.astype(np.float32))
        np.testing.assert_array_equal(record["measures"]["alti"]["cross"],
                                      session.current.measure_maps["alti"]["cross"].astype(np.float32))
    gru = translated(events, "a dog runs .", "toy-rnn")
    record = load_trace(export_trace(events.services, gru, "npz")[0][0])
    assert record["encoder_attention"] is None and record["measures"] is None
    assert "Export as json or npz" in export_trace(events.services, session, "csv")[1]


def test_the_view_as_html_holds_the_figure_and_fetches_nothing(events):
    session = events.view(translated(events), CROSS, 1, ALL_HEADS, WEIGHTS, 2, False)["session"]
    (path,), _ = export_view(events.services, session, 2)
    assert path.endswith(f"{MODEL}_a-man-plays-with-a-red_cross_L2_all-heads_step2.html")
    page = open(path, encoding="utf-8").read()
    scripts = re.findall(r"<script[^>]*>(.*?)</script>", page, flags=re.S)
    bundle = max(scripts, key=len)
    assert "plotly.js" in bundle[:1000] and len(bundle) > 1_000_000  # plotly.js itself, embedded
    markup = page.replace(bundle, "")
    assert "http" not in markup and "<link" not in markup and " src=" not in markup
    z = np.round(session.trace.cross[1, 0, :2], 6)  # the figure's data: head 1 at step 2
    assert json.dumps(float(z[0, 0]))[:6] in markup and "Cross-attention, layer 2, all 4 heads" in markup


@pytest.fixture(scope="module")
def two_models(toy_checkpoints):
    """Two different Transformers that translate the toy sentences alike: the toy model, and a copy whose weights
    are nudged (so every attention map differs a little)."""
    first = load_checkpoint(toy_checkpoints[0] / MODEL)
    second = load_checkpoint(toy_checkpoints[0] / MODEL)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in second.model.parameters():
            parameter.add_(0.005 * torch.randn(parameter.shape, generator=generator))
    return Services({MODEL: first, "nudged": second})


def test_compare_two_checkpoints_shows_each_ones_own_attention_and_their_difference(two_models):
    services = two_models
    session, _ = operations.translate(services, None, MODEL, TEXT)
    mine, theirs = (operations.to_arrays(services.translators[name].trace(TEXT)) for name in (MODEL, "nudged"))
    assert mine.target_tokens == theirs.target_tokens and not np.allclose(mine.cross, theirs.cross)
    compared, status = operations.compare(services, session, "nudged")
    assert compared.compare.model == "nudged" and "the same translation" in status
    last = mine.steps
    for kind, head in ((CROSS, 1), (ENCODER, MEAN), (DECODER, 3)):
        figure = json.loads(comparison_frames([(MODEL, compared.trace), ("nudged", compared.compare.trace)],
                                              kind, 1, head))
        first, second, difference = (np.array(trace["z"], dtype=float) for trace in figure["data"])
        expected = [trace.maps(kind)[1, head] if isinstance(head, int) else trace.maps(kind)[1].mean(0)
                    for trace in (mine, theirs)]
        if kind == DECODER:
            expected = [e[:last, :last] for e in expected]
        np.testing.assert_allclose(first, expected[0], atol=1e-6)
        np.testing.assert_allclose(second, expected[1], atol=1e-6)
        np.testing.assert_allclose(difference, expected[0] - expected[1], atol=1e-6)
        assert np.abs(difference).max() > 1e-3
        assert figure["layout"]["meta"]["grows"] == {ENCODER: None, DECODER: "square", CROSS: "rows"}[kind]


def test_compare_with_a_gru_model_and_what_cannot_be_compared(events):
    session = translated(events)
    gru = events.run(operations.compare, session, "toy-rnn", view=at(1, ENCODER, 1, 0))
    title = json.loads(gru["compare_plot"])["layout"]["title"]["text"]
    assert "toy-rnn has no encoder self-attention" in title
    gru = events.run(operations.compare, session, "toy-rnn", view=at(1, CROSS, 1, 0))
    names = [trace["meta"] for trace in json.loads(gru["compare_plot"])["data"]]
    assert names[:2] == ["toy-en-de: layer 2, head 1", "toy-rnn: layer 1, head 1"]
    assert "no model 'broken'" in events.run(operations.compare, session, "broken")["status"].lower()
    # The second model's menu offers only models that read the same language, never the first model itself.
    assert [name for _, name in events.services.comparable(MODEL)] == ["toy-rnn"]


def test_inspect_writes_a_trace_per_sentence_that_loads_back(toy_checkpoints, tmp_path, capsys):
    root, _ = toy_checkpoints
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("A dog runs in the park.\n\nA woman plays with a child.\n", encoding="utf-8")
    translator = load_checkpoint(root / MODEL)
    for file_format in ("json", "npz"):
        out = tmp_path / file_format
        inspect.main(["--checkpoint", str(root / MODEL), "--input", str(sentences), "--out", str(out),
                      "--format", file_format, "--measures", "--attributions", "saliency", "integrated_gradients",
                      "--units", "words", "--threads", "1"])
        summary = capsys.readouterr()
        assert re.fullmatch(rf"2 traces written to {out} \({file_format}, [\d.]+ MB\), 1 lines skipped, in [\d.]+ s\n",
                            summary.out)
        assert "line 2: Type a sentence" in summary.err
        assert sorted(p.name for p in out.iterdir()) == [f"00001.{file_format}", f"00003.{file_format}"]
        record = load_trace(out / f"00003.{file_format}")
        traced = translator.trace("A woman plays with a child.")
        assert record["translation"] == traced.text and record["target_tokens"] == traced.target_tokens
        np.testing.assert_array_equal(record["cross_attention"], traced.trace.cross_attention.astype(np.float32))
        assert set(record["measures"]) == {"value_norm", "value_norm_together", "rollout", "alti"}
        assert record["words"] == {"units": "words", "scheme": "whole words",
                                   "source": [[i, i + 1] for i in range(len(traced.source_tokens))],
                                   "target": [[i, i + 1] for i in range(len(traced.target_tokens))]}
        integrated = record["attributions"]["integrated_gradients"]
        assert [step["step"] for step in integrated] == list(range(1, len(traced.target_tokens) + 1))
        last = integrated[-1]
        assert len(last["source"]) == len(traced.source_tokens) and len(last["target"]) == len(traced.target_tokens)
        assert abs(last["completeness_error"]) < 0.05 * abs(last["score"] - last["baseline_score"]) + 1e-3


def test_a_different_translation_is_quoted_once(events):
    session = translated(events)
    said = events.run(operations.compare, session, "toy-rnn")["status"]
    theirs = events.services.translators["toy-rnn"].trace(TEXT).text
    assert said == f'Compared with toy-rnn: a different translation, "{theirs}"; the two maps are side by side below.' \
        or said == "Compared with toy-rnn: the same translation, so every map has a difference map."
    assert ".." not in said
