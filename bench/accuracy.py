"""Diagnosis accuracy harness: every labelled synthetic scenario through ``diagnose``, scored.

Runs the generator's corpus (``diagnosers.synth.corpus``) plus a grid of its scenarios over job
sizes, schedules and seeds (none of them used to choose a detector threshold), and prints:

- a confusion matrix of labelled cause (rows) vs top-1 diagnosed cause (columns, ``none`` = no
  cause), for single-cause and healthy jobs;
- top-1 cause accuracy (mixed jobs: the top cause is one of the labelled ones) and recall of every
  labelled cause among all diagnosed causes;
- location accuracy of each correctly found cause (rules in ``location_ok``);
- the false-alarm rate: healthy jobs with any cause, and diagnosed causes that no label names.

Jobs whose injected cause is too weak for the method to see (the generator's own true slowdown
below the 1.03 decomposition threshold, and no launch stall) are scored separately as
"below threshold": the method says "no straggler" there by design.

    .venv/bin/python bench/accuracy.py [--quick] [--markdown docs/ACCURACY.md]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from diagnosers.diagnose import Diagnosis, diagnose
from diagnosers.synth import CostModel, GeneratedJob, Scenario, ScenarioSpec, Schedule, generate
from diagnosers.synth.corpus import corpus_specs
from diagnosers.vocab import DECOMPOSE_THRESHOLD, CauseId, Location

S = Scenario
NONE = "none"


@dataclass
class Case:
    name: str
    spec: ScenarioSpec
    cost: CostModel | None = None
    group: str = "grid"


@dataclass
class Outcome:
    case: Case
    labels: list[str]
    predicted: list[str]
    top1_ok: bool
    recall: float
    location_ok: dict[str, bool] = field(default_factory=dict)
    false_causes: list[str] = field(default_factory=list)
    detectable: bool = True
    seconds: float = 0.0
    slowdown: float = 1.0


def grid(quick: bool) -> list[Case]:
    """The scenario grid: every injectable scenario over sizes, schedules and seeds."""
    sizes = [(2, 4, 8), (4, 4, 8), (8, 2, 8), (4, 8, 16), (16, 2, 8)]
    seeds = [101] if quick else [101, 202]
    if quick:
        sizes = sizes[:3]
    singles: list[tuple[str, dict[str, object]]] = [
        ("none", {"scenarios": [S.NONE]}),
        ("stage-last", {"scenarios": [S.STAGE_IMBALANCE]}),
        ("stage-first", {"scenarios": [S.STAGE_IMBALANCE_FIRST]}),
        ("seqlen", {"scenarios": [S.SEQUENCE_LENGTH_IMBALANCE]}),
        ("gc", {"scenarios": [S.GC_PAUSE]}),
        ("gc-growing", {"scenarios": [S.GC_PAUSE], "gc_growing": True}),
        ("faulty-worker", {"scenarios": [S.FAULTY_MACHINE]}),
        ("faulty-host", {"scenarios": [S.FAULTY_MACHINE], "host": 1}),
        ("slow-link", {"scenarios": [S.SLOW_COMMUNICATION]}),
        ("slow-host-nic", {"scenarios": [S.SLOW_COMMUNICATION], "host": 1}),
        ("dataloader", {"scenarios": [S.DATALOADER_STALL]}),
    ]
    cases: list[Case] = []
    for dp, pp, mb in sizes:
        for seed in seeds:
            for name, kw in singles:
                spec_kw: dict[str, object] = {
                    "dp": dp,
                    "pp": pp,
                    "microbatches": mb,
                    "steps": 4,
                    "seed": seed,
                }
                spec_kw.update(kw)
                if "host" in kw and dp * pp <= 8:  # a host needs a second host to stand out from
                    continue
                cases.append(Case(f"{name}-{dp}x{pp}-s{seed}", ScenarioSpec(**spec_kw)))  # type: ignore[arg-type]
    # Other schedules.
    for sched, vpp in ((Schedule.INTERLEAVED, 2), (Schedule.GPIPE, 1)):
        for name, kw in singles:
            if "host" in kw:
                continue
            spec_kw = {
                "dp": 4,
                "pp": 4,
                "vpp": vpp,
                "microbatches": 8,
                "steps": 4,
                "seed": 303,
                "schedule": sched,
            }
            spec_kw.update(kw)
            cases.append(Case(f"{name}-{sched.value}", ScenarioSpec(**spec_kw)))  # type: ignore[arg-type]
    # Mixed causes (two at once).
    mixes = [
        [S.STAGE_IMBALANCE, S.GC_PAUSE],
        [S.STAGE_IMBALANCE, S.FAULTY_MACHINE],
        [S.SEQUENCE_LENGTH_IMBALANCE, S.DATALOADER_STALL],
        [S.FAULTY_MACHINE, S.DATALOADER_STALL],
        [S.STAGE_IMBALANCE, S.DATALOADER_STALL],
        [S.GC_PAUSE, S.FAULTY_MACHINE],
    ]
    for i, mix in enumerate(mixes):
        for seed in seeds:
            spec = ScenarioSpec(dp=4, pp=4, microbatches=8, steps=4, seed=seed + i, scenarios=mix)
            cases.append(Case(f"mixed-{'+'.join(m.value for m in mix)}-s{seed}", spec, group="mixed"))
    # Weaker injections on other sizes and seeds: how far down the detectors still see each cause.
    weak = {
        S.STAGE_IMBALANCE: 1.4,
        S.STAGE_IMBALANCE_FIRST: 1.3,
        S.SEQUENCE_LENGTH_IMBALANCE: 16.0,
        S.GC_PAUSE: 0.12,
        S.FAULTY_MACHINE: 1.3,
        S.SLOW_COMMUNICATION: 4.0,
        S.DATALOADER_STALL: 0.15,
    }
    for (dp, pp, mb), seed in zip([(8, 4, 8), (4, 2, 8), (32, 2, 8)], [404, 505, 606], strict=True):
        for sc, mag in weak.items():
            spec = ScenarioSpec(
                dp=dp, pp=pp, microbatches=mb, steps=4, seed=seed, scenarios=[sc], magnitude=mag
            )
            cases.append(Case(f"weak-{sc.value}-{dp}x{pp}", spec, group="weak"))
    # Healthy jobs with heavy noise: must never be called a faulty machine.
    noisy = CostModel(op_sigma=0.05, worker_sigma=0.01, tail_prob=0.01, tail_scale=0.3, hiccup_prob=0.01)
    for seed in seeds:
        for dp, pp, mb in sizes:
            spec = ScenarioSpec(dp=dp, pp=pp, microbatches=mb, steps=4, seed=seed + 7)
            cases.append(Case(f"noisy-healthy-{dp}x{pp}-s{seed}", spec, noisy, group="noise"))
    return cases


def corpus_cases() -> list[Case]:
    return [Case(f"corpus:{name}", spec, group="corpus") for name, spec in corpus_specs()]


def _cells(loc: Location) -> set[int]:
    return set(loc.ranks)


def location_ok(cause: str, label: Location, found: Location) -> bool:
    """Location scoring per cause.

    - stage imbalance: the same PP rank(s);
    - faulty machine, slow communication, dataloader stall: the same set of global ranks
      (a worker, a host's workers, a link's two ends, a stage's DP ranks);
    - sequence-length imbalance: the same DP ranks (all of them: the imbalance moves);
    - GC pauses: the pauses hit random (worker, step) pairs; the found workers must overlap the
      labelled ones with Jaccard >= 0.5.
    """
    if cause == CauseId.STAGE_IMBALANCE:
        return set(label.pp_ranks) == set(found.pp_ranks)
    if cause == CauseId.SEQUENCE_LENGTH_IMBALANCE:
        return set(label.dp_ranks) == set(found.dp_ranks)
    if cause == CauseId.GC_PAUSE:
        a, b = _cells(label), _cells(found)
        return len(a & b) / max(len(a | b), 1) >= 0.5
    return _cells(label) == _cells(found)


def score(case: Case, job: GeneratedJob, diag: Diagnosis, seconds: float) -> Outcome:
    labels = [c.id.value for c in job.labels.causes]
    predicted = [c.id.value for c in diag.causes]
    top = predicted[0] if predicted else NONE
    top1_ok = (top == NONE) if not labels else (top in labels)
    found = {c.id.value: c for c in diag.causes}
    recall = sum(1 for lbl in labels if lbl in found) / len(labels) if labels else 1.0
    loc_ok = {
        c.id.value: location_ok(c.id, c.location, found[c.id.value].location)
        for c in job.labels.causes
        if c.id.value in found
    }
    only_launch = all(c == CauseId.DATALOADER_STALL for c in labels)
    detectable = not labels or only_launch or job.true_slowdown >= DECOMPOSE_THRESHOLD
    return Outcome(
        case=case,
        labels=labels,
        predicted=predicted,
        top1_ok=top1_ok,
        recall=recall,
        location_ok={str(k): v for k, v in loc_ok.items()},
        false_causes=[p for p in predicted if p not in labels],
        detectable=detectable,
        seconds=seconds,
        slowdown=diag.slowdown,
    )


def run(cases: list[Case], verbose: bool = False) -> list[Outcome]:
    out = []
    for case in cases:
        job = generate(case.spec, case.cost) if case.cost is not None else generate(case.spec)
        t0 = time.perf_counter()
        diag = diagnose(job.trace)
        o = score(case, job, diag, time.perf_counter() - t0)
        out.append(o)
        if verbose or not o.top1_ok or not all(o.location_ok.values()) or o.false_causes:
            flag = "ok " if o.top1_ok and all(o.location_ok.values()) and not o.false_causes else "BAD"
            print(
                f"  {flag} {case.name:44s} S={o.slowdown:.3f} true={job.true_slowdown:.3f} "
                f"labels={o.labels} got={[(c.id.value, c.confidence) for c in diag.causes]} "
                f"loc={o.location_ok}",
                file=sys.stderr,
            )
    return out


def summarize(outcomes: list[Outcome]) -> dict[str, object]:
    det = [o for o in outcomes if o.detectable]
    below = [o for o in outcomes if not o.detectable]
    healthy = [o for o in outcomes if not o.labels]
    locs = [ok for o in det for ok in o.location_ok.values()]
    confusion: dict[str, Counter[str]] = defaultdict(Counter)
    for o in det:
        if len(o.labels) <= 1:
            confusion[o.labels[0] if o.labels else NONE][o.predicted[0] if o.predicted else NONE] += 1
    return {
        "jobs": len(outcomes),
        "detectable_jobs": len(det),
        "top1_accuracy": sum(o.top1_ok for o in det) / max(len(det), 1),
        "cause_recall": sum(o.recall for o in det) / max(len(det), 1),
        "location_accuracy": sum(locs) / max(len(locs), 1),
        "located_causes": len(locs),
        "healthy_jobs": len(healthy),
        "healthy_false_alarm_rate": sum(bool(o.predicted) for o in healthy) / max(len(healthy), 1),
        "faulty_machine_on_healthy": sum("faulty-machine" in o.predicted for o in healthy),
        "spurious_causes_per_job": sum(len(o.false_causes) for o in det) / max(len(det), 1),
        "jobs_with_spurious_cause": sum(bool(o.false_causes) for o in det) / max(len(det), 1),
        "below_threshold_jobs": len(below),
        "below_threshold_called_none": sum(not o.predicted for o in below),
        "mean_diagnose_seconds": sum(o.seconds for o in outcomes) / max(len(outcomes), 1),
        "confusion": {k: dict(v) for k, v in confusion.items()},
        "by_group": {
            g: {
                "jobs": len(os_),
                "top1": sum(o.top1_ok for o in os_) / len(os_),
                "location": (lambda ls: sum(ls) / len(ls) if ls else None)(
                    [ok for o in os_ for ok in o.location_ok.values()]
                ),
            }
            for g in sorted({o.case.group for o in det})
            for os_ in [[o for o in det if o.case.group == g]]
        },
        "misses": [
            f"{o.case.name}: labels {o.labels}, diagnosed {o.predicted}, location {o.location_ok}"
            for o in det
            if not o.top1_ok or not all(o.location_ok.values()) or o.false_causes
        ],
    }


def confusion_table(conf: dict[str, dict[str, int]]) -> str:
    order = [NONE, *[c.value for c in CauseId if c != CauseId.NONE]]
    rows = [r for r in order if r in conf]
    cols = [c for c in order if any(c in conf[r] for r in rows)]
    short = {
        c: c.replace("sequence-length-imbalance", "seq-len")
        .replace("slow-communication", "slow-comm")
        .replace("dataloader-stall", "dataloader")
        .replace("stage-imbalance", "stage-imb")
        .replace("faulty-machine", "faulty")
        for c in order
    }
    head = "| label \\ top-1 | " + " | ".join(short[c] for c in cols) + " |"
    sep = "|---|" + "---|" * len(cols)
    lines = [head, sep]
    for r in rows:
        lines.append(f"| {short[r]} | " + " | ".join(str(conf[r].get(c, 0) or "") for c in cols) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a smaller grid (one seed, three sizes)")
    ap.add_argument("--verbose", action="store_true", help="print every job, not only the misses")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = ap.parse_args(argv)
    cases = corpus_cases() + grid(args.quick)
    t0 = time.perf_counter()
    outcomes = run(cases, args.verbose)
    summary = summarize(outcomes)
    summary["wall_seconds"] = round(time.perf_counter() - t0, 1)
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print_summary(summary, "jobs", group_width=8)
    return 0


def print_summary(
    summary: dict[str, object], title: str, *, extra: tuple[str, ...] = (), group_width: int = 8
) -> None:
    """Print a ``summarize`` result as the harnesses show it: scores, groups, confusion matrix."""
    print(
        f"{title}: {summary['jobs']} ({summary['detectable_jobs']} with a cause the method can see, "
        f"{summary['below_threshold_jobs']} below threshold)"
    )
    for key in (
        "top1_accuracy",
        "cause_recall",
        "location_accuracy",
        "healthy_false_alarm_rate",
        "jobs_with_spurious_cause",
        "spurious_causes_per_job",
    ):
        print(f"{key:28s} {float(summary[key]):.3f}")  # type: ignore[arg-type]
    for key in (*extra, "faulty_machine_on_healthy"):
        print(f"{key:28s} {summary[key]}")
    print(
        f"{'below_threshold_called_none':28s} {summary['below_threshold_called_none']} of "
        f"{summary['below_threshold_jobs']}"
    )
    print(f"{'mean_diagnose_seconds':28s} {float(summary['mean_diagnose_seconds']):.3f}")  # type: ignore[arg-type]
    print()
    for g, v in sorted(summary["by_group"].items()):  # type: ignore[attr-defined]
        loc = "n/a" if v["location"] is None else f"{v['location']:.3f}"
        print(f"group {g:{group_width}s} jobs {v['jobs']:3d}  top-1 {v['top1']:.3f}  location {loc}")
    print()
    print(confusion_table(summary["confusion"]))  # type: ignore[arg-type]
    print()
    print(f"wall time {summary['wall_seconds']} s")


if __name__ == "__main__":
    sys.exit(main())
