"""The JSON API on the page: the answers of model/api/answers.py registered with `gr.api` (ui/demo.py), each
bad request's `AnswerError` turned into the `gr.Error` that Gradio sends the client as the event's error."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

import gradio as gr

from attention_inspector.model.api import answers
from attention_inspector.model.api.services import Services


def endpoints(services: Services) -> list[Callable[..., dict]]:
    """The API's functions, bound to `services`, each named, typed and documented as its endpoint."""
    return [adapted(function) for function in answers.endpoints(services)]


def adapted(function: Callable[..., dict]) -> Callable[..., dict]:
    """`function` with its `AnswerError` raised as a `gr.Error` (its signature and docstring kept: `gr.api` reads
    them for the API's page)."""

    @wraps(function)
    def answered(*arguments, **options) -> dict:
        try:
            return function(*arguments, **options)
        except answers.AnswerError as error:
            raise gr.Error(str(error)) from None

    return answered
