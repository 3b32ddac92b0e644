"""Tokenization (spaCy's rule-based word tokenizers, or characters), vocabularies, truecasing, detokenization."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from functools import lru_cache

import spacy

SPECIALS = ("<pad>", "<unk>", "<sos>", "<eos>")
PAD_ID, UNK_ID, SOS_ID, EOS_ID = range(4)
CHARS = "chars"  # the "language" of character-level models (the string-reversal toy task)
SPACE = "▁"  # a space as a character token, visible on a heatmap axis (SentencePiece's convention)


@lru_cache(maxsize=None)
def _blank_pipeline(lang: str):
    # spacy.blank needs no model download: only the language's tokenizer rules and exceptions.
    return spacy.blank(lang)


class Tokenizer:
    """spaCy rule-based word tokenizer for one language (or characters, lang "chars"), optionally lower-casing."""

    def __init__(self, lang: str, lowercase: bool = True):
        self.lang = lang
        self.lowercase = lowercase
        self.nlp = None if lang == CHARS else _blank_pipeline(lang)

    def __call__(self, text: str) -> list[str]:
        if self.nlp is None:
            text = " ".join(text.split())  # runs of white space count as one space
            return [SPACE if c == " " else c for c in (text.lower() if self.lowercase else text)]
        return self._tokens(self.nlp.tokenizer(text))

    def tokenize_all(self, texts: Iterable[str]) -> list[list[str]]:
        """Tokenize many texts at once (faster than one call each)."""
        if self.nlp is None:
            return [self(text) for text in texts]
        return [self._tokens(doc) for doc in self.nlp.tokenizer.pipe(texts, batch_size=1000)]

    def detokenize(self, tokens: list[str]) -> str:
        """Text from tokens: characters are joined, words spaced by `detokenize`'s rules."""
        if self.nlp is None:
            return "".join(" " if t == SPACE else t for t in tokens)
        return detokenize(tokens)

    def _tokens(self, doc) -> list[str]:
        words = [t.text for t in doc if not t.is_space]
        return [w.lower() for w in words] if self.lowercase else words


class Vocab:
    """Token <-> id mapping with the specials <pad> <unk> <sos> <eos> at ids 0-3."""

    def __init__(self, itos: list[str]):
        if tuple(itos[:len(SPECIALS)]) != SPECIALS:
            raise ValueError(f"a vocabulary must start with {SPECIALS}, got {itos[:4]}")
        self.itos = list(itos)
        self.stoi = {token: i for i, token in enumerate(self.itos)}
        if len(self.stoi) != len(self.itos):
            raise ValueError("a vocabulary must not repeat a token")

    @classmethod
    def build(cls, sentences: Iterable[list[str]], min_freq: int = 2) -> Vocab:
        """Every token seen at least `min_freq` times, most frequent first (ties alphabetical)."""
        counts = Counter(token for sentence in sentences for token in sentence)
        kept = sorted((t for t, c in counts.items() if c >= min_freq and t not in SPECIALS),
                      key=lambda t: (-counts[t], t))
        return cls(list(SPECIALS) + kept)

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, token: str) -> bool:
        return token in self.stoi

    def encode(self, tokens: list[str]) -> list[int]:
        """Ids of `tokens`, <unk> for unknown ones (no <sos>/<eos> added)."""
        return [self.stoi.get(t, UNK_ID) for t in tokens]

    def decode(self, ids: Iterable[int], drop_unknown: bool = False) -> list[str]:
        """Tokens of `ids`, stopping at <eos> and dropping <pad>/<sos> (and <unk> if asked)."""
        skipped = (PAD_ID, SOS_ID, UNK_ID) if drop_unknown else (PAD_ID, SOS_ID)
        tokens = []
        for i in ids:
            if i == EOS_ID:
                break
            if i not in skipped:
                tokens.append(self.itos[i])
        return tokens


class Truecaser:
    """Restores case to lower-cased tokens: each word's most frequent written form in the training data."""

    def __init__(self, forms: dict[str, str], capitalize_first: bool = True):
        self.forms = forms
        self.capitalize_first = capitalize_first

    @classmethod
    def build(cls, cased_sentences: Iterable[list[str]]) -> Truecaser:
        """Learn the forms from cased token lists; the first word of a sentence is not counted (it is capitalised anyway)."""
        counts: dict[str, Counter] = {}
        for sentence in cased_sentences:
            for token in sentence[1:]:
                counts.setdefault(token.lower(), Counter())[token] += 1
        forms = {}
        for lower, counter in counts.items():
            form = max(counter.items(), key=lambda item: (item[1], item[0] == lower))[0]
            if form != lower:
                forms[lower] = form
        return cls(forms)

    def __call__(self, tokens: list[str]) -> list[str]:
        cased = [self.forms.get(t, t) for t in tokens]
        if cased and self.capitalize_first:
            cased[0] = cased[0][:1].upper() + cased[0][1:]
        return cased


_NO_SPACE_BEFORE = re.compile(r"^([.,!?;:%)\]}…]+|'s|'re|'ve|'ll|'d|'m|n't)$", re.IGNORECASE)
_NO_SPACE_AFTER = re.compile(r"^([(\[{¿¡]|\w+')$")


def detokenize(tokens: list[str]) -> str:
    """Join word tokens into text: no space before closing punctuation or after opening brackets and elisions."""
    text = ""
    quote_open = False
    attach_next = True
    for token in tokens:
        if token == '"':
            space = not attach_next and not quote_open
            quote_open = not quote_open
            text += (" " if space else "") + token
            attach_next = quote_open
            continue
        if not attach_next and not _NO_SPACE_BEFORE.match(token):
            text += " "
        text += token
        attach_next = bool(_NO_SPACE_AFTER.match(token))
    return text
