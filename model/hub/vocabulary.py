"""A Hub model's vocabulary read from its tokenizer files (Marian's source.spm/target.spm/vocab.json, a
tokenizer.json for NLLB, mBART-50 and T5, M2M100's sentencepiece.bpe.model/vocab.json), its language codes or T5
prompts, and the renumbering into ours: <pad> <unk> <sos> <eos> first, as in every checkpoint here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from attention_inspector.model.hub.hub_checks import ConversionError
from attention_inspector.model.serving.checkpoint import CheckpointError, read_json
from attention_inspector.model.text.hub_tokenizer import LANGUAGE_NAMES, M2M100_LANGUAGES, Languages
from attention_inspector.model.text.vocab import SPECIALS


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


def hub_tokens(folder: Path, config: dict, src_lang: str | None, tgt_lang: str | None) -> HubTokens:
    """The Hub model's vocabulary and tokenizer, from Marian's source.spm/target.spm/vocab.json, a tokenizer.json
    (NLLB, mBART-50) or M2M100's sentencepiece.bpe.model/vocab.json."""
    if (folder / "source.spm").is_file():  # Marian
        vocab = json_of(folder / "vocab.json")
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
            settings = json_of(folder / "tokenizer_config.json", optional=True)
            source, target = src_lang or settings.get("src_lang"), tgt_lang or settings.get("tgt_lang")
            source, target = source if source in codes else sorted(codes)[0], target if target in codes else None
            languages = Languages(codes, source, target or next(c for c in sorted(codes) if c != source))
        return _hub_tokens(vocab, config, "</s>", {"src": side, "tgt": side}, ["tokenizer.json"], languages)
    if (folder / "sentencepiece.bpe.model").is_file() and (folder / "vocab.json").is_file():  # M2M100
        settings = json_of(folder / "tokenizer_config.json", optional=True)
        names = M2M100_LANGUAGES.get(settings.get("language_codes", "m2m100"))
        if names is None:
            raise ConversionError(f"M2M100 language codes {settings.get('language_codes')!r} are not known here.")
        vocab = dict(json_of(folder / "vocab.json"))
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
        prompts = {("en", target): f"translate English to {LANGUAGE_NAMES[target]}: " for target in ("de", "fr", "ro")}
    codes = {code: LANGUAGE_NAMES.get(code, code) for pair in prompts for code in pair}
    default = ("en", "de") if ("en", "de") in prompts else min(prompts)
    pair = (src_lang or default[0], tgt_lang or default[1])
    if pair not in prompts:
        if (src_lang or tgt_lang) and all(language in codes for language in pair):  # (unknown codes: said below)
            known = ", ".join(f"{s}→{t}" for s, t in sorted(prompts))
            raise ConversionError(f"This model does not translate {pair[0]}→{pair[1]}; it translates {known}.")
        pair = default
    return Languages(codes, *pair, target_first=False, prompts=prompts)


def json_of(path: Path, optional: bool = False) -> dict:
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
    settings = json_of(folder / "tokenizer_config.json", optional=True)
    return settings.get("source_lang") or "unknown", settings.get("target_lang") or "unknown"
