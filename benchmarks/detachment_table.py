"""The detachment detectors' known-answer table of docs/explanations.md: ROC-AUC and precision at 90% recall of
each detector, per kind of constructed detached pair, per model (model/analysis/detachment.py `evaluation`).

    python benchmarks/detachment_table.py [--sentences 500] [--models en-de de-en en-fr-rnn-dot hub]

`hub` is a tiny opus-mt-like model with random weights (tests/hub_models.py), converted into the project as a Hub
model is: it shows the path runs for any converted model; its numbers say nothing of a trained one. Prints the
CPU, then each model's table.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.load import cpu_model  # noqa: E402
from attention_inspector.model.analysis.detachment import evaluation, print_evaluation  # noqa: E402
from attention_inspector.model.serving.checkpoint import load_checkpoint  # noqa: E402
from attention_inspector.model.training.data import load_pairs  # noqa: E402
from attention_inspector.model.training.evaluate import DEFAULT_DATA  # noqa: E402


def hub_model(folder: Path) -> Path:
    """A tiny random opus-mt-like model, converted."""
    from attention_inspector.model.hub.convert_hf import convert
    from tests import hub_models

    return Path(convert(str(hub_models.marian(folder / "marian")), folder / "converted"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=500, help="val sources per model")
    parser.add_argument("--models", nargs="+", default=["en-de", "de-en", "en-fr-rnn-dot", "hub"])
    parser.add_argument("--data", default=str((ROOT / DEFAULT_DATA).resolve()), help="Multi30k folder or hub id")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"{cpu_model()}; torch {torch.__version__}; {args.sentences} val sources per model")
    with tempfile.TemporaryDirectory() as work:
        for name in args.models:
            folder = hub_model(Path(work)) if name == "hub" else ROOT / "checkpoints" / name
            translator = load_checkpoint(folder)
            languages = ("en", "de") if name == "hub" else (translator.src_tokenizer.lang,
                                                             translator.tgt_tokenizer.lang)
            texts = list(load_pairs(args.data, "val", *languages)["src"])[:args.sentences]
            print(f"\n{name}" + (" (random weights)" if name == "hub" else ""))
            report = evaluation(translator, texts)
            report.pop("own")
            print_evaluation(report)


if __name__ == "__main__":
    main()
