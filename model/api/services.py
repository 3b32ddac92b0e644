"""What the page uses besides its layout: the checkpoints (model/serving/catalog.py: Hub-size ones loaded on first
use), the trace workers and a bound on requests.

Nothing here runs at import: `load_services` loads the checkpoints and forks the workers, and `app.py` calls it.
Every user shares these read-only objects; each user's own data lives in a `Session` (ui/session.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from attention_inspector.model.explain.detachment import ScoredDetachment, training_domain
from attention_inspector.model.explain.head_stats import best_aligning_head
from attention_inspector.model.explain.omissions import Omissions
from attention_inspector.model.explain.verdict import Calibration, Reconstruction, Verdict, judged, stop_words
from attention_inspector.model.hub.convert_hf import convert
from attention_inspector.model.hub.hub_checks import ConversionError, checked_hub_id
from attention_inspector.model.nets.cores import available_cores
from attention_inspector.model.nets.devices import chosen_device
from attention_inspector.model.serving.catalog import DEFAULT_BUDGET, Card, Catalog
from attention_inspector.model.serving.checkpoint import judge_names
from attention_inspector.model.serving.traced import TracedTranslation
from attention_inspector.model.serving.translator import InputError, Translator
from attention_inspector.model.serving.workers import TracePool, can_fork
from attention_inspector.model.text.vocab import CHARS
from attention_inspector.model.text.words import scheme as word_scheme
from attention_inspector.model.text.words import words

TOP_K = 5  # candidates kept per step


class Busy(InputError):
    """More requests are waiting than the server admits: the user is asked to try again."""


class Admission:
    """At most `limit` requests in the server at once (running or waiting for a worker); one more is refused
    with `Busy` at once, never queued. The page's translations and view changes skip Gradio's queue (they are
    `queue=False` events), so its `max_size` does not bound them: this does, at the server's door (ui/door.py)."""

    def __init__(self, limit: int):
        self.limit = limit
        self._inside = 0
        self._lock = threading.Lock()

    def enter(self) -> None:
        """One more request inside, or `Busy`."""
        with self._lock:
            if self._inside >= self.limit:
                raise Busy(f"The server is busy ({self.limit} requests at once): try again in a moment.")
            self._inside += 1

    def leave(self) -> None:
        with self._lock:
            self._inside -= 1

    @property
    def inside(self) -> int:
        return self._inside


@dataclass
class Services:
    """The checkpoints (read-only), the trace worker pool and the request bound, shared by every user."""

    translators: Mapping[str, Translator]  # a Catalog (loads on first use), or a plain dict
    load_errors: dict[str, str] = field(default_factory=dict)
    root: Path = Path("checkpoints")
    pool: TracePool | None = None
    admission: Admission = field(default_factory=lambda: Admission(64))
    trace_concurrency: int = 2  # queued model work run at once (the workers decode it together)
    _converting: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def trace_queue(self) -> dict:
        """The queue settings of events that do model work: their own group, so view changes never wait behind."""
        return dict(concurrency_id="trace", concurrency_limit=self.trace_concurrency)

    @property
    def default_model(self) -> str | None:
        return "en-de" if "en-de" in self.translators else next(iter(self.translators), None)

    def trace(self, model: str, text: object, force: list[str] | None = None, mask: list[str] | None = None,
              src_lang: str | None = None, tgt_lang: str | None = None,
              told: Callable[[int, int], None] | None = None, detach: bool = False) -> TracedTranslation:
        """Greedy trace of `text` with a checkpoint (loaded first, if it is not yet), in a worker process when there
        are workers (`src_lang`, `tgt_lang`: a multilingual model's direction; None: its default); with `told`, in
        this process, told each step (a large model's translation, shown with progress); with `detach`, its
        detachment from the source scored from the same pass (`Translator.trace`)."""
        options = dict(top_k=TOP_K, force=force, mask=mask, src_lang=src_lang, tgt_lang=tgt_lang, detach=detach)
        translator = self.translators[model]  # a first use loads it here, and the workers are forked anew
        if told is not None:
            return translator.trace(text, told=told, **options)
        if self.pool is not None:
            return self.pool.trace(model, text, **options)
        return translator.trace(text, **options)

    def detachment(self, model: str, text: object, translation: object, mask: object = None,
                   src_lang: str | None = None, tgt_lang: str | None = None) -> ScoredDetachment:
        """`Translator.detachment` of a given translation and the source words it left out, in a worker process when
        there are workers (an ALTI+ pass of ~20 ms a 20-token sentence: on the web server's threads under load, it took
        twice that and slowed every other user's view changes)."""
        options = dict(translation=translation, mask=mask, src_lang=src_lang, tgt_lang=tgt_lang, with_omissions=True)
        if self.pool is not None:
            return self.pool.detachment(model, text, **options)
        return self.translators[model].detachment(text, **options)

    def evaluator_of(self, model: str) -> tuple[str | None, str | None]:
        """The loaded checkpoint that judges `model`'s translations (model/explain/verdict.py), by `judge_names`; or
        None and which checks that leaves out, and why."""
        translator = self.translators[model]
        named = translator.metrics.get("verdict", {}).get("evaluator")
        source, target = translator.src_tokenizer.lang, translator.tgt_tokenizer.lang
        for name in judge_names(translator):
            if name in self.translators and name != model:
                return name, None
        return None, (f"no model here translates {target} into {source} to judge this translation, so words "
                      "mistranslated or made up are not looked for, and words left out are found by the "
                      "translating model's own contrastive conditioning alone"
                      + (f" ({named}, named as its judge, is not loaded)" if named else ""))

    def reconstruct(self, model: str, source: str, target_tokens: list[str],
                    needed: bool = True) -> tuple[Reconstruction | None, str]:
        """What the evaluator of `model` (`evaluator_of`) makes of its translation `target_tokens` of `source`
        (`Translator.reconstruction`; without `needed`, its surprisals alone, in this process): where there are
        workers, its passes shared between them, all at once; or None and why there is none."""
        translator = self.translators[model]
        evaluator, lacking = self.evaluator_of(model)
        if evaluator is None:
            return None, lacking
        text = translator.to_text(self.written(model, target_tokens))
        options = dict(source=source, evaluator=evaluator)
        try:
            if self.pool is None or not needed:
                return self.translators[evaluator].reconstruction(text, **options, needed=needed), ""
            shares = self.pool.workers
            with ThreadPoolExecutor(shares) as calls:
                parts = list(calls.map(lambda k: self.pool.reconstruction(evaluator, text, **options,
                                                                          needed=(k, shares)), range(shares)))
            return replace(parts[0], needed=np.fmax.reduce([part.needed for part in parts])), ""
        except InputError as error:
            return None, f"{evaluator} cannot judge this translation: {error}"

    def written(self, model: str, target_tokens: list[str]) -> list[str]:
        """A translation's tokens as written: its <eos> and a multilingual model's language code left out."""
        languages = self.translators[model].languages
        return [token for token in target_tokens if token != "<eos>" and not (languages and languages.is_code(token))]

    def judge(self, model: str, source: str, target_tokens: list[str], omissions: Omissions | str,
              reconstructed: tuple[Reconstruction | None, str] | None = None) -> Verdict | str:
        """The verdict on the translation `target_tokens` (as the model wrote them) of `source` by `model`, whose own
        contrastive conditioning found `omissions` (or why it could not), judged by what its evaluator made of it
        (`reconstructed`, else `reconstruct`), in words."""
        if isinstance(omissions, str):
            return omissions
        translator = self.translators[model]
        reconstruction, lacking = reconstructed or self.reconstruct(model, source, target_tokens)
        stops = [stop_words(tokenizer.lang) for tokenizer in (translator.src_tokenizer, translator.tgt_tokenizer)]
        return judged(omissions, reconstruction, Calibration.of(translator.metrics), stops[0],
                      words(self.written(model, target_tokens), word_scheme(translator.tgt_tokenizer))[0], stops[1],
                      [lacking] if lacking else [])

    def load_from_hub(self, hub_id: object, progress: Callable[[str], None] = lambda _: None) -> str:
        """A Hub model converted into this server's checkpoint folder and added to the models (loaded on first use):
        its name there. A ConversionError says why it cannot be (the Hub cannot be reached, an unknown or gated
        repository, another family, too large...)."""
        if not isinstance(hub_id, str) or not hub_id.strip().removeprefix("hf:"):
            raise ConversionError("Type the id of a model on the Hub, such as Helsinki-NLP/opus-mt-en-de.")
        hub_id = checked_hub_id(hub_id.strip().removeprefix("hf:"))
        name = hub_id.replace("/", "--")
        if name in self.translators:
            return name
        if not hasattr(self.translators, "add"):
            raise ConversionError("This server's models are fixed: it cannot add one from the Hub.")
        with self._converting:  # one conversion at a time: each needs about 1.2 times its model's size
            budget = getattr(self.translators, "budget", DEFAULT_BUDGET)  # a model over it could not be served
            folder = convert(hub_id, self.root / name, max_bytes=budget, progress=progress, hub_only=True)
            self.translators.add(name, folder)
        if name not in self.translators:
            raise ConversionError(f"{hub_id} was converted, but cannot be loaded: {self.translators.errors[name]}")
        return name

    def card(self, model: str) -> Card:
        """What the menus need of a checkpoint, without loading it."""
        if hasattr(self.translators, "card"):
            return self.translators.card(model)
        return Card.of(self.translators[model])

    def examples(self, model: str | None) -> list[str]:
        """The example sentences a checkpoint ships in its metrics.json (real Multi30k test sentences)."""
        card = self.card(model) if isinstance(model, str) and model in self.translators else None
        return list(card.metrics.get("examples", [])) if card else []

    def languages(self, model: str | None) -> tuple[list[str], list[str]]:
        """The source and target languages a user may choose for `model` (empty where there is no choice)."""
        languages = self.card(model).languages if isinstance(model, str) and model in self.translators else None
        if languages is None:
            return [], []
        return languages.sources(), languages.targets()

    def model_choices(self) -> list[tuple[str, str]]:
        """Menu entries: every loaded checkpoint with its languages, what it learned from where that is narrow (image
        captions) and its test score."""
        choices = []
        for name in self.translators:
            card = self.card(name)
            test = card.metrics.get("scores", {}).get("test", {})
            score = (f", test exact match {test['exact_match']}%" if card.target_language == CHARS
                     else f", test BLEU {test['bleu']}") if test else ""
            languages = f"{card.source_language}→{card.target_language}"
            domain = training_domain(card.metrics)
            learned = f", {domain} only" if domain else ""
            choices.append((f"{name} ({languages}{learned}{score})", name))
        return choices

    def comparable(self, model: str | None) -> list[tuple[str, str]]:
        """The models that can be compared with `model`: the others that read the same source language."""
        if model not in self.translators:
            return []
        language = self.card(model).source_language
        return [(label, name) for label, name in self.model_choices()
                if name != model and self.card(name).source_language == language]

    def load_status(self) -> str:
        """What went wrong while loading checkpoints (empty when all loaded)."""
        lines = [f"Checkpoint {name} could not be loaded: {error}" for name, error in self.load_errors.items()]
        if not self.translators:
            lines.insert(0, f"No usable checkpoint in {self.root}: translation is unavailable.")
        return "\n".join(lines)

    def best_head(self, model: str) -> tuple[int, int] | None:
        """The cross-attention head (layer, head; 0-based) that aligns best on the val split (heads.json), if known."""
        return best_aligning_head(self.card(model).head_report) if model in self.translators else None

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()


def load_services(root: Path, workers: int | None = None, batch: int = 16, budget: int = DEFAULT_BUDGET,
                  device: str | None = None) -> Services:
    """Load the checkpoints under `root` (Hub-size ones on first use, within `budget` bytes: model/serving/catalog.py)
    onto `device` (model/nets/devices.py: None is `DEVICE`, else cuda where there is a GPU, else cpu) and fork the
    trace workers (default: one per core this process may use, each at a lower priority than the web server, so
    that the server's own answers come first: model/serving/workers.py; none where the platform cannot fork, and
    none on a GPU: a forked process cannot use CUDA that its parent has started, so there translations are decoded
    in this process, on the GPU).

    Queued model work runs `batch` requests per worker at once, so each worker's batch can fill; requests outside
    the queue are admitted up to twice that, and never fewer than 64 (the queue holds 64 too)."""
    device = chosen_device(device)
    if device.type == "cuda" and workers:
        raise ValueError(f"TRACE_WORKERS={workers} forks processes, which cannot use the GPU this app runs on "
                         f"({device}): leave TRACE_WORKERS unset (or 0), or run on the CPU with DEVICE=cpu")
    catalog = Catalog(root, budget, device=device)
    if workers is None:
        workers = available_cores() if can_fork() and device.type == "cpu" else 0
    pool = TracePool(catalog, workers) if catalog and workers > 0 else None
    if pool is not None:
        catalog.on_change = pool.refresh  # workers forked anew hold what this process holds
    return Services(catalog, catalog.errors, root, pool, Admission(max(64, workers * batch * 2)),
                    trace_concurrency=max(workers * batch, 2))
