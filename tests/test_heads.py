"""`python -m model.analysis.heads`: every head switched off alone, gradient importance, the pruning curve."""

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from attention_inspector.model.analysis import align, heads
from attention_inspector.model.analysis.align import alignment_error_rate
from attention_inspector.model.nets.seq2seq import head_gates
from attention_inspector.model.serving.checkpoint import load_checkpoint
from attention_inspector.model.training.data import load_pairs
from attention_inspector.model.training.distributed import Ranks


@pytest.fixture(scope="module")
def report(toy_checkpoints, tmp_path_factory):
    root, data = toy_checkpoints
    folder = tmp_path_factory.mktemp("heads") / "toy-en-de"
    shutil.copytree(root / "toy-en-de", folder)
    heads.main(["--checkpoint", str(folder), "--data", str(data), "--split", "val", "--threads", "1",
                "--bleu-per-head"])
    return folder, data, json.loads((folder / heads.HEADS).read_text())


def test_every_head_is_measured_and_importance_is_normalised_per_layer(report):
    folder, _, result = report
    translator = load_checkpoint(folder)
    assert list(result["heads"]) == heads.every_head(translator) and len(result["heads"]) == 3 * 2 * 4
    for kind in ("encoder", "decoder", "cross"):
        for layer in (1, 2):
            values = [result["heads"][f"{kind}.{layer}.{h}"]["importance"] for h in range(1, 5)]
            assert np.linalg.norm(values) == pytest.approx(1, abs=1e-4)
    assert result["command"].startswith("python -m model.analysis.heads --checkpoint") and result["split"] == "val"
    # With every head on, the BLEU is the one training measured on the same split (before float16 storage).
    assert result["sentences"] == 30
    assert result["bleu"] == pytest.approx(translator.metrics["validation_greedy"]["bleu_tok_lc"], abs=0.5)
    assert result["bleu"] > 80  # the toy learned its word-for-word task


def test_a_heads_changes_are_what_switching_it_off_alone_gives(report):
    folder, data, result = report
    translator = load_checkpoint(folder)
    pairs = heads.load_pairs(str(data), "val", "en", "de")
    sources = translator.src_tokenizer.tokenize_all(pairs["src"])
    batches = heads.teacher_forced_batches(translator, sources, translator.tgt_tokenizer.tokenize_all(pairs["tgt"]))
    gates = head_gates(translator.model, ["decoder.1.2"])
    change = heads.log_likelihood(translator, batches, gates) - heads.log_likelihood(translator, batches)
    assert result["heads"]["decoder.1.2"]["log_likelihood_change"] == pytest.approx(change, abs=1e-4)
    bleu = heads.greedy_bleu(translator, sources, list(pairs["tgt"]), gates)
    assert result["heads"]["decoder.1.2"]["bleu_change"] == pytest.approx(bleu - result["bleu"], abs=0.01)


def test_pruning_switches_heads_off_in_increasing_importance(report):
    folder, data, result = report
    pruning = result["pruning"]
    assert pruning[0] == {"fraction": 0.0, "heads_off": 0, "bleu": result["bleu"]}
    assert [point["heads_off"] for point in pruning[1:]] == [round(f * 24) for f in heads.PRUNED_FRACTIONS]
    assert pruning[-1]["bleu"] < result["bleu"] - 1  # with 90% of the heads off, the toy translator breaks
    first = next(point for point in pruning if point["bleu"] < result["bleu"] - 1)
    assert result["bleu_drops_by_1_at"] == {"fraction": first["fraction"], "heads_off": first["heads_off"]}
    # That point's BLEU is the toy's with its least important heads switched off.
    translator = load_checkpoint(folder)
    pairs = load_pairs(str(data), "val", "en", "de")
    least_important = sorted(result["heads"], key=lambda name: result["heads"][name]["importance"])
    gates = head_gates(translator.model, least_important[:first["heads_off"]])
    bleu = heads.greedy_bleu(translator, translator.src_tokenizer.tokenize_all(pairs["src"]), list(pairs["tgt"]), gates)
    assert first["bleu"] == pytest.approx(bleu, abs=0.01)


def test_each_heads_statistics_are_the_mean_over_the_split(report):
    folder, data, result = report
    translator = load_checkpoint(folder)
    pairs = load_pairs(str(data), "val", "en", "de")
    each = [heads.split_statistics(translator, [translator.src_tokenizer(source)], [translator.tgt_tokenizer(target)])
            for source, target in zip(pairs["src"], pairs["tgt"])]
    assert result["heads"]["cross.2.3"]["confidence"] == pytest.approx(
        np.mean([sentence["cross.2.3"]["confidence"] for sentence in each]), abs=1e-4)
    statistics = {"entropy", "confidence", "eos_weight", "punctuation_weight", "offset"}
    assert statistics <= set(result["heads"]["decoder.1.1"])
    assert "offset" not in result["heads"]["cross.1.1"]  # queries and keys are different texts
    # --statistics-only adds the same numbers to an existing heads.json.
    only = folder.parent / "only"
    shutil.copytree(folder, only)
    heads.main(["--checkpoint", str(only), "--data", str(data), "--split", "val", "--statistics-only"])
    again = json.loads((only / heads.HEADS).read_text())
    assert again["heads"]["cross.2.3"] == result["heads"]["cross.2.3"] and again["statistics"]["sentences"] == 30


def test_each_cross_attention_heads_alignment_error_rate_is_against_the_statistical_aligner(report):
    """The toy data has no gold alignments: each cross-attention head's AER in both readings is measured against
    the statistical aligner's links, which on word-for-word toy data are the diagonal."""
    folder, data, result = report
    translator = load_checkpoint(folder)
    pairs = load_pairs(str(data), "val", "en", "de")
    sources = translator.src_tokenizer.tokenize_all(pairs["src"])
    targets = translator.tgt_tokenizer.tokenize_all(pairs["tgt"])
    sure, possible, reference = align.reference_alignments(translator, str(data), "val", sources, targets)
    assert "statistical aligner" in reference and result["statistics"]["alignments"] == reference
    diagonal = [{(j, j) for j in range(len(t))} for t in targets]
    assert alignment_error_rate(sure, diagonal, diagonal) < 0.05
    maps = [align.cross_attention(translator, s, t) for s, t in zip(sources, targets)]
    links = align.head_alignments(maps)
    for name in ("cross.1.1", "cross.2.4"):  # a ratio of link counts, written to 5 decimals (5e-6 of rounding)
        assert result["heads"][name]["alignment_aer"] == pytest.approx(
            alignment_error_rate(links[name, "output"], sure, possible), abs=1e-5)
        assert result["heads"][name]["shift_alignment_aer"] == pytest.approx(
            alignment_error_rate(links[name, "input"], sure, possible), abs=1e-5)
    assert "alignment_aer" not in result["heads"]["encoder.1.1"]


def test_an_interrupted_report_goes_on_from_what_it_had_written(toy_checkpoints, tmp_path, monkeypatch):
    root, data = toy_checkpoints
    folders = [tmp_path / name for name in ("whole", "interrupted")]
    for folder in folders:
        shutil.copytree(root / "toy-en-de", folder)
    monkeypatch.setattr(heads, "pass_tokens", lambda vocabulary, device: 30)  # several batches of a few sentences
    real, passes = heads.heads_off_losses, []

    def run(folder, threads: str = "1", cut_at: int | None = None) -> int:
        """The report's batched passes made, Ctrl-C pressed in pass `cut_at`."""
        def counted(*args, **kwargs):
            passes.append(1)
            if len(passes) == cut_at:
                raise KeyboardInterrupt
            return real(*args, **kwargs)
        monkeypatch.setattr(heads, "heads_off_losses", counted)
        passes.clear()
        heads.main(["--checkpoint", str(folder), "--data", str(data), "--split", "val", "--limit", "20",
                    "--threads", threads])
        return len(passes)
    batches = run(folders[0])
    assert batches >= 4
    with pytest.raises(KeyboardInterrupt):
        run(folders[1], cut_at=3)
    saved = json.loads((folders[1] / "heads.partial.0.json").read_text())
    assert saved["likelihood"]["batches"] == 2 and not (folders[1] / heads.HEADS).exists()
    # Started again with the same arguments (another number of threads is the same measure): the batches left.
    assert run(folders[1], threads="2") == batches - 2
    whole, resumed = (json.loads((folder / heads.HEADS).read_text()) for folder in folders)
    assert resumed["log_likelihood"] == whole["log_likelihood"]
    assert {name: head["log_likelihood_change"] for name, head in resumed["heads"].items()} == \
        {name: head["log_likelihood_change"] for name, head in whole["heads"].items()}
    assert not (folders[1] / "heads.partial.0.json").exists()  # the report written, its work file is gone


@pytest.mark.parametrize("world_size", [1, 2, 3])
@pytest.mark.parametrize("batches, every", [(1, 576), (2, 576), (5, 576), (7, 576), (3, 1)])
def test_the_ranks_share_every_batch_and_head_once_and_evenly(batches, every, world_size):
    """Five batches on two processes were dealt three and two: the rank with two waited a batch's time (~12 minutes at
    NLLB-600M's size) for the other. The batches left over are now shared head by head (a GRU's one head: whole)."""
    work = [heads.dealt_work(batches, every, Ranks(rank, world_size)) for rank in range(world_size)]
    done = [(batch, head) for share in work for batch, mine in share for head in mine]
    assert sorted(done) == [(batch, head) for batch in range(batches) for head in range(every)]
    heads_off = [sum(len(mine) for _, mine in share) for share in work]
    assert max(heads_off) - min(heads_off) <= batches
    # each batch's base (and its tokens) counted once: by the rank holding its first head
    assert sorted(batch for share in work for batch, mine in share if mine[0] == 0) == list(range(batches))


def test_a_checkpoint_given_by_name_is_never_changed_and_a_report_is_kept_unless_overwritten(
        toy_checkpoints, tmp_path, monkeypatch, capsys):
    """By name, the report goes to NAME-heads in the working directory and the checkpoint's files stay as they were;
    given a folder, a heads.json already there is kept, the run stopped before any work, unless --overwrite."""
    root, data = toy_checkpoints
    named = tmp_path / "named" / "toy"
    shutil.copytree(root / "toy-en-de", named)
    (named / heads.HEADS).write_text('{"heads": {}, "made": "by hand"}\n', encoding="utf-8")
    before = {path.name: path.read_bytes() for path in named.iterdir()}
    monkeypatch.setenv("CHECKPOINTS", str(named.parent))
    monkeypatch.chdir(tmp_path)
    quick = ["--data", str(data), "--split", "val", "--limit", "4", "--exact", "2", "--check", "0", "--threads", "1"]
    heads.main(["--checkpoint", "toy", *quick])
    assert {path.name: path.read_bytes() for path in named.iterdir()} == before
    report = json.loads((tmp_path / "toy-heads" / heads.HEADS).read_text())
    assert report["sentences"] == 4 and len(report["heads"]) == 24
    said = capsys.readouterr().out
    assert f"the head report is in {Path('toy-heads') / heads.HEADS}" in said and "shipped toy is left as it is" in said

    def no_work(*args, **kwargs):
        raise AssertionError("the report started its work")
    measured = heads.split_statistics
    monkeypatch.setattr(heads, "split_statistics", no_work)
    for checkpoint in (str(named), "toy"):  # its own heads.json, and the report just written to toy-heads
        with pytest.raises(SystemExit, match="heads.json exists .* give --overwrite to replace it, or --out DIR"):
            heads.main(["--checkpoint", checkpoint, *quick])
    assert (named / heads.HEADS).read_bytes() == before[heads.HEADS]
    # A missing `studies` package is said before any work too.
    monkeypatch.setitem(sys.modules, "sacrebleu", None)
    with pytest.raises(ModuleNotFoundError) as missing:
        heads.main(["--checkpoint", "toy", *quick, "--out", str(tmp_path / "elsewhere")])
    assert missing.value.name == "sacrebleu"
    monkeypatch.undo()
    monkeypatch.setattr(heads, "split_statistics", measured)
    heads.main(["--checkpoint", str(named), *quick, "--overwrite"])
    assert json.loads((named / heads.HEADS).read_text())["sentences"] == 4
