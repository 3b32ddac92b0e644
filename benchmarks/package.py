"""The package as a user gets it: the wheel's size, the time to install it with its dependencies into a fresh venv,
and the time `attention_inspector.load("en-de")` takes in a fresh process against `load_checkpoint` alone.

    python benchmarks/package.py [--runs 5] [--load-only]

The wheel is built from a copy of what it packages (tests/test_install.py `built_wheel`), then installed with
`pip install WHEEL` into a new venv, its dependencies from the package index (or pip's cache): the time a newcomer
waits, which depends on the network and the cache. Then `--runs` fresh processes of that venv each load the
shipped en-de one way, then the other, in turns (each process's own wall time from its start, imports included).
Goal (issue 69): `load` within 1.2x `load_checkpoint` alone.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from attention_inspector.model.training.train import cpu_model  # noqa: E402
from tests.test_install import built_wheel  # noqa: E402

WAYS = {"load_checkpoint alone": "from attention_inspector.model.serving.checkpoint import load_checkpoint; "
                                 "load_checkpoint('en-de')",
        "attention_inspector.load": "import attention_inspector; attention_inspector.load('en-de')"}
TIMED = "import time; began = time.perf_counter(); {}; print(time.perf_counter() - began)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--load-only", action="store_true", help="time the loads in this interpreter's environment")
    args = parser.parse_args()
    print(cpu_model())
    with tempfile.TemporaryDirectory() as work:
        python, environment = Path(sys.executable), {**os.environ, "PYTHONPATH": str(ROOT)}
        if not args.load_only:
            wheel = built_wheel(Path(work))
            print(f"the wheel: {wheel.name}, {wheel.stat().st_size / 2 ** 20:.1f} MiB")
            subprocess.run([sys.executable, "-m", "venv", f"{work}/env"], check=True)
            python = Path(work) / "env" / "bin" / "python"
            environment = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
            began = time.perf_counter()
            subprocess.run([python, "-m", "pip", "install", "-q", str(wheel)], check=True)
            print(f"pip install of the wheel and its dependencies into a fresh venv: "
                  f"{time.perf_counter() - began:.0f} s")
        seconds = {way: [] for way in WAYS}
        for _ in range(args.runs):
            for way, code in WAYS.items():
                done = subprocess.run([python, "-c", TIMED.format(code)], cwd=work, capture_output=True, text=True,
                                      check=True, env=environment)
                seconds[way].append(float(done.stdout.split()[-1]))
    for way, values in seconds.items():
        print(f"{way}: median {statistics.median(values):.2f} s over {args.runs} fresh processes "
              f"({', '.join(f'{value:.2f}' for value in values)})")
    medians = {way: statistics.median(values) for way, values in seconds.items()}
    ratio = medians["attention_inspector.load"] / medians["load_checkpoint alone"]
    print(f"load / load_checkpoint: {ratio:.2f}x (goal 1.2x)")


if __name__ == "__main__":
    main()
