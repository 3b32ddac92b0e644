"""Property tests (hypothesis): tokenization and vocabulary round trips, decoding invariants on any input."""

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attention_inspector.model.nets.decoding import output_limit
from attention_inspector.model.nets.tracing import greedy_trace
from attention_inspector.model.nets.transformer import Transformer
from attention_inspector.model.text.vocab import EOS_ID, SPECIALS, UNK_ID, Tokenizer, Vocab, detokenize
from tests.conftest import tiny_config

WORDS = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12)
VOCAB = Vocab(list(SPECIALS) + ["a", "dog", "runs", ".", "ein", "hund", "läuft", "'s", "(", ")", '"'])
TOKENIZER = Tokenizer("en")
torch.manual_seed(0)
MODEL = Transformer(tiny_config(src_vocab_size=len(VOCAB))).eval()


@given(st.lists(st.sampled_from(VOCAB.itos[len(SPECIALS):]), max_size=30))
def test_known_tokens_round_trip_through_ids(tokens):
    assert VOCAB.decode(VOCAB.encode(tokens)) == tokens


@given(st.lists(WORDS, max_size=20))
def test_unknown_tokens_become_unk_and_nothing_else_changes(tokens):
    ids = VOCAB.encode(tokens)
    assert all((i == UNK_ID) == (t not in VOCAB) for t, i in zip(tokens, ids))


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.text(max_size=300))
def test_tokenizer_accepts_any_text(text):
    tokens = TOKENIZER(text)
    assert all(t and not t.isspace() and t == t.lower() for t in tokens)


@given(st.lists(WORDS, max_size=20))
def test_detokenize_keeps_every_token_in_order(tokens):
    text = detokenize(tokens)
    position = 0
    for token in tokens:  # str.index raises if a token is lost or out of order
        position = text.index(token, position) + len(token)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(4, len(VOCAB) - 1), min_size=1, max_size=20), st.integers(1, 12))
def test_decoding_invariants(src_ids, max_len):
    trace = greedy_trace(MODEL, src_ids + [EOS_ID], max_len=max_len, top_k=3)
    steps, sources = len(trace), len(src_ids) + 1
    assert 1 <= steps <= output_limit(MODEL, sources, max_len)
    assert EOS_ID not in trace.token_ids[:-1]
    assert np.all((trace.probabilities >= 0) & (trace.probabilities <= 1))
    assert np.all(np.diff(trace.top_probabilities, axis=1) <= 1e-7)
    np.testing.assert_allclose(trace.encoder_attention.sum(-1), 1, atol=1e-5)
    np.testing.assert_allclose(trace.decoder_attention.sum(-1), 1, atol=1e-5)
    np.testing.assert_allclose(trace.cross_attention.sum(-1), 1, atol=1e-5)
    assert trace.cross_attention.shape[-2:] == (steps, sources)
    assert np.all(np.triu(trace.decoder_attention, k=1) == 0)
