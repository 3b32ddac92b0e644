"""A trained model with its tokenizers and vocabularies: text in, tokens (and traces) out (what it returns:
model/serving/traced.py)."""

from __future__ import annotations

import dataclasses
import reprlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import torch

from attention_inspector.model.explain.attribution import INTEGRATED_GRADIENTS
from attention_inspector.model.explain.attribution import METHODS as ATTRIBUTION_METHODS
from attention_inspector.model.explain.attribution import Attributions, attribute, attribute_steps
from attention_inspector.model.explain.contributions import (Contributions, alti_plus, alti_plus_pass, decomposed,
                                                             measure_maps)
from attention_inspector.model.explain.detachment import (NO_SOURCE_SHARE, Detachment, ScoredDetachment,
                                                          attention_peaks, thresholds_of, training_domain)
from attention_inspector.model.explain.estimates import patching_estimate, staged_patching
from attention_inspector.model.explain.neurons import HeadVectors, checked_head, head_vectors
from attention_inspector.model.explain.omissions import Omissions, omissions, source_words
from attention_inspector.model.explain.verdict import Reconstruction, content, stop_words
from attention_inspector.model.explain.patching import Patching, patch_heads
from attention_inspector.model.nets.decoding import (beam_search, beam_trace, chosen_log_probs, greedy_decode,
                                                     output_limit, teacher_forced, teacher_forced_log_probs)
from attention_inspector.model.nets.seq2seq import Attention, HeadGates, Seq2Seq, copies_gated, device_of, head_gates
from attention_inspector.model.nets.step_decoder import StepDecoder
from attention_inspector.model.nets.tracing import Trace, TraceBatch, TraceRequest, greedy_trace
from attention_inspector.model.nets.transformer import Transformer
from attention_inspector.model.text.batching import pad, token_batches
from attention_inspector.model.text.hub_tokenizer import Languages
from attention_inspector.model.text.vocab import EOS_ID, PAD_ID, SOS_ID, UNK_ID, Tokenizer, Truecaser, Vocab
from attention_inspector.model.serving.traced import TracedBeam, TracedScore, TracedTranslation
from attention_inspector.model.text.words import fitted, spelled, with_unknowns, words
from attention_inspector.model.text.words import scheme as word_scheme

MAX_INPUT_CHARS = 2000


class InputError(ValueError):
    """A request the model cannot serve (empty or overlong text, an unknown head, an unspellable forced token...);
    the message says why."""


def checked_text(text: object) -> str:
    """`text` if it is a string of real characters, else an InputError that says what is wrong with it."""
    if text is None:
        return ""
    if not isinstance(text, str):
        raise InputError(f"The text to translate must be a string, not {type(text).__name__}.")
    if len(text) > MAX_INPUT_CHARS:  # checked before anything else, so a huge paste costs nothing
        raise InputError(f"The input has {len(text)} characters; the limit is {MAX_INPUT_CHARS}.")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:  # JSON can carry lone UTF-16 surrogates, which are no characters
        raise InputError(f"The input is not valid Unicode: position {error.start} holds the lone surrogate "
                         f"U+{ord(text[error.start]):04X} (half of a character). Please re-type or re-paste it."
                         ) from None
    return text


def checked_strings(values: object, what: str) -> list[str]:
    """A list of strings (None: empty), or an InputError naming `what` was wrong."""
    if values is None:
        return []
    if isinstance(values, str) or not isinstance(values, (list, tuple)):
        raise InputError(f"{what} must be a list of strings, not {type(values).__name__}.")
    for value in values:
        if not isinstance(value, str):
            raise InputError(f"{what} must be a list of strings; it holds {reprlib.repr(value)} "
                             f"({type(value).__name__}).")
        checked_text(value)
    return list(values)


MAX_BEAM_SIZE = 16
@dataclass
class Translator:
    """Everything needed to translate with one checkpoint; read-only once built, so users can share it."""

    model: Seq2Seq  # a Transformer or an RNNSeq2Seq
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer
    src_vocab: Vocab
    tgt_vocab: Vocab
    truecaser: Truecaser
    metrics: dict = field(default_factory=dict)
    head_report: dict = field(default_factory=dict)  # heads.json (model/analysis/heads.py): what each head is worth
    languages: Languages | None = None  # a multilingual Hub model's language codes (model/text/hub_tokenizer.py)

    @property
    def device(self) -> torch.device:
        """Where the model's weights are (a command's `--device`, the app's `DEVICE`)."""
        return device_of(self.model)

    def on(self, device: torch.device | str) -> Translator:
        """This translator with its model on `device` (the step decoder's weights laid out there anew); itself
        where the model is there already."""
        if self.device == torch.device(device):
            return self
        return dataclasses.replace(self, model=self.model.to(device))

    @property
    def max_src_tokens(self) -> int:
        """The longest source (in tokens, <eos> excluded) the model's positions can hold."""
        return self.model.config.max_len - 1

    def encode_source(self, tokens: list[str]) -> list[int]:
        """Source ids for `tokens`, ending with <eos> as in training."""
        return self.src_vocab.encode(tokens) + [EOS_ID]

    @torch.no_grad()
    def translate_tokens(self, sentences: list[list[str]], beam_size: int = 1, max_tokens: int = 6000,
                         length_penalty: float = 1.0, gates: HeadGates | None = None, src_lang: str | None = None,
                         tgt_lang: str | None = None) -> list[list[str]]:
        """Translate tokenized sentences in length-bucketed batches (`gates` switching heads off; a multilingual
        model's languages, None: its defaults); returns lower-cased target tokens.

        A generated <unk> is dropped from the output: it stands for a word the vocabulary cannot spell,
        and as text it only hurts readers (and BLEU). Traces keep it, step by step.
        """
        if beam_size <= 1:
            return self.greedy_tokens(sentences, [gates], max_tokens, src_lang, tgt_lang)[0]
        ids, prefix = self.source_ids(sentences, src_lang, tgt_lang), self.target_prefix_ids(tgt_lang)
        outputs: list[list[str]] = [[] for _ in ids]
        lengths = [len(i) for i in ids]
        for batch in token_batches(lengths, lengths, max_tokens // beam_size):
            src = pad([ids[i] for i in batch], self.device)
            for i, hypothesis in zip(batch, beam_search(self.model, src, beam_size, length_penalty=length_penalty,
                                                         gates=gates, prefix=prefix)):
                outputs[i] = self.tgt_vocab.decode(hypothesis, drop_unknown=True)
        return outputs

    @torch.no_grad()
    def greedy_tokens(self, sentences: list[list[str]], gate_sets: list[HeadGates | None], max_tokens: int = 6000,
                      src_lang: str | None = None, tgt_lang: str | None = None) -> list[list[list[str]]]:
        """`translate_tokens` (greedy) once per gates of `gate_sets`, decoded together: a batch holds a copy of its
        sentences per gates, each copy gated apart (`max_tokens` source tokens in all), so that switching many
        heads off one at a time (the head report's BLEU per head) takes as many decodings as batches."""
        ids, prefix = self.source_ids(sentences, src_lang, tgt_lang), self.target_prefix_ids(tgt_lang)
        outputs: list[list[list[str]]] = [[[] for _ in ids] for _ in gate_sets]
        lengths = [len(i) for i in ids]
        for batch in token_batches(lengths, lengths, max(1, max_tokens // len(gate_sets))):
            src = pad([ids[i] for i in batch], self.device)
            decoded = greedy_decode(self.model, src.repeat(len(gate_sets), 1),
                                    gates=copies_gated(self.model, gate_sets, len(batch)), prefix=prefix)
            for copy, hypothesis in enumerate(decoded):
                outputs[copy // len(batch)][batch[copy % len(batch)]] = self.tgt_vocab.decode(hypothesis,
                                                                                            drop_unknown=True)
        return outputs

    def source_ids(self, sentences: list[list[str]], src_lang: str | None = None, tgt_lang: str | None = None
                   ) -> list[list[int]]:
        """Source ids of tokenized sentences, as `translate_tokens` reads them (cut to what the positions hold)."""
        source_prefix = self.source_prefix(src_lang, tgt_lang)
        return [self.encode_source((source_prefix + s)[:self.max_src_tokens]) for s in sentences]

    def target_prefix_ids(self, tgt_lang: str | None = None) -> list[int]:
        """The ids every translation starts with (a multilingual model's target language code; none else)."""
        return self.tgt_vocab.encode(self.with_target_prefix([], tgt_lang))

    def translate(self, texts: list[str], beam_size: int = 1) -> list[str]:
        """Translate raw sentences into detokenized, truecased text."""
        tokens = self.translate_tokens(self.src_tokenizer.tokenize_all(texts), beam_size)
        return [self.to_text(t) for t in tokens]

    def to_text(self, tokens: list[str]) -> str:
        """Display text of target tokens: joined into words, truecased and detokenized."""
        return self.tgt_tokenizer.detokenize(self.truecaser(self.tgt_tokenizer.words(tokens)))

    def __post_init__(self):
        # Traces step a Transformer's decoder through its weights laid out once (the GRU models step their modules):
        # the same tensors as the model's own where it is built to serve (in eval mode: `load_checkpoint`); a model
        # built to be trained keeps its own parameters.
        self.step_decoder = StepDecoder(self.model, share=not self.model.training) \
            if isinstance(self.model, Transformer) else None
        self.parameters = sum(p.numel() for p in self.model.parameters())  # a tied weight once

    def trace(self, text: str, top_k: int = 5, force: list[str] | None = None,
              mask: list[str] | None = None, src_lang: str | None = None, tgt_lang: str | None = None,
              told: Callable[[int, int], None] | None = None, detach: bool = False) -> TracedTranslation:
        """Greedy translation of one sentence, recording every step; raises InputError for an unusable request.

        `force`: target tokens (spelled as in `target_tokens`) that fix the first steps; decoding continues
        greedily after them. `mask`: heads to switch off, named `kind.layer.head` (e.g. "cross.2.5").
        `src_lang`, `tgt_lang`: a multilingual model's direction (None: its default); the target language's code
        is then the first target token, given (counted in `Trace.forced`). `told(steps, limit)`: after each step
        of a Transformer's (it may raise to stop). `detach`: score the translation's detachment from its source
        from the decoding's own pass (`TracedTranslation.detachment`: what `detachment` gives it, up to float
        rounding, without a second pass).
        """
        tokens, request = self.trace_request(text, top_k, force, mask, src_lang, tgt_lang, detach)
        if self.step_decoder is None:
            trace = greedy_trace(self.model, request.src_ids, top_k=top_k, force=request.force, gates=request.gates)
        else:
            batch = self.trace_batch()
            ticket = batch.add(request)
            trace = batch.run(told)[ticket]
        return self.traced(tokens, trace, request.gates, detach)

    def trace_request(self, text: str, top_k: int = 5, force: list[str] | None = None,
                      mask: list[str] | None = None, src_lang: str | None = None, tgt_lang: str | None = None,
                      detach: bool = False) -> tuple[list[str], TraceRequest]:
        """The source tokens of `text` and what tracing it takes (`trace`'s arguments checked and turned into ids;
        with `detach`, a Transformer's trace records the vectors ALTI+ decomposes), or an InputError saying why it
        cannot be traced."""
        tokens = self.source_tokens(text, src_lang, tgt_lang)
        src_ids = self.encode_source(tokens)
        force = self.in_pieces(checked_strings(force, "force"))
        force_ids = self.target_ids(self.with_target_prefix(force, tgt_lang), output_limit(self.model, len(src_ids)),
                                    "Forced token")
        return tokens, TraceRequest(src_ids, top_k, force_ids, self.gates(checked_strings(mask, "mask")),
                                    vectors=detach and self.step_decoder is not None)

    def trace_batch(self) -> TraceBatch:
        """A new batch in which traces of this Transformer decode together (continuous batching)."""
        return TraceBatch(self.model, self.step_decoder)

    def traced(self, tokens: list[str], trace: Trace, gates: HeadGates | None = None, detach: bool = False
               ) -> TracedTranslation:
        """A trace of the source `tokens` with its tokens as strings; with `detach`, its detachment scored from the
        trace (its probabilities, cross-attention and, a Transformer's, the `Trace.vectors` it recorded with the
        heads of `gates` switched off), which it then leaves out."""
        itos = self.tgt_vocab.itos
        target = [itos[i] for i in trace.token_ids]
        detachment = None
        if detach:
            try:
                # A forced token's probability may round to 0 in float32: its log is taken as float32's smallest.
                log_probabilities = np.log(np.maximum(trace.probabilities, np.finfo(np.float32).tiny))
                detachment = self.scored(tokens, target, [], log_probabilities, trace.cross_attention,
                                         None if trace.vectors is None else decomposed(self.model, trace.vectors,
                                                                                       gates))
            except InputError as error:
                detachment = str(error)
        return TracedTranslation(
            source_tokens=tokens + ["<eos>"],
            unknown=[i == UNK_ID for i in trace.src_ids],
            target_tokens=target,
            top_tokens=[[itos[i] for i in row] for row in trace.top_ids.tolist()],
            text=self.to_text(self.tgt_vocab.decode(trace.token_ids)),  # a generated <unk> stays visible
            trace=dataclasses.replace(trace, vectors=None), scheme=word_scheme(self.tgt_tokenizer),
            detachment=detachment,
        )

    def score(self, text: str, target_tokens: list[str], mask: list[str] | None = None,
              src_lang: str | None = None, tgt_lang: str | None = None) -> TracedScore:
        """The teacher-forced log-probability of each of `target_tokens` (spelled as in a trace's
        `target_tokens`) as a translation of `text`, with the heads of `mask` switched off."""
        tokens = self.source_tokens(text, src_lang, tgt_lang)
        src_ids = self.encode_source(tokens)
        target = checked_strings(target_tokens, "target_tokens")
        if not target:
            raise InputError("Give the target tokens to score: the list is empty.")
        target = self.with_target_prefix(self.in_pieces(target), tgt_lang)
        tgt_ids = self.target_ids(target, self.model.config.max_len - 1, "Target token")
        log_probs = teacher_forced_log_probs(self.model, src_ids, tgt_ids, self.gates(checked_strings(mask, "mask")))
        return TracedScore(source_tokens=tokens + ["<eos>"], target_tokens=target, log_probabilities=log_probs)

    def given_translation(self, text: str, target_tokens: list[str], src_lang: str | None = None,
                          tgt_lang: str | None = None) -> tuple[list[int], list[int]]:
        """Source ids of `text` and target ids of `target_tokens` (spelled as in a trace), or an InputError naming
        what cannot be read or emitted."""
        src_ids = self.encode_source(self.source_tokens(text, src_lang, tgt_lang))
        target = self.in_pieces(checked_strings(target_tokens, "target_tokens"))
        tgt_ids = self.target_ids(self.with_target_prefix(target, tgt_lang), self.model.config.max_len - 1,
                                  "Target token")
        return src_ids, tgt_ids

    def detachment(self, text: str, translation: list[str], mask: list[str] | None = None,
                   src_lang: str | None = None, tgt_lang: str | None = None,
                   with_omissions: bool = False) -> ScoredDetachment:
        """How far `translation` (target tokens, or words the model spells in pieces; <eos> included where it
        ends) rests on `text`, teacher-forced (model/explain/detachment.py), with the heads of `mask` switched off.
        Words the model cannot spell are read as <unk> and named; a multilingual model's target language code,
        given rather than predicted, is left out of the scores. `with_omissions`: the source words it left out too
        (`omissions`: a pass per span of the source). An InputError for an empty translation, one the model can spell
        no word of, or one past the length limit."""
        tokens = self.source_tokens(text, src_lang, tgt_lang)
        given = self.in_pieces(checked_strings(translation, "translation"))
        written = [token for token in given if token != "<eos>"]
        if not written:
            raise InputError("Give a translation to score: it is empty.")
        unknown = [token for token in given if token not in self.tgt_vocab]
        if len(unknown) == len(written):
            raise InputError(f"The model knows no word of this translation ({', '.join(map(repr, unknown[:5]))}"
                             f"{', ...' if len(unknown) > 5 else ''}): it cannot say how the translation rests on "
                             "the source. Is it in the model's target language?")
        target = self.with_target_prefix([token if token in self.tgt_vocab else "<unk>" for token in given],
                                         tgt_lang)
        tgt_ids = self.target_ids(target, self.model.config.max_len - 1, "Target token")
        src_ids = self.encode_source(tokens)
        gates = self.gates(checked_strings(mask, "mask"))
        if isinstance(self.model, Transformer):  # one pass: its logits, attention and ALTI+
            contributions, logits, attention = alti_plus_pass(self.model, src_ids, tgt_ids, gates)
            log_probabilities = chosen_log_probs(logits, tgt_ids)
        else:
            contributions, (log_probabilities, attention) = None, teacher_forced(self.model, src_ids, tgt_ids, gates,
                                                                                 need_weights=True)
        scored = self.scored(tokens, target, unknown, log_probabilities, attention.cross[:, 0].float().cpu().numpy(),
                             contributions)
        if not with_omissions:
            return scored
        return dataclasses.replace(scored, omissions=self.omissions(tokens, target, gates, contributions))

    def omissions(self, tokens: list[str], target: list[str], gates: HeadGates | None = None,
                  contributions: Contributions | None = None, only: set[int] | None = None,
                  share: tuple[int, int] | None = None) -> Omissions | str:
        """The source words that the translation `target` (its language code first, a multilingual model's) of the
        source `tokens` left out (model/explain/omissions.py), with the heads of `gates` off and, where the model has
        them, ALTI+'s `contributions` of the same translation (`only`: the words to score, by index; `share`: a share
        of the passes, `omissions`); or why none can be looked for."""
        given_first = int(self.languages is not None and self.languages.is_code(target[0]))
        try:
            return omissions(self.model, tokens + ["<eos>"], word_scheme(self.src_tokenizer),
                             self.prefix_length(tokens), self.encode_source(tokens), self.tgt_vocab.encode(target),
                             given_first, self.metrics, gates,
                             None if contributions is None else contributions.decoder, only, share)
        except ValueError as error:
            return str(error)

    def reconstruction(self, translation: str, source: str, evaluator: str,
                       needed: bool | tuple[int, int] = True) -> Reconstruction:
        """This model, as the evaluator named `evaluator` of a translation into its source language, reading the
        `translation` and writing the `source` back (model/explain/verdict.py): each source word's worst piece's
        surprisal, teacher-forced, the words it cannot write, and per translation word the change in the source's
        log-probability when the word is deleted (contrastive conditioning, a pass per span; `needed`: False, none
        (NaN), or (k, n) a share of the passes, `omissions`); a translation past its length limit read up to it
        (`fitted`)."""
        prefix = self.source_prefix()
        tokens, cut = self.read_back(translation, self.src_tokenizer, self.src_vocab, self.max_src_tokens - len(prefix))
        tokens = prefix + tokens
        pieces = self.in_pieces(with_unknowns(checked_text(source), self.tgt_tokenizer))
        if not pieces:
            raise InputError("The source is empty: there is nothing to write back.")
        written = [piece if piece in self.tgt_vocab else "<unk>" for piece in pieces] + ["<eos>"]
        tgt_ids = self.target_ids(written, self.model.config.max_len - 1, "Source token")
        log_probabilities = teacher_forced_log_probs(self.model, self.encode_source(tokens), tgt_ids)
        labels, spans = words(written[:-1], word_scheme(self.tgt_tokenizer))
        surprisal = np.array([-log_probabilities[list(span)].min() for span in spans])
        unknown = np.array([any(written[i] == "<unk>" for i in span) for span in spans], dtype=bool)
        translation_words = source_words(tokens + ["<eos>"], word_scheme(self.src_tokenizer), len(prefix))[0]
        judged = content(translation_words, stop_words(self.src_tokenizer.lang))
        deleted = "not asked" if needed is False else self.omissions(  # the content words' alone: only they are judged
            tokens, written, only=set(np.flatnonzero(judged).tolist()), share=None if needed is True else needed)
        changes = np.full(len(translation_words), np.nan) if isinstance(deleted, str) else deleted.contrastive
        return Reconstruction(evaluator, labels, surprisal, unknown, translation_words, changes, cut)

    def prefix_length(self, tokens: list[str]) -> int:
        """How many of the source `tokens` are a prefix the model reads before the text: a language code, or T5's
        prompt."""
        if self.languages is None:
            return 0
        if self.languages.is_code(tokens[0]):
            return 1
        prompts = [self.src_tokenizer(prompt.rstrip()) for prompt in (self.languages.prompts or {}).values()]
        return max((len(prompt) for prompt in prompts if tokens[:len(prompt)] == prompt), default=0)

    def scored(self, tokens: list[str], target: list[str], unknown: list[str], log_probabilities: np.ndarray,
               cross_attention: np.ndarray, contributions: Contributions | None) -> ScoredDetachment:
        """The detachment of translation `target` (its language code first, a multilingual model's; read
        teacher-forced, or a trace's) of the source `tokens`, from each target token's log-probability, the
        cross-attention (L, H, T, S) and ALTI+ (None: a GRU's), `unknown` the words read as <unk>; an InputError
        for a translation of no word."""
        # A multilingual model's target language code is given to it, not predicted: it is not scored.
        given_first = int(self.languages is not None and self.languages.is_code(target[0]))
        if all(token == "<eos>" for token in target[given_first:]):
            raise InputError("The translation has no word (only <eos>): there is nothing to score.")
        measured = Detachment(
            log_probabilities=log_probabilities[given_first:],
            attention_peaks=attention_peaks(cross_attention)[given_first:],
            source_shares=None if contributions is None else contributions.source_contribution[given_first:],
            unavailable=None if contributions is not None else NO_SOURCE_SHARE)
        return ScoredDetachment(tokens + ["<eos>"], target[given_first:], unknown, measured, contributions,
                                *thresholds_of(self.metrics), domain=training_domain(self.metrics))

    def token_id(self, token: str | None, what: str) -> int | None:
        """The id of one target token of the model's, spelled as the candidates show it (None for None), or an
        InputError naming `what` it was meant to be."""
        if token is None:
            return None
        pieces = self.in_pieces(checked_strings([token], what))
        if len(pieces) != 1 or pieces[0] not in self.tgt_vocab:
            raise InputError(f"The {what} must be one token the model has (as the candidates show it), not "
                             f"{reprlib.repr(token)}.")
        return self.tgt_vocab.stoi[pieces[0]]

    def patching(self, text: str, counterfactual: str, target_tokens: list[str], step: int,
                 token: str | None = None, contrast: str | None = None, src_lang: str | None = None,
                 tgt_lang: str | None = None, told: Callable[[int, int], None] = lambda done, total: None,
                 estimate: bool = False) -> Patching:
        """Patching per head (model/explain/patching.py) at `step` (0-based) of `target_tokens` (spelled as in a
        trace) as the translation of `text`: each head's output taken from the run of `counterfactual` on the same
        prefix; `token` (default: the one at that step) scored, against `contrast` if given. An InputError for what
        cannot be read. `told(done, total)`: the patched runs, as they are done (it may raise to stop). With
        `estimate`, attribution patching's grids (model/explain/estimates.py) in two passes and a backward one."""
        src_ids, counterfactual_ids, tgt_ids = self.patching_ids(text, counterfactual, target_tokens, step, src_lang,
                                                                 tgt_lang)
        token_id, contrast_id = self.token_id(token, "token"), self.token_id(contrast, "contrast")
        if not isinstance(estimate, bool):
            raise InputError(f"estimate must be true or false, not {reprlib.repr(estimate)}.")
        if estimate:
            return patching_estimate(self.model, src_ids, counterfactual_ids, tgt_ids, step, token_id, contrast_id)
        return patch_heads(self.model, src_ids, counterfactual_ids, tgt_ids, step, token_id, contrast_id, told=told)

    def patching_ids(self, text: str, counterfactual: str, target_tokens: list[str], step: object,
                     src_lang: str | None, tgt_lang: str | None) -> tuple[list[int], list[int], list[int]]:
        """The ids patching reads (the sentence's, the counterfactual's, the translation's), `step` checked
        against the translation; an InputError for what cannot be read."""
        src_ids, tgt_ids = self.given_translation(text, target_tokens, src_lang, tgt_lang)
        counterfactual_ids = self.encode_source(self.source_tokens(counterfactual, src_lang, tgt_lang))
        if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step < len(tgt_ids):
            raise InputError(f"The step must be a whole number from 1 to {len(tgt_ids)}, not {reprlib.repr(step)}.")
        return src_ids, counterfactual_ids, tgt_ids

    def staged_patching(self, text: str, counterfactual: str, target_tokens: list[str], step: int,
                        contrast: str | None = None, src_lang: str | None = None, tgt_lang: str | None = None,
                        told: Callable[[int, int], None] = lambda done, total: None) -> Iterator[Patching]:
        """`patching` for a large model, in stages (model/explain/estimates.py `staged_patching`): the estimated
        grids at once, then the heads they rank highest patched exactly, a few at a time. An InputError (raised
        before the first stage) for what cannot be read."""
        src_ids, counterfactual_ids, tgt_ids = self.patching_ids(text, counterfactual, target_tokens, step, src_lang,
                                                                 tgt_lang)
        return staged_patching(self.model, src_ids, counterfactual_ids, tgt_ids, step,
                               contrast=self.token_id(contrast, "contrast"), told=told)

    def reference_ids(self, source: list[str], target: list[str], src_lang: str | None = None,
                      tgt_lang: str | None = None) -> tuple[list[int], list[int]]:
        """The ids a tokenized sentence and its reference translation are read and written as, teacher-forced: a
        multilingual model's language codes first (`src_lang`, `tgt_lang`: its direction; None: its default), the
        target ending with <eos>, each cut to what the model's positions hold (a split's sentences, for the CLIs)."""
        prefix = self.source_prefix(src_lang, tgt_lang)
        src_ids = self.encode_source((prefix + source)[:self.max_src_tokens])
        tgt_ids = self.tgt_vocab.encode(self.with_target_prefix(target, tgt_lang)[:self.max_src_tokens]) + [EOS_ID]
        return src_ids, tgt_ids

    @torch.inference_mode()
    def reference_attention(self, source: list[str], target: list[str], src_lang: str | None = None,
                            tgt_lang: str | None = None) -> Attention:
        """Every attention map of a reference translation read teacher-forced (batch of one), from tokens as the
        tokenizers give them (`reference_ids`)."""
        src_ids, tgt_ids = self.reference_ids(source, target, src_lang, tgt_lang)
        device = self.device
        _, attention = self.model(torch.tensor([src_ids], device=device),
                                  torch.tensor([[SOS_ID] + tgt_ids[:-1]], device=device), need_weights=True)
        return attention

    def beam(self, text: str, beam_size: int | None = None, mask: list[str] | None = None,
             greedy_tokens: list[str] | None = None, src_lang: str | None = None, tgt_lang: str | None = None,
             told: Callable[[int, int], None] | None = None) -> TracedBeam:
        """Beam search of one sentence as evaluation runs it (the checkpoint's beam size and length penalty unless
        `beam_size` is given), recording the beam at every step, with the heads of `mask` switched off.

        `greedy_tokens`: the greedy translation with that mask, when the caller has it (else it is decoded).
        `told(steps, limit)`: after each step of the search (it may raise to stop)."""
        decoding = self.metrics.get("decoding", {})
        beam_size = decoding.get("beam_size", 5) if beam_size is None else beam_size
        if isinstance(beam_size, bool) or not isinstance(beam_size, int) or not 1 <= beam_size <= MAX_BEAM_SIZE:
            raise InputError(f"The beam size must be a whole number from 1 to {MAX_BEAM_SIZE}, "
                             f"not {reprlib.repr(beam_size)}.")
        tokens = self.source_tokens(text, src_lang, tgt_lang)
        src_ids = self.encode_source(tokens)
        gates = self.gates(checked_strings(mask, "mask"))
        prefix = self.tgt_vocab.encode(self.with_target_prefix([], tgt_lang))
        beam = beam_trace(self.model, src_ids, beam_size, length_penalty=decoding.get("length_penalty", 1.0),
                          gates=gates, prefix=prefix, told=told, decoder=self.step_decoder,
                          greedy=greedy_tokens is None)
        if greedy_tokens is None:
            ended = len(beam.greedy) < output_limit(self.model, len(src_ids))
            greedy_tokens = [self.tgt_vocab.itos[i] for i in beam.greedy] + ["<eos>"] * ended
        return TracedBeam(source_tokens=tokens + ["<eos>"], greedy_tokens=greedy_tokens, beam=beam,
                          itos=self.tgt_vocab.itos)

    def contributions(self, text: str, target_tokens: list[str], mask: list[str] | None = None,
                      src_lang: str | None = None, tgt_lang: str | None = None) -> Contributions | None:
        """ALTI+ of `target_tokens` (spelled as in a trace) as the translation of `text`
        (model/explain/contributions.py), with the heads of `mask` switched off; None for a model without a residual
        stream to decompose (the GRU models)."""
        if not isinstance(self.model, Transformer):
            return None
        return alti_plus(self.model, *self.given_translation(text, target_tokens, src_lang, tgt_lang),
                         self.gates(checked_strings(mask, "mask")))

    def attributions(self, text: str, target_tokens: list[str], method: str = INTEGRATED_GRADIENTS,
                     step: int | None = None, contrast: str | None = None, mask: list[str] | None = None,
                     src_lang: str | None = None, tgt_lang: str | None = None, steps: int = 32,
                     progress: Callable[[int, int], None] | None = None) -> list[Attributions]:
        """Gradient attributions (model/explain/attribution.py) of each step's token of `target_tokens` (spelled as in a
        trace) as the translation of `text`, or of step `step` alone (0-based), to every source token and every
        earlier decoder input; `contrast`: a token of the model's, explained against (Yin & Neubig, 2022);
        `progress(done, total)`: told as every step's are done, or for one step's integrated gradients as its
        points are (it may raise to stop)."""
        if method not in ATTRIBUTION_METHODS:
            raise InputError(f"Unknown attribution method {reprlib.repr(method)}; choose one of: "
                             f"{', '.join(ATTRIBUTION_METHODS)}.")
        src_ids, tgt_ids = self.given_translation(text, target_tokens, src_lang, tgt_lang)
        if step is not None and (isinstance(step, bool) or not isinstance(step, int) or not 0 <= step < len(tgt_ids)):
            raise InputError(f"The step must be a whole number from 1 to {len(tgt_ids)}, not {reprlib.repr(step)}.")
        other = self.token_id(contrast, "contrast")
        gates = self.gates(checked_strings(mask, "mask"))
        if step is None:
            return attribute_steps(self.model, src_ids, tgt_ids, method, contrast=other, steps=steps, gates=gates,
                                   progress=progress)
        return [attribute(self.model, src_ids, tgt_ids, step, method, contrast=other, steps=steps, gates=gates,
                          progress=progress)]

    def measures(self, text: str, target_tokens: list[str], mask: list[str] | None = None,
                 src_lang: str | None = None, tgt_lang: str | None = None) -> dict[str, dict[str, np.ndarray]] | None:
        """Value-weighted attention, rollout and ALTI(+) of `target_tokens` as the translation of `text`, shaped
        like the trace's attention maps (model/explain/contributions.py `measure_maps`); None for the GRU models."""
        if not isinstance(self.model, Transformer):
            return None
        return measure_maps(self.model, *self.given_translation(text, target_tokens, src_lang, tgt_lang),
                            self.gates(checked_strings(mask, "mask")))

    def neuron(self, text: str, target_tokens: list[str], kind: str, layer: int, head: int,
               mask: list[str] | None = None, src_lang: str | None = None, tgt_lang: str | None = None
               ) -> HeadVectors:
        """The query and key vectors of one head (`layer`, `head` 1-based, as in head names) behind its weights, with
        `target_tokens` (spelled as in a trace) as the translation of `text` and the heads of `mask` switched off
        (model/explain/neurons.py); an InputError for a head the model lacks or what cannot be read."""
        try:
            kind, layer, head = checked_head(self.model, kind, layer, head)
        except ValueError as error:
            raise InputError(str(error)) from None
        src_ids, tgt_ids = self.given_translation(text, target_tokens, src_lang, tgt_lang)
        return head_vectors(self.model, src_ids, [SOS_ID] + tgt_ids[:-1], kind, layer, head,
                            self.gates(checked_strings(mask, "mask")))

    def source_tokens(self, text: str, src_lang: str | None = None, tgt_lang: str | None = None) -> list[str]:
        """The tokens the encoder will read (before <eos>: a multilingual model's language code first), or an
        InputError saying why `text` cannot be read."""
        tokens = with_unknowns(checked_text(text), self.src_tokenizer)
        if not tokens:
            raise InputError("Type a sentence to translate: the input is empty.")
        tokens = self.source_prefix(src_lang, tgt_lang) + tokens
        if len(tokens) > self.max_src_tokens:
            raise InputError(f"The input has {len(tokens)} tokens; this model reads at most "
                             f"{self.max_src_tokens}. Please shorten it.")
        return tokens

    def source_prefix(self, src_lang: str | None = None, tgt_lang: str | None = None) -> list[str]:
        """The language code (or T5's prompt) a multilingual model reads before the text (none for a model of one
        direction)."""
        if self.languages is None:
            if src_lang or tgt_lang:
                raise InputError("This model translates in one direction only: it takes no source or target "
                                 "language.")
            return []
        try:
            return self.languages.source_prefix(src_lang or None, tgt_lang or None, self.src_tokenizer)
        except ValueError as error:
            raise InputError(str(error)) from None

    def with_target_prefix(self, tokens: list[str], tgt_lang: str | None = None) -> list[str]:
        """Target `tokens` (a forced prefix, a translation to score) led by the target language's code where the
        model is given one first, unless they start with a language code already."""
        if self.languages is None or (tokens and self.languages.is_code(tokens[0])):
            return tokens
        try:
            return self.languages.target_prefix(tgt_lang or None) + tokens
        except ValueError as error:
            raise InputError(str(error)) from None

    def translation_pieces(self, text: str, tgt_lang: str | None = None) -> tuple[list[str], int]:
        """A translation given as text (the page's, or one made anywhere) in the target pieces the model scores,
        <eos> last unless it reaches the length limit (as the model's own translation cut there), and how many
        pieces past the limit are cut off (`fitted`)."""
        limit = self.model.config.max_len - 1 - len(self.with_target_prefix([], tgt_lang))
        pieces, cut = self.read_back(text, self.tgt_tokenizer, self.tgt_vocab, limit)
        return pieces + ["<eos>"] * (len(pieces) < limit), cut

    @staticmethod
    def read_back(text: str, tokenizer, vocab: Vocab, limit: int) -> tuple[list[str], int]:
        """`fitted`: a translation's text in `tokenizer`'s pieces within `limit`, or an InputError saying why not."""
        try:
            return fitted(checked_text(text), tokenizer, vocab, limit)
        except ValueError as error:
            raise InputError(str(error)) from None

    def in_pieces(self, tokens: list[str]) -> list[str]:
        """Target tokens as the model writes them: a word it lacks but writes in pieces (or lower-cased, or as
        sentencepiece's "▁Ein") becomes those pieces, so that a word can be typed as a word ("zeitungsleserin" ->
        "zeitungs@@", "leserin"); a token the model has, or one it cannot spell, stays as it is."""
        if len(tokens) > self.model.config.max_len:  # too many whatever they are: `target_ids` says so
            return tokens
        written = []
        for token in tokens:
            pieces = [] if token in self.tgt_vocab else self.tgt_tokenizer(token)
            if pieces and not all(piece in self.tgt_vocab for piece in pieces):  # merges its vocabulary dropped
                pieces = spelled(pieces, self.tgt_vocab)
            written += pieces if pieces and all(piece in self.tgt_vocab for piece in pieces) else [token]
        return written

    def target_ids(self, tokens: list[str], limit: int, what: str) -> list[int]:
        """Target ids of tokens the model must emit (a forced prefix, a translation to score), or an InputError
        naming the first one it cannot emit there."""
        if len(tokens) > limit:
            raise InputError(f"{len(tokens)} target tokens given; this sentence's translation may have at most "
                             f"{limit}.")
        ids = []
        for position, token in enumerate(tokens):
            if token not in self.tgt_vocab:
                raise InputError(f"{what} {token!r} is not in the target vocabulary, nor can the model spell it "
                                 "in pieces it has.")
            token_id = self.tgt_vocab.stoi[token]
            if token_id in (PAD_ID, SOS_ID):
                raise InputError(f"{what} {token!r} is never emitted by the model.")
            if token_id == EOS_ID and position < len(tokens) - 1:
                raise InputError(f"{what} '<eos>' ends the translation: it can only be the last one.")
            ids.append(token_id)
        return ids

    def gates(self, names: list[str]) -> HeadGates | None:
        """Head gates that switch off the named heads, or an InputError naming the first unknown head."""
        try:
            return head_gates(self.model, names)
        except ValueError as error:
            raise InputError(str(error)) from None
