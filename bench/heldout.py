"""Held-out diagnosis check: synthetic jobs drawn on purpose unlike the tuning corpus.

``bench/accuracy.py`` scores the corpus and grid the detectors were written against. This harness
draws a *different* set, fixed before any result was looked at (seed ``HELDOUT_SEED``, list built by
:func:`heldout_cases`; do not edit it to chase results — add a new, separately named set instead):

- sizes dp 4..64 × pp 2..8 (at most 256 traced workers), microbatch counts 1–4× pp, 3–6 steps;
- schedules 1F1B, interleaved (vpp 2–4) and GPipe; tp ∈ {1, 2, 4}, cp ∈ {1, 2}; 4 or 8 GPUs per host;
- every cause at a magnitude drawn uniformly from weak to strong, the faulty worker or slow host
  placed anywhere (middle stages included), GC pauses plain or growing;
- two-cause combinations, and healthy jobs with heavier noise than the tuning set's (op σ up to 8%,
  worker σ up to 2%, up to 2% heavy-tailed ops, launch hiccups).

Scoring is ``bench/accuracy.py``'s (top-1, location, false alarms, "below threshold" when the
generator's own slowdown is under 1.03). Prints the same tables plus per-family results.

    .venv/bin/python bench/heldout.py [--set 1|2] [--json] [--verbose] [--family NAME]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from accuracy import Case, print_summary, run, summarize

from diagnosers.synth import CostModel, Scenario, ScenarioSpec, Schedule

S = Scenario
HELDOUT_SEED = 20261129
# A second list from another seed, defined after the first set had been used to fix detectors and
# before it was ever run: the untouched held-out number (``--set 2``).
HELDOUT_SEEDS = {1: HELDOUT_SEED, 2: 733_1129}
MAX_WORKERS = 256

# Magnitude ranges, weak to strong (the generator's meaning of --magnitude per scenario).
MAGNITUDE: dict[Scenario, tuple[float, float]] = {
    S.STAGE_IMBALANCE: (1.3, 2.6),
    S.STAGE_IMBALANCE_FIRST: (1.25, 2.0),
    S.SEQUENCE_LENGTH_IMBALANCE: (12.0, 64.0),
    S.GC_PAUSE: (0.08, 0.6),
    S.FAULTY_MACHINE: (1.2, 3.0),
    S.SLOW_COMMUNICATION: (3.0, 30.0),
    S.DATALOADER_STALL: (0.08, 0.8),
}

# Families: (name, scenarios, extra spec fields); "host"/"worker" are placed at draw time.
FAMILIES: list[tuple[str, list[Scenario], dict[str, object]]] = [
    ("healthy", [S.NONE], {}),
    ("stage-last", [S.STAGE_IMBALANCE], {}),
    ("stage-first", [S.STAGE_IMBALANCE_FIRST], {}),
    ("seqlen", [S.SEQUENCE_LENGTH_IMBALANCE], {}),
    ("gc", [S.GC_PAUSE], {}),
    ("gc-growing", [S.GC_PAUSE], {"gc_growing": True}),
    ("faulty-worker", [S.FAULTY_MACHINE], {"worker": True}),
    ("faulty-host", [S.FAULTY_MACHINE], {"host": True}),
    ("slow-link", [S.SLOW_COMMUNICATION], {}),
    ("slow-worker-nic", [S.SLOW_COMMUNICATION], {"worker": True}),
    ("slow-host-nic", [S.SLOW_COMMUNICATION], {"host": True}),
    ("dataloader", [S.DATALOADER_STALL], {}),
]
PER_FAMILY = 8

MIXES: list[list[Scenario]] = [
    [S.STAGE_IMBALANCE, S.GC_PAUSE],
    [S.STAGE_IMBALANCE_FIRST, S.FAULTY_MACHINE],
    [S.SEQUENCE_LENGTH_IMBALANCE, S.GC_PAUSE],
    [S.FAULTY_MACHINE, S.DATALOADER_STALL],
    [S.SLOW_COMMUNICATION, S.DATALOADER_STALL],
    [S.SEQUENCE_LENGTH_IMBALANCE, S.STAGE_IMBALANCE],
]
PER_MIX = 2
NOISY = 16


def _layout(rng: random.Random, small: bool = False) -> dict[str, object]:
    """A random job layout: sizes, schedule, tp/cp, hosts, microbatches, steps."""
    while True:
        dp = rng.choice([4, 6, 8, 12, 16, 24, 32, 48, 64] if not small else [4, 6, 8, 12, 16])
        pp = rng.randint(2, 8)
        if dp * pp <= MAX_WORKERS:
            break
    sched = rng.choices(
        [Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED, Schedule.GPIPE], weights=[0.5, 0.3, 0.2]
    )[0]
    vpp = rng.randint(2, 4) if sched is Schedule.INTERLEAVED else 1
    mb = pp * rng.randint(1, 4) if sched is Schedule.INTERLEAVED else rng.choice([pp, pp + 2, 2 * pp, 12, 16])
    if dp * pp * mb * vpp > 8192:  # keep one job at most a few seconds
        mb = max(pp, 8192 // (dp * pp * vpp) // pp * pp) if sched is Schedule.INTERLEAVED else max(4, pp)
    return {
        "dp": dp,
        "pp": pp,
        "tp": rng.choice([1, 1, 2, 4]),
        "cp": rng.choice([1, 1, 2]),
        "vpp": vpp,
        "schedule": sched,
        "microbatches": mb,
        "steps": rng.randint(3, 6),
        "gpus_per_host": rng.choice([4, 8]),
        "seed": rng.randint(1000, 10**6),
    }


def _place(rng: random.Random, kw: dict[str, object], extra: dict[str, object]) -> None:
    dp, pp = int(kw["dp"]), int(kw["pp"])  # type: ignore[call-overload]
    if extra.get("worker"):
        kw["worker"] = (rng.randrange(dp), rng.randrange(pp))
    if extra.get("host"):
        tc, gph = int(kw["tp"]) * int(kw["cp"]), int(kw["gpus_per_host"])  # type: ignore[call-overload]
        n_hosts = -(-dp * pp * tc // gph)
        # Only hosts holding a traced rank (tp*cp may exceed a host); redraw otherwise, so the
        # draws of lists that never hit such a host are unchanged.
        traced = {tc * w // gph for w in range(dp * pp)}
        host = rng.randrange(n_hosts)
        while host not in traced:
            host = rng.randrange(n_hosts)
        kw["host"] = host
    if extra.get("gc_growing"):
        kw["gc_growing"] = True


def heldout_cases(which: int = 1) -> list[Case]:
    """The fixed held-out list ``which`` (deterministic in ``HELDOUT_SEEDS[which]``)."""
    rng = random.Random(HELDOUT_SEEDS[which])
    cases: list[Case] = []
    for name, scen, extra in FAMILIES:
        for i in range(PER_FAMILY):
            kw = _layout(rng)
            _place(rng, kw, extra)
            if "host" in extra and int(kw["dp"]) * int(kw["pp"]) * int(kw["tp"]) * int(kw["cp"]) <= int(  # type: ignore[call-overload]
                kw["gpus_per_host"]  # type: ignore[call-overload]
            ):
                kw["gpus_per_host"] = 4  # a host needs a second host to stand out from
            lo, hi = MAGNITUDE.get(scen[0], (0.0, 0.0))
            mag = round(rng.uniform(lo, hi), 3) if scen[0] is not S.NONE else None
            spec = ScenarioSpec(scenarios=scen, magnitude=mag, **kw)  # type: ignore[arg-type]
            cases.append(Case(f"{name}-{i}", spec, group=name))
    for j, mix in enumerate(MIXES):
        for i in range(PER_MIX):
            kw = _layout(rng, small=True)
            if S.FAULTY_MACHINE in mix:
                _place(rng, kw, {"worker": True})
            # One magnitude per job applies to each cause: use each cause's default.
            spec = ScenarioSpec(scenarios=mix, **kw)  # type: ignore[arg-type]
            cases.append(Case(f"mix{j}-{'+'.join(m.value for m in mix)}-{i}", spec, group="mixed"))
    for i in range(NOISY):
        kw = _layout(rng)
        noise = CostModel(
            op_sigma=round(rng.uniform(0.03, 0.08), 4),
            worker_sigma=round(rng.uniform(0.005, 0.02), 4),
            tail_prob=round(rng.uniform(0.002, 0.02), 4),
            tail_scale=round(rng.uniform(0.15, 0.4), 3),
            hiccup_prob=round(rng.uniform(0.002, 0.02), 4),
            link_sigma=round(rng.uniform(0.03, 0.1), 3),
        )
        cases.append(Case(f"noisy-healthy-{i}", ScenarioSpec(**kw), noise, group="noise"))  # type: ignore[arg-type]
    return cases


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--verbose", action="store_true", help="print every job, not only the misses")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
    ap.add_argument("--family", help="run only the cases of this group (e.g. faulty-host)")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("--set", type=int, default=1, choices=sorted(HELDOUT_SEEDS), help="which held-out list")
    args = ap.parse_args(argv)
    cases = heldout_cases(args.set)
    if args.family:
        cases = [c for c in cases if c.group == args.family]
    if args.list:
        for c in cases:
            print(c.name, c.spec.model_dump_json(exclude_defaults=True))
        return 0
    t0 = time.perf_counter()
    outcomes = run(cases, args.verbose)
    summary = summarize(outcomes)
    summary["wall_seconds"] = round(time.perf_counter() - t0, 1)
    healthy = [o for o in outcomes if not o.labels]
    summary["healthy_with_any_cause"] = f"{sum(bool(o.predicted) for o in healthy)} of {len(healthy)}"
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print_summary(summary, "held-out jobs", extra=("healthy_with_any_cause",), group_width=16)
    return 0


if __name__ == "__main__":
    sys.exit(main())
