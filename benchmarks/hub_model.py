"""A Hub-size model converted and traced: a random model with Helsinki-NLP/opus-mt-en-de's exact config (74 M
parameters; `--family t5`: google-t5/t5-small's, 60 M; `--family nllb-600m`: a Marian model of
NLLB-200-distilled-600M's sizes, 615 M), built here with transformers (no download), then

1. converted by `python -m model.hub.convert_hf` in a process of its own: its time and peak memory;
2. a greedy trace of about 20 tokens with every attention map, through the app's path (`Translator.trace`: the step
   decoder, batched), against transformers' own `generate(output_attentions=True)` with eager attention, alternately
   in the same run (goal: the trace no slower);
3. the server's memory with two such models loaded and one translation made with each, trace worker included.

    python benchmarks/hub_model.py [--runs 7] [--work /tmp/hub-benchmark] [--family marian|t5|nllb-600m]

Needs the dev requirements (transformers). The weights are random, so the translation is nonsense of a fixed
length: what is timed is the arithmetic, which is the same as a real opus-mt-en-de's.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import hub_models  # noqa: E402  (tests/hub_models.py: Hub-style folders built offline)
import torch  # noqa: E402

from attention_inspector.model.serving.checkpoint import load_checkpoint  # noqa: E402
from attention_inspector.model.training.train import cpu_model  # noqa: E402

TEXT = "A man reads."  # 6 source tokens with <eos>: the random model runs to the length limit, 2 * 6 + 10 = 22
LONG = ("Two young men in orange safety vests are working on the side of a busy road while a woman with a small "
        "child walks past them on the sidewalk")  # cut to 24 pieces and <eos>: the 25-token source of `at_size`
STEPS = 25  # the forced output's length there


def megabytes(kilobytes: int) -> str:
    return f"{kilobytes / 1024:,.0f} MiB"


def convert(folder: Path, out: Path) -> tuple[float, int]:
    """Convert in a fresh process (`python -m model.hub.convert_hf`): wall seconds and that process's peak resident
    memory (KiB), its own VmHWM: the children's ru_maxrss counts this process's memory, which a child has for a
    moment before it runs its own program."""
    started = time.perf_counter()
    script = ("import sys; from model.hub.convert_hf import main; code = main(sys.argv[1:]); "
              "print(next(line for line in open('/proc/self/status') if line.startswith('VmHWM'))); sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", script, str(folder), "--out", str(out)], cwd=ROOT, check=True,
                          capture_output=True, text=True)
    return time.perf_counter() - started, int(done.stdout.split("VmHWM:")[1].split()[0])


def trace_against_generate(folder: Path, out: Path, runs: int) -> None:
    from transformers import AutoModelForSeq2SeqLM

    translator = load_checkpoint(out)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager").eval()
    tokens = translator.source_tokens(TEXT)
    src_ids = translator.encode_source(tokens)
    ours_to_hub = {o: h for h, o in enumerate(hub_to_ours(translator, folder))}
    input_ids = torch.tensor([[ours_to_hub[i] for i in src_ids]])
    steps = len(translator.trace(TEXT).target_tokens)
    ours, theirs = [], []
    for _ in range(runs):
        started = time.perf_counter()
        traced = translator.trace(TEXT)
        ours.append(time.perf_counter() - started)
        with torch.inference_mode():
            started = time.perf_counter()
            generated = model.generate(input_ids, num_beams=1, do_sample=False, max_new_tokens=steps,
                                       min_new_tokens=steps, output_attentions=True, return_dict_in_generate=True)
            theirs.append(time.perf_counter() - started)
    assert len(traced.target_tokens) == steps and generated.sequences.size(1) - 1 == steps
    ours_ms, theirs_ms = statistics.median(ours) * 1000, statistics.median(theirs) * 1000
    print(f"{len(src_ids)} source tokens, {steps} target tokens, every attention map, {runs} runs, alternating:")
    print(f"  app trace (Translator.trace)                          median {ours_ms:7.0f} ms")
    print(f"  transformers generate(output_attentions=True), eager  median {theirs_ms:7.0f} ms")
    print(f"  ratio {ours_ms / theirs_ms:.2f} (goal: at most 1.00)")


def hub_to_ours(translator, folder: Path) -> list[int]:
    """Our id of each Hub id, from the Hub folder's vocab.json (Marian) or tokenizer.json (T5); rows no token names
    are the converter's placeholders."""
    import json

    if (folder / "vocab.json").is_file():
        vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    else:
        from tokenizers import Tokenizer

        vocab = Tokenizer.from_file(str(folder / "tokenizer.json")).get_vocab(with_added_tokens=True)
    renamed = {"</s>": "<eos>"}
    by_id = {index: token for token, index in vocab.items()}
    size = json.loads((folder / "config.json").read_text())["vocab_size"]
    return [translator.src_vocab.stoi[renamed.get(by_id.get(i), by_id.get(i, f"<unused {i}>"))] for i in range(size)]


def at_size(root: Path, name: str, runs: int) -> None:
    """What a user waits for at this size, a 25-token source and a 25-step output (the greedy tokens, forced to end
    at step 25): the trace alone, then the first page view after loading (the page's translate event: the trace,
    every step's charts and the view, encoded as Gradio sends them), and saliency at every step, ALTI+ at every
    step, integrated gradients of one step (32 points) and the beam search, as the page computes them for a model
    this large."""
    import orjson

    from attention_inspector.model.explain.attribution import INTEGRATED_GRADIENTS, SALIENCY, attribute, attribute_steps
    from attention_inspector.model.explain.contributions import alti_plus
    from attention_inspector.model.keys import CROSS, MEAN, WEIGHTS
    from attention_inspector.model.text.words import PIECES
    from attention_inspector.ui import build_demo, listeners, load_services, operations
    from attention_inspector.viz.attention import PlainFigure

    torch.set_num_threads(1)  # as the app serves
    services = load_services(root, workers=0)
    translator = services.translators[name]
    pieces = translator.source_tokens(LONG)[:STEPS - 1]
    text = translator.src_tokenizer.detokenize(pieces)
    src_ids = translator.encode_source(translator.source_tokens(text))
    greedy = translator.trace(text).target_tokens[:STEPS - 1] + ["<eos>"]
    tgt_ids = translator.tgt_vocab.encode(greedy)
    page = build_demo(services).page
    answer = listeners.answer(page, services, operations.translate, listeners.session_outputs(page), 2)

    def first_view():
        sent = answer(None, name, text, CROSS, 0, MEAN, WEIGHTS, 1, False, PIECES).values()
        return len(orjson.dumps([v.to_json() if isinstance(v, PlainFigure) else v for v in sent
                                 if isinstance(v, (dict, str, list, PlainFigure))]))

    unforced = len(translator.trace(text).target_tokens)  # a random model runs to the length limit
    timed = {
        "trace with every attention map (Translator.trace)": lambda: translator.trace(text, force=greedy),
        f"the same, greedy to the limit ({unforced} steps), as the page runs it": lambda: translator.trace(text),
        f"first page view ({unforced} steps; translate event: trace, charts, view, JSON)": first_view,
        "saliency at every step (in passes, with progress, as the page does)":
            lambda: attribute_steps(translator.model, src_ids, tgt_ids, SALIENCY, progress=lambda done, total: None),
        "ALTI+ at every step": lambda: alti_plus(translator.model, src_ids, tgt_ids),
        "integrated gradients of one step (32 points)":
            lambda: attribute(translator.model, src_ids, tgt_ids, STEPS // 2, INTEGRATED_GRADIENTS),
        "the same in 8 batches with progress, as the page does":
            lambda: attribute(translator.model, src_ids, tgt_ids, STEPS // 2, INTEGRATED_GRADIENTS,
                              progress=lambda done, total: None),
        "beam search (Run beam search, step by step with progress)":
            lambda: translator.beam(text, greedy_tokens=greedy, told=lambda done, total: None),
    }
    print(f"At this size, {len(src_ids)} source tokens, {len(tgt_ids)} steps, one thread, median of {runs}:")
    seconds = {}
    for label, work in timed.items():
        times = []
        for _ in range(runs):
            started = time.perf_counter()
            work()
            times.append(time.perf_counter() - started)
        seconds[label] = statistics.median(times)
        print(f"  {label:<62} {seconds[label]:6.2f} s", flush=True)
    trace, view = list(seconds.values())[1:3]
    print(f"  first page view / its trace: {view / trace:.2f} (goal: at most 2)")
    services.close()


def server_memory(root: Path) -> None:
    """Load every checkpoint under `root` as the app does (one trace worker), translate with each, print memory."""
    script = f"""
import sys; sys.path.insert(0, {str(ROOT)!r})
from pathlib import Path
import torch
torch.set_num_threads(1)  # as app.py does before loading: workers forked after multi-threaded torch can hang
from attention_inspector.ui import load_services
services = load_services(Path({str(root)!r}), workers=1)
for name in services.translators:
    services.trace(name, {TEXT!r})
def kib(pid, field, name):
    for line in open(f"/proc/{{pid}}/{{name}}"):
        if line.startswith(field):
            return int(line.split()[1])
pss = 0
for role, pid in [("server", "self")] + [("trace worker", p) for p in services.pool.worker_pids()]:
    pss += kib(pid, 'Pss:', 'smaps_rollup')
    print(f"  {{role}}: RSS {{kib(pid, 'VmRSS', 'status') / 1024:,.0f}} MiB, "
          f"PSS {{kib(pid, 'Pss:', 'smaps_rollup') / 1024:,.0f}} MiB (shared pages counted once across processes)")
files = sum(path.stat().st_size for path in Path({str(root)!r}).glob("*/model.safetensors"))
print(f"  all together: PSS {{pss / 1024:,.0f}} MiB for {{files / 1024 ** 2:,.0f}} MiB of weights files: "
      f"{{pss * 1024 / files:.2f}}x (the Python, torch and gradio the server loads included)")
services.close()
"""
    print(f"Server with {len(list(root.iterdir()))} Hub-size models loaded, one translation with each:", flush=True)
    subprocess.run([sys.executable, "-c", script], cwd=ROOT, check=True)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--work", type=Path, default=Path("/tmp/hub-benchmark"))
    p.add_argument("--family", choices=["marian", "t5", "nllb-600m"], default="marian",
                   help="opus-mt-en-de's config (marian), t5-small's (t5), or a Marian model of "
                        "NLLB-200-distilled-600M's size (nllb-600m)")
    args = p.parse_args(argv)
    torch.set_num_threads(2)
    print(f"{cpu_model()}; torch {torch.__version__}, {torch.get_num_threads()} threads")
    shutil.rmtree(args.work, ignore_errors=True)
    name = {"marian": "opus-mt-en-de", "t5": "t5-small", "nllb-600m": "nllb-600m-size"}[args.family]
    if args.family == "t5":
        folder = hub_models.t5(args.work / "hub", config=hub_models.T5_SMALL)
    else:
        sizes = hub_models.NLLB_600M if args.family == "nllb-600m" else hub_models.OPUS_MT_EN_DE
        folder = hub_models.marian(args.work / "hub", config=sizes)
    size = (folder / "model.safetensors").stat().st_size
    print(f"random {name}: {size / 1024 ** 2:,.0f} MiB of safetensors")
    seconds, peak = convert(folder, args.work / "checkpoints" / name)
    print(f"conversion (python -m model.hub.convert_hf): {seconds:.1f} s, peak memory {megabytes(peak)}")
    translator = load_checkpoint(args.work / "checkpoints" / name)
    model = translator.model
    tables = {model.src_embedding.tokens.weight.data_ptr(), model.tgt_embedding.tokens.weight.data_ptr(),
              model.generator.weight.data_ptr()}
    print(f"{translator.metrics['parameters']:,} parameters; token tables in memory: {len(tables)} "
          "(source, target and output share one)")
    trace_against_generate(folder, args.work / "checkpoints" / name, args.runs)
    del translator, model
    at_size(args.work / "checkpoints", name, max(3, args.runs // 3))
    shutil.copytree(args.work / "checkpoints" / name, args.work / "checkpoints" / f"{name}-copy")
    server_memory(args.work / "checkpoints")


if __name__ == "__main__":
    main()
