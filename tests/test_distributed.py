"""Training on several processes (model/training/distributed.py, torchrun): the same gradients as one process with the
whole batch, and a 2-process run that trains as a 1-process run does."""

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from attention_inspector.model.nets.transformer import Transformer
from attention_inspector.model.training import distributed
from attention_inspector.model.training.train import step_loss
from tests.conftest import UNIT_ROUNDOFF, log_probability_rounding, model_rounding, reordered, tiny_config

ROOT = Path(__file__).resolve().parent.parent
# A batch of seven sentence pairs of the tiny vocabularies, of mixed lengths (ids only: no <eos>, no <sos>).
DATA = {"src": [[5, 6, 7, 2], [8, 9, 2], [10, 11, 12, 13, 14, 2], [15, 2], [16, 17, 18, 2], [19, 20, 2], [21, 2]],
        "tgt": [[7, 6, 5], [9, 8], [14, 13, 12, 11], [15], [18, 17, 16, 20], [20, 19], [21, 22, 23]]}
DATA["tgt_lengths"] = [len(t) + 1 for t in DATA["tgt"]]  # as model.train.prepare_data gives them (<eos> counted)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gradients(model) -> dict[str, torch.Tensor]:
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def one_rank(rank: int, world_size: int, port: int, batches: list[list[int]], out: str) -> None:
    """A rank of `world_size`: one backward step of each batch's share through DDP; rank 0 saves the gradients."""
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(1)
    ranks = distributed.start()
    torch.manual_seed(rank)  # different initial weights: DDP must start every rank from rank 0's
    model = Transformer(tiny_config(dropout=0.0))
    if rank == 0:
        torch.save(model.state_dict(), out + ".weights")
    trained = torch.nn.parallel.DistributedDataParallel(model)
    results = []
    for indices in batches:
        model.zero_grad()
        loss, _, _ = step_loss(trained, DATA, indices, ranks, torch.device("cpu"), label_smoothing=0.1)
        loss.backward()
        results.append(gradients(model))
    if rank == 0:
        torch.save(results, out)
    distributed.stop(ranks)


@pytest.mark.parametrize("world_size", [2, 3])
def test_ranks_sharing_a_batch_get_the_gradients_of_one_process_with_all_of_it(tmp_path, world_size):
    batches = [list(range(7)), [1, 3], [6]]  # shares of 4/3 (or 3/2/2), of 1/1 (1/1/0) and of 1/0 sentences
    out = str(tmp_path / "gradients.pt")
    mp.spawn(one_rank, args=(world_size, free_port(), batches, out), nprocs=world_size)
    shared = torch.load(out)
    model = Transformer(tiny_config(dropout=0.0))
    model.load_state_dict(torch.load(out + ".weights"))
    for indices, ranks_gradients in zip(batches, shared):
        model.zero_grad()
        loss, _, _ = step_loss(model, DATA, indices, distributed.Ranks(), torch.device("cpu"), label_smoothing=0.1)
        loss.backward()
        alone = gradients(model)
        assert alone.keys() == ranks_gradients.keys()
        # Float sums, reordered: the model's rounding forward and back, at the size of the backward pass's values (the
        # largest gradient: a parameter whose gradient cancels to ~0, a bias before a norm, has terms that size).
        rounding = 2 * model_rounding(model.config, scale=max(float(g.abs().max()) for g in alone.values()))
        for name, gradient in alone.items():
            torch.testing.assert_close(ranks_gradients[name], gradient, rtol=0, atol=rounding, msg=name)


def torchrun(*args: str, module: str = "model.training.train", processes: int = 2) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           f"--nproc_per_node={processes}", "-m", module, *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)


# A small Transformer on the toy data (tests/conftest.py), without dropout: its runs differ only in how float sums are
# ordered. --max-tokens 300 makes 9 steps an epoch.
SMALL = ["--d-model", "32", "--heads", "4", "--encoder-layers", "1", "--decoder-layers", "1", "--d-ff", "64",
         "--max-tokens", "300", "--threads", "1"]


def reordered_sums_allowance(loss: float, steps: int, terms: int = 300) -> float:
    """How far apart two runs' recorded losses may be when they differ only in the order of float32 sums: one unit
    in the 4th decimal the history keeps (each value within 5e-5 of its own), plus, for each step, the worst-case
    error of a float32 sum of `terms` token losses (n·u, Higham's bound for recursive summation) relative to
    `loss`, the steps' errors added up (to first order: 36 steps at this learning rate do not amplify them)."""
    return 1e-4 + steps * terms * UNIT_ROUNDOFF * loss


@pytest.mark.slow
def test_two_processes_train_as_one_does(toy_data, tmp_path):
    """Four epochs (36 steps) on 2 processes (torchrun, gloo) and on one: every rank takes its share of each batch
    and the gradients are the whole batch's, so every epoch's training and validation loss is the one process's
    (the tokens each rank sums, and the ranks' halves all-reduced, are added in another order: within
    `reordered_sums_allowance`). The gradients themselves are compared tightly by the test above; a rank's share
    left out or counted twice moves a loss of ~3 by far more than the allowance (< 3e-3)."""
    from attention_inspector.model.serving.checkpoint import load_checkpoint

    def arguments(run: str) -> list[str]:
        return ["--data", str(toy_data), "--out", str(tmp_path / run / "out"), "--work", str(tmp_path / run / "work"),
                *SMALL, "--dropout", "0", "--epochs", "4", "--warmup", "10", "--average", "1"]

    shared = torchrun(*arguments("two"))
    assert shared.returncode == 0, shared.stdout[-2000:] + shared.stderr[-2000:]
    alone = subprocess.run([sys.executable, "-m", "model.training.train", *arguments("one")], cwd=ROOT,
                           capture_output=True, text=True, timeout=900)
    assert alone.returncode == 0, alone.stderr[-2000:]
    two, one = (load_checkpoint(tmp_path / run / "out") for run in ("two", "one"))
    training = two.metrics["training"]
    assert (training["world_size"], training["backend"]) == (2, "gloo") and one.metrics["training"]["world_size"] == 1
    assert training["command"].startswith("torchrun --nproc_per_node 2 -m model.training.train ")
    assert shared.stdout.count("epoch=") == 4  # rank 0 alone logs
    history, history_alone = training["history"], one.metrics["training"]["history"]
    assert [e["step"] for e in history] == [e["step"] for e in history_alone] == [9, 18, 27, 36]
    assert history_alone[-1]["train_loss"] < 0.7 * history_alone[0]["train_loss"]  # it learns: the losses move
    for epoch, epoch_alone in zip(history, history_alone):
        for loss in ("train_loss", "val_loss"):
            allowed = reordered_sums_allowance(epoch_alone[loss], epoch_alone["step"])
            assert epoch[loss] == pytest.approx(epoch_alone[loss], abs=allowed), (loss, epoch, epoch_alone)


@pytest.mark.slow
def test_a_two_process_run_resumes(toy_data, tmp_path):
    common = ["--data", str(toy_data), "--out", str(tmp_path / "out"), "--work", str(tmp_path / "work"), *SMALL]
    first = torchrun(*common, "--epochs", "1")
    assert first.returncode == 0, first.stderr[-2000:]
    second = torchrun(*common, "--epochs", "2", "--resume")
    assert second.returncode == 0, second.stderr[-2000:]
    assert "resumed from" in second.stdout and "after epoch 1" in second.stdout
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())["training"]
    assert [record["epoch"] for record in metrics["history"]] == [1, 2] and metrics["world_size"] == 2


@pytest.mark.slow
def test_alignment_error_rates_on_two_processes_are_those_of_one(capsys):
    from attention_inspector.model.analysis import align
    argv = ["--checkpoint", str(ROOT / "checkpoints" / "reverse"), "--data", "reverse", "--split", "test",
            "--limit", "61"]
    align.main(argv)
    alone = capsys.readouterr().out
    shared = torchrun(*argv, module="model.analysis.align")
    assert shared.returncode == 0, shared.stderr[-2000:]
    assert shared.stdout == alone  # rank 0 alone prints, the whole split's rates


@pytest.mark.slow
def test_head_statistics_on_two_processes_are_those_of_one(toy_checkpoints, tmp_path):
    """model.analysis.heads on a split shared by 2 processes: every head's statistics, importance, BLEU and likelihood
    changes, and the pruning curve are those of one process reading it all."""
    import shutil

    from attention_inspector.model.analysis import heads
    from attention_inspector.model.serving.checkpoint import load_checkpoint
    from attention_inspector.model.training.data import load_pairs
    root, data = toy_checkpoints
    reports = {}
    for processes in (1, 2):
        folder = tmp_path / f"p{processes}" / "toy-en-de"
        shutil.copytree(root / "toy-en-de", folder)
        argv = ["--checkpoint", str(folder), "--data", str(data), "--split", "val", "--threads", "1"]
        if processes == 1:
            heads.main(argv)
        else:
            run = torchrun(*argv, module="model.analysis.heads")
            assert run.returncode == 0, run.stderr[-2000:]
        reports[processes] = json.loads((folder / heads.HEADS).read_text())
    alone, shared = reports[1], reports[2]
    assert shared["command"].startswith("torchrun --nproc_per_node 2 -m model.analysis.heads")
    assert shared["bleu"] == alone["bleu"]
    # The pruning curve switches heads off in order of importance; heads of almost equal importance (sums taken
    # over differently grouped batches) may swap places, so its BLEU is compared where the order is the same.
    def order(report):
        return sorted(report["heads"], key=lambda name: report["heads"][name]["importance"])
    assert [p["heads_off"] for p in shared["pruning"]] == [p["heads_off"] for p in alone["pruning"]]
    for a, b in zip(shared["pruning"], alone["pruning"]):
        if order(shared)[:a["heads_off"]] == order(alone)[:b["heads_off"]]:
            assert a["bleu"] == b["bleu"], (a, b)
    # Sums over other batches (tests/conftest.py): a mean token log-likelihood within a log-probability's rounding and
    # n·u more for the mean, a change (two of them) within twice that; the statistics (means of weights, at most 1),
    # the importance (gradients, normalised) within the model's rounding forward and back; each written to 5
    # decimals (1e-5 between two).
    translator = load_checkpoint(root / "toy-en-de")
    tokens = sum(len(translator.tgt_tokenizer(text)) + 1 for text in load_pairs(str(data), "val", "en", "de")["tgt"])
    likelihood = (log_probability_rounding(translator, "A dog runs in the park.")
                  + reordered(tokens, scale=abs(alone["log_likelihood"])) + 1e-5)
    assert shared["log_likelihood"] == pytest.approx(alone["log_likelihood"], abs=likelihood)
    other = 2 * model_rounding(translator.model.config) + 1e-5
    assert shared["heads"].keys() == alone["heads"].keys()
    for name, values in alone["heads"].items():
        assert shared["heads"][name].keys() == values.keys()
        for key, value in values.items():
            allowed = 2 * likelihood if key.startswith("log_likelihood_change") else other
            assert shared["heads"][name][key] == pytest.approx(value, abs=allowed), (name, key)


@pytest.mark.slow
@pytest.mark.parametrize("processes", [2, 3])
def test_evaluation_on_several_processes_scores_the_whole_split_as_one_does(toy_checkpoints, processes, capsys):
    from attention_inspector.model.training import evaluate
    root, data = toy_checkpoints
    argv = ["--checkpoint", str(root / "toy-en-de"), "--data", str(data), "--split", "val", "--beam", "2",
            "--threads", "1"]
    evaluate.main(argv)
    alone = capsys.readouterr().out
    shared = torchrun(*argv, module="model.training.evaluate", processes=processes)
    assert shared.returncode == 0, shared.stderr[-2000:]
    drop = ("decode_seconds",)  # the one line that differs: each run's own time
    assert [line for line in shared.stdout.splitlines() if not any(d in line for d in drop)] == \
        [line for line in alone.splitlines() if not any(d in line for d in drop)]


@pytest.mark.slow
@pytest.mark.parametrize("processes", [2, 3])
def test_the_faithfulness_table_on_several_processes_is_that_of_one(toy_checkpoints, processes, capsys):
    from attention_inspector.model.analysis import faithfulness
    root, data = toy_checkpoints
    argv = ["--checkpoint", str(root / "toy-en-de"), "--data", str(data), "--split", "val", "--sentences", "5", "--steps",
            "8", "--threads", "1"]
    faithfulness.main(argv)
    alone = capsys.readouterr().out
    shared = torchrun(*argv, module="model.analysis.faithfulness", processes=processes)
    assert shared.returncode == 0, shared.stderr[-2000:]
    table = [line for line in alone.splitlines() if " s; best head" not in line]  # all but the time taken
    assert [line for line in shared.stdout.splitlines() if " s; best head" not in line] == table and len(table) > 10


@pytest.mark.slow
def test_the_patching_study_on_two_processes_is_that_of_one(tmp_path, capsys):
    from attention_inspector.model.analysis import patching
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("A man is reading a newspaper.\tA woman is reading a newspaper.\tmann\tfrau\n"
                     "A boy plays in the park.\tA girl plays in the park.\tjunge\tmädchen\n"
                     "A cat sleeps.\tA dog sleeps.\tzebra\tmann\n", encoding="utf-8")
    argv = ["--checkpoint", str(ROOT / "checkpoints" / "en-de"), "--pairs", str(pairs)]
    patching.main(argv)
    alone = capsys.readouterr()
    shared = torchrun(*argv, module="model.analysis.patching")
    assert shared.returncode == 0, shared.stderr[-2000:]
    assert shared.stdout == alone.out and "2 of 3 pairs patched" in alone.out
    assert "its translation has no 'zebra'" in shared.stderr


@pytest.mark.slow
def test_traces_written_by_two_processes_are_those_of_one(toy_checkpoints, tmp_path):
    from attention_inspector.model.serving import inspect
    root, _ = toy_checkpoints
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("A dog runs in the park.\n\nA woman plays with a child.\nA man runs.\nA red ball.\n",
                         encoding="utf-8")
    argv = ["--checkpoint", str(root / "toy-en-de"), "--input", str(sentences), "--measures", "--threads", "1"]
    inspect.main([*argv, "--out", str(tmp_path / "one")])
    shared = torchrun(*argv, "--out", str(tmp_path / "two"), module="model.serving.inspect")
    assert shared.returncode == 0, shared.stderr[-2000:]
    assert re.match(r"4 traces written to .*, 1 lines skipped", shared.stdout) and "line 2: Type" in shared.stderr
    files = sorted(path.name for path in (tmp_path / "one").iterdir())
    assert files == sorted(path.name for path in (tmp_path / "two").iterdir()) and len(files) == 4
    for name in files:
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes(), name


def test_items_sorted_by_length_are_dealt_to_the_ranks_in_turn_each_share_alike_in_length():
    """`Ranks.share`, as the head report shares its batches (sorted by length): every item once, and each rank's
    lengths add up to within one item of the others', where contiguous blocks gave the last rank the longest."""
    lengths = sorted(torch.randint(5, 90, (41,), generator=torch.Generator().manual_seed(0)).tolist())
    for world_size in (2, 3):
        shares = [distributed.Ranks(rank=rank, world_size=world_size).share(lengths) for rank in range(world_size)]
        assert sorted(sum(shares, [])) == lengths
        totals = [sum(share) for share in shares]
        assert max(totals) - min(totals) <= max(lengths)
        blocks = [[lengths[i] for i in distributed.Ranks(rank=rank, world_size=world_size).block(len(lengths))]
                  for rank in range(world_size)]
        assert max(map(sum, blocks)) - min(map(sum, blocks)) > 3 * max(lengths)
