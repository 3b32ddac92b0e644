"""The project as a package (issue 56): `pip install .` gives the packages and the `attention-inspector` command,
pinned as requirements.txt pins the app; installed outside the checkout, the commands run."""

import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

from attention_inspector import cli

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
    for name, (module, _) in cli.COMMANDS.items():
        assert f"  {name} " in listed and module in listed
    with pytest.raises(SystemExit, match="unknown command 'translate'"):
        cli.main(["translate"])
    with pytest.raises(SystemExit) as done:
        cli.main(["evaluate", "--help"])
    assert done.value.code == 0 and "attention-inspector evaluate" in capsys.readouterr().out


def test_serve_says_where_it_looked_when_there_are_no_checkpoints(tmp_path, monkeypatch):
    monkeypatch.delenv("CHECKPOINTS", raising=False)
    with pytest.raises(SystemExit, match="No checkpoints folder at .*nowhere.*--checkpoints DIR"):
        cli.main(["serve", "--checkpoints", str(tmp_path / "nowhere")])


@pytest.mark.slow
def test_a_wheel_installed_in_a_fresh_venv_outside_the_checkout_runs_its_commands(tmp_path):
    source = tmp_path / "source"  # what the wheel is built from, so the checkout gets no build folders
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    for package in ("attention_inspector", "model", "viz", "ui"):
        shutil.copytree(ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                            str(tmp_path / "wheels"), str(source)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    [wheel] = (tmp_path / "wheels").glob("attention_inspector-*.whl")
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True, timeout=300)
    python, command = env / "bin" / "python", env / "bin" / "attention-inspector"
    # The dependencies are this interpreter's (nothing is downloaded): a .pth puts its site-packages after the venv's.
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    installed = subprocess.run([python, "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)],
                               capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr
    away = tmp_path / "elsewhere"
    away.mkdir()
    environment = {name: value for name, value in os.environ.items() if name not in ("PYTHONPATH", "CHECKPOINTS")}

    def run(*arguments, program=command):
        return subprocess.run([str(program), *arguments], cwd=away, capture_output=True, text=True, timeout=600,
                              env=environment)

    where = run("-c", "import model, ui; print(model.__file__, ui.__file__)", program=python)
    assert where.returncode == 0 and str(ROOT) not in where.stdout and str(site) in where.stdout
    listed = run("--help")
    assert listed.returncode == 0 and "detachment" in listed.stdout and "serve" in listed.stdout
    (away / "sources.txt").write_text("A dog runs in the park.\nA man is reading a newspaper.\n", encoding="utf-8")
    (away / "translations.txt").write_text("Ein Hund rennt im Park.\nZwei Frauen singen.\n", encoding="utf-8")
    ranked = run("detachment", "--checkpoint", str(ROOT / "checkpoints" / "en-de"), "--pairs", "sources.txt",
                 "translations.txt", "--out", "ranked.csv")
    assert ranked.returncode == 0, ranked.stderr
    assert "2 pairs scored" in ranked.stdout and (away / "ranked.csv").read_text().count("\n") == 3
    unserved = run("serve")  # no checkout beside the installed packages, none here: it says where to look
    assert unserved.returncode != 0 and "No checkpoints found" in unserved.stderr and "--checkpoints" in unserved.stderr


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
             "patch": ({"text": text, "counterfactual": other})}
    for endpoint, arguments in asked.items():
        event, answer = call(server, f"v2/{endpoint}", json.dumps({"model": "toy-en-de", **arguments}))
        assert event == "complete", (endpoint, answer)
        assert_same(json.loads(json.dumps(getattr(model, endpoint)(**arguments))), answer[0], endpoint)
    with pytest.raises(ValueError, match="empty"):
        model.trace("   ")
    with pytest.raises(ValueError, match="No checkpoint 'nowhere'"):
        attention_inspector.load("nowhere")
