"""The `attention-inspector` command: the app and every study, each the module's own command line.

    attention-inspector serve [--checkpoints DIR]      # the page (python app.py in a checkout)
    attention-inspector evaluate --checkpoint checkpoints/en-de --split test
    attention-inspector heads --checkpoint checkpoints/en-de --split val
    attention-inspector COMMAND --help

Each command is `python -m <module>` of a checkout, named below; the studies need the `studies` extra
(`pip install "attention-inspector[studies]"`: datasets, sacrebleu, tqdm).
"""

from __future__ import annotations

import importlib
import os
import sys

import attention_inspector

COMMANDS = {  # name: (module, what it does)
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
    lines = [f"  {name:{width}s}  {what}  (python -m {module})" for name, (module, what) in COMMANDS.items()]
    return (f"attention-inspector {attention_inspector.__version__}\n\nusage: attention-inspector COMMAND [ARGS]\n\n"
            "commands:\n" + "\n".join(lines) + "\n\nattention-inspector COMMAND --help says what each takes.")


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
    try:
        command = importlib.import_module(module)
    except ModuleNotFoundError as error:  # a study's package that the app's requirements leave out
        sys.exit(f"attention-inspector {argv[0]} needs {error.name}: pip install \"attention-inspector[studies]\"")
    if argv[0] == "serve":
        command.main(argv[1:], name="attention-inspector serve")
        return
    sys.argv = [f"attention-inspector {argv[0]}", *argv[1:]]  # argparse's prog, in usage and errors
    status = command.main(argv[1:])
    if status:  # a command that returns its exit status (convert)
        sys.exit(status)
