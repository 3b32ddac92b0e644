"""Checkpoint folders: model.safetensors, config.json, vocab.json, metrics.json (and heads.json, written by
model/heads.py). Loading never unpickles."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from model.hub import HubTokenizer, Languages
from model.rnn import RNNConfig, RNNSeq2Seq
from model.seq2seq import Seq2Seq
from model.transformer import ModelConfig, Transformer
from model.translator import Translator
from model.vocab import BPE, Tokenizer, Truecaser, Vocab

WEIGHTS, CONFIG, VOCAB, METRICS, HEADS = \
    "model.safetensors", "config.json", "vocab.json", "metrics.json", "heads.json"
# config.json's "architecture" names the config class and the network it rebuilds.
ARCHITECTURES = {"transformer": (ModelConfig, Transformer), "rnn": (RNNConfig, RNNSeq2Seq)}


class CheckpointError(RuntimeError):
    """A checkpoint folder that cannot be loaded; the message names the file at fault."""


def unique_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The state dict with each tensor once: tied weights (embedding = output projection) under one name."""
    seen, out = set(), {}
    for name, tensor in model.state_dict().items():
        if tensor.data_ptr() not in seen:
            seen.add(tensor.data_ptr())
            out[name] = tensor
    return out


def save_weights(model: torch.nn.Module, path: Path, dtype: torch.dtype | None = None) -> None:
    """Write the model's weights as safetensors, optionally cast (float16 halves a shipped checkpoint)."""
    write_safetensors(unique_state_dict(model), Path(path), dtype)


SAFETENSORS_DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64",
                      torch.int64: "I64", torch.int32: "I32", torch.uint8: "U8", torch.bool: "BOOL"}


def write_safetensors(tensors: dict[str, torch.Tensor], path: Path, dtype: torch.dtype | None = None) -> None:
    """`tensors` (floating ones cast to `dtype`, if given) as a safetensors file, written one tensor at a time: the
    memory it takes is one tensor's, not the whole file's (as `safetensors.torch.save_file` takes)."""
    def cast(tensor: torch.Tensor) -> torch.Tensor:
        return tensor.to(dtype) if dtype is not None and tensor.is_floating_point() else tensor
    header, offset = {}, 0
    for name, tensor in tensors.items():
        kind = cast(tensor[(0,) * tensor.dim()] if tensor.numel() else tensor).dtype  # the stored dtype, cheaply
        size = tensor.numel() * torch.empty((), dtype=kind).element_size()
        header[name] = {"dtype": SAFETENSORS_DTYPES[kind], "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + size]}
        offset += size
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as file:
        file.write(len(encoded).to_bytes(8, "little"))
        file.write(encoded)
        for tensor in tensors.values():
            file.write(cast(tensor).contiguous().view(-1).view(torch.uint8).numpy().data)


def save_checkpoint(translator: Translator, folder: str | Path, dtype: torch.dtype = torch.float16) -> None:
    """Write `translator` as a self-describing checkpoint folder (weights stored as `dtype`, loaded as float32)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    save_weights(translator.model, folder / WEIGHTS, dtype)
    write_json(folder / CONFIG, translator.model.config.to_dict())
    write_json(folder / VOCAB, {
        "src": {**tokenizer_json(translator.src_tokenizer), "itos": translator.src_vocab.itos},
        "tgt": {**tokenizer_json(translator.tgt_tokenizer), "itos": translator.tgt_vocab.itos,
                "truecase": translator.truecaser.forms, "capitalize_first": translator.truecaser.capitalize_first},
    })
    write_json(folder / METRICS, translator.metrics)


def tokenizer_json(tokenizer: Tokenizer) -> dict:
    """How vocab.json describes a tokenizer: its language, lower-casing and byte-pair merges (if it has them)."""
    merges = {"bpe": [list(pair) for pair in tokenizer.bpe.merges]} if tokenizer.bpe is not None else {}
    return {"lang": tokenizer.lang, "lowercase": tokenizer.lowercase, **merges}


def tokenizer_from_json(side: dict, folder: Path) -> Tokenizer | HubTokenizer:
    """The inverse of `tokenizer_json`; a converted Hub model's tokenizer reads its files in `folder`."""
    if "sentencepiece" in side or "tokenizer" in side:
        return HubTokenizer(folder, side)
    return Tokenizer(side["lang"], side["lowercase"], BPE(side["bpe"]) if "bpe" in side else None)


def write_json(path: Path, data) -> None:
    """Pretty, UTF-8 JSON (vocabularies stay readable)."""
    path.write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


def read_json(path: Path) -> dict:
    """A JSON object from `path`, or a CheckpointError naming the file."""
    if not path.is_file():
        raise CheckpointError(f"missing file {path}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{path} is not valid JSON: {error}") from error
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} must hold a JSON object")
    return data


def load_weights(model: torch.nn.Module, path: Path) -> None:
    """Fill `model` from a safetensors file, or raise a CheckpointError naming the file and the mismatch."""
    if not path.is_file():
        raise CheckpointError(f"missing file {path}")
    try:
        state = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as error:
        raise CheckpointError(f"{path} is not a readable safetensors file: {error}") from error
    expected = model.state_dict()
    # Tied weights are stored once by safetensors; fill every alias of a stored tensor.
    stored_pointers = {expected[name].data_ptr() for name in state if name in expected}
    missing = [name for name in expected if name not in state and expected[name].data_ptr() not in stored_pointers]
    unexpected = [name for name in state if name not in expected]
    wrong_shape = [f"{name} {tuple(state[name].shape)} vs {tuple(expected[name].shape)}"
                   for name in state if name in expected and state[name].shape != expected[name].shape]
    if missing or unexpected or wrong_shape:
        problems = "; ".join(part for part in (
            missing and f"missing {missing[:3]}", unexpected and f"unexpected {unexpected[:3]}",
            wrong_shape and f"shape mismatch {wrong_shape[:3]}") if part)
        raise CheckpointError(f"{path} does not match config.json: {problems}")
    model.load_state_dict({name: t.to(expected[name].dtype) for name, t in state.items()}, strict=False)


def build_model(config: ModelConfig | RNNConfig) -> Seq2Seq:
    """The untrained network that `config` describes."""
    return ARCHITECTURES[config.architecture][1](config)


def load_config(folder: Path) -> ModelConfig | RNNConfig:
    """The config saved in `folder`/config.json, of the class its "architecture" names."""
    data = read_json(folder / CONFIG)
    architecture = data.get("architecture", "transformer")
    if architecture not in ARCHITECTURES:
        raise CheckpointError(f"{folder / CONFIG}: unknown architecture {architecture!r} "
                              f"(known: {', '.join(ARCHITECTURES)})")
    try:
        return ARCHITECTURES[architecture][0](**data)
    except (TypeError, ValueError) as error:
        raise CheckpointError(f"{folder / CONFIG} is not a valid model config: {error}") from error


def load_checkpoint(folder: str | Path) -> Translator:
    """Load a checkpoint folder into a Translator in eval mode."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"checkpoint folder {folder} does not exist")
    config = load_config(folder)
    vocab_data = read_json(folder / VOCAB)
    try:
        src, tgt = vocab_data["src"], vocab_data["tgt"]
        src_vocab, tgt_vocab = Vocab(src["itos"]), Vocab(tgt["itos"])
        src_tokenizer, tgt_tokenizer = tokenizer_from_json(src, folder), tokenizer_from_json(tgt, folder)
        truecaser = Truecaser(tgt.get("truecase", {}), tgt.get("capitalize_first", True))
        languages = Languages.from_json(vocab_data["languages"]) if "languages" in vocab_data else None
    except (KeyError, TypeError, ValueError, ImportError, OSError, RuntimeError) as error:
        raise CheckpointError(f"{folder / VOCAB} is not a valid vocabulary file: {error!r}") from error
    for side, vocab, size in (("source", src_vocab, config.src_vocab_size),
                              ("target", tgt_vocab, config.tgt_vocab_size)):
        if len(vocab) != size:
            raise CheckpointError(f"{folder / VOCAB}: the {side} vocabulary has {len(vocab)} tokens "
                                  f"but {folder / CONFIG} says {size}")
    model = build_model(config)
    load_weights(model, folder / WEIGHTS)
    model.eval()
    metrics, heads = (read_json(folder / name) if (folder / name).is_file() else {} for name in (METRICS, HEADS))
    return Translator(model, src_tokenizer, tgt_tokenizer, src_vocab, tgt_vocab, truecaser, metrics, heads,
                      languages)


def load_all(root: str | Path) -> tuple[dict[str, Translator], dict[str, str]]:
    """Load every checkpoint folder under `root` (any folder with a config.json).

    Returns the loaded translators by folder name and, for each folder that failed, its error message,
    so one broken checkpoint never stops the others from being served.
    """
    loaded, failed = {}, {}
    root = Path(root)
    for folder in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
        if not (folder / CONFIG).exists() and not (folder / WEIGHTS).exists():
            continue
        try:
            loaded[folder.name] = load_checkpoint(folder)
        except CheckpointError as error:
            failed[folder.name] = str(error)
    return loaded, failed
