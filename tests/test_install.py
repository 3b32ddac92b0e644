"""The project as a package: `pip install .` gives one package, attention_inspector, with the shipped checkpoints
inside it, and the `attention-inspector` command, pinned as requirements.txt pins the app; installed, it works from
any folder, a user's own `model.py` beside it, and every command says what it takes with the base install."""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
import tomllib
import urllib.request
from pathlib import Path
from typing import NamedTuple

import pytest

from attention_inspector import cli
from attention_inspector.model.extras import STUDIES

ROOT = Path(__file__).resolve().parent.parent


def pins(path: Path) -> list[str]:
    """A requirements file's pins, comments and includes left out."""
    lines = (line.split("#")[0].strip() for line in path.read_text(encoding="utf-8").splitlines())
    return [line for line in lines if line and not line.startswith("-r")]


def test_the_package_pins_what_the_requirements_files_pin():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["dependencies"] == pins(ROOT / "requirements.txt")
    extras = project["optional-dependencies"]
    assert extras["studies"] + extras["test"] == pins(ROOT / "requirements-dev.txt")
    assert project["scripts"] == {"attention-inspector": "attention_inspector.cli:main"}


def test_the_command_lists_every_command_and_refuses_an_unknown_one(capsys):
    cli.main(["--help"])
    listed = capsys.readouterr().out
    for name, (_, what) in cli.COMMANDS.items():
        assert f"  {name} " in listed and what in listed
    with pytest.raises(SystemExit, match="unknown command 'translate'"):
        cli.main(["translate"])
    with pytest.raises(SystemExit) as done:
        cli.main(["evaluate", "--help"])
    assert done.value.code == 0 and "attention-inspector evaluate" in capsys.readouterr().out


def test_serve_says_where_it_looked_when_there_are_no_checkpoints(tmp_path, monkeypatch):
    monkeypatch.delenv("CHECKPOINTS", raising=False)
    with pytest.raises(SystemExit, match="No checkpoints folder at .*nowhere.*--checkpoints DIR"):
        cli.main(["serve", "--checkpoints", str(tmp_path / "nowhere")])


PACKAGED = ("attention_inspector", "model", "viz", "ui", "checkpoints")  # what the wheel is built from
# The commands whose --help says they need the `studies` extra (all of it, or with some of their options).
STUDIES_COMMANDS = {"train", "evaluate", "heads", "align", "faithfulness", "patching", "detachment"}


def test_the_wheel_lists_every_package_of_the_checkout_under_one_name():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]

    def installed_as(init: Path) -> str:  # model/nets/__init__.py -> attention_inspector.model.nets
        parts = init.parent.relative_to(ROOT).parts
        return ".".join(parts if parts[0] == "attention_inspector" else ("attention_inspector", *parts))
    folders = {installed_as(init) for package in PACKAGED[:-1] for init in (ROOT / package).rglob("__init__.py")}
    assert set(setuptools["packages"]) == folders | {"attention_inspector.checkpoints"}
    assert setuptools["package-dir"] == {f"attention_inspector.{name}": name for name in PACKAGED[1:]}


def test_importing_the_package_and_loading_a_model_import_no_gradio_and_no_top_level_model():
    probe = ("import sys, attention_inspector as ai; model = ai.load('en-de'); "
             "print(model.trace('A dog runs.')['translation']); "
             "print(sorted({name.split('.')[0] for name in sys.modules} & {'gradio', 'model', 'ui', 'viz'}))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]" and done.stdout.split()[0] == "Ein"


def built_wheel(tmp_path: Path) -> Path:
    """The wheel, built from a copy of what it packages (so that the checkout gets no build folders)."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    for package in PACKAGED:
        shutil.copytree(ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__", "*.partial.*"))
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                            str(tmp_path / "wheels"), str(source)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    [wheel] = (tmp_path / "wheels").glob("attention_inspector-*.whl")
    return wheel


def fresh_venv(folder: Path) -> tuple[Path, Path]:
    """A venv whose dependencies are this interpreter's (nothing is downloaded: a .pth puts its site-packages after
    the venv's), pip and setuptools included; its python and site-packages."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=300)
    python = folder / "bin" / "python"
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    return python, site


def missing(folder: Path, names: tuple[str, ...]) -> Path:
    """A folder of packages named `names` that fail to import as if never installed: on PYTHONPATH, ahead of
    site-packages, it makes a venv a base install without them."""
    for name in names:
        (folder / name).mkdir(parents=True)
        (folder / name / "__init__.py").write_text(
            f"raise ModuleNotFoundError(\"No module named '{name}'\", name='{name}')\n", encoding="utf-8")
    return folder


class Installed(NamedTuple):
    """The wheel installed in a fresh venv: its python, site-packages, command, and a user's folder away from the
    checkout holding a `model.py`, a `ui/` and a `viz.py` of their own, where the commands run."""

    python: Path
    site: Path
    command: Path
    away: Path
    base: Path  # PYTHONPATH for a base install: the `studies` extra's packages missing

    def environment(self, **changes) -> dict[str, str]:
        """This process's environment without the checkout's PYTHONPATH and CHECKPOINTS, given `changes`."""
        kept = {name: value for name, value in os.environ.items() if name not in ("PYTHONPATH", "CHECKPOINTS")}
        return {**kept, **changes}

    def run(self, *arguments, program: Path | None = None, cwd: Path | None = None,
            **changes) -> subprocess.CompletedProcess:
        """`attention-inspector ARGUMENTS` (or `program`) in the user's folder (or `cwd`), the environment given
        `changes`."""
        return subprocess.run([str(program or self.command), *arguments], cwd=cwd or self.away, capture_output=True,
                              text=True, timeout=600, env=self.environment(**changes))


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    tmp_path = tmp_path_factory.mktemp("install")
    wheel = built_wheel(tmp_path)
    print(f"the wheel: {wheel.name}, {wheel.stat().st_size / 2 ** 20:.1f} MiB")
    python, site = fresh_venv(tmp_path / "env")
    done = subprocess.run([python, "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert sorted(path.name for path in site.iterdir() if path.name.startswith("attention")) == [
        "attention_inspector", f"{wheel.name.split('-py3')[0]}.dist-info"]
    assert not any((site / name).exists() for name in ("model", "ui", "viz", "checkpoints"))
    away = tmp_path / "work"
    (away / "ui").mkdir(parents=True)
    (away / "model.py").write_text("raise RuntimeError('the user model.py was imported')\n", encoding="utf-8")
    (away / "viz.py").write_text("raise RuntimeError('the user viz.py was imported')\n", encoding="utf-8")
    (away / "ui" / "__init__.py").write_text("raise RuntimeError('the user ui/ was imported')\n", encoding="utf-8")
    return Installed(python, site, python.parent / "attention-inspector", away, missing(tmp_path / "base", STUDIES))


@pytest.mark.slow
def test_a_wheel_installed_in_a_fresh_venv_works_from_a_folder_of_the_users_own_code(installed, toy_data):
    """The wheel in a venv with the app's requirements alone, used from a folder holding a `model.py`, a `ui/` and a
    `viz.py` of the user's own: one top-level package, the shipped models found with no argument, every
    command's --help (its examples as the installed command runs them, and saying where it needs the `studies`
    extra), `detachment --pairs`, and a command that needs the `studies` extra saying so in one line."""
    python, site, command, away = installed[:4]

    def run(*arguments, **changes):
        return installed.run(*arguments, PYTHONPATH=str(installed.base), **changes)

    used = run("-c", "import sys; sys.path.insert(0, ''); import attention_inspector as ai; "
               "model = ai.load('en-de'); print(model.trace('A dog runs.')['translation']); "
               "print(ai.checkpoints()); print(ai.show(model, 'A dog runs.').value['view']['kind'])", program=python)
    assert used.returncode == 0, used.stderr
    translation, shipped, kind = used.stdout.split("\n")[:3]
    assert translation.startswith("Ein") and shipped == str(site / "attention_inspector" / "checkpoints")
    assert kind == "cross"
    (away / "mine").mkdir()
    shutil.copytree(ROOT / "checkpoints" / "reverse", away / "mine" / "backwards")
    named = run("-c", "import attention_inspector as ai; print(ai.load('backwards').name)", program=python,
                CHECKPOINTS=str(away / "mine"))
    assert named.returncode == 0 and named.stdout.strip() == "backwards", named.stderr
    listed = run("--help")
    assert listed.returncode == 0 and "detachment" in listed.stdout and "serve" in listed.stdout
    every_help = json.dumps({name: [name, "--help"] for name in cli.COMMANDS})
    helped = run("-c", COMMANDS, every_help, program=python)  # one process: each command's imports once (3 s each)
    assert helped.returncode == 0, helped.stderr
    for name, (status, out, err) in json.loads(helped.stdout.splitlines()[-1]).items():
        assert status in (None, 0) and "usage:" in out and not err, (name, status, err)
        assert "python -m model." not in out and "--checkpoint checkpoints/" not in out, (name, out)
        examples = [line.strip() for line in out.splitlines() if line.strip().startswith("attention-inspector ")]
        assert examples or name == "serve", (name, out)
        assert ("studies" in out) == (name in STUDIES_COMMANDS), (name, out)
    (away / "sources.txt").write_text("A dog runs in the park.\nA man is reading a newspaper.\n", encoding="utf-8")
    (away / "translations.txt").write_text("Ein Hund rennt im Park.\nZwei Frauen singen.\n", encoding="utf-8")
    ranked = run("detachment", "--checkpoint", "en-de", "--pairs", "sources.txt", "translations.txt",
                 "--out", "ranked.csv")
    assert ranked.returncode == 0, ranked.stderr
    assert "2 pairs scored" in ranked.stdout and (away / "ranked.csv").read_text().count("\n") == 3
    serving = served(command, away, installed.environment(PYTHONPATH=str(installed.base)))
    assert "<html" in serving.lower(), serving[-2000:]
    needs = run("evaluate", "--checkpoint", "en-de", "--split", "val", "--data", str(toy_data))
    assert needs.returncode != 0 and needs.stderr.strip().splitlines() == [
        'attention-inspector evaluate needs datasets for this: pip install "attention-inspector[studies]"']
    # Said before any work: the head report's statistics pass over the split came first.
    needs = run("heads", "--checkpoint", "en-de", "--pairs", "sources.txt", "sources.txt", "--out", "heads")
    assert needs.returncode != 0 and needs.stderr.strip().splitlines() == [
        'attention-inspector heads needs sacrebleu for this: pip install "attention-inspector[studies]"']
    assert not (away / "heads").exists()
    nowhere = installed.run("evaluate", "--checkpoint", "en-de", "--data", str(away / "nowhere"))  # in a line
    assert nowhere.returncode != 0 and nowhere.stderr.strip().splitlines() == [
        f"attention-inspector evaluate: {away / 'nowhere'} is not a folder of Multi30k files"]


def checksums(folder: Path) -> dict[str, int]:
    """Every file under `folder`, by its path there, and a hash of its bytes."""
    return {str(path.relative_to(folder)): hash(path.read_bytes()) for path in sorted(folder.rglob("*"))
            if path.is_file() and "__pycache__" not in path.parts}


@pytest.mark.slow
def test_every_study_reads_a_checkpoint_by_name_and_writes_only_into_a_folder_the_user_gave(installed, toy_data):
    """Every command that takes a checkpoint, run from the installed wheel in the user's folder, on a shipped one by
    name and on a folder of the user's: each works (a few sentences of the toy data); none changes a file of the
    shipped checkpoints; the head report by name goes to en-de-heads/ there, and those that record into a
    checkpoint (--save-metrics, --calibrate) refuse a name before any work. A folder's heads.json is kept unless
    --overwrite. All in one process: each command's imports and en-de's loading once."""
    shipped = installed.site / "attention_inspector" / "checkpoints"
    before = checksums(shipped)
    away = installed.away / "studies"
    away.mkdir()
    shutil.copytree(shipped / "en-de", away / "mine")
    assert json.loads((away / "mine" / "heads.json").read_text())["sentences"] > 3
    (away / "sources.txt").write_text("A dog runs in the park.\nA man is reading a newspaper.\n", encoding="utf-8")
    (away / "targets.txt").write_text("Ein Hund rennt im Park.\nEin Mann liest eine Zeitung.\n", encoding="utf-8")
    (away / "pairs.tsv").write_text("A man is reading.\tA woman is reading.\tmann\tfrau\n", encoding="utf-8")
    data = ["--data", str(toy_data), "--split", "val"]
    studies = {
        "evaluate": ["--beam", "1", *data, "--threads", "1"],
        "heads": ["--limit", "3", "--exact", "2", "--check", "0", *data, "--threads", "1"],
        "align": ["--limit", "3", *data],
        "faithfulness": ["--sentences", "2", "--steps", "2", *data, "--threads", "1"],
        "patching": ["--pairs", "pairs.tsv"],
        "detachment": ["--pairs", "sources.txt", "targets.txt"],
        "inspect": ["--input", "sources.txt", "--out", "traces", "--threads", "1"],
    }
    runs = {f"{name} {checkpoint}": [name, "--checkpoint", checkpoint, *arguments]
            for checkpoint in ("en-de", "mine") for name, arguments in studies.items()}
    runs |= {"heads overwrite": ["heads", "--checkpoint", "mine", *studies["heads"], "--overwrite"],
             "evaluate save": ["evaluate", "--checkpoint", "mine", "--beam", "1", *data, "--save-metrics"],
             "evaluate save by name": ["evaluate", "--checkpoint", "en-de", *data, "--save-metrics"],
             "calibrate by name": ["detachment", "--checkpoint", "en-de", "--evaluate", "--calibrate", *data]}
    done = installed.run("-c", COMMANDS, json.dumps(runs), program=installed.python, cwd=away)
    assert done.returncode == 0, done.stderr[-3000:]
    said = json.loads(done.stdout.splitlines()[-1])
    for run in runs:
        status, out, _ = said[run]
        if run == "heads mine" or "by name" in run:
            continue
        assert status in (None, 0), (run, said[run])
    assert checksums(shipped) == before
    by_name = json.loads((away / "en-de-heads" / "heads.json").read_text())
    assert by_name["sentences"] == 3 and "the head report is in en-de-heads/heads.json" in said["heads en-de"][1]
    # "mine" is a folder here: its heads.json (en-de's, copied) kept, then replaced with --overwrite.
    assert "mine/heads.json exists" in said["heads mine"][0] and "--overwrite" in said["heads mine"][0]
    assert json.loads((away / "mine" / "heads.json").read_text())["sentences"] == 3
    metrics = json.loads((away / "mine" / "metrics.json").read_text())
    assert metrics["scores"]["val_beam1"]["sentences"] == 30
    for run, command, flag in (("evaluate save by name", "evaluate", "--save-metrics"),
                               ("calibrate by name", "detachment", "--calibrate")):
        assert said[run][0].startswith(f"attention-inspector {command}: {flag} records into the checkpoint"), said[run]
    assert "2 pairs scored" in said["detachment en-de"][1] and len(list((away / "traces").iterdir())) == 2


# Commands by `attention-inspector`'s own entry point, in one process: argv[1] is {name: its arguments}; prints
# {name: [exit status or message, what it printed, what it printed on stderr]}.
COMMANDS = """
import contextlib, io, json, sys
from attention_inspector import cli
said = {}
for name, arguments in json.loads(sys.argv[1]).items():
    out, err, status = io.StringIO(), io.StringIO(), None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            cli.main(arguments)
        except SystemExit as exit:
            status = exit.code
    said[name] = [status, out.getvalue(), err.getvalue()[-2000:]]
print(json.dumps(said))
"""


def served(command: Path, folder: Path, environment: dict) -> str:
    """`attention-inspector serve` with no argument, started in `folder`: the page it answers once it listens, or
    what it printed where it stopped first."""
    from tests.test_distributed import free_port

    port = free_port()
    server = subprocess.Popen([str(command), "serve"], cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, env={**environment, "GRADIO_SERVER_PORT": str(port), "TRACE_WORKERS": "0"})
    try:
        for _ in range(240):
            if server.poll() is not None:
                return server.stdout.read()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as page:
                    return page.read().decode()
            except OSError:
                time.sleep(0.5)
        return "no answer in 120 s"
    finally:
        server.terminate()
        server.wait(timeout=60)


def assert_same(ours, theirs, where: str) -> None:
    """Two answers equal, their numbers to the last digit the API rounds to (the 4th for maps, the 6th for
    scores), give or take one. The server answers on threads of its own, whose torch thread count other tests'
    commands may have left otherwise than this thread's: a sum split over other threads adds in another order, and
    a difference of 1e-7 can move a rounded digit (seen once in a full run)."""
    if isinstance(ours, float) or isinstance(theirs, float):
        assert ours == pytest.approx(theirs, abs=1.01e-4), where
    elif isinstance(ours, dict):
        assert ours.keys() == theirs.keys(), where
        for key in ours:
            assert_same(ours[key], theirs[key], f"{where}.{key}")
    elif isinstance(ours, list):
        assert len(ours) == len(theirs), where
        for index, (mine, other) in enumerate(zip(ours, theirs)):
            assert_same(mine, other, f"{where}[{index}]")
    else:
        assert ours == theirs, where


def test_the_python_api_answers_as_the_http_api_does(server, toy_checkpoints):
    import json

    import attention_inspector
    from tests.test_http_api import call

    model = attention_inspector.load(toy_checkpoints[0] / "toy-en-de")
    text, other = "A man plays with a red ball.", "A woman plays with a red ball."
    tokens = model.trace(text)["target_tokens"]
    asked = {"trace": ({"text": text, "mask": ["cross.1.2"], "units": "words"}),
             "detach": ({"text": text, "translation": "ein mann spielt mit ball ."}),
             "score": ({"text": text, "target_tokens": tokens}),
             "beam": ({"text": text, "beam_size": 2}),
             "attribute": ({"text": text, "method": "saliency", "step": 2}),
             "patch": ({"text": text, "counterfactual": other}),
             "neuron": ({"text": text, "kind": "decoder", "layer": 2, "head": 1, "query": 2, "mask": ["cross.1.2"]})}
    for endpoint, arguments in asked.items():
        event, answer = call(server, f"v2/{endpoint}", json.dumps({"model": "toy-en-de", **arguments}))
        assert event == "complete", (endpoint, answer)
        assert_same(json.loads(json.dumps(getattr(model, endpoint)(**arguments))), answer[0], endpoint)
    with pytest.raises(ValueError, match="empty"):
        model.trace("   ")
    with pytest.raises(ValueError, match="No checkpoint 'nowhere'"):
        attention_inspector.load("nowhere")
