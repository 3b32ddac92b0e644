"""The device a command runs its model on: `--device cpu|cuda|cuda:N`, else `DEVICE` from the environment, else
the first GPU where there is one, else the CPU.

A CUDA device this machine lacks is refused with what it has, before any model is loaded. Under torchrun with
GPUs (nccl) each process takes the GPU of its local rank (model/training/distributed.py `Ranks.device`).
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

from attention_inspector.model.training.distributed import Ranks


def chosen_device(name: str | None = None, ranks: Ranks = Ranks()) -> torch.device:
    """The device `name` names (None: `DEVICE`, else cuda where present, else cpu); a process of a GPU process
    group, its local GPU. Raises ValueError for a name that is no device, or a GPU this machine does not have."""
    if ranks.backend == "nccl":
        return ranks.device
    name = name or os.environ.get("DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ValueError(f"{name!r} is not a device: write cpu, cuda or cuda:N") from None
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"{name!r}: this project runs on cpu or cuda, not {device.type}")
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ValueError(f"{name!r}: this machine has no CUDA GPU (torch {torch.__version__}); use --device cpu")
        if (device.index or 0) >= count:
            raise ValueError(f"{name!r}: this machine has {count} CUDA GPU(s), cuda:0 to cuda:{count - 1}")
    return device


def refuse_missing_device(name: str | None) -> None:
    """A command's check of its `--device`, before it loads anything: it exits saying why where the name is no
    device, or a GPU this machine lacks."""
    try:
        chosen_device(name)
    except ValueError as error:
        sys.exit(str(error))


def add_device_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", help="cpu, cuda or cuda:N (default: DEVICE from the environment, else cuda where "
                        "there is a GPU, else cpu)")
