"""The server's door (ui/door.py): the page's requests outside Gradio's queue are counted before Gradio reads them,
and one beyond the bound is refused at once with a clear "busy, try again"."""

import asyncio
import json

import httpx
import pytest

from ui.door import Door
from ui.services import Admission


def slow_app(release: asyncio.Event):
    """An ASGI app that answers 200 once `release` is set."""
    async def app(scope, receive, send):
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"answered"})
    return app


def test_beyond_the_bound_a_request_is_refused_at_once_and_a_freed_place_is_taken():
    async def run():
        release = asyncio.Event()
        admission = Admission(1)
        transport = httpx.ASGITransport(app=Door(slow_app(release), admission))
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
            inside = asyncio.ensure_future(client.post("/gradio_api/run/translate", json={"data": []}))
            await asyncio.sleep(0.05)
            refused = await client.post("/gradio_api/run/translate", json={"data": []})
            assert refused.status_code == 503 and "busy" in refused.json()["error"]
            assert refused.headers["retry-after"] == "1"
            other = asyncio.ensure_future(client.get("/config"))  # the page's other paths are not counted
            await asyncio.sleep(0.05)
            release.set()
            assert (await inside).status_code == 200 and (await other).status_code == 200
            assert (await client.post("/gradio_api/run/head", json={"data": []})).status_code == 200
        assert admission.inside == 0
    asyncio.run(run())


@pytest.mark.slow
def test_the_running_app_refuses_beyond_its_bound_and_keeps_serving(server, services):
    limit = services.admission.limit
    services.admission.limit = 0
    try:
        refused = httpx.post(f"{server.rstrip('/')}/gradio_api/run/translate", timeout=30,
                             json={"data": [None, "toy-en-de", "A dog.", "cross", 0, "mean", "weights", 1, False,
                                            "pieces", None], "session_hash": "door"})
        assert refused.status_code == 503 and json.loads(refused.text)["error"].startswith("The server is busy")
        assert httpx.get(f"{server.rstrip('/')}/gradio_api/info", timeout=30).status_code == 200
    finally:
        services.admission.limit = limit
    answered = httpx.post(f"{server.rstrip('/')}/gradio_api/run/translate", timeout=30,
                          json={"data": [None, "toy-en-de", "A dog.", "cross", 0, "mean", "weights", 1, False,
                                         "pieces", None], "session_hash": "door"})
    core = next(json.loads(value) for value in answered.json()["data"] if isinstance(value, str))  # the core view
    assert answered.status_code == 200 and core["status"].startswith("Translated.")
