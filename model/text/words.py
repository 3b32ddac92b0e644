"""Words from the pieces a model reads and writes, and attention maps and shares merged to words.

Pieces are grouped into words by the tokenizer's convention:
- byte-pair pieces (subword-nmt): a piece ending in "@@" goes on into the next ("zeitungs@@ leserin");
- sentencepiece (converted Hub models): a piece starting with "▁" starts a word, any other goes on the word
  before it ("▁Zeitung", "s", "leserin");
- characters (the reversal toy): a word is a run of characters between spaces ("▁"), each space a unit of its own;
- whole words: every token is a word.
A word typed whole that the vocabulary lacks in its own pieces is `spelled` in the fewest pieces it has.
A special token (<sos>, <eos>, <unk>, a language code like "deu_Latn" or ">>fra<<") is always a word of its own.

Maps are merged as Clark et al. (2019, "What Does BERT Look At?") merge word pieces: attention *to* a word is the
sum over its pieces (keys), attention *from* a word the mean over its pieces (queries), so each row still sums
to 1. Shares (ALTI+, rollout) are merged the same way.
"""

from __future__ import annotations

import re
from collections.abc import Container

import numpy as np

from attention_inspector.model.text.vocab import CHARS, CONTINUES, SPACE

PIECES, WORDS = "pieces", "words"
UNITS = (PIECES, WORDS)
BPE, SENTENCEPIECE, CHARACTERS, WHOLE = "bpe", "sentencepiece", "characters", "whole words"
_SPECIAL = re.compile(r"<[^<>\s]*>|>>\w+<<|__\w+__|[a-z]{3}_[A-Z][a-z]{3}|[a-z]{2}_[A-Z]{2}")


def scheme(tokenizer) -> str:
    """How `tokenizer`'s tokens make words: BPE, SENTENCEPIECE, CHARACTERS or WHOLE."""
    if getattr(tokenizer, "sentencepiece", None) is not None or getattr(tokenizer, "tokenizer", None) is not None:
        return SENTENCEPIECE  # a converted Hub model's tokenizer (model/text/hub_tokenizer.py)
    if getattr(tokenizer, "bpe", None) is not None:
        return BPE
    return CHARACTERS if getattr(tokenizer, "lang", None) == CHARS else WHOLE


def is_special(token: str) -> bool:
    return bool(_SPECIAL.fullmatch(token))


def word_spans(tokens: list[str], how: str) -> list[range]:
    """The pieces of each word, as consecutive index ranges covering `tokens` in order."""
    spans: list[range] = []
    start = 0
    for index, token in enumerate(tokens):
        if index > start and _starts_word(tokens[index - 1], token, how):
            spans.append(range(start, index))
            start = index
    if tokens:
        spans.append(range(start, len(tokens)))
    return spans


def _starts_word(before: str, token: str, how: str) -> bool:
    """Whether `token` starts a new word after `before`."""
    if how == WHOLE or is_special(token) or is_special(before):
        return True
    if how == BPE:
        return not before.endswith(CONTINUES)
    if how == SENTENCEPIECE:
        return token.startswith(SPACE)
    return token == SPACE or before == SPACE  # characters: a space is a unit, and ends the word before it


def word_label(pieces: list[str], how: str) -> str:
    """A word's text from its pieces: "zeitungs@@ leserin" -> "zeitungsleserin", "▁Zeitung s" -> "Zeitungs"."""
    if how == BPE:
        return "".join(piece[:-len(CONTINUES)] if piece.endswith(CONTINUES) else piece for piece in pieces)
    if how == SENTENCEPIECE:
        return "".join(pieces).replace(SPACE, " ").strip() or SPACE  # a piece that is only a space stays visible
    return "".join(pieces)


def merge(maps: np.ndarray, query_spans: list[range] | None, key_spans: list[range] | None) -> np.ndarray:
    """Maps (..., Q, K) merged to words: each key word's columns summed, each query word's rows averaged (None:
    that axis stays as it is)."""
    merged = np.asarray(maps)
    if key_spans is not None:
        merged = merged @ _membership(key_spans, merged.shape[-1])  # (..., Q, K words)
    if query_spans is not None:
        members = _membership(query_spans, merged.shape[-2])
        merged = np.swapaxes(np.swapaxes(merged, -1, -2) @ (members / members.sum(0)), -1, -2)
    return merged


def words(tokens: list[str], how: str) -> tuple[list[str], list[range]]:
    """The words `tokens` make, as text, and the pieces of each."""
    spans = word_spans(tokens, how)
    return [word_label(tokens[span.start:span.stop], how) for span in spans], spans


def summed(values: np.ndarray, spans: list[range]) -> np.ndarray:
    """Per-piece values that add up (gradient attributions) added up per word."""
    return np.array([np.asarray(values)[span.start:span.stop].sum() for span in spans])


def _membership(spans: list[range], size: int) -> np.ndarray:
    """(size, words): 1 where a piece belongs to a word."""
    if sum(map(len, spans)) != size:
        raise ValueError(f"the words cover {sum(map(len, spans))} pieces, the map has {size}")
    members = np.zeros((size, len(spans)), dtype=np.float32)
    for word, span in enumerate(spans):
        members[span.start:span.stop, word] = 1
    return members


def spelled(pieces: list[str], vocab: Container[str]) -> list[str]:
    """The word the tokenizer wrote as `pieces` in the fewest pieces that `vocab` has, written the same way
    (byte-pair "@@" ending every piece but the last, or sentencepiece's "▁" leading the first): for a word whose own
    pieces the vocabulary lacks (too rare to be kept), so that any word it has the letters of can be typed.
    [] where it has none."""
    lead = "▁" if pieces[0].startswith("▁") else ""
    ending = "@@" if pieces[0].endswith("@@") else ""
    text = "".join(piece.removesuffix("@@") for piece in pieces).removeprefix("▁")

    def piece(start: int, end: int) -> str:
        return (lead if start == 0 else "") + text[start:end] + (ending if end < len(text) else "")
    fewest: list[list[str] | None] = [[]] + [None] * len(text)
    for end in range(1, len(text) + 1):
        for start in range(end):
            if fewest[start] is not None and piece(start, end) in vocab and \
                    (fewest[end] is None or len(fewest[start]) + 1 < len(fewest[end])):
                fewest[end] = fewest[start] + [piece(start, end)]
    return fewest[-1] or []


UNKNOWN = "<unk>"  # how a translation shows a token the model wrote but cannot spell
CUT_SHARE = 4  # a translation given as text at most a quarter past the length limit is read up to the limit


def with_unknowns(text: str, tokenizer) -> list[str]:
    """`text` in `tokenizer`'s tokens, each "<unk>" in it (a translation's token the model could not spell, as a
    translation's text shows it) kept as the one token it was, not split into "<", "unk", ">"."""
    return [token for part in re.split(f"({re.escape(UNKNOWN)})", text)
            for token in ([UNKNOWN] if part == UNKNOWN else tokenizer(part) if part.strip() else [])]


def fitted(text: str, tokenizer, vocab: Container[str], limit: int) -> tuple[list[str], int]:
    """A translation's `text` in `tokenizer`'s pieces (`with_unknowns`) within a model's `limit`, and how many are
    cut off past it: where they reach the limit, each word in the fewest pieces `vocab` has where that is fewer; cut
    at the limit where they are a little longer (a translation cut mid-word at the limit reads back as a whole word,
    in more pieces than the model wrote). A ValueError for a text far longer than anything the model writes."""
    pieces = with_unknowns(text, tokenizer)
    if len(pieces) >= limit:
        split = [pieces[span.start:span.stop] for span in words(pieces, scheme(tokenizer))[1]]
        pieces = [piece for word in split for piece in min([word, spelled(word, vocab) or word], key=len)]
    if len(pieces) > limit + limit // CUT_SHARE:
        raise ValueError(f"The translation has {len(pieces)} pieces, even each word in the fewest this model has; "
                         f"it takes at most {limit}. Give its tokens as /trace spells them.")
    return pieces[:limit], max(0, len(pieces) - limit)
