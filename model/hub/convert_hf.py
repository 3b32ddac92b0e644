"""Convert a Hugging Face translation model into this project's Transformer, so that every view, measure and
intervention works on it.

    python -m model.hub.convert_hf Helsinki-NLP/opus-mt-en-de --out checkpoints/opus-mt-en-de
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
import math
import re
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from model.hub.hub_checks import (DEFAULT_MAX_BYTES, ConversionError, check_room, checked_hub_id, hub_id, is_folder,
                                  shown_id, too_large)
from model.nets.transformer import ModelConfig, Transformer
from model.serving.checkpoint import (METRICS, WEIGHTS, CheckpointError, assembled, checkpoint_parts, read_json,
                                      read_rows, read_weights, save_weights, unique_state_dict, write_json)
from model.text.hub_tokenizer import M2M100_LANGUAGES, T5_LANGUAGES, Languages
from model.text.vocab import SPECIALS

HUB_FILES = ["config.json", "generation_config.json", "model.safetensors", "pytorch_model.bin", "README.md",
             "tokenizer.json", "tokenizer_config.json", "source.spm", "target.spm", "vocab.json",
             "sentencepiece.bpe.model", "special_tokens_map.json"]
ACTIVATIONS = {"swish": "silu", "silu": "silu", "gelu": "gelu", "relu": "relu"}
FAMILIES = ("marian", "m2m_100", "mbart", "t5")
STORED_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class HubTokens:
    """The Hub model's tokens by Hub id, which of them are special, and how its text is split."""

    tokens: list[str]  # Hub id -> token
    pad: int
    unk: int
    eos: int
    decoder_start: int
    spec: dict  # vocab.json's description of the tokenizer (model/text/hub_tokenizer.py HubTokenizer)
    files: list[str]  # tokenizer files to copy beside the weights
    languages: Languages | None


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
    config = _json(path)
    if config.get("auto_map") or config.get("trust_remote_code"):
        raise ConversionError("This model needs code from its repository (trust_remote_code), which is never run "
                              "here.")
    model_type = config.get("model_type")
    if model_type not in FAMILIES:
        raise ConversionError(f"model_type {model_type!r} is not a translation family converted here; supported: "
                              "marian (opus-mt), m2m_100 (M2M100, NLLB-200), mbart (mBART-50), t5 (T5, flan-t5).")
    return config


class HubWeights(dict):
    """A Hub model's tensors by name (mapped from model.safetensors, or unpickled from pytorch_model.bin), which
    reads a token table's rows in our order straight from the file: through the map, the table's pages would stay
    counted against the process beside the renumbered copy (NLLB's table is 1 GB)."""

    def __init__(self, tensors: dict[str, torch.Tensor], path: Path | None = None):
        super().__init__(tensors)
        self.path = path

    def rows(self, name: str, order: list[int]) -> torch.Tensor:
        """The rows `order` of the table `name` (a KeyError where the weights lack it)."""
        if name not in self:
            raise KeyError(name)
        if self.path is None:
            return self[name][torch.tensor(order)]
        return read_rows(self.path, name, order)


def hub_weights(folder: Path) -> HubWeights:
    """The weights of `folder`: model.safetensors, or pytorch_model.bin through the restricted unpickler only."""
    safetensors, pickled = folder / "model.safetensors", folder / "pytorch_model.bin"
    if safetensors.is_file():
        try:
            return HubWeights(read_weights(safetensors, mapped=True), safetensors)
        except CheckpointError as error:
            raise ConversionError(str(error)) from None
    if pickled.is_file():
        try:
            state = torch.load(pickled, map_location="cpu", weights_only=True)
        except Exception as error:  # the restricted unpickler's refusals come as several exception types
            raise ConversionError(f"{pickled} was refused by the restricted unpickler (weights_only=True), which "
                                  f"admits only tensors and plain containers: {str(error).splitlines()[0]}") from None
        if not isinstance(state, dict) or not all(isinstance(t, torch.Tensor) for t in state.values()):
            raise ConversionError(f"{pickled} does not hold a state dict of tensors.")
        return HubWeights(state)
    raise ConversionError(f"{folder} has neither model.safetensors nor pytorch_model.bin.")


def hub_tokens(folder: Path, config: dict, src_lang: str | None, tgt_lang: str | None) -> HubTokens:
    """The Hub model's vocabulary and tokenizer, from Marian's source.spm/target.spm/vocab.json, a tokenizer.json
    (NLLB, mBART-50) or M2M100's sentencepiece.bpe.model/vocab.json."""
    if (folder / "source.spm").is_file():  # Marian
        vocab = _json(folder / "vocab.json")
        if (folder / "target_vocab.json").is_file() or config.get("separate_vocabs"):
            raise ConversionError("This opus-mt model has separate source and target vocabularies, which the converter "
                                  "does not handle yet.")
        codes = {token[2:-2]: token for token in vocab if token.startswith(">>") and token.endswith("<<")}
        languages = None
        if codes:
            target = tgt_lang or sorted(codes)[0]
            languages = Languages(codes, None, target, target_first=False)
        side = {"specials": ["</s>", "<unk>", "<pad>"]}
        spec = {"src": {**side, "sentencepiece": "source.spm"}, "tgt": {**side, "sentencepiece": "target.spm"}}
        return _hub_tokens(vocab, config, "<pad>", spec, ["source.spm", "target.spm"], languages)
    if (folder / "tokenizer.json").is_file():
        from tokenizers import Tokenizer as FastTokenizer

        tokenizer = FastTokenizer.from_file(str(folder / "tokenizer.json"))
        vocab = tokenizer.get_vocab(with_added_tokens=True)
        added = [token.content for token in tokenizer.get_added_tokens_decoder().values()]
        side = {"tokenizer": "tokenizer.json", "specials": sorted(set(added))}
        if config["model_type"] == "t5":
            return _hub_tokens(vocab, config, "<pad>", {"src": side, "tgt": side}, ["tokenizer.json"],
                               t5_languages(config, src_lang, tgt_lang))
        pattern = r"[a-z]{3}_[A-Z][a-z]{3}" if config["model_type"] == "m2m_100" else r"[a-z]{2}_[A-Z]{2}"
        codes = {token: token for token in added if re.fullmatch(pattern, token)}
        languages = None
        if codes:
            settings = _json(folder / "tokenizer_config.json", optional=True)
            source, target = src_lang or settings.get("src_lang"), tgt_lang or settings.get("tgt_lang")
            source, target = source if source in codes else sorted(codes)[0], target if target in codes else None
            languages = Languages(codes, source, target or next(c for c in sorted(codes) if c != source))
        return _hub_tokens(vocab, config, "</s>", {"src": side, "tgt": side}, ["tokenizer.json"], languages)
    if (folder / "sentencepiece.bpe.model").is_file() and (folder / "vocab.json").is_file():  # M2M100
        settings = _json(folder / "tokenizer_config.json", optional=True)
        names = M2M100_LANGUAGES.get(settings.get("language_codes", "m2m100"))
        if names is None:
            raise ConversionError(f"M2M100 language codes {settings.get('language_codes')!r} are not known here.")
        vocab = dict(_json(folder / "vocab.json"))
        codes = {name: f"__{name}__" for name in names}
        size = len(vocab)  # the language codes' ids follow vocab.json's, in the list's order
        vocab.update({code: size + i for i, code in enumerate(codes.values())})
        source = src_lang or settings.get("src_lang")
        source = source if source in codes else "en"
        target = tgt_lang or settings.get("tgt_lang")
        target = target if target in codes else next(name for name in names if name != source)
        side = {"sentencepiece": "sentencepiece.bpe.model",
                "specials": ["<s>", "<pad>", "</s>", "<unk>", *codes.values()]}
        return _hub_tokens(vocab, config, "</s>", {"src": side, "tgt": side}, ["sentencepiece.bpe.model"],
                           Languages(codes, source, target))
    raise ConversionError(f"{folder} has no tokenizer this converter reads (Marian's source.spm, M2M100's "
                          "sentencepiece.bpe.model and vocab.json, or tokenizer.json).")


def t5_languages(config: dict, src_lang: str | None, tgt_lang: str | None) -> Languages:
    """T5's directions and their prompts: those its config.json names (task_specific_params, as t5-small's has
    "translation_en_to_de": {"prefix": "translate English to German: "}), else the three of the T5 paper."""
    tasks = config.get("task_specific_params") or {}
    prompts = {}
    for task, params in tasks.items():
        pair = re.fullmatch(r"translation_(\w+?)_to_(\w+)", task)
        if pair and isinstance(params, dict) and isinstance(params.get("prefix"), str):
            prompts[pair.groups()] = params["prefix"]
    if not prompts:
        prompts = {("en", target): f"translate English to {T5_LANGUAGES[target]}: " for target in ("de", "fr", "ro")}
    codes = {code: T5_LANGUAGES.get(code, code) for pair in prompts for code in pair}
    default = ("en", "de") if ("en", "de") in prompts else min(prompts)
    pair = (src_lang or default[0], tgt_lang or default[1])
    if pair not in prompts:
        if (src_lang or tgt_lang) and all(language in codes for language in pair):  # (unknown codes: said below)
            known = ", ".join(f"{s}→{t}" for s, t in sorted(prompts))
            raise ConversionError(f"This model does not translate {pair[0]}→{pair[1]}; it translates {known}.")
        pair = default
    return Languages(codes, *pair, target_first=False, prompts=prompts)


def _json(path: Path, optional: bool = False) -> dict:
    """A JSON object from `path` (an empty one for a missing `optional` file), or a ConversionError naming it."""
    if optional and not path.is_file():
        return {}
    try:
        return read_json(path)
    except CheckpointError as error:
        raise ConversionError(str(error)) from None


def _hub_tokens(vocab: dict[str, int], config: dict, start: str, spec: dict, files: list[str],
                languages: Languages | None) -> HubTokens:
    """The `HubTokens` of a vocabulary (token -> Hub id) for the model `config` describes; `start`: the token that
    starts decoding unless the config names another id."""
    pad, unk, eos = (_id(vocab, name) for name in ("<pad>", "<unk>", "</s>"))
    rows, named = config["vocab_size"], len(set(vocab.values()))
    beyond = sorted(token for token, index in vocab.items() if not 0 <= index < rows)
    if beyond or named < rows / 2:  # a token the model has no row for, or a table mostly without tokens
        raise ConversionError(
            f"The tokenizer does not match the weights: it names {named:,} tokens"
            + (f", {len(beyond):,} of them (such as {beyond[0]!r}) past the model's {rows:,} rows" if beyond else
               f" for the model's {rows:,} rows") + " (config.json's vocab_size). Were its files taken from another "
            "model? Download the tokenizer files and the weights of one model together.")
    return HubTokens(_by_id(vocab, rows), pad, unk, eos,
                     config.get("decoder_start_token_id", _id(vocab, start)), spec, files, languages)


def _id(vocab: dict[str, int], token: str) -> int:
    if token not in vocab:
        raise ConversionError(f"The tokenizer has no {token} token.")
    return vocab[token]


def _by_id(vocab: dict[str, int], size: int) -> list[str]:
    """Hub id -> token for the model's `size` rows (rows no token names get a placeholder name)."""
    tokens = [f"<unused {i}>" for i in range(size)]
    for token, index in vocab.items():
        if index < size:
            tokens[index] = token
    return tokens


def renumbering(hub: HubTokens) -> tuple[list[int], list[str], dict[str, str]]:
    """Our ids -> Hub ids (<pad> <unk> <sos> <eos> first, <sos> a copy of the decoder start row), our tokens, and
    the Hub's special tokens renamed to ours."""
    specials = [hub.pad, hub.unk, hub.decoder_start, hub.eos]
    order = specials + [i for i in range(len(hub.tokens)) if i not in (hub.pad, hub.unk, hub.eos)]
    renamed = {hub.tokens[hub.pad]: "<pad>", hub.tokens[hub.unk]: "<unk>", hub.tokens[hub.eos]: "<eos>"}
    itos = list(SPECIALS) + [hub.tokens[i] for i in order[len(SPECIALS):]]
    clash = sorted(set(itos[len(SPECIALS):]) & set(SPECIALS))
    if clash:
        raise ConversionError(f"The vocabulary has a token spelled like one of ours: {clash}.")
    return order, itos, renamed


def model_config(config: dict, vocab_size: int) -> ModelConfig:
    """Our config of a Hub config (`vocab_size`: ours, one more than the Hub model's)."""
    family = config["model_type"]
    if family == "t5":
        return t5_config(config, vocab_size)
    activation = config.get("activation_function", "relu")
    if activation not in ACTIVATIONS:
        raise ConversionError(f"activation {activation!r} is not one the Transformer here has.")
    if config["encoder_attention_heads"] != config["decoder_attention_heads"] or \
            config["encoder_ffn_dim"] != config["decoder_ffn_dim"]:
        raise ConversionError("Encoder and decoder with different head counts or widths are not handled.")
    positional = {"marian": "sinusoidal_halves", "m2m_100": "fairseq", "mbart": "learned"}[family]
    return ModelConfig(
        src_vocab_size=vocab_size, tgt_vocab_size=vocab_size, d_model=config["d_model"],
        n_heads=config["encoder_attention_heads"], n_encoder_layers=config["encoder_layers"],
        n_decoder_layers=config["decoder_layers"], d_ff=config["encoder_ffn_dim"], dropout=0.0,
        max_len=config["max_position_embeddings"], positional=positional,
        norm="post" if family == "marian" else "pre", tie_embeddings=config.get("tie_word_embeddings", True),
        activation=ACTIVATIONS[activation], scale_embeddings=bool(config.get("scale_embedding", family != "mbart")),
        embedding_norm=family == "mbart", share_embeddings=config.get("share_encoder_decoder_embeddings", True))


def t5_config(config: dict, vocab_size: int) -> ModelConfig:
    """Our config of a T5 config.json."""
    projection = config.get("feed_forward_proj", "relu")
    gated, _, activation = projection.rpartition("-")
    # transformers reads "gated-gelu" as the tanh approximation ("gelu_new"), as T5 v1.1 was trained
    activation = "gelu_tanh" if projection == "gated-gelu" or activation == "gelu_new" else activation
    if gated not in ("", "gated") or activation not in ("relu", "gelu", "gelu_tanh", "silu"):
        raise ConversionError(f"feed_forward_proj {config.get('feed_forward_proj')!r} is not one the Transformer "
                              "here has.")
    return ModelConfig(
        src_vocab_size=vocab_size, tgt_vocab_size=vocab_size, d_model=config["d_model"], n_heads=config["num_heads"],
        d_head=config["d_kv"], n_encoder_layers=config["num_layers"],
        n_decoder_layers=config.get("num_decoder_layers") or config["num_layers"], d_ff=config["d_ff"], dropout=0.0,
        max_len=config.get("n_positions", 512), positional="relative", norm="pre", normalization="rms",
        norm_eps=config.get("layer_norm_epsilon", 1e-6), activation=activation, gated_feed_forward=gated == "gated",
        scale_embeddings=False, share_embeddings=True, tie_embeddings=True,  # untied below if lm_head differs
        relative_buckets=config.get("relative_attention_num_buckets", 32),
        relative_max_distance=config.get("relative_attention_max_distance", 128))


def t5_state_dict(hub_state: HubWeights, config: ModelConfig, hub_config: dict, order: list[int]
                  ) -> dict[str, torch.Tensor]:
    """Our weights from T5's: √d_head folded into W_Q (T5 does not scale scores), the output scale d_model^-0.5 of a
    tied model folded into the decoder's final norm, zeros for the biases T5 has not."""
    ours = {"src_embedding.tokens.weight": hub_state.rows("shared.weight", order),
            "generator.bias": torch.zeros(len(order))}
    head = hub_state.get("lm_head.weight")
    if head is not None and not torch.equal(head, hub_state["shared.weight"]):
        ours["generator.weight"] = hub_state.rows("lm_head.weight", order)
    scaled = hub_config.get("scale_decoder_outputs", hub_config.get("tie_word_embeddings", True) is not False)
    query_scale = math.sqrt(config.d_head)
    for side, blocks, sublayers in (
            ("encoder", config.n_encoder_layers, [("SelfAttention", "self_attention", "attention_block")]),
            ("decoder", config.n_decoder_layers, [("SelfAttention", "self_attention", "self_attention_block"),
                                                  ("EncDecAttention", "cross_attention", "cross_attention_block")])):
        ours[f"{side}_position_bias.table.weight"] = \
            hub_state[f"{side}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"]
        final = hub_state[f"{side}.final_layer_norm.weight"]
        ours[f"{side}_norm.weight"] = final * config.d_model ** -0.5 if side == "decoder" and scaled else final
        for i in range(blocks):
            hub, our = f"{side}.block.{i}.layer", f"{side}_layers.{i}"
            for index, (hub_attention, our_attention, block) in enumerate(sublayers):
                for hub_projection, our_projection in (("q", "w_q"), ("k", "w_k"), ("v", "w_v"), ("o", "w_o")):
                    weight = hub_state[f"{hub}.{index}.{hub_attention}.{hub_projection}.weight"]
                    ours[f"{our}.{our_attention}.{our_projection}.weight"] = \
                        weight * query_scale if hub_projection == "q" else weight
                ours[f"{our}.{block}.norm.weight"] = hub_state[f"{hub}.{index}.layer_norm.weight"]
            feed_forward = f"{hub}.{len(sublayers)}"
            projections = (("wi_0", "linear_in"), ("wi_1", "linear_gate")) if config.gated_feed_forward \
                else (("wi", "linear_in"),)
            for hub_projection, our_projection in (*projections, ("wo", "linear_out")):
                ours[f"{our}.feed_forward.{our_projection}.weight"] = \
                    hub_state[f"{feed_forward}.DenseReluDense.{hub_projection}.weight"]
            ours[f"{our}.feed_forward_block.norm.weight"] = hub_state[f"{feed_forward}.layer_norm.weight"]
    return ours


def state_dict(hub_state: HubWeights, config: ModelConfig, family: str, order: list[int]
               ) -> dict[str, torch.Tensor]:
    """Our weights, named as `Transformer` names them, from the Hub model's."""
    state = {name.removeprefix("model."): tensor for name, tensor in hub_state.items()}
    full_name = {name.removeprefix("model."): name for name in hub_state}
    shared = next((full_name[name] for name in ("shared.weight", "encoder.embed_tokens.weight") if name in full_name),
                  None)
    if shared is None:
        raise ConversionError("The weights have no token embedding (model.shared.weight).")
    ours = {"src_embedding.tokens.weight": hub_state.rows(shared, order)}
    if not config.share_embeddings:
        ours["tgt_embedding.tokens.weight"] = hub_state.rows(
            full_name.get("decoder.embed_tokens.weight", "model.decoder.embed_tokens.weight"), order)
    if not config.tie_embeddings:
        ours["generator.weight"] = hub_state.rows("lm_head.weight", order)
    bias = hub_state.get("final_logits_bias")
    ours["generator.bias"] = bias.reshape(-1)[order] if bias is not None else torch.zeros(len(order))
    for side, ours_side in (("encoder", "src"), ("decoder", "tgt")):
        if family == "mbart":
            ours[f"{ours_side}_embedding.positions.weight"] = state[f"{side}.embed_positions.weight"][2:]
            ours[f"{ours_side}_embedding.norm.weight"] = state[f"{side}.layernorm_embedding.weight"]
            ours[f"{ours_side}_embedding.norm.bias"] = state[f"{side}.layernorm_embedding.bias"]
        if config.norm == "pre":
            for part in ("weight", "bias"):
                ours[f"{side}_norm.{part}"] = state[f"{side}.layer_norm.{part}"]
    sublayers = {"encoder": [("self_attn", "self_attention", "attention_block")],
                 "decoder": [("self_attn", "self_attention", "self_attention_block"),
                             ("encoder_attn", "cross_attention", "cross_attention_block")]}
    for side, layers in (("encoder", config.n_encoder_layers), ("decoder", config.n_decoder_layers)):
        for i in range(layers):
            hub, our = f"{side}.layers.{i}", f"{side}_layers.{i}"
            for part in ("weight", "bias"):
                for hub_attention, our_attention, block in sublayers[side]:
                    for hub_projection, our_projection in (("q_proj", "w_q"), ("k_proj", "w_k"), ("v_proj", "w_v"),
                                                           ("out_proj", "w_o")):
                        ours[f"{our}.{our_attention}.{our_projection}.{part}"] = \
                            state[f"{hub}.{hub_attention}.{hub_projection}.{part}"]
                    ours[f"{our}.{block}.norm.{part}"] = state[f"{hub}.{hub_attention}_layer_norm.{part}"]
                ours[f"{our}.feed_forward.linear_in.{part}"] = state[f"{hub}.fc1.{part}"]
                ours[f"{our}.feed_forward.linear_out.{part}"] = state[f"{hub}.fc2.{part}"]
                ours[f"{our}.feed_forward_block.norm.{part}"] = state[f"{hub}.final_layer_norm.{part}"]
    return ours


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
    generation = _json(folder / "generation_config.json", optional=True)
    write_json(out / METRICS, {
        "source": {**origin, "model_type": config["model_type"], "converted_with": "python -m model.hub.convert_hf",
                   **({"stored_as": str(dtype).removeprefix("torch.")} if dtype else {})},
        "parameters": sum(p.numel() for p in {p.data_ptr(): p for p in model.parameters()}.values()),
        "decoding": {"beam_size": generation.get("num_beams", config.get("num_beams", 5)) or 5,
                     "length_penalty": generation.get("length_penalty", 1.0)},
    })


def split_at_whitespace(path: Path) -> None:
    """Make a T5 tokenizer.json split text at every run of whitespace before its Metaspace, as transformers 5's
    T5Tokenizer does whatever the file says (and as T5's sentencepiece model, which drops extra whitespace): a
    tokenizer.json written by transformers 4 has the Metaspace alone, which makes a piece of trailing spaces."""
    from tokenizers import Tokenizer as FastTokenizer
    from tokenizers import pre_tokenizers

    tokenizer = FastTokenizer.from_file(str(path))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")])
    tokenizer.save(str(path))


def side_languages(folder: Path, hub: HubTokens) -> tuple[str, str]:
    """The languages the source and target sides are named by: a multilingual model's defaults, or what a
    bilingual model's tokenizer_config.json says (Marian's source_lang and target_lang)."""
    if hub.languages is not None:
        return hub.languages.source or "multilingual", hub.languages.target
    settings = _json(folder / "tokenizer_config.json", optional=True)
    return settings.get("source_lang") or "unknown", settings.get("target_lang") or "unknown"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("source", help="a Hub model id (e.g. Helsinki-NLP/opus-mt-en-de) or a save_pretrained folder")
    p.add_argument("--out", required=True, help="the checkpoint folder to write (e.g. checkpoints/opus-mt-en-de)")
    p.add_argument("--src-lang", help="default source language of a multilingual model (e.g. eng_Latn)")
    p.add_argument("--tgt-lang", help="default target language of a multilingual model (e.g. deu_Latn)")
    p.add_argument("--max-gb", type=float, default=DEFAULT_MAX_BYTES / 1024 ** 3,
                   help="refuse a Hub model whose weights are larger (default %(default).0f)")
    p.add_argument("--dtype", choices=sorted(STORED_DTYPES),
                   help="store the weights as this type (float16 or bfloat16 halve the file; the model computes in "
                        "float32 either way); default: as the Hub model stores them")
    args = p.parse_args(argv)
    started = time.perf_counter()
    try:
        out = convert(args.source, args.out, args.src_lang, args.tgt_lang, int(args.max_gb * 1024 ** 3),
                      dtype=STORED_DTYPES.get(args.dtype))
        metrics = checkpoint_parts(out).metrics  # it loads (the step decoder's layout is the app's to make)
    except (ConversionError, CheckpointError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"wrote {out} ({metrics['parameters']:,} parameters) in {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
