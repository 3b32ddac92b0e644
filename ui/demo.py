"""The page, built from the loaded services: `build_demo(services) -> gr.Blocks`.

Building loads nothing: `app.py` loads the checkpoints and forks the workers, then hands them here. The core loop
(ui/tabs/inspect.py) sits on top; every other capability is a tab of its own (ui/tabs/). Each module builds its
components into one `Page` and wires its own events (ui/listeners.py); `render` (ui/render.py) is the one place
a session becomes what the page shows.
"""

from __future__ import annotations

import gradio as gr

from attention_inspector.model.api.services import Services
from attention_inspector.ui import listeners
from attention_inspector.ui.api import endpoints
from attention_inspector.ui.door import door
from attention_inspector.ui.listeners import QUEUE_SIZE, STATIC
from attention_inspector.ui.page import Page
from attention_inspector.ui.plots import serve_plotly
from attention_inspector.ui.session import Revisions
from attention_inspector.ui.tabs import (beam, branch, compare, counterfactual, heads, hub, inspect, share, sources,
                                         statistics)

TABS = (branch, heads, beam, statistics, compare, counterfactual, share, sources, hub)
# Memory bounds for a public server: a session is freed an hour after its last update, and Gradio keeps the
# state of at most `state_session_capacity` sessions (app.py), the least recently used dropped first.
SESSION_TTL_S = 3600


def build_demo(services: Services) -> gr.Blocks:
    """The whole page for `services`' models: the core loop, the tabs and the JSON API."""
    serve_plotly()
    with gr.Blocks(title="Transformer attention inspector") as demo:
        page = Page(demo=demo)
        gr.Markdown("**Transformer attention inspector**: translate, then step through greedy decoding (buttons, "
                    "slider or ←/→) and inspect every layer and head of every attention.")
        page.session = gr.State(Revisions(), time_to_live=SESSION_TTL_S)  # then a Session
        # The revision of the state the page shows, sent with every event (ui/listeners.py `answer`).
        page.revision = gr.Number(0, precision=0, visible=False, elem_id="revision")
        inspect.build(page, services)
        with gr.Tabs(elem_id="what-if") as page.tabs:
            for tab in TABS:
                tab.build(page, services)
        listeners.wire(page, services)
        for tab in TABS:
            tab.wire(page, services)
        # The JSON API: trace, score, beam search and attributions with every number (model/api/answers.py, ui/api.py),
        # queued with model work.
        for function in endpoints(services):
            gr.api(function, api_name=function.__name__, **services.trace_queue)
    demo.queue(default_concurrency_limit=2, max_size=QUEUE_SIZE)
    demo.page = page  # the components by name, for tests and benchmarks
    return demo


def launch_options(services: Services) -> dict:
    """What `launch` needs besides the address: the page's CSS and JavaScript (ui/static/), every error's message
    shown to the client (a request Gradio itself refuses, e.g. too few values, says why), and the door that bounds
    the page's requests outside the queue (ui/door.py). Gradio's run history is off: it kept every event's inputs
    and outputs (whole figures) in the browser's localStorage and rewrote them after each event, which made the
    page slower the longer it was used (docs/performance.md), and it kept the user's sentences there."""
    return dict(css_paths=[STATIC / "style.css"], js=(STATIC / "page.js").read_text(), show_error=True,
                run_history=False,
                head=f"<script>{(STATIC / 'busy.js').read_text()}</script>",
                app_kwargs={"middleware": [door(services.admission)]})
