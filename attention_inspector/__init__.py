"""attention-inspector: step through a Transformer translation model's greedy decoding and look at every layer and
head of its attention (the page: `attention-inspector serve`), the studies behind it as commands
(`attention-inspector --help`), and the JSON API's answers from Python:

    import attention_inspector
    model = attention_inspector.load("en-de")
    model.trace("A dog runs in the park.")["cross_attention"]
    attention_inspector.show(model, "A dog runs in the park.")  # the page's core view, inline in a notebook

The code is in the packages `model`, `viz` and `ui`; `load` is the documented way in (attention_inspector/api.py),
and `show`, `head_view`, `model_view` and `show_trace` draw in a notebook (attention_inspector/notebook.py).
"""

__version__ = "0.1.0"


def load(name_or_folder, device=None):
    """A checkpoint by name or folder, asked as the JSON API is asked (attention_inspector/api.py `load`)."""
    from attention_inspector.api import load as loaded  # torch and gradio load on first use, not on import

    return loaded(name_or_folder, device)


VIEWS = ("show", "head_view", "model_view", "show_trace")  # attention_inspector/notebook.py


def __getattr__(name):
    """The notebook views, imported on first use (as `load`: torch and gradio load then, not on import)."""
    if name in VIEWS:
        from attention_inspector import notebook

        return getattr(notebook, name)
    raise AttributeError(f"module 'attention_inspector' has no attribute {name!r}")
