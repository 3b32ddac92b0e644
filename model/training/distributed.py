"""Training on many processes, one machine or many: PyTorch DistributedDataParallel, started by torchrun.

    torchrun --nproc_per_node 2 -m model.training.train --src en --tgt de --out checkpoints/en-de

torchrun sets RANK, WORLD_SIZE, LOCAL_RANK (and MASTER_ADDR/PORT) in each process it starts; `start` joins
them into one process group: `gloo` on CPU, `nccl` on GPUs (one per process, by local rank). Without those
variables everything runs as one process and nothing here does anything. Every rank builds the same batches
(same seed) and takes its own share of each (`Ranks.share`), so the global batch, the learning-rate
schedule and the number of steps are those of one process with the whole batch. The evaluation CLIs
(model.heads, model.align) give each rank a block of the split's sentences (`Ranks.block`) and add up or
gather what the ranks found.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Ranks:
    """Where this process stands among the training processes."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str | None = None  # None: a single process, no process group

    @property
    def main(self) -> bool:
        """Rank 0: the one that validates and writes checkpoints, metrics and logs."""
        return self.rank == 0

    @property
    def device(self) -> torch.device:
        return torch.device(f"cuda:{self.local_rank}" if self.backend == "nccl" else
                            "cuda" if torch.cuda.is_available() and self.backend is None else "cpu")

    def share(self, items: list) -> list:
        """This rank's items of a list sorted by length (the sentences of a batch, a split's batches): every
        world_size-th, so that the shares are alike in length."""
        return items[self.rank::self.world_size]

    def block(self, count: int) -> range:
        """This rank's part of `count` items taken in order (an evaluation split): one contiguous block per rank."""
        return range(self.rank * count // self.world_size, (self.rank + 1) * count // self.world_size)

    def sum(self, values: list[float] | np.ndarray) -> list[float] | np.ndarray:
        """Element-wise sum of `values` over all ranks (each rank passes its own), as a list or an array."""
        if self.backend is None:
            return values
        tensor = torch.as_tensor(np.asarray(values, dtype=np.float64), device=self.device)
        dist.all_reduce(tensor)
        summed = tensor.cpu().numpy()
        return summed if isinstance(values, np.ndarray) else summed.tolist()

    def gather(self, items: list) -> list:
        """Every rank's `items` (picklable), one list in rank order: with `block`, the order of the whole."""
        if self.backend is None:
            return items
        parts = [None] * self.world_size
        dist.all_gather_object(parts, items)
        return [item for part in parts for item in part]

    def agree(self, value: bool) -> bool:
        """Rank 0's `value`, on every rank (a decision all ranks must take together, such as stopping)."""
        if self.backend is None:
            return value
        flag = torch.tensor([float(value) if self.main else 0.0], device=self.device)
        dist.all_reduce(flag)
        return bool(flag.item())


def start() -> Ranks:
    """Join the process group torchrun describes in the environment, or a single process without one."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size == 1:
        return Ranks()
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    ranks = Ranks(int(os.environ["RANK"]), world_size, int(os.environ.get("LOCAL_RANK", "0")), backend)
    if backend == "nccl":
        torch.cuda.set_device(ranks.local_rank)
    dist.init_process_group(backend)
    return ranks


def stop(ranks: Ranks) -> None:
    """Leave the process group (after the last collective call), once every rank has come here: a rank that tore
    its group down while another was still at work aborted it (gloo: "terminate called without an active
    exception", one run in three of tests/test_distributed.py with 3 ranks on 2 cores)."""
    if ranks.backend is not None:
        dist.barrier()
        dist.destroy_process_group()
