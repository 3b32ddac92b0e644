"""Checkpoint folders: model.safetensors, config.json, vocab.json, metrics.json (and heads.json, written by
model/analysis/heads.py). Loading never unpickles."""

from __future__ import annotations

import ctypes.util
import json
import os
from pathlib import Path
from typing import NamedTuple

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

import attention_inspector
from attention_inspector.model.nets.rnn import RNNConfig, RNNSeq2Seq
from attention_inspector.model.nets.seq2seq import Seq2Seq
from attention_inspector.model.nets.transformer import ModelConfig, Transformer
from attention_inspector.model.serving.translator import Translator
from attention_inspector.model.text.hub_tokenizer import HubTokenizer, Languages
from attention_inspector.model.text.vocab import BPE, Tokenizer, Truecaser, Vocab

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
STORED_AS = {stored: dtype for dtype, stored in SAFETENSORS_DTYPES.items()}  # a header's dtype -> torch's


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
    written = path.with_name(f".{path.name}.writing")  # a loaded model maps its file: never rewrite it in place
    try:
        with open(written, "wb") as file:
            file.write(len(encoded).to_bytes(8, "little"))
            file.write(encoded)
            for tensor in tensors.values():
                file.write(cast(tensor).contiguous().view(-1).view(torch.uint8).numpy().data)
        written.replace(path)
    except BaseException:
        written.unlink(missing_ok=True)
        raise


def safetensors_header(path: Path) -> dict:
    """Each tensor's dtype, shape and data offsets in a safetensors file, read from its header alone."""
    with open(path, "rb") as file:
        return _header(file, path)[1]


def _header(file, path: Path) -> tuple[int, dict]:
    """Where a safetensors file's data starts, and its header: each tensor's dtype, shape and data offsets."""
    length = int.from_bytes(file.read(8), "little")
    if not 0 < length <= 100 * 1024 ** 2:
        raise ValueError(f"{path} starts with a header of {length} bytes")
    header = json.loads(file.read(length))
    header.pop("__metadata__", None)
    return 8 + length, header


def _read_into(file, tensor: torch.Tensor, at: int, what: str) -> torch.Tensor:
    """`tensor` filled with the bytes of `file` from `at` on (a ValueError where the file ends first)."""
    buffer = memoryview(tensor.view(-1).view(torch.uint8).numpy())
    file.seek(at)
    if file.readinto(buffer) != len(buffer):
        raise ValueError(f"the file ends inside {what}")
    return tensor


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a safetensors file, each read into memory of its own: a model loaded this way holds its
    weights once (a memory map would stay counted beside the copies that the step decoder's fused layout makes), and
    pages that trace workers, forked after, share. A ValueError (or KeyError, for an unknown dtype) for a malformed
    file."""
    with open(path, "rb") as file:
        start, header = _header(file, path)
        tensors = {}
        for name, entry in header.items():
            tensor = torch.empty(entry["shape"], dtype=STORED_AS[entry["dtype"]])
            begin, end = entry["data_offsets"]
            if tensor.numel() * tensor.element_size() != end - begin:
                raise ValueError(f"{name}: {end - begin} bytes for a {entry['dtype']} tensor of {entry['shape']}")
            tensors[name] = _read_into(file, tensor, start + begin, name)
    return tensors


def read_rows(path: Path, name: str, rows: list[int]) -> torch.Tensor:
    """Rows `rows` of the tensor `name` in a safetensors file, in that order, read from the file into a tensor of
    their own, consecutive rows at one read: through a memory map, the pages of every row read would stay counted
    against the process beside the copy. A ValueError for a name or row the file has not."""
    with open(path, "rb") as file:
        start, header = _header(file, path)
        if name not in header:
            raise ValueError(f"{path} has no tensor {name}")
        shape = header[name]["shape"]
        if rows and not 0 <= min(rows) <= max(rows) < shape[0]:
            raise ValueError(f"{name} has {shape[0]} rows; asked for row {max(rows)}")
        out = torch.empty([len(rows), *shape[1:]], dtype=STORED_AS[header[name]["dtype"]])
        row_bytes = out[0].numel() * out.element_size() if rows else 0
        start += header[name]["data_offsets"][0]
        first = 0
        while first < len(rows):
            last = first + 1
            while last < len(rows) and rows[last] == rows[last - 1] + 1:
                last += 1
            _read_into(file, out[first:last], start + rows[first] * row_bytes, name)
            first = last
    return out


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


def read_weights(path: Path, mapped: bool = False) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file, each in memory of its own (`read_safetensors`), or `mapped` from the file
    (pages read only as they are used: a conversion that reads a part), or a CheckpointError naming the file."""
    if not path.is_file():
        raise CheckpointError(f"missing file {path}")
    try:
        return load_file(str(path)) if mapped else read_safetensors(path)
    except (SafetensorError, OSError, ValueError, KeyError, TypeError) as error:
        raise CheckpointError(f"{path} is not a readable safetensors file: {error!r}") from error


def check_weights(model: torch.nn.Module, state: dict[str, torch.Tensor], source: str | Path) -> None:
    """A CheckpointError naming what `state` lacks, has too many of, or holds in another shape than `model`'s
    parameters and buffers; a tied weight (one tensor under several names) is stored under any one of them."""
    expected = model.state_dict(keep_vars=True)
    stored = {id(expected[name]) for name in state if name in expected}
    missing = [name for name in expected if name not in state and id(expected[name]) not in stored]
    unexpected = [name for name in state if name not in expected]
    wrong_shape = [f"{name} {tuple(state[name].shape)} vs {tuple(expected[name].shape)}"
                   for name in state if name in expected and state[name].shape != expected[name].shape]
    if missing or unexpected or wrong_shape:
        problems = "; ".join(part for part in (
            missing and f"missing {missing[:3]}", unexpected and f"unexpected {unexpected[:3]}",
            wrong_shape and f"shape mismatch {wrong_shape[:3]}") if part)
        raise CheckpointError(f"{source} does not match config.json: {problems}")


def load_weights(model: torch.nn.Module, path: Path) -> None:
    """Copy a safetensors file's tensors into a built `model`, or raise a CheckpointError naming the file and the
    mismatch."""
    state = read_weights(path)
    check_weights(model, state, path)
    expected = model.state_dict()
    model.load_state_dict({name: t.to(expected[name].dtype) for name, t in state.items()}, strict=False)


def assembled(config: ModelConfig | RNNConfig, state: dict[str, torch.Tensor], source: str | Path = "the weights",
              zero_biases: bool = False) -> Seq2Seq:
    """The network `config` describes whose parameters are the tensors of `state` themselves (cast to the
    parameter's dtype where stored in another): built without memory of its own (on the meta device, no random
    initialisation), so a loaded model costs its weights once, not twice. Tied weights, stored once, are tied again;
    with `zero_biases`, zeros stand for the biases `state` lacks (T5's maps have none). A CheckpointError names what
    does not fit."""
    with torch.device("meta"):
        model = build_model(config)
    expected = model.state_dict(keep_vars=True)
    if zero_biases:
        state |= {name: torch.zeros(tensor.shape) for name, tensor in expected.items()
                  if name.endswith(".bias") and name not in state}
    check_weights(model, state, source)
    aliases: dict[int, list[str]] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        aliases.setdefault(id(parameter), []).append(name)
    model.load_state_dict({name: t.to(expected[name].dtype) for name, t in state.items()}, strict=False, assign=True)
    for names in aliases.values():
        kept = model.get_parameter(next(name for name in names if name in state))
        for name in names:
            owner, _, attribute = name.rpartition(".")
            setattr(model.get_submodule(owner), attribute, kept)
    return model.eval()


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


def load_checkpoint(folder: str | Path, device: torch.device | str | None = None) -> Translator:
    """Load a checkpoint folder into a Translator in eval mode, its model on `device` (None: the CPU; moved there
    before the step decoder lays its weights out, so they are laid out once, on that device)."""
    parts = checkpoint_parts(folder)
    if device is not None:
        parts = parts._replace(model=parts.model.to(device))
    translator = Translator(*parts)
    release_freed_memory()  # the step decoder's layout replaced tensors that the allocator would keep
    return translator


def release_freed_memory() -> None:
    """Hand the memory that freed tensors leave inside the C allocator's heap back to the system (glibc's
    malloc_trim; nothing elsewhere). Loading a 2.3 GB model otherwise keeps ~0.5 GB of freed pages."""
    library = ctypes.util.find_library("c")
    trim = getattr(ctypes.CDLL(library), "malloc_trim", None) if library else None
    if trim is not None:
        trim(0)


class CheckpointParts(NamedTuple):
    """What a Translator is made of (its arguments, in order), read from a checkpoint folder."""

    model: Seq2Seq  # in eval mode
    src_tokenizer: Tokenizer | HubTokenizer
    tgt_tokenizer: Tokenizer | HubTokenizer
    src_vocab: Vocab
    tgt_vocab: Vocab
    truecaser: Truecaser
    metrics: dict
    heads: dict  # heads.json (model/analysis/heads.py), {} where none is written yet
    languages: Languages | None


def named_checkpoints() -> Path | None:
    """The folder whose checkpoints a name finds: CHECKPOINTS=DIR, else the shipped ones."""
    return Path(os.environ["CHECKPOINTS"]) if os.environ.get("CHECKPOINTS") else attention_inspector.checkpoints()


def checkpoint_folder(name_or_folder: str | Path) -> Path:
    """A checkpoint folder as given where it is one, else one by name ("en-de") in `named_checkpoints()`; as given
    where neither is a folder."""
    folder, named = Path(name_or_folder), named_checkpoints()
    if not folder.is_dir() and len(folder.parts) == 1 and named is not None and (named / folder).is_dir():
        return named / folder
    return folder


def found_by_name(name_or_folder: str | Path) -> bool:
    """Whether `checkpoint_folder` found it by name ("en-de") among `named_checkpoints()`: a shipped checkpoint, or one
    of CHECKPOINTS=DIR, which the studies read and never change."""
    return checkpoint_folder(name_or_folder) != Path(name_or_folder)


def own_folder(name_or_folder: str | Path, flag: str) -> Path:
    """The checkpoint folder `flag` records into, refused (CheckpointError, before any work) for a checkpoint found
    by name: the studies never change a shipped checkpoint."""
    if found_by_name(name_or_folder):
        raise CheckpointError(f"{flag} records into the checkpoint's own files, and {name_or_folder!r} is found by "
                              f"name in {named_checkpoints()}, which the studies never change: give the folder of "
                              "a copy of it instead")
    return Path(name_or_folder)


def checkpoint_parts(folder: str | Path) -> CheckpointParts:
    """A checkpoint folder, or a checkpoint by name (`checkpoint_folder`), read, every file checked (a
    CheckpointError names the one at fault)."""
    given, folder = folder, checkpoint_folder(folder)
    if not folder.is_dir():
        raise CheckpointError(f"No checkpoint {str(given)!r}: the folder {folder} does not exist; give a checkpoint "
                              f"folder, or the name of one in {named_checkpoints() or 'CHECKPOINTS=DIR'}")
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
    model = assembled(config, read_weights(folder / WEIGHTS), folder / WEIGHTS)
    metrics, heads = (read_json(folder / name) if (folder / name).is_file() else {} for name in (METRICS, HEADS))
    return CheckpointParts(model, src_tokenizer, tgt_tokenizer, src_vocab, tgt_vocab, truecaser, metrics, heads,
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


def judge_names(translator) -> list[str]:
    """The names of the checkpoints that may judge a translator's translations (model/explain/verdict.py), first
    found first: the one its metrics.json names under "verdict" (a converted Marian's `--reverse`), then one named
    for the other direction ("de-en" for "en-de")."""
    named = translator.metrics.get("verdict", {}).get("evaluator")
    return [*([named] if named else []), f"{translator.tgt_tokenizer.lang}-{translator.src_tokenizer.lang}"]


def judge_folder(folder: Path, translator) -> Path | None:
    """The checkpoint beside `folder` that judges its translator's translations (`judge_names`); None where there is
    none."""
    return next((folder.parent / name for name in judge_names(translator)
                 if name != folder.name and (folder.parent / name / CONFIG).is_file()), None)
