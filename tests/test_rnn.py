"""The RNN encoder-decoder with attention shares decoding, traces and checkpoints with the Transformer."""

import pytest
import torch
from safetensors.torch import load_file

from attention_inspector.model.nets.decoding import beam_search, greedy_decode
from attention_inspector.model.nets.rnn import RNNConfig, RNNSeq2Seq
from attention_inspector.model.serving.checkpoint import load_checkpoint
from attention_inspector.model.text.vocab import EOS_ID, PAD_ID, SOS_ID
from attention_inspector.model.training import train


def tiny_rnn(**overrides) -> RNNSeq2Seq:
    torch.manual_seed(0)
    settings = dict(src_vocab_size=23, tgt_vocab_size=29, embedding_dim=16, hidden_size=32, dropout=0.0)
    return RNNSeq2Seq(RNNConfig(**settings | overrides)).eval()


@pytest.fixture(params=[dict(n_heads=1, attention="general"), dict(n_heads=4, attention="general"),
                        dict(n_heads=1, attention="dot"), dict(n_heads=4, attention="split")],
                ids=["general", "general-multi-head", "dot", "split"])
def rnn(request):
    return tiny_rnn(**request.param)


def decoder_states(model: RNNSeq2Seq, src: torch.Tensor, tgt: torch.Tensor):
    """Step by step: the encoder states h (1, S, hidden), and at each step the decoder state s that attends and
    the attention weights (H, S)."""
    memory, src_mask, _ = model.encode(src)
    cache = model.new_cache()
    states, weights = [], []
    for t in range(tgt.size(1)):
        _, attention = model.decode(tgt[:, t:t + 1], memory, src_mask, cache, need_weights=True)
        states.append(cache[0].hidden[0, :model.config.hidden_size])  # the GRU state, before the attentional output
        weights.append(attention.cross[0, 0, :, 0])
    return memory[0], states, weights


def test_dot_attention_has_no_weights_and_is_the_softmax_of_scaled_dot_products():
    model = tiny_rnn(attention="dot")
    assert not [name for name in model.state_dict() if name.startswith("cross_attention")]
    src, tgt = torch.tensor([[5, 6, 7, 8, EOS_ID]]), torch.tensor([[SOS_ID, 9, 10, 11]])
    with torch.no_grad():
        memory, states, weights = decoder_states(model, src, tgt)
    for s, alpha in zip(states, weights):
        by_hand = (memory @ s / 32 ** 0.5).softmax(-1)  # score s·h/√hidden
        torch.testing.assert_close(alpha[0], by_hand, atol=1e-6, rtol=0)


def test_split_attention_is_the_dot_product_per_piece_and_one_piece_is_dot():
    model = tiny_rnn(attention="split", n_heads=4)
    assert not [name for name in model.state_dict() if name.startswith("cross_attention")]
    src, tgt = torch.tensor([[5, 6, 7, 8, EOS_ID]]), torch.tensor([[SOS_ID, 9, 10, 11]])
    with torch.no_grad():
        memory, states, weights = decoder_states(model, src, tgt)
    for s, alpha in zip(states, weights):
        for head in range(4):
            piece = slice(8 * head, 8 * (head + 1))
            by_hand = (memory[:, piece] @ s[piece] / 8 ** 0.5).softmax(-1)
            torch.testing.assert_close(alpha[head], by_hand, atol=1e-6, rtol=0)
    one_piece, dot = tiny_rnn(attention="split", n_heads=1), tiny_rnn(attention="dot")
    one_piece.load_state_dict(dot.state_dict())  # the same parameters: the GRUs, combine, the output layer
    with torch.no_grad():
        assert torch.equal(one_piece(src, tgt)[0], dot(src, tgt)[0])


def test_the_attention_choice_is_checked():
    with pytest.raises(ValueError, match="dot attention has one head"):
        RNNConfig(10, 10, n_heads=2, attention="dot")
    with pytest.raises(ValueError, match="attention must be one of"):
        RNNConfig(10, 10, attention="additive")
    assert RNNConfig(10, 10).attention == "general"  # configs saved before the choice existed


def test_cross_attention_is_a_distribution_that_ignores_padding(rnn):
    src = torch.tensor([[5, 6, 7, EOS_ID], [8, EOS_ID, PAD_ID, PAD_ID]])
    tgt = torch.tensor([[SOS_ID, 9, 10], [SOS_ID, 11, PAD_ID]])
    logits, maps = rnn(src, tgt, need_weights=True)
    assert logits.shape == (2, 3, 29)
    assert maps.encoder is None and maps.decoder is None
    assert maps.cross.shape == (1, 2, rnn.config.n_heads, 3, 4)
    torch.testing.assert_close(maps.cross.sum(-1), torch.ones(maps.cross.shape[:-1]))
    assert maps.cross[:, 1, :, :, 2:].abs().max() == 0
    alone, _ = rnn(src[1:, :2], tgt[1:, :2])
    torch.testing.assert_close(logits[1, :2], alone[0], atol=1e-5, rtol=1e-5)


def test_beam_search_runs_on_the_rnn_and_a_beam_of_one_is_greedy(rnn):
    src = torch.tensor([[5, 6, 7, 8, EOS_ID]])
    assert beam_search(rnn, src, beam_size=1, max_len=7) == greedy_decode(rnn, src, max_len=7)
    assert len(beam_search(rnn, src, beam_size=3, max_len=7)) == 1


def test_teacher_forcing_below_one_feeds_the_models_guesses(rnn):
    src, tgt = torch.tensor([[5, 6, EOS_ID]]), torch.tensor([[SOS_ID, 9, 10, 11]])
    free, _ = rnn(src, tgt, teacher_forcing=0.0)
    guesses = torch.tensor([[SOS_ID] + free[0, :-1].argmax(-1).tolist()])
    assert guesses.tolist() != tgt.tolist()
    torch.testing.assert_close(free, rnn(src, guesses)[0])  # free-running = teacher-forced on its own guesses


def test_rnn_trains_saves_and_loads_through_the_shared_cli(toy_data, tmp_path):
    out = tmp_path / "rnn"
    train.main(["--data", str(toy_data), "--out", str(out), "--work", str(tmp_path / "work"), "--epochs", "2",
                "--architecture", "rnn", "--hidden-size", "32", "--embedding-dim", "16", "--heads", "2",
                "--attention", "split",
                "--teacher-forcing", "0.8", "--min-freq", "1", "--threads", "1", "--max-tokens", "500",
                "--warmup", "5", "--constant-lr", "--lr", "3e-3", "--average", "2"])
    translator = load_checkpoint(out)
    assert translator.model.config == RNNConfig(len(translator.src_vocab), len(translator.tgt_vocab), embedding_dim=16,
                                                hidden_size=32, n_heads=2, dropout=0.1,  # --dropout's default
                                                attention="split")
    history = translator.metrics["training"]["history"]
    assert history[1]["val_loss"] < history[0]["val_loss"]  # it learns
    # It ships the better of the best epoch and the average of the last two, stored as float16.
    work = tmp_path / "work"
    chosen = {"best_epoch": load_file(str(work / "best.safetensors")),
              "average_last_2": train.average_weights(sorted((work / "epochs").glob("*.safetensors")))}
    shipped = translator.model.state_dict()
    for name, weights in chosen[translator.metrics["weights"]].items():
        assert torch.equal(shipped[name], weights.half().float()), name
    traced = translator.trace("A dog runs.")
    assert traced.trace.cross_attention.shape == (1, 2, len(traced.target_tokens), len(traced.source_tokens))
