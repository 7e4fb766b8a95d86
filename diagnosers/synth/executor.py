"""The generator's own event loop: runs every stage's program and records what a profiler would see.

Independent of the analyzer's dependency graph. Semantics:

- Each worker runs its calls in order. A call is *posted* at the previous call's end plus a CPU
  launch gap; a compute call ends ``duration`` after its post.
- P2P: a send and its receive (the k-th of their channel, FIFO) complete together at
  ``max(post of both sides) + transfer``; a batched call completes when all its real ops have, and
  all its rows record the call's post and end. A call with only no-op rows ends right away.
- A collective completes for every member at ``max(member posts) + transfer`` (plus a few µs of
  per-member jitter). DP collectives span the stage's DP ranks, the embedding all-reduce stage 0
  and stage pp-1 of one replica, the clip all-reduce every worker.

Hence a communication op's recorded duration includes waiting for its peers, as a real profiler
records it. All DP ranks of a stage run the same program, so the loop runs once per call over
arrays of shape (steps, dp): steps and DP ranks are simulated together, each step on its own
(every step starts at 0; no cross-step dependency, like the sampled steps of a profiler).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from diagnosers.model import TraceError
from diagnosers.synth.cost import CostModel
from diagnosers.synth.schedule import Call, Channel, Kind, P2POp, StageProgram

Arr = npt.NDArray[np.float64]


@dataclass
class JobArrays:
    """Durations and speed factors the executor consumes; causes edit these before execution.

    Shapes: S = steps, D = dp ranks. ``compute[s]`` is (n_compute_s, S, D); ``local[s][name]`` and
    ``stall[s]`` are (S, D); ``nic[s]`` (D,) is a worker's communication slowness (1 = normal);
    ``link[(a, b)]`` (D,) a P2P link's, with a < b; ``dp_group[s]`` a scalar for the stage's DP group.
    """

    compute: list[Arr]
    local: list[dict[str, Arr]]
    stall: list[Arr]
    nic: list[Arr]
    link: dict[tuple[int, int], Arr]
    dp_group: list[float]
    dp_time: dict[str, list[float]]  # optype -> per-stage base transfer time
    p2p_time: float
    emb_time: float
    clip_time: float


@dataclass
class StageRecord:
    """Recorded rows of one stage: templates plus (n_rows, S, D) start and end times."""

    optype: list[int] = field(default_factory=list)
    mc: list[int] = field(default_factory=list)
    mb_id: list[int] = field(default_factory=list)
    gmc: list[int] = field(default_factory=list)
    start: list[Arr] = field(default_factory=list)
    end: list[Arr] = field(default_factory=list)


def _link(channel: Channel, pp: int) -> tuple[int, int]:
    direction, src = channel
    dst = (src + 1) % pp if direction == "F" else (src - 1) % pp
    return (min(src, dst), max(src, dst))


def _dst(channel: Channel, pp: int) -> int:
    direction, src = channel
    return (src + 1) % pp if direction == "F" else (src - 1) % pp


class _Loop:
    def __init__(
        self, programs: list[StageProgram], arrays: JobArrays, cost: CostModel,
        n_steps: int, dp: int, rng: np.random.Generator,
    ) -> None:
        self.programs, self.a, self.cost, self.rng = programs, arrays, cost, rng
        self.pp = len(programs)
        self.shape = (n_steps, dp)
        self.posts: dict[tuple[Channel, str], list[Arr]] = {}
        self.p2p_end: dict[tuple[Channel, int], Arr] = {}
        self.coll_posts: dict[str, dict[int, Arr]] = {}
        self.coll_end: dict[str, dict[int, Arr]] = {}
        self.records = [StageRecord() for _ in programs]

    def gap(self) -> Arr:
        c, rng = self.cost, self.rng
        g = c.gap_base + rng.exponential(c.gap_mean, self.shape)
        hic = rng.random(self.shape) < c.hiccup_prob
        if hic.any():
            g[hic] += rng.uniform(*c.hiccup_ms, int(hic.sum())) * 1e-3
        return g

    def noise(self, sigma: float) -> Arr:
        return np.exp(self.rng.normal(0.0, sigma, self.shape))

    def jitter(self) -> Arr:
        return np.abs(self.rng.normal(0.0, 3e-6, self.shape))

    # -- readiness and completion -------------------------------------------------------------
    def _p2p_ready(self, op: P2POp) -> bool:
        other = "recv" if op.role == "send" else "send"
        return len(self.posts.get((op.channel, other), ())) > op.k

    def _p2p_done(self, op: P2POp) -> Arr:
        key = (op.channel, op.k)
        end = self.p2p_end.get(key)
        if end is None:
            send = self.posts[(op.channel, "send")][op.k]
            recv = self.posts[(op.channel, "recv")][op.k]
            src, dst = op.channel[1], _dst(op.channel, self.pp)
            speed = self.a.link[_link(op.channel, self.pp)] * np.maximum(self.a.nic[src], self.a.nic[dst])
            transfer = self.a.p2p_time * speed * self.noise(self.cost.transfer_sigma)
            end = np.maximum(send, recv) + transfer
            self.p2p_end[key] = end
        return end

    def _coll_members(self, call: Call) -> tuple[int, ...]:
        if call.kind is Kind.EMB_COLL:
            return (0, self.pp - 1)
        return tuple(range(self.pp))

    def _coll_done(self, key: str, call: Call, stage: int) -> Arr:
        ends = self.coll_end.get(key)
        if ends is None:
            posts = self.coll_posts[key]
            if call.kind is Kind.EMB_COLL:
                first, last = posts[0], posts[self.pp - 1]
                speed = np.maximum(self.a.nic[0], self.a.nic[self.pp - 1])
                t = self.a.emb_time * speed * self.noise(self.cost.transfer_sigma)
                base = np.maximum(first, last) + t
            else:  # clip: a global barrier over every stage and DP rank of the step
                latest = np.max(np.stack([p.max(axis=1) for p in posts.values()]), axis=0)
                clip_speed = float(np.max([n.max() for n in self.a.nic]))
                t = self.a.clip_time * clip_speed * self.noise(self.cost.transfer_sigma)[:, :1]
                base = latest[:, None] + t
            ends = {s: base + self.jitter() for s in posts}
            self.coll_end[key] = ends
        return ends[stage]

    def _dp_coll(self, call: Call, stage: int, post: Arr) -> Arr:
        base = self.a.dp_time[call.name][stage] * self.a.dp_group[stage]
        speed = float(self.a.nic[stage].max())
        t = base * speed * self.noise(self.cost.transfer_sigma)[:, :1]
        return post.max(axis=1, keepdims=True) + t + self.jitter()

    # -- the loop --------------------------------------------------------------------------------
    def run(self) -> list[StageRecord]:
        pp = self.pp
        pc = [0] * pp
        clock = [np.zeros(self.shape) for _ in range(pp)]
        pending: list[Arr | None] = [None] * pp
        coll_seq = [dict[str, int]() for _ in range(pp)]
        first_call = [True] * pp
        remaining = sum(len(p.calls) for p in self.programs)
        while remaining:
            progressed = False
            for s in range(pp):
                calls = self.programs[s].calls
                while pc[s] < len(calls):
                    call = calls[pc[s]]
                    post = pending[s]
                    if post is None:
                        if first_call[s]:
                            gap = self.cost.step_start_jitter * self.rng.random(self.shape)
                            first_call[s] = False
                        else:
                            gap = self.gap()
                        post = clock[s] + gap
                        if call.first_forward:
                            post = post + self.a.stall[s]
                        pending[s] = post
                        self._register(call, s, post, coll_seq[s])
                    end = self._try_finish(call, s, post, coll_seq[s])
                    if end is None:
                        break
                    self._record(s, call, post, end)
                    clock[s] = end
                    pending[s] = None
                    pc[s] += 1
                    remaining -= 1
                    progressed = True
            if not progressed and remaining:
                stuck = {s: self.programs[s].calls[pc[s]].rows[0].optype for s in range(pp)
                         if pc[s] < len(self.programs[s].calls)}
                raise TraceError(f"synthetic schedule deadlocked; blocked calls by stage: {stuck}")
        return self.records

    def _register(self, call: Call, s: int, post: Arr, seq: dict[str, int]) -> None:
        if call.kind is Kind.P2P:
            for op in call.ops:
                lst = self.posts.setdefault((op.channel, op.role), [])
                if len(lst) != op.k:
                    raise TraceError(f"P2P channel {op.channel} {op.role} posted out of order at stage {s}")
                lst.append(post)
        elif call.kind in (Kind.EMB_COLL, Kind.CLIP_COLL):
            n = seq.get(call.name, 0)
            self.coll_posts.setdefault(f"{call.name}#{n}", {})[s] = post

    def _try_finish(
        self, call: Call, s: int, post: Arr, seq: dict[str, int]
    ) -> Arr | None:
        kind = call.kind
        if kind is Kind.COMPUTE:
            return post + self.a.compute[s][call.compute]
        if kind is Kind.LOCAL:
            return post + self.a.local[s][call.name]
        if kind is Kind.P2P:
            if not all(self._p2p_ready(op) for op in call.ops):
                return None
            if not call.ops:  # only no-op records: the call returns at once
                return post + self.cost.gap_base
            end = self._p2p_done(call.ops[0])
            for op in call.ops[1:]:
                end = np.maximum(end, self._p2p_done(op))
            return end
        if kind is Kind.DP_COLL:
            return self._dp_coll(call, s, post)
        n = seq.get(call.name, 0)
        key = f"{call.name}#{n}"
        if len(self.coll_posts.get(key, {})) < len(self._coll_members(call)):
            return None
        seq[call.name] = n + 1
        return self._coll_done(key, call, s)

    def _record(self, s: int, call: Call, post: Arr, end: Arr) -> None:
        rec = self.records[s]
        for row in call.rows:
            rec.optype.append(row.optype)
            rec.mc.append(row.mc)
            rec.mb_id.append(row.mb_id)
            rec.gmc.append(row.gmc)
            rec.start.append(post)
            rec.end.append(end)


def execute(
    programs: list[StageProgram], arrays: JobArrays, cost: CostModel, n_steps: int, dp: int,
    rng: np.random.Generator,
) -> list[StageRecord]:
    """Run all stages' programs for every (step, dp rank) at once; one ``StageRecord`` per stage."""
    return _Loop(programs, arrays, cost, n_steps, dp, rng).run()
