"""Burst test: many users translate at the same instant, as the page sends a translation (one POST each to
/gradio_api/run/translate, each in a session of its own); the server admits its bound and refuses the rest at its
door (ui/door.py).

    python benchmarks/burst.py [--burst 1000] [--admitted 64] [--rounds 3] [--tokens 20] [--data DIR]

Starts `python app.py` on a free loopback port. Each round sends, alternately, `--admitted` requests alone (what the
server admits at once) and a burst of `--burst`. Prints the CPU model, then per kind of round: ok / refused / lost
(a request with no answer, or an answer that is neither a translation nor "busy"), the admitted requests' latency
p50 and p95 and the refused ones', and the server's CPU time per refusal (its CPU in a burst minus that of the same
admitted requests alone, over the refusals). Goal: the admitted requests of a burst answered within 2x the time they
take alone, a refusal under 5 ms of the server's time.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import secrets
import sys
import time
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from load import (DEFAULT_DATA, ROOT, SETTINGS, core_view, cpu_seconds, free_port, load_checkpoint,  # noqa: E402
                  pick_sentences, start_server)


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


async def translate(client: httpx.AsyncClient, model: str, text: str) -> tuple[str, float]:
    """One translation as the page sends it: ("ok" | "refused" | "lost", seconds)."""
    began = time.perf_counter()
    try:
        answer = await client.post("/gradio_api/run/translate", json={
            "data": [None, model, text, *SETTINGS], "session_hash": secrets.token_hex(8)})
    except httpx.HTTPError:
        return "lost", time.perf_counter() - began
    took = time.perf_counter() - began
    if answer.status_code == 503 and "busy" in answer.json().get("error", ""):
        return "refused", took
    if answer.status_code == 200 and core_view(answer.json()["data"])["status"].startswith("Translated"):
        return "ok", took
    return "lost", took


async def round_of(url: str, count: int, model: str, sentences: list[str]) -> list[tuple[str, float]]:
    limits = httpx.Limits(max_connections=count, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as client:
        return await asyncio.gather(*(translate(client, model, sentences[i % len(sentences)]) for i in range(count)))


def summary(results: list[tuple[str, float]]) -> dict:
    by = {kind: [t for k, t in results if k == kind] for kind in ("ok", "refused", "lost")}
    p = lambda values, q: float(np.percentile(values, q)) * 1000 if values else float("nan")  # noqa: E731
    return {"ok": len(by["ok"]), "refused": len(by["refused"]), "lost": len(by["lost"]),
            "ok_p50": p(by["ok"], 50), "ok_p95": p(by["ok"], 95), "refused_p50": p(by["refused"], 50)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoints", default=str(ROOT / "checkpoints"))
    parser.add_argument("--model", default="en-de")
    parser.add_argument("--data", default=DEFAULT_DATA, help="Multi30k files to pick the sentences from")
    parser.add_argument("--burst", type=int, default=1000)
    parser.add_argument("--admitted", type=int, default=64, help="the server's bound (ui/services.py load_services)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=20)
    args = parser.parse_args()

    translator = load_checkpoint(Path(args.checkpoints) / args.model)
    sentences = pick_sentences(translator, args.data, 64, args.tokens)
    port = free_port()
    server = start_server(Path(args.checkpoints), port, 100_000, Path("/tmp/burst-app.log"))
    url = f"http://127.0.0.1:{port}"
    print(f"{cpu_model()}, {len(sentences)} sentences of ~{args.tokens} tokens, model {args.model}")
    try:
        asyncio.run(round_of(url, 8, args.model, sentences))  # warm: models loaded, workers forked
        kinds = {"alone": args.admitted, "burst": args.burst}
        runs = {kind: [] for kind in kinds}
        cpu = {kind: [] for kind in kinds}
        for _ in range(args.rounds):
            for kind, count in kinds.items():
                before = cpu_seconds(server.pid).sum()
                runs[kind].append(summary(asyncio.run(round_of(url, count, args.model, sentences))))
                cpu[kind].append(cpu_seconds(server.pid).sum() - before)
                time.sleep(1)
        for kind, count in kinds.items():
            rows = runs[kind]
            mean = {key: float(np.mean([row[key] for row in rows])) for key in rows[0]}
            print(f"{kind:>5} ({count:>4} at once): ok {mean['ok']:.0f}  refused {mean['refused']:.0f}  lost "
                  f"{mean['lost']:.0f} | admitted p50 {mean['ok_p50']:.0f} ms  p95 {mean['ok_p95']:.0f} ms | "
                  f"refused p50 {mean['refused_p50']:.1f} ms | server CPU {np.mean(cpu[kind]):.2f} s")
        alone, burst = (float(np.mean([row["ok_p95"] for row in runs[kind]])) for kind in kinds)
        refusals = float(np.mean([row["refused"] for row in runs["burst"]]))
        extra = (np.mean(cpu["burst"]) - np.mean(cpu["alone"])) / refusals * 1000 if refusals else float("nan")
        print(f"admitted p95, burst / alone: {burst / alone:.2f}x (goal <= 2)")
        print(f"server CPU per refusal: {extra:.2f} ms (goal < 5)")
    finally:
        server.terminate()
        server.wait(30)


if __name__ == "__main__":
    main()
