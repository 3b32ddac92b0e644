"""The JSON API on the page: each answer of model/api/answers.py (a method of `Answers`, listed in `ENDPOINTS`)
registered with `gr.api` (ui/demo.py) as a function of the model's name and the method's own parameters, each bad
request's `AnswerError` turned into the `gr.Error` that Gradio sends the client as the event's error."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import update_wrapper

import gradio as gr

from attention_inspector.model.api.answers import ENDPOINTS, AnswerError, Answers
from attention_inspector.model.api.services import Services


def endpoints(services: Services) -> list[Callable[..., dict]]:
    """The API's functions for `services`' models, one per method of `ENDPOINTS`, in its order (`endpoint`)."""
    return [endpoint(services, answer) for answer in ENDPOINTS]


def endpoint(services: Services, answer: Callable[..., dict]) -> Callable[..., dict]:
    """The endpoint of `answer`, a method of `Answers`: `answer` of `Answers(services, model)`, named, documented
    and typed as the method, `self` become `model: str` (`gr.api` reads the name, the docstring and the type
    hints for the API's page and the values a client sends), its `AnswerError` raised as a `gr.Error`."""

    def answered(model: str, *arguments, **options) -> dict:
        try:
            return answer(Answers(services, model), *arguments, **options)
        except AnswerError as error:
            raise gr.Error(str(error)) from None

    update_wrapper(answered, answer)  # its name, docstring and module; its type hints read in answers.py
    signature = inspect.signature(answer)
    _, *parameters = signature.parameters.values()
    model = inspect.Parameter("model", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation="str")
    answered.__signature__ = signature.replace(parameters=[model, *parameters])
    answered.__annotations__ = {"model": "str", **answer.__annotations__}
    return answered
