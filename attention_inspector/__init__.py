"""attention-inspector: step through a Transformer translation model's greedy decoding and look at every layer and
head of its attention (the page: `attention-inspector serve`), the studies behind it as commands
(`attention-inspector --help`), and the JSON API's answers from Python:

    import attention_inspector
    model = attention_inspector.load("en-de")
    model.trace("A dog runs in the park.")["cross_attention"]

The code is in the packages `model`, `viz` and `ui`; `load` is the documented way in (attention_inspector/api.py).
"""

__version__ = "0.1.0"


def load(name_or_folder, device=None):
    """A checkpoint by name or folder, asked as the JSON API is asked (attention_inspector/api.py `load`)."""
    from attention_inspector.api import load as loaded  # torch and gradio load on first use, not on import

    return loaded(name_or_folder, device)
