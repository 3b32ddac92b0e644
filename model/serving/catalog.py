"""Every checkpoint under a folder, by name: the small ones loaded at start, Hub-size ones (a converted opus-mt is
282 MiB of weights) on first use, within a memory budget that unloads the least recently used first.

A `Catalog` is a read-only `Mapping[str, Translator]` to its users: `catalog[name]` is the loaded translator
(loading it first, if need be), and `card(name)` is what menus need to know of a checkpoint without loading it.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from attention_inspector.model.serving.checkpoint import (CONFIG, HEADS, METRICS, VOCAB, WEIGHTS, CheckpointError,
                                                          load_checkpoint, read_json, safetensors_header)
from attention_inspector.model.serving.translator import Translator
from attention_inspector.model.text.hub_tokenizer import Languages

LAZY_BYTES = 64 * 1024 ** 2  # weights larger than this load on first use
REPORT_LOOK_S = 1.0  # how often a checkpoint's heads.json is looked at on disk, at most
DEFAULT_BUDGET = 8 * 1024 ** 3  # for Hub-size models loaded at once: half a 16 GB Space's memory (MODEL_MEMORY_GB)


@dataclass(frozen=True)
class Card:
    """What the page shows of a checkpoint before it is loaded: its scores and head report, its languages."""

    metrics: dict
    head_report: dict
    source_language: str
    target_language: str
    languages: Languages | None
    parameters: int  # each tied weight counted once

    @classmethod
    def of(cls, translator: Translator) -> Card:
        return cls(translator.metrics, translator.head_report, translator.src_tokenizer.lang,
                   translator.tgt_tokenizer.lang, translator.languages, translator.parameters)

    @classmethod
    def read(cls, folder: Path) -> Card:
        """The card of a checkpoint folder, from its JSON files (a CheckpointError names a file at fault)."""
        read_json(folder / CONFIG)
        vocab = read_json(folder / VOCAB)
        try:
            languages = Languages.from_json(vocab["languages"]) if "languages" in vocab else None
            source, target = vocab["src"]["lang"], vocab["tgt"]["lang"]
        except (KeyError, TypeError, ValueError) as error:
            raise CheckpointError(f"{folder / VOCAB} is not a valid vocabulary file: {error!r}") from None
        metrics, heads = (read_json(folder / name) if (folder / name).is_file() else {} for name in (METRICS, HEADS))
        return cls(metrics, heads, source, target, languages, stored_parameters(folder))


def stored_parameters(folder: Path) -> int:
    """The numbers a checkpoint's weights file holds (its header's shapes; tied weights are stored once), or, for
    a file that cannot be read (refused when it is loaded), a fourth of its bytes."""
    try:
        return sum(math.prod(entry["shape"]) for entry in safetensors_header(folder / WEIGHTS).values())
    except (OSError, ValueError, KeyError, TypeError):
        return (folder / WEIGHTS).stat().st_size // 4


def memory_bytes(folder: Path) -> int:
    """What a loaded checkpoint of `folder` takes, about: its weights in float32, held once (the step decoder's
    layout is the model's own memory), whatever type the file stores them in."""
    return 4 * stored_parameters(folder)


class Catalog(Mapping):
    """The checkpoints under `root` by folder name; see the module's docstring.

    `on_change` is called after models were loaded or unloaded (the trace workers are forked again then, so that
    they hold what this process holds). Reads of a loaded model take no lock: forked workers inherit the catalog.
    """

    def __init__(self, root: Path, budget: int = DEFAULT_BUDGET, lazy_bytes: int | None = None,
                 device: torch.device | str = "cpu"):
        self.root, self.budget, self.device = Path(root), budget, torch.device(device)
        self.lazy_bytes = LAZY_BYTES if lazy_bytes is None else lazy_bytes
        self.errors: dict[str, str] = {}
        self.on_change: Callable[[], None] | None = None
        self._folders: dict[str, Path] = {}
        self._cards: dict[str, Card] = {}
        self._loaded: dict[str, Translator] = {}
        self._used: dict[str, float] = {}  # lazily loaded model -> when last asked for
        self._reports: dict[str, tuple[int, dict]] = {}  # heads.json as last read, and its modification time
        self._looked: dict[str, float] = {}  # when each heads.json was last looked at (time.monotonic)
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        # A folder whose name starts with "." is not a checkpoint (a conversion still being written, say).
        for folder in sorted(p for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(".")) \
                if self.root.is_dir() else []:
            if (folder / CONFIG).exists() or (folder / WEIGHTS).exists():
                self.add(folder.name, folder)

    def add(self, name: str, folder: Path) -> None:
        """Take a checkpoint folder in: loaded now if small, else its card only; an unusable one is noted in
        `errors` (the others are served all the same)."""
        try:
            lazy = (folder / WEIGHTS).is_file() and (folder / WEIGHTS).stat().st_size > self.lazy_bytes
            if lazy:
                self._cards[name] = Card.read(folder)
            else:
                self._loaded[name] = load_checkpoint(folder, self.device)
        except CheckpointError as error:
            self.errors[name] = str(error)
            return
        self.errors.pop(name, None)
        self._folders[name] = folder
        self._looked.pop(name, None)
        self._locks.setdefault(name, threading.Lock())

    def __getitem__(self, name: str) -> Translator:
        translator = self._loaded.get(name)
        if translator is not None:
            if name in self._used:
                self._used[name] = time.monotonic()
            return translator
        if name not in self._folders:
            raise KeyError(name)
        with self._locks[name]:  # one load per model, however many users ask at once
            if name not in self._loaded:
                self._load(name)
        return self._loaded[name]

    def _load(self, name: str) -> None:
        size = memory_bytes(self._folders[name])
        translator = load_checkpoint(self._folders[name], self.device)
        with self._lock:
            for unloaded in self._least_recent(size):
                del self._loaded[unloaded], self._used[unloaded]
            self._loaded[name] = translator
            self._used[name] = time.monotonic()
        if self.on_change is not None:
            self.on_change()

    def _least_recent(self, size: int) -> list[str]:
        """The lazily loaded models to unload, least recently used first, so that `size` more bytes fit the budget
        (the last one loaded may stay over it: a model asked for is always served)."""
        held = sorted(self._used, key=self._used.get)
        total = sum(memory_bytes(self._folders[name]) for name in held) + size
        unload = []
        while held and total > self.budget:
            name = held.pop(0)
            unload.append(name)
            total -= memory_bytes(self._folders[name])
        return unload

    def __iter__(self) -> Iterator[str]:
        return iter(self._folders)

    def __len__(self) -> int:
        return len(self._folders)

    def __contains__(self, name: object) -> bool:
        return name in self._folders

    def card(self, name: str) -> Card:
        """What the menus need to know of checkpoint `name`, loaded or not, with its head report as it is now."""
        translator = self._loaded.get(name)
        card = Card.of(translator) if translator is not None else self._cards[name]
        return replace(card, head_report=self._head_report(name, card.head_report))

    def _head_report(self, name: str, known: dict) -> dict:
        """heads.json as it is on disk now: python -m model.analysis.heads may write it while the app serves, and the
        page then opens the model on its best-aligning head, with no restart (`known`: the report read at loading).
        The disk is looked at once per `REPORT_LOOK_S` at most: the menus ask for a card several times a request."""
        if time.monotonic() - self._looked.get(name, -math.inf) >= REPORT_LOOK_S:
            self._read_report(name)
            self._looked[name] = time.monotonic()
        read = self._reports.get(name)
        return known if read is None else read[1]

    def _read_report(self, name: str) -> None:
        """`_reports[name]`: heads.json with its modification time, read again if it changed; none if there is no
        file; the one read before while it is half-written."""
        path = self._folders[name] / HEADS
        try:
            stamp = path.stat().st_mtime_ns
        except OSError:
            self._reports.pop(name, None)
            return
        read = self._reports.get(name)
        if read is None or read[0] != stamp:
            try:
                self._reports[name] = (stamp, read_json(path))
            except CheckpointError:  # half-written: the one read before
                pass

    def loaded(self) -> dict[str, Translator]:
        """The models in memory now (what a forked worker can trace)."""
        return dict(self._loaded)
