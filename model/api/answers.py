"""The JSON API's answers: `/trace`, `/detach`, `/score`, `/beam`, `/attribute`, `/patch` and `/neuron`, for clients
that want numbers rather than the page.

Each is a method of `Answers`, the answers about one checkpoint, named as its endpoint and taking its parameters
after the model (`Answers(services, "en-de").trace(text, ...)`); JSON values in, a dict of JSON values out. A bad
value raises `AnswerError`, which says what was wrong. The page registers each method of `ENDPOINTS` with `gr.api`
(ui/api.py: the model's name first, then the method's own parameters, and the error turned into Gradio's), and the
Python API's `Model` is an `Answers` (attention_inspector/api.py): so neither computes an answer of its own, and
this layer imports no Gradio. Heads are named kind.layer.head with the keys of model/keys.py ("cross.2.5").
"""

from __future__ import annotations

import numpy as np

from attention_inspector.model.api.services import Services
from attention_inspector.model.explain.attribution import INTEGRATED_GRADIENTS
from attention_inspector.model.explain.detachment import COMBINED, ScoredDetachment
from attention_inspector.model.explain.omissions import Omissions
from attention_inspector.model.explain.verdict import LEFT_OUT, MADE_UP, MISTRANSLATED, Verdict
from attention_inspector.model.explain.patching import parting
from attention_inspector.model.serving.translator import InputError, Translator
from attention_inspector.model.text.words import scheme as word_scheme
from attention_inspector.model.text.words import PIECES, UNITS, WORDS, merge, summed, word_spans, words


class AnswerError(ValueError):
    """A request the API cannot answer as asked; its message says what was wrong."""


def shown(value: object, limit: int = 60) -> str:
    """A value from a request, quoted for a message (repr spells out invisible and broken characters), cut short."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def check_model(services: Services, model: object) -> None:
    """An API request's model: a loaded checkpoint's name, or a AnswerError listing the loaded ones."""
    if not isinstance(model, str) or model not in services.translators:
        raise AnswerError(f"unknown model {shown(model)}; loaded: {', '.join(services.translators) or 'none'}")


def rounded(array: np.ndarray | None, digits: int = 4):
    return None if array is None else np.round(array.astype(np.float64), digits).tolist()


def given_target(translator, target: object) -> list[str] | None:
    """The tokens to force for a translation given to explain (None: the greedy one): a text in the model's target
    pieces, or tokens as given, then <eos>; a AnswerError for anything else."""
    if target is None:
        return None
    if isinstance(target, str) and target.strip():
        tokens = translator.tgt_tokenizer(target)
    elif isinstance(target, list) and target and all(isinstance(token, str) for token in target):
        tokens = list(target)
    else:
        raise AnswerError(f"target must be a translation (text), or its tokens as /trace spells them, or null for the "
                       f"greedy translation; not {shown(target)}")
    return tokens if tokens[-1] == "<eos>" else [*tokens, "<eos>"]


def detachment_json(scored: ScoredDetachment, scheme: str, units: str | None) -> dict:
    """How far a translation rests on its source, for the API: the sentence's score by each detector, the model's
    main one and its thresholds (what they mean beside them), whether the sentence is flagged, and per token (or
    word, with `units` "words": a word's source share and attention peak the mean of its pieces', its
    log-probability their sum) the signals and whether it is flagged."""
    measured, thresholds = scored.measured, scored.thresholds
    flagged, _ = scored.flags
    tokens, signals, marked = scored.in_units(scheme, units == WORDS)
    return {"detector": COMBINED, "scores": {name: None if value is None else round(value, 6)
                                             for name, value in measured.scores().items()},
            "thresholds": thresholds, "threshold_meaning": scored.threshold_meaning, "detached": bool(flagged),
            "unavailable": measured.unavailable, "unknown": scored.unknown, "units": units or PIECES,
            "tokens": [{"token": token, "flagged": bool(marked[i]),
                        **{name: None if values is None else round(float(values[i]), 6)
                           for name, values in signals.items()}}
                       for i, token in enumerate(tokens)]}


def omissions_json(found: Omissions | str) -> dict:
    """The source words a translation left out, for the API (`/detach`): per source word its pieces (indices of
    `source_tokens`), its contrastive score (Δ log p of the translation without the word's span; null for
    punctuation), its total ALTI+ contribution (null for a GRU) and whether it is flagged; the threshold and what it
    means; or why none were looked for (`unavailable`)."""
    if isinstance(found, str):
        return {"unavailable": found, "omitted": [], "words": []}
    contributions = found.contributions
    return {"unavailable": None, "omitted": found.omitted, "threshold": found.threshold,
            "threshold_meaning": found.threshold_meaning,
            "words": [{"word": word, "pieces": list(span),
                       "contrastive": None if np.isnan(score) else round(float(score), 6),
                       "contribution": None if contributions is None else round(float(contributions[i]), 6),
                       "flagged": bool(flag)}
                      for i, (word, span, score, flag) in enumerate(zip(found.words, found.spans, found.contrastive,
                                                                         found.flagged))]}


def verdict_json(verdict: Verdict | str) -> dict:
    """The verdict on a translation, for the API (`/detach`; model/explain/verdict.py): the plain line, the model
    that judged (null: the translating model alone, `lacking` says which checks that leaves out), the thresholds and
    what they mean, the phrases of each kind as they stand, the words not judged, and per source and translation
    word what it may be (null: nothing found) with its evidence; or why there is none (`unavailable`)."""
    if isinstance(verdict, str):
        return {"unavailable": verdict}
    calibration = verdict.calibration

    def rounded(said: dict) -> dict:
        return {key: round(value, 6) if isinstance(value, float) else value for key, value in said.items()}

    return {"unavailable": None, "plain": verdict.plain() or "Looks faithful", "evaluator": verdict.evaluator,
            "lacking": verdict.lacking,
            "thresholds": {key: getattr(calibration, key) for key in ("surprisal", "contrastive", "needed",
                                                                      "repeated")},
            "threshold_meaning": calibration.meaning,
            "phrases": {kind: verdict.phrases(kind) for kind in (LEFT_OUT, MISTRANSLATED, MADE_UP)},
            "unjudged": verdict.unjudged,
            "source": [{"word": word, "kind": kind, **rounded(said)} for word, kind, said in
                       zip(verdict.source_words, verdict.source_kinds, verdict.source_evidence)],
            "translation": [{"word": word, "kind": kind, **rounded(said)} for word, kind, said in
                            zip(verdict.translation_words, verdict.translation_kinds, verdict.translation_evidence)]}


class Answers:
    """The JSON API's answers about one checkpoint of `services`, `model` (its name), each a method of the endpoint's
    name taking the endpoint's parameters after the model: `Answers(services, "en-de").trace(text)` is what
    `/trace` answers for `("en-de", text)`. `attention_inspector.Model` is an `Answers` of one checkpoint, and
    ui/api.py makes each method of `ENDPOINTS` an endpoint (the method's own signature, `model` first), so both
    call the same code. An unknown `model` is an `AnswerError` that lists the loaded ones."""

    def __init__(self, services: Services, model: object):
        check_model(services, model)
        self.services, self.name = services, model

    @property
    def translator(self) -> Translator:
        """The checkpoint's translator (a large one is loaded here on its first use)."""
        return self.services.translators[self.name]

    def trace(self, text: str, force: list[str] | None = None, mask: list[str] | None = None,
              contributions: bool | None = None, src_lang: str | None = None, tgt_lang: str | None = None,
              units: str | None = None) -> dict:
        """Translate `text` with checkpoint `model`; returns tokens, probabilities and every attention map as lists.

        `force`: target tokens that fix the first steps (spelled as in `target_tokens`); `mask`: heads to switch
        off, named kind.layer.head (kind encoder, decoder or cross; 1-based), e.g. "cross.2.5".
        `src_lang`, `tgt_lang`: a multilingual model's languages (e.g. "eng_Latn", "deu_Latn"; None: its default).
        The target language's code is then the first target token, given rather than predicted (`forced` counts it).
        `source_contribution`: per generated token, the share of its prediction that came from the source (ALTI+;
        None for a GRU model); `contributions` true adds the full ALTI+ maps. `detachment`: whether the
        translation rests on its source, as `/detach` answers it for this translation.
        `units` "words": the attention maps merged into words (summed over a word's pieces as keys, averaged as
        queries), and `source_words`, `target_words` and `decoder_input_words` list each word with the indices of
        its pieces; "pieces" (the default): the maps as the model computed them.
        """
        if contributions is not None and not isinstance(contributions, bool):
            raise AnswerError(f"contributions must be true or false, not {shown(contributions)}")
        if units not in (None, *UNITS):
            raise AnswerError(f"units must be one of {', '.join(UNITS)}, not {shown(units)}")
        try:
            traced = self.services.trace(self.name, text, force, mask, src_lang, tgt_lang, detach=True)
        except InputError as error:
            raise AnswerError(str(error)) from None
        detached = traced.detachment
        if isinstance(detached, str):  # a translation of no word
            raise AnswerError(detached)
        measured = detached.contributions
        result = traced.trace
        maps = {"encoder": result.encoder_attention, "decoder": result.decoder_attention,
                "cross": result.cross_attention}
        labelled = {}
        if units == WORDS:
            spans = {name: word_spans(tokens, traced.scheme) for name, tokens in (
                ("source", traced.source_tokens), ("target", traced.target_tokens),
                ("decoder_input", traced.decoder_input_tokens))}
            axes = {"encoder": ("source", "source"), "decoder": ("target", "decoder_input"),
                    "cross": ("target", "source")}
            maps = {kind: None if array is None else merge(array, spans[axes[kind][0]], spans[axes[kind][1]])
                    for kind, array in maps.items()}
            labelled = {f"{name}_words": [{"word": word, "pieces": list(span)} for word, span in zip(*words(
                tokens, traced.scheme))] for name, tokens in (("source", traced.source_tokens),
                                                              ("target", traced.target_tokens),
                                                              ("decoder_input", traced.decoder_input_tokens))}
        return {"translation": traced.text, "source_tokens": traced.source_tokens, "unknown": traced.unknown,
                "target_tokens": traced.target_tokens, "decoder_input_tokens": traced.decoder_input_tokens,
                "forced": result.forced, "mask": sorted(set(mask or [])), "units": units or PIECES, **labelled,
                "probabilities": rounded(result.probabilities), "top_tokens": traced.top_tokens,
                "top_probabilities": rounded(result.top_probabilities),
                "encoder_attention": rounded(maps["encoder"]),
                "decoder_attention": rounded(maps["decoder"]),
                "cross_attention": rounded(maps["cross"]),
                "source_contribution": None if measured is None else rounded(measured.source_contribution),
                "detachment": detachment_json(detached, traced.scheme, units),
                **({"contributions": None if measured is None else {"encoder": rounded(measured.encoder),
                                                                    "decoder": rounded(measured.decoder)}}
                   if contributions else {})}

    def detach(self, text: str, translation: str | list[str], mask: list[str] | None = None,
               src_lang: str | None = None, tgt_lang: str | None = None, units: str | None = None) -> dict:
        """Whether `translation` (made anywhere: its text, or its tokens as `/trace` spells them) rests on its
        source `text`, scored teacher-forced by checkpoint `model` (model/explain/detachment.py): the sentence's
        mean ALTI+ source share (Dale et al., 2023; None for a GRU model, `unavailable` says why), mean
        log-probability, their combination and the cross-attention's mean peak (`scores`, higher: more attached);
        `detector`, the one the page marks by (the combination), with its `thresholds` and what they mean;
        `detached`, the sentence under its threshold; and per token (or word, `units` "words") its signals and
        whether its combination is under the token threshold. Words the model cannot spell are scored as <unk> and
        listed in `unknown`. `omissions`: the source words the translation left out, by contrastive conditioning
        (Vamvas & Sennrich, 2022; model/explain/omissions.py): per source word its score, its total ALTI+
        contribution and whether it is flagged, and the flagged ones in `omitted`. `verdict`: what the translation
        left out, mistranslated or made up, judged by the model of the other direction (`verdict_json`). Heads of
        `mask` switched off and languages as in `/trace`."""
        if units not in (None, *UNITS):
            raise AnswerError(f"units must be one of {', '.join(UNITS)}, not {shown(units)}")
        if not (isinstance(translation, str) and translation.strip() or isinstance(translation, list) and translation):
            raise AnswerError(f"translation must be the text of a translation of `text`, or its tokens as /trace spells "
                           f"them; not {shown(translation)}")
        translator = self.translator
        # Tokens as given (a translation cut at the length limit has no <eos>); a text as `translation_pieces` has it.
        try:
            tokens, cut = (translation, 0) if isinstance(translation, list) else \
                translator.translation_pieces(translation, tgt_lang)
            scored = self.services.detachment(self.name, text, tokens, mask, src_lang, tgt_lang)
        except InputError as error:
            raise AnswerError(str(error)) from None
        verdict = self.services.judge(self.name, text, scored.target_tokens, scored.omissions)
        return {"source_tokens": scored.source_tokens, "target_tokens": scored.target_tokens, "cut": cut,
                **detachment_json(scored, word_scheme(translator.tgt_tokenizer), units),
                "omissions": omissions_json(scored.omissions), "verdict": verdict_json(verdict)}

    def score(self, text: str, target_tokens: list[str], mask: list[str] | None = None,
              src_lang: str | None = None, tgt_lang: str | None = None) -> dict:
        """The teacher-forced log-probability of each of `target_tokens` (spelled as `/trace` returns them) as the
        translation of `text` by checkpoint `model`, with the heads of `mask` switched off (kind.layer.head); a
        multilingual model's languages as in `/trace`."""
        try:
            scored = self.translator.score(text, target_tokens, mask, src_lang, tgt_lang)
        except InputError as error:
            raise AnswerError(str(error)) from None
        return {"source_tokens": scored.source_tokens, "target_tokens": scored.target_tokens,
                "log_probabilities": rounded(scored.log_probabilities, 6),
                "total_log_probability": round(scored.total, 6), "mask": sorted(set(mask or []))}

    def beam(self, text: str, beam_size: int | None = None, mask: list[str] | None = None,
             src_lang: str | None = None, tgt_lang: str | None = None) -> dict:
        """Beam search of `text` with checkpoint `model` (its evaluation beam size unless `beam_size` is given; heads
        of `mask` switched off): the n-best list, best first, with length-normalised scores as evaluation ranks
        them, and the beam after every step; `on_greedy_path` marks the hypotheses that are a prefix of the greedy
        output. A multilingual model's languages as in `/trace`."""
        translator = self.translator
        try:
            traced = translator.beam(text, beam_size, mask, src_lang=src_lang, tgt_lang=tgt_lang)
        except InputError as error:
            raise AnswerError(str(error)) from None
        search = traced.beam

        def hypothesis(h) -> dict:
            tokens = traced.tokens(h)
            return {"tokens": tokens, "log_probability": round(h.log_probability, 6), "finished": h.finished,
                    "on_greedy_path": tokens == traced.greedy_tokens[:len(tokens)]}

        return {"source_tokens": traced.source_tokens, "beam_size": search.beam_size,
                "length_penalty": search.length_penalty, "greedy_tokens": traced.greedy_tokens,
                "n_best": [{"tokens": traced.tokens(h), "score": round(h.score, 6),
                            "log_probability": round(h.log_probability, 6),
                            "translation": translator.to_text(traced.tokens(h)[:len(h.token_ids)])}
                           for h in search.n_best],
                "steps": [[hypothesis(h) for h in hypotheses] for hypotheses in search.steps],
                "mask": sorted(set(mask or []))}

    def attribute(self, text: str, method: str = INTEGRATED_GRADIENTS, step: int | None = None,
                  contrast: str | None = None, units: str | None = None, mask: list[str] | None = None,
                  src_lang: str | None = None, tgt_lang: str | None = None,
                  target: str | list[str] | None = None) -> dict:
        """Gradient attributions of the greedy translation of `text` by checkpoint `model`, or of `target` (a
        translation to explain instead, forced: its text, or its tokens as `/trace` spells them): for step `step`
        (1-based; None: every step), how much each source token and each earlier decoder input moved the
        log-probability of the token at that step. `method`: saliency (gradient norm), input_x_gradient or
        integrated_gradients (32 points from zero embeddings; `completeness_error` is Σ attributions − (f(x) −
        f(baseline))). `contrast`: a token (as the candidates show it) to explain the choice against:
        log p(token) − log p(contrast). `units` "words": sums over each word's pieces. Heads of `mask` switched off;
        languages as in `/trace`."""
        force = given_target(self.translator, target)
        if units not in (None, *UNITS):
            raise AnswerError(f"units must be one of {', '.join(UNITS)}, not {shown(units)}")
        if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
            raise AnswerError(f"step must be a whole number from 1, or null for every step; not {shown(step)}")
        translator = self.translator
        try:
            traced = self.services.trace(self.name, text, force, mask, src_lang, tgt_lang)
            results = translator.attributions(text, traced.target_tokens, method, None if step is None else step - 1,
                                              contrast, mask, src_lang, tgt_lang)
        except InputError as error:
            raise AnswerError(str(error)) from None
        inputs = traced.decoder_input_tokens
        source_spans, labelled = None, {}
        if units == WORDS:
            (source_words, source_spans), (input_words, _) = (words(tokens, traced.scheme)
                                                              for tokens in (traced.source_tokens, inputs))
            labelled = {"source_words": source_words, "decoder_input_words": input_words}

        def per_unit(values: np.ndarray, spans: list[range] | None) -> list[float]:
            return rounded(values if spans is None else summed(values, spans))

        return {"method": method, "units": units or PIECES, "explained": "greedy" if force is None else "target",
                "translation": traced.text, "source_tokens": traced.source_tokens,
                "decoder_input_tokens": inputs, "target_tokens": traced.target_tokens, **labelled,
                "steps": [{"step": result.step + 1, "token": traced.target_tokens[result.step], "contrast": contrast,
                           "source": per_unit(result.source, source_spans),
                           "target": per_unit(result.target, None if units != WORDS else
                                              word_spans(inputs[:result.step + 1], traced.scheme)),
                           "score": round(result.score, 6),
                           "baseline_score": None if result.baseline_score is None else round(result.baseline_score, 6),
                           "completeness_error": None if result.delta is None else round(result.delta, 6)}
                          for result in results]}

    def patch(self, text: str, counterfactual: str, step: int | None = None,
              target: str | list[str] | None = None, token: str | None = None, contrast: str | None = None,
              src_lang: str | None = None, tgt_lang: str | None = None, estimate: bool = False) -> dict:
        """Activation patching per head (model/explain/patching.py): the greedy translation of `text` (or `target`,
        forced, as in `/attribute`) run again with one head's output (before W_O) taken from the run of
        `counterfactual` on the same target prefix, for every head of every kind, at step `step` (1-based; None: the
        first step where the two greedy translations part, else 1). `effects`: per kind, (layers x heads) of the change in log p of
        `token` (default: the token at that step), or of log p(token) − log p(`contrast`), patched − original; null
        where a kind cannot be patched (`skipped` says why: encoder heads need sources of as many tokens).
        `stream`: the same for the encoder's residual stream at each source position (columns) after each layer
        (rows; the first: the embeddings), causal tracing's grid; null for sources of other lengths or a GRU.
        With `estimate`, both grids are attribution patching's estimates, (a′ − a) · gradient, from two passes and a
        backward one (`"estimated": true`; their measured error in docs/explanations.md). Languages as in
        `/trace`."""
        translator = self.translator
        force = given_target(translator, target)
        if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
            raise AnswerError(f"step must be a whole number from 1, or null; not {shown(step)}")
        if not isinstance(counterfactual, str):
            raise AnswerError(f"counterfactual must be a sentence (text), not {shown(counterfactual)}")
        try:
            traced = self.services.trace(self.name, text, force, None, src_lang, tgt_lang)
            other = self.services.trace(self.name, counterfactual, None, None, src_lang, tgt_lang)
            ours, theirs = traced.target_tokens, other.target_tokens
            parted = parting(ours, theirs)
            at = (parted if parted is not None else 0) if step is None else step - 1
            result = translator.patching(text, counterfactual, ours, at, token, contrast, src_lang, tgt_lang,
                                         estimate=estimate)
        except InputError as error:
            raise AnswerError(str(error)) from None
        return {"translation": traced.text, "counterfactual_translation": other.text, "target_tokens": ours,
                "counterfactual_tokens": theirs, "parted_at": None if parted is None else parted + 1,
                "step": at + 1, "token": translator.tgt_vocab.itos[result.token], "contrast": contrast,
                "original": round(result.original, 6), "counterfactual": round(result.counterfactual, 6),
                "effects": {kind: [[None if np.isnan(v) else round(float(v), 6) for v in row] for row in grid]
                            for kind, grid in result.effects.items()},
                "skipped": result.skipped, "ranked": result.ranked(10), "source_tokens": traced.source_tokens,
                "stream": rounded(result.stream, 6), "estimated": result.estimated}

    def neuron(self, text: str, kind: str, layer: int, head: int, query: int, force: list[str] | None = None,
               mask: list[str] | None = None, src_lang: str | None = None, tgt_lang: str | None = None) -> dict:
        """Why head `head` of `layer` of `kind` (1-based, as in head names) weighs its keys as it does in the greedy
        translation of `text` (BertViz's neuron view): for the heatmap's row `query` (0-based: a source token for the
        encoder, a step for the decoder and cross-attention), the `query_vector` (d_head), each key's vector
        (`key_vectors`, keys x d_head), their elementwise `products` scaled as the model scales (each row sums to the
        score's q·k term: `scale` q·k), the position `bias` (T5's self-attention; else null), the `scores` (the
        softmax's input) and the `weights`. A key the query may not see (a later step in decoder self-attention) is
        `masked`: null vectors, products and score, weight 0. `note` says what q and k are in this model. The
        vectors are the model's pieces, whatever the page's units. `force`, `mask` and languages as in `/trace`."""
        translator = self.translator
        try:
            traced = self.services.trace(self.name, text, force, mask, src_lang, tgt_lang)
            vectors = translator.neuron(text, traced.target_tokens, kind, layer, head, mask, src_lang, tgt_lang)
        except InputError as error:
            raise AnswerError(str(error)) from None
        if isinstance(query, bool) or not isinstance(query, int) or not 0 <= query < vectors.rows:
            rows = "source token" if kind == "encoder" else "step"
            raise AnswerError(f"query must be a row of the heatmap, a whole number from 0 to {vectors.rows - 1} (a "
                              f"{rows}, 0-based), not {shown(query)}")
        return {"translation": traced.text, **neuron_json(vectors, query, traced)}


# The API's endpoints in the order it lists them: ui/api.py registers each, named, typed and documented as its method.
ENDPOINTS = (Answers.trace, Answers.detach, Answers.score, Answers.beam, Answers.attribute, Answers.patch,
             Answers.neuron)


def neuron_json(vectors, query: int, traced) -> dict:
    """One row of a head's `HeadVectors` for the API (`/neuron`): what the score of each key is made of."""
    seen = vectors.allowed[query]

    def kept(rows: np.ndarray) -> list:  # a masked key's row is null
        return [rounded(row, 6) if allowed else None for row, allowed in zip(rows, seen)]

    keys = traced.source_tokens if vectors.kind in ("encoder", "cross") else traced.decoder_input_tokens
    queries = traced.source_tokens if vectors.kind == "encoder" else traced.decoder_input_tokens
    return {"source_tokens": traced.source_tokens, "target_tokens": traced.target_tokens,
            "decoder_input_tokens": traced.decoder_input_tokens, "kind": vectors.kind, "layer": vectors.layer + 1,
            "head": vectors.head + 1, "query": query, "query_token": queries[query], "key_tokens": keys,
            "note": vectors.note, "scale": vectors.scale, "query_vector": rounded(vectors.queries[query], 6),
            "key_vectors": kept(vectors.keys), "products": kept(vectors.products(query)),
            "bias": None if vectors.bias is None else [round(float(b), 6) if allowed else None
                                                       for b, allowed in zip(vectors.bias[query], seen)],
            "scores": [round(float(s), 6) if allowed else None for s, allowed in zip(vectors.scores(query), seen)],
            "weights": rounded(vectors.weights[query], 6), "masked": [not allowed for allowed in seen]}
