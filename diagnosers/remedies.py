"""Remedies for detected causes, each with its gain predicted by a what-if run.

``predicted_speedup = T_now / T_after``, both simulated by the same engine with launch delay 0
(METHOD.md A4), except for dataloader stalls, which live in launch delays: there ``T_now`` is the
measured step time. Speedups are never below 1 (a fix that does not help is reported as 1.0).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from diagnosers.detectors.base import CauseMatch, Probe, TraceStats
from diagnosers.detectors.stats import BWD, FWD
from diagnosers.model import JobMeta
from diagnosers.npplain import median
from diagnosers.remedy_model import Remedy
from diagnosers.remedy_model import speedup as _speedup
from diagnosers.vocab import DRAIN_MAX_JOB_SHARE, CauseId

if TYPE_CHECKING:
    from diagnosers.report_view import Report

# When the trace's metadata does not say how many layers each stage holds and the user gave no
# --layers-per-stage, the partition is computed for this many layers per stage and says so.
ASSUMED_LAYERS_PER_STAGE = 8


# ----------------------------------------------------------------------------------------------
# Stage imbalance: best contiguous layer partition.


def layer_costs(stats: TraceStats, layers: Sequence[int]) -> tuple[float, npt.NDArray[np.float64]]:
    """Estimate (per-layer compute seconds per step, extra seconds per stage) from the trace.

    Each stage's mean forward+backward compute per step is ``layers_s * c + extra_s``. The middle
    stages hold only transformer layers, so ``c`` is the median of their per-layer cost (with two
    stages, the cheaper stage's); the first and last stage's surplus is their embedding / loss head.
    """
    comp = stats.compute.mean(axis=(0, 1))  # (pp,)
    lay = np.asarray(layers, dtype=np.float64)
    per_layer = comp / np.maximum(lay, 1)
    middle = per_layer[1:-1] if len(per_layer) >= 3 else per_layer
    c = float(median(middle)) if len(per_layer) >= 3 else float(middle.min())
    extra = np.clip(comp - lay * c, 0.0, None)
    return c, extra


def best_partition(total_layers: int, c: float, extra: npt.NDArray[np.float64]) -> list[int]:
    """Layer counts per stage (each >= 1, summing to ``total_layers``) minimising the heaviest
    stage's cost ``n_s * c + extra_s``: the best contiguous partition of uniform layers with fixed
    first/last-stage extras. Exact: tries every candidate bottleneck value in increasing order;
    among optimal partitions it returns an even one (layers go to the lightest stage)."""
    pp = len(extra)
    if total_layers < pp or c <= 0:
        raise ValueError(f"cannot place {total_layers} layers on {pp} stages")
    cands = sorted({float(k * c + e) for e in extra for k in range(1, total_layers + 1)})
    for t in cands:
        cap = np.floor((t - extra) / c + 1e-9).astype(int)
        if (cap >= 1).all() and int(np.minimum(cap, total_layers).sum()) >= total_layers:
            counts = np.ones(pp, dtype=int)
            # Within the bottleneck, place each remaining layer on the stage that stays lightest
            # with it, so the other stages end up as even as the bottleneck allows.
            for _ in range(total_layers - pp):
                after = np.where(counts < cap, (counts + 1) * c + extra, np.inf)
                counts[int(np.argmin(after))] += 1
            return [int(x) for x in counts]
    return [total_layers // pp + (1 if s < total_layers % pp else 0) for s in range(pp)]


def stage_partition_remedy(
    match: CauseMatch, stats: TraceStats, probe: Probe, layers_per_stage: Sequence[int] | None
) -> Remedy:
    """Repartition layers; predict the gain by rescaling each stage's compute to its new load
    (per-layer cost and first/last-stage extras from :func:`layer_costs`) and re-simulating."""
    assumed = layers_per_stage is None
    layers = list(layers_per_stage) if layers_per_stage is not None else [ASSUMED_LAYERS_PER_STAGE] * stats.pp
    c, extra = layer_costs(stats, layers)
    best = best_partition(sum(layers), c, extra)
    # The cost model only ranks partitions by their heaviest stage; the pipeline's real step time
    # also depends on the others. Simulate the best partition and its one-layer moves between
    # neighbouring stages, and keep the fastest.
    cands = [best]
    for s_ in range(stats.pp - 1):
        for a, b in ((s_, s_ + 1), (s_ + 1, s_)):
            alt = list(best)
            if alt[a] > 1:
                alt[a] -= 1
                alt[b] += 1
                cands.append(alt)
    comp = stats.compute.mean(axis=(0, 1))
    is_comp = (stats.optype == FWD) | (stats.optype == BWD)
    batch = np.empty((len(cands), len(probe.original)))
    for k, cand in enumerate(cands):
        load_new = np.asarray(cand) * c + extra
        scale = np.divide(load_new, comp, out=np.ones_like(comp), where=comp > 0)
        batch[k] = probe.original
        batch[k, is_comp] *= scale[stats.op_pp[is_comp]]
    times = probe.mean_times(batch)
    pick = int(np.argmin(times))
    new, t_after = cands[pick], float(times[pick])
    note = (
        f" (layers per stage unknown: assumed {ASSUMED_LAYERS_PER_STAGE} each; pass --layers-per-stage "
        "or layers_per_stage in the meta file for a real plan)"
        if assumed
        else ""
    )
    action = (
        f"Repartition the model's layers across pipeline stages from {layers} to {new} (the fastest "
        f"simulated contiguous partition for an estimated {c * 1e3:.1f} ms of forward+backward per "
        f"layer per step and {', '.join(f'{e * 1e3:.0f}' for e in extra)} ms of embedding/head work "
        f"per stage){note}."
    )
    return Remedy(
        cause_id=match.id.value,
        action=action,
        predicted_speedup=_speedup(probe.t_orig, t_after),
        details={
            "layers_now": [int(x) for x in layers],
            "layers_suggested": new,
            "layer_cost_s": round(c, 6),
            "stage_extra_s": [round(float(e), 6) for e in extra],
            "layers_assumed": int(assumed),
            "t_now_s": round(probe.t_orig, 6),
            "t_after_s": round(t_after, 6),
        },
    )


# ----------------------------------------------------------------------------------------------


def sequence_remedy(match: CauseMatch, stats: TraceStats, probe: Probe) -> Remedy:
    """Rebalanced sequences: the gain of every forward/backward at the mean of its (step, stage,
    chunk, op type), each worker's persistent speed kept; an upper bound (perfect packing)."""
    from diagnosers.detectors.sequence_length import rebalanced_durations

    # the detector's own scenario (TraceStats.cached): run once for both
    balanced = stats.cached("rebalanced_durations", lambda: rebalanced_durations(stats))
    t_after = float(probe.means_of([balanced])[0])
    return Remedy(
        cause_id=match.id.value,
        action=(
            "Rebalance sequences across DP ranks and across microbatches within each rank: estimate each "
            "sequence's cost (linear in tokens plus a quadratic attention term), then assign sequences so "
            "every microbatch of a step carries the same cost. The prediction assumes perfect packing "
            "(an upper bound); the study's prototype gained 23.9% at 32K max length."
        ),
        predicted_speedup=_speedup(probe.t_orig, t_after),
        details={"t_now_s": round(probe.t_orig, 6), "t_after_s": round(t_after, 6)},
    )


def gc_remedy(match: CauseMatch, stats: TraceStats, probe: Probe) -> Remedy:
    """Planned GC: no automatic pauses; every rank collects together every N steps.

    N is the observed interval between one worker's pauses (1 / pauses per worker-step), so ranks
    collect as often as the runtime did on its own and memory stays bounded. One synchronised
    collection costs one mean pause for the whole job; spread over N steps.
    """
    from diagnosers.detectors.gc_pause import paused_durations, paused_forwards

    paused = paused_forwards(stats)
    n_workers = stats.dp * stats.pp
    rate = float(paused.sum()) / max(n_workers * stats.n_steps, 1)
    mean_pause = float(stats.fwd_excess[paused].mean()) if paused.any() else 0.0
    n = max(1, round(1.0 / rate)) if rate > 0 else 1
    t_fixed = float(probe.mean_times(paused_durations(stats, paused))[0])
    t_after = t_fixed + mean_pause / n
    return Remedy(
        cause_id=match.id.value,
        action=(
            f"Use planned GC: disable automatic collection (gc.disable() after start-up, or raise gc "
            f"thresholds) and call gc.collect() on every rank at the same step every N = {n} steps "
            f"(each rank paused about once per {n} step(s) here, {mean_pause * 1e3:.0f} ms per pause). "
            f"Lower N if host memory grows."
        ),
        predicted_speedup=_speedup(probe.t_orig, t_after),
        details={
            "suggested_n": n,
            "pauses_per_worker_step": round(rate, 6),
            "mean_pause_s": round(mean_pause, 6),
            "t_now_s": round(probe.t_orig, 6),
            "t_after_s": round(t_after, 6),
        },
    )


def host_shares(stats: TraceStats, hosts: Sequence[int]) -> dict[int, float]:
    """Per host: the share of the job's traced workers that run on it (0 for an unknown host)."""
    h = stats.host_of
    n = int((h >= 0).sum())
    return {int(x): float((h == x).sum()) / n if n else 0.0 for x in hosts}


def _gpus(stats: TraceStats, ranks: Sequence[int]) -> str:
    """"GPU 1 and GPU 3 of host 0 (global ranks 1, 3)": the devices behind global ranks."""
    by_host: dict[int, list[int]] = {}
    for r in ranks:
        by_host.setdefault(int(r) // stats.gpus_per_host, []).append(int(r) % stats.gpus_per_host)
    parts = [
        f"GPU{'s' if len(g) > 1 else ''} {', '.join(map(str, g))} of host {h}" for h, g in by_host.items()
    ]
    return f"{'; '.join(parts)} (global rank{'s' if len(ranks) != 1 else ''} {', '.join(map(str, ranks))})"


def drain_remedy(match: CauseMatch, stats: TraceStats, probe: Probe) -> Remedy:
    """Drain the faulty workers: the gain of idealising every op of the matched cells (the
    detector's ``hot_cells`` when given, else its location's DP x PP cells).

    A host is proposed for draining only when it holds at most ``DRAIN_MAX_JOB_SHARE`` of the job's
    traced workers; otherwise (e.g. a one-host job) the remedy names the GPUs and asks for a
    hardware check first, and says that timing alone cannot tell a slow GPU from ranks that simply
    carry more work when no other host runs the same stage to compare with.
    """
    cells = [(d, p) for d in match.location.dp_ranks for p in match.location.pp_ranks]
    hot = match.evidence.get("hot_cells")
    if isinstance(hot, list):
        cells = [(int(str(x).split(",")[0]), int(str(x).split(",")[1])) for x in hot]
    t_after = float(probe.masked_means([stats.worker_mask(cells)])[0])
    loc = match.location
    shares = host_shares(stats, loc.hosts)
    too_big = [h for h, v in shares.items() if v > DRAIN_MAX_JOB_SHARE]
    details: dict[str, float | int | str | list[int] | list[float] | None] = {
        "ranks": loc.ranks,
        "hosts": loc.hosts,
        "host_job_share": [round(shares[h], 4) for h in loc.hosts],
        "t_now_s": round(probe.t_orig, 6),
        "t_after_s": round(t_after, 6),
    }
    if not too_big and loc.hosts:
        what = f"host{'s' if len(loc.hosts) != 1 else ''} {', '.join(map(str, loc.hosts))}"
        action = (
            f"Drain {what} (global rank{'s' if len(loc.ranks) != 1 else ''} "
            f"{', '.join(map(str, loc.ranks))}; "
            f"DP {loc.dp_ranks} / PP {loc.pp_ranks}) and restart from the last checkpoint on a healthy "
            f"replacement; the prediction runs those workers at typical speed."
        )
        destructive = True
    else:
        # Peers that run the same stage on a host outside the suspects are the only evidence that
        # the machine, not the work the job gives those ranks, is slow.
        host = stats.host_of
        suspect = set(loc.hosts)
        comparable = any(
            host[d, p] >= 0 and int(host[d, p]) not in suspect
            for p in set(loc.pp_ranks) for d in range(stats.dp)
        )
        held = ", ".join(f"host {h} holds {shares[h] * 100:.0f}% of the job's traced ranks" for h in too_big)
        action = (
            f"Check {_gpus(stats, loc.ranks)} before changing anything: GPU clocks, throttling and "
            f"errors (nvidia-smi -q, dcgmi diag), and the work those ranks are given. Do not drain the "
            f"host: {held}, so draining it moves the job rather than removing one bad machine. If the "
            f"check confirms slow GPUs, replace them or restart without them; the prediction runs those "
            f"workers at typical speed."
        )
        if not comparable:
            action += (
                " The evidence cannot tell a faulty machine from the job's own behaviour: no other host "
                "runs the same stage to compare with, so ranks that carry more work (a larger shard, "
                "more data) look the same as a slow GPU."
            )
        details["machine_vs_job"] = "distinguishable" if comparable else "indistinguishable"
        destructive = False
    return Remedy(
        cause_id=match.id.value,
        action=action,
        predicted_speedup=_speedup(probe.t_orig, t_after),
        destructive=destructive,
        details=details,
    )


def comm_fix_mask(match: CauseMatch, stats: TraceStats, probe: Probe) -> npt.NDArray[np.bool_]:
    """The ops the slow-communication fix idealises: the transfers of the candidate the detector
    named (``evidence['group']``), or every communication op when it named none."""
    from diagnosers.detectors.slow_communication import (
        candidates,
        comm_mask,
        probe_candidates,
        probe_floor_candidates,
    )

    group = str(match.evidence.get("group", ""))
    is_comm = comm_mask(stats)
    # the detector's own candidates when this is its probe (made once, not again for the remedy)
    scored = probe_candidates(stats) if probe is stats.probe else candidates(stats, probe.original)
    # a link direction found by its send floor is among the detector's floor candidates
    floors = probe_floor_candidates(stats) if probe is stats.probe else []
    found = [*((name, m) for name, _, m in scored), *((c.name, c.mask) for c in floors)]
    return next((m for name, m in found if name == group), is_comm)


def comm_remedy(match: CauseMatch, stats: TraceStats, probe: Probe) -> Remedy:
    """Fix the slow link or group: the gain of idealising the transfers of ``comm_fix_mask``."""
    group = str(match.evidence.get("group", ""))
    mask = comm_fix_mask(match, stats, probe)
    t_after = float(probe.masked_means([mask])[0])
    return Remedy(
        cause_id=match.id.value,
        action=(
            f"Fix the communication at {group}: check NIC/link errors and switch ports of ranks "
            f"{match.location.ranks}, or move the group off the congested path; the prediction runs those "
            f"transfers at their typical time."
        ),
        predicted_speedup=_speedup(probe.t_orig, t_after),
        details={"group": group, "t_now_s": round(probe.t_orig, 6), "t_after_s": round(t_after, 6)},
    )


def dataloader_remedy(match: CauseMatch, stats: TraceStats, report: Report) -> Remedy:
    """Gain of removing the stall: measured step time minus the stall, never below the no-delay
    simulated time (what the engine predicts with every launch delay removed)."""
    from diagnosers.detectors.dataloader import stall_seconds

    actual = float(np.mean(list(report.step_times.actual.values())))
    no_delay = float(np.mean(list(report.step_times.no_delay.values())))
    t_after = max(no_delay, actual - stall_seconds(stats))
    return Remedy(
        cause_id=match.id.value,
        action=(
            f"Remove the input stall on ranks {match.location.ranks}: more dataloader workers, prefetch "
            f"(pin_memory, prefetch_factor), faster storage or a warm cache; check host CPU contention."
        ),
        predicted_speedup=_speedup(actual, t_after),
        details={"t_now_s": round(actual, 6), "t_after_s": round(t_after, 6)},
    )


def remedies_for(
    matches: Sequence[CauseMatch],
    stats: TraceStats,
    report: Report,
    *,
    layers_per_stage: Sequence[int] | None = None,
    meta: JobMeta | None = None,
) -> list[Remedy]:
    """One remedy per matched cause that has one; skipped (not guessed) when no engine is at hand.
    With ``meta`` of an interleaved job the stage repartition moves layers per model chunk
    (``diagnosers.partition``)."""
    out: list[Remedy] = []
    probe = stats.probe
    for m in matches:
        if m.id is CauseId.DATALOADER_STALL:
            out.append(dataloader_remedy(m, stats, report))
            continue
        if probe is None:
            continue
        if m.id is CauseId.STAGE_IMBALANCE:
            from diagnosers.partition import chunk_partition_remedy

            chunked = (
                chunk_partition_remedy(m, stats, probe, meta, layers_per_stage, ASSUMED_LAYERS_PER_STAGE)
                if meta is not None
                else None
            )
            out.append(chunked or stage_partition_remedy(m, stats, probe, layers_per_stage))
        elif m.id is CauseId.SEQUENCE_LENGTH_IMBALANCE:
            out.append(sequence_remedy(m, stats, probe))
        elif m.id is CauseId.GC_PAUSE:
            out.append(gc_remedy(m, stats, probe))
        elif m.id is CauseId.FAULTY_MACHINE:
            out.append(drain_remedy(m, stats, probe))
        elif m.id is CauseId.SLOW_COMMUNICATION:
            out.append(comm_remedy(m, stats, probe))
    return out


__all__ = ["Remedy", "best_partition", "layer_costs", "remedies_for"]
