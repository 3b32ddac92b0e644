"""Multi30k loading from raw local files, and token-bucketed batching."""

import gzip

import pytest

from attention_inspector.model.text.batching import make_batch, token_batches
from attention_inspector.model.text.vocab import EOS_ID, PAD_ID, SOS_ID
from attention_inspector.model.training.data import DataError, load_pairs


def test_reads_raw_gzipped_files_in_both_directions(toy_data):
    train = load_pairs(str(toy_data), "train", "en", "de")
    assert len(train) == 300 and train.column_names == ["src", "tgt"]
    assert "Hund" in " ".join(train["tgt"]) and "dog" in " ".join(train["src"]).lower()
    reverse = load_pairs(str(toy_data), "test", "de", "en")
    assert len(reverse) == 30
    assert reverse[0]["tgt"] == load_pairs(str(toy_data), "test", "en", "de")[0]["src"]


def test_reads_plain_text_files(tmp_path):
    (tmp_path / "val.en").write_text("A dog runs.\nTwo children play in the park.\n", encoding="utf-8")
    (tmp_path / "val.de").write_text("Ein Hund läuft.\nZwei Kinder spielen im Park.\n", encoding="utf-8")
    assert load_pairs(str(tmp_path), "val", "de", "en").to_list() == [
        {"src": "Ein Hund läuft.", "tgt": "A dog runs."},
        {"src": "Zwei Kinder spielen im Park.", "tgt": "Two children play in the park."}]


def test_rejects_misaligned_files(toy_data):
    with gzip.open(toy_data / "val.de.gz", "at", encoding="utf-8") as f:
        f.write("Ein zusätzlicher Satz.\n")
    with pytest.raises(DataError, match=r"misaligned.*val\.en\.gz has 30 lines.*val\.de\.gz has 31"):
        load_pairs(str(toy_data), "val", "en", "de")


def test_rejects_an_empty_line(toy_data):
    lines = gzip.open(toy_data / "val.de.gz", "rt", encoding="utf-8").read().splitlines()
    lines[3] = ""
    with gzip.open(toy_data / "val.de.gz", "wt", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    with pytest.raises(DataError, match="empty line at line 4"):
        load_pairs(str(toy_data), "val", "en", "de")


@pytest.mark.parametrize("split,src,tgt,message", [
    ("test", "en", "fr", r"missing file .*test_2016_flickr\.fr"),
    ("test", "en", "xx", "unknown language 'xx'"),
    ("dev", "en", "de", "unknown split 'dev'"),
    ("test", "de", "de", "both 'de'"),
])
def test_clear_errors(toy_data, split, src, tgt, message):
    with pytest.raises(DataError, match=message):
        load_pairs(str(toy_data), split, src, tgt)


def test_a_path_that_is_not_a_folder_is_not_sent_to_the_hub(tmp_path):
    with pytest.raises(DataError, match="not a folder"):
        load_pairs(str(tmp_path / "nowhere"), "train", "en", "de")


def test_token_batches_cover_every_example_within_the_budget():
    src_lengths = [3, 9, 4, 12, 5, 5, 7, 2, 30, 6] * 5
    tgt_lengths = [4, 8, 3, 10, 6, 5, 9, 2, 25, 5] * 5
    batches = token_batches(src_lengths, tgt_lengths, max_tokens=40, seed=1)
    assert sorted(i for b in batches for i in b) == list(range(50))
    for batch in batches:
        longest = max(max(src_lengths[i], tgt_lengths[i]) + 1 for i in batch)
        assert longest * len(batch) <= 40 or len(batch) == 1
    assert batches == token_batches(src_lengths, tgt_lengths, max_tokens=40, seed=1)
    assert batches != token_batches(src_lengths, tgt_lengths, max_tokens=40, seed=2)


def test_make_batch_shifts_targets():
    batch = make_batch([[5, 6, EOS_ID], [7, EOS_ID]], [[8, 9], [10]])
    assert batch.src.tolist() == [[5, 6, EOS_ID], [7, EOS_ID, PAD_ID]]
    assert batch.tgt_in.tolist() == [[SOS_ID, 8, 9], [SOS_ID, 10, PAD_ID]]
    assert batch.tgt_out.tolist() == [[8, 9, EOS_ID], [10, EOS_ID, PAD_ID]]
    assert batch.n_target_tokens == 5


def test_hub_id_goes_through_datasets_load_dataset(monkeypatch):
    import datasets

    calls = []

    def fake_load_dataset(name, split):
        calls.append((name, split))
        return datasets.Dataset.from_dict({"en": ["A dog."], "de": ["Ein Hund."]})

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    pairs = load_pairs("bentrevett/multi30k", "val", "de", "en")
    assert calls == [("bentrevett/multi30k", "validation")]
    assert pairs[0] == {"src": "Ein Hund.", "tgt": "A dog."}
    with pytest.raises(DataError, match="no 'fr' column"):
        load_pairs("bentrevett/multi30k", "train", "en", "fr")


def test_hub_failure_suggests_the_offline_folder(monkeypatch):
    import datasets

    def offline(name, split):
        raise ConnectionError("no internet")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(DataError, match="no internet.*folder of raw Multi30k files"):
        load_pairs("bentrevett/multi30k", "train", "en", "de")


def test_reverse_task_pairs_strings_with_their_reversal_in_disjoint_splits():
    splits = {split: load_pairs("reverse", split, "chars", "chars") for split in ("train", "val", "test")}
    assert [len(d) for d in splits.values()] == [40000, 500, 500]
    assert all(pair["tgt"] == pair["src"][::-1] for pair in splits["val"])
    train = set(splits["train"]["src"])
    assert not train & set(splits["val"]["src"]) and not train & set(splits["test"]["src"])
    assert splits["test"]["src"] == load_pairs("reverse", "test", "chars", "chars")["src"]  # deterministic
    with pytest.raises(DataError, match="character level"):
        load_pairs("reverse", "train", "en", "de")


def resident_mib() -> float:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024


@pytest.mark.slow
def test_a_corpus_of_a_million_lines_is_memory_mapped_not_loaded(tmp_path):
    """1M generated pairs (~80 MB of text): read through an on-disk Arrow table, with a blank line near the end
    found without holding the corpus in memory."""
    rows = 1_000_000
    for lang, line in (("en", "a man with a red dog number {} walks past"),
                       ("de", "ein mann mit roter hund nummer {}")):
        with gzip.open(tmp_path / f"train.{lang}.gz", "wt", compresslevel=1) as out:
            out.writelines(line.format(i) + "\n" for i in range(rows))
    before = resident_mib()
    pairs = load_pairs(str(tmp_path), "train", "en", "de")
    assert len(pairs) == rows and pairs.cache_files  # a table on disk, memory-mapped
    assert pairs[rows - 1] == {"src": f"a man with a red dog number {rows - 1} walks past",
                               "tgt": f"ein mann mit roter hund nummer {rows - 1}"}
    assert sum(1 for _ in rows_of(pairs)) == rows  # read through, a block at a time
    assert resident_mib() - before < 200, resident_mib() - before  # the text alone would take ~80 MB as bytes,
    # several times that as Python strings
    with gzip.open(tmp_path / "train.de.gz", "wt", compresslevel=1) as out:
        out.writelines(("  " if i == rows - 3 else f"satz {i}") + "\n" for i in range(rows))
    with pytest.raises(DataError, match=f"empty line at line {rows - 2}"):
        load_pairs(str(tmp_path), "train", "en", "de")


def rows_of(pairs):
    from attention_inspector.model.training.data import rows
    return rows(pairs, "src")
