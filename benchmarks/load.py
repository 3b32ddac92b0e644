"""Load test: the app on 127.0.0.1, driven by concurrent users, each in its own session.

    python benchmarks/load.py [--clients 16] [--requests 8] [--waves 4] [--tokens 20] [--cores N] [--via gradio]
                              [--records FILE]

Starts `python app.py` on a free loopback port (nothing leaves this machine). In each wave, `--clients`
new users open the page at once: as a browser does, each one's page sends its load event (`first_visit`, which
translates the first example and sends every menu's choices), timed as page loads. Then, all together (the
throughput and CPU count from here), each translates `--requests` distinct sentences of about `--tokens` tokens
(from the Multi30k val and test splits) and after each one switches the view to another head, which reads
that user's stored session (`gr.State`); stepping itself happens in the browser and sends no request. Users send
their requests as the page does, as Gradio events outside the queue (`queue=False`: one POST to
/gradio_api/run/<event> each; `--via page`), or through Gradio's queue as `gradio_client` does (`--via gradio`).
A response counts as cross-talk unless its translation, and the steps labelling the new view's rows (decoder
input → output), are those of the greedy translation of its own sentence, computed here in-process.
The server's resident memory is sampled throughout; its session store is capped (`--session-capacity`,
below the number of sessions the run opens) so the memory of sessions that come and go must level off.

Prints throughput, latency percentiles (page loads, translations, view changes), errors, cross-talk, peak RSS
and RSS after each wave; exits with status 1 if any request or page load failed or crossed over. `--cores N` pins
the app, its trace workers and the clients to the first N cores (Linux), to see how the numbers hold on a smaller
machine.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import httpx
import numpy as np
import torch
from gradio_client import Client

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from attention_inspector.model.keys import CROSS, MEAN, WEIGHTS  # noqa: E402
from attention_inspector.model.nets.cores import available_cores  # noqa: E402
from attention_inspector.model.serving.checkpoint import load_checkpoint  # noqa: E402  (after the path set-up above)
from attention_inspector.model.text.words import PIECES  # noqa: E402
from attention_inspector.model.training.data import load_pairs  # noqa: E402
from attention_inspector.model.training.evaluate import DEFAULT_DATA  # noqa: E402
from attention_inspector.model.training.train import cpu_model  # noqa: E402
from attention_inspector.viz.attention import positions, step_labels  # noqa: E402

TLS_CONTEXT = ssl.create_default_context()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def process_tree(pid: int) -> list[int]:
    """A process and its children (the app's trace workers), from /proc (Linux); none where it has ended."""
    children = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except FileNotFoundError:
        return []
    for task in tasks:
        try:
            children += [int(c) for c in (task / "children").read_text().split()]
        except FileNotFoundError:  # a thread that ended while being listed
            pass
    return [pid] + [p for child in children for p in process_tree(child)]


def rss_mib(pid: int) -> float:
    """Resident memory of a process and its children, summed (pages shared after a fork count once per process)."""
    total = 0
    for process in process_tree(pid):
        for line in Path(f"/proc/{process}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total / 1024


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one process, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> np.ndarray:
    """User + system CPU seconds of a process and of its children together, from /proc (Linux)."""
    used = [process_cpu_seconds(process) for process in process_tree(pid)]
    return np.array([used[0], sum(used[1:])])


class MemorySampler(threading.Thread):
    """Samples a process's RSS every 100 ms; keeps the peak."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.peak, self.stopped = pid, 0.0, threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.1):
            self.peak = max(self.peak, rss_mib(self.pid))


def pick_sentences(translator, data: str, count: int, tokens: int) -> list[str]:
    """`count` distinct source sentences whose token count is closest to `tokens`."""
    src, tgt = translator.src_tokenizer.lang, translator.tgt_tokenizer.lang
    pool = sorted({s for split in ("val", "test") for s in load_pairs(data, split, src, tgt)["src"]})
    pool.sort(key=lambda s: abs(len(translator.src_tokenizer(s)) - tokens))
    if len(pool) < count:
        raise SystemExit(f"only {len(pool)} distinct sentences in {data}; ask for fewer clients x requests")
    return pool[:count]


def start_server(checkpoints: Path, port: int, session_capacity: int, log: Path) -> subprocess.Popen:
    env = {**os.environ, "CHECKPOINTS": str(checkpoints), "GRADIO_SERVER_NAME": "127.0.0.1",
           "GRADIO_SERVER_PORT": str(port), "SESSION_CAPACITY": str(session_capacity),
           "GRADIO_ANALYTICS_ENABLED": "False"}
    with open(log, "w") as out:
        server = subprocess.Popen([sys.executable, str(ROOT / "app.py")], env=env, stdout=out,
                                  stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"the app exited with status {server.returncode}; see {log}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/config", timeout=2)
            return server
        except OSError:
            time.sleep(0.5)
    server.kill()
    raise SystemExit(f"the app did not answer within 180 s; see {log}")


# The view settings every request sends (kind, layer, head, measure, step, model view, units, and the revision the
# page shows: null, any), and the view change: head 2.
SETTINGS = [CROSS, 0, MEAN, WEIGHTS, 1, False, PIECES, None]
VIEW = [CROSS, 0, 1, WEIGHTS, 1, False, PIECES, None]


def core_view(outputs: list) -> dict:
    """The core view's one value among an answer's outputs (ui/plots.py `core_view`: translation, status, the
    heatmap, ...)."""
    return next(json.loads(value) for value in outputs if isinstance(value, str) and value.startswith('{"revision"'))


def view_rows(outputs: list) -> list[str]:
    """The rows of the heatmap a view change answers with (never thinned, unlike its tick labels)."""
    return json.loads(core_view(outputs)["attention"])["layout"]["yaxis"]["categoryarray"]


def translation_of(outputs: list) -> tuple[str, str]:
    """(translation, status) of a translate event's outputs (the session itself stays on the server)."""
    core = core_view(outputs)
    return core["translation"], core["status"]


class GradioUser:
    """A user through Gradio's queue and its event stream (`gradio_client`)."""

    def __init__(self, url: str):
        # gradio_client builds a fresh httpx client for every request, and with it a TLS context that loads
        # the whole CA bundle (~130 ms of CPU, even for http://). One shared context keeps that load off the
        # cores the server is measured on.
        self.client = Client(url, verbose=False, ssl_verify=TLS_CONTEXT)

    def open_page(self) -> None:
        self.client.predict(api_name="/first_visit")

    def translate(self, model: str, text: str) -> list:
        return [None, *self.client.predict(model, text, *SETTINGS, api_name="/translate")]

    def view(self) -> list:
        return self.client.predict(*VIEW, api_name="/head")  # head 2 of the stored session

    def close(self) -> None:
        self.client.close()


class PageUser:
    """A user as the page is one: its configuration fetched and its load event sent through Gradio's queue once,
    then translations and view changes sent as the page sends its `queue=False` events (one POST each to
    /gradio_api/run/<event>, a null where the event takes the session's gr.State) over one kept-alive connection,
    in a session of its own."""

    def __init__(self, url: str):
        self.client = httpx.Client(base_url=url, timeout=120)
        self.client.get("/config").raise_for_status()
        self.session = secrets.token_hex(8)

    def open_page(self) -> None:
        """The page's load event in this session, through Gradio's queue (`/gradio_api/call/...`, then its result
        stream)."""
        posted = self.client.post("/gradio_api/call/first_visit", json={"data": [], "session_hash": self.session})
        posted.raise_for_status()
        event = None
        with self.client.stream("GET", f"/gradio_api/call/first_visit/{posted.json()['event_id']}") as stream:
            for line in stream.iter_lines():
                if line.startswith("event:"):
                    event = line.removeprefix("event:").strip()
                elif line.startswith("data:") and event == "error":
                    raise RuntimeError(f"page load: {line.removeprefix('data:').strip()}")
                elif line.startswith("data:") and event == "complete":
                    return
        raise RuntimeError("page load: the result stream ended without a result")

    def send(self, event: str, data: list) -> list:
        answer = self.client.post(f"/gradio_api/run/{event}", json={"data": [None, *data],
                                                                    "session_hash": self.session})
        if answer.status_code != 200:
            raise RuntimeError(f"{answer.status_code}: {answer.json().get('error')}")
        return answer.json()["data"]

    def translate(self, model: str, text: str) -> list:
        return self.send("translate", [model, text, *SETTINGS])

    def view(self) -> list:
        return self.send("head", VIEW)  # head 2 of the stored session, its weights

    def close(self) -> None:
        self.client.close()


def user(url: str, via: type, model: str, sentences: list[str], expected: dict, results: list, pages: list,
         start: threading.Barrier, name: str, run_began: float):
    """One user: a fresh session whose page loads, then translates its sentences one after another, checking every
    answer."""
    client = via(url)
    page = {"user": name, "error": None}
    try:
        began = time.perf_counter()
        client.open_page()
        page["page_s"] = time.perf_counter() - began
    except Exception as error:  # counted, not fatal: the first translation makes the session all the same
        page["error"] = f"{type(error).__name__}: {error}"
    pages.append(page)
    start.wait()
    try:
        for index, text in enumerate(sentences):
            record = {"user": name, "request": index, "text": text, "error": None, "crossed": False}
            try:
                began = time.perf_counter()
                record["sent_at_s"] = began - run_began
                outputs = client.translate(model, text)
                record["translate_s"] = time.perf_counter() - began
                began = time.perf_counter()
                rows = view_rows(client.view())
                record["view_s"] = time.perf_counter() - began
                translation, status = translation_of(outputs)
                if not status.startswith("Translated"):
                    record["error"] = status
                record["crossed"] = (translation, rows) != expected[text]
            except Exception as error:  # a failed request is counted, not fatal
                record["error"] = f"{type(error).__name__}: {error}"
            results.append(record)
    finally:
        client.close()


USERS = {"page": PageUser, "gradio": GradioUser}


def percentiles(values: list[float]) -> str:
    p50, p95, p99 = np.percentile(values, [50, 95, 99]) * 1000
    return f"p50 {p50:.0f} ms, p95 {p95:.0f} ms, p99 {p99:.0f} ms, max {max(values) * 1000:.0f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoints", default=str(ROOT / "checkpoints"), help="folder the app serves")
    parser.add_argument("--model", default="en-de", help="checkpoint the users translate with")
    parser.add_argument("--data", default=DEFAULT_DATA, help="Multi30k folder the sentences come from")
    parser.add_argument("--clients", type=int, default=16, help="concurrent users per wave")
    parser.add_argument("--requests", type=int, default=8, help="sentences per user")
    parser.add_argument("--waves", type=int, default=4, help="rounds of new users (new sessions)")
    parser.add_argument("--tokens", type=int, default=20, help="source sentence length to pick")
    parser.add_argument("--session-capacity", type=int, default=32, help="the server's SESSION_CAPACITY")
    parser.add_argument("--cores", type=int, help="run everything on the first N cores (default: all)")
    parser.add_argument("--records", help="write every request's timings here (JSON): {requests: [{user (wave.user), "
                                          "request (its index), sent_at_s, translate_s, view_s, error}], pages: "
                                          "[{user, page_s, error}]}")
    parser.add_argument("--via", choices=list(USERS), default="page",
                        help="page: as the page sends requests, outside Gradio's queue (the default); gradio: "
                             "through Gradio's queue, as gradio_client does")
    args = parser.parse_args()
    if args.cores:  # the app and its trace workers inherit this, and start one worker per allowed core
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:args.cores])
    cores = available_cores()  # what the app counts its trace workers by
    torch.set_num_threads(cores)  # torch sized its pool at import; more threads than cores spin against each other

    translator = load_checkpoint(Path(args.checkpoints) / args.model)
    sentences = pick_sentences(translator, args.data, args.clients * args.requests, args.tokens)
    expected, lengths = {}, []
    for text in sentences:
        traced = translator.trace(text)
        expected[text] = (traced.text, positions(step_labels(traced.decoder_input_tokens, traced.target_tokens)))
        lengths.append(len(traced.source_tokens) - 1)  # without <eos>
    print(f"{len(sentences)} distinct sentences, {min(lengths)}-{max(lengths)} tokens (mean {np.mean(lengths):.1f}); "
          f"{args.clients} concurrent users x {args.requests} requests x {args.waves} waves; "
          f"{cores} cores of {cpu_model()}; requests {args.via}")

    port = free_port()
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"load-app-{port}.log"
    server = start_server(Path(args.checkpoints), port, args.session_capacity, log)
    url = f"http://127.0.0.1:{port}/"
    sampler = MemorySampler(server.pid)
    sampler.start()
    try:
        print(f"server RSS after start: {rss_mib(server.pid):.0f} MiB")
        results: list[dict] = []
        pages: list[dict] = []
        after_wave = []
        # Throughput and CPU count each wave's translating, from the moment its pages have loaded (the barrier) to
        # its last answer: the page loads are timed on their own.
        began = time.perf_counter()
        seconds, server_cpu, own_cpu = 0.0, np.zeros(2), 0.0
        for wave in range(args.waves):
            loaded = {}
            start = threading.Barrier(args.clients, action=lambda: loaded.update(
                at=time.perf_counter(), server_cpu=cpu_seconds(server.pid), own_cpu=time.process_time()))
            users = [threading.Thread(target=user, args=(url, USERS[args.via], args.model,
                                                         sentences[i * args.requests:(i + 1) * args.requests],
                                                         expected, results, pages, start, f"{wave + 1}.{i + 1}",
                                                         began))
                     for i in range(args.clients)]
            for thread in users:
                thread.start()
            for thread in users:
                thread.join()
            seconds += time.perf_counter() - loaded["at"]
            server_cpu += cpu_seconds(server.pid) - loaded["server_cpu"]
            own_cpu += time.process_time() - loaded["own_cpu"]
            after_wave.append(rss_mib(server.pid))
            print(f"wave {wave + 1}: {len(results)} requests so far, server RSS {after_wave[-1]:.0f} MiB")
    finally:
        sampler.stopped.set()
        server.terminate()
        server.wait(timeout=30)

    if args.records:
        Path(args.records).write_text(json.dumps({"requests": [{k: v for k, v in r.items() if k != "text"}
                                                               for r in results], "pages": pages}))
    done = [r for r in results if r["error"] is None]
    errors = [r for r in results if r["error"] is not None]
    failed_pages = [p for p in pages if p["error"] is not None]
    crossed = [r for r in done if r["crossed"]]
    print(f"requests: {len(results)} translations (+ {len(results)} view changes) in {seconds:.1f} s: "
          f"{len(results) / seconds:.2f} translations/s")
    if len(failed_pages) < len(pages):
        print(f"page load latency (its load event, {len(pages)} pages opened {args.clients} at once): "
              f"{percentiles([p['page_s'] for p in pages if p['error'] is None])}")
    if done:
        print(f"translate latency: {percentiles([r['translate_s'] for r in done])}")
        print(f"view change latency: {percentiles([r['view_s'] for r in done])}")
    web, workers = 1000 * server_cpu / len(results)
    print(f"CPU per translation + view change: app {web + workers:.0f} ms (web server {web:.0f} ms, trace workers "
          f"{workers:.0f} ms), these clients {1000 * own_cpu / len(results):.0f} ms, all on the same "
          f"{cores} cores")
    print(f"errors: {len(errors)}; cross-talk: {len(crossed)}")
    print(f"page loads failed: {len(failed_pages)}")
    for r in (errors + crossed)[:5]:
        print(f"  {r['text'][:60]!r}: {r['error'] or 'answer does not match its own sentence'}")
    for p in failed_pages[:5]:
        print(f"  page of user {p['user']}: {p['error']}")
    print(f"server peak RSS {sampler.peak:.0f} MiB; after each wave: "
          + ", ".join(f"{m:.0f}" for m in after_wave) + f" MiB (session store capped at {args.session_capacity})")
    sys.exit(1 if errors or crossed or failed_pages or len(results) != args.clients * args.requests * args.waves else 0)


if __name__ == "__main__":
    main()
