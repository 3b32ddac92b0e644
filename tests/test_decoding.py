"""Batched beam search: independent of batching and padding, and beam size 1 is greedy."""

import pytest
import torch

from attention_inspector.model.nets.decoding import beam_search, greedy_decode, output_limit
from attention_inspector.model.text.batching import pad
from attention_inspector.model.text.vocab import EOS_ID, PAD_ID, SOS_ID

SOURCES = [[5, 6, 7, EOS_ID], [8, 9, 10, 11, 12, 13, EOS_ID], [14, EOS_ID]]


def sequence_log_probability(model, src_ids, tgt_ids):
    """Sum of log-probabilities the model gives `tgt_ids` followed by <eos>."""
    src = torch.tensor([src_ids])
    tgt_in = torch.tensor([[SOS_ID] + tgt_ids])
    logits, _ = model(src, tgt_in)
    logits[..., [PAD_ID, SOS_ID]] = float("-inf")
    log_probs = logits[0].log_softmax(-1)
    return sum(log_probs[i, t].item() for i, t in enumerate(tgt_ids + [EOS_ID]))


@pytest.fixture
def eos_prone_model(tiny_model):
    """The untrained tiny model nudged towards <eos>, so hypotheses end at different lengths."""
    with torch.no_grad():
        tiny_model.generator.bias[EOS_ID] += 1.5
    return tiny_model


def test_beam_of_one_is_greedy(tiny_model):
    src = pad(SOURCES)
    assert beam_search(tiny_model, src, beam_size=1, max_len=10) == greedy_decode(tiny_model, src, max_len=10)


@pytest.mark.parametrize("nudge", [0.0, 1.5])
def test_batched_beam_search_equals_one_sentence_at_a_time(tiny_model, nudge):
    with torch.no_grad():
        tiny_model.generator.bias[EOS_ID] += nudge
    batched = beam_search(tiny_model, pad(SOURCES), beam_size=4, max_len=10)
    alone = [beam_search(tiny_model, torch.tensor([s]), beam_size=4, max_len=10)[0] for s in SOURCES]
    assert batched == alone


def test_beam_search_finds_a_more_likely_translation_than_greedy(eos_prone_model):
    model = eos_prone_model
    gains = []
    for src_ids in SOURCES:
        src = torch.tensor([src_ids])
        greedy = greedy_decode(model, src, max_len=10)[0]
        beam = beam_search(model, src, beam_size=8, max_len=10, length_penalty=0.0)[0]
        gains.append(sequence_log_probability(model, src_ids, beam) - sequence_log_probability(model, src_ids, greedy))
    assert min(gains) >= -1e-4 and max(gains) > 1.0


def test_output_limit_respects_the_models_positions(tiny_model):
    assert output_limit(tiny_model, 5) == 20
    assert output_limit(tiny_model, 50) == tiny_model.config.max_len - 1
    assert output_limit(tiny_model, 5, max_len=3) == 3
