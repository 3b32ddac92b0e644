"""The training and evaluation CLIs end to end on toy data: checkpoints, metrics, deterministic resume."""

import json

import pytest
import torch
from safetensors.torch import load_file

from attention_inspector.model.serving.checkpoint import load_checkpoint
from attention_inspector.model.training import evaluate, train
from tests.conftest import WORDS

TINY = ["--d-model", "32", "--heads", "2", "--d-ff", "64", "--encoder-layers", "1", "--decoder-layers", "1",
        "--max-tokens", "400", "--warmup", "10", "--lr", "3e-3", "--average", "2", "--min-freq", "1",
        "--threads", "1", "--beam", "2"]


def run_training(data, out, work, epochs, *extra):
    train.main(["--data", str(data), "--out", str(out), "--work", str(work), "--epochs", str(epochs), *TINY, *extra])


def test_train_then_evaluate(toy_data, tmp_path, capsys):
    out = tmp_path / "ck"
    run_training(toy_data, out, tmp_path / "work", 3)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["training"]["epochs"] == 3 and metrics["decoding"]["beam_size"] == 2
    assert [h["epoch"] for h in metrics["training"]["history"]] == [1, 2, 3]
    assert metrics["weights"] in ("best_epoch", "average_last_2")
    assert len(metrics["examples"]) == 6 and all(isinstance(e, str) for e in metrics["examples"])
    translator = load_checkpoint(out)
    assert translator.truecaser.forms.get("hund") == "Hund"  # learned from the cased German side

    evaluate.main(["--checkpoint", str(out), "--data", str(toy_data), "--split", "test", "--save-metrics"])
    printed = capsys.readouterr().out
    assert "nrefs:1|case:mixed|eff:no|tok:13a" in printed and "tokenized lower-cased BLEU" in printed
    assert "reference tokens not in the target vocabulary: 0 of " in printed  # the toy's words are all known
    scores = json.loads((out / "metrics.json").read_text())["scores"]["test"]
    assert scores["sentences"] == 30 and scores["beam_size"] == 2
    assert 0 <= scores["bleu"] <= 100 and 0 <= scores["chrf"] <= 100
    evaluate.main(["--checkpoint", str(out), "--data", str(toy_data), "--split", "test", "--beam", "1",
                   "--save-metrics"])  # another decoding is kept beside the shipped one, which stays
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["scores"]["test_beam1"]["beam_size"] == 1 and metrics["scores"]["test"] == scores
    assert metrics["decoding"]["beam_size"] == 2


RNN = ["--architecture", "rnn", "--hidden-size", "32", "--embedding-dim", "16", "--teacher-forcing", "0.5"]


@pytest.mark.parametrize("extra", [[], RNN], ids=["transformer", "rnn-teacher-forcing"])
def test_resume_continues_exactly_where_training_stopped(toy_data, tmp_path, extra):
    run_training(toy_data, tmp_path / "straight", tmp_path / "w1", 2, *extra)
    run_training(toy_data, tmp_path / "interrupted", tmp_path / "w2", 1, *extra)
    run_training(toy_data, tmp_path / "resumed", tmp_path / "w2", 2, "--resume", *extra)
    straight = load_file(str(tmp_path / "w1" / "last" / "model.safetensors"))
    resumed = load_file(str(tmp_path / "w2" / "last" / "model.safetensors"))
    assert straight.keys() == resumed.keys()
    for name in straight:
        assert (straight[name] == resumed[name]).all(), name


def test_init_continues_a_shipped_checkpoint_whose_work_folder_is_gone(toy_data, tmp_path):
    run_training(toy_data, tmp_path / "shipped", tmp_path / "gone", 2)
    run_training(toy_data, tmp_path / "continued", tmp_path / "new", 3, "--init", str(tmp_path / "shipped"))
    shipped = json.loads((tmp_path / "shipped" / "metrics.json").read_text())["training"]
    continued = json.loads((tmp_path / "continued" / "metrics.json").read_text())["training"]
    assert continued["history"][:2] == shipped["history"] and continued["epochs"] == 3
    assert continued["history"][2]["step"] > shipped["steps"]  # the schedule goes on from the shipped step
    assert continued["wall_seconds"] >= shipped["wall_seconds"]  # so does the clock of --max-minutes
    # Epoch 3 trains the shipped weights, not new ones: its loss is below a fresh model's first epoch.
    assert continued["history"][2]["train_loss"] < shipped["history"][0]["train_loss"]
    with pytest.raises(SystemExit, match="builds another model or other vocabularies"):
        run_training(toy_data, tmp_path / "other", tmp_path / "other-work", 3, "--init", str(tmp_path / "shipped"),
                     "--d-model", "64")
    metrics = json.loads((tmp_path / "shipped" / "metrics.json").read_text())
    del metrics["training"]
    (tmp_path / "shipped" / "metrics.json").write_text(json.dumps(metrics))
    with pytest.raises(SystemExit, match="records no training to continue"):
        run_training(toy_data, tmp_path / "other", tmp_path / "other-work", 3, "--init", str(tmp_path / "shipped"))


def test_training_is_seeded(toy_data, tmp_path):
    run_training(toy_data, tmp_path / "a", tmp_path / "wa", 1)
    run_training(toy_data, tmp_path / "b", tmp_path / "wb", 1)
    a = load_file(str(tmp_path / "wa" / "last" / "model.safetensors"))
    b = load_file(str(tmp_path / "wb" / "last" / "model.safetensors"))
    assert all((a[name] == b[name]).all() for name in a)


def test_missing_data_is_a_clear_error(tmp_path):
    with pytest.raises(Exception, match="not a folder"):
        run_training(tmp_path / "absent", tmp_path / "ck", tmp_path / "w", 1)


@pytest.mark.parametrize("decay, at_end", [("inverse-sqrt", 1e-3 * (100 / 1000) ** 0.5), ("constant", 1e-3),
                                           ("linear", 1e-4)])
def test_learning_rate_warms_up_then_decays(decay, at_end):
    rates = [train.learning_rate(step, 1e-3, 100, decay, total_steps=1000) for step in range(1, 1001)]
    assert rates[49] == pytest.approx(5e-4) and rates[99] == pytest.approx(1e-3)  # linear warm-up to the peak
    assert rates[-1] == pytest.approx(at_end)
    assert all(later <= earlier for earlier, later in zip(rates[99:], rates[100:]))


def test_constant_lr_flag_trains_at_the_peak_rate_after_warm_up(toy_data, tmp_path, monkeypatch):
    rates = []  # the rate of each optimizer step, as training set it
    adam_step = torch.optim.Adam.step

    def step(optimizer, *args, **kwargs):
        rates.append(optimizer.param_groups[0]["lr"])
        return adam_step(optimizer, *args, **kwargs)

    monkeypatch.setattr(torch.optim.Adam, "step", step)
    run_training(toy_data, tmp_path / "ck", tmp_path / "work", 1, "--constant-lr", "--warmup", "2")
    assert len(rates) >= 5 and rates == pytest.approx([1.5e-3] + [3e-3] * (len(rates) - 1))  # TINY's --lr 3e-3


def test_byte_pair_pieces_are_trained_saved_and_joined_for_text(toy_data, tmp_path, capsys):
    out = tmp_path / "bpe"
    run_training(toy_data, out, tmp_path / "work", 1, "--bpe", "40")
    vocab = json.loads((out / "vocab.json").read_text())
    assert vocab["src"]["bpe"] == vocab["tgt"]["bpe"] and len(vocab["src"]["bpe"]) == 40  # joint merges
    assert any(token.endswith("@@") for token in vocab["tgt"]["itos"])
    translator = load_checkpoint(out)
    assert translator.src_tokenizer.bpe.merges == [tuple(pair) for pair in vocab["src"]["bpe"]]
    pieces = translator.src_tokenizer("A dog runs in the park.")
    assert translator.src_tokenizer.words(pieces) == ["a", "dog", "runs", "in", "the", "park", "."]
    known = translator.src_tokenizer.pieces(["a", "dog", "runs", "in", "park"])  # words of the training data
    assert len(known) > 5 and all(piece in translator.src_vocab for piece in known)
    assert translator.to_text(["ein", "hu@@", "nd", "läuft"]) == "Ein Hund läuft"  # text shows words, not pieces
    traced = translator.trace("A dog runs in the park.")
    assert traced.source_tokens == pieces + ["<eos>"] and "@@" not in traced.text
    # A word typed whole (and capitalised) that the model writes in pieces: its pieces are forced and scored.
    split = next(word for word in WORDS.values() if len(translator.tgt_tokenizer.pieces([word.lower()])) > 1)
    pieces = translator.tgt_tokenizer.pieces([split.lower()])
    assert translator.trace("A dog runs.", force=[split]).target_tokens[:len(pieces)] == pieces
    assert translator.score("A dog runs.", [split, "<eos>"]).target_tokens == pieces + ["<eos>"]
    evaluate.main(["--checkpoint", str(out), "--data", str(toy_data), "--split", "test", "--beam", "1"])
    assert "tokenized lower-cased BLEU" in capsys.readouterr().out
