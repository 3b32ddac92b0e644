"""The `studies` extra (`pip install "attention-inspector[studies]"`): the packages that reading Multi30k and scoring
BLEU take beyond the app's. A study's command asks for those it will use before it starts any work (`require`), so
that a missing one is said at once, not after a pass over the data."""

from __future__ import annotations

import importlib

DATA = ("datasets", "pyarrow")  # a Multi30k split: its raw files, a Hub dataset or the reversal task's strings
BLEU = ("sacrebleu",)  # BLEU and chrF (model/training/evaluate.py `score`), sentence BLEU (detachment's perturbation)
STUDIES = DATA + BLEU
INSTALL = 'pip install "attention-inspector[studies]"'


def require(*packages: str) -> None:
    """Import each of `packages` now: ModuleNotFoundError, named after the first that is missing, if one is."""
    for name in packages:
        importlib.import_module(name)
