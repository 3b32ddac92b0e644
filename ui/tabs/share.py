"""Share and export: a link that opens exactly this view, the decoding as a trace file (JSON or NPZ) and the
view as a self-contained interactive HTML page."""

from __future__ import annotations

import tempfile
from dataclasses import replace
from functools import partial
from pathlib import Path

import gradio as gr

from attention_inspector.model.api.services import Services
from attention_inspector.model.keys import GRADIENTS
from attention_inspector.model.serving.inspect import FORMATS, encode, trace_record
from attention_inspector.ui.links import link_of
from attention_inspector.ui.listeners import STATIC, tab_answer
from attention_inspector.ui.operations import drawn, operation, shown
from attention_inspector.ui.page import Page
from attention_inspector.ui.render import file_stem
from attention_inspector.ui.session import Session
from attention_inspector.viz.attention import standalone_html
from attention_inspector.viz.views import attention_figure, view_name

# "Copy link": the view on screen as a link's query (made on the server from the session and the page's step), then
# in the page a URL of this page, copied to the clipboard where the browser allows it and shown to copy by hand.
LINK_JS = (STATIC / "link.js").read_text()


def build(page: Page, services: Services) -> None:
    with gr.Tab("Share and export", elem_id="export-tab"):
        gr.Markdown("A link opens exactly this view: model, sentence, branch, heads off, step, attention, layer, "
                    "head, measure and comparison. Every plot's toolbar (hover it) downloads PNG and SVG.")
        with gr.Row(equal_height=True):
            page.copy_link = gr.Button("Copy link", elem_id="copy-link", scale=1, min_width=100)
            page.link_box = gr.Textbox(label="Link to this view", interactive=False, buttons=["copy"],
                                       elem_id="link", scale=5)
        with gr.Row():
            page.export_json = gr.Button("Download trace (JSON)", elem_id="export-json")
            page.export_npz = gr.Button("Download trace (NPZ)", elem_id="export-npz")
            page.export_html = gr.Button("Download view as HTML", elem_id="export-html")
        page.export_file = gr.File(label="Your file: the whole decoding on screen (tokens, probabilities, top-k, "
                                   "every attention map, measures once shown; model/serving/inspect.py load_trace "
                                   "reads it back), or the view as an interactive page", interactive=False,
                                   elem_id="export-file")


@operation
def link_query(services: Services, session: Session, step: object, counterfactual: object = None
               ) -> tuple[tuple, str]:
    """The query of a link that opens the view on screen at `step` (ui/links.py), with the counterfactual typed in
    its tab."""
    counterfactual = counterfactual.strip() if isinstance(counterfactual, str) else None
    spec = link_of(session.with_view(replace(session.view, step=step)), counterfactual)
    return ("?" + spec.url_query(),), "A link to this view: it opens the same model, sentence, decoding and view."


@operation
def export_trace(services: Services, session: Session, file_format: object) -> tuple[tuple, str]:
    """The decoding on screen as a trace file (model/serving/inspect.py's format), with its measures if they were
    computed and the Counterfactual tab's last patching of it."""
    if file_format not in FORMATS:
        return session, f"Export as {' or '.join(FORMATS)}, not {shown(file_format)}."
    decoding, translator = session.current, services.translators[session.model]
    trace, kept = decoding.trace, decoding.measure_maps or {}
    record = trace_record(session.model, translator.model.config.to_dict(), session.source, decoding.text,
                          source_tokens=trace.source_tokens, target_tokens=trace.target_tokens,
                          top_tokens=trace.top_tokens, probabilities=trace.probabilities,
                          top_probabilities=trace.top_probabilities, encoder_attention=trace.encoder,
                          decoder_attention=trace.decoder, cross_attention=trace.cross, forced=trace.forced,
                          force=list(decoding.force), mask=list(decoding.mask), scheme=trace.scheme,
                          units=session.view.units, measures={measure: maps for measure, maps in kept.items()
                                                              if measure not in GRADIENTS} or None,
                          attributions={measure: maps["results"] for measure, maps in kept.items()
                                        if measure in GRADIENTS} or None, patching=decoding.patched)
    path = Path(tempfile.mkdtemp(prefix="trace-")) / f"{file_stem(session)}.{file_format}"
    path.write_bytes(encode(record, file_format))
    return (str(path),), (f"Trace of {decoding.called} as {file_format.upper()}: {path.stat().st_size / 1000:,.0f} kB"
                          + ("" if not kept else ", with its measures")
                          + ("" if decoding.patched is None else ", with its patching against "
                             f"\"{decoding.patched['counterfactual']}\" at step {decoding.patched['step']}") + ".")


@operation
def export_view(services: Services, session: Session, step: object) -> tuple[tuple, str]:
    """The attention view on screen, at the step on screen, as a self-contained interactive HTML file."""
    session = session.with_view(replace(session.view, step=step))
    trace, layer, head = drawn(session)
    view = session.view
    figure = attention_figure(trace, view.kind, layer, head, view.step - 1)
    name = f"{file_stem(session)}_{view_name(view.kind, layer, head)}_step{view.step}"
    path = Path(tempfile.mkdtemp(prefix="view-")) / f"{name}.html"
    path.write_text(standalone_html(figure, f"{session.model}: {session.source}", name), encoding="utf-8")
    return (str(path),), (f"This view as an interactive HTML file that opens offline: "
                          f"{path.stat().st_size / 1e6:.1f} MB.")


def wire(page: Page, services: Services) -> None:
    tab_answer(page, services, link_query, [page.step, page.counterfactual], [page.link_box], "link",
               page.copy_link.click).then(
        None, page.link_box, page.link_box, js=LINK_JS)
    for button, file_format in ((page.export_json, "json"), (page.export_npz, "npz")):
        tab_answer(page, services, partial(export_trace, file_format=file_format), [], [page.export_file],
                   button.elem_id.replace("-", "_"), button.click)
    tab_answer(page, services, export_view, [page.step], [page.export_file], "export_html", page.export_html.click)
