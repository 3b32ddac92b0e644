"""spaCy rule-based tokenization, vocabularies, truecasing and detokenization."""

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attention_inspector.model.text.vocab import (BPE, SPECIALS, UNK_ID, Tokenizer, Truecaser, Vocab, _merge_pair,
                                                  detokenize, join_pieces)


def test_tokenizer_splits_punctuation_and_lowercases():
    assert Tokenizer("en")("A dog's ball, in  the park.") == ["a", "dog", "'s", "ball", ",", "in", "the", "park", "."]
    assert Tokenizer("de", lowercase=False)("Ein Hund läuft.") == ["Ein", "Hund", "läuft", "."]
    assert Tokenizer("en").tokenize_all(["Two dogs.", ""]) == [["two", "dogs", "."], []]


def test_vocab_keeps_frequent_tokens_and_maps_the_rest_to_unk():
    vocab = Vocab.build([["a", "dog"], ["a", "cat"], ["a", "dog", "runs"]], min_freq=2)
    assert vocab.itos == list(SPECIALS) + ["a", "dog"]
    assert vocab.encode(["a", "cat"]) == [4, UNK_ID]
    assert vocab.decode([4, 5, 3, 4]) == ["a", "dog"]  # stops at <eos>
    assert vocab.decode([4, UNK_ID, 5]) == ["a", "<unk>", "dog"]
    assert vocab.decode([4, UNK_ID, 5], drop_unknown=True) == ["a", "dog"]
    assert Vocab(vocab.itos).stoi == vocab.stoi


@pytest.mark.parametrize("itos", [["a", "b"], list(SPECIALS) + ["a", "a"]])
def test_vocab_rejects_bad_token_lists(itos):
    with pytest.raises(ValueError):
        Vocab(itos)


def test_truecaser_restores_the_usual_form():
    truecaser = Truecaser.build([["Ein", "Hund", "im", "Park"], ["Der", "Hund", "läuft"], ["Hund", "und", "Katze"]])
    assert truecaser(["ein", "hund", "läuft", "im", "park"]) == ["Ein", "Hund", "läuft", "im", "Park"]
    assert truecaser([]) == []


@pytest.mark.parametrize("tokens,text", [
    (["Ein", "Hund", ",", "der", "läuft", "."], "Ein Hund, der läuft."),
    (["A", "dog", "'s", "ball", "(", "red", ")", "!"], "A dog's ball (red)!"),
    (["He", "says", '"', "hi", '"', "."], 'He says "hi".'),
    (["l'", "homme", "marche"], "l'homme marche"),
    ([], ""),
])
def test_detokenize(tokens, text):
    assert detokenize(tokens) == text


def test_character_tokenizer_shows_spaces_and_round_trips():
    chars = Tokenizer("chars")
    assert chars("Ab  c") == ["a", "b", "▁", "c"]
    assert chars.detokenize(chars("hello world")) == "hello world"
    assert chars.tokenize_all(["ab", ""]) == [["a", "b"], []]
    assert Truecaser({}, capitalize_first=False)(["a", "b"]) == ["a", "b"]


def test_bpe_learns_the_most_frequent_pairs_first():
    # Sennrich et al.'s example: "es" (9 times), then "est" at a word's end (9), then "lo" (7).
    counts = Counter({"low": 5, "lower": 2, "newest": 6, "widest": 3})
    bpe = BPE.learn(counts, 3)
    assert bpe.merges == [("e", "s"), ("es", "t</w>"), ("l", "o")]
    assert bpe.split(["lowest", "low"]) == ["lo@@", "w@@", "est", "lo@@", "w"]
    # Then ties at 6 (the smaller pair first) until no pair occurs 6 times.
    assert BPE.learn(counts, 100, min_count=6).merges[3:] == [("e", "w"), ("ew", "est</w>"), ("n", "ewest</w>")]


def test_bpe_learning_matches_counting_every_pair_again_after_each_merge():
    counts = Counter(Tokenizer("de")("Ein Hund läuft durch den Schnee, zwei Hunde laufen durch die Stadt, "
                                     "die Hündin spielt im Schnee mit einem Schneeball.") * 3)
    fast = BPE.learn(counts, 40, min_count=2)
    words = {word: [*word[:-1], word[-1] + "</w>"] for word in counts}
    slow = []
    for _ in range(40):
        pairs = Counter()
        for word, symbols in words.items():
            for pair in zip(symbols, symbols[1:]):
                pairs[pair] += counts[word]
        if not pairs:
            break
        best = min(pairs, key=lambda pair: (-pairs[pair], pair))
        if pairs[best] < 2:
            break
        slow.append(best)
        words = {word: _merge_pair(symbols, best) for word, symbols in words.items()}
    assert fast.merges == slow


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(st.characters(blacklist_characters="@", blacklist_categories=("Cs",)), min_size=1,
                        max_size=12), max_size=8))
def test_bpe_pieces_join_back_into_the_words(words):
    bpe = BPE.learn(Counter(["hundeleine", "hunde", "leine", "schnee", "schneeball"] * 3 + words), 30)
    pieces = bpe.split(words)
    assert join_pieces(pieces) == words
    assert all(piece.endswith("@@") for word in words for piece in bpe.segment(word)[:-1])


def test_tokenizer_with_bpe_gives_pieces_and_joins_them_for_display():
    bpe = BPE.learn(Counter({"hund": 5, "hunde": 4, "leine": 4, "ball": 3}), 20)
    tokenizer = Tokenizer("de", bpe=bpe)
    pieces = tokenizer("Eine Hundeleine, ein Ball.")
    assert len(pieces) > len(tokenizer.words_all(["Eine Hundeleine, ein Ball."])[0])
    assert tokenizer.words(pieces) == ["eine", "hundeleine", ",", "ein", "ball", "."]
    assert tokenizer.tokenize_all(["Eine Hundeleine, ein Ball."]) == [pieces]
    with pytest.raises(ValueError, match="characters"):
        Tokenizer("chars", bpe=bpe)
    with pytest.raises(ValueError, match="pairs"):
        BPE([["a"]])
