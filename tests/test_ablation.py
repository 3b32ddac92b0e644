"""Every head switched off alone, many heads per batched pass (model/explain/ablation.py): the same losses as one
whole pass per head, on every kind of head, of a Transformer, a T5-like one and a GRU model."""

import random

import pytest
import torch
import torch.nn.functional as F

from attention_inspector.model.analysis import heads
from attention_inspector.model.explain.ablation import (computed_from, copies_per_pass, heads_off_losses, pass_tokens,
                                                        row_losses)
from attention_inspector.model.nets.devices import chosen_device
from attention_inspector.model.nets.rnn import RNNConfig, RNNSeq2Seq
from attention_inspector.model.nets.seq2seq import every_head, head_gates, head_name
from attention_inspector.model.nets.transformer import Transformer
from attention_inspector.model.text.batching import make_batch
from attention_inspector.model.text.vocab import PAD_ID
from tests.conftest import T5_LIKE, model_rounding, reordered, tiny_config


def models() -> dict[str, torch.nn.Module]:
    torch.manual_seed(0)
    return {"transformer": Transformer(tiny_config(n_encoder_layers=3, n_decoder_layers=3)).eval(),
            "pre-norm, T5-like": Transformer(tiny_config(**T5_LIKE)).eval(),
            "gru": RNNSeq2Seq(RNNConfig(src_vocab_size=23, tgt_vocab_size=29, embedding_dim=16, hidden_size=32,
                                        n_heads=2, dropout=0.0)).eval()}


def padded_batch(sentences: int = 5, seed: int = 0):
    """Sentences of different lengths on both sides: padding in both."""
    rng = random.Random(seed)
    sources = [[rng.randrange(4, 23) for _ in range(rng.randint(2, 9))] + [3] for _ in range(sentences)]
    targets = [[rng.randrange(4, 29) for _ in range(rng.randint(1, 8))] for _ in range(sentences)]
    return make_batch(sources, targets)


def loss_rounding(model, batch, mean: float) -> float:
    """How far two float32 computations of a batch's mean token loss `mean` may differ with their sums in other
    orders (copies in a batch with heads off, a whole pass): a token's cross-entropy, log Σ exp z − z_t, within twice
    its logits' rounding (tests/conftest.py), at the batch's largest |logit|; their mean adds n terms."""
    with torch.no_grad():
        logits, _ = model(batch.src, batch.tgt_in)
    length = max(batch.src.size(1), batch.tgt_in.size(1))
    return (2 * model_rounding(model.config, scale=float(logits.abs().max()), length=length)
            + reordered(batch.n_target_tokens, scale=mean))


def whole_pass_loss(model, batch, name: str | None) -> float:
    """The loss of one whole pass with the head `name` off (None: every head on), as the head report computed it."""
    with torch.no_grad():
        logits, _ = model(batch.src, batch.tgt_in, gates=head_gates(model, [name] if name else []))
    return float(F.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=PAD_ID, reduction="sum"))


@pytest.mark.parametrize("name", list(models()))
@pytest.mark.parametrize("copies", [1, 3, None])
def test_each_heads_loss_is_that_of_a_whole_pass_with_that_head_alone_off(name, copies):
    model, batch = models()[name], padded_batch()
    heads = every_head(model)
    random.Random(1).shuffle(heads)  # any order, the answers in it
    base, losses = heads_off_losses(model, batch, heads, copies)
    tokens = batch.n_target_tokens
    rounding = loss_rounding(model, batch, base / tokens)
    assert base / tokens == pytest.approx(whole_pass_loss(model, batch, None) / tokens, abs=rounding)
    for (kind, layer, head), loss in zip(heads, losses):
        expected = whole_pass_loss(model, batch, head_name(kind, layer, head))
        assert loss / tokens == pytest.approx(expected / tokens, abs=rounding), (kind, layer, head)
    assert {kind for kind, _, _ in heads} == set(model.heads())  # every kind the model has was checked
    assert max(abs(loss - base) for loss in losses) > 1e-3  # switching heads off changes something


@pytest.mark.parametrize("bias", [True, False])
def test_losses_of_a_half_precision_output_layer_are_read_in_float32_with_or_without_a_bias(bias):
    torch.manual_seed(0)
    generator = torch.nn.Linear(8, 11, bias=bias)
    states, tgt_out = torch.randn(3, 4, 8), torch.tensor([[5, 6, 2, PAD_ID], [7, 2, PAD_ID, PAD_ID], [4, 4, 4, 2]])
    expected = F.cross_entropy(generator(states).flatten(0, 1), tgt_out.flatten(), ignore_index=PAD_ID,
                               reduction="none").view(3, 4).sum(-1)
    losses = row_losses(states.half(), generator.half(), tgt_out, chunk=5)
    assert losses.dtype == torch.float32
    torch.testing.assert_close(losses, expected, atol=0.02, rtol=0.01)  # the weights' and states' half rounding


def test_a_batchs_tokens_are_as_many_as_its_float32_logits_fit_in_32_mib_on_a_cpu():
    cpu = torch.device("cpu")
    assert pass_tokens(6457, cpu) == 32 * 2 ** 20 // (4 * 6457) == 1299  # en-de's vocabulary
    assert pass_tokens(256_206, cpu) == 32  # NLLB's
    assert pass_tokens(100, cpu) == 4000  # at most MAX_TOKENS
    assert pass_tokens(10 ** 8, cpu) == 1  # at least one, however large the vocabulary
    assert pass_tokens(256_206, torch.device("cuda")) == 2 * 2 ** 30 // (4 * 256_206)


def test_a_pass_holds_as_many_copies_as_make_its_rows_and_tells_each():
    model, batch = models()["transformer"], padded_batch()
    positions = batch.tgt_in.numel()
    assert copies_per_pass(batch, rows=positions * 5) == 5
    assert copies_per_pass(batch, rows=positions * 5 + 1) == 6
    assert copies_per_pass(batch, rows=1) == 1
    told = []
    heads = [("cross", 2, head) for head in range(4)] + [("encoder", 0, 1)]
    heads_off_losses(model, batch, heads, copies=3, advance=told.append)
    assert told == [3, 2]  # in passes of at most 3, the encoder head's first
    # Heads are grouped in the order the model computes them: the encoder's layers, then the decoder's.
    places = [("decoder", 1), ("encoder", 2), ("decoder", 0), ("encoder", 0)]
    assert sorted(places, key=computed_from) == [("encoder", 0), ("encoder", 2), ("decoder", 0), ("decoder", 1)]


@pytest.mark.parametrize("chunk", [1, 5, 29, 1000])
@torch.no_grad()
def test_the_losses_gathered_chunk_by_chunk_are_the_cross_entropy_of_the_whole_logits(chunk):
    torch.manual_seed(3)
    batch, generator = padded_batch(), torch.nn.Linear(16, 29)
    states = torch.randn(5, batch.tgt_out.size(1), 16) * 4
    whole = F.cross_entropy(generator(states).flatten(0, 1), batch.tgt_out.flatten(), ignore_index=PAD_ID,
                            reduction="none").view(batch.tgt_out.shape).sum(-1)
    # A row's loss adds its tokens' cross-entropies, each log Σ exp z − z_t with the logits (16 terms each) and their
    # sum over the 29 words added in other orders, chunk by chunk: within that many reordered sums at the largest |z|.
    logits = generator(states)
    per_token = 2 * (reordered(16) + reordered(29)) * float(logits.abs().max())
    rounding = batch.tgt_out.size(1) * per_token + reordered(batch.tgt_out.size(1), scale=float(whole.max()))
    assert row_losses(states, generator, batch.tgt_out, chunk).tolist() == pytest.approx(whole.tolist(), abs=rounding)
    assert (batch.tgt_out == PAD_ID).any()  # padding left out, not counted


def test_a_device_is_chosen_by_name_or_environment_and_a_missing_gpu_is_refused(monkeypatch):
    monkeypatch.delenv("DEVICE", raising=False)
    assert chosen_device("cpu") == torch.device("cpu")
    assert chosen_device() == torch.device("cuda" if torch.cuda.is_available() else "cpu")
    monkeypatch.setenv("DEVICE", "cpu")
    assert chosen_device() == torch.device("cpu")
    for bad, says in (("gpu", "is not a device"), ("meta", "cpu or cuda"), (f"cuda:{torch.cuda.device_count()}",
                                                                            "GPU")):
        with pytest.raises(ValueError, match=says):
            chosen_device(bad)


def test_the_head_report_refuses_a_device_the_machine_lacks_before_loading_anything(tmp_path):
    with pytest.raises(SystemExit, match="GPU"):
        heads.main(["--checkpoint", str(tmp_path / "nothing here"), "--device", f"cuda:{torch.cuda.device_count()}"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here: the CUDA path runs where there is one")
@pytest.mark.parametrize("name", list(models()))
def test_on_a_gpu_the_losses_are_the_cpus(name):
    model, batch = models()[name], padded_batch()
    heads_list = every_head(model)
    base, losses = heads_off_losses(model, batch, heads_list)
    on_gpu = heads_off_losses(model.to("cuda"), batch.to("cuda"), heads_list)
    assert on_gpu[0] == pytest.approx(base, rel=1e-4) and on_gpu[1] == pytest.approx(losses, rel=1e-4)


@pytest.mark.parametrize("name", ["transformer", "rnn", "t5-like"])
def test_decodings_with_many_heads_off_together_are_each_heads_decoding_alone(translators_of_each_kind, name):
    translator = translators_of_each_kind[name]
    sentences = translator.src_tokenizer.tokenize_all(
        ["a man is reading a newspaper .", "two dogs run .", "a girl in a red dress sits on a bench near a tree .",
         "people ."])
    names = ["cross.1.1", "cross.1.2", None] + [f"{kind}.1.2" for kind in translator.model.heads() if kind != "cross"]
    gate_sets = [None if name is None else head_gates(translator.model, [name]) for name in names]
    # A few sentences per batch, the same batches for each head alone (a random model's near-ties would part
    # otherwise: its padding differs with its batch's longest source).
    together = translator.greedy_tokens(sentences, gate_sets, max_tokens=40 * len(gate_sets))
    alone = [translator.translate_tokens(sentences, gates=gates, max_tokens=40) for gates in gate_sets]
    assert together == alone
    assert len({str(tokens) for tokens in alone}) > 1  # the heads switched off change something
