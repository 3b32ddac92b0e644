"""The shipped string-reversal checkpoint is reproducible: its recorded training command, re-run from
scratch, learns reversal of held-out strings, with cross-attention on the right-to-left anti-diagonal."""

import json
import shlex
from pathlib import Path

import numpy as np
import pytest

from attention_inspector.model.serving.checkpoint import load_checkpoint
from attention_inspector.model.training import train
from attention_inspector.model.training.data import load_pairs
from attention_inspector.model.training.evaluate import evaluate

pytestmark = pytest.mark.slow  # trains the shipped reverser from scratch (about two minutes)

SHIPPED = Path(__file__).resolve().parent.parent / "checkpoints" / "reverse"


def recorded_arguments(out: Path) -> list[str]:
    """The shipped checkpoint's training command, writing to `out` instead of checkpoints/."""
    command = json.loads((SHIPPED / "metrics.json").read_text())["training"]["command"]
    argv = shlex.split(command)[3:]  # drop "python -m model.training.train"
    for flag, value in (("--out", out / "reverse"), ("--work", out / "work")):
        argv[argv.index(flag) + 1] = str(value)
    return argv


def anti_diagonal_offsets(translator, strings: list[str]) -> np.ndarray:
    """For each output character t of each string: argmax of the head-mean cross-attention - (n - 1 - t)."""
    offsets = []
    for text in strings:
        cross = translator.trace(text).trace.cross_attention[0].mean(axis=0)  # (T, S)
        offsets += [int(cross[t].argmax()) - (len(text) - 1 - t) for t in range(len(text))]
    return np.array(offsets)


def test_recorded_command_trains_reversal_from_scratch(tmp_path):
    train.main(recorded_arguments(tmp_path))
    translator = load_checkpoint(tmp_path / "reverse")

    metrics, outputs = evaluate(translator, "reverse", "test", beam_size=1)  # 500 strings never trained on
    assert metrics["exact_match"] >= 99.0, metrics

    offsets = anti_diagonal_offsets(translator, load_pairs("reverse", "test", "chars", "chars")["src"][:100])
    # Output t copies input n-1-t: the attention peak walks right-to-left along the anti-diagonal.
    assert np.mean(offsets == 0) >= 0.8, np.unique(offsets, return_counts=True)
    assert np.mean(np.abs(offsets) <= 1) >= 0.95


def test_shipped_reverser_reverses_text_it_never_saw():
    translator = load_checkpoint(SHIPPED)
    assert translator.translate(["hello world", "attention", "abc"]) == ["dlrow olleh", "noitnetta", "cba"]
    assert json.loads((SHIPPED / "metrics.json").read_text())["scores"]["test"]["exact_match"] >= 99.0
    examples = translator.metrics["examples"]  # what the app offers in its example list
    offsets = anti_diagonal_offsets(translator, examples + ["hello world", "transformer"])
    assert len(examples) == 6 and np.mean(offsets == 0) >= 0.8 and np.mean(np.abs(offsets) <= 1) >= 0.95
