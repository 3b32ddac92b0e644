"""Server-side latency of the app on the shipped checkpoint: a translation, view changes, what-if, what they send.

    python benchmarks/app_latency.py [--checkpoint en-de] [--runs 9]

Runs the page's own events as Gradio runs them (ui/listeners.py `answer`: the operation on the session, then
`render`; what a request runs, minus the network) and prints medians, including the JSON encoding of what the
browser receives. Stepping needs no request: benchmarks/browser_latency.py
measures it in a browser. The what-if table compares a branch, a re-translation with a head switched off and
the beam view with a plain translation of the same sentence, in the same run (goal: each within 1.5x), and
the ALTI+ contributions of the translation on screen (goal: within 1.5x of the plain trace), and patching every head
of one step against a counterfactual (goal: within 3x). Then a new user's
first translation (every menu's properties sent) against a later one (values only). Last, a 20-token
trace alone against the time of its bare matrix products (every weight matrix it multiplies by, as one torch.mm
each, nothing else; goal: the trace within 2x), through the step decoder and through the module tree.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson  # noqa: E402  (what Gradio encodes its answers with)
import torch  # noqa: E402
from load import cpu_model  # noqa: E402  (benchmarks/load.py, beside this script)

from attention_inspector.model.keys import ALL_HEADS, ALTI, CROSS, ENCODER, MEAN, WEIGHTS  # noqa: E402
from attention_inspector.model.nets.cores import parts  # noqa: E402
from attention_inspector.model.nets.tracing import greedy_trace  # noqa: E402
from attention_inspector.model.text.words import PIECES  # noqa: E402
from attention_inspector.ui import build_demo, listeners, load_services, operations  # noqa: E402
from attention_inspector.ui.tabs.sources import measure_sources  # noqa: E402
from attention_inspector.viz.attention import PlainFigure  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

SENTENCES = [  # about 5, 20 and 40 tokens
    "A dog runs outside.",
    "A young woman in a red jacket is sitting on a wooden bench in the park while reading a book.",
    "Two men in orange safety vests are working on the side of a busy road while a woman with a small "
    "child walks past them on the sidewalk, and a bus waits at the corner behind a white van.",
]


def median_ms(fn, runs: int) -> float:
    return alternating_ms([fn], runs)[0]


def alternating_ms(fns, runs: int) -> list[float]:
    """Each call's median milliseconds over `runs` rounds, the calls taking turns in each round, so that a machine
    slower for a while slows each of them alike (a ratio of two timed apart moved by a third from run to run)."""
    for fn in fns:
        fn()  # warm-up
    times = [[] for _ in fns]
    for _ in range(runs):
        for fn, taken in zip(fns, times):
            start = time.perf_counter()
            fn()
            taken.append((time.perf_counter() - start) * 1000)
    return [statistics.median(taken) for taken in times]


class Page:
    """The page's events for the shipped checkpoints, run without a server (in this process, no trace workers)."""

    def __init__(self):
        torch.set_num_threads(1)
        self.services = load_services(ROOT / "checkpoints", workers=0)
        self.page = build_demo(self.services).page

    def run(self, operation, session, *extras, view=(CROSS, 0, MEAN, WEIGHTS, 1, False, PIECES), outputs=None) -> dict:
        answer = listeners.answer(self.page, self.services, operation,
                                  outputs or listeners.session_outputs(self.page), len(extras))
        return answer(session, *extras, *view)

    def translate(self, model: str, text: str, session=None) -> dict:
        return self.run(operations.translate, session, model, text)

    def view(self, session, kind, layer, head, measure=WEIGHTS, model_view=False) -> dict:
        return self.run(listeners.view_changed, session, view=(kind, layer, head, measure, 1, model_view, PIECES),
                        outputs=listeners.view_outputs(self.page))


def json_bytes(outputs: dict) -> int:
    """Bytes of the JSON Gradio sends for a callback's outputs (figures travel as JSON strings)."""
    sent = [value.to_json() if isinstance(value, PlainFigure) else value for value in outputs.values()]
    return len(orjson.dumps([value for value in sent if isinstance(value, (dict, str, list))]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--checkpoint", default="en-de")
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    page = Page()
    translator = page.services.translators[args.checkpoint]
    config = translator.model.config
    print(f"checkpoint {args.checkpoint}: {config.n_encoder_layers}+{config.n_decoder_layers} layers, "
          f"{config.n_heads} heads; torch threads {torch.get_num_threads()}, a measure's batches shared over {parts()} "
          f"cores (model/nets/cores.py); {cpu_model()}; "
          f"median of {args.runs} runs")
    print("| source tokens | steps | translate: trace, every step's charts, view (ms) | view change: one head (ms) "
          "| all heads (ms) | model view (ms) | JSON bytes: translate / one head / all heads / model view |")
    print("|---|---|---|---|---|---|---|")
    for sentence in SENTENCES:
        tokens = len(translator.src_tokenizer(sentence))

        def translate():
            return page.translate(args.checkpoint, sentence)

        session = translate()[page.page.session]
        trace = session.trace
        views = {"one head": lambda: page.view(session, CROSS, 0, 3),
                 "all heads": lambda: page.view(session, CROSS, 0, ALL_HEADS),
                 "model view": lambda: page.view(session, ENCODER, 0, MEAN, model_view=True)}
        times = [median_ms(lambda: json_bytes(translate()), args.runs)]
        times += [median_ms(lambda view=view: json_bytes(view()), args.runs) for view in views.values()]
        sizes = [json_bytes(translate())] + [json_bytes(view()) for view in views.values()]
        print(f"| {tokens} | {trace.steps} | " + " | ".join(f"{t:.1f}" for t in times)
              + " | " + " / ".join(f"{b:,}" for b in sizes) + " |")
    what_if(page, args.checkpoint, SENTENCES[1], args.runs)
    new_users(page, args.checkpoint, SENTENCES[1], args.runs)
    against_matmuls(translator, SENTENCES[1], args.runs)
    attributions(page, args.checkpoint, SENTENCES[1], args.runs)
    patching(page, args.checkpoint, SENTENCES[1], args.runs)


def attributions(page: Page, checkpoint: str, sentence: str, runs: int) -> None:
    """Each gradient attribution of the middle step (the page's button, in the server) against a translation, and
    integrated gradients (32 points) against 32 teacher-forced passes of the sentence, batched and looped."""
    from attention_inspector.model.explain.attribution import METHODS, Prediction
    from attention_inspector.ui.tabs.sources import attribute_step, explanations_compared, explanations_integrated

    session = page.translate(checkpoint, sentence)[page.page.session]
    step = session.trace.steps // 2 + 1
    services = page.services
    translation, first = alternating_ms([lambda: page.translate(checkpoint, sentence, session),
                                         lambda: explanations_compared(services, session, step)], runs)  # nothing kept
    print(f"\nattributions of step {step} of {session.trace.steps} (server side)")
    print("| request | ms | x a translation |")
    print("|---|---|---|")
    print(f"| a translation (trace, charts, view) | {translation:.1f} | 1.00 |")
    for method in METHODS:
        ms = median_ms(lambda method=method: attribute_step(services, session, step, method, ""), runs)
        print(f"| {method} | {ms:.1f} | {ms / translation:.2f} |")
    print(f"| which explanation to trust: its first answer (7 rankings, ERASER at 5 k) | {first:.1f} | "
          f"{first / translation:.2f} |")
    asked = explanations_compared(services, session, step)[2]  # the first answer kept with the decoding
    ms = median_ms(lambda: explanations_integrated(services, asked, step), max(3, runs // 3))
    print(f"| which explanation to trust: then integrated gradients (8 rankings) | {ms:.1f} | {ms / translation:.2f} |")
    for method in METHODS:  # the view's first showing of a method: every step, then kept with the decoding
        ms = median_ms(lambda method=method: page.view(session, CROSS, 0, MEAN, method), max(3, runs // 3))
        print(f"| *Show* {method}: every step's attributions and the view | {ms:.1f} | {ms / translation:.2f} |")
    translator = services.translators[checkpoint]
    src_ids, tgt_ids = translator.given_translation(sentence, session.trace.target_tokens)
    prediction = Prediction(translator.model, src_ids, tgt_ids[:step - 1], tgt_ids[step - 1])
    source, target = prediction.embeddings()

    def passes(batch: int) -> float:  # one forward and backward pass of `batch` copies, as integrated gradients does
        inputs = [t.expand(batch, -1, -1).clone().requires_grad_() for t in (source, target)]
        with torch.enable_grad():
            prediction(*inputs).sum().backward()

    batched = median_ms(lambda: passes(32), runs)
    looped = median_ms(lambda: [passes(1) for _ in range(32)], max(3, runs // 3))
    integrated = median_ms(lambda: attribute_step(services, session, step, "integrated_gradients", ""), runs)
    print(f"integrated gradients, 32 points: {integrated:.1f} ms; 32 passes with gradients batched {batched:.1f} ms, "
          f"looped {looped:.1f} ms")


def patching(page: Page, checkpoint: str, sentence: str, runs: int) -> None:
    """Patching every head at one step against a counterfactual with one word swapped (the Counterfactual tab's
    button, in the server: both translations, one batch row per head, and causal tracing's stream grid), against a
    translation (goal: within 3x)."""
    from attention_inspector.model.explain.patching import patch_heads, suggested_swap
    from attention_inspector.ui.tabs.counterfactual import patch_at_step

    counterfactual = suggested_swap(sentence) or sentence
    session = page.translate(checkpoint, sentence)[page.page.session]
    step = session.trace.steps // 2 + 1
    translator = page.services.translators[checkpoint]
    heads = sum(layers * count for layers, count in translator.model.heads().values())
    src_ids, tgt_ids = translator.given_translation(sentence, session.trace.target_tokens)
    counterfactual_ids = translator.encode_source(translator.source_tokens(counterfactual))
    translation, heads_only = alternating_ms([
        lambda: page.translate(checkpoint, sentence, session),
        lambda: patch_heads(translator.model, src_ids, counterfactual_ids, tgt_ids, step - 1, stream=False)], runs)
    grid = median_ms(lambda: translator.patching(sentence, counterfactual, session.trace.target_tokens, step - 1),
                     runs)
    tab = median_ms(lambda: patch_at_step(page.services, session, counterfactual, step, ""), runs)
    print(f"\npatching every head ({heads}) at step {step} of {session.trace.steps}, counterfactual "
          f"{counterfactual!r} (server side)")
    print("| request | ms | x a translation |")
    print("|---|---|---|")
    print(f"| a translation (trace, charts, view) | {translation:.1f} | 1.00 |")
    print(f"| the per-head grid alone (patch_heads) | {heads_only:.1f} | {heads_only / translation:.2f} | "
          "(goal: within 3x)")
    print(f"| the per-head grid and the stream grid (Translator.patching) | {grid:.1f} | {grid / translation:.2f} |")
    print(f"| the tab's answer (the counterfactual's translation too, figures) | {tab:.1f} | {tab / translation:.2f} |")


def new_users(page: Page, checkpoint: str, sentence: str, runs: int) -> None:
    """A new user's first translation against a later one: the first sends every menu's, button's and switch grid's
    properties; a later one of the same model sends values."""
    session = page.translate(checkpoint, sentence)[page.page.session]
    times = {"a new user's first translation": median_ms(lambda: json_bytes(page.translate(checkpoint, sentence)),
                                                         runs),
             "a later translation in a session": median_ms(
                 lambda: json_bytes(page.translate(checkpoint, sentence, session)), runs)}
    print("\na new user, the same sentence")
    print("| request | ms |")
    print("|---|---|")
    for name, ms in times.items():
        print(f"| {name} | {ms:.1f} |")


def what_if(page: Page, checkpoint: str, sentence: str, runs: int) -> None:
    """A branch, a head switched off and the beam view of one sentence, against its plain translation."""
    session = page.translate(checkpoint, sentence)[page.page.session]
    trace = session.trace
    middle = trace.steps // 2
    word = next(t for t in trace.top_tokens[middle][1:] if t != "<eos>")
    at_middle = (CROSS, 0, MEAN, WEIGHTS, middle + 1, False)
    measured = page.view(session, CROSS, 0, MEAN, ALTI)[page.page.session]
    calls = {"translate (trace, charts, view)": lambda: page.translate(checkpoint, sentence, session),
             f'branch: step {middle + 1} chooses "{word}"':
                 lambda: page.run(operations.branch, session, word, view=at_middle),
             "one head off (cross.2.5): trace + score of the original":
                 lambda: page.run(operations.set_mask, session, ["cross.2.5"]),
             "beam view (checkpoint's beam size)": lambda: page.run(operations.run_beam, session),
             "where each word came from (ALTI+ contributions)":
                 lambda: {"figures": list(measure_sources(page.services, session)[0])},
             "ALTI+ view, first of the decoding (one teacher-forced pass)":
                 lambda: page.view(session, CROSS, 0, MEAN, ALTI),
             "ALTI+ view of another layer (maps kept with the decoding)":
                 lambda: page.view(measured, CROSS, 1, MEAN, ALTI)}
    times = {name: median_ms(lambda call=call: json_bytes(call()), runs) for name, call in calls.items()}
    plain = times["translate (trace, charts, view)"]
    print(f"\nwhat-if on a {len(trace.source_tokens) - 1}-token sentence ({trace.steps} steps)")
    print("| request | ms | x translate | JSON bytes |")
    print("|---|---|---|---|")
    for name, call in calls.items():
        print(f"| {name} | {times[name]:.1f} | {times[name] / plain:.2f} | {json_bytes(call()):,} |")


def bare_matmuls(model, src_length: int, steps: int):
    """A function doing only the matrix products a trace of `steps` steps of a `src_length`-token source does: the
    encoder's over the whole source, cross-attention's keys and values of the memory, and per step one row through
    every decoder weight matrix and the output layer."""
    encoder = [linear.weight.detach() for layer in model.encoder_layers for linear in
               (*(getattr(layer.self_attention, w) for w in ("w_q", "w_k", "w_v", "w_o")),
                layer.feed_forward.linear_in, layer.feed_forward.linear_out)]
    memory = [getattr(layer.cross_attention, w).weight.detach() for layer in model.decoder_layers
              for w in ("w_k", "w_v")]
    step = [linear.weight.detach() for layer in model.decoder_layers for linear in
            (*(getattr(layer.self_attention, w) for w in ("w_q", "w_k", "w_v", "w_o")), layer.cross_attention.w_q,
             layer.cross_attention.w_o, layer.feed_forward.linear_in, layer.feed_forward.linear_out)]
    step.append(model.generator.weight.detach())
    inputs = {(rows, size): torch.randn(rows, size) for rows in (1, src_length)
              for size in (model.config.d_model, model.config.d_ff)}

    def run():
        for weight in encoder + memory:
            torch.mm(inputs[src_length, weight.size(1)], weight.t())
        for _ in range(steps):
            for weight in step:
                torch.mm(inputs[1, weight.size(1)], weight.t())
    return run


def against_matmuls(translator, sentence: str, runs: int) -> None:
    """A 20-token trace alone (the app's path and the module tree's) against its bare matrix products."""
    traced = translator.trace(sentence)
    src_ids, steps = traced.trace.src_ids, len(traced.target_tokens)
    bare = median_ms(bare_matmuls(translator.model, len(src_ids), steps), runs)
    fast = median_ms(lambda: translator.trace(sentence), runs)
    modules = median_ms(lambda: greedy_trace(translator.model, src_ids), runs)
    print(f"\na {len(src_ids) - 1}-token trace alone ({steps} steps), one thread:")
    print("| what | ms | x bare matrix products |")
    print("|---|---|---|")
    for name, ms in (("bare matrix products (every weight matrix once per step, torch.mm)", bare),
                     ("trace, step decoder (Translator.trace: what the app runs)", fast),
                     ("trace through the module tree (greedy_trace, before)", modules)):
        print(f"| {name} | {ms:.1f} | {ms / bare:.2f} |")


if __name__ == "__main__":
    main()
