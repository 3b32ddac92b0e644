"""Mutation score of the modules whose numbers a user sees: mutmut breaks each module one small change at a time
(an operator, a constant, a keyword, a call's argument) and runs the fast tests that reach the changed function;
a mutant the tests pass with "survived". Prints, per module, the mutants made, killed and survived, and the
survivors judged equivalent (benchmarks/equivalent_mutants.json: the change computes the same numbers), then each
other survivor's diff (docs/testing.md has the table and how to read it).

    python benchmarks/mutation.py                         # every module below, all cores
    python benchmarks/mutation.py detachment --cores 1    # one module
    python benchmarks/mutation.py detachment --survivors  # what survived the last run, against today's tests

mutmut names a mutant by the dotted path of the file it changed, and counts a test as reaching a function by that
function's `__module__`; both must read `attention_inspector.model...`. So the run happens in a copy of the code in
the installed wheel's layout (model/, viz/ and ui/ inside attention_inspector/), in a folder of its own (--folder),
which is kept, with mutmut's results in it, for `mutmut show NAME` there. A mutant whose forked test process
crashed or hung is tested again in a process of its own (`crashes_rechecked`).
"""

import argparse
import fnmatch
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Module -> (its file, the fast tests that check its numbers, which of its functions: all, or a glob of mutmut's
# names). The notebook's module is mostly text and markup; its numbers are the figures `_view` packs.
MODULES = {
    "detachment": ("model/explain/detachment.py", ["tests/test_detachment.py"], "*"),
    "contributions": ("model/explain/contributions.py", ["tests/test_contributions.py"], "*"),
    "ablation": ("model/explain/ablation.py", ["tests/test_ablation.py", "tests/test_estimates.py",
                                               "tests/test_heads.py", "tests/test_devices.py"], "*"),
    "patching": ("model/explain/patching.py", ["tests/test_patching.py", "tests/test_devices.py"], "*"),
    "attribution": ("model/explain/attribution.py", ["tests/test_attribution.py", "tests/test_devices.py"], "*"),
    "notebook": ("attention_inspector/notebook.py", ["tests/test_notebook.py"], "x__view__mutmut_*"),
}

# Surviving mutants that compute the same numbers as the code, by mutmut's name, with why (docs/testing.md). A name
# holds for the code it was judged on: a change to a module renumbers its mutants, and its survivors are judged again.
EQUIVALENT: dict[str, str] = json.loads((Path(__file__).parent / "equivalent_mutants.json").read_text())


PACKAGES = ("model", "viz", "ui")  # inside attention_inspector/ in the wheel


def others() -> list[Path]:
    """The checkout's top-level files and folders besides the code, its checkpoints and what git ignores."""
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    names = {line.split("/", 1)[0] for line in listed.splitlines()}
    return [ROOT / name for name in sorted(names - {*PACKAGES, "attention_inspector", "checkpoints"})
            if not name.startswith(".")]


def staged_path(file: str) -> str:
    """Where `file` of the checkout sits in the wheel's layout."""
    return file if file.startswith("attention_inspector/") else f"attention_inspector/{file}"


def stage(folder: Path, modules: list[str]) -> None:
    """Copy the code in the wheel's layout, the tests and mutmut's settings into `folder` (emptied first)."""
    shutil.rmtree(folder, ignore_errors=True)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "artifacts")
    shutil.copytree(ROOT / "attention_inspector", folder / "attention_inspector", ignore=skip)
    for package in PACKAGES:
        shutil.copytree(ROOT / package, folder / "attention_inspector" / package, ignore=skip)
    beside = others()  # the tests, app.py, docs/ ...: what the tests read beside the code
    for entry in beside:
        copy = shutil.copytree if entry.is_dir() else shutil.copy2
        copy(entry, folder / entry.name, **({"ignore": skip} if entry.is_dir() else {}))
    (folder / "checkpoints").symlink_to(ROOT / "checkpoints")  # the tests' shipped models, read only
    tests = sorted({test for module in modules for test in MODULES[module][1]})
    settings = {
        "source_paths": ["attention_inspector"],
        "only_mutate": [staged_path(MODULES[module][0]) for module in modules],
        "pytest_add_cli_args_test_selection": tests,
        "pytest_add_cli_args": ["-m", "not slow", "-p", "no:cacheprovider", "-q"],
        "also_copy": ["checkpoints", *(entry.name for entry in beside)],
    }
    lines = ["", "[tool.mutmut]"] + [f"{key} = {json.dumps(value)}" for key, value in settings.items()]
    with open(folder / "pyproject.toml", "a") as pyproject:  # the checkout's, pytest's settings in it
        pyproject.write("\n".join(lines) + "\n")


def names(module: str) -> str:
    """mutmut's names of the mutants of `module`'s functions that are scored, as a glob."""
    file, _, functions = MODULES[module]
    return staged_path(file).removesuffix(".py").replace("/", ".") + "." + functions


RECHECKED, CARRIED = "rechecked.json", "carried.json"
CRASHED = ("segfault", "suspicious", "timeout")  # a forked child that hung may have hung for the same reason


def read(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def statuses(folder: Path, module: str) -> dict[str, str]:
    """Each scored mutant of `module` and what became of it: mutmut's record, a crash's verdict tested again alone
    (RECHECKED), and for a mutant not run this time (`--survivors`) the verdict carried from the run before."""
    from mutmut.stats import status_by_exit_code
    record = read(folder / "mutants" / (staged_path(MODULES[module][0]) + ".meta"))["exit_code_by_key"]
    rechecked, carried = read(folder / RECHECKED), read(folder / CARRIED)
    return {name: rechecked.get(name) or (carried[name] if code is None and name in carried
                                          else status_by_exit_code[code])
            for name, code in record.items() if fnmatch.fnmatch(name, names(module))}


def crashes_rechecked(folder: Path, modules: list[str], environment: dict, cores: int) -> int:
    """mutmut runs a mutant's tests in a process forked from one that has already run torch, and such a child can
    crash (a segmentation fault) or hang though its tests pass: no kill. Each such mutant's tests (those that reach
    its function) are run again in a process of its own, and say what it is; the verdicts are kept in RECHECKED.
    Returns how many."""
    from mutmut.utils.format_utils import mangled_name_from_mutant_name
    tests = read(folder / "mutants" / "mutmut-stats.json")["tests_by_mangled_function_name"]
    crashed = [name for module in modules for name, value in statuses(folder, module).items() if value in CRASHED]

    def verdict(name: str) -> str:
        asked = sorted(tests[mangled_name_from_mutant_name(name)])
        ran = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *asked],
                             cwd=folder / "mutants", env={**environment, "MUTANT_UNDER_TEST": name},
                             capture_output=True)
        return "survived" if ran.returncode == 0 else "killed"

    with ThreadPoolExecutor(cores) as pool:
        (folder / RECHECKED).write_text(json.dumps(dict(zip(crashed, pool.map(verdict, crashed))), indent=1))
    return len(crashed)


def left_standing(folder: Path, modules: list[str]) -> tuple[dict[str, str], list[str]]:
    """The folder's verdicts, and the mutants that survived them and are not judged equivalent."""
    verdicts = {name: value for module in modules for name, value in statuses(folder, module).items()}
    return verdicts, [name for name, value in verdicts.items() if value == "survived" and name not in EQUIVALENT]


def diff(folder: Path, name: str) -> str:
    return subprocess.run([sys.executable, "-m", "mutmut", "show", name], cwd=folder, capture_output=True,
                          text=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("modules", nargs="*", help=f"some of {', '.join(MODULES)} (all by default)")
    parser.add_argument("--cores", type=int, default=os.cpu_count(), help="mutants tested at once")
    parser.add_argument("--folder", type=Path, default=Path("/tmp/attention-inspector-mutation"))
    parser.add_argument("--survivors", action="store_true",
                        help="test only the survivors of the folder's last run again, against the tests as they are "
                             "now; the other verdicts are carried over")
    arguments = parser.parse_args()
    modules, folder = arguments.modules or list(MODULES), arguments.folder.resolve()
    if unknown := set(modules) - set(MODULES):
        parser.error(f"no such module: {', '.join(sorted(unknown))}")
    if arguments.survivors and not (folder / "mutants").is_dir():
        parser.error(f"--survivors tests again what survived a run in {folder}, and it holds none")
    print(f"CPU: {cpu_model() or platform.machine()}, {os.cpu_count()} cores, {arguments.cores} at once")
    started = time.perf_counter()
    # The tests' toy checkpoints are trained once, by mutmut's first run of every test, not once per mutant.
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1",
                   "TOY_CHECKPOINTS": str(folder / "toys"),
                   "CHECKPOINTS": str(ROOT / "checkpoints")}  # mutmut's copy of the package leaves out their link
    carried, asked = left_standing(folder, modules) if arguments.survivors else ({}, list(map(names, modules)))
    stage(folder, modules)
    (folder / CARRIED).write_text(json.dumps(carried, indent=1))
    ran = subprocess.run([sys.executable, "-m", "mutmut", "run", "--max-children", str(arguments.cores), *asked],
                         cwd=folder, env=environment, capture_output=True, text=True)
    if ran.returncode:
        sys.exit(f"mutmut failed:\n{ran.stdout[-3000:]}{ran.stderr[-3000:]}")
    print(f"mutmut took {time.perf_counter() - started:.0f} s"
          + (f" for the {len(asked)} survivors of the run before" if arguments.survivors else ""))
    crashes = crashes_rechecked(folder, modules, environment, arguments.cores)
    print(f"{crashes} mutants that crashed or hung tested again, each alone; {time.perf_counter() - started:.0f} s in "
          "all")

    print("\n| module | mutants | killed | survived | equivalent | no test reaches | killed of the non-equivalent |")
    print("|---|---|---|---|---|---|---|")
    left = []
    for module in modules:
        status = statuses(folder, module)
        count = lambda *kinds: sum(value in kinds for value in status.values())
        survivors = [name for name, value in status.items() if value == "survived"]
        equivalent = [name for name in survivors if name in EQUIVALENT]
        killed = count("killed", "timeout")
        judged = killed + len(survivors) - len(equivalent) + count("no tests")
        print(f"| {module} | {len(status)} | {killed} | {len(survivors)} | {len(equivalent)} | {count('no tests')} | "
              f"{100 * killed / max(judged, 1):.1f}% |")
        left += [name for name, value in status.items()
                 if value == "no tests" or value == "survived" and name not in EQUIVALENT]
    for name in left:
        print(f"\n{diff(folder, name)}")


def cpu_model() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        return ""


if __name__ == "__main__":
    main()
