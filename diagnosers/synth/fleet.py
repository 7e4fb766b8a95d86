"""A labelled synthetic fleet: many generated jobs of mixed sizes and causes, with a manifest.

``fleet_specs(n, seed=..., max_workers=...)`` draws ``n`` jobs: a cause per job from ``CAUSE_MIX``
(healthy jobs included), a DP × PP size whose worker count is at most ``max_workers``, a GPU count
(the job's world size), a wall-clock duration and a team. ``write_fleet(dir, ...)`` writes each job
as ``dir/jobs/<id>/{trace.parquet, meta.yaml, labels.json}`` and ``dir/manifest.jsonl``: one JSON
object per job, the fleet command's manifest format plus the ground truth (``labels``). ``truth``
turns manifest entries into the statistics the fleet report should find.

The mix uses magnitudes at which each injected cause is clearly straggling (or, for the healthy
jobs and the dataloader stall, clearly not: a stall costs launch time, which S does not count), so
the fleet's straggling share is decided by the labels, not by a threshold coin-flip.

    python -m diagnosers.synth.fleet OUT_DIR [N] [MAX_WORKERS]
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from diagnosers.synth.generate import generate
from diagnosers.synth.spec import Scenario, ScenarioSpec

# (scenario, weight, magnitude). Weights are relative shares of the fleet.
CAUSE_MIX: tuple[tuple[Scenario, float, float | None], ...] = (
    (Scenario.NONE, 0.45, None),
    (Scenario.STAGE_IMBALANCE, 0.2, 2.0),
    (Scenario.FAULTY_MACHINE, 0.15, 2.0),
    (Scenario.SEQUENCE_LENGTH_IMBALANCE, 0.1, 32.0),
    (Scenario.SLOW_COMMUNICATION, 0.1, 20.0),
)
TEAMS = ("pretrain", "research", "multimodal")
PP_CHOICES = (2, 4, 8)


@dataclass(frozen=True)
class FleetJob:
    """One fleet job before it is written: id, spec, GPU count, duration (hours), team."""

    job_id: str
    spec: ScenarioSpec
    gpus: int
    duration_hours: float
    team: str


def _size(rng: random.Random, max_workers: int) -> tuple[int, int]:
    """A DP × PP size with dp · pp ≤ max_workers, log-uniform over worker counts (many small jobs)."""
    pp = rng.choice([p for p in PP_CHOICES if p <= max(2, max_workers // 2)])
    max_dp = max(1, max_workers // pp)
    exps = [e for e in range(1, 12) if 2**e <= max_dp] or [0]
    return 2 ** rng.choice(exps), pp


def fleet_specs(n: int, *, seed: int = 0, max_workers: int = 32, steps: int = 3,
                microbatches: int = 8) -> list[FleetJob]:
    """``n`` jobs drawn from ``CAUSE_MIX`` (deterministic in ``seed``). The causes are assigned by
    largest remainder so the fleet's mix matches the weights as closely as ``n`` allows."""
    rng = random.Random(seed)
    total = sum(w for _, w, _ in CAUSE_MIX)
    quotas = [n * w / total for _, w, _ in CAUSE_MIX]
    counts = [int(q) for q in quotas]
    for i in sorted(range(len(quotas)), key=lambda i: counts[i] - quotas[i])[: n - sum(counts)]:
        counts[i] += 1
    plan = [i for i, c in enumerate(counts) for _ in range(c)]
    rng.shuffle(plan)
    jobs = []
    for k, ci in enumerate(plan):
        scenario, _, magnitude = CAUSE_MIX[ci]
        dp, pp = _size(rng, max_workers)
        if scenario is Scenario.SEQUENCE_LENGTH_IMBALANCE:
            dp = max(dp, 4)  # rebalancing across DP ranks needs some
        spec = ScenarioSpec(dp=dp, pp=pp, microbatches=max(microbatches, pp), steps=steps,
                            scenarios=[scenario], magnitude=magnitude, seed=seed * 100_003 + k,
                            trial_name=f"fleet-{k:05d}")
        jobs.append(FleetJob(job_id=f"job-{k:05d}", spec=spec, gpus=spec.world_size,
                             duration_hours=round(rng.uniform(1.0, 48.0), 2), team=rng.choice(TEAMS)))
    return jobs


def write_fleet(out_dir: str | Path, jobs: Sequence[FleetJob]) -> Path:
    """Generate and write every job and ``manifest.jsonl``; returns the manifest path."""
    from diagnosers.writers import write_meta_yaml, write_parquet

    root = Path(out_dir)
    lines = []
    for job in jobs:
        gen = generate(job.spec)
        d = root / "jobs" / job.job_id
        write_parquet(gen.trace, d / "trace.parquet")
        write_meta_yaml(gen.trace.meta, d / "meta.yaml")
        labels = gen.labels.model_dump(mode="json")
        (d / "labels.json").write_text(json.dumps(labels, indent=2) + "\n", encoding="utf-8")
        lines.append({
            "job_id": job.job_id,
            "paths": [f"jobs/{job.job_id}/trace.parquet"],
            "meta": f"jobs/{job.job_id}/meta.yaml",
            "gpus": job.gpus,
            "duration_hours": job.duration_hours,
            "team": job.team,
            "labels": {**labels, "true_slowdown": gen.true_slowdown},
        })
    manifest = root / "manifest.jsonl"
    manifest.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return manifest


def read_manifest_labels(path: str | Path) -> list[dict[str, Any]]:
    """The manifest entries (with their ``labels``) of a written fleet."""
    text = Path(path).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def truth(entries: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """What the fleet report should find, from the labels: the straggling share, each cause's share
    of jobs (a job counts for every cause injected into it), the GPU-hours-weighted wasted share from
    the generator's own slowdown (1 − 1/true S), and the job count."""
    es = list(entries)
    n = len(es)
    if not n:
        return {"jobs": 0}
    causes: dict[str, int] = {}
    for e in es:
        for c in e["labels"]["causes"]:
            causes[c["id"]] = causes.get(c["id"], 0) + 1
    hours = sum(e["gpus"] * e["duration_hours"] for e in es)
    wasted = sum(
        e["gpus"] * e["duration_hours"] * (1 - 1 / max(1.0, e["labels"]["true_slowdown"])) for e in es
    )
    return {
        "jobs": n,
        "straggling_share": sum(bool(e["labels"]["expected_straggling"]) for e in es) / n,
        "cause_mix": {c: k / n for c, k in sorted(causes.items())},
        "no_cause_share": sum(1 for e in es if not e["labels"]["causes"]) / n,
        "gpu_hours_wasted_share": wasted / hours if hours else None,
    }


def main(argv: Sequence[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    n = int(argv[1]) if len(argv) > 1 else 20
    max_workers = int(argv[2]) if len(argv) > 2 else 32
    print(write_fleet(argv[0], fleet_specs(n, max_workers=max_workers)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
