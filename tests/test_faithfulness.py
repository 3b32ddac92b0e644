"""Which explanation to trust (model/explain/faithfulness.py): ERASER's comprehensiveness and sufficiency of each
method's ranking of the source tokens, checked by hand, for the Transformer and the GRU, and the command line."""

import numpy as np
import pytest
import torch

from attention_inspector.model.analysis import faithfulness
from attention_inspector.model.analysis.faithfulness import summary
from attention_inspector.model.explain.faithfulness import (KS, METHODS, log_probabilities, sentence_faithfulness,
                                                            step_faithfulness)
from attention_inspector.model.nets.decoding import next_token_logits
from attention_inspector.model.nets.rnn import RNNConfig, RNNSeq2Seq
from attention_inspector.model.nets.transformer import Transformer
from attention_inspector.model.text.vocab import EOS_ID, SOS_ID, UNK_ID
from tests.conftest import tiny_config

pytest.importorskip("captum")
SRC = [5, 6, 7, 8, 9, 10, 11, EOS_ID]
TGT = [12, 13, 14, EOS_ID]


def test_the_deletion_curves_count_tokens_removed_in_order_each_count_once():
    """A fraction of the sentence comes to as many tokens as a whole number on a short sentence: one point, named
    both ways, never drawn again after a larger one (the curve went back)."""
    from attention_inspector.model.explain.faithfulness import KS
    from attention_inspector.ui.tabs.sources import k_axis

    assert k_axis(3) == (["1 (20%)", "2 (50%)", "3"], [0, 1, 2])
    assert k_axis(10) == (["1", "2 (20%)", "3", "5 (50%)"], [0, 1, 2, 4]) and KS[3] == 0.2
    assert k_axis(1) == (["1 (20%, 50%)"], [0])


def test_comprehensiveness_and_sufficiency_by_hand():
    torch.manual_seed(0)
    model = Transformer(tiny_config()).eval()
    scores = {"first": np.array([0.0, 0.0, 0.9, 0.5, 0.1, 0.0, 0.0, 1.0])}  # <eos>'s score never counts
    result = step_faithfulness(model, SRC, TGT, 2, scores)
    full = log_probabilities(model, torch.tensor([SRC]), TGT[:2], TGT[2])[0]
    without = log_probabilities(model, torch.tensor([[5, 6, UNK_ID, 8, 9, 10, 11, EOS_ID]]), TGT[:2], TGT[2])[0]
    only = log_probabilities(model, torch.tensor([[UNK_ID, UNK_ID, 7, UNK_ID, UNK_ID, UNK_ID, UNK_ID, EOS_ID]]),
                             TGT[:2], TGT[2])[0]
    assert result.comprehensiveness["first"][0] == pytest.approx(full - without, abs=1e-5)  # k = 1: token 2
    for source, batched in ((SRC, full), ([5, 6, UNK_ID, 8, 9, 10, 11, EOS_ID], without)):  # a plain pass alone
        with torch.no_grad():
            logits, _ = model(torch.tensor([source]), torch.tensor([[SOS_ID] + TGT[:2]]))
        assert batched == pytest.approx(float(next_token_logits(logits[:, -1:]).log_softmax(-1)[0, TGT[2]]), abs=1e-5)
    assert result.sufficiency["first"][0] == pytest.approx(full - only, abs=1e-5)
    # 50% of the 7 removable tokens, rounded up: 4, the tokens ranked 2, 3, 4 and then the first of the zeros
    half = [UNK_ID, 6, UNK_ID, UNK_ID, UNK_ID, 10, 11, EOS_ID]
    assert result.comprehensiveness["first"][KS.index(0.5)] == pytest.approx(
        full - log_probabilities(model, torch.tensor([half]), TGT[:2], TGT[2])[0], abs=1e-5)


@pytest.mark.parametrize("architecture", ["transformer", "gru"])
def test_every_method_is_measured_at_every_step(architecture):
    torch.manual_seed(0)
    model = (Transformer(tiny_config()) if architecture == "transformer" else
             RNNSeq2Seq(RNNConfig(23, 29, embedding_dim=16, hidden_size=32, n_heads=2, dropout=0.0))).eval()
    results = sentence_faithfulness(model, SRC, TGT, best_head=(0, 1), steps=8)
    assert [r.step for r in results] == list(range(len(TGT)))
    expected = set(METHODS) if architecture == "transformer" else set(METHODS) - {"rollout", "alti_plus"}
    assert set(results[0].scores) == expected
    for result in results:
        for method in expected:
            assert result.scores[method].shape == (len(SRC),)
            assert result.comprehensiveness[method].shape == result.sufficiency[method].shape == (len(KS),)
    table = summary(results)
    assert table["words"] == len(TGT) and set(table["methods"]) == expected
    rho = table["rank_correlation"]["attention/best_head"]
    assert -1 <= rho <= 1


def test_the_command_prints_a_table_per_method(toy_checkpoints, tmp_path, capsys):
    import json

    root, data = toy_checkpoints
    out = tmp_path / "faithfulness.json"
    faithfulness.main(["--checkpoint", str(root / "toy-en-de"), "--data", str(data), "--split", "val", "--n", "3",
                       "--steps", "8", "--threads", "1", "--out", str(out)])
    printed = capsys.readouterr().out
    assert "comprehensiveness (higher: more faithful)" in printed and "integrated_gradients" in printed
    result = json.loads(out.read_text())
    assert result["sentences"] == 3 and result["words"] > 3
    assert set(result["methods"]["alti_plus"]["comprehensiveness"]) == {"1", "2", "3", "20%", "50%"}


def test_the_page_compares_the_explanations_of_the_word_on_screen(events):
    import json

    from attention_inspector.ui.tabs.sources import explanations_compared, explanations_integrated

    for model, methods in (("toy-en-de", 7), ("toy-rnn", 5)):  # no heads.json: no best head; the GRU: no residual
        session = events.translate("A dog runs in the park.", model=model)["session"]
        first, _, session = explanations_compared(events.services, session, 2)  # every method but integrated gradients
        assert len(first[1]["rows"]) == methods - 1
        (figure, table), said, _ = explanations_integrated(events.services, session, 2)  # then every method
        assert said.startswith(f'Step 2, "{session.trace.target_tokens[1]}": most faithful here')
        curves = json.loads(figure)["data"]
        removable = len(session.trace.source_tokens) - 1  # 7 words and "." before <eos>: 20% is 2 tokens, 50% 4
        assert removable == 7 and len(curves) == 2 * methods and curves[0]["x"] == ["1", "2 (20%)", "3", "4 (50%)"]
        rows = table["rows"]
        assert table["headers"] == ["method", *(row[0] for row in rows)]
        names = {curve["name"] for curve in curves}  # every method in words, never its code name
        assert {"input × gradient", "random ranking (control)"} <= names == set(table["headers"][1:])
        assert not any("_" in name for name in names) and "_" not in said.split(": ", 2)[-1]
        assert len(rows) == methods and all(row[1 + i] == 1.0 for i, row in enumerate(rows))


def test_the_pages_first_answer_reads_the_decodings_maps_and_gives_what_a_pass_of_its_own_gives(events, monkeypatch):
    """The first answer of which explanation to trust reads the attention maps of the decoding's trace and the
    ALTI+ contributions its detachment was scored from, instead of a pass and an ALTI+ of its own: the same scores
    and deletion curves (1e-5). A decoding with heads off has none to give."""
    from attention_inspector.model.explain import faithfulness as measures
    from attention_inspector.ui.tabs.sources import explained_word, seen

    session = events.translate("A dog runs in the park with a ball.", model="toy-en-de")["session"]
    model, src_ids, tgt_ids, step = explained_word(events.services, session, 3)
    held = seen(session)
    assert held is not None and held.contributions is not None and held.fits(len(src_ids), len(tgt_ids))
    fresh = measures.quick_faithfulness(model, src_ids, tgt_ids, step - 1, (0, 1))

    def no_pass(*args, **kwargs):
        raise AssertionError("ALTI+ computed again")

    monkeypatch.setattr(measures, "alti_plus", no_pass)
    read = measures.quick_faithfulness(model, src_ids, tgt_ids, step - 1, (0, 1), seen=held)
    assert set(read.scores) == set(fresh.scores) == set(METHODS) - {"integrated_gradients"}
    for method in fresh.scores:
        np.testing.assert_allclose(read.scores[method], fresh.scores[method], atol=1e-5)
        np.testing.assert_allclose(read.comprehensiveness[method], fresh.comprehensiveness[method], atol=1e-5)
        np.testing.assert_allclose(read.sufficiency[method], fresh.sufficiency[method], atol=1e-5)
    assert seen(session.with_current(mask=("cross.1.1",))) is None
    assert not held.fits(len(src_ids) + 1, len(tgt_ids))  # another sentence's: a pass of its own
