"""Share a view by link, export it (trace JSON/NPZ, view HTML), compare two checkpoints, inspect in batch."""

import json
import re

import numpy as np
import pytest

from model import inspect
from model.checkpoint import load_checkpoint
from model.inspect import load_trace
from viz.views import ALL_HEADS, CROSS, DECODER, ENCODER, MEAN

MODEL = "toy-en-de"
TEXT = "A man plays with a red ball."


def translated(app_module, text=TEXT, model=MODEL):
    return app_module.translate(model, text, CROSS, 0, MEAN)[app_module.trail_state]


def test_a_link_opens_exactly_its_view(app_module):
    trail = translated(app_module)
    other = next(t for t in trail.current.trace.top_tokens[1] if t != trail.current.trace.target_tokens[1])
    query = {"model": [MODEL], "text": [TEXT], "force": trail.current.trace.target_tokens[:1] + [other],
             "mask": ["cross.1.2", "encoder.2.1"], "step": ["3"], "kind": ["decoder"], "layer": ["2"], "head": ["4"],
             "measure": ["value_norm"], "compare": [MODEL]}
    out = app_module.open_link(query)
    assert out[app_module.status].startswith("Opened the link. Translated")
    shown = out[app_module.trail_state]
    assert shown.current.force == query["force"] and shown.current.mask == ["cross.1.2", "encoder.2.1"]
    assert shown.current.trace.target_tokens[1] == other and shown.compare[0] == MODEL
    assert out[app_module.step].value == 3 and out[app_module.kind_choice].value == DECODER
    assert out[app_module.layer_choice].value == 1 and out[app_module.head_choice].value == 3
    assert out[app_module.measure_choice].value == "weight × value norm" and out[app_module.source] == TEXT
    figure = json.loads(out[app_module.view_state]["attention"])
    assert "value norm" in figure["layout"]["title"]["text"] and "layer 2, head 4" in figure["layout"]["title"]["text"]
    assert out[app_module.view_state]["compare"] is not None and out[app_module.compare_model] == MODEL  # and its menu says so
    link = out[app_module.translation_state]["link"]  # what Copy link puts in the URL
    assert link == {"model": MODEL, "text": TEXT, "force": query["force"], "mask": query["mask"], "compare": MODEL}


def test_a_link_with_nonsense_falls_back_to_the_default_view_with_a_note(app_module):
    out = app_module.open_link({"model": ["nope"], "text": ["A dog."], "step": ["99"], "kind": ["sideways"],
                                "layer": ["zero"], "head": ["<b>9</b>"], "measure": ["magic"], "mask": ["cross.9.9"],
                                "compare": ["broken"]})
    status = out[app_module.status]
    assert status.startswith("Opened the link. Some of it could not be used")
    for said in ("no model 'nope'", "kind 'sideways'", "layer 'zero'", "head '<b>9</b>'", "measure 'magic'",
                 "step 99 is beyond", "cross.9.9", "no model 'broken' to compare"):
        assert said in status, said
    assert out[app_module.model_name] == app_module.DEFAULT_MODEL and out[app_module.kind_choice].value == CROSS
    assert out[app_module.step].value == 1 and out[app_module.measure_choice].value == "weights"
    assert len(out[app_module.trail_state].decodings) == 1  # the heads could not be switched off: the original
    # An empty link, or one whose text cannot be translated, is the first visit's example.
    broken = app_module.open_link({"text": ["x" * 3000]})
    assert "could not be translated" in broken[app_module.status]
    assert broken[app_module.source] == app_module.examples_for(app_module.DEFAULT_MODEL)[0]


def test_the_downloaded_trace_round_trips_to_the_traces_arrays(app_module, tmp_path):
    trail = translated(app_module)
    app_module.change_view(trail.current.trace, CROSS, 1, 0, False, "rollout", trail)  # measures now kept
    trace = trail.current.trace
    for file_format in ("json", "npz"):
        out = app_module.export_trace(trail, file_format)
        assert out[app_module.export_file].endswith(f"{MODEL}_a-man-plays-with-a-red.{file_format}")
        record = load_trace(out[app_module.export_file])
        assert record["schema_version"] == inspect.SCHEMA_VERSION and record["checkpoint"] == MODEL
        assert record["config"]["d_model"] == 64 and record["source"] == TEXT
        assert record["target_tokens"] == trace.target_tokens and record["top_tokens"] == trace.top_tokens
        for name, array in (("cross_attention", trace.cross), ("encoder_attention", trace.encoder),
                            ("decoder_attention", trace.decoder), ("probabilities", trace.probabilities),
                            ("top_probabilities", trace.top_probabilities)):
            np.testing.assert_array_equal(record[name], array.astype(np.float32))
        np.testing.assert_array_equal(record["measures"]["alti"]["cross"],
                                      trail.current.measure_maps["alti"]["cross"].astype(np.float32))
    gru = translated(app_module, "a dog runs .", "toy-rnn")
    record = load_trace(app_module.export_trace(gru, "npz")[app_module.export_file])
    assert record["encoder_attention"] is None and record["measures"] is None
    assert "Export as json or npz" in app_module.export_trace(trail, "csv")[app_module.status]


def test_the_view_as_html_holds_the_figure_and_fetches_nothing(app_module):
    trail = translated(app_module)
    out = app_module.export_view(trail, 2, CROSS, 1, ALL_HEADS)
    path = out[app_module.export_file]
    assert path.endswith(f"{MODEL}_a-man-plays-with-a-red_cross_L2_all-heads_step2.html")
    page = open(path, encoding="utf-8").read()
    scripts = re.findall(r"<script[^>]*>(.*?)</script>", page, flags=re.S)
    bundle = max(scripts, key=len)
    assert "plotly.js" in bundle[:1000] and len(bundle) > 1_000_000  # plotly.js itself, embedded
    markup = page.replace(bundle, "")
    assert "http" not in markup and "<link" not in markup and " src=" not in markup
    z = np.round(trail.current.trace.cross[1, 0, :2], 6)  # the figure's data: head 1 at step 2
    assert json.dumps(float(z[0, 0]))[:6] in markup and "Cross-attention, layer 2, all 4 heads" in markup


def test_compare_a_checkpoint_with_itself_gives_a_zero_difference(app_module):
    trail = translated(app_module)
    for kind, head in ((CROSS, 1), (ENCODER, MEAN), (DECODER, 3)):
        out = app_module.compare_models(trail, MODEL, kind, 1, head)
        figure = json.loads(out[app_module.view_state]["compare"])
        first, second, difference = (np.array(trace["z"], dtype=float) for trace in figure["data"])
        np.testing.assert_array_equal(first, second)
        assert difference.shape == first.shape and not difference.any()
        assert figure["layout"]["meta"]["grows"] == {ENCODER: None, DECODER: "square", CROSS: "rows"}[kind]
    assert out[app_module.trail_state].compare[0] == MODEL
    # The GRU model has no self-attention: a note, and its cross-attention beside the Transformer's (its only layer).
    gru = app_module.compare_models(trail, "toy-rnn", ENCODER, 1, 0)
    title = json.loads(gru[app_module.view_state]["compare"])["layout"]["title"]["text"]
    assert "toy-rnn has no encoder self-attention" in title
    gru = app_module.compare_models(trail, "toy-rnn", CROSS, 1, 0)
    names = [trace["meta"] for trace in json.loads(gru[app_module.view_state]["compare"])["data"]]
    assert names[:2] == ["toy-en-de: layer 2, head 1", "toy-rnn: layer 1, head 1"]
    assert "no model 'broken'" in app_module.compare_models(trail, "broken", CROSS, 0, 0)[app_module.status].lower()


def test_inspect_writes_a_trace_per_sentence_that_loads_back(toy_checkpoints, tmp_path, capsys):
    root, _ = toy_checkpoints
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("A dog runs in the park.\n\nA woman plays with a child.\n", encoding="utf-8")
    translator = load_checkpoint(root / MODEL)
    for file_format in ("json", "npz"):
        out = tmp_path / file_format
        inspect.main(["--checkpoint", str(root / MODEL), "--input", str(sentences), "--out", str(out),
                      "--format", file_format, "--measures", "--threads", "1"])
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
