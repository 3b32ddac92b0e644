"""Training on many processes, one machine or many: PyTorch DistributedDataParallel, started by torchrun.

    torchrun --nproc_per_node 2 -m model.train --src en --tgt de --out checkpoints/en-de

torchrun sets RANK, WORLD_SIZE, LOCAL_RANK (and MASTER_ADDR/PORT) in each process it starts; `start` joins
them into one process group: `gloo` on CPU, `nccl` on GPUs (one per process, by local rank). Without those
variables everything runs as one process and nothing here does anything. Every rank builds the same batches
(same seed) and takes its own share of each (`Ranks.share`), so the global batch, the learning-rate
schedule and the number of steps are those of one process with the whole batch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

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

    def share(self, indices: list[int]) -> list[int]:
        """This rank's sentences of a batch: every world_size-th (a batch is sorted by length, so the shares are
        alike in length)."""
        return indices[self.rank::self.world_size]

    def sum(self, values: list[float]) -> list[float]:
        """Element-wise sum of `values` over all ranks (each rank passes its own)."""
        if self.backend is None:
            return values
        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor)
        return tensor.tolist()

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
    """Leave the process group (after the last collective call)."""
    if ranks.backend is not None:
        dist.destroy_process_group()
