"""Multi30k sentence pairs through the `datasets` library (training and evaluation only: the app never imports it).

Two sources: the Hugging Face hub id `bentrevett/multi30k` (en/de, for users online),
or a local folder of raw Multi30k task-1 files laid out as
`train.en.gz`, `val.de.gz`, `test_2016_flickr.fr.gz`, ... (gzipped or plain text,
one sentence per line, line-aligned across languages).
A third, synthetic source, `reverse`, pairs random strings with their reversal (language "chars").
Local files become Arrow tables that `datasets` memory-maps, so a corpus far larger than Multi30k (WMT14's
4.5M pairs) is read as it is used, never loaded whole.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from attention_inspector.model.text.vocab import CHARS

HUB_ID = "bentrevett/multi30k"
REVERSE = "reverse"
REVERSE_SIZES = {"train": 40000, "val": 500, "test": 500}
REVERSE_ALPHABET = "abcdefghijklmnopqrstuvwxyz"
LANGUAGES = ("en", "de", "fr", "cs")
SPLITS = ("train", "val", "test")
LOCAL_FILE_STEMS = {"train": "train", "val": "val", "test": "test_2016_flickr"}
HUB_SPLIT_NAMES = {"train": "train", "val": "validation", "test": "test"}

# `datasets` (the `studies` extra) is imported where a table is made, not here: the commands that import this
# module say what they take (--help) and read a user's own files with the app's requirements alone.
if TYPE_CHECKING:
    import datasets


class DataError(ValueError):
    """Data that cannot be used: a missing or misaligned file, an unknown language or split."""


def load_pairs(source: str, split: str, src_lang: str, tgt_lang: str) -> datasets.Dataset:
    """A `datasets.Dataset` with columns `src` and `tgt`, from a local raw folder, a hub id, or `reverse`."""
    if source == REVERSE:
        if (src_lang, tgt_lang) != (CHARS, CHARS) or split not in SPLITS:
            raise DataError(f"the {REVERSE} task is character level: use --src {CHARS} --tgt {CHARS}")
        import datasets

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


def _find_file(folder: Path, split: str, lang: str) -> Path:
    stem = f"{LOCAL_FILE_STEMS[split]}.{lang}"
    for name in (f"{stem}.gz", stem):
        if (folder / name).is_file():
            return folder / name
    raise DataError(f"missing file {folder / stem}.gz (or {stem}) for split {split!r}, language {lang!r}")


def _load_local(folder: Path, split: str, src_lang: str, tgt_lang: str) -> datasets.Dataset:
    src_path, tgt_path = _find_file(folder, split, src_lang), _find_file(folder, split, tgt_lang)
    src_lines, tgt_lines = _memory_mapped_lines(src_path), _memory_mapped_lines(tgt_path)
    if len(src_lines) != len(tgt_lines):
        raise DataError(f"misaligned files: {src_path} has {len(src_lines)} lines "
                        f"but {tgt_path} has {len(tgt_lines)}")
    import datasets

    pairs = datasets.concatenate_datasets([src_lines.rename_column("text", "src"),
                                           tgt_lines.rename_column("text", "tgt")], axis=1)
    empty = _first_empty_line(pairs)
    if empty is not None:
        raise DataError(f"misaligned files: {src_path} and {tgt_path} have an empty line at line {empty + 1}")
    return pairs


def _memory_mapped_lines(path: Path) -> datasets.Dataset:
    """The lines of a text file (gzipped or not) as a table in an Arrow file that `datasets` writes once into its
    cache and memory-maps: a corpus of millions of lines is read from disk as it is used, never held whole."""
    import datasets

    return datasets.load_dataset("text", data_files=str(path), split="train")


def _first_empty_line(pairs: datasets.Dataset) -> int | None:
    """The index of the first pair with an empty (or blank) side, scanned a block of rows at a time."""
    import pyarrow.compute as pc

    start = 0
    for block in pairs.with_format("arrow").iter(batch_size=100_000):
        blank = pc.or_(*(pc.equal(pc.utf8_trim_whitespace(block[side]), "") for side in ("src", "tgt")))
        if pc.any(blank).as_py():
            return start + pc.index(blank, True).as_py()
        start += block.num_rows
    return None


def rows(dataset: datasets.Dataset, column: str, block: int = 10_000) -> Iterator:
    """Every value of a column, read a block of rows at a time (a memory-mapped column is never loaded whole)."""
    for batch in dataset.iter(batch_size=block):
        yield from batch[column]


class Column(Sequence):
    """One column of a dataset as a read-only sequence: item i is read from the (memory-mapped) table when asked."""

    def __init__(self, dataset: datasets.Dataset, name: str):
        self.dataset, self.name = dataset, name

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int):
        return self.dataset[index][self.name]

    def take(self, indices: list[int]) -> list:
        """Items `indices`, read in one call (a batch's worth: ~3x faster than one at a time)."""
        return self.dataset[indices][self.name]


def take(values: Sequence, indices: list[int]) -> list:
    """Items `indices` of a list or a `Column`."""
    return values.take(indices) if isinstance(values, Column) else [values[i] for i in indices]


def _load_hub(dataset_id: str, split: str, src_lang: str, tgt_lang: str) -> datasets.Dataset:
    import datasets

    try:
        dataset = datasets.load_dataset(dataset_id, split=HUB_SPLIT_NAMES[split])
    except Exception as error:  # the hub raises many kinds: offline, not found, gated
        raise DataError(f"could not load {dataset_id!r} split {split!r} from the Hugging Face hub "
                        f"({error}); for offline use pass a folder of raw Multi30k files") from error
    for lang in (src_lang, tgt_lang):
        if lang not in dataset.column_names:
            raise DataError(f"{dataset_id} has no {lang!r} column (it has {dataset.column_names})")
    return dataset.select_columns([src_lang, tgt_lang]).rename_columns({src_lang: "src", tgt_lang: "tgt"})
