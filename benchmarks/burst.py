"""Burst test: many users translate at the same instant, as the page sends a translation (one POST each to
/gradio_api/run/translate, each in a session of its own); the server admits its bound and refuses the rest at its
door (ui/door.py).

    python benchmarks/burst.py [--burst 1000] [--admitted 64] [--rounds 3] [--tokens 20] [--data DIR]
                               [--modes browsers pool none]

Starts `python app.py` on a free loopback port. For each way of holding connections (`--modes`), each round sends,
alternately, `--admitted` requests alone (what the server admits at once) and a burst of `--burst`:
- `browsers`: every request from a client of its own that keeps its connection alive until the round ends, as
  that many browsers do;
- `pool`: one client that keeps at most 20 connections alive (httpx's default pool);
- `none`: one client that opens a new connection per request;
- `shared` (not run by default): one client that keeps every connection alive. Its own pool is the bottleneck:
  httpcore 1.0.9 walks every pooled connection for each idle one at every request and answer (quadratic; 60 s of the
  client's CPU for 1,000 connections), so it times the client, not the server (docs/performance.md).
After each burst of the `browsers` mode, `RETRIED` refused connections are asked once more for a translation on the
same connection: each must answer there (the door leaves a refused connection open; uvicorn discards the unread body).
Prints the CPU model, then per mode and kind of round: ok / refused / lost (a request with no answer, or an answer
that is neither a translation nor "busy"), the admitted requests' latency p50 and p95 and the refused ones', when
the last refusal and the last admitted answer came, and the server's CPU time per refusal (its CPU in a burst
minus that of the same admitted requests alone, over the refusals). Goal: the admitted requests of a burst
answered within 2x the time they take alone, in every mode; a refusal under 5 ms of the server's time.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from load import (DEFAULT_DATA, ROOT, SETTINGS, TLS_CONTEXT, core_view, cpu_model, cpu_seconds,  # noqa: E402
                  free_port, load_checkpoint, pick_sentences, start_server)


MODES = {"browsers": "a client each, kept alive", "pool": "one client, 20 kept alive",
         "none": "one client, none kept alive", "shared": "one client, all kept alive"}
RETRIED = 8  # refused connections asked once more, on the same connection, after a burst of `browsers`


@dataclass
class Reply:
    kind: str  # "ok" | "refused" | "lost"
    took: float  # seconds from sending to the whole answer
    at: float  # seconds from the round's start to the whole answer
    port: int | None = None  # the client's side of the connection it came on


async def translate(client: httpx.AsyncClient, model: str, text: str, began: float) -> Reply:
    """One translation as the page sends it."""
    sent = time.perf_counter()
    try:
        answer = await client.post("/gradio_api/run/translate", json={
            "data": [None, model, text, *SETTINGS], "session_hash": secrets.token_hex(8)})
    except httpx.HTTPError:
        return Reply("lost", time.perf_counter() - sent, time.perf_counter() - began)
    now = time.perf_counter()
    port = local_port(answer)
    kind = "lost"
    if answer.status_code == 503 and "busy" in answer.json().get("error", ""):
        kind = "refused"
    elif answer.status_code == 200 and core_view(answer.json()["data"])["status"].startswith("Translated"):
        kind = "ok"
    return Reply(kind, now - sent, now - began, port)


def local_port(answer: httpx.Response) -> int | None:
    """The client's port of the connection an answer came on (None once that connection is closed)."""
    try:
        return answer.extensions["network_stream"].get_extra_info("client_addr")[1]
    except (KeyError, OSError, TypeError):
        return None


def client(url: str, connections: int, kept_alive: int) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=kept_alive)
    return httpx.AsyncClient(base_url=url, timeout=300, limits=limits, verify=TLS_CONTEXT)


@dataclass
class Round:
    replies: list[Reply]
    server_cpu: float  # seconds of the server's CPU (its workers' included) from the first request to the last answer
    reused: int | None = None  # refused connections that answered a translation asked again on them (`browsers`)


async def round_of(url: str, server: int, count: int, mode: str, model: str, sentences: list[str]) -> Round:
    """`count` translations at once, connected as `mode` says; with `browsers`, `RETRIED` refused connections are
    then asked once more."""
    texts = [sentences[i % len(sentences)] for i in range(count)]
    before = cpu_seconds(server).sum()
    began = time.perf_counter()
    if mode != "browsers":
        kept_alive = {"pool": 20, "none": 0, "shared": count}[mode]
        async with client(url, count, kept_alive) as shared:
            replies = await asyncio.gather(*(translate(shared, model, text, began) for text in texts))
            return Round(replies, cpu_seconds(server).sum() - before)
    clients = [client(url, 1, 1) for _ in texts]
    try:
        replies = await asyncio.gather(*(translate(c, model, text, began) for c, text in zip(clients, texts)))
        used = cpu_seconds(server).sum() - before
        refused = [(c, reply, text) for c, reply, text in zip(clients, replies, texts) if reply.kind == "refused"]
        again = await asyncio.gather(*(translate(c, model, text, began) for c, _, text in refused[:RETRIED]))
        return Round(replies, used, sum(a.kind == "ok" and a.port == r.port for a, (_, r, _) in zip(again, refused)))
    finally:
        await asyncio.gather(*(c.aclose() for c in clients))


def summary(replies: list[Reply]) -> dict:
    """Counts by kind, the latency percentiles (ms) and when the last answer of each kind came (ms)."""
    by = {kind: [r for r in replies if r.kind == kind] for kind in ("ok", "refused", "lost")}

    def took(kind: str, q: float) -> float:
        return float(np.percentile([r.took for r in by[kind]], q)) * 1000 if by[kind] else float("nan")

    def last(kind: str) -> float:
        return max((r.at for r in by[kind]), default=float("nan")) * 1000

    return {"ok": len(by["ok"]), "refused": len(by["refused"]), "lost": len(by["lost"]),
            "ok_p50": took("ok", 50), "ok_p95": took("ok", 95), "refused_p50": took("refused", 50),
            "last_ok": last("ok"), "last_refused": last("refused")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoints", default=str(ROOT / "checkpoints"))
    parser.add_argument("--model", default="en-de")
    parser.add_argument("--data", default=DEFAULT_DATA, help="Multi30k files to pick the sentences from")
    parser.add_argument("--burst", type=int, default=1000)
    parser.add_argument("--admitted", type=int, default=64,
                        help="the server's bound (model/api/services.py load_services)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=20)
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=["browsers", "pool", "none"])
    args = parser.parse_args()

    translator = load_checkpoint(Path(args.checkpoints) / args.model)
    sentences = pick_sentences(translator, args.data, 64, args.tokens)
    port = free_port()
    server = start_server(Path(args.checkpoints), port, 100_000, Path("/tmp/burst-app.log"))
    url = f"http://127.0.0.1:{port}"
    print(f"{cpu_model()}, {len(sentences)} sentences of ~{args.tokens} tokens, model {args.model}, "
          f"{args.rounds} rounds")
    try:
        asyncio.run(round_of(url, server.pid, 8, "none", args.model, sentences))  # warm: workers forked
        ratios = {}
        for mode in args.modes:
            kinds = {"alone": args.admitted, "burst": args.burst}
            rounds = {kind: [] for kind in kinds}
            for _ in range(args.rounds):
                for kind, count in kinds.items():
                    rounds[kind].append(asyncio.run(round_of(url, server.pid, count, mode, args.model, sentences)))
                    time.sleep(1)
            print(f"{mode} ({MODES[mode]}):")
            means, cpu = {}, {}
            for kind, count in kinds.items():
                rows = [summary(r.replies) for r in rounds[kind]]
                mean = means[kind] = {key: float(np.mean([row[key] for row in rows])) for key in rows[0]}
                cpu[kind] = float(np.mean([r.server_cpu for r in rounds[kind]]))
                print(f"  {kind:>5} ({count:>4} at once): ok {mean['ok']:.0f}  refused {mean['refused']:.0f}  lost "
                      f"{mean['lost']:.0f} | admitted p50 {mean['ok_p50']:.0f} ms  p95 {mean['ok_p95']:.0f} ms, "
                      f"last at {mean['last_ok']:.0f} ms | refused p50 {mean['refused_p50']:.1f} ms, last at "
                      f"{mean['last_refused']:.0f} ms | server CPU {cpu[kind]:.2f} s")
            alone, burst = means["alone"]["ok_p95"], means["burst"]["ok_p95"]
            refusals = means["burst"]["refused"]
            extra = (cpu["burst"] - cpu["alone"]) / refusals * 1000 if refusals else float("nan")
            ratios[mode] = burst / alone
            print(f"  admitted p95, burst / alone: {burst / alone:.2f}x (goal <= 2); server CPU per refusal: "
                  f"{extra:.2f} ms (goal < 5)")
            if mode == "browsers":
                reused = [r.reused for r in rounds["burst"]]
                print(f"  refused connections asked again on the same connection: {sum(reused)} of "
                      f"{RETRIED * len(reused)} answered there")
        print("admitted p95, burst / alone: " + ", ".join(f"{mode} {ratio:.2f}x" for mode, ratio in ratios.items()))
    finally:
        server.terminate()
        server.wait(30)


if __name__ == "__main__":
    main()
