"""attention-inspector: step through a Transformer translation model's greedy decoding and look at every layer and
head of its attention (the page: `attention-inspector serve`), the studies behind it as commands
(`attention-inspector --help`), and the JSON API's answers from Python:

    import attention_inspector
    model = attention_inspector.load("en-de")
    model.trace("A dog runs in the park.")["cross_attention"]
    attention_inspector.show(model, "A dog runs in the park.")  # the page's core view, inline in a notebook

All of it is under this one name: `attention_inspector.model` (the networks, their explanations and studies),
`.viz` (the figures) and `.ui` (the page), and the shipped checkpoints (`checkpoints()`). `load` is the documented
way in (attention_inspector/api.py), and `show`, `head_view`, `model_view`, `neuron_view` and `show_trace` draw in a
notebook (attention_inspector/notebook.py).
"""

from pathlib import Path

__version__ = "0.1.0"

# A checkout keeps the layout the project was specified with, model/, viz/, ui/ and checkpoints/ at its top level,
# beside this folder; the wheel puts them inside it (pyproject.toml's package-dir). In a checkout the package's path
# reaches up to them, so that both import them by the same names.
_HERE = Path(__file__).resolve().parent
if not (_HERE / "model").is_dir() and (_HERE.parent / "model" / "__init__.py").is_file():
    __path__.append(str(_HERE.parent))


def checkpoints() -> Path | None:
    """The folder of the shipped checkpoints: inside the installed package, or a checkout's checkpoints/."""
    return next((Path(folder) / "checkpoints" for folder in __path__ if (Path(folder) / "checkpoints").is_dir()),
                None)


def load(name_or_folder, device=None):
    """A checkpoint by name or folder, asked as the JSON API is asked (attention_inspector/api.py `load`)."""
    from attention_inspector.api import load as loaded  # torch loads on first use, not on import

    return loaded(name_or_folder, device)


VIEWS = ("show", "head_view", "model_view", "neuron_view", "show_trace")  # attention_inspector/notebook.py


def __getattr__(name):
    """The notebook views, imported on first use (as `load`: what they need loads then, not on import)."""
    if name in VIEWS:
        from attention_inspector import notebook

        return getattr(notebook, name)
    raise AttributeError(f"module 'attention_inspector' has no attribute {name!r}")
