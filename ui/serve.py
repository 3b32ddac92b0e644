"""The app as a command (`python app.py`, `attention-inspector serve`): settings from the environment and the
command line, the checkpoints loaded, the page launched.

Settings come from the environment:
- CHECKPOINTS: the folder of checkpoint folders (`--checkpoints` too; default: the shipped ones, inside the
  installed package or a checkout's checkpoints/, else checkpoints/ in the current folder);
- DEVICE: cpu, cuda or cuda:N, where the models run (default: cuda where there is a GPU, else cpu);
- TRACE_WORKERS: forked processes that decode translations together (default: one per core on the CPU, none on
  a GPU; 0: none);
- TRACE_BATCH: queued translations run at once per worker (default 16);
- TORCH_THREADS: torch threads per request (default 1: two cores serve every user);
- SESSION_CAPACITY: user sessions kept at most (default 1000, the least recently used dropped first);
- MODEL_MEMORY_GB: memory for Hub-size models, loaded on first use (default 8; the least recently used unloaded
  first);
- GRADIO_SERVER_NAME / GRADIO_SERVER_PORT: the address (a Space sets them).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

import attention_inspector
from attention_inspector.model.api.services import load_services
from attention_inspector.ui.demo import build_demo, launch_options


def checkpoints_folder(given: str | None = None) -> Path:
    """Where the checkpoints are: `given`, else CHECKPOINTS, else the shipped ones (`attention_inspector.checkpoints`),
    else ./checkpoints; exits saying where it looked and how to tell it where they are, where none of these is a
    folder."""
    if given or os.environ.get("CHECKPOINTS"):
        folder = Path(given or os.environ["CHECKPOINTS"])
        if not folder.is_dir():
            sys.exit(f"No checkpoints folder at {folder}: give the folder that holds the checkpoint folders (a "
                     "checkout's checkpoints/) with --checkpoints DIR or CHECKPOINTS=DIR")
        return folder
    shipped = attention_inspector.checkpoints()
    if shipped is not None:
        return shipped
    if Path("checkpoints").is_dir():
        return Path("checkpoints")
    sys.exit(f"No checkpoints found (none shipped, none in {Path('checkpoints').resolve()}): give the "
             "folder that holds the checkpoint folders (a checkout's checkpoints/) with --checkpoints DIR or "
             "CHECKPOINTS=DIR")


def main(argv: list[str] | None = None, name: str = "app.py") -> None:
    parser = argparse.ArgumentParser(prog=name, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoints", help="the folder of checkpoint folders (default: CHECKPOINTS, else the "
                                              "shipped ones, else ./checkpoints)")
    args = parser.parse_args(argv)
    root = checkpoints_folder(args.checkpoints)
    torch.set_num_threads(int(os.environ.get("TORCH_THREADS", "1")))
    workers = os.environ.get("TRACE_WORKERS")
    try:
        services = load_services(root, None if workers is None else int(workers),
                                 int(os.environ.get("TRACE_BATCH", "16")),
                                 int(float(os.environ.get("MODEL_MEMORY_GB", "8")) * 1024 ** 3))
    except ValueError as error:  # a setting that cannot be met (DEVICE, TRACE_WORKERS): said, not a traceback
        sys.exit(f"{name}: {error}")
    demo = build_demo(services)
    demo.launch(state_session_capacity=int(os.environ.get("SESSION_CAPACITY", "1000")),
                **launch_options(services))
