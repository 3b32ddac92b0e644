"""Traces as files, for analysis outside the app: what *Download trace* gives, what this command writes for many
sentences at once, and `load_trace`, which reads either format back.

    python -m model.serving.inspect --checkpoint checkpoints/en-de --input sentences.txt --out traces/
        [--format json|npz] [--measures] [--attributions integrated_gradients ...] [--units words]

One file per sentence (a line of the input), named by its line number: `00001.json` or `00001.npz`. Under
torchrun each process traces a block of the lines. A trace file
holds the schema version, the checkpoint's name and config, the source text and its tokens, the translation
and its tokens, each step's probability and top-k candidates, every attention map (encoder and decoder
self-attention, cross-attention: [layer][head][query][key]; None where the model has none) and, when computed,
the measures of model/explain/contributions.py (weight × value norm, rollout, ALTI+ maps) and the gradient
attributions of model/explain/attribution.py (per method, per step: to each source token and each earlier decoder
input). A trace the page exports after patching in its Counterfactual tab holds that patching too (`patching`:
the counterfactual source and its translation, the step, the token scored and its contrast, both runs' scores,
each head's effect [layer][head] per kind, null where a head was not patched, and the encoder stream's grid
[layer][position]). `words` records how the pieces make words (the index range of each source and target word)
and which units the view showed; the maps themselves are always the model's, in pieces (model/text/words.py
`merge` turns them into words).

JSON is one object, arrays as nested lists of float32 values written exactly. NPZ holds the same arrays as
arrays (`cross_attention`, `measures/rollout/cross`, ...) and everything else as a JSON string under `meta`.
`load_trace(path)` gives the same dict from either, its arrays as numpy float32 arrays.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import time
from pathlib import Path

import numpy as np
import orjson
import torch

from attention_inspector.model.explain.attribution import METHODS, Attributions
from attention_inspector.model.explain.patching import Patching
from attention_inspector.model.text.words import PIECES, UNITS, WHOLE, word_spans

SCHEMA_VERSION = 1
FORMATS = ("json", "npz")
ARRAYS = ("probabilities", "top_probabilities", "encoder_attention", "decoder_attention", "cross_attention")


def trace_record(checkpoint: str, config: dict, source: str, translation: str, *, source_tokens: list[str],
                 target_tokens: list[str], top_tokens: list[list[str]], probabilities: np.ndarray,
                 top_probabilities: np.ndarray, encoder_attention: np.ndarray | None,
                 decoder_attention: np.ndarray | None, cross_attention: np.ndarray, forced: int = 0,
                 force: list[str] = (), mask: list[str] = (),
                 measures: dict[str, dict[str, np.ndarray]] | None = None, scheme: str = WHOLE,
                 units: str = PIECES, attributions: dict[str, list[Attributions]] | None = None,
                 patching: dict | None = None) -> dict:
    """One decoding as the dict a trace file holds (arrays as float32 numpy arrays; `patching` as
    `patching_record` gives it)."""
    def array(values):
        return None if values is None else np.ascontiguousarray(values, dtype=np.float32)

    return {
        "schema_version": SCHEMA_VERSION, "checkpoint": checkpoint, "config": config,
        "source": source, "translation": translation, "source_tokens": list(source_tokens),
        "target_tokens": list(target_tokens), "decoder_input_tokens": ["<sos>"] + list(target_tokens[:-1]),
        "top_tokens": [list(row) for row in top_tokens], "forced": int(forced), "force": list(force),
        "mask": sorted(set(mask)), "probabilities": array(probabilities),
        "top_probabilities": array(top_probabilities), "encoder_attention": array(encoder_attention),
        "decoder_attention": array(decoder_attention), "cross_attention": array(cross_attention),
        "measures": None if measures is None else {measure: {kind: array(maps) for kind, maps in by_kind.items()}
                                                   for measure, by_kind in measures.items()},
        "words": {"units": units, "scheme": scheme,
                  **{side: [[span.start, span.stop] for span in word_spans(tokens, scheme)]
                     for side, tokens in (("source", source_tokens), ("target", target_tokens))}},
        "attributions": None if attributions is None else {
            method: [{"step": result.step + 1, "contrast": result.contrast, "source": result.source.tolist(),
                      "target": result.target.tolist(), "score": result.score, "baseline_score": result.baseline_score,
                      "completeness_error": result.delta} for result in results]
            for method, results in attributions.items()},
        "patching": patching,
    }


def patching_record(counterfactual: str, translation: str, patched: Patching, token: str, contrast: str | None
                    ) -> dict:
    """Patching per head (model/explain/patching.py) against the source `counterfactual`, whose own translation is
    `translation`, as a trace file holds it: plain numbers, null for a head not patched."""
    def listed(grid: np.ndarray) -> list[list[float | None]]:
        return [[None if np.isnan(value) else float(value) for value in row] for row in grid]
    return {"counterfactual": counterfactual, "counterfactual_translation": translation, "step": patched.step + 1,
            "token": token, "contrast": contrast, "original_score": patched.original,
            "counterfactual_score": patched.counterfactual,
            "effects": {kind: listed(grid) for kind, grid in patched.effects.items()}, "skipped": dict(patched.skipped),
            "stream": None if patched.stream is None else listed(patched.stream),
            # attribution patching's estimates (model/explain/estimates.py), exact for the heads `measured` marks
            "estimated": patched.estimated,
            "measured": None if patched.measured is None else {kind: grid.tolist()
                                                               for kind, grid in patched.measured.items()}}


def encode(record: dict, file_format: str) -> bytes:
    """A trace record as the bytes of a .json or .npz file."""
    if file_format == "json":
        return orjson.dumps(record, option=orjson.OPT_SERIALIZE_NUMPY)
    if file_format != "npz":
        raise ValueError(f"unknown format {file_format!r}; choose one of {', '.join(FORMATS)}")
    arrays = {name: record[name] for name in ARRAYS if record[name] is not None}
    for measure, by_kind in (record["measures"] or {}).items():
        arrays.update({f"measures/{measure}/{kind}": maps for kind, maps in by_kind.items() if maps is not None})
    meta = {key: value for key, value in record.items() if key not in ARRAYS and key != "measures"}
    meta["measures"] = None if record["measures"] is None else {
        measure: {kind: None for kind, maps in by_kind.items() if maps is None}
        for measure, by_kind in record["measures"].items()}  # where a kind has no map
    buffer = io.BytesIO()
    np.savez_compressed(buffer, meta=np.array(json.dumps(meta, ensure_ascii=False)), **arrays)
    return buffer.getvalue()


def load_trace(path: str | Path) -> dict:
    """A trace file (.json or .npz) as a dict: the keys `trace_record` writes, every array a float32 numpy array
    (None where the model has no such attention)."""
    path = Path(path)
    if path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as npz:
            record = json.loads(str(npz["meta"]))
            for name in ARRAYS:
                record[name] = npz[name] if name in npz.files else None
            for key in npz.files:
                if key.startswith("measures/"):
                    _, measure, kind = key.split("/")
                    record["measures"].setdefault(measure, {})[kind] = npz[key]
        return record
    record = orjson.loads(path.read_bytes())
    if record.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"{path}: schema version {record.get('schema_version')!r}, expected {SCHEMA_VERSION}")
    for name in ARRAYS:
        record[name] = None if record[name] is None else np.asarray(record[name], dtype=np.float32)
    for by_kind in (record["measures"] or {}).values():
        for kind, maps in by_kind.items():
            by_kind[kind] = None if maps is None else np.asarray(maps, dtype=np.float32)
    return record


def main(argv: list[str] | None = None) -> None:
    from tqdm import tqdm  # the command's progress bar: the app, which reads and writes trace files, needs none

    from attention_inspector.model.nets.devices import add_device_argument, chosen_device, refuse_missing_device
    from attention_inspector.model.serving.checkpoint import load_checkpoint
    from attention_inspector.model.serving.translator import InputError
    from attention_inspector.model.training import distributed

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, help="checkpoint folder")
    parser.add_argument("--input", required=True, help="a text file, one sentence a line")
    parser.add_argument("--out", required=True, help="folder for the trace files (made if missing)")
    parser.add_argument("--format", default="json", choices=FORMATS)
    parser.add_argument("--measures", action="store_true",
                        help="add the measures (value norms, rollout, ALTI+) to each trace (Transformers only)")
    parser.add_argument("--attributions", nargs="+", choices=METHODS, default=[],
                        help="add these gradient attributions of every step (integrated gradients: 32 points)")
    parser.add_argument("--units", choices=UNITS, default=PIECES,
                        help="the units recorded as the view's (the maps stay in pieces; `words` says how to merge)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    add_device_argument(parser)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    refuse_missing_device(args.device)
    began = time.perf_counter()
    ranks = distributed.start()  # under torchrun, each process traces a block of the lines
    translator = load_checkpoint(args.checkpoint, chosen_device(args.device, ranks))
    name = Path(args.checkpoint).resolve().name
    sentences = Path(args.input).read_text(encoding="utf-8").splitlines()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    written, skipped, size = 0, [], 0
    mine = [(number, sentences[number - 1]) for number in (i + 1 for i in ranks.block(len(sentences)))]
    for number, text in tqdm(mine, desc="tracing", unit="sentence", file=sys.stderr, disable=not ranks.main):
        try:
            traced = translator.trace(text)
        except InputError as error:  # an empty or overlong line: said at the end, the others still traced
            skipped.append(f"line {number}: {error}")
            continue
        trace = traced.trace
        measures = translator.measures(text, traced.target_tokens) if args.measures else None
        attributions = {method: translator.attributions(text, traced.target_tokens, method)
                        for method in args.attributions} or None
        record = trace_record(name, translator.model.config.to_dict(), text, traced.text,
                              source_tokens=traced.source_tokens, target_tokens=traced.target_tokens,
                              top_tokens=traced.top_tokens, probabilities=trace.probabilities,
                              top_probabilities=trace.top_probabilities, encoder_attention=trace.encoder_attention,
                              decoder_attention=trace.decoder_attention, cross_attention=trace.cross_attention,
                              measures=measures, scheme=traced.scheme, units=args.units, attributions=attributions)
        path = out / f"{number:05d}.{args.format}"
        path.write_bytes(encode(record, args.format))
        written, size = written + 1, size + path.stat().st_size
    written, size = (int(value) for value in ranks.sum([written, size]))
    skipped = ranks.gather(skipped)
    distributed.stop(ranks)
    if not ranks.main:
        return
    for line in skipped:
        print(f"skipped {line}", file=sys.stderr)
    print(f"{written} traces written to {out} ({args.format}, {size / 1e6:.1f} MB), {len(skipped)} lines skipped, "
          f"in {time.perf_counter() - began:.1f} s")


if __name__ == "__main__":
    main()
