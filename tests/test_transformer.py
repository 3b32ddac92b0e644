"""The network: attention maps are distributions, masks hold, fused and inspection paths agree."""

import pytest
import torch

from attention_inspector.model.nets.decoding import greedy_decode
from attention_inspector.model.nets.positions import relative_buckets
from attention_inspector.model.nets.tracing import greedy_trace
from attention_inspector.model.nets.transformer import LayerCache, ModelConfig, Transformer, attention
from attention_inspector.model.text.vocab import EOS_ID, PAD_ID, SOS_ID
from tests.conftest import T5_LIKE, model_rounding, tiny_config


def logits_rounding(model, logits: torch.Tensor) -> float:
    """How far two float32 computations of `logits` may be apart with their sums in other orders (padded or alone,
    fused or not, cached or whole): the model's rounding (tests/conftest.py) at the logits' size."""
    return model_rounding(model.config, scale=float(logits.detach().abs().max()))


def padded_batch():
    """Two sources and targets, the second of each padded."""
    src = torch.tensor([[5, 6, 7, 8, EOS_ID], [9, 10, EOS_ID, PAD_ID, PAD_ID]])
    tgt = torch.tensor([[SOS_ID, 11, 12, 13], [SOS_ID, 14, PAD_ID, PAD_ID]])
    return src, tgt


def test_attention_function_returns_normalised_weights():
    q, k, v = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 5, 8), torch.randn(2, 3, 5, 8)
    out, weights = attention(q, k, v)
    assert out.shape == (2, 3, 4, 8) and weights.shape == (2, 3, 4, 5)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, 4))
    torch.testing.assert_close(out, weights @ v)


def test_every_attention_row_sums_to_one(tiny_model):
    src, tgt = padded_batch()
    _, maps = tiny_model(src, tgt, need_weights=True)
    assert maps.encoder.shape == (2, 2, 4, 5, 5)  # (L, B, H, S, S)
    assert maps.decoder.shape == (2, 2, 4, 4, 4)
    assert maps.cross.shape == (2, 2, 4, 4, 5)
    for weights in (maps.encoder, maps.decoder, maps.cross):
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))


def test_decoder_self_attention_is_causal(tiny_model):
    src, tgt = padded_batch()
    _, maps = tiny_model(src, tgt, need_weights=True)
    future = torch.ones(4, 4, dtype=torch.bool).triu(1)
    assert maps.decoder[..., future].abs().max() == 0
    assert maps.decoder[:, 0][..., ~future].min() > 0  # the unpadded sentence: every allowed key is used
    # Changing a later target token leaves earlier positions' outputs untouched.
    changed = tgt.clone()
    changed[0, 3] = 20
    logits, _ = tiny_model(src, tgt)
    logits_changed, _ = tiny_model(src, changed)
    torch.testing.assert_close(logits[0, :3], logits_changed[0, :3])


def test_padded_positions_get_zero_weight(tiny_model):
    src, tgt = padded_batch()
    _, maps = tiny_model(src, tgt, need_weights=True)
    assert maps.encoder[:, 1, :, :, 3:].abs().max() == 0  # source pads as keys
    assert maps.cross[:, 1, :, :, 3:].abs().max() == 0
    assert maps.decoder[:, 1, :, :, 2:].abs().max() == 0  # target pads as keys
    # Padding does not change the real tokens' results: the short sentence alone gives the same.
    logits_alone, _ = tiny_model(src[1:, :3], tgt[1:, :2])
    logits_batch, _ = tiny_model(src, tgt)
    torch.testing.assert_close(logits_batch[1, :2], logits_alone[0], atol=logits_rounding(tiny_model, logits_alone),
                               rtol=0)


@pytest.mark.parametrize("overrides", [dict(norm="post", positional="sinusoidal"),
                                       dict(norm="pre", positional="learned"), T5_LIKE])
def test_fused_sdpa_path_matches_inspection_path(overrides):
    torch.manual_seed(0)
    model = Transformer(tiny_config(**overrides)).eval()
    src, tgt = padded_batch()
    fused, _ = model(src, tgt, fused=True)
    inspected, maps = model(src, tgt, need_weights=True)
    torch.testing.assert_close(fused, inspected, atol=logits_rounding(model, inspected), rtol=0)
    assert maps is not None


def test_cached_greedy_trace_equals_full_recomputation(tiny_model):
    src_ids = [5, 6, 7, 8, 9, EOS_ID]
    trace = greedy_trace(tiny_model, src_ids, max_len=8)
    assert len(trace) == 8 or trace.token_ids[-1] == EOS_ID
    # Recompute every step at once, teacher-forced on the trace's own choices.
    src = torch.tensor([src_ids])
    tgt = torch.tensor([trace.decoder_input_ids])
    logits, maps = tiny_model(src, tgt, need_weights=True)
    logits[..., [PAD_ID, SOS_ID]] = float("-inf")  # decoding never emits these
    assert logits[0].argmax(-1).tolist() == trace.token_ids
    rounding = model_rounding(tiny_model.config)  # weights and probabilities: at most 1, cached or whole
    torch.testing.assert_close(torch.from_numpy(trace.encoder_attention), maps.encoder[:, 0], atol=rounding, rtol=0)
    torch.testing.assert_close(torch.from_numpy(trace.decoder_attention), maps.decoder[:, 0], atol=rounding, rtol=0)
    torch.testing.assert_close(torch.from_numpy(trace.cross_attention), maps.cross[:, 0], atol=rounding, rtol=0)
    probabilities = logits[0].softmax(-1)
    torch.testing.assert_close(torch.from_numpy(trace.probabilities),
                               probabilities.max(-1).values, atol=rounding, rtol=0)
    assert (trace.top_ids[:, 0] == trace.token_ids).all()
    assert (trace.top_probabilities[:, :-1] >= trace.top_probabilities[:, 1:]).all()
    # The batched greedy decoder agrees with the trace.
    expected = [t for t in trace.token_ids if t != EOS_ID]
    assert greedy_decode(tiny_model, src, max_len=8) == [expected]


def test_relative_positions_decoded_with_a_cache_equal_the_whole_target_at_once():
    torch.manual_seed(0)
    model = Transformer(tiny_config(**T5_LIKE)).eval()
    src, tgt = torch.tensor([[5, 6, 7, 8, EOS_ID]]), torch.tensor([[SOS_ID, 9, 10, 11, 12]])
    with torch.no_grad():
        whole, maps = model(src, tgt, need_weights=True)
        memory, src_mask, _ = model.encode(src)
        cache = model.new_cache()
        steps = [model.decode(tgt[:, t:t + 1], memory, src_mask, cache, need_weights=True) for t in range(5)]
    torch.testing.assert_close(torch.cat([logits for logits, _ in steps], 1), whole, atol=logits_rounding(model, whole),
                               rtol=0)
    for t, (_, step_maps) in enumerate(steps):
        torch.testing.assert_close(step_maps.decoder[:, 0, :, 0], maps.decoder[:, 0, :, t, :t + 1],
                                   atol=model_rounding(model.config), rtol=0)
    assert (maps.decoder[:, 0, :, 0, 0] == 1).all()  # the first position sees only itself


@pytest.mark.parametrize("config", [{}, T5_LIKE, {"norm": "pre"}], ids=["post-norm", "T5-like", "pre-norm"])
def test_the_logits_at_chosen_positions_equal_the_whole_targets_there(config):
    """`decode(positions=...)` runs its last layer at each sequence's chosen position alone: its logits are the
    whole target's at those positions, padded or not, with a cache of the cross keys and values or none, and a
    head gate's function sees that position's outputs alone."""
    torch.manual_seed(0)
    model = Transformer(tiny_config(**config)).eval()
    src, tgt = padded_batch()
    positions = torch.tensor([2, 1])  # the second target: its last real position
    with torch.no_grad():
        whole, _ = model(src, tgt)
        memory, src_mask, _ = model.encode(src)

        def cross_cache():  # filled by the decoder as it runs: one per call
            return [LayerCache(cross_keys=k, cross_values=v) for k, v in
                    (layer.cross_attention.project_keys_values(memory) for layer in model.decoder_layers)]
        seen = []

        class Watched:  # a gate that watches the decoder self-attention heads' outputs, layer by layer
            def layer(self, kind, index):
                return (lambda out: seen.append((index, tuple(out.shape))) or out) if kind == "decoder" else None
        gates = Watched()
        for cache in (lambda: None, cross_cache):
            for fused in (False, True):
                chosen, _ = model.decode(tgt, memory, src_mask, cache(), fused=fused, positions=positions, gates=gates)
                torch.testing.assert_close(chosen[:, 0], whole[torch.arange(2), positions],
                                           atol=logits_rounding(model, whole), rtol=0)
    d_head = config.get("d_head", 8)
    assert seen[:2] == [(0, (2, 4, 4, d_head)), (1, (2, 4, 1, d_head))]  # the last layer: the chosen position


def test_relative_buckets_are_t5s():
    """Mesh TensorFlow's buckets for 32 buckets and distance 128 (T5's defaults), by hand: exact for |d| < 8 (one
    side), logarithmic up to 128, then the last bucket; bidirectional, keys after the query in the upper half."""
    distance = torch.tensor([-200, -128, -100, -20, -9, -8, -7, -1, 0, 1, 7, 8, 20, 200])
    one_way = relative_buckets(distance, bidirectional=False, buckets=32, max_distance=128)
    # 16 + log(d / 16) / log(8) * 16 for d >= 16 (max_exact 16 when one-way)
    assert one_way.tolist() == [31, 31, 30, 17, 9, 8, 7, 1, 0, 0, 0, 0, 0, 0]
    both = relative_buckets(distance, bidirectional=True, buckets=32, max_distance=128)
    # 16 buckets a side, 8 exact: 8 + log(d / 8) / log(16) * 8
    assert both.tolist() == [15, 15, 15, 10, 8, 8, 7, 1, 0, 17, 23, 24, 26, 31]


def test_a_layer_of_the_paper_base_model_has_the_papers_parameter_count():
    model = Transformer(ModelConfig(src_vocab_size=1000, tgt_vocab_size=1000, d_model=512, d_ff=2048))
    per_layer = sum(p.numel() for p in model.encoder_layers[0].parameters())
    assert per_layer == 4 * (512 * 512 + 512) + 512 * 2048 + 2048 + 2048 * 512 + 512 + 2 * 2 * 512


def test_tied_embeddings_share_one_tensor():
    model = Transformer(tiny_config(src_vocab_size=29))
    assert model.generator.weight is model.tgt_embedding.tokens.weight
    untied = Transformer(tiny_config(tie_embeddings=False))
    assert untied.generator.weight is not untied.tgt_embedding.tokens.weight


@pytest.mark.parametrize("bad", [dict(d_model=30, n_heads=4), dict(norm="sandwich"), dict(positional="rotary")])
def test_config_rejects_impossible_settings(bad):
    with pytest.raises(ValueError):
        tiny_config(**bad)


def test_dropout_rates_can_differ_by_place_and_old_configs_use_one_rate():
    fairseq_style = Transformer(ModelConfig(src_vocab_size=20, tgt_vocab_size=20, d_model=16, n_heads=2, d_ff=32,
                                            n_encoder_layers=1, n_decoder_layers=1, dropout=0.3,
                                            attention_dropout=0.0, activation_dropout=0.1))
    decoder_layer = fairseq_style.decoder_layers[0]
    assert decoder_layer.cross_attention.dropout == 0.0 and decoder_layer.self_attention.dropout == 0.0
    assert decoder_layer.feed_forward.dropout.p == 0.1 and decoder_layer.feed_forward_block.dropout.p == 0.3
    assert fairseq_style.encoder_layers[0].self_attention.dropout == 0.0
    saved = {**tiny_config().to_dict(), "dropout": 0.2}
    del saved["attention_dropout"], saved["activation_dropout"]  # as config.json was written before them
    old = ModelConfig(**saved)
    assert (old.attention_dropout, old.activation_dropout) == (0.2, 0.2)
