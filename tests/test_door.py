"""The server's door (ui/door.py): the page's requests outside Gradio's queue are counted before Gradio reads them,
and one beyond the bound is refused at once with a clear "busy, try again"."""

import asyncio
import json
import socket
import threading

import httpx
import pytest
import uvicorn

from attention_inspector.model.api.services import Admission
from attention_inspector.ui.door import Door

WAIT = 10  # seconds any one answer may take: a door that stops letting requests through fails here, not hangs


async def within(awaitable, what: str):
    """`awaitable`'s result, or the test fails saying what did not come within WAIT seconds."""
    try:
        return await asyncio.wait_for(awaitable, WAIT)
    except TimeoutError:
        pytest.fail(f"{what} did not come within {WAIT} s")


def slow_app(release: asyncio.Event, arrived: list | None = None):
    """An ASGI app that answers 200 once `release` is set (each request's path added to `arrived` as it comes)."""
    async def app(scope, receive, send):
        if arrived is not None:
            arrived.append(scope["path"])
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"answered"})
    return app


def test_beyond_the_bound_a_request_is_refused_at_once_and_a_freed_place_is_taken():
    async def arrival(arrived: list, path: str):
        # The request is in the app, past the door: waited for, not given a fixed time (a busy machine is slower).
        while path not in arrived:
            await asyncio.sleep(0.01)

    async def run():
        release, arrived = asyncio.Event(), []
        admission = Admission(1)
        transport = httpx.ASGITransport(app=Door(slow_app(release, arrived), admission))
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
            inside = asyncio.ensure_future(client.post("/gradio_api/run/translate", json={"data": []}))
            await within(arrival(arrived, "/gradio_api/run/translate"), "the first request inside")
            assert admission.inside == 1
            refused = await within(client.post("/gradio_api/run/translate", json={"data": []}), "the refusal")
            assert refused.status_code == 503 and "busy" in refused.json()["error"]
            assert refused.headers["retry-after"] == "1"
            other = asyncio.ensure_future(client.get("/config"))  # the page's other paths are not counted
            await within(arrival(arrived, "/config"), "an uncounted path inside while the place is taken")
            release.set()
            assert (await within(inside, "the admitted request's answer")).status_code == 200
            assert (await within(other, "an uncounted path's answer")).status_code == 200
            freed = await within(client.post("/gradio_api/run/head", json={"data": []}), "the freed place's answer")
            assert freed.status_code == 200
        assert admission.inside == 0
    asyncio.run(run())


class Served:
    """`Door(app)` served by uvicorn (as Gradio serves the page) on a loopback port, in a thread of its own."""

    def __init__(self, app):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="error",
                                                   lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        while not self.server.started:
            self.thread.join(0.01)
        return self

    def __exit__(self, *_):
        self.server.should_exit = True
        self.thread.join(10)


class Connection:
    """One kept-alive HTTP/1.1 connection, as a browser holds one: requests go one after another on it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer

    @classmethod
    async def to(cls, port: int) -> "Connection":
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    def send(self, body: bytes, sent: int | None = None) -> None:
        """A translation's POST with `body`, of which only the first `sent` bytes go now (all by default)."""
        head = (f"POST /gradio_api/run/translate HTTP/1.1\r\nHost: app\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        self.writer.write(head + body[:sent])

    async def answer(self) -> tuple[int, dict[str, str], bytes]:
        """The next answer on this connection: status, headers (lower-case names) and body."""
        status = int((await self.reader.readline()).split()[1])
        headers = {}
        while (line := await self.reader.readline()) != b"\r\n":
            name, value = line.decode().split(":", 1)
            headers[name.lower()] = value.strip()
        return status, headers, await self.reader.readexactly(int(headers["content-length"]))


def echo_after(release: threading.Event):
    """An ASGI app that reads the whole request and, once `release` is set (by another thread), answers 200 with
    its body."""
    async def app(scope, receive, send):
        body, more = b"", True
        while more:
            message = await receive()
            body, more = body + message.get("body", b""), message.get("more_body", False)
        while not release.is_set():
            await asyncio.sleep(0.01)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
    return app


def test_refused_on_kept_alive_connections_they_stay_open_and_answer_their_next_request():
    """A burst of requests, each on a connection of its own that stays open as a browser keeps it: the admitted ones
    are answered while every refused connection is still open and idle, and each refused connection then answers its
    next request, including one whose body had not all arrived when the door refused it (uvicorn discards the rest
    of a body nobody read, and keeps the connection)."""
    async def run(port: int):
        connections = [await within(Connection.to(port), "a connection") for _ in range(12)]
        try:
            body = json.dumps({"data": ["x" * 5000]}).encode()
            for connection in connections[:3]:  # the admitted: they wait inside until released
                connection.send(body)
            await within(admitted(3), "three requests inside")
            connections[3].send(body, sent=100)  # refused before its body has all been sent
            for connection in connections[4:]:
                connection.send(body)
            refused = await within(asyncio.gather(*(connection.answer() for connection in connections[3:])),
                                   "the refusals")
            assert all(status == 503 and json.loads(text)["error"].startswith("The server is busy")
                       for status, _, text in refused)
            assert all(headers.get("connection") != "close" for _, headers, _ in refused)
            connections[3].writer.write(body[100:])  # the rest of the refused request's body
            release.set()  # the admitted are answered, every refused connection still open
            assert [(await within(connection.answer(), "an admitted answer"))[::2]
                    for connection in connections[:3]] == [(200, body)] * 3
            for number, connection in enumerate(connections[3:]):  # each refused connection asked again
                again = json.dumps({"data": [number]}).encode()
                connection.send(again)
                assert (await within(connection.answer(), "a refused connection's next answer"))[::2] == (200, again)
        finally:
            for connection in connections:
                connection.writer.close()

    async def admitted(count: int):
        while admission.inside < count:
            await asyncio.sleep(0.01)

    admission, release = Admission(3), threading.Event()
    with Served(Door(echo_after(release), admission)) as served:
        asyncio.run(run(served.port))
    assert admission.inside == 0


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
