"""Widened diagnosis data: magnitude sweeps over job shapes the first corpus did not hold.

Thirteen families, each drawn as two disjoint parts from different seeds — ``tune`` (used while
changing detectors) and ``heldout`` (fixed with this file before any tuning, run once at the end):

- small DP (2 and 4) with one slow worker, 1.1x to 3x, on any stage;
- a slow worker on a heavy (last) stage: two causes at once;
- a machine that starts throttling inside the window (``onset_step``);
- a heavier middle stage that is exactly one host (dp·tp·cp = GPUs per host), its partition in
  ``layers_per_stage``;
- ±30–50% step-to-step compute noise between identical ranks (``CostModel.step_sigma``), healthy
  and with a slow worker;
- one job-wide stall (every worker stops at once in one step: not a GC pause);
- two-cause jobs with each cause's effect alone and its marginal effect in the labels;
- a slow P2P link, a slow DP collective (one slow member), variable sequence lengths, and healthy
  small jobs.

Scoring (``score_widened``): a case is *clear* when every labelled cause alone slows the job by at
least 5% (``slowdown_alone >= 1.05``). Top-1 = the first cause is a labelled one at the labelled
place (``bench/accuracy.location_ok``; an onset label also needs ``temporal: onset``); multi-cause
recall = each clear labelled cause found anywhere in ``causes`` at its place; a healthy or
job-stall job is right when it names no faulty-machine or GC cause (healthy: no cause at all for
top-1).

    .venv/bin/python bench/widened.py --part tune|heldout [--family NAME] [--verbose] [--json]
"""

from __future__ import annotations

import argparse
import json
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
from diagnosers.synth import CostModel, GeneratedJob, Scenario, ScenarioSpec, generate
from diagnosers.vocab import CauseId, Temporal

S = Scenario
# The two parts' seeds: disjoint draws of the same families. Fixed before tuning; do not edit to
# chase results (add a new part instead).
PART_SEEDS = {"tune": 12_0001, "heldout": 12_9009}
PER_FAMILY = 10
CLEAR = 1.05


@dataclass
class WCase:
    name: str
    family: str
    spec: ScenarioSpec
    cost: CostModel | None = None


def _sizes(rng: random.Random, dps: list[int], pps: list[int]) -> dict[str, object]:
    dp, pp = rng.choice(dps), rng.choice(pps)
    return {
        "dp": dp,
        "pp": pp,
        "microbatches": rng.choice([pp, 2 * pp, 8]),
        "steps": rng.randint(4, 6),
        "seed": rng.randint(1, 10**6),
    }


def _noise(rng: random.Random) -> CostModel:
    # ±30–50% (about two sigma) step-to-step compute noise between identical ranks.
    return CostModel(step_sigma=round(rng.uniform(0.15, 0.25), 3), op_sigma=0.03)


def _family_cases(name: str, rng: random.Random) -> list[WCase]:
    out: list[WCase] = []
    for i in range(PER_FAMILY):
        cost: CostModel | None = None
        if name in ("small-dp2-faulty", "small-dp4-faulty"):
            kw = _sizes(rng, [2] if name.endswith("dp2-faulty") else [4], [2, 3])
            kw["worker"] = (rng.randrange(int(kw["dp"])), rng.randrange(int(kw["pp"])))  # type: ignore[call-overload]
            spec = ScenarioSpec(scenarios=[S.FAULTY_MACHINE], magnitude=round(rng.uniform(1.1, 3.0), 3), **kw)  # type: ignore[arg-type]
        elif name == "faulty-on-heavy-stage":
            kw = _sizes(rng, [2, 4, 8], [2, 3, 4])
            kw["worker"] = (rng.randrange(int(kw["dp"])), int(kw["pp"]) - 1)  # type: ignore[call-overload]
            spec = ScenarioSpec(
                scenarios=[S.STAGE_IMBALANCE, S.FAULTY_MACHINE],
                magnitude=round(rng.uniform(1.4, 2.6), 3),
                **kw,  # type: ignore[arg-type]
            )
        elif name == "onset":
            kw = _sizes(rng, [2, 4, 8], [2, 3, 4])
            kw["steps"] = rng.randint(6, 8)
            kw["worker"] = (rng.randrange(int(kw["dp"])), rng.randrange(int(kw["pp"])))  # type: ignore[call-overload]
            onset = rng.randint(2, int(kw["steps"]) - 2)  # type: ignore[call-overload]
            spec = ScenarioSpec(
                scenarios=[S.FAULTY_MACHINE],
                magnitude=round(rng.uniform(1.3, 3.0), 3),
                onset_step=onset,
                **kw,  # type: ignore[arg-type]
            )
        elif name == "host-aligned-middle":
            kw = _sizes(rng, [8], [3, 4])
            tp = rng.choice([1, 2, 4])
            kw["dp"] = 8 // tp
            kw["heavy_stage"] = rng.randrange(1, int(kw["pp"]) - 1)  # type: ignore[call-overload]
            spec = ScenarioSpec(
                scenarios=[S.STAGE_IMBALANCE_LAYERS],
                tp=tp,
                gpus_per_host=8,
                magnitude=round(rng.uniform(1.25, 2.0), 3),
                **kw,  # type: ignore[arg-type]
            )
        elif name == "step-noise-healthy":
            kw = _sizes(rng, [2, 4], [2, 3])
            spec, cost = ScenarioSpec(**kw), _noise(rng)  # type: ignore[arg-type]
        elif name == "step-noise-faulty":
            kw = _sizes(rng, [2, 4], [2, 3])
            kw["worker"] = (rng.randrange(int(kw["dp"])), rng.randrange(int(kw["pp"])))  # type: ignore[call-overload]
            spec = ScenarioSpec(scenarios=[S.FAULTY_MACHINE], magnitude=round(rng.uniform(1.5, 3.0), 3), **kw)  # type: ignore[arg-type]
            cost = _noise(rng)
        elif name == "job-stall":
            kw = _sizes(rng, [2, 4, 8], [2, 3, 4])
            spec = ScenarioSpec(scenarios=[S.JOB_STALL], magnitude=round(rng.uniform(0.1, 0.6), 3), **kw)  # type: ignore[arg-type]
        elif name == "multi-cause":
            kw = _sizes(rng, [4, 8], [2, 3, 4])
            pool = [
                S.STAGE_IMBALANCE,
                S.STAGE_IMBALANCE_FIRST,
                S.SEQUENCE_LENGTH_IMBALANCE,
                S.GC_PAUSE,
                S.FAULTY_MACHINE,
                S.SLOW_COMMUNICATION,
                S.DATALOADER_STALL,
            ]
            mix = rng.sample(pool, 2)
            while {S.STAGE_IMBALANCE, S.STAGE_IMBALANCE_FIRST} <= set(mix):
                mix = rng.sample(pool, 2)
            if S.FAULTY_MACHINE in mix:
                kw["worker"] = (rng.randrange(int(kw["dp"])), rng.randrange(int(kw["pp"])))  # type: ignore[call-overload]
            spec = ScenarioSpec(scenarios=mix, **kw)  # type: ignore[arg-type]
        elif name == "slow-link":
            kw = _sizes(rng, [2, 4, 8], [2, 3, 4])
            spec = ScenarioSpec(
                scenarios=[S.SLOW_COMMUNICATION], magnitude=round(rng.uniform(3.0, 30.0), 2), **kw
            )  # type: ignore[arg-type]
        elif name == "slow-dp-group":
            kw = _sizes(rng, [2, 4, 8], [2, 3, 4])
            kw["worker"] = (rng.randrange(int(kw["dp"])), rng.randrange(int(kw["pp"])))  # type: ignore[call-overload]
            spec = ScenarioSpec(scenarios=[S.SLOW_DP_GROUP], magnitude=round(rng.uniform(2.0, 10.0), 2), **kw)  # type: ignore[arg-type]
        elif name == "seqlen":
            kw = _sizes(rng, [2, 4, 8, 16], [2, 3, 4])
            spec = ScenarioSpec(
                scenarios=[S.SEQUENCE_LENGTH_IMBALANCE],
                magnitude=round(rng.uniform(12.0, 64.0), 1),
                **kw,  # type: ignore[arg-type]
            )
        elif name == "healthy-small":
            spec = ScenarioSpec(**_sizes(rng, [2, 4], [2, 3]))  # type: ignore[arg-type]
        else:  # pragma: no cover - FAMILIES is closed
            raise ValueError(name)
        out.append(WCase(f"{name}-{i}", name, spec, cost))
    return out


FAMILIES = [
    "small-dp2-faulty",
    "small-dp4-faulty",
    "faulty-on-heavy-stage",
    "onset",
    "host-aligned-middle",
    "step-noise-healthy",
    "step-noise-faulty",
    "job-stall",
    "multi-cause",
    "slow-link",
    "slow-dp-group",
    "seqlen",
    "healthy-small",
]


def widened_cases(part: str) -> list[WCase]:
    """Every family's cases of ``part`` ("tune" or "heldout"); deterministic in ``PART_SEEDS``."""
    cases: list[WCase] = []
    for k, name in enumerate(FAMILIES):
        cases += _family_cases(name, random.Random(PART_SEEDS[part] * 100 + k))
    return cases


@dataclass
class WOutcome:
    case: WCase
    clear: bool
    healthy: bool
    top1_ok: bool
    found: int  # labelled clear causes found in place
    wanted: int  # labelled clear causes
    false_machine_or_gc: bool
    got: list[tuple[str, float]] = field(default_factory=list)
    slowdown: float = 1.0
    true_slowdown: float = 1.0


def _in_place(job: GeneratedJob, diag: Diagnosis, label_i: int) -> bool:
    lab = job.labels.causes[label_i]
    for c in diag.causes:
        if c.id == lab.id and location_ok(lab.id, lab.location, c.location):
            return lab.pattern.temporal != Temporal.ONSET or c.pattern.temporal == Temporal.ONSET
    return False


def score_widened(case: WCase, job: GeneratedJob, diag: Diagnosis) -> WOutcome:
    """Score one job (rules in the module docstring)."""
    labels = job.labels.causes
    healthy = not labels
    alone = [lab.slowdown_alone for lab in labels]
    # A launch stall has no compute slowdown of its own; it is clear when it is a real share.
    clear = healthy or all(
        (a is not None and a >= CLEAR) or lab.id == CauseId.DATALOADER_STALL
        for a, lab in zip(alone, labels, strict=True)
    )
    machine_or_gc = any(c.id in (CauseId.FAULTY_MACHINE, CauseId.GC_PAUSE) for c in diag.causes)
    if healthy:
        top1 = not machine_or_gc if job.labels.job_stall_steps else not diag.causes
        found = wanted = 0
    else:
        top = diag.causes[0] if diag.causes else None
        top1 = False
        if top is not None:
            for lab in labels:
                if top.id == lab.id and location_ok(lab.id, lab.location, top.location):
                    top1 = lab.pattern.temporal != Temporal.ONSET or top.pattern.temporal == Temporal.ONSET
        idx = [
            i
            for i, a in enumerate(alone)
            if (a is not None and a >= CLEAR) or labels[i].id == CauseId.DATALOADER_STALL
        ]
        wanted = len(idx)
        found = sum(_in_place(job, diag, i) for i in idx)
    false_mg = any(
        c.id in (CauseId.FAULTY_MACHINE, CauseId.GC_PAUSE) and c.id not in {lab.id for lab in labels}
        for c in diag.causes
    )
    return WOutcome(
        case=case,
        clear=clear,
        healthy=healthy,
        top1_ok=top1,
        found=found,
        wanted=wanted,
        false_machine_or_gc=false_mg or (healthy and machine_or_gc),
        got=[(c.id.value, c.confidence) for c in diag.causes],
        slowdown=diag.slowdown,
        true_slowdown=job.true_slowdown,
    )


def _label_view(job: GeneratedJob) -> list[tuple[str, list[int], float | None]]:
    return [(lab.id.value, lab.location.ranks[:8], lab.slowdown_alone) for lab in job.labels.causes]


def run_widened(cases: list[WCase], verbose: bool = False) -> list[WOutcome]:
    out = []
    for case in cases:
        job = generate(case.spec, case.cost) if case.cost is not None else generate(case.spec)
        o = score_widened(case, job, diagnose(job.trace))
        out.append(o)
        bad = (o.clear and not o.top1_ok) or o.false_machine_or_gc or o.found < o.wanted
        if verbose or bad:
            print(
                f"  {'BAD' if bad else 'ok '} {case.name:26s} S={o.slowdown:.3f} true={o.true_slowdown:.3f} "
                f"clear={o.clear} labels={_label_view(job)} "
                f"got={o.got} recall={o.found}/{o.wanted}",
                file=sys.stderr,
            )
    return out


def summarize_widened(outcomes: list[WOutcome]) -> dict[str, object]:
    """Top-1 on clear cases, multi-cause recall, healthy false machine/GC; per family; misses."""
    clear = [o for o in outcomes if o.clear]
    multi = [o for o in outcomes if len(o.case.spec.scenarios) > 1 and o.wanted]
    healthy = [o for o in outcomes if o.healthy]
    fam: dict[str, list[WOutcome]] = defaultdict(list)
    for o in outcomes:
        fam[o.case.family].append(o)
    return {
        "jobs": len(outcomes),
        "clear_jobs": len(clear),
        "top1_clear": sum(o.top1_ok for o in clear) / max(len(clear), 1),
        "multi_cause_jobs": len(multi),
        "multi_cause_recall": sum(o.found for o in multi) / max(sum(o.wanted for o in multi), 1),
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
            for k, v in sorted(fam.items())
        },
        "misses": [
            f"{o.case.name}: S={o.slowdown:.3f} got {o.got} recall {o.found}/{o.wanted}"
            for o in outcomes
            if (o.clear and not o.top1_ok) or o.false_machine_or_gc or o.found < o.wanted
        ],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=sorted(PART_SEEDS), default="tune")
    ap.add_argument("--family", help="run only this family")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    args = ap.parse_args(argv)
    cases = widened_cases(args.part)
    if args.family:
        cases = [c for c in cases if c.family == args.family]
    if args.list:
        for c in cases:
            print(
                c.name,
                c.spec.model_dump_json(exclude_defaults=True),
                c.cost.model_dump_json(exclude_defaults=True) if c.cost else "",
            )
        return 0
    t0 = time.perf_counter()
    summary = summarize_widened(run_widened(cases, args.verbose))
    summary["wall_seconds"] = round(time.perf_counter() - t0, 1)
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"widened part {args.part}: {summary['jobs']} jobs, {summary['clear_jobs']} clear")
    for k in ("top1_clear", "multi_cause_recall"):
        print(f"{k:28s} {float(summary[k]):.3f}")  # type: ignore[arg-type]
    print(f"{'multi_cause_jobs':28s} {summary['multi_cause_jobs']}")
    print(
        f"{'healthy_with_faulty_or_gc':28s} {summary['healthy_with_faulty_or_gc']} of "
        f"{summary['healthy_jobs']}"
    )
    print(f"{'false_faulty_or_gc_anywhere':28s} {summary['false_faulty_or_gc_anywhere']}")
    for k, v in summary["by_family"].items():  # type: ignore[attr-defined]
        print(
            f"family {k:22s} jobs {v['jobs']:3d} clear {v['clear']:3d} top-1 {v['top1_clear']:.3f} "
            f"recall {v['recall']:.3f}"
        )
    print(f"wall time {summary['wall_seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
