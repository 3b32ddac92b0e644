"""The repository a Hugging Face Space can take: the upload holds exactly what the app runs, and that alone
starts the app; a clone without git-lfs still gets the real weights; the app's requirements are run-time only."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / ".ci" / "publish_space.py"


def publish_module():
    spec = importlib.util.spec_from_file_location("publish_space", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_dry_run_lists_what_the_space_runs_with_sizes_and_uploads_nothing():
    run = subprocess.run([sys.executable, str(SCRIPT), "--dry-run"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    listed = {line.split()[2] for line in lines[:-1]}
    for needed in ("app.py", "requirements.txt", "README.md", ".gitattributes", "model/nets/transformer.py",
                   "model/nets/seq2seq.py", "viz/views.py", "ui/demo.py", "ui/tabs/inspect.py", "ui/static/plot.js",
                   "ui/static/page.js", "ui/static/style.css", "checkpoints/en-de/model.safetensors",
                   "checkpoints/en-de/vocab.json", "checkpoints/reverse/config.json"):
        assert needed in listed, needed
    assert not any(path.startswith(("benchmarks/", ".ci/", "docs/", "runs/", ".venv/")) for path in listed)
    assert not any(path.startswith("tests/") and not path.endswith(".png") for path in listed)  # only the README image
    assert "requirements-dev.txt" not in listed
    large = [line for line in lines if "model.safetensors" in line and float(line.split()[0]) > 10]
    assert large and all(line.endswith("(LFS)") for line in large)
    assert lines[-1].endswith(f"in {len(listed)} files")


@pytest.mark.slow
def test_the_uploaded_files_alone_start_the_app_without_training_packages(tmp_path):
    for path in publish_module().space_files():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / path, tmp_path / path)
    script = ("import sys, app; import attention_inspector.ui as ui; from pathlib import Path; "
              "services = ui.load_services(Path('checkpoints'), 0); "
              "ui.build_demo(services); ui.launch_options(services); "
              "print(sorted(services.translators), services.load_errors, services.trace('en-de', 'A dog runs.').text); "
              "print([m for m in ('datasets', 'sacrebleu', 'pytest', 'tqdm.auto') if m in sys.modules])")
    environment = {name: value for name, value in os.environ.items() if name != "CHECKPOINTS"}  # other tests set it
    environment.update(TRACE_WORKERS="0", PYTHONPATH="")
    run = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env=environment)
    assert run.returncode == 0, run.stderr
    loaded, imported = run.stdout.strip().splitlines()[-2:]
    assert "'en-de'" in loaded and "{}" in loaded and "Hund" in loaded
    assert "datasets" not in imported and "sacrebleu" not in imported and "pytest" not in imported


@pytest.mark.slow
def test_a_clone_without_git_lfs_gets_the_real_weights(tmp_path):
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout")
    assert "*.safetensors filter=lfs" in (ROOT / ".gitattributes").read_text()
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(tmp_path / "clone")], check=True,
                   timeout=300)
    weights = (tmp_path / "clone" / "checkpoints" / "en-de" / "model.safetensors").read_bytes()
    assert not weights.startswith(b"version https://git-lfs")
    header_length = int.from_bytes(weights[:8], "little")  # safetensors: an 8-byte length, then a JSON header
    header = json.loads(weights[8:8 + header_length])
    assert header["generator.bias"]["dtype"] == "F16" and len(weights) > 10 * 2**20
    assert weights == (ROOT / "checkpoints" / "en-de" / "model.safetensors").read_bytes()


def requirement_names(name: str) -> set[str]:
    lines = (ROOT / name).read_text().splitlines()
    return {line.split("==")[0].lower() for line in lines if line and not line.startswith(("#", "-r"))}


def test_the_app_requirements_are_run_time_only():
    app, dev = requirement_names("requirements.txt"), requirement_names("requirements-dev.txt")
    assert {"torch", "gradio", "plotly", "spacy", "numpy", "safetensors"} <= app
    assert not app & {"pytest", "hypothesis", "playwright", "datasets", "sacrebleu"}  # tqdm: the commands' bars
    assert {"pytest", "hypothesis", "playwright", "datasets", "sacrebleu"} <= dev
    assert "-r requirements.txt" in (ROOT / "requirements-dev.txt").read_text().splitlines()
