"""Tokenization (spaCy's rule-based word tokenizers, optionally split into byte-pair subwords, or characters),
vocabularies, truecasing, detokenization."""

from __future__ import annotations

import heapq
import re
from collections import Counter
from collections.abc import Iterable
from functools import lru_cache

import spacy

SPECIALS = ("<pad>", "<unk>", "<sos>", "<eos>")
PAD_ID, UNK_ID, SOS_ID, EOS_ID = range(4)
CHARS = "chars"  # the "language" of character-level models (the string-reversal toy task)
SPACE = "▁"  # a space as a character token, visible on a heatmap axis (SentencePiece's convention)
CONTINUES = "@@"  # ends a subword piece that the word goes on after (subword-nmt's convention)
_WORD_END = "</w>"  # while merging: marks a word's last symbol, so "en" inside a word and "en" at its end differ


@lru_cache(maxsize=None)
def _blank_pipeline(lang: str):
    # spacy.blank needs no model download: only the language's tokenizer rules and exceptions.
    return spacy.blank(lang)


class BPE:
    """Byte-pair encoding (Sennrich et al. 2016): words split into subword pieces by merges learned from word counts.

    A word starts as its characters; the merges, applied in the order they were learned, join adjacent symbols.
    Every piece but a word's last ends in "@@", so "hundeleine" may read "hunde@@ leine" and any word the merges
    never saw still splits into pieces the vocabulary knows (down to single characters).
    """

    def __init__(self, merges: Iterable[Iterable[str]]):
        self.merges = [tuple(pair) for pair in merges]
        if any(len(pair) != 2 or not all(isinstance(s, str) and s for s in pair) for pair in self.merges):
            raise ValueError("BPE merges must be pairs of non-empty strings")
        self.ranks = {pair: rank for rank, pair in enumerate(self.merges)}
        self.segment = lru_cache(maxsize=1 << 16)(self._segment)  # words repeat: each is split once

    @classmethod
    def learn(cls, word_counts: Counter, n_merges: int, min_count: int = 2) -> BPE:
        """Learn up to `n_merges` merges, each time joining the most frequent adjacent pair (ties: the smaller
        pair), until no pair occurs `min_count` times. Pair counts are updated only for the words a merge touches."""
        words = [[*word[:-1], word[-1] + _WORD_END] for word in sorted(word_counts) if word]
        counts = [word_counts[word] for word in sorted(word_counts) if word]
        pair_counts: Counter = Counter()
        holders: dict[tuple[str, str], set[int]] = {}  # pair -> the words it occurs in
        for index, symbols in enumerate(words):
            for pair in zip(symbols, symbols[1:]):
                pair_counts[pair] += counts[index]
                holders.setdefault(pair, set()).add(index)
        heap = [(-count, pair) for pair, count in pair_counts.items()]
        heapq.heapify(heap)
        merges = []
        while heap and len(merges) < n_merges:
            negative, pair = heapq.heappop(heap)
            if -negative != pair_counts.get(pair, 0):
                continue  # a stale entry: the pair's count changed after it was pushed
            if -negative < min_count:
                break
            merges.append(pair)
            changed = set()
            for index in holders.pop(pair):
                old = words[index]
                for old_pair in zip(old, old[1:]):
                    pair_counts[old_pair] -= counts[index]
                    changed.add(old_pair)
                new = _merge_pair(old, pair)
                words[index] = new
                for new_pair in zip(new, new[1:]):
                    pair_counts[new_pair] += counts[index]
                    holders.setdefault(new_pair, set()).add(index)
                    changed.add(new_pair)
            for changed_pair in changed - {pair}:
                if pair_counts[changed_pair] > 0:
                    heapq.heappush(heap, (-pair_counts[changed_pair], changed_pair))
            pair_counts.pop(pair, None)
        return cls(merges)

    def _segment(self, word: str) -> tuple[str, ...]:
        symbols = [*word[:-1], word[-1] + _WORD_END]
        while len(symbols) > 1:
            rank, pair = min((self.ranks.get(pair, len(self.ranks)), pair) for pair in zip(symbols, symbols[1:]))
            if rank == len(self.ranks):
                break
            symbols = _merge_pair(symbols, pair)
        return tuple(s[:-len(_WORD_END)] if s.endswith(_WORD_END) else s + CONTINUES for s in symbols)

    def split(self, words: list[str]) -> list[str]:
        """The pieces of `words`, in order."""
        return [piece for word in words if word for piece in self.segment(word)]


def _merge_pair(symbols: list[str], pair: tuple[str, str]) -> list[str]:
    """`symbols` with every adjacent occurrence of `pair` joined into one symbol, left to right."""
    merged, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
            merged.append(symbols[i] + symbols[i + 1])
            i += 2
        else:
            merged.append(symbols[i])
            i += 1
    return merged


def join_pieces(pieces: list[str]) -> list[str]:
    """Words from subword pieces: a piece ending in "@@" is joined to the next (a dangling one keeps its text)."""
    words, current = [], ""
    for piece in pieces:
        if piece.endswith(CONTINUES) and len(piece) > len(CONTINUES):
            current += piece[:-len(CONTINUES)]
        else:
            words.append(current + piece)
            current = ""
    return words + [current] if current else words


class Tokenizer:
    """spaCy rule-based word tokenizer for one language (or characters, lang "chars"), optionally lower-casing,
    optionally splitting words into byte-pair pieces (`bpe`)."""

    def __init__(self, lang: str, lowercase: bool = True, bpe: BPE | None = None):
        self.lang = lang
        self.lowercase = lowercase
        self.bpe = bpe
        self.nlp = None if lang == CHARS else _blank_pipeline(lang)
        if bpe is not None and self.nlp is None:
            raise ValueError("byte-pair pieces are for word tokenizers, not characters")

    def __call__(self, text: str) -> list[str]:
        if self.nlp is None:
            text = " ".join(text.split())  # runs of white space count as one space
            return [SPACE if c == " " else c for c in (text.lower() if self.lowercase else text)]
        return self.pieces(self._tokens(self.nlp.tokenizer(text)))

    def tokenize_all(self, texts: Iterable[str]) -> list[list[str]]:
        """Tokenize many texts at once (faster than one call each): the model's tokens."""
        return [self.pieces(words) for words in self.words_all(texts)]

    def words_all(self, texts: Iterable[str]) -> list[list[str]]:
        """Word tokens of many texts (characters for "chars"), before any byte-pair splitting."""
        if self.nlp is None:
            return [self(text) for text in texts]
        return [self._tokens(doc) for doc in self.nlp.tokenizer.pipe(texts, batch_size=1000)]

    def pieces(self, words: list[str]) -> list[str]:
        """The model's tokens of word tokens: the words themselves, or their byte-pair pieces."""
        return words if self.bpe is None else self.bpe.split(words)

    def words(self, tokens: list[str]) -> list[str]:
        """Word tokens of the model's tokens: byte-pair pieces joined again (other tokens unchanged)."""
        return tokens if self.bpe is None else join_pieces(tokens)

    def detokenize(self, words: list[str]) -> str:
        """Text from word tokens: characters are joined, words spaced by `detokenize`'s rules."""
        if self.nlp is None:
            return "".join(" " if t == SPACE else t for t in words)
        return detokenize(words)

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
