"""The Python API: a checkpoint asked as the JSON API is asked, without a server.

    import attention_inspector

    model = attention_inspector.load("en-de")            # a shipped checkpoint by name, or a checkpoint folder
    result = model.trace("A dog runs in the park.")      # the same dict as POST /trace answers
    model.detach("A dog runs in the park.", "Ein Hund rennt im Park.")
    model.score(text, tokens), model.beam(text), model.attribute(text), model.patch(text, counterfactual)
    model.neuron("A dog runs.", "cross", 1, 2, query=3)   # the query and key vectors behind a row of a head

Each method takes its endpoint's arguments (docs/api.md), the model's name aside, and returns the endpoint's
answer, the same values: it is the method of model/api/answers.py `Answers` that the endpoint calls (ui/api.py), which
imports no Gradio. A bad argument raises `AnswerError` (a ValueError) with the endpoint's message; so does a name
`load` cannot find, with the names it can.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

from attention_inspector.model.api import answers
from attention_inspector.model.api.services import Services
from attention_inspector.model.nets.devices import chosen_device
from attention_inspector.model.serving.checkpoint import (CONFIG, WEIGHTS, checkpoint_folder, judge_folder,
                                                          load_checkpoint, named_checkpoints)
from attention_inspector.model.serving.translator import Translator


class Model(answers.Answers):
    """One checkpoint and the JSON API's answers about it (`load`): `trace`, `detach`, `score`, `beam`, `attribute`,
    `patch` and `neuron` are the methods of model/api/answers.py `Answers` that the HTTP API's endpoints call, with
    the endpoint's parameters after the model's name; `show` draws it in a notebook."""

    def __init__(self, translator: Translator, name: str, judge: Path | None = None, device: str | None = None):
        super().__init__(Services(WithJudge({name: translator}, judge, device)), name)

    def __repr__(self) -> str:
        return f"<attention_inspector.Model {self.name!r}: {self.translator.parameters / 1e6:.1f}M parameters>"

    def show(self, text: str, **options):
        """The greedy translation of `text` in the page's core view, inline in a notebook or as a page
        (attention_inspector/notebook.py `show`, which says the options)."""
        from attention_inspector.notebook import show

        return show(self, text, **options)


def load(name_or_folder: str | Path, device: str | None = None) -> Model:
    """A checkpoint: a checkpoint folder (a converted Hub model's too), or one by name ("en-de") from the folder of
    checkpoints that `CHECKPOINTS=DIR` names, else from the shipped ones (`attention_inspector.checkpoints()`), on
    `device` (cpu, cuda, cuda:N; default: `DEVICE`, else a GPU where there is one)."""
    folder = checkpoint_folder(name_or_folder)
    if not folder.is_dir():
        named = named_checkpoints()
        there = ", ".join(names(named)) or "none"
        raise answers.AnswerError(f"No checkpoint {str(name_or_folder)!r}: give a checkpoint folder, or the name of "
                                  f"one in {named or 'CHECKPOINTS=DIR'}; there are: {there}")
    translator = load_checkpoint(folder, chosen_device(device))
    return Model(translator, folder.name, judge_folder(folder, translator), device)


class WithJudge(Mapping):
    """A checkpoint by its name, and the checkpoint that judges its translations (`judge`, a folder; None: none)
    by the folder's name, loaded the first time a verdict asks for it."""

    def __init__(self, loaded: dict[str, Translator], judge: Path | None, device: str | None):
        self._loaded, self._judge, self._device = dict(loaded), judge, device

    def __getitem__(self, name: str) -> Translator:
        if name not in self._loaded and self._judge is not None and name == self._judge.name:
            self._loaded[name] = load_checkpoint(self._judge, chosen_device(self._device))
        return self._loaded[name]

    def __contains__(self, name: object) -> bool:
        return name in self._loaded or self._judge is not None and name == self._judge.name

    def __iter__(self) -> Iterator[str]:
        return iter([*self._loaded, *([self._judge.name] if self._judge and self._judge.name not in self._loaded
                                      else [])])

    def __len__(self) -> int:
        return len(list(iter(self)))


def names(folder: Path | None) -> list[str]:
    """The checkpoints `load` finds by name in `folder`: its folders with a config or weights, as the app serves them
    (model/serving/catalog.py; a name that starts with "." is a conversion still being written)."""
    if folder is None or not folder.is_dir():
        return []
    return sorted(child.name for child in folder.iterdir() if child.is_dir() and not child.name.startswith(".")
                  and ((child / CONFIG).exists() or (child / WEIGHTS).exists()))
