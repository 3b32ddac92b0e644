"""Tiny random Hugging Face translation models, built offline as `save_pretrained` writes them, with the real HF
tokenizer classes (../shared/HF-NOTES.md): the converter's tests read these folders as they would a Hub download.

Weights are drawn wide (std 0.4) with a non-zero `final_logits_bias`: with the small weights of a fresh model, a
wrong switch (interleaved sinusoids, another activation) moves the logits too little to be seen.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

WORDS = ("a man woman child dog reads runs plays with the ball in park newspaper water green red über Straße "
         "ein Mann Frau Kind Hund liest läuft spielt mit dem Ball im Zeitung Wasser grün rot façade naïve café "
         "deux chiens courent sur l'herbe").split()
LINES = [" ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(3 + i % 9)).capitalize() + "."
         for i in range(300)]
TINY = dict(d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
            encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64)


def _sentencepiece(path: Path, **ids) -> Path:
    import sentencepiece

    sentencepiece.SentencePieceTrainer.train(sentence_iterator=iter(LINES), model_prefix=str(path), vocab_size=90,
                                             hard_vocab_limit=False, minloglevel=2, **ids)
    return path.with_suffix(".model")


def _widen(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "embed_positions" in name and "mbart" not in type(model).__name__.lower():
                continue
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.4
                            + (1.0 if name.endswith("norm.weight") else 0.0))
        if hasattr(model, "final_logits_bias"):
            model.final_logits_bias.copy_(torch.randn(model.final_logits_bias.shape, generator=generator) * 0.1)
    return model.eval()


# Helsinki-NLP/opus-mt-en-de's config.json, for the benchmark (74 M parameters).
# NLLB-200-distilled-600M's sizes (d 1024, 12 + 12 layers, 16 heads, ffn 4096, 256,206 tokens), for a Marian model
# whose arithmetic is that of the real one (benchmarks/hub_model.py --family nllb-600m).
NLLB_600M = dict(d_model=1024, encoder_layers=12, decoder_layers=12, encoder_attention_heads=16,
                 decoder_attention_heads=16, encoder_ffn_dim=4096, decoder_ffn_dim=4096, max_position_embeddings=1024,
                 vocab_size=256206)
OPUS_MT_EN_DE = dict(d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8,
                     decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048,
                     max_position_embeddings=512, vocab_size=58101)


def marian(folder: Path, targets: tuple[str, ...] = (), seed: int = 0, config: dict | None = None) -> Path:
    """An opus-mt-like model: one sentencepiece model per side (the same one here), one vocabulary; `targets`
    adds >>xxx<< codes as a multi-target model has them. `config`: sizes other than the tiny ones (a `vocab_size`
    larger than the pieces is filled with placeholder tokens)."""
    sizes = {**TINY, **(config or {})}
    vocab_size = sizes.pop("vocab_size", None)
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    work = folder / "build"
    work.mkdir(exist_ok=True)
    spm = _sentencepiece(work / "spm", bos_id=-1, eos_id=0, unk_id=1, pad_id=-1)
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_file=str(spm))
    vocab = {"</s>": 0, "<unk>": 1}
    for code in targets:
        vocab[f">>{code}<<"] = len(vocab)
    for index in range(processor.get_piece_size()):
        vocab.setdefault(processor.id_to_piece(index), len(vocab))
    while vocab_size is not None and len(vocab) < vocab_size - 1:
        vocab[f"<filler {len(vocab)}>"] = len(vocab)
    vocab["<pad>"] = len(vocab)
    (work / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    tokenizer = MarianTokenizer(source_spm=str(spm), target_spm=str(spm), vocab=str(work / "vocab.json"),
                                source_lang="en", target_lang="de")
    tokenizer.save_pretrained(folder)
    config = MarianConfig(vocab_size=len(vocab), pad_token_id=vocab["<pad>"], eos_token_id=0,
                          decoder_start_token_id=vocab["<pad>"], activation_function="swish", scale_embedding=True,
                          **sizes)
    _widen(MarianMTModel(config), seed).save_pretrained(folder)
    shutil.rmtree(work)
    return folder


def nllb(folder: Path, seed: int = 1) -> Path:
    """An NLLB-200-like model (M2M100 architecture) with NLLB's tokenizer and language codes."""
    from transformers import M2M100Config, M2M100ForConditionalGeneration, NllbTokenizer
    from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES

    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_sentencepiece(folder / "spm", bos_id=0, pad_id=1, eos_id=2, unk_id=3),
                    folder / "sentencepiece.bpe.model")
    for leftover in folder.glob("spm.*"):
        leftover.unlink()
    tokenizer = NllbTokenizer.from_pretrained(folder)
    tokenizer.add_tokens(FAIRSEQ_LANGUAGE_CODES, special_tokens=True)
    tokenizer.src_lang, tokenizer.tgt_lang = "eng_Latn", "deu_Latn"
    tokenizer.save_pretrained(folder)
    config = M2M100Config(vocab_size=len(tokenizer), pad_token_id=1, bos_token_id=0, eos_token_id=2,
                          decoder_start_token_id=2, activation_function="relu", scale_embedding=True, **TINY)
    _widen(M2M100ForConditionalGeneration(config), seed).save_pretrained(folder)
    return folder


def m2m100(folder: Path, seed: int = 3) -> Path:
    """An M2M100-like model with M2M100's own tokenizer: vocab.json over a sentencepiece model, __en__ codes."""
    import sentencepiece
    from transformers import M2M100Config, M2M100ForConditionalGeneration, M2M100Tokenizer

    folder.mkdir(parents=True, exist_ok=True)
    work = folder / "build"
    work.mkdir(exist_ok=True)
    spm = _sentencepiece(work / "spm", unk_id=0, bos_id=1, eos_id=2, pad_id=-1)
    processor = sentencepiece.SentencePieceProcessor(model_file=str(spm))
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for index in range(processor.get_piece_size()):
        vocab.setdefault(processor.id_to_piece(index), len(vocab))
    (work / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    tokenizer = M2M100Tokenizer(vocab_file=str(work / "vocab.json"), spm_file=str(spm), src_lang="en", tgt_lang="de")
    tokenizer.save_pretrained(folder)
    config = M2M100Config(vocab_size=len(vocab) + 100 + 8, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                          decoder_start_token_id=2, activation_function="relu", scale_embedding=True, **TINY)
    _widen(M2M100ForConditionalGeneration(config), seed).save_pretrained(folder)
    shutil.rmtree(work)
    return folder


def mbart50(folder: Path, seed: int = 2) -> Path:
    """An mBART-50-like model: learned positions, a LayerNorm after the embeddings, GELU, language codes."""
    from transformers import MBart50Tokenizer, MBartConfig, MBartForConditionalGeneration

    folder.mkdir(parents=True, exist_ok=True)
    # XLM-R's sentencepiece layout, which mBART-50's tokenizer shifts into fairseq's ids
    shutil.copyfile(_sentencepiece(folder / "spm", unk_id=0, bos_id=1, eos_id=2, pad_id=-1),
                    folder / "sentencepiece.bpe.model")
    for leftover in folder.glob("spm.*"):
        leftover.unlink()
    tokenizer = MBart50Tokenizer.from_pretrained(folder, src_lang="en_XX", tgt_lang="de_DE")
    tokenizer.save_pretrained(folder)
    config = MBartConfig(vocab_size=len(tokenizer), pad_token_id=1, bos_token_id=0, eos_token_id=2,
                         decoder_start_token_id=2, activation_function="gelu", scale_embedding=True, **TINY)
    _widen(MBartForConditionalGeneration(config), seed).save_pretrained(folder)
    return folder


# google-t5/t5-small's config.json, for the benchmark (60 M parameters).
T5_SMALL = dict(d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_decoder_layers=6, num_heads=8,
                relative_attention_num_buckets=32, relative_attention_max_distance=128, vocab_size=32128)


def t5(folder: Path, seed: int = 4, gated: bool = False, config: dict | None = None) -> Path:
    """A T5-like model: relative position bias, RMSNorm, no biases, heads whose width is not d_model / heads (as in
    flan-t5-small). Original T5: ReLU, the output tied to the embedding and scaled, and t5-small's translation
    prompts in task_specific_params. `gated`: v1.1 / flan-t5, gated GELU and an output matrix of its own (saved as
    transformers 4 saved it), no prompts in the config (the paper's three are used). `config`: other sizes."""
    from safetensors.torch import load_file, save_file
    from transformers import T5Config, T5ForConditionalGeneration, T5Tokenizer

    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_sentencepiece(folder / "spm", pad_id=0, eos_id=1, unk_id=2, bos_id=-1), folder / "spiece.model")
    for leftover in folder.glob("spm.*"):
        leftover.unlink()
    tokenizer = T5Tokenizer.from_pretrained(folder, extra_ids=10)
    tokenizer.save_pretrained(folder)
    prompts = {} if gated else {"task_specific_params": {
        f"translation_en_to_{code}": {"prefix": f"translate English to {name}: ", "num_beams": 4}
        for code, name in (("de", "German"), ("fr", "French"))}}
    sizes = dict(vocab_size=len(tokenizer) + 6, d_model=16, d_kv=4, d_ff=32, num_layers=2, num_decoder_layers=2,
                 num_heads=6, relative_attention_num_buckets=8, relative_attention_max_distance=20) | (config or {})
    config = T5Config(feed_forward_proj="gated-gelu" if gated else "relu", decoder_start_token_id=0, pad_token_id=0,
                      eos_token_id=1, **sizes, **prompts)
    _widen(T5ForConditionalGeneration(config), seed).save_pretrained(folder)
    if gated:  # v1.1's own output matrix, which transformers 5 keeps apart when it differs from the embedding
        weights = load_file(str(folder / "model.safetensors"))
        weights["lm_head.weight"] = torch.randn(weights["shared.weight"].shape,
                                                generator=torch.Generator().manual_seed(seed + 1000)) * 0.4
        save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
        settings = json.loads((folder / "config.json").read_text())
        settings.pop("scale_decoder_outputs", None)
        (folder / "config.json").write_text(json.dumps({**settings, "tie_word_embeddings": False}))
        # and its tokenizer.json as transformers 4 wrote it: a Metaspace alone, spaces collapsed by the normalizer
        spec = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
        spec["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True}
        spec["normalizer"] = {"type": "Sequence", "normalizers": [
            spec["normalizer"], {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]}
        (folder / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    return folder
