"""Where each word came from: the ALTI+ share of each generated word's prediction that came from the source."""

from __future__ import annotations

import gradio as gr

from ui.listeners import tab_answer
from ui.operations import operation
from ui.page import Page
from ui.plots import figure_json, plot
from ui.services import Services
from ui.session import Session
from viz.whatif import contribution_figure, source_share_figure


def build(page: Page, services: Services) -> None:
    with gr.Tab("Where each word came from", elem_id="sources-tab"):
        gr.Markdown("How much of each word's prediction came from the source sentence and how much from the "
                    "translation so far (ALTI+, Ferrando et al. 2022): every layer's attention, residual "
                    "connections and layer norms decomposed token by token, not just attention weights. A word "
                    "that owes little to the source is a sign of hallucination (Dale et al. 2023).")
        page.contributions = gr.Button("Measure where each word came from", variant="primary",
                                       elem_id="contributions")
        page.source_share_plot = plot("source-share")
        page.contribution_plot = plot("contribution-map")


@operation
def measure_sources(services: Services, session: Session) -> tuple[tuple, str]:
    """The ALTI+ source share of each word of the decoding on screen, and the full map."""
    decoding = session.current
    trace = decoding.trace
    measured = services.translators[session.model].contributions(session.source, trace.target_tokens,
                                                                 list(decoding.mask), **session.direction)
    if measured is None:
        return (None, None), ("This GRU model has no residual stream for ALTI+ to decompose: its cross-attention "
                              "(the Cross-attention view) is what shows where its words look in the source.")
    shares = measured.source_contribution
    return (figure_json(source_share_figure(trace.target_tokens, shares)),
            figure_json(contribution_figure(measured.decoder, trace.target_tokens, trace.source_tokens,
                                            trace.decoder_tokens))), (
        f"Contributions of {decoding.name}: {shares.mean():.0%} of each word's prediction came from the source on "
        f"average ({shares.min():.0%} to {shares.max():.0%}).")


def wire(page: Page, services: Services) -> None:
    tab_answer(page, services, measure_sources, [], [page.source_share_plot, page.contribution_plot],
               "contributions_view", page.contributions.click, **services.trace_queue)
