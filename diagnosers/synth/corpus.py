"""The labelled scenario corpus: one job per cause plus healthy and mixed cases, at varied sizes.

``corpus_specs()`` returns the scenario specs (seeded, so the corpus is the same on every run);
``write_corpus(dir)`` writes each as ``dir/<name>/{trace.parquet, meta.yaml, labels.json}``.
Detector tests and the diagnosis accuracy harness call ``corpus_jobs()`` in-process instead.

    python -m diagnosers.synth.corpus OUT_DIR
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

from diagnosers.synth.generate import GeneratedJob, generate
from diagnosers.synth.spec import Scenario, ScenarioSpec, Schedule


def corpus_specs() -> list[tuple[str, ScenarioSpec]]:
    """(name, spec) of every corpus job; small enough to generate in well under a second each."""
    S = Scenario
    specs: list[tuple[str, ScenarioSpec]] = [
        ("healthy-small", ScenarioSpec(dp=2, pp=4, microbatches=8, steps=4, seed=1)),
        ("healthy-wide", ScenarioSpec(dp=16, pp=2, microbatches=8, steps=3, seed=2)),
        ("healthy-interleaved", ScenarioSpec(dp=4, pp=4, vpp=2, microbatches=8, steps=3,
                                             schedule=Schedule.INTERLEAVED, seed=3)),
        ("healthy-gpipe", ScenarioSpec(dp=2, pp=4, microbatches=8, steps=3,
                                       schedule=Schedule.GPIPE, seed=4)),
        ("stage-imbalance-last", ScenarioSpec(dp=2, pp=4, microbatches=8, steps=4,
                                              scenarios=[S.STAGE_IMBALANCE], seed=5)),
        ("stage-imbalance-first", ScenarioSpec(dp=4, pp=4, microbatches=8, steps=3,
                                               scenarios=[S.STAGE_IMBALANCE_FIRST], seed=6)),
        ("sequence-length", ScenarioSpec(dp=16, pp=2, microbatches=8, steps=4,
                                         scenarios=[S.SEQUENCE_LENGTH_IMBALANCE], seed=7)),
        ("gc-pause", ScenarioSpec(dp=4, pp=4, microbatches=8, steps=6, scenarios=[S.GC_PAUSE], seed=8)),
        ("gc-pause-growing", ScenarioSpec(dp=8, pp=2, microbatches=8, steps=6, scenarios=[S.GC_PAUSE],
                                          gc_growing=True, seed=9)),
        ("faulty-worker", ScenarioSpec(dp=4, pp=4, microbatches=8, steps=3,
                                       scenarios=[S.FAULTY_MACHINE], seed=10)),
        # a host holds 8 consecutive ranks: DP ranks 8-15 of stage 0 (half a PP row, not a whole one)
        ("faulty-host", ScenarioSpec(dp=16, pp=2, microbatches=8, steps=3, scenarios=[S.FAULTY_MACHINE],
                                     host=1, seed=11)),
        ("slow-link", ScenarioSpec(dp=4, pp=4, microbatches=8, steps=3,
                                   scenarios=[S.SLOW_COMMUNICATION], seed=12)),
        ("slow-host-nic", ScenarioSpec(dp=8, pp=2, tp=2, microbatches=8, steps=3,
                                       scenarios=[S.SLOW_COMMUNICATION], host=2, seed=13)),
        ("dataloader-stall", ScenarioSpec(dp=4, pp=4, microbatches=8, steps=4,
                                          scenarios=[S.DATALOADER_STALL], seed=14)),
        ("mixed-imbalance-gc", ScenarioSpec(dp=4, pp=4, microbatches=8, steps=4,
                                            scenarios=[S.STAGE_IMBALANCE, S.GC_PAUSE], seed=15)),
        ("mixed-faulty-stall", ScenarioSpec(dp=4, pp=2, cp=2, microbatches=8, steps=3,
                                            scenarios=[S.FAULTY_MACHINE, S.DATALOADER_STALL], seed=16)),
        # an uneven partition on a host-aligned middle stage (dp 8 = one host per stage)
        ("stage-imbalance-layers", ScenarioSpec(dp=8, pp=3, microbatches=8, steps=3,
                                                scenarios=[S.STAGE_IMBALANCE_LAYERS], seed=17)),
        ("slow-dp-group", ScenarioSpec(dp=4, pp=2, microbatches=8, steps=3, magnitude=8.0,
                                       scenarios=[S.SLOW_DP_GROUP], worker=(2, 1), seed=18)),
        # every worker stops at once in one step: not a GC pause (no cause of the vocabulary)
        ("job-stall", ScenarioSpec(dp=4, pp=2, microbatches=8, steps=4, scenarios=[S.JOB_STALL], seed=19)),
    ]
    return specs


def corpus_jobs() -> Iterator[tuple[str, GeneratedJob]]:
    """Generate every corpus job in-process (no files)."""
    for name, spec in corpus_specs():
        yield name, generate(spec)


def write_corpus(out_dir: str | Path) -> list[Path]:
    """Write every corpus job to ``out_dir/<name>/``; returns the job directories."""
    from diagnosers.writers import write_meta_yaml, write_parquet

    root = Path(out_dir)
    dirs = []
    for name, job in corpus_jobs():
        d = root / name
        write_parquet(job.trace, d / "trace.parquet")
        write_meta_yaml(job.trace.meta, d / "meta.yaml")
        labels = job.labels.model_dump(mode="json")
        (d / "labels.json").write_text(json.dumps(labels, indent=2) + "\n", encoding="utf-8")
        (d / "spec.json").write_text(job.spec.model_dump_json(indent=2) + "\n", encoding="utf-8")
        dirs.append(d)
    return dirs


if __name__ == "__main__":  # pragma: no cover - thin command-line wrapper
    if len(sys.argv) != 2:
        print("usage: python -m diagnosers.synth.corpus OUT_DIR", file=sys.stderr)
        sys.exit(2)
    for path in write_corpus(sys.argv[1]):
        print(path)
