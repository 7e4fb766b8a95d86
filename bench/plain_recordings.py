"""Kernel-level model accuracy on the real plain DDP / FSDP2 recordings (``examples/ddp_train.py``).

``tests/data/kineto_plain`` is the tuning part, ``tests/data/kineto_plain_heldout`` (``--heldout``)
the held-out part, stored before tuning and run once; ``kineto_plain_heldout2`` (``--part
heldout2``) a second held-out set, stored before the transport-noise work and run once at its
end; ``kineto_plain_heldout3`` (``--part heldout3``) a third, with 3- and 4-rank jobs, stored before
the compute-noise work and run once at its end (seen data since: a later figure on it is a second
look); ``kineto_plain_heldout4`` (``--part heldout4``) a fourth, with 2-, 3- and 4-rank jobs, stored
after that second look and before any diagnosis of it, run once with the rules unchanged (seen
data since); ``kineto_plain_heldout5`` (``--part heldout5``) a fifth, with 2-, 3- and 4-rank jobs,
weak slow ranks and four healthy jobs, stored before the enqueue round's rule changes and any
diagnosis of it, run once at that round's end (seen data since); ``kineto_plain_heldout6``
(``--part heldout6``) a sixth, weighted toward slow ranks (seven of eleven), stored before the
freeze round's rule changes and any diagnosis of it, run once at that round's end;
``kineto_plain_heldout7`` (``--part heldout7``) a seventh, a balanced sample (healthy, slow ranks,
GC, stalls; new seeds), stored before the fast-step round's rule changes and any diagnosis of it
(seen data since its one run); ``kineto_plain_heldout8`` (``--part heldout8``) an eighth, balanced
as the seventh, stored before the starved-process round's rule changes and any diagnosis of it;
``kineto_plain_heldout9`` (``--part heldout9``) a ninth, balanced as the seventh, stored before
the position round's rule changes and any diagnosis of it, run once at that round's end;
``kineto_plain_heldout10`` (``--part heldout10``) a tenth, balanced as the seventh, stored before
the far-forward round's rule changes and any diagnosis of it, run once at that round's end;
``kineto_plain_heldout11`` (``--part heldout11``) an eleventh, balanced as the seventh, stored
before any diagnosis of it at the start of the put-back round, run once at its end;
``kineto_plain_heldout12`` (``--part heldout12``) a twelfth, balanced as the seventh, stored before
any diagnosis of it at the start of the round that follows, run once at its end;
``kineto_plain_tune2`` (``--part tune2``) five tuning recordings of 3 and 4 ranks,
``kineto_plain_tune3`` (``--part tune3``) six of the position round (healthy 2-rank DDP, weak
FSDP2 slow ranks). Per
recording: the truth from its ``injections.json``, the top cause and its ranks, the slowdown and
the simulation error; then the share found (cause and rank).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from diagnosers.diagnose import diagnose
from diagnosers.readers import load_trace
from diagnosers.whatif import analyze

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
PARTS = {"tuning": "kineto_plain", "heldout": "kineto_plain_heldout", "heldout2": "kineto_plain_heldout2",
         "heldout3": "kineto_plain_heldout3", "heldout4": "kineto_plain_heldout4",
         "heldout5": "kineto_plain_heldout5", "heldout6": "kineto_plain_heldout6",
         "heldout7": "kineto_plain_heldout7", "heldout8": "kineto_plain_heldout8",
         "heldout9": "kineto_plain_heldout9", "heldout10": "kineto_plain_heldout10",
         "heldout11": "kineto_plain_heldout11", "heldout12": "kineto_plain_heldout12",
         "tune2": "kineto_plain_tune2", "tune3": "kineto_plain_tune3"}
# parts stored but not yet run once: ``--part all`` leaves them out (they are diagnosed only by
# their one run, ``--part <name>``)
NOT_YET_RUN: set[str] = set()


def truth(inj: dict[str, object]) -> tuple[str, list[int]]:
    """(cause id, ranks) the injection should be diagnosed as."""
    for key, cause in (("slow_rank", "faulty-machine"), ("gc_rank", "gc-pause"),
                       ("stall_rank", "dataloader-stall")):
        r = inj.get(key, -1)
        if isinstance(r, int) and r >= 0:
            return cause, [r]
    return "none", []


def run(root: Path) -> tuple[int, int]:
    """Diagnose every recording of one part and print one line per recording; (right, total)."""
    hits = total = 0
    for folder in sorted(p for p in root.iterdir() if (p / "injections.json").exists()):
        want = truth(json.loads((folder / "injections.json").read_text()))
        trace = load_trace([folder / "traces"])
        report = analyze(trace)
        dg = diagnose(trace, report)
        top = dg.causes[0] if dg.causes else None
        got = (top.id.value, list(top.location.ranks)) if top else ("none", [])
        ok = got == want
        hits += ok
        total += 1
        print(f"{folder.name:22s} truth {want[0]:16s} {want[1]!s:5s} got {got[0]:18s} {got[1]!s:7s} "
              f"{'ok  ' if ok else 'MISS'} S {report.slowdown:.3f} sim.err {report.simulation_error:+.1%}"
              + (f" conf {top.confidence:.2f}" if top else ""))
    print(f"cause+rank found: {hits}/{total}")
    return hits, total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--heldout", action="store_true", help="run the first held-out recordings instead")
    ap.add_argument("--part", choices=[*sorted(PARTS), "all"],
                    help="run this part (heldout2 ... heldout12: the second to twelfth held-out sets; "
                         "all: every part already run once, one after the other, with the total)")
    args = ap.parse_args()
    part = args.part or ("heldout" if args.heldout else "tuning")
    if part != "all":
        run(DATA / PARTS[part])
        return
    hits = total = 0
    for name in (n for n in PARTS if n not in NOT_YET_RUN):
        print(f"== {name} ({PARTS[name]})")
        h, n = run(DATA / PARTS[name])
        hits, total = hits + h, total + n
    print(f"all parts: cause+rank found: {hits}/{total}")


if __name__ == "__main__":
    main()
