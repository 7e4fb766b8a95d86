"""Synthetic kernel-level Kineto traces of plain DDP / FSDP jobs, with known truth.

No GPU is at hand to record on, so this writer runs a small execution model of a data-parallel
job and writes what ``torch.profiler`` would: per rank a Chrome-trace JSON with ``ProfilerStep#N``,
a dataloader op, forward ``cpu_op``s on the main thread and ``autograd::engine`` ops on the
autograd thread, ``cudaLaunchKernel`` runtime events joined to GPU kernels by ``correlation``,
``cudaStreamWaitEvent`` where a stream waits for another, NCCL kernels on a comm stream (old
``ncclKernel_*`` or new ``ncclDevKernel_*`` names; in the new era with ``Collective name`` /
``Process Group Name`` args, launched from a ``record_param_comms`` op carrying c10d's ``Seq``),
``Optimizer.step#SGD.step`` and a closing ``cudaDeviceSynchronize``. With ``second_group`` a
second process group on its own stream, whose collectives odd ranks launch in another order.

Execution model (the truth the reader must recover), vectorised over ranks:

- the CPU launches each kernel after ``cpu_us`` of host work; a kernel starts when it is launched
  (+ ``LATENCY_US``), its stream is free and any stream wait is satisfied;
- DDP: the backward launches one all-reduce per bucket (every ``bucket_layers`` layers) on the
  comm stream after the bucket's kernels; the optimizer waits for all of them;
- FSDP: every layer's forward waits for its all-gather (prefetched one layer ahead) and every
  layer's backward launches a reduce-scatter;
- a collective starts on each rank when launched and its inputs are ready, and ends
  ``transfer`` after the last rank's start;
- a step begins on every rank when the slowest rank finished the previous one (the closing
  synchronisation plus the all-reduce tie them together).

Injected causes: ``slow-rank`` (one rank's kernels ``slow`` times longer, every step),
``gc-pause`` (a CPU pause of ``pause_ms`` inside one forward of a random rank on two steps, with a
``Python GC`` event), ``dataloader-stall`` (one rank waits ``pause_ms`` in the dataloader on one
step). ``labels.json`` holds the truth.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

LATENCY_US = 4.0
SCENARIOS = ("none", "slow-rank", "gc-pause", "dataloader-stall")
TRUE_CAUSE = {"slow-rank": "faulty-machine", "gc-pause": "gc-pause", "dataloader-stall": "dataloader-stall",
              "none": "none"}


@dataclass
class KernelJobSpec:
    """What to generate. Times in µs unless named otherwise."""

    ranks: int = 4
    steps: int = 4
    mode: str = "ddp"  # ddp | fsdp
    era: str = "new"  # old: ncclKernel_* names, no collective args; new: ncclDevKernel_* with args
    layers: int = 6
    kernels_per_layer: int = 3
    fwd_us: float = 300.0  # one forward kernel
    bwd_factor: float = 2.0
    cpu_us: float = 25.0  # host work per launch
    bucket_layers: int = 2
    transfer_us: float = 400.0
    opt_us: float = 150.0
    jitter: float = 0.02
    scenario: str = "none"
    victim: int = 1
    slow: float = 1.6
    pause_ms: float = 30.0
    seed: int = 0
    # a second process group on its own comm stream (HSDP's replicate group, say): after every
    # bucket all-reduce (DDP) or reduce-scatter (FSDP) a small all-reduce on group "1", which the
    # odd ranks launch first, so per-rank position does not pair the same collectives
    second_group: bool = False


class _Clock:
    """Per-rank CPU time and when the compute and comm streams are free (µs)."""

    def __init__(self, n: int) -> None:
        self.cpu = np.zeros(n)
        self.comp = np.zeros(n)
        self.comm = np.zeros(n)
        self.comm2 = np.zeros(n)


class _Rank:
    def __init__(self, rank: int, pid: int) -> None:
        self.rank, self.pid = rank, pid
        self.events: list[dict[str, Any]] = []
        self.corr = 1000


def _x(name: str, cat: str, pid: int, tid: int, ts: float, dur: float, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": round(ts, 3),
            "dur": round(max(dur, 0.0), 3), "args": args}


def _nccl_name(kind: str, era: str) -> str:
    k = {"allreduce": "AllReduce", "_allgather_base": "AllGather",
         "_reduce_scatter_base": "ReduceScatter"}[kind]
    if era == "old":
        suffix = "_RING_LL_Sum_float" if k != "AllGather" else "_RING_LL_Sum_int8_t"
        return f"ncclKernel_{k}{suffix}(ncclDevComm*, unsigned long, ncclWork*)"
    suffix = "_Sum_bf16_RING_LL" if k != "AllGather" else "_RING_LL"
    return f"ncclDevKernel_{k}{suffix}(ncclDevKernelArgsStorage<4096ul>)"


def generate(spec: KernelJobSpec, out: Path) -> dict[str, Any]:
    """Write one trace per rank into ``out`` plus ``labels.json``; return the labels."""
    rng = np.random.default_rng(spec.seed)
    n = spec.ranks
    MAIN, AUTOGRAD, COMPUTE, COMM, COMM2 = 100, 101, 7, 20, 21
    pg_stream = {"0": COMM, "1": COMM2}
    seq = {"0": 0, "1": 0}  # c10d's per-group sequence numbers (the same on every rank)
    swap = np.arange(n) % 2 == 1
    ranks = [_Rank(r, 1000 + r) for r in range(n)]
    slow = np.ones(n)
    if spec.scenario == "slow-rank":
        slow[spec.victim] = spec.slow
    gc_hits: set[tuple[int, int, int]] = set()  # (rank, step, layer)
    stall: set[tuple[int, int]] = set()
    if spec.scenario == "gc-pause":
        for s in rng.choice(spec.steps, size=min(2, spec.steps), replace=False):
            gc_hits.add((spec.victim, int(s), int(rng.integers(0, spec.layers))))
    if spec.scenario == "dataloader-stall":
        stall.add((spec.victim, int(rng.integers(0, spec.steps))))
    t_step = np.zeros(n) + 1000.0
    clk = _Clock(n)
    step_times: list[float] = []

    def jit(size: int = n) -> np.ndarray:
        return 1.0 + spec.jitter * rng.standard_normal(size)

    for step in range(spec.steps):
        clk.cpu = t_step.copy()
        clk.comp = t_step.copy()
        clk.comm = t_step.copy()
        clk.comm2 = t_step.copy()
        step_start = t_step.copy()
        sid = step + 2
        # dataloader
        load = 200.0 * jit()
        for r in range(n):
            if (r, step) in stall:
                load[r] += spec.pause_ms * 1000
            ranks[r].events.append(_x("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
                                      "user_annotation", ranks[r].pid, MAIN, clk.cpu[r] + 5, load[r]))
        clk.cpu += 5 + load + 10

        def launch(tid: int, name: str, dur: np.ndarray, stream: int, wait: np.ndarray | None = None,
                   op: str = "aten::mm", op_tid: int = MAIN) -> tuple[np.ndarray, np.ndarray]:
            """Host work, the launch call and the kernel on every rank; returns (start, end)."""
            host = spec.cpu_us * jit()
            clk.cpu = clk.cpu + host
            free = clk.comp if stream == COMPUTE else clk.comm
            start = np.maximum(clk.cpu + LATENCY_US, free)
            if wait is not None:
                start = np.maximum(start, wait)
            end = start + dur
            for r in range(n):
                R = ranks[r]
                R.corr += 1
                ext = R.corr + 500000
                R.events.append(_x(op, "cpu_op", R.pid, op_tid, clk.cpu[r] - 2, 10.0, **{"External id": ext}))
                R.events.append(_x("cudaLaunchKernel", "cuda_runtime", R.pid, tid, clk.cpu[r], 6.0,
                                   correlation=R.corr, **{"External id": ext}))
                R.events.append(_x(name, "kernel", R.pid, stream, start[r], dur[r], correlation=R.corr,
                                   stream=stream, device=0, **{"External id": ext}))
            clk.cpu = clk.cpu + 8
            if stream == COMPUTE:
                clk.comp[:] = end
            else:
                clk.comm[:] = end
            return start, end

        def wait_event(tid: int) -> None:
            for r in range(n):
                R = ranks[r]
                R.corr += 1
                R.events.append(_x("cudaStreamWaitEvent", "cuda_runtime", R.pid, tid, clk.cpu[r], 1.0,
                                   correlation=R.corr))
            clk.cpu = clk.cpu + 2

        def collective(tid: int, kind: str, ready: np.ndarray, nbytes: int, pg: str = "0",
                       at: np.ndarray | None = None) -> np.ndarray:
            """One collective on every rank, launched at ``at`` (default: now, after the comm
            stream waited for the compute stream); returns its end."""
            advance = at is None
            if at is None:
                wait_event(tid)  # the comm stream waits for the compute stream
                at = clk.cpu + spec.cpu_us
            stream = pg_stream[pg]
            free = clk.comm if stream == COMM else clk.comm2
            start = np.maximum(np.maximum(at + LATENCY_US, free), ready)
            scale = 1.0 if pg == "0" else 0.25
            end_all = start.max() + scale * spec.transfer_us * (1 + 0.02 * rng.standard_normal())
            dur = end_all - start
            args_new: dict[str, Any] = {}
            rpc_args: dict[str, Any] = {}
            if spec.era == "new":
                # as torch records it: the collective's description on the kernel, c10d's sequence
                # number on the record_param_comms op the kernel was launched from
                args_new = {"Collective name": kind, "Process Group Name": pg, "In msg nelems": nbytes // 4,
                            "Out msg nelems": nbytes // 4, "dtype": "Float", "Group size": n}
                rpc_args = {**args_new, "Seq": seq[pg]}
            seq[pg] += 1
            name = _nccl_name(kind, spec.era)
            for r in range(n):
                R = ranks[r]
                R.corr += 1
                ext = R.corr + 500000
                if rpc_args:
                    R.events.append(_x("record_param_comms", "cpu_op", R.pid, tid, at[r] - 3, 12.0,
                                       **{**rpc_args, "External id": ext}))
                R.events.append(_x("cudaLaunchKernel", "cuda_runtime", R.pid, tid,
                                   at[r], 6.0, correlation=R.corr, **{"External id": ext}))
                R.events.append(_x(name, "kernel", R.pid, stream, start[r], dur[r], correlation=R.corr,
                                   stream=stream, device=0, **{**args_new, "External id": ext}))
            if advance:
                clk.cpu[:] = clk.cpu + spec.cpu_us + 8
            if stream == COMM:
                clk.comm[:] = end_all
            else:
                clk.comm2[:] = end_all
            return np.full(n, end_all)

        def with_second_group(tid: int, kind: str, ready: np.ndarray, nbytes: int) -> list[np.ndarray]:
            """The collective on group "0" and, with ``second_group``, a small all-reduce on group
            "1" launched just before it on odd ranks and just after it on even ones."""
            if not spec.second_group:
                return [collective(tid, kind, ready, nbytes)]
            wait_event(tid)
            a1 = clk.cpu + spec.cpu_us
            a2 = a1 + spec.cpu_us + 8
            e0 = collective(tid, kind, ready, nbytes, "0", np.where(swap, a2, a1))
            e1 = collective(tid, "allreduce", ready, 1 << 16, "1", np.where(swap, a1, a2))
            clk.cpu[:] = a2 + 8
            return [e0, e1]

        # forward
        fwd_start = clk.cpu.copy()
        ag_end = None
        if spec.mode == "fsdp":
            ag_end = collective(MAIN, "_allgather_base", clk.comp, 1 << 20)
        for layer in range(spec.layers):
            nxt = None
            if spec.mode == "fsdp" and layer + 1 < spec.layers:
                nxt = collective(MAIN, "_allgather_base", clk.comp, 1 << 20)  # prefetch next unit
            if spec.mode == "fsdp":
                wait_event(MAIN)
            for r in range(n):
                if (r, step, layer) in gc_hits:
                    p = spec.pause_ms * 1000 * (0.8 + 0.4 * rng.random())
                    ranks[r].events.append(_x("Python GC", "python_function", ranks[r].pid, MAIN,
                                              clk.cpu[r], p))
                    clk.cpu[r] += p
            for k in range(spec.kernels_per_layer):
                d = spec.fwd_us * (1 + 0.3 * k) * slow * jit()
                launch(MAIN, f"void gemm_fwd_{k}<float>(Params)", d, COMPUTE,
                       wait=ag_end if (spec.mode == "fsdp" and k == 0) else None, op="aten::linear")
            ag_end = nxt
        for r in range(n):
            R = ranks[r]
            R.events.append(_x("DistributedDataParallel.forward" if spec.mode == "ddp"
                               else "FullyShardedDataParallel.forward", "user_annotation", R.pid, MAIN,
                               fwd_start[r], clk.cpu[r] - fwd_start[r]))
        # backward on the autograd thread
        colls: list[np.ndarray] = []
        for layer in reversed(range(spec.layers)):
            b0 = clk.cpu.copy()
            for k in range(spec.kernels_per_layer):
                d = spec.fwd_us * spec.bwd_factor * (1 + 0.3 * k) * slow * jit()
                launch(AUTOGRAD, f"void gemm_bwd_{k}<float>(Params)", d, COMPUTE,
                       op="autograd::engine::evaluate_function: AddmmBackward0", op_tid=AUTOGRAD)
            for r in range(n):
                R = ranks[r]
                R.events.append(_x("autograd::engine::evaluate_function: AddmmBackward0", "cpu_op", R.pid,
                                   AUTOGRAD, b0[r], clk.cpu[r] - b0[r]))
            if spec.mode == "ddp" and (spec.layers - layer) % spec.bucket_layers == 0:
                colls.extend(with_second_group(AUTOGRAD, "allreduce", clk.comp, 4 << 20))
            if spec.mode == "fsdp":
                colls.extend(with_second_group(AUTOGRAD, "_reduce_scatter_base", clk.comp, 1 << 20))
        # optimizer waits for every collective
        o0 = clk.cpu.copy()
        wait_event(MAIN)
        done = np.max(np.stack(colls), axis=0) if colls else clk.comp
        for k in range(2):
            launch(MAIN, f"void sgd_kernel_{k}<float>(float*)", spec.opt_us * slow * jit(), COMPUTE,
                   wait=done if k == 0 else None, op="aten::add_")
        for r in range(n):
            R = ranks[r]
            R.events.append(_x("Optimizer.step#SGD.step", "user_annotation", R.pid, MAIN, o0[r],
                               clk.cpu[r] - o0[r]))
        # closing synchronisation (loss.item())
        sync_end = np.maximum(clk.cpu, clk.comp) + 3
        for r in range(n):
            R = ranks[r]
            R.corr += 1
            R.events.append(_x("cudaDeviceSynchronize", "cuda_runtime", R.pid, MAIN, clk.cpu[r],
                               sync_end[r] - clk.cpu[r], correlation=R.corr))
        end = sync_end + 5
        for r in range(n):
            R = ranks[r]
            R.events.append(_x(f"ProfilerStep#{sid}", "user_annotation", R.pid, MAIN, step_start[r],
                               end[r] - step_start[r]))
        step_times.append(float(end.max() - step_start.min()) / 1e6)
        t_step = np.full(n, end.max() + 20.0)

    out.mkdir(parents=True, exist_ok=True)
    for R in ranks:
        meta = [{"ph": "M", "name": "thread_name", "pid": R.pid, "tid": t, "args": {"name": nm}}
                for t, nm in ((MAIN, "thread 100 (python)"), (AUTOGRAD, "thread 101 (pt_autograd_0)"))]
        d = {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": R.rank, "world_size": n},
             "baseTimeNanoseconds": 1_700_000_000_000_000_000, "displayTimeUnit": "ms",
             "traceEvents": meta + sorted(R.events, key=lambda e: e["ts"])}
        (out / f"rank{R.rank}.pt.trace.json.gz").write_bytes(gzip.compress(json.dumps(d).encode(), 5))
    labels = {"spec": asdict(spec), "cause": TRUE_CAUSE[spec.scenario],
              "ranks": [spec.victim] if spec.scenario != "none" else [],
              "gc_hits": sorted(gc_hits), "stall": sorted(stall), "step_times": step_times}
    (out / "labels.json").write_text(json.dumps(labels, indent=1))
    return labels
