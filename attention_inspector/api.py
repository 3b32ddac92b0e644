"""The Python API: a checkpoint asked as the JSON API is asked, without a server.

    import attention_inspector

    model = attention_inspector.load("en-de")            # a shipped checkpoint by name, or a checkpoint folder
    result = model.trace("A dog runs in the park.")      # the same dict as POST /trace answers
    model.detach("A dog runs in the park.", "Ein Hund rennt im Park.")
    model.score(text, tokens), model.beam(text), model.attribute(text), model.patch(text, counterfactual)
    model.neuron("A dog runs.", "cross", 1, 2, query=3)   # the query and key vectors behind a row of a head

Each method takes its endpoint's arguments (docs/api.md), the model's name aside, and returns the endpoint's
answer, the same values: model/api/answers.py computes both, and imports no Gradio. A bad argument raises
`AnswerError` (a ValueError) with the endpoint's message.
"""

from __future__ import annotations

from pathlib import Path

from attention_inspector.model.api import answers
from attention_inspector.model.api.services import Services
from attention_inspector.model.nets.devices import chosen_device
from attention_inspector.model.serving.checkpoint import checkpoint_folder, load_checkpoint, named_checkpoints
from attention_inspector.model.serving.translator import Translator


class Model:
    """One checkpoint and the JSON API's answers about it (`load`)."""

    def __init__(self, translator: Translator, name: str):
        self.name, self.translator = name, translator
        self.services = Services({name: translator})
        self._endpoints = {function.__name__: function for function in answers.endpoints(self.services)}

    def __repr__(self) -> str:
        return f"<attention_inspector.Model {self.name!r}: {self.translator.parameters / 1e6:.1f}M parameters>"

    def _answer(self, endpoint: str, *arguments, **options) -> dict:
        return self._endpoints[endpoint](self.name, *arguments, **options)

    def trace(self, text: str, force: list[str] | None = None, mask: list[str] | None = None,
              contributions: bool | None = None, src_lang: str | None = None, tgt_lang: str | None = None,
              units: str | None = None) -> dict:
        """The greedy translation of `text`, every attention map and its detachment: `/trace`."""
        return self._answer("trace", text, force, mask, contributions, src_lang, tgt_lang, units)

    def detach(self, text: str, translation: str | list[str], mask: list[str] | None = None,
               src_lang: str | None = None, tgt_lang: str | None = None, units: str | None = None) -> dict:
        """Whether `translation` rests on `text`: `/detach`."""
        return self._answer("detach", text, translation, mask, src_lang, tgt_lang, units)

    def score(self, text: str, target_tokens: list[str], mask: list[str] | None = None, src_lang: str | None = None,
              tgt_lang: str | None = None) -> dict:
        """The teacher-forced log-probability of each of `target_tokens`: `/score`."""
        return self._answer("score", text, target_tokens, mask, src_lang, tgt_lang)

    def beam(self, text: str, beam_size: int | None = None, mask: list[str] | None = None,
             src_lang: str | None = None, tgt_lang: str | None = None) -> dict:
        """Beam search, the n-best list and the beam after every step: `/beam`."""
        return self._answer("beam", text, beam_size, mask, src_lang, tgt_lang)

    def attribute(self, text: str, method: str = "integrated_gradients", step: int | None = None,
                  contrast: str | None = None, units: str | None = None, mask: list[str] | None = None,
                  src_lang: str | None = None, tgt_lang: str | None = None,
                  target: str | list[str] | None = None) -> dict:
        """Gradient attributions of one step or every step: `/attribute`."""
        return self._answer("attribute", text, method, step, contrast, units, mask, src_lang, tgt_lang, target)

    def neuron(self, text: str, kind: str, layer: int, head: int, query: int, force: list[str] | None = None,
               mask: list[str] | None = None, src_lang: str | None = None, tgt_lang: str | None = None) -> dict:
        """The query and key vectors behind one row of a head's weights (BertViz's neuron view): `/neuron`."""
        return self._answer("neuron", text, kind, layer, head, query, force, mask, src_lang, tgt_lang)

    def show(self, text: str, **options):
        """The greedy translation of `text` in the page's core view, inline in a notebook or as a page
        (attention_inspector/notebook.py `show`, which says the options)."""
        from attention_inspector.notebook import show

        return show(self, text, **options)

    def patch(self, text: str, counterfactual: str, step: int | None = None, target: str | list[str] | None = None,
              token: str | None = None, contrast: str | None = None, src_lang: str | None = None,
              tgt_lang: str | None = None, estimate: bool = False) -> dict:
        """Activation patching per head against `counterfactual` (`estimate`: attribution patching's estimate):
        `/patch`."""
        return self._answer("patch", text, counterfactual, step, target, token, contrast, src_lang, tgt_lang,
                            estimate)


def load(name_or_folder: str | Path, device: str | None = None) -> Model:
    """A checkpoint: a checkpoint folder (a converted Hub model's too), or one by name ("en-de") from the folder of
    checkpoints that `CHECKPOINTS=DIR` names, else from the shipped ones (`attention_inspector.checkpoints()`), on
    `device` (cpu, cuda, cuda:N; default: `DEVICE`, else a GPU where there is one)."""
    folder = checkpoint_folder(name_or_folder)
    if not folder.is_dir():
        raise answers.AnswerError(f"No checkpoint {str(name_or_folder)!r}: give a checkpoint folder, or the name of "
                                  f"one in {named_checkpoints() or 'CHECKPOINTS=DIR'}")
    return Model(load_checkpoint(folder, chosen_device(device)), folder.name)
