"""Continuous batching of traces (model/nets/tracing.py `TraceBatch`, model/nets/step_decoder.py `StepDecoder`): every
sentence's trace is what a lone `greedy_trace` records, whatever joins or leaves the batch around it.

The step decoder multiplies by its weights in another layout than the modules (transposed, queries pre-scaled),
and in a batch a matrix product of B rows is blocked differently from B products of one row, so the float32
numbers differ in their last bits: the choices and the candidates must be the same, every recorded number the same
to the rounding of the model's sums added in another order (`rounding`, from the model's size: 3.2e-5 for the tiny
models, 1.1e-4 for en-de, where 2.2e-6 was the largest gap seen on an AMD EPYC, an Intel Xeon and emulated SSE4.2
kernels).
"""

from pathlib import Path

import numpy as np
import pytest
import torch

from attention_inspector.model.nets.seq2seq import head_gates
from attention_inspector.model.nets.tracing import TraceBatch, TraceRequest, greedy_trace
from attention_inspector.model.nets.transformer import Transformer
from attention_inspector.model.text.vocab import EOS_ID
from tests.conftest import T5_LIKE, model_rounding, tiny_config

# Sources of mixed lengths (ids of the tiny vocabulary, ending with <eos>).
SOURCES = [[5, 6, 7, EOS_ID], [8, 9, 10, 11, 12, 13, 14, 15, 16, EOS_ID], [17, EOS_ID], [18, 5, 9, 20, 6, EOS_ID]]
FIELDS = ("probabilities", "top_probabilities", "encoder_attention", "decoder_attention", "cross_attention")


def rounding(model) -> float:
    """How far two float32 decodings of a sentence by `model` may differ in a number of size 1 (a probability, an
    attention weight, the normed stream) when they add their sums in other orders (tests/conftest.py)."""
    return model_rounding(model.config)


def assert_close_traces(batched, alone, model):
    """The same choices and candidates, and every recorded number (probabilities and attention weights, at most 1)
    within `model`'s rounding."""
    assert batched.token_ids == alone.token_ids and batched.forced == alone.forced
    np.testing.assert_array_equal(batched.top_ids, alone.top_ids)
    for field in FIELDS:
        assert getattr(batched, field).shape == getattr(alone, field).shape, field
        np.testing.assert_allclose(getattr(batched, field), getattr(alone, field), rtol=0, atol=rounding(model),
                                   err_msg=field)


def model_with(eos_nudge: float = 2.0, **overrides) -> Transformer:
    """An untrained tiny model; `eos_nudge` raises <eos> so that its outputs end at different lengths."""
    torch.manual_seed(1)
    model = Transformer(tiny_config(**overrides)).eval()
    with torch.no_grad():
        model.generator.bias[EOS_ID] += eos_nudge
    return model


@pytest.mark.parametrize("overrides", [{}, {"norm": "pre"}, {"positional": "learned"}, T5_LIKE])
def test_one_sentence_alone_is_the_module_trace(overrides):
    model = model_with(**overrides)
    for src_ids in SOURCES:
        batch = TraceBatch(model)
        ticket = batch.add(TraceRequest(src_ids, top_k=3, max_len=12))
        assert_close_traces(batch.run()[ticket], greedy_trace(model, src_ids, max_len=12, top_k=3), model)


@pytest.mark.parametrize("overrides", [{}, {"norm": "pre"}, T5_LIKE])
def test_sentences_joining_mid_decode_get_their_lone_traces(overrides):
    """Arrivals at steps 0, 0, 2 and 5, of mixed lengths, leaving at different steps (length limits 4 to 15)."""
    model = model_with(eos_nudge=0.0, **overrides)
    batch = TraceBatch(model)
    arrivals = {0: [0, 1], 2: [2], 5: [3]}
    limits = [15, 4, 9, 12]
    tickets, finished, sizes = {}, {}, []
    for step in range(40):
        for index in arrivals.get(step, []):
            tickets[index] = batch.add(TraceRequest(SOURCES[index], top_k=4, max_len=limits[index]))
        if not len(batch) and step > max(arrivals):
            break
        finished.update(batch.step())
        sizes.append(len(batch.rows))
    assert max(sizes) >= 3  # they really were decoded together
    lengths = {len(finished[tickets[i]].token_ids) for i in tickets}
    assert len(lengths) > 1  # and left at different steps
    for index, ticket in tickets.items():
        assert_close_traces(finished[ticket], greedy_trace(model, SOURCES[index], max_len=limits[index], top_k=4),
                            model)


def test_forced_prefixes_and_switched_off_heads_stay_with_their_own_sentence():
    model = model_with()
    off = head_gates(model, ["cross.1.2", "decoder.2.1", "encoder.1.3"])
    requests = [TraceRequest(SOURCES[0], force=[7, 8], max_len=10), TraceRequest(SOURCES[1], gates=off, max_len=10),
                TraceRequest(SOURCES[2], max_len=10), TraceRequest(SOURCES[3], force=[9], gates=off, max_len=10)]
    batch = TraceBatch(model)
    tickets = [batch.add(request) for request in requests]
    traces = batch.run()
    for ticket, request in zip(tickets, requests):
        alone = greedy_trace(model, request.src_ids, max_len=10, force=request.force, gates=request.gates)
        assert_close_traces(traces[ticket], alone, model)
    assert traces[tickets[0]].token_ids[:2] == [7, 8] and traces[tickets[0]].forced == 2


def test_a_batch_is_empty_after_its_sentences_finish_and_can_be_used_again():
    model = model_with()
    batch = TraceBatch(model)
    first = batch.add(TraceRequest(SOURCES[1], max_len=6))
    assert len(batch) == 1 and len(batch.run()[first].token_ids) <= 6 and len(batch) == 0
    second = batch.add(TraceRequest(SOURCES[0], max_len=6))
    assert_close_traces(batch.run()[second], greedy_trace(model, SOURCES[0], max_len=6), model)


def test_the_shipped_model_traces_sixteen_sentences_together_as_alone():
    """The real en-de checkpoint, 16 different sentences at once, joined in two waves."""
    from attention_inspector.model.serving.checkpoint import load_checkpoint
    from tests.conftest import SHIPPED
    translator = load_checkpoint(SHIPPED / "en-de")
    texts = ["A dog runs in the park.", "Two men are playing soccer on a green field.", "A child eats.",
             "A woman in a red dress is walking down the street with her small brown dog.", "People sit.",
             "A man is riding a bicycle.", "Three girls are laughing at a joke.", "An old man reads a newspaper.",
             "A boy jumps into the lake from a wooden dock on a sunny afternoon.", "A cat sleeps on a sofa.",
             "Workers repair the road.", "A band plays music on a stage in front of a large crowd at night.",
             "Two dogs fight over a stick.", "A girl paints a picture.", "The chef cooks.",
             "A group of tourists takes photographs of an old church in the city centre."]
    requests = [translator.trace_request(text)[1] for text in texts]
    batch = translator.trace_batch()
    tickets = [batch.add(request) for request in requests[:10]]
    finished = {}
    for _ in range(3):
        finished.update(batch.step())
    tickets += [batch.add(request) for request in requests[10:]]
    finished.update(batch.run())
    for ticket, request in zip(tickets, requests):
        assert_close_traces(finished[ticket], greedy_trace(translator.model, request.src_ids), translator.model)


@pytest.mark.parametrize("overrides", [{}, {"norm": "pre"}, T5_LIKE])
def test_the_vectors_a_trace_records_are_those_of_a_teacher_forced_pass_of_its_tokens(overrides):
    """`TraceRequest.vectors`: every weight, value vector and point of the residual stream the decoding went
    through is what a teacher-forced pass over its tokens records with `need_vectors`, for sentences decoded
    together (one with a forced prefix, one with heads off) and joining at different steps; the trace itself is
    the one recorded without."""
    model = model_with(eos_nudge=0.0, **overrides)
    off = head_gates(model, ["cross.1.2", "decoder.2.1", "encoder.1.3"])
    requests = [TraceRequest(SOURCES[0], force=[7, 8], max_len=10, vectors=True),
                TraceRequest(SOURCES[1], gates=off, max_len=7, vectors=True),
                TraceRequest(SOURCES[2], max_len=10), TraceRequest(SOURCES[3], max_len=12, vectors=True)]
    batch = TraceBatch(model)
    tickets = [batch.add(request) for request in requests[:3]]
    finished = batch.step()
    tickets.append(batch.add(requests[3]))
    traces = {**dict(finished), **batch.run()}
    for ticket, request in zip(tickets, requests):
        trace = traces[ticket]
        assert_close_traces(trace, greedy_trace(model, request.src_ids, max_len=request.max_len,
                                                force=request.force, gates=request.gates), model)
        if not request.vectors:
            assert trace.vectors is None
            continue
        with torch.inference_mode():
            _, taught = model(torch.tensor([request.src_ids]), torch.tensor([trace.decoder_input_ids]),
                              gates=request.gates, need_vectors=True)
        for field in ("encoder", "decoder", "cross", "encoder_values", "decoder_values", "cross_values",
                      "encoder_stream", "decoder_stream"):
            mine, theirs = getattr(trace.vectors, field), getattr(taught, field)
            assert mine.shape == theirs.shape, field
            # Values and the residual stream are not bounded by 1: relative to their own size, of size 1 at least.
            torch.testing.assert_close(mine, theirs, rtol=rounding(model), atol=rounding(model), msg=field)


def storages(tensors) -> dict[int, int]:
    """The distinct memory behind `tensors`: each storage's address and size in bytes."""
    return {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}


def test_a_served_model_holds_its_decoder_weights_once():
    """The step decoder's fused weights are the model's own (its linear maps view them, tied weights stay tied):
    the model and its step decoder together hold no more memory than the model's parameters."""
    from attention_inspector.model.nets.step_decoder import StepDecoder
    from attention_inspector.model.serving.checkpoint import load_checkpoint

    translator = load_checkpoint(Path(__file__).resolve().parent.parent / "checkpoints" / "en-de")
    model, step = translator.model, translator.step_decoder
    parameters = sum(p.numel() * p.element_size() for p in model.parameters())
    fused = [t for layer in step.layers for pair in (layer.self_qkv, layer.self_out, layer.cross_query,
                                                     layer.cross_key_value, layer.cross_out, layer.feed_forward_in,
                                                     layer.feed_forward_out) for t in pair]
    held = storages([*model.parameters(), *fused, *step.generator, step.token_table])
    assert sum(held.values()) <= parameters
    assert model.generator.weight is model.tgt_embedding.tokens.weight  # still tied
    # A model being trained keeps its own parameters (an optimizer and DDP hold them), even while it is in eval
    # mode for a validation pass: a step decoder built for it (a `TraceBatch`'s) copies.
    before = [id(p) for p in model.parameters()]
    StepDecoder(model)
    assert [id(p) for p in model.parameters()] == before
