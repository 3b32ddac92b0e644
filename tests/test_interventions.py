"""Interventions and what value-aware measures need, on both architectures: head gates, forced prefixes,
per-head value vectors and residual streams, and the cache that makes a step cheap."""

import copy

import numpy as np
import pytest
import torch

from attention_inspector.model.nets.decoding import next_token_logits, teacher_forced_log_probs
from attention_inspector.model.nets.rnn import RNNConfig, RNNSeq2Seq
from attention_inspector.model.nets.seq2seq import CROSS, DECODER, ENCODER, HeadGates, head_gates
from attention_inspector.model.nets.tracing import greedy_trace
from attention_inspector.model.nets.transformer import Transformer
from attention_inspector.model.serving.checkpoint import load_checkpoint
from attention_inspector.model.serving.translator import InputError
from attention_inspector.model.text.batching import pad
from attention_inspector.model.text.vocab import EOS_ID, PAD_ID, SOS_ID
from tests.conftest import SHIPPED, model_rounding, tiny_config

SRC_IDS = [5, 6, 7, 8, 9, EOS_ID]
TRACE_FIELDS = ("probabilities", "top_ids", "top_probabilities", "encoder_attention", "decoder_attention",
                "cross_attention")


@pytest.fixture(autouse=True)
def no_grad():
    with torch.no_grad():
        yield


def transformer(norm="post", positional="sinusoidal"):
    torch.manual_seed(0)
    return Transformer(tiny_config(norm=norm, positional=positional)).eval()


def rnn(heads=4):
    torch.manual_seed(0)
    return RNNSeq2Seq(RNNConfig(src_vocab_size=23, tgt_vocab_size=29, embedding_dim=16, hidden_size=32,
                                n_heads=heads, dropout=0.0)).eval()


MODELS = {"post-LN sinusoidal": lambda: transformer("post", "sinusoidal"),
          "post-LN learned": lambda: transformer("post", "learned"),
          "pre-LN sinusoidal": lambda: transformer("pre", "sinusoidal"),
          "pre-LN learned": lambda: transformer("pre", "learned"),
          "GRU dot-product": lambda: rnn(1), "GRU 4 heads": lambda: rnn(4)}


def assert_same_trace(a, b):
    assert a.token_ids == b.token_ids
    for field in TRACE_FIELDS:
        x, y = getattr(a, field), getattr(b, field)
        assert (x is None) == (y is None), field
        if x is not None:
            assert np.array_equal(x, y), field  # bit for bit


@pytest.mark.parametrize("name", MODELS)
def test_cached_trace_equals_full_recomputation(name):
    model = MODELS[name]()
    trace = greedy_trace(model, SRC_IDS, max_len=8)
    logits, maps = model(torch.tensor([SRC_IDS]), torch.tensor([trace.decoder_input_ids]), need_weights=True)
    logits[..., [PAD_ID, SOS_ID]] = float("-inf")
    assert logits[0].argmax(-1).tolist() == trace.token_ids
    # Step by step with a cache or in one pass, the sums in other orders: probabilities and weights (at most 1) within
    # the model's rounding (tests/conftest.py), for these sequences of at most 9 tokens.
    rounding = model_rounding(model.config, length=len(trace.decoder_input_ids) + len(SRC_IDS))
    np.testing.assert_allclose(trace.probabilities, logits[0].softmax(-1).max(-1).values.numpy(), atol=rounding)
    np.testing.assert_allclose(trace.cross_attention, maps.cross[:, 0].numpy(), atol=rounding)
    if maps.encoder is not None:
        np.testing.assert_allclose(trace.encoder_attention, maps.encoder[:, 0].numpy(), atol=rounding)
        np.testing.assert_allclose(trace.decoder_attention, maps.decoder[:, 0].numpy(), atol=rounding)


def attention_modules(model, kind):
    """The MultiHeadAttention of each layer of `kind`."""
    if not isinstance(model, Transformer):
        return [model.cross_attention]
    layers = model.encoder_layers if kind == ENCODER else model.decoder_layers
    return [layer.cross_attention if kind == CROSS else layer.self_attention for layer in layers]


@pytest.mark.parametrize("name", MODELS)
def test_open_gates_change_nothing_and_closing_a_head_zeroes_its_columns_of_w_o(name):
    model = MODELS[name]()
    plain = greedy_trace(model, SRC_IDS, max_len=8)
    assert head_gates(model, []) is None
    open_gates = HeadGates(**{kind: torch.ones(shape) for kind, shape in model.heads().items()})
    assert_same_trace(plain, greedy_trace(model, SRC_IDS, max_len=8, gates=open_gates))
    # Closing head h of a layer computes what the model computes with W_O's columns for head h set to zero:
    # here the last head of the last layer of every kind.
    closed = [f"{kind}.{layers}.{heads}" for kind, (layers, heads) in model.heads().items()]
    without = copy.deepcopy(model)
    for kind in model.heads():
        module = attention_modules(without, kind)[-1]
        module.w_o.weight[:, -module.d_head:] = 0
    gated = greedy_trace(model, SRC_IDS, max_len=8, gates=head_gates(model, closed))
    assert_same_trace(greedy_trace(without, SRC_IDS, max_len=8), gated)
    assert not np.array_equal(gated.probabilities[:1], plain.probabilities[:1])  # and that head mattered


def attention_output(model, module, src, tgt, **options):
    """What `module` (a MultiHeadAttention) returned over all positions during one teacher-forced pass."""
    outputs = []
    hook = module.register_forward_hook(lambda _module, _args, out: outputs.append(out[0]))
    try:
        _, maps = model(src, tgt, **options)
    finally:
        hook.remove()
    return torch.cat(outputs, 1)[0], maps  # the GRU attends once per step


@pytest.mark.parametrize("name", MODELS)
def test_a_closed_gate_removes_exactly_that_heads_output(name):
    """A layer's attention output is b_O + Σ_h Σ_j α_ij^h f_h(x_j) with the recorded value vectors f_h(x_j);
    closing head h's gate removes its term and nothing else."""
    model = MODELS[name]()
    src, tgt = torch.tensor([SRC_IDS]), torch.tensor([[SOS_ID, 11, 12, 13]])
    layers, heads = model.heads()[CROSS]
    module = model.decoder_layers[-1].cross_attention if isinstance(model, Transformer) else model.cross_attention
    full, maps = attention_output(model, module, src, tgt, need_vectors=True)
    gated, _ = attention_output(model, module, src, tgt, gates=head_gates(model, [f"cross.{layers}.{heads}"]))
    per_head = torch.einsum("hts,hsd->htd", maps.cross[-1, 0], maps.cross_values[-1, 0])  # (H, T, d_model)
    torch.testing.assert_close(full, per_head.sum(0) + module.w_o.bias, atol=1e-5, rtol=1e-5)
    # The GRU's later steps read the gated output through their recurrent state, so only its first step compares.
    same_weights = slice(None) if isinstance(model, Transformer) else slice(0, 1)
    torch.testing.assert_close(gated[same_weights], (per_head[:-1].sum(0) + module.w_o.bias)[same_weights],
                               atol=1e-5, rtol=1e-5)


def test_residual_streams_are_the_layers_inputs_and_outputs():
    model = transformer("post", "sinusoidal")
    src, tgt = torch.tensor([SRC_IDS]), torch.tensor([[SOS_ID, 11, 12, 13]])
    _, maps = model(src, tgt, need_vectors=True)
    assert maps.encoder_stream.shape == (2, 1, 3, len(SRC_IDS), 32)
    assert maps.decoder_stream.shape == (2, 1, 4, 4, 32)
    # Each layer reads what the previous one wrote; the first reads the embeddings.
    torch.testing.assert_close(maps.encoder_stream[1, :, 0], maps.encoder_stream[0, :, -1])
    torch.testing.assert_close(maps.encoder_stream[0, :, 0], model.src_embedding(src))
    memory, _, _ = model.encode(src)
    torch.testing.assert_close(maps.encoder_stream[-1, :, -1], memory)
    # Post-LN: after self-attention, the stream is LayerNorm(stream + b_O + Σ_h Σ_j α f_h(x_j)).
    layer = model.encoder_layers[0]
    attended = (maps.encoder_stream[0, 0, 0] + layer.self_attention.w_o.bias
                + torch.einsum("hqs,hsd->qd", maps.encoder[0, 0], maps.encoder_values[0, 0]))
    torch.testing.assert_close(layer.attention_block.norm(attended), maps.encoder_stream[0, 0, 1], atol=1e-5, rtol=1e-5)


def test_weights_and_vectors_are_recorded_only_on_request(tiny_model):
    src, tgt = torch.tensor([SRC_IDS]), torch.tensor([[SOS_ID, 11]])
    logits, nothing = tiny_model(src, tgt)
    assert nothing is None
    recorded, maps = tiny_model(src, tgt, need_weights=True)
    assert maps.encoder_values is None and maps.decoder_stream is None
    assert torch.equal(recorded, logits)  # recording changes nothing that is computed
    # The recorded weights are softmax(Q K^T / sqrt(d_head)) of the first encoder layer, computed here by hand.
    attention = tiny_model.encoder_layers[0].self_attention
    x = tiny_model.encoder_layers[0].attention_block.sublayer_input(tiny_model.src_embedding(src))
    queries, keys = attention.split_heads(attention.w_q(x)), attention.split_heads(attention.w_k(x))
    expected = (queries @ keys.transpose(-2, -1) / attention.d_head ** 0.5).softmax(-1)  # (1, H, S, S)
    torch.testing.assert_close(maps.encoder[0], expected)


def test_next_token_logits_leaves_its_input_alone():
    logits = torch.randn(2, 3, 7)
    before = logits.clone()
    chosen = next_token_logits(logits)
    assert torch.equal(logits, before)
    assert torch.isinf(chosen[:, [PAD_ID, SOS_ID]]).all() and torch.equal(chosen[:, 4:], before[:, -1, 4:])


@pytest.mark.parametrize("name", ["post-LN sinusoidal", "GRU 4 heads"])
def test_forced_prefix_then_greedy_continuation(name):
    model = MODELS[name]()
    force = [20, 21, 22]
    trace = greedy_trace(model, SRC_IDS, max_len=10, force=force)
    assert trace.token_ids[:3] == force and trace.forced == 3
    # Teacher-forced on the whole output, the model's own choice after the prefix is what the trace chose,
    # and the forced steps record the model's own probability of the forced token.
    logits, _ = model(torch.tensor([SRC_IDS]), torch.tensor([trace.decoder_input_ids]))
    logits[..., [PAD_ID, SOS_ID]] = float("-inf")
    probabilities = logits[0].softmax(-1)
    assert probabilities[3:].argmax(-1).tolist() == trace.token_ids[3:]
    expected = probabilities[torch.arange(len(trace)), torch.tensor(trace.token_ids)]
    rounding = model_rounding(model.config, length=len(trace.decoder_input_ids) + len(SRC_IDS))  # as above
    np.testing.assert_allclose(trace.probabilities, expected.numpy(), atol=rounding)
    assert (trace.top_ids[:, 0] == probabilities.argmax(-1).numpy()).all()


@pytest.mark.parametrize("name", ["post-LN sinusoidal", "pre-LN learned", "GRU 4 heads"])
def test_teacher_forced_scores_of_a_greedy_output_are_its_trace_probabilities(name):
    model = MODELS[name]()
    layers, heads = model.heads()[CROSS]
    for gates in (None, head_gates(model, [f"cross.{layers}.1", f"cross.1.{heads}"])):
        trace = greedy_trace(model, SRC_IDS, max_len=8, gates=gates)
        log_probs = teacher_forced_log_probs(model, SRC_IDS, trace.token_ids, gates)
        rounding = model_rounding(model.config, length=len(trace.decoder_input_ids) + len(SRC_IDS))  # as above
        np.testing.assert_allclose(np.exp(log_probs), trace.probabilities, rtol=0, atol=rounding)


def test_head_names_are_checked_against_the_model(tiny_model):
    gates = head_gates(tiny_model, ["cross.2.4", "encoder.1.1", "cross.1.2"])
    assert gates.decoder is None
    assert gates.cross.tolist() == [[1, 0, 1, 1], [1, 1, 1, 0]] and gates.encoder[0].tolist() == [0, 1, 1, 1]
    for bad, message in [("cross.3.1", "layers 1-2"), ("cross.1.5", "heads 1-4"), ("cross.0.1", "layers 1-2"),
                         ("self.1.1", "no 'self' attention"), ("cross-1-1", "not a head name"),
                         ("cross.1", "not a head name"), ("cross.one.1", "not a head name")]:
        with pytest.raises(ValueError, match=message):
            head_gates(tiny_model, [bad])
    with pytest.raises(ValueError, match="no 'encoder' attention"):
        head_gates(rnn(), ["encoder.1.1"])
    assert rnn().heads() == {CROSS: (1, 4)} and tiny_model.heads() == {ENCODER: (2, 4), DECODER: (2, 4), CROSS: (2, 4)}


def test_gru_cache_keeps_cross_keys_and_select_reorders_them():
    model = rnn(2)
    src = pad([[5, 6, 7, EOS_ID], [8, EOS_ID]])
    memory, src_mask, _ = model.encode(src)
    cache = model.new_cache()
    model.decode(torch.tensor([[SOS_ID], [SOS_ID]]), memory, src_mask, cache)
    keys = cache[0].cross_keys
    assert keys.shape == (2, 2, 4, 16)
    model.decode(torch.tensor([[9], [10]]), memory, src_mask, cache)
    assert cache[0].cross_keys is keys  # computed once per sentence, not per step
    swapped = cache[0].select(torch.tensor([1, 0]))
    assert torch.equal(swapped.cross_keys, keys.flip(0)) and torch.equal(swapped.hidden, cache[0].hidden.flip(0))


@pytest.fixture(scope="module")
def en_de():
    return load_checkpoint(SHIPPED / "en-de")


def test_masking_every_cross_head_cuts_the_translation_off_from_the_source(en_de):
    every_cross_head = [f"cross.{layer}.{head}" for layer in range(1, 4) for head in range(1, 9)]
    a = en_de.trace("A dog runs in the park.", mask=every_cross_head)
    b = en_de.trace("Two women are cooking dinner in a small kitchen.", mask=every_cross_head)
    assert a.target_tokens == b.target_tokens
    np.testing.assert_array_equal(a.trace.probabilities, b.trace.probabilities)
    assert en_de.trace("A dog runs in the park.").target_tokens != a.target_tokens


def test_translator_forces_a_prefix_spelled_as_its_target_tokens(en_de):
    plain = en_de.trace("A dog runs in the park.")
    forced = en_de.trace("A dog runs in the park.", force=["ein", "kleiner"])
    assert forced.target_tokens[:2] == ["ein", "kleiner"] and forced.trace.forced == 2
    assert forced.text.startswith("Ein kleiner") and plain.trace.forced == 0
    assert en_de.trace("A dog runs in the park.", force=plain.target_tokens).target_tokens == plain.target_tokens


def test_translator_scores_a_given_translation(en_de):
    plain = en_de.trace("A dog runs in the park.")
    scored = en_de.score("A dog runs in the park.", plain.target_tokens)
    # Scored in one pass, decoded step by step: probabilities within en-de's rounding (tests/conftest.py).
    np.testing.assert_allclose(np.exp(scored.log_probabilities), plain.trace.probabilities, rtol=0,
                               atol=model_rounding(en_de.model.config))
    assert scored.target_tokens == plain.target_tokens and scored.source_tokens == plain.source_tokens
    # Without its cross-attention the model finds its own translation far less likely.
    blind = en_de.score("A dog runs in the park.", plain.target_tokens, mask=[f"cross.3.{h}" for h in range(1, 9)])
    assert blind.total < scored.total - 1
    other = en_de.score("A dog runs in the park.", ["eine", "katze", "schläft", ".", "<eos>"])
    assert other.total < scored.total
    for target, message in [([], "list is empty"), (["katzenhund☃"], "Target token 'katzenhund☃' is not in"),
                            (["<sos>"], "never emitted"), ("hund", "list of strings")]:
        with pytest.raises(InputError, match=message):
            en_de.score("A dog.", target)


@pytest.mark.parametrize("force,mask,message", [
    (["hündchen☃"], None, "'hündchen☃' is not in the target vocabulary, nor can the model spell it"),
    (["<pad>"], None, "never emitted"),
    (["<eos>", "hund"], None, "can only be the last"),
    (["hund"] * 200, None, "may have at most"),
    ("hund", None, "force must be a list of strings"),
    ([3], None, "list of strings; it holds 3"),
    (None, ["cross.9.1"], "cross.9.1"),
    (None, "cross.1.1", "mask must be a list of strings"),
    (None, [None], "list of strings; it holds None"),
    (["\ud800"], None, "lone surrogate"),
])
def test_translator_rejects_bad_interventions_by_name(en_de, force, mask, message):
    with pytest.raises(InputError, match=message):
        en_de.trace("A dog runs.", force=force, mask=mask)
