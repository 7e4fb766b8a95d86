"""A small but real DP x PP training job on CPU/gloo that records Kineto traces with NDTimeline names.

Several processes on 127.0.0.1 (``torch.multiprocessing.spawn``, FileStore rendezvous, no TCP
listener for the store) train a tiny MLP stack split into pipeline stages:

- rank order as Megatron's default (pipeline rank varies slowest): ``rank = stage * DP + dp_rank``;
- Megatron-style 1F1B schedule; the steady state uses the combined ops
  ``forward-send-backward-recv`` / ``backward-send-forward-recv`` built with
  ``dist.batch_isend_irecv`` (blocking send then recv deadlocks on gloo);
- DP gradient reduction (one flattened bucket, ``all_reduce`` over the stage's DP group, span
  ``grads-reduce``) and an SGD ``optimizer`` step;
- every span is a ``torch.profiler.record_function`` with the NDTimeline / Megatron timer name, and
  ``torch.profiler`` writes one ``traces/kineto_rank{r}.json.gz`` per rank.

Straggler injections (all real, nothing is faked in the trace):

- ``--slow-rank R --slow-ms X``: rank R sleeps X ms inside every ``forward-compute``; unless
  ``--slow-forward-only`` is given it behaves like a slow machine, where every compute type is
  slower: it also sleeps 2X ms in every ``backward-compute`` and X/2 ms in its ``optimizer`` step;
- ``--last-stage-layers N``: the last stage carries N layers instead of ``--layers``;
- ``--gc-pause``: on steps where ``step % 3 == 2`` one victim (rank, microbatch) drawn from
  ``--seed`` runs a full ``gc.collect()`` over a large heap of tracked objects inside its forward;
- ``--stall-rank R --stall-ms X``: rank R's data loading (``batch-generator``) sleeps X ms at the
  start of every step;
- ``--slow-from-step K``: the slow rank is slow only from step K on (a machine that starts
  throttling inside the profiled window);
- ``--send-delay-rank R --send-delay-ms X``: every ``forward-send`` (and the send half of the
  combined steady-state ops) of rank R sleeps X ms inside the span, before the transfer: a slow
  P2P link out of R;
- ``--var-seq``: each microbatch's sequence length is drawn (seeded, per step, DP rank and
  microbatch) between ``--seq / 4`` and ``--seq * 2``, so microbatches cost differently;
- ``--layers-per-stage 1,3,1``: blocks per stage (overrides ``--layers`` and
  ``--last-stage-layers``); written to ``injections.json`` as the partition.

``injections.json`` in the output directory records what was injected (including GC victims).
A short gloo timeout (``--timeout``) makes a broken schedule fail instead of hanging.

Run: ``python examples/pp_dp_train.py --dp 2 --pp 2 --steps 6 --out /tmp/run --slow-rank 1``.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function, schedule


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dp", type=int, default=2, help="data-parallel size")
    p.add_argument("--pp", type=int, default=2, help="pipeline stages")
    p.add_argument("--steps", type=int, default=6, help="training steps (first two are not profiled)")
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument("--layers", type=int, default=2, help="MLP blocks per stage")
    p.add_argument("--last-stage-layers", type=int, default=None, help="blocks on the last stage")
    p.add_argument("--hidden", type=int, default=192)
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--mbs", type=int, default=8, help="microbatch size")
    p.add_argument("--slow-rank", type=int, default=None)
    p.add_argument("--slow-ms", type=float, default=30.0, help="extra ms per forward on the slow rank")
    p.add_argument("--slow-forward-only", action="store_true",
                   help="slow rank sleeps in its forward only (default: backward 2x, optimizer 0.5x too)")
    p.add_argument("--gc-pause", action="store_true", help="real GC pauses on random ranks")
    p.add_argument("--gc-heap", type=int, default=1_500_000, help="tracked objects the GC must walk")
    p.add_argument("--stall-rank", type=int, default=None, help="rank whose data loading stalls")
    p.add_argument("--stall-ms", type=float, default=150.0)
    p.add_argument("--slow-from-step", type=int, default=0,
                   help="the slow rank is slow from this step on (default: every step)")
    p.add_argument("--send-delay-rank", type=int, default=None, help="rank whose P2P sends are slow")
    p.add_argument("--send-delay-ms", type=float, default=20.0, help="extra ms inside each such send")
    p.add_argument("--var-seq", action="store_true", help="variable sequence length per microbatch")
    p.add_argument("--layers-per-stage", type=str, default=None,
                   help="comma-separated blocks per stage, e.g. 1,3,1 (overrides --layers)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=20.0, help="gloo timeout in seconds")
    p.add_argument("--out", type=Path, required=True, help="directory for the traces")
    p.add_argument("--report-to", default=None, metavar="URL",
                   help="stream each rank's trace to a Straggler Lens server (token: $STRAGGLER_LENS_TOKEN)")
    p.add_argument("--job", default="pp-dp-train", help="job name for --report-to")
    a = p.parse_args(argv)
    if a.dp < 1 or a.pp < 1 or a.steps < 3 or a.microbatches < a.pp:
        p.error("need dp>=1, pp>=1, steps>=3 and microbatches>=pp")
    if a.layers_per_stage is not None:
        try:
            a.partition = [int(x) for x in a.layers_per_stage.split(",")]
        except ValueError:
            p.error(f"--layers-per-stage {a.layers_per_stage!r} is not a comma-separated list of ints")
        if len(a.partition) != a.pp or min(a.partition) < 1:
            p.error(f"--layers-per-stage needs {a.pp} positive entries, got {a.layers_per_stage!r}")
    else:
        a.partition = [a.layers] * a.pp
        if a.last_stage_layers:
            a.partition[-1] = a.last_stage_layers
    for name in ("slow_rank", "stall_rank", "send_delay_rank"):
        r = getattr(a, name)
        if r is not None and not 0 <= r < a.dp * a.pp:
            p.error(f"--{name.replace('_', '-')} {r} is not a rank of a {a.dp * a.pp}-rank job")
    return a


def gc_victims(a: argparse.Namespace) -> dict[int, tuple[int, int]]:
    """Step -> (rank, microbatch) of the injected GC pause; every rank draws the same victims."""
    rng = random.Random(a.seed)
    world = a.dp * a.pp
    return {
        s: (rng.randrange(world), rng.randrange(a.microbatches))
        for s in range(a.steps)
        if a.gc_pause and s % 3 == 2
    }


class Block(nn.Module):
    """LayerNorm -> Linear(4x) -> GELU -> Linear, with a residual: few ops, real matmul work."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.up = nn.Linear(d, 4 * d)
        self.down = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


def worker(rank: int, a: argparse.Namespace, store_path: str) -> None:
    torch.set_num_threads(1)  # several ranks share few cores
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    world = a.dp * a.pp
    timeout = datetime.timedelta(seconds=a.timeout)
    dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank,
                            world_size=world, timeout=timeout)
    stage, dp_rank = divmod(rank, a.dp)
    last = stage == a.pp - 1
    first = stage == 0
    # Every rank creates every group (a collective call); named so pg_config carries the layout.
    dp_group: Any = None
    for s in range(a.pp):
        g = dist.new_group([s * a.dp + d for d in range(a.dp)], timeout=timeout, group_desc=f"dp_stage{s}")
        if s == stage:
            dp_group = g
    for d in range(a.dp):
        dist.new_group([s * a.dp + d for s in range(a.pp)], timeout=timeout, group_desc=f"pp_dp{d}")
    prev_rank = rank - a.dp if not first else None
    next_rank = rank + a.dp if not last else None

    torch.manual_seed(1000 + stage)  # DP replicas of a stage start identical
    n_layers = a.partition[stage]
    model = nn.Sequential(*[Block(a.hidden) for _ in range(n_layers)])
    head = nn.Linear(a.hidden, a.hidden) if last else None
    params = list(model.parameters()) + (list(head.parameters()) if head is not None else [])
    opt = torch.optim.SGD(params, lr=1e-3, momentum=0.9)
    shape = (a.mbs, a.seq, a.hidden)
    victims = gc_victims(a)
    slow_all_ever = a.slow_rank == rank and not a.slow_forward_only
    # The heap a full collection has to walk: many small tracked containers, kept alive.
    heap = [[i] for i in range(a.gc_heap)] if any(r == rank for r, _ in victims.values()) else []

    def seq_len(step: int, mb: int, dp_r: int) -> int:
        """The microbatch's sequence length: fixed, or drawn per (step, DP rank, microbatch); every
        stage of a replica draws the same, so activations keep their shape along the pipeline."""
        if not a.var_seq:
            return a.seq
        r = random.Random(a.seed * 7919 + step * 1000 + mb * 10 + dp_r)
        return r.randint(max(1, a.seq // 4), 2 * a.seq)

    def mb_shape(step: int, mb: int) -> tuple[int, int, int]:
        return (a.mbs, seq_len(step, mb, dp_rank), a.hidden)

    def data(step: int, mb: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(step * 1000 + mb * 10 + dp_rank)
        sh = mb_shape(step, mb)
        return torch.randn(sh, generator=g), torch.randn(sh, generator=g)

    def send_recv(name: str, send: torch.Tensor | None, send_to: int | None,
                  recv_from: int | None, recv_shape: tuple[int, int, int] = shape) -> torch.Tensor | None:
        """One P2P op (or a batched pair) under its NDTimeline name; no span when nothing moves."""
        if (send is None or send_to is None) and recv_from is None:
            return None
        buf = torch.empty(recv_shape) if recv_from is not None else None
        with record_function(name):
            if a.send_delay_rank == rank and name.startswith("forward-send") and send is not None:
                time.sleep(a.send_delay_ms / 1e3)  # a slow link: the transfer itself takes longer
            ops = []
            if send is not None and send_to is not None:
                ops.append(dist.P2POp(dist.isend, send, send_to))
            if buf is not None and recv_from is not None:
                ops.append(dist.P2POp(dist.irecv, buf, recv_from))
            for req in dist.batch_isend_irecv(ops):
                req.wait()
        return buf

    def train_step(step: int) -> float:
        inputs: list[torch.Tensor] = []
        outputs: list[torch.Tensor] = []
        loss_sum = 0.0
        fwd_i = 0
        bwd_i = 0
        with record_function("batch-generator"):
            if a.stall_rank == rank:
                time.sleep(a.stall_ms / 1e3)
            batches = [data(step, m) for m in range(a.microbatches)]

        def forward(inp: torch.Tensor | None) -> torch.Tensor:
            nonlocal fwd_i, loss_sum
            mb = fwd_i
            fwd_i += 1
            with record_function("forward-compute"):
                if inp is None:
                    inp = batches[mb][0]
                inp = inp.detach().requires_grad_(not first)
                out = model(inp)
                if head is not None:
                    out = nn.functional.mse_loss(head(out), batches[mb][1])
                    loss_sum += float(out.detach())
                if a.slow_rank == rank and step >= a.slow_from_step:
                    time.sleep(a.slow_ms / 1e3)
                if victims.get(step) == (rank, mb):
                    gc.collect()  # a real full collection over `heap`
            inputs.append(inp)
            outputs.append(out)
            return out

        def backward(grad: torch.Tensor | None) -> torch.Tensor | None:
            nonlocal bwd_i
            i = bwd_i
            bwd_i += 1
            with record_function("backward-compute"):
                out = outputs[i]
                if slow_all_ever and step >= a.slow_from_step:
                    time.sleep(2 * a.slow_ms / 1e3)
                if last:
                    out.backward()
                else:
                    out.backward(grad)
                g = inputs[i].grad if not first else None
            inputs[i] = outputs[i] = torch.empty(0)  # free activations as 1F1B does
            return g

        warmup = min(a.pp - stage - 1, a.microbatches)
        steady = a.microbatches - warmup
        # Receive shapes follow the microbatch being received (forwards in order, backwards too).
        with record_function("forward-backward"):
            for _ in range(warmup):
                inp = send_recv("forward-recv", None, None, prev_rank, mb_shape(step, fwd_i))
                out = forward(inp)
                send_recv("forward-send", out.detach(), next_rank, None)
            inp = (send_recv("forward-recv", None, None, prev_rank, mb_shape(step, fwd_i))
                   if steady > 0 else None)
            for i in range(steady):
                out = forward(inp)
                grad = send_recv("forward-send-backward-recv", None if last else out.detach(),
                                 next_rank, next_rank, mb_shape(step, bwd_i))
                g = backward(grad)
                if i == steady - 1:
                    inp = None
                    send_recv("backward-send", g, prev_rank, None)
                else:
                    inp = send_recv("backward-send-forward-recv", g, prev_rank, prev_rank,
                                    mb_shape(step, fwd_i))
            for _ in range(warmup):
                grad = send_recv("backward-recv", None, None, next_rank, mb_shape(step, bwd_i))
                g = backward(grad)
                send_recv("backward-send", g, prev_rank, None)
        with record_function("grads-reduce"):
            flat = torch.cat([p.grad.reshape(-1) for p in params if p.grad is not None])
            dist.all_reduce(flat, group=dp_group)
            flat /= a.dp
            off = 0
            for p in params:
                if p.grad is not None:
                    n = p.grad.numel()
                    p.grad.copy_(flat[off:off + n].view_as(p.grad))
                    off += n
        with record_function("optimizer"):
            if slow_all_ever and step >= a.slow_from_step:
                time.sleep(a.slow_ms / 2e3)
            opt.step()
            opt.zero_grad(set_to_none=False)
        return loss_sum

    trace_path = a.out / "traces" / f"kineto_rank{rank}.json.gz"
    reporter = None
    if a.report_to:  # the ingestion client: the upload runs on its own thread, never raises
        from server.ingest_client import LensReporter

        reporter = LensReporter(a.report_to, a.job, rank=rank, world_size=world, run=a.run_id,
                                out_dir=a.out / "lens")

    def on_trace_ready(p: Any) -> None:
        p.export_chrome_trace(str(trace_path))
        if reporter is not None:
            reporter.submit(trace_path, reporter.window_id(p.step_num))

    prof = profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=a.steps - 2),
        on_trace_ready=on_trace_ready,
    )
    with prof:
        for step in range(a.steps):
            with record_function("train-step"):
                loss = train_step(step)
            prof.step()
            if last and dp_rank == 0:
                print(f"step {step} loss {loss:.4f}", flush=True)
    del heap
    if reporter is not None:
        reporter.close(60)
    dist.barrier()
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    (a.out / "traces").mkdir(parents=True, exist_ok=True)
    world = a.dp * a.pp
    injections = {
        "dp": a.dp, "pp": a.pp, "steps": a.steps, "microbatches": a.microbatches,
        "layers": a.layers, "last_stage_layers": a.last_stage_layers,
        "layers_per_stage": a.partition,
        "slow_from_step": a.slow_from_step if a.slow_rank is not None else None,
        "send_delay_rank": a.send_delay_rank,
        "send_delay_ms": a.send_delay_ms if a.send_delay_rank is not None else None,
        "var_seq": a.var_seq,
        "slow_rank": a.slow_rank, "slow_ms": a.slow_ms if a.slow_rank is not None else None,
        "slow_forward_only": a.slow_forward_only if a.slow_rank is not None else None,
        "stall_rank": a.stall_rank, "stall_ms": a.stall_ms if a.stall_rank is not None else None,
        "gc_victims": {str(s): {"rank": r, "microbatch": m} for s, (r, m) in gc_victims(a).items()},
        "profiled_steps": list(range(2, a.steps)), "torch": torch.__version__,
        "argv": sys.argv[1:] if argv is None else list(argv),
    }
    (a.out / "injections.json").write_text(json.dumps(injections, indent=1) + "\n")
    a.run_id = time.strftime("%Y%m%dT%H%M%S") + f"-{os.getpid()}"  # one window id on every rank
    with tempfile.TemporaryDirectory(prefix="sl-store-") as tmp:
        mp.spawn(worker, args=(a, os.path.join(tmp, "store")), nprocs=world, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
