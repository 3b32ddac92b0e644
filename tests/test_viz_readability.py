"""Figures a person can read: a colour scale that fits what is shown, labels that do not run into each other on a
long sentence or a phone, titles clear of panel names and of Plotly's mode bar, positions counted from 1 as steps
are, and decoder rows named as the step they are ("mann → liest")."""

import dataclasses
import json
import os
import shutil
from itertools import combinations

import numpy as np
import plotly
import plotly.graph_objects as go
import pytest

from attention_inspector.viz.attention import GRID_PX, escape, label_every, positions, step_labels, thinned
from attention_inspector.viz.views import (ALL_HEADS, CROSS, DECODER, ENCODER, MEAN, TraceArrays, attention_figure,
                                           candidates_figure, model_comparison_figure, overview_figure,
                                           translation_figure)
from attention_inspector.viz.whatif import (comparison_figure, contribution_figure, log_prob_change_figure,
                                            source_share_figure)

MODEBAR_PX = 26  # Plotly's mode bar: 2 px from the top, 22 px high
KEY_PX, HEATMAP_SIDES, BAR_SIDES = 12, 190, 80  # as ui/static/figures.js widens a heatmap and a bar chart
TITLE_LINE_PX = 17  # one line of the 13 px title


def weights(rng, *shape):
    maps = rng.random(shape) ** 4
    return maps / maps.sum(-1, keepdims=True)


def sentence(source_length: int, steps: int, heads: int = 4) -> TraceArrays:
    """A decoding of `source_length` source tokens in `steps` steps, with repeated words as real sentences have."""
    rng = np.random.default_rng(0)
    words = "the man in a blue shirt reads a book while his dog sleeps under the table".split()
    source = [words[i % len(words)] for i in range(source_length - 1)] + ["<eos>"]
    target = [f"wort{i}" for i in range(steps - 1)] + ["<eos>"]
    decoder = weights(rng, 2, heads, steps, steps) * np.tril(np.ones((steps, steps)))
    return TraceArrays(source_tokens=source, decoder_tokens=["<sos>"] + target[:-1], target_tokens=target,
                       probabilities=rng.random(steps), top_tokens=[[t, "a", "b"] for t in target],
                       top_probabilities=np.sort(rng.random((steps, 3)))[:, ::-1],
                       encoder=weights(rng, 2, heads, source_length, source_length),
                       decoder=decoder / decoder.sum(-1, keepdims=True),
                       cross=weights(rng, 2, heads, steps, source_length))


@pytest.fixture
def trace():
    return dataclasses.replace(sentence(6, 5), target_tokens=["ein", "hund", "und", "läuft", "<eos>"],
                               decoder_tokens=["<sos>", "ein", "hund", "und", "läuft"])


@pytest.fixture
def value_norms():
    """Weight x value norms whose global maximum (17.9, in an encoder head) dwarfs the cross-attention head shown,
    which peaks at 3.95 in its last row only."""
    base = sentence(6, 5)
    cross = base.cross.copy()
    cross[0, 1] = np.clip(cross[0, 1] * 2, 0, 1.5)
    cross[0, 1, -1, 2] = 3.95
    cross[0, 2, 0, 0] = 2.5  # another head of the same layer
    cross[1, 0, 3, 1] = 6.25  # another layer
    encoder = base.encoder * 3
    encoder[1, 3, 0, 0] = 17.9
    together = {kind: base.maps(kind)[:, 0] * 2 for kind in (ENCODER, DECODER, CROSS)}
    together[CROSS][0, 4, 5] = 3.25
    return dataclasses.replace(base, cross=cross, encoder=encoder, decoder=base.decoder * 2, together=together,
                               measure="‖α·f(x)‖: weight × value norm", value_label="‖α f‖", scale_max=17.9)


def layout_of(figure) -> dict:
    return json.loads(figure.to_json())["layout"]


def colour_scale(figure) -> tuple[float, str]:
    """The top of a figure's colour scale and its colour bar's title."""
    decoded = json.loads(figure.to_json())
    if "coloraxis" in decoded["layout"]:
        axis = decoded["layout"]["coloraxis"]
        return axis["cmax"], axis["colorbar"]["title"]["text"]
    trace = decoded["data"][0]
    return trace["zmax"], trace["colorbar"]["title"]["text"]


# ---- 1. a measure's colour scale is the view's own ----

def test_a_measure_without_a_fixed_top_is_scaled_to_what_its_view_shows(value_norms):
    for step in (1, 4):  # the peak is in the last row: stepping keeps one scale, the whole view's
        assert colour_scale(attention_figure(value_norms, CROSS, 0, 1, step)) == (3.95, "‖α f‖ (max 3.95)")
    assert colour_scale(attention_figure(value_norms, CROSS, 0, MEAN, 2)) == (3.25, "‖α f‖ (max 3.25)")  # together
    assert colour_scale(attention_figure(value_norms, CROSS, 0, ALL_HEADS, 2)) == (3.95, "‖α f‖ (max 3.95)")
    assert colour_scale(overview_figure(value_norms, CROSS, 2)) == (6.25, "‖α f‖ (max 6.25)")
    assert colour_scale(attention_figure(value_norms, ENCODER, 1, 3, 0)) == (17.9, "‖α f‖ (max 17.9)")
    off = dataclasses.replace(value_norms, switched_off=frozenset({"cross.1.2"}))  # drawn empty: not in the scale
    assert colour_scale(attention_figure(off, CROSS, 0, ALL_HEADS, 2)) == (2.5, "‖α f‖ (max 2.5)")


def test_weights_and_shares_keep_the_fixed_0_to_1_scale(trace):
    for head in (0, MEAN, ALL_HEADS):
        assert colour_scale(attention_figure(trace, CROSS, 1, head, 2)) == (1.0, "weight")
    shares = dataclasses.replace(trace, measure="attention rollout", value_label="share", scale_max=1.0)
    assert colour_scale(attention_figure(shares, CROSS, 1, 0, 2)) == (1.0, "share")


# ---- 4. positions count from 1, as steps do ----

def test_hover_counts_positions_from_one_as_steps_do(trace):
    assert positions(["a", "dog", "a"]) == ["1: a", "2: dog", "3: a"]
    figure = json.loads(attention_figure(trace, ENCODER, 0, 0, 0).to_json())
    heatmap = figure["data"][0]
    assert heatmap["x"][:2] == ["1: the", "2: man"] and heatmap["y"][0] == "1: the"
    assert "%{y}" in heatmap["hovertemplate"] and "%{x}" in heatmap["hovertemplate"]  # the hover shows them
    cross = json.loads(attention_figure(trace, CROSS, 0, 0, 2).to_json())["data"][0]
    assert cross["y"][2].startswith("3: ")  # the row of step 3
    bars = json.loads(translation_figure(trace, 0).to_json())["data"][0]
    assert bars["x"][0] == "1: ein"


# ---- 5. decoder rows are steps: what they read → what they output ----

def test_decoder_rows_name_the_token_read_and_the_token_output(trace):
    rows = ["&lt;sos&gt; → ein", "ein → hund", "hund → und"]
    for kind in (CROSS, DECODER):
        for figure in (attention_figure(trace, kind, 0, 0, 2), attention_figure(trace, kind, 0, MEAN, 2)):
            assert layout_of(figure)["yaxis"]["ticktext"] == rows
        grid = layout_of(attention_figure(trace, kind, 0, ALL_HEADS, 2))
        assert grid["yaxis"]["ticktext"] == rows
    assert layout_of(overview_figure(trace, CROSS, 2))["yaxis"]["ticktext"] == rows
    # Keys and the encoder's rows stay tokens.
    assert layout_of(attention_figure(trace, DECODER, 0, 0, 2))["xaxis"]["ticktext"] == ["&lt;sos&gt;", "ein", "hund"]
    assert layout_of(attention_figure(trace, CROSS, 0, 0, 2))["xaxis"]["ticktext"][:2] == ["the", "man"]
    assert layout_of(attention_figure(trace, ENCODER, 0, 0, 2))["yaxis"]["ticktext"][:2] == ["the", "man"]


def test_step_labels_stay_escaped_and_short():
    hostile = dataclasses.replace(sentence(6, 3), target_tokens=["<b>x</b>", "<img src=x>", "<eos>"],
                                  decoder_tokens=["<sos>", "<b>x</b>", "<img src=x>"])
    rows = layout_of(attention_figure(hostile, CROSS, 0, 0, 2))["yaxis"]["ticktext"]
    assert rows == ["&lt;sos&gt; → &lt;b&gt;x&lt;/b&gt;", "&lt;b&gt;x&lt;/b&gt; → &lt;img src=…",
                    "&lt;img src=… → &lt;eos&gt;"]
    assert step_labels(["\u200bdu"], ["liest"]) == ["⟨U+200B⟩du → liest"]  # invisible characters spelled out
    assert all(len(label) <= 24 for label in step_labels(["x" * 40], ["y" * 40]))
    assert escape(step_labels(["a"], ["<b>"])) == ["a → &lt;b&gt;"]


# ---- 2. long sentences: labels apart, the same at every step ----

def shown(ticktext: list[str]) -> list[int]:
    return [i for i, text in enumerate(ticktext) if text]


def test_a_60_token_sentence_names_every_row_and_key():
    long = sentence(60, 58)
    for kind in (CROSS, DECODER, ENCODER):
        figure = layout_of(attention_figure(long, kind, 0, MEAN, 57))
        rows = len(figure["yaxis"]["categoryarray"])
        # The plot: the figure less its top margin (title) and at most 110 px of key labels and axis title.
        row_px = (figure["height"] - figure["margin"]["t"] - 110) / rows
        assert shown(figure["yaxis"]["ticktext"]) == list(range(rows)), kind  # every row named
        assert row_px >= 12, kind  # a 10-11 px label per 12 px at least: the plot grows taller
        assert figure["yaxis"].get("tickfont", {}).get("size") in (10, 11)
        # Every key named (the page widens the plot to fit them: ui/static/figures.js).
        assert shown(figure["xaxis"]["ticktext"]) == list(range(len(figure["xaxis"]["categoryarray"]))), kind
    bars = layout_of(translation_figure(long, 3))  # every bar named too: the page widens a bar chart to fit them
    assert shown(bars["xaxis"]["ticktext"]) == list(range(len(bars["xaxis"]["categoryarray"])))


def test_a_short_sentence_keeps_every_label():
    figure = layout_of(attention_figure(sentence(15, 14), CROSS, 0, 0, 13))
    assert all(figure["xaxis"]["ticktext"]) and all(figure["yaxis"]["ticktext"])


def test_compare_models_names_every_source_word_and_asks_the_width_they_need():
    """Issue 79: Compare models labelled every other source word (thinned to what a phone's panel fits). Every key
    of every panel is named, side by side (the same tokens read: both and their difference) and one above the other
    (different tokens), and the figure asks the page for KEY_PX a key in each panel beside each other."""
    long = sentence(30, 9)
    other = dataclasses.replace(long, target_tokens=["eine"] + long.target_tokens[1:],
                                decoder_tokens=["<sos>", "eine"] + long.decoder_tokens[2:])
    keys = escape(long.source_tokens)
    # At step 1 both read <sos> alone: side by side with their difference. At step 9 the second read "eine".
    for second, step, panels, columns in ((long, 0, 3, 3), (long, 8, 3, 3), (other, 0, 3, 3), (other, 8, 2, 1)):
        layout = layout_of(model_comparison_figure([("one", long), ("two", second)], CROSS, 0, 0, step))
        axes = [axis for name, axis in layout.items() if name.startswith("xaxis")]
        assert len(axes) == panels and all(axis["ticktext"] == keys for axis in axes)
        assert layout["meta"]["least"] >= KEY_PX * len(keys) * columns


def test_every_step_of_a_view_has_its_size_labels_and_scale(value_norms):
    """The browser keeps the last step's figure and slices its rows: so must every step's figure agree with it."""
    long = sentence(60, 58)
    for trace, kind, head in ((long, CROSS, 0), (long, DECODER, ALL_HEADS), (value_norms, CROSS, 1)):
        last = layout_of(attention_figure(trace, kind, 0, head, trace.steps - 1))
        for step in (0, 3, trace.steps // 2):
            at_step = layout_of(attention_figure(trace, kind, 0, head, step))
            assert at_step["height"] == last["height"] and at_step["margin"] == last["margin"]
            assert at_step["yaxis"]["ticktext"] == last["yaxis"]["ticktext"][:step + 1]
            if kind == DECODER and head == ALL_HEADS:  # a grid labels as many of the keys shown as fit a panel
                labels, fit = last["meta"]["keyLabels"][:step + 1], last["meta"]["keyFit"]
                assert at_step["xaxis"]["ticktext"] == thinned(labels, label_every(step + 1, fit))
                assert step != 3 or all(at_step["xaxis"]["ticktext"])  # step 3's four keys, each named
            elif kind == DECODER:
                assert at_step["xaxis"]["ticktext"] == last["xaxis"]["ticktext"][:step + 1]
            assert colour_scale(attention_figure(trace, kind, 0, head, step)) == colour_scale(
                attention_figure(trace, kind, 0, head, trace.steps - 1))


def test_a_grids_rows_keep_their_height_at_every_step():
    """Issue 79: the model view at step 1 of a 41-step sentence drew its one row over the whole panel, ~560 px tall.
    A grid's panels (the model view, all heads) keep room for every row of the view (and, in decoder self-attention,
    every key): a row is a panel's height over the view's rows at every step, 14 px here."""
    long = sentence(30, 41)
    for kind, figure in ((CROSS, overview_figure(long, CROSS, 0)), (DECODER, overview_figure(long, DECODER, 0)),
                         (CROSS, attention_figure(long, CROSS, 0, ALL_HEADS, 0)),
                         (DECODER, overview_figure(long, DECODER, 20))):
        layout = layout_of(figure)
        paper = layout["height"] - layout["margin"]["t"] - layout["margin"]["b"]
        for name, axis in layout.items():
            if name.startswith("yaxis"):
                rows = abs(axis["range"][0] - axis["range"][1])
                assert axis["range"][0] > axis["range"][1] and rows == 41  # reversed: the first step on top
                assert (axis["domain"][1] - axis["domain"][0]) * paper / rows == pytest.approx(14, abs=0.01)
            elif name.startswith("xaxis") and kind == DECODER:
                assert axis["range"] == [-0.5, 40.5]


def test_all_heads_label_the_keys_and_name_each_head_below_the_title():
    eight = sentence(17, 9, heads=8)
    figure = layout_of(attention_figure(eight, CROSS, 1, ALL_HEADS, 4))
    for h in range(8):
        axis = figure[f"xaxis{h + 1 if h else ''}"]
        assert axis.get("showticklabels", True) and 2 <= len(shown(axis["ticktext"])) <= 9
    names = figure["annotations"]
    assert [a["text"] for a in names] == [f"H{h + 1}" for h in range(8)]  # short: a phone gives each ~20 px
    assert {a["y"] for a in names} == {1} and {a["yanchor"] for a in names} == {"bottom"}
    assert figure["margin"]["t"] >= title_end(figure) + 14  # the names (10 px) between the title and the panels


# ---- 3. titles below the mode bar, clear of what follows them ----

def title_end(layout: dict) -> float:
    """Where a title anchored at the figure's top, below the mode bar, ends: pixels from the top."""
    title = layout["title"]
    assert (title["yref"], title["y"], title["yanchor"]) == ("container", 1, "top")  # placed in pixels, not fitted
    assert title["pad"]["t"] >= MODEBAR_PX
    return MODEBAR_PX + TITLE_LINE_PX * len(title["text"].split("<br>"))


def every_figure(trace):
    eight = sentence(17, 9, heads=8)
    other = dataclasses.replace(trace, target_tokens=["eine"] + trace.target_tokens[1:],
                                decoder_tokens=["<sos>", "eine"] + trace.decoder_tokens[2:])
    tokens = trace.target_tokens
    return [attention_figure(trace, kind, 0, head, 3) for kind in (ENCODER, DECODER, CROSS) for head in (0, MEAN)] + [
        attention_figure(eight, CROSS, 1, ALL_HEADS, 4), overview_figure(trace, CROSS, 3),
        translation_figure(trace, 2), candidates_figure(trace, 2),
        model_comparison_figure([("one", trace), ("two", trace)], CROSS, 0, 0, 3),
        model_comparison_figure([("one", trace), ("two", other)], CROSS, 0, 0, 3),
        log_prob_change_figure(tokens, np.linspace(-1, 1, len(tokens)), "change"),
        source_share_figure(tokens, np.linspace(0, 1, len(tokens))),
        contribution_figure(np.full((3, 9), 1 / 9), tokens[:3], trace.source_tokens, trace.decoder_tokens[:3])]


def test_titles_start_below_the_mode_bar_and_end_above_what_follows(trace):
    for figure in every_figure(trace):
        layout = layout_of(figure)
        assert layout["margin"]["t"] >= title_end(layout) + 4  # the plot (or the panel names) start below it
        paper = layout["height"] - layout["margin"]["t"] - layout["margin"]["b"]
        for note in layout.get("annotations", []):  # panel names above their plots: the title ends above them
            if note.get("yref") == "paper" and note.get("yanchor") == "bottom":
                lines = len(note["text"].split("<br>"))
                assert layout["margin"]["t"] + (1 - note["y"]) * paper - 14 * lines >= title_end(layout) - 1e-9


def test_every_new_layout_passes_plotlys_full_validation(trace, value_norms):
    """Pixel titles, thinned and upright labels, side colour bar titles, stacked comparisons: all valid Plotly."""
    figures = every_figure(trace) + [attention_figure(value_norms, CROSS, 0, head, 2) for head in (1, MEAN, ALL_HEADS)]
    figures += [overview_figure(sentence(60, 58), CROSS, 10), translation_figure(sentence(60, 58), 3)]
    for figure in figures:
        go.Figure(figure.to_dict())  # raises on any invalid property or value


def test_whatif_bar_charts_leave_room_for_the_mode_bar(trace):
    layout = layout_of(comparison_figure([("original", trace.target_tokens, trace.probabilities)], [set()]))
    assert layout["margin"]["t"] >= MODEBAR_PX + 16  # the first chart's heading (12 px, 16 high) below the mode bar


# ---- what a browser draws: nothing overlaps, at a desktop's and a phone's width ----

PLOTLY_JS = os.path.join(os.path.dirname(plotly.__file__), "package_data", "plotly.min.js")
BOXES = """([figure, width]) => {
  const div = document.getElementById('plot');
  Plotly.purge(div);
  div.style.width = `${width}px`;
  return Plotly.newPlot(div, figure.data, figure.layout, {displayModeBar: true}).then(() => {
    const box = (e) => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
    const all = (selector) => [...div.querySelectorAll(selector)].filter(e => e.textContent).map(box);
    const ticks = {};
    div.querySelectorAll('g[class$=tick] text').forEach(e => {  // xtick, ytick, and a grid's x2tick, y2tick...
      const kind = e.parentNode.getAttribute('class');
      if (!e.textContent || !/^[xy][0-9]*tick$/.test(kind)) return;
      const layer = e.closest('[class*=axislayer]').parentNode;  // one subplot's axis
      const axis = layer.getAttribute('class') + ' ' + kind[0] + 'tick';
      (ticks[axis] = ticks[axis] || []).push(box(e));
    });
    return {title: all('.g-gtitle text'), names: all('.annotation-text'), colorbars: all('.cbtitle text'),
            modebar: [...div.querySelectorAll('.modebar-group')].map(box), ticks};
  });
}"""


@pytest.fixture(scope="module")
def browser_page():
    if not shutil.which("/usr/bin/chromium"):
        pytest.skip("Debian's chromium is not installed")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", headless=True,
                                             args=["--no-sandbox", "--disable-gpu", "--no-first-run"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.set_content("<html><body style='margin:0'><div id=plot></div></body></html>")
        page.add_script_tag(path=PLOTLY_JS)
        yield page
        browser.close()




def overlap(a, b) -> bool:
    return a[0] < b[2] - 1 and b[0] < a[2] - 1 and a[1] < b[3] - 1 and b[1] < a[3] - 1


@pytest.mark.slow
@pytest.mark.parametrize("width", [1240, 760, 330])  # the model view's and the attention plot's widths at
def test_drawn_titles_names_mode_bar_and_labels_do_not_overlap(browser_page, value_norms, width):  # 1400 x 900; a phone
    long, eight = sentence(60, 58), sentence(17, 9, heads=8)
    short = dataclasses.replace(sentence(7, 5, heads=8), source_tokens=[  # level labels wider than their keys
        "people", "sit", "inside", "a", "train", ".", "<eos>"])
    figures = {"long cross head": attention_figure(long, CROSS, 0, 1, 57),
               "long decoder mean": attention_figure(long, DECODER, 0, MEAN, 57),
               "all heads": attention_figure(eight, CROSS, 1, ALL_HEADS, 4),
               "value norm head": attention_figure(value_norms, CROSS, 0, 1, 2),
               "model view": overview_figure(eight, CROSS, 4),
               "model view of a short sentence": overview_figure(short, CROSS, 3),
               "compared": model_comparison_figure([("en-de", eight), ("en-de-small", eight)], CROSS, 1, 0, 4),
               "compared, a long sentence": model_comparison_figure([("en-de", long), ("en-de-small", long)], CROSS,
                                                                    1, 0, 57),
               "probabilities": translation_figure(long, 3)}
    problems = []
    for name, figure in figures.items():
        data = json.loads(figure.to_json())
        first = data["data"][0]  # a heatmap of one map, or a bar chart, is drawn wide enough for its keys
        grid = first["type"] == "heatmap" and "xaxis2" in data["layout"]  # drawn at least GRID_PX wide, or `least`
        sides = {"heatmap": 0 if grid else HEATMAP_SIDES, "bar": BAR_SIDES}[first["type"]]
        keys = len(first["x"]) if sides else 0
        least = max(GRID_PX, data["layout"].get("meta", {}).get("least", 0)) if grid else 0
        drawn = browser_page.evaluate(BOXES, [data, max(width, KEY_PX * keys + sides, least)])
        texts = [("title", box) for box in drawn["title"]] + [("name", box) for box in drawn["names"]] + \
                [("colour bar", box) for box in drawn["colorbars"]]
        assert drawn["title"], name
        problems += [(name, f"{a} on {b}") for (a, one), (b, two) in combinations(texts, 2)
                     if (a, b) != ("title", "title") and overlap(one, two)]
        problems += [(name, f"mode bar on {kind}") for kind, box in texts
                     if any(overlap(box, bar) for bar in drawn["modebar"])]
        for axis, ticks in drawn["ticks"].items():
            if "ytick" in axis and any(overlap(a, b) for a, b in zip(ticks, ticks[1:])):
                problems.append((name, "row labels on each other"))  # never
            centres = sorted((box[0] + box[2]) / 2 for box in ticks)
            if "xtick" in axis and min(np.diff(centres), default=99) < 7:  # upright where crowded: 7 px apart
                problems.append((name, "key labels on each other"))
        keys = [(axis, box) for axis, ticks in drawn["ticks"].items() if "xtick" in axis for box in ticks]
        if any(overlap(a, b) for (one, a), (two, b) in combinations(keys, 2) if one != two):
            problems.append((name, "key labels of neighbouring panels on each other"))  # "<eos>people"
    assert not problems, "; ".join(f"{name}: {what}" for name, what in sorted(set(problems)))


@pytest.mark.slow
def test_every_title_line_fits_a_phones_heatmap(browser_page):
    """Titles are not wrapped by Plotly: on a 390 px phone the attention plot is 330 px wide, and each line of a
    measure's title, integrated gradients' completeness line and a word's line must fit it whole."""
    from attention_inspector.ui.operations import COMPLETENESS, MEASURE_LINES

    base = sentence(6, 5)
    pieces = dataclasses.replace(base, target_tokens=["die", "zeitungs@@", "les@@", "erin", "<eos>"],
                                 decoder_tokens=["<sos>", "die", "zeitungs@@", "les@@", "erin"], scheme="bpe",
                                 units="words")
    figures = {line: attention_figure(dataclasses.replace(base, measure=line), CROSS, 0, 1, 4)
               for line, _ in MEASURE_LINES.values()}
    figures["completeness"] = attention_figure(dataclasses.replace(base, measure="x\n" + COMPLETENESS.format(0.123)),
                                               CROSS, 0, 1, 4)
    figures["a word being built"] = attention_figure(pieces, CROSS, 0, MEAN, 2)
    wide = {name: browser_page.evaluate(BOXES, [json.loads(figure.to_json()), 330])["title"][0][2]
            for name, figure in figures.items()}
    assert all(right <= 330 for right in wide.values()), wide
