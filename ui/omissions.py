"""What the translation on screen left out, on the page: looked for once the translation is drawn (a pass per span of
the source takes longer than the translation: model/explain/omissions.py), then marked on the source words under
the translation, on the source tokens below and on the source axis of the heatmap (`Decoding.left_out`), and named
in the verdict line (`left_out_phrases`).

`find_omissions` is the page's own event after each new decoding (ui/static/page.js presses its hidden button once
the core view has drawn the decoding).
"""

from __future__ import annotations

import numpy as np

from attention_inspector.model.api.services import Services
from attention_inspector.model.explain.omissions import Omissions
from attention_inspector.ui.operations import LARGE_MODEL, operation
from attention_inspector.ui.session import Session

LEFT_OUT_MARK = "left out?"  # how the source tokens below the view mark a word left out (ui/tabs/inspect.py)
TOO_LARGE = ("not looked for on the page with a model of {parameters:,.0f}M parameters (a pass per span of the "
             "source takes seconds): /detach looks for them")


@operation
def find_omissions(services: Services, session: Session) -> tuple[Session, None]:
    """The session with the source words its decoding on screen left out looked for, once (the status line keeps
    what it says)."""
    decoding = session.current
    if decoding.omissions is not None or not decoding.trace.target_tokens:
        return session, None
    translator = services.translators[session.model]
    if translator.parameters >= LARGE_MODEL:
        return session.with_current(omissions=TOO_LARGE.format(parameters=translator.parameters / 1e6)), None
    scored = decoding.detachment
    found = translator.omissions(session.trace.source_tokens[:-1], session.trace.target_tokens,
                                 translator.gates(list(decoding.mask)),
                                 getattr(scored, "contributions", None))
    return session.with_current(omissions=found), None


def left_out_phrases(found: Omissions) -> list[str]:
    """The flagged words, runs of neighbours joined into one phrase ("old market", "bus")."""
    phrases, run = [], []
    for word, flag in zip(found.words, found.flagged):
        if flag:
            run.append(word)
        elif run:
            phrases.append(" ".join(run))
            run = []
    if run:
        phrases.append(" ".join(run))
    return phrases


def reason(found: Omissions, index: int) -> str:
    """What a source word's hover says: its contrastive score against the threshold, and its ALTI+ total."""
    score = found.contrastive[index]
    if np.isnan(score):
        return "punctuation: not scored"
    said = (f"left out? the translation is {'more' if score > 0 else 'less'} probable without it "
            f"(Δ log p {score:+.2f}; flagged from {found.threshold:+.2f})")
    if found.contributions is not None:
        said += f"; it gave the translation {found.contributions[index]:.2f} (ALTI+, summed over its tokens)"
    return said
