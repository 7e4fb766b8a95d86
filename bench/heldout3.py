"""Held-out synthetic set 3: job shapes, time scales and parameters no earlier set or tuning list uses.

Fixed (and committed) before it was ever diagnosed; run once for the fresh figure. Do not edit the
draws to chase results: a later set gets a new seed and a new name (``SET3_SEED``).

What is new against the tuning corpus (``bench/accuracy.py``), held-out sets 1–2
(``bench/heldout.py``) and the widened parts (``bench/widened.py``):

- **pipeline depths** 2, 5, 6, 10, 12 and **DP** 1, 2, 3, 5, 7, 10, 20, 40, 56 (odd and prime
  sizes; ≤ 240 traced workers); tp ∈ {1, 2, 8}, cp ∈ {1, 4}; 2, 8 or 16 GPUs per host;
- schedules 1F1B / interleaved (vpp 2, 3 or 5) / GPipe, with odd microbatch counts (pp + 1,
  2·pp + 1, 3·pp, 24) and very few (2) or many (8–12) steps;
- a **cost model drawn per job**: 4–12 layers per stage, 3–15 ms per layer forward, backward
  1.6–2.4× forward, op σ 0.8–3%, worker σ 0.2–0.8% — so step times span about 0.1 s to several
  seconds, and every time-valued cause (GC pause, launch stall, job-wide stall) is drawn as a
  *fraction of the job's own step* rather than in seconds;
- every cause class: last / first stage heavier, a heavier middle stage from ``layers_per_stage``
  (host-aligned or not), sequence lengths, GC (plain, growing), a slow worker weak (1.08–1.4×)
  and strong (1.8–4×) on any stage, onset at several steps of a long window, a slow host, a slow
  P2P link, a slow worker or host NIC, a slow DP collective on one stage, a launch stall, a
  job-wide stall, a slow worker on a heavy stage, two- and three-cause jobs with *separate*
  magnitudes per cause (``ScenarioSpec.magnitudes``, some marginal), and healthy jobs with heavy
  per-op noise or ±30–50% step-to-step noise.

Scoring is ``bench/widened.py``'s (the issue's): a job is *clear* when every labelled cause alone
slows it by ≥ 5% (``slowdown_alone``; a launch stall, which has none, is clear when the job's step
is ≥ 5% longer than the step without the stall); top-1 = the first cause is a labelled one at its
place (an onset also with ``temporal: onset``); multi-cause recall = each clear labelled cause
anywhere at its place; healthy (and job-wide-stall) jobs must name no faulty-machine or GC.

``--set 4`` draws the same families from another seed (``SEEDS``): fixed after set 3's fixes and
before its own first run.

``--set 5`` (held out, run once at the end of its round) and ``--set tune5`` (its tuning companion,
run as often as wanted) draw the same families from two more seeds on **other shapes**
(``SHAPES``: pipeline depths 3, 4, 7, 8, 9; DP 1, 2, 4, 6, 9, 11, 13, 24; tp 4; 4 GPUs per host;
vpp 4; 4–6 steps), plus three families of healthy jobs the earlier sets lack: ``healthy-mild-gpu``
(heavy noise and one GPU 1.5–3.5% slower than its peers, unlabelled: a fleet's ordinary spread,
``CostModel.mild_worker``), ``job-stall-small`` (a job-wide stall in jobs of 2–4 workers and 3–5
steps, some under step noise) and ``healthy-step-noise-mild-gpu`` (±30–50% step noise with a mildly
slower GPU). Both were fixed before any rule change of the round; set 5 was not run before its
one fresh run.

``--set 6`` (held out) and ``--set tune6`` (its tuning companion) draw from two more seeds on
shapes no earlier set drew (``SHAPES_6``: depths 11, 13, 14, 16 beside 2; DP 8, 12, 14, 16, 30
beside 1 and 2; cp 8; vpp 6; 4 or 32 GPUs per host; 7, 11, 14 steps; first step ids 1, 13, 1000)
with a wider per-job cost draw (``_cost`` style "6"), and four families more (``SET6_NEW``):
healthy jobs under heavy step noise (sigma 0.18-0.3) over 3-5 steps on up to 16 x 11 workers,
healthy jobs under step *bursts* (a (step, worker) pair 1.25-1.9x now and then,
``CostModel.step_burst_prob``), and weak real slow machines (1.15-1.6x) under each of the two:
96 healthy jobs of 312. Fixed and committed before any rule change of its round; set 6 is run once
at the end of the round.

``--set 7`` (held out) draws set 6's families, shapes and cost style from a fresh seed: fixed and
committed before the thirteenth round's rule changes (set 6 and tune6 are seen data by then), and
run once at that round's end.

``--set 8`` (held out) draws the same families, shapes and cost style from another fresh seed: fixed
and committed before the fourteenth round's rule changes (set 7 is seen data by then), and run once
at that round's end.

``--set 9`` (held out) draws set 6's families, shapes and cost style from one more fresh seed:
fixed and committed before the fifteenth round's rule changes (sets 7, 8 and tune8 are seen data
by then), and run once at that round's end.

``--set 10`` (held out) draws the same families, shapes and cost style from one more fresh seed:
fixed and committed before the sixteenth round's rule change (set 9 is seen data by then), and run
once at that round's end.

``--set 11`` (held out) draws the same families, shapes and cost style from one more fresh seed:
fixed and committed before the seventeenth round's rule change (set 10 is seen data by then), and
run once at that round's end.

``--set 12`` (held out) draws the same families, shapes and cost style from one more fresh seed:
fixed and committed before the eighteenth round's rule changes (set 11 is seen data by then), and
run once at that round's end.

``--set 13`` (held out) draws the same families, shapes and cost style from one more fresh seed:
fixed and committed after the eighteenth round (set 12 is seen data by then), and run once at the
nineteenth round's end, on the tree as the eighteenth left it.

``--set 14`` (held out) draws the same families, shapes and cost style from one more fresh seed:
fixed and committed before the twentieth round's rule changes (set 13 is seen data by then), and
run once at that round's end.

``--set 15`` (held out) draws the same families, shapes and cost style from one more fresh seed:
fixed and committed before the twenty-first round's rule changes (set 14 is seen data by then),
and run once at that round's end.

``--set tune8`` (seen) draws the same families, shapes and cost style from one more seed: made
during the fourteenth round, after its first rules, as a fresh *tuning* check of them on draws
they were not made on (not a held-out figure: it is read while rules are still being made).

    .venv/bin/python bench/heldout3.py [--set 3|4|5|tune5|6|tune6|7|8|tune8|9|10|11|12|13|14|15]
                                       [--family NAME] [--verbose] [--json] [--list] [--subset N]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from accuracy import location_ok

from diagnosers.diagnose import Diagnosis, diagnose
from diagnosers.synth import CostModel, GeneratedJob, Scenario, ScenarioSpec, Schedule, generate
from diagnosers.vocab import CauseId, Temporal

S = Scenario
SET3_SEED = 3_2026_1201
# Set 4: the same families from another seed, defined (and committed) after set 3's fixes and
# before it was ever run: a fresh figure for those fixes on unseen draws of the same new shapes.
SEEDS: dict[int | str, int] = {
    3: SET3_SEED, 4: 4_2026_1201, 5: 5_2026_1202, "tune5": 51_2026_1202,
    6: 6_2026_1202, "tune6": 61_2026_1202, 7: 7_2026_1202, 8: 8_2026_1202, "tune8": 81_2026_1203,
    9: 9_2026_1203, 10: 10_2026_1203, 11: 11_2026_1203, 12: 12_2026_1203,
    13: 13_2026_1203, 14: 14_2026_1204, 15: 15_2026_1204,
}
PER_FAMILY = 12
CLEAR = 1.05
MAX_WORKERS = 240
# Calls simulated per job (workers × microbatches × chunks × steps): keeps one job ≤ ~1 s here.
MAX_WORK = 40_000
DPS = [1, 2, 3, 5, 7, 10, 20, 40, 56]
PPS = [2, 5, 6, 10, 12]


@dataclass(frozen=True)
class Shapes:
    """The job shapes one set draws from (sets 3 and 4 share the first; set 5 and its tuning
    companion the second). ``deep`` are the depths of families that need a middle stage,
    ``mix_pps`` those of the multi-cause jobs, ``noise_dps`` / ``noise_pps`` those of step noise."""

    dps: tuple[int, ...] = tuple(DPS)
    pps: tuple[int, ...] = tuple(PPS)
    deep: tuple[int, ...] = (5, 6, 10, 12)
    mix_pps: tuple[int, ...] = (5, 6, 10)
    noise_dps: tuple[int, ...] = (1, 2, 3, 5, 7)
    noise_pps: tuple[int, ...] = (2, 5, 6)
    tps: tuple[int, ...] = (1, 1, 2, 8)
    cps: tuple[int, ...] = (1, 1, 1, 4)
    vpps: tuple[int, ...] = (2, 3, 5)
    gphs: tuple[int, ...] = (2, 8, 16)
    steps: tuple[int, ...] = (2, 3, 8, 10, 12)
    first_steps: tuple[int, ...] = (0, 3, 100)
    noise_steps: tuple[int, ...] = (3, 8, 10)
    long_steps: tuple[int, ...] = (3, 8, 10, 12)  # GC and job-wide stalls
    onset_steps: tuple[int, ...] = (8, 10, 12)
    cost: str = "3"  # which per-job cost draw (``_cost``): "3" for sets 3-5, "6" for set 6


SHAPES_3 = Shapes()
# Set 5's shapes: depths, DP sizes, tp, vpp, GPUs per host and step counts sets 3 and 4 never drew
# (DP 1 and 2 stay: the small-DP cases are where the noise floor is hardest to read).
SHAPES_5 = Shapes(
    dps=(1, 2, 4, 6, 9, 11, 13, 24),
    pps=(3, 4, 7, 8, 9),
    deep=(3, 4, 7, 8, 9),
    mix_pps=(3, 4, 7, 8),
    noise_dps=(1, 2, 4, 6),
    noise_pps=(2, 3, 4),
    tps=(1, 1, 4, 2),
    cps=(1, 1, 1, 2),
    vpps=(2, 4),
    gphs=(4, 8, 16),
    steps=(3, 4, 5, 6, 9),
    first_steps=(0, 7, 250),
    noise_steps=(3, 4, 6, 9),
    long_steps=(3, 4, 6, 9),
    onset_steps=(6, 7, 9),
)
# Set 6's shapes: depths, DP sizes, cp, vpp, GPUs per host, step counts and first step ids no earlier
# set drew (DP 1 and 2 and depth 2 stay beside them: small jobs are where the noise floor is
# hardest to read), and its own cost draw (``_cost``, "6").
SHAPES_6 = Shapes(
    dps=(1, 2, 8, 12, 14, 16, 30),
    pps=(2, 11, 13, 14, 16),
    deep=(11, 13, 14, 16),
    mix_pps=(11, 13, 14),
    noise_dps=(2, 8, 12, 14, 16),
    noise_pps=(1, 2, 11),
    tps=(1, 1, 2, 4),
    cps=(1, 1, 1, 8),
    vpps=(2, 6),
    gphs=(4, 8, 32),
    steps=(3, 4, 7, 11, 14),
    first_steps=(1, 13, 1000),
    noise_steps=(3, 4, 5, 7),
    long_steps=(3, 5, 7, 11),
    onset_steps=(7, 11, 14),
    cost="6",
)
SHAPES: dict[int | str, Shapes] = {
    3: SHAPES_3, 4: SHAPES_3, 5: SHAPES_5, "tune5": SHAPES_5, 6: SHAPES_6, "tune6": SHAPES_6,
    7: SHAPES_6, 8: SHAPES_6, "tune8": SHAPES_6, 9: SHAPES_6, 10: SHAPES_6, 11: SHAPES_6,
    12: SHAPES_6, 13: SHAPES_6, 14: SHAPES_6, 15: SHAPES_6,
}


@dataclass
class H3Case:
    name: str
    family: str
    spec: ScenarioSpec
    cost: CostModel
    stall: float = 0.0  # the launch stall injected, seconds (0 = none)


def _cost(rng: random.Random, style: str = "3") -> CostModel:
    """A cost model unlike the default: other layer counts, layer times, backward ratios, noise.
    Style "6" (set 6) draws from wider ranges the earlier sets never used: 3, 5, 10 or 16 layers
    per stage, 2-25 ms per layer, backward 1.5-2.6x, op sigma 0.5-3.5%, worker sigma 0.1-1%."""
    if style == "6":
        return CostModel(
            layers_per_middle_stage=rng.choice([3, 5, 10, 16]),
            layer_fwd=round(math.exp(rng.uniform(math.log(2e-3), math.log(25e-3))), 5),
            bwd_ratio=round(rng.uniform(1.5, 2.6), 2),
            op_sigma=round(rng.uniform(0.005, 0.035), 4),
            worker_sigma=round(rng.uniform(0.001, 0.01), 4),
        )
    return CostModel(
        layers_per_middle_stage=rng.choice([4, 6, 8, 12]),
        layer_fwd=round(math.exp(rng.uniform(math.log(3e-3), math.log(15e-3))), 5),
        bwd_ratio=round(rng.uniform(1.6, 2.4), 2),
        op_sigma=round(rng.uniform(0.008, 0.03), 4),
        worker_sigma=round(rng.uniform(0.002, 0.008), 4),
    )


def _step_estimate(kw: dict[str, object], cost: CostModel) -> float:
    """Rough healthy step time (seconds): the pipeline's fwd+bwd critical path, for sizing
    time-valued causes as a fraction of the job's own step."""
    pp, mb = int(kw["pp"]), int(kw["microbatches"])  # type: ignore[call-overload]
    per_mb = cost.layers_per_middle_stage * cost.layer_fwd * (1.0 + cost.bwd_ratio)
    return (mb + pp - 1) * per_mb


def _layout(
    rng: random.Random,
    *,
    dps: list[int] | tuple[int, ...] | None = None,
    pps: list[int] | tuple[int, ...] | None = None,
    min_dp: int = 1,
    steps: list[int] | tuple[int, ...] | None = None,
    shapes: Shapes = SHAPES_3,
) -> dict[str, object]:
    """Sizes, schedule, tp/cp, hosts, microbatches and steps of one job."""
    while True:
        dp, pp = rng.choice(dps or shapes.dps), rng.choice(pps or shapes.pps)
        if dp >= min_dp and dp * pp <= MAX_WORKERS:
            break
    sched = rng.choices([Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED, Schedule.GPIPE], [0.45, 0.3, 0.25])[0]
    if pp < 2:
        sched = Schedule.ONE_F_ONE_B
    vpp = rng.choice(shapes.vpps) if sched is Schedule.INTERLEAVED else 1
    mb = (
        pp * rng.randint(1, 3)
        if sched is Schedule.INTERLEAVED
        else rng.choice([pp + 1, 2 * pp + 1, 3 * pp, 24])
    )
    n_steps = rng.choice(steps or shapes.steps)
    while dp * pp * mb * vpp * n_steps > MAX_WORK and n_steps > 3:
        n_steps -= 1
    while dp * pp * mb * vpp * n_steps > MAX_WORK and mb > pp:
        mb -= pp if sched is Schedule.INTERLEAVED else 1
    return {
        "dp": dp,
        "pp": pp,
        "tp": rng.choice(shapes.tps),
        "cp": rng.choice(shapes.cps),
        "vpp": vpp,
        "schedule": sched,
        "microbatches": mb,
        "steps": n_steps,
        "first_step": rng.choice(shapes.first_steps),
        "gpus_per_host": rng.choice(shapes.gphs),
        "seed": rng.randint(10**6, 10**7),
    }


def _worker(rng: random.Random, kw: dict[str, object]) -> tuple[int, int]:
    return rng.randrange(int(kw["dp"])), rng.randrange(int(kw["pp"]))  # type: ignore[call-overload]


def _host(rng: random.Random, kw: dict[str, object]) -> int | None:
    """A host holding a traced rank that is neither the whole job nor exactly one whole PP stage
    (a slow host that is exactly a stage is the picture of a heavier stage: ambiguous by design,
    see docs/ACCURACY.md "What still misses"); None when the layout has no such host."""
    dp, pp = int(kw["dp"]), int(kw["pp"])  # type: ignore[call-overload]
    tc, gph = int(kw["tp"]) * int(kw["cp"]), int(kw["gpus_per_host"])  # type: ignore[call-overload]
    hosts: dict[int, set[tuple[int, int]]] = defaultdict(set)
    for s in range(pp):
        for d in range(dp):
            hosts[tc * (d + dp * s) // gph].add((d, s))
    ok = [
        h
        for h, cells in hosts.items()
        if len(hosts) > 1
        and len(cells) < dp * pp
        and not (len(cells) == dp and len({s for _, s in cells}) == 1)
    ]
    return rng.choice(sorted(ok)) if ok else None


def _frac(rng: random.Random, kw: dict[str, object], cost: CostModel, lo: float, hi: float) -> float:
    """A duration of ``lo``..``hi`` times the job's estimated step (seconds, 4 digits)."""
    return round(rng.uniform(lo, hi) * _step_estimate(kw, cost), 4)


def _spec(scenarios: list[Scenario], magnitude: float, kw: dict[str, object], **more: object) -> ScenarioSpec:
    return ScenarioSpec(scenarios=scenarios, magnitude=magnitude, **kw, **more)  # type: ignore[arg-type]


def _one(family: str, rng: random.Random, sh: Shapes = SHAPES_3) -> tuple[ScenarioSpec, CostModel, float]:
    """One job of ``family`` on the shapes ``sh``: its spec, cost model and launch stall (seconds,
    0 if none)."""
    cost = _cost(rng, sh.cost)
    stall = 0.0
    if family in SET6_NEW:
        return _one6(family, rng, sh, cost)
    if family in ("healthy-mild-gpu", "healthy-step-noise-mild-gpu"):
        # Heavy per-op noise (or step noise) and one GPU 1.5-3.5% slower than its peers: the spread
        # of a healthy fleet, which no faulty-machine finding may name (not labelled).
        kw = _layout(rng, dps=(2, 3, 4, 6, 9), pps=(2, 3, 4, 7), shapes=sh)
        if family == "healthy-mild-gpu":
            noise: dict[str, object] = {
                "op_sigma": round(rng.uniform(0.03, 0.06), 4),
                "worker_sigma": round(rng.uniform(0.008, 0.02), 4),
                "tail_prob": round(rng.uniform(0.002, 0.01), 4),
            }
        else:
            noise = {"step_sigma": round(rng.uniform(0.15, 0.25), 3)}
        noise["mild_worker"] = _worker(rng, kw)
        noise["mild_factor"] = round(rng.uniform(1.015, 1.035), 4)
        return ScenarioSpec(**kw), cost.model_copy(update=noise), stall  # type: ignore[arg-type]
    if family == "job-stall-small":
        # A job-wide stall in a job of two to four workers and a short window (some under step
        # noise): too few workers and steps for the pauses' spread to say "collector".
        kw = _layout(rng, dps=(1, 2), pps=(1, 2), steps=(3, 4, 5), shapes=sh)
        if int(kw["dp"]) * int(kw["pp"]) == 1:  # type: ignore[call-overload]
            kw["dp"] = 2  # one worker has no "job" to stall beside it
        kw["stall_step"] = int(kw["first_step"]) + rng.randrange(int(kw["steps"]))  # type: ignore[call-overload]
        if rng.random() < 0.5:
            cost = cost.model_copy(update={"step_sigma": round(rng.uniform(0.1, 0.3), 3)})
        return _spec([S.JOB_STALL], _frac(rng, kw, cost, 0.1, 0.8), kw), cost, stall
    if family == "healthy-noisy":
        kw = _layout(rng, shapes=sh)
        cost = cost.model_copy(
            update={
                "op_sigma": round(rng.uniform(0.03, 0.07), 4),
                "worker_sigma": round(rng.uniform(0.005, 0.02), 4),
                "tail_prob": round(rng.uniform(0.002, 0.015), 4),
                "tail_scale": round(rng.uniform(0.15, 0.4), 3),
                "hiccup_prob": round(rng.uniform(0.002, 0.015), 4),
                "link_sigma": round(rng.uniform(0.03, 0.1), 3),
            }
        )
        return ScenarioSpec(**kw), cost, stall  # type: ignore[arg-type]
    if family == "healthy-step-noise":
        kw = _layout(rng, dps=sh.noise_dps, pps=sh.noise_pps, steps=sh.noise_steps, shapes=sh)
        cost = cost.model_copy(update={"step_sigma": round(rng.uniform(0.15, 0.25), 3)})
        return ScenarioSpec(**kw), cost, stall  # type: ignore[arg-type]
    if family == "stage-last":
        kw = _layout(rng, shapes=sh)
        return _spec([S.STAGE_IMBALANCE], round(rng.uniform(1.15, 2.4), 3), kw), cost, stall
    if family == "stage-first":
        kw = _layout(rng, shapes=sh)
        return _spec([S.STAGE_IMBALANCE_FIRST], round(rng.uniform(1.15, 2.0), 3), kw), cost, stall
    if family == "stage-layers":
        kw = _layout(rng, pps=sh.deep, shapes=sh)
        if rng.random() < 0.5:  # host-aligned: one stage is exactly one host
            gph = rng.choice([8, 16])
            kw["tp"], kw["cp"] = (
                rng.choice([(1, 1), (2, 1), (8, 1), (2, 4)])
                if gph == 16
                else rng.choice([(1, 1), (2, 1), (8, 1)])
            )
            kw["dp"] = max(1, gph // (int(kw["tp"]) * int(kw["cp"])))  # type: ignore[call-overload]
            kw["gpus_per_host"] = gph
        kw["heavy_stage"] = rng.randrange(1, int(kw["pp"]) - 1)  # type: ignore[call-overload]
        return _spec([S.STAGE_IMBALANCE_LAYERS], round(rng.uniform(1.2, 2.0), 3), kw), cost, stall
    if family == "seqlen":
        kw = _layout(rng, min_dp=2, shapes=sh)
        return _spec([S.SEQUENCE_LENGTH_IMBALANCE], round(rng.uniform(10.0, 64.0), 1), kw), cost, stall
    if family == "gc":
        kw = _layout(rng, steps=sh.long_steps, shapes=sh)
        growing = rng.random() < 0.5
        return _spec([S.GC_PAUSE], _frac(rng, kw, cost, 0.05, 0.6), kw, gc_growing=growing), cost, stall
    if family in ("faulty-weak", "faulty-strong"):
        kw = _layout(rng, min_dp=2, shapes=sh)
        kw["worker"] = _worker(rng, kw)
        lo, hi = (1.08, 1.4) if family == "faulty-weak" else (1.8, 4.0)
        return _spec([S.FAULTY_MACHINE], round(rng.uniform(lo, hi), 3), kw), cost, stall
    if family == "faulty-onset":
        kw = _layout(rng, min_dp=2, steps=sh.onset_steps, shapes=sh)
        kw["steps"] = max(int(kw["steps"]), 6)  # type: ignore[call-overload]
        kw["worker"] = _worker(rng, kw)
        kw["onset_step"] = int(kw["first_step"]) + rng.randint(2, int(kw["steps"]) - 2)  # type: ignore[call-overload]
        return _spec([S.FAULTY_MACHINE], round(rng.uniform(1.3, 3.0), 3), kw), cost, stall
    if family == "faulty-host":
        while True:
            kw = _layout(rng, min_dp=2, shapes=sh)
            host = _host(rng, kw)
            if host is not None:
                break
        kw["host"] = host
        return _spec([S.FAULTY_MACHINE], round(rng.uniform(1.2, 3.0), 3), kw), cost, stall
    if family == "slow-link":
        kw = _layout(rng, shapes=sh)
        return _spec([S.SLOW_COMMUNICATION], round(rng.uniform(3.0, 30.0), 2), kw), cost, stall
    if family == "slow-nic":
        while True:
            kw = _layout(rng, min_dp=2, shapes=sh)
            if rng.random() < 0.5:
                kw["worker"] = _worker(rng, kw)
                break
            host = _host(rng, kw)
            if host is not None:
                kw["host"] = host
                break
        return _spec([S.SLOW_COMMUNICATION], round(rng.uniform(3.0, 30.0), 2), kw), cost, stall
    if family == "slow-dp-group":
        kw = _layout(rng, min_dp=2, shapes=sh)
        kw["worker"] = _worker(rng, kw)
        return _spec([S.SLOW_DP_GROUP], round(rng.uniform(2.0, 12.0), 2), kw), cost, stall
    if family == "dataloader":
        kw = _layout(rng, shapes=sh)
        stall = _frac(rng, kw, cost, 0.03, 0.4)
        return _spec([S.DATALOADER_STALL], stall, kw), cost, stall
    if family == "job-stall":
        kw = _layout(rng, steps=sh.long_steps, shapes=sh)
        kw["stall_step"] = int(kw["first_step"]) + rng.randrange(int(kw["steps"]))  # type: ignore[call-overload]
        return _spec([S.JOB_STALL], _frac(rng, kw, cost, 0.1, 0.8), kw), cost, stall
    if family == "faulty-on-heavy":
        kw = _layout(rng, min_dp=2, pps=sh.deep, shapes=sh)
        heavy = rng.choice([S.STAGE_IMBALANCE, S.STAGE_IMBALANCE_FIRST, S.STAGE_IMBALANCE_LAYERS])
        stage = {S.STAGE_IMBALANCE: int(kw["pp"]) - 1, S.STAGE_IMBALANCE_FIRST: 0}.get(  # type: ignore[call-overload]
            heavy,
            rng.randrange(1, int(kw["pp"]) - 1),  # type: ignore[call-overload]
        )
        if heavy is S.STAGE_IMBALANCE_LAYERS:
            kw["heavy_stage"] = stage
        kw["worker"] = (rng.randrange(int(kw["dp"])), stage)  # type: ignore[call-overload]
        mags = {heavy: round(rng.uniform(1.3, 2.0), 3), S.FAULTY_MACHINE: round(rng.uniform(1.5, 3.0), 3)}
        return ScenarioSpec(scenarios=[heavy, S.FAULTY_MACHINE], magnitudes=mags, **kw), cost, stall  # type: ignore[arg-type]
    raise ValueError(family)  # pragma: no cover - FAMILIES is closed


# Set 6's new families: healthy jobs under heavy step noise over few steps (more workers, so the
# slowest of them stands further out by chance), healthy jobs under step *bursts* (a worker loses
# its cores for a step now and then: ``CostModel.step_burst_prob``), and weak real slow machines
# under the same two noises, so that a rule which quiets the healthy ones is also asked to keep
# the real ones.
SET6_NEW = (
    "healthy-step-noise-few",
    "healthy-step-bursts",
    "faulty-weak-step-noise",
    "faulty-weak-bursts",
)


def _bursts(rng: random.Random) -> dict[str, object]:
    """Step bursts: 5-25% of (step, worker) pairs 1.25-1.9x, with a little step noise beside."""
    lo = round(rng.uniform(0.25, 0.5), 3)
    return {
        "step_burst_prob": round(rng.uniform(0.05, 0.25), 3),
        "step_burst": (lo, round(lo + rng.uniform(0.1, 0.4), 3)),
        "step_sigma": round(rng.uniform(0.0, 0.08), 3),
    }


def _one6(
    family: str, rng: random.Random, sh: Shapes, cost: CostModel
) -> tuple[ScenarioSpec, CostModel, float]:
    """One job of a family new in set 6 (``SET6_NEW``)."""
    if family == "healthy-step-noise-few":
        kw = _layout(rng, dps=sh.noise_dps, pps=sh.noise_pps, steps=(3, 4, 5), shapes=sh)
        cost = cost.model_copy(update={"step_sigma": round(rng.uniform(0.18, 0.3), 3)})
        return ScenarioSpec(**kw), cost, 0.0  # type: ignore[arg-type]
    if family == "healthy-step-bursts":
        kw = _layout(rng, dps=sh.noise_dps, pps=sh.noise_pps, steps=sh.noise_steps, shapes=sh)
        return ScenarioSpec(**kw), cost.model_copy(update=_bursts(rng)), 0.0  # type: ignore[arg-type]
    kw = _layout(rng, min_dp=2, dps=sh.noise_dps, pps=sh.noise_pps, steps=(4, 5, 7, 11), shapes=sh)
    kw["worker"] = _worker(rng, kw)
    if family == "faulty-weak-step-noise":
        cost = cost.model_copy(update={"step_sigma": round(rng.uniform(0.1, 0.25), 3)})
    else:
        cost = cost.model_copy(update=_bursts(rng))
    return _spec([S.FAULTY_MACHINE], round(rng.uniform(1.15, 1.6), 3), kw), cost, 0.0


MIX_POOL = [
    S.STAGE_IMBALANCE,
    S.STAGE_IMBALANCE_FIRST,
    S.STAGE_IMBALANCE_LAYERS,
    S.SEQUENCE_LENGTH_IMBALANCE,
    S.GC_PAUSE,
    S.FAULTY_MACHINE,
    S.SLOW_COMMUNICATION,
    S.SLOW_DP_GROUP,
    S.DATALOADER_STALL,
]
STAGES = {S.STAGE_IMBALANCE, S.STAGE_IMBALANCE_FIRST, S.STAGE_IMBALANCE_LAYERS}


def _mix(rng: random.Random, n_causes: int, sh: Shapes = SHAPES_3) -> tuple[ScenarioSpec, CostModel, float]:
    """A job with ``n_causes`` causes, each with its own magnitude (weak to strong)."""
    cost = _cost(rng, sh.cost)
    kw = _layout(rng, min_dp=2, pps=sh.mix_pps, shapes=sh)
    while True:
        mix = rng.sample(MIX_POOL, n_causes)
        # One partition per job; one slot for the placed worker: a faulty machine and a slow DP
        # group both read ``worker``, and a slow link becomes that worker's NIC when it is set.
        placed = {S.FAULTY_MACHINE, S.SLOW_DP_GROUP, S.SLOW_COMMUNICATION} & set(mix)
        if len(STAGES & set(mix)) <= 1 and len(placed) <= 1:
            break
    mags: dict[Scenario, float] = {}
    stall = 0.0
    for sc in mix:
        if sc in (S.STAGE_IMBALANCE, S.STAGE_IMBALANCE_FIRST):
            mags[sc] = round(rng.uniform(1.15, 2.2), 3)
        elif sc is S.STAGE_IMBALANCE_LAYERS:
            kw["heavy_stage"] = rng.randrange(1, int(kw["pp"]) - 1)  # type: ignore[call-overload]
            mags[sc] = round(rng.uniform(1.2, 2.0), 3)
        elif sc is S.SEQUENCE_LENGTH_IMBALANCE:
            mags[sc] = round(rng.uniform(12.0, 64.0), 1)
        elif sc is S.GC_PAUSE:
            mags[sc] = _frac(rng, kw, cost, 0.05, 0.5)
        elif sc in (S.FAULTY_MACHINE, S.SLOW_DP_GROUP):
            kw["worker"] = _worker(rng, kw)
            mags[sc] = (
                round(rng.uniform(1.15, 3.0), 3)
                if sc is S.FAULTY_MACHINE
                else round(rng.uniform(2.0, 10.0), 2)
            )
        elif sc is S.SLOW_COMMUNICATION:
            mags[sc] = round(rng.uniform(3.0, 30.0), 2)
        elif sc is S.DATALOADER_STALL:
            stall = mags[sc] = _frac(rng, kw, cost, 0.05, 0.3)
    return ScenarioSpec(scenarios=mix, magnitudes=mags, **kw), cost, stall  # type: ignore[arg-type]


FAMILIES = [
    "healthy-noisy",
    "healthy-step-noise",
    "stage-last",
    "stage-first",
    "stage-layers",
    "seqlen",
    "gc",
    "faulty-weak",
    "faulty-strong",
    "faulty-onset",
    "faulty-host",
    "slow-link",
    "slow-nic",
    "slow-dp-group",
    "dataloader",
    "job-stall",
    "faulty-on-heavy",
]
MIX_JOBS = {2: 18, 3: 6}
# Set 5 (and its tuning companion) add three healthy families: with job-stall and the two healthy
# families above, 72 healthy jobs of varied noise.
FAMILIES_5 = [*FAMILIES, "healthy-mild-gpu", "job-stall-small", "healthy-step-noise-mild-gpu"]
# Set 6 (and its tuning companion) add four: 96 healthy jobs of 312, 36 weak machines under noise.
FAMILIES_6 = [*FAMILIES_5, *SET6_NEW]
SET_FAMILIES: dict[int | str, list[str]] = {
    3: FAMILIES, 4: FAMILIES, 5: FAMILIES_5, "tune5": FAMILIES_5, 6: FAMILIES_6, "tune6": FAMILIES_6,
    7: FAMILIES_6, 8: FAMILIES_6, "tune8": FAMILIES_6, 9: FAMILIES_6, 10: FAMILIES_6, 11: FAMILIES_6,
    12: FAMILIES_6, 13: FAMILIES_6, 14: FAMILIES_6, 15: FAMILIES_6,
}


def set3_cases(which: int | str = 3) -> list[H3Case]:
    """The fixed list ``which`` (3, 4, 5, "tune5", 6, "tune6", 7, 8, "tune8", 9, 10,
    11, 12, 13, 14 or 15): every family's jobs,
    then the mixes (deterministic in ``SEEDS[which]``, on ``SHAPES[which]``)."""
    seed, sh = SEEDS[which], SHAPES[which]
    cases: list[H3Case] = []
    for k, fam in enumerate(SET_FAMILIES[which]):
        rng = random.Random(seed * 100 + k)
        for i in range(PER_FAMILY):
            spec, cost, stall = _one(fam, rng, sh)
            cases.append(H3Case(f"{fam}-{i}", fam, spec, cost, stall))
    for n, count in MIX_JOBS.items():
        rng = random.Random(seed * 100 + 50 + n)
        for i in range(count):
            spec, cost, stall = _mix(rng, n, sh)
            cases.append(
                H3Case(
                    f"mix{n}-{'+'.join(s.value for s in spec.scenarios)}-{i}", f"mix{n}", spec, cost, stall
                )
            )
    return cases


def subset(n_per_family: int, which: int | str = 3) -> list[H3Case]:
    """The first ``n_per_family`` jobs of every family and mix group (a fast slice for tests)."""
    seen: dict[str, int] = defaultdict(int)
    out = []
    for c in set3_cases(which):
        if seen[c.family] < n_per_family:
            out.append(c)
            seen[c.family] += 1
    return out


@dataclass
class H3Outcome:
    case: H3Case
    clear: bool
    healthy: bool
    top1_ok: bool
    found: int
    wanted: int
    false_machine_or_gc: bool
    got: list[tuple[str, float, list[int], str | None]] = field(default_factory=list)
    labels: list[tuple[str, list[int], float | None]] = field(default_factory=list)
    slowdown: float = 1.0
    true_slowdown: float = 1.0


def _label_clear(job: GeneratedJob, case: H3Case, i: int) -> bool:
    """A labelled cause is clear when it alone slows the job ≥ 5%; a launch stall (no compute
    slowdown of its own) when the recorded step is ≥ 5% longer than it would be without it."""
    lab = job.labels.causes[i]
    if lab.id == CauseId.DATALOADER_STALL:
        return job.step_time >= CLEAR * max(job.step_time - case.stall, 1e-9)
    return lab.slowdown_alone is not None and lab.slowdown_alone >= CLEAR


def _at(job: GeneratedJob, cause: object, i: int) -> bool:
    lab = job.labels.causes[i]
    c = cause
    return (
        c.id == lab.id  # type: ignore[attr-defined]
        and location_ok(lab.id, lab.location, c.location)  # type: ignore[attr-defined]
        and (lab.pattern.temporal != Temporal.ONSET or c.pattern.temporal == Temporal.ONSET)  # type: ignore[attr-defined]
    )


def score(case: H3Case, job: GeneratedJob, diag: Diagnosis) -> H3Outcome:
    """Score one job (rules in the module docstring)."""
    labels = job.labels.causes
    healthy = not labels
    clear_i = [i for i in range(len(labels)) if _label_clear(job, case, i)]
    machine_or_gc = any(c.id in (CauseId.FAULTY_MACHINE, CauseId.GC_PAUSE) for c in diag.causes)
    if healthy:
        clear = True
        top1 = not machine_or_gc if job.labels.job_stall_steps else not diag.causes
        found = wanted = 0
    else:
        clear = len(clear_i) == len(labels)
        top1 = bool(diag.causes) and any(_at(job, diag.causes[0], i) for i in range(len(labels)))
        wanted = len(clear_i)
        found = sum(any(_at(job, c, i) for c in diag.causes) for i in clear_i)
    named = {lab.id for lab in labels}
    false_mg = any(
        c.id in (CauseId.FAULTY_MACHINE, CauseId.GC_PAUSE) and c.id not in named for c in diag.causes
    )
    return H3Outcome(
        case=case,
        clear=clear,
        healthy=healthy,
        top1_ok=top1,
        found=found,
        wanted=wanted,
        false_machine_or_gc=false_mg or (healthy and machine_or_gc),
        got=[(c.id.value, c.confidence, c.location.ranks[:6], c.pattern.temporal) for c in diag.causes],
        labels=[(lab.id.value, lab.location.ranks[:6], lab.slowdown_alone) for lab in labels],
        slowdown=diag.slowdown,
        true_slowdown=job.true_slowdown,
    )


def bad(o: H3Outcome) -> bool:
    return (o.clear and not o.top1_ok) or o.false_machine_or_gc or o.found < o.wanted


def run(cases: list[H3Case], verbose: bool = False) -> list[H3Outcome]:
    out = []
    for case in cases:
        job = generate(case.spec, case.cost)
        o = score(case, job, diagnose(job.trace))
        out.append(o)
        if verbose or bad(o):
            print(
                f"  {'BAD' if bad(o) else 'ok '} {case.name:40s} S={o.slowdown:.3f} "
                f"true={o.true_slowdown:.3f} "
                f"clear={o.clear} labels={o.labels} got={o.got} recall={o.found}/{o.wanted}",
                file=sys.stderr,
            )
    return out


def summarize(outcomes: list[H3Outcome]) -> dict[str, object]:
    """Top-1 on clear cases, multi-cause recall, healthy false machine/GC; per family; misses."""
    clear = [o for o in outcomes if o.clear]
    multi = [o for o in outcomes if len(o.case.spec.scenarios) > 1 and o.wanted]
    healthy = [o for o in outcomes if o.healthy]
    fam: dict[str, list[H3Outcome]] = defaultdict(list)
    for o in outcomes:
        fam[o.case.family].append(o)
    return {
        "jobs": len(outcomes),
        "clear_jobs": len(clear),
        "top1_clear": sum(o.top1_ok for o in clear) / max(len(clear), 1),
        "top1_clear_right": sum(o.top1_ok for o in clear),
        "multi_cause_jobs": len(multi),
        "multi_cause_recall": sum(o.found for o in multi) / max(sum(o.wanted for o in multi), 1),
        "multi_cause_found": f"{sum(o.found for o in multi)} of {sum(o.wanted for o in multi)}",
        "healthy_jobs": len(healthy),
        "healthy_with_faulty_or_gc": sum(o.false_machine_or_gc for o in healthy),
        "false_faulty_or_gc_anywhere": sum(o.false_machine_or_gc for o in outcomes),
        "by_family": {
            k: {
                "jobs": len(v),
                "clear": sum(o.clear for o in v),
                "top1_clear": round(
                    sum(o.top1_ok for o in v if o.clear) / max(sum(o.clear for o in v), 1), 3
                ),
                "recall": round(sum(o.found for o in v) / max(sum(o.wanted for o in v), 1), 3),
            }
            for k, v in fam.items()
        },
        "misses": [
            f"{o.case.name}: S={o.slowdown:.3f} true={o.true_slowdown:.3f} clear={o.clear} labels {o.labels} "
            f"got {o.got} recall {o.found}/{o.wanted}"
            for o in outcomes
            if bad(o)
        ],
    }


def print_summary(summary: dict[str, object]) -> None:
    """The figures, then one line per family."""
    top1, recall = float(summary["top1_clear"]), float(summary["multi_cause_recall"])  # type: ignore[arg-type]
    print(f"held-out set {summary.get('set', 3)}: {summary['jobs']} jobs, {summary['clear_jobs']} clear")
    print(f"{'top1_clear':28s} {top1:.3f} ({summary['top1_clear_right']} of {summary['clear_jobs']})")
    print(f"{'multi_cause_recall':28s} {recall:.3f} ({summary['multi_cause_found']})")
    print(f"{'multi_cause_jobs':28s} {summary['multi_cause_jobs']}")
    healthy = f"{summary['healthy_with_faulty_or_gc']} of {summary['healthy_jobs']}"
    print(f"{'healthy_with_faulty_or_gc':28s} {healthy}")
    print(f"{'false_faulty_or_gc_anywhere':28s} {summary['false_faulty_or_gc_anywhere']}")
    for k, v in summary["by_family"].items():  # type: ignore[attr-defined]
        print(
            f"family {k:20s} jobs {v['jobs']:3d} clear {v['clear']:3d} "
            f"top-1 {v['top1_clear']:.3f} recall {v['recall']:.3f}"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", help="run only this family (or mix2 / mix3)")
    ap.add_argument("--subset", type=int, help="only the first N jobs of every family")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument(
        "--set", default="3", choices=[str(k) for k in SEEDS],
        help="set 3, set 4 (other seed), set 5 (other seed and shapes), tune5 (set 5's tuning "
        "companion), set 6 (other seeds, shapes, costs and noise), tune6 (its tuning companion) "
        "or sets 7, 8, tune8, 9, 10, 11, 12, 13, 14 and 15 (set 6's draw, fresh seeds)",
    )
    args = ap.parse_args(argv)
    which: int | str = int(args.set) if args.set.isdigit() else args.set
    cases = subset(args.subset, which) if args.subset else set3_cases(which)
    if args.family:
        cases = [c for c in cases if c.family == args.family]
    if args.list:
        for c in cases:
            print(
                c.name,
                c.spec.model_dump_json(exclude_defaults=True),
                c.cost.model_dump_json(exclude_defaults=True),
            )
        return 0
    t0, c0 = time.perf_counter(), time.process_time()
    summary = summarize(run(cases, args.verbose))
    summary["set"] = which
    summary["wall_seconds"] = round(time.perf_counter() - t0, 1)
    summary["cpu_seconds"] = round(time.process_time() - c0, 1)
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print_summary(summary)
    print(f"wall {summary['wall_seconds']} s, CPU {summary['cpu_seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
