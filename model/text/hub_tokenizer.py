"""What a converted Hub model reads and writes besides its weights (model/hub/convert_hf.py makes them): its
tokenizer, reproduced with sentencepiece (Marian's `source.spm` / `target.spm`) or tokenizers (`tokenizer.json`),
and, for a multilingual model, its language codes.

A `HubTokenizer` offers what `model.text.vocab.Tokenizer` offers, so a `Translator` uses either: the model's tokens are
its sentencepiece pieces ("▁A", "▁man"), nothing is lower-cased, and text comes back through the tokenizer's own
decoding. Neither needs transformers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path


class HubTokenizer:
    """One side's tokenizer of a converted Hub model: text -> sentencepiece pieces, pieces -> text."""

    lowercase = False
    bpe = None

    def __init__(self, folder: Path, spec: dict):
        """`spec` as vocab.json stores it: {"lang", "sentencepiece": file or "tokenizer": file, "specials": the Hub
        tokenizer's special tokens, which text may name and which are never split, "renamed": {Hub special: ours}}."""
        self.lang = spec["lang"]
        self.renamed = dict(spec.get("renamed", {}))
        self.specials = sorted(set(spec.get("specials", ())), key=len, reverse=True)
        self._special_split = re.compile("(" + "|".join(map(re.escape, self.specials)) + ")") if self.specials else None
        self._not_text = frozenset(self.specials) | frozenset(self.renamed.values())  # left out of decoded text
        if "sentencepiece" in spec:
            import sentencepiece

            self.file = spec["sentencepiece"]
            self.sentencepiece = sentencepiece.SentencePieceProcessor(model_file=str(folder / self.file))
            self.tokenizer = None
        else:
            from tokenizers import Tokenizer as FastTokenizer

            self.file = spec["tokenizer"]
            self.tokenizer = FastTokenizer.from_file(str(folder / self.file))
            self.sentencepiece = None

    def __call__(self, text: str) -> list[str]:
        """The pieces of `text`, special tokens named in it kept whole (as transformers' tokenizers do)."""
        return [self.renamed.get(piece, piece) for piece in self._pieces(text)]

    def _pieces(self, text: str) -> list[str]:
        if self.tokenizer is not None:
            return self.tokenizer.encode(text, add_special_tokens=False).tokens
        pieces = []
        for index, chunk in enumerate(self._special_split.split(text) if self._special_split else [text]):
            if index % 2:
                pieces.append(chunk)
            elif chunk.strip():
                pieces += self.sentencepiece.encode(chunk.strip(), out_type=str)
        return pieces

    def tokenize_all(self, texts: Iterable[str]) -> list[list[str]]:
        return [self(text) for text in texts]

    words_all = tokenize_all

    def pieces(self, words: list[str]) -> list[str]:
        """The pieces the model reads or writes for `words`."""
        return [piece for word in words for piece in self(word)]

    def words(self, tokens: list[str]) -> list[str]:
        """The model's tokens are what `detokenize` reads: pieces stay pieces."""
        return tokens

    def detokenize(self, tokens: list[str]) -> str:
        """Text of pieces, special tokens left out, as the Hub tokenizer decodes them."""
        pieces = [token for token in tokens if token not in self._not_text]
        if self.tokenizer is not None:
            ids = [self.tokenizer.token_to_id(piece) for piece in pieces]
            return self.tokenizer.decode([i for i in ids if i is not None], skip_special_tokens=True)
        return self.sentencepiece.decode_pieces(pieces).replace("▁", " ").strip()


# M2M100's language codes, in the order its tokenizer gives them ids (after vocab.json's tokens), per its
# tokenizer_config.json's "language_codes" (fairseq's lists, as transformers' M2M100Tokenizer holds them).
M2M100_LANGUAGES = {
    "m2m100": ("af am ar ast az ba be bg bn br bs ca ceb cs cy da de el en es et fa ff fi fr fy ga gd gl gu ha he hi "
               "hr ht hu hy id ig ilo is it ja jv ka kk km kn ko lb lg ln lo lt lv mg mk ml mn mr ms my ne nl no ns "
               "oc or pa pl ps pt ro ru sd si sk sl so sq sr ss su sv sw ta th tl tn tr uk ur uz vi wo xh yi yo zh "
               "zu").split(),
    "wmt21": "en ha is ja cs ru zh de".split(),
}


# Languages by name: those of T5's translation prompts ("translate English to German: "), as the prompts spell
# them, and of the shipped checkpoints (the page names a model's language).
LANGUAGE_NAMES = {"cs": "Czech", "de": "German", "en": "English", "fr": "French", "ro": "Romanian"}


@dataclass(frozen=True)
class Languages:
    """A multilingual model's language codes and how they reach it.

    - NLLB-200, M2M100, mBART-50: the source starts with the source language's code, and the target language's
      code is given as the first target token (`target_first`).
    - A multi-target opus-mt model: the source starts with the target language's code (`>>fra<<`), and the source
      language is not named (`source` is None).
    - T5: the source starts with a task prompt in words ("translate English to German: "), one per direction it
      was trained on (`prompts`); `codes` name the languages ("de" -> "German").
    """

    codes: dict[str, str]  # language -> its token ("deu_Latn" -> "deu_Latn", "de" -> "__de__", "fra" -> ">>fra<<")
    source: str | None  # the default source language (None: the source language is not named)
    target: str  # the default target language
    target_first: bool = True  # the target code is the first target token (else it starts the source)
    prompts: dict[tuple[str, str], str] | None = None  # (source, target) -> the text the source starts with

    def to_json(self) -> dict:
        prompts = {"prompts": [[*pair, text] for pair, text in self.prompts.items()]} if self.prompts else {}
        return {"codes": self.codes, "source": self.source, "target": self.target,
                "target_first": self.target_first} | prompts

    @classmethod
    def from_json(cls, data: dict) -> Languages:
        prompts = {(source, target): text for source, target, text in data["prompts"]} if "prompts" in data else None
        return cls(dict(data["codes"]), data.get("source"), data["target"], bool(data.get("target_first", True)),
                   prompts)

    def sources(self) -> list[str]:
        """The source languages a user may choose (none where the model reads any)."""
        if self.prompts:
            return sorted({source for source, _ in self.prompts})
        return sorted(self.codes) if self.source is not None else []

    def targets(self) -> list[str]:
        """The target languages a user may choose."""
        return sorted({target for _, target in self.prompts}) if self.prompts else sorted(self.codes)

    def code(self, language: str | None, side: str) -> str:
        """The token of `language` (None: the default of `side`, "source" or "target"), or a ValueError listing
        the languages there are."""
        language = language or (self.source if side == "source" else self.target)
        if not isinstance(language, str) or language not in self.codes:
            codes = sorted(self.codes)
            known = ", ".join(codes) if len(codes) <= 12 else f"{', '.join(codes[:10])}, ... ({len(codes)} in all)"
            raise ValueError(f"This model has no {side} language {language!r}; it has: {known}.")
        return self.codes[language]

    def source_prefix(self, source: str | None, target: str | None, tokenize: Callable[[str], list[str]]
                      ) -> list[str]:
        """The tokens that start the source, before its text (a prompt is split by `tokenize`)."""
        if self.prompts:
            self.code(source, "source"), self.code(target, "target")  # each a language the model knows
            pair = (source or self.source, target or self.target)
            if pair not in self.prompts:
                known = ", ".join(f"{s}→{t}" for s, t in sorted(self.prompts))
                raise ValueError(f"This model does not translate {pair[0]}→{pair[1]}; it translates {known}.")
            return tokenize(self.prompts[pair].rstrip())  # its words; the space before the text is no token
        if not self.target_first:
            if source not in (None, self.source):
                raise ValueError("This model reads any source language; choose only the target language.")
            return [self.code(target, "target")]
        return [self.code(source, "source")]

    def target_prefix(self, target: str | None) -> list[str]:
        """The tokens given at the start of the translation, before the model chooses."""
        return [self.code(target, "target")] if self.target_first else []

    def is_code(self, token: str) -> bool:
        """Whether `token` is one of the language codes (a prompt's words are not)."""
        return not self.prompts and token in self.codes.values()
