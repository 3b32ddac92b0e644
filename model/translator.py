"""A trained model with its tokenizers and vocabularies: text in, tokens (and traces) out."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from model.data import pad, token_batches
from model.decoding import Trace, beam_search, greedy_trace
from model.vocab import EOS_ID, UNK_ID, Tokenizer, Truecaser, Vocab


MAX_INPUT_CHARS = 2000


class InputError(ValueError):
    """Text the model cannot translate (empty, or longer than its positions); the message says why."""


@dataclass
class TracedTranslation:
    """A greedy `Trace` with its tokens as strings, ready to display."""

    source_tokens: list[str]  # what the encoder saw: lower-cased words, then <eos>
    unknown: list[bool]  # per source token: not in the vocabulary, so read as <unk>
    target_tokens: list[str]  # the token chosen at each step (the last may be <eos>)
    top_tokens: list[list[str]]  # per step, the top-k candidates, best first
    text: str  # the translation, truecased and detokenized
    trace: Trace

    @property
    def decoder_input_tokens(self) -> list[str]:
        """What the decoder read at each step: <sos>, then the previous step's choice."""
        return ["<sos>"] + self.target_tokens[:-1]


@dataclass
class Translator:
    """Everything needed to translate with one checkpoint; read-only once built, so users can share it."""

    model: torch.nn.Module  # a Transformer or an RNNSeq2Seq: both encode / decode / new_cache
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer
    src_vocab: Vocab
    tgt_vocab: Vocab
    truecaser: Truecaser
    metrics: dict = field(default_factory=dict)

    @property
    def max_src_tokens(self) -> int:
        """The longest source (in tokens, <eos> excluded) the model's positions can hold."""
        return self.model.config.max_len - 1

    def encode_source(self, tokens: list[str]) -> list[int]:
        """Source ids for `tokens`, ending with <eos> as in training."""
        return self.src_vocab.encode(tokens) + [EOS_ID]

    @torch.no_grad()
    def translate_tokens(self, sentences: list[list[str]], beam_size: int = 1, max_tokens: int = 6000,
                         length_penalty: float = 1.0) -> list[list[str]]:
        """Translate tokenized sentences in length-bucketed batches; returns lower-cased target tokens.

        A generated <unk> is dropped from the output: it stands for a word the vocabulary cannot spell,
        and as text it only hurts readers (and BLEU). Traces keep it, step by step.
        """
        ids = [self.encode_source(s[:self.max_src_tokens]) for s in sentences]
        outputs: list[list[str]] = [[] for _ in ids]
        lengths = [len(i) for i in ids]
        for batch in token_batches(lengths, lengths, max_tokens // max(beam_size, 1)):
            src = pad([ids[i] for i in batch]).to(next(self.model.parameters()).device)
            for i, hypothesis in zip(batch, beam_search(self.model, src, beam_size,
                                                         length_penalty=length_penalty)):
                outputs[i] = self.tgt_vocab.decode(hypothesis, drop_unknown=True)
        return outputs

    def translate(self, texts: list[str], beam_size: int = 1) -> list[str]:
        """Translate raw sentences into detokenized, truecased text."""
        tokens = self.translate_tokens(self.src_tokenizer.tokenize_all(texts), beam_size)
        return [self.to_text(t) for t in tokens]

    def to_text(self, tokens: list[str]) -> str:
        """Display text of target tokens: truecased and detokenized."""
        return self.tgt_tokenizer.detokenize(self.truecaser(tokens))

    def trace(self, text: str, top_k: int = 5) -> TracedTranslation:
        """Greedy translation of one sentence, recording every step; raises InputError for unusable text."""
        if len(text) > MAX_INPUT_CHARS:  # checked before tokenizing, so a huge paste costs nothing
            raise InputError(f"The input has {len(text)} characters; the limit is {MAX_INPUT_CHARS}. "
                             f"This model reads at most {self.max_src_tokens} tokens.")
        tokens = self.src_tokenizer(text)
        if not tokens:
            raise InputError("Type a sentence to translate: the input is empty.")
        if len(tokens) > self.max_src_tokens:
            raise InputError(f"The input has {len(tokens)} tokens; this model reads at most "
                             f"{self.max_src_tokens}. Please shorten it.")
        src_ids = self.encode_source(tokens)
        trace = greedy_trace(self.model, src_ids, top_k=top_k)
        itos = self.tgt_vocab.itos
        target_tokens = [itos[i] for i in trace.token_ids]
        return TracedTranslation(
            source_tokens=tokens + ["<eos>"],
            unknown=[i == UNK_ID for i in src_ids],
            target_tokens=target_tokens,
            top_tokens=[[itos[i] for i in row] for row in trace.top_ids.tolist()],
            text=self.to_text(self.tgt_vocab.decode(trace.token_ids, drop_unknown=True)),
            trace=trace,
        )
