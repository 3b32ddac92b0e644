"""The Python API (attention_inspector/api.py) and the JSON API's answers it shares with the HTTP API
(model/api/answers.py, registered by ui/api.py): one method per answer, which `Model` and every endpoint call by
name, so a reader (and an editor's go-to-definition) follows either to the code that answers; a name `load` cannot
find is refused with the models there are, as the HTTP API's unknown model is."""

import inspect
import shutil

import pytest

import attention_inspector
from attention_inspector.api import Model
from attention_inspector.model.api import answers
from attention_inspector.model.api.answers import AnswerError


def test_load_of_an_unknown_name_says_which_models_there_are(tmp_path, monkeypatch):
    monkeypatch.delenv("CHECKPOINTS", raising=False)
    shipped = sorted(folder.name for folder in attention_inspector.checkpoints().iterdir()
                     if (folder / "config.json").is_file())
    with pytest.raises(AnswerError, match="No checkpoint 'en-xx'") as refused:
        attention_inspector.load("en-xx")
    assert f"there are: {', '.join(shipped)}" in str(refused.value)
    for name in ("b-model", "a-model"):
        shutil.copytree(attention_inspector.checkpoints() / "reverse", tmp_path / name)
    (tmp_path / "notes").mkdir()  # not a checkpoint: no config.json
    (tmp_path / ".converting").mkdir()
    (tmp_path / ".converting" / "config.json").write_text("{}")  # a conversion still being written
    monkeypatch.setenv("CHECKPOINTS", str(tmp_path))
    with pytest.raises(ValueError, match=f"No checkpoint 'en-xx'.* in {tmp_path}.*there are: a-model, b-model$"):
        attention_inspector.load("en-xx")
    assert attention_inspector.load("a-model").name == "a-model"
    monkeypatch.setenv("CHECKPOINTS", str(tmp_path / "notes"))
    with pytest.raises(ValueError, match="there are: none"):
        attention_inspector.load("en-xx")


def test_each_answer_is_one_method_that_model_and_every_endpoint_share():
    """The seven endpoints are methods of `Answers`, in the API's order, each with its own docstring; `Model` is an
    `Answers` of one checkpoint, so `model.trace` is `Answers.trace` itself (one signature, not a copy)."""
    assert [answer.__name__ for answer in answers.ENDPOINTS] == ["trace", "detach", "score", "beam", "attribute",
                                                                "patch", "neuron"]
    for answer in answers.ENDPOINTS:
        assert answer is getattr(answers.Answers, answer.__name__) and answer.__doc__ and len(answer.__doc__) > 80
        assert getattr(Model, answer.__name__) is answer  # inherited, not redefined
        assert answer.__module__ == "attention_inspector.model.api.answers" and "<locals>" not in answer.__qualname__
        assert list(inspect.signature(answer).parameters)[:2] == ["self", "text"]


def test_every_endpoint_takes_the_model_then_its_methods_own_parameters(services):
    """ui/api.py's endpoints are derived from the methods: named, documented and typed as each method, with the
    model's name first; what `gr.api` reads of them is the method's signature with `self` become `model: str`."""
    import typing

    import gradio as gr

    from attention_inspector.ui.api import endpoints

    served = endpoints(services)
    for endpoint, answer in zip(served, answers.ENDPOINTS, strict=True):
        assert endpoint.__name__ == answer.__name__ and endpoint.__doc__ == answer.__doc__
        ours, theirs = inspect.signature(endpoint), inspect.signature(answer)
        assert list(ours.parameters.values())[1:] == list(theirs.parameters.values())[1:]
        assert ours.parameters["model"].annotation == "str" and ours.return_annotation == theirs.return_annotation
        assert typing.get_type_hints(endpoint)["model"] is str
        assert typing.get_type_hints(endpoint) == {"model": str, **typing.get_type_hints(answer)}
    trace = served[0]
    assert trace("toy-en-de", "A dog runs.")["translation"]
    with pytest.raises(gr.Error, match="unknown model 'nope'; loaded: toy-en-de"):
        trace("nope", "A dog runs.")
    with pytest.raises(gr.Error, match="units must be one of"):
        trace(model="toy-en-de", text="A dog runs.", units="letters")
