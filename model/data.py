"""Multi30k sentence pairs through the `datasets` library, and token-bucketed batches.

Two sources: the Hugging Face hub id `bentrevett/multi30k` (en/de, for users online),
or a local folder of raw Multi30k task-1 files laid out as
`train.en.gz`, `val.de.gz`, `test_2016_flickr.fr.gz`, ... (gzipped or plain text,
one sentence per line, line-aligned across languages).
A third, synthetic source, `reverse`, pairs random strings with their reversal (language "chars").
"""

from __future__ import annotations

import gzip
import random
from dataclasses import dataclass
from pathlib import Path

import datasets
import torch

from model.vocab import CHARS, EOS_ID, PAD_ID, SOS_ID

HUB_ID = "bentrevett/multi30k"
REVERSE = "reverse"
REVERSE_SIZES = {"train": 40000, "val": 500, "test": 500}
REVERSE_ALPHABET = "abcdefghijklmnopqrstuvwxyz"
LANGUAGES = ("en", "de", "fr", "cs")
SPLITS = ("train", "val", "test")
LOCAL_FILE_STEMS = {"train": "train", "val": "val", "test": "test_2016_flickr"}
HUB_SPLIT_NAMES = {"train": "train", "val": "validation", "test": "test"}


class DataError(ValueError):
    """Data that cannot be used: a missing or misaligned file, an unknown language or split."""


def load_pairs(source: str, split: str, src_lang: str, tgt_lang: str) -> datasets.Dataset:
    """A `datasets.Dataset` with columns `src` and `tgt`, from a local raw folder, a hub id, or `reverse`."""
    if source == REVERSE:
        if (src_lang, tgt_lang) != (CHARS, CHARS) or split not in SPLITS:
            raise DataError(f"the {REVERSE} task is character level: use --src {CHARS} --tgt {CHARS}")
        sources = reversal_strings()[split]
        return datasets.Dataset.from_dict({"src": sources, "tgt": [s[::-1] for s in sources]})
    for lang in (src_lang, tgt_lang):
        if lang not in LANGUAGES:
            raise DataError(f"unknown language {lang!r}; Multi30k has {', '.join(LANGUAGES)}")
    if src_lang == tgt_lang:
        raise DataError(f"source and target language are both {src_lang!r}")
    if split not in SPLITS:
        raise DataError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    if Path(source).is_dir():
        return _load_local(Path(source), split, src_lang, tgt_lang)
    if Path(source).exists() or source.startswith((".", "/")):
        raise DataError(f"{source} is not a folder of Multi30k files")
    return _load_hub(source, split, src_lang, tgt_lang)


def reversal_strings(seed: int = 0) -> dict[str, list[str]]:
    """Random lower-case "words" of 2-16 characters (length uniform), disjoint across splits.

    About one character in six is a single space between letters, so a string looks like a few words.
    """
    rng = random.Random(seed)
    seen: set[str] = set()
    splits = {}
    for split, size in REVERSE_SIZES.items():
        strings = []
        while len(strings) < size:
            chars = [rng.choice(REVERSE_ALPHABET)]
            for _ in range(rng.randint(2, 16) - 1):
                space = chars[-1] != " " and rng.random() < 1 / 6
                chars.append(" " if space else rng.choice(REVERSE_ALPHABET))
            text = "".join(chars).rstrip()
            if len(text) >= 2 and text not in seen:
                seen.add(text)
                strings.append(text)
        splits[split] = strings
    return splits


def _read_lines(path: Path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def _find_file(folder: Path, split: str, lang: str) -> Path:
    stem = f"{LOCAL_FILE_STEMS[split]}.{lang}"
    for name in (f"{stem}.gz", stem):
        if (folder / name).is_file():
            return folder / name
    raise DataError(f"missing file {folder / stem}.gz (or {stem}) for split {split!r}, language {lang!r}")


def _load_local(folder: Path, split: str, src_lang: str, tgt_lang: str) -> datasets.Dataset:
    src_path, tgt_path = _find_file(folder, split, src_lang), _find_file(folder, split, tgt_lang)
    src_lines, tgt_lines = _read_lines(src_path), _read_lines(tgt_path)
    if len(src_lines) != len(tgt_lines):
        raise DataError(f"misaligned files: {src_path} has {len(src_lines)} lines "
                        f"but {tgt_path} has {len(tgt_lines)}")
    empty = [i + 1 for i, (s, t) in enumerate(zip(src_lines, tgt_lines)) if not s.strip() or not t.strip()]
    if empty:
        raise DataError(f"misaligned files: {src_path} and {tgt_path} have an empty line at line {empty[0]}")
    return datasets.Dataset.from_dict({"src": src_lines, "tgt": tgt_lines})


def _load_hub(dataset_id: str, split: str, src_lang: str, tgt_lang: str) -> datasets.Dataset:
    try:
        dataset = datasets.load_dataset(dataset_id, split=HUB_SPLIT_NAMES[split])
    except Exception as error:  # the hub raises many kinds: offline, not found, gated
        raise DataError(f"could not load {dataset_id!r} split {split!r} from the Hugging Face hub "
                        f"({error}); for offline use pass a folder of raw Multi30k files") from error
    for lang in (src_lang, tgt_lang):
        if lang not in dataset.column_names:
            raise DataError(f"{dataset_id} has no {lang!r} column (it has {dataset.column_names})")
    return dataset.select_columns([src_lang, tgt_lang]).rename_columns({src_lang: "src", tgt_lang: "tgt"})


@dataclass
class Batch:
    """Padded id tensors of one batch: `tgt_in` starts with <sos>, `tgt_out` ends with <eos>."""

    src: torch.Tensor  # (B, S)
    tgt_in: torch.Tensor  # (B, T)
    tgt_out: torch.Tensor  # (B, T)

    @property
    def n_target_tokens(self) -> int:
        return int((self.tgt_out != PAD_ID).sum())


def pad(sequences: list[list[int]]) -> torch.Tensor:
    """Right-pad id lists with <pad> into a (B, max length) tensor."""
    out = torch.full((len(sequences), max(map(len, sequences))), PAD_ID, dtype=torch.long)
    for row, ids in enumerate(sequences):
        out[row, :len(ids)] = torch.tensor(ids, dtype=torch.long)
    return out


def make_batch(src_ids: list[list[int]], tgt_ids: list[list[int]]) -> Batch:
    """Add <sos>/<eos> around target ids and pad everything."""
    return Batch(pad(src_ids), pad([[SOS_ID] + t for t in tgt_ids]), pad([t + [EOS_ID] for t in tgt_ids]))


def token_batches(src_lengths: list[int], tgt_lengths: list[int], max_tokens: int,
                  seed: int | None = None) -> list[list[int]]:
    """Group example indices into batches of similar length, each at most `max_tokens` (padded, per side).

    With a `seed`, lengths are bucketed with random tie-breaking and the batch order is shuffled,
    deterministically for that seed; without one, the order is fixed (for evaluation).
    """
    rng = random.Random(seed)
    tie = [rng.random() for _ in src_lengths] if seed is not None else [0.0] * len(src_lengths)
    order = sorted(range(len(src_lengths)), key=lambda i: (tgt_lengths[i], src_lengths[i], tie[i]))
    batches, current, longest = [], [], 0
    for i in order:
        candidate = max(longest, src_lengths[i] + 1, tgt_lengths[i] + 1)
        if current and candidate * (len(current) + 1) > max_tokens:
            batches.append(current)
            current, candidate = [], max(src_lengths[i] + 1, tgt_lengths[i] + 1)
        current.append(i)
        longest = candidate
    if current:
        batches.append(current)
    if seed is not None:
        rng.shuffle(batches)
    return batches
