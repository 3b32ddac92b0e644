"""attention-inspector: step through a Transformer translation model's greedy decoding and look at every layer and
head of its attention (the page: `attention-inspector serve`), and the studies behind it as commands
(`attention-inspector --help`). The code is in the packages `model`, `viz` and `ui`."""

__version__ = "0.1.0"
