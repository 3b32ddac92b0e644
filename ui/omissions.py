"""What the translation on screen left out, mistranslated or made up, on the page: looked for once the translation
is drawn (a pass per span of the source and of the translation takes longer than the translation:
model/explain/omissions.py, model/explain/verdict.py), then marked on the source words under the translation, on
the source tokens below and on the source axis of the heatmap (`Decoding.left_out`), and named in the verdict line,
each word's evidence on its hover (`source_said`, `translation_said`, `phrase_said`).

`find_omissions` is the page's own event after each new decoding (ui/static/page.js presses its hidden button once
the core view has drawn the decoding).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from attention_inspector.model.api.services import Services
from attention_inspector.model.explain.omissions import source_words
from attention_inspector.model.explain.verdict import MADE_UP, Calibration, Verdict, candidates, stop_words
from attention_inspector.model.text.words import scheme as word_scheme
from attention_inspector.ui.operations import LARGE_MODEL, operation
from attention_inspector.ui.session import Session

LEFT_OUT_MARK = "left out?"  # how the source tokens below the view mark a word left out (ui/tabs/inspect.py)
TOO_LARGE = ("not looked for on the page with a model of {parameters:,.0f}M parameters (a pass per span of the "
             "source takes seconds): /detach looks for them")


@operation
def find_omissions(services: Services, session: Session) -> tuple[Session, None]:
    """The session with the source words its decoding on screen left out looked for and the verdict on it
    (model/explain/verdict.py), once (the status line keeps what it says)."""
    decoding = session.current
    if decoding.omissions is not None or not decoding.trace.target_tokens:
        return session, None
    translator = services.translators[session.model]
    if translator.parameters >= LARGE_MODEL:
        too_large = TOO_LARGE.format(parameters=translator.parameters / 1e6)
        return session.with_current(omissions=too_large, verdict=too_large), None
    tokens, target = session.trace.source_tokens, session.trace.target_tokens
    with ThreadPoolExecutor(1) as background:  # the evaluator's passes in the workers, meanwhile the model's here
        later = background.submit(services.reconstruct, session.model, session.source, target)
        # The evaluator's surprisals first (one pass): only the words it may call errors need the model's pass per
        # span, to tell left out from mistranslated; every word does where there is no evaluator.
        quick, _ = services.reconstruct(session.model, session.source, target, needed=False)
        only = None if quick is None else candidates(
            source_words(tokens, word_scheme(translator.src_tokenizer), translator.prefix_length(tokens[:-1]))[0],
            quick, Calibration.of(translator.metrics), stop_words(translator.src_tokenizer.lang))
        found = translator.omissions(tokens[:-1], target, translator.gates(list(decoding.mask)),
                                     getattr(decoding.detachment, "contributions", None), only)
        verdict = services.judge(session.model, session.source, target, found, later.result())
    return session.with_current(omissions=found, verdict=verdict), None


def source_said(verdict: Verdict, index: int) -> str:
    """What a source word's hover says: what it may be, and each signal against the threshold it is judged by."""
    said, calibration = verdict.source_evidence[index], verdict.calibration
    contrastive = said["contrastive"]
    if not said["judged"]:
        return "a stop word or punctuation: not judged"
    own = "" if contrastive is None else \
        f"the translation is {contrastive:+.2f} log p without it (contrastive conditioning, the translating model)"
    if "surprisal" not in said:
        return f"{'left out? ' * said['flagged by its own threshold']}{own}; flagged from its own threshold"
    if said["unknown"]:
        return f"not judged: {verdict.evaluator} cannot write this word back, so it cannot say"
    kind = verdict.source_kinds[index]
    return (f"{kind + '? ' if kind else ''}{verdict.evaluator} writes it back from the translation at a surprisal of "
            f"{said['surprisal']:.2f} nats (its least probable piece; an error from {calibration.surprisal:.2f})"
            + (f"; {own}: left out from {calibration.contrastive:+.2f}, else mistranslated" if own else "")
            + f" ({calibration.meaning})")


def translation_said(verdict: Verdict, index: int) -> str:
    """What a translation word's hover adds where the evaluator judged it: how much it needs the word."""
    said, calibration = verdict.translation_evidence[index], verdict.calibration
    if said.get("needed") is None:
        return ""
    threshold = calibration.repeated if said["repeats"] else calibration.needed
    return (f"{'made up? ' * (verdict.translation_kinds[index] == MADE_UP)}{verdict.evaluator} writes the source "
            f"{said['needed']:+.2f} log p more probable without it (made up from {threshold:+.2f}"
            f"{', a repeated word' if said['repeats'] else ''})")


def phrase_said(verdict: Verdict, kind: str, run: list[int]) -> str:
    """A named phrase's hover: each of its words' evidence."""
    words, said = ((verdict.translation_words, translation_said) if kind == MADE_UP
                   else (verdict.source_words, source_said))
    return "\n".join(f"{words[i]}: {said(verdict, i)}" for i in run)
