"""Incident search latency over the real library and over a generated 10,000-case library.

For each library it reports load and index-build time, then the latency of ``search_incidents``
(p50 / p95 / max over the checked-in query set plus generated queries, first pass with cold
per-token caches and later passes warm) and of ``similar_incidents`` from a case id and from a
diagnosis signature. The generated library is written as real YAML files into a temporary
directory and loaded through ``Library.from_directory``, the same path the packaged cases take.

Generated cases recombine the real ones: each copies a real case's category, causes, signature and
topics, shuffles its title words, draws an organisation, a year, extra tags and filler words from
synthetic pools (so the vocabulary and the tag set grow with the library, as they would in reality).

    .venv/bin/python bench/incidents_bench.py [--cases 10000] [--repeat 3] [--markdown]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from diagnosers.signature import CauseSignature
from diagnosers.vocab import Pattern
from incidents import Library, load_library, search_incidents, similar_incidents
from incidents.library import PACKAGE_DIR

TARGET_P95_MS = 50.0
_Dumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def _pseudo_word(rng: random.Random) -> str:
    consonants, vowels = "bcdfghklmnprstvz", "aeiou"
    return "".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(rng.randint(2, 4)))


def generate_cases(real: Library, n: int, seed: int = 7) -> list[dict[str, Any]]:
    """``n`` valid case mappings (ids IL-0000 ..) recombined from the real cases; see module doc."""
    rng = random.Random(seed)
    base = list(real.cases.values())
    words = sorted({w for c in base for w in c.summary.split() if w.isalpha() and len(w) > 3})
    fillers = [_pseudo_word(rng) for _ in range(20000)]
    kinds = ["Labs", "AI", "Cloud", "Research"]
    orgs = [f"{_pseudo_word(rng).title()} {rng.choice(kinds)}" for _ in range(400)]
    tags = [f"{_pseudo_word(rng)}-{_pseudo_word(rng)}" for _ in range(1500)]
    out = []
    for k in range(n):
        src = base[k % len(base)]
        title_words = src.title.split()
        rng.shuffle(title_words)
        body_extra = " ".join(
            rng.choice(fillers) if rng.random() < 0.5 else rng.choice(words) for _ in range(60)
        )
        year = rng.randint(2015, 2026)
        data = src.model_dump(mode="json", exclude={"related", "aliases"})
        data.update(
            id=f"IL-{k:04d}",
            slug=f"gen-{k}-{src.slug}"[:80],
            title=" ".join(title_words),
            organization=rng.choice(orgs),
            date=f"{year}-{rng.randint(1, 12):02d}",
            summary=f"{src.summary} {body_extra}",
            tags=sorted(set(src.tags[:4]) | set(rng.sample(tags, 3))),
        )
        out.append(data)
    return out


def write_library(cases: list[dict[str, Any]], root: Path) -> Path:
    cases_dir = root / "cases"
    cases_dir.mkdir(parents=True)
    for data in cases:
        (cases_dir / f"{data['id']}.yaml").write_text(
            yaml.dump(data, Dumper=_Dumper, allow_unicode=True, sort_keys=False), encoding="utf-8"
        )
    topics = (PACKAGE_DIR / "topics.yaml").read_text(encoding="utf-8")
    (root / "topics.yaml").write_text(topics, encoding="utf-8")
    return cases_dir


def _queries(rng: random.Random, lib: Library) -> list[str]:
    fixed = [q["query"] for q in yaml.safe_load((PACKAGE_DIR / "queries.yaml").read_text(encoding="utf-8"))]
    titles = [c.title.split() for c in lib.cases.values()]
    generated = []
    for _ in range(52):
        words = rng.choice(titles)
        picked = rng.sample(words, min(len(words), rng.randint(2, 5)))
        # one typo in a longer word, as users make them
        i = rng.randrange(len(picked))
        if len(picked[i]) > 5:
            j = rng.randrange(1, len(picked[i]) - 1)
            picked[i] = picked[i][:j] + picked[i][j + 1:]
        generated.append(" ".join(picked))
    return fixed + generated


def _percentiles(samples_ms: list[float]) -> tuple[float, float, float]:
    s = sorted(samples_ms)
    p95 = s[min(len(s) - 1, round(0.95 * (len(s) - 1)))]
    return statistics.median(s), p95, s[-1]


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000.0


def bench_library(name: str, lib: Library, load_s: float, repeat: int, rng: random.Random) -> dict[str, Any]:
    t0 = time.perf_counter()
    _ = lib.index
    index_s = time.perf_counter() - t0
    queries = _queries(rng, lib)
    def search(q: str, **filters: Any) -> Callable[[], object]:
        return lambda: search_incidents(q, library=lib, **filters)

    def similar(case_id: str) -> Callable[[], object]:
        return lambda: similar_incidents(case_id, library=lib)

    cold = [_timed(search(q)) for q in queries]
    warm = [_timed(search(q)) for _ in range(repeat) for q in queries]
    filtered = [_timed(search(q, year_from=2020, topic="stragglers")) for q in queries]
    sim_case = [_timed(similar(i)) for i in rng.sample(list(lib.cases), 30)]
    shape = Pattern(spatial="single-worker", temporal="persistent", resource="compute")
    probe = [CauseSignature(cause="faulty-machine", pattern=shape)]
    sim_diag = [_timed(lambda: similar_incidents(signatures=probe, library=lib)) for _ in range(30)]
    return {
        "name": name, "cases": len(lib), "load_s": load_s, "index_s": index_s, "queries": len(queries),
        "cold": _percentiles(cold), "warm": _percentiles(warm), "filtered": _percentiles(filtered),
        "similar_case": _percentiles(sim_case), "similar_diagnosis": _percentiles(sim_diag),
    }


def _row(r: dict[str, Any], key: str, label: str) -> str:
    p50, p95, mx = r[key]
    return f"| {r['name']} ({r['cases']:,} cases) | {label} | {p50:.1f} | {p95:.1f} | {mx:.1f} |"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--cases", type=int, default=10000, help="size of the generated library (max 10000)")
    ap.add_argument("--repeat", type=int, default=3, help="warm passes over the query list")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table for PERFORMANCE.md")
    args = ap.parse_args(argv)
    if not 1 <= args.cases <= 10000:
        ap.error("--cases must be between 1 and 10000 (ids are IL-0000 .. IL-9999)")
    rng = random.Random(11)

    t0 = time.perf_counter()
    real = load_library()
    real_load = time.perf_counter() - t0
    results = [bench_library("real library", real, real_load, args.repeat, rng)]

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        cases_dir = write_library(generate_cases(real, args.cases), Path(tmp))
        gen_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        big = Library.from_directory(cases_dir)
        big_load = time.perf_counter() - t0
        results.append(bench_library("generated", big, big_load, args.repeat, rng))
    print(f"generated and wrote {args.cases:,} case files in {gen_s:.1f} s")

    ok = True
    print("| library | operation | p50 ms | p95 ms | max ms |")
    print("|---|---|---:|---:|---:|")
    for r in results:
        for key, label in (("cold", f"search, first pass ({r['queries']} queries)"),
                           ("warm", f"search, warm ({args.repeat} passes)"),
                           ("filtered", "search + topic & year filters"),
                           ("similar_case", "similar from a case id"),
                           ("similar_diagnosis", "similar from a diagnosis signature")):
            print(_row(r, key, label))
        ok &= r["cold"][1] < TARGET_P95_MS and r["warm"][1] < TARGET_P95_MS
    print()
    for r in results:
        print(f"{r['name']}: load + validate {r['load_s']:.2f} s, index build {r['index_s']:.2f} s")
    print(f"\nsearch p95 target < {TARGET_P95_MS:.0f} ms: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
