"""Server-side latency of the app on the shipped checkpoint: trace + figures, step changes, figure sizes.

    python benchmarks/app_latency.py [--checkpoint en-de] [--runs 9]

Calls the app's own callbacks (what a request runs, minus the network) and prints medians.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import plotly.graph_objects as go  # noqa: E402

import app  # noqa: E402  (after the path set-up above)
from load import cpu_model  # noqa: E402  (benchmarks/load.py, beside this script)
from viz.views import ALL_HEADS, CROSS, ENCODER, MEAN  # noqa: E402

SENTENCES = [  # about 5, 20 and 40 tokens
    "A dog runs outside.",
    "A young woman in a red jacket is sitting on a wooden bench in the park while reading a book.",
    "Two men in orange safety vests are working on the side of a busy road while a woman with a small "
    "child walks past them on the sidewalk, and a bus waits at the corner behind a white van.",
]


def median_ms(fn, runs: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def json_bytes(*figures) -> int:
    """Bytes of the figure JSON that Gradio sends to the browser."""
    return sum(len(f.to_json().encode()) for f in figures if f is not None)


def figures(outputs: dict) -> list:
    """The Plotly figures among a callback's outputs."""
    return [o for o in outputs.values() if isinstance(o, go.Figure)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--checkpoint", default=app.DEFAULT_MODEL)
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    translator = app.TRANSLATORS[args.checkpoint]
    config = translator.model.config
    print(f"checkpoint {args.checkpoint}: {config.n_encoder_layers}+{config.n_decoder_layers} layers, "
          f"{config.n_heads} heads; torch threads {app.torch.get_num_threads()}; {cpu_model()}; "
          f"median of {args.runs} runs")
    print("| source tokens | steps | translate: trace + figures (ms) | + JSON (ms) | step change (ms) | + JSON (ms) "
          "| all heads (ms) | model view (ms) | JSON bytes: translate / step / model view |")
    print("|---|---|---|---|---|---|---|---|---|")
    for sentence in SENTENCES:
        tokens = len(translator.src_tokenizer(sentence))

        def translate():
            return app.translate(args.checkpoint, sentence, CROSS, 0, MEAN)

        trace = translate()[app.trace_state]
        middle = max(1, trace.steps // 2)

        def step():
            return app.move(trace, "next", CROSS, 0, MEAN, middle)

        def model_view():
            return app.render(trace, ENCODER, 0, MEAN, middle, model_view=True)

        times = [median_ms(translate, args.runs), median_ms(lambda: json_bytes(*figures(translate())), args.runs),
                 median_ms(step, args.runs), median_ms(lambda: json_bytes(*figures(step())), args.runs),
                 median_ms(lambda: app.render(trace, CROSS, 0, ALL_HEADS, middle), args.runs),
                 median_ms(model_view, args.runs)]
        sizes = [json_bytes(*figures(translate())), json_bytes(*figures(step())), json_bytes(model_view()[app.overview_plot])]
        print(f"| {tokens} | {trace.steps} | " + " | ".join(f"{t:.1f}" for t in times)
              + " | " + " / ".join(f"{b:,}" for b in sizes) + " |")


if __name__ == "__main__":
    main()
