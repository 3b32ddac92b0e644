"""What a notebook view costs (attention_inspector/notebook.py): the seconds `show` takes, the figures it holds, the
size of its page and of its plain text (what a REPL prints and a notebook stores as text/plain beside the page), for
shipped checkpoints by name or any checkpoint folder (a converted Hub model's).

    python benchmarks/notebook_view.py [en-de en-fr-rnn-dot /tmp/hub-benchmark/converted ...] [--runs 3]
"""

from __future__ import annotations

import argparse
import base64
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import attention_inspector as ai  # noqa: E402

SENTENCE = "A man in a blue shirt is standing on a ladder cleaning windows."


def cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", default=["en-de", "en-fr-rnn-dot"])
    parser.add_argument("--text", default=SENTENCE)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(f"CPU: {cpu()}; sentence: {args.text!r}")
    print("| model | parameters | show, s (median) | figures | layers held | figures packed, MB | page, MB "
          "| text, bytes |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.models:
        model = ai.load(name)
        seconds = []
        for _ in range(args.runs):
            start = time.perf_counter()
            view = model.show(args.text)
            seconds.append(time.perf_counter() - start)
        page = view.to_html()
        packed = page.split('id="inspector-value">', 1)[1].split("</script>", 1)[0]
        held = "; ".join(f"{kind} {len(layers)}" for kind, layers in view.value["embedded"].items())
        print(f"| {Path(str(name)).name} | {model.translator.parameters / 1e6:.1f}M | {statistics.median(seconds):.2f} "
              f"| {len(view.value['figures'])} | {held} | {len(base64.b64decode(packed)) / 1e6:.2f} "
              f"| {len(page.encode()) / 1e6:.2f} | {len(repr(view).encode())} |")


if __name__ == "__main__":
    main()
