"""Word alignments from cross-attention and their AER, with known answers."""

import numpy as np
import pytest
import torch

from attention_inspector.model.analysis import align
from attention_inspector.model.analysis.align import (READINGS, alignment_error_rate, cross_attention, fast_align,
                                                      head_alignments, parse_pharaoh, pharaoh, read_links,
                                                      reversal_gold, silver_alignments)
from attention_inspector.model.nets.transformer import Transformer
from attention_inspector.model.serving.checkpoint import load_checkpoint
from attention_inspector.model.training.data import load_pairs
from tests.conftest import SHIPPED


def test_aer_of_known_alignments():
    sure = [{(0, 0), (1, 1)}]
    possible = [{(0, 0), (1, 1), (2, 1)}]
    assert alignment_error_rate([{(0, 0), (1, 1)}], sure, possible) == 0
    assert alignment_error_rate([{(0, 1), (1, 0)}], sure, possible) == 1
    assert alignment_error_rate([{(0, 0), (2, 1)}], sure, possible) == pytest.approx(1 - (1 + 2) / (2 + 2))
    assert alignment_error_rate([set()], sure, possible) == 1


def test_pharaoh_lines_round_trip_and_mark_possible_links():
    sure, possible = parse_pharaoh("0-0 2?1 1p2 3-3")
    assert sure == {(0, 0), (3, 3)} and possible == {(0, 0), (2, 1), (1, 2), (3, 3)}
    assert pharaoh(sure) == "0-0 3-3" and parse_pharaoh(pharaoh(possible))[0] == possible
    with pytest.raises(ValueError, match="not an alignment link"):
        parse_pharaoh("0-0 x")


def test_both_readings_of_an_anti_diagonal_map():
    """Three target tokens copying a three-token source backwards; step t outputs token t, and reads it at t + 1."""
    cross = np.zeros((4, 4))  # 3 tokens + <eos> steps, 3 source tokens + <eos> keys
    for t, s in enumerate((2, 1, 0)):
        cross[t, s] = 1  # the output reading
    cross[3, 3] = 1
    assert read_links(cross, "output") == {(2, 0), (1, 1), (0, 2)} == reversal_gold([3])[0]
    shifted = np.roll(cross, 1, axis=0)  # the same peaks one step later: what shift-att reads
    assert read_links(shifted, "input") == reversal_gold([3])[0]


def test_the_reversal_model_aligns_well_and_a_random_head_badly():
    translator = load_checkpoint(SHIPPED / "reverse")
    pairs = load_pairs("reverse", "test", "chars", "chars").select(range(100))
    sources = translator.src_tokenizer.tokenize_all(pairs["src"])
    targets = translator.tgt_tokenizer.tokenize_all(pairs["tgt"])
    gold = reversal_gold([len(t) for t in targets])

    def best(model_translator):
        maps = [cross_attention(model_translator, s, t) for s, t in zip(sources, targets)]
        return min(alignment_error_rate(links, gold, gold) for links in head_alignments(maps).values())

    trained = best(translator)
    torch.manual_seed(0)
    translator.model = Transformer(translator.model.config).eval()  # same shapes, random weights
    random = best(translator)
    assert trained < 0.15 and random > 0.6, (trained, random)


def test_the_command_prints_every_head_and_the_best(capsys):
    align.main(["--checkpoint", str(SHIPPED / "reverse"), "--data", "reverse", "--split", "test", "--limit", "50"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == ("50 sentences of test; AER per head and layer mean against the reversal task's exact alignment "
                        "(lower is better)")
    assert any(line.startswith("cross.1.4 ") for line in lines) and any("cross.1.mean" in line for line in lines)
    *_, value, at, name, reading = lines[-1].split()
    assert lines[-1].startswith("best AER") and at == "at" and reading == "(output)" and float(value) < 0.15


def test_the_statistical_aligner_finds_a_dictionarys_links_through_reordering():
    """Sentences of distinct words, translated word for word with the first two words swapped: EM learns the
    dictionary, so both directions link every word to its translation, not to the word at the same place."""
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(12)]
    sources, targets, gold = [], [], []
    for _ in range(400):
        sentence = list(rng.choice(words, size=rng.integers(3, 8), replace=False))
        order = [1, 0, *range(2, len(sentence))]  # target position j holds source word order[j]
        sources.append(sentence)
        targets.append([sentence[i].upper() for i in order])
        gold.append({(i, j) for j, i in enumerate(order)})
    assert alignment_error_rate(fast_align(sources, targets), gold, gold) == 0
    sure, possible = silver_alignments(sources, targets)
    assert sure == possible == gold
    # Without EM the diagonal prior alone links the swapped words to the wrong place.
    assert alignment_error_rate(fast_align(sources, targets, iterations=0), gold, gold) > 0.1


def test_without_gold_the_command_measures_against_a_statistical_aligner(toy_checkpoints, capsys, tmp_path):
    """The toy data is translated word for word: the aligner links each word to the one at its place, and so does
    the trained toy's best cross-attention reading, which --out writes."""
    root, data = toy_checkpoints
    best = tmp_path / "best.txt"
    align.main(["--checkpoint", str(root / "toy-en-de"), "--data", str(data), "--split", "val", "--out", str(best)])
    captured = capsys.readouterr()
    lines = captured.out.strip().splitlines()
    assert "statistical aligner" in lines[0] and "statistical aligner" in captured.err
    table = {line.split()[0]: [float(value) for value in line.split()[1:]] for line in lines[2:-1]}
    assert len(table) == 2 * 4 + 2  # every head of both layers, and the two layer means
    *_, value, at, name, reading = lines[-1].split()
    assert float(value) == min(min(row) for row in table.values()) < 0.15
    assert float(value) == table[name][READINGS.index(reading.strip("()"))]
    translator = load_checkpoint(root / "toy-en-de")
    targets = translator.tgt_tokenizer.tokenize_all(load_pairs(str(data), "val", "en", "de")["tgt"])
    diagonal = [{(j, j) for j in range(len(target))} for target in targets]
    written = [parse_pharaoh(line)[0] for line in best.read_text().splitlines()]
    assert alignment_error_rate(written, diagonal, diagonal) < 0.15


def test_the_app_exports_the_alignments_of_the_decoding_on_screen(events, services):
    from attention_inspector.ui.tabs.statistics import read_alignments

    session = events.translate("A man plays with a red ball.")["session"]
    trace = session.trace
    layers, heads = trace.cross.shape[:2]
    for reading in ("output", "input"):
        (text,), _ = read_alignments(services, session, reading)
        lines = text.splitlines()
        assert len(lines) == layers * heads + layers
        name, *links = lines[heads].split(maxsplit=1)  # layer 2, head 1 (every head, then the layer means)
        assert name == "cross.2.1"
        assert parse_pharaoh(links[0])[0] == read_links(trace.cross[1, 0], reading)
    assert "not 'sideways'" in read_alignments(services, session, "sideways")[1]


def test_alignments_in_words_index_words_of_merged_pieces():
    """The shipped en-de writes pieces: in words, each word's pieces are merged before reading, so the indices are
    words' (a hand check on the layer mean: the word row is its pieces' rows averaged, the keys summed)."""
    from dataclasses import replace

    from attention_inspector.model.api.services import Services
    from attention_inspector.model.text.words import merge, word_spans
    from attention_inspector.ui.session import Decoding, Session, View, to_arrays
    from attention_inspector.ui.tabs.statistics import read_alignments

    translator = load_checkpoint(SHIPPED / "en-de")
    services = Services({"en-de": translator}, root=SHIPPED)
    text = "The archaeologist photographed a colourful hummingbird."
    traced = translator.trace(text)
    trace = to_arrays(traced)
    assert trace.scheme == "bpe" and any(t.endswith("@@") for t in traced.target_tokens + traced.source_tokens)
    session = Session("en-de", text, (Decoding("original", trace, traced.text),), 0, View(units="words"))
    (words_text,), said = read_alignments(services, session, "output")
    assert "(indices of words: pieces merged)" in said
    (pieces_text,), _ = read_alignments(services, replace(session, view=View()), "output")
    assert words_text != pieces_text
    merged = merge(trace.cross, word_spans(traced.target_tokens, "bpe"), word_spans(traced.source_tokens, "bpe"))
    mean = next(line for line in words_text.splitlines() if line.startswith("cross.3.mean"))
    assert parse_pharaoh(mean.split(maxsplit=1)[1])[0] == read_links(merged[2].mean(0), "output")
