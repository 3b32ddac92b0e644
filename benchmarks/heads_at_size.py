"""The head report at Hub size: `python -m model.analysis.heads` on a random model of NLLB-200-distilled-600M's sizes
(d 1024, 12 + 12 layers, 16 heads: 576 heads; 256,206 tokens; built and converted as benchmarks/hub_model.py
does), over `--pairs` sentence pairs of Multi30k's val split.

By default the report as it runs now: every head estimated (second order), the top `--exact` measured exactly plus
its random check, on one process; its time per part (from heads.json's `seconds_per_part`) and peak memory. Then
patching per head at that size (a source of about 24 pieces, at step 11): a translation, the estimated grid
(attribution patching) and the exact grid, each timed.

`--exact all` measures every head (the full study, hours at this size), on one process and under torchrun on
`--processes` processes: wall time, each process's peak memory, and the wall time per sentence per head (the whole
report's: loading, statistics and the pruning curve's decodings included); then a projection (said as one) of
1,000 pairs from that cost.

    python benchmarks/heads_at_size.py [--pairs 20] [--exact 32|all] [--processes 2] [--family nllb-600m|marian]
                                       [--device cpu] [--torchrun-only] [--no-patching | --patching-only]
                                       [--goal-only]

`--goal-only` runs only the goal's two parts, as the report runs them (`estimated_changes`, then
`log_likelihood_changes` of the top `--exact` and the check), in a process of their own, and prints their times
and its peak memory: the report's other parts (statistics, BLEU, the pruning curve's nine decodings) take another
~20 minutes at this size.

Needs the dev requirements (transformers). `--family marian` takes opus-mt-en-de's sizes (384 heads, 58k tokens)
for a quicker run.
"""

from __future__ import annotations

import argparse
import gzip
import json
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

from attention_inspector.model.training.evaluate import DEFAULT_DATA  # noqa: E402

# Runs the head report and prints this process's peak resident memory (KiB) as it ends.
REPORT = ("import runpy, sys; sys.argv[0] = 'heads'\n"
          "try:\n    runpy.run_module('attention_inspector.model.analysis.heads', run_name='__main__')\n"
          "finally:\n"
          "    print(next(line for line in open('/proc/self/status') if line.startswith('VmHWM')), flush=True)")


def report(checkpoint: Path, pairs: tuple[Path, Path], processes: int, device: str | None, exact: str = "all"
           ) -> tuple[float, list[int]]:
    """The head report's wall seconds and each process's peak memory (KiB), on one process or under torchrun."""
    arguments = ["--checkpoint", str(checkpoint), "--pairs", *map(str, pairs), "--exact", exact]
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
    parser.add_argument("--exact", default="32", help="the report's --exact: K heads (default 32), or all")
    parser.add_argument("--no-patching", action="store_true", help="leave out the patching grids' timings")
    parser.add_argument("--patching-only", action="store_true", help="only the patching grids' timings")
    parser.add_argument("--goal-only", action="store_true", help="only the estimate and the exact heads, timed")
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
    if args.goal_only:
        goal_parts(checkpoint, pairs, int(args.exact))
        return
    if args.exact != "all":
        if not args.patching_only:
            estimated_report(checkpoint, pairs, args)
        if not args.no_patching:
            patching_times(checkpoint, args.data)
        return
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


def estimated_report(checkpoint: Path, pairs: tuple[Path, Path], args: argparse.Namespace) -> None:
    """The report with every head estimated and the top --exact measured (on one process): its parts' seconds."""
    seconds, peaks = report(checkpoint, pairs, 1, args.device, args.exact)
    written = json.loads((checkpoint / "heads.json").read_text())
    parts = written["seconds_per_part"]
    record = written["estimate"]
    measured = sum("log_likelihood_change" in head for head in written["heads"].values())
    print(f"the head report, --exact {args.exact} (one process): {seconds:,.0f} s wall, peak memory "
          f"{megabytes(peaks[0])}; {measured} heads measured exactly ({args.exact} + a check of "
          f"{len(record['check'])}); the estimate: {record['order']} order, {record['probes']} probes per batch")
    print("| part | seconds |")
    print("|---|---|")
    for part, value in parts.items():
        print(f"| {part} | {value:,.1f} |")
    goal = parts["estimate"] + parts["exact"]
    print(f"every head estimated and the top {args.exact} + check measured exactly: {goal:,.1f} s "
          f"({goal / 60:.1f} min; goal 12 min)")
    harm = record["largest_harm_in_check"]
    if harm:
        print(f"the largest harm in the random check: {harm['head']} {harm['log_likelihood_change']:+.5f} per token")


# The goal's two parts as the head report runs them (model/analysis/heads.py `main`), timed in a process of their own.
GOAL = """import sys, time
from pathlib import Path
from attention_inspector.model.analysis import heads
from attention_inspector.model.serving.checkpoint import load_checkpoint
checkpoint, sources, targets, exact = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
translator = load_checkpoint(checkpoint)
sources = translator.src_tokenizer.tokenize_all(sources.read_text(encoding="utf-8").splitlines())
targets = translator.tgt_tokenizer.tokenize_all(targets.read_text(encoding="utf-8").splitlines())
began = time.perf_counter()
batches = heads.teacher_forced_batches(translator, sources, targets, heads.estimate_tokens(translator))
estimate, _ = heads.estimated_changes(translator, batches, "second", heads.PROBES)
estimated, began = time.perf_counter() - began, time.perf_counter()
top, check = heads.measured_heads(estimate, exact, heads.CHECK)
heads.log_likelihood_changes(translator, sources, targets, names=top + check)
print(estimated, time.perf_counter() - began, len(top), len(check))
print(next(line for line in open('/proc/self/status') if line.startswith('VmHWM')), flush=True)
"""


def goal_parts(checkpoint: Path, pairs: tuple[Path, Path], exact: int) -> None:
    """The estimate of every head and the exact changes of the top `exact` and the check, timed as the report
    runs them (one process, the report's defaults)."""
    done = subprocess.run([sys.executable, "-c", GOAL, str(checkpoint), *map(str, pairs), str(exact)], cwd=ROOT,
                          capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"the goal's parts failed:\n{done.stderr[-3000:]}")
    times, memory = done.stdout.strip().splitlines()[-2:]
    estimated, measured, top, check = (float(value) for value in times.split())
    print(f"estimate of every head: {estimated:,.1f} s; exact changes of {top:.0f} + a check of {check:.0f} heads: "
          f"{measured:,.1f} s; together {estimated + measured:,.1f} s ({(estimated + measured) / 60:.1f} min; goal 12 "
          f"min); peak memory {megabytes(int(memory.split()[1]))}")


def patching_times(checkpoint: Path, data: Path) -> None:
    """Patching per head at step 11 of a source of about 24 pieces (the first of Multi30k val with a word the page
    swaps, man↔woman and the like, and 20 to 28 pieces): a translation, the estimated grid and the exact grid."""
    from attention_inspector.model.explain.patching import suggested_swap
    from attention_inspector.model.serving.checkpoint import load_checkpoint
    translator = load_checkpoint(checkpoint)
    with gzip.open(data / "val.en.gz", "rt", encoding="utf-8") as lines:
        source = next(line.strip() for line in lines if suggested_swap(line.strip())
                      and 20 <= len(translator.source_tokens(line.strip())) <= 28)
    counterfactual = suggested_swap(source)
    pieces = len(translator.source_tokens(source))
    began = time.perf_counter()
    trace = translator.trace(source)
    translation = time.perf_counter() - began
    step = min(10, len(trace.target_tokens) - 1)
    timed = {}
    for estimate in (True, False):
        began = time.perf_counter()
        translator.patching(source, counterfactual, trace.target_tokens, step, estimate=estimate)
        timed[estimate] = time.perf_counter() - began
    print(f"patching per head at step {step + 1} of a {pieces}-piece source ({len(trace.target_tokens)}-step "
          f"translation, {translation:.1f} s): estimated grid {timed[True]:.1f} s = "
          f"{timed[True] / translation:.2f}x a translation (goal 3x); exact grid {timed[False]:.1f} s = "
          f"{timed[False] / translation:.1f}x")


if __name__ == "__main__":
    main()
