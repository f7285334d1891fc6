"""Data parallelism under `accelerate launch` (or torchrun): the same loop on every rank.

Each rank rolls out its own share of prompts (its own problem stream) and verifies them in its
own sandbox; gradients are all-reduced by DDP. Only rank 0 writes the run directory. With one
process (the usual case) nothing is wrapped and nothing is communicated.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import torch


class Parallel:
    def __init__(self, device: torch.device) -> None:
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.accelerator: Any = None
        self.rank = 0
        self.device = device
        if self.world > 1:
            from accelerate import Accelerator

            self.accelerator = Accelerator(cpu=device.type == "cpu")
            self.rank = self.accelerator.process_index
            self.device = self.accelerator.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def wrap(self, model: Any) -> Any:
        """The module to run the training forward through (DDP when distributed)."""
        return self.accelerator.prepare_model(model) if self.accelerator else model

    @contextlib.contextmanager
    def no_sync(self, wrapped: Any, skip: bool) -> Iterator[None]:
        """Skip the gradient all-reduce for all but the last micro-batch of a step."""
        if self.accelerator is not None and skip:
            with wrapped.no_sync():
                yield
        else:
            yield

    def mean(self, values: dict[str, float]) -> dict[str, float]:
        if self.accelerator is None:
            return values
        keys = sorted(values)
        t = torch.tensor([float(values[k]) for k in keys], device=self.device, dtype=torch.float64)
        torch.distributed.all_reduce(t)
        return {k: float(v) / self.world for k, v in zip(keys, t.tolist())}

    def total(self, value: float) -> float:
        if self.accelerator is None:
            return value
        t = torch.tensor([float(value)], device=self.device, dtype=torch.float64)
        torch.distributed.all_reduce(t)
        return float(t)

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's `obj`, in rank order (on every rank)."""
        if self.accelerator is None:
            return [obj]
        out: list[Any] = [None] * self.world
        torch.distributed.all_gather_object(out, obj)
        return out

    def barrier(self) -> None:
        if self.accelerator is not None:
            torch.distributed.barrier()

    def close(self) -> None:
        """End the process group, once the caller has dropped its references to the wrapped model.

        DDP's reducer holds the process group. Freed after the group is destroyed, it would drop
        the group's last reference and run gloo's destructor holding the GIL, which joins gloo's
        worker threads while one of them may be waiting for the GIL to free a finished
        collective's tensors: a hang at exit, about one run in fifteen here (pytorch#56297). So
        the wrapper goes first, with the group still registered, and the group is destroyed from
        Python, which releases the GIL for it."""
        if self.accelerator is not None and torch.distributed.is_initialized():
            torch.distributed.barrier()
            # accelerate's own references to the wrapped model; it then runs the collector, which
            # frees the wrapper and its reducer now (a module and its hooks form cycles).
            self.accelerator.free_memory()
            torch.distributed.destroy_process_group()
