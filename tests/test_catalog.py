"""Hub-size checkpoints load on first use, within a memory budget (model/serving/catalog.py), and the trace workers
serve them as they serve the others."""

import shutil
import sys
import threading
from pathlib import Path

import pytest

import attention_inspector.model.serving.catalog as catalog_module
from attention_inspector.model.hub.convert_hf import ConversionError, convert
from attention_inspector.model.serving.catalog import Catalog, memory_bytes

sys.path.insert(0, str(Path(__file__).parent))
import hub_models  # noqa: E402

pytest.importorskip("transformers")
TEXT = "A man reads the newspaper in the park."


@pytest.fixture(scope="module")
def hub_root(tmp_path_factory):
    """Three converted Marian models (taken as Hub-size below: `lazy_bytes=0`) and a broken folder."""
    work = tmp_path_factory.mktemp("catalog")
    root = work / "checkpoints"
    for seed, name in enumerate(("opus-a", "opus-b", "opus-c")):
        convert(str(hub_models.marian(work / f"hub-{name}", seed=seed)), root / name)
    (root / "broken").mkdir()
    (root / "broken" / "config.json").write_text("{}", encoding="utf-8")
    return root


def test_models_load_on_first_use_and_the_least_recently_used_is_unloaded(hub_root):
    size = memory_bytes(hub_root / "opus-a")
    catalog = Catalog(hub_root, budget=int(2.5 * size), lazy_bytes=0)
    assert list(catalog) == ["opus-a", "opus-b", "opus-c"] and catalog.loaded() == {}
    assert "broken" in catalog.errors and "broken" not in catalog
    assert catalog.card("opus-b").source_language == "en" and catalog.loaded() == {}  # read without loading
    changes = []
    catalog.on_change = lambda: changes.append(sorted(catalog.loaded()))
    first = catalog["opus-a"]
    catalog["opus-b"]
    catalog["opus-a"]  # used again: opus-b is now the least recently used
    catalog["opus-c"]
    assert changes == [["opus-a"], ["opus-a", "opus-b"], ["opus-a", "opus-c"]]
    assert catalog["opus-a"] is first and first.trace(TEXT).target_tokens  # kept, and still serving


def test_a_model_asked_for_at_once_by_many_is_loaded_once(hub_root, monkeypatch):
    catalog = Catalog(hub_root, lazy_bytes=0)
    loads = []
    load = catalog_module.load_checkpoint
    monkeypatch.setattr(catalog_module, "load_checkpoint",
                        lambda folder, device: loads.append(folder) or load(folder, device))
    got = []
    threads = [threading.Thread(target=lambda: got.append(catalog["opus-b"])) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(loads) == 1 and len(got) == 6 and all(t is got[0] for t in got)


def test_the_trace_workers_serve_a_model_loaded_after_they_started(hub_root, tmp_path, monkeypatch):
    from attention_inspector.ui import load_services

    root = Path(shutil.copytree(hub_root, tmp_path / "checkpoints"))
    size = memory_bytes(root / "opus-a")
    monkeypatch.setattr(catalog_module, "LAZY_BYTES", 0)  # every model here counts as Hub-size
    services = load_services(root, workers=1, budget=int(1.5 * size))
    try:
        assert services.translators.loaded() == {} and services.pool is not None
        started = services.pool.worker_pids()
        labels = [label for label, _ in services.model_choices()]
        assert len(labels) == 3 and services.translators.loaded() == {}  # the menu loads nothing
        traced = services.trace("opus-a", TEXT)
        assert traced.target_tokens == services.translators["opus-a"].trace(TEXT).target_tokens
        after_load = services.pool.worker_pids()
        assert after_load != started  # forked anew, holding opus-a
        services.trace("opus-b", TEXT)  # over the budget: opus-a is unloaded
        assert list(services.translators.loaded()) == ["opus-b"]
        assert services.trace("opus-a", TEXT).target_tokens == traced.target_tokens  # loaded again on request
    finally:
        services.close()


@pytest.fixture
def stand_in_hub(tmp_path, monkeypatch):
    """The Hub, stood in for by a local Marian folder: what huggingface_hub's model_info and snapshot_download
    would answer for it. Returns the list of snapshot_download calls' allow_patterns."""
    from types import SimpleNamespace

    import huggingface_hub

    folder = hub_models.marian(tmp_path / "hub-marian")
    siblings = [SimpleNamespace(rfilename=f.name, size=f.stat().st_size) for f in folder.iterdir()]
    info = SimpleNamespace(siblings=siblings, sha="0123abc", card_data=None)
    calls = []
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", lambda self, *args, **kwargs: info)
    monkeypatch.setattr(huggingface_hub, "snapshot_download",
                        lambda *args, allow_patterns, **kwargs: calls.append(allow_patterns) or str(folder))
    return folder, calls


def test_the_hub_box_converts_a_model_once_and_adds_it_to_the_menu(tmp_path, stand_in_hub):
    from attention_inspector.model.api.services import Services

    root = tmp_path / "checkpoints"
    root.mkdir()
    services = Services(Catalog(root), root=root)
    name = services.load_from_hub("hf:Helsinki-NLP/opus-mt-tiny")
    assert name == "Helsinki-NLP--opus-mt-tiny" and name in [value for _, value in services.model_choices()]
    assert services.card(name).metrics["source"] == {"hub_id": "Helsinki-NLP/opus-mt-tiny", "revision": "0123abc",
                                                       "license": None, "model_type": "marian",
                                                       "converted_with": "python -m model.hub.convert_hf"}
    assert services.trace(name, TEXT).target_tokens
    folder, calls = stand_in_hub
    assert calls[0] == ["config.json"] and "model.safetensors" in calls[1]  # the family checked first
    assert services.load_from_hub("Helsinki-NLP/opus-mt-tiny") == name and len(calls) == 2  # converted once
    with pytest.raises(ConversionError, match="is not a Hub model id: .* A model in a folder on the server is "
                                              "converted there: python -m model.hub.convert_hf FOLDER"):
        services.load_from_hub(str(folder))  # a page never converts a folder of the server's, and says so
    with pytest.raises(ConversionError, match=r"^'aaaa.{53}…' is not a Hub model id: ids look like owner/name"):
        services.load_from_hub("a" * 300)  # never a raw "File name too long"


def test_the_hub_box_refuses_at_once_what_it_cannot_load(tmp_path, stand_in_hub, monkeypatch):
    import json

    import huggingface_hub

    from attention_inspector.model.api.services import Services
    from attention_inspector.ui.links import LinkSpec, open_link

    root = tmp_path / "checkpoints"
    root.mkdir()
    services = Services(Catalog(root), root=root)
    folder, calls = stand_in_hub
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "bert"}))
    with pytest.raises(ConversionError, match="'bert' is not a translation family"):
        services.load_from_hub("someone/a-bert")
    assert calls == [["config.json"]]  # refused before the weights were fetched

    def unreachable(self, *args, **kwargs):
        raise OSError("Name or service not known")
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", unreachable)
    with pytest.raises(ConversionError, match="Hub cannot be reached from here"):
        services.load_from_hub("Helsinki-NLP/opus-mt-en-de")
    with pytest.raises(ConversionError, match="Type the id"):
        services.load_from_hub("  ")
    session, message = open_link(services, *LinkSpec.parse({"model": ["hf:Helsinki-NLP/opus-mt-en-de"],
                                                            "text": ["A dog."]}))
    assert session is None and "hf:Helsinki-NLP/opus-mt-en-de could not be loaded" in message


def test_a_worker_forked_before_a_model_was_loaded_hands_its_request_back(hub_root):
    from attention_inspector.model.serving.workers import TracePool

    catalog = Catalog(hub_root, lazy_bytes=0)
    pool = TracePool(catalog, workers=1)  # forked while nothing is loaded; nobody forks it anew
    try:
        expected = catalog["opus-c"].trace(TEXT).target_tokens
        assert pool.trace("opus-c", TEXT).target_tokens == expected  # traced here, not in the worker
    finally:
        pool.close()


def test_a_model_the_disk_has_no_room_for_is_refused_before_anything_is_written(tmp_path, stand_in_hub, monkeypatch):
    """Neither a download nor a conversion starts without the room it needs on its disk; each says how much."""
    from attention_inspector.model.api.services import Services
    from attention_inspector.model.hub import convert_hf, hub_checks

    root = tmp_path / "checkpoints"
    root.mkdir()
    services = Services(Catalog(root), root=root)
    folder, calls = stand_in_hub
    download = sum(f.stat().st_size for f in folder.iterdir() if f.name in convert_hf.HUB_FILES)
    monkeypatch.setattr(hub_checks, "free_bytes", lambda path: download // 2)
    with pytest.raises(ConversionError, match="not enough disk to download Helsinki-NLP/opus-mt-tiny: it needs"):
        services.load_from_hub("Helsinki-NLP/opus-mt-tiny")
    assert calls == []  # nothing downloaded
    room = {"left": 10 ** 12}
    monkeypatch.setattr(hub_checks, "free_bytes", lambda path: room["left"] if "checkpoints" not in str(path) else 10)
    with pytest.raises(ConversionError, match="not enough disk to write Helsinki-NLP--opus-mt-tiny"):
        services.load_from_hub("Helsinki-NLP/opus-mt-tiny")
    assert list(root.iterdir()) == []  # nothing half-written


def test_the_hub_box_refuses_a_model_over_the_memory_budget_and_says_what_to_set(tmp_path, stand_in_hub):
    """The page converts what its memory for models (MODEL_MEMORY_GB) can serve, and no more; nothing is fetched
    or written for a model over it."""
    from attention_inspector.model.api.services import Services

    root = tmp_path / "checkpoints"
    root.mkdir()
    folder, calls = stand_in_hub
    size = (folder / "model.safetensors").stat().st_size
    services = Services(Catalog(root, budget=size - 1), root=root)
    with pytest.raises(ConversionError, match=r"the memory this server keeps for models\. Where the memory is there, "
                                              r"serve it with MODEL_MEMORY_GB=1 python app.py"):
        services.load_from_hub("Helsinki-NLP/opus-mt-tiny")
    assert calls == [] and list(root.iterdir()) == []
    services = Services(Catalog(root, budget=size * 2), root=root)
    assert services.load_from_hub("Helsinki-NLP/opus-mt-tiny") in services.translators
