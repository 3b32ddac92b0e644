"""Convert a Hugging Face translation model into this project's Transformer, so that every view, measure and
intervention works on it.

    python -m model.hub.convert_hf Helsinki-NLP/opus-mt-en-de --out checkpoints/opus-mt-en-de \
        --reverse opus-mt-de-en
    python -m model.hub.convert_hf ./nllb-folder --out checkpoints/nllb --src-lang eng_Latn --tgt-lang deu_Latn

SOURCE is a Hub id (downloaded where the Hub can be reached) or a folder as `save_pretrained` writes it. The
converter reads `config.json` and the weights directly (`model.safetensors`, or `pytorch_model.bin` through
torch's restricted unpickler only), never runs code from the repository, and needs no transformers.

Families (../shared/HF-NOTES.md has each one's recipe):
- Marian (Helsinki-NLP opus-mt-*): post-LN, SiLU, sinusoids laid out as all sines then all cosines;
- M2M100 and NLLB-200 (model_type m2m_100): pre-LN, fairseq's sinusoid, language codes;
- mBART-50 (model_type mbart): pre-LN, learned positions, a LayerNorm after the embeddings, language codes;
- T5 (t5-small/base/large, flan-t5; model_type t5): pre-norm RMSNorm, a relative position bias learned in the first
  layer of each stack and shared by its layers, no biases, no attention scale (√d_head folded into W_Q here, so the
  scores are T5's), tied output scaled by d_model^-0.5 (folded into the decoder's final norm), a task prompt
  ("translate English to German: ") in the source. v1.1/flan-t5: gated GELU and a separate output matrix.

Ids are renumbered so that <pad> <unk> <sos> <eos> are 0-3 as in every checkpoint here: the Hub model's decoder
start token (its <pad> for Marian, its </s> for the others) gets a row of its own as <sos>, so the vocabulary has
one token more than the Hub model's, and every other token keeps its order after those four.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch

from attention_inspector.model.hub.hub_checks import (DEFAULT_MAX_BYTES, ConversionError, check_room, checked_hub_id,
                                                      hub_id, is_folder, shown_id, too_large)
from attention_inspector.model.hub.vocabulary import (HubTokens, hub_tokens, json_of, renumbering, side_languages,
                                                      split_at_whitespace)
from attention_inspector.model.hub.weights import hub_weights, model_config, state_dict, t5_state_dict
from attention_inspector.model.nets.transformer import ModelConfig, Transformer
from attention_inspector.model.serving.checkpoint import (METRICS, WEIGHTS, CheckpointError, assembled,
                                                          checkpoint_parts, read_json, save_weights, unique_state_dict,
                                                          write_json)

HUB_FILES = ["config.json", "generation_config.json", "model.safetensors", "pytorch_model.bin", "README.md",
             "tokenizer.json", "tokenizer_config.json", "source.spm", "target.spm", "vocab.json",
             "sentencepiece.bpe.model", "special_tokens_map.json"]
FAMILIES = ("marian", "m2m_100", "mbart", "t5")
STORED_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def fetch(source: str, max_bytes: int = DEFAULT_MAX_BYTES, progress: Callable[[str], None] = lambda _: None,
          hub_only: bool = False) -> tuple[Path, dict]:
    """A local folder holding the model `source` names (a folder, or a Hub id to download), and where it came from.

    A Hub id is checked before its weights are downloaded: it exists, can be read, its weights fit `max_bytes`,
    and its config.json names a family converted here. `progress` is told each stage. `hub_only`: never a local
    folder (what a web page asks for).
    """
    if hub_only:
        checked_hub_id(source)
    folder = Path(source)
    if not hub_only and is_folder(folder):
        for weights in (folder / "model.safetensors", folder / "pytorch_model.bin"):
            if weights.is_file() and weights.stat().st_size > max_bytes:
                raise ConversionError(too_large(str(weights), weights.stat().st_size, max_bytes))
        return folder, {"folder": str(folder.resolve())}
    if not hub_id(source):
        raise ConversionError(f"{shown_id(source)} is neither a folder nor a Hub model id (like "
                              "Helsinki-NLP/opus-mt-en-de).")
    try:
        from huggingface_hub import HfApi, snapshot_download
        from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError
    except ImportError as error:  # huggingface_hub comes with gradio
        raise ConversionError(f"Downloading from the Hub needs huggingface_hub: {error}") from None
    progress(f"Asking the Hub about {source}")
    try:
        info = HfApi().model_info(source, files_metadata=True, timeout=20)
    except GatedRepoError:
        raise ConversionError(f"{source} is a gated repository: accept its terms on huggingface.co and log in "
                              "(huggingface-cli login), then try again.") from None
    except RepositoryNotFoundError:
        raise ConversionError(f"There is no model {source} on the Hub (or it is private).") from None
    except Exception as error:  # no network, offline mode, a proxy refusing: all mean the Hub cannot be reached
        raise ConversionError(f"The Hugging Face Hub cannot be reached from here ({type(error).__name__}), so "
                              f"{source} cannot be downloaded.") from None
    sizes = {sibling.rfilename: sibling.size or 0 for sibling in info.siblings or []}
    weights = "model.safetensors" if "model.safetensors" in sizes else "pytorch_model.bin"
    if sizes.get(weights, 0) > max_bytes:
        raise ConversionError(too_large(f"{source}'s {weights}", sizes[weights], max_bytes))
    wanted = [name for name in HUB_FILES if name in sizes and not (name == "pytorch_model.bin"
                                                                     and weights == "model.safetensors")]
    from huggingface_hub.constants import HF_HUB_CACHE
    check_room(sum(sizes.get(name, 0) for name in wanted), Path(HF_HUB_CACHE), f"to download {source}")
    try:
        path = Path(snapshot_download(source, allow_patterns=["config.json"], revision=info.sha))
        read_config(path)  # the family, before the weights are fetched
        progress(f"Downloading {source} ({sum(sizes.get(name, 0) for name in wanted) / 1024 ** 2:,.0f} MiB)")
        path = Path(snapshot_download(source, allow_patterns=wanted, revision=info.sha))
    except (OSError, ValueError) as error:  # the network or the disk failing mid-way (huggingface_hub's are OSErrors)
        raise ConversionError(f"Downloading {source} failed ({type(error).__name__}: {error}).") from None
    card = info.card_data.to_dict() if getattr(info, "card_data", None) else {}
    return path, {"hub_id": source, "revision": info.sha, "license": card.get("license")}


def read_config(folder: Path) -> dict:
    """config.json, checked: a family converted here, and nothing that needs code from the repository."""
    path = folder / "config.json"
    if not path.is_file():
        raise ConversionError(f"{folder} has no config.json: it is not a model folder as save_pretrained writes it.")
    config = json_of(path)
    if config.get("auto_map") or config.get("trust_remote_code"):
        raise ConversionError("This model needs code from its repository (trust_remote_code), which is never run "
                              "here.")
    model_type = config.get("model_type")
    if model_type not in FAMILIES:
        raise ConversionError(f"model_type {model_type!r} is not a translation family converted here; supported: "
                              "marian (opus-mt), m2m_100 (M2M100, NLLB-200), mbart (mBART-50), t5 (T5, flan-t5).")
    return config


def convert(source: str, out: str | Path, src_lang: str | None = None, tgt_lang: str | None = None,
            max_bytes: int = DEFAULT_MAX_BYTES, progress: Callable[[str], None] = lambda _: None,
            hub_only: bool = False, dtype: torch.dtype | None = None) -> Path:
    """Convert `source` (a folder or a Hub id; only a Hub id with `hub_only`) into a checkpoint folder `out`, which
    `load_checkpoint` loads; `progress` is told each stage. `dtype`: store the weights so (float16 or bfloat16 halve
    the file; the model still computes in float32), rather than as the Hub stores them."""
    folder, origin = fetch(source, max_bytes, progress, hub_only)
    progress("Converting")
    config = read_config(folder)
    try:
        hub = hub_tokens(folder, config, src_lang, tgt_lang)
    except KeyError as error:
        raise ConversionError(f"config.json or the tokenizer's files lack {error}.") from None
    for language, side in ((src_lang, "source"), (tgt_lang, "target")):
        if language is not None and (hub.languages is None or language not in hub.languages.codes):
            known = ", ".join(sorted(hub.languages.codes)) if hub.languages else "none: it translates one way"
            raise ConversionError(f"This model has no {side} language {language!r}; it has {known}.")
    order, itos, renamed = renumbering(hub)
    try:
        ours = model_config(config, len(itos))
    except (KeyError, ValueError) as error:
        raise ConversionError(f"config.json does not describe a model converted here: {error}") from None
    hub_state = hub_weights(folder)
    stored = hub_state.path or folder / "pytorch_model.bin"
    try:
        if config["model_type"] == "t5":
            weights = t5_state_dict(hub_state, ours, config, order)
            if "generator.weight" in weights:  # v1.1 and flan-t5: an output matrix of its own
                ours = replace(ours, tie_embeddings=False)
        else:
            weights = state_dict(hub_state, ours, config["model_type"], order)
        del hub_state  # the tensors kept are in `weights`
        model = assembled(ours, weights, stored, zero_biases=config["model_type"] == "t5")  # T5's maps: no biases
    except KeyError as error:
        raise ConversionError(f"The weights lack {error} for a {config['model_type']} model of this config.") from None
    except (CheckpointError, ValueError) as error:  # what the weights lack or hold in another shape
        raise ConversionError(str(error)) from None
    except RuntimeError as error:  # a tensor of the wrong shape
        raise ConversionError(f"The weights do not fit config.json: {str(error).splitlines()[-1].strip()}") from None
    out = Path(out)
    stored = torch.empty((), dtype=dtype).element_size() if dtype else None
    check_room(sum(t.numel() * (stored or t.element_size()) for t in unique_state_dict(model).values()), out.parent,
               f"to write {out.name}")  # what save_weights writes
    staging = out.parent / f".{out.name}.converting"  # moved into place only once whole (the catalog skips it)
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        write_checkpoint(staging, model, ours, config, folder, hub, origin, itos, renamed, dtype)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)
    return out


def write_checkpoint(out: Path, model: Transformer, ours: ModelConfig, config: dict, folder: Path, hub: HubTokens,
                     origin: dict, itos: list[str], renamed: dict, dtype: torch.dtype | None = None) -> None:
    """The converted checkpoint's files, written into the folder `out` (`itos`, `renamed`: its one vocabulary;
    `dtype`: the weights' stored type, None for the Hub's own)."""
    save_weights(model, out / WEIGHTS, dtype)
    write_json(out / "config.json", ours.to_dict())
    for name in hub.files:
        shutil.copyfile(folder / name, out / name)
    if config["model_type"] == "t5":
        split_at_whitespace(out / "tokenizer.json")
    languages = {"languages": hub.languages.to_json()} if hub.languages else {}
    source_language, target_language = side_languages(folder, hub)
    write_json(out / "vocab.json", {
        "src": {**hub.spec["src"], "lang": source_language, "renamed": renamed, "itos": itos},
        "tgt": {**hub.spec["tgt"], "lang": target_language, "renamed": renamed, "itos": itos,
                "capitalize_first": False},  # the Hub tokenizer's text is cased already
    } | languages)
    generation = json_of(folder / "generation_config.json", optional=True)
    write_json(out / METRICS, {
        "source": {**origin, "model_type": config["model_type"], "converted_with": "python -m model.hub.convert_hf",
                   **({"stored_as": str(dtype).removeprefix("torch.")} if dtype else {})},
        "parameters": sum(p.numel() for p in {p.data_ptr(): p for p in model.parameters()}.values()),
        "decoding": {"beam_size": generation.get("num_beams", config.get("num_beams", 5)) or 5,
                     "length_penalty": generation.get("length_penalty", 1.0)},
    })


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="\n\n".join(__doc__.split("\n\n")[:2]),  # what it does, and examples
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("source", help="a Hub model id (e.g. Helsinki-NLP/opus-mt-en-de) or a save_pretrained folder")
    p.add_argument("--out", required=True, help="the checkpoint folder to write (e.g. checkpoints/opus-mt-en-de)")
    p.add_argument("--src-lang", help="default source language of a multilingual model (e.g. eng_Latn)")
    p.add_argument("--tgt-lang", help="default target language of a multilingual model (e.g. deu_Latn)")
    p.add_argument("--max-gb", type=float, default=DEFAULT_MAX_BYTES / 1024 ** 3,
                   help="refuse a Hub model whose weights are larger (default %(default).0f)")
    p.add_argument("--dtype", choices=sorted(STORED_DTYPES),
                   help="store the weights as this type (float16 or bfloat16 halve the file; the model computes in "
                        "float32 either way); default: as the Hub model stores them")
    p.add_argument("--reverse", help="the checkpoint (its folder's name, beside --out) of the reverse direction, which "
                                      "judges this model's translations (model/explain/verdict.py): a Marian pair's "
                                      "other model, converted the same way")
    args = p.parse_args(argv)
    started = time.perf_counter()
    try:
        out = convert(args.source, args.out, args.src_lang, args.tgt_lang, int(args.max_gb * 1024 ** 3),
                      dtype=STORED_DTYPES.get(args.dtype))
        if args.reverse:  # named in metrics.json, where the verdict looks for its judge
            write_json(out / METRICS, read_json(out / METRICS) | {"verdict": {"evaluator": Path(args.reverse).name}})
        metrics = checkpoint_parts(out).metrics  # it loads (the step decoder's layout is the app's to make)
    except (ConversionError, CheckpointError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"wrote {out} ({metrics['parameters']:,} parameters) in {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
