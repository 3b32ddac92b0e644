"""Every tensor a model's operations make is made on the model's device, so that a model moved to a GPU runs there
whole (issue 54). Without a GPU this is checked on the CPU: under `torch.device("meta")` a tensor made without
naming a device lands on "meta", and the first operation mixing it with the model's CPU weights fails."""

import importlib
import runpy
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from attention_inspector.model.analysis.heads import estimated_changes, log_likelihood_changes, teacher_forced_batches
from attention_inspector.model.explain.attribution import METHODS as ATTRIBUTION_METHODS
from attention_inspector.model.explain.faithfulness import quick_faithfulness, sentence_faithfulness

SENTENCE = "a man is reading a newspaper ."


def every_operation(translator):
    """What the app, the API and the studies ask of a translator, each once."""
    traced = translator.trace(SENTENCE, mask=["cross.1.1"])
    tokens = traced.target_tokens
    if translator.step_decoder is not None:  # a Transformer's traces, decoded together
        batch = translator.trace_batch()
        for text in (SENTENCE, "two dogs ."):
            batch.add(translator.trace_request(text)[1])
        batch.run()
    translator.translate([SENTENCE, "two dogs run ."], beam_size=2)
    translator.score(SENTENCE, tokens, mask=["cross.1.1"])
    translator.beam(SENTENCE, beam_size=2)
    translator.reference_attention(SENTENCE.split(), ["ein", "mann"])
    translator.contributions(SENTENCE, tokens)
    translator.measures(SENTENCE, tokens)
    for method in ATTRIBUTION_METHODS:
        translator.attributions(SENTENCE, tokens, method, steps=4)
    translator.attributions(SENTENCE, tokens, ATTRIBUTION_METHODS[0], step=1, steps=4)
    translator.patching(SENTENCE, "a woman is reading a newspaper .", tokens, step=0)
    translator.patching(SENTENCE, "a woman is reading a newspaper .", tokens, step=0, estimate=True)
    src_ids, tgt_ids = translator.given_translation(SENTENCE, tokens)
    quick_faithfulness(translator.model, src_ids, tgt_ids, 0)
    sentence_faithfulness(translator.model, src_ids, tgt_ids, steps=2)
    # The head report's passes: every head off in batched copies (ablation.py), and its estimate from gradients
    # (estimates.py, and heads.py's importance from the same sums).
    sources, targets = [SENTENCE.split(), ["two", "dogs", "."]], [tokens[:-1], tokens[:2]]
    log_likelihood_changes(translator, sources, targets)
    batches = teacher_forced_batches(translator, sources, targets)
    for order in ("first", "second"):
        estimated_changes(translator, batches, order, probes=2)


@pytest.mark.parametrize("name", ["transformer", "rnn", "t5-like"])
def test_every_operation_makes_its_tensors_on_the_models_device(translators_of_each_kind, name):
    translator = translators_of_each_kind[name]
    every_operation(translator)  # on the CPU as it is: the operations themselves work
    with torch.device("meta"):
        every_operation(translator)


@pytest.mark.parametrize("command", ["model.analysis.faithfulness", "model.analysis.patching",
                                     "model.serving.inspect", "model.training.evaluate", "model.analysis.heads"])
def test_every_study_refuses_a_gpu_the_machine_lacks_before_loading_anything(command, tmp_path):
    main = importlib.import_module(f"attention_inspector.{command}").main
    given = {"model.analysis.patching": ["--gender", "2"],
             "model.serving.inspect": ["--input", str(tmp_path / "in.txt"), "--out", str(tmp_path / "out")]}
    with pytest.raises(SystemExit, match="GPU"):
        main(["--checkpoint", str(tmp_path / "nothing here"), *given.get(command, []),
              "--device", f"cuda:{torch.cuda.device_count()}"])


def test_the_app_on_a_gpu_it_lacks_or_with_workers_forked_from_one_says_why_and_loads_nothing(monkeypatch, tmp_path):
    from attention_inspector.ui import load_services

    missing = f"cuda:{torch.cuda.device_count()}"
    with pytest.raises(ValueError, match="GPU"):
        load_services(tmp_path, device=missing)
    monkeypatch.setenv("DEVICE", missing)
    with pytest.raises(ValueError, match="GPU"):
        load_services(tmp_path)
    if torch.cuda.is_available():
        with pytest.raises(ValueError, match="TRACE_WORKERS"):
            load_services(tmp_path, workers=1, device="cuda")
    monkeypatch.setenv("CHECKPOINTS", str(tmp_path))
    monkeypatch.setattr(sys, "argv", ["app.py"])
    with pytest.raises(SystemExit, match="app.py: .*GPU"):
        runpy.run_path(str(Path(__file__).parent.parent / "app.py"), run_name="__main__")


def answers(translator) -> list:
    """What each operation answers, as tokens and arrays, for comparing two devices."""
    traced = translator.trace(SENTENCE, mask=["cross.1.1"])
    tokens = traced.target_tokens
    beam = translator.beam(SENTENCE, beam_size=2)
    contributions = translator.contributions(SENTENCE, tokens)
    patched = translator.patching(SENTENCE, "a woman is reading a newspaper .", tokens, step=0)
    src_ids, tgt_ids = translator.given_translation(SENTENCE, tokens)
    return [tokens, traced.trace.probabilities, traced.trace.cross_attention, traced.trace.encoder_attention,
            translator.translate([SENTENCE, "two dogs run ."], beam_size=2),
            translator.score(SENTENCE, tokens).log_probabilities,
            [hypothesis.token_ids for hypothesis in beam.beam.n_best], [h.score for h in beam.beam.n_best],
            None if contributions is None else contributions.decoder,
            *[translator.attributions(SENTENCE, tokens, method, steps=4)[-1].source for method in ATTRIBUTION_METHODS],
            *patched.effects.values(), patched.stream,
            *quick_faithfulness(translator.model, src_ids, tgt_ids, 0).sufficiency.values()]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here: the CUDA path runs where there is one")
@pytest.mark.parametrize("name", ["transformer", "rnn", "t5-like"])
def test_on_a_gpu_every_operation_answers_as_on_the_cpu(translators_of_each_kind, name):
    cpu = translators_of_each_kind[name]
    gpu = cpu.on("cuda")
    assert gpu.device.type == "cuda" and cpu.device.type == "cpu" and cpu.on("cpu") is cpu
    for ours, theirs in zip(answers(cpu), answers(gpu), strict=True):
        if isinstance(ours, np.ndarray) or (isinstance(ours, list) and ours and isinstance(ours[0], float)):
            assert theirs == pytest.approx(ours, abs=1e-4, nan_ok=True)
        else:
            assert theirs == ours
