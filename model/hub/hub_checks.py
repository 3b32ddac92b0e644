"""What a model from the Hub must pass before anything is downloaded or written (model/hub/convert_hf.py): the shape of
its id, the size of its weights, the disk's room; each refusal a `ConversionError` that says why and what to do."""

from __future__ import annotations

import math
import re
import shutil
from pathlib import Path

from attention_inspector.model.serving.catalog import DEFAULT_BUDGET

# The largest weights file converted without asking: the memory the app keeps for models (MODEL_MEMORY_GB, 8 GiB
# by default, half a free Space's 16 GB), which a model must fit to be served. NLLB-200-distilled-600M's and
# mBART-large-50's 2.3 GiB fit; a conversion peaks at about 1.2 times its file (benchmarks/hub_model.py).
DEFAULT_MAX_BYTES = DEFAULT_BUDGET


class ConversionError(RuntimeError):
    """A model that cannot be converted; the message says why and what to do."""


def hub_id(source: str) -> bool:
    """Whether `source` has the shape of a Hub model id: [owner/]name, each at most 96 letters, digits, - _ ."""
    return re.fullmatch(r"([\w-][\w.-]{0,95}/)?[\w-][\w.-]{0,95}", source, flags=re.ASCII) is not None


def checked_hub_id(source: str) -> str:
    """`source` where it has the shape of a Hub model id; else a ConversionError saying what one looks like (what a
    web page asks for: never a folder of the server's)."""
    if not hub_id(source):
        raise ConversionError(f"{shown_id(source)} is not a Hub model id: ids look like owner/name (such as "
                              "Helsinki-NLP/opus-mt-en-de), at most 96 characters each. A model in a folder on the "
                              "server is converted there: python -m model.hub.convert_hf FOLDER --out "
                              "checkpoints/NAME.")
    return source


def is_folder(path: Path) -> bool:
    """Whether `path` is a folder (a name the system refuses, too long say, is none)."""
    try:
        return path.is_dir()
    except OSError:
        return False


def shown_id(source: str) -> str:
    """`source` quoted for a message, cut to 60 characters."""
    return repr(source if len(source) <= 60 else source[:57] + "…")


def too_large(what: str, size: int, max_bytes: int) -> str:
    """Why weights of `size` bytes are refused, and what to set to convert them anyway."""
    needed = math.ceil(size / 1024 ** 3)
    return (f"{what} is {size / 1024 ** 3:.1f} GiB; the limit here is {max_bytes / 1024 ** 3:.1f} GiB, the memory "
            f"this server keeps for models. Where the memory is there, serve it with MODEL_MEMORY_GB={needed} python "
            f"app.py, or convert it with python -m model.hub.convert_hf … --max-gb {needed}.")


def free_bytes(path: Path) -> int:
    """The free space of the disk `path` is (or would be) on."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


def check_room(needed: int, path: Path, what: str) -> None:
    """A ConversionError unless the disk of `path` has `needed` bytes free (and a little more)."""
    free = free_bytes(path)
    if needed * 1.05 > free:
        raise ConversionError(f"There is not enough disk {what}: it needs {needed / 1024 ** 3:.2f} GiB in {path}, "
                              f"which has {free / 1024 ** 3:.2f} GiB free.")
