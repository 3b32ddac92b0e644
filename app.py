"""Attention inspector: translate a sentence, step through greedy decoding, look at every layer and head.

    python app.py            # http://127.0.0.1:7860

This file only configures, loads and launches: the page is the `ui` package, model work is in `model/`, figures
in `viz/`. Settings come from the environment:
- CHECKPOINTS: the folder of checkpoint folders (default: checkpoints/ beside this file);
- DEVICE: cpu, cuda or cuda:N, where the models run (default: cuda where there is a GPU, else cpu);
- TRACE_WORKERS: forked processes that decode translations together (default: one per two cores on the CPU, none
  on a GPU; 0: none);
- TRACE_BATCH: queued translations run at once per worker (default 16);
- TORCH_THREADS: torch threads per request (default 1: two cores serve every user);
- SESSION_CAPACITY: user sessions kept at most (default 1000, the least recently used dropped first);
- MODEL_MEMORY_GB: memory for Hub-size models, loaded on first use (default 8; the least recently used unloaded
  first);
- GRADIO_SERVER_NAME / GRADIO_SERVER_PORT: the address (a Space sets them).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# Gradio summarizes its last 10,000 events with pandas after every event, for a monitoring page this app does not
# enable: a sixth of the web server's CPU under load. Every 1,000 events is plenty. (Read when gradio is imported.)
os.environ.setdefault("GRADIO_ANALYTICS_CACHE_FREQUENCY", "1000")

import torch  # noqa: E402  (after the environment above)

from ui import build_demo, launch_options, load_services  # noqa: E402


def main() -> None:
    torch.set_num_threads(int(os.environ.get("TORCH_THREADS", "1")))
    root = Path(os.environ.get("CHECKPOINTS", Path(__file__).parent / "checkpoints"))
    workers = os.environ.get("TRACE_WORKERS")
    try:
        services = load_services(root, None if workers is None else int(workers),
                                 int(os.environ.get("TRACE_BATCH", "16")),
                                 int(float(os.environ.get("MODEL_MEMORY_GB", "8")) * 1024 ** 3))
    except ValueError as error:  # a setting that cannot be met (DEVICE, TRACE_WORKERS): said, not a traceback
        sys.exit(f"app.py: {error}")
    demo = build_demo(services)
    demo.launch(state_session_capacity=int(os.environ.get("SESSION_CAPACITY", "1000")),
                **launch_options(services))


if __name__ == "__main__":
    main()
