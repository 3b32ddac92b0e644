"""The server's door: the page's requests outside Gradio's queue (its `queue=False` events, POSTed to
/gradio_api/run/<event>) are counted as they arrive, before Gradio routes, reads or checks them, and one beyond
`Services.admission`'s bound is refused at once with HTTP 503 and a "busy, try again" message.

Refused there, a request costs the server well under a millisecond instead of Gradio's routing and body parsing
(tens of ms each, which starved the admitted requests of a burst). It is an ASGI middleware handed to the FastAPI app
Gradio builds, through `launch(app_kwargs={"middleware": ...})` (`launch_options`): public API, no route and no
state of its own beyond the count.
"""

from __future__ import annotations

import json

from starlette.middleware import Middleware

from attention_inspector.model.api.services import Admission, Busy

GUARDED = "/gradio_api/run/"  # the page's events outside the queue (its queued ones wait in Gradio's bounded queue)


class Door:
    """ASGI middleware: at most `admission.limit` guarded requests inside at once, from their first byte to their
    answer's last; one more is refused before anything else reads it."""

    def __init__(self, app, admission: Admission):
        self.app = app
        self.admission = admission

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or GUARDED not in scope["path"]:
            await self.app(scope, receive, send)
            return
        try:
            self.admission.enter()
        except Busy as error:
            await refuse(send, str(error))
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self.admission.leave()


async def refuse(send, message: str) -> None:
    """A 503 with Gradio's error form (`{"error": ...}`), which the page shows as it shows any refused event."""
    body = json.dumps({"error": message}).encode()
    await send({"type": "http.response.start", "status": 503,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"retry-after", b"1")]})
    await send({"type": "http.response.body", "body": body})


def door(admission: Admission) -> Middleware:
    """The door as the FastAPI app's middleware."""
    return Middleware(Door, admission=admission)
