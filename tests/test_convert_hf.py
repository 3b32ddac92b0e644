"""Hub models converted into the Transformer (model/hub/convert_hf.py) compute what transformers computes: tiny random
models of each family, built offline with the real HF tokenizer classes (tests/hub_models.py), checked against
transformers' eager attention."""

import json
import pickle
import sys
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from attention_inspector.model.hub.convert_hf import ConversionError, convert, main
from attention_inspector.model.nets.decoding import output_limit
from attention_inspector.model.serving.checkpoint import load_checkpoint
from attention_inspector.model.serving.translator import InputError

sys.path.insert(0, str(Path(__file__).parent))
import hub_models  # noqa: E402
from tests.conftest import model_rounding  # noqa: E402

transformers = pytest.importorskip("transformers")

BUILDERS = {"marian": hub_models.marian, "nllb": hub_models.nllb, "m2m100": hub_models.m2m100,
            "mbart50": hub_models.mbart50, "t5": hub_models.t5, "flan-t5": partial(hub_models.t5, gated=True)}
TEXT = "A man reads the newspaper in the park."
HOSTILE = ["Ein Mann liest 😀🦜 im Park.", "naïve café über, nai\u0308ve cafe\u0301",  # emoji; precomposed, combining
           "control\u0000chars\u0007and\u200b\ufeffzero width", "<script>alert('x')</script> &amp; <b>bold</b>",
           "  spaces   and\ttabs\n newlines  ", "名古屋 Ελληνικά עברית العربية", "the </s> end <unk> <pad>",
           ("A man reads a newspaper. " * 80)[:2000]]


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """Each family's Hub folder, its conversion, and transformers' model and tokenizer of it."""
    root = tmp_path_factory.mktemp("hub")
    made = {}
    for name, build in BUILDERS.items():
        folder = build(root / name)
        made[name] = (folder, load_checkpoint(convert(str(folder), root / f"{name}-converted")),
                      transformers.AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager").eval(),
                      transformers.AutoTokenizer.from_pretrained(folder))
    return made


def hub_to_ours(translator, tokenizer) -> torch.Tensor:
    """Our id of every Hub id (the Hub's specials under our names)."""
    renamed = {tokenizer.pad_token: "<pad>", tokenizer.unk_token: "<unk>", tokenizer.eos_token: "<eos>"}
    vocab = {**tokenizer.get_vocab(), **getattr(tokenizer, "lang_token_to_id", {})}  # M2M100's codes are apart
    tokens = {index: token for token, index in vocab.items()}
    return torch.tensor([translator.tgt_vocab.stoi[renamed.get(tokens.get(i), tokens.get(i, f"<unused {i}>"))]
                         for i in range(len(translator.tgt_vocab) - 1)])


def hub_ids(translator, tokenizer, our_ids: list[int]) -> list[int]:
    """The Hub ids of our ids."""
    index = hub_to_ours(translator, tokenizer)
    ours_to_hub = {int(o): h for h, o in enumerate(index.tolist())}
    return [ours_to_hub[i] for i in our_ids]


def hub_text(translator, text: str) -> str:
    """What a transformers user passes for `text`: T5's prompt first ("translate English to German: ")."""
    languages = translator.languages
    return languages.prompts[languages.source, languages.target] + text if languages and languages.prompts else text


def out_projection(model, kind: str, layer: int) -> torch.nn.Linear:
    """transformers' output projection of an encoder self-attention or a cross-attention layer."""
    if model.config.model_type == "t5":
        return (model.encoder.block[layer].layer[0].SelfAttention.o if kind == "encoder"
                else model.decoder.block[layer].layer[1].EncDecAttention.o)
    return (model.model.encoder.layers[layer].self_attn.out_proj if kind == "encoder"
            else model.model.decoder.layers[layer].encoder_attn.out_proj)


def first_target(translator, tokenizer) -> list[int]:
    """What transformers' generate is told to start with: the target language's code, if the model has one."""
    prefix = translator.with_target_prefix([])
    return [tokenizer.convert_tokens_to_ids(prefix[0])] if prefix else []


@pytest.mark.parametrize("family", BUILDERS)
def test_logits_and_every_attention_map_match_transformers(hub, family):
    _, translator, model, tokenizer = hub[family]
    src_ids = translator.encode_source(translator.source_tokens(TEXT))
    traced = translator.trace(TEXT)
    tgt_in = [2] + traced.trace.token_ids[:-1]  # <sos>, then the greedy choices
    hub_src = torch.tensor([hub_ids(translator, tokenizer, src_ids)])
    hub_tgt = torch.tensor([[model.config.decoder_start_token_id] + hub_ids(translator, tokenizer, tgt_in[1:])])
    with torch.no_grad():
        theirs = model(input_ids=hub_src, decoder_input_ids=hub_tgt, output_attentions=True)
        logits, attention = translator.model(torch.tensor([src_ids]), torch.tensor([tgt_in]), need_weights=True)
    ours = logits[0][:, hub_to_ours(translator, tokenizer)]
    # Our modules and transformers' add their sums in other orders: the logits within the model's rounding at their
    # size, the weights (at most 1) within it at 1 (tests/conftest.py).
    rounding = model_rounding(translator.model.config)
    assert (ours - theirs.logits[0]).abs().max() < rounding * float(theirs.logits.abs().max())
    for mine, their in ((attention.encoder, theirs.encoder_attentions), (attention.decoder, theirs.decoder_attentions),
                        (attention.cross, theirs.cross_attentions)):
        assert len(their) == mine.size(0) and all(t.abs().sum() > 0 for t in their)
        assert (mine[:, 0] - torch.stack(their)[:, 0]).abs().max() < rounding


@pytest.mark.parametrize("family", BUILDERS)
def test_greedy_and_beam_tokens_match_generate(hub, family):
    _, translator, model, tokenizer = hub[family]
    for text in (TEXT, "Zwei Hunde laufen.", "deux chiens courent sur l'herbe"):
        traced = translator.trace(text)
        src = torch.tensor([hub_ids(translator, tokenizer, translator.encode_source(translator.source_tokens(text)))])
        forced = first_target(translator, tokenizer)
        # The limit ends a hypothesis as if with <eos>, as transformers' forced_eos_token_id does; greedy traces
        # simply stop there.
        options = dict(max_new_tokens=output_limit(translator.model, src.size(1)), do_sample=False,
                       bad_words_ids=[[tokenizer.pad_token_id]], forced_bos_token_id=forced[0] if forced else None)
        with torch.no_grad():
            greedy = model.generate(src, num_beams=1, forced_eos_token_id=None, **options)[0, 1:].tolist()
        assert greedy == hub_ids(translator, tokenizer, traced.trace.token_ids)
        beam = translator.beam(text, beam_size=5)
        options["max_new_tokens"] += 1  # the limit's own <eos>
        # Our beam's log-probabilities are over the tokens a model may emit (<pad> and <sos> left out, the rest
        # renormalised), as transformers' are with renormalize_logits after bad_words_ids.
        with torch.no_grad():
            best = model.generate(src, num_beams=5, early_stopping=True, length_penalty=beam.beam.length_penalty,
                                  forced_eos_token_id=tokenizer.eos_token_id, renormalize_logits=True,
                                  **options)[0, 1:].tolist()
        assert [t for t in best if t != tokenizer.pad_token_id] == \
            hub_ids(translator, tokenizer, translator.tgt_vocab.encode(beam.tokens(beam.beam.n_best[0])))


@pytest.mark.parametrize("family", BUILDERS)
def test_token_ids_match_the_hub_tokenizer_on_hostile_text(hub, family):
    _, translator, _, tokenizer = hub[family]
    for text in HOSTILE:
        ours = translator.encode_source(translator.source_prefix() + translator.src_tokenizer(text))
        assert hub_ids(translator, tokenizer, ours) == tokenizer(hub_text(translator, text)).input_ids, text


@pytest.mark.parametrize("family", BUILDERS)
def test_a_head_switched_off_matches_zeroing_its_slice_in_transformers(hub, family):
    _, translator, model, tokenizer = hub[family]
    src_ids = translator.encode_source(translator.source_tokens(TEXT))
    target = translator.trace(TEXT).target_tokens
    for kind, hub_module in (("encoder", out_projection(model, "encoder", 1)),
                             ("cross", out_projection(model, "cross", 0))):
        head, d_head = 2, translator.model.config.d_head

        def zero_head(_, inputs):
            x = inputs[0].clone()
            x[..., head * d_head:(head + 1) * d_head] = 0
            return (x,)

        handle = hub_module.register_forward_pre_hook(zero_head)
        try:
            tgt_in = [2] + translator.tgt_vocab.encode(target[:-1])
            with torch.no_grad():
                theirs = model(input_ids=torch.tensor([hub_ids(translator, tokenizer, src_ids)]),
                               decoder_input_ids=torch.tensor([[model.config.decoder_start_token_id]
                                                               + hub_ids(translator, tokenizer, tgt_in[1:])])).logits
        finally:
            handle.remove()
        layer = 2 if kind == "encoder" else 1
        with torch.no_grad():
            logits, _ = translator.model(torch.tensor([src_ids]), torch.tensor([tgt_in]),
                                         gates=translator.gates([f"{kind}.{layer}.{head + 1}"]))
            intact, _ = translator.model(torch.tensor([src_ids]), torch.tensor([tgt_in]))
        index = hub_to_ours(translator, tokenizer)
        rounding = model_rounding(translator.model.config, scale=float(theirs.abs().max()))  # as above
        assert (logits[0][:, index] - theirs[0]).abs().max() < rounding
        assert (intact[0][:, index] - theirs[0]).abs().max() > 1e-2 > rounding  # the head mattered


def test_a_wrong_switch_fails_the_parity_check(hub, tmp_path):
    """The control: Marian with the paper's interleaved sinusoids instead of its halves is far off."""
    folder, translator, model, tokenizer = hub["marian"]
    out = convert(str(folder), tmp_path / "wrong")
    config = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**config, "positional": "sinusoidal"}))
    wrong = load_checkpoint(out)
    src_ids = wrong.encode_source(wrong.source_tokens(TEXT))
    tgt_in = [2] + wrong.tgt_vocab.encode(translator.trace(TEXT).target_tokens[:-1])
    with torch.no_grad():
        theirs = model(input_ids=torch.tensor([hub_ids(wrong, tokenizer, src_ids)]),
                       decoder_input_ids=torch.tensor([[model.config.decoder_start_token_id]
                                                       + hub_ids(wrong, tokenizer, tgt_in[1:])])).logits
        logits, _ = wrong.model(torch.tensor([src_ids]), torch.tensor([tgt_in]))
    assert (logits[0][:, hub_to_ours(wrong, tokenizer)] - theirs[0]).abs().max() > 1e-2


def test_a_multilingual_model_translates_between_the_languages_asked(hub):
    _, translator, model, tokenizer = hub["nllb"]
    traced = translator.trace(TEXT, src_lang="fra_Latn", tgt_lang="spa_Latn")
    assert traced.source_tokens[0] == "fra_Latn" and traced.target_tokens[0] == "spa_Latn"
    assert traced.trace.forced == 1  # the target code is given, not predicted
    default = translator.trace(TEXT)
    assert default.source_tokens[0] == "eng_Latn" and default.target_tokens[0] == "deu_Latn"
    with pytest.raises(InputError, match=r"no target language 'xx_Yyyy'; it has: ace_Arab, .*\(\d+ in all\)"):
        translator.trace(TEXT, tgt_lang="xx_Yyyy")
    branched = translator.trace(TEXT, force=default.target_tokens[:2])
    assert branched.target_tokens[:2] == default.target_tokens[:2]
    scored = translator.score(TEXT, default.target_tokens[1:])  # the code is added when it is missing
    assert scored.target_tokens == default.target_tokens


def test_a_multi_target_marian_model_reads_the_target_code_in_the_source(tmp_path):
    folder = hub_models.marian(tmp_path / "multi", targets=("fra", "spa"))
    translator = load_checkpoint(convert(str(folder), tmp_path / "converted", tgt_lang="spa"))
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    assert translator.source_tokens(TEXT)[0] == ">>spa<<"
    ours = translator.encode_source(translator.source_tokens(TEXT, tgt_lang="fra"))
    assert hub_ids(translator, tokenizer, ours) == tokenizer(">>fra<< " + TEXT).input_ids
    with pytest.raises(InputError, match="choose only the target language"):
        translator.trace(TEXT, src_lang="eng")


def test_a_one_way_model_refuses_a_language_choice(hub):
    with pytest.raises(InputError, match="one direction only"):
        hub["marian"][1].trace(TEXT, tgt_lang="de")


def test_the_checkpoint_records_where_it_came_from_and_shares_one_embedding(hub, tmp_path):
    folder, translator, model, _ = hub["nllb"]
    metrics = translator.metrics
    assert metrics["source"]["folder"] == str(folder.resolve()) and metrics["source"]["model_type"] == "m2m_100"
    ours = translator.model
    assert ours.src_embedding.tokens.weight.data_ptr() == ours.tgt_embedding.tokens.weight.data_ptr() \
        == ours.generator.weight.data_ptr()
    hub_parameters = sum(p.numel() for p in model.parameters())
    # the <sos> row, and the output bias NLLB has not (zeros)
    assert metrics["parameters"] == hub_parameters + model.config.d_model + len(translator.tgt_vocab)


@pytest.fixture
def marian_folder(hub, tmp_path):
    """A copy of the Marian folder to break."""
    import shutil

    return Path(shutil.copytree(hub["marian"][0], tmp_path / "marian"))


def test_unsupported_and_untrusted_models_are_refused(marian_folder, tmp_path):
    config = json.loads((marian_folder / "config.json").read_text())
    (marian_folder / "config.json").write_text(json.dumps({**config, "model_type": "gpt2"}))
    with pytest.raises(ConversionError, match="'gpt2' is not a translation family"):
        convert(str(marian_folder), tmp_path / "out")
    (marian_folder / "config.json").write_text(json.dumps({**config, "auto_map": {"AutoModel": "x.Model"}}))
    with pytest.raises(ConversionError, match="trust_remote_code"):
        convert(str(marian_folder), tmp_path / "out")


class Payload:
    def __reduce__(self):
        return (print, ("this ran",))


def test_a_pickle_that_runs_code_is_refused_and_a_plain_one_is_read(marian_folder, tmp_path, capsys):
    weights = marian_folder / "model.safetensors"
    state = __import__("safetensors.torch", fromlist=["load_file"]).load_file(str(weights))
    weights.unlink()
    torch.save(state, marian_folder / "pytorch_model.bin")
    plain = load_checkpoint(convert(str(marian_folder), tmp_path / "from-bin"))
    assert plain.trace(TEXT).target_tokens
    (marian_folder / "pytorch_model.bin").write_bytes(pickle.dumps({"x": Payload()}, protocol=2))  # torch.save's
    with pytest.raises(ConversionError, match="refused by the restricted unpickler"):
        convert(str(marian_folder), tmp_path / "out")
    assert "this ran" not in capsys.readouterr().out


def test_corrupt_weights_a_size_limit_and_missing_models_are_refused(marian_folder, tmp_path, monkeypatch):
    weights = marian_folder / "model.safetensors"
    with pytest.raises(ConversionError, match="the limit here is"):
        convert(str(marian_folder), tmp_path / "out", max_bytes=weights.stat().st_size - 1)
    weights.write_bytes(weights.read_bytes()[:200])
    with pytest.raises(ConversionError, match="not a readable safetensors file"):
        convert(str(marian_folder), tmp_path / "out")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConversionError, match="cannot be reached"):
        convert("Helsinki-NLP/opus-mt-en-de", tmp_path / "out")
    with pytest.raises(ConversionError, match="neither a folder nor a Hub model id"):
        convert("../no such/thing", tmp_path / "out")


def test_the_hub_answers_for_unknown_gated_and_language_errors(hub, tmp_path, monkeypatch):
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    response = type("Response", (), {"headers": {}, "status_code": 403, "request": None})()
    for error, message in ((GatedRepoError("gated", response=response), "gated repository"),
                           (RepositoryNotFoundError("missing", response=response), "There is no model")):
        monkeypatch.setattr(HfApi, "model_info", lambda self, *a, error=error, **k: (_ for _ in ()).throw(error))
        with pytest.raises(ConversionError, match=message):
            convert("someone/some-model", tmp_path / "out")
    with pytest.raises(ConversionError, match="no target language 'xx_Yyyy'"):
        convert(str(hub["nllb"][0]), tmp_path / "out", tgt_lang="xx_Yyyy")


def test_the_command_line_reports_an_error_without_a_traceback(tmp_path, capsys):
    assert main(["gpt2-does-not-exist/x y", "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_a_config_that_lacks_a_size_is_refused(marian_folder, tmp_path):
    config = json.loads((marian_folder / "config.json").read_text())
    del config["d_model"]
    (marian_folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConversionError, match="does not describe a model converted here: 'd_model'"):
        convert(str(marian_folder), tmp_path / "out")


def test_t5_reads_the_prompt_of_each_direction_its_config_names(hub, tmp_path):
    _, t5, _, _ = hub["t5"]
    assert t5.languages.sources() == ["en"] and t5.languages.targets() == ["de", "fr"]  # t5-small's task params
    french = "".join(t5.source_tokens(TEXT, tgt_lang="fr")).replace("▁", " ")
    assert french.startswith(" translate English to French: A man")
    with pytest.raises(InputError, match="does not translate fr→de; it translates en→de, en→fr"):
        t5.trace(TEXT, src_lang="fr", tgt_lang="de")
    assert t5.with_target_prefix(["▁Ein"]) == ["▁Ein"]  # nothing is given in the target
    ours = t5.model
    assert ours.src_embedding.tokens.weight.data_ptr() == ours.generator.weight.data_ptr()  # tied, scale folded
    folder, flan, _, _ = hub["flan-t5"]
    assert flan.languages.targets() == ["de", "fr", "ro"]  # no prompts in its config: the T5 paper's three
    assert flan.model.generator.weight.data_ptr() != flan.model.src_embedding.tokens.weight.data_ptr()
    romanian = load_checkpoint(convert(str(folder), tmp_path / "ro", tgt_lang="ro"))
    assert "Romanian:" in "".join(romanian.source_tokens(TEXT)).replace("▁", " ")
    with pytest.raises(ConversionError, match="no target language 'es'"):
        convert(str(folder), tmp_path / "es", tgt_lang="es")
    with pytest.raises(ConversionError, match="does not translate de→fr; it translates en→de, en→fr, en→ro"):
        convert(str(folder), tmp_path / "de-fr", src_lang="de", tgt_lang="fr")


def test_a_conversion_that_fails_leaves_nothing_in_the_checkpoints(tmp_path, monkeypatch):
    """The checkpoint is written into a hidden folder and moved into place only once whole: a conversion that
    fails midway (the disk full as the weights are written, say) leaves no half-written checkpoint to be served."""
    from attention_inspector.model.hub import convert_hf
    from attention_inspector.model.serving.catalog import Catalog

    source = hub_models.marian(tmp_path / "hub")
    root = tmp_path / "checkpoints"

    def disk_full(model, path, dtype=None):
        path.write_bytes(b"half")
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(convert_hf, "save_weights", disk_full)
    with pytest.raises(OSError, match="No space left"):
        convert_hf.convert(str(source), root / "opus")
    assert list(root.iterdir()) == [] and Catalog(root).errors == {}
    monkeypatch.undo()
    assert (convert_hf.convert(str(source), root / "opus") / "model.safetensors").is_file()
    assert [folder.name for folder in root.iterdir()] == ["opus"]


def test_weights_stored_as_float16_keep_the_model_and_bfloat16_stays_close(hub, tmp_path):
    """--dtype halves the file; the model computes in float32 from the rounded weights: float16's 11-bit
    significand keeps every probability of a tiny random model within 1e-3 of float32's and its greedy choices,
    bfloat16's 8 bits within 1e-2 (README: the figures)."""
    folder, reference, _, _ = hub["marian"]
    src = torch.tensor([reference.encode_source(reference.source_tokens(TEXT))])
    greedy = reference.trace(TEXT).trace.token_ids
    tgt = torch.tensor([[2] + greedy[:-1]])
    with torch.no_grad():
        probabilities = reference.model(src, tgt)[0].softmax(-1)
    for dtype, tolerance in ((torch.float16, 1e-3), (torch.bfloat16, 1e-2)):
        out = convert(str(folder), tmp_path / str(dtype), dtype=dtype)
        stored = load_file(str(out / "model.safetensors"))
        assert {tensor.dtype for tensor in stored.values()} == {dtype}
        translator = load_checkpoint(out)
        assert translator.metrics["source"]["stored_as"] == str(dtype).removeprefix("torch.")
        assert {p.dtype for p in translator.model.parameters()} == {torch.float32}
        with torch.no_grad():
            assert (translator.model(src, tgt)[0].softmax(-1) - probabilities).abs().max() < tolerance
        if dtype == torch.float16:
            assert translator.trace(TEXT).trace.token_ids == greedy


def test_the_conversion_reads_the_hub_file_without_changing_it_and_the_model_holds_its_own_memory(hub, tmp_path):
    """The Hub's tensors are mapped (read as used, never written: the token table is renumbered into a copy read
    straight from the file), and a loaded model's tensors live in memory of their own, not in a map of the file,
    which a new conversion may replace under it."""
    import hashlib

    from attention_inspector.model.serving.checkpoint import read_rows, read_safetensors

    folder = hub["nllb"][0]
    digest = hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()
    out = convert(str(folder), tmp_path / "nllb")
    assert hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest() == digest
    mapped, read = load_file(str(out / "model.safetensors")), read_safetensors(out / "model.safetensors")
    assert mapped.keys() == read.keys() and all(torch.equal(mapped[name], read[name]) for name in mapped)
    table = mapped["src_embedding.tokens.weight"]
    rows = [5, 6, 7, 0, 3, 4, 2, len(table) - 1]
    assert torch.equal(read_rows(out / "model.safetensors", "src_embedding.tokens.weight", rows), table[rows])
    with pytest.raises(ValueError, match="has no tensor"):
        read_rows(out / "model.safetensors", "nothing", rows)
    translator = load_checkpoint(out)
    (out / "model.safetensors").write_bytes(b"")  # a file replaced under a loaded model harms nothing
    assert translator.trace(TEXT).target_tokens


def test_a_tokenizer_of_another_model_is_refused_and_nothing_is_written(hub, tmp_path):
    """Tokenizer files that do not fit the weights (ids past the embedding's rows, or far fewer tokens than rows)
    are refused with a message that says so, not converted into a model that reads the wrong rows."""
    import shutil

    from attention_inspector.model.serving.catalog import Catalog

    root = tmp_path / "checkpoints"
    for build, edit, message in (
            ("marian", lambda vocab: {**vocab, "▁extra": max(vocab.values()) + 1}, "past the model's"),
            ("marian", lambda vocab: {token: index for token, index in vocab.items()
                                      if index < len(vocab) // 3 or token in ("<pad>", "<unk>", "</s>")},
             "names .* tokens for the model's")):
        folder = Path(shutil.copytree(hub[build][0], tmp_path / "hub", dirs_exist_ok=True))
        vocab = json.loads((folder / "vocab.json").read_text())
        (folder / "vocab.json").write_text(json.dumps(edit(vocab)))
        with pytest.raises(ConversionError, match=f"The tokenizer does not match the weights: .*{message}"):
            convert(str(folder), root / "opus")
    assert not root.exists() or (list(root.iterdir()) == [] and Catalog(root).errors == {})


def projections(model, kind: str, layer: int) -> tuple[torch.nn.Module, torch.nn.Module]:
    """transformers' own query and key projections of one attention layer of `kind`."""
    if model.config.model_type == "t5":
        blocks = model.encoder.block if kind == "encoder" else model.decoder.block
        attention = blocks[layer].layer[1].EncDecAttention if kind == "cross" else blocks[layer].layer[0].SelfAttention
        return attention.q, attention.k
    layers = model.model.encoder.layers if kind == "encoder" else model.model.decoder.layers
    attention = layers[layer].encoder_attn if kind == "cross" else layers[layer].self_attn
    return attention.q_proj, attention.k_proj


@pytest.mark.parametrize("family", BUILDERS)
def test_the_neuron_views_vectors_are_what_transformers_q_and_k_projections_give(hub, family):
    """The query and key vectors the neuron view shows (model/explain/neurons.py) are those of hooks on
    transformers' own projections: T5's unscaled, with a scale of 1; the others' with d_head^-0.5. The softmax of
    its scores is transformers' attention."""
    _, translator, model, tokenizer = hub[family]
    src_ids = translator.encode_source(translator.source_tokens(TEXT))
    target = translator.trace(TEXT).target_tokens
    tgt_in = [2] + translator.tgt_vocab.encode(target[:-1])
    d_head = translator.model.config.d_head
    for kind, layer, head in (("encoder", 1, 2), ("decoder", 1, 0), ("cross", 0, 3)):
        recorded = {}
        hooks = [module.register_forward_hook(lambda _, __, output, name=name: recorded.setdefault(name, output))
                 for name, module in zip(("q", "k"), projections(model, kind, layer))]
        try:
            with torch.no_grad():
                theirs = model(input_ids=torch.tensor([hub_ids(translator, tokenizer, src_ids)]),
                               decoder_input_ids=torch.tensor([[model.config.decoder_start_token_id]
                                                               + hub_ids(translator, tokenizer, tgt_in[1:])]),
                               output_attentions=True)
        finally:
            for hook in hooks:
                hook.remove()
        vectors = translator.neuron(TEXT, target, kind, layer + 1, head + 1)
        part = slice(head * d_head, (head + 1) * d_head)
        # Our modules and transformers' add their sums in other orders: within the model's rounding
        # (tests/conftest.py), queries and keys at their own size, the weights (at most 1) at 1.
        queries, keys = recorded["q"][0, :, part].numpy(), recorded["k"][0, :, part].numpy()
        rounding = model_rounding(translator.model.config)
        assert vectors.queries == pytest.approx(queries, abs=rounding * max(1.0, float(np.abs(queries).max())))
        assert vectors.keys == pytest.approx(keys, abs=rounding * max(1.0, float(np.abs(keys).max())))
        assert vectors.scale == pytest.approx(1.0 if family in ("t5", "flan-t5") else d_head ** -0.5)
        weights = {"encoder": theirs.encoder_attentions, "decoder": theirs.decoder_attentions,
                   "cross": theirs.cross_attentions}[kind][layer][0, head]
        for query in range(vectors.rows):
            scores = vectors.scores(query)
            seen = torch.tensor(scores).nan_to_num(nan=float("-inf")).softmax(-1)
            assert seen.numpy() == pytest.approx(weights[query].numpy(), abs=rounding)


def test_a_converted_marian_names_its_reverse_model_which_judges_its_translations(hub, tmp_path):
    """`--reverse` writes the judge's name into metrics.json; loaded beside it, it judges (model/explain/verdict.py).
    (The tiny Marian stands in for both directions: what is checked is which model judges.)"""
    import attention_inspector
    from attention_inspector.model.hub.convert_hf import main

    folder = hub["marian"][0]
    assert main([str(folder), "--out", str(tmp_path / "opus-en-de"), "--reverse", "opus-de-en"]) == 0
    assert json.loads((tmp_path / "opus-en-de" / "metrics.json").read_text())["verdict"] == {"evaluator": "opus-de-en"}
    alone = attention_inspector.load(tmp_path / "opus-en-de").detach(TEXT, "ein Hund")["verdict"]
    assert alone["evaluator"] is None and "is not loaded" in alone["lacking"][0]  # named, but not there yet
    assert main([str(folder), "--out", str(tmp_path / "opus-de-en")]) == 0
    judged = attention_inspector.load(tmp_path / "opus-en-de").detach(TEXT, "ein Hund")["verdict"]
    assert judged["evaluator"] == "opus-de-en" and judged["lacking"] == []
