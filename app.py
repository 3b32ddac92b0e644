"""Attention inspector: translate a sentence, step through greedy decoding, look at every layer and head.

    python app.py            # http://127.0.0.1:7860

This file only starts the app (ui/serve.py, whose docstring lists the settings the environment gives): the page is
the `ui` package, model work is in `model/`, figures in `viz/`.
"""

from __future__ import annotations

import os

# Gradio summarizes its last 10,000 events with pandas after every event, for a monitoring page this app does not
# enable: a sixth of the web server's CPU under load. Every 1,000 events is plenty. (Read when gradio is imported.)
os.environ.setdefault("GRADIO_ANALYTICS_CACHE_FREQUENCY", "1000")

from attention_inspector.ui.serve import main  # noqa: E402  (after the environment above)

if __name__ == "__main__":
    main()
