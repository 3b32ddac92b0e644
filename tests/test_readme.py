"""The README tells the truth: its commands are the ones CI runs, its Space header matches the pins."""

import importlib.metadata
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
CI = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
REQUIREMENTS = dict(line.split("==") for line in (ROOT / "requirements.txt").read_text().split())


def readme_commands() -> list[str]:
    """Every command in the README's bash blocks, without comments."""
    blocks = re.findall(r"```bash\n(.*?)```", README, flags=re.S)
    return [line.split("#")[0].strip() for block in blocks for line in block.splitlines() if line.strip()]


def test_setup_is_install_then_run_the_app():
    commands = readme_commands()
    assert commands[:2] == ["pip install -r requirements.txt", "python app.py"]


TEST_COMMAND = "pip install -r requirements-dev.txt && python -m pytest -q"


def test_ci_runs_the_readme_test_command():
    assert TEST_COMMAND in readme_commands()
    assert CI.strip().splitlines()[-1] == TEST_COMMAND.replace("pip install", "pip install -q")


def test_every_requirement_is_pinned_and_the_tests_run_on_the_pinned_versions():
    """The versions that the README's install commands pin are the ones these tests pass with (a local build tag,
    such as torch's +cpu, aside)."""
    lines = [line.split("#")[0].strip() for name in ("requirements.txt", "requirements-dev.txt")
             for line in (ROOT / name).read_text().splitlines()]
    requirements = [line for line in lines if line and not line.startswith("-r ")]
    assert [line for line in requirements if not re.fullmatch(r"[\w.-]+==\d+(\.\d+)*", line)] == []
    pinned = dict(line.split("==") for line in requirements)
    assert pinned["torch"] == "2.13.0"
    installed = {package: importlib.metadata.version(package).split("+")[0] for package in pinned}
    assert installed == pinned


def test_space_header_matches_requirements():
    header = README.split("---")[1]
    fields = dict(line.split(": ", 1) for line in header.strip().splitlines())
    assert fields["sdk"] == "gradio" and fields["app_file"] == "app.py"
    assert fields["sdk_version"] == REQUIREMENTS["gradio"]
    assert (ROOT / fields["app_file"]).is_file()


def test_readme_image_exists():
    for path in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", README) + re.findall(r'<img src="([^"]+)"', README):
        assert (ROOT / path).is_file(), path


def test_results_table_matches_the_checkpoints_metrics():
    """Every row of the README's results tables is what `model.training.evaluate --save-metrics` recorded."""
    rows = re.findall(r"^\| (\S+) \| (test2016|test|val) \| (greedy|beam \d+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| "
                      r"([\d.]+) \|$", README, re.M)
    assert len(rows) >= 6
    for name, split, decoding, *numbers in rows:
        metrics = json.loads((ROOT / "checkpoints" / name / "metrics.json").read_text())
        beam = 1 if decoding == "greedy" else int(decoding.split()[1])
        split = "val" if split == "val" else "test"
        key = split if beam == metrics["decoding"]["beam_size"] else f"{split}_beam{beam}"
        scores = metrics["scores"][key]
        assert scores["beam_size"] == beam
        assert [scores[k] for k in ("bleu", "chrf", "bleu_tok_lc", "exact_match")] == [float(n) for n in numbers]


def test_shipped_checkpoints_are_small():
    for weights in (ROOT / "checkpoints").glob("*/model.safetensors"):
        assert sum(f.stat().st_size for f in weights.parent.iterdir()) < 25 * 2**20


def test_the_readmes_word_in_pieces_example_is_what_the_shipped_model_forces():
    """A word whose own byte-pair pieces the vocabulary lacks is spelled in the fewest pieces it has, as the README
    says, and forcing it translates on from there."""
    from attention_inspector.model.serving.checkpoint import load_checkpoint

    word, pieces = re.search(r'`force=\["(\w+)"\]`\s+forces (`[^()]*`),', README).groups()
    translator = load_checkpoint(ROOT / "checkpoints" / "en-de")
    assert translator.in_pieces([word]) == re.findall(r"`([^`]+)`", pieces)
    assert translator.trace("A woman reads a newspaper.", force=["eine", word]).target_tokens[1:6] == \
        re.findall(r"`([^`]+)`", pieces)


README_LINES = 250  # the README is what a newcomer reads first; the detail lives in docs/
PERFORMANCE_LINES = 300  # how to measure and today's figures; the runs that led to them stay in git log


def test_the_readme_stays_short():
    assert len(README.splitlines()) <= README_LINES


def test_the_performance_page_stays_short():
    assert len((ROOT / "docs" / "performance.md").read_text(encoding="utf-8").splitlines()) <= PERFORMANCE_LINES


def heading_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a page's headings: lower-cased, punctuation dropped, spaces as hyphens."""
    headings = re.findall(r"^#+ (.+)$", re.sub(r"```.*?```", "", markdown, flags=re.S), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


def test_every_link_between_the_readme_and_the_docs_leads_somewhere():
    """A link from the README or a docs page reaches a file that exists and, where it names one, a heading of it."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", re.sub(r"```.*?```", "", text, flags=re.S)):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path) if path else page
            if not linked.exists():
                broken.append(f"{page.name}: {target}")
            elif anchor and linked.suffix == ".md" and anchor not in heading_anchors(linked.read_text(encoding="utf-8")):
                broken.append(f"{page.name}: {target}")
    assert broken == []


def test_the_readmes_file_map_names_what_is_there():
    """Every folder and file in the README's Layout block exists (an indented one inside the folder above it)."""
    layout = re.search(r"## Layout\n\n```\n(.*?)```", README, flags=re.S).group(1)
    parent, missing = ROOT, []
    for line in layout.splitlines():
        indent, entry = re.match(r"( *)(\S*)", line).groups()
        if not entry or len(indent) > 2:  # a description's second line
            continue
        path = (parent if indent else ROOT) / entry.replace("<name>", "en-de")
        if not path.exists():
            missing.append(entry)
        if not indent:
            parent = path
    assert missing == []
