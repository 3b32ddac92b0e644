"""Figure builders: the heatmap shows exactly the requested slice, labels are inert text, duplicates stay apart."""

import dataclasses
import json

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
import pytest

from attention_inspector.viz.attention import attention_heatmap, escape, label, plain_figure, probability_bars
from attention_inspector.viz.views import (ALL_HEADS, CROSS, DECODER, ENCODER, MEAN, TraceArrays, attention_figure,
                                           candidates_figure, model_comparison_figure, overview_figure,
                                           translation_figure, view_frames)
from attention_inspector.viz.whatif import (IMPORTANCE_MEASURES, comparison_figure, importance_figure,
                                            log_prob_change_figure)

HOSTILE = '<img src=x onerror="alert(1)">'


def random_maps(rng, *shape):
    weights = rng.random(shape)
    return weights / weights.sum(-1, keepdims=True)


@pytest.fixture
def trace():
    rng = np.random.default_rng(0)
    source = ["a", "dog", "and", "a", HOSTILE, "<eos>"]
    target = ["ein", "hund", "und", "ein", "<script>", "<eos>"]
    decoder = random_maps(rng, 2, 4, 6, 6) * np.tril(np.ones((6, 6)))
    return TraceArrays(
        source_tokens=source, decoder_tokens=["<sos>"] + target[:-1], target_tokens=target,
        probabilities=rng.random(6), top_tokens=[[t, "x", "y"] for t in target],
        top_probabilities=np.sort(rng.random((6, 3)))[:, ::-1],
        encoder=random_maps(rng, 3, 4, 6, 6), decoder=decoder / decoder.sum(-1, keepdims=True),
        cross=random_maps(rng, 2, 4, 6, 6))


@pytest.mark.parametrize("kind,rows,cols", [(ENCODER, 6, 6), (DECODER, 3, 3), (CROSS, 3, 6)])
def test_heatmap_data_is_the_selected_layer_head_and_step(trace, kind, rows, cols):
    figure = attention_figure(trace, kind, layer=1, head=2, step=2).figure()
    z = np.array(figure.data[0].z)
    assert z.shape == (rows, cols)
    np.testing.assert_allclose(z, trace.maps(kind)[1, 2, :rows, :cols])
    assert figure.data[0].zmin == 0 and figure.data[0].zmax == 1  # fixed scale across heads
    scale = figure.data[0].colorscale
    brightness = [sum(int(v) for v in colour[4:-1].split(",")) for _, colour in scale]
    assert scale[0][0] == 0 and scale[-1][0] == 1 and brightness == sorted(brightness, reverse=True)


def test_mean_of_heads_and_all_heads(trace):
    mean = attention_figure(trace, CROSS, layer=0, head=MEAN, step=5).figure()
    np.testing.assert_allclose(np.array(mean.data[0].z), trace.cross[0].mean(axis=0))
    every = attention_figure(trace, CROSS, layer=0, head=ALL_HEADS, step=5).figure()
    assert len(every.data) == 4
    for h, heatmap in enumerate(every.data):
        np.testing.assert_allclose(np.array(heatmap.z), trace.cross[0, h])
    assert every.layout.coloraxis.cmin == 0 and every.layout.coloraxis.cmax == 1


def test_overview_has_every_layer_and_head(trace):
    figure = overview_figure(trace, ENCODER, step=0).figure()
    assert len(figure.data) == 3 * 4
    np.testing.assert_allclose(np.array(figure.data[4 + 3].z), trace.encoder[1, 3])


def test_current_step_row_is_highlighted(trace):
    figure = attention_figure(trace, CROSS, layer=0, head=0, step=3).figure()
    (shape,) = figure.layout.shapes
    assert (shape.y0, shape.y1) == (2.5, 3.5)
    assert attention_figure(trace, ENCODER, layer=0, head=0, step=3).figure().layout.shapes == ()


def test_duplicate_tokens_stay_separate_rows_and_columns(trace):
    figure = attention_figure(trace, ENCODER, layer=0, head=0, step=0).figure()
    x, y = list(figure.data[0].x), list(figure.data[0].y)
    assert x[0] == "1: a" and x[3] == "4: a" and len(set(x)) == len(set(y)) == 6  # counted from 1, as steps are
    assert list(figure.layout.xaxis.categoryarray) == x and list(figure.layout.xaxis.tickvals) == x
    assert list(figure.layout.xaxis.ticktext).count("a") == 2


def test_user_text_is_escaped_everywhere(trace):
    """Plotly renders labels, titles and hover text as HTML: what the browser gets (the decoded figure JSON) holds
    user text escaped, and no tags but Plotly's own line break and hover box."""
    script, image = "&lt;script&gt;", '&lt;img src=x onerror="ale…'  # the target's and the source's hostile tokens
    figures = [(attention_figure(trace, kind, 0, head, 5), {script, image} if kind != DECODER else {script})
               for kind in (ENCODER, DECODER, CROSS) for head in (0, MEAN, ALL_HEADS)]  # the title shows <script>
    figures += [(overview_figure(trace, CROSS, 5), {script, image}), (translation_figure(trace, 4), {script}),
                (candidates_figure(trace, 4), {script})]

    def shown_texts(value, key=""):
        """Every string of a decoded figure but its customdata (data for clicks, checked below)."""
        if isinstance(value, str):
            yield value
        elif isinstance(value, (dict, list)):
            for k, v in (value.items() if isinstance(value, dict) else ((key, v) for v in value)):
                if k != "customdata":
                    yield from shown_texts(v, k)

    for figure, hostile in figures:
        decoded = json.loads(figure.to_json())
        texts = list(shown_texts(decoded))
        tags_removed = [t.replace("<br>", "").replace("<extra>", "").replace("</extra>", "") for t in texts]
        assert [t for t in tags_removed if "<" in t] == []
        assert {form for form in (script, image) if any(form in t for t in texts)} == hostile
        for data in decoded["data"]:  # bars keep the bare tokens for a click: no template may show them
            if any(isinstance(value, str) for value in data.get("customdata", [])):
                assert "customdata" not in data.get("hovertemplate", "") + data.get("texttemplate", "")
    ticks = attention_figure(trace, ENCODER, 0, 0, 0).figure().layout.xaxis.ticktext
    assert ticks[4] == '&lt;img src=x onerror="ale…'  # cut to 24 characters, then escaped
    assert attention_figure(trace, ENCODER, 0, 0, 0).figure().data[0].x[4].endswith(": " + ticks[4])  # the hover


def test_labels_spell_invisible_characters_and_cut_long_tokens():
    assert label("a\u200bb\x00") == "a⟨U+200B⟩b⟨U+0000⟩"
    assert label("\u202eevil") == "⟨U+202E⟩evil"  # a direction override cannot flip the axis text
    assert label("x" * 30) == "x" * 23 + "…" and label("x" * 24) == "x" * 24
    assert label("café 🐶 كلب") == "café 🐶 كلب"  # visible text is kept as it is


def test_step_title_escapes_and_describes_the_step(trace):
    title = attention_figure(trace, CROSS, 0, 0, 4).figure().layout.title.text
    assert "step 5 of 6" in title and "&lt;script&gt;" in title


def test_figures_pass_plotly_full_validation(trace):
    """Figures are built without per-property validation for speed; here they get the full check."""
    figures = [attention_figure(trace, CROSS, 1, head, 3) for head in (0, MEAN, ALL_HEADS)]
    figures += [overview_figure(trace, DECODER, 4), translation_figure(trace, 2), candidates_figure(trace, 2)]
    off = dataclasses.replace(trace, switched_off=frozenset({"cross.2.1", "decoder.1.2"}))  # heads drawn as off
    figures += [attention_figure(off, CROSS, 1, head, 3) for head in (0, MEAN, ALL_HEADS)]
    figures += [overview_figure(off, DECODER, 4)]
    tokens = trace.target_tokens
    figures += [comparison_figure([("original", tokens, trace.probabilities), ("branch", tokens[::-1],
                                                                               trace.probabilities)], [set(), {1}]),
                log_prob_change_figure(tokens, np.linspace(-1, 1, len(tokens)), "change")]
    heads = {f"{kind}.{layer}.{head}": {"importance": 0.5, "bleu_change": -0.2, "log_likelihood_change": 0.01}
             for kind in ("encoder", "decoder", "cross") for layer in (1, 2) for head in (1, 2)}
    shapes = {kind: (trace.layers(kind), trace.heads(kind)) for kind in trace.available()}
    figures += [importance_figure(heads, shapes, measure) for measure in IMPORTANCE_MEASURES]
    figures += [model_comparison_figure([("one", trace), ("other", off)], kind, 1, 0, 3) for kind in (ENCODER, CROSS)]
    for figure in figures:
        go.Figure(figure.to_dict())  # raises on any invalid property or value


def test_figures_carry_only_the_2d_part_of_plotlys_template(trace):
    """Plotly's whole default template would be ~7 KB of every figure's JSON, resent on each step change."""
    default = pio.templates["plotly"].to_plotly_json()
    for figure in (attention_figure(trace, CROSS, 0, MEAN, 3), translation_figure(trace, 2)):
        template = figure.to_dict()["layout"]["template"]
        assert set(template["data"]) == {"heatmap", "bar"}
        assert "scene" not in template["layout"] and "polar" not in template["layout"]
        for key, value in template["layout"].items():  # what is kept is plotly's own look
            assert default["layout"][key] == value
        assert len(figure.to_json()) < 4000


def test_heatmap_rejects_mismatched_labels():
    with pytest.raises(ValueError, match="do not match"):
        attention_heatmap(np.zeros((2, 3)), ["a", "b"], ["x", "y"], "t")


def test_probability_bars_highlight_and_values():
    figure = probability_bars(["ein", "ein", "<b>"], np.array([0.9, 0.5, 0.1]), "p", highlight=1).figure()
    assert list(figure.data[0].y) == [0.9, 0.5, 0.1]
    assert figure.data[0].marker.color[1] != figure.data[0].marker.color[0]
    assert list(figure.layout.xaxis.ticktext) == ["ein", "ein", "&lt;b&gt;"]


def test_escape_is_plain_html_escaping():
    assert escape(["a&b", "\"'", "<i>"]) == ["a&amp;b", "\"'", "&lt;i&gt;"]


def test_plain_figures_send_what_plotly_would(trace):
    """The page gets the JSON plotly.py makes of the same figure (a switched-off head's NaN weights as null)."""
    off = dataclasses.replace(trace, switched_off=frozenset({"cross.2.1"}))
    figures = [attention_figure(off, CROSS, 1, head, 3) for head in (0, ALL_HEADS)] + [translation_figure(trace, 2)]
    for figure in figures:
        assert json.loads(figure.to_json()) == json.loads(figure.figure().to_json())
    assert json.loads(figures[0].to_json())["data"][0]["z"][0][0] is None
    assert json.loads(figures[0].to_json({"file": "x"}))["layout"]["meta"] == {"file": "x"}
    lone = plain_figure([], {"title": {"text": "a\ud800"}})  # a lone surrogate, which orjson refuses
    assert json.loads(lone.to_json())["layout"]["title"]["text"] == "a\ud800"


def word_trace(units: str = "words") -> TraceArrays:
    """"die zeitungsleserin liest ." in 7 byte-pair pieces and 5 words ("zeitungsleserin" in three pieces)."""
    rng = np.random.default_rng(2)
    target = ["die", "zeitungs@@", "les@@", "erin", "liest", ".", "<eos>"]
    source = ["the", "newspaper", "read@@", "er", "reads", ".", "<eos>"]
    decoder = random_maps(rng, 2, 4, 7, 7) * np.tril(np.ones((7, 7)))
    return TraceArrays(source_tokens=source, decoder_tokens=["<sos>"] + target[:-1], target_tokens=target,
                       probabilities=rng.random(7), top_tokens=[[t, "x"] for t in target],
                       top_probabilities=rng.random((7, 2)), encoder=random_maps(rng, 2, 4, 7, 7),
                       decoder=decoder / decoder.sum(-1, keepdims=True), cross=random_maps(rng, 2, 4, 7, 7),
                       scheme="bpe", units=units)


def test_in_words_the_title_and_the_steps_line_count_words_and_name_the_piece_the_step_writes():
    """Issue 79: in words, the heatmap's title and *This step* said "step 3 of 7" and quoted pieces beside two word
    rows. They count words ("word 2 of 5", the word being written as the row is named), then say which piece of it
    the step (of the slider's steps) writes, with its probability."""
    from attention_inspector.viz.views import step_description, step_heading

    trace = word_trace()
    p = [f"{value:.2f}" for value in trace.probabilities]
    # Words: die | zeitungs@@ les@@ erin | liest | . | <eos>; step 3 writes "les@@", the second of three pieces.
    assert step_heading(trace, 2) == ['word 2 of 5: "die" → "zeitungsles…"', f'step 3 of 7: piece 2 of 3, "les@@" '
                                                                              f'(p = {p[2]})']
    assert step_heading(trace, 3)[0] == 'word 2 of 5: "die" → "zeitungsleserin"'
    assert step_heading(trace, 4) == ['word 3 of 5: "zeitungsleserin" → "liest"',
                                      f'step 5 of 7: one piece, "liest" (p = {p[4]})']
    assert step_heading(trace, 0)[0] == 'word 1 of 5: "<sos>" → "die"'
    figure = attention_figure(trace, CROSS, 0, 0, 2).to_dict()
    assert figure["layout"]["title"]["text"].endswith(
        f'<br>word 2 of 5: "die" → "zeitungsles…"<br>step 3 of 7: piece 2 of 3, "les@@" (p = {p[2]})')
    assert len(figure["layout"]["yaxis"]["categoryarray"]) == 2  # word 2's row is the second
    assert step_description(trace, 2).splitlines()[:2] == [
        'word 2 of 5: reads "die", building "zeitungsles…"', f'step 3 of 7: piece 2 of 3, predicts "les@@" (p = {p[2]})']
    assert step_description(trace, 3).splitlines()[0] == 'word 2 of 5: reads "die", writes "zeitungsleserin"'
    given = dataclasses.replace(trace, forced=2)
    assert step_description(given, 1).splitlines()[1] == f'step 2 of 7: piece 1 of 3, is given "zeitungs@@" (p = {p[1]})'
    # Every step's title the browser shows as it steps (the slider's 7 steps) counts the words.
    titles = json.loads(view_frames(trace, CROSS, 0, 0, False)["attention"])["layout"]["meta"]["titles"]
    assert [title.split("<br>")[-2].split(":")[0] for title in titles] == [
        "word 1 of 5", "word 2 of 5", "word 2 of 5", "word 2 of 5", "word 3 of 5", "word 4 of 5", "word 5 of 5"]
    # In pieces, as before: the step and its pieces.
    assert step_heading(word_trace("pieces"), 2) == [f'step 3 of 7: "zeitungs@@" → "les@@" (p = {p[2]})']
    assert step_description(word_trace("pieces"), 2).splitlines()[0] == (
        f'step 3 of 7: reads "zeitungs@@", predicts "les@@" (p = {p[2]})')


def rebuilt(last, sent):
    """A stepped figure's field at a step from what its frame sends (as ui/static/figures.js `fromLast` does): as it
    is, or the last step's first `n` entries (each cut to `width`), with the entries that differ put in."""
    if not (isinstance(sent, dict) and "fromLast" in sent):
        return sent
    changes = sent["fromLast"]
    shown = [entry[:changes["width"]] if "width" in changes else entry for entry in last[:changes["n"]]]
    for i, entry in changes["changed"]:
        shown[i] = entry
    return shown


def test_stepping_a_view_in_words_sends_what_each_step_changes_not_every_cell():
    """Issue 79: stepping in words sent every step's every cell, labels and all: the model view of a 70-word sentence
    was 44.8 MB. A step's frame sends what differs from the last step's figure: the row of the word being written
    (a finished word's row is the last step's, in decoder self-attention its keys too) and its labels. Rebuilt, each
    step is the figure built for that step."""
    trace = word_trace()
    for kind in (CROSS, DECODER):
        for sent, built in ((json.loads(view_frames(trace, kind, 1, 2, True)["overview"]),
                             lambda t: overview_figure(trace, kind, t)),
                            (json.loads(view_frames(trace, kind, 1, ALL_HEADS, False)["attention"]),
                             lambda t: attention_figure(trace, kind, 1, ALL_HEADS, t)),
                            (json.loads(view_frames(trace, kind, 1, 2, False)["attention"]),
                             lambda t: attention_figure(trace, kind, 1, 2, t))):
            frames = sent["layout"]["meta"]["frames"]
            assert len(frames) == trace.steps
            for t, frame in enumerate(frames):
                alone = json.loads(built(t).to_json())
                for i, fields in enumerate(frame["data"]):
                    for key, value in fields.items():
                        assert rebuilt(sent["data"][i][key], value) == alone["data"][i][key], (kind, t, i, key)
                    assert len(fields["z"]["fromLast"]["changed"]) <= 1  # the word being written's row, if any
                for name, fields in frame["axes"].items():
                    for key, value in fields.items():
                        assert rebuilt(sent["layout"][name][key], value) == alone["layout"][name][key]
                assert frame["shapes"] == alone["layout"].get("shapes", [])
