"""The `attention-inspector` command: the app and every study, each the module's own command line.

    attention-inspector serve [--checkpoints DIR]      # the page (python app.py in a checkout)
    attention-inspector evaluate --checkpoint checkpoints/en-de --split test
    attention-inspector heads --checkpoint en-de --split val    # writes en-de-heads/heads.json here
    attention-inspector COMMAND --help

Each command is a module's own command line (`python -m model.analysis.heads` in a checkout), its --help and
examples written as this command runs them (`as_installed`). Every one says what it takes (--help) with the app's
requirements; reading Multi30k and scoring BLEU need the `studies` extra (`pip install
"attention-inspector[studies]"`: datasets, pyarrow, sacrebleu): --help says which commands need it, and a command
that needs it and lacks it says so before it starts any work. A checkpoint given by name is read, never written.
"""

from __future__ import annotations

import importlib
import os
import re
import sys

import attention_inspector
from attention_inspector.model.extras import INSTALL, STUDIES
COMMANDS = {  # name: (module under attention_inspector, what it does)
    "serve": ("ui.serve", "the page: translate, step, look at every head (python app.py)"),
    "train": ("model.training.train", "train a translation model on Multi30k or your own pairs"),
    "evaluate": ("model.training.evaluate", "BLEU and chrF of a checkpoint on a split"),
    "convert": ("model.hub.convert_hf", "a Hub model (opus-mt, NLLB, M2M100, mBART-50, T5) into a checkpoint"),
    "heads": ("model.analysis.heads", "which heads matter: every head switched off alone, over a split"),
    "align": ("model.analysis.align", "word alignments from attention, and their error rate"),
    "faithfulness": ("model.analysis.faithfulness", "which explanation to trust, over a split"),
    "patching": ("model.analysis.patching", "activation patching per head over pairs of sources"),
    "detachment": ("model.analysis.detachment", "translations ranked by how detached from their source"),
    "inspect": ("model.serving.inspect", "trace files (every attention map) of many sentences"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:{width}s}  {what}" for name, (_, what) in COMMANDS.items()]
    return (f"attention-inspector {attention_inspector.__version__}\n\nusage: attention-inspector COMMAND [ARGS]\n\n"
            "commands:\n" + "\n".join(lines) + "\n\nattention-inspector COMMAND --help says what each takes.")


def as_installed(text: str, module: str, name: str) -> str:
    """A module's own examples, `python -m model.analysis.heads --checkpoint checkpoints/en-de` (a checkout's), as
    the installed command runs them: `attention-inspector heads --checkpoint en-de` (a shipped checkpoint by name)."""
    text = text.replace(f"python -m {module}", f"attention-inspector {name}")
    text = text.replace(f"-m {module}", f"-m attention_inspector {name}")  # torchrun's
    return re.sub(r"--checkpoint checkpoints/", "--checkpoint ", text)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return
    if argv[0] in ("-V", "--version"):
        print(f"attention-inspector {attention_inspector.__version__}")
        return
    if argv[0] not in COMMANDS:
        sys.exit(f"attention-inspector: unknown command {argv[0]!r}\n\n{usage()}")
    # Read when gradio is imported (app.py says why).
    os.environ.setdefault("GRADIO_ANALYTICS_CACHE_FREQUENCY", "1000")
    module, _ = COMMANDS[argv[0]]
    from attention_inspector.model.serving.checkpoint import CheckpointError
    from attention_inspector.model.training.data import DataError

    try:
        command = importlib.import_module(f"attention_inspector.{module}")
        if argv[0] == "serve":
            command.main(argv[1:], name="attention-inspector serve")
            return
        sys.argv = [f"attention-inspector {argv[0]}", *argv[1:]]  # argparse's prog, in usage and errors
        command.__doc__ = as_installed(command.__doc__, module, argv[0])  # its --help's description
        status = command.main(argv[1:])
    except ModuleNotFoundError as error:
        if error.name not in STUDIES:
            raise
        sys.exit(f"attention-inspector {argv[0]} needs {error.name} for this: {INSTALL}")
    except (DataError, CheckpointError) as error:  # data or a checkpoint that cannot be used: said in a line
        sys.exit(f"attention-inspector {argv[0]}: {error}")
    if status:  # a command that returns its exit status (convert)
        sys.exit(status)
