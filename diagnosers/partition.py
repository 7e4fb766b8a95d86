"""Stage repartition for interleaved (virtual) pipelines: move layers between *model chunks*.

With interleaved 1F1B a stage holds ``v`` model chunks, and the model runs through the chunks in
global order ``g = chunk·pp + stage`` (``g = 0`` holds the embedding, ``g = pp·v - 1`` the loss
head). A heavy head makes one chunk heavy, and a stage-level plan cannot fix it: moving whole
layers between stages leaves the head's chunk as heavy as before. The plan here keeps the
embedding on the first chunk and the head on the last one and moves transformer layers between
chunks; its gain is predicted by re-simulating the trace with every chunk's compute rescaled to
its new load.

Cost model, from the trace: a chunk's mean forward (backward) compute per microbatch is
``layers_g · c_f + e_f[g]`` (``c_b``, ``e_b``): ``c`` is the median per-layer cost of the chunks
without embedding or head, ``e`` the surplus of chunks 0 and ``pp·v - 1`` (0 elsewhere). A stage's
optimizer and DP collectives scale with the layers it holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from diagnosers.model import OPTYPE_CODE, JobMeta
from diagnosers.npplain import median

if TYPE_CHECKING:
    from diagnosers.detectors.base import CauseMatch, Probe, TraceStats
    from diagnosers.remedy_model import Remedy

FWD = OPTYPE_CODE["forward-compute"]
BWD = OPTYPE_CODE["backward-compute"]
OPT = OPTYPE_CODE["optimizer"]
DP_SCALED = (OPTYPE_CODE["params-all-gather"], OPTYPE_CODE["grads-reduce-scatter"])
MAX_CANDIDATES = 48  # simulated plans per remedy (the search's result and its one-layer moves)


@dataclass
class ChunkCosts:
    """Per global chunk ``g``: layers and the fitted cost model (seconds per microbatch)."""

    pp: int
    vpp: int
    microbatches: int
    layers: npt.NDArray[np.float64]  # (G,)
    c_f: float
    c_b: float
    extra_f: npt.NDArray[np.float64]  # (G,)
    extra_b: npt.NDArray[np.float64]  # (G,)

    def cost(self, layers: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """Forward + backward seconds per microbatch of each chunk holding ``layers``."""
        out: npt.NDArray[np.float64] = layers * (self.c_f + self.c_b) + self.extra_f + self.extra_b
        return out

    def proxy(self, layers: npt.NDArray[np.float64]) -> float:
        """Step-time proxy: the heaviest stage's steady state (``m`` microbatches through all its
        chunks) plus the bubble, ``pp - 1`` passes of the heaviest chunk."""
        c = self.cost(layers)
        stage = c.reshape(self.vpp, self.pp).sum(axis=0)
        return float(self.microbatches * stage.max() + (self.pp - 1) * c.max())


def gmc_layers(layers_per_chunk: Sequence[Sequence[float]], pp: int, vpp: int) -> npt.NDArray[np.float64]:
    """``layers_per_chunk[stage][chunk]`` in global chunk order (``g = chunk·pp + stage``)."""
    arr = np.asarray(layers_per_chunk, dtype=np.float64)
    if arr.shape != (pp, vpp):
        raise ValueError(f"layers_per_chunk must be {pp} stages x {vpp} chunks; got shape {arr.shape}")
    return arr.T.reshape(-1)


def chunk_costs(
    optype: npt.NDArray[np.integer],
    gmc: npt.NDArray[np.integer],
    duration: npt.NDArray[np.float64],
    pp: int,
    vpp: int,
    microbatches: int,
    layers: npt.NDArray[np.float64],
) -> ChunkCosts:
    """Fit the cost model to the trace's compute ops (``duration`` per op, ``gmc`` its chunk)."""
    n_g = pp * vpp
    means = []
    for code in (FWD, BWD):
        sel = (optype == code) & (gmc >= 0) & (gmc < n_g)
        tot = np.bincount(gmc[sel], weights=duration[sel], minlength=n_g)
        cnt = np.bincount(gmc[sel], minlength=n_g)
        means.append(np.divide(tot, cnt, out=np.zeros(n_g), where=cnt > 0))
    plain = np.ones(n_g, dtype=bool)
    plain[[0, n_g - 1]] = False
    plain &= layers > 0
    out = []
    for mean in means:
        per_layer = float(median(mean[plain] / layers[plain])) if plain.any() else 0.0
        extra = np.zeros(n_g)
        for g in (0, n_g - 1):
            extra[g] = max(0.0, float(mean[g] - layers[g] * per_layer))
        out.append((per_layer, extra))
    return ChunkCosts(pp, vpp, microbatches, layers, out[0][0], out[1][0], out[0][1], out[1][1])


def best_chunk_partition(costs: ChunkCosts) -> npt.NDArray[np.float64]:
    """Whole-layer moves between chunks, greedily lowering :meth:`ChunkCosts.proxy`.

    Layers stay on their chunks' order (a chunk is a contiguous slice of the model); the chunks
    with the embedding and the head may end up with no transformer layer (Megatron's pipeline
    layout allows that), every other chunk keeps at least one."""
    cur = costs.layers.copy()
    n_g = len(cur)
    floor = np.ones(n_g)
    floor[[0, n_g - 1]] = 0.0
    best = costs.proxy(cur)
    for _ in range(int(cur.sum()) * 2):
        move = None
        for a in range(n_g):
            if cur[a] - 1 < floor[a] - 1e-9:
                continue
            for b in range(n_g):
                if a == b:
                    continue
                cur[a] -= 1
                cur[b] += 1
                p = costs.proxy(cur)
                cur[a] += 1
                cur[b] -= 1
                if p < best - 1e-12:
                    best, move = p, (a, b)
        if move is None:
            break
        cur[move[0]] -= 1
        cur[move[1]] += 1
    return cur


def candidates(costs: ChunkCosts, best: npt.NDArray[np.float64]) -> list[npt.NDArray[np.float64]]:
    """The search's plan and its one-layer moves off the heaviest chunks (the proxy only ranks
    plans; the simulation picks among these)."""
    n_g = len(best)
    floor = np.ones(n_g)
    floor[[0, n_g - 1]] = 0.0
    out = [best]
    heavy = np.argsort(-costs.cost(best))[:3]
    for a in heavy:
        for b in range(n_g):
            if a != b and best[a] - 1 >= floor[a] - 1e-9 and len(out) < MAX_CANDIDATES:
                alt = best.copy()
                alt[a] -= 1
                alt[b] += 1
                out.append(alt)
    return out


def rescaled_durations(
    costs: ChunkCosts,
    plans: Sequence[npt.NDArray[np.float64]],
    original: npt.NDArray[np.float64],
    optype: npt.NDArray[np.integer],
    gmc: npt.NDArray[np.integer],
    stage: npt.NDArray[np.integer],
) -> npt.NDArray[np.float64]:
    """(len(plans), n_ops): ``original`` with each chunk's compute scaled to its new load (per
    direction) and each stage's optimizer and DP collectives to its new layer count."""
    old_f = costs.layers * costs.c_f + costs.extra_f
    old_b = costs.layers * costs.c_b + costs.extra_b
    old_stage = costs.layers.reshape(costs.vpp, costs.pp).sum(axis=0)
    is_f, is_b = optype == FWD, optype == BWD
    by_stage = np.isin(optype, (OPT, *DP_SCALED))
    out = np.empty((len(plans), len(original)))
    for k, plan in enumerate(plans):
        sf = np.divide(plan * costs.c_f + costs.extra_f, old_f, out=np.ones_like(old_f), where=old_f > 0)
        sb = np.divide(plan * costs.c_b + costs.extra_b, old_b, out=np.ones_like(old_b), where=old_b > 0)
        new_stage = plan.reshape(costs.vpp, costs.pp).sum(axis=0)
        ss = np.divide(new_stage, old_stage, out=np.ones_like(old_stage), where=old_stage > 0)
        d = original.copy()
        d[is_f] *= sf[gmc[is_f]]
        d[is_b] *= sb[gmc[is_b]]
        d[by_stage] *= ss[stage[by_stage]]
        out[k] = d
    return out


def per_stage(plan: npt.NDArray[np.float64], pp: int, vpp: int) -> list[list[float]]:
    """Global-chunk order back to ``[stage][chunk]``."""
    return [[float(x) for x in row] for row in plan.reshape(vpp, pp).T]


def job_shape(stats: TraceStats) -> tuple[int, int] | None:
    """(vpp, microbatches) from the trace's compute ops, or None when it is not interleaved."""
    comp = (stats.optype == FWD) | (stats.optype == BWD)
    if not comp.any() or stats.pp < 2:
        return None
    n_g = int(stats.op_gmc[comp].max()) + 1
    if n_g % stats.pp or n_g // stats.pp < 2:
        return None
    vpp = n_g // stats.pp
    first = (stats.optype == FWD) & (stats.op_pp == 0) & (stats.op_dp == 0) & (stats.op_step_index == 0)
    return vpp, max(1, int(first.sum()) // vpp)


def _current_layers(
    meta: JobMeta, vpp: int, layers_per_stage: Sequence[int] | None, assumed_per_stage: int
) -> tuple[npt.NDArray[np.float64], str]:
    """Layers per global chunk and what was assumed ('' when the metadata said it)."""
    pp = meta.pp
    lpc = meta.layers_per_chunk
    if lpc is not None and (
        layers_per_stage is None or np.allclose([sum(r) for r in lpc], list(layers_per_stage))
    ):
        return gmc_layers(lpc, pp, vpp), ""
    if layers_per_stage is not None or meta.layers_per_stage is not None:
        per_stage = list(layers_per_stage if layers_per_stage is not None else meta.layers_per_stage or [])
        why = "layers per chunk unknown: each stage's layers assumed split evenly over its chunks"
    else:
        per_stage = [assumed_per_stage] * pp
        why = (
            f"layers per stage unknown: assumed {assumed_per_stage} per stage, split evenly over its "
            "chunks; pass layers_per_chunk (or layers_per_stage) in the meta file for a real plan"
        )
    grid = [[s / vpp] * vpp for s in per_stage]
    return gmc_layers(grid, pp, vpp), why


def chunk_partition_remedy(
    match: CauseMatch,
    stats: TraceStats,
    probe: Probe,
    meta: JobMeta,
    layers_per_stage: Sequence[int] | None,
    assumed_per_stage: int,
) -> Remedy | None:
    """Repartition layers per model chunk for an interleaved job (None when it is not one).

    Fits :class:`ChunkCosts` to the trace, searches whole-layer moves between chunks
    (:func:`best_chunk_partition`), simulates the plan and its one-layer neighbours with every
    chunk's compute rescaled (:func:`rescaled_durations`) and keeps the fastest. The head stays on
    the last chunk and the embedding on the first: only transformer layers move."""
    from diagnosers.remedy_model import Remedy, speedup

    shape = job_shape(stats)
    if shape is None:
        return None
    vpp, m = shape
    pp = stats.pp
    layers, assumed = _current_layers(meta, vpp, layers_per_stage, assumed_per_stage)
    costs = chunk_costs(stats.optype, stats.op_gmc, probe.original, pp, vpp, m, layers)
    plans = candidates(costs, best_chunk_partition(costs))
    plans.append(layers.copy())
    batch = rescaled_durations(costs, plans, probe.original, stats.optype, stats.op_gmc, stats.op_pp)
    times = probe.mean_times(batch)
    pick = int(np.argmin(times))
    new, t_after = plans[pick], float(times[pick])
    now_grid, new_grid = per_stage(layers, pp, vpp), per_stage(new, pp, vpp)

    def fmt(grid: list[list[float]]) -> str:
        return "[" + ", ".join("/".join(f"{x:g}" for x in row) for row in grid) + "]"

    heavy = int(np.argmax(costs.cost(layers)))
    action = (
        f"Repartition the transformer layers per model chunk (stage: chunk 0/chunk 1/...) from "
        f"{fmt(now_grid)} to {fmt(new_grid)}, keeping the embedding on the first chunk and the loss head "
        f"on the last (the fastest simulated plan; the heaviest chunk now is global chunk {heavy}, "
        f"stage {heavy % pp} chunk {heavy // pp}, at {costs.cost(layers)[heavy] * 1e3:.0f} ms of "
        f"forward+backward per microbatch, {(costs.c_f + costs.c_b) * 1e3:.1f} ms per layer)"
        + (f" ({assumed})." if assumed else ".")
    )
    return Remedy(
        cause_id=match.id.value,
        action=action,
        predicted_speedup=speedup(probe.t_orig, t_after),
        details={
            "vpp": vpp,
            "layers_per_chunk_now": [float(x) for x in layers],
            "layers_per_chunk_suggested": [float(x) for x in new],
            "chunk_order": "global chunk g = chunk * pp + stage",
            "layers_now": [round(sum(r), 3) for r in now_grid],
            "layers_suggested": [round(sum(r), 3) for r in new_grid],
            "layer_cost_s": round(costs.c_f + costs.c_b, 6),
            "chunk_extra_s": [round(float(e), 6) for e in costs.extra_f + costs.extra_b],
            "layers_assumed": int(bool(assumed)),
            "t_now_s": round(probe.t_orig, 6),
            "t_after_s": round(t_after, 6),
        },
    )
