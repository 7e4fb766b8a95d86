"""A plain data-parallel PyTorch job on CPU/gloo, profiled with torch.profiler, no span names.

Records what most users have: ``torch.profiler`` traces of a DDP (several gradient buckets, so the
all-reduces overlap the backward) or FSDP2 (``fully_shard``: per-layer all-gather and
reduce-scatter) job, with nothing but PyTorch's own annotations. Straggler Lens reads them with
its kernel-level model. Injections (the truth goes to ``injections.json``):

- ``--slow-rank R --slow-ms MS``: rank R sleeps MS inside every forward (a slow machine);
- ``--gc-rank R --gc-steps 3,5``: rank R runs a real ``gc.collect()`` over a large garbage cycle
  graph inside the forward of those steps (a GC pause);
- ``--stall-rank R --stall-step N --stall-ms MS``: rank R's DataLoader sleeps MS when it fetches
  step N's batch (a dataloader stall).

``--seed S`` changes the model's initial weights and the batches (0, the default, is what every
recording made before the option used).

FSDP1 (``FullyShardedDataParallel``) refuses to run without an accelerator on torch 2.13
("FSDP needs a non-CPU accelerator device"), so ``--mode fsdp`` uses FSDP2's ``fully_shard``.

Run: ``python examples/ddp_train.py --world 4 --steps 8 --out traces/ddp --slow-rank 2 --slow-ms 20``
(loopback only: a FileStore rendezvous, ``GLOO_SOCKET_IFNAME=lo``).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import ProfilerActivity, profile, schedule
from torch.utils.data import DataLoader, Dataset

WIDTH = 256
LAYERS = 6
BATCH = 32
WAIT, WARMUP = 1, 1


class Batches(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Random batches; one fetch can stall (the injected dataloader stall)."""

    def __init__(self, n: int, rank: int, stall: tuple[int, float] | None, seed: int = 0) -> None:
        self.n, self.rank, self.stall, self.seed = n, rank, stall, seed

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.stall is not None and i == self.stall[0]:
            time.sleep(self.stall[1] / 1000)
        # seed 0 keeps the batches of the recordings made before --seed existed
        g = torch.Generator().manual_seed(1000 * self.rank + i + 1_000_003 * self.seed)
        return torch.randn(BATCH, WIDTH, generator=g), torch.randn(BATCH, WIDTH, generator=g)


class Net(torch.nn.Module):
    def __init__(self, slow_ms: float, gc_steps: set[int]) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS))
        self.slow_ms, self.gc_steps, self.step = slow_ms, gc_steps, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = torch.relu(layer(x))
            if i == LAYERS // 2:
                if self.slow_ms:
                    time.sleep(self.slow_ms / 1000)
                if self.step in self.gc_steps:
                    _gc_pause()
        return x


def _gc_pause() -> float:
    """A real collection over ~300k cyclic objects: a pause of tens to hundreds of ms."""
    junk: list[Any] = []
    for _ in range(150_000):
        a: list[Any] = []
        b = [a]
        a.append(b)
        junk.append(a)
    del junk
    t0 = time.perf_counter()
    gc.collect()
    return time.perf_counter() - t0


def worker(rank: int, args: argparse.Namespace) -> None:
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{args.store}", rank=rank, world_size=args.world,
                            timeout=datetime.timedelta(seconds=60))
    torch.manual_seed(args.seed)
    gc_steps = set(args.gc_steps) if rank == args.gc_rank else set()
    net = Net(args.slow_ms if rank == args.slow_rank else 0.0, gc_steps)
    model: torch.nn.Module
    if args.mode == "ddp":
        # small buckets: several all-reduces per step, overlapping the backward
        model = torch.nn.parallel.DistributedDataParallel(net, bucket_cap_mb=0.3)
    else:
        from torch.distributed.fsdp import fully_shard

        for layer in net.layers:
            fully_shard(layer)
        model = fully_shard(net)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    stall = (args.stall_step, args.stall_ms) if rank == args.stall_rank else None
    loader = DataLoader(Batches(args.steps, rank, stall, args.seed), batch_size=None, shuffle=False)
    out = Path(args.out)
    log: list[dict[str, Any]] = []
    with profile(activities=[ProfilerActivity.CPU],
                 schedule=schedule(wait=WAIT, warmup=WARMUP, active=args.steps - WAIT - WARMUP),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(out / f"rank{rank}.pt.trace.json.gz"))
                 ) as prof:
        for step, (x, y) in enumerate(loader):
            net.step = step
            t0 = time.time_ns()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            log.append({"step": step, "rank": rank, "start_ns": t0, "end_ns": time.time_ns()})
            prof.step()
    (out / f"steps_rank{rank}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in log))
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--mode", choices=("ddp", "fsdp"), default="ddp")
    ap.add_argument("--out", required=True)
    ap.add_argument("--slow-rank", type=int, default=-1)
    ap.add_argument("--slow-ms", type=float, default=0.0)
    ap.add_argument("--gc-rank", type=int, default=-1)
    ap.add_argument("--gc-steps", type=lambda s: [int(x) for x in s.split(",") if x], default=[])
    ap.add_argument("--stall-rank", type=int, default=-1)
    ap.add_argument("--stall-step", type=int, default=-1)
    ap.add_argument("--stall-ms", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0, help="model init and batches (0: as before the option)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    args.store = str(out.resolve() / ".store")
    Path(args.store).unlink(missing_ok=True)
    mp.spawn(worker, args=(args,), nprocs=args.world)
    Path(args.store).unlink(missing_ok=True)
    truth = {k: v for k, v in vars(args).items() if k != "store"}
    truth["profiled_steps"] = list(range(WAIT + WARMUP, args.steps))
    truth["torch"] = torch.__version__
    (out / "injections.json").write_text(json.dumps(truth, indent=1) + "\n")


if __name__ == "__main__":
    main()
