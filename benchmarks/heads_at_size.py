"""The head report at Hub size: `python -m model.analysis.heads` on a random model of NLLB-200-distilled-600M's sizes
(d 1024, 12 + 12 layers, 16 heads: 576 heads; 256,206 tokens; built and converted as benchmarks/hub_model.py
does), over `--pairs` sentence pairs of Multi30k's val split, on one process and under torchrun on `--processes`
processes: wall time, each process's peak memory, and the wall time per sentence per head (the whole report's:
loading, statistics and the pruning curve's decodings included). Then a projection (said as one) of 1,000 pairs
from that cost.

    python benchmarks/heads_at_size.py [--pairs 20] [--processes 2] [--family nllb-600m|marian] [--device cpu]
                                       [--torchrun-only]

Needs the dev requirements (transformers). `--family marian` takes opus-mt-en-de's sizes (384 heads, 58k tokens)
for a quicker run.
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import hub_models  # noqa: E402  (tests/hub_models.py: Hub-style folders built offline)
from hub_model import convert, megabytes  # noqa: E402  (benchmarks/hub_model.py)
from load import cpu_model  # noqa: E402

from model.training.evaluate import DEFAULT_DATA  # noqa: E402

# Runs the head report and prints this process's peak resident memory (KiB) as it ends.
REPORT = ("import runpy, sys; sys.argv[0] = 'heads'\n"
          "try:\n    runpy.run_module('model.analysis.heads', run_name='__main__')\n"
          "finally:\n"
          "    print(next(line for line in open('/proc/self/status') if line.startswith('VmHWM')), flush=True)")


def report(checkpoint: Path, pairs: tuple[Path, Path], processes: int, device: str | None
           ) -> tuple[float, list[int]]:
    """The head report's wall seconds and each process's peak memory (KiB), on one process or under torchrun."""
    arguments = ["--checkpoint", str(checkpoint), "--pairs", *map(str, pairs)]
    arguments += ["--device", device] if device else []
    if processes == 1:
        command = [sys.executable, "-c", REPORT, *arguments]
    else:
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes), "--no-python",
                   sys.executable, "-c", REPORT, *arguments, "--threads", "1"]
    began = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - began
    if done.returncode != 0:
        sys.exit(f"{' '.join(command[:6])} ... failed:\n{done.stderr[-3000:]}")
    return seconds, [int(line.split()[1]) for line in done.stdout.splitlines() if line.startswith("VmHWM")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--family", choices=["nllb-600m", "marian"], default="nllb-600m")
    parser.add_argument("--device", help="cpu, cuda or cuda:N (default: the head report's own choice)")
    parser.add_argument("--data", type=Path, default=Path(DEFAULT_DATA))
    parser.add_argument("--work", type=Path, default=Path("/tmp/heads-at-size"))
    parser.add_argument("--torchrun-only", action="store_true",
                        help="the run under torchrun alone (the one process's measured before, in another run)")
    args = parser.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    sizes = hub_models.NLLB_600M if args.family == "nllb-600m" else hub_models.OPUS_MT_EN_DE
    folder = hub_models.marian(args.work / "hub", config=sizes)
    checkpoint = args.work / "checkpoint"
    convert(folder, checkpoint)
    pairs = tuple(args.work / f"val.{lang}" for lang in ("en", "de"))
    for path, lang in zip(pairs, ("en", "de")):
        with gzip.open(args.data / f"val.{lang}.gz", "rt", encoding="utf-8") as lines:
            path.write_text("".join(line for _, line in zip(range(args.pairs), lines)), encoding="utf-8")
    heads = 3 * sizes["encoder_layers"] * sizes["encoder_attention_heads"]
    print(f"{cpu_model()}; a random {args.family}-size model ({heads} heads, {sizes['vocab_size']:,} tokens); "
          f"{args.pairs} pairs of Multi30k val")
    print("| run | wall s | peak memory per process | wall s per sentence per head |")
    print("|---|---|---|---|")
    per_head = {}
    for processes in (args.processes,) if args.torchrun_only else (1, args.processes):
        seconds, peaks = report(checkpoint, pairs, processes, args.device)
        per_head[processes] = seconds / (args.pairs * heads)
        print(f"| {'one process' if processes == 1 else f'torchrun, {processes} processes'} | {seconds:,.0f} | "
              f"{' / '.join(megabytes(peak) for peak in peaks)} | {per_head[processes]:.4f} |")
    if 1 not in per_head:
        return
    device = args.device or "the default device"
    print(f"projection, not a measurement: 1,000 pairs at the one-process wall time per sentence per head take "
          f"{per_head[1] * 1000 * heads / 3600:.1f} h on one process on {device}, and "
          f"{per_head[1] * 1000 * heads / 3600 / 8:.1f} h on 8 such devices if the pairs split evenly (high: the "
          "loading and other fixed costs do not grow with the pairs)")

if __name__ == "__main__":
    main()
