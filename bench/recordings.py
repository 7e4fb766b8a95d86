"""Score the diagnosis on real recordings of the example job (``tests/data/kineto_widened``).

Each recording folder holds ``injections.json`` (what ``examples/pp_dp_train.py`` injected) and
``traces/`` (one Kineto file per rank). :func:`expected` turns the injections into the cause the
diagnosis must put first and where:

- ``--slow-rank R``: faulty-machine at rank R (``temporal: onset`` when ``--slow-from-step`` is
  inside the profiled steps);
- an uneven ``layers_per_stage``: stage-imbalance at the stage with the most blocks;
- ``--send-delay-rank R``: slow-communication at R and/or the rank it sends to (its P2P link);
- ``--var-seq``: sequence-length-imbalance;
- ``--gc-pause``: gc-pause, on workers that include a victim;
- ``--stall-rank R``: dataloader-stall at R;
- nothing: no cause (and never faulty-machine or GC).

A recording is *right* when the top cause is the expected one at the expected ranks (with two
injections, either one). A healthy one is right with no cause, or only a stage imbalance on the
last stage: the example's last stage really carries extra work (a head ``Linear`` and the loss).
A *silent miss* is a recording with an injected worker that gets no cause although S_w's hottest
worker is that worker.

Two figures (``right`` and ``right_standing``): ``right`` wants the injected cause first.
``right_standing`` also counts a recording right whose top cause is the stage imbalance on the
last stage — the example job's standing load, present in its healthy recordings (the head and the
loss; rebalancing it gains 1.07-1.12x on the healthy 2x2, 3x2, 2x3 and 2x4 recordings) — when the
injected cause is reported too, at its place, anywhere among the causes. Such a recording holds
two real causes, the standing one and the injected one, and causes are ranked by what fixing each
alone gains; it is then scored like a two-cause job (either one first, the injected one found).
A partition injection is exempt (its expected cause is itself a stage imbalance).

    .venv/bin/python bench/recordings.py [--part tune|heldout|tuning|heldout2|heldout3|seen|heldout4|
                                                heldout5|heldout6|heldout7|heldout8|heldout9|heldout10|
                                                heldout11|heldout12|heldout13|heldout14|heldout15|
                                                heldout16|heldout17|heldout18|heldout19|
                                                heldout20|all]
                                         [--verbose]

Parts: ``tune`` and ``heldout`` (the first two folders), ``tuning`` (both: the first held-out
part was looked at and then joined the tuning data), ``heldout2`` (the second held-out part,
recorded and committed before the detector changes that followed, diagnosed once at the end),
``heldout3`` (recorded after those changes were final, diagnosed once), ``seen`` (those four:
every part looked at so far), ``heldout4`` (recorded and committed before the third round of
detector changes, diagnosed once at its end), ``heldout5`` (recorded and committed before the
fourth round, diagnosed once at its end), ``heldout6`` (recorded and committed before the fifth
round, diagnosed once at its end), ``heldout7`` (a balanced sample of the classes, recorded and
committed before the sixth round, diagnosed once at its end), ``heldout8`` (balanced too, recorded and
committed before the seventh round's rule changes were committed, diagnosed once at its end),
``heldout9`` (balanced, seeds 301-313, recorded and committed before the eighth round's rule changes
were committed, diagnosed once at its end), ``heldout10`` (balanced, seeds 601-613, recorded and committed
before the ninth round's rule changes were committed, diagnosed once at its end), ``heldout11``
(balanced, seeds 801-813, recorded and committed before the tenth round's rule changes were
committed, diagnosed once at its end), ``heldout12`` (balanced, seeds 1101-1113, recorded while
the eleventh round's rules were made on the seen parts, none of it read before its one run at
the round's end), ``heldout13`` (balanced, 20 recordings, seeds 1201-1220, recorded on a quiet
machine and committed before the twelfth round's rules were made, diagnosed once at its end),
``heldout14`` (balanced, 20 recordings, seeds 1301-1320, recorded on a quiet machine and committed
before the thirteenth round's rules were made, diagnosed once at its end), ``heldout15`` (balanced,
20 recordings, seeds 1401-1420, recorded with one extra process spinning on a core and committed
before the fourteenth round's rules were made, diagnosed once at its end), ``heldout16`` (balanced,
20 recordings, seeds 1501-1520, recorded beside other builds' work while the fifteenth round's first
rule was made and committed unread, diagnosed once at that round's end), ``heldout17`` (balanced,
20 recordings, seeds 1601-1620, recorded beside another build's benchmarks and committed unread
before the eighteenth round's rules were made, diagnosed once at its end), ``heldout18`` (balanced,
20 recordings, seeds 1701-1720, recorded beside the test suite's run and committed unread before
the nineteenth round, diagnosed once at its end), ``heldout19`` (balanced, 20 recordings, seeds
1801-1820, recorded beside the nineteenth round's checks and committed unread before the twentieth
round's rules, diagnosed once at its end), ``heldout20`` (balanced, 20 recordings, seeds
1901-1920, recorded beside the twentieth round's test suite and committed unread before the
twenty-first round's rules, to be diagnosed once at its end), ``all`` (every part but the newest
held-out one).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from diagnosers.diagnose import Diagnosis, diagnose
from diagnosers.heatmap import worker_matrix
from diagnosers.readers import ReadOptions, load_trace
from diagnosers.vocab import CauseId, Temporal

ROOT = Path(__file__).resolve().parents[1] / "tests" / "data" / "kineto_widened"


@dataclass
class Expected:
    cause: CauseId | None  # None: healthy
    ranks: set[int] = field(default_factory=set)  # acceptable location ranks (any overlap rules below)
    exact: list[set[int]] = field(default_factory=list)  # acceptable exact rank sets
    onset: bool = False
    stage: int | None = None
    injected_ranks: set[int] = field(default_factory=set)  # for the silent-miss check


def expected(inj: dict[str, Any]) -> list[Expected]:
    """The causes the diagnosis may put first for one recording's injections (rules in the
    docstring): one per injection (two injections: either counts)."""
    found = []
    for key in ("slow_rank", "send_delay_rank", "var_seq", "layers_per_stage", "gc_victims", "stall_rank"):
        one = {
            k: v
            for k, v in inj.items()
            if k not in _INJECTION_KEYS or k == key or k in _ARG_KEYS.get(key, ())
        }
        e = _expected_one(one)
        if e.cause is not None:
            found.append(e)
    return found or [Expected(None)]


_INJECTION_KEYS = {"slow_rank", "send_delay_rank", "var_seq", "layers_per_stage", "gc_victims", "stall_rank"}
_ARG_KEYS = {"slow_rank": ("slow_from_step",)}


def _expected_one(inj: dict[str, Any]) -> Expected:
    dp = int(inj["dp"])
    lps = inj.get("layers_per_stage") or []
    if inj.get("slow_rank") is not None:
        r = int(inj["slow_rank"])
        first_profiled = min(inj.get("profiled_steps") or [2])
        onset = int(inj.get("slow_from_step") or 0) > first_profiled
        return Expected(CauseId.FAULTY_MACHINE, exact=[{r}], onset=onset, injected_ranks={r})
    if inj.get("send_delay_rank") is not None:
        r = int(inj["send_delay_rank"])
        return Expected(CauseId.SLOW_COMMUNICATION, exact=[{r}, {r, r + dp}], injected_ranks={r})
    if inj.get("var_seq"):
        return Expected(CauseId.SEQUENCE_LENGTH_IMBALANCE)
    if lps and len(set(lps)) > 1:
        st = int(np.argmax(lps))
        return Expected(CauseId.STAGE_IMBALANCE, stage=st, exact=[{st * dp + d for d in range(dp)}])
    if inj.get("gc_victims"):
        victims = {int(v["rank"]) for v in inj["gc_victims"].values()}
        return Expected(CauseId.GC_PAUSE, ranks=victims, injected_ranks=victims)
    if inj.get("stall_rank") is not None:
        r = int(inj["stall_rank"])
        return Expected(CauseId.DATALOADER_STALL, exact=[{r}], injected_ranks={r})
    return Expected(None)


@dataclass
class Scored:
    name: str
    right: bool  # the injected cause first (a healthy one: no cause but a last-stage imbalance)
    healthy: bool
    false_machine_or_gc: bool
    silent_miss: bool
    got: list[tuple[str, float, list[int], str | None]]
    slowdown: float
    # right, or the job's standing last-stage load first and the injected cause found (docstring)
    right_standing: bool = False
    cls: str = ""  # the injected class: healthy, onset, or the expected cause id (two: joined by +)


def diagnose_folder(folder: Path) -> Diagnosis:
    """Diagnose one recording, passing its partition as the job's ``layers_per_stage``."""
    inj = json.loads((folder / "injections.json").read_text())
    lps = inj.get("layers_per_stage")
    opts = ReadOptions(layers_per_stage=list(lps)) if lps else None
    return diagnose(load_trace([folder / "traces"], opts))


def score_folder(folder: Path, diag: Diagnosis | None = None) -> Scored:
    inj = json.loads((folder / "injections.json").read_text())
    exps = expected(inj)
    diag = diag or diagnose_folder(folder)
    top = diag.causes[0] if diag.causes else None
    machine_or_gc = [c for c in diag.causes if c.id in (CauseId.FAULTY_MACHINE, CauseId.GC_PAUSE)]
    healthy = exps[0].cause is None
    if healthy:
        # The example's last stage carries the head Linear and the loss: a stage imbalance there is
        # real (small) extra work, not a false alarm; anything else is.
        right = all(_is_standing_load(c, inj) for c in diag.causes)
        false_mg = bool(machine_or_gc)
    else:
        right = top is not None and any(_matches(top, e) for e in exps)
        false_mg = any(c.id not in {e.cause for e in exps} for c in machine_or_gc)
    standing = right or (
        not healthy
        and top is not None
        and _is_standing_load(top, inj)
        and not any(e.cause == CauseId.STAGE_IMBALANCE for e in exps)
        and any(_matches(c, e) for c in diag.causes[1:] for e in exps)
    )
    silent = False
    injected = {r for e in exps for r in e.injected_ranks}
    if injected and not diag.causes:
        m = worker_matrix(diag.report, "exact")  # (pp, dp)
        p, d = np.unravel_index(int(np.argmax(m)), m.shape)
        silent = int(p) * int(inj["dp"]) + int(d) in injected
    return Scored(
        name=folder.name,
        right=bool(right),
        healthy=healthy,
        false_machine_or_gc=false_mg,
        silent_miss=silent,
        got=[(c.id.value, c.confidence, c.location.ranks[:8], c.pattern.temporal) for c in diag.causes],
        slowdown=diag.slowdown,
        right_standing=bool(standing),
        cls=_class_of(exps),
    )


def _class_of(exps: list[Expected]) -> str:
    """The recording's class for the per-class figures."""
    names = ["healthy" if e.cause is None else ("onset" if e.onset else e.cause.value) for e in exps]
    return "+".join(names)


def _last_stage_ranks(inj: dict[str, Any]) -> set[int]:
    """The ranks of the example job's last stage (``rank = stage * dp + dp_rank``)."""
    dp = int(inj["dp"])
    return {(int(inj["pp"]) - 1) * dp + d for d in range(dp)}


def _is_standing_load(cause: Any, inj: dict[str, Any]) -> bool:
    """Whether ``cause`` is the example's standing extra work: a stage imbalance on the whole last
    stage (its head Linear and the loss)."""
    return cause.id == CauseId.STAGE_IMBALANCE and set(cause.location.ranks) == _last_stage_ranks(inj)


def _matches(top: Any, exp: Expected) -> bool:
    if top.id != exp.cause:
        return False
    got = set(top.location.ranks)
    if exp.exact and got not in exp.exact:
        return False
    if exp.ranks and not got & exp.ranks:
        return False
    return not exp.onset or top.pattern.temporal == Temporal.ONSET


PARTS = {
    "tuning": ["tune", "heldout"],
    "seen": ["tune", "heldout", "heldout2", "heldout3"],
    "all": ["tune", "heldout", "heldout2", "heldout3", "heldout4", "heldout5", "heldout6", "heldout7",
            "heldout8", "heldout9", "heldout10", "heldout11", "heldout12", "heldout13", "heldout14",
            "heldout15", "heldout16", "heldout17", "heldout18", "heldout19"],
}


def folders(part: str) -> list[Path]:
    parts = PARTS.get(part, [part])
    out = []
    for p in parts:
        for f in sorted((ROOT / p).iterdir()) if (ROOT / p).is_dir() else []:
            if not (f / "injections.json").is_file():
                continue
            inj = json.loads((f / "injections.json").read_text())
            if len(list((f / "traces").glob("*.json.gz"))) == int(inj["dp"]) * int(inj["pp"]):
                out.append(f)  # a complete recording (one file per rank)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parts = ["tune", "heldout", "tuning", "heldout2", "heldout3", "seen", "heldout4", "heldout5", "heldout6",
             "heldout7", "heldout8", "heldout9", "heldout10", "heldout11", "heldout12", "heldout13",
             "heldout14", "heldout15", "heldout16", "heldout17", "heldout18", "heldout19", "heldout20", "all"]
    ap.add_argument("--part", choices=parts, default="tune")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    res = [score_folder(f) for f in folders(args.part)]
    for r in res:
        if args.verbose or not r.right:
            mark = "ok " if r.right else ("ok2" if r.right_standing else "BAD")
            print(f"  {mark} {r.name:24s} S={r.slowdown:.3f} got={r.got}")
    healthy = [r for r in res if r.healthy]
    n = max(len(res), 1)
    right, standing = sum(r.right for r in res), sum(r.right_standing for r in res)
    print(
        f"recordings ({args.part}): {len(res)}, right {right} ({right / n:.3f}), right with the standing "
        f"last-stage load first {standing} ({standing / n:.3f}); healthy {len(healthy)}, "
        f"false faulty-machine/GC on healthy {sum(r.false_machine_or_gc for r in healthy)}; "
        f"silent misses {sum(r.silent_miss for r in res)}"
    )
    by_class: dict[str, list[Scored]] = {}
    for r in res:
        by_class.setdefault(r.cls, []).append(r)
    print("per class (right / right with the standing load / recordings): " + ", ".join(
        f"{c} {sum(r.right for r in rs)}/{sum(r.right_standing for r in rs)}/{len(rs)}"
        for c, rs in sorted(by_class.items())
    ))
    return 0


if __name__ == "__main__":
    sys.exit(main())
