"""spaCy rule-based tokenization, vocabularies, truecasing and detokenization."""

import pytest

from model.vocab import SPECIALS, UNK_ID, Tokenizer, Truecaser, Vocab, detokenize


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
