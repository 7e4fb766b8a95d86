"""``generate(spec) -> GeneratedJob``: build, perturb, execute and record one synthetic job.

Steps: (1) the partition and base costs of the cost model; (2) per-op noise and persistent
per-worker / per-link speed factors; (3) injected causes edit those arrays and emit their labels;
(4) the event loop (``executor``) runs every stage's program over all (step, DP rank) pairs;
(5) recorded rows become an ``OpTable`` with ``start_ts`` relative to each step's start (the
minimum over all workers, after per-host clock skew), ``seq_id`` by start order.

``expected_straggling`` is decided by the generator's own executor, not by the analyzer: the mean
step time with the injected causes (dataloader stalls left out: they are launch delays that the
method's slowdown ignores) over that of the same job with no cause, at or above 1.1.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from diagnosers.model import JobMeta, OpTable, Trace
from diagnosers.synth.cost import CostModel
from diagnosers.synth.executor import JobArrays, StageRecord, execute
from diagnosers.synth.schedule import StageProgram, build_programs
from diagnosers.synth.spec import (
    CauseLabel,
    Labels,
    Scenario,
    ScenarioSpec,
    Schedule,
    pattern_of,
)
from diagnosers.vocab import STRAGGLING_THRESHOLD, CauseId, Location

Arr = npt.NDArray[np.float64]


@dataclass
class GeneratedJob:
    """A generated trace with its ground truth.

    ``true_slowdown`` is the generator's own ratio of mean step times with and without the
    injected causes (dataloader stalls excluded); ``layers_per_stage`` the partition used.
    """

    trace: Trace
    labels: Labels
    spec: ScenarioSpec
    true_slowdown: float
    step_time: float  # mean recorded step time, seconds


def _partition(spec: ScenarioSpec, cost: CostModel) -> list[int]:
    if spec.layers_per_stage is not None:
        return list(spec.layers_per_stage)
    wanted = set(spec.scenarios)
    layers = cost.healthy_partition(spec.pp)
    n = cost.layers_per_middle_stage
    if Scenario.STAGE_IMBALANCE in wanted:
        layers[-1] = n  # the partition ignores the head: whole layers, as most jobs do
    if Scenario.STAGE_IMBALANCE_FIRST in wanted:
        layers[0] = n
    if Scenario.STAGE_IMBALANCE_LAYERS in wanted:
        # An uneven partition: the heavy stage holds ``magnitude`` times a middle stage's layers.
        h = spec.heavy_stage_of()
        layers[h] = max(layers[h] + 1, round(n * spec.magnitude_of(Scenario.STAGE_IMBALANCE_LAYERS)))
    return layers


def _base_arrays(
    spec: ScenarioSpec, cost: CostModel, programs: list[StageProgram], layers: list[int],
    rng: np.random.Generator,
) -> JobArrays:
    n_steps, dp, pp = spec.steps, spec.dp, spec.pp
    chunks = spec.vpp if spec.schedule is Schedule.INTERLEAVED else 1
    wanted = set(spec.scenarios)
    lf, n = cost.layer_fwd, cost.layers_per_middle_stage
    # Embedding / head costs (fwd, bwd) in seconds per microbatch.
    emb = (cost.embedding_layers * lf, cost.embedding_layers * lf * cost.bwd_ratio)
    head = (cost.head_layers * lf, cost.head_layers * lf * cost.bwd_ratio)
    if Scenario.STAGE_IMBALANCE in wanted:
        h = (spec.magnitude_of(Scenario.STAGE_IMBALANCE) - 1.0) * n * lf
        head = (h, h * cost.heavy_head_bwd_ratio)
    if Scenario.STAGE_IMBALANCE_FIRST in wanted:
        e = (spec.magnitude_of(Scenario.STAGE_IMBALANCE_FIRST) - 1.0) * n * lf
        emb = (e, e * cost.bwd_ratio)
    seq_factor = None
    if Scenario.SEQUENCE_LENGTH_IMBALANCE in wanted:
        seq_factor = _sequence_factors(spec, cost, rng)  # (S, D, M)

    compute: list[Arr] = []
    shape = (n_steps, dp)
    for s, prog in enumerate(programs):
        nc = len(prog.computes)
        fwd = np.array([c.forward for c in prog.computes], dtype=bool)
        mb = np.array([c.mb for c in prog.computes], dtype=np.int64)
        chunk = np.array([c.chunk for c in prog.computes], dtype=np.int64)
        chunk_layers = _chunk_layers(layers, s, chunks, n)
        layer_part = chunk_layers[chunk] * lf * np.where(fwd, 1.0, cost.bwd_ratio)
        extra = np.zeros(nc)
        if s == 0 and pp > 1:
            extra += np.where(chunk == 0, np.where(fwd, emb[0], emb[1]), 0.0)
        if s == pp - 1 and pp > 1:
            extra += np.where(chunk == chunks - 1, np.where(fwd, head[0], head[1]), 0.0)
        if pp == 1:
            extra += np.where(fwd, emb[0] + head[0], emb[1] + head[1])
        if seq_factor is not None:
            # (nc, S, D): the same microbatch costs the same on every stage of a DP replica.
            lp = layer_part[:, None, None] * np.moveaxis(seq_factor[:, :, mb], 2, 0)
        else:
            lp = np.broadcast_to(layer_part[:, None, None], (nc, *shape))
        worker = np.exp(rng.normal(0.0, cost.worker_sigma, dp))[None, None, :]
        noise = np.exp(rng.normal(0.0, cost.op_sigma, (nc, *shape)))
        tail = rng.random((nc, *shape)) < cost.tail_prob
        if tail.any():
            noise[tail] *= 1.0 + cost.tail_scale * rng.pareto(cost.tail_alpha, int(tail.sum()))
        compute.append((lp + extra[:, None, None]) * worker * noise)

    local = []
    for s in range(pp):
        opt = layers[s] * cost.optimizer_per_layer * np.exp(rng.normal(0.0, cost.op_sigma, shape))
        ln = cost.layernorm_time * np.exp(rng.normal(0.0, 0.1, shape))
        local.append({"gc": np.zeros(shape), "layernorm-grads-all-reduce": ln, "optimizer": opt})
    group = dp * spec.cp
    dp_time = {
        "params-all-gather": [cost.dp_time(layers[s], group, grads=False) for s in range(pp)],
        "grads-reduce-scatter": [cost.dp_time(layers[s], group, grads=True) for s in range(pp)],
    }
    links = {}
    for s in range(pp - 1):
        links[(s, s + 1)] = np.exp(rng.normal(0.0, cost.link_sigma, dp))
    if pp > 2 and spec.schedule is Schedule.INTERLEAVED:
        links[(0, pp - 1)] = np.exp(rng.normal(0.0, cost.link_sigma, dp))
    if cost.step_sigma > 0:
        # Drawn last, so jobs without step noise draw exactly what they drew before it existed.
        for s in range(pp):
            f = np.exp(rng.normal(0.0, cost.step_sigma, shape))
            compute[s] = compute[s] * f[None, :, :]
            local[s]["optimizer"] = local[s]["optimizer"] * f
    if cost.mild_worker is not None:
        d, s = cost.mild_worker
        if not (0 <= d < dp and 0 <= s < pp):
            raise ValueError(f"cost.mild_worker {cost.mild_worker} is outside dp={dp} x pp={pp}")
        compute[s][:, :, d] *= cost.mild_factor
    if cost.step_burst_prob > 0:
        # Drawn after every other draw, so jobs without bursts draw exactly what they drew before.
        lo, hi = cost.step_burst
        for s in range(pp):
            hit = rng.random(shape) < cost.step_burst_prob
            f = np.where(hit, 1.0 + rng.uniform(lo, hi, shape), 1.0)
            compute[s] = compute[s] * f[None, :, :]
            local[s]["optimizer"] = local[s]["optimizer"] * f
    return JobArrays(
        compute=compute,
        local=local,
        stall=[np.zeros(shape) for _ in range(pp)],
        nic=[np.ones(dp) for _ in range(pp)],
        link=links,
        dp_group=[float(np.exp(rng.normal(0.0, cost.link_sigma))) for _ in range(pp)],
        dp_time=dp_time,
        p2p_time=cost.p2p_time(),
        emb_time=cost.embedding_time(),
        clip_time=cost.clip_time,
    )


def _chunk_layers(layers: list[int], s: int, chunks: int, n: int) -> Arr:
    """Layers of each model chunk of stage ``s``.

    Chunks hold ``n / chunks`` layers each; a stage's deviation from ``n`` (the embedding's or the
    head's layer) sits on the chunk that holds the embedding (first chunk of stage 0) or the head
    (last chunk of the last stage), so a healthy interleaved job stays balanced chunk by chunk.
    Other deviations (user partitions) are spread evenly.
    """
    out = np.full(chunks, n / chunks)
    diff = layers[s] - n
    pp = len(layers)
    if chunks == 1:
        out[0] = layers[s]
    elif s == 0 and pp > 1:
        out[0] += diff
    elif s == pp - 1 and pp > 1:
        out[-1] += diff
    else:
        out += diff / chunks
    return out


def _layers_per_chunk(spec: ScenarioSpec, cost: CostModel, layers: list[int]) -> list[list[float]] | None:
    """The meta's ``layers_per_chunk`` of an interleaved job (as ``_chunk_layers`` places them)."""
    if spec.schedule is not Schedule.INTERLEAVED:
        return None
    n = cost.layers_per_middle_stage
    return [[float(x) for x in _chunk_layers(layers, s, spec.vpp, n)] for s in range(spec.pp)]


def _sequence_factors(spec: ScenarioSpec, cost: CostModel, rng: np.random.Generator) -> Arr:
    """Per-(step, dp, microbatch) cost factor of the transformer layers from sequence lengths.

    A microbatch packs ``T = magnitude × 1024`` tokens: its longest sequence has a log-normal length
    (median ``seq_median_len``, sigma ``seq_sigma``) capped at T, the rest are median-length ones.
    Attention is quadratic: factor ∝ (1 - a) + a × Σ len² / (T × seq_ref_len), a = attention share,
    scaled to mean 1 over the job.
    """
    t = spec.magnitude_of(Scenario.SEQUENCE_LENGTH_IMBALANCE) * 1024.0
    shape = (spec.steps, spec.dp, spec.microbatches)
    longest = np.minimum(t, cost.seq_median_len * np.exp(rng.normal(0.0, cost.seq_sigma, shape)))
    rest = np.maximum(t - longest, 0.0)
    sum_sq = longest**2 + rest * min(cost.seq_median_len, t)
    a = cost.attention_share
    factor: Arr = (1.0 - a) + a * sum_sq / (t * cost.seq_ref_len)
    # Normalised to mean 1: the job does the same work on average as its healthy twin, so the
    # generator's own slowdown measures imbalance, not extra tokens.
    return factor / factor.mean()


def _location(spec: ScenarioSpec, workers: list[tuple[int, int]], steps: list[int]) -> Location:
    ranks = sorted({spec.rank_of(d, s) for d, s in workers})
    return Location(
        dp_ranks=sorted({d for d, _ in workers}),
        pp_ranks=sorted({s for _, s in workers}),
        ranks=ranks,
        hosts=sorted({r // spec.gpus_per_host for r in ranks}),
        steps=sorted(steps),
    )


def _host_workers(spec: ScenarioSpec, host: int) -> list[tuple[int, int]]:
    out = [(d, s) for s in range(spec.pp) for d in range(spec.dp) if spec.host_of(d, s) == host]
    if not out:
        raise ValueError(
            f"host {host} holds no traced rank (tp*cp={spec.tp * spec.cp} GPUs per traced rank, "
            f"{spec.gpus_per_host} GPUs per host)"
        )
    return out


def _pick_worker(spec: ScenarioSpec, rng: np.random.Generator) -> tuple[int, int]:
    if spec.worker is not None:
        return spec.worker
    return int(rng.integers(spec.dp)), int(rng.integers(spec.pp))


def _inject(
    spec: ScenarioSpec, cost: CostModel, arrays: JobArrays, programs: list[StageProgram],
    rng: np.random.Generator,
) -> tuple[list[CauseLabel], list[int]]:
    """Apply every scenario of the spec to ``arrays``; return one label per cause and the steps of
    a job-wide stall (not a cause of the vocabulary, so it has no label)."""
    labels: list[CauseLabel] = []
    stall_steps: list[int] = []
    all_steps = spec.step_ids()
    everyone = [(d, s) for s in range(spec.pp) for d in range(spec.dp)]
    for sc in spec.scenarios:
        mag = spec.magnitude_of(sc)
        if sc is Scenario.NONE:
            continue
        if sc is Scenario.JOB_STALL:
            stall_steps.append(_inject_job_stall(spec, arrays, programs, mag))
            continue
        if sc is Scenario.STAGE_IMBALANCE:
            loc = _location(spec, [(d, spec.pp - 1) for d in range(spec.dp)], all_steps)
            cause = CauseId.STAGE_IMBALANCE
        elif sc is Scenario.STAGE_IMBALANCE_FIRST:
            loc = _location(spec, [(d, 0) for d in range(spec.dp)], all_steps)
            cause = CauseId.STAGE_IMBALANCE
        elif sc is Scenario.SEQUENCE_LENGTH_IMBALANCE:
            loc = _location(spec, everyone, all_steps)  # costs applied in _base_arrays
            cause = CauseId.SEQUENCE_LENGTH_IMBALANCE
        elif sc is Scenario.GC_PAUSE:
            loc = _inject_gc(spec, cost, arrays, programs, rng, mag)
            cause = CauseId.GC_PAUSE
        elif sc is Scenario.STAGE_IMBALANCE_LAYERS:
            h = spec.heavy_stage_of()
            loc = _location(spec, [(d, h) for d in range(spec.dp)], all_steps)  # layers in _partition
            cause = CauseId.STAGE_IMBALANCE
        elif sc is Scenario.SLOW_DP_GROUP:
            st = spec.worker[1] if spec.worker is not None else int(rng.integers(spec.pp))
            arrays.dp_group[st] *= mag
            loc = _location(spec, [(d, st) for d in range(spec.dp)], all_steps)
            cause = CauseId.SLOW_COMMUNICATION
        elif sc is Scenario.FAULTY_MACHINE:
            workers = _host_workers(spec, spec.host) if spec.host is not None else [_pick_worker(spec, rng)]
            # From the onset step on (every step by default): a machine that starts throttling.
            k = 0 if spec.onset_step is None else spec.onset_step - spec.first_step
            for d, s in workers:
                arrays.compute[s][:, k:, d] *= mag
                arrays.local[s]["optimizer"][k:, d] *= mag
            loc = _location(spec, workers, all_steps[k:])
            cause = CauseId.FAULTY_MACHINE
        elif sc is Scenario.SLOW_COMMUNICATION:
            if spec.host is not None or spec.worker is not None:
                workers = _host_workers(spec, spec.host) if spec.host is not None else [spec.worker]  # type: ignore[list-item]
                for d, s in workers:
                    arrays.nic[s][d] *= mag
            elif spec.pp > 1:
                d, s = int(rng.integers(spec.dp)), int(rng.integers(spec.pp - 1))
                arrays.link[(s, s + 1)][d] *= mag
                workers = [(d, s), (d, s + 1)]
            else:
                arrays.dp_group[0] *= mag
                workers = [(d, 0) for d in range(spec.dp)]
            loc = _location(spec, workers, all_steps)
            cause = CauseId.SLOW_COMMUNICATION
        elif sc is Scenario.DATALOADER_STALL:
            arrays.stall[0] += mag * rng.uniform(0.8, 1.2, arrays.stall[0].shape)
            loc = _location(spec, [(d, 0) for d in range(spec.dp)], all_steps)
            cause = CauseId.DATALOADER_STALL
        else:  # pragma: no cover - the enum is closed
            raise ValueError(f"unknown scenario {sc}")
        labels.append(CauseLabel(id=cause, magnitude=mag, location=loc, scenario=sc,
                                 pattern=pattern_of(sc, spec)))
    return labels, stall_steps


def _inject_job_stall(spec: ScenarioSpec, arrays: JobArrays, programs: list[StageProgram], mag: float) -> int:
    """Every worker stops ``mag`` s in its first forward of one step (a job-wide hiccup: a shared
    filesystem, a checkpoint barrier); returns the step id."""
    steps = spec.step_ids()
    sid = spec.stall_step if spec.stall_step is not None else steps[len(steps) // 2]
    i = sid - spec.first_step
    for s in range(spec.pp):
        first_fwd = next(j for j, c in enumerate(programs[s].computes) if c.forward)
        arrays.compute[s][first_fwd, i, :] += mag
    return sid


def _inject_gc(
    spec: ScenarioSpec, cost: CostModel, arrays: JobArrays, programs: list[StageProgram],
    rng: np.random.Generator, mag: float,
) -> Location:
    """Pauses of ``mag`` s (±20%) inside one forward of random (step, worker) pairs."""
    n_workers = spec.dp * spec.pp
    p = min(0.5, max(cost.gc_rate, 1.5 / n_workers))
    hit = rng.random((spec.steps, spec.pp, spec.dp)) < p
    if not hit.any():
        hit[rng.integers(spec.steps), rng.integers(spec.pp), rng.integers(spec.dp)] = True
    i_step, s_idx, d_idx = np.nonzero(hit)
    growth = np.ones(spec.steps)
    if spec.gc_growing and spec.steps > 1:
        growth = 0.25 + 0.75 * np.arange(spec.steps) / (spec.steps - 1)
    pause = mag * rng.uniform(0.8, 1.2, len(i_step)) * growth[i_step]
    for s in range(spec.pp):
        fwd_idx = np.array([i for i, c in enumerate(programs[s].computes) if c.forward])
        sel = s_idx == s
        if not sel.any():
            continue
        which = fwd_idx[rng.integers(len(fwd_idx), size=int(sel.sum()))]
        np.add.at(arrays.compute[s], (which, i_step[sel], d_idx[sel]), pause[sel])
    steps = spec.step_ids()
    workers = sorted({(int(d), int(s)) for s, d in zip(s_idx, d_idx, strict=True)})
    return _location(spec, workers, sorted({steps[i] for i in i_step}))


def _assemble(spec: ScenarioSpec, records: list[StageRecord], rng: np.random.Generator,
              cost: CostModel) -> tuple[OpTable, float]:
    """Rows in (step, stage, dp, program order); skew, rebase to each step's start, seq_id."""
    n_steps, dp = spec.steps, spec.dp
    skew_host = rng.normal(0.0, cost.skew_sigma, spec.n_hosts)
    starts, durs, parts = [], [], []
    step_min = np.full(n_steps, np.inf)
    step_max = np.full(n_steps, -np.inf)
    for s, rec in enumerate(records):
        start = np.stack(rec.start)  # (n, S, D)
        end = np.stack(rec.end)
        hosts = np.array([spec.host_of(d, s) for d in range(dp)])
        start = start + skew_host[hosts][None, None, :]
        step_min = np.minimum(step_min, start.min(axis=(0, 2)))
        step_max = np.maximum(step_max, (end + skew_host[hosts][None, None, :]).max(axis=(0, 2)))
        starts.append(start)
        durs.append(end - np.stack(rec.start))
        opt = np.asarray(rec.optype, dtype=np.int16)
        seq = np.zeros(len(opt), dtype=np.int32)
        for code in np.unique(opt):
            m = opt == code
            seq[m] = np.arange(int(m.sum()))
        parts.append((opt, seq, np.asarray(rec.mc), np.asarray(rec.mb_id), np.asarray(rec.gmc)))

    def lay(arr_per_stage: Sequence[npt.NDArray[Any]]) -> npt.NDArray[Any]:
        # per stage (n, S, D) -> (S, D*n) in (dp, op) order, then stages side by side per step
        return np.concatenate(
            [np.moveaxis(a, 0, 2).reshape(n_steps, -1) for a in arr_per_stage], axis=1
        ).ravel()

    def tile(values: Sequence[npt.NDArray[Any]]) -> npt.NDArray[Any]:
        return lay([np.broadcast_to(v[:, None, None], (len(v), n_steps, dp)) for v in values])

    start_rel = lay([st - step_min[None, :, None] for st in starts])
    step_ids = np.asarray(spec.step_ids(), dtype=np.int64)
    cols = {
        "stage": tile([np.full(len(p[0]), s, np.int32) for s, p in enumerate(parts)]),
        "optype": tile([p[0] for p in parts]),
        "seq_id": tile([p[1] for p in parts]),
        "mc": tile([p[2] for p in parts]),
        "mb_id": tile([p[3] for p in parts]),
        "gmc": tile([p[4] for p in parts]),
        "start_ts": start_rel,
        "duration": lay(durs),
    }
    # dp_rank and step vary along the (S, D) axes, not along the program.
    cols["dp_rank"] = lay([np.broadcast_to(np.arange(dp)[None, None, :], (len(p[0]), n_steps, dp))
                           for p in parts])
    cols["step"] = lay([np.broadcast_to(step_ids[None, :, None], (len(p[0]), n_steps, dp))
                        for p in parts])
    rank_of = spec.tp * spec.cp
    cols["rank"] = rank_of * (cols["dp_rank"].astype(np.int64) + dp * cols["stage"].astype(np.int64))
    mean_step = float(np.mean(step_max - step_min))
    return OpTable.from_columns(cols), mean_step


def _mean_step_time(records: list[StageRecord]) -> float:
    end = np.max(np.stack([np.stack(r.end).max(axis=(0, 2)) for r in records]), axis=0)
    start = np.min(np.stack([np.stack(r.start).min(axis=(0, 2)) for r in records]), axis=0)
    return float(np.mean(end - start))


def generate(spec: ScenarioSpec, cost: CostModel | None = None) -> GeneratedJob:
    """Generate one job's trace and labels from a spec (deterministic for a given seed)."""
    cost = cost or CostModel()
    dp_comm = spec.dp * spec.cp > 1
    programs = build_programs(spec.pp, spec.vpp, spec.microbatches, spec.schedule, dp_comm)
    layers = _partition(spec, cost)
    seeds = np.random.SeedSequence(spec.seed).spawn(4)
    arrays = _base_arrays(spec, cost, programs, layers, np.random.default_rng(seeds[0]))
    causes, stall_steps = _inject(spec, cost, arrays, programs, np.random.default_rng(seeds[1]))
    records = execute(programs, arrays, cost, spec.steps, spec.dp, np.random.default_rng(seeds[2]))
    ops, step_time = _assemble(spec, records, np.random.default_rng(seeds[3]), cost)

    # Counterfactual twins (the same seed with other scenarios) are run once each: the labels'
    # slowdown_alone, marginal_slowdown and true_marginal often ask for the same twin.
    twins: dict[tuple[Scenario, ...], float] = {(*spec.scenarios,): step_time}

    def twin(scenarios: Sequence[Scenario]) -> float:
        key = tuple(scenarios)
        if key not in twins:
            twins[key] = _run_only(spec.model_copy(update={"scenarios": list(key)}), cost, dp_comm)
        return twins[key]

    true_slowdown = 1.0
    straggling_causes = [c for c in spec.scenarios if c not in (Scenario.NONE, Scenario.DATALOADER_STALL)]
    if straggling_causes:
        # The generator's own ground truth: the same job with and without the causes.
        healthy = spec.model_copy(update={"scenarios": [Scenario.NONE], "layers_per_stage": None})
        t_h = _run_only(healthy, cost, dp_comm)
        t_c = twin(straggling_causes)
        true_slowdown = t_c / t_h
        _effects(causes, straggling_causes, t_h, t_c, twin)

    causes = _true_marginals(spec, causes, step_time, true_slowdown, twin)

    meta = JobMeta(
        trial_name=spec.trial_name, run_id=spec.seed, dp=spec.dp, pp=spec.pp, tp=spec.tp, cp=spec.cp,
        vpp=spec.vpp, world_size=0, gpus_per_host=spec.gpus_per_host, layers_per_stage=layers,
        layers_per_chunk=_layers_per_chunk(spec, cost, layers), source_format="synthetic",
    )
    notes = [f"synthetic job: scenarios {','.join(spec.scenarios)}, seed {spec.seed}, "
             f"schedule {spec.schedule.value}"]
    labels = Labels(causes=causes, expected_straggling=true_slowdown >= STRAGGLING_THRESHOLD,
                    job_stall_steps=stall_steps)
    return GeneratedJob(Trace(ops=ops, meta=meta, notes=notes), labels, spec, true_slowdown, step_time)


def _true_marginals(
    spec: ScenarioSpec, causes: list[CauseLabel], step_time: float, true_slowdown: float,
    twin: Callable[[Sequence[Scenario]], float],
) -> list[CauseLabel]:
    """Each label with its true marginal effect: the job's mean step time over that of the same job
    (same seed) with that one scenario left out. A single straggling cause needs no extra run (it is
    ``true_slowdown``); with several, one run per cause."""
    real = [c for c in causes if c.scenario is not Scenario.NONE]
    if len(real) == 1 and real[0].scenario is not Scenario.DATALOADER_STALL:
        return [c.model_copy(update={"true_marginal": round(true_slowdown, 6)}) for c in causes]
    out = []
    for c in causes:
        t_without = twin([s for s in spec.scenarios if s is not c.scenario] or [Scenario.NONE])
        out.append(c.model_copy(update={"true_marginal": round(step_time / t_without, 6)}))
    return out


def _effects(
    causes: list[CauseLabel], straggling: Sequence[Scenario], t_h: float, t_c: float,
    twin: Callable[[Sequence[Scenario]], float],
) -> None:
    """Fill each label's ``slowdown_alone`` (this cause alone over the healthy twin) and
    ``marginal_slowdown`` (the job over the same job without this cause). With several causes the
    single-cause jobs reuse the spec's seed and placements; random draws of the other causes (GC
    victims) may differ, so the two are the generator's estimates, not an exact decomposition."""
    for label in causes:
        if label.scenario not in straggling:
            continue
        if len(straggling) == 1:
            label.slowdown_alone = label.marginal_slowdown = round(t_c / t_h, 4)
            continue
        alone = twin([label.scenario])
        without = twin([c for c in straggling if c is not label.scenario])
        label.slowdown_alone = round(alone / t_h, 4)
        label.marginal_slowdown = round(t_c / without, 4)


def _run_only(spec: ScenarioSpec, cost: CostModel, dp_comm: bool) -> float:
    programs = build_programs(spec.pp, spec.vpp, spec.microbatches, spec.schedule, dp_comm)
    layers = _partition(spec, cost)
    seeds = np.random.SeedSequence(spec.seed).spawn(4)
    arrays = _base_arrays(spec, cost, programs, layers, np.random.default_rng(seeds[0]))
    _inject(spec, cost, arrays, programs, np.random.default_rng(seeds[1]))
    records = execute(programs, arrays, cost, spec.steps, spec.dp, np.random.default_rng(seeds[2]))
    return _mean_step_time(records)

