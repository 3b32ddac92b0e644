"""What one Gradio event costs the server by itself, against the same answer from a plain FastAPI route.

    python benchmarks/event_floor.py [--requests 2000]

One process serves both on 127.0.0.1: a Gradio event outside the queue (`queue=False`, as the page's translations
and view changes are) whose function hands its gr.State and its text straight back, and a FastAPI route that does
the same with no Gradio in between. One client sends the requests one after another over a kept-alive connection;
the process's CPU time per request (server and client together, the client being the same for both) is the
floor under every request the page sends, before any work of the app's own. benchmarks/load.py compares the app
with commit 2e9448a, whose page answered translations and view changes on a route of its own: two events per
translation and view change, so twice the difference printed here.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

import gradio as gr
import httpx
import uvicorn
from fastapi import FastAPI

sys.path.insert(0, str(Path(__file__).resolve().parent))
from load import cpu_model, free_port  # noqa: E402  (benchmarks/load.py, beside this script)


def cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


def served(port: int) -> None:
    """Both answers on `port`: the Gradio event at /gradio/gradio_api/run/echo, the route at /route/echo."""
    with gr.Blocks() as demo:
        state, text, answer = gr.State(0), gr.Textbox(), gr.Textbox()
        text.input(lambda kept, value: (kept, value), [state, text], [state, answer], queue=False, api_name="echo")
    app = FastAPI()

    @app.post("/route/echo")
    async def echo(body: dict) -> dict:
        return {"data": body["data"][1:]}
    app = gr.mount_gradio_app(app, demo, path="/gradio")
    threading.Thread(target=uvicorn.run, args=(app,), kwargs={"host": "127.0.0.1", "port": port, "log_level": "error"},
                     daemon=True).start()


def per_request(client: httpx.Client, path: str, requests: int) -> tuple[float, float]:
    """(wall ms, CPU ms) per request, after a warm-up."""
    body = {"data": [None, "A dog runs."], "session_hash": "floor"}
    for _ in range(100):
        client.post(path, json=body).raise_for_status()
    began, cpu = time.perf_counter(), cpu_seconds()
    for _ in range(requests):
        client.post(path, json=body)
    return (time.perf_counter() - began) / requests * 1000, (cpu_seconds() - cpu) / requests * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    port = free_port()
    served(port)
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)
    for _ in range(100):
        try:
            client.get("/route/docs")
            break
        except httpx.TransportError:
            time.sleep(0.1)
    print(f"{cpu_model()}; gradio {gr.__version__}; {args.requests} requests each, one after another")
    gradio_wall, gradio_cpu = per_request(client, "/gradio/gradio_api/run/echo", args.requests)
    route_wall, route_cpu = per_request(client, "/route/echo", args.requests)
    print(f"Gradio event (queue=False), a gr.State and a text back: {gradio_wall:.2f} ms, CPU {gradio_cpu:.2f} ms")
    print(f"FastAPI route, the same answer: {route_wall:.2f} ms, CPU {route_cpu:.2f} ms")
    print(f"Gradio's own work per event: {gradio_cpu - route_cpu:.2f} ms of CPU "
          f"({gradio_cpu / route_cpu:.2f}x the route's)")


if __name__ == "__main__":
    main()
